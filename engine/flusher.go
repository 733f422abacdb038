package engine

import (
	"context"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"

	"github.com/sproutmq/sprout/store"
)

// loopFlusher sends one event loop's held replies once their changes may be
// acknowledged. The store's AckSource calls back at most once per loop and batch,
// and one loop task flushes every waiting session, instead of a callback,
// a task and an OnTraffic per connection.
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
			if ss.quitting && !ss.held.waiting() {
				_ = ss.conn.Close()
			}
		}
		if ss.closed || !ss.held.waiting() {
			ss.queued = false
			f.waiters.Add(-1)
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
