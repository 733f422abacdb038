package engine

import (
	"bytes"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// dispatch executes one parsed command and appends its reply to out. quit
// reports that the connection must close. A reserve that blocks sets
// ss.blocked and appends nothing: its reply comes through the Notifier.
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

// execute runs every command but quit.
func (ss *session) execute(cmd *codec.Command, out *replies) {
	st := ss.loop.srv.store
	cl := &ss.client
	switch cmd.Op {
	case codec.OpPut:
		ss.putHeader(cmd)
	case codec.OpPutBody:
		out.buf = ss.putBody(cmd, out.buf)
	case codec.OpPutTooBig:
		out.add(codec.ReplyJobTooBig)

	case codec.OpUse:
		cl.Use(cmd.Tube)
		out.buf = codec.AppendUsing(out.buf, cl.UsedTube())
	case codec.OpWatch:
		out.buf = codec.AppendWatching(out.buf, cl.Watch(cmd.Tube))
	case codec.OpIgnore:
		if n, ok := cl.Ignore(cmd.Tube); ok {
			out.buf = codec.AppendWatching(out.buf, n)
		} else {
			out.add(codec.ReplyNotIgnored)
		}
	case codec.OpListTubeUsed:
		out.buf = codec.AppendUsing(out.buf, cl.UsedTube())
	case codec.OpListTubesWatched:
		out.appendYAML(func(b []byte) []byte { return codec.AppendTubeList(b, cl.Watched()) })
	case codec.OpListTubes:
		out.appendYAML(func(b []byte) []byte { return codec.AppendTubeList(b, st.TubeNames()) })

	case codec.OpReserve:
		ss.reserve(out, -1)
	case codec.OpReserveWithTimeout:
		ss.reserve(out, time.Duration(cmd.Timeout)*time.Second)
	case codec.OpReserveJob:
		j, ok := cl.ReserveJob(cmd.ID)
		if !ok {
			out.add(codec.ReplyNotFound)
			return
		}
		ss.markWorker() // only a reserve-job that succeeds makes a worker
		ss.appendJob(out, codec.WordReserved, j)

	case codec.OpDelete:
		out.okOrNotFound(cl.Delete(cmd.ID), codec.ReplyDeleted)
	case codec.OpRelease:
		// beanstalkd answers OUT_OF_MEMORY when the binlog refuses a release.
		out.replyFor(cl.Release(cmd.ID, cmd.Pri, cmd.Delay), codec.ReplyReleased, codec.ReplyOutOfMemory)
	case codec.OpBury:
		// ... and INTERNAL_ERROR when it refuses a bury.
		out.replyFor(cl.Bury(cmd.ID, cmd.Pri), codec.ReplyBuried, codec.ReplyInternalError)
	case codec.OpTouch:
		out.okOrNotFound(cl.Touch(cmd.ID), codec.ReplyTouched)
	case codec.OpKick:
		out.buf = codec.AppendKicked(out.buf, uint64(cl.Kick(cmd.Count)))
	case codec.OpKickJob:
		// ... and NOT_FOUND when it refuses a kick-job.
		out.replyFor(cl.KickJob(cmd.ID), codec.ReplyKicked, codec.ReplyNotFound)

	case codec.OpPeek:
		if j, ok := cl.Peek(cmd.ID); ok {
			ss.appendJob(out, codec.WordFound, j)
		} else {
			out.add(codec.ReplyNotFound)
		}
	case codec.OpPeekReady:
		ss.appendFound(out, cl.PeekReady())
	case codec.OpPeekDelayed:
		ss.appendFound(out, cl.PeekDelayed())
	case codec.OpPeekBuried:
		ss.appendFound(out, cl.PeekBuried())

	case codec.OpStats:
		out.appendYAML(ss.loop.srv.appendStats)
	case codec.OpStatsJob:
		js, ok := cl.JobStats(cmd.ID)
		if !ok {
			out.add(codec.ReplyNotFound)
			return
		}
		out.appendYAML(func(b []byte) []byte { return appendJobStats(b, &js) })
	case codec.OpStatsTube:
		ts, ok := st.TubeStats(cmd.Tube)
		if !ok {
			out.add(codec.ReplyNotFound)
			return
		}
		out.appendYAML(func(b []byte) []byte { return appendTubeStats(b, &ts) })
	case codec.OpPauseTube:
		out.okOrNotFound(st.PauseTube(cmd.Tube, time.Duration(cmd.Delay)*time.Second), codec.ReplyPaused)
	default:
		out.add(codec.ReplyInternalError)
	}
}

// putHeader handles put's command line. beanstalkd counts cmd-put for any
// header whose four integers parse, and takes the job id before the body
// arrives, so an EXPECTED_CRLF or DRAINING put still uses one.
func (ss *session) putHeader(cmd *codec.Command) {
	ss.loop.srv.count(codec.CmdPut)
	if cmd.Status == codec.PutTooBig {
		return // JOB_TOO_BIG once the body has been discarded
	}
	ss.markProducer()
	ss.parser.SetPutID(ss.loop.srv.store.NextID())
	if alloc := ss.loop.srv.bodyAlloc; alloc != nil {
		ss.parser.SetBodyAlloc(alloc)
	}
}

func (ss *session) putBody(cmd *codec.Command, out []byte) []byte {
	if cmd.Status == codec.ExpectedCRLF {
		ss.dropBody(cmd)
		return append(out, codec.ReplyExpectedCRLF...)
	}
	if ss.loop.srv.draining.Load() {
		ss.dropBody(cmd)
		return append(out, codec.ReplyDraining...)
	}
	body := cmd.Body
	if cmd.BodyAliased && len(body) > store.MaxCopiedBody {
		body = bytes.Clone(body) // the store keeps it; it aliases the input
	}
	j, err := ss.client.Put(cmd.ID, cmd.Pri, cmd.Delay, cmd.TTR, body)
	if err != nil {
		return append(out, codec.ReplyOutOfMemory...) // the log's disk is full
	}
	return codec.AppendInserted(out, j.ID())
}

// dropBody gives the body of a put that is not stored back to the pool
// that made it, if one did.
func (ss *session) dropBody(cmd *codec.Command) {
	if p := ss.loop.srv.bodies; p != nil && !cmd.BodyAliased {
		p.recycle(cmd.Body)
	}
}

func (ss *session) reserve(out *replies, timeout time.Duration) {
	ss.markWorker()
	if ss.end == endHalfClosed {
		// beanstalkd ends a reserve that waits on a half-closed
		// connection at once (TIMED_OUT): the client can send nothing
		// that a wait would let through.
		timeout = 0
	}
	j, r := ss.client.Reserve(timeout)
	switch r {
	case store.Reserved:
		ss.appendJob(out, codec.WordReserved, j)
	case store.TimedOut:
		out.add(codec.ReplyTimedOut)
	case store.DeadlineSoon:
		out.add(codec.ReplyDeadlineSoon)
	default:
		ss.blocked = true
	}
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

func (ss *session) appendFound(out *replies, j *store.Job) {
	if j == nil {
		out.add(codec.ReplyNotFound)
		return
	}
	ss.appendJob(out, codec.WordFound, j)
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
