package router

import (
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// TestServerHandOver: a leader handing its group over refuses the
// group's requests (Gate: StatusNotLeader, for the next leader) and lists
// what each session's owner client holds (Held); the next leader's
// owner clients of the same sessions take those jobs (Adopt), but not
// one of a session whose close came there first (its job stays ready),
// nor one its session declined there first.
// Ungate serves again.
func TestServerHandOver(t *testing.T) {
	leader, next, a, tube, ids := handOverRig(t)
	for session := uint64(1); session <= 3; session++ {
		a.send(req(1, session, 1, Request{Op: OpReserve, Tubes: tube}))
		if got := a.next(); got.Reply.Job.ID != ids[session-1] {
			t.Fatalf("session %d reserved %+v, want job %d", session, got.Reply, ids[session-1])
		}
	}

	a.srv.Gate(1)
	a.send(req(1, 1, 2, Request{Op: OpTouch, ID: ids[0]}))
	if got := a.next(); got.Reply.Status != StatusNotLeader {
		t.Fatalf("a touch while gated: %+v, want StatusNotLeader", got.Reply)
	}
	held := a.srv.Held(1)
	if len(held) != 3 || held[0].Deadline == 0 || held[0].Reserves != 1 {
		t.Fatalf("held: %+v", held)
	}

	// The next leader has the jobs from the log, ready; session 2's close
	// and session 3's decline of its job reach it before it serves.
	replayTube(t, leader, next, tube[0])
	var mu sync.Mutex
	serving := false
	b := newServerRig(t, nil)
	b.srv.cfg.Group = func(uint16) *store.Store {
		mu.Lock()
		defer mu.Unlock()
		if serving {
			return next
		}
		return nil
	}
	b.send(Item{Kind: KindClose, Group: 1, Session: 2})
	b.send(Item{Kind: KindDecline, Group: 1, Session: 3, Decline: Decline{Job: ids[2]}})
	if n := b.srv.Adopt(1, next, held); n != 1 {
		t.Fatalf("%d reservations taken, want session 1's alone", n)
	}
	mu.Lock()
	serving = true
	mu.Unlock()
	b.send(req(1, 1, 2, Request{Op: OpTouch, ID: ids[0]}), req(1, 1, 3, Request{Op: OpDelete, ID: ids[0]}))
	for _, what := range []string{"touch", "delete"} {
		if got := b.next(); got.Reply.Status != StatusOK {
			t.Fatalf("session 1's %s on the next leader: %+v", what, got.Reply)
		}
	}
	if st := next.Stats(); st.Ready != 2 || st.Reserved != 0 {
		t.Fatalf("the next leader's jobs: %+v, want sessions 2's and 3's ready", st)
	}

	a.srv.Ungate(1)
	a.send(req(1, 1, 2, Request{Op: OpTouch, ID: ids[0]})) // the refused touch, sent again
	if got := a.next(); got.Reply.Status != StatusOK {
		t.Fatalf("a touch once ungated: %+v", got.Reply)
	}
}

// TestServerHandOverAfterGreet: a member's first contact since it started
// (its router's close of session 0) ends its last process's sessions, so
// a reservation handed over that was made before it reached the next
// leader is not taken there (that session will never close it), and one
// made after it, by a session of the new process, is. All of a member's
// holdings were refused for 10 s after its first contact: a leadership
// handed back within 10 s of a member's start took none of its workers'
// jobs.
func TestServerHandOverAfterGreet(t *testing.T) {
	leader, next, a, tube, ids := handOverRig(t)
	a.send(req(1, 1, 1, Request{Op: OpReserve, Tubes: tube}))
	if got := a.next(); got.Reply.Job.ID != ids[0] {
		t.Fatalf("the old process's session reserved %+v, want job %d", got.Reply, ids[0])
	}
	b := newServerRig(t, nil)
	time.Sleep(5 * time.Millisecond)
	b.send(Item{Kind: KindClose, Group: 1, Session: 0}) // the member started again
	time.Sleep(5 * time.Millisecond)
	a.send(req(1, 2, 1, Request{Op: OpReserve, Tubes: tube}))
	if got := a.next(); got.Reply.Job.ID != ids[1] {
		t.Fatalf("the new process's session reserved %+v, want job %d", got.Reply, ids[1])
	}
	held := a.srv.Held(1)
	replayTube(t, leader, next, tube[0])
	if n := b.srv.Adopt(1, next, held); n != 1 {
		t.Fatalf("%d reservations taken, want the new process's alone", n)
	}
	if st := next.Stats(); st.Reserved != 1 || st.Ready != 2 {
		t.Fatalf("the next leader's jobs: %+v, want one reserved and two ready", st)
	}
	b.srv.mu.Lock()
	owners := len(b.srv.owners)
	b.srv.mu.Unlock()
	if owners != 1 {
		t.Fatalf("%d owner clients on the next leader, want the new process's session's alone", owners)
	}
}

// handOverRig is group 1's leader (store leader, served by a), the next
// leader's store, and three jobs put into tube t there.
func handOverRig(t *testing.T) (leader, next *store.Store, a *serverRig, tube [][]byte, ids []uint64) {
	leader, next = store.New(store.Options{}), store.New(store.Options{})
	t.Cleanup(leader.Close)
	t.Cleanup(next.Close)
	a = newServerRig(t, map[uint16]*store.Store{1: leader})
	tube = [][]byte{[]byte("t")}
	for seq := uint32(1); seq <= 3; seq++ {
		a.send(req(1, 9, seq, Request{Op: OpPut, Tube: tube[0], TTR: 60, Body: []byte("j\r\n")}))
		ids = append(ids, a.next().Reply.ID)
	}
	return leader, next, a, tube, ids
}

// replayTube gives to the jobs of tube from has, ready, as the log does
// the next leader.
func replayTube(t *testing.T, from, to *store.Store, tube []byte) {
	frames, _, _, _, _ := from.ExportTube(tube)
	recs, err := wal.DecodeFrames(nil, frames)
	if err != nil {
		t.Fatal(err)
	}
	to.Apply(recs, nil)
}

// TestServerHandOverAnswersAgain: a reserve and a wait that got their
// jobs on the last leader, sent again to the next one (their answers had
// not come when the session's member learned of it), are answered with
// those jobs, handed over, not run again: running them again would hold
// two jobs for the session, one of which it never hears of.
func TestServerHandOverAnswersAgain(t *testing.T) {
	leader, next, a, tube, ids := handOverRig(t)
	reserve := req(1, 1, 1, Request{Op: OpReserve, Tubes: tube})
	wait := Item{Kind: KindWait, Group: 1, Session: 2, Seq: 1, Wait: Wait{ID: 7, Tubes: tube}}
	a.send(reserve)
	if got := a.next(); got.Reply.Job.ID != ids[0] {
		t.Fatalf("session 1 reserved %+v, want job %d", got.Reply, ids[0])
	}
	a.send(wait)
	if got := a.next(); got.Kind != KindEvent || got.Event.Type != EventOffer || got.Event.Job.ID != ids[1] {
		t.Fatalf("session 2's wait: %+v, want an offer of job %d", got, ids[1])
	}
	a.srv.Gate(1)
	held := a.srv.Held(1)
	if len(held) != 2 || held[0].Seq != 1 || held[1].Seq != 1 {
		t.Fatalf("held: %+v, want both with the sequence that got them", held)
	}

	replayTube(t, leader, next, tube[0])
	b := newServerRig(t, map[uint16]*store.Store{1: next})
	if n := b.srv.Adopt(1, next, held); n != 2 {
		t.Fatalf("%d reservations taken, want 2", n)
	}
	b.send(reserve)
	if got := b.next(); got.Reply.Status != StatusOK || got.Reply.Job.ID != ids[0] {
		t.Fatalf("session 1's reserve again on the next leader: %+v, want job %d", got.Reply, ids[0])
	}
	b.send(wait)
	if got := b.next(); got.Kind != KindEvent || got.Event.Type != EventOffer || got.Event.Job.ID != ids[1] {
		t.Fatalf("session 2's wait again on the next leader: %+v, want an offer of job %d", got, ids[1])
	}
	if st := next.Stats(); st.Ready != 1 || st.Reserved != 2 {
		t.Fatalf("the next leader's jobs: %+v, want the two handed over reserved, the third ready", st)
	}
	b.send(req(1, 1, 2, Request{Op: OpReserve, Tubes: tube}))
	if got := b.next(); got.Reply.Job.ID != ids[2] {
		t.Fatalf("session 1's next reserve: %+v, want job %d", got.Reply, ids[2])
	}
}

// linkRig is a Link whose group leader the test sets (lead), and what it
// sent each member.
type linkRig struct {
	l      *Link
	mu     sync.Mutex
	leader uint64            // guarded by mu
	sent   map[uint64][]Item // guarded by mu
}

func newLinkRig(leader uint64) *linkRig {
	r := &linkRig{leader: leader, sent: map[uint64][]Item{}}
	r.l = NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) { r.mu.Lock(); defer r.mu.Unlock(); return r.leader, true },
		Send: func(to uint64, payload []byte) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return Each(payload, 0, func(it *Item) { r.sent[to] = append(r.sent[to], *it) }) == nil
		},
	})
	return r
}

