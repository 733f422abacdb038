package store

import (
	"errors"
	"fmt"
	"slices"
)

// This file exposes internals to the external tests (package store_test)
// without widening the API.

// PokeTimers wakes the timer goroutine so that it reads the clock again. A
// test that drives Options.Now by hand calls it after moving the clock on;
// the goroutine otherwise sleeps for the real duration it computed from the
// old reading.
func (s *Store) PokeTimers() {
	select {
	case s.timers.wake <- struct{}{}:
	default:
	}
}

// ReservedIDs lists the ids of the jobs c has reserved, in id order.
func (c *Client) ReservedIDs() []uint64 {
	c.mu.Lock()
	var ids []uint64
	if c.res != nil {
		for _, j := range c.res.heap.all() {
			ids = append(ids, j.id)
		}
	}
	c.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// LiveJobIDs lists every id in the id index, in id order.
func (s *Store) LiveJobIDs() []uint64 {
	var ids []uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		sh.eachLocked(func(j *Job) { ids = append(ids, j.id) })
		sh.mu.RUnlock()
	}
	slices.Sort(ids)
	return ids
}

// checkLocked reports broken invariants of shard i of the id index (see
// index.go); sh.mu must be held.
func (sh *jobShard) checkLocked(i int, bad func(format string, args ...any)) {
	if sh.newestN1 == 0 {
		if len(sh.pages) != 0 || sh.newest != nil {
			bad("index shard %d: pages but no newest", i)
		}
	} else if p := sh.pages[sh.newestN1-1]; p == nil || p != sh.newest {
		bad("index shard %d: newest page %d missing", i, sh.newestN1-1)
	}
	for n, p := range sh.pages {
		if n+1 > sh.newestN1 {
			bad("index shard %d: page %d beyond the newest, %d", i, n, sh.newestN1-1)
		}
		live := 0
		for k, j := range p.slots {
			if j == nil {
				continue
			}
			live++
			if at := uint64(i) + jobShards*(n*pageSlots+uint64(k)); j.id != at {
				bad("index shard %d: job %d in the slot of id %d", i, j.id, at)
			}
		}
		if live != p.live {
			bad("index shard %d: page %d counts %d jobs, holds %d", i, n, p.live, live)
		}
		if live == 0 && n+1 != sh.newestN1 {
			bad("index shard %d: page %d is empty and not the newest", i, n)
		}
		if live <= spillAt && n+pageAge+1 < sh.newestN1 && !slices.Contains(sh.sparse, n) {
			bad("index shard %d: old page %d holds only %d jobs and is not listed sparse", i, n, live)
		}
	}
	if sh.spill != nil && len(sh.spill) == 0 {
		bad("index shard %d: empty spill map kept", i)
	}
	for id, j := range sh.spill {
		n, _ := place(id)
		if j.id != id || id%jobShards != uint64(i) {
			bad("index shard %d: spill key %d holds job %d", i, id, j.id)
		}
		if sh.pages[n] != nil || n+1 >= sh.newestN1 {
			bad("index shard %d: job %d spilled, but its page %d exists or is the newest", i, id, n)
		}
	}
}

// TubeRefs is the named tube's reference count, or -1 if it does not exist.
func (s *Store) TubeRefs(name string) int64 {
	s.registryMu.RLock()
	defer s.registryMu.RUnlock()
	if t := s.tubes[name]; t != nil {
		return t.refs.Load()
	}
	return -1
}

