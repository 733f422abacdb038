package engine

import (
	"time"

	"github.com/sproutmq/sprout/store"
)

// Queue is what a session's commands that touch the queue run on: one per
// connection, called only on its event loop. On a single node it is the
// connection's store.Client (localQueue); a cluster member's router
// implements it too (Config.Queues), sending a command to the group that
// owns it.
//
// A method that takes an *Answer either answers now, filling in the fields
// its command's reply reads (see Answer) and returning true, or says the
// answer is pending by returning false: the Queue then delivers it later,
// exactly once, through the Answers it was made with, unless it is closed
// first. While an answer is pending the engine calls no method but
// CancelWait, AckNeeded and Close: one command is in flight per session,
// but for the commands a Pipeliner pipelines.
// The *Answer is the loop's scratch, valid only during the call, and
// cleared of the command before's answer but for its statistics, which
// the commands that read them set whole (session.execute). A method
// copies what it keeps of its []byte arguments (tube names and put bodies
// alias the connection's input), except a put body longer than
// store.MaxCopiedBody, which the engine hands over for good, as to the
// store.
type Queue interface {
	// Use makes tube the used one (reply USING UsedTube()).
	Use(tube []byte, a *Answer) bool
	// Watch adds tube to the watch list; a.N is the number watched.
	Watch(tube []byte, a *Answer) bool
	// Ignore drops tube from the watch list; a.OK is false when it was
	// the last one (NOT_IGNORED), else a.N is the number watched.
	Ignore(tube []byte, a *Answer) bool
	// UsedTube and Watched answer list-tube-used and list-tubes-watched,
	// always at once: the session knows them.
	UsedTube() string
	Watched() []string
	// ListTubes sets a.Tubes to every tube's name, in beanstalkd's order.
	ListTubes(a *Answer) bool

	// NextID takes the id of the put whose command line just arrived: as
	// in beanstalkd, a put refused later still uses its id.
	NextID() uint64
	// Clock reads the queue's own clock. A put whose body has not come by
	// the end of the read that brought its command line notes the time
	// by it, since, as in beanstalkd, the job's age counts from its
	// command line, not from the end of its body.
	Clock() int64
	// Put stores a job with the id NextID gave, made at at (by Clock), or
	// now if at is codec.Unstamped (its body came with its command line);
	// a.N is its id, or a.Err the refusal (OUT_OF_MEMORY).
	Put(id uint64, at int64, pri, delay, ttr uint32, body []byte, a *Answer) bool
	// PutRefused says that the put whose id NextID gave was refused with
	// its body (EXPECTED_CRLF, DRAINING): no Put comes for it, and its id
	// stays used, as in beanstalkd.
	PutRefused()
	// Reserve reserves a job from the watched tubes, waiting at most
	// timeout (a negative one forever): a.Reserve says how it ended, a.Job
	// is the job when Reserved. A reserve that waits is pending.
	Reserve(timeout time.Duration, a *Answer) bool
	// CancelWait ends a pending reserve at once, if it is still waiting,
	// and reports whether it did: then its answer never comes.
	CancelWait() bool
	// ReserveJob reserves job id; a.Job is nil when not found.
	ReserveJob(id uint64, a *Answer) bool
	// Delete, Touch: a.OK is false when not found.
	Delete(id uint64, a *Answer) bool
	Touch(id uint64, a *Answer) bool
	// Release, Bury, KickJob: a.Err is nil, store.ErrNotFound, or the
	// log's refusal.
	Release(id uint64, pri, delay uint32, a *Answer) bool
	Bury(id uint64, pri uint32, a *Answer) bool
	KickJob(id uint64, a *Answer) bool
	// Kick kicks at most n jobs of the used tube; a.N is how many.
	Kick(n uint32, a *Answer) bool
	// Peek and the used tube's PeekReady, PeekDelayed and PeekBuried:
	// a.Job, nil when there is none.
	Peek(id uint64, a *Answer) bool
	PeekReady(a *Answer) bool
	PeekDelayed(a *Answer) bool
	PeekBuried(a *Answer) bool
	// JobStats and TubeStats fill a.JobStats or a.TubeStats; a.OK is
	// false when not found. PauseTube: a.OK is false when not found.
	JobStats(id uint64, a *Answer) bool
	TubeStats(tube []byte, a *Answer) bool
	PauseTube(tube []byte, d time.Duration, a *Answer) bool
	// Stats sets a.Stats to the queue's part of stats: its jobs and tubes
	// (the server adds its connections, commands and process).
	Stats(a *Answer) bool

	// AckNeeded is the position the replies given so far wait for, and
	// the AckSource that publishes it; a nil source means they wait for
	// nothing (in memory, or answers that arrive acknowledged).
	AckNeeded() (store.AckSource, uint64)
	// Close ends the session's use of the queue: its reservations go back
	// to ready, and a pending answer is dropped, never delivered.
	Close()
}

