package router

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// linkNet joins a member's Link (member 1) to Servers on other members
// in-process, as the transport does: what is sent is queued, and handled
// in order on a goroutine per pair of members; kept while the test holds
// that member's traffic to member 1, or dropped while either is cut.
type linkNet struct {
	t       *testing.T
	link    *Link
	servers map[uint64]*Server
	stores  map[uint64]*store.Store

	mu     sync.Mutex
	leader uint64                    // guarded by mu: the group's leader
	held   map[uint64][][]byte       // guarded by mu: payloads from a member held back
	cut    map[uint64]bool           // guarded by mu: members whose traffic is dropped
	pairs  map[[2]uint64]chan []byte // guarded by mu: each pair's queue
	// closed: the test ended and its queues closed; what a Server still
	// sends (a wait ending on its own goroutine) is dropped. Guarded by mu.
	closed bool

	holdingJobs atomic.Bool // the crossReserves' holding: a graceful shutdown began
}

func newLinkNet(t *testing.T, members ...uint64) *linkNet {
	n := &linkNet{t: t, servers: map[uint64]*Server{}, stores: map[uint64]*store.Store{},
		held: map[uint64][][]byte{}, cut: map[uint64]bool{}, pairs: map[[2]uint64]chan []byte{}, leader: members[0]}
	n.link = NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.leader, n.leader != 0
		},
		Send: func(to uint64, payload []byte) bool { return n.queue(1, to, payload) },
	})
	for _, m := range members {
		st := store.New(store.Options{})
		n.stores[m] = st
		n.servers[m] = NewServer(ServerConfig{
			Group:      func(uint16) *store.Store { return st },
			MaxJobSize: 1 << 16,
			Send:       func(to uint64, payload []byte) bool { return n.queue(m, to, payload) },
		})
		t.Cleanup(n.servers[m].Close)
	}
	return n
}

// queue queues payload from member from to member to.
func (n *linkNet) queue(from, to uint64, payload []byte) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut[from] || n.cut[to] || n.closed {
		return false
	}
	q := n.pairs[[2]uint64{from, to}]
	if q == nil {
		q = make(chan []byte, 1024)
		n.pairs[[2]uint64{from, to}] = q
		go func() {
			for p := range q {
				n.deliver(from, to, p)
			}
		}()
		n.t.Cleanup(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.closed = true
			close(q)
		})
	}
	q <- bytes.Clone(payload)
	return true
}

// deliver hands payload from member from to member to.
func (n *linkNet) deliver(from, to uint64, payload []byte) bool {
	n.mu.Lock()
	switch {
	case n.cut[from] || n.cut[to]:
		n.mu.Unlock()
		return false
	case to == 1 && n.held[from] != nil:
		n.held[from] = append(n.held[from], bytes.Clone(payload))
		n.mu.Unlock()
		return true
	}
	n.mu.Unlock()
	n.handle(from, to, payload)
	return true
}

// handle hands payload from member from to member to, held or not.
func (n *linkNet) handle(from, to uint64, payload []byte) {
	var err error
	if to == 1 {
		err = n.link.Handle(from, payload)
	} else {
		err = n.servers[to].Handle(from, payload)
	}
	if err != nil {
		n.t.Errorf("%d → %d: %v", from, to, err)
	}
}

// heldCount is how many items from m are held: counted by item, since a
// server may send several in one payload or each in its own, as they
// come (two replies flushed together under load).
func (n *linkNet) heldCount(m uint64) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	count := 0
	for _, p := range n.held[m] {
		if err := Each(p, math.MaxInt, func(*Item) { count++ }); err != nil {
			n.t.Errorf("a payload held from %d: %v", m, err)
		}
	}
	return count
}

// hold keeps what member m sends member 1; release delivers it.
func (n *linkNet) hold(m uint64) {
	n.mu.Lock()
	n.held[m] = [][]byte{}
	n.mu.Unlock()
}

func (n *linkNet) release(m uint64) { n.deliverHeld(m, false) }

// pass delivers what member m sent member 1 that was held, and goes on
// holding what m sends next: nothing it answers because of what passed
// slips through before the hold, as a release, then a hold, would let it.
func (n *linkNet) pass(m uint64) { n.deliverHeld(m, true) }

func (n *linkNet) deliverHeld(m uint64, hold bool) {
	n.mu.Lock()
	held := n.held[m]
	delete(n.held, m)
	if hold {
		n.held[m] = [][]byte{}
	}
	n.mu.Unlock()
	for _, p := range held {
		if hold {
			n.handle(m, 1, p) // deliver would hold it again
		} else {
			n.deliver(m, 1, p)
		}
	}
}

// answers collects done's items.
type answers chan Item

func (a answers) done(it *Item) { a <- copyReply(*it) }

func (a answers) next(t *testing.T) Item {
	t.Helper()
	select {
	case it := <-a:
		return it
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
	}
	return Item{}
}

// TestLinkRequests: requests through the link are answered by the
// group's leader, each to its own callback.
func TestLinkRequests(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 16)
	tube := []byte("t")
	n.link.Request(10, 0, 1, Request{Op: OpPut, Tube: tube, TTR: 60, Body: []byte("one\r\n")}, a.done)
	n.link.Request(11, 0, 1, Request{Op: OpReserve, Tubes: [][]byte{tube}, Timeout: 0}, a.done)
	put, res := a.next(t), a.next(t)
	if put.Session != 10 || put.Reply.ID == 0 || res.Session != 11 || res.Reply.Job.ID != put.Reply.ID || string(res.Reply.Job.Body) != "one\r\n" {
		t.Fatalf("put %+v, reserve %+v", put.Reply, res.Reply)
	}
	if p := n.link.Pending(); p != 0 {
		t.Errorf("%d calls pending after their answers", p)
	}
}

