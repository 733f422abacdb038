package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// leaderlessRouter is member 1's router of three groups over two
// members: group leaderless (-1: none) has no leader known, the others
// are led by member 2, which sends what it sends into sent. Requests wait
// wait for a leader (LeaderWait; 0: the default); group 0's tubes moved
// to the groups movedFrom0 says.
func leaderlessRouter(t *testing.T, sent *sentItems, leaderless int, wait time.Duration, movedFrom0 func() []uint16) *Router {
	t.Helper()
	placement, err := meta.Formation([]meta.Member{{Name: "m1", ID: 1}, {Name: "m2", ID: 2}}, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRouter(RouterConfig{
		Self:       1,
		Placement:  func() *meta.State { return placement },
		Serving:    func(uint16) *store.Store { return nil },
		Leader:     func(g uint16) (uint64, bool) { return 2, int(g) != leaderless },
		Send:       sent.send,
		LeaderWait: wait,
		MovedFrom: func(g uint16) []uint16 {
			if g == 0 {
				return movedFrom0()
			}
			return nil
		},
	})
	t.Cleanup(r.Close)
	r.LeaderChanged() // greets the leaders known: calls go to them from then on
	return r
}

// tubeOf is a tube name that group g owns.
func tubeOf(t *testing.T, r *Router, g uint16) string {
	t.Helper()
	for i := range 10000 {
		if name := fmt.Sprintf("t%d", i); r.ownerOf(name) == g {
			return name
		}
	}
	t.Fatalf("no tube of group %d", g)
	return ""
}

// waitAnswer is the next answer the session delivers, within d.
func waitAnswer(t *testing.T, answers answerChan, d time.Duration) (engine.Answer, bool) {
	t.Helper()
	select {
	case a := <-answers:
		return a, true
	case <-time.After(d):
		return engine.Answer{}, false
	}
}

// TestNoLeaderReserveOwesDeadlineSoon: a reserve whose watched tubes all
// live in a group with no leader counts that group as empty (5.7). A
// session holding a job in another group, near its TTR's end, is owed
// DEADLINE_SOON then, as one server answers it and as a leader of the
// group would (Request.SoonElsewhere, SoonIn), and as a reserve across
// groups answers it when one of them has no leader. Link.Expire looked
// at the reserve's timeout alone: a reserve without one waited for ever,
// and one with a timeout answered TIMED_OUT at its end. Found by a
// reviewing helper.
func TestNoLeaderReserveOwesDeadlineSoon(t *testing.T) {
	for _, timeout := range []time.Duration{-1, 3 * time.Second} {
		t.Run(fmt.Sprint(timeout), func(t *testing.T) {
			sent := &sentItems{t: t}
			r := leaderlessRouter(t, sent, 0, 200*time.Millisecond, func() []uint16 { return nil })
			answers := make(answerChan, 4)
			s := r.NewQueue(answers).(*Session)
			s.watched = []string{tubeOf(t, r, 0)}
			// A job held in group 1, its TTR's end 1.5 s away: within
			// DeadlineMargin of it in half a second.
			s.holdJob(&JobReply{ID: meta.JobID(1, 1), TTR: 1}, 1)
			s.mu.Lock()
			h := s.held[meta.JobID(1, 1)]
			h.deadline = time.Now().Add(1500 * time.Millisecond)
			s.held[meta.JobID(1, 1)] = h
			s.mu.Unlock()

			var a engine.Answer
			if s.Reserve(timeout, &a) {
				t.Fatal("a reserve of a group with no leader answered at once")
			}
			a, ok := waitAnswer(t, answers, 2500*time.Millisecond)
			if !ok {
				t.Fatalf("no answer 2.5 s on, a job held near its TTR's end; pending: %v", r.link.DescribePending(time.Now()))
			}
			if a.Reserve != store.DeadlineSoon {
				t.Fatalf("the reserve answered %+v, want DEADLINE_SOON", a)
			}
		})
	}
}

// TestNoLeaderSearchAsksMovedGroups: a command by id whose group has no
// leader asks the groups tubes moved to from there, which this member's
// routing knows: the job may be in one with a leader, whose answer is
// the command's. The search ended with the first group's failure
// (INTERNAL_ERROR), asking none of them. Found by a reviewing helper.
func TestNoLeaderSearchAsksMovedGroups(t *testing.T) {
	sent := &sentItems{t: t}
	r := leaderlessRouter(t, sent, 0, 200*time.Millisecond, func() []uint16 { return []uint16{1} })
	answers := make(answerChan, 4)
	s := r.NewQueue(answers).(*Session)
	id := meta.JobID(0, 5) // its tube moved to group 1, which holds it
	var a engine.Answer
	if s.Delete(id, &a) {
		t.Fatal("a delete of another member's group answered at once")
	}
	var asked *Item
	testproc.WaitFor(t, 3*time.Second, "the delete asked of group 1, where group 0's tubes moved", func() bool {
		for _, it := range sent.take() {
			if it.Kind == KindRequest && it.Request.Op == OpDelete && it.Group == 1 {
				asked = &it
			}
		}
		if asked != nil {
			return true
		}
		select {
		case a := <-answers:
			t.Fatalf("the delete answered %+v without asking group 1", a)
		default:
		}
		return false
	})
	r.link.handle(2, &Item{Kind: KindReply, Group: 1, Session: s.id, Seq: asked.Seq, Reply: Reply{Status: StatusOK, Result: ResultNone}})
	a, ok := waitAnswer(t, answers, 3*time.Second)
	if !ok || !a.OK || a.Failed != 0 {
		t.Fatalf("the delete answered %+v (%v), want DELETED", a, ok)
	}
}

// TestSearchOutcomeUnknownNotAskedAgain: a command by id whose search
// met a group whose lost leader took it (StatusUnknown: it may have run)
// and a group where the job's tube is moving must close the connection
// (5.7), not begin the search again: a delete that ran is NOT_FOUND the
// second time, a wrong reply; and past moveWait the failure was turned
// into StatusNoLeader, INTERNAL_ERROR, as if it had not run. Found by a
// reviewing helper.
func TestSearchOutcomeUnknownNotAskedAgain(t *testing.T) {
	const leader = 2
	sent := &sentItems{t: t}
	r := movedRouter(t, sent, func() []uint16 { return []uint16{1} })
	answers := make(answerChan, 4)
	s := r.NewQueue(answers).(*Session)
	deletes := func(want int) map[uint16]uint32 {
		t.Helper()
		seqs := map[uint16]uint32{}
		testproc.WaitFor(t, 3*time.Second, "deletes sent", func() bool {
			for _, it := range sent.take() {
				if it.Kind == KindRequest && it.Request.Op == OpDelete {
					seqs[it.Group] = it.Seq
				}
			}
			return len(seqs) >= want
		})
		return seqs
	}
	id := meta.JobID(0, 5)
	var a engine.Answer
	if s.Delete(id, &a) {
		t.Fatal("answered at once")
	}
	seqs := deletes(1)
	r.link.handle(leader, &Item{Kind: KindReply, Group: 0, Session: s.id, Seq: seqs[0],
		Reply: Reply{Status: StatusNotFound, Result: ResultMoved, Moved: []uint16{2}}})
	seqs = deletes(2)
	// Group 2's leader took the delete and was lost: it may have run.
	r.link.Expire(2, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), time.Second)
	// Group 1 holds copies of the job's tube not yet placed: moving.
	r.link.handle(leader, &Item{Kind: KindReply, Group: 1, Session: s.id, Seq: seqs[1], Reply: Reply{Status: StatusWrongGroup}})

	// If the search begins again, every group now says NOT_FOUND (the
	// delete ran in group 2).
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case a := <-answers:
			if a.Failed != engine.FailedLost {
				t.Fatalf("the delete, which may have run, answered %+v: want the connection closed (FailedLost)", a)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		for _, it := range sent.take() {
			if it.Kind == KindRequest && it.Request.Op == OpDelete {
				r.link.handle(leader, &Item{Kind: KindReply, Group: it.Group, Session: s.id, Seq: it.Seq,
					Reply: Reply{Status: StatusNotFound, Result: ResultNone}})
			}
		}
	}
	t.Fatal("no answer")
}

