package testproc

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer is a log destination that several goroutines write to (the
// members, the engines and the nodes a test runs in its own process),
// read back whole when the test fails.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns the lines written at level ("warn", "error", ...), as
// zerolog's JSON writes them.
func (s *SyncBuffer) Lines(level string) []string {
	var out []string
	for _, l := range strings.Split(s.String(), "\n") {
		if strings.Contains(l, `"level":"`+level+`"`) {
			out = append(out, l)
		}
	}
	return out
}
