package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestResetRefusesHeldJobs: a reservation or a blocked reserve belongs
// to the jobs and tubes Reset would drop, so Reset refuses while a
// client has one and changes nothing; once the client is gone it
// empties the store, pauses and counts included.
func TestResetRefusesHeldJobs(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		held := putIn(s, c, "work", 10, 0, 60)
		putIn(s, c, "work", 20, 5, 60)
		buried := putIn(s, c, "other", 30, 0, 60)
		c.Watch([]byte("other"))
		reserveNow(t, c, buried)
		if err := c.Bury(buried.ID(), 30); err != nil {
			t.Fatal(err)
		}
		c.Watch([]byte("work"))
		reserveNow(t, c, held)
		if !s.PauseTube([]byte("work"), time.Hour) {
			t.Fatal("no tube work")
		}
		if err := s.Reset(); !errors.Is(err, store.ErrClientsHold) {
			t.Fatalf("Reset with a reservation held: %v; want ErrClientsHold", err)
		}
		if st := s.Stats(); st.Reserved != 1 || st.Delayed != 1 || st.Buried != 1 {
			t.Fatalf("a refused Reset changed the store: %+v", st)
		}

		waiter, _ := newClient(s)
		waiter.Watch([]byte("empty"))
		waiter.Ignore([]byte("default"))
		block(t, waiter, time.Minute)
		c.Close()
		if err := s.Reset(); !errors.Is(err, store.ErrClientsHold) {
			t.Fatalf("Reset with a reserve waiting: %v; want ErrClientsHold", err)
		}
		waiter.CancelWait()
		if err := s.Reset(); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		if st := s.Stats(); st.Ready+st.Reserved+st.Delayed+st.Buried+st.TotalJobs != 0 {
			t.Fatalf("after Reset: %+v", st)
		}
		if _, ok := store.StatsOfJob(s, held.ID()); ok {
			t.Errorf("job %d is still found after Reset", held.ID())
		}
		// "work" went with its jobs; "empty" stays: the waiter watches it.
		if _, ok := s.TubeStats([]byte("work")); ok {
			t.Error("tube work, kept only by jobs, is still there after Reset")
		}
		if ts := tubeStats(t, s, "empty"); ts.Watching != 1 {
			t.Errorf("tube empty after Reset: watching %d; want 1", ts.Watching)
		}
		checkNow(t, s, waiter)
		// The store serves on: a put in a tube of the old name is not paused.
		waiter.Use([]byte("work"))
		j := put(s, waiter, 1, 0, 60)
		waiter.Watch([]byte("work"))
		reserveNow(t, waiter, j)
		waiter.Close()
	})
}