// Answer is a Queue's answer to one command. A method fills in only the
// fields its command's reply reads (their comments say which); the
// others may hold anything.
type Answer struct {
	// Job: reserve (when Reserve is store.Reserved), reserve-job and the
	// peeks; nil means NOT_FOUND, unless JobID is set.
	Job *store.Job
	// JobID and JobBody are a job that lives in another member's store
	// (a router's answer): Job is nil, JobID not 0, and JobBody its data
	// as stored, ending in "\r\n", the answer's own. Such a job is not
	// fenced by Config.Leased: its group's leader answered for it.
	JobID   uint64
	JobBody []byte
	// N: put's job id, kick's count, the tubes watch and ignore leave.
	N uint64
	// Err: the refusal of put, release, bury and kick-job.
	Err error
	// Tubes: list-tubes.
	Tubes []string
	// Reserve: how a reserve ended.
	Reserve store.ReserveResult
	// Failed, when set, is the answer whatever the command: the queue
	// could not run it (a cluster group without a leader, docs/design/
	// shards.md 5.7).
	Failed Failure
	// OK: delete, touch, ignore, stats-job, stats-tube and pause-tube.
	OK        bool
	Stats     store.Stats     // stats
	JobStats  store.JobStats  // stats-job
	TubeStats store.TubeStats // stats-tube

	// Behind is not an answer but what the engine tells the method it
	// calls: the command comes behind others whose answers are pending
	// (Pipeliner), so one given now would be sent after theirs, and held
	// for the log by what AckNeeded says when theirs come. A Queue that
	// could answer now (a cluster member's session on a group it leads)
	// sends such a command the other way.
	Behind bool
}

// Failure is how a command the queue could not run is answered.
type Failure uint8

const (
	// FailedInternal answers INTERNAL_ERROR: the command did not run.
	FailedInternal Failure = 1 + iota
	// FailedLost closes the connection without a reply, as a server that
	// died would: whether the command ran is unknown, and no reply would
	// be true.
	FailedLost
	// FailedFenced closes the connection without a reply, as a RESERVED
	// is refused while Config.Leased says no: the queue answered from a
	// store this member's leadership of is not confirmed, which a leader
	// elected meanwhile may have changed. Counted as fenced.
	FailedFenced
)

// Answers receives a Queue's pending answers: the session that made it.
type Answers interface {
	// Answered delivers the answer to the command left pending. It may be
	// called from any goroutine, once per pending answer, and must not
	// block; the reply goes out on the session's event loop.
	Answered(a Answer)
}

// localQueue is the single node's Queue: the connection's store.Client,
// at the cost of calling it directly (no allocation, no copy: the session
// holds the client, and a *localQueue is a pointer to it). A reserve that
// waits is answered through the store's Notifier, which is the session.
type localQueue store.Client

// ClientQueue is c as a Queue, exactly as a single node's connection
// uses its client: what a router's session runs on while its member
// serves the group itself. c's Notifier gets a blocked reserve's end.
func ClientQueue(c *store.Client) Queue { return (*localQueue)(c) }

func (q *localQueue) client() *store.Client { return (*store.Client)(q) }

