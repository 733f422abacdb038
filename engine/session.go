package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// session is one connection. Unless a field says otherwise it is only
// touched on the connection's event loop. Every connection has one, idle
// ones included, so what only some need is made when first needed (held,
// the parser's put state, the client's reservations); the store's client
// lives inside it, one allocation instead of two.
type session struct {
	loop *loopState // immutable: what the connection's loop shares, and its server
	conn gnet.Conn  // immutable; off-loop use only through gnet's thread-safe calls
	// client is the session's queue on a single node (queue); unused
	// when the server makes connections' queues (Config.Queues).
	client store.Client
	parser codec.Parser

	// held are replies waiting until they may be acknowledged (held.go);
	// allocated at the first, so an idle connection does not carry it.
	held *heldReplies

	// holding is the bytes held for this connection when last accounted:
	// unread replies in gnet, unparsed input, held replies, a partial put
	// body. Written on the loop; read by the budget enforcer. Not zero
	// exactly while the session is in loop.holding.
	holding atomic.Int64

	end     ending // how the connection is on its way out, if it is
	queued  bool   // in the loop flusher's waiting list
	watched bool   // in srv.watched: gnet holds unread replies
	// awaiting is the command whose answer is pending (a reserve that
	// waits, or a Queue's later answer), codec.OpNone if none; input stays
	// buffered until it is answered.
	awaiting  codec.Op
	throttled bool // the client is not reading its replies
	closed    bool
	producer  bool // has put (stats current-producers)
	worker    bool // has reserved (stats current-workers)
}

// ending is how a connection is on its way out. One field rather than a
// flag each keeps the session, which every idle connection has, in its
// size class (TestSessionSizeClass).
type ending uint8

const (
	endNone ending = iota
	// endInputEnding: the client ended its writing side while reading
	// was paused (OnPausedEnd). What it sent before is still to be read,
	// then its end of file makes the session endHalfClosed. Meanwhile, as
	// then, a reserve does not wait: nothing the client sends can follow
	// it.
	endInputEnding
	// endHalfClosed: the client has shut down its writing side. What it
	// sent runs and every reply is sent, then the connection closes
	// (session.finished).
	endHalfClosed
	// endQuitting: quit has run; the connection closes once every reply
	// before it is sent (held ones included) and taken by the socket
	// (finished), and later input is dropped.
	endQuitting
	// endFenced: a job was to be handed out while Config.Leased said no,
	// or a queue's answer was fenced so (FailedFenced); the connection
	// closes at once, that reply and what follows unsent.
	endFenced
	// endLost: the queue cannot tell whether a command ran (FailedLost);
	// the connection closes at once, as endFenced.
	endLost
)

// serve sends the held replies that may go, parses and answers as much
// buffered input as it may, and accounts for what the connection holds.
func (ss *session) serve() gnet.Action {
	if ss.closed {
		return gnet.None
	}
	if ss.end >= endFenced {
		return gnet.Close
	}
	ss.flushDurable()
	if ss.end == endQuitting {
		if ss.finished() {
			return gnet.Close
		}
		// What follows quit is never run, as in beanstalkd; dropped, so a
		// client that keeps sending cannot grow the buffer meanwhile.
		if n := ss.conn.InboundBuffered(); n > 0 {
			_, _ = ss.conn.Discard(n)
		}
		ss.account()
		return gnet.None
	}
	action := ss.serveInput()
	ss.awaitDurable()
	ss.account()
	if action == gnet.None && ss.finished() {
		return gnet.Close
	}
	return action
}

// halfClose is the client's shutting down of its writing side. As in
// beanstalkd, every command already received runs and every reply is sent
// before the connection closes; the output cap and the buffer budget still
// apply meanwhile. A reserve that waits, or would wait, ends in TIMED_OUT
// at once, since nothing the client sends can follow it, and the commands
// after it run. Any other pending answer is awaited, then sent.
func (ss *session) halfClose() gnet.Action { return ss.inputEnds(endHalfClosed) }

// inputEnds is the client's end of its writing side, seen at the end of
// file (endHalfClosed) or, while reading is paused, before what came
// ahead of it is read (endInputEnding): a reserve that waits ends in
// TIMED_OUT, as beanstalkd's does when its client hangs up, and the
// session serves what it has.
func (ss *session) inputEnds(end ending) gnet.Action {
	if ss.closed {
		return gnet.None
	}
	if ss.end < end {
		ss.end = end
	}
	if (ss.awaiting == codec.OpReserve || ss.awaiting == codec.OpReserveWithTimeout) && ss.queue().CancelWait() {
		ss.endWait(func(out *replies) { out.add(codec.ReplyTimedOut) })
	}
	return ss.serve()
}

// inputEnded reports whether the client has ended its writing side.
func (ss *session) inputEnded() bool {
	return ss.end == endInputEnding || ss.end == endHalfClosed
}

