package store

import (
	"sync"
	"sync/atomic"
)

// Tube is a named queue: a ready heap by (priority, id), a delay heap by
// (deadline, id), a buried FIFO and the clients waiting to reserve from it.
type Tube struct {
	s    *Store // immutable
	name string // immutable

	// refs counts jobs, clients using or watching, and the store's own
	// reference on "default". Incremented only under registryMu (or by a
	// holder of another reference); see Store.releaseTube.
	refs atomic.Int64
	// listIndex is the tube's slot in Store.tubeList; guarded by registryMu.
	listIndex int
	// stamp is its creation stamp (stamps.go); immutable once listed.
	stamp uint64

	mu    sync.Mutex
	ready jobHeap // guarded by mu
	// hasReady is whether ready holds a job, written under mu as it
	// changes: a reserve looks at its watched tubes' best jobs, and skips
	// those with none without taking their locks (Client.takeBounded).
	hasReady  atomic.Bool
	delayed   jobHeap // guarded by mu
	buried    jobList // guarded by mu: oldest buried first
	nBuried   int
	nReserved int
	nUrgent   int

	// waiters are the clients blocked in reserve on this tube, kept as
	// beanstalkd's Ms set: append, swap-remove, and a round-robin take
	// cursor. Guarded by mu.
	waiters  []waitSlot
	waitTake int

	pauseDur   int64 // ns of the last pause-tube; 0 when not paused; guarded by mu
	pauseUntil int64 // guarded by mu

	totalJobs, cmdDelete, cmdPause uint64 // guarded by mu
	burySeq                        int64  // guarded by mu: the latest burial's sequence
	nUsing, nWatching              int    // guarded by mu

	// changes notes the jobs changed while a copy of the tube is out
	// (ExportTubeCopy), so that the export at its move's freeze looks at
	// those alone; nil when none is. Guarded by mu.
	changes *tubeChanges

	delayTimer timer // armed for the earliest delayed job
	pauseTimer timer // armed while paused
}

// waitSlot is one waiter's entry in one tube's waiting set; k is the index
// of this tube in the waiter's own tube list.
type waitSlot struct {
	w *waiter
	k int
}

type (
	delayTarget Tube
	pauseTarget Tube
)

func newTube(s *Store, name string) *Tube {
	t := &Tube{s: s, name: name}
	t.ready = jobHeap{less: jobLess}
	t.delayed = jobHeap{less: delayLess}
	t.delayTimer = newTimer((*delayTarget)(t))
	t.pauseTimer = newTimer((*pauseTarget)(t))
	return t
}

// Name is immutable.
func (t *Tube) Name() string { return t.name }

func (t *Tube) pausedLocked(now int64) bool {
	return t.pauseDur > 0 && t.pauseUntil > now
}

// enqueueLocked puts j on the ready heap, or the delay heap if delay > 0.
func (t *Tube) enqueueLocked(j *Job, delay, now int64) {
	c := &t.s.counts
	if delay > 0 {
		j.state = StateDelayed
		j.deadline = now + delay
		t.delayed.push(j)
		c.delayed.Add(1)
		if t.delayed.min() == j {
			t.s.timers.schedule(&t.delayTimer, j.deadline)
		}
		return
	}
	j.state = StateReady
	t.ready.push(j)
	if t.ready.Len() == 1 {
		t.hasReady.Store(true)
	}
	c.ready.Add(1)
	if j.pri < UrgentPriority {
		t.nUrgent++
		c.urgent.Add(1)
	}
}

// buryLocked appends j to the buried FIFO. A buried job has no deadline,
// so its deadline holds its burial sequence, the FIFO's order, by which
// listings page through it.
func (t *Tube) buryLocked(j *Job) {
	t.burySeq++
	j.state, j.deadline = StateBuried, t.burySeq
	t.buried.pushBack(j)
	t.nBuried++
	t.s.counts.buried.Add(1)
	j.counts.buries++
}

// detachLocked takes j out of whatever holds it (heap, FIFO, or its owner's
// reservation) and fixes the counts; j.state is left for the caller to set.
func (t *Tube) detachLocked(j *Job) {
	t.noteChangeLocked(j)
	c := &t.s.counts
	switch j.state {
	case StateReady:
		t.ready.remove(j)
		if t.ready.Len() == 0 {
			t.hasReady.Store(false)
		}
		c.ready.Add(-1)
		if j.pri < UrgentPriority {
			t.nUrgent--
			c.urgent.Add(-1)
		}
	case StateDelayed:
		wasMin := t.delayed.min() == j
		t.delayed.remove(j)
		c.delayed.Add(-1)
		if wasMin {
			t.rearmDelayLocked()
		}
	case StateBuried:
		t.buried.remove(j)
		t.nBuried--
		c.buried.Add(-1)
	case StateReserved:
		o := j.owner
		o.mu.Lock()
		o.res.heap.remove(j)
		o.res.order.remove(j)
		o.rearmTTRLocked()
		o.mu.Unlock()
		j.owner = nil
		t.nReserved--
		c.reserved.Add(-1)
	}
}

