package store

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// checkHeap fails t unless h's chunks keep their shape and its jobs their
// order and slots.
func checkHeap(t *testing.T, h *jobHeap, want int) {
	t.Helper()
	if n := h.Len(); n != want {
		t.Fatalf("Len %d, want %d", n, want)
	}
	for k, c := range h.chunks {
		switch {
		case k < len(h.chunks)-1 && (len(c) != heapChunk || cap(c) != heapChunk):
			t.Fatalf("chunk %d of %d: len %d cap %d, want full", k, len(h.chunks), len(c), cap(c))
		case k > 0 && (len(c) == 0 || cap(c) != heapChunk):
			t.Fatalf("last chunk %d: len %d cap %d", k, len(c), cap(c))
		}
	}
	spares := 0
	for _, c := range h.chunks[len(h.chunks):cap(h.chunks)] {
		if c != nil {
			spares++
		}
	}
	if spares > 1 {
		t.Fatalf("%d spare chunks kept", spares)
	}
	for i, j := range h.all() {
		if int(j.slot) != i {
			t.Fatalf("job %d at %d has slot %d", j.id, i, j.slot)
		}
		if p := (i - 1) / 2; i > 0 && h.less(j, h.at(p)) {
			t.Fatalf("job %d at %d sorts before its parent", j.id, i)
		}
	}
}

// TestHeapChunks drives a heap up and down across chunk edges, removing
// jobs from anywhere and popping in order, against a sorted list.
func TestHeapChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	h := jobHeap{less: jobLess}
	var live []*Job
	id := uint64(0)
	pop := func() {
		m := h.min()
		if k := slices.IndexFunc(live, func(j *Job) bool { return j == m }); k != 0 {
			t.Fatalf("min is job %d, want job %d", m.id, live[0].id)
		}
		h.remove(m)
		live = live[1:]
	}
	for _, target := range []int{3, heapChunk, 3*heapChunk + 7, heapChunk + 1, 2 * heapChunk, 0, 5*heapChunk - 1, 0} {
		for len(live) != target {
			switch {
			case len(live) < target:
				id++
				j := &Job{id: id, pri: uint32(rng.IntN(50)), slot: -1}
				h.push(j)
				live = append(live, j)
				slices.SortFunc(live, func(a, b *Job) int {
					if jobLess(a, b) {
						return -1
					}
					return 1
				})
			case rng.IntN(2) == 0:
				pop()
			default:
				k := rng.IntN(len(live))
				h.remove(live[k])
				if live[k].slot != -1 {
					t.Fatal("a removed job keeps its slot")
				}
				live = slices.Delete(live, k, k+1)
			}
			if rng.IntN(50) == 0 {
				checkHeap(t, &h, len(live))
			}
		}
		checkHeap(t, &h, len(live))
	}
	if len(h.chunks) != 1 || cap(h.chunks[0]) > 64 {
		t.Errorf("empty heap keeps %d chunks, the first of capacity %d", len(h.chunks), cap(h.chunks[0]))
	}
}

// TestHeapEdgeAllocs: going back and forth over a chunk's edge reuses the
// spare chunk.
func TestHeapEdgeAllocs(t *testing.T) {
	h := jobHeap{less: jobLess}
	for i := range heapChunk * 2 {
		h.push(&Job{id: uint64(i)})
	}
	a, b := &Job{id: 1 << 40}, &Job{id: 1<<40 + 1}
	allocs := testing.AllocsPerRun(100, func() {
		h.push(a)
		h.push(b)
		h.remove(b)
		h.remove(a)
		h.remove(h.min())
		h.push(&Job{id: 1 << 50}) // the one allocation
	})
	if allocs != 1 {
		t.Errorf("%v allocations a round, want 1 (the job)", allocs)
	}
}
