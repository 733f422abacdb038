package store_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestHoldJobs: once jobs are held, nothing is handed out: a blocked
// reserve stays blocked when a job becomes ready, a new reserve waits or
// times out, reserve-job finds nothing; but a client holding a job can
// still delete, release, bury and touch it.
func TestHoldJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := store.New(store.Options{})
		defer s.Close()
		pRec, wRec := newRecorder(), newRecorder()
		p, w := s.NewClient(pRec), s.NewClient(wRec)
		held := put(s, p, 1, 0, 60)
		if j, r := p.Reserve(0); r != store.Reserved || j != held {
			t.Fatalf("reserve before holding: %v %v", j, r)
		}
		if _, r := w.Reserve(-1); r != store.Waiting {
			t.Fatalf("waiter: %v", r)
		}

		s.HoldJobs()
		ready := put(s, p, 1, 0, 60)
		wRec.none(t)
		if j, r := p.Reserve(0); r != store.TimedOut {
			t.Fatalf("reserve-with-timeout 0 while holding: %v %v", j, r)
		}
		if _, ok := p.ReserveJob(ready.ID()); ok {
			t.Fatal("reserve-job handed a job out while holding")
		}
		if _, r := p.Reserve(time.Second); r != store.Waiting {
			t.Fatalf("reserve-with-timeout 1 while holding: %v", r)
		}
		time.Sleep(time.Second + time.Millisecond)
		if e := pRec.next(t); e.result != store.TimedOut {
			t.Fatalf("the timed reserve ended with %s", e)
		}

		if !p.Touch(held.ID()) {
			t.Fatal("touch of a held job failed")
		}
		if err := p.Release(held.ID(), 2, 0); err != nil {
			t.Fatalf("release: %v", err)
		}
		wRec.none(t) // released, but not handed to the blocked reserve
		if got := s.Stats(); got.Ready != 2 || got.Reserved != 0 || got.Waiting != 1 {
			t.Fatalf("stats %+v: want 2 ready, 0 reserved, 1 waiting", got)
		}
		if !p.Delete(ready.ID()) {
			t.Fatal("delete of a ready job failed")
		}
	})
}
