package router

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// newCrossNet is a linkNet of groups groups, group g led by member g+2
// with a store of its own.
func newCrossNet(t *testing.T, groups int) *linkNet {
	n := &linkNet{t: t, servers: map[uint64]*Server{}, stores: map[uint64]*store.Store{},
		held: map[uint64][][]byte{}, cut: map[uint64]bool{}, pairs: map[[2]uint64]chan []byte{}}
	n.link = NewLink(LinkConfig{
		Leader: func(g uint16) (uint64, bool) { return uint64(g) + 2, int(g) < groups },
		Send:   func(to uint64, payload []byte) bool { return n.queue(1, to, payload) },
	})
	for g := range uint16(groups) {
		m := uint64(g) + 2
		st := store.New(store.Options{})
		t.Cleanup(st.Close)
		n.stores[m] = st
		n.servers[m] = NewServer(ServerConfig{
			Group: func(group uint16) *store.Store {
				if group == g {
					return st
				}
				return nil
			},
			MaxJobSize: 1 << 16,
			Send:       func(to uint64, payload []byte) bool { return n.queue(m, to, payload) },
		})
		t.Cleanup(n.servers[m].Close)
	}
	return n
}

// newCrossNetLeaderless is newCrossNet of two groups whose group 1's
// leader takes nothing: its calls wait for a leader.
func newCrossNetLeaderless(t *testing.T) *linkNet {
	n := newCrossNet(t, 2)
	n.mu.Lock()
	n.cut[3] = true
	n.mu.Unlock()
	return n
}

// crossEnd is a cross-group reserve's end.
type crossEnd struct {
	job   *JobReply
	group uint16
	res   store.ReserveResult
}

// reserveAcross starts session 7's reserve over groups 0 (tube "a") and
// 1 (tube "b") and returns where its end comes, and the reserve.
func reserveAcross(n *linkNet, seq *atomic.Uint32, timeout time.Duration) (<-chan crossEnd, *crossReserve) {
	ends, r := newCrossReserve(n, seq, timeout)
	r.start()
	return ends, r
}

// newCrossReserve is reserveAcross's reserve, not started.
func newCrossReserve(n *linkNet, seq *atomic.Uint32, timeout time.Duration) (<-chan crossEnd, *crossReserve) {
	ends := make(chan crossEnd, 2)
	var mu sync.Mutex
	parts := []crossPart{{group: 0, tubes: [][]byte{[]byte("a")}}, {group: 1, tubes: [][]byte{[]byte("b")}}}
	r := &crossReserve{link: n.link, session: 7, timeout: timeout, parts: parts,
		post: func(send func(seq uint32)) {
			mu.Lock()
			defer mu.Unlock()
			send(seq.Add(1))
		},
		again:   func() []crossPart { return parts },
		holding: n.holdingJobs.Load,
		done:    func(j *JobReply, g uint16, res store.ReserveResult) { ends <- crossEnd{j, g, res} }}
	return ends, r
}

func (n *linkNet) put(t *testing.T, member uint64, tube string, pri uint32) uint64 {
	t.Helper()
	st := n.stores[member]
	c := st.NewClient(nil)
	defer c.Close()
	c.Use([]byte(tube))
	id := st.NextID()
	if _, err := c.Put(id, pri, 0, 60, []byte("j\r\n")); err != nil {
		t.Fatal(err)
	}
	return id
}

func nextEnd(t *testing.T, ends <-chan crossEnd) crossEnd {
	t.Helper()
	select {
	case e := <-ends:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("the reserve did not end")
	}
	return crossEnd{}
}

// timedOut checks that the reserve's next end is TIMED_OUT, after at
// least after from start.
func timedOut(t *testing.T, ends <-chan crossEnd, start time.Time, after time.Duration) {
	t.Helper()
	if e := nextEnd(t, ends); e.res != store.TimedOut || time.Since(start) < after {
		t.Fatalf("%+v after %v, want TIMED_OUT after %v", e, time.Since(start), after)
	}
}

// noEnd checks that the reserve does not end within d; what is the
// reserve, for the failure.
func noEnd(t *testing.T, ends <-chan crossEnd, d time.Duration, what string) {
	t.Helper()
	select {
	case e := <-ends:
		t.Fatalf("%s ended: %+v", what, e)
	case <-time.After(d):
	}
}

// TestCrossReserveTakes: the most urgent job ready in either group, in
// turn; TIMED_OUT at once with nothing ready and a timeout of 0.
func TestCrossReserveTakes(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	n.put(t, 2, "a", 5)
	urgent := n.put(t, 2, "a", 1)
	n.put(t, 3, "b", 3)
	for _, want := range []struct {
		group uint16
		pri   uint32
	}{{0, 1}, {1, 3}, {0, 5}} {
		ends, _ := reserveAcross(n, &seq, 0)
		e := nextEnd(t, ends)
		if e.res != store.Reserved || e.group != want.group {
			t.Fatalf("reserved %+v from group %d (%v), want pri %d from group %d", e.job, e.group, e.res, want.pri, want.group)
		}
		if want.pri == 1 && e.job.ID != urgent {
			t.Fatalf("reserved job %d, want the most urgent, %d", e.job.ID, urgent)
		}
	}
	ends, _ := reserveAcross(n, &seq, 0)
	if e := nextEnd(t, ends); e.res != store.TimedOut {
		t.Fatalf("with nothing ready: %v", e.res)
	}
}

