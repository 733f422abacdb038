package router

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store"
)

// reserveSetup is n groups and a session's Reserver over them, its client
// in group i watching t<i> alone; answers go to ends.
type reserveSetup struct {
	gs   []*testGroup
	r    *Reserver
	ends chan ended
}

func newReserveSetup(t *testing.T, n int) *reserveSetup {
	rs := &reserveSetup{gs: newGroups(t, n), ends: make(chan ended, 4)}
	rs.r = NewReserver(n, func(i int, nt store.Notifier) Part { return rs.gs[i].newSession(nt) })
	return rs
}

func (rs *reserveSetup) reserve(timeout time.Duration) {
	rs.r.Reserve(timeout, func(j *store.Job, group int, res store.ReserveResult) { rs.ends <- ended{j, group, res} })
}

// answer is the reserve's answer, which must have come by now (the bubble
// settled).
func (rs *reserveSetup) answer(t *testing.T) ended {
	t.Helper()
	synctest.Wait()
	select {
	case e := <-rs.ends:
		return e
	default:
		t.Fatal("no answer")
		return ended{}
	}
}

// none fails if an answer came.
func (rs *reserveSetup) none(t *testing.T) {
	t.Helper()
	synctest.Wait()
	select {
	case e := <-rs.ends:
		t.Fatalf("an answer came: %+v", e)
	default:
	}
}

// TestReserveAcrossNow: answers that need no wait: the most urgent job of
// all groups, TIMED_OUT for a timeout of 0, DEADLINE_SOON when a job the
// session holds in any group is within a second of its TTR.
func TestReserveAcrossNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := newReserveSetup(t, 2)
		rs.gs[0].put(t, 5)
		b := rs.gs[1].putTTR(t, 3, 2)
		rs.reserve(0)
		if e := rs.answer(t); e.job != b || e.group != 1 || e.result != store.Reserved {
			t.Fatalf("%+v, want group 1's job %d", e, b.ID())
		}
		rs.reserve(0)
		if e := rs.answer(t); e.result != store.Reserved || e.group != 0 {
			t.Fatalf("%+v, want group 0's job", e)
		}
		rs.reserve(0)
		if e := rs.answer(t); e.result != store.TimedOut {
			t.Fatalf("%+v, want TIMED_OUT", e)
		}
		time.Sleep(time.Second) // group 1's job: a second left of its TTR of 2
		rs.reserve(0)
		if e := rs.answer(t); e.result != store.DeadlineSoon {
			t.Fatalf("%+v, want DEADLINE_SOON", e)
		}
		rs.reserve(time.Hour)
		if e := rs.answer(t); e.result != store.DeadlineSoon {
			t.Fatalf("waiting: %+v, want DEADLINE_SOON at once", e)
		}
	})
}

// TestReserveAcrossWaits: a waiting reserve ends with the first job put in
// any group, at its timeout exactly, or at DEADLINE_SOON of a job held in
// another group, whichever comes first, and answers once.
func TestReserveAcrossWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := newReserveSetup(t, 2)
		start := time.Now()
		rs.reserve(2 * time.Second)
		time.Sleep(2*time.Second - time.Millisecond)
		rs.none(t)
		time.Sleep(time.Millisecond)
		if e := rs.answer(t); e.result != store.TimedOut || time.Since(start) != 2*time.Second {
			t.Fatalf("%+v after %v, want TIMED_OUT after 2s", e, time.Since(start))
		}

		rs.reserve(10 * time.Second)
		time.Sleep(time.Second)
		j := rs.gs[1].putTTR(t, 1, 5)
		if e := rs.answer(t); e.job != j || e.group != 1 {
			t.Fatalf("%+v, want group 1's job %d", e, j.ID())
		}
		time.Sleep(10 * time.Second)
		rs.none(t) // the timer was stopped

		// The job held in group 1 (TTR 5, reserved 10 s ago: long expired)
		// went back; take it again, then wait: DEADLINE_SOON a second
		// before its TTR, though the timeout is longer.
		rs.reserve(0)
		if e := rs.answer(t); e.job != j {
			t.Fatalf("%+v, want job %d again", e, j.ID())
		}
		start = time.Now()
		rs.reserve(10 * time.Second)
		rs.none(t)
		time.Sleep(4 * time.Second)
		if e := rs.answer(t); e.result != store.DeadlineSoon || time.Since(start) != 4*time.Second {
			t.Fatalf("%+v after %v, want DEADLINE_SOON after 4s", e, time.Since(start))
		}
		time.Sleep(10 * time.Second)
		rs.none(t)
	})
}