// CheckInvariants walks the whole store and reports every broken invariant:
//
//   - the registry: map and list hold the same tubes, each at its listIndex;
//   - each live job sits in exactly one place, and that place matches its
//     state (ready heap, delay heap, buried FIFO, its owner's reserved heap),
//     and the id index holds exactly the jobs found in those places;
//   - heap orders and slot indexes hold (ready, delay, reserved, timers);
//   - per-tube counts equal what is stored, and the global counters equal
//     the sums over tubes;
//   - a tube's reference count is its jobs plus its users and watchers (plus
//     one for "default");
//   - timers are armed exactly when something is due: a reserved job's TTR,
//     a tube's earliest delayed job, a pause;
//   - waiter slots are consistent, every waiter is in every set it joined,
//     and no unpaused tube holds both a ready job and a waiter;
//   - a tube's hasReady says whether its ready heap holds a job.
//
// The store must be quiescent: no operation in flight and no timer firing
// (stop it with Close first, or call this after synctest.Wait). Locks are
// taken one tube at a time, in the documented order.
func (s *Store) CheckInvariants() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}

	// The id index. Shard locks are leaves, and job.id and job.tube are
	// immutable, so this needs no tube lock.
	index := make(map[*Job]bool)
	jobsOf := make(map[*Tube][]*Job)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		sh.checkLocked(i, bad)
		sh.eachLocked(func(j *Job) {
			if index[j] {
				bad("index: job %d twice", j.id)
			}
			index[j] = true
			jobsOf[j.tube] = append(jobsOf[j.tube], j)
		})
		sh.mu.RUnlock()
	}

	where := make(map[*Job]string)
	place := func(j *Job, at string) {
		if prev, dup := where[j]; dup {
			bad("job %d is in %s and in %s", j.id, prev, at)
			return
		}
		where[j] = at
		if !index[j] {
			bad("job %d in %s is not in the id index", j.id, at)
		}
	}
	reservedBy := make(map[*Client]int)
	waiters := make(map[*waiter]bool)
	var sumUrgent, sumReady, sumReserved, sumDelayed, sumBuried int64
	var sumTotal uint64

	s.registryMu.RLock()
	if len(s.tubes) != len(s.tubeList) {
		bad("registry: %d tubes in the map, %d in the list", len(s.tubes), len(s.tubeList))
	}
	if s.tubes[DefaultTube] != s.defaultT {
		bad("registry: %q is not the permanent default tube", DefaultTube)
	}
	registered := make(map[*Tube]bool)
	for i, t := range s.tubeList {
		registered[t] = true
		if s.tubes[t.name] != t {
			bad("registry: list slot %d holds %q, not the map's tube", i, t.name)
		}
		if t.listIndex != i {
			bad("registry: %q at slot %d has listIndex %d", t.name, i, t.listIndex)
		}

		t.mu.Lock()
		name := t.name

		nUrgent := 0
		for i, j := range t.ready.all() {
			at := "ready heap of " + name
			place(j, at)
			checkHeapSlot(bad, at, &t.ready, i, int(j.slot))
			if j.tube != t || j.state != StateReady || j.owner != nil {
				bad("%s: job %d has tube %q, state %v, owner %p",
					at, j.id, j.tube.name, j.state, j.owner)
			}
			if j.pri < UrgentPriority {
				nUrgent++
			}
		}
		if t.hasReady.Load() != (t.ready.Len() > 0) {
			bad("%s: hasReady is %v with %d ready jobs", name, t.hasReady.Load(), t.ready.Len())
		}
		for i, j := range t.delayed.all() {
			at := "delay heap of " + name
			place(j, at)
			checkHeapSlot(bad, at, &t.delayed, i, int(j.slot))
			if j.tube != t || j.state != StateDelayed || j.owner != nil {
				bad("%s: job %d has tube %q, state %v, owner %p", at, j.id, j.tube.name, j.state, j.owner)
			}
		}

		nBuried := 0
		var prev *Job
		for j := t.buried.head; j != nil; j = j.next {
			at := "buried FIFO of " + name
			if nBuried > len(index) {
				bad("%s: longer than the whole store (a cycle?)", at)
				break
			}
			place(j, at)
			nBuried++
			if j.prev != prev {
				bad("%s: job %d links back to the wrong job", at, j.id)
			}
			if j.tube != t || j.state != StateBuried || j.slot != -1 || j.owner != nil {
				bad("%s: job %d has tube %q, state %v, slot %d, owner %p",
					at, j.id, j.tube.name, j.state, j.slot, j.owner)
			}
			prev = j
		}
		if t.buried.tail != prev {
			bad("buried FIFO of %s: tail is not the last job", name)
		}

		nReserved := 0
		for _, j := range jobsOf[t] {
			if j.state == StateInvalid {
				bad("job %d of %s is in the id index but deleted", j.id, name)
			}
			if j.state != StateReserved {
				continue
			}
			nReserved++
			o := j.owner
			at := fmt.Sprintf("reserved heap of client %p", o)
			if o == nil {
				bad("job %d of %s is reserved by nobody", j.id, name)
				continue
			}
			place(j, at)
			reservedBy[o]++
			o.mu.Lock()
			if o.closed {
				bad("job %d is reserved by a closed client", j.id)
			}
			if o.res == nil {
				bad("%s: job %d is reserved by a client without reservations", at, j.id)
				o.mu.Unlock()
				continue
			}
			r := o.res
			if k := int(j.slot); k < 0 || k >= r.heap.Len() || r.heap.at(k) != j {
				bad("%s: job %d not at its slot %d", at, j.id, k)
			}
			inOrder := false
			for o := r.order.head; o != nil; o = o.next {
				inOrder = inOrder || o == j
			}
			if !inOrder {
				bad("%s: job %d missing from the reservation order", at, j.id)
			}
			// One TTR timer per client, armed for its earliest deadline.
			if armed, when := timerState(s.timers, &r.ttr); !armed || when != r.heap.min().deadline {
				bad("%s: TTR timer armed %v for %d, earliest deadline %d", at, armed, when, r.heap.min().deadline)
			}
			o.mu.Unlock()
		}

		if t.nUrgent != nUrgent || t.ready.Len() < nUrgent {
			bad("%s: nUrgent %d, counted %d", name, t.nUrgent, nUrgent)
		}
		if t.nBuried != nBuried {
			bad("%s: nBuried %d, counted %d", name, t.nBuried, nBuried)
		}
		if t.nReserved != nReserved {
			bad("%s: nReserved %d, counted %d", name, t.nReserved, nReserved)
		}
		if t.nUsing < 0 || t.nWatching < 0 {
			bad("%s: nUsing %d, nWatching %d", name, t.nUsing, t.nWatching)
		}
		wantRefs := int64(len(jobsOf[t]) + t.nUsing + t.nWatching)
		if t == s.defaultT {
			wantRefs++
		}
		if got := t.refs.Load(); got != wantRefs {
			bad("%s: refs %d, want %d jobs + %d using + %d watching (+1 if default)",
				name, got, len(jobsOf[t]), t.nUsing, t.nWatching)
		}

		armed, when := timerState(s.timers, &t.delayTimer)
		if m := t.delayed.min(); m != nil {
			if !armed || when != m.deadline {
				bad("%s: delay timer armed %v for %d, earliest delayed job due %d", name, armed, when, m.deadline)
			}
		} else if armed {
			bad("%s: delay timer armed with no delayed job", name)
		}
		armed, when = timerState(s.timers, &t.pauseTimer)
		if t.pauseDur > 0 {
			if !armed || when != t.pauseUntil {
				bad("%s: paused until %d but pause timer armed %v for %d", name, t.pauseUntil, armed, when)
			}
		} else if armed || t.pauseUntil != 0 {
			bad("%s: not paused but pause timer armed %v, pauseUntil %d", name, armed, t.pauseUntil)
		}

		for i, ws := range t.waiters {
			w := ws.w
			if w == nil || ws.k < 0 || ws.k >= len(w.tubes) {
				bad("%s: waiter slot %d is malformed", name, i)
				continue
			}
			if w.tubes[ws.k] != t || int(*w.slot(ws.k)) != i {
				bad("%s: waiter at slot %d says it is tube %q slot %d", name, i, w.tubes[ws.k].name, *w.slot(ws.k))
			}
			if w.state.Load() != waiterWaiting {
				bad("%s: waiter at slot %d has already been claimed", name, i)
			}
			waiters[w] = true
		}
		if len(t.waiters) > 0 && t.ready.Len() > 0 && t.pauseDur == 0 {
			bad("%s: unpaused, with %d ready jobs and %d waiters", name, t.ready.Len(), len(t.waiters))
		}

		sumUrgent += int64(t.nUrgent)
		sumReady += int64(t.ready.Len())
		sumReserved += int64(t.nReserved)
		sumDelayed += int64(t.delayed.Len())
		sumBuried += int64(t.nBuried)
		sumTotal += t.totalJobs
		t.mu.Unlock()
	}
	s.registryMu.RUnlock()

	for j := range index {
		if _, ok := where[j]; !ok {
			if !registered[j.tube] {
				bad("job %d belongs to tube %q, which is not registered", j.id, j.tube.name)
			} else {
				bad("job %d (%v) is in the id index but nowhere in its tube", j.id, j.state)
			}
		}
	}

	// Owners' heaps: deadline and slot are written with the owner's
	// lock held, so the owner's lock alone is enough to read them.
	for o, n := range reservedBy {
		o.mu.Lock()
		if o.res == nil {
			o.mu.Unlock()
			continue // reported above
		}
		if o.res.heap.Len() != n {
			bad("client %p holds %d jobs, its tubes count %d", o, o.res.heap.Len(), n)
		}
		for i, j := range o.res.heap.all() {
			checkHeapSlot(bad, fmt.Sprintf("reserved heap of client %p", o), &o.res.heap, i, int(j.slot))
			if j.owner != o {
				bad("client %p holds job %d owned by %p", o, j.id, j.owner)
			}
		}
		o.mu.Unlock()
	}

	for w := range waiters {
		for k, t := range w.tubes {
			t.mu.Lock()
			if i := int(*w.slot(k)); i < 0 || i >= len(t.waiters) || t.waiters[i].w != w {
				bad("waiter of client %p is missing from %q (slot %d)", w.client, t.name, i)
			}
			t.mu.Unlock()
		}
	}

	c := &s.counts
	for _, g := range []struct {
		name      string
		got, want int64
	}{
		{"urgent", c.urgent.Load(), sumUrgent},
		{"ready", c.ready.Load(), sumReady},
		{"reserved", c.reserved.Load(), sumReserved},
		{"delayed", c.delayed.Load(), sumDelayed},
		{"buried", c.buried.Load(), sumBuried},
		{"waiting", c.waiting.Load(), int64(len(waiters))},
	} {
		if g.got != g.want {
			bad("global %s count %d, tubes sum to %d", g.name, g.got, g.want)
		}
	}
	// Jobs recovered from a log are not counted in total-jobs (as in
	// beanstalkd), so with a log only the tubes' sum bounds it.
	if total := c.totalJobs.Load(); total < int64(sumTotal) || s.log == nil && total < int64(len(index)) {
		bad("global total-jobs %d is below the tubes' %d or the %d live jobs", total, sumTotal, len(index))
	}

	s.timers.mu.Lock()
	for i, tm := range s.timers.heap {
		if tm.index != i {
			bad("timer heap: slot %d holds a timer with index %d", i, tm.index)
		}
		if p := (i - 1) / 2; i > 0 && s.timers.heap[p].when > tm.when {
			bad("timer heap: slot %d due before its parent", i)
		}
	}
	s.timers.mu.Unlock()

	return errors.Join(errs...)
}