func (t *Tube) rearmDelayLocked() {
	if m := t.delayed.min(); m != nil {
		t.s.timers.schedule(&t.delayTimer, m.deadline)
	} else {
		t.s.timers.cancel(&t.delayTimer)
	}
}

// reserveLocked gives j to c. It fails, leaving j where it was, only when c
// has closed.
func (t *Tube) reserveLocked(j *Job, c *Client, now int64) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	t.detachLocked(j)
	j.state = StateReserved
	j.owner = c
	j.deadline = now + j.ttrNS()
	j.counts.reserves++
	r := c.reservationsLocked()
	r.heap.push(j)
	r.order.pushBack(j)
	c.rearmTTRLocked()
	c.mu.Unlock()
	c.showLocked(j) // every reservation shows the job: RESERVED
	t.nReserved++
	t.s.counts.reserved.Add(1)
	return true
}

// dispatchLocked hands ready jobs to waiting clients, lowest (pri, id)
// first, while the tube is not paused. The hand-offs are completed by the
// caller after unlocking (Store.complete).
func (t *Tube) dispatchLocked(now int64, hs handoffs) handoffs {
	if t.pausedLocked(now) || t.s.withheld() {
		return hs
	}
	for t.ready.Len() > 0 && len(t.waiters) > 0 {
		w := t.takeWaiterLocked()
		if !w.claim() {
			continue // timed out or served by another tube; it cleans up itself
		}
		j := t.ready.min()
		if !t.reserveLocked(j, w.client, now) {
			hs = append(hs, handoff{w: w}) // client closed: only clean up
			continue
		}
		hs = append(hs, handoff{w: w, j: j})
	}
	return hs
}

// addWaiterLocked appends w (whose k-th tube this is) to the waiting set.
func (t *Tube) addWaiterLocked(w *waiter, k int) {
	*w.slot(k) = int32(len(t.waiters))
	t.waiters = append(t.waiters, waitSlot{w: w, k: k})
}

// removeWaiterLocked is beanstalkd's ms_delete: the last entry moves into
// the freed slot.
func (t *Tube) removeWaiterLocked(i int) {
	gone := t.waiters[i]
	*gone.w.slot(gone.k) = -1
	last := len(t.waiters) - 1
	if i != last {
		moved := t.waiters[last]
		t.waiters[i] = moved
		*moved.w.slot(moved.k) = int32(i)
	}
	t.waiters[last] = waitSlot{}
	t.waiters = t.waiters[:last]
}

// takeWaiterLocked is beanstalkd's ms_take, which makes waiter order
// round-robin with swap-remove rather than FIFO (appending 1..6 takes
// 1,2,3,6,5,4).
func (t *Tube) takeWaiterLocked() *waiter {
	t.waitTake %= len(t.waiters)
	w := t.waiters[t.waitTake].w
	t.removeWaiterLocked(t.waitTake)
	t.waitTake++
	return w
}

// onTimer moves delayed jobs whose time has come to the ready heap, one at
// a time in deadline order, serving waiters after each as beanstalkd does:
// a waiter gets the job that became ready first, not the most urgent of
// those that became ready together. It stops after next, the deadline of
// another timer due (another tube's delayed job, say), and returns its
// next job's deadline if that is due too, for its turn after that timer;
// the timer stays unarmed meanwhile, as while it fires. (A change to the
// tube may arm it meanwhile; a firing that finds nothing due is harmless.)
func (d *delayTarget) onTimer(now, next int64) (again int64, ok bool) {
	t := (*Tube)(d)
	var hs handoffs
	t.mu.Lock()
	for {
		j := t.delayed.min()
		if j == nil || j.deadline > next {
			break
		}
		t.delayed.remove(j)
		t.noteChangeLocked(j)
		t.s.counts.delayed.Add(-1)
		t.enqueueLocked(j, 0, now)
		hs = t.dispatchLocked(now, hs)
	}
	if m := t.delayed.min(); m != nil && m.deadline <= now {
		again, ok = m.deadline, true
	} else {
		t.rearmDelayLocked()
	}
	t.mu.Unlock()
	t.s.complete(hs)
	return again, ok
}

// onTimer ends a pause and serves the clients that waited through it.
func (p *pauseTarget) onTimer(now, _ int64) (int64, bool) {
	t := (*Tube)(p)
	var hs handoffs
	t.mu.Lock()
	if t.pauseDur > 0 && t.pauseUntil <= now {
		hs = t.unpauseLocked(now, hs)
	}
	t.mu.Unlock()
	t.s.complete(hs)
	return 0, false
}

// unpauseLocked ends t's pause, if any, and hands its ready jobs to its
// waiters; the caller completes the hand-offs once t is unlocked.
func (t *Tube) unpauseLocked(now int64, hs handoffs) handoffs {
	t.pauseDur, t.pauseUntil = 0, 0
	t.s.timers.cancel(&t.pauseTimer)
	return t.dispatchLocked(now, hs)
}
