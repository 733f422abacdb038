package store_test

import (
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestSetPausesEndsThePauseBefore: a replica's store is given the group's
// pauses at each change of its TubeBook. After "pause-tube t 3600" the
// book holds t's hour; after "pause-tube t 0" the leader logs a pause of
// 1 ns, over by the time a replica applies it, and after t is freed the
// book holds none: either way the hour ends. The store kept it, so a
// follower that became leader kept the tube paused.
func TestSetPausesEndsThePauseBefore(t *testing.T) {
	s := store.New(store.Options{})
	t.Cleanup(s.Close)
	c := s.NewClient(nil)
	c.Use([]byte("t"))
	wall := time.Now()
	s.SetPauses(map[string]store.Pause{"t": {Dur: time.Hour, Until: wall.Add(time.Hour).UnixNano()}})
	if ts, _ := s.TubeStats([]byte("t")); ts.Pause != time.Hour {
		t.Fatalf("not paused: %+v", ts)
	}
	// pause-tube t 0, as the book holds it: 1 ns, until the leader's
	// clock + 1 ns when it logged it; a follower applies it a
	// millisecond later.
	logged := time.Now().Add(-time.Millisecond).UnixNano()
	s.SetPauses(map[string]store.Pause{"t": {Dur: 1, Until: logged + 1}})
	if ts, _ := s.TubeStats([]byte("t")); ts.Pause != 0 {
		t.Errorf("after pause-tube t 0 the replica's tube is still paused: %+v", ts)
	}
	// The tube's freeing or a book without t at all.
	s.SetPauses(map[string]store.Pause{})
	if ts, _ := s.TubeStats([]byte("t")); ts.Pause != 0 {
		t.Errorf("with no pause in the book the replica's tube is still paused: %+v", ts)
	}
}

// TestSetPausesKeepsTheLeadersOwn: the leader's store pauses a tube
// before its record is applied: a change of the book meanwhile (another
// tube's pause applied, say) gives SetPauses the pauses without it, which
// must not end it.
func TestSetPausesKeepsTheLeadersOwn(t *testing.T) {
	s := store.New(store.Options{})
	t.Cleanup(s.Close)
	s.Lead()
	c, d := s.NewClient(nil), s.NewClient(nil)
	c.Use([]byte("a"))
	d.Use([]byte("b"))
	if !c.PauseTube([]byte("a"), time.Hour) || !c.PauseTube([]byte("b"), time.Hour) {
		t.Fatal("pause-tube")
	}
	// a's record applied, b's not yet.
	s.SetPauses(map[string]store.Pause{"a": {Dur: time.Hour, Until: time.Now().Add(time.Hour).UnixNano()}})
	if ts, _ := s.TubeStats([]byte("b")); ts.Pause != time.Hour {
		t.Errorf("the leader's pause of b, its record not yet applied, ended: %+v", ts)
	}
}