// TestCrossReserveLost: a take whose group's best went to another client
// after its peek is Lost, and the reserve looks again.
func TestCrossReserveLost(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	n.put(t, 2, "a", 1)
	n.put(t, 2, "a", 5)
	other := n.put(t, 3, "b", 3)
	n.hold(2) // group 0's peek answer waits
	ends, _ := reserveAcross(n, &seq, 0)
	testproc.WaitFor(t, 5*time.Second, "group 0's peek answered", func() bool { return n.heldCount(2) > 0 })
	c := n.stores[2].NewClient(nil) // another worker takes group 0's pri 1 meanwhile
	c.Watch([]byte("a"))
	if _, res := c.Reserve(0); res != store.Reserved {
		t.Fatalf("the other worker's reserve: %v", res)
	}
	n.release(2)
	e := nextEnd(t, ends)
	if e.res != store.Reserved || e.group != 1 || e.job.ID != other {
		t.Fatalf("reserved %+v from group %d (%v), want job %d of group 1: group 0's 5 loses to it", e.job, e.group, e.res, other)
	}
	c.Close()
}

// TestCrossReserveWaits: with nothing ready the reserve waits in both
// groups, a job put into either ends it, and the other group's wait is
// cancelled; a second offer on its way is declined, its job ready again.
func TestCrossReserveWaits(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	ends, _ := reserveAcross(n, &seq, -1)
	waiting := func(m uint64) bool { return n.stores[m].Stats().Waiting == 1 }
	testproc.WaitFor(t, 5*time.Second, "a wait in each group", func() bool { return waiting(2) && waiting(3) })
	n.hold(3) // group 1's offer waits
	n.put(t, 3, "b", 2)
	testproc.WaitFor(t, 5*time.Second, "group 1's offer made", func() bool { return n.heldCount(3) > 0 })
	id := n.put(t, 2, "a", 9)
	e := nextEnd(t, ends)
	if e.res != store.Reserved || e.group != 0 || e.job.ID != id {
		t.Fatalf("reserved %+v from group %d (%v), want group 0's job %d", e.job, e.group, e.res, id)
	}
	n.release(3) // the offer comes late: declined
	testproc.WaitFor(t, 5*time.Second, "group 1's job ready again", func() bool {
		ts, _ := n.stores[3].TubeStats([]byte("b"))
		return ts.Ready == 1 && ts.Reserved == 0
	})
	if s := n.stores[2].Stats(); s.Reserved != 1 || s.Waiting != 0 {
		t.Errorf("group 0: %d reserved, %d waiting; want the session's job, no wait", s.Reserved, s.Waiting)
	}
	noEnd(t, ends, 50*time.Millisecond, "a reserve ended once")
}

// TestCrossReserveTimeout: the session's timer ends a wait with
// TIMED_OUT, at its timeout from the reserve's start, and the groups'
// waits are cancelled; cancel ends a wait without an answer.
func TestCrossReserveTimeout(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	start := time.Now()
	ends, _ := reserveAcross(n, &seq, 200*time.Millisecond)
	timedOut(t, ends, start, 200*time.Millisecond)
	noWaits := func() bool { return n.stores[2].Stats().Waiting == 0 && n.stores[3].Stats().Waiting == 0 }
	testproc.WaitFor(t, 5*time.Second, "the waits cancelled", noWaits)

	ends, r := reserveAcross(n, &seq, -1)
	testproc.WaitFor(t, 5*time.Second, "a wait in each group", func() bool {
		return n.stores[2].Stats().Waiting == 1 && n.stores[3].Stats().Waiting == 1
	})
	if !r.cancel() {
		t.Fatal("cancel of a waiting reserve: false")
	}
	testproc.WaitFor(t, 5*time.Second, "the waits cancelled", noWaits)
	n.put(t, 2, "a", 1)
	noEnd(t, ends, 100*time.Millisecond, "a cancelled reserve")
	if r.cancel() {
		t.Error("a second cancel: true")
	}
}

// TestCrossReserveCancelledTake: a take answered after the reserve was
// cancelled gives its job back: the session never holds a job it did
// not get a reply for (6.5).
func TestCrossReserveCancelledTake(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	n.put(t, 2, "a", 1)
	_, r := takeHeld(t, n, &seq, 0)
	if ts, _ := n.stores[2].TubeStats([]byte("a")); ts.Reserved != 1 {
		t.Fatalf("the take reserved %d jobs, want 1", ts.Reserved)
	}
	if !r.cancel() {
		t.Fatal("cancel while taking: false")
	}
	n.release(2)
	readyAgain(t, n, "the taken job ready again")
}

// takeHeld starts session 7's reserve across groups 0 and 1 with group
// 0's answers held, and returns once its take there is answered and the
// answer held: where the reserve ends, and the reserve.
func takeHeld(t *testing.T, n *linkNet, seq *atomic.Uint32, timeout time.Duration) (<-chan crossEnd, *crossReserve) {
	t.Helper()
	n.hold(2) // group 0's answers wait: its peek, then its take
	ends, r := reserveAcross(n, seq, timeout)
	testproc.WaitFor(t, 5*time.Second, "group 0's peek answered, held", func() bool { return n.heldCount(2) == 1 })
	n.pass(2)
	testproc.WaitFor(t, 5*time.Second, "group 0's take answered, held", func() bool { return n.heldCount(2) == 1 })
	return ends, r
}