// CheckClients checks the use and watch counts against open, which must be
// every client of s that has not been closed.
func (s *Store) CheckClients(open ...*Client) error {
	var errs []error
	using := make(map[*Tube]int)
	watching := make(map[*Tube]int)
	for _, c := range open {
		using[c.use]++
		for i, t := range c.watch {
			watching[t]++
			if slices.Index(c.watch, t) != i {
				errs = append(errs, fmt.Errorf("client %p watches %q twice", c, t.name))
			}
		}
	}
	s.refsMu.Lock()
	for _, rc := range s.remote {
		using[rc.t] += int(rc.using)
		watching[rc.t] += int(rc.watching)
	}
	s.refsMu.Unlock()
	s.registryMu.RLock()
	defer s.registryMu.RUnlock()
	for t := range using {
		if s.tubes[t.name] != t {
			errs = append(errs, fmt.Errorf("a client uses %q, which is not registered", t.name))
		}
	}
	for t := range watching {
		if s.tubes[t.name] != t {
			errs = append(errs, fmt.Errorf("a client watches %q, which is not registered", t.name))
		}
	}
	for _, t := range s.tubeList {
		t.mu.Lock()
		if t.nUsing != using[t] || t.nWatching != watching[t] {
			errs = append(errs, fmt.Errorf("%s: nUsing %d, nWatching %d; clients: %d using, %d watching",
				t.name, t.nUsing, t.nWatching, using[t], watching[t]))
		}
		t.mu.Unlock()
	}
	return errors.Join(errs...)
}

