package store

import "iter"

// jobHeap is a binary heap of jobs ordered by less, keeping each job's
// slot current so any job can be removed in O(log n). A job is in at most
// one heap at a time.
//
// The jobs are kept in chunks of heapChunk (4 KiB of pointers) rather than
// one slice: a slice that grows by copying leaves its old arrays to the
// collector, on average some four times the final array over its growth,
// and a heap of a million jobs grows in steps of megabytes. Chunks are
// never copied; a heap wastes at most one chunk, plus one spare kept so
// that a heap going back and forth over a chunk's edge does not allocate
// each time. The first chunk grows like a slice up to heapChunk, so a
// small heap costs what a slice would.
type jobHeap struct {
	// chunks hold the jobs in heap order: the jobs at 0..heapChunk-1 in
	// chunks[0], and so on. All but the last are full; only chunks[0] may
	// be empty. A spare chunk may sit past the end, in chunks[:cap].
	chunks [][]*Job
	less   func(a, b *Job) bool
}

const heapChunk = 512

func (h *jobHeap) Len() int {
	k := len(h.chunks)
	if k == 0 {
		return 0
	}
	return (k-1)*heapChunk + len(h.chunks[k-1])
}

func (h *jobHeap) at(i int) *Job { return h.chunks[uint(i)/heapChunk][uint(i)%heapChunk] }

// set puts j at i and records the slot in j.
func (h *jobHeap) set(i int, j *Job) {
	h.chunks[uint(i)/heapChunk][uint(i)%heapChunk] = j
	j.slot = int32(i)
}

// all yields the jobs in heap order, with their slots.
func (h *jobHeap) all() iter.Seq2[int, *Job] {
	return func(yield func(int, *Job) bool) {
		for k, c := range h.chunks {
			for i, j := range c {
				if !yield(k*heapChunk+i, j) {
					return
				}
			}
		}
	}
}

func (h *jobHeap) min() *Job {
	if len(h.chunks) == 0 || len(h.chunks[0]) == 0 {
		return nil
	}
	return h.chunks[0][0]
}

func (h *jobHeap) push(j *Job) {
	i := h.Len()
	h.makeRoom()
	last := &h.chunks[len(h.chunks)-1]
	*last = append(*last, j)
	j.slot = int32(i)
	h.up(i)
}

// makeRoom makes sure the last chunk has room for one more job.
func (h *jobHeap) makeRoom() {
	k := len(h.chunks)
	if k == 0 {
		h.chunks = append(h.chunks, make([]*Job, 0, 1))
		return
	}
	c := h.chunks[k-1]
	switch {
	case len(c) < cap(c):
	case k == 1 && cap(c) < heapChunk:
		h.chunks[0] = append(make([]*Job, 0, min(2*cap(c), heapChunk)), c...)
	case k < cap(h.chunks) && h.chunks[:k+1][k] != nil:
		h.chunks = h.chunks[:k+1] // the spare
	default:
		h.chunks = append(h.chunks, make([]*Job, 0, heapChunk))
	}
}

func (h *jobHeap) remove(j *Job) {
	i := int(j.slot)
	last := h.Len() - 1
	if i != last {
		h.swap(i, last)
	}
	h.dropLast()
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	j.slot = -1
}

// dropLast removes the last job from the chunks, giving back memory as a
// slice shrinks: a chunk that empties becomes the spare (dropping any
// older one), and the first chunk, alone, halves when a quarter full.
func (h *jobHeap) dropLast() {
	k := len(h.chunks)
	c := h.chunks[k-1]
	c[len(c)-1] = nil
	c = c[:len(c)-1]
	h.chunks[k-1] = c
	switch {
	case len(c) == 0 && k > 1:
		if k < cap(h.chunks) {
			h.chunks[:k+1][k] = nil
		}
		h.chunks = h.chunks[:k-1]
		if cap(h.chunks) > 64 && len(h.chunks) < cap(h.chunks)/4 {
			h.chunks = append(make([][]*Job, 0, cap(h.chunks)/2), h.chunks...)
		}
	case k == 1 && cap(c) > 64 && len(c) < cap(c)/4:
		h.chunks[0] = append(make([]*Job, 0, cap(c)/2), c...)
	}
}

// fix restores order after j's key changed.
func (h *jobHeap) fix(j *Job) {
	i := int(j.slot)
	if !h.down(i) {
		h.up(i)
	}
}

func (h *jobHeap) swap(i, k int) {
	a, b := h.at(i), h.at(k)
	h.set(i, b)
	h.set(k, a)
}

func (h *jobHeap) up(i int) {
	j := h.at(i)
	for i > 0 {
		p := (i - 1) / 2
		pj := h.at(p)
		if !h.less(j, pj) {
			break
		}
		h.set(i, pj)
		i = p
	}
	h.set(i, j)
}

func (h *jobHeap) down(i int) bool {
	start := i
	n := h.Len()
	j := h.at(i)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m, mj := l, h.at(l)
		if r := l + 1; r < n {
			if rj := h.at(r); h.less(rj, mj) {
				m, mj = r, rj
			}
		}
		if !h.less(mj, j) {
			break
		}
		h.set(i, mj)
		i = m
	}
	h.set(i, j)
	return i > start
}