// finished reports whether a half-closed connection, or one that sent
// quit, is done: half-closed, every whole command has run (serveInput
// drops what is left, a command cut short, which can never complete);
// and every reply has been sent, none held for the log, and taken by the
// socket (gnet's close gives up at the first write the socket does not
// take, so closing earlier would cut replies off). gnet reports no
// "sent", so a session with unread replies is polled from OnTick
// (account).
func (ss *session) finished() bool {
	switch ss.end {
	case endHalfClosed:
		if ss.awaiting != codec.OpNone || ss.conn.InboundBuffered() != 0 {
			return false
		}
	case endQuitting:
	default:
		return false
	}
	return !ss.held.waiting() && ss.conn.OutboundBuffered() == 0
}

// serveInput answers buffered commands: all of them, unless an answer is
// pending or the client stops reading its replies.
func (ss *session) serveInput() gnet.Action {
	c := ss.conn
	maxOut := ss.loop.srv.cfg.MaxOutputBuffered
	if ss.throttled {
		if c.OutboundBuffered()+ss.held.onWire() > maxOut/2 {
			return ss.regulateInput(true)
		}
		ss.throttled = false
	}
	r := ss.remote()
	if ss.awaiting != codec.OpNone && !r.mayGoOn(ss.awaiting) {
		return ss.regulateInput(true)
	}
	in, _ := c.Peek(-1)
	out := &ss.loop.batch
	consumed := 0
	// cmd lives on the stack: keeping it in the session would cost every
	// idle connection its 88 bytes.
	var cmd codec.Command
	action := gnet.None
	// blocked: the input left is not consumed until an answer comes or
	// the client reads its replies; else it is a command not yet whole.
	blocked := false
	// waiting is what the socket holds beyond gnet's buffer, once asked
	// for a large body (bodyAhead); -1 until then.
	waiting := -1
	for {
		if out.size() >= maxOut {
			// Hand a large batch to the socket now: what the kernel takes
			// at once does not count against the client.
			ss.send(out, len(out.buf))
			if ss.closed { // the write failed and gnet closed the connection
				return gnet.None
			}
		}
		if c.OutboundBuffered()+out.size()+ss.held.onWire() > maxOut {
			ss.throttled = true
			blocked = true
			break
		}
		if waiting < 0 {
			waiting = ss.bodyAhead(len(in) - consumed)
		}
		atLine := ss.parser.AtLine()
		n, ok := ss.parser.Parse(in[consumed:], &cmd)
		consumed += n
		if !ok && consumed == len(in) && waiting > 0 {
			ok = ss.readBody(&cmd, waiting)
			waiting = -1
		}
		if !ok {
			// With the client's writing side shut, no byte can come to
			// complete what is left: drop it, as beanstalkd does.
			if ss.end == endHalfClosed {
				consumed = len(in)
			}
			break
		}
		inFlight := ss.awaiting != codec.OpNone
		if inFlight && !(cmd.Status == codec.OK && r.pipelines(cmd.Op)) && atLine && ss.parser.AtLine() {
			// Not pipelined: it waits until the answers pending have
			// come, parsed again then.
			consumed -= n
			blocked = true
			break
		}
		before := len(out.buf)
		var quit bool
		if m := ss.loop.srv.cfg.Metrics; m != nil && cmd.Op != codec.OpPut && cmd.Op != codec.OpNone {
			start := time.Now()
			quit = ss.dispatch(&cmd, out)
			m.ObserveCommand(cmd.Op, time.Since(start))
		} else {
			quit = ss.dispatch(&cmd, out)
		}
		if ss.end >= endFenced {
			action = gnet.Close
			break
		}
		if inFlight && len(out.buf) > before {
			// Answered at once, behind answers pending (a put's body
			// refused): its reply goes after theirs.
			ss.deferReply(out, before)
		}
		if ss.mustHold() {
			ss.hold(out, before)
		}
		if quit {
			// Replies still waiting for the log are sent first: a client
			// that pipelines "put ... quit" hears INSERTED, as from
			// beanstalkd.
			ss.end = endQuitting
			break
		}
		if ss.awaiting != codec.OpNone && !r.mayGoOn(ss.awaiting) {
			blocked = true
			break
		}
	}
	if ss.parser.PutUnstamped() {
		// Its command line came in this read and its body has not come
		// yet: the job's age counts from now (a body that came whole
		// with it is made when it is put, which saves the clock read).
		ss.parser.SetPutAt(ss.queue().Clock())
	}
	// Tube names and whole put bodies in cmd alias in; they are dead once
	// dispatched (the store copies what it keeps). gnet's
	// Discard(0) would throw away everything, hence the guard.
	if consumed > 0 {
		_, _ = c.Discard(consumed)
		ss.loop.srv.bytesIn.Add(uint64(consumed))
	}
	ss.send(out, len(out.buf))
	if action != gnet.None {
		return action
	}
	return ss.regulateInput(blocked)
}

