package store

import (
	"bytes"
	"cmp"
	"slices"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// Operators' tools (the admin API, the console) list a tube's jobs and
// change many at once. They are clients like any connection: every job
// they are shown raises their PendingAck, and every change takes the path
// the protocol command that does it takes: logged, counted, and held until
// it may be acknowledged. What the protocol cannot do at all (list a
// tube's jobs, clear it) is done in bounded steps, so no tube lock is held
// for long however many jobs a tube has.

const (
	// MaxListPage is the most jobs one page of ListJobs returns.
	MaxListPage = 10000
	// keyBatch is how many jobs ListJobs looks at per hold of the tube lock.
	keyBatch = 4096
	// bulkBatch is how many jobs ClearTube and KickTube move per hold of
	// the tube lock, so commands on the tube wait for at most one batch.
	bulkBatch = 256
	// bulkRest is how long a bulk change sleeps between batches, in
	// multiples of the batch's own time: it takes a third of a core at
	// most. runtime.Gosched between batches (the first version) yields
	// only to goroutines: the clear kept a core busy, and with the event
	// loop and the clients on a two-core machine the protocol's round
	// trips waited for the OS scheduler, at 9.6× their idle p99
	// (benchmarks/cmd/adminbench, a million jobs). Sleeping as long as the
	// batch took brought that to 0.75–1.7×, and twice as long, at 2 s for
	// a million jobs, to 0.9–1.2×.
	bulkRest = 2
)

// ListCursor is where a page of ListJobs ended: the order key of its last
// job. Key is the job's priority (ready), deadline in the store's clock
// (delayed, reserved) or burial sequence (buried); ties go by id.
type ListCursor struct {
	Key int64
	ID  uint64
}

func (a ListCursor) compare(b ListCursor) int {
	return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.ID, b.ID))
}

// JobView is a job as a listing shows it: its stats-job figures and body.
type JobView struct {
	JobStats
	// Body is the job's data without the trailing "\r\n". It is the job's
	// own memory (a copy where bodies are recycled, SetRecycler): read it,
	// never change it.
	Body []byte
}

// findTube returns the named tube with one more reference, or nil when it
// does not exist; unlike acquireTube it never makes one. The caller
// releases it (releaseTube).
func (s *Store) findTube(name []byte) *Tube {
	s.registryMu.RLock()
	defer s.registryMu.RUnlock()
	t := s.tubes[string(name)]
	if t != nil {
		t.refs.Add(1)
	}
	return t
}

// listed is a candidate of a listing with its order key.
type listed struct {
	at ListCursor
	j  *Job
}

// ListJobs returns up to limit of the named tube's jobs in state, after
// the cursor (nil: from the first), and where the next page starts (nil
// when there is none). Ready jobs come by (priority, id), delayed and
// reserved by deadline, buried oldest burial first. ok is false when the
// tube does not exist.
//
// Paging is stable while jobs come and go: a job that stays in its state
// with its key unchanged is listed exactly once over the pages, in order.
// A page costs work in proportion to the jobs in that state (they are
// gathered and sorted each time), but the tube lock is held only to copy
// pointers (ready, delayed), or for keyBatch jobs at a time.
func (c *Client) ListJobs(tube []byte, state State, after *ListCursor, limit int) (page []JobView, next *ListCursor, ok bool) {
	s := c.s
	t := s.findTube(tube)
	if t == nil {
		return nil, nil, false
	}
	defer s.releaseTube(t)
	limit = min(max(limit, 1), MaxListPage)
	var cands []listed
	if state == StateReserved {
		cands = s.reservedIn(t)
	} else {
		cands = t.gather(state)
	}
	if after != nil {
		cands = slices.DeleteFunc(cands, func(l listed) bool { return l.at.compare(*after) <= 0 })
	}
	slices.SortFunc(cands, func(a, b listed) int { return a.at.compare(b.at) })
	if len(cands) > limit {
		cands = cands[:limit]
		next = &ListCursor{}
	}
	page = make([]JobView, 0, len(cands))
	for start := 0; start < len(cands); start += keyBatch {
		t.mu.Lock()
		now := s.now()
		for _, l := range cands[start:min(start+keyBatch, len(cands))] {
			// Moved or changed since its key was read: it belongs elsewhere
			// in the order now, or nowhere.
			if at, ok := t.keyLocked(l.j, state); !ok || at != l.at {
				continue
			}
			c.showLocked(l.j)
			body := l.j.Body()
			body = body[:len(body)-2]
			if s.recycle != nil {
				// The page outlives the lock, and a deleted job's body
				// may then be reused.
				body = bytes.Clone(body)
			}
			page = append(page, JobView{JobStats: s.jobStatsLocked(l.j, now), Body: body})
		}
		t.mu.Unlock()
	}
	if next != nil {
		*next = cands[len(cands)-1].at
	}
	return page, next, true
}

