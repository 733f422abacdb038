package store

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrClientsHold is Reset's refusal: a client holds a reservation or
// waits in a reserve, which belong to the jobs and tubes Reset would drop.
var ErrClientsHold = errors.New("store: a client holds a reservation or waits to reserve")

// ErrReset ends a bulk change that was running when the store was reset:
// what it changed before went with the reset, and it changes nothing
// after.
var ErrReset = errors.New("store: emptied for a rebuild while the change ran")

// resetSince reports whether Reset ran since resets was gen. Asked under
// a tube's lock before a change to it: Reset counts itself before it
// empties any tube, so a change either came before the tube was emptied
// (and went with it) or sees the count.
func (s *Store) resetSince(gen uint64) bool { return s.resets.Load() != gen }

// Reset empties the store in place, leaving it as New made it before any
// recovery: no job, every tube that only jobs kept gone, every count and
// pause cleared, ids starting again from what is applied next, and the
// clock and the dedup table (Options.Dedup) from what is applied next. A cluster
// member resets its store before it restores a snapshot or rebuilds from
// its log after losing a leadership (internal/replication), so that the
// engine, the admin API and the metrics keep the one store they were
// given.
//
// Clients stay valid: a tube a client uses or watches is kept, emptied,
// so its references hold. None may hold a reservation or wait in a
// reserve: Reset checks every tube first and, finding one, changes
// nothing and returns ErrClientsHold (wrapped, naming the tube). The
// caller closes the clients that could (a member closes its sessions
// before it rebuilds; a follower serves none). Operations by job id racing with Reset find the job gone,
// as after a delete: each job is marked deleted under its tube's lock.
// The bulk changes of a tube (ImportTube, DropTube, ClearTube, KickTube)
// stop at their next job (ErrReset): a member's in-process writers do
// not write into the store its log is rebuilding.
//
// Lock order: registryMu for the whole reset, each tube's lock in turn,
// the id index's shards last (store/doc.go).
func (s *Store) Reset() error {
	s.registryMu.Lock()
	defer s.registryMu.Unlock()
	s.leading.Store(false) // a rebuilt store follows until Lead
	for _, t := range s.tubeList {
		t.mu.Lock()
		reserved, waiting := t.nReserved, len(t.waiters)
		t.mu.Unlock()
		if reserved > 0 || waiting > 0 {
			return fmt.Errorf("%w: tube %q, %d reserved, %d waiting; %s", ErrClientsHold, t.name, reserved, waiting, s.holderIn(t))
		}
	}
	s.resets.Add(1)
	kept := s.tubeList[:0]
	for _, t := range s.tubeList {
		t.mu.Lock()
		jobs := t.emptyLocked()
		t.mu.Unlock()
		if t.refs.Add(-jobs) > 0 {
			t.listIndex = len(kept)
			kept = append(kept, t)
			continue
		}
		delete(s.tubes, t.name)
	}
	clear(s.tubeList[len(kept):])
	s.tubeList = kept
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.pages, sh.spill, sh.newest, sh.spare, sh.newestN1, sh.sparse = nil, nil, nil, nil, 0, nil
		sh.mu.Unlock()
	}
	c := &s.counts
	for _, v := range []*atomic.Int64{&c.urgent, &c.ready, &c.reserved, &c.delayed, &c.buried, &c.totalJobs, &c.timeouts} {
		v.Store(0)
	}
	s.lastID.Store(s.idBase)
	s.idMark.Store(0)
	s.clock.Store(0)
	if s.dedup != nil {
		s.dedupMu.Lock()
		s.dedup.reset()
		s.dedupMu.Unlock()
	}
	return nil
}

// holderIn describes a client that holds a job of t or waits in it, for
// Reset's refusal: what the client's notifier says of itself
// (fmt.Stringer: a cluster member's owner clients name their session),
// whether it was closed, and whether it lists the job it holds (a closed
// client gave back every job it listed).
func (s *Store) holderIn(t *Tube) string {
	for _, l := range s.reservedIn(t) {
		j := l.j
		t.mu.Lock()
		c := j.owner
		held := j.state == StateReserved
		t.mu.Unlock()
		if held && c != nil {
			return fmt.Sprintf("job %d held by %s", j.id, c.describe(j))
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiters) > 0 {
		return "waiting: " + t.waiters[0].w.client.describe(nil)
	}
	return "no holder found"
}

// describe is c as holderIn names it; j, if not nil, a job c holds.
func (c *Client) describe(j *Job) string {
	who := "a client"
	if sr, ok := c.notify.(fmt.Stringer); ok {
		who = sr.String()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if j == nil {
		return fmt.Sprintf("%s (closed %v)", who, c.closed)
	}
	listed := false
	if c.res != nil {
		for r := c.res.order.head; r != nil; r = r.next {
			listed = listed || r == j
		}
	}
	return fmt.Sprintf("%s (closed %v, lists the job %v)", who, c.closed, listed)
}

// emptyLocked drops every job of t (ready, delayed and buried: Reset
// checked none is reserved), marking each deleted and taking the server
// counts down with it, and clears the tube's counts, timers and pause.
// It returns how many jobs it dropped: the references they held. t.mu
// must be held.
func (t *Tube) emptyLocked() int64 {
	var n int64
	drop := func(j *Job) {
		j.state = StateInvalid
		j.slot = -1
		j.prev, j.next = nil, nil
		n++
	}
	for _, j := range t.ready.all() {
		drop(j)
	}
	for _, j := range t.delayed.all() {
		drop(j)
	}
	for j := t.buried.head; j != nil; {
		next := j.next
		drop(j)
		j = next
	}
	t.ready = jobHeap{less: jobLess}
	t.hasReady.Store(false)
	t.delayed = jobHeap{less: delayLess}
	t.buried = jobList{}
	t.nBuried, t.nUrgent = 0, 0
	t.totalJobs, t.cmdDelete, t.cmdPause, t.burySeq = 0, 0, 0, 0
	t.pauseDur, t.pauseUntil = 0, 0
	t.s.timers.cancel(&t.delayTimer)
	t.s.timers.cancel(&t.pauseTimer)
	return n
}