func (q *localQueue) Use(tube []byte, _ *Answer) bool {
	q.client().Use(tube)
	return true
}

func (q *localQueue) Watch(tube []byte, a *Answer) bool {
	a.N = uint64(q.client().Watch(tube))
	return true
}

func (q *localQueue) Ignore(tube []byte, a *Answer) bool {
	n, ok := q.client().Ignore(tube)
	a.N, a.OK = uint64(n), ok
	return true
}

func (q *localQueue) UsedTube() string  { return q.client().UsedTube() }
func (q *localQueue) Watched() []string { return q.client().Watched() }

func (q *localQueue) ListTubes(a *Answer) bool {
	a.Tubes = q.client().Store().TubeNames()
	return true
}

func (q *localQueue) NextID() uint64 { return q.client().Store().NextID() }

func (q *localQueue) Clock() int64 { return q.client().Store().Now() }

func (q *localQueue) Put(id uint64, at int64, pri, delay, ttr uint32, body []byte, a *Answer) bool {
	j, err := q.client().PutAt(id, at, pri, delay, ttr, body)
	if a.Err = err; err == nil {
		a.N = j.ID()
	}
	return true
}

func (q *localQueue) PutRefused() {} // NextID took the id from the store

func (q *localQueue) Reserve(timeout time.Duration, a *Answer) bool {
	a.Job, a.Reserve = q.client().Reserve(timeout)
	return a.Reserve != store.Waiting
}

func (q *localQueue) CancelWait() bool { return q.client().CancelWait() }

func (q *localQueue) ReserveJob(id uint64, a *Answer) bool {
	j, ok := q.client().ReserveJob(id)
	if !ok {
		j = nil
	}
	a.Job = j
	return true
}

func (q *localQueue) Delete(id uint64, a *Answer) bool {
	a.OK = q.client().Delete(id)
	return true
}

func (q *localQueue) Touch(id uint64, a *Answer) bool {
	a.OK = q.client().Touch(id)
	return true
}

func (q *localQueue) Release(id uint64, pri, delay uint32, a *Answer) bool {
	a.Err = q.client().Release(id, pri, delay)
	return true
}

func (q *localQueue) Bury(id uint64, pri uint32, a *Answer) bool {
	a.Err = q.client().Bury(id, pri)
	return true
}

func (q *localQueue) KickJob(id uint64, a *Answer) bool {
	a.Err = q.client().KickJob(id)
	return true
}

func (q *localQueue) Kick(n uint32, a *Answer) bool {
	a.N = uint64(q.client().Kick(n))
	return true
}

func (q *localQueue) Peek(id uint64, a *Answer) bool {
	j, ok := q.client().Peek(id)
	if !ok {
		j = nil
	}
	a.Job = j
	return true
}

func (q *localQueue) PeekReady(a *Answer) bool {
	a.Job = q.client().PeekReady()
	return true
}

func (q *localQueue) PeekDelayed(a *Answer) bool {
	a.Job = q.client().PeekDelayed()
	return true
}

func (q *localQueue) PeekBuried(a *Answer) bool {
	a.Job = q.client().PeekBuried()
	return true
}

func (q *localQueue) JobStats(id uint64, a *Answer) bool {
	a.JobStats, a.OK = q.client().JobStats(id)
	return true
}

func (q *localQueue) TubeStats(tube []byte, a *Answer) bool {
	a.TubeStats, a.OK = q.client().Store().TubeStats(tube)
	return true
}

func (q *localQueue) PauseTube(tube []byte, d time.Duration, a *Answer) bool {
	a.OK = q.client().PauseTube(tube, d)
	return true
}

func (q *localQueue) Stats(a *Answer) bool {
	a.Stats = q.client().Store().Stats()
	return true
}

func (q *localQueue) AckNeeded() (store.AckSource, uint64) {
	c := q.client()
	return c.Store().Acks(), c.PendingAck()
}

func (q *localQueue) Close() { q.client().Close() }

// found reports whether the answer holds a job (Job or JobID).
func (a *Answer) found() bool { return a.Job != nil || a.JobID != 0 }
