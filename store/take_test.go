package store_test

import (
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestBestReady: the lowest (pri, id) among the watched, unpaused tubes,
// nothing reserved; any ready job counts for anyReady, paused or not.
func TestBestReady(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		if _, ok, any := c.BestReady(); ok || any {
			t.Fatalf("an empty store: ok %v, any %v", ok, any)
		}
		p, _ := newClient(s)
		a := putIn(s, p, "a", 10, 0, 60)
		b := putIn(s, p, "b", 5, 0, 60)
		putIn(s, p, "b", 5, 0, 60) // same priority, a higher id
		putIn(s, p, "c", 1, 0, 60) // not watched
		c.Watch([]byte("a"))
		c.Watch([]byte("b"))
		before := globalCounts(s)
		if best, ok, any := c.BestReady(); !ok || !any || best != (store.Candidate{Pri: 5, ID: b.ID()}) {
			t.Errorf("BestReady = %+v, %v, %v; want b's job %d at 5", best, ok, any, b.ID())
		}
		s.PauseTube([]byte("b"), time.Minute)
		if best, ok, _ := c.BestReady(); !ok || best != (store.Candidate{Pri: 10, ID: a.ID()}) {
			t.Errorf("with b paused: %+v, %v; want a's job %d", best, ok, a.ID())
		}
		s.PauseTube([]byte("a"), time.Minute)
		if _, ok, any := c.BestReady(); ok || !any {
			t.Errorf("every watched tube paused: ok %v, any %v; want no candidate, but ready jobs", ok, any)
		}
		if got := globalCounts(s); got != before {
			t.Errorf("BestReady changed the counts: %+v, was %+v", got, before)
		}
	})
}

// TestTakeAtMost: the store's best is taken only if it does not come
// after the bound; otherwise nothing changes and the best is answered.
func TestTakeAtMost(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		c, _ := newClient(s)
		if _, _, r := c.TakeAtMost(store.Candidate{Pri: ^uint32(0), ID: ^uint64(0)}); r != store.Empty {
			t.Fatalf("an empty store: %v", r)
		}
		j := put(s, p, 10, 0, 60)
		before, tube := globalCounts(s), tubeCounts(t, s, "default")
		for _, bound := range []store.Candidate{{Pri: 9, ID: j.ID() + 100}, {Pri: 10, ID: j.ID() - 1}} {
			got, best, r := c.TakeAtMost(bound)
			if r != store.Lost || got != nil || best != (store.Candidate{Pri: 10, ID: j.ID()}) {
				t.Errorf("bound %+v: %s, %+v, %v; want Lost with job %d", bound, jobName(got), best, r, j.ID())
			}
		}
		if g, tc := globalCounts(s), tubeCounts(t, s, "default"); g != before || tc != tube {
			t.Errorf("a lost take changed the counts: %+v %+v, were %+v %+v", g, tc, before, tube)
		}
		wantState(t, s, j, store.StateReady, nil)
		// The bound itself, or after it: taken.
		got, best, r := c.TakeAtMost(store.Candidate{Pri: 10, ID: j.ID()})
		if r != store.Taken || got != j || best.ID != j.ID() {
			t.Fatalf("the bound equal to the best: %s, %v", jobName(got), r)
		}
		wantState(t, s, j, store.StateReserved, c)
		checkNow(t, s, p, c)
	})
}

// TestUnreserve: a job reserved and then unreserved is as it was: ready
// at its priority and id, its reserve count and every figure back; it
// goes to the tube's next waiter. A job the client does not hold is
// refused.
func TestUnreserve(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		j := put(s, p, 100, 0, 60) // urgent: it counts in current-jobs-urgent too
		c, _ := newClient(s)
		before, tube, job := globalCounts(s), tubeCounts(t, s, "default"), jobStats(t, s, j.ID())
		reserveNow(t, c, j)
		if c.Unreserve(j.ID() + 1) {
			t.Error("a job the client never held was unreserved")
		}
		other, _ := newClient(s)
		if other.Unreserve(j.ID()) {
			t.Error("another client's job was unreserved")
		}
		if !c.Unreserve(j.ID()) {
			t.Fatal("Unreserve of the client's own job refused")
		}
		if g, tc := globalCounts(s), tubeCounts(t, s, "default"); g != before || tc != tube {
			t.Errorf("the counts after Unreserve: %+v %+v, were %+v %+v", g, tc, before, tube)
		}
		after := jobStats(t, s, j.ID())
		after.Age, job.Age = 0, 0
		if after != job {
			t.Errorf("the job's stats after Unreserve: %+v, were %+v", after, job)
		}
		if c.Unreserve(j.ID()) {
			t.Error("a job unreserved twice")
		}
		checkNow(t, s, p, c, other)

		// With a client waiting, the job goes to it.
		reserveNow(t, c, j)
		w, wr := newClient(s)
		block(t, w, -1)
		c.Unreserve(j.ID())
		if e := wr.next(t); e.job != j {
			t.Fatalf("the waiter got %s, want job %d", e, j.ID())
		}
		wantState(t, s, j, store.StateReserved, w)
		if st := jobStats(t, s, j.ID()); st.Reserves != 1 {
			t.Errorf("reserves %d: two reserves undone and the waiter's, want 1", st.Reserves)
		}
		checkNow(t, s, p, c, other, w)
	})
}
