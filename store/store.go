package store

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// ErrNotFound is returned by lookups of a job or tube that does not exist
// (or is not in a state the operation accepts).
var ErrNotFound = errors.New("store: not found")

// DefaultTube is the tube every client uses and watches at first. It
// exists for as long as the store does.
const DefaultTube = "default"

// MinTTR is the shortest time-to-run: beanstalkd turns a ttr below one
// second into one second.
const MinTTR = time.Second

// DeadlineMargin is beanstalkd's safety margin: a client whose reserved job
// is due within this long gets DEADLINE_SOON instead of blocking.
const DeadlineMargin = time.Second

// Store holds every tube and job. It is safe for concurrent use; see doc.go
// for the lock order.
type Store struct {
	now      func() int64 // monotonic nanoseconds; immutable
	wallBase int64        // immutable: wall-clock ns at monotonic 0
	log      Journal      // immutable; nil keeps everything in memory
	acks     AckSource    // immutable; nil with no log
	timers   *timers
	stop     chan struct{}
	done     chan struct{}

	// idBase is the first id of the store's prefix less one
	// (Options.IDPrefix): immutable.
	idBase   uint64
	lastID   atomic.Uint64
	idMark   atomic.Uint64 // the logged id watermark (see NextID)
	idMarkMu sync.Mutex    // serialises watermark records

	// clock is the replicated clock, wall ns (Clock): the latest KindClock
	// applied, or read by this store as a leader. Only raised, but by
	// Reset.
	clock atomic.Int64
	// dedupMu guards dedup, the outcomes of keyed requests (dedup.go); a
	// leaf, as jobShard.mu. The pointer is immutable: nil without
	// Options.Dedup.
	dedupMu sync.Mutex
	dedup   *DedupTable

	// refsMu guards remote: other members' sessions' references to tubes
	// (refs.go). Taken before registryMu, never under a store lock.
	refsMu sync.Mutex
	remote map[remoteRef]remoteCounts

	stamps stamps // tubes' creation stamps (stamps.go)

	registryMu sync.RWMutex
	tubes      map[string]*Tube // guarded by registryMu
	tubeList   []*Tube          // guarded by registryMu; beanstalkd's order (swap-remove)
	// pauses are the pauses SetPauses gave of tubes this store did not
	// hold then, taken by the tube once made (pauses.go). Guarded by
	// registryMu.
	pauses map[string]Pause
	// moved are the figures of imported tubes freed at once, for when
	// they are made again (movedFigures). Guarded by registryMu.
	moved map[string]movedFigures
	// logPauses is Options.LogPauses: immutable. leading: the store
	// serves, and logs the pauses freed tubes drop (Lead).
	logPauses bool
	leading   atomic.Bool
	// resets counts Reset's: a bulk change (an import, a drop, a clear,
	// a kick of a tube) that began before one stops at its next job
	// (resetSince), so that a store rebuilt from its log holds nothing
	// the log does not.
	resets atomic.Uint64
	// betweenCopyBatches, set by tests only (before the store is used),
	// runs between ExportTubeCopy's holds of a tube's lock.
	betweenCopyBatches func()
	// beforeCopyHold, set by tests only, runs in ExportTubeCopy once the
	// tube notes its changes, before the hold that takes its jobs.
	beforeCopyHold func()

	defaultT *Tube // immutable

	shards [jobShards]jobShard

	counts globalCounts

	// holding stops jobs from being handed out for good (HoldJobs);
	// pausing, while it is above 0 (PauseJobs, ResumeJobs).
	holding atomic.Bool
	pausing atomic.Int32

	// recycle, if set (SetRecycler), is given the body of every job the
	// store forgets; set before the store is shared.
	recycle func(body []byte)
}

// SetRecycler has the store hand recycle the body of every job it forgets
// (deleted by any path, or refused by the log), from the goroutine that
// deleted it, under the job's tube lock: recycle must take no lock of the
// store's, nor block. The store no longer reads the body then, but readers
// that found the job before it went may still be reading it: whoever
// reuses the memory must wait for them (the engine's body pool does; see
// Client.Alive). A body the store was given by the caller is the only kind
// it hands back. Call it before the store is shared; only an in-memory
// store may have one: a log or a journal reads bodies after their jobs
// are gone.
func (s *Store) SetRecycler(recycle func(body []byte)) {
	if s.log != nil {
		panic("store: a recycler on a store with a log")
	}
	s.recycle = recycle
}

