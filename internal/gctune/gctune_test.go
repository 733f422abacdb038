package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		roots, headroom uint64
		want            int
	}{
		{8 * mib, 32 * mib, 400},   // goal 40 MiB: 32 above the live heap
		{4 * mib, 32 * mib, 800},   // goal 36 MiB
		{1 * mib, 32 * mib, 800},   // the runtime's 4 MiB minimum, times 8: 32 MiB
		{0, 32 * mib, 800},         // the same
		{32 * mib, 32 * mib, 100},  // the default from here on
		{300 * mib, 32 * mib, 100}, // many stored jobs: twice the live heap, as before
		{6 * mib, 32 * mib, 533},   // rounded down
		{1, 1 << 62, maxPercent},   // no overflow
	} {
		if got := Percent(c.roots, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.roots, c.headroom, got, c.want)
		}
	}
}

// After a collection the tuner has set GOGC so that the heap goal is the
// headroom above the live heap (not above the roots times GOGC, which
// once put it at gigabytes), and stop puts the default back.
func TestTunesAfterCollections(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const headroom = 256 << 20
	// Goroutine stacks count among the roots: a few MiB of them.
	stopStacks := make(chan struct{})
	defer close(stopStacks)
	for range 200 {
		go func() { var pad [16 << 10]byte; _ = pad; <-stopStacks }()
	}
	stop := Start(headroom)
	samples := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the finalizer goroutine runs the tuner
		metrics.Read(samples)
		goal, live := samples[0].Value.Uint64(), samples[1].Value.Uint64()
		above := float64(goal-live) / headroom
		if above > 0.8 && above < 1.2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heap goal %d MiB, live heap %d MiB: %.2f× the headroom above it, want about 1×",
				goal>>20, live>>20, above)
		}
	}
	stop()
	if cur := debug.SetGCPercent(100); cur != 100 {
		t.Fatalf("GOGC %d after stop, want 100", cur)
	}
}