// keyLocked is j's order key in a listing of state, and whether j is in
// that state in t. t.mu must be held.
func (t *Tube) keyLocked(j *Job, state State) (ListCursor, bool) {
	if j.tube != t || j.state != state {
		return ListCursor{}, false
	}
	switch state {
	case StateReady:
		return ListCursor{Key: int64(j.pri), ID: j.id}, true
	default: // delayed and reserved: the deadline; buried: the burial sequence (buryLocked)
		return ListCursor{Key: j.deadline, ID: j.id}, true
	}
}

// gather returns t's jobs in state (ready, delayed or buried) with their
// keys, unsorted. A heap's pointers are copied in one hold of the lock
// (eight bytes a job, no job touched), their keys read keyBatch at a time;
// the buried FIFO is walked keyBatch jobs per hold.
func (t *Tube) gather(state State) []listed {
	var jobs []*Job
	switch state {
	case StateReady, StateDelayed:
		h := &t.ready
		if state == StateDelayed {
			h = &t.delayed
		}
		t.mu.Lock()
		jobs = make([]*Job, 0, h.Len())
		for _, c := range h.chunks {
			jobs = append(jobs, c...)
		}
		t.mu.Unlock()
	case StateBuried:
		return t.gatherBuried()
	default:
		return nil
	}
	return t.keys(jobs, state)
}

// keys reads the order keys of jobs, keyBatch per hold of the lock, and
// drops those no longer in state in t.
func (t *Tube) keys(jobs []*Job, state State) []listed {
	out := make([]listed, 0, len(jobs))
	for start := 0; start < len(jobs); start += keyBatch {
		t.mu.Lock()
		for _, j := range jobs[start:min(start+keyBatch, len(jobs))] {
			if at, ok := t.keyLocked(j, state); ok {
				out = append(out, listed{at, j})
			}
		}
		t.mu.Unlock()
	}
	return out
}

// gatherBuried walks the buried FIFO, keyBatch jobs per hold of the lock.
func (t *Tube) gatherBuried() []listed {
	w := buriedWalk{t: t, atSeq: -1}
	var out []listed
	for done := false; !done; {
		out, done = w.step(keyBatch, out)
	}
	return out
}

// buriedWalk is a walk of a tube's buried FIFO that lets go of the lock
// between steps. Meanwhile the job it stopped at may leave the FIFO
// (kicked, deleted); then it starts again from the head, past the burials
// it has seen, which the FIFO's order (burial sequence) makes a simple
// comparison.
type buriedWalk struct {
	t     *Tube
	at    *Job  // the last job passed
	atSeq int64 // the highest burial sequence passed
}

// step passes up to batch jobs under the tube lock, appending those not
// seen before to out; done is true at the end of the FIFO.
func (w *buriedWalk) step(batch int, out []listed) (_ []listed, done bool) {
	t := w.t
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.buried.head
	if at := w.at; at != nil && at.state == StateBuried && at.tube == t && at.deadline == w.atSeq {
		j = at.next
	}
	for n := 0; j != nil && n < batch; j, n = j.next, n+1 {
		if j.deadline > w.atSeq { // not passed before a restart from the head
			out = append(out, listed{ListCursor{Key: j.deadline, ID: j.id}, j})
		}
		w.at, w.atSeq = j, max(w.atSeq, j.deadline)
	}
	return out, j == nil
}

// reservedIn returns t's reserved jobs with their keys. Reservations are
// kept by client, not by tube, so the id index is scanned one shard at a
// time (a job's tube never changes, so it is read under the shard lock
// alone), and the state and deadline of the jobs found are read under the
// tube lock keyBatch at a time.
func (s *Store) reservedIn(t *Tube) []listed {
	var jobs []*Job
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		sh.eachLocked(func(j *Job) {
			if j.tube == t {
				jobs = append(jobs, j)
			}
		})
		sh.mu.RUnlock()
	}
	return t.keys(jobs, StateReserved)
}

