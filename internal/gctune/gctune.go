package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// defaultPercent is Go's GOGC default, used once the live heap is larger
// than the headroom.
const defaultPercent = 100

// maxPercent bounds the percentage for a nearly empty heap.
const maxPercent = 1 << 20

// Start keeps the heap goal at least headroom bytes above the live heap
// until stop is called, which restores the default. headroom 0 does
// nothing.
func Start(headroom uint64) (stop func()) {
	if headroom == 0 {
		return func() {}
	}
	t := &tuner{headroom: headroom, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
	}}
	t.tune()
	arm(t)
	return func() {
		t.stopped.Store(true)
		debug.SetGCPercent(defaultPercent)
	}
}

type tuner struct {
	headroom uint64
	stopped  atomic.Bool
	// Touched only by the finalizer goroutine (and by Start before it).
	samples []metrics.Sample
	percent int
}

// sentinel is garbage whose finalizer runs once per collection and arms
// itself again. Finalizers run one at a time on one goroutine, so tune
// never runs concurrently with itself.
type sentinel struct {
	t *tuner
	_ [16]byte // not a tiny allocation, which finalizers may miss
}

func arm(t *tuner) {
	runtime.SetFinalizer(&sentinel{t: t}, onCollected)
}

func onCollected(s *sentinel) {
	if s.t.stopped.Load() {
		return
	}
	s.t.tune()
	runtime.SetFinalizer(s, onCollected)
}

// tune sets GOGC so that the next goal is about headroom above the live
// heap, or twice the live heap if that is more. The runtime applies GOGC
// to the roots too (goal = live + (live + stacks + globals) × GOGC/100),
// so they count: with a few MiB of goroutine stacks and a tiny live heap,
// leaving them out put the goal at gigabytes.
func (t *tuner) tune() {
	metrics.Read(t.samples)
	var roots uint64
	for _, s := range t.samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return
		}
		roots += s.Value.Uint64()
	}
	p := Percent(roots, t.headroom)
	// A small change is not worth the runtime's re-pacing.
	if p != t.percent && (p == defaultPercent || math.Abs(float64(p-t.percent)) > float64(t.percent)/8) {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// heapMinimum is the runtime's smallest heap goal at GOGC=100; it scales
// with GOGC like the rest of the goal.
const heapMinimum = 4 << 20

// Percent is the GOGC that puts the heap goal headroom bytes above the
// live heap, roots being the live heap plus goroutine stacks and globals;
// never below Go's default of 100. Under 4 MiB of roots the runtime's
// minimum goal (4 MiB × GOGC/100) is what counts.
func Percent(roots, headroom uint64) int {
	roots = max(roots, heapMinimum)
	if headroom/roots >= maxPercent/100 {
		return maxPercent
	}
	p := headroom/roots*100 + headroom%roots*100/roots
	return max(int(p), defaultPercent)
}
