package router

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/store"
)

// TestResyncListsSessions: when the commands stream to a group's leader
// opens again, the router sends that leader the sessions open on this
// member before anything else of the resync, if the leader reads the
// list (protocol 7), and nothing of the kind to one that does not.
func TestResyncListsSessions(t *testing.T) {
	const self, leader = 1, 2
	sent := &sentItems{t: t}
	var syncs atomic.Bool
	syncs.Store(true)
	r := NewRouter(RouterConfig{
		Self:          self,
		Serving:       func(uint16) *store.Store { return nil },
		Leader:        func(uint16) (uint64, bool) { return leader, true },
		Send:          sent.send,
		SyncsSessions: func(member uint64) bool { return member == leader && syncs.Load() },
	})
	defer r.Close()
	r.LeaderChanged() // greets the leader: calls go to it from then on
	a, b, c := r.NewQueue(nil).(*Session), r.NewQueue(nil).(*Session), r.NewQueue(nil).(*Session)
	// The greeting names the process's tag, which its sessions' ids begin
	// with (Server.closeOwner spares them).
	greeting := sent.take()
	if len(greeting) == 0 || greeting[0].Kind != KindClose || greeting[0].Session != 0 || greeting[0].Seq == 0 ||
		sessionTag(a.id) != greeting[0].Seq || sessionTag(c.id) != greeting[0].Seq || c.id != a.id+2 {
		t.Fatalf("greeting %+v and sessions %x %x: want the greeting to name the sessions' tag", greeting, a.id, c.id)
	}
	b.Close()
	resync := func() []Item {
		sent.take()
		r.StreamUp(leader)
		return sent.take()
	}
	items := resync()
	if len(items) == 0 || items[0].Kind != KindSessions {
		t.Fatalf("the resync sent %v first, want the sessions", kinds(items))
	}
	if ss := items[0].Sessions; !slices.Equal(ss.IDs, []uint64{a.id, c.id}) || ss.Upto != c.id {
		t.Fatalf("sessions %+v, want %d and %d up to %d", ss, a.id, c.id, c.id)
	}
	syncs.Store(false)
	if items := resync(); slices.ContainsFunc(items, func(it Item) bool { return it.Kind == KindSessions }) {
		t.Fatalf("a leader of protocol 6 was sent %v", kinds(items))
	}
}

// sentItems records the items a Router sends (RouterConfig.Send), the
// slices they hold that a test reads copied out of the payload.
type sentItems struct {
	t     *testing.T
	mu    sync.Mutex
	items []Item // guarded by mu
}

func (s *sentItems) send(to uint64, payload []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := Each(payload, 1<<16, func(it *Item) {
		it.Sessions.IDs = slices.Clone(it.Sessions.IDs)
		s.items = append(s.items, *it)
	}); err != nil {
		s.t.Errorf("a payload to %d: %v", to, err)
	}
	return true
}

// take returns the items sent since the last take.
func (s *sentItems) take() []Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.items
	s.items = nil
	return items
}

func kinds(items []Item) []Kind {
	var ks []Kind
	for _, it := range items {
		ks = append(ks, it.Kind)
	}
	return ks
}

// movedRouter is member 1's router of three groups over two members,
// each group led by member 2, which sends what it sends into sent; group
// 0's tubes moved to the groups movedFrom0 says.
func movedRouter(t *testing.T, sent *sentItems, movedFrom0 func() []uint16) *Router {
	return leaderlessRouter(t, sent, -1, 0, movedFrom0)
}

