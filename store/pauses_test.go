package store_test

import (
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestSetPauses: a tube held is paused until the pause's end, as given;
// one not held takes its pause once made; an ended pause pauses nothing;
// and no pause-tube is counted.
func TestSetPauses(t *testing.T) {
	s := store.New(store.Options{})
	t.Cleanup(s.Close)
	c := s.NewClient(nil)
	c.Use([]byte("held"))
	wall := time.Now()
	s.SetPauses(map[string]store.Pause{
		"held":  {Dur: time.Minute, Until: wall.Add(30 * time.Second).UnixNano()},
		"later": {Dur: time.Hour, Until: wall.Add(time.Hour).UnixNano()},
		"ended": {Dur: time.Second, Until: wall.Add(-time.Second).UnixNano()},
	})
	check := func(name string, pause time.Duration, left time.Duration) {
		t.Helper()
		ts, ok := s.TubeStats([]byte(name))
		if !ok || ts.Pause != pause || ts.PauseTimeLeft > left || ts.PauseTimeLeft < left-2*time.Second || ts.CmdPause != 0 {
			t.Fatalf("stats-tube %s: %+v, want pause %v with about %v left", name, ts, pause, left)
		}
	}
	check("held", time.Minute, 30*time.Second)
	c.Use([]byte("later"))
	check("later", time.Hour, time.Hour)
	c.Use([]byte("ended"))
	check("ended", 0, 0)
}
