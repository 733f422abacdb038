package store_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// These tests run a store on a real write-ahead log in a temporary
// directory, close it as cmd/sprout does (log first, then the store) and
// open a new one on the same directory, as a restart does.

// durable is a store with its log.
type durable struct {
	*store.Store
	log    *wal.Log
	closed bool
}

func openDurable(t *testing.T, dir string, opts wal.Options) *durable {
	t.Helper()
	l, err := wal.Open(dir, opts)
	if err != nil {
		t.Fatalf("wal.Open: %v", err)
	}
	d := &durable{Store: store.New(store.Options{Log: l}), log: l}
	if err := l.Start(d.Store); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { d.close(t) })
	return d
}

// close stops the log (writing and syncing everything) and then the store.
func (d *durable) close(t *testing.T) {
	t.Helper()
	if d.closed {
		return
	}
	d.closed = true
	if err := d.log.Close(); err != nil {
		t.Errorf("log Close: %v", err)
	}
	d.Store.Close()
}

// settle waits until the change c made last is durable, as the engine does
// before replying.
func (d *durable) settle(t *testing.T, c *store.Client) {
	t.Helper()
	done := make(chan struct{})
	d.Acks().OnAcked(c.PendingAck(), func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("position %d not acknowledged within 10s", c.PendingAck())
	}
}