// TestLinkClose: a session's close drops its own pending calls, in its
// group, and no other's: theirs are answered as before.
func TestLinkClose(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 16)
	n.hold(2)
	for seq := uint32(1); seq <= 3; seq++ {
		n.link.Request(10, 0, seq, Request{Op: OpStats}, a.done)
		n.link.Request(11, 0, seq, Request{Op: OpStats}, a.done)
	}
	n.link.Request(10, 1, 4, Request{Op: OpStats}, func(*Item) {}) // group 1, which the close does not name
	n.link.Close(10, 0)
	if p := n.link.Pending(); p != 4 {
		t.Fatalf("%d calls pending after session 10 closed in group 0, want 4 (11's three, 10's in group 1)", p)
	}
	n.release(2)
	for range 3 {
		if it := a.next(t); it.Session != 11 {
			t.Fatalf("an answer for session %d, whose calls were dropped", it.Session)
		}
	}
}

// TestLinkCloseUnposted: a close made while the group's leader is not
// known for a moment (its reports stale, on a member resumed from a
// stop), or not taken, goes with the group's next Retry to the same
// leader, with no leader change: the session's owner client there
// closes.
func TestLinkCloseUnposted(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 16)
	n.link.Request(10, 0, 1, Request{Op: OpStats}, a.done)
	n.link.Request(11, 0, 1, Request{Op: OpStats}, a.done)
	a.next(t)
	a.next(t)
	if o := n.servers[2].Owners(); o != 2 {
		t.Fatalf("the leader holds %d owner clients, want 2", o)
	}
	setLeader := func(m uint64) {
		n.mu.Lock()
		n.leader = m
		n.mu.Unlock()
	}
	setLeader(0)
	n.link.Close(10, 0)
	n.mu.Lock()
	n.cut[2] = true
	n.mu.Unlock()
	setLeader(2)
	n.link.Close(11, 0)
	n.mu.Lock()
	n.cut[2] = false
	n.mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	if o := n.servers[2].Owners(); o != 2 {
		t.Fatalf("the leader holds %d owner clients before the closes came, want 2", o)
	}
	n.link.Retry(0)
	testproc.WaitFor(t, 5*time.Second, "the leader closing both owner clients", func() bool {
		return n.servers[2].Owners() == 0
	})
}

// TestLinkKeepsOrder: a session's call that could not be sent holds the
// calls made after it, which go after it once it goes: a leader takes a
// sequence below the last it ran for a resend.
func TestLinkKeepsOrder(t *testing.T) {
	var mu sync.Mutex
	var refuse bool
	var sent []uint32
	l := NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) { return 2, true },
		Send: func(_ uint64, payload []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			if refuse {
				return false
			}
			_ = Each(payload, 1<<16, func(it *Item) { sent = append(sent, it.Seq) })
			return true
		},
	})
	mu.Lock()
	refuse = true
	mu.Unlock()
	l.Request(10, 0, 1, Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte("big\r\n")}, func(*Item) {})
	mu.Lock()
	refuse = false
	mu.Unlock()
	l.Request(10, 0, 2, Request{Op: OpDelete, ID: 5}, func(*Item) {})
	l.Request(11, 0, 1, Request{Op: OpDelete, ID: 6}, func(*Item) {}) // another session goes on
	l.Retry(0)
	mu.Lock()
	defer mu.Unlock()
	if want := []uint32{1, 1, 2}; !slices.Equal(sent, want) {
		t.Errorf("sent sequences %v, want %v: session 10's 2 after its 1, session 11's at once", sent, want)
	}
}

// TestLinkResend: the calls a leader never answered go again, in order,
// to the group's next leader, which answers them.
func TestLinkResend(t *testing.T) {
	n := newLinkNet(t, 2, 3)
	a := make(answers, 16)
	tube := []byte("t")
	n.mu.Lock()
	n.cut[2] = true
	n.mu.Unlock()
	n.link.Request(10, 0, 1, Request{Op: OpPut, Tube: tube, TTR: 60, Body: []byte("first\r\n")}, a.done)
	n.link.Request(10, 0, 2, Request{Op: OpPut, Tube: tube, TTR: 60, Body: []byte("second\r\n")}, a.done)
	n.link.Request(10, 0, 3, Request{Op: OpPeekReady, Tube: tube}, a.done)
	if p := n.link.Pending(); p != 3 {
		t.Fatalf("%d calls pending, want 3 unanswered", p)
	}
	n.mu.Lock()
	n.leader = 3
	n.mu.Unlock()
	n.link.LeaderChanged(0)
	var ids []uint64
	for seq := uint32(1); seq <= 3; seq++ {
		it := a.next(t)
		if it.Seq != seq || it.Reply.Status != StatusOK {
			t.Fatalf("answer %d: %+v", seq, it)
		}
		ids = append(ids, it.Reply.ID)
		if seq == 3 && (it.Reply.Job.ID != ids[0] || string(it.Reply.Job.Body) != "first\r\n") {
			t.Errorf("peek-ready after the two puts: %+v, want the first", it.Reply.Job)
		}
	}
	if st := n.stores[3].Stats(); st.TotalJobs != 2 {
		t.Errorf("the new leader put %d jobs", st.TotalJobs)
	}
}

