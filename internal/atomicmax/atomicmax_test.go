package atomicmax

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestRaiseConcurrently: goroutines raising one value each to their own
// marks leave it at the highest, whatever the order they ran in, and a
// lower mark never lowers it.
func TestRaiseConcurrently(t *testing.T) {
	var u atomic.Uint64
	var i atomic.Int64
	i.Store(-100)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range 1000 {
				Uint64(&u, uint64(x*8+g))
				Int64(&i, int64(x*8+g)-5000)
			}
		}()
	}
	wg.Wait()
	if got := u.Load(); got != 7999 {
		t.Errorf("Uint64: %d, want 7999", got)
	}
	if got := i.Load(); got != 2999 {
		t.Errorf("Int64: %d, want 2999", got)
	}
	Uint64(&u, 3)
	Int64(&i, -7)
	if u.Load() != 7999 || i.Load() != 2999 {
		t.Errorf("lowered by a lower mark: %d, %d", u.Load(), i.Load())
	}
}
