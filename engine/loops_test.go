package engine_test

import (
	"runtime"
	"testing"

	"github.com/sproutmq/sprout/engine"
)

// One loop per CPU the process may use, less one for the runtime, the
// timers and the log writer, and never none.
func TestDefaultLoops(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct{ procs, loops int }{{1, 1}, {2, 1}, {3, 2}, {8, 7}} {
		runtime.GOMAXPROCS(c.procs)
		if got := engine.DefaultLoops(); got != c.loops {
			t.Errorf("GOMAXPROCS %d: DefaultLoops() = %d, want %d", c.procs, got, c.loops)
		}
	}
}

// A server left to the default (any Loops ≤ 0; the test helper turns 0
// into 2) runs DefaultLoops loops.
func TestDefaultLoopCount(t *testing.T) {
	srv, _, _ := startServer(t, engine.Config{Loops: -1})
	if got, want := srv.EventLoopCount(), engine.DefaultLoops(); got != want {
		t.Fatalf("server runs %d loops, want %d", got, want)
	}
}
