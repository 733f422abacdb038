package router

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// TestReserveResentKeepsItsTimeout: a reserve waiting in a group goes
// again when its leader is lost (Link.LeaderChanged, to the next leader),
// or when a handover refused it (StatusNotLeader, then Link.Retry once
// the handover was aborted), and ends when it would have ended at the
// first: its timeout, and the DEADLINE_SOON bound of a job its session
// holds in another group (SoonIn), count from when the session made it,
// not from when a leader takes it again. Else TIMED_OUT comes late by the
// failover's length, and DEADLINE_SOON after the TTR of the job it warns
// of, which that job's group has released by then. (A reserve across
// groups keeps its own timer, so its waits carry neither: docs/design/
// shards.md 6.3, "the timeout is not extended".)
func TestReserveResentKeepsItsTimeout(t *testing.T) {
	tube := [][]byte{[]byte("t")}
	for _, tc := range []struct {
		name string
		req  Request
		want Status
	}{
		{"reserve-with-timeout 1", Request{Op: OpReserve, Tubes: tube, Timeout: time.Second}, StatusTimedOut},
		{"reserve, a job held elsewhere soon in 1 s", Request{Op: OpReserve, Tubes: tube, Timeout: -1,
			SoonElsewhere: true, SoonIn: time.Second}, StatusDeadlineSoon},
		{"reserve-with-timeout 5, a job held elsewhere soon in 1 s", Request{Op: OpReserve, Tubes: tube, Timeout: 5 * time.Second,
			SoonElsewhere: true, SoonIn: time.Second}, StatusDeadlineSoon},
	} {
		for _, way := range []struct {
			name   string
			before func(n *linkNet) // as the reserve is made
			again  func(n *linkNet) // 700ms later
		}{
			{"to the next leader", func(*linkNet) {}, func(n *linkNet) {
				// Leader 2 is lost (its answer never comes); 3 is elected.
				n.mu.Lock()
				n.cut[2] = true
				n.leader = 3
				n.mu.Unlock()
				n.link.LeaderChanged(0)
			}},
			{"after a handover refused it", func(n *linkNet) { n.servers[2].Gate(0) }, func(n *linkNet) {
				n.servers[2].Ungate(0) // the handover aborted
				n.link.Retry(0)
			}},
		} {
			t.Run(tc.name+", "+way.name, func(t *testing.T) {
				n := newLinkNet(t, 2, 3)
				a := make(answers, 4)
				way.before(n)
				start := time.Now()
				n.link.Request(10, 0, 1, tc.req, a.done)
				time.Sleep(700 * time.Millisecond)
				way.again(n)
				it := a.next(t)
				took := time.Since(start)
				if it.Reply.Status != tc.want {
					t.Fatalf("answer %+v, want status %v", it.Reply, tc.want)
				}
				if took > 1200*time.Millisecond {
					t.Fatalf("answered %v after it was made, sent again at 700ms: its wait began again there", took.Round(time.Millisecond))
				}
			})
		}
	}
}

// TestReserveResentToItsLeaderJoinsItsWait: a reserve sent again to the
// leader it waits at (the stream to it opened again: Link.LeaderChanged
// with the same leader) goes with what is left of its timeout, and the
// leader still takes it for the one waiting, by its sequence: one waiter,
// one answer, at the timeout the reserve was made with.
func TestReserveResentToItsLeaderJoinsItsWait(t *testing.T) {
	n := newLinkNet(t, 2)
	a := make(answers, 4)
	start := time.Now()
	n.link.Request(10, 0, 1, Request{Op: OpReserve, Tubes: [][]byte{[]byte("t")}, Timeout: time.Second}, a.done)
	testproc.WaitFor(t, 5*time.Second, "the reserve waiting", func() bool { return n.stores[2].Stats().Waiting == 1 })
	time.Sleep(time.Until(start.Add(700 * time.Millisecond)))
	n.link.LeaderChanged(0)
	// Another session's request, answered, comes after the resent
	// reserve on the same stream.
	n.link.Request(11, 0, 1, Request{Op: OpStats}, a.done)
	if it := a.next(t); it.Session != 11 {
		t.Fatalf("%+v, want session 11's stats", it)
	}
	if w := n.stores[2].Stats().Waiting; w != 1 {
		t.Fatalf("%d waiting at the leader after the reserve went again to it, want the one", w)
	}
	it := a.next(t)
	took := time.Since(start)
	if it.Session != 10 || it.Reply.Status != StatusTimedOut || took < 950*time.Millisecond || took > 1200*time.Millisecond {
		t.Fatalf("%+v after %v, want session 10's TIMED_OUT at its timeout, 1 s", it, took.Round(time.Millisecond))
	}
	select {
	case it := <-a:
		t.Fatalf("a second answer: %+v", it)
	case <-time.After(300 * time.Millisecond):
	}
	if p := n.link.Pending(); p != 0 {
		t.Fatalf("%d calls pending", p)
	}
}