// ClearTube deletes the named tube's jobs in the given states (ready,
// delayed, buried; reserved jobs are never cleared) and returns how many
// it deleted; ok is false when the tube does not exist. Each delete is
// logged and counted as the protocol's delete is, bulkBatch per hold of
// the tube lock, resting between batches (bulkRest); progress, if not nil, is told
// the running total after each batch. Jobs that arrive meanwhile may be
// deleted too. A Reset meanwhile stops it.
func (c *Client) ClearTube(tube []byte, states []State, progress func(deleted int)) (deleted int, ok bool) {
	s := c.s
	gen := s.resets.Load()
	t := s.findTube(tube)
	if t == nil {
		return 0, false
	}
	defer s.releaseTube(t)
	for _, state := range states {
		for {
			began := time.Now()
			t.mu.Lock()
			if s.resetSince(gen) {
				t.mu.Unlock()
				return deleted, true
			}
			n := 0
			for ; n < bulkBatch; n++ {
				j := t.firstLocked(state)
				if j == nil {
					break
				}
				s.dropLocked(c, t, j)
				t.cmdDelete++
			}
			t.mu.Unlock()
			// The jobs' references to t; ours keeps it alive.
			t.refs.Add(int64(-n))
			deleted += n
			if n > 0 && progress != nil {
				progress(deleted)
			}
			if n < bulkBatch {
				break
			}
			rest(time.Since(began))
		}
	}
	return deleted, true
}

// dropLocked deletes j, a job of t, for c's bulk operation: the delete
// logged (deletes are never refused: the log keeps room for them), then
// j unlinked. t.mu must be held; the caller drops j's reference to t.
func (s *Store) dropLocked(c *Client, t *Tube, j *Job) {
	if s.log != nil {
		r := wal.Record{Kind: wal.KindDelete, ID: j.id}
		_ = s.logLocked(c, j, &r)
	}
	s.unlinkLocked(t, j)
}

// unlinkLocked takes j, a job of t, out of t and of the store, for good:
// a delete's last step, logged or applied. t.mu must be held.
func (s *Store) unlinkLocked(t *Tube, j *Job) {
	t.detachLocked(j)
	j.state = StateInvalid
	s.forgetJobLocked(j)
}

// firstLocked is the job of state that goes first in t: the next to
// reserve, to become ready, or the oldest burial. t.mu must be held.
func (t *Tube) firstLocked(state State) *Job {
	switch state {
	case StateReady:
		return t.ready.min()
	case StateDelayed:
		return t.delayed.min()
	case StateBuried:
		return t.buried.head
	}
	return nil
}

// KickTube is kick on the named tube, for up to bound jobs, bulkBatch per
// hold of the tube lock: buried jobs if it has any when it starts (oldest
// first), otherwise delayed ones (earliest first). ok is false when the
// tube does not exist. It stops early if the store is Reset, or if the
// log cannot take a change: err is then ErrNoSpace, with the jobs kicked
// before.
func (c *Client) KickTube(tube []byte, bound int) (kicked int, ok bool, err error) {
	s := c.s
	gen := s.resets.Load()
	t := s.findTube(tube)
	if t == nil {
		return 0, false, nil
	}
	defer s.releaseTube(t)
	t.mu.Lock()
	from := StateDelayed
	if t.nBuried > 0 {
		from = StateBuried
	}
	t.mu.Unlock()
	for kicked < bound {
		began := time.Now()
		now := s.now()
		var hs handoffs
		t.mu.Lock()
		if s.resetSince(gen) {
			t.mu.Unlock()
			return kicked, true, nil
		}
		n := 0
		for n < bulkBatch && kicked+n < bound {
			j := t.firstLocked(from)
			if j == nil {
				break
			}
			if err = t.kickLocked(c, j, now, wal.Req{}); err != nil {
				break
			}
			hs = t.dispatchLocked(now, hs) // as Kick: each job offered as it is kicked
			n++
		}
		t.mu.Unlock()
		s.complete(hs)
		kicked += n
		if err != nil || n < bulkBatch {
			return kicked, true, err
		}
		rest(time.Since(began))
	}
	return kicked, true, nil
}

// rest pauses a bulk change between batches for bulkRest times as long as
// the batch took.
func rest(took time.Duration) { time.Sleep(took * bulkRest) }