// TestLinkHeld: a leader answers OpHeld from its owner client, OK for a
// job the session holds and NOT_FOUND for one it does not, at once while
// the session's reserve waits there, and again when asked again; a
// leader elected after a crash, which has none of the reservations,
// answers NOT_FOUND; a leader that does not answer held (a release
// before) is not asked: the call ends as StatusUnknown.
func TestLinkHeld(t *testing.T) {
	n := newLinkNet(t, 2, 3, 4)
	n.link.cfg.AnswersHeld = func(member uint64) bool { return member != 4 }
	a := make(answers, 16)
	tube := []byte("h")
	n.link.Request(10, 0, 1, Request{Op: OpPut, Tube: tube, TTR: 60, Body: []byte("held\r\n")}, a.done)
	id := a.next(t).Reply.ID
	n.link.Request(10, 0, 2, Request{Op: OpReserve, Tubes: [][]byte{tube}, Timeout: 0}, a.done)
	if got := a.next(t); got.Reply.Job.ID != id {
		t.Fatalf("reserve: %+v, want job %d", got.Reply, id)
	}
	n.link.Request(10, 0, 3, Request{Op: OpReserve, Tubes: [][]byte{tube}, Timeout: -1}, a.done) // waits
	testproc.WaitFor(t, 5*time.Second, "the reserve waiting", func() bool { return n.stores[2].Stats().Waiting == 1 })
	ask := func(seq uint32, job uint64, want Status) {
		t.Helper()
		n.link.Request(10, 0, seq, Request{Op: OpHeld, ID: job}, a.done)
		if got := a.next(t); got.Seq != seq || got.Reply.Status != want {
			t.Fatalf("held %d (sequence %d): %+v, want status %d", job, seq, got, want)
		}
	}
	ask(4, id, StatusOK)
	ask(5, id+1, StatusNotFound)
	ask(4, id, StatusOK) // asked again: answered again
	if st := n.stores[2].Stats(); st.Waiting != 1 || st.Reserved != 1 {
		t.Fatalf("the leader's store after the questions: %+v, want the reserve waiting on and the job reserved", st)
	}

	if ready := n.put(t, 3, "h", 0); ready != id {
		t.Fatalf("the next leader's job %d, want %d", ready, id)
	}
	n.mu.Lock()
	n.leader = 3 // elected after a crash: the job ready, held by no one
	n.mu.Unlock()
	ask(6, id, StatusNotFound)

	n.mu.Lock()
	n.leader = 4
	n.mu.Unlock()
	ask(7, id, StatusUnknown)
	if o := n.servers[4].Owners(); o != 0 {
		t.Errorf("the leader that does not answer held was sent the question: %d owners", o)
	}
	if p := n.link.Pending(); p != 1 {
		t.Errorf("%d calls pending, want the waiting reserve alone", p)
	}
}

// TestLinkLateOffer: an offer that reaches the link after its wait was
// cancelled is declined: its job is ready again at the group.
func TestLinkLateOffer(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 16)
	tube := []byte("w")
	n.link.Wait(10, 0, 1, Wait{ID: 7, Tubes: [][]byte{tube}}, a.done)
	n.hold(2) // the offer will wait on its way
	n.link.Request(11, 0, 1, Request{Op: OpPut, Tube: tube, TTR: 60, Body: []byte("j\r\n")}, a.done)
	testproc.WaitFor(t, 5*time.Second, "the put's reply and the offer held", func() bool { return n.heldCount(2) == 2 })
	n.link.Cancel(10, 0, 1, 7) // too late: the group reserved the job for the wait
	n.release(2)
	put := a.next(t)
	if put.Session != 11 || put.Reply.ID == 0 {
		t.Fatalf("the put: %+v", put)
	}
	select {
	case it := <-a:
		t.Fatalf("a cancelled wait got %+v", it)
	case <-time.After(50 * time.Millisecond):
	}
	testproc.WaitFor(t, 5*time.Second, "the late offer declined: its job ready, none reserved", func() bool {
		ts, _ := n.stores[2].TubeStats(tube)
		return ts.Ready == 1 && ts.Reserved == 0
	})
}