func mustPut(t *testing.T, s *store.Store, c *store.Client, pri, delay, ttr uint32, body string) uint64 {
	t.Helper()
	id := s.NextID()
	if _, err := c.Put(id, pri, delay, ttr, []byte(body+"\r\n")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	return id
}

func mustReserve(t *testing.T, c *store.Client, id uint64) {
	t.Helper()
	if _, ok := c.ReserveJob(id); !ok {
		t.Fatalf("ReserveJob(%d) failed", id)
	}
}

// jobWant is what stats-job and peek must show for a recovered job.
type jobWant struct {
	tube                          string
	state                         store.State
	pri                           uint32
	delay, ttr                    time.Duration
	timeLeftMin                   time.Duration // delayed only: time-left at least this
	reserves, releases, buries, k uint32
	body                          string
}

func checkJob(t *testing.T, s *store.Store, id uint64, w jobWant) {
	t.Helper()
	st, ok := store.StatsOfJob(s, id)
	if !ok {
		t.Errorf("job %d (%s) was not recovered", id, w.body)
		return
	}
	got := jobWant{st.Tube, st.State, st.Pri, st.Delay, st.TTR, 0, st.Reserves, st.Releases, st.Buries, st.Kicks, ""}
	if j, ok := store.PeekByID(s, id); ok {
		got.body = string(bytes.TrimSuffix(j.Body(), []byte("\r\n")))
	}
	want := w
	want.timeLeftMin = 0
	if got != want {
		t.Errorf("job %d recovered as\n %+v\nwant\n %+v", id, got, want)
	}
	if w.state == store.StateDelayed && (st.TimeLeft < w.timeLeftMin || st.TimeLeft > w.delay) {
		t.Errorf("job %d: time-left %v, want between %v and %v", id, st.TimeLeft, w.timeLeftMin, w.delay)
	}
	if st.File < 1 {
		t.Errorf("job %d: file %d, want the segment holding it", id, st.File)
	}
}

// TestRecoverEveryState takes jobs through every logged change and checks
// each comes back from a restart as it was left: ready, delayed with its
// remaining time, buried with its new priority, reserved back to ready,
// released with its new priority and delay, kicked; a deleted job does not
// come back.
func TestRecoverEveryState(t *testing.T) {
	dir := t.TempDir()
	d := openDurable(t, dir, wal.Options{})
	c, _ := newClient(d.Store)
	c.Use([]byte("work"))

	ready := mustPut(t, d.Store, c, 5, 0, 30, "ready")
	delayed := mustPut(t, d.Store, c, 6, 100, 30, "delayed")
	buried := mustPut(t, d.Store, c, 7, 0, 30, "buried")
	mustReserve(t, c, buried)
	if err := c.Bury(buried, 77); err != nil {
		t.Fatal(err)
	}
	reserved := mustPut(t, d.Store, c, 8, 0, 30, "reserved")
	mustReserve(t, c, reserved)
	deleted := mustPut(t, d.Store, c, 9, 0, 30, "deleted")
	if !c.Delete(deleted) {
		t.Fatal("Delete failed")
	}
	releasedLater := mustPut(t, d.Store, c, 10, 0, 30, "released with a delay")
	mustReserve(t, c, releasedLater)
	if err := c.Release(releasedLater, 1, 50); err != nil {
		t.Fatal(err)
	}
	releasedNow := mustPut(t, d.Store, c, 10, 0, 30, "released at once")
	mustReserve(t, c, releasedNow)
	if err := c.Release(releasedNow, 2, 0); err != nil {
		t.Fatal(err)
	}
	kicked := mustPut(t, d.Store, c, 11, 0, 30, "kicked from buried")
	mustReserve(t, c, kicked)
	if err := c.Bury(kicked, 11); err != nil {
		t.Fatal(err)
	}
	if err := c.KickJob(kicked); err != nil {
		t.Fatal(err)
	}
	kickedDelayed := mustPut(t, d.Store, c, 12, 3600, 30, "kicked from delayed")
	if err := c.KickJob(kickedDelayed); err != nil {
		t.Fatal(err)
	}
	d.settle(t, c)
	c.Close()
	d.close(t)

	d = openDurable(t, dir, wal.Options{})
	const s = time.Second
	checkJob(t, d.Store, ready, jobWant{"work", store.StateReady, 5, 0, 30 * s, 0, 0, 0, 0, 0, "ready"})
	checkJob(t, d.Store, delayed, jobWant{"work", store.StateDelayed, 6, 100 * s, 30 * s, 90 * s, 0, 0, 0, 0, "delayed"})
	checkJob(t, d.Store, buried, jobWant{"work", store.StateBuried, 77, 0, 30 * s, 0, 1, 0, 1, 0, "buried"})
	// Reserves are not logged (as in beanstalkd): the count restarts at 0.
	checkJob(t, d.Store, reserved, jobWant{"work", store.StateReady, 8, 0, 30 * s, 0, 0, 0, 0, 0, "reserved"})
	checkJob(t, d.Store, releasedLater, jobWant{"work", store.StateDelayed, 1, 50 * s, 30 * s, 40 * s, 1, 1, 0, 0, "released with a delay"})
	// Unlike beanstalkd, a release with no delay is logged: its priority stays.
	checkJob(t, d.Store, releasedNow, jobWant{"work", store.StateReady, 2, 0, 30 * s, 0, 1, 1, 0, 0, "released at once"})
	checkJob(t, d.Store, kicked, jobWant{"work", store.StateReady, 11, 0, 30 * s, 0, 1, 0, 1, 1, "kicked from buried"})
	checkJob(t, d.Store, kickedDelayed, jobWant{"work", store.StateReady, 12, 3600 * s, 30 * s, 0, 0, 0, 0, 1, "kicked from delayed"})
	if _, ok := store.StatsOfJob(d.Store, deleted); ok {
		t.Errorf("deleted job %d came back", deleted)
	}
	if got := d.LiveJobIDs(); len(got) != 8 {
		t.Errorf("recovered jobs %v, want 8", got)
	}
	if st := tubeStats(t, d.Store, "work"); st.Ready != 5 || st.Delayed != 2 || st.Buried != 1 || st.Reserved != 0 {
		t.Errorf("tube counts after recovery: %+v", st)
	}
	if id := d.NextID(); id <= kickedDelayed {
		t.Errorf("NextID after recovery = %d, want above %d", id, kickedDelayed)
	}

	// The recovered jobs work: the reserved one is reserved first again.
	c2, _ := newClient(d.Store)
	c2.Watch([]byte("work"))
	j, r := c2.Reserve(0)
	if r != store.Reserved || j.ID() != releasedNow {
		t.Errorf("first reserve after recovery got %v (%s), want job %d (pri 2)", jobName(j), resultName(r), releasedNow)
	}
	c2.Close()
	d.close(t)
	if err := d.CheckInvariants(); err != nil {
		t.Errorf("invariants after recovery:\n%v", err)
	}
}

// TestRecoverPassedDeadline: a delayed job whose time ran out while the
// server was down is ready soon after the restart. In a synctest bubble,
// where the second the server is down passes on the bubble's clock, wall
// time included, at no cost.
func TestRecoverPassedDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		d := openDurable(t, dir, wal.Options{})
		c, _ := newClient(d.Store)
		id := mustPut(t, d.Store, c, 1, 1, 30, "due while down")
		c.Close()
		d.close(t)
		time.Sleep(1100 * time.Millisecond)
		d = openDurable(t, dir, wal.Options{})
		time.Sleep(time.Millisecond) // a passed deadline is due a nanosecond after the start
		synctest.Wait()
		if st := jobStats(t, d.Store, id).State; st != store.StateReady {
			t.Errorf("job %v after a restart past its deadline, want ready", st)
		}
		d.close(t)
	})
}