// HoldJobs stops handing jobs out, for a graceful shutdown: a reserve
// waits (or times out) as if every tube were empty, blocked reserves stay
// blocked, and reserve-job finds nothing. Everything else keeps working,
// so clients can finish the jobs they hold. It cannot be undone (a
// handover's pause can: PauseJobs).
func (s *Store) HoldJobs() { s.holding.Store(true) }

// withheld reports whether jobs are not handed out now: HoldJobs, or a
// PauseJobs not yet resumed.
func (s *Store) withheld() bool { return s.holding.Load() || s.pausing.Load() > 0 }

// globalCounts are the server-wide job figures; each is changed under the
// lock of the tube whose job moved, so they are exact whenever no operation
// is in flight.
type globalCounts struct {
	urgent, ready, reserved, delayed, buried atomic.Int64
	totalJobs, timeouts, waiting             atomic.Int64
}

// Options configure a Store.
type Options struct {
	// Now returns monotonic nanoseconds. Nil means the real clock.
	Now func() int64
	// Log, if set, makes every change a restart must see durable: jobs it
	// recovered are loaded by New, and the caller then starts it with
	// Log.Start(store) so compaction can move jobs.
	Log *wal.Log
	// Journal, if set instead of Log, is where changes are written: a
	// cluster's replicated log, or a test's. It is recovered from as Log
	// is.
	Journal Journal
	// Acks, with a Log or Journal, publishes how far changes may be
	// acknowledged in place of the log's durable position: a cluster's
	// commit position, or a test's gate. Nil means the log's.
	Acks AckSource
	// IDPrefix is the prefix of the ids the store issues: a cluster's
	// shard group takes its own (docs/design/shards.md, 4), so ids are
	// unique across groups and name their group. Ids are prefix <<
	// IDSeqBits | sequence, from 1; 0 gives today's ids, 1, 2, 3...
	// Applied and recovered ids raise the counter only within the prefix:
	// a job moved in from another group keeps its id and moves nothing.
	IDPrefix uint8
	// Dedup keeps a table of keyed requests' outcomes, so that a request
	// resent after a failover is answered once (dedup.go;
	// docs/design/shards.md 5.6): a cluster's shard group sets it. Without
	// it the keyed calls are the unkeyed ones, and applied keys and
	// KindReq records are ignored. A single node's Log cannot have it: its
	// sessions end with it, and its journal holds no key.
	Dedup bool
	// LogPauses logs each pause-tube (a wal.KindMeta record, MetaPause),
	// and the pause a tube freed drops, so that a cluster's replicas keep
	// the pauses (internal/replication's TubeBook) and the next leader's
	// store takes them (SetPauses). A single node's pauses are not
	// logged, as beanstalkd's are not.
	LogPauses bool
}

// IDSeqBits is the width of an id's sequence within its prefix; the 8
// bits above it are the prefix, so every id is below 2^53, which
// JavaScript clients parse exactly.
const IDSeqBits = 45

// New returns a running store; call Close to stop its timer goroutine.
func New(opts Options) *Store {
	log := opts.Journal
	if opts.Log != nil { // a nil *wal.Log is no nil Journal
		log = opts.Log
	}
	return newStore(opts, log)
}

// newStore is New with the log given as a Journal (nil: in memory).
func newStore(opts Options, log Journal) *Store {
	now := opts.Now
	if now == nil {
		start := time.Now()
		now = func() int64 { return int64(time.Since(start)) }
	}
	s := &Store{
		now:    now,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		tubes:  make(map[string]*Tube),
		idBase: uint64(opts.IDPrefix) << IDSeqBits,
	}
	s.lastID.Store(s.idBase)
	s.logPauses = opts.LogPauses
	s.wallBase = time.Now().UnixNano() - now()
	s.log = log
	if opts.Dedup {
		if opts.Log != nil {
			panic("store: Options.Dedup on a single node's Log")
		}
		s.dedup = NewDedupTable()
	}
	if s.log != nil {
		s.acks = opts.Acks
		if s.acks == nil {
			s.acks = logAcks{s.log}
		}
	}
	s.timers = newTimers(now)
	s.registryMu.Lock()
	s.defaultT = s.acquireTubeLocked(DefaultTube) // the permanent reference
	s.registryMu.Unlock()
	if s.log != nil {
		s.recover()
	}
	go func() {
		defer close(s.done)
		s.timers.run(s.stop)
	}()
	return s
}