// TestLinkExpire: calls that waited for a leader past the bound are
// answered as 5.7 says: a request no leader took, StatusNoLeader; one a
// leader took before it was lost, StatusUnknown; a reserve at its own
// timeout, StatusTimedOut, and one without a timeout not at all; refs as
// acknowledged. A call younger than the bound, or made after the leader
// was lost less than the bound ago, waits on.
func TestLinkExpire(t *testing.T) {
	var sent bool
	l := NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) { return 2, sent },
		Send:   func(uint64, []byte) bool { return true },
	})
	type key struct {
		session uint64
		seq     uint32
	}
	got := map[key]Status{}
	done := func(it *Item) { got[key{it.Session, it.Seq}] = it.Reply.Status }
	put := Request{Op: OpPut, Tube: []byte("t"), TTR: 1, Body: []byte("x\r\n")}
	sent = true
	l.Request(1, 0, 1, put, done) // taken by leader 2, which is lost
	sent = false
	l.Request(1, 0, 2, put, done) // never taken
	l.Request(2, 0, 1, Request{Op: OpReserve, Tubes: [][]byte{[]byte("t")}, Timeout: time.Second}, done)
	l.Request(3, 0, 1, Request{Op: OpReserve, Tubes: [][]byte{[]byte("t")}, Timeout: -1}, done)
	l.Refs(0, 1, Refs{Counts: []RefCount{{Tube: []byte("t"), Using: 1}}}, done)
	start := time.Now()

	l.Expire(0, start, start.Add(900*time.Millisecond), 2*time.Second)
	if len(got) != 0 {
		t.Fatalf("before the bound: %v answered", got)
	}
	l.Expire(0, start, start.Add(1500*time.Millisecond), 2*time.Second)
	if len(got) != 1 || got[key{2, 1}] != StatusTimedOut {
		t.Fatalf("at the reserve's timeout: %v, want only its TIMED_OUT (sequence 1 of session 2)", got)
	}
	clear(got)
	l.Expire(0, start.Add(time.Second), start.Add(2500*time.Millisecond), 2*time.Second)
	if len(got) != 0 {
		t.Fatalf("the leader lost 1.5 s ago, the bound 2 s: %v answered", got)
	}
	l.Expire(0, start, start.Add(3*time.Second), 2*time.Second)
	if l.Pending() != 1 {
		t.Fatalf("%d calls pending after the bound, want the reserve without a timeout", l.Pending())
	}
	want := map[key]Status{{1, 1}: StatusUnknown, {1, 2}: StatusNoLeader, {0, 1}: StatusOK}
	if len(got) != len(want) {
		t.Errorf("answered %v, want %v", got, want)
	}
	for k, st := range want {
		if got[k] != st {
			t.Errorf("session %d, sequence %d: %v, want %v", k.session, k.seq, got[k], st)
		}
	}
}

// TestLinkRefsFirst: a session's request waits behind the member's refs
// items made before it and not taken yet (no stream to the leader then),
// so that it counts the use and watch they carry: a new connection's first
// stats-tube, sent once the stream is up and before anything retried the
// refs, counted nothing (conformance's "connections count in stats-tube at
// once", one run in eight).
func TestLinkRefsFirst(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 16)
	tube := []byte("r")
	n.mu.Lock()
	n.cut[2] = true
	n.mu.Unlock()
	n.link.Refs(0, 1, Refs{Counts: []RefCount{{Tube: tube, Using: 1, Watching: 1}}}, func(*Item) {})
	n.mu.Lock()
	n.cut[2] = false // up again, nothing retried yet
	n.mu.Unlock()
	n.link.Request(11, 0, 1, Request{Op: OpStatsTube, Tube: tube}, a.done)
	n.link.Retry(0)
	it := a.next(t)
	if it.Reply.Status != StatusOK || it.Reply.TubeStats.Using != 1 || it.Reply.TubeStats.Watching != 1 {
		t.Fatalf("stats-tube after the refs item: %+v, want using and watching 1", it.Reply)
	}
}

// TestLinkCancelRecalled: a cancel not taken (its leader's stream down
// for a moment) goes with the group's next Retry, so the wait it ends
// does not hold the session's later request behind it; and a cancel sent
// again (a stream opened again to the same leader) ends only the reserve
// it named, not the session's next one.
func TestLinkCancelRecalled(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 16)
	cut := func(on bool) {
		n.mu.Lock()
		n.cut[2] = on
		n.mu.Unlock()
	}
	w := []byte("w")
	n.link.Wait(10, 0, 1, Wait{ID: 7, Tubes: [][]byte{w}}, a.done)
	testproc.WaitFor(t, 5*time.Second, "the wait at the leader", func() bool { return n.stores[2].Stats().Waiting == 1 })
	cut(true)
	n.link.Cancel(10, 0, 1, 7)
	cut(false)
	n.link.Request(10, 0, 2, Request{Op: OpPut, Tube: []byte("x"), TTR: 60, Body: []byte("j\r\n")}, a.done)
	n.link.Retry(0)
	if it := a.next(t); it.Seq != 2 || it.Reply.Status != StatusOK {
		t.Fatalf("the put after the lost cancel: %+v", it)
	}
	if st := n.stores[2].Stats(); st.Waiting != 0 {
		t.Fatalf("%d waiting at the leader after the cancel went again", st.Waiting)
	}

	n.link.Request(10, 0, 3, Request{Op: OpReserve, Tubes: [][]byte{w}, Timeout: -1}, a.done)
	testproc.WaitFor(t, 5*time.Second, "the reserve waiting", func() bool { return n.stores[2].Stats().Waiting == 1 })
	n.link.Cancel(10, 0, 3, 0)
	testproc.WaitFor(t, 5*time.Second, "the reserve cancelled", func() bool { return n.stores[2].Stats().Waiting == 0 })
	n.link.Request(10, 0, 4, Request{Op: OpReserve, Tubes: [][]byte{w}, Timeout: -1}, a.done)
	testproc.WaitFor(t, 5*time.Second, "the next reserve waiting", func() bool { return n.stores[2].Stats().Waiting == 1 })
	n.link.LeaderChanged(0) // the same leader: its stream opened again
	// Another session's request, answered, comes after what went again
	// on the same stream.
	n.link.Request(11, 0, 1, Request{Op: OpStats}, a.done)
	if it := a.next(t); it.Session != 11 {
		t.Fatalf("%+v, want session 11's stats", it)
	}
	if st := n.stores[2].Stats(); st.Waiting != 1 {
		t.Fatalf("%d waiting at the leader after the cancel went again, want the next reserve", st.Waiting)
	}
	id := n.put(t, 2, "w", 0)
	if it := a.next(t); it.Seq != 4 || it.Reply.Job.ID != id {
		t.Fatalf("the reserve after the recalled cancel went again: %+v, want job %d", it, id)
	}
}

