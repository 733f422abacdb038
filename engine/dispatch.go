package engine

import (
	"errors"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// dispatch executes one parsed command and appends its reply to out. quit
// reports that the connection must close. A reserve that blocks sets
// ss.blocked and appends nothing: its reply comes through the Notifier.
func (ss *session) dispatch(cmd *codec.Command, out []byte) (_ []byte, quit bool) {
	switch cmd.Status {
	case codec.BadFormat:
		return append(out, codec.ReplyBadFormat...), false
	case codec.CountedBadFormat:
		if c, ok := cmd.Op.Counter(); ok {
			ss.srv.count(c)
		}
		return append(out, codec.ReplyBadFormat...), false
	case codec.UnknownCommand:
		return append(out, codec.ReplyUnknownCommand...), false
	}
	if c, ok := cmd.Op.Counter(); ok && cmd.Op != codec.OpPut {
		ss.srv.count(c)
	}
	st := ss.srv.store
	cl := ss.client
	switch cmd.Op {
	case codec.OpQuit:
		return out, true
	case codec.OpPut:
		return ss.putHeader(cmd, out), false
	case codec.OpPutBody:
		return ss.putBody(cmd, out), false
	case codec.OpPutTooBig:
		return append(out, codec.ReplyJobTooBig...), false

	case codec.OpUse:
		cl.Use(cmd.Tube)
		return codec.AppendUsing(out, cl.UsedTube()), false
	case codec.OpWatch:
		return codec.AppendWatching(out, cl.Watch(cmd.Tube)), false
	case codec.OpIgnore:
		n, ok := cl.Ignore(cmd.Tube)
		if !ok {
			return append(out, codec.ReplyNotIgnored...), false
		}
		return codec.AppendWatching(out, n), false
	case codec.OpListTubeUsed:
		return codec.AppendUsing(out, cl.UsedTube()), false
	case codec.OpListTubesWatched:
		return ss.appendYAML(out, func(b []byte) []byte { return codec.AppendTubeList(b, cl.Watched()) }), false
	case codec.OpListTubes:
		return ss.appendYAML(out, func(b []byte) []byte { return codec.AppendTubeList(b, st.TubeNames()) }), false

	case codec.OpReserve:
		return ss.reserve(out, -1), false
	case codec.OpReserveWithTimeout:
		return ss.reserve(out, time.Duration(cmd.Timeout)*time.Second), false
	case codec.OpReserveJob:
		j, ok := cl.ReserveJob(cmd.ID)
		if !ok {
			return append(out, codec.ReplyNotFound...), false
		}
		ss.markWorker() // only a reserve-job that succeeds makes a worker
		return ss.appendJob(out, codec.WordReserved, j), false

	case codec.OpDelete:
		return okOrNotFound(out, cl.Delete(cmd.ID), codec.ReplyDeleted), false
	case codec.OpRelease:
		// beanstalkd answers OUT_OF_MEMORY when the binlog refuses a release.
		return replyFor(out, cl.Release(cmd.ID, cmd.Pri, cmd.Delay), codec.ReplyReleased, codec.ReplyOutOfMemory), false
	case codec.OpBury:
		// ... and INTERNAL_ERROR when it refuses a bury.
		return replyFor(out, cl.Bury(cmd.ID, cmd.Pri), codec.ReplyBuried, codec.ReplyInternalError), false
	case codec.OpTouch:
		return okOrNotFound(out, cl.Touch(cmd.ID), codec.ReplyTouched), false
	case codec.OpKick:
		return codec.AppendKicked(out, uint64(cl.Kick(cmd.Count))), false
	case codec.OpKickJob:
		// ... and NOT_FOUND when it refuses a kick-job.
		return replyFor(out, cl.KickJob(cmd.ID), codec.ReplyKicked, codec.ReplyNotFound), false

	case codec.OpPeek:
		j, ok := st.Peek(cmd.ID)
		return ss.appendFound(out, j, ok), false
	case codec.OpPeekReady:
		j := cl.PeekReady()
		return ss.appendFound(out, j, j != nil), false
	case codec.OpPeekDelayed:
		j := cl.PeekDelayed()
		return ss.appendFound(out, j, j != nil), false
	case codec.OpPeekBuried:
		j := cl.PeekBuried()
		return ss.appendFound(out, j, j != nil), false

	case codec.OpStats:
		return ss.appendYAML(out, ss.srv.appendStats), false
	case codec.OpStatsJob:
		js, ok := st.JobStats(cmd.ID)
		if !ok {
			return append(out, codec.ReplyNotFound...), false
		}
		return ss.appendYAML(out, func(b []byte) []byte { return appendJobStats(b, &js) }), false
	case codec.OpStatsTube:
		ts, ok := st.TubeStats(cmd.Tube)
		if !ok {
			return append(out, codec.ReplyNotFound...), false
		}
		return ss.appendYAML(out, func(b []byte) []byte { return appendTubeStats(b, &ts) }), false
	case codec.OpPauseTube:
		ok := st.PauseTube(cmd.Tube, time.Duration(cmd.Delay)*time.Second)
		return okOrNotFound(out, ok, codec.ReplyPaused), false
	}
	return append(out, codec.ReplyInternalError...), false
}

// putHeader handles put's command line. beanstalkd counts cmd-put for any
// header whose four integers parse, and takes the job id before the body
// arrives, so an EXPECTED_CRLF or DRAINING put still uses one.
func (ss *session) putHeader(cmd *codec.Command, out []byte) []byte {
	ss.srv.count(codec.CmdPut)
	switch cmd.Status {
	case codec.PutTooBig:
		return out // JOB_TOO_BIG once the body has been discarded
	}
	ss.markProducer()
	ss.putID = ss.srv.store.NextID()
	return out
}

func (ss *session) putBody(cmd *codec.Command, out []byte) []byte {
	if cmd.Status == codec.ExpectedCRLF {
		return append(out, codec.ReplyExpectedCRLF...)
	}
	if ss.srv.draining.Load() {
		return append(out, codec.ReplyDraining...)
	}
	j, err := ss.client.Put(ss.putID, cmd.Pri, cmd.Delay, cmd.TTR, cmd.Body)
	if err != nil {
		return append(out, codec.ReplyOutOfMemory...) // the log's disk is full
	}
	return codec.AppendInserted(out, j.ID())
}

func (ss *session) reserve(out []byte, timeout time.Duration) []byte {
	ss.markWorker()
	j, r := ss.client.Reserve(timeout)
	switch r {
	case store.Reserved:
		return ss.appendJob(out, codec.WordReserved, j)
	case store.TimedOut:
		return append(out, codec.ReplyTimedOut...)
	case store.DeadlineSoon:
		return append(out, codec.ReplyDeadlineSoon...)
	}
	ss.blocked = true
	return out
}

func (ss *session) markProducer() {
	if !ss.producer {
		ss.producer = true
		ss.srv.conns.producers.Add(1)
	}
}

func (ss *session) markWorker() {
	if !ss.worker {
		ss.worker = true
		ss.srv.conns.workers.Add(1)
	}
}

// appendYAML appends "OK <n>\r\n<doc>\r\n" with doc built by build, using
// a pooled scratch buffer so the length is known before the header.
func (ss *session) appendYAML(out []byte, build func([]byte) []byte) []byte {
	doc := replyPool.Get()
	doc.B = build(doc.B)
	out = codec.AppendOK(out, doc.B)
	replyPool.Put(doc)
	return out
}

func okOrNotFound(out []byte, ok bool, reply string) []byte {
	if !ok {
		return append(out, codec.ReplyNotFound...)
	}
	return append(out, reply...)
}

// replyFor maps a store error: nil is ok, ErrNotFound is NOT_FOUND, and a
// refusal by the log is failed.
func replyFor(out []byte, err error, ok, failed string) []byte {
	switch {
	case err == nil:
		return append(out, ok...)
	case errors.Is(err, store.ErrNotFound):
		return append(out, codec.ReplyNotFound...)
	}
	return append(out, failed...)
}

func (ss *session) appendFound(out []byte, j *store.Job, ok bool) []byte {
	if !ok {
		return append(out, codec.ReplyNotFound...)
	}
	return ss.appendJob(out, codec.WordFound, j)
}

// appendJob appends a RESERVED or FOUND reply; it waits, like the reply to
// a change, until the job's put is durable.
func (ss *session) appendJob(out []byte, word string, j *store.Job) []byte {
	ss.client.Reveal(j)
	return codec.AppendJob(out, word, j.ID(), j.Body())
}