// TestCompactionKeepsJobs: jobs that sit in old segments while others churn
// are moved by compaction (the store is the log's Migrator) and come back
// from a restart unchanged; the old segments go away.
func TestCompactionKeepsJobs(t *testing.T) {
	dir := t.TempDir()
	opts := wal.Options{SegmentSize: 4096}
	d := openDurable(t, dir, opts)
	c, _ := newClient(d.Store)
	holder, _ := newClient(d.Store)
	c.Use([]byte("keep"))
	want := make(map[uint64]jobWant)
	const s = time.Second
	id := mustPut(t, d.Store, c, 3, 0, 60, "keeper ready")
	want[id] = jobWant{"keep", store.StateReady, 3, 0, 60 * s, 0, 0, 0, 0, 0, "keeper ready"}
	id = mustPut(t, d.Store, c, 4, 3600, 60, "keeper delayed")
	want[id] = jobWant{"keep", store.StateDelayed, 4, 3600 * s, 60 * s, 3500 * s, 0, 0, 0, 0, "keeper delayed"}
	id = mustPut(t, d.Store, c, 5, 0, 60, "keeper buried")
	mustReserve(t, c, id)
	if err := c.Bury(id, 55); err != nil {
		t.Fatal(err)
	}
	want[id] = jobWant{"keep", store.StateBuried, 55, 0, 60 * s, 0, 1, 0, 1, 0, "keeper buried"}
	id = mustPut(t, d.Store, c, 6, 0, 60, "keeper released")
	mustReserve(t, c, id)
	if err := c.Release(id, 66, 0); err != nil {
		t.Fatal(err)
	}
	want[id] = jobWant{"keep", store.StateReady, 66, 0, 60 * s, 0, 1, 1, 0, 0, "keeper released"}
	held := mustPut(t, d.Store, c, 7, 0, 3600, "keeper reserved")
	mustReserve(t, holder, held)
	// Moved while reserved, it is logged as reserved, and so comes back
	// ready; a move logs the reserve count it has by then.
	want[held] = jobWant{"keep", store.StateReady, 7, 0, 3600 * s, 0, 1, 0, 0, 0, "keeper reserved"}
	d.settle(t, c)
	keepers := slices.Sorted(func(yield func(uint64) bool) {
		for id := range want {
			if !yield(id) {
				return
			}
		}
	})
	for _, id := range keepers {
		if f := jobStats(t, d.Store, id).File; f != 1 {
			t.Fatalf("keeper %d starts in segment %d, want 1", id, f)
		}
	}

	churn, _ := newClient(d.Store)
	churn.Use([]byte("churn"))
	churn.Watch([]byte("churn"))
	churn.Ignore([]byte("default"))
	moved := func() bool {
		for _, id := range keepers {
			if jobStats(t, d.Store, id).File == 1 {
				return false
			}
		}
		st, _ := d.LogStats()
		return st.OldestIndex > 1
	}
	var lastID uint64
	for i := 0; i < 5000 && !moved(); i++ {
		lastID = mustPut(t, d.Store, churn, 0, 0, 60, fmt.Sprintf("churn %d %0200d", i, 0))
		j, r := churn.Reserve(0)
		if r != store.Reserved {
			t.Fatalf("churn reserve: %s", resultName(r))
		}
		churn.Delete(j.ID())
		d.settle(t, churn)
	}
	if !moved() {
		st, _ := d.LogStats()
		t.Fatalf("after 5000 churned jobs the keepers are not all moved out of segment 1: %+v", st)
	}
	st, _ := d.LogStats()
	if st.RecordsMigrated < int64(len(keepers)) {
		t.Errorf("binlog-records-migrated = %d, want at least %d", st.RecordsMigrated, len(keepers))
	}
	t.Logf("log: %+v", st)
	churn.Close()
	c.Close()
	holder.Close()
	d.close(t)

	d = openDurable(t, dir, opts)
	for id, w := range want {
		checkJob(t, d.Store, id, w)
	}
	if got := d.LiveJobIDs(); !slices.Equal(got, keepers) {
		t.Errorf("recovered %v, want only the keepers %v", got, keepers)
	}
	if next := d.NextID(); next <= lastID {
		t.Errorf("NextID %d after restart, but %d was issued", next, lastID)
	}
	st2, _ := d.LogStats()
	if st2.OldestIndex <= 1 {
		t.Errorf("oldest segment after restart is %d", st2.OldestIndex)
	}
}

