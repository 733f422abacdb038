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