// TestLinkRecentCancelsRecalled: a session's last cancels in a group,
// none taken, all go again: a reserve across groups that starts over
// cancels its wait, then the next start's wait, then its take when it
// ends, and the one lost would leave a wait open at the leader (the
// session's later requests behind it) or a take's job held unseen. One
// recalled a session, or one of each kind, kept only the last.
func TestLinkRecentCancelsRecalled(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 16)
	n.link.Wait(10, 0, 1, Wait{ID: 7, Tubes: [][]byte{[]byte("w")}}, a.done)
	testproc.WaitFor(t, 5*time.Second, "the wait at the leader", func() bool { return n.stores[2].Stats().Waiting == 1 })
	n.mu.Lock()
	n.cut[2] = true
	n.mu.Unlock()
	n.link.Cancel(10, 0, 1, 7)
	n.link.Cancel(10, 0, 2, 8) // the next start's wait, say
	n.link.Cancel(10, 0, 3, 0) // and its take
	n.mu.Lock()
	n.cut[2] = false
	n.mu.Unlock()
	n.link.Retry(0)
	testproc.WaitFor(t, 5*time.Second, "the first wait's cancel sent again", func() bool { return n.stores[2].Stats().Waiting == 0 })
}

// TestLinkResendSkipsAnswered: a call answered (or cancelled) after a
// resend listed it is not sent: a reserve run again would hold a job for
// a session no longer waiting for it.
func TestLinkResendSkipsAnswered(t *testing.T) {
	var sent atomic.Int32
	l := NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) { return 2, true },
		Send:   func(uint64, []byte) bool { sent.Add(1); return true },
	})
	l.Request(10, 0, 1, Request{Op: OpReserve, Tubes: [][]byte{[]byte("t")}, Timeout: 0}, func(*Item) {})
	l.mu.Lock()
	c := l.findLocked(callKey{10, 0, 1})
	l.mu.Unlock()
	l.handle(2, &Item{Kind: KindReply, Session: 10, Seq: 1, Reply: Reply{Status: StatusTimedOut, Result: ResultNone}})
	l.postCall(c) // as a resend that listed it before its answer came
	if n := sent.Load(); n != 1 {
		t.Fatalf("the call was sent %d times, want once: an answered call was sent again", n)
	}
}

// TestLinkResendKeepsOrder: a call made while a resend sends its
// session's older calls to the group's leader goes after them, not
// between: the leader runs a session's requests in the order they come
// (docs/design/shards.md 5.3).
func TestLinkResendKeepsOrder(t *testing.T) {
	var mu sync.Mutex
	var sent []uint32
	var l *Link
	resending := false
	l = NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) { return 2, true },
		Send: func(_ uint64, payload []byte) bool {
			mu.Lock()
			_ = Each(payload, 1<<16, func(it *Item) { sent = append(sent, it.Seq) })
			first := resending
			resending = false
			mu.Unlock()
			if first {
				// The session's loop pipelines its next put meanwhile.
				l.Request(10, 0, 4, Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte("4\r\n")}, func(*Item) {})
			}
			return true
		},
	})
	for seq := uint32(1); seq <= 3; seq++ {
		l.Request(10, 0, seq, Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte("j\r\n")}, func(*Item) {})
	}
	mu.Lock()
	sent, resending = nil, true
	mu.Unlock()
	l.LeaderChanged(0)
	mu.Lock()
	defer mu.Unlock()
	if want := []uint32{1, 2, 3, 4}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v after the leader change, want %v: the resent calls, then the new one", sent, want)
	}
}

// bodiesLink is a Link whose group g is led by member g+2, which takes
// every payload; sent lists what it sent as each request's body and its
// group ("a@2"), and route sends a call again to group 2.
func bodiesLink() (l *Link, sent func() []string, route func(*Request, func(uint16, uint32))) {
	var mu sync.Mutex
	var bodies []string
	var next atomic.Uint32
	next.Store(10)
	l = NewLink(LinkConfig{
		Leader: func(g uint16) (uint64, bool) { return uint64(g) + 2, true },
		Send: func(_ uint64, payload []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			_ = Each(payload, 1<<16, func(it *Item) {
				bodies = append(bodies, fmt.Sprintf("%s@%d", strings.TrimSuffix(string(it.Request.Body), "\r\n"), it.Group))
			})
			return true
		},
	})
	sent = func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(bodies)
	}
	return l, sent, func(_ *Request, post func(uint16, uint32)) { post(2, next.Add(1)) }
}

// TestLinkRerouteKeepsOrder: a session's pipelined puts answered
// StatusWrongGroup (their tube moving) go again to where the tube went in
// the order they were made, whatever the order their answers came in, and
// a put the session makes meanwhile goes after them: one timer sends them
// all (before, each had its own, and the new put went at once).
func TestLinkRerouteKeepsOrder(t *testing.T) {
	l, sent, route := bodiesLink()
	put := func(g uint16, seq uint32, body string) {
		l.RequestRouted(10, g, seq, Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte(body + "\r\n")}, route, func(*Item) {})
	}
	for seq, body := range []string{"a", "b", "c"} {
		put(1, uint32(seq+1), body)
	}
	for _, seq := range []uint32{3, 1, 2} {
		l.handle(3, &Item{Kind: KindReply, Group: 1, Session: 10, Seq: seq, Reply: Reply{Status: StatusWrongGroup}})
	}
	put(2, 4, "d") // the session's routing knows the move now
	testproc.WaitFor(t, 5*time.Second, "the four puts sent to group 2", func() bool { return len(sent()) == 7 })
	if want := []string{"a@1", "b@1", "c@1", "a@2", "b@2", "c@2", "d@2"}; !slices.Equal(sent(), want) {
		t.Fatalf("sent in the order %v, want %v", sent(), want)
	}
}

