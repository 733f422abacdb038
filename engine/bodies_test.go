package engine

import (
	"testing"
	"unsafe"
)

// A freed body is handed out again once no loop may be reading it, and
// the warmest (most recently freed) first; a body the pool did not make
// is left alone.
func TestBodyPoolReuse(t *testing.T) {
	p := newBodyPool()
	if b := p.alloc(pooledBodyMin - 1); b != nil {
		t.Fatalf("alloc(%d) = %d bytes; small bodies are left to the runtime", pooledBodyMin-1, len(b))
	}
	if b := p.alloc(pooledPagesMax*bodyPage + 1); b != nil {
		t.Fatalf("alloc past the largest class = %d bytes", len(b))
	}
	a, b := p.alloc(65002), p.alloc(65002)
	if len(a) != 8*bodyPage || len(b) != 8*bodyPage {
		t.Fatalf("alloc(65002) = %d and %d bytes, want %d", len(a), len(b), 8*bodyPage)
	}
	p.recycle(a[:65002])
	p.recycle(b[:100]) // any slice of the buffer names it
	p.recycle(make([]byte, 65002))
	if got := p.alloc(60000); unsafe.SliceData(got) != unsafe.SliceData(b) {
		t.Error("the most recently freed buffer of the size was not handed out first")
	}
	if got := p.alloc(65002); unsafe.SliceData(got) != unsafe.SliceData(a) {
		t.Error("the first freed buffer was not handed out again")
	}
	if got := p.alloc(65002); unsafe.SliceData(got) == unsafe.SliceData(a) || unsafe.SliceData(got) == unsafe.SliceData(b) {
		t.Error("a buffer still in use was handed out twice")
	}
	if n := p.reused.Load(); n != 2 {
		t.Errorf("reused = %d, want 2", n)
	}
}

// A body freed while a loop runs a callback that began before the free
// (it may have found the job and be about to write its body) waits until
// that callback ends; a callback that began after the free does not hold
// it back.
func TestBodyPoolWaitsForReaders(t *testing.T) {
	p := newBodyPool()
	srv := &Server{bodies: p}
	early, late := &loopState{srv: srv}, &loopState{srv: srv}
	p.addReader(&early.reading)
	p.addReader(&late.reading)

	buf := p.alloc(40 << 10)
	early.beginReading()
	p.recycle(buf)
	late.beginReading()
	if got := p.alloc(40 << 10); unsafe.SliceData(got) == unsafe.SliceData(buf) {
		t.Fatal("a body was reused while a loop that may have seen it was in its callback")
	}
	early.endReading()
	if got := p.alloc(40 << 10); unsafe.SliceData(got) != unsafe.SliceData(buf) {
		t.Fatal("a body was not reused once the loops that may have seen it were done")
	}
	late.endReading()
}

// The pool keeps at most bodyPoolKeep bytes of free and freed buffers,
// dropping buffers of sizes no longer asked for to make room for new ones.
func TestBodyPoolBound(t *testing.T) {
	p := newBodyPool()
	var big [][]byte
	for range 2 * bodyPoolKeep / (pooledPagesMax * bodyPage) {
		big = append(big, p.alloc(pooledPagesMax*bodyPage))
	}
	for _, b := range big {
		p.recycle(b)
	}
	p.alloc(1) // reclaims the limbo
	if p.kept > bodyPoolKeep {
		t.Fatalf("the pool keeps %d bytes, bound %d", p.kept, bodyPoolKeep)
	}
	small := p.alloc(40 << 10)
	p.recycle(small)
	if got := p.alloc(40 << 10); unsafe.SliceData(got) != unsafe.SliceData(small) {
		t.Error("a full pool did not make room for a body of another size")
	}
	if p.kept > bodyPoolKeep {
		t.Fatalf("the pool keeps %d bytes, bound %d", p.kept, bodyPoolKeep)
	}
}

// beginReading publishes an epoch no older than the last free before it.
func TestBeginReadingSeesFrees(t *testing.T) {
	p := newBodyPool()
	ls := &loopState{srv: &Server{bodies: p}}
	for range 3 {
		p.recycle(p.alloc(40 << 10))
	}
	ls.beginReading()
	if got, want := ls.reading.Load(), p.epoch.Load()+1; got != want {
		t.Errorf("reading = %d, want %d", got, want)
	}
	ls.endReading()
	if ls.reading.Load() != 0 {
		t.Error("endReading left the loop published")
	}
	var none loopState
	none.srv = &Server{}
	none.beginReading() // without a pool: nothing
	if none.reading.Load() != 0 {
		t.Error("a server without a pool published an epoch")
	}
}
