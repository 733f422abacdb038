package store_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// moveStores are a move's source and destination stores, of the groups
// of prefixes 2 and 1, and a client of the source using tube t.
func moveStores(t *testing.T) (src, dst *store.Store, c *store.Client) {
	src = store.New(store.Options{IDPrefix: 2})
	dst = store.New(store.Options{IDPrefix: 1})
	t.Cleanup(src.Close)
	t.Cleanup(dst.Close)
	c = src.NewClient(nil)
	c.Use([]byte("t"))
	return src, dst, c
}

// TestMoveTube: a tube's jobs leave one group's store (ExportTube) and
// come into another's (ImportTube) as they were: ids, states,
// priorities, remaining delays, TTRs, counts, bodies, buried jobs in
// their order, a reserved job held by its holder's client there with
// what was left of its TTR; the tube's counters and pause with them. Ids
// of the other group's prefix do not move the store's own counter, and
// one sent again is not made twice. DropTube deletes them all, reserved
// ones too.
func TestMoveTube(t *testing.T) {
	src, dst, c := moveStores(t)
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
		if err := c.Bury(id, 9); err != nil {
			t.Fatal(err)
		}
	}
	ready, delayed := put(5, 0, "ready"), put(1, 100, "delayed")
	c.Delete(put(3, 0, "gone"))
	held := put(0, 0, "held")
	if j, res := c.Reserve(0); res != store.Reserved || j.ID() != held {
		t.Fatalf("reserve of the held job: %v %v", j, res)
	}
	if !src.PauseTube([]byte("t"), time.Hour) {
		t.Fatal("no tube to pause")
	}
	frames, n, holders, fig, ok := src.ExportTube([]byte("t"))
	if !ok || n != 6 || len(holders) != 1 || holders[0].ID != held || holders[0].Holder != c {
		t.Fatalf("export: %d jobs, held %+v, %v", n, holders, ok)
	}
	if fig.TotalJobs != 7 || fig.CmdDelete != 1 || fig.CmdPause != 1 || fig.Pause != time.Hour || fig.PauseLeft <= 0 {
		t.Fatalf("figures: %+v", fig)
	}

	d := dst.NewClient(nil)
	for range 2 { // sent again: nothing more
		if made, err := d.ImportTube([]byte("t"), frames, fig, map[uint64]*store.Client{held: d}); err != nil || made != n && made != 0 {
			t.Fatalf("import: %d, %v", made, err)
		}
	}
	if js, _ := d.JobStats(held); js.State != store.StateReserved || js.Reserves != 1 || js.TimeLeft <= 25*time.Second {
		t.Fatalf("the held job moved: %+v", js)
	}
	if err := d.Release(held, 0, 0); err != nil {
		t.Fatalf("its holder releases it there: %v", err)
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
	if ts.Ready != 2 || ts.Delayed != 1 || ts.Buried != 3 || ts.TotalJobs != 7 || ts.CmdDelete != 1 || ts.CmdPause != 1 ||
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
	d.Watch([]byte("t"))
	if j, res := d.Reserve(0); res != store.Reserved {
		t.Fatalf("reserve: %v %v", j, res)
	}
	if n := dst.NewClient(nil).DropTube([]byte("t")); n != 6 {
		t.Fatalf("dropped %d jobs, want 6 (one of them reserved)", n)
	}
	if st := dst.Stats(); st.Jobs() != 0 || st.Reserved != 0 {
		t.Fatalf("after the drop: %+v", st)
	}
}