// TestIDsContinueAcrossRestarts: with every job deleted, restart after
// restart (some with no traffic at all) the next id is above every id ever
// issued.
func TestIDsContinueAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	opts := wal.Options{SegmentSize: 2048}
	var issued uint64
	for round := range 6 {
		d := openDurable(t, dir, opts)
		c, _ := newClient(d.Store)
		if round%3 != 2 {
			for i := range 25 {
				id := mustPut(t, d.Store, c, 0, 0, 60, fmt.Sprintf("round %d job %d %0100d", round, i, 0))
				if id <= issued {
					t.Fatalf("round %d: id %d issued again (last issued %d)", round, id, issued)
				}
				issued = id
				if !c.Delete(id) {
					t.Fatalf("Delete(%d) failed", id)
				}
			}
			d.settle(t, c)
		}
		if got := d.LiveJobIDs(); len(got) != 0 {
			t.Fatalf("round %d: jobs %v alive after deleting everything", round, got)
		}
		c.Close()
		d.close(t)
	}
}

// TestIDWatermarkSurvivesCrash: an id can be seen (reserved) before its put
// is durable, so a restart must continue above every id the counter could
// have issued, not just above the ids whose puts reached the log.
func TestIDWatermarkSurvivesCrash(t *testing.T) {
	dir := t.TempDir()
	d := openDurable(t, dir, wal.Options{})
	c, _ := newClient(d.Store)
	id := mustPut(t, d.Store, c, 0, 0, 60, "durable")
	d.settle(t, c)
	// Ids issued without a logged put, as when the process dies before the
	// puts that took them are written.
	var last uint64
	for range 100 {
		last = d.NextID()
	}
	c.Close()
	d.close(t)

	d = openDurable(t, dir, wal.Options{})
	defer d.close(t)
	if next := d.NextID(); next <= last {
		t.Fatalf("after restart NextID = %d, but %d was already issued (last logged put %d)", next, last, id)
	}
}

