package clusterfault

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// failing is the test's *testing.T, keeping its failures' messages so the
// test can say them again as its last lines (repeat): on a failure the
// members' logs follow them, tens of kilobytes, and a CI report that keeps
// only the end of the output would show the logs and not why it failed.
type failing struct {
	*testing.T
	mu   sync.Mutex
	msgs []string
}

// keptLen bounds each kept message: its first lines say what failed.
const keptLen = 2 << 10

func (f *failing) keep(msg string) {
	if len(msg) > keptLen {
		msg = msg[:keptLen] + " …"
	}
	f.mu.Lock()
	f.msgs = append(f.msgs, msg)
	f.mu.Unlock()
}

func (f *failing) Errorf(format string, args ...any) {
	f.Helper()
	f.keep(fmt.Sprintf(format, args...))
	f.T.Errorf(format, args...)
}

func (f *failing) Error(args ...any) {
	f.Helper()
	f.keep(fmt.Sprint(args...))
	f.T.Error(args...)
}

func (f *failing) Fatalf(format string, args ...any) {
	f.Helper()
	f.keep(fmt.Sprintf(format, args...))
	f.T.Fatalf(format, args...)
}

func (f *failing) Fatal(args ...any) {
	f.Helper()
	f.keep(fmt.Sprint(args...))
	f.T.Fatal(args...)
}

// repeatAtEnd has the test say its failures again once everything else
// it prints is out: cleanups run last registered first, so it goes
// before the cluster registers its own.
func (f *failing) repeatAtEnd() {
	f.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.Failed() && len(f.msgs) > 0 {
			f.T.Logf("why it failed (said above too, before the members' logs):\n\t%s", strings.Join(f.msgs, "\n\t"))
		}
	})
}
