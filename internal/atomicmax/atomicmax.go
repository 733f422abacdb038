package atomicmax

import "sync/atomic"

// Uint64 sets v to x unless v holds x or more already.
func Uint64(v *atomic.Uint64, x uint64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// Int64 sets v to x unless v holds x or more already.
func Int64(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}