// Close stops the timer goroutine. The store must not be used afterwards.
func (s *Store) Close() {
	close(s.stop)
	<-s.done
}

// Now is the store's clock, in monotonic nanoseconds.
func (s *Store) Now() int64 { return s.now() }

// NextID takes the next job id. Ids are never reused within a process, and
// a put that fails after its header (EXPECTED_CRLF, DRAINING) still uses one,
// as in beanstalkd.
//
// With a log, the counter runs behind a watermark the log records ahead of
// it (wal.KindIDs): an id is taken before its put is durable, and after
// a crash it must not be issued again. A restart
// therefore continues above the watermark, so ids jump by up to idSlack.
func (s *Store) NextID() uint64 {
	id := s.lastID.Add(1)
	if s.log != nil && id+idSlack/2 > s.idMark.Load() {
		s.advanceIDMark(id)
	}
	return id
}

// idSlack is how far ahead of the id counter the logged watermark runs; a
// new watermark is logged when half of it is used, so it is durable long
// before the ids it covers are issued.
const idSlack = 4096

func (s *Store) advanceIDMark(id uint64) {
	s.idMarkMu.Lock()
	defer s.idMarkMu.Unlock()
	if id+idSlack/2 <= s.idMark.Load() {
		return
	}
	mark := id + idSlack
	r := wal.Record{Kind: wal.KindIDs, ID: mark}
	// Best effort: on a full disk the put itself is refused anyway.
	if _, _, err := s.log.Append(&r, wal.Loc{}); err == nil {
		s.idMark.Store(mark)
	}
}

// peek finds a live job by id, and shows it to c if c is not nil.
func (s *Store) peek(id uint64, c *Client) (*Job, bool) {
	j := s.lookup(id)
	if j == nil {
		return nil, false
	}
	t := j.tube
	t.mu.Lock()
	live := j.state != StateInvalid
	if live && c != nil {
		c.showLocked(j)
	}
	t.mu.Unlock()
	return j, live
}

// Store is the store c is a client of: what a caller holding only the
// client (the engine's Queue on one node) asks about tubes and figures.
func (c *Client) Store() *Store { return c.s }

// Alive reports whether j is still in the store: not deleted. With a
// recycler (SetRecycler), a job's body may be read only while this holds,
// checked after the reader announced itself to whoever recycles.
func (c *Client) Alive(j *Job) bool {
	t := j.tube
	t.mu.Lock()
	live := j.state != StateInvalid
	t.mu.Unlock()
	return live
}

// PeekBody is Peek for a reader outside the engine's event loops (the
// admin API): it returns a copy of the job's body, made under the tube
// lock, so that the reader never touches memory a recycler (SetRecycler)
// may reuse once the job is deleted.
func (c *Client) PeekBody(id uint64) (*Job, []byte, bool) {
	j := c.s.lookup(id)
	if j == nil {
		return nil, nil, false
	}
	t := j.tube
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.state == StateInvalid {
		return nil, nil, false
	}
	c.showLocked(j)
	return j, bytes.Clone(j.Body()), true
}

// acquireTubeLocked returns the named tube, creating it, with one more
// reference. registryMu must be held for writing.
func (s *Store) acquireTubeLocked(name string) *Tube {
	t := s.tubes[name]
	if t == nil {
		t = newTube(s, name)
		t.stamp = s.nextStampLocked()
		s.tubes[name] = t
		t.listIndex = len(s.tubeList)
		s.tubeList = append(s.tubeList, t)
		s.resumePauseLocked(t)
		s.resumeMovedLocked(t)
	}
	t.refs.Add(1)
	return t
}

// acquireTube is acquireTubeLocked for callers holding no lock.
func (s *Store) acquireTube(name []byte) *Tube {
	s.registryMu.RLock()
	t := s.tubes[string(name)]
	if t != nil {
		// Safe under the read lock: a tube is freed only under the write
		// lock, after seeing zero references.
		t.refs.Add(1)
	}
	s.registryMu.RUnlock()
	if t != nil {
		return t
	}
	s.registryMu.Lock()
	t = s.acquireTubeLocked(string(name))
	s.registryMu.Unlock()
	return t
}

// releaseTube drops one reference and frees the tube when none remain,
// forgetting its pause as beanstalkd does. Must be called with no tube lock
// held (registryMu comes first in the lock order).
func (s *Store) releaseTube(t *Tube) { s.releaseTubeKeeping(t, false) }

