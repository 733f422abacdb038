package router

import (
	"fmt"
	"testing"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/store"
)

// testGroup is one group of the tests: a store whose ids carry the
// group's prefix (meta.JobID), with a producer on tube "t<g>", and the
// session's client there, watching that tube alone.
type testGroup struct {
	g        uint8
	s        *store.Store
	producer *store.Client
	session  *store.Client
	seq      uint64
}

func newGroups(t *testing.T, n int) []*testGroup {
	var gs []*testGroup
	for g := range n {
		s := store.New(store.Options{})
		tg := &testGroup{g: uint8(g), s: s, producer: s.NewClient(nil), session: s.NewClient(nil)}
		tube := []byte(fmt.Sprint("t", g))
		tg.producer.Use(tube)
		tg.session.Watch(tube)
		tg.session.Ignore([]byte(store.DefaultTube))
		t.Cleanup(func() {
			tg.producer.Close()
			tg.session.Close()
			s.Close()
		})
		gs = append(gs, tg)
	}
	return gs
}

// newSession replaces the session's client with one whose Notifier is
// n, watching the group's tube alone.
func (tg *testGroup) newSession(n store.Notifier) *store.Client {
	tg.session.Close() // newGroups' cleanup closes the new one
	tg.session = tg.s.NewClient(n)
	tg.session.Watch([]byte(fmt.Sprint("t", tg.g)))
	tg.session.Ignore([]byte(store.DefaultTube))
	return tg.session
}

// put puts a job of priority pri into the group: its id is the group's
// next.
func (tg *testGroup) put(t *testing.T, pri uint32) *store.Job {
	t.Helper()
	return tg.putTTR(t, pri, 60)
}