// TestConcurrentChangesDuringCompaction: clients put, reserve, release,
// bury, kick and delete concurrently over tiny segments, so compaction
// moves jobs while they change. After a restart every job left is exactly
// as it was (reserved ones ready), and no other job is.
func TestConcurrentChangesDuringCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := wal.Options{SegmentSize: 2048}
	d := openDurable(t, dir, opts)
	const workers, ops = 8, 600
	deadline := time.Now().Add(20 * time.Second)
	migrated := func(d *durable) int64 {
		st, _ := d.LogStats()
		return st.RecordsMigrated
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			c := d.NewClient(nopNotifier{})
			defer c.Close()
			tube := []byte(fmt.Sprintf("t%d", w%3))
			c.Use(tube)
			c.Watch(tube)
			// Run at least ops operations, and on until compaction has moved
			// jobs: the spare segment it needs is prepared in the
			// background, so on a loaded machine it may come late.
			for i := 0; i < ops || (migrated(d) == 0 && time.Now().Before(deadline)); i++ {
				switch op := rng.IntN(20); {
				case op < 8:
					var delay uint32
					if rng.IntN(10) == 0 {
						delay = 3600
					}
					id := d.NextID()
					if _, err := c.Put(id, uint32(rng.IntN(100)), delay, 3600,
						[]byte(fmt.Sprintf("w%d op%d %0*d\r\n", w, i, rng.IntN(300), 0))); err != nil {
						t.Errorf("Put: %v", err)
						return
					}
				case op < 19:
					j, r := c.Reserve(0)
					if r != store.Reserved {
						continue
					}
					switch n := rng.IntN(20); {
					case n < 15:
						c.Delete(j.ID())
					case n < 17:
						_ = c.Release(j.ID(), uint32(rng.IntN(100)), uint32(rng.IntN(2)*3600))
					case n < 19:
						_ = c.Bury(j.ID(), uint32(rng.IntN(100)))
					}
				default:
					c.Kick(uint32(rng.IntN(3)))
				}
			}
		}()
	}
	wg.Wait()
	before := make(map[uint64]jobWant)
	for _, id := range d.LiveJobIDs() {
		st := jobStats(t, d.Store, id)
		j, _ := store.PeekByID(d.Store, id)
		w := jobWant{st.Tube, st.State, st.Pri, st.Delay, st.TTR, 0, 0, st.Releases, st.Buries, st.Kicks,
			string(bytes.TrimSuffix(j.Body(), []byte("\r\n")))}
		if w.state == store.StateReserved {
			w.state = store.StateReady
		}
		if w.state == store.StateDelayed {
			w.timeLeftMin = st.TimeLeft - 10*time.Second
		}
		before[id] = w
	}
	st, _ := d.LogStats()
	t.Logf("%d live jobs; log %+v", len(before), st)
	if st.RecordsMigrated == 0 {
		t.Errorf("no job was moved: the test did not exercise compaction")
	}
	d.close(t)

	d = openDurable(t, dir, opts)
	for id, w := range before {
		got := jobStats(t, d.Store, id)
		w.reserves = got.Reserves // reserves are only logged in passing
		checkJob(t, d.Store, id, w)
	}
	if got := d.LiveJobIDs(); len(got) != len(before) {
		t.Errorf("recovered %d jobs, want %d", len(got), len(before))
	}
	d.close(t)
	if err := d.CheckInvariants(); err != nil {
		t.Errorf("invariants after recovery:\n%v", err)
	}
}

// TestLiveBytesBalance: the log's count of live bytes goes up by each put's
// full record and back to zero when every job is deleted, also for jobs
// recovered by a restart and jobs compaction moved. A job keeps only the
// segment of its record; the size it gives back is computed from its tube
// name and body, so a wrong computation shows here as bytes left over.
func TestLiveBytesBalance(t *testing.T) {
	dir := t.TempDir()
	opts := wal.Options{SegmentSize: 8192}
	d := openDurable(t, dir, opts)
	c := d.NewClient(nopNotifier{})
	var ids []uint64
	var want int64
	for i := range 20 {
		tube := fmt.Sprintf("t%0*d", 1+i%7, i)
		c.Use([]byte(tube))
		body := string(bytes.Repeat([]byte{'b'}, i*37))
		ids = append(ids, mustPut(t, d.Store, c, 1, 0, 60, body))
		want += int64(wal.FullSize(len(tube), len(body)+2))
	}
	d.settle(t, c)
	if st, _ := d.LogStats(); st.LiveBytes != want {
		t.Fatalf("live bytes %d after the puts, want %d", st.LiveBytes, want)
	}
	d.close(t)

	d = openDurable(t, dir, opts)
	c = d.NewClient(nopNotifier{})
	for _, id := range ids[:5] {
		mustReserve(t, c, id)
		if err := c.Release(id, 2, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Churn until compaction has moved recovered jobs (full records that
	// supersede others: the sizes given back are computed).
	c.Use([]byte("churn"))
	for i := 0; ; i++ {
		id := mustPut(t, d.Store, c, 1, 0, 60, string(bytes.Repeat([]byte{'c'}, 300)))
		if !c.Delete(id) {
			t.Fatalf("delete %d failed", id)
		}
		d.settle(t, c)
		if st, _ := d.LogStats(); st.RecordsMigrated >= 5 {
			break
		}
		if i == 5000 {
			t.Fatal("compaction moved no job")
		}
	}
	for _, id := range ids {
		if !c.Delete(id) {
			t.Fatalf("delete %d failed", id)
		}
	}
	d.settle(t, c)
	if st, _ := d.LogStats(); st.LiveBytes != 0 {
		t.Fatalf("live bytes %d after deleting every job, want 0", st.LiveBytes)
	}
}
