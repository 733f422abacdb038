package engine

import (
	"context"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"

	"github.com/sproutmq/sprout/store"
)

// heldReplies are replies waiting until what they promise may be
// acknowledged, in order; marks say up to where each needs which position.
type heldReplies struct {
	replies
	marks []heldMark
}

// heldMark: buf[:end] (and the bodies referenced up to it) may be sent once
// src has acknowledged position pos; a nil src waits for nothing of its
// own (a reply held only behind earlier ones).
type heldMark struct {
	end int
	pos uint64
	src store.AckSource
}

// waiting reports whether any reply is held; h may be nil.
func (h *heldReplies) waiting() bool { return h != nil && len(h.marks) > 0 }

// copied is the bytes held in h's own buffer; h may be nil.
func (h *heldReplies) copied() int {
	if h == nil {
		return 0
	}
	return len(h.buf)
}

// onWire is the bytes h's replies will put on the wire, referenced bodies
// included; h may be nil. They count against the output cap: once sent,
// they are the client's unread replies.
func (h *heldReplies) onWire() int {
	if h == nil {
		return 0
	}
	return h.size()
}

// mustHold reports whether the reply just produced has to wait: its
// command changed durable state that is not durable yet, or earlier replies
// are already waiting.
func (ss *session) mustHold() bool {
	if !ss.loop.srv.holds {
		return false
	}
	if ss.held.waiting() {
		return true
	}
	src, pos := ss.queue().AckNeeded()
	return src != nil && pos > src.Acked()
}

// hold moves the replies in out from byte from on to the held queue.
func (ss *session) hold(out *replies, from int) {
	if ss.held == nil {
		ss.held = new(heldReplies)
	}
	h := ss.held
	h.moveTail(out, from)
	src, pos := ss.queue().AckNeeded()
	h.marks = append(h.marks, heldMark{end: len(h.buf), pos: pos, src: src})
}

// flushDurable sends the held replies whose changes are now durable.
func (ss *session) flushDurable() {
	h := ss.held
	if !h.waiting() {
		return
	}
	// Each source is asked once: a session's marks mostly name one.
	var src store.AckSource
	var acked uint64
	n, end := 0, 0
	for ; n < len(h.marks); n++ {
		m := &h.marks[n]
		if m.src != nil && m.src != src {
			src, acked = m.src, m.src.Acked()
		}
		if m.src != nil && m.pos > acked {
			break
		}
		end = m.end
	}
	if n == 0 {
		return
	}
	ss.send(&h.replies, end)
	for i := range h.marks[n:] {
		h.marks[n+i].end -= end
	}
	h.marks = append(h.marks[:0], h.marks[n:]...)
}

// awaitDurable has the loop's flusher for the oldest held reply's source
// send the held replies when they may go.
func (ss *session) awaitDurable() {
	if ss.held.waiting() {
		m := &ss.held.marks[0]
		ss.loop.flusherFor(m.src).add(ss, m.pos)
	}
}

// loopFlusher sends one event loop's held replies once their changes may be
// acknowledged by one AckSource. The source calls back at most once per
// loop and batch, and one loop task flushes every session waiting for it,
// instead of a callback, a task and an OnTraffic per connection. A session
// waits in the flusher of its oldest held reply's source (session.queued),
// and moves to another's when that reply is sent.
type loopFlusher struct {
	loop    gnet.EventLoop  // immutable
	acks    store.AckSource // immutable
	fire    func()          // immutable: hands flush to the loop, from any goroutine
	waiters *atomic.Int64   // immutable: the server's count of sessions waiting here

	// loop goroutine only
	waiting []*session // sessions with held replies, each once (session.queued)
	armedAt uint64     // lowest position a log callback is outstanding for; 0 if none
}

func newLoopFlusher(loop gnet.EventLoop, acks store.AckSource, waiters *atomic.Int64) *loopFlusher {
	f := &loopFlusher{loop: loop, acks: acks, waiters: waiters}
	task := gnet.RunnableFunc(f.flush)
	// Execute fails only while gnet shuts down, when every connection and
	// its held replies are dropped anyway (the log still writes the changes).
	f.fire = func() { _ = loop.Execute(context.Background(), task) }
	return f
}

// add queues ss, whose oldest held reply waits for position pos.
// One callback, for the oldest position waited for, serves the whole loop:
// positions mostly grow with time, and a reply showing a job waits for that
// job's put, which may be older than what is armed; then it is armed too.
func (f *loopFlusher) add(ss *session, pos uint64) {
	if !ss.queued {
		ss.queued = true
		f.waiting = append(f.waiting, ss)
		f.waiters.Add(1)
	}
	if f.armedAt == 0 || pos < f.armedAt {
		f.armedAt = pos
		f.acks.OnAcked(pos, f.fire)
	}
}

// forget drops what the loop waits for, once CloseClients has closed its
// sessions: their held replies are never sent, and the AckSource may never
// call the callback armed for them (a cluster member's journal forgets
// the callbacks of a leadership it lost), so the next session that waits
// arms its own. A callback that does come later finds nothing to do.
// Loop goroutine only.
func (f *loopFlusher) forget() {
	for _, ss := range f.waiting {
		ss.queued = false
	}
	f.waiters.Add(-int64(len(f.waiting)))
	clear(f.waiting)
	f.waiting = f.waiting[:0]
	f.armedAt = 0
}

// flush runs on the loop: it sends every durable held reply and re-arms for
// the oldest position still waited for.
func (f *loopFlusher) flush(context.Context) error {
	f.armedAt = 0
	keep := f.waiting[:0]
	var next uint64
	for _, ss := range f.waiting {
		if !ss.closed {
			ss.flushDurable()
			ss.account()
			if ss.finished() {
				ss.closeConn()
			}
		}
		if ss.closed || !ss.held.waiting() || ss.held.marks[0].src != f.acks {
			ss.queued = false
			f.waiters.Add(-1)
			ss.awaitDurable() // its oldest reply waits for another source
			continue
		}
		keep = append(keep, ss)
		if pos := ss.held.marks[0].pos; next == 0 || pos < next {
			next = pos
		}
	}
	clear(f.waiting[len(keep):])
	f.waiting = keep
	if len(keep) > 0 {
		f.armedAt = next
		f.acks.OnAcked(next, f.fire)
	}
	return nil
}
