package engine_test

import (
	"runtime"
	"testing"

	"github.com/sproutmq/sprout/engine"
)

// One loop per CPU the process may use, less one for the runtime, the
// timers and the log writer, and never none.
func TestDefaultLoops(t *testing.T) {
	for _, c := range []struct{ procs, loops int }{{1, 1}, {2, 1}, {3, 2}, {8, 7}} {
		if got := engine.DefaultLoops(c.procs); got != c.loops {
			t.Errorf("DefaultLoops(%d) = %d, want %d", c.procs, got, c.loops)
		}
	}
}

// A server left to the default (any Loops ≤ 0; the test helper turns 0
// into 2) runs DefaultLoops loops.
func TestDefaultLoopCount(t *testing.T) {
	srv, _, _ := startServer(t, engine.Config{Loops: -1})
	if got, want := srv.EventLoopCount(), engine.DefaultLoops(runtime.GOMAXPROCS(0)); got != want {
		t.Fatalf("server runs %d loops, want %d", got, want)
	}
}
