package testproc

import (
	"testing"
	"time"
)

// WaitFor polls cond, for states nothing announces (a member's leader, a
// store's count, a pod's readiness), until it holds, and fails t if it
// does not within timeout. It polls every millisecond at first and backs
// off to every 20 ms, so in-process states are seen at once and process
// states cost few requests.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// WaitForWhy is WaitFor with a cond that also says why it does not hold
// yet: the last reason goes into the failure.
func WaitForWhy(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var why string
	WaitFor(&withWhy{TB: t, why: &why}, timeout, what, func() (ok bool) {
		ok, why = cond()
		return ok
	})
}

// withWhy adds the last reason to a failure.
type withWhy struct {
	testing.TB
	why *string
}

func (w *withWhy) Fatalf(format string, args ...any) {
	w.TB.Helper()
	w.TB.Fatalf(format+" (last: %s)", append(args, *w.why)...)
}
