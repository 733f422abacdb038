package engine

import (
	"context"
	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// replyPool holds the buffers replies are assembled in; one per OnTraffic,
// written with a single c.Write.
var replyPool bytebufferpool.Pool

// session is one connection. Unless a field says otherwise it is only
// touched on the connection's event loop.
type session struct {
	srv    *Server       // immutable
	conn   gnet.Conn     // immutable; off-loop use only through gnet's thread-safe calls
	client *store.Client // immutable
	parser codec.Parser

	// putID is the id the put in progress took at its header; the codec
	// repeats the header's fields with the body (OpPutBody).
	putID uint64

	// held are replies waiting for their changes to become durable, in
	// order; marks say up to where each needs which log position.
	held    []byte
	marks   []heldMark
	flusher *loopFlusher // immutable; nil without a log
	queued  bool         // in flusher's waiting list

	blocked   bool // a reserve is waiting; input stays buffered until it ends
	throttled bool // the client is not reading its replies
	closed    bool
	producer  bool // has put (stats current-producers)
	worker    bool // has reserved (stats current-workers)
}

// heldMark: held[:end] may be sent once the log is durable up to lsn.
type heldMark struct {
	end int
	lsn uint64
}

// serve parses and answers as much buffered input as it may: everything,
// unless a reserve blocks or the client stops reading replies.
func (ss *session) serve() gnet.Action {
	c := ss.conn
	if ss.closed {
		return gnet.None
	}
	ss.flushDurable()
	if ss.throttled {
		if c.OutboundBuffered() > ss.srv.cfg.MaxOutputBuffered/2 {
			return ss.checkInput()
		}
		ss.throttled = false
		ss.srv.unthrottle(ss)
	}
	if ss.blocked {
		return ss.checkInput()
	}
	in, _ := c.Peek(-1)
	out := replyPool.Get()
	consumed := 0
	// cmd lives on the stack: keeping it in the session would cost every
	// idle connection its 88 bytes.
	var cmd codec.Command
	action := gnet.None
	for {
		if c.OutboundBuffered()+len(out.B) > ss.srv.cfg.MaxOutputBuffered {
			ss.throttled = true
			ss.srv.throttle(ss)
			break
		}
		n, ok := ss.parser.Parse(in[consumed:], &cmd)
		consumed += n
		if !ok {
			break
		}
		var quit bool
		before := len(out.B)
		out.B, quit = ss.dispatch(&cmd, out.B)
		if ss.mustHold() {
			ss.hold(out.B[before:])
			out.B = out.B[:before]
		}
		if quit {
			action = gnet.Close
			break
		}
		if ss.blocked {
			break
		}
	}
	// Tube names in cmd alias in; they are dead once dispatched. gnet's
	// Discard(0) would throw away everything, hence the guard.
	if consumed > 0 {
		_, _ = c.Discard(consumed)
	}
	if len(out.B) > 0 {
		_, _ = c.Write(out.B)
	}
	replyPool.Put(out)
	ss.awaitDurable()
	if action != gnet.None {
		return action
	}
	return ss.checkInput()
}

// mustHold reports whether the reply just produced has to wait: its
// command changed durable state that is not durable yet, or earlier replies
// are already waiting.
func (ss *session) mustHold() bool {
	d := ss.srv.cfg.Durability
	if d == nil {
		return false
	}
	return len(ss.held) > 0 || ss.client.PendingLSN() > d.Durable()
}

func (ss *session) hold(reply []byte) {
	ss.held = append(ss.held, reply...)
	ss.marks = append(ss.marks, heldMark{end: len(ss.held), lsn: ss.client.PendingLSN()})
}

// flushDurable sends the held replies whose changes are now durable.
func (ss *session) flushDurable() {
	if len(ss.marks) == 0 {
		return
	}
	durable := ss.srv.cfg.Durability.Durable()
	n, end := 0, 0
	for n < len(ss.marks) && ss.marks[n].lsn <= durable {
		end = ss.marks[n].end
		n++
	}
	if n == 0 {
		return
	}
	_, _ = ss.conn.Write(ss.held[:end])
	if n == len(ss.marks) {
		ss.held, ss.marks = ss.held[:0], ss.marks[:0]
		if cap(ss.held) > 64<<10 {
			ss.held = nil // don't keep a large buffer per idle connection
		}
		return
	}
	ss.held = append(ss.held[:0], ss.held[end:]...)
	for i := range ss.marks[n:] {
		ss.marks[n+i].end -= end
	}
	ss.marks = append(ss.marks[:0], ss.marks[n:]...)
}

// awaitDurable has the loop's flusher send the held replies when they may go.
func (ss *session) awaitDurable() {
	if len(ss.marks) > 0 {
		ss.flusher.add(ss, ss.marks[0].lsn)
	}
}

// checkInput closes a connection whose unparsed input has outgrown its cap
// (a client pipelining behind a blocked reserve or without reading); body
// bytes are copied out as they arrive, so they never count.
func (ss *session) checkInput() gnet.Action {
	if ss.conn.InboundBuffered() > ss.srv.cfg.MaxInputBuffered {
		ss.srv.log.Debug().Int("buffered", ss.conn.InboundBuffered()).Msg("input cap exceeded; closing")
		return gnet.Close
	}
	return gnet.None
}

// resume continues after a blocked reserve has been answered.
func (ss *session) resume() {
	ss.blocked = false
	if ss.serve() == gnet.Close {
		_ = ss.conn.Close()
	}
}

func (ss *session) close() {
	if ss.closed {
		return
	}
	ss.closed = true
	if ss.throttled {
		ss.srv.unthrottle(ss)
	}
	ss.client.Close()
	ss.srv.conns.current.Add(-1)
	if ss.producer {
		ss.srv.conns.producers.Add(-1)
	}
	if ss.worker {
		ss.srv.conns.workers.Add(-1)
	}
}

// JobReserved implements store.Notifier: a blocked reserve got a job.
// It runs on whichever goroutine made the job available, so the reply is
// handed to the connection's own loop.
func (ss *session) JobReserved(j *store.Job) {
	ss.onLoop(func() []byte { return ss.appendJob(nil, codec.WordReserved, j) })
}

// WaitEnded implements store.Notifier: a blocked reserve ended empty.
func (ss *session) WaitEnded(r store.ReserveResult) {
	reply := codec.ReplyTimedOut
	if r == store.DeadlineSoon {
		reply = codec.ReplyDeadlineSoon
	}
	ss.onLoop(func() []byte { return []byte(reply) })
}

// onLoop answers the blocked reserve on the connection's loop, behind any
// held replies, then serves the input that queued up behind it. If the
// connection has closed meanwhile, OnClose has already put the job back.
func (ss *session) onLoop(reply func() []byte) {
	_ = ss.conn.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		if ss.closed {
			return nil
		}
		if b := reply(); ss.mustHold() {
			ss.hold(b)
		} else {
			_, _ = ss.conn.Write(b)
		}
		ss.resume()
		return nil
	}))
}