// TestOwnRefsBeforeResentRequests: a session watches an empty tube (its
// group counts it: WATCHING came once the leader had the count), the
// group's leader is lost, and the session's stats-tube of the tube waits
// for the next leader. Sent there, it finds the tube, watched once, as
// one server answers a connection's stats-tube of a tube it watches: the
// next leader, whose store has none of the member's references, gets
// them from the member's sync (Router.resync) before the requests sent
// again to it (docs/design/shards.md 5.4).
func TestOwnRefsBeforeResentRequests(t *testing.T) {
	for _, next := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("next leader %d", next), func(t *testing.T) { testOwnRefsBeforeResent(t, next) })
	}
}

// testOwnRefsBeforeResent is TestOwnRefsBeforeResentRequests with member
// next elected (2: the lost leader, elected again in a later term on its
// store rebuilt, which kept no reference).
func testOwnRefsBeforeResent(t *testing.T, next uint64) {
	n := newRouterNet(t, 3)
	tube := n.tube(1, "f")
	c := n.session(1)
	c.watch(tube)
	n.waitFigures(tube, tubeFigures{exists: true, watching: 1})
	n.setLeader(1, 0, nil)
	stats := make(chan engine.Answer, 1)
	c.start("stats-tube", func(a *engine.Answer) bool { return c.s.TubeStats([]byte(tube), a) })
	go func() {
		select {
		case a := <-c.answers:
			stats <- a
		case <-time.After(5 * time.Second):
			close(stats)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	fresh := store.New(store.Options{IDPrefix: 1, Dedup: true})
	t.Cleanup(fresh.Close)
	n.setLeader(1, next, fresh)
	a, ok := <-stats
	if !ok {
		t.Fatal("stats-tube: no answer")
	}
	if !a.OK || a.TubeStats.Watching != 1 {
		t.Fatalf("stats-tube %s of a tube the connection watches, sent as its group had no leader: ok %v, watching %d; want the tube, watched once", tube, a.OK, a.TubeStats.Watching)
	}
}

// TestCallAsLeaderLearnedWaitsForResync: a call made once a group's new
// leader is known, before the router has resynced the group (its
// LeaderChanged), waits for the resync and goes after the member's
// references: a stats-tube of an empty tube the connection watches finds
// it, as on one server, where it reached the new leader's store first and
// was answered NOT_FOUND.
func TestCallAsLeaderLearnedWaitsForResync(t *testing.T) {
	for _, next := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("next leader %d", next), func(t *testing.T) {
			n := newRouterNet(t, 3)
			tube := n.tube(1, "f")
			c := n.session(1)
			c.watch(tube)
			n.waitFigures(tube, tubeFigures{exists: true, watching: 1})
			fresh := store.New(store.Options{IDPrefix: 1, Dedup: true})
			t.Cleanup(fresh.Close)
			n.elect(1, next, fresh)
			a := c.do("stats-tube", func(a *engine.Answer) bool { return c.s.TubeStats([]byte(tube), a) })
			if !a.OK || a.TubeStats.Watching != 1 {
				t.Fatalf("stats-tube %s of a tube the connection watches, made as its group's new leader became known: ok %v, watching %d; want the tube, watched once",
					tube, a.OK, a.TubeStats.Watching)
			}
		})
	}
}

// sentItem is what recordingLink saw go, an item each.
type sentItem struct {
	kind    Kind
	session uint64
	seq     uint32
	sync    bool
}

// recordingLink is a Link whose group leader is leader 2 until setLeader,
// which records every item it sends (take hands them over and forgets
// them), and whose member's sync is syncRefs.
type recordingLink struct {
	*Link
	mu     sync.Mutex
	leader uint64
	// gated: the Leader names a leader set by setLeader only once
	// LeaderChanged has marked the calls (LinkConfig.Marked), as the
	// Router's linkLeader does; marked says it has.
	gated, marked bool
	sent          []sentItem
}

func newRecordingLink(syncRefs func(l *Link, g uint16)) *recordingLink {
	r := &recordingLink{leader: 2, marked: true}
	r.Link = NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.leader, r.marked || !r.gated
		},
		Marked: func(uint16) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.marked = true
		},
		Send: func(_ uint64, payload []byte) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			_ = Each(payload, 0, func(it *Item) {
				r.sent = append(r.sent, sentItem{it.Kind, it.Session, it.Seq, it.Refs.Sync})
			})
			return true
		},
		SyncRefs: func(g uint16) { syncRefs(r.Link, g) },
	})
	return r
}

