package codec

import (
	"strings"
	"testing"
	"unsafe"
)

// TestMakeUnzeroed pins what makeUnzeroed relies on: after Grow(n) a
// strings.Builder writes up to its capacity, at least n, without
// reallocating, and String shares the builder's buffer rather than
// copying it. Were String to copy, the slice makeUnzeroed makes from its
// data would run past the string.
func TestMakeUnzeroed(t *testing.T) {
	for _, n := range []int{1, 100, 4 << 10, 65538, 1 << 20} {
		var b strings.Builder
		b.Grow(n)
		if b.Cap() < n {
			t.Fatalf("Grow(%d): capacity %d", n, b.Cap())
		}
		b.WriteByte('a')
		first := unsafe.StringData(b.String())
		for b.Len() < b.Cap() {
			b.WriteByte('b')
		}
		if s := b.String(); unsafe.StringData(s) != first || len(s) != b.Cap() {
			t.Fatalf("n=%d: String no longer shares the buffer Grow made", n)
		}

		got := makeUnzeroed(n)
		if len(got) != n || cap(got) != n {
			t.Fatalf("makeUnzeroed(%d): len %d cap %d", n, len(got), cap(got))
		}
		for i := range got {
			got[i] = byte(i)
		}
		if allocs := testing.AllocsPerRun(10, func() { _ = makeUnzeroed(n) }); allocs != 1 {
			t.Errorf("makeUnzeroed(%d): %v allocations, want 1", n, allocs)
		}
	}
}