// TestLinkRerouteOverlapping: a timer that fires while a session's
// rerouted calls are being sent (the lock let go) leaves them to that
// run, and a call answered StatusWrongGroup meanwhile goes again after
// them. Before, the second run ended the queue, the first then ended the
// one the answer made, whose timer found none: the member panicked (seen
// in CI's fault test).
func TestLinkRerouteOverlapping(t *testing.T) {
	var l *Link
	var mu sync.Mutex
	var sent []string
	once := sync.Once{}
	var next atomic.Uint32
	next.Store(10)
	l = NewLink(LinkConfig{
		Leader: func(g uint16) (uint64, bool) { return uint64(g) + 2, true },
		Send: func(_ uint64, payload []byte) bool {
			_ = Each(payload, 1<<16, func(it *Item) {
				body := fmt.Sprintf("%s@%d", strings.TrimSuffix(string(it.Request.Body), "\r\n"), it.Group)
				mu.Lock()
				sent = append(sent, body)
				mu.Unlock()
				if body != "a@2" {
					return
				}
				once.Do(func() {
					// a goes again, the lock let go: another timer
					// fires, then b is answered StatusWrongGroup.
					l.rerouteDue(10)
					l.handle(3, &Item{Kind: KindReply, Group: 1, Session: 10, Seq: 2, Reply: Reply{Status: StatusWrongGroup}})
				})
			})
			return true
		},
	})
	route := func(_ *Request, post func(uint16, uint32)) { post(2, next.Add(1)) }
	for seq, body := range []string{"a", "b"} {
		l.RequestRouted(10, 1, uint32(seq+1), Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte(body + "\r\n")}, route, func(*Item) {})
	}
	l.handle(3, &Item{Kind: KindReply, Group: 1, Session: 10, Seq: 1, Reply: Reply{Status: StatusWrongGroup}})
	testproc.WaitFor(t, 5*time.Second, "b sent again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(sent, "b@2")
	})
	testproc.WaitFor(t, 5*time.Second, "no session rerouting", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.rerouting) == 0
	})
}

// TestLinkDescribePending: the calls waiting for their answers are named
// oldest first, then those waiting to go again where their tubes moved,
// with their queue's state; an answered one is gone.
func TestLinkDescribePending(t *testing.T) {
	l, _, route := bodiesLink()
	for seq, body := range []string{"a", "b", "c"} {
		l.RequestRouted(10, 1, uint32(seq+1), Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte(body + "\r\n")}, route, func(*Item) {})
	}
	l.handle(3, &Item{Kind: KindReply, Group: 1, Session: 10, Seq: 1, Reply: Reply{Status: StatusOK, Result: ResultID, ID: 1}})
	l.handle(3, &Item{Kind: KindReply, Group: 1, Session: 10, Seq: 3, Reply: Reply{Status: StatusWrongGroup}})
	got := l.DescribePending(time.Now())
	if len(got) != 2 ||
		!strings.HasPrefix(got[0], "pending: session 10 group 1 seq 2 put, sent true, taken 1, made ") ||
		!strings.HasPrefix(got[1], "rerouting: session 10 group 1 seq 3 put, sent true, taken 1, made ") ||
		!strings.Contains(got[1], ", moved ") || !strings.HasSuffix(got[1], "(queue of session 10: armed true, sending false, behind a call false)") {
		t.Fatalf("described %q", got)
	}
}

// TestLinkRoutedWaitsForOldGroup: a put routed to its tube's new group
// while the session's put of the tube before it is still pending in the
// old group waits for that one's answer, and goes after it: after it
// goes again (StatusWrongGroup), or once it is answered there. Before, it
// went at once, and landed first. Another tube's put answered
// StatusWrongGroup meanwhile waits with it.
func TestLinkRoutedWaitsForOldGroup(t *testing.T) {
	for _, wrong := range []bool{true, false} {
		l, sent, route := bodiesLink()
		put := func(g uint16, seq uint32, tube, body string) {
			l.RequestRouted(10, g, seq, Request{Op: OpPut, Tube: []byte(tube), TTR: 60, Body: []byte(body + "\r\n")}, route, func(*Item) {})
		}
		put(1, 1, "t", "a")
		put(1, 2, "t", "b")
		put(3, 3, "u", "x") // another tube's: not held
		put(2, 4, "t", "c") // the member's routing knows the move now
		if want := []string{"a@1", "b@1", "x@3"}; !slices.Equal(sent(), want) {
			t.Fatalf("sent %v before b's answer, want %v", sent(), want)
		}
		l.handle(3, &Item{Kind: KindReply, Group: 1, Session: 10, Seq: 1, Reply: Reply{Status: StatusOK, Result: ResultID, ID: 1}})
		l.handle(5, &Item{Kind: KindReply, Group: 3, Session: 10, Seq: 3, Reply: Reply{Status: StatusWrongGroup}})
		time.Sleep(5 * moveRetry)
		if got := sent(); len(got) != 3 {
			t.Fatalf("sent %v before b's answer", got)
		}
		status := StatusOK
		if wrong {
			status = StatusWrongGroup
		}
		l.handle(3, &Item{Kind: KindReply, Group: 1, Session: 10, Seq: 2, Reply: Reply{Status: status, Result: ResultID, ID: 2}})
		want := []string{"a@1", "b@1", "x@3", "x@2", "c@2"}
		if wrong {
			want = []string{"a@1", "b@1", "x@3", "b@2", "x@2", "c@2"}
		}
		testproc.WaitFor(t, 5*time.Second, "c sent", func() bool { return len(sent()) == len(want) })
		if !slices.Equal(sent(), want) {
			t.Errorf("b answered %v: sent %v, want %v", status, sent(), want)
		}
		l.mu.Lock()
		if len(l.rerouting) != 0 || len(l.lastRouted) != 2 { // x's and c's, pending
			t.Errorf("b answered %v: %d sessions rerouting, %d tubes' last calls, want 0 and 2", status, len(l.rerouting), len(l.lastRouted))
		}
		l.mu.Unlock()
	}
}