// A large put body is read where the job keeps it, as beanstalkd reads
// one. gnet reads at most readBufferCap bytes per event into its loop's
// buffer, from which Parse copies; the rest of a body that goes on past
// them is read by readBody from the socket straight into the job's buffer,
// once everything gnet had read is consumed. The loop owns the descriptor,
// and reads exactly what the body lacks, so no byte of the next command is
// taken from gnet. bodyAhead makes the body's buffer before Parse copies
// gnet's part, so that it is allocated once: whole, when what it still
// lacks is at most wholeBodyRatio times what has arrived (a 64 KiB body
// whose first read came with its header); else for the bytes the socket
// says have arrived (FIONREAD), as Parse grows a body for what it is given.

// bodyAhead, when the parser waits for a body that goes on past the
// buffered bytes gnet holds by at least directBodyMin, makes the body's
// buffer and returns how many more bytes to try to read into it (those
// the socket holds, or all the body lacks when it is made whole); else -1.
func (ss *session) bodyAhead(buffered int) int {
	rest := ss.parser.BodyNeed() - buffered
	if rest < directBodyMin || ss.end != endNone || ss.closed {
		return -1
	}
	if _, ok := ss.conn.(*tlsConn); ok {
		return -1 // the socket holds ciphertext, for the tls.Conn only
	}
	if rest <= wholeBodyRatio*buffered {
		ss.parser.BodySpace(buffered + rest)
		return rest
	}
	waiting, err := unix.IoctlGetInt(ss.conn.Fd(), ioctlReadable)
	if err != nil || waiting <= 0 {
		return 0
	}
	ss.parser.BodySpace(buffered + waiting)
	return waiting
}

// wholeBodyRatio bounds what a body made whole at once may still lack, in
// multiples of what has arrived: a client that stops half way makes the
// server hold at most 1+wholeBodyRatio times what it sent (twice, when
// Parse grows a body as its parts come). 4 covers beanstalkd's default
// largest body (65,535 bytes) after a first read of readBufferCap bytes,
// header included; a larger body costs one more system call (FIONREAD),
// which at 64 KiB is one in nine of a producer/consumer job's.
const wholeBodyRatio = 4

// readBody reads the rest of the body the parser waits for from the
// socket, at most waiting bytes (bodyAhead), and reports whether that
// completed it (then *cmd is its OpPutBody). A socket that holds less
// gives what it has, and gnet brings the rest; nothing at all, end of
// file or an error end it quietly: gnet's next read of the socket sees the
// same and handles it (OnHalfClose, OnClose).
func (ss *session) readBody(cmd *codec.Command, waiting int) bool {
	n, err := unix.Read(ss.conn.Fd(), ss.parser.BodySpace(waiting))
	if err != nil || n <= 0 {
		return false
	}
	ss.loop.srv.bytesIn.Add(uint64(n))
	ss.loop.srv.bodyBytesRead.Add(uint64(n))
	return ss.parser.BodyFilled(n, cmd)
}

// directBodyMin is the least body left to come past gnet's buffer that is
// read straight into the job: below it, gnet's next read takes the rest
// with the next command, and two system calls would cost more than the
// copy.
const directBodyMin = 4 << 10

// send writes r's replies up to byte end of its buffer (see writeTo) and
// counts them.
func (ss *session) send(r *replies, end int) {
	if n := r.writeTo(ss.conn, end); n > 0 {
		ss.loop.srv.bytesOut.Add(uint64(n))
	}
}

// account publishes what the connection holds now to the server's buffer
// budget.
func (ss *session) account() {
	if ss.closed {
		return
	}
	c := ss.conn
	unread := c.OutboundBuffered()
	n := unread + c.InboundBuffered() + ss.held.copied() + ss.parser.BodyHeld()
	ss.loop.srv.account(ss, int64(n), unread > 0 || ss.throttled)
}

// regulateInput holds back a client that sends faster than its session
// consumes, as beanstalkd does by not reading such a connection: once the
// session cannot consume its input until an answer comes or the client
// reads its replies (blocked), with srv.pauseInputAt bytes or more unread,
// the socket is not read until the session is unblocked, and the client's
// writes wait in TCP's flow control. The pause comes one read before the
// cap, and at the latest at it, so a session held back is never closed for
// its input: only a connection whose unparsed input outgrows its cap
// while it is still being read is; body bytes are copied out as they
// arrive, so they never count.
func (ss *session) regulateInput(blocked bool) gnet.Action {
	buffered := ss.conn.InboundBuffered()
	if !blocked {
		// gnet keeps whether the socket is paused: nothing to do if not.
		if err := ss.conn.ResumeReading(); err != nil {
			return gnet.Close
		}
	} else if buffered >= ss.loop.srv.pauseInputAt && ss.conn.PauseReading() == nil {
		return gnet.None
	}
	if buffered > ss.loop.srv.cfg.MaxInputBuffered {
		ss.loop.srv.log.Debug().Int("buffered", buffered).Msg("input cap exceeded; closing")
		return gnet.Close
	}
	return gnet.None
}