// putTTR is put with a TTR of ttr seconds.
func (tg *testGroup) putTTR(t *testing.T, pri, ttr uint32) *store.Job {
	t.Helper()
	tg.seq++
	j, err := tg.producer.Put(meta.JobID(tg.g, tg.seq), pri, 0, ttr, []byte("x\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// steal reserves the group's best job for another session.
func (tg *testGroup) steal(t *testing.T) *store.Job {
	t.Helper()
	other := tg.s.NewClient(nil)
	other.Watch([]byte(fmt.Sprint("t", tg.g)))
	j, r := other.Reserve(0)
	if r != store.Reserved {
		t.Fatalf("group %d: nothing to steal", tg.g)
	}
	return j
}

// hooked is a group whose take runs before and after hooks: what other
// sessions and producers do while the take is on its way.
type hooked struct {
	*store.Client
	before, after func()
}

func (h hooked) TakeAtMost(bound store.Candidate) (*store.Job, store.Candidate, store.TakeResult) {
	if h.before != nil {
		h.before()
	}
	j, c, r := h.Client.TakeAtMost(bound)
	if h.after != nil {
		h.after()
	}
	return j, c, r
}

func sessions(gs []*testGroup) []Group {
	var out []Group
	for _, tg := range gs {
		out = append(out, tg.session)
	}
	return out
}

// reserved is how many jobs the group's store holds reserved.
func (tg *testGroup) reserved() int64 { return tg.s.Stats().Reserved }

// TestTakeOrder: the reply is the most urgent ready job of all the
// groups, by priority and then id (the lower prefix's id first on a tie),
// paused tubes aside; nothing else is reserved.
func TestTakeOrder(t *testing.T) {
	gs := newGroups(t, 3)
	if out := Take(sessions(gs)); out.Job != nil || out.AnyReady || out.Rounds != 1 {
		t.Fatalf("no job anywhere: %+v", out)
	}
	gs[0].put(t, 5)
	b := gs[1].put(t, 3)
	gs[2].put(t, 3)
	out := Take(sessions(gs))
	if out.Job != b || out.Group != 1 || out.Rounds != 1 {
		t.Fatalf("took %+v, want group 1's job %d", out, b.ID())
	}
	for i, tg := range gs {
		want := int64(0)
		if i == 1 {
			want = 1
		}
		if tg.reserved() != want {
			t.Errorf("group %d holds %d reserved, want %d", i, tg.reserved(), want)
		}
	}
	// A paused tube's job waits; it still counts as ready for
	// DEADLINE_SOON's rule.
	gs[2].s.PauseTube([]byte("t2"), 60e9)
	out = Take(sessions(gs))
	if out.Job == nil || out.Group != 0 || !out.AnyReady {
		t.Fatalf("with group 2's tube paused: %+v, want group 0's job", out)
	}
	if out = Take(sessions(gs)); out.Job != nil || !out.AnyReady {
		t.Fatalf("only a paused tube's job left: %+v, want none taken and AnyReady", out)
	}
}

// TestTakeRaces drives the races of a take deterministically: what
// happens in the groups between the look and the take.
func TestTakeRaces(t *testing.T) {
	t.Run("a more urgent job put into another group is passed over", func(t *testing.T) {
		gs := newGroups(t, 2)
		a := gs[0].put(t, 5)
		gs[1].put(t, 7)
		var late *store.Job
		groups := []Group{hooked{Client: gs[0].session, before: func() { late = gs[1].put(t, 1) }}, gs[1].session}
		out := Take(groups)
		if out.Job != a || out.Rounds != 1 {
			t.Fatalf("took %+v, want group 0's job %d: the documented difference", out, a.ID())
		}
		if c, ok, _ := gs[1].session.BestReady(); !ok || c.ID != late.ID() {
			t.Errorf("the late job %d is not ready in group 1 (best %+v, %v)", late.ID(), c, ok)
		}
	})
	t.Run("a more urgent job put into the taking group is taken", func(t *testing.T) {
		gs := newGroups(t, 2)
		gs[0].put(t, 5)
		gs[1].put(t, 7)
		var late *store.Job
		groups := []Group{hooked{Client: gs[0].session, before: func() { late = gs[0].put(t, 1) }}, gs[1].session}
		if out := Take(groups); out.Job != late {
			t.Fatalf("took %+v, want the new best of group 0, job %d, which beats all", out, late.ID())
		}
	})
	t.Run("a take that lost its job looks again", func(t *testing.T) {
		gs := newGroups(t, 2)
		gs[0].put(t, 5)
		rest := gs[0].put(t, 9)
		b := gs[1].put(t, 7)
		once := false
		groups := []Group{hooked{Client: gs[0].session, before: func() {
			if !once {
				once = true
				gs[0].steal(t)
			}
		}}, gs[1].session}
		out := Take(groups)
		if out.Job != b || out.Rounds != 2 || out.Unbounded {
			t.Fatalf("took %+v, want group 1's job %d in the second round", out, b.ID())
		}
		if gs[0].reserved() != 1 { // the thief's
			t.Errorf("group 0 holds %d reserved: the lost take reserved something", gs[0].reserved())
		}
		if c, _, _ := gs[0].session.BestReady(); c.ID != rest.ID() {
			t.Errorf("group 0's best is %+v, want job %d still ready", c, rest.ID())
		}
	})
	t.Run("after four lost takes the fifth goes unbounded", func(t *testing.T) {
		gs := newGroups(t, 2)
		gs[0].put(t, 5)
		worst := gs[0].put(t, 9)
		gs[1].put(t, 7)
		// Each take of group 0 finds its urgent job stolen, and a producer
		// puts another after it: every look sees group 0 best, every take
		// finds only job 9.
		groups := []Group{hooked{Client: gs[0].session,
			before: func() { gs[0].steal(t) },
			after:  func() { gs[0].put(t, 5) },
		}, gs[1].session}
		out := Take(groups)
		if out.Job != worst || out.Rounds != maxBoundedRounds+1 || !out.Unbounded {
			t.Fatalf("took %+v, want job %d unbounded in round %d", out, worst.ID(), maxBoundedRounds+1)
		}
		if gs[1].reserved() != 0 {
			t.Errorf("group 1 holds %d reserved, want none", gs[1].reserved())
		}
	})
}