// releaseTubeKeeping is releaseTube; with keepPause, a pause the tube's
// freeing drops is kept, unlogged, for when the tube is made again
// (resumePauseLocked): an import's, whose tube the moved sessions'
// references reach after it (ImportTube).
func (s *Store) releaseTubeKeeping(t *Tube, keepPause bool) {
	if t.refs.Add(-1) > 0 {
		return
	}
	s.registryMu.Lock()
	defer s.registryMu.Unlock()
	if t.refs.Load() != 0 || s.tubes[t.name] != t {
		return // taken again, or already freed
	}
	delete(s.tubes, t.name)
	last := len(s.tubeList) - 1
	moved := s.tubeList[last]
	s.tubeList[t.listIndex] = moved
	moved.listIndex = t.listIndex
	s.tubeList[last] = nil
	s.tubeList = s.tubeList[:last]
	t.mu.Lock()
	switch {
	case !t.pausedLocked(s.now()):
	case keepPause:
		s.keepPauseLocked(t.name, Pause{Dur: time.Duration(t.pauseDur), Until: s.wall(t.pauseUntil)})
	default:
		s.logPause(nil, t.name, 0, 0, wal.Req{}) // the pause goes with the tube, as in beanstalkd
	}
	if keepPause {
		s.keepMovedLocked(t)
	}
	t.pauseDur, t.pauseUntil = 0, 0
	s.timers.cancel(&t.pauseTimer)
	t.mu.Unlock()
}

// withTube runs f on the named tube under its lock, if it exists.
func (s *Store) withTube(name []byte, f func(t *Tube)) bool {
	s.registryMu.RLock()
	defer s.registryMu.RUnlock()
	t := s.tubes[string(name)]
	if t == nil {
		return false
	}
	t.mu.Lock()
	f(t)
	t.mu.Unlock()
	return true
}

// TubeNames lists the tubes in beanstalkd's order: creation order, except
// that a freed tube's slot is taken by the last one.
func (s *Store) TubeNames() []string {
	s.registryMu.RLock()
	names := make([]string, len(s.tubeList))
	for i, t := range s.tubeList {
		names[i] = t.name
	}
	s.registryMu.RUnlock()
	return names
}

// PauseTube stops reserves from the named tube for d. A d of 0 ends the
// tube's pause at once, its waiters served before it returns: beanstalkd
// pauses for 1 ns, which the prottick before its next command ends.
// Reports whether the tube exists. With Options.LogPauses the pause is
// logged (pauses.go).
func (s *Store) PauseTube(name []byte, d time.Duration) bool {
	return s.pauseTube(name, d, nil, wal.Req{})
}

// PauseTube is Store.PauseTube for c's command: with Options.LogPauses,
// c's reply waits for the pause's record (PendingAck).
func (c *Client) PauseTube(name []byte, d time.Duration) bool {
	return c.s.pauseTube(name, d, c, wal.Req{})
}

// endPauseLocked ends t's pause as pause-tube 0 does: beanstalkd's 1 ns,
// logged as such, ended now, its ready jobs handed to its waiters (the
// caller completes hs once t is unlocked). t.mu must be held.
func (s *Store) endPauseLocked(c *Client, t *Tube, now int64, key wal.Req, hs handoffs) handoffs {
	s.logPause(c, t.name, 1, s.wall(now+1), key)
	return t.unpauseLocked(now, hs)
}

func (s *Store) pauseTube(name []byte, d time.Duration, c *Client, key wal.Req) bool {
	var hs handoffs
	ok := s.withTube(name, func(t *Tube) {
		now := s.now()
		t.cmdPause++
		if d <= 0 {
			hs = s.endPauseLocked(c, t, now, key, hs)
			return
		}
		// A pause that has run out but that the timer has not ended yet
		// ends here, before the new one: beanstalkd's prottick, which
		// runs between any two commands, would have ended it and served
		// the tube's waiters, whom the new pause would otherwise keep
		// waiting (a "pause-tube t 0" pipelined before another pause).
		if t.pauseDur > 0 && t.pauseUntil <= now {
			hs = t.unpauseLocked(now, hs)
		}
		t.pauseDur = int64(d)
		t.pauseUntil = now + int64(d)
		s.timers.schedule(&t.pauseTimer, t.pauseUntil)
		s.logPause(c, t.name, t.pauseDur, s.wall(t.pauseUntil), key)
	})
	s.complete(hs)
	return ok
}