// TestDropLargeTube: a tube of more jobs than DropTube drops under one
// hold of its lock (it lets the lock go between batches) is dropped whole,
// its reserved jobs too, and the jobs counted once each.
func TestDropLargeTube(t *testing.T) {
	s := store.New(store.Options{})
	t.Cleanup(s.Close)
	c := s.NewClient(nil)
	c.Use([]byte("big"))
	c.Watch([]byte("big"))
	const n = 1000
	for i := range n {
		if _, err := c.Put(s.NextID(), uint32(i%7), 0, 60, []byte("job\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		if _, res := c.Reserve(0); res != store.Reserved {
			t.Fatalf("reserve: %v", res)
		}
	}
	frames, jobs, held, _, ok := s.ExportTube([]byte("big"))
	if !ok || jobs != n || len(held) != 10 || len(frames) == 0 {
		t.Fatalf("export: %d jobs, %d held, %d bytes", jobs, len(held), len(frames))
	}
	if got := s.NewClient(nil).DropTube([]byte("big")); got != n {
		t.Fatalf("dropped %d jobs, want %d", got, n)
	}
	if st := s.Stats(); st.Jobs() != 0 || st.Reserved != 0 {
		t.Fatalf("after the drop: %+v", st)
	}
}

// TestMoveTubeChanges: a tube copied ahead of its move's freeze (its
// reserved job a ready copy there), then changed (a job deleted, one
// released, one buried, one put, one reserved, one untouched), goes over
// at the freeze as what changed (ExportTubeChanges: the changed, the new
// and the reserved jobs, and the ids gone); the destination's copy then
// holds each job as the source does, the reserved ones by their holders,
// the gone one dropped without counting a delete; sent again, nothing
// more changes.
func TestMoveTubeChanges(t *testing.T) {
	src, dst, c := moveStores(t)
	c.Watch([]byte("t"))
	put := func(pri uint32, body string) uint64 {
		t.Helper()
		j, err := c.Put(src.NextID(), pri, 0, 30, []byte(body+"\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		return j.ID()
	}
	reserve := func(want uint64) {
		t.Helper()
		if j, res := c.Reserve(0); res != store.Reserved || j.ID() != want {
			t.Fatalf("reserve: %v %v, want job %d", j, res, want)
		}
	}
	held := put(0, "held")
	reserve(held)
	deleted, buried, same := put(1, "deleted"), put(2, "buried"), put(9, "same")
	// A chunk holds one frame at least: one job each here.
	stage, n, since, ok := copyChunks(t, src, "t", 1)
	if !ok || n != 4 || since.Len() != 4 || len(stage) != 4 {
		t.Fatalf("the stage's export: %d jobs, %d copied, %d chunks, %v", n, since.Len(), len(stage), ok)
	}
	d := dst.NewClient(nil)
	for _, chunk := range stage {
		if made, err := d.ImportTube([]byte("t"), chunk, store.TubeFigures{}, nil); err != nil || made != 1 {
			t.Fatalf("the stage's import of a chunk: %d, %v", made, err)
		}
	}

	c.Delete(deleted)
	if err := c.Release(held, 0, 0); err != nil {
		t.Fatal(err)
	}
	reserve(held)
	if err := c.Bury(held, 5); err != nil {
		t.Fatal(err)
	}
	reserve(buried)
	fresh := put(3, "fresh")
	frames, n, holders, fig, gone, ok := src.ExportTubeChanges([]byte("t"), since)
	if !ok || n != 4 || len(holders) != 1 || holders[0].ID != buried || !slices.Equal(gone, []uint64{deleted}) {
		t.Fatalf("changes: %d jobs, held %+v, gone %v, %v", n, holders, gone, ok)
	}
	var sent []uint64
	if err := wal.ScanFrames(frames, func(_ wal.Kind, id uint64, _ int) { sent = append(sent, id) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(sent)
	if want := []uint64{held, buried, fresh}; !slices.Equal(sent, want) {
		t.Fatalf("changes sent jobs %v, want %v (not the unchanged %d)", sent, want, same)
	}
	for range 2 { // sent again: the same
		if _, err := d.ImportTubeChanges([]byte("t"), frames, gone, fig, map[uint64]*store.Client{buried: d}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uint64{held, buried, fresh, same} {
		a, _ := c.JobStats(id)
		b, found := d.JobStats(id)
		if !found || b.State != a.State || b.Pri != a.Pri || b.Reserves != a.Reserves || b.Buries != a.Buries || b.Releases != a.Releases {
			t.Fatalf("job %d after the changes: %+v, in the source %+v", id, b, a)
		}
	}
	if _, found := d.JobStats(deleted); found {
		t.Fatal("the job deleted since the stage is still in the destination")
	}
	if _, held, _ := d.JobIn(buried); !held {
		t.Fatal("the reserved job is not its holder's in the destination")
	}
	ts, _ := dst.TubeStats([]byte("t"))
	if ts.Ready != 2 || ts.Reserved != 1 || ts.Buried != 1 || ts.TotalJobs != fig.TotalJobs || ts.CmdDelete != 1 {
		t.Fatalf("the tube moved in: %+v (the source's figures %+v)", ts, fig)
	}
	if st := dst.Stats(); st.Jobs() != 4 {
		t.Fatalf("the destination holds %d jobs, want 4", st.Jobs())
	}
}

// TestMoveTubeCopyBatches: a copy taken while the tube serves
// (ExportTubeCopy lets go of the tube's lock between batches) and the
// changes after it make the tube as its source holds it: a job deleted
// between batches is gone, and the buried jobs kick in the source's
// order, though two were buried between batches, each in a part of the
// copy taken after the other's (a ready job's and a delayed one's), and
// one was kicked and buried again.
func TestMoveTubeCopyBatches(t *testing.T) {
	src, dst, c := moveStores(t)
	c.Watch([]byte("t"))
	put := func(pri, delay uint32) uint64 {
		t.Helper()
		j, err := c.Put(src.NextID(), pri, delay, 30, []byte("job\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		return j.ID()
	}
	bury := func(want uint64) {
		t.Helper()
		if j, res := c.Reserve(0); res != store.Reserved || j.ID() != want {
			t.Fatalf("reserve: %v %v, want job %d", j, res, want)
		}
		if err := c.Bury(want, 0); err != nil {
			t.Fatal(err)
		}
	}
	b1, b2 := put(0, 0), put(0, 0)
	bury(b1)
	bury(b2)
	r2, r1 := put(1, 0), put(0, 100)
	var fillers []uint64
	for range 3 * 4096 { // several batches
		fillers = append(fillers, put(5, 0))
	}
	batches := 0
	src.SetBetweenCopyBatches(func() {
		if batches++; batches > 1 {
			return
		}
		if err := c.KickJob(r1); err != nil {
			t.Error(err)
		}
		bury(r1)
		bury(r2)
		if err := c.KickJob(b1); err != nil {
			t.Error(err)
		}
		bury(b1)
		c.Delete(fillers[0])
	})
	chunks, n, since, ok := copyChunks(t, src, "t", 64<<10)
	if !ok || batches < 3 || len(chunks) < 2 {
		t.Fatalf("the copy: %v, %d batches, %d chunks", ok, batches, len(chunks))
	}
	if want := 2 + 2 + len(fillers) - 1 - 2; n != want || since.Len() != want { // r1, r2 buried since: left out
		t.Fatalf("the copy holds %d jobs (%d in its TubeCopy), want %d", n, since.Len(), want)
	}
	d := dst.NewClient(nil)
	for _, chunk := range chunks {
		if _, err := d.ImportTube([]byte("t"), chunk, store.TubeFigures{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	frames, jobs, _, fig, gone, _ := src.ExportTubeChanges([]byte("t"), since)
	if _, err := d.ImportTubeChanges([]byte("t"), frames, gone, fig, nil); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{b2, r1, r2, b1}; !slices.Equal(src.BuriedIDs("t"), want) || !slices.Equal(dst.BuriedIDs("t"), want) {
		t.Fatalf("buried in the order %v at the source, %v at the destination; want %v", src.BuriedIDs("t"), dst.BuriedIDs("t"), want)
	}
	if ts, _ := dst.TubeStats([]byte("t")); int(ts.Ready+ts.Buried) != jobs || jobs != len(fillers)-1+4 {
		t.Fatalf("the destination holds %+v, the source %d jobs", ts, jobs)
	}
	if _, _, ok := d.JobIn(fillers[0]); ok {
		t.Fatal("the job deleted between the copy's batches is at the destination")
	}
}

// copyChunks is ExportTubeCopy's chunks, each kept (send's is its only
// while it runs).
func copyChunks(t *testing.T, s *store.Store, tube string, chunk int) (chunks [][]byte, jobs int, cp *store.TubeCopy, ok bool) {
	t.Helper()
	jobs, cp, ok, err := s.ExportTubeCopy([]byte(tube), chunk, func(frames []byte) error {
		chunks = append(chunks, bytes.Clone(frames))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return chunks, jobs, cp, ok
}

// TestMoveTubeChangesNoted: the export at a move's freeze, from the
// jobs the tube noted changed since its copy began, is the one a
// comparison of every job makes (ExportTubeChanges without the note),
// after random puts, reserves, releases, burials, kicks, touches,
// deletes, delays and TTRs run out, before the copy, between its
// batches and after it; and the copy with those changes makes the
// tube at the destination as the source holds it.
func TestMoveTubeChangesNoted(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { moveTubeChangesNoted(t, seed) })
	}
}

func moveTubeChangesNoted(t *testing.T, seed uint64) {
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	src := store.New(store.Options{IDPrefix: 2, Now: clock.Load})
	dst := store.New(store.Options{IDPrefix: 1, Now: clock.Load})
	t.Cleanup(src.Close)
	t.Cleanup(dst.Close)
	producer := src.NewClient(nil)
	producer.Use([]byte("t"))
	workers := []*store.Client{src.NewClient(nil), src.NewClient(nil)}
	for _, w := range workers {
		w.Watch([]byte("t"))
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var ids []uint64
	anyID := func() uint64 { return ids[rng.IntN(len(ids))] }
	heldBy := func(w *store.Client) (uint64, bool) {
		held := w.ReservedIDs()
		if len(held) == 0 {
			return 0, false
		}
		return held[rng.IntN(len(held))], true
	}
	settle := func() { // the timers due served, so that nothing changes meanwhile
		src.PokeTimers()
		for deadline := time.Now().Add(10 * time.Second); src.TimersDue("t"); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the timers due were not served")
			}
		}
	}
	ttrs := []uint32{1, 2, 3, 600} // some reservations outlast the test
	putDelayed := func(delay uint32) {
		j, err := producer.Put(src.NextID(), rng.Uint32N(4), delay, ttrs[rng.IntN(len(ttrs))], []byte("job\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID())
	}
	put := func() {
		if rng.IntN(4) == 0 {
			putDelayed(1 + rng.Uint32N(4))
		} else {
			putDelayed(0)
		}
	}
	step := func() {
		w := workers[rng.IntN(len(workers))]
		switch op := rng.IntN(20); {
		case op < 5:
			put()
		case op < 9:
			w.Reserve(0)
		case op < 11:
			if id, ok := heldBy(w); ok {
				_ = w.Release(id, rng.Uint32N(4), rng.Uint32N(2)*(1+rng.Uint32N(3)))
			}
		case op < 13:
			if id, ok := heldBy(w); ok {
				_ = w.Bury(id, rng.Uint32N(4))
			}
		case op < 14:
			if id, ok := heldBy(w); ok {
				w.Touch(id)
			}
		case op < 16:
			w.Delete(anyID())
		case op < 17:
			w.Kick(1 + rng.Uint32N(3))
		case op < 18:
			_ = w.KickJob(anyID())
		default:
			clock.Add(int64(time.Duration(rng.IntN(1500)) * time.Millisecond))
			settle()
		}
	}
	for range 6000 { // two of the copy's batches and some
		put()
	}
	for range 1000 {
		step()
	}
	settle()
	for range 200 { // copied delayed (past the clock's moves between batches), and reserved, to change after
		putDelayed(60 + rng.Uint32N(30))
		workers[rng.IntN(len(workers))].Reserve(0)
	}
	holder := src.NewClient(nil) // copied reserved, and still
	holder.Watch([]byte("t"))
	for range 20 {
		j, err := producer.Put(src.NextID(), 0, 0, 600, []byte("held\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID())
		if _, ok := holder.ReserveJob(j.ID()); !ok {
			t.Fatalf("the holder's reserve-job %d failed", j.ID())
		}
	}
	src.SetBetweenCopyBatches(func() {
		for range 300 {
			step()
		}
		settle()
	})
	chunks, _, since, ok := copyChunks(t, src, "t", 64<<10)
	if !ok {
		t.Fatal("no copy")
	}
	d := dst.NewClient(nil)
	for _, chunk := range chunks {
		if _, err := d.ImportTube([]byte("t"), chunk, store.TubeFigures{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 1000 {
		step()
	}
	clock.Add(int64(90 * time.Second)) // the copied delays over
	settle()
	if !src.Noting("t", since) {
		t.Fatal("the tube does not note its changes for the copy")
	}

	type export struct {
		recs       map[uint64][]byte // each job's frame
		buried     []uint64          // the buried jobs', in the frames' order
		jobs       int
		held, gone []uint64
		frames     []byte
		holders    []store.Held
		figures    store.TubeFigures
	}
	exportOf := func(cp *store.TubeCopy) export {
		frames, jobs, holders, fig, gone, ok := src.ExportTubeChanges([]byte("t"), cp)
		if !ok {
			t.Fatal("no tube")
		}
		e := export{recs: map[uint64][]byte{}, jobs: jobs, gone: slices.Sorted(slices.Values(gone)), frames: frames, holders: holders, figures: fig}
		recs, err := wal.DecodeFrames(nil, frames)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			r := &recs[i]
			if _, twice := e.recs[r.ID]; twice {
				t.Fatalf("job %d exported twice", r.ID)
			}
			e.recs[r.ID] = wal.AppendFrame(nil, r)
			if r.State == wal.StateBuried {
				e.buried = append(e.buried, r.ID)
			}
		}
		for _, h := range holders {
			e.held = append(e.held, h.ID)
		}
		slices.Sort(e.held)
		return e
	}
	every := exportOf(since.Unnoted())
	if !src.Noting("t", since) {
		t.Fatal("the export comparing every job ended the copy's note")
	}
	noted := exportOf(since)
	if src.Noting("t", since) {
		t.Fatal("the export of the noted changes did not end the note")
	}
	if len(every.recs) == 0 || len(every.gone) == 0 || len(every.held) == 0 || len(every.buried) == 0 {
		t.Fatalf("too few changes to tell: %d jobs, %d gone, %d held, %d buried", len(every.recs), len(every.gone), len(every.held), len(every.buried))
	}
	switch {
	case noted.jobs != every.jobs:
		t.Fatalf("the noted export counts %d jobs, the walk %d", noted.jobs, every.jobs)
	case !slices.Equal(noted.gone, every.gone):
		t.Fatalf("gone: noted %v, walk %v", noted.gone, every.gone)
	case !slices.Equal(noted.held, every.held):
		t.Fatalf("held: noted %v, walk %v", noted.held, every.held)
	case !slices.Equal(noted.buried, every.buried):
		t.Fatalf("buried, in order: noted %v, walk %v", noted.buried, every.buried)
	case len(noted.recs) != len(every.recs):
		t.Fatalf("the noted export holds %d jobs, the walk's %d", len(noted.recs), len(every.recs))
	}
	for id, frame := range every.recs {
		if !bytes.Equal(noted.recs[id], frame) {
			t.Fatalf("job %d: the noted export's record is not the walk's", id)
		}
	}

	holders := map[uint64]*store.Client{}
	for _, h := range noted.holders {
		holders[h.ID] = d
	}
	for _, id := range holder.ReservedIDs() {
		if _, found := slices.BinarySearch(noted.held, id); !found {
			t.Fatalf("the holder's job %d is not held in the export (%v)", id, noted.held)
		}
	}
	if _, err := d.ImportTubeChanges([]byte("t"), noted.frames, noted.gone, noted.figures, holders); err != nil {
		t.Fatal(err)
	}
	if a, b := src.BuriedIDs("t"), dst.BuriedIDs("t"); !slices.Equal(a, b) {
		t.Fatalf("buried in the order %v at the source, %v at the destination", a, b)
	}
	a, _ := src.TubeStats([]byte("t"))
	b, _ := dst.TubeStats([]byte("t"))
	if a.Ready != b.Ready || a.Delayed != b.Delayed || a.Reserved != b.Reserved || a.Buried != b.Buried || int(a.Ready+a.Delayed+a.Reserved+a.Buried) != noted.jobs {
		t.Fatalf("the tube at the destination: %+v; at the source %+v", b, a)
	}
	for _, id := range ids {
		sj, inSrc := producer.JobStats(id)
		dj, inDst := d.JobStats(id)
		if inSrc != inDst {
			t.Fatalf("job %d: at the source %v, at the destination %v", id, inSrc, inDst)
		}
		if inSrc && (sj.State != dj.State || sj.Pri != dj.Pri || sj.Reserves != dj.Reserves || sj.Timeouts != dj.Timeouts ||
			sj.Releases != dj.Releases || sj.Buries != dj.Buries || sj.Kicks != dj.Kicks ||
			(sj.TimeLeft-dj.TimeLeft).Abs() > time.Millisecond) { // each store's wall clock is read at its start
			t.Fatalf("job %d: at the destination %+v, at the source %+v", id, dj, sj)
		}
	}
}

// TestMoveCopyNotesJobsReservedWhileItLooks: a copy looks up the tube's
// reserved jobs by walking the group's id index with no lock held, then
// takes the others in its first hold. A job ready when that walk passed
// it and reserved before the hold was in neither, and not noted either:
// the freeze's changes left it out while counting it, and a busy tube's
// move was refused at its destination (found by a reviewing helper).
func TestMoveCopyNotesJobsReservedWhileItLooks(t *testing.T) {
	src, dst, c := moveStores(t)
	for range 3 {
		if _, err := c.Put(src.NextID(), 0, 0, 600, []byte("kept\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	worker := src.NewClient(nil)
	worker.Watch([]byte("t"))
	var taken uint64
	src.SetBeforeCopyHold(func() {
		j, res := worker.Reserve(0)
		if res != store.Reserved {
			t.Fatalf("reserve: %v", res)
		}
		taken = j.ID()
	})
	chunks, _, since, ok := copyChunks(t, src, "t", 0)
	if !ok || taken == 0 {
		t.Fatalf("the copy: %v, job reserved during it %d", ok, taken)
	}
	d := dst.NewClient(nil)
	for _, chunk := range chunks {
		if _, err := d.ImportTube([]byte("t"), chunk, store.TubeFigures{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	frames, jobs, holders, fig, gone, _ := src.ExportTubeChanges([]byte("t"), since)
	if _, err := d.ImportTubeChanges([]byte("t"), frames, gone, fig, nil); err != nil {
		t.Fatal(err)
	}
	ts, _ := dst.TubeStats([]byte("t"))
	if held := int(ts.Ready + ts.Reserved); held != jobs || jobs != 3 {
		t.Fatalf("the destination holds %d of the tube's jobs, the source counts %d (want 3)", held, jobs)
	}
	if !slices.ContainsFunc(holders, func(h store.Held) bool { return h.ID == taken }) {
		t.Fatalf("job %d, reserved during the copy, is not among the freeze's holders %v", taken, holders)
	}
}

// TestMoveAbortedEmptyPausedTubeLeavesNoPause: a move of an empty paused
// tube imports its pause and keeps it, the tube freed, for its sessions'
// references; aborted, its drop finds no tube to end it. A later move of
// the tube, unpaused at its source since, found it paused again at its
// destination for what was left of the old pause (found by a reviewing
// helper).
func TestMoveAbortedEmptyPausedTubeLeavesNoPause(t *testing.T) {
	src, dst, c := moveStores(t)
	d := dst.NewClient(nil)
	paused := store.TubeFigures{CmdPause: 1, Pause: time.Hour, PauseLeft: time.Hour}
	if _, err := d.ImportTube([]byte("t"), nil, paused, nil); err != nil {
		t.Fatal(err)
	}
	if n := d.DropTube([]byte("t")); n != 0 { // the abort
		t.Fatalf("the abort's drop dropped %d jobs", n)
	}
	j, err := c.Put(src.NextID(), 0, 0, 60, []byte("x\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	frames, _, _, fig, ok := src.ExportTube([]byte("t"))
	if !ok || fig.PauseLeft != 0 {
		t.Fatalf("the source's tube: %v, %+v", ok, fig)
	}
	if _, err := d.ImportTube([]byte("t"), frames, fig, nil); err != nil { // the next move
		t.Fatal(err)
	}
	if ts, _ := dst.TubeStats([]byte("t")); ts.Pause != 0 {
		t.Fatalf("the tube, moved in unpaused, is paused %v (%v left) in its new group", ts.Pause, ts.PauseTimeLeft)
	}
	w := dst.NewClient(nil)
	w.Watch([]byte("t"))
	if got, res := w.Reserve(0); res != store.Reserved || got.ID() != j.ID() {
		t.Fatalf("reserve at the destination: %v %v, want job %d", got, res, j.ID())
	}
}
