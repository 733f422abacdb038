package store_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
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
		err := s.Reset()
		if !errors.Is(err, store.ErrClientsHold) {
			t.Fatalf("Reset with a reservation held: %v; want ErrClientsHold", err)
		}
		// The refusal names the holder, for the member's log.
		if want := fmt.Sprintf(`tube "work", 1 reserved, 0 waiting; job %d held by a client (closed false, lists the job true)`, held.ID()); !strings.Contains(err.Error(), want) {
			t.Errorf("Reset's refusal: %v; want it to say %s", err, want)
		}
		if st := s.Stats(); st.Reserved != 1 || st.Delayed != 1 || st.Buried != 1 {
			t.Fatalf("a refused Reset changed the store: %+v", st)
		}

		waiter := s.NewClient(namedNotifier{newRecorder(), "the waiter"})
		waiter.Watch([]byte("empty"))
		waiter.Ignore([]byte("default"))
		block(t, waiter, time.Minute)
		c.Close()
		err = s.Reset()
		if !errors.Is(err, store.ErrClientsHold) {
			t.Fatalf("Reset with a reserve waiting: %v; want ErrClientsHold", err)
		}
		if want := `tube "empty", 0 reserved, 1 waiting; waiting: the waiter (closed false)`; !strings.Contains(err.Error(), want) {
			t.Errorf("Reset's refusal: %v; want it to say %s", err, want)
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

// TestResetStopsClear: a bulk change that began before a Reset (a
// member's admin API clearing a tube as it loses the leadership) stops
// at its next batch: the jobs the rebuild applies from the log after the
// Reset stay.
func TestResetStopsClear(t *testing.T) {
	s := store.New(store.Options{})
	t.Cleanup(s.Close)
	c := s.NewClient(nil)
	c.Use([]byte("t"))
	for range 1000 {
		if _, err := c.Put(s.NextID(), 1, 0, 60, []byte("job\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	rebuilt := []wal.Record{
		{Kind: wal.KindFull, ID: 5001, Tube: "t", State: wal.StateReady, TTR: 60, Body: []byte("kept\r\n")},
		{Kind: wal.KindFull, ID: 5002, Tube: "t", State: wal.StateReady, TTR: 60, Body: []byte("kept\r\n")},
	}
	batches := 0
	deleted, ok := s.NewClient(nil).ClearTube([]byte("t"), []store.State{store.StateReady}, func(int) {
		if batches++; batches == 1 {
			if err := s.Reset(); err != nil {
				t.Fatal(err)
			}
			s.Apply(rebuilt, nil)
		}
	})
	if !ok || batches != 1 {
		t.Fatalf("ClearTube: %d deleted in %d batches, ok %v; want it stopped after the first", deleted, batches, ok)
	}
	if st := s.Stats(); st.Ready != 2 {
		t.Fatalf("after the Reset the clear went on: %d ready, want the 2 the log brought back", st.Ready)
	}
}

// TestResetStopsImport: a tube's import under way when the store is Reset
// (its destination's leader lost the leadership) makes no job after the
// Reset, and says so (ErrReset): the store rebuilt from the log holds
// nothing the log does not.
func TestResetStopsImport(t *testing.T) {
	src := store.New(store.Options{IDPrefix: 2})
	t.Cleanup(src.Close)
	c := src.NewClient(nil)
	c.Use([]byte("t"))
	const n = 20000
	for range n {
		if _, err := c.Put(src.NextID(), 1, 0, 60, []byte("job\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	frames, _, _, fig, _ := src.ExportTube([]byte("t"))
	for try := 0; ; try++ {
		if try == 50 {
			t.Fatal("no Reset landed in an import in 50 tries")
		}
		dst := store.New(store.Options{IDPrefix: 1})
		done := make(chan error, 1)
		go func() {
			_, err := dst.NewOwnerClient(nil).ImportTube([]byte("t"), frames, fig, nil)
			done <- err
		}()
		for dst.Stats().Ready == 0 {
			runtime.Gosched()
		}
		if err := dst.Reset(); err != nil {
			t.Fatal(err)
		}
		err := <-done
		ready := dst.Stats().Ready
		dst.Close()
		if ready != 0 || err != nil && !errors.Is(err, store.ErrReset) {
			t.Fatalf("an import Reset once it had begun: %v, then %d jobs ready; want none", err, ready)
		}
		if err != nil {
			return // Reset midway, and said so
		}
	}
}

// namedNotifier is a Notifier that names itself (fmt.Stringer), as a
// cluster member's owner clients do.
type namedNotifier struct {
	*recorder
	name string
}

func (n namedNotifier) String() string { return n.name }