// readyAgain waits until group 0's tube "a" has its one job ready, none
// reserved.
func readyAgain(t *testing.T, n *linkNet, what string) {
	t.Helper()
	testproc.WaitFor(t, 5*time.Second, what, func() bool {
		ts, _ := n.stores[2].TubeStats([]byte("a"))
		return ts.Ready == 1 && ts.Reserved == 0
	})
}

// TestCrossReserveHeld: once the member holds jobs for its shutdown, a
// reserve across groups takes nothing and waits for its timer alone. One
// waiting stops waiting in its groups (hold), so a job put then stays
// ready; one whose take was in flight gives the job back; one begun then
// takes none of the jobs ready.
func TestCrossReserveHeld(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	noWaits := func() bool { return n.stores[2].Stats().Waiting == 0 && n.stores[3].Stats().Waiting == 0 }
	readyNow := func(m uint64, tube string, want int) {
		t.Helper()
		testproc.WaitFor(t, 5*time.Second, tube+"'s jobs ready, none reserved", func() bool {
			ts, _ := n.stores[m].TubeStats([]byte(tube))
			return ts.Ready == want && ts.Reserved == 0
		})
	}

	start := time.Now()
	ends, r := reserveAcross(n, &seq, 2*time.Second)
	testproc.WaitFor(t, 5*time.Second, "a wait in each group", func() bool {
		return n.stores[2].Stats().Waiting == 1 && n.stores[3].Stats().Waiting == 1
	})
	n.holdingJobs.Store(true)
	r.hold()
	testproc.WaitFor(t, time.Second, "the waits cancelled, well before the timer", noWaits)
	n.put(t, 3, "b", 1)
	timedOut(t, ends, start, 2*time.Second)
	readyNow(3, "b", 1)

	n.holdingJobs.Store(false)
	n.put(t, 2, "a", 1)
	n.hold(2) // group 0's answers wait: its peek, then its take
	start = time.Now()
	ends, r = reserveAcross(n, &seq, 200*time.Millisecond)
	testproc.WaitFor(t, 5*time.Second, "group 0's peek answered", func() bool { return n.heldCount(2) > 0 })
	n.pass(2)
	testproc.WaitFor(t, 5*time.Second, "group 0's take answered", func() bool { return n.heldCount(2) > 0 })
	n.holdingJobs.Store(true)
	r.hold()
	n.release(2)
	timedOut(t, ends, start, 200*time.Millisecond)
	readyNow(2, "a", 1)

	start = time.Now()
	ends, _ = reserveAcross(n, &seq, 100*time.Millisecond)
	timedOut(t, ends, start, 100*time.Millisecond)
	readyNow(2, "a", 1)
	readyNow(3, "b", 1)

	// Held as its session has stored it, before it begins: hold leaves
	// it, which begins holding, its timer from its own start.
	ends, r = newCrossReserve(n, &seq, 300*time.Millisecond)
	r.hold()
	start = time.Now()
	r.start()
	timedOut(t, ends, start, 300*time.Millisecond)
	noEnd(t, ends, 400*time.Millisecond, "a reserve ended once")
}

// TestCrossReserveSoonAskedAgain: a waiting reserve's DEADLINE_SOON
// timer asks the session's estimate again when it fires: a job still held
// ends the reserve then; one the session was told it no longer holds
// (Session.askHeld) does not, and the reserve times out, or answers
// DEADLINE_SOON for the next job held when that one is due.
func TestCrossReserveSoonAskedAgain(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	var mu sync.Mutex
	var soonAt time.Time // the session's estimate: zero holds nothing
	start := func(timeout, soon time.Duration) (<-chan crossEnd, time.Time) {
		ends, r := newCrossReserve(n, &seq, timeout)
		r.soon, r.hasSoon = soon, true
		r.soonest = func() (time.Duration, bool) {
			mu.Lock()
			defer mu.Unlock()
			return time.Until(soonAt), !soonAt.IsZero()
		}
		began := time.Now()
		mu.Lock()
		soonAt = began.Add(soon)
		mu.Unlock()
		r.start()
		return ends, began
	}
	ended := func(ends <-chan crossEnd, began time.Time, want store.ReserveResult, after time.Duration) {
		t.Helper()
		e := nextEnd(t, ends)
		if took := time.Since(began); e.res != want || took < after || took > after+time.Second {
			t.Fatalf("ended %+v after %v, want %v after %v", e, took, want, after)
		}
	}

	ends, began := start(time.Second, 200*time.Millisecond)
	ended(ends, began, store.DeadlineSoon, 200*time.Millisecond)

	ends, began = start(time.Second, 200*time.Millisecond)
	mu.Lock()
	soonAt = time.Time{} // the job's leader said it is not held
	mu.Unlock()
	ended(ends, began, store.TimedOut, time.Second)

	ends, began = start(2*time.Second, 200*time.Millisecond)
	mu.Lock()
	soonAt = began.Add(700 * time.Millisecond) // another job held, due later
	mu.Unlock()
	ended(ends, began, store.DeadlineSoon, 700*time.Millisecond)
}

