package store

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestMovedEmptyTubeKeepsFigures: a tube with no job, kept alive by a
// member's references, moves to another store (ExportTube, ImportTube,
// then the references reach the destination, as the routers' sync
// brings them). stats-tube and list-tubes must answer as before the
// move, which one server never made: total-jobs, cmd-delete,
// cmd-pause-tube and the tube's place in the list (its creation stamp)
// kept. The import freed the tube at once and kept its pause alone, and
// made it again with a new stamp. Found by a reviewing helper.
func TestMovedEmptyTubeKeepsFigures(t *testing.T) {
	src, dst := New(Options{}), New(Options{})
	src.SetRefs(2, []byte("moving"), 0, 1)
	cl := src.NewClient(nil)
	cl.Use([]byte("moving"))
	j, err := cl.Put(src.NextID(), 0, 0, 60, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if !cl.Delete(j.ID()) {
		t.Fatal("delete")
	}
	cl.Use([]byte(DefaultTube))
	src.PauseTube([]byte("moving"), time.Minute)
	before, _ := src.TubeStats([]byte("moving"))

	// The destination made a tube of its own after the moving one was
	// made where it was.
	time.Sleep(time.Millisecond)
	dst.SetRefs(2, []byte("later"), 0, 1)

	frames, _, _, fig, ok := src.ExportTube([]byte("moving"))
	if !ok {
		t.Fatal("export")
	}
	if _, err := dst.NewClient(nil).ImportTube([]byte("moving"), frames, fig, nil); err != nil {
		t.Fatal(err)
	}
	dst.SetRefs(2, []byte("moving"), 0, 1) // the member's sync
	after, ok := dst.TubeStats([]byte("moving"))
	if !ok || after.TotalJobs != before.TotalJobs || after.CmdDelete != before.CmdDelete || after.CmdPause != before.CmdPause || after.Pause != before.Pause {
		t.Fatalf("stats-tube after the move: %+v, before %+v", after, before)
	}
	var names []string
	for _, tb := range dst.StampedTubes() {
		names = append(names, tb.Name)
	}
	if len(names) != 3 || names[1] != "moving" || names[2] != "later" {
		t.Fatalf("list-tubes after the move: %v, want default, moving, later (the order they were made in)", names)
	}
}

// TestMovedFiguresExpire: an imported tube that no reference makes again
// within movedKeep is a new tube when one does: one server would have
// freed it.
func TestMovedFiguresExpire(t *testing.T) {
	var now atomic.Int64
	now.Store(int64(time.Hour))
	opts := Options{Now: func() int64 { return now.Load() }}
	src, dst := New(opts), New(opts)
	src.SetRefs(2, []byte("moving"), 0, 1)
	cl := src.NewClient(nil)
	cl.Use([]byte("moving"))
	j, err := cl.Put(src.NextID(), 0, 0, 60, []byte("x"))
	if err != nil || !cl.Delete(j.ID()) {
		t.Fatal(err)
	}
	cl.Use([]byte(DefaultTube))
	frames, _, _, fig, ok := src.ExportTube([]byte("moving"))
	if !ok || fig.TotalJobs != 1 {
		t.Fatalf("export: %v %+v", ok, fig)
	}
	if _, err := dst.NewClient(nil).ImportTube([]byte("moving"), frames, fig, nil); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(movedKeep) + 1)
	dst.SetRefs(2, []byte("moving"), 0, 1)
	if ts, ok := dst.TubeStats([]byte("moving")); !ok || ts.TotalJobs != 0 || ts.CmdDelete != 0 {
		t.Fatalf("stats-tube made again after movedKeep: %+v, want a new tube's", ts)
	}
}