func (r *recordingLink) setLeader(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leader, r.marked = id, false
}

func (r *recordingLink) take() []sentItem {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sent
	r.sent = nil
	return out
}

// TestLinkSyncBeforeResentCalls: at a leader change the Link sends the
// member's sync of its references (LinkConfig.SyncRefs) before the calls
// it sends again, and not the refs items the sync replaces; and when the
// new leader refuses them all (it does not serve yet), the next Retry
// sends them in the same order: the calls, though made before the sync,
// wait behind it (docs/design/shards.md 5.4).
func TestLinkSyncBeforeResentCalls(t *testing.T) {
	refsSeq := uint32(1)
	l := newRecordingLink(func(l *Link, g uint16) {
		refsSeq++
		l.Refs(g, refsSeq, Refs{Sync: true, Counts: []RefCount{{Tube: []byte("t"), Watching: 1}}}, func(*Item) {})
	})
	nop := func(*Item) {}
	l.Refs(0, 1, Refs{Counts: []RefCount{{Tube: []byte("t"), Watching: 1}}}, nop) // leader 2 never answers
	l.Request(10, 0, 1, Request{Op: OpStatsTube, Tube: []byte("t")}, nop)
	l.Request(11, 0, 1, Request{Op: OpPauseTube, Tube: []byte("t"), Delay: 1}, nop)
	l.take()

	l.setLeader(3)
	l.LeaderChanged(0)
	want := []sentItem{{KindRefs, 0, 2, true}, {KindRequest, 10, 1, false}, {KindRequest, 11, 1, false}}
	if got := l.take(); !slices.Equal(got, want) {
		t.Fatalf("the leader change sent %+v, want %+v: the sync, then the calls", got, want)
	}
	// Leader 3 does not serve yet: it refuses all three.
	for _, it := range want {
		l.handle(3, &Item{Kind: KindReply, Session: it.session, Seq: it.seq, Reply: Reply{Status: StatusNotLeader}})
	}
	l.Retry(0)
	if got := l.take(); !slices.Equal(got, want) {
		t.Fatalf("the retry after the refusals sent %+v, want %+v: the sync, then the calls", got, want)
	}
}

// TestLinkCallDuringSyncGoesAfterResends: a call a session makes while a
// leader change is being handled (the new leader known, its sync being
// made) goes after the session's calls sent again, not before them.
func TestLinkCallDuringSyncGoesAfterResends(t *testing.T) {
	nop := func(*Item) {}
	l := newRecordingLink(func(l *Link, g uint16) {
		// The session's next command, made as the sync is built.
		l.Request(10, g, 2, Request{Op: OpStatsTube, Tube: []byte("t")}, nop)
		l.Refs(g, 1, Refs{Sync: true}, nop)
	})
	l.Request(10, 0, 1, Request{Op: OpPauseTube, Tube: []byte("t"), Delay: 1}, nop) // leader 2 never answers
	l.take()
	l.setLeader(3)
	l.LeaderChanged(0)
	want := []sentItem{{KindRefs, 0, 1, true}, {KindRequest, 10, 1, false}, {KindRequest, 10, 2, false}}
	if got := l.take(); !slices.Equal(got, want) {
		t.Fatalf("the new leader got %+v, want %+v: the sync, the call sent again, then the one made meanwhile", got, want)
	}
}

// TestLinkIdleSessionCallDuringSyncGoesAfterIt: with a Leader that names
// the new leader only from LinkConfig.Marked on (the Router's
// linkLeader), a call of a session with nothing pending, made while the
// sync is built, goes after the sync: Marked comes once the sync is made,
// so the call finds no leader named, waits, and is sent behind it.
func TestLinkIdleSessionCallDuringSyncGoesAfterIt(t *testing.T) {
	nop := func(*Item) {}
	l := newRecordingLink(func(l *Link, g uint16) {
		l.Request(20, g, 1, Request{Op: OpStatsTube, Tube: []byte("t")}, nop)
		l.Refs(g, 1, Refs{Sync: true}, nop)
	})
	l.gated = true
	l.setLeader(3)
	l.LeaderChanged(0)
	want := []sentItem{{KindRefs, 0, 1, true}, {KindRequest, 20, 1, false}}
	if got := l.take(); !slices.Equal(got, want) {
		t.Fatalf("the new leader got %+v, want %+v: the sync, then the call made as it was built", got, want)
	}
}