// TestSearchFailureMayHaveRunRules: a search in which one group had no
// leader to take the command (StatusNoLeader) and another's lost leader
// took it (StatusUnknown) must close the connection: the command may
// have run. The first failure to come was kept, and a delete that may
// have run answered INTERNAL_ERROR, as if it had not. Found by a
// reviewing helper.
func TestSearchFailureMayHaveRunRules(t *testing.T) {
	const leader = 2
	sent := &sentItems{t: t}
	r := movedRouter(t, sent, func() []uint16 { return []uint16{1, 2} })
	answers := make(answerChan, 4)
	s := r.NewQueue(answers).(*Session)
	seqs := map[uint16]uint32{}
	deletes := func(want int) {
		t.Helper()
		testproc.WaitFor(t, 3*time.Second, "deletes sent", func() bool {
			for _, it := range sent.take() {
				if it.Kind == KindRequest && it.Request.Op == OpDelete {
					seqs[it.Group] = it.Seq
				}
			}
			return len(seqs) >= want
		})
	}
	var a engine.Answer
	if s.Delete(meta.JobID(0, 5), &a) {
		t.Fatal("answered at once")
	}
	deletes(1)
	r.link.handle(leader, &Item{Kind: KindReply, Group: 0, Session: s.id, Seq: seqs[0], Reply: Reply{Status: StatusNotFound, Result: ResultNone}})
	deletes(3)
	// Group 1 had no leader to take it (as Link.Expire answers one not
	// taken); group 2's leader took it and was lost.
	r.link.handle(leader, &Item{Kind: KindReply, Group: 1, Session: s.id, Seq: seqs[1], Reply: Reply{Status: StatusNoLeader, Result: ResultNone}})
	r.link.Expire(2, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), time.Second)
	a, ok := waitAnswer(t, answers, 3*time.Second)
	if !ok || a.Failed != engine.FailedLost {
		t.Fatalf("the delete, which may have run in group 2, answered %+v (%v): want the connection closed (FailedLost)", a, ok)
	}
}