// TestCrossReserveCancelledUnstarted: a reserve cancelled after its
// session stored it and before it began (a Close or half-close while a
// routed reserve's reply goes on across groups: Session.goOnAcross)
// neither begins nor ends, either way it would begin: it takes no job
// and waits in no group.
func TestCrossReserveCancelledUnstarted(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	n.put(t, 2, "a", 1)
	for _, begin := range []func(*crossReserve){(*crossReserve).start, (*crossReserve).startAgain} {
		ends, r := newCrossReserve(n, &seq, time.Second)
		if !r.cancel() {
			t.Fatal("cancel of a reserve not begun: false")
		}
		begin(r)
		noEnd(t, ends, moveRetry+200*time.Millisecond, "a reserve cancelled before it began")
		if ts, _ := n.stores[2].TubeStats([]byte("a")); ts.Ready != 1 || ts.Reserved != 0 {
			t.Fatalf("a's jobs: %d ready, %d reserved; want the one ready", ts.Ready, ts.Reserved)
		}
		if w := n.stores[2].Stats().Waiting + n.stores[3].Stats().Waiting; w != 0 {
			t.Fatalf("%d waits in the groups, want none", w)
		}
	}
}

// TestDeclineRecallHanded: a session's decline of a job is sent again to
// its group's next leader for declineRecall (Link.LeaderChanged), unless
// the session was handed the job again since: then it would take back the
// reservation the session holds. A hand-out on this member's own store
// (Session.runHere) passes the Link by, so it is told (Handed); without
// that, a change of the leader's view (a lease lapsing and coming back)
// released the job to another worker while the session held it (a
// double holding in the fault test).
func TestDeclineRecallHanded(t *testing.T) {
	n := newCrossNet(t, 1)
	var stamp atomic.Uint64
	srv, st := n.servers[2], n.stores[2]
	for i, told := range []bool{true, false} {
		tube := []byte{'a' + byte(i)}
		reserved := func() int {
			ts, _ := st.TubeStats(tube)
			return ts.Reserved
		}
		id := n.put(t, 2, string(tube), 1)
		key := ownerKey{member: 1, session: 7, group: 0}
		take := func() {
			t.Helper()
			r, _, _, ran := srv.local(key, Request{Op: OpReserve, Tubes: [][]byte{tube}}, &stamp)
			if !ran || r.Status != StatusOK || r.Job.ID != id {
				t.Fatalf("reserve: %+v (ran %v), want job %d", r, ran, id)
			}
		}
		take()
		n.link.Decline(7, 0, 0, id) // an offer come too late, say
		testproc.WaitFor(t, 5*time.Second, "the job declined", func() bool { return reserved() == 0 })
		take() // the session's next reserve, run where the group is led
		if told {
			n.link.Handed(7, 0, id)
		}
		n.link.LeaderChanged(0)
		if told {
			time.Sleep(100 * time.Millisecond) // the decline would have come by now
			if reserved() != 1 {
				t.Fatalf("the job handed again was taken back by its decline sent again")
			}
		} else {
			testproc.WaitFor(t, 5*time.Second, "the decline sent again taking the job back", func() bool { return reserved() == 0 })
		}
	}
}

// TestCrossReserveRaces drives the races of a take across groups with
// the groups' answers held: what happens in the groups between the peeks
// and the take (docs/design/shards.md 6.2).
func TestCrossReserveRaces(t *testing.T) {
	// peeked holds both groups' answers until each has answered: what
	// changes next comes after the peeks the reserve will take by.
	peeked := func(t *testing.T, n *linkNet) {
		t.Helper()
		testproc.WaitFor(t, 5*time.Second, "both groups' answers held", func() bool {
			return n.heldCount(2) > 0 && n.heldCount(3) > 0
		})
	}
	// lateJob reserves across group 0 (a job of priority 5) and group 1
	// (7), with a job of priority 1 put into group 1, or 0, after the
	// peeks: the reserve's end, group 0's first job and the late one.
	lateJob := func(t *testing.T, into uint16) (n *linkNet, e crossEnd, a, late uint64) {
		n = newCrossNet(t, 2)
		var seq atomic.Uint32
		a = n.put(t, 2, "a", 5)
		n.put(t, 3, "b", 7)
		n.hold(2)
		n.hold(3)
		ends, _ := reserveAcross(n, &seq, 0)
		peeked(t, n)
		late = n.put(t, uint64(into)+2, string(rune('a'+into)), 1)
		n.release(3)
		n.release(2)
		return n, nextEnd(t, ends), a, late
	}
	t.Run("a more urgent job put into another group is passed over", func(t *testing.T) {
		n, e, a, late := lateJob(t, 1)
		if e.res != store.Reserved || e.group != 0 || e.job.ID != a {
			t.Fatalf("reserved %+v from group %d (%v), want group 0's job %d: the documented difference", e.job, e.group, e.res, a)
		}
		c := n.stores[3].NewClient(nil)
		defer c.Close()
		c.Watch([]byte("b"))
		if best, ok, _ := c.BestReady(); !ok || best.ID != late {
			t.Errorf("the late job %d is not group 1's best ready (%+v, %v)", late, best, ok)
		}
	})
	t.Run("a more urgent job put into the taking group is taken", func(t *testing.T) {
		_, e, _, late := lateJob(t, 0)
		if e.res != store.Reserved || e.group != 0 || e.job.ID != late {
			t.Fatalf("reserved %+v from group %d (%v), want group 0's new best, job %d, which beats all", e.job, e.group, e.res, late)
		}
	})
	t.Run("after four lost takes the fifth goes unbounded", func(t *testing.T) {
		n := newCrossNet(t, 2)
		var seq atomic.Uint32
		n.put(t, 2, "a", 5)
		worst := n.put(t, 2, "a", 9)
		n.put(t, 3, "b", 7)
		thief := n.stores[2].NewClient(nil)
		defer thief.Close()
		thief.Watch([]byte("a"))
		n.hold(2)
		n.hold(3)
		ends, _ := reserveAcross(n, &seq, 0)
		// Each round, group 0's urgent job goes to another worker after
		// the peeks, and a producer puts another after the take: every
		// peek sees group 0 best, every bounded take finds only job 9.
		for round := 1; round <= maxBoundedRounds+1; round++ {
			peeked(t, n)
			if j, res := thief.Reserve(0); res != store.Reserved || j.ID() == worst {
				t.Fatalf("round %d: the other worker's reserve: %v, or job 9 itself", round, res)
			}
			n.pass(3)
			n.pass(2)
			testproc.WaitFor(t, 5*time.Second, "group 0's take answered", func() bool { return n.heldCount(2) > 0 })
			if round <= maxBoundedRounds {
				n.put(t, 2, "a", 5)
				n.pass(2)
			}
		}
		n.release(2)
		n.release(3)
		if e := nextEnd(t, ends); e.res != store.Reserved || e.group != 0 || e.job.ID != worst {
			t.Fatalf("reserved %+v from group %d (%v), want job %d, unbounded in round %d", e.job, e.group, e.res, worst, maxBoundedRounds+1)
		}
		if r := n.stores[3].Stats().Reserved; r != 0 {
			t.Errorf("group 1 holds %d reserved, want none", r)
		}
	})
}