// benchLink is a Link whose group 0 is led by member 2, which takes
// every payload, with a put of session 7's and its reply.
func benchLink() (*Link, Request, Item, func(*Item)) {
	l := NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) { return 2, true },
		Send:   func(uint64, []byte) bool { return true },
	})
	req := Request{Op: OpPut, Tube: []byte("default"), TTR: 60, Body: bytes.Repeat([]byte("b"), 100)}
	reply := Item{Kind: KindReply, Session: 7, Reply: Reply{Status: StatusOK, Result: ResultID, ID: 1}}
	done := func(*Item) {}
	return l, req, reply, done
}

// BenchmarkLinkRequest is a routed put's cost at its member's Link: the
// call made, encoded and sent, then answered.
func BenchmarkLinkRequest(b *testing.B) { benchRequests(b, nil) }

// BenchmarkLinkRequestRouted is BenchmarkLinkRequest for a put routed by
// its tube (RequestRouted with a route, as a session of a cluster of
// several groups makes one): its tube's last call noted and forgotten.
func BenchmarkLinkRequestRouted(b *testing.B) {
	benchRequests(b, func(*Request, func(uint16, uint32)) {})
}

// benchRequests is BenchmarkLinkRequest's, each call with route.
func benchRequests(b *testing.B, route func(*Request, func(uint16, uint32))) {
	l, req, reply, done := benchLink()
	b.ReportAllocs()
	for i := range b.N {
		seq := uint32(i + 1)
		l.RequestRouted(7, 0, seq, req, route, done)
		reply.Seq = seq
		l.handle(2, &reply)
	}
	if l.Pending() != 0 || len(l.lastRouted) != 0 {
		b.Fatalf("%d calls pending, %d tubes' last calls", l.Pending(), len(l.lastRouted))
	}
}

// BenchmarkLinkRequestPipelined is BenchmarkLinkRequest with 100 of the
// session's calls in flight, as a pipelining client keeps them: each
// answer comes for the oldest.
func BenchmarkLinkRequestPipelined(b *testing.B) {
	const depth = 100
	l, req, reply, done := benchLink()
	for seq := uint32(1); seq <= depth; seq++ {
		l.RequestRouted(7, 0, seq, req, nil, done)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		seq := uint32(i + 1)
		l.RequestRouted(7, 0, seq+depth, req, nil, done)
		reply.Seq = seq
		l.handle(2, &reply)
	}
	b.StopTimer()
	if l.Pending() != depth {
		b.Fatalf("%d calls pending, want %d", l.Pending(), depth)
	}
}

// TestLateReserveReplyAfterExpireDeclined: a reserve the Link ended at
// its timeout while its group had no leader known (Expire: TIMED_OUT)
// may have been taken by a leader still alive, whose job comes after:
// nothing waits for it, so it goes back rather than stay reserved by a
// session that was told TIMED_OUT, until its TTR (found by a reviewing
// helper).
func TestLateReserveReplyAfterExpireDeclined(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 4)
	tube := []byte("late")
	n.link.Request(3, 0, 1, Request{Op: OpPut, Tube: tube, TTR: 600, Body: []byte("j\r\n")}, a.done)
	id := a.next(t).Reply.ID
	n.hold(2)
	start := time.Now()
	n.link.Request(7, 0, 1, Request{Op: OpReserve, Tubes: [][]byte{tube}, Timeout: 50 * time.Millisecond}, a.done)
	testproc.WaitFor(t, 5*time.Second, "the reserve's job held back", func() bool { return n.heldCount(2) == 1 })
	n.link.Expire(0, start, start.Add(time.Second), 2*time.Second)
	if it := a.next(t); it.Reply.Status != StatusTimedOut {
		t.Fatalf("the reserve ended with %+v, want TIMED_OUT", it.Reply)
	}
	n.release(2)
	testproc.WaitFor(t, 5*time.Second, fmt.Sprintf("job %d ready again", id), func() bool {
		ts, _ := n.stores[2].TubeStats(tube)
		return ts.Ready == 1 && ts.Reserved == 0
	})
}