func checkHeapSlot(bad func(string, ...any), at string, h *jobHeap, i, slot int) {
	j := h.at(i)
	if slot != i {
		bad("%s: job %d at slot %d has index %d", at, j.id, i, slot)
	}
	if p := (i - 1) / 2; i > 0 && h.less(j, h.at(p)) {
		bad("%s: job %d at slot %d sorts before its parent %d", at, j.id, i, h.at(p).id)
	}
}

// timerState reads whether tm is armed and for when; timers.mu is a leaf.
func timerState(ts *timers, tm *timer) (armed bool, when int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tm.index < 0 {
		return false, 0
	}
	if tm.index >= len(ts.heap) || ts.heap[tm.index] != tm {
		return false, -1
	}
	return true, tm.when
}

// PeekByID finds a live job by id without showing it to any client, for
// tests that check what the store holds.
func PeekByID(s *Store, id uint64) (*Job, bool) { return s.peek(id, nil) }

// StatsOfJob snapshots a live job without showing it to any client.
func StatsOfJob(s *Store, id uint64) (JobStats, bool) { return s.jobStats(id, nil) }

// StoreOf is the store c belongs to.
func StoreOf(c *Client) *Store { return c.s }

// SetBetweenCopyBatches sets what runs between ExportTubeCopy's holds of
// a tube's lock, before any use of s.
func (s *Store) SetBetweenCopyBatches(f func()) { s.betweenCopyBatches = f }

