package router

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// ended is one call of a wait's done.
type ended struct {
	job    *store.Job
	group  int
	result store.ReserveResult
}

// gate holds a group's offers until opened: an offer made (its job
// reserved for the session) but not yet arrived.
type gate struct {
	store.Notifier
	mu     sync.Mutex
	closed bool
	open   chan struct{}
}

func (g *gate) JobReserved(j *store.Job) {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		<-g.open
	}
	g.Notifier.JobReserved(j)
}

// waitSetup is n groups whose session clients report to one arbiter,
// group i's through gates[i].
type waitSetup struct {
	gs    []*testGroup
	a     *Arbiter
	gates []*gate
	ends  chan ended
}

func newWaitSetup(t *testing.T, n int) *waitSetup {
	ws := &waitSetup{gs: newGroups(t, n), a: &Arbiter{}, ends: make(chan ended, 4)}
	var waiters []Waiter
	for i, tg := range ws.gs {
		g := &gate{Notifier: ws.a.Notifier(i), open: make(chan struct{})}
		ws.gates = append(ws.gates, g)
		waiters = append(waiters, tg.newSession(g))
	}
	ws.a.SetGroups(waiters)
	return ws
}

func (ws *waitSetup) wait() {
	ws.a.Wait(func(j *store.Job, group int, r store.ReserveResult) { ws.ends <- ended{j, group, r} })
}

// ended is the wait's end, which must have come.
func (ws *waitSetup) ended(t *testing.T) ended {
	t.Helper()
	select {
	case e := <-ws.ends:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end")
		return ended{}
	}
}

// notEnded fails if the wait's done was called. Offers are made on the
// goroutine that made the job ready, so what the test did has run.
func (ws *waitSetup) notEnded(t *testing.T) {
	t.Helper()
	select {
	case e := <-ws.ends:
		t.Fatalf("the wait ended: %+v", e)
	default:
	}
}

// offerInFlight starts a wait and puts a job into group 0, whose store
// reserves it for the session and offers it; the offer is held at the
// gate. arrive lets it arrive, and returns the job once its put is done.
func (ws *waitSetup) offerInFlight(t *testing.T) (arrive func() *store.Job) {
	t.Helper()
	ws.gates[0].closed = true
	ws.wait()
	var j *store.Job
	put := make(chan struct{})
	go func() {
		defer close(put)
		j = ws.gs[0].put(t, 1)
	}()
	testproc.WaitFor(t, 5*time.Second, "group 0's job reserved for the session", func() bool {
		return ws.gs[0].reserved() == 1
	})
	return func() *store.Job {
		close(ws.gates[0].open)
		<-put
		return j
	}
}

// ready checks that j is ready in tg, reserved by no one.
func ready(t *testing.T, tg *testGroup, j *store.Job) {
	t.Helper()
	st, ok := tg.producer.JobStats(j.ID())
	if !ok || st.State != store.StateReady || st.Reserves != 0 {
		t.Errorf("group %d's job %d: %+v (found %v), want ready and never reserved", tg.g, j.ID(), st, ok)
	}
}

// TestWaitFirstOfferWins: a session waiting in two groups gets the first
// job put in either; its wait in the other is cancelled, so a job put
// there later stays ready.
func TestWaitFirstOfferWins(t *testing.T) {
	ws := newWaitSetup(t, 2)
	ws.wait()
	ws.notEnded(t)
	j := ws.gs[1].put(t, 10)
	if e := ws.ended(t); e.job != j || e.group != 1 || e.result != store.Reserved {
		t.Fatalf("the wait ended with %+v, want group 1's job %d", e, j.ID())
	}
	later := ws.gs[0].put(t, 1)
	ready(t, ws.gs[0], later)
	ws.notEnded(t)
	if ws.a.Declined() != 0 || ws.a.End() {
		t.Errorf("declined %d; End after the win reported the wait undecided", ws.a.Declined())
	}
}

// TestWaitReadyWhenAsked: a job ready in the second group when the wait
// starts is taken at once, and the first group's wait is cancelled.
func TestWaitReadyWhenAsked(t *testing.T) {
	ws := newWaitSetup(t, 2)
	j := ws.gs[1].put(t, 10)
	ws.wait()
	if e := ws.ended(t); e.job != j || e.group != 1 {
		t.Fatalf("the wait ended with %+v, want group 1's job %d", e, j.ID())
	}
	ready(t, ws.gs[0], ws.gs[0].put(t, 1))
}