// TestExpiredReservesForgotten: the reserves Expire ended are kept for
// closeRecall only, forgotten as Expire ends more, not kept until a late
// job comes (a long outage's timed-out reserves would be kept for the
// process's life; found by a reviewing helper).
func TestExpiredReservesForgotten(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 64)
	n.hold(2)
	start := time.Now()
	for s := uint64(10); s < 40; s++ {
		n.link.Request(s, 0, 1, Request{Op: OpReserve, Tubes: [][]byte{[]byte("t")}, Timeout: 10 * time.Millisecond}, a.done)
	}
	n.link.Expire(0, start, start.Add(time.Second), 2*time.Second)
	for range 30 {
		a.next(t)
	}
	n.link.mu.Lock()
	kept := len(n.link.expiredReserves.keys)
	for i := range n.link.expiredReserves.keys {
		n.link.expiredReserves.keys[i].at = time.Now().Add(-time.Hour)
	}
	n.link.mu.Unlock()
	if kept != 30 {
		t.Fatalf("%d expired reserves kept, want the 30 just ended", kept)
	}
	n.link.Expire(0, start, time.Now(), 2*time.Second)
	n.link.mu.Lock()
	left := len(n.link.expiredReserves.keys)
	n.link.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d expired reserves an hour old still kept", left)
	}
}

// TestLinkNoResendPastDedupWindow: a change that a lost leader took may
// have run there, and only the group's table of outcomes (5.6) stops the
// next leader from running it again, for store.DedupTTL after it ran. A
// new leader this member cannot reach (its commands stream down one way,
// or its queue full) is known and serving all along, so Expire never
// ends the call: before, it was sent whenever the stream came back, after
// its key may have expired there, and ran twice (a second job for one
// put). Past resendWithin since a leader took it, it ends StatusUnknown
// (the connection closes, outcome unknown), and is not sent.
func TestLinkNoResendPastDedupWindow(t *testing.T) {
	var mu sync.Mutex
	leader := uint64(2)
	reach := map[uint64]bool{2: true}
	var sentTo []uint64
	l := NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) {
			mu.Lock()
			defer mu.Unlock()
			return leader, true
		},
		Send: func(to uint64, _ []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			if !reach[to] {
				return false
			}
			sentTo = append(sentTo, to)
			return true
		},
	})
	a := make(answers, 4)
	l.Request(10, 0, 1, Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte("x\r\n")}, a.done)
	// Member 2 took the put, and is lost before answering; member 3
	// leads, serving, but this member's stream to it is down.
	mu.Lock()
	leader = 3
	mu.Unlock()
	l.LeaderChanged(0)
	end := time.Now().Add(store.DedupTTL/2 + 300*time.Millisecond)
	for time.Now().Before(end) {
		l.Retry(0) // the router's retry loop, every retryEvery while 3 serves
		time.Sleep(retryEvery)
	}
	mu.Lock()
	reach[3] = true // the stream opens again
	mu.Unlock()
	l.Retry(0)
	mu.Lock()
	got := append([]uint64(nil), sentTo...)
	mu.Unlock()
	for _, to := range got {
		if to == 3 {
			t.Fatalf("the put that member 2 took was sent to member 3 more than %v later (sent to %v): "+
				"its key may have expired there (store.DedupTTL %v), and it would run again", store.DedupTTL/2, got, store.DedupTTL)
		}
	}
	select {
	case it := <-a:
		if it.Reply.Status != StatusUnknown {
			t.Fatalf("answer %+v, want StatusUnknown (it may have run)", it.Reply)
		}
	default:
		t.Fatal("no answer: the put is still pending")
	}
	if p := l.Pending(); p != 0 {
		t.Errorf("%d calls pending", p)
	}
}

// TestLinkResendWithinDedupWindow: a change resent to the next leader
// soon after a lost one was asked still goes, and is answered there.
func TestLinkResendWithinDedupWindow(t *testing.T) {
	n := newLinkNet(t, 2, 3)
	a := make(answers, 4)
	n.mu.Lock()
	n.cut[2] = true
	n.mu.Unlock()
	n.link.Request(10, 0, 1, Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte("x\r\n")}, a.done)
	n.mu.Lock()
	n.leader = 3
	n.mu.Unlock()
	n.link.LeaderChanged(0)
	if it := a.next(t); it.Reply.Status != StatusOK || it.Reply.ID == 0 {
		t.Fatalf("put resent at once: %+v", it.Reply)
	}
}

// TestLinkNoResendPastFirstTake: a stream that breaks and opens again
// (Router.StreamUp: every pending call goes again) resends a put whose
// answers were lost each time. The leader that first took it may have run
// it then, and its key is kept for store.DedupTTL from that run, not from
// the resends (answered from the table, they keep nothing new): measured
// from the last send, resends under resendWithin apart went on for ever,
// and one past DedupTTL after the first ran the put again. Past
// resendWithin since the first take it ends StatusUnknown.
func TestLinkNoResendPastFirstTake(t *testing.T) {
	var mu sync.Mutex
	sent := 0
	l := NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) { return 2, true },
		Send: func(uint64, []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			sent++
			return true
		},
	})
	a := make(answers, 4)
	l.Request(10, 0, 1, Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte("x\r\n")}, a.done)
	step := resendWithin/2 + 100*time.Millisecond
	for range 2 {
		time.Sleep(step)
		l.LeaderChanged(0) // the stream to member 2 opened again: its answer was lost
	}
	mu.Lock()
	n := sent
	mu.Unlock()
	if n > 2 {
		t.Errorf("the put went %d times, the last %v after member 2 first took it (past resendWithin %v)", n, 2*step, resendWithin)
	}
	select {
	case it := <-a:
		if it.Reply.Status != StatusUnknown {
			t.Fatalf("answer %+v, want StatusUnknown", it.Reply)
		}
	default:
		t.Fatal("no answer: the put is still pending, resent each time the stream opens")
	}
}
