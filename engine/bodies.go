package engine

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// A server without a log recycles the memory of large job bodies (see
// "Put bodies" in doc.go for why). The store hands the pool the body of
// every job it forgets (store.SetRecycler); the pool knows which bodies it
// made (owned) and ignores the rest.
//
// A forgotten job's body may still be read: an event loop that found the
// job before it was deleted (a peek on another connection) references
// the body in its batch of replies until it writes them. So a freed body
// waits in limbo until every loop that may have seen it has finished the
// callback it was in: each loop publishes, while it runs a callback that
// may read bodies, the pool's epoch as it was when the callback began
// (loopState.reading); each free bumps the epoch; a body freed at epoch e
// is reused once no loop is in a callback that began before e. A loop
// that began after e finds the job gone, since the job left the store
// before e was taken. A pointer to a job handed from one goroutine to a
// loop's later callback (store.Notifier's JobReserved) is checked there
// with store.Client.Alive before its body is read.
const (
	// bodyPage is the rounding of Go's large allocations: pooled buffers
	// come in whole pages, so a pooled body wastes no more than Go's own.
	bodyPage = 8 << 10
	// pooledBodyMin is the smallest body ("\r\n" included) the pool makes:
	// above 32 KiB Go allocates each body on pages of its own, which come
	// back only after a collection, cold.
	pooledBodyMin = 32<<10 + 1
	// pooledPagesMax bounds the pooled sizes (1 MiB); larger bodies are
	// rare enough to leave to the runtime.
	pooledPagesMax = 128
	// bodyPoolKeep is the most memory the pool keeps that no job uses
	// (free buffers, and freed ones waiting for readers).
	bodyPoolKeep = 16 << 20
)

// bodyPool recycles large job bodies. Safe for concurrent use.
type bodyPool struct {
	// epoch is bumped by every free; loops read it as they begin a
	// callback (loopState.beginReading).
	epoch atomic.Uint64

	mu sync.Mutex
	// readers are the loops' published epochs; guarded by mu.
	readers []*atomic.Uint64
	// free holds reusable buffers by size in pages, the most recently
	// freed last (warmest in cache); guarded by mu.
	free [pooledPagesMax + 1][]*byte
	// limbo holds freed buffers in the order of their epochs, until no
	// reader may still see them; guarded by mu.
	limbo []freedBody
	// owned maps each buffer handed out to its size in pages; guarded by
	// mu. A buffer leaves it when freed, and comes back when handed out
	// again.
	owned map[*byte]uint8
	// kept is the bytes in free and limbo; guarded by mu.
	kept int
	// reused counts buffers handed out again rather than made.
	reused atomic.Uint64
}

type freedBody struct {
	buf   *byte
	pages uint8
	epoch uint64
}

func newBodyPool() *bodyPool {
	return &bodyPool{owned: make(map[*byte]uint8)}
}

// addReader registers a loop's published epoch.
func (p *bodyPool) addReader(r *atomic.Uint64) {
	p.mu.Lock()
	p.readers = append(p.readers, r)
	p.mu.Unlock()
}

// alloc returns a buffer of at least n bytes for a body, or nil for a
// size the pool leaves to the caller. Its bytes are not zeroed: they are
// an earlier body's.
func (p *bodyPool) alloc(n int) []byte {
	pages := (n + bodyPage - 1) / bodyPage
	if n < pooledBodyMin || pages > pooledPagesMax {
		return nil
	}
	size := pages * bodyPage
	p.mu.Lock()
	p.reclaimLocked()
	var b *byte
	if l := p.free[pages]; len(l) > 0 {
		b = l[len(l)-1]
		l[len(l)-1] = nil
		p.free[pages] = l[:len(l)-1]
		p.kept -= size
		p.reused.Add(1)
	}
	if b == nil {
		p.mu.Unlock()
		// Zeroed once in the buffer's life, which is many bodies long.
		b = unsafe.SliceData(make([]byte, size))
		p.mu.Lock()
	}
	p.owned[b] = uint8(pages)
	p.mu.Unlock()
	return unsafe.Slice(b, size)
}

// recycle takes back body's buffer if the pool made it; it is reused once
// no loop may still be reading it. Nothing else may use body afterwards.
func (p *bodyPool) recycle(body []byte) {
	b := unsafe.SliceData(body)
	if b == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pages, ok := p.owned[b]
	if !ok {
		return
	}
	delete(p.owned, b)
	size := int(pages) * bodyPage
	if !p.makeRoomLocked(size) {
		return // left to the garbage collector
	}
	p.limbo = append(p.limbo, freedBody{buf: b, pages: pages, epoch: p.epoch.Add(1)})
	p.kept += size
}

// makeRoomLocked drops free buffers, the largest sizes first, until size
// more bytes fit in bodyPoolKeep, and reports whether they do: sizes no
// longer put must not hold the room the current ones need.
func (p *bodyPool) makeRoomLocked(size int) bool {
	for pages := pooledPagesMax; pages > 0 && p.kept+size > bodyPoolKeep; pages-- {
		for l := p.free[pages]; len(l) > 0 && p.kept+size > bodyPoolKeep; l = p.free[pages] {
			l[0] = nil
			p.free[pages] = l[1:] // the coldest first
			p.kept -= pages * bodyPage
		}
	}
	return p.kept+size <= bodyPoolKeep
}

// reclaimLocked moves the buffers in limbo that no loop may still be
// reading to the free lists. A loop publishes 1 + the epoch it read as its
// callback began, 0 between callbacks.
func (p *bodyPool) reclaimLocked() {
	if len(p.limbo) == 0 {
		return
	}
	oldest := ^uint64(0)
	for _, r := range p.readers {
		if v := r.Load(); v != 0 && v < oldest {
			oldest = v
		}
	}
	n := 0
	for _, f := range p.limbo {
		// A reader that published v read the epoch v-1 >= f.epoch after
		// the job was gone.
		if f.epoch >= oldest {
			break
		}
		p.free[f.pages] = append(p.free[f.pages], f.buf)
		n++
	}
	if n > 0 {
		clear(p.limbo[:n])
		p.limbo = p.limbo[n:]
	}
}

// beginReading publishes that the loop runs a callback that may read job
// bodies: the pool's epoch as it is now (plus one). The epoch is read
// again after publishing, so that a free between the read and the publish
// is not missed. Loop goroutine only; nothing without a pool.
func (ls *loopState) beginReading() {
	p := ls.srv.bodies
	if p == nil {
		return
	}
	for {
		e := p.epoch.Load()
		ls.reading.Store(e + 1)
		if p.epoch.Load() == e {
			return
		}
	}
}

// endReading publishes that the loop's callback is over: it holds no body
// any more (every reply has been written or copied by gnet).
func (ls *loopState) endReading() {
	if ls.srv.bodies != nil {
		ls.reading.Store(0)
	}
}
