package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestMoveTube: a tube's jobs leave one group's store (ExportTube) and
// come into another's (ImportTube) as they were: ids, states,
// priorities, remaining delays, TTRs, counts, bodies, buried jobs in
// their order; the tube's counters and pause with them. Ids of the other
// group's prefix do not move the store's own counter, and one sent again
// is not made twice. A tube with a reserved job is refused.
func TestMoveTube(t *testing.T) {
	src := store.New(store.Options{IDPrefix: 2})
	dst := store.New(store.Options{IDPrefix: 1})
	t.Cleanup(src.Close)
	t.Cleanup(dst.Close)
	c := src.NewClient(nil)
	c.Use([]byte("t"))
	put := func(pri, delay uint32, body string) uint64 {
		t.Helper()
		j, err := c.Put(src.NextID(), pri, delay, 30, []byte(body+"\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		return j.ID()
	}
	buried := []uint64{put(9, 0, "b1"), put(9, 0, "b2"), put(9, 0, "b3")}
	c.Watch([]byte("t"))
	for _, id := range buried {
		j, res := c.Reserve(0)
		if res != store.Reserved || j.ID() != id {
			t.Fatalf("reserve: %v %v", j, res)
		}
		if _, _, _, _, err := src.ExportTube([]byte("t")); !errors.Is(err, store.ErrTubeHeld) {
			t.Fatalf("export with job %d reserved: %v", id, err)
		}
		if err := c.Bury(id, 9); err != nil {
			t.Fatal(err)
		}
	}
	ready, delayed := put(5, 0, "ready"), put(1, 100, "delayed")
	c.Delete(put(3, 0, "gone"))
	if !src.PauseTube([]byte("t"), time.Hour) {
		t.Fatal("no tube to pause")
	}
	frames, n, fig, ok, err := src.ExportTube([]byte("t"))
	if err != nil || !ok || n != 5 {
		t.Fatalf("export: %d jobs, %v %v", n, ok, err)
	}
	if fig.TotalJobs != 6 || fig.CmdDelete != 1 || fig.CmdPause != 1 || fig.Pause != time.Hour || fig.PauseLeft <= 0 {
		t.Fatalf("figures: %+v", fig)
	}

	d := dst.NewClient(nil)
	for range 2 { // sent again: nothing more
		if made, err := d.ImportTube([]byte("t"), frames, fig); err != nil || made != n && made != 0 {
			t.Fatalf("import: %d, %v", made, err)
		}
	}
	for _, id := range []uint64{ready, delayed, buried[0]} {
		a, _ := c.JobStats(id)
		b, found := d.JobStats(id)
		if !found || b.State != a.State || b.Pri != a.Pri || b.TTR != a.TTR || b.Reserves != a.Reserves ||
			b.Buries != a.Buries || b.Releases != a.Releases || b.Tube != "t" || b.TimeLeft-a.TimeLeft > time.Second {
			t.Fatalf("job %d moved: %+v, was %+v", id, b, a)
		}
	}
	ts, _ := dst.TubeStats([]byte("t"))
	if ts.Ready != 1 || ts.Delayed != 1 || ts.Buried != 3 || ts.TotalJobs != 6 || ts.CmdDelete != 1 || ts.CmdPause != 1 ||
		ts.Pause != time.Hour || ts.PauseTimeLeft <= 0 {
		t.Fatalf("the tube moved in: %+v", ts)
	}
	// Buried jobs kick in their order; the store's own ids go on in its
	// prefix.
	if !dst.PauseTube([]byte("t"), 0) {
		t.Fatal("unpause")
	}
	d.Use([]byte("t"))
	if k := d.Kick(1); k != 1 {
		t.Fatalf("kicked %d", k)
	}
	if js, _ := d.JobStats(buried[0]); js.State != store.StateReady {
		t.Fatalf("the first kicked is not the first buried: %+v", js)
	}
	if id := dst.NextID(); id>>store.IDSeqBits != 1 || id&(1<<store.IDSeqBits-1) != 1 {
		t.Fatalf("the destination's next id %d", id)
	}
	if id, _, ok := d.JobIn(delayed); id != "t" || !ok {
		t.Fatalf("JobIn: %q %v", id, ok)
	}
}