// TestOfferAgainNotDeclined: a wait sent again (its stream reopened,
// Link.LeaderChanged) while the group's offer is on its way is answered
// with that offer again (the group keeps its answer for a request sent
// again); the first one ends the reserve, and the second must not be
// declined as an offer nobody waits for: that would make ready a job the
// client was handed.
func TestOfferAgainNotDeclined(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	ends, _ := reserveAcross(n, &seq, -1)
	testproc.WaitFor(t, 5*time.Second, "a wait in each group", func() bool {
		return n.stores[2].Stats().Waiting == 1 && n.stores[3].Stats().Waiting == 1
	})
	n.hold(2)
	id := n.put(t, 2, "a", 1)
	testproc.WaitFor(t, 5*time.Second, "the offer held", func() bool { return n.heldCount(2) == 1 })
	n.link.LeaderChanged(0) // what a stream opening again does
	testproc.WaitFor(t, 5*time.Second, "the offer sent again", func() bool { return n.heldCount(2) == 2 })
	n.release(2)
	if e := nextEnd(t, ends); e.job == nil || e.job.ID != id {
		t.Fatalf("the reserve ended with %+v, want job %d", e, id)
	}
	time.Sleep(200 * time.Millisecond) // a decline would be back by now
	if ts, _ := n.stores[2].TubeStats([]byte("a")); ts.Reserved != 1 || ts.Ready != 0 {
		t.Fatalf("job %d handed out, and its group has %d ready, %d reserved", id, ts.Ready, ts.Reserved)
	}
}

