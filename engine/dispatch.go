package engine

import (
	"bytes"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// dispatch executes one parsed command and appends its reply to out. quit
// reports that the connection must close. A command whose answer is
// pending (a reserve that waits, or a Queue's later answer) sets
// ss.awaiting, or joins the commands in flight behind it (Pipeliner), and
// appends nothing: its reply comes through the Notifier or Answers.
func (ss *session) dispatch(cmd *codec.Command, out *replies) (quit bool) {
	switch cmd.Status {
	case codec.BadFormat:
		out.add(codec.ReplyBadFormat)
		return false
	case codec.CountedBadFormat:
		if c, ok := cmd.Op.Counter(); ok {
			ss.loop.srv.count(c)
		}
		out.add(codec.ReplyBadFormat)
		return false
	case codec.UnknownCommand:
		out.add(codec.ReplyUnknownCommand)
		return false
	case codec.TLSRecord:
		// A TLS client on the plaintext port: closed at once rather than
		// left waiting, as beanstalkd would leave it, for its handshake.
		ss.loop.srv.conns.tlsOnPlaintext.Add(1)
		return true
	}
	if c, ok := cmd.Op.Counter(); ok && cmd.Op != codec.OpPut {
		ss.loop.srv.count(c)
	}
	if cmd.Op == codec.OpQuit {
		return true
	}
	ss.execute(cmd, out)
	return false
}

// execute runs every command but quit: the queue's method for it, whose
// answer is encoded now (answer), or, when the queue says it is pending,
// once it comes (awaitAnswer); meanwhile the session awaits it.
func (ss *session) execute(cmd *codec.Command, out *replies) {
	q := ss.queue()
	a := &ss.loop.answer
	// The scratch holds the last answer of any session on the loop, and
	// a Queue fills in only what its command's reply reads: one that
	// leaves a field another queue set (a router's JobID beside the
	// local store's Job) would answer with the other's job. The large
	// statistics are set whole by the commands that read them.
	a.Job, a.JobID, a.JobBody, a.N, a.Err, a.Tubes = nil, 0, nil, 0, nil, nil
	a.Reserve, a.Failed, a.OK = 0, 0, false
	a.Behind = ss.awaiting != codec.OpNone
	now := true
	switch cmd.Op {
	case codec.OpPut:
		ss.putHeader(cmd, q)
		return
	case codec.OpPutBody:
		if !ss.putAccepted(cmd, out) {
			q.PutRefused()
			return
		}
		body := cmd.Body
		if cmd.BodyAliased && len(body) > store.MaxCopiedBody {
			body = bytes.Clone(body) // the queue keeps it; it aliases the input
		}
		now = q.Put(cmd.ID, cmd.PutAt, cmd.Pri, cmd.Delay, cmd.TTR, body, a)
	case codec.OpPutTooBig:
		out.add(codec.ReplyJobTooBig)
		return

	case codec.OpUse:
		now = q.Use(cmd.Tube, a)
	case codec.OpWatch:
		now = q.Watch(cmd.Tube, a)
	case codec.OpIgnore:
		now = q.Ignore(cmd.Tube, a)
	case codec.OpListTubes:
		now = q.ListTubes(a)

	case codec.OpReserve:
		now = ss.reserve(q, a, -1)
	case codec.OpReserveWithTimeout:
		now = ss.reserve(q, a, time.Duration(cmd.Timeout)*time.Second)
	case codec.OpReserveJob:
		now = q.ReserveJob(cmd.ID, a)

	case codec.OpDelete:
		now = q.Delete(cmd.ID, a)
	case codec.OpRelease:
		now = q.Release(cmd.ID, cmd.Pri, cmd.Delay, a)
	case codec.OpBury:
		now = q.Bury(cmd.ID, cmd.Pri, a)
	case codec.OpTouch:
		now = q.Touch(cmd.ID, a)
	case codec.OpKick:
		now = q.Kick(cmd.Count, a)
	case codec.OpKickJob:
		now = q.KickJob(cmd.ID, a)

	case codec.OpPeek:
		now = q.Peek(cmd.ID, a)
	case codec.OpPeekReady:
		now = q.PeekReady(a)
	case codec.OpPeekDelayed:
		now = q.PeekDelayed(a)
	case codec.OpPeekBuried:
		now = q.PeekBuried(a)

	case codec.OpStats:
		now = q.Stats(a)
	case codec.OpStatsJob:
		now = q.JobStats(cmd.ID, a)
	case codec.OpStatsTube:
		now = q.TubeStats(cmd.Tube, a)
	case codec.OpPauseTube:
		now = q.PauseTube(cmd.Tube, time.Duration(cmd.Delay)*time.Second, a)
	}
	if now {
		ss.answer(cmd.Op, a, out)
	} else {
		ss.await(cmd.Op, len(cmd.Body))
	}
}

// answer appends the reply to command op, whose queue answered a: now,
// or later for a command that was pending. The commands the session
// answers itself (list-tube-used, list-tubes-watched) come here too.
func (ss *session) answer(op codec.Op, a *Answer, out *replies) {
	switch a.Failed {
	case FailedInternal:
		out.add(codec.ReplyInternalError)
		return
	case FailedLost:
		ss.end = endLost
		return
	case FailedFenced:
		ss.end = endFenced
		ss.loop.srv.conns.fenced.Add(1)
		return
	}
	switch op {
	case codec.OpPutBody:
		if a.Err != nil {
			out.add(codec.ReplyOutOfMemory) // the log's disk is full
			return
		}
		out.buf = codec.AppendInserted(out.buf, a.N)

	case codec.OpUse, codec.OpListTubeUsed:
		out.buf = codec.AppendUsing(out.buf, ss.queue().UsedTube())
	case codec.OpWatch:
		out.buf = codec.AppendWatching(out.buf, int(a.N))
	case codec.OpIgnore:
		if a.OK {
			out.buf = codec.AppendWatching(out.buf, int(a.N))
		} else {
			out.add(codec.ReplyNotIgnored)
		}
	case codec.OpListTubesWatched:
		out.appendYAML(func(b []byte) []byte { return codec.AppendTubeList(b, ss.queue().Watched()) })
	case codec.OpListTubes:
		out.appendYAML(func(b []byte) []byte { return codec.AppendTubeList(b, a.Tubes) })

	case codec.OpReserve, codec.OpReserveWithTimeout:
		switch a.Reserve {
		case store.Reserved:
			ss.appendAnswerJob(out, codec.WordReserved, a)
		case store.DeadlineSoon:
			out.add(codec.ReplyDeadlineSoon)
		default:
			out.add(codec.ReplyTimedOut)
		}
	case codec.OpReserveJob:
		if !a.found() {
			out.add(codec.ReplyNotFound)
			return
		}
		ss.markWorker() // only a reserve-job that succeeds makes a worker
		ss.appendAnswerJob(out, codec.WordReserved, a)

	case codec.OpDelete:
		out.okOrNotFound(a.OK, codec.ReplyDeleted)
	case codec.OpRelease:
		// beanstalkd answers OUT_OF_MEMORY when the binlog refuses a release.
		out.replyFor(a.Err, codec.ReplyReleased, codec.ReplyOutOfMemory)
	case codec.OpBury:
		// ... and INTERNAL_ERROR when it refuses a bury.
		out.replyFor(a.Err, codec.ReplyBuried, codec.ReplyInternalError)
	case codec.OpTouch:
		out.okOrNotFound(a.OK, codec.ReplyTouched)
	case codec.OpKick:
		out.buf = codec.AppendKicked(out.buf, a.N)
	case codec.OpKickJob:
		// ... and NOT_FOUND when it refuses a kick-job.
		out.replyFor(a.Err, codec.ReplyKicked, codec.ReplyNotFound)

	case codec.OpPeek, codec.OpPeekReady, codec.OpPeekDelayed, codec.OpPeekBuried:
		if !a.found() {
			out.add(codec.ReplyNotFound)
			return
		}
		ss.appendAnswerJob(out, codec.WordFound, a)

	case codec.OpStats:
		out.appendYAML(func(b []byte) []byte {
			st := ss.loop.srv.serverStats(&a.Stats)
			return codec.AppendServerStats(b, &st)
		})
	case codec.OpStatsJob:
		if !a.OK {
			out.add(codec.ReplyNotFound)
			return
		}
		out.appendYAML(func(b []byte) []byte { return appendJobStats(b, &a.JobStats) })
	case codec.OpStatsTube:
		if !a.OK {
			out.add(codec.ReplyNotFound)
			return
		}
		out.appendYAML(func(b []byte) []byte { return appendTubeStats(b, &a.TubeStats) })
	case codec.OpPauseTube:
		out.okOrNotFound(a.OK, codec.ReplyPaused)
	default:
		out.add(codec.ReplyInternalError)
	}
}

// putHeader handles put's command line. beanstalkd counts cmd-put for any
// header whose four integers parse, and makes the job (takes its id, and
// starts its age) before the body arrives, so an EXPECTED_CRLF or
// DRAINING put still uses an id, and a body that comes slowly makes an
// older job.
func (ss *session) putHeader(cmd *codec.Command, q Queue) {
	ss.loop.srv.count(codec.CmdPut)
	if cmd.Status == codec.PutTooBig {
		return // JOB_TOO_BIG once the body has been discarded
	}
	ss.markProducer()
	ss.parser.SetPutID(q.NextID())
	if alloc := ss.loop.srv.bodyAlloc; alloc != nil {
		ss.parser.SetBodyAlloc(alloc)
	}
}

// putAccepted reports whether a put's body goes to the queue; if not, it
// appends the refusal and gives the body back.
func (ss *session) putAccepted(cmd *codec.Command, out *replies) bool {
	switch {
	case cmd.Status == codec.ExpectedCRLF:
		out.add(codec.ReplyExpectedCRLF)
	case ss.loop.srv.draining.Load():
		out.add(codec.ReplyDraining)
	default:
		return true
	}
	ss.dropBody(cmd)
	return false
}

// dropBody gives the body of a put that is not stored back to the pool
// that made it, if one did.
func (ss *session) dropBody(cmd *codec.Command) {
	if p := ss.loop.srv.bodies; p != nil && !cmd.BodyAliased {
		p.recycle(cmd.Body)
	}
}

func (ss *session) reserve(q Queue, a *Answer, timeout time.Duration) bool {
	ss.markWorker()
	if ss.inputEnded() {
		// beanstalkd ends a reserve that waits on a half-closed
		// connection at once (TIMED_OUT): the client can send nothing
		// that a wait would let through.
		timeout = 0
	}
	return q.Reserve(timeout, a)
}

func (ss *session) markProducer() {
	if !ss.producer {
		ss.producer = true
		ss.loop.srv.conns.producers.Add(1)
	}
}

func (ss *session) markWorker() {
	if !ss.worker {
		ss.worker = true
		ss.loop.srv.conns.workers.Add(1)
	}
}

// appendJob appends a RESERVED or FOUND reply. The store has already made
// the client wait, like the reply to a change, until the job's put may be
// acknowledged. A job is not handed out by a member whose leadership is
// not confirmed (Config.Leased): the session ends instead (endFenced).
func (ss *session) appendJob(out *replies, word string, j *store.Job) {
	if leased := ss.loop.srv.cfg.Leased; word == codec.WordReserved && leased != nil && !leased() {
		ss.end = endFenced
		ss.loop.srv.conns.fenced.Add(1)
		return
	}
	out.appendJob(word, j.ID(), j.Body())
}

// appendAnswerJob appends the RESERVED or FOUND reply of a's job: a
// store's (appendJob), or one another member's store answered for.
func (ss *session) appendAnswerJob(out *replies, word string, a *Answer) {
	if a.Job != nil {
		ss.appendJob(out, word, a.Job)
		return
	}
	out.appendJob(word, a.JobID, a.JobBody)
}