// TestWaitTwoOffers: two groups reserve a job for the session at once;
// the first offer to arrive wins and the other is declined: its job is
// ready again, as if never reserved, and the session holds one job.
func TestWaitTwoOffers(t *testing.T) {
	ws := newWaitSetup(t, 2)
	arrive := ws.offerInFlight(t)
	j1 := ws.gs[1].put(t, 10)
	if e := ws.ended(t); e.job != j1 || e.group != 1 {
		t.Fatalf("the wait ended with %+v, want group 1's job %d", e, j1.ID())
	}
	ready(t, ws.gs[0], arrive())
	if ws.gs[0].reserved() != 0 || ws.gs[1].reserved() != 1 || ws.a.Declined() != 1 {
		t.Errorf("reserved %d and %d, declined %d; want 0, 1 and 1", ws.gs[0].reserved(), ws.gs[1].reserved(), ws.a.Declined())
	}
	ws.notEnded(t)
}

// TestWaitEnd: the session's timer ends the wait; a job put later stays
// ready, and an offer already on its way is declined.
func TestWaitEnd(t *testing.T) {
	ws := newWaitSetup(t, 2)
	ws.wait()
	if !ws.a.End() {
		t.Fatal("End of an undecided wait reported it decided")
	}
	ready(t, ws.gs[1], ws.gs[1].put(t, 1))

	ws = newWaitSetup(t, 2)
	arrive := ws.offerInFlight(t)
	if !ws.a.End() {
		t.Fatal("End with an offer on its way reported the wait decided")
	}
	ready(t, ws.gs[0], arrive())
	if ws.a.Declined() != 1 {
		t.Errorf("declined %d, want 1", ws.a.Declined())
	}
	ws.notEnded(t)
}

// TestWaitDeadlineSoon: a job the session holds in one group nears its
// TTR while it waits: that group ends the wait with DEADLINE_SOON, as one
// server would, and the other group's wait is cancelled.
func TestWaitDeadlineSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ws := newWaitSetup(t, 2)
		held := ws.gs[1].putTTR(t, 1, 3)
		// The session reserves it, with its TTR of 3 s, then waits.
		if j, r := ws.gs[1].session.Reserve(0); r != store.Reserved || j != held {
			t.Fatalf("Reserve: %v", r)
		}
		ws.wait()
		ws.notEnded(t)
		time.Sleep(2500 * time.Millisecond) // past TTR − 1 s
		synctest.Wait()
		if e := ws.ended(t); e.result != store.DeadlineSoon || e.job != nil {
			t.Fatalf("the wait ended with %+v, want DEADLINE_SOON", e)
		}
		ready(t, ws.gs[0], ws.gs[0].put(t, 1))
	})
}

// TestWaitOwedOffer: an offer owed to a wait that ended is declined even
// when it comes during the session's next wait; declined, its job is
// ready again and goes to that next wait through its own waiter, reserved
// once.
func TestWaitOwedOffer(t *testing.T) {
	ws := newWaitSetup(t, 2)
	arrive := ws.offerInFlight(t)
	j1 := ws.gs[1].put(t, 10)
	if e := ws.ended(t); e.job != j1 {
		t.Fatalf("the first wait ended with %+v, want group 1's job %d", e, j1.ID())
	}
	if ws.a.Owed(0) != 1 || ws.a.Owed(1) != 0 {
		t.Fatalf("owed %d and %d, want 1 and 0", ws.a.Owed(0), ws.a.Owed(1))
	}
	ws.wait()
	ws.notEnded(t)
	j0 := arrive()
	if e := ws.ended(t); e.job != j0 || e.group != 0 {
		t.Fatalf("the second wait ended with %+v, want group 0's job %d", e, j0.ID())
	}
	if st, _ := ws.gs[0].producer.JobStats(j0.ID()); st.Reserves != 1 || ws.a.Declined() != 1 || ws.a.Owed(0) != 0 {
		t.Errorf("job %d reserved %d times, declined %d, owed %d; want 1, 1, 0", j0.ID(), st.Reserves, ws.a.Declined(), ws.a.Owed(0))
	}
}