// TestCrossReserveTimesOutWhileTubeFrozen: a reserve across groups whose
// watched tube stays frozen by a move (each peek answered
// StatusWrongGroup, the reserve starting over every moveRetry) still ends
// at its timeout, as a reserve on one server would.
func TestCrossReserveTimesOutWhileTubeFrozen(t *testing.T) {
	n := newCrossNet(t, 2)
	n.servers[2].cfg.Frozen = func(uint16) (func([]byte) bool, bool) {
		return func(b []byte) bool { return string(b) == "a" }, true
	}
	var seq atomic.Uint32
	start := time.Now()
	ends, _ := reserveAcross(n, &seq, 200*time.Millisecond)
	select {
	case e := <-ends:
		if e.res != store.TimedOut || time.Since(start) < 200*time.Millisecond {
			t.Fatalf("%+v after %v, want TIMED_OUT after 200ms", e, time.Since(start))
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("no answer after 2s, %d items sent", seq.Load())
	}
}

// TestCrossReserveTimesOutWhilePeeking: the reserve's timeout bounds its
// peeks and takes too: with a group whose leader does not answer (its
// peek held, as the Link holds a call for a leader), a reserve with a
// timeout ends TIMED_OUT at its timeout. The timer started with the
// waits alone, after the Link's wait for a leader (2 s), or never.
// Found by a reviewing helper.
func TestCrossReserveTimesOutWhilePeeking(t *testing.T) {
	n := newCrossNetLeaderless(t)
	var seq atomic.Uint32
	start := time.Now()
	ends, _ := reserveAcross(n, &seq, 300*time.Millisecond)
	e := nextEnd(t, ends)
	if e.res != store.TimedOut || time.Since(start) < 300*time.Millisecond || time.Since(start) > 2*time.Second {
		t.Fatalf("%+v after %v, want TIMED_OUT at 300ms", e, time.Since(start))
	}
}

// TestCrossReserveSoonWithJobReady: a session that holds a job already
// within a second of its TTR's end reserves across groups while a
// watched tube has a ready job: beanstalkd's rule hands it the job
// (DEADLINE_SOON only when no watched tube has one ready), whatever
// the reserve's timeout. The reserve's DEADLINE_SOON timer, due at once,
// must not end it before its peeks are answered.
func TestCrossReserveSoonWithJobReady(t *testing.T) {
	for _, timeout := range []time.Duration{-1, time.Second} {
		n := newCrossNet(t, 2)
		var seq atomic.Uint32
		id := n.put(t, 2, "a", 1)
		n.hold(2)
		n.hold(3) // the peeks' answers take a round trip, as with a remote leader
		ends, r := newCrossReserve(n, &seq, timeout)
		r.soon, r.hasSoon = -100*time.Millisecond, true // a job held elsewhere is near its TTR's end
		r.soonest = func() (time.Duration, bool) { return -100 * time.Millisecond, true }
		r.start()
		testproc.WaitFor(t, 5*time.Second, "both peeks answered", func() bool { return n.heldCount(2) > 0 && n.heldCount(3) > 0 })
		time.Sleep(20 * time.Millisecond)
		n.release(3)
		n.release(2)
		if e := nextEnd(t, ends); e.res != store.Reserved || e.job.ID != id {
			t.Fatalf("timeout %v: the reserve ended %v (%+v), want job %d: a watched tube has it ready", timeout, e.res, e.job, id)
		}
	}
}

// TestCrossReservePeekNoLeader: a reserve across groups, one of which
// has no leader (its peek held for one, as the Link holds a call), is
// answered at the router's tick after its own end, that group counting
// as empty (5.7: a reserve ends at its own timeout), as a reserve in that
// group alone is (Link.Expire): a reserve-with-timeout 0 with the other
// group's ready job, or TIMED_OUT; a reserve whose session holds a job
// near its TTR's end with DEADLINE_SOON. It waited for the Link's wait
// for a leader (LeaderWait, an election) instead.
func TestCrossReservePeekNoLeader(t *testing.T) {
	for _, c := range []struct {
		name    string
		job     bool
		timeout time.Duration
		soon    bool
		want    store.ReserveResult
	}{
		{"timeout 0, a job ready in the other group", true, 0, false, store.Reserved},
		{"timeout 0, nothing ready", false, 0, false, store.TimedOut},
		{"no timeout, a job held near its TTR's end", false, -1, true, store.DeadlineSoon},
	} {
		n := newCrossNetLeaderless(t)
		var id uint64
		if c.job {
			id = n.put(t, 2, "a", 1)
		}
		var seq atomic.Uint32
		lost := time.Now()
		ends, r := newCrossReserve(n, &seq, c.timeout)
		if c.soon {
			r.soon, r.hasSoon = -100*time.Millisecond, true
			r.soonest = func() (time.Duration, bool) { return -100 * time.Millisecond, true }
		}
		r.start()
		time.Sleep(20 * time.Millisecond)
		n.link.Expire(1, lost, time.Now(), 2*time.Second) // the router's tick, well within LeaderWait
		select {
		case e := <-ends:
			if e.res != c.want || c.job && e.job.ID != id {
				t.Fatalf("%s: ended %v (%+v), want %v", c.name, e.res, e.job, c.want)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: not answered at the tick after its end", c.name)
		}
	}
}

// TestCrossReserveTimeoutWithJobReady: a reserve-with-timeout across
// groups, one of which has no leader, whose timeout comes before the
// router's tick ends that group's peek: the other group's ready job is
// the answer, as one server hands out a ready job whatever the timeout.
// Before, the reserve's timer ended it TIMED_OUT first, and the tick
// after, which would have taken the job, came too late. With nothing
// ready, TIMED_OUT comes within lateRound of the timeout all the same.
func TestCrossReserveTimeoutWithJobReady(t *testing.T) {
	const timeout = 150 * time.Millisecond
	for _, job := range []bool{true, false} {
		n := newCrossNetLeaderless(t)
		var id uint64
		if job {
			id = n.put(t, 2, "a", 1)
		}
		var seq atomic.Uint32
		lost := time.Now()
		ends, r := newCrossReserve(n, &seq, timeout)
		r.start()
		time.Sleep(timeout + retryEvery/2) // the timer fires; the tick comes after
		n.link.Expire(1, lost, time.Now(), 2*time.Second)
		select {
		case e := <-ends:
			if job && (e.res != store.Reserved || e.job.ID != id) || !job && e.res != store.TimedOut {
				t.Fatalf("job ready %v: the reserve ended %v (%+v)", job, e.res, e.job)
			}
		case <-time.After(time.Second):
			t.Fatalf("job ready %v: not answered at the tick after its timeout", job)
		}
	}
}

// TestCrossReserveNoSoonNoLongerOwed: a reserve across groups, one of
// which has no leader (its peek held until the router's tick at 250 ms),
// for a session whose estimate when it began had a held job's
// DEADLINE_SOON due, and whose estimate now says it holds none (a
// group's new leader said so): the round finds nothing ready, and the
// reserve times out, as one server's would. With the DEADLINE_SOON due
// after the timeout (150 ms, so the round is late) it ended DEADLINE_SOON
// by the estimate made when it began; so it did with one due mid-round
// (100 ms, the timeout 1 s), the timer having gone on to the timeout.
func TestCrossReserveNoSoonNoLongerOwed(t *testing.T) {
	for _, c := range []struct{ timeout, soon time.Duration }{
		{150 * time.Millisecond, 200 * time.Millisecond},
		{time.Second, 100 * time.Millisecond},
	} {
		n := newCrossNetLeaderless(t)
		var seq atomic.Uint32
		lost := time.Now()
		ends, r := newCrossReserve(n, &seq, c.timeout)
		r.hasSoon, r.soon = true, c.soon
		r.soonest = func() (time.Duration, bool) { return 0, false } // holds nothing any more
		r.start()
		time.Sleep(250 * time.Millisecond)
		n.link.Expire(1, lost, time.Now(), 2*time.Second)
		if e := nextEnd(t, ends); e.res != store.TimedOut {
			t.Fatalf("timeout %v, DEADLINE_SOON at %v: ended %v, want TIMED_OUT", c.timeout, c.soon, e.res)
		}
	}
}

// withdrawnThenReserved sends session 7's next two commands to group 0
// once its reserve across groups ended with a job of group 0 on its way
// (held at member 2): a release of that job, and a reserve. Then it lets
// the held answers through and checks what one server would answer: the
// session never received the job, so the release is NOT_FOUND and the
// reserve gets it; the decline the member sends when the job arrives
// must not take it back from that reserve (docs/design/shards.md 6.5).
func withdrawnThenReserved(t *testing.T, n *linkNet, seq *atomic.Uint32, id uint64) {
	t.Helper()
	released, reserved := make(answers, 1), make(answers, 1)
	n.link.Request(7, 0, seq.Add(1), Request{Op: OpRelease, ID: id, Pri: 1}, released.done)
	n.link.Request(7, 0, seq.Add(1), Request{Op: OpReserve, Tubes: [][]byte{[]byte("a")}}, reserved.done)
	testproc.WaitFor(t, 5*time.Second, "the release answered, held", func() bool { return n.heldCount(2) >= 2 })
	n.release(2)
	if it := released.next(t); it.Reply.Status != StatusNotFound {
		t.Errorf("release of job %d, never received: %+v, want NOT_FOUND", id, it.Reply)
	}
	if it := reserved.next(t); it.Reply.Status != StatusOK || it.Reply.Job.ID != id {
		t.Fatalf("the next reserve: %+v, want job %d", it.Reply, id)
	}
	time.Sleep(200 * time.Millisecond) // the decline is there by now
	if ts, _ := n.stores[2].TubeStats([]byte("a")); ts.Reserved != 1 || ts.Ready != 0 {
		t.Fatalf("job %d, reserved by the session's reserve: group 0 has %d ready, %d reserved", id, ts.Ready, ts.Reserved)
	}
}

// offerHeld starts session 7's reserve across groups 0 and 1, with a
// timeout of 300 ms, waiting in both, then puts a job into group 0 and
// holds its offer at member 2: where the reserve ends, and the job.
func offerHeld(t *testing.T, n *linkNet, seq *atomic.Uint32) (<-chan crossEnd, uint64) {
	t.Helper()
	ends, _ := reserveAcross(n, seq, 300*time.Millisecond)
	testproc.WaitFor(t, 5*time.Second, "a wait in each group", func() bool {
		return n.stores[2].Stats().Waiting == 1 && n.stores[3].Stats().Waiting == 1
	})
	n.hold(2)
	id := n.put(t, 2, "a", 1)
	testproc.WaitFor(t, 5*time.Second, "the offer held", func() bool { return n.heldCount(2) == 1 })
	return ends, id
}

// TestCrossOfferWithdrawnByCancel: group 0's offer is on its way when
// the reserve across groups times out; the reserve's cancel gives the
// job back at once (withdrawnThenReserved).
func TestCrossOfferWithdrawnByCancel(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	ends, id := offerHeld(t, n, &seq)
	if e := nextEnd(t, ends); e.res != store.TimedOut {
		t.Fatalf("the reserve ended with %+v, want TIMED_OUT (the offer held)", e)
	}
	withdrawnThenReserved(t, n, &seq, id)
}

// TestCrossTakeWithdrawnByCancel: group 0's answer to the reserve's take
// is on its way when the reserve times out; the reserve's cancel of the
// take gives the job back at once (withdrawnThenReserved).
func TestCrossTakeWithdrawnByCancel(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	id := n.put(t, 2, "a", 1)
	ends, _ := takeHeld(t, n, &seq, 300*time.Millisecond)
	if ts, _ := n.stores[2].TubeStats([]byte("a")); ts.Reserved != 1 {
		t.Fatalf("group 0 has %d reserved, want the take's job", ts.Reserved)
	}
	if e := nextEnd(t, ends); e.res != store.TimedOut {
		t.Fatalf("the reserve ended with %+v, want TIMED_OUT (the take's answer held)", e)
	}
	withdrawnThenReserved(t, n, &seq, id)
}

// TestCrossReserveTakenHereRunsAtOnce: a reserve across groups that
// takes its job from a group this member leads tells that group's owner
// client the session took it (Server.Received): the session's delete of
// the job then runs at once (the local fast path), not behind the
// member's own loop, as it would while the job is unseen.
func TestCrossReserveTakenHereRunsAtOnce(t *testing.T) {
	n := newRouterNet(t, 2, 0) // member 1 leads group 0
	ta, tb := n.tube(0, "x"), n.tube(1, "x")
	p := n.session(2)
	p.use(ta)
	id := p.put(1, 60)
	c := n.session(1)
	c.watch(ta)
	c.watch(tb)
	c.ignore("default")
	if a := c.do("reserve", func(a *engine.Answer) bool { return c.s.Reserve(0, a) }); a.Reserve != store.Reserved || a.JobID != id {
		t.Fatalf("reserve across groups: %+v, want job %d", a, id)
	}
	before := n.routers[1].local.Load()
	if a := c.do("delete", func(a *engine.Answer) bool { return c.s.Delete(id, a) }); !a.OK {
		t.Fatalf("delete: %+v", a)
	}
	if ran := n.routers[1].local.Load() - before; ran != 1 {
		t.Fatalf("the delete ran %d commands at once, want 1", ran)
	}
}

// TestCrossLateCancelLeavesJobTakenAgain: a reserve across groups times
// out with group 0's offer on its way and its cancel not taken (the
// stream cut for a moment); the offer's decline gives the job back, the
// session's next reserve takes it, and only then does the recalled
// cancel come (Retry sends calls not taken before recalled items): it
// must not give back the job the session now holds, which another worker
// would then get too.
func TestCrossLateCancelLeavesJobTakenAgain(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	ends, id := offerHeld(t, n, &seq)
	n.mu.Lock()
	n.cut[2] = true
	n.mu.Unlock()
	if e := nextEnd(t, ends); e.res != store.TimedOut {
		t.Fatalf("the reserve ended with %+v, want TIMED_OUT (the offer held)", e)
	}
	n.mu.Lock()
	n.cut[2] = false
	n.mu.Unlock()
	n.release(2) // the offer comes, and is declined
	testproc.WaitFor(t, 5*time.Second, "the job declined", func() bool {
		ts, _ := n.stores[2].TubeStats([]byte("a"))
		return ts.Ready == 1
	})
	reserved := make(answers, 1)
	n.link.Request(7, 0, seq.Add(1), Request{Op: OpReserve, Tubes: [][]byte{[]byte("a")}}, reserved.done)
	if it := reserved.next(t); it.Reply.Status != StatusOK || it.Reply.Job.ID != id {
		t.Fatalf("the next reserve: %+v, want job %d", it.Reply, id)
	}
	n.link.Retry(0) // the recalled cancel, at last
	time.Sleep(200 * time.Millisecond)
	if ts, _ := n.stores[2].TubeStats([]byte("a")); ts.Reserved != 1 || ts.Ready != 0 {
		t.Fatalf("job %d, held by the session's reserve: group 0 has %d ready, %d reserved after the late cancel", id, ts.Ready, ts.Reserved)
	}
}

// TestCrossTakeCancelAfterEarlierHandOut: TestCrossTakeWithdrawnByCancel
// with the session having reserved and released the job once before the
// reserve across groups takes it: the take's cancel gives it back all the
// same (TestServerTakeCancelAfterEarlierHandOut).
func TestCrossTakeCancelAfterEarlierHandOut(t *testing.T) {
	n := newCrossNet(t, 2)
	var seq atomic.Uint32
	id := n.put(t, 2, "a", 1)
	got := make(answers, 2)
	n.link.Request(7, 0, seq.Add(1), Request{Op: OpReserve, Tubes: [][]byte{[]byte("a")}}, got.done)
	if it := got.next(t); it.Reply.Job.ID != id {
		t.Fatalf("reserve: %+v", it.Reply)
	}
	n.link.Request(7, 0, seq.Add(1), Request{Op: OpRelease, ID: id, Pri: 1}, got.done)
	if it := got.next(t); it.Reply.Status != StatusOK {
		t.Fatalf("release: %+v", it.Reply)
	}
	ends, _ := takeHeld(t, n, &seq, 300*time.Millisecond)
	if e := nextEnd(t, ends); e.res != store.TimedOut {
		t.Fatalf("the reserve ended with %+v, want TIMED_OUT", e)
	}
	n.release(2)
	readyAgain(t, n, "the take's job ready again")
}

// TestCrossCancelNotTakenGoesBeforeLaterRequests: a wait's cancel not
// taken at once (the stream cut for a moment) and the session's release
// of the job its offer held, made after the cancel and not taken either:
// the Link's retry sends the cancel first, so the release finds the job
// given back, NOT_FOUND as on one server. It sent the calls first, and
// the release answered RELEASED for a job the session never received.
// Found by a review.
func TestCrossCancelNotTakenGoesBeforeLaterRequests(t *testing.T) {
	n := newCrossNet(t, 1)
	offers := make(answers, 1)
	n.link.Wait(10, 0, 1, Wait{ID: 7, Tubes: [][]byte{[]byte("a")}}, offers.done)
	testproc.WaitFor(t, 5*time.Second, "the wait at the leader", func() bool { return n.stores[2].Stats().Waiting == 1 })
	n.hold(2)
	id := n.put(t, 2, "a", 1)
	testproc.WaitFor(t, 5*time.Second, "the offer held", func() bool { return n.heldCount(2) == 1 })
	cut := func(on bool) {
		n.mu.Lock()
		n.cut[2] = on
		n.mu.Unlock()
	}
	cut(true)
	n.link.Cancel(10, 0, 1, 7)
	released := make(answers, 1)
	n.link.Request(10, 0, 2, Request{Op: OpRelease, ID: id, Pri: 1}, released.done)
	cut(false)
	n.link.Retry(0)
	testproc.WaitFor(t, 5*time.Second, "the release answered, held", func() bool { return n.heldCount(2) >= 2 })
	n.release(2)
	if it := released.next(t); it.Reply.Status != StatusNotFound {
		t.Fatalf("release of job %d, never received: %+v, want NOT_FOUND", id, it.Reply)
	}
}