// SetBeforeCopyHold sets what runs in ExportTubeCopy after its reserved
// jobs are looked up, before the hold that takes the others, before any
// use of s.
func (s *Store) SetBeforeCopyHold(f func()) { s.beforeCopyHold = f }

// BuriedIDs lists the named tube's buried jobs in the order they kick.
func (s *Store) BuriedIDs(name string) []uint64 {
	t := s.findTube([]byte(name))
	if t == nil {
		return nil
	}
	defer s.releaseTube(t)
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []uint64
	for j := t.buried.head; j != nil; j = j.next {
		ids = append(ids, j.id)
	}
	return ids
}

// Unnoted is cp without its tube's note of changes: ExportTubeChanges
// then compares every job with it, and leaves the note alone.
func (cp *TubeCopy) Unnoted() *TubeCopy {
	c := *cp
	c.changes = nil
	return &c
}

// Noting reports whether the named tube notes its changes for cp.
func (s *Store) Noting(name string, cp *TubeCopy) bool {
	t := s.findTube([]byte(name))
	if t == nil {
		return false
	}
	defer s.releaseTube(t)
	t.mu.Lock()
	defer t.mu.Unlock()
	return cp.changes != nil && t.changes == cp.changes
}

// TimersDue reports whether a delay or a TTR of the named tube's jobs has
// run out by the store's clock and not yet been served.
func (s *Store) TimersDue(name string) bool {
	t := s.findTube([]byte(name))
	if t == nil {
		return false
	}
	defer s.releaseTube(t)
	now := s.now()
	for _, l := range s.reservedIn(t) {
		if l.at.Key <= now {
			return true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.delayed.min()
	return m != nil && m.deadline <= now
}