func (r *linkRig) lead(m uint64) {
	r.mu.Lock()
	r.leader = m
	r.mu.Unlock()
}

// TestLinkClosesAgain: a session's close, and its decline of a job
// offered, go to its group's leader, and again to the next one (they may
// have reached the last after that one listed what the session held).
func TestLinkClosesAgain(t *testing.T) {
	r := newLinkRig(2)
	r.l.Close(5, 1)
	r.l.Decline(6, 1, 9, 42)
	r.lead(3)
	r.l.LeaderChanged(1)
	r.l.LeaderChanged(2) // another group's: nothing of session 5's
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent
	for _, m := range []uint64{2, 3} {
		if len(sent[m]) != 2 || sent[m][0].Kind != KindClose || sent[m][0].Session != 5 || sent[m][0].Group != 1 ||
			sent[m][1].Kind != KindDecline || sent[m][1].Session != 6 || sent[m][1].Decline.Job != 42 {
			t.Errorf("member %d was sent %+v, want session 5's close and session 6's decline of job 42 in group 1", m, sent[m])
		}
	}
}

// TestLinkWaitRefused: a wait its group's leader refused (gated by a
// handover that then did not happen, or its lease lapsed) goes again at
// Retry, as a request does. It was dropped, and the session's reserve
// never heard from that group until its leader changed.
func TestLinkWaitRefused(t *testing.T) {
	var mu sync.Mutex
	var sent []Item
	l := NewLink(LinkConfig{
		Leader: func(uint16) (uint64, bool) { return 2, true },
		Send: func(_ uint64, payload []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			return Each(payload, 0, func(it *Item) { sent = append(sent, *it) }) == nil
		},
	})
	ended := make(chan *Item, 1)
	l.Wait(4, 1, 7, Wait{ID: 9, Tubes: [][]byte{[]byte("t")}}, func(it *Item) { ended <- it })
	refusal, err := AppendItem(nil, &Item{Kind: KindReply, Group: 1, Session: 4, Seq: 7, Reply: Reply{Status: StatusNotLeader}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Handle(2, refusal); err != nil {
		t.Fatal(err)
	}
	l.Retry(1)
	mu.Lock()
	if len(sent) != 2 || sent[1].Kind != KindWait || sent[1].Seq != 7 || sent[1].Wait.ID != 9 {
		t.Errorf("sent %+v, want the wait twice", sent)
	}
	mu.Unlock()
	select {
	case it := <-ended:
		t.Fatalf("the wait ended with the refusal: %+v", it)
	default:
	}
	if l.Pending() != 1 {
		t.Fatalf("%d calls pending, want the wait", l.Pending())
	}
}

// TestLinkForgetsDeclineReserved: a job the session declined and then
// reserved again is not declined again to the group's next leader, which
// would take it back from the session holding it.
func TestLinkForgetsDeclineReserved(t *testing.T) {
	r := newLinkRig(2)
	l := r.l
	l.Decline(6, 1, 9, 42)
	l.Request(6, 1, 3, Request{Op: OpReserveJob, ID: 42}, func(*Item) {})
	answer, err := AppendItem(nil, &Item{Kind: KindReply, Group: 1, Session: 6, Seq: 3,
		Reply: Reply{Status: StatusOK, Result: ResultJob, Job: JobReply{ID: 42, TTR: 60, Body: []byte("j\r\n")}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Handle(2, answer); err != nil {
		t.Fatal(err)
	}
	r.lead(3)
	l.LeaderChanged(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range r.sent[3] {
		if it.Kind == KindDecline {
			t.Fatalf("the new leader was sent %+v: the session holds job 42 again", it)
		}
	}
}

// TestServerGreetingNamesProcess: a member's greeting (its close of
// session 0) names its process's tag, and ends the owner clients of the
// member's other processes alone: one made for a session of the new
// process before the greeting came (a tube's move imports a reservation
// its session holds, Server.HolderClients) keeps its job. A greeting of
// a member of a release before (Seq 0) ends them all.
func TestServerGreetingNamesProcess(t *testing.T) {
	leader, _, a, tube, ids := handOverRig(t)
	const oldTag, newTag = 7, 9
	oldSession, newSession := uint64(oldTag)<<sessionCounterBits|1, uint64(newTag)<<sessionCounterBits|1
	for i, session := range []uint64{oldSession, newSession} {
		a.send(req(1, session, 1, Request{Op: OpReserve, Tubes: tube}))
		if got := a.next(); got.Reply.Job.ID != ids[i] {
			t.Fatalf("session %x reserved %+v, want job %d", session, got.Reply, ids[i])
		}
	}
	a.send(Item{Kind: KindClose, Group: 1, Session: 0, Seq: newTag})
	if st := leader.Stats(); st.Reserved != 1 || st.Ready != 2 {
		t.Fatalf("after the new process's greeting: %+v, want the new session's job reserved, the rest ready", st)
	}
	a.send(req(1, newSession, 2, Request{Op: OpTouch, ID: ids[1]}))
	if got := a.next(); got.Reply.Status != StatusOK {
		t.Fatalf("the new session's touch after the greeting: %+v", got.Reply)
	}
	a.send(Item{Kind: KindClose, Group: 1, Session: 0})
	if st := leader.Stats(); st.Reserved != 0 || st.Ready != 3 {
		t.Fatalf("after a greeting naming no process: %+v, want every job ready", st)
	}
}