// closeConn closes the connection of a session that serve says is done,
// from its loop but outside gnet's callbacks for it (the held replies'
// flusher, a late answer), where there is no gnet.Close to return: a TLS
// session's last reply is followed by close_notify (tlsConn.finish), as
// when handler.traffic returns gnet.Close. Without it a TLS client sees a
// bare TCP close, which it cannot tell from a stream cut short. The
// budget's evictions and CloseClients do not use it: they end sessions
// that are not done, whose replies may be lost, and a bare close says so
// (the enforcer runs off the loop, where the tls.Conn may not be used).
func (ss *session) closeConn() {
	if tc, ok := ss.conn.(*tlsConn); ok {
		tc.finish(ss)
	}
	_ = ss.conn.Close()
}

func (ss *session) close() {
	if ss.closed {
		return
	}
	ss.closed = true
	if p := ss.loop.srv.bodies; p != nil {
		p.recycle(ss.parser.DropBody()) // a put cut short
	}
	if ss.loop.sessions != nil {
		delete(ss.loop.sessions, ss)
	}
	delete(ss.loop.tlsSessions, ss)
	ss.loop.srv.account(ss, 0, false)
	ss.held = nil
	ss.queue().Close()
	if ss.loop.queues != nil {
		delete(ss.loop.queues, ss)
	}
	ss.loop.srv.conns.current.Add(-1)
	if ss.producer {
		ss.loop.srv.conns.producers.Add(-1)
	}
	if ss.worker {
		ss.loop.srv.conns.workers.Add(-1)
	}
}

// JobReserved implements store.Notifier: a blocked reserve got a job.
// It runs on whichever goroutine made the job available, so the reply is
// handed to the connection's own loop.
func (ss *session) JobReserved(j *store.Job) {
	ss.onLoop(func(out *replies) {
		// j came from another goroutine: with recycled bodies, its body
		// may be read only if it is still there, checked now that this
		// callback is published (bodies.go). It can be gone only if its
		// TTR ran out before this loop got here and another client
		// deleted it: the reserve then ends as if it had timed out.
		if ss.loop.srv.bodies != nil && len(j.Body()) >= pooledBodyMin && !ss.client.Alive(j) {
			out.add(codec.ReplyTimedOut)
			return
		}
		ss.appendJob(out, codec.WordReserved, j)
	})
}

// WaitEnded implements store.Notifier: a blocked reserve ended empty.
func (ss *session) WaitEnded(r store.ReserveResult) {
	reply := codec.ReplyTimedOut
	if r == store.DeadlineSoon {
		reply = codec.ReplyDeadlineSoon
	}
	ss.onLoop(func(out *replies) { out.buf = append(out.buf, reply...) })
}

// onLoop answers the pending command on the connection's loop, then
// serves the input that queued up behind it. If the connection has closed
// meanwhile, the answer is dropped: OnClose has already closed the queue,
// which put a reserved job back.
func (ss *session) onLoop(reply func(*replies)) {
	_ = ss.conn.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		ss.answerOnLoop(reply)
		return nil
	}))
}

// answerOnLoop is the loop's part of onLoop, and of a Queue's answers
// (remote.drain): the wait ends with reply, then the input that queued up
// behind it is served. Nothing happens once the connection has closed.
func (ss *session) answerOnLoop(reply func(*replies)) {
	if ss.closed {
		return
	}
	ss.loop.beginReading()
	defer ss.loop.endReading()
	ss.endWait(reply)
	if ss.serve() == gnet.Close {
		ss.closeConn()
	}
}

// endWait answers the command that was pending with reply, behind any
// replies held for the log: the session awaits nothing when reply runs
// (a reply that makes another command the awaited one sets it). The
// loop's batch is empty here: the wait ends outside serve.
func (ss *session) endWait(reply func(*replies)) {
	out := &ss.loop.batch
	ss.awaiting = codec.OpNone
	reply(out)
	if ss.mustHold() {
		ss.hold(out, 0)
	} else {
		ss.send(out, len(out.buf))
	}
}

// queue is the session's Queue: its own store client, unless the server
// makes connections' queues (Config.Queues).
func (ss *session) queue() Queue {
	if qs := ss.loop.queues; qs != nil {
		return qs[ss].q
	}
	return (*localQueue)(&ss.client)
}