// TestCloseReachesMovedTubes: a session's close goes to the groups tubes
// moved to from those it touched, where a move may have given it the
// reservation of a job it held (Server.HolderClients); and a close made
// before this member knew of a move goes there as it learns of it
// (Router.Replaced). Without either, the owner client the move made
// stayed on that group's leader for good, its job reserved until its
// TTR.
func TestCloseReachesMovedTubes(t *testing.T) {
	sent := &sentItems{t: t}
	var closes []Item
	var mu sync.Mutex
	var moved []uint16
	r := movedRouter(t, sent, func() []uint16 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(moved)
	})
	closedIn := func(s *Session) []uint16 {
		closes = append(closes, sent.take()...)
		var gs []uint16
		for _, it := range closes {
			if it.Kind == KindClose && it.Session == s.id {
				gs = append(gs, it.Group)
			}
		}
		slices.Sort(gs)
		return gs
	}

	before := r.NewQueue(nil).(*Session)
	before.touch(0)
	before.Close()
	if got := closedIn(before); !slices.Equal(got, []uint16{0}) {
		t.Fatalf("a session that touched group 0 closed in %v, want [0]", got)
	}
	mu.Lock()
	moved = []uint16{2}
	mu.Unlock()
	r.Replaced()
	if got := closedIn(before); !slices.Equal(got, []uint16{0, 2}) {
		t.Fatalf("once tubes moved from group 0 to 2, the session closed before is closed in %v, want [0 2]", got)
	}

	after := r.NewQueue(nil).(*Session)
	after.touch(0)
	other := r.NewQueue(nil).(*Session)
	other.touch(1)
	after.Close()
	other.Close()
	if got := closedIn(after); !slices.Equal(got, []uint16{0, 2}) {
		t.Fatalf("a session that touched group 0, tubes moved from it to 2, closed in %v, want [0 2]", got)
	}
	if got := closedIn(other); !slices.Equal(got, []uint16{1}) {
		t.Fatalf("a session that touched group 1 alone closed in %v, want [1]", got)
	}
}

// TestSessionSendsNothingAfterClose: a request answered StatusWrongGroup
// goes again where its tube moved after moveRetry, and a search by id
// after each answer; one whose turn comes after the session closed sends
// nothing: its owner client there would never close.
func TestSessionSendsNothingAfterClose(t *testing.T) {
	placement, err := meta.Formation([]meta.Member{{Name: "m1", ID: 1}, {Name: "m2", ID: 2}}, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	sent := &sentItems{t: t}
	r := NewRouter(RouterConfig{
		Self:      1,
		Placement: func() *meta.State { return placement },
		Serving:   func(uint16) *store.Store { return nil },
		Leader:    func(uint16) (uint64, bool) { return 2, true },
		Send:      sent.send,
	})
	defer r.Close()
	s := r.NewQueue(nil).(*Session)
	s.touch(0)
	s.Close()
	s.rerouteByTube(&Request{Op: OpPut, Tube: []byte("t")}, func(g uint16, seq uint32) {
		t.Errorf("a put rerouted after its session closed was posted to group %d as %d", g, seq)
	})
	s.post(func(seq uint32) { t.Errorf("an item of a closed session was posted as %d", seq) })
}

// TestLeaderElectedAgain: a leader that lost its leadership and won the
// next term is another leadership: the calls pending with it go again,
// as to any new leader, since its store was rebuilt and the requests it
// had taken went unanswered. Whether this member learns the term from
// its replica (Term) or from the leader's reports. Before, a call taken
// by the leadership that ended waited for good, its connection with it
// (a TestClusterFaultsGroups round, the leader of a group whose replica
// moved stepping down and elected again within a second).
func TestLeaderElectedAgain(t *testing.T) {
	const self, leader = 1, 2
	placement, err := meta.Formation([]meta.Member{{Name: "m1", ID: self}, {Name: "m2", ID: leader}}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	sent := &sentItems{t: t}
	var term atomic.Uint64 // group 0's, which member 1 holds a replica of
	term.Store(3)
	r := NewRouter(RouterConfig{
		Self:      self,
		Placement: func() *meta.State { return placement },
		Serving:   func(uint16) *store.Store { return nil },
		Leader: func(g uint16) (uint64, bool) {
			return leader, g == 0 // group 1's leader is known from its reports
		},
		Term: func(g uint16) uint64 {
			if g == 0 {
				return term.Load()
			}
			return 0
		},
		Send:  sent.send,
		Peers: func() []uint64 { return []uint64{leader} },
	})
	defer r.Close()
	reportTerm := func(term uint64) {
		t.Helper()
		payload, err := AppendItem(nil, &Item{Kind: KindLeaders, Leaders: []LeaderReport{{Group: 1, Term: term}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Handle(leader, payload); err != nil {
			t.Fatal(err)
		}
	}
	reportTerm(5)
	r.LeaderChanged()
	put := func(g uint16) uint32 {
		seq := uint32(100 + g)
		r.link.Request(7, g, seq, Request{Op: OpPut, Tube: []byte("t"), TTR: 60, Body: []byte("j\r\n")},
			func(*Item) { t.Errorf("group %d's put answered", g) })
		return seq
	}
	resent := func(g uint16, seq uint32) bool {
		return slices.ContainsFunc(sent.take(), func(it Item) bool {
			return it.Kind == KindRequest && it.Group == g && it.Session == 7 && it.Seq == seq
		})
	}
	seq0, seq1 := put(0), put(1)
	if !resent(0, seq0) {
		t.Fatal("group 0's put never went")
	}

	r.LeaderChanged() // the same leadership: nothing goes again
	if items := sent.take(); slices.ContainsFunc(items, func(it Item) bool { return it.Kind == KindRequest }) {
		t.Fatalf("with the leaders as they were, %v went again", kinds(items))
	}
	term.Store(4)
	r.LeaderChanged()
	if !resent(0, seq0) {
		t.Error("group 0's leader elected again (its replica's term) was not sent the put it had taken")
	}
	reportTerm(6)
	if !resent(1, seq1) {
		t.Error("group 1's leader elected again (its report's term) was not sent the put it had taken")
	}
}

// TestHeldInTheGroupThatAnswered: a job keeps its id when its tube
// moves, so a session's reservation of it is the answering group's, not
// its id's: a reserve in the id's group then bounds its wait by the job's
// TTR (SoonElsewhere), and a leader change of the answering group asks
// about it there. Before, the session filed it under its id's group.
func TestHeldInTheGroupThatAnswered(t *testing.T) {
	r := movedRouter(t, &sentItems{t: t}, func() []uint16 { return []uint16{1} })
	s := r.NewQueue(nil).(*Session)
	defer s.Close()
	const id = 7 // prefix 0: group 0's id
	if g, _ := r.groupOfID(id); g != 0 {
		t.Fatalf("job %d is group %d's by its id", id, g)
	}
	var a engine.Answer
	s.reserveAnswer(&Item{Kind: KindReply, Group: 1, Reply: Reply{Status: StatusOK, Result: ResultJob,
		Job: JobReply{ID: id, TTR: 2, Body: []byte("j\r\n")}}}, &a)
	if _, ok := s.soonest(0); !ok {
		t.Error("a reserve in group 0 does not count job 7, held from group 1")
	}
	if _, ok := s.soonest(1); ok {
		t.Error("a reserve in group 1 counts job 7 as held elsewhere")
	}
}

// TestDeclineCarriedToMovedTube: a session's decline of a job its group
// offered, made before its member knew the job's tube moved, goes on to
// the group the tube moved to, once: the move may have exported the job
// reserved by the session (the decline reaching the source after its
// export), and the destination then holds it for a session that never
// had it. Carried again at a later move, it could take back the job the
// session was handed there since.
func TestDeclineCarriedToMovedTube(t *testing.T) {
	sent := &sentItems{t: t}
	l := NewLink(LinkConfig{Leader: func(g uint16) (uint64, bool) { return uint64(g) + 2, true }, Send: sent.send})
	l.Decline(7, 1, 40, 99)
	if got := sent.take(); len(got) != 1 || got[0].Kind != KindDecline || got[0].Group != 1 {
		t.Fatalf("the decline sent as %+v", got)
	}
	l.CloseMoved(1, []uint16{2})
	got := sent.take()
	if len(got) != 1 || got[0].Kind != KindDecline || got[0].Group != 2 || got[0].Session != 7 || got[0].Decline.Job != 99 {
		t.Fatalf("the move sent %+v, want job 99's decline of session 7 in group 2", got)
	}
	l.CloseMoved(1, []uint16{2})
	for _, it := range sent.take() {
		if it.Kind == KindDecline {
			t.Fatalf("the decline carried again: %+v", it)
		}
	}
}
