package segment_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
)

// dirSize is the total size of the segment files in dir.
func dirSize(t testing.TB, dir string) int64 {
	_, sizes := segtest.Segments(t, dir)
	var n int64
	for _, s := range sizes {
		n += s
	}
	return n
}

// TestCompaction churns many puts and deletes through tiny segments while a
// few long-lived jobs, in every state, sit in the first segment. Compaction
// must move those jobs forward and remove the old segments, keeping the
// directory near twice the live data, and the moved jobs must come back
// from a reopen exactly as they were.
//
// The bound, once the writer has settled, is 2×live plus the current
// segment and its spare (both preallocated) plus two segments for the one
// before the current one, which may run past SegmentSize by what was
// appended while its successor was being zero-filled in the background.
// Every 20th spare is held back for 250 round trips (spareStall), as on a
// loaded disk, so the churn always meets such a segment: its growth past
// SegmentSize is left out of the churn's check, current or not.
func TestCompaction(t *testing.T) { synctest.Test(t, testCompaction) }

func testCompaction(t *testing.T) {
	const segSize = 4096
	dir := t.TempDir()
	var stall spareStall
	opts := segment.Options{SegmentSize: segSize}
	segment.SetAllocate(&opts, stall.allocate)
	l, m := open(t, dir, opts)
	rng := rand.New(rand.NewPCG(1, 2))
	body := func(n int) string { return strings.Repeat(string(rune('a'+rng.IntN(26))), n) }

	var keepers []uint64
	for i := range 5 {
		id, _ := m.put(t, fmt.Sprintf("keeper %d %s", i, body(100)))
		keepers = append(keepers, id)
	}
	m.update(t, keepers[2], "buried")
	m.update(t, keepers[3], "reserved")
	m.update(t, keepers[4], "released")

	bound := func() int64 { return 2*l.Stats().LiveBytes + 4*segSize }
	var window []uint64
	var maxOver int64 // how far the directory got past the bound during the churn
	for i := range 3000 {
		id, lsn := m.put(t, body(50+rng.IntN(250)))
		window = append(window, id)
		if len(window) > 10 {
			lsn = m.del(t, window[0])
			window = window[1:]
		}
		segtest.WaitDurable(t, l, lsn) // as a client waits for each reply
		stall.round()
		if i%10 == 0 {
			// While the spare is still being made, appends go on into the
			// current segment past its size (rotation never waits for the
			// disk); on a loaded machine, and at every stall, that is
			// several segments' worth. It is not compaction falling
			// behind, neither while that segment is current nor once it is
			// the one before (which holds the newest live items, so it is
			// compacted only when the segments before it have gone).
			_, sizes := segtest.Segments(t, dir)
			var size, overgrown int64
			for _, n := range sizes {
				size += n
				overgrown += max(n-segSize, 0)
			}
			maxOver = max(maxOver, size-bound()-overgrown)
		}
	}
	stall.stop()
	for _, id := range window {
		segtest.WaitDurable(t, l, m.del(t, id))
	}
	t.Logf("during the churn the directory was at most %d bytes past 2×live + 4 segments", maxOver)
	// Compaction lags the churn; 3000 records of up to 300 bytes are about
	// 200 segments, so this only catches compaction falling behind for good.
	if maxOver > 6*segSize {
		t.Errorf("during the churn the directory grew %d bytes past 2×live + 4 segments", maxOver)
	}

	// Compaction runs on the writer after each write; let it settle.
	synctest.Wait()
	st := l.Stats()
	if size := dirSize(t, dir); size > bound() || st.OldestIndex <= 1 {
		seqs, sizes := segtest.Segments(t, dir)
		t.Fatalf("directory did not shrink: %d bytes for %d live (bound %d); segments %v sizes %v; stats %+v",
			size, st.LiveBytes, bound(), seqs, sizes, st)
	}
	t.Logf("settled: %d bytes on disk, %d live, segments %d..%d, %d records migrated",
		dirSize(t, dir), st.LiveBytes, st.OldestIndex, st.CurrentIndex, st.RecordsMigrated)
	if st.RecordsMigrated < int64(len(keepers)) {
		t.Errorf("RecordsMigrated = %d, want at least the %d keepers", st.RecordsMigrated, len(keepers))
	}
	seqs, _ := segtest.Segments(t, dir)
	if seqs[0] != st.OldestIndex {
		t.Errorf("oldest file on disk is %d, stats say %d", seqs[0], st.OldestIndex)
	}
	if len(seqs) > 4 {
		t.Errorf("%d segment files remain: %v", len(seqs), seqs)
	}
	m.mu.Lock()
	for _, id := range keepers {
		if seg := m.items[id].loc.Seg; seg < st.OldestIndex {
			t.Errorf("keeper %d still points at removed segment %d", id, seg)
		}
	}
	m.mu.Unlock()

	got, _ := closeAndRecover(t, l, m, dir, segment.Options{SegmentSize: segSize})
	if len(got) != len(keepers) {
		t.Errorf("recovered %d items, want the %d keepers", len(got), len(keepers))
	}
}

// spareStall holds back every stallEvery-th spare segment for stallRounds
// of the test's round trips (a put, and a delete), as a loaded disk holds
// back a slow preallocation: meanwhile appends go on into the current
// segment past its size, here by a dozen segments' worth. It makes on
// every run what a loaded machine made now and then, and what the churn's
// size check once took for compaction falling behind.
type spareStall struct {
	mu      sync.Mutex
	made    int           // guarded by mu: spares allocated
	held    chan struct{} // guarded by mu: closed to let the held spare go; nil while none is
	count   int           // guarded by mu: round trips since it was held
	stopped bool          // guarded by mu: hold no more
}

const (
	stallEvery  = 20
	stallRounds = 250
)

func (s *spareStall) allocate(next func(*os.File, int64) error, file *os.File, size int64) error {
	s.mu.Lock()
	s.made++
	var release chan struct{}
	if s.made%stallEvery == 0 && !s.stopped {
		release = make(chan struct{})
		s.held, s.count = release, 0
	}
	s.mu.Unlock()
	if release != nil {
		<-release
	}
	return next(file, size)
}

// round counts one of the test's round trips, and lets a held spare go
// after stallRounds.
func (s *spareStall) round() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		return
	}
	if s.count++; s.count >= stallRounds {
		close(s.held)
		s.held = nil
	}
}

// stop lets a held spare go and holds none after it.
func (s *spareStall) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

// TestCompactionLeavesLargeLiveSetAlone: a live job larger than a segment,
// alone in the oldest segment, is not copied forward at every rotation: a
// move must reclaim at least half of what it copies.
func TestCompactionLeavesLargeLiveSetAlone(t *testing.T) {
	const segSize = 4096
	dir := t.TempDir()
	l, m := open(t, dir, segment.Options{SegmentSize: segSize})
	_, lsn := m.put(t, strings.Repeat("B", 3*segSize))
	segtest.WaitDurable(t, l, lsn)
	for range 400 { // dozens of segments of churn
		id, _ := m.put(t, strings.Repeat("c", 200))
		segtest.WaitDurable(t, l, m.del(t, id))
	}
	st := l.Stats()
	t.Logf("%+v", st)
	// Each move of the big job (three segments' worth) must be paid for by at
	// least half its size in dead segments, so there are far fewer moves
	// than rotations; copying it at every rotation would be one per segment.
	if rotations := int64(st.CurrentIndex); 3*st.RecordsMigrated > rotations {
		t.Errorf("the big job was moved %d times in %d segments", st.RecordsMigrated, rotations)
	}
	closeAndRecover(t, l, m, dir, segment.Options{SegmentSize: segSize})
}

// full is an allocate hook that reports ENOSPC while it is set.
type full struct {
	on    atomic.Bool
	made  atomic.Int64 // segments allocated
	tried atomic.Int64 // attempts refused
}

func (f *full) allocate(next func(*os.File, int64) error, file *os.File, size int64) error {
	if f.on.Load() {
		f.tried.Add(1)
		return syscall.ENOSPC
	}
	err := next(file, size)
	if err == nil {
		f.made.Add(1)
	}
	return err
}

// TestDiskFull: once no new segment can be allocated, puts and updates are
// refused with ErrNoSpace, deletes are still logged and made durable, and
// when space returns puts are accepted again, without any other traffic.
func TestDiskFull(t *testing.T) { synctest.Test(t, testDiskFull) }

func testDiskFull(t *testing.T) {
	var disk full
	opts := segment.Options{SegmentSize: 1024}
	segment.SetAllocate(&opts, disk.allocate)
	dir := t.TempDir()
	l, m := open(t, dir, opts)
	synctest.Wait()
	if n := disk.made.Load(); n != 2 {
		t.Fatalf("%d segments made, want the first and its spare", n)
	}

	disk.on.Store(true)
	var live []uint64
	var err error
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("1000 puts accepted on a full disk")
		}
		var id, lsn uint64
		id, lsn, err = m.tryPut("a job put while the disk fills up")
		if err != nil {
			break
		}
		live = append(live, id)
		segtest.WaitDurable(t, l, lsn)
	}
	if !errors.Is(err, segment.ErrNoSpace) {
		t.Fatalf("put on a full disk: %v, want ErrNoSpace", err)
	}
	if len(live) < 2 {
		t.Fatalf("only %d puts before the disk was full", len(live))
	}
	if _, _, err := m.appendItem(kindUpdate, live[0], "buried", segment.Loc{}); !errors.Is(err, segment.ErrNoSpace) {
		t.Errorf("update on a full disk: %v, want ErrNoSpace", err)
	}
	for _, id := range live[:len(live)/2] {
		segtest.WaitDurable(t, l, m.del(t, id)) // fails the test if refused
	}

	// Deletes free no segment: only space returning can let puts in, and
	// the writer finds out by itself, within its 250 ms recheck.
	time.Sleep(time.Second)
	if _, _, err := m.tryPut("still full"); !errors.Is(err, segment.ErrNoSpace) {
		t.Fatalf("put on a full disk after deletes: %v, want ErrNoSpace", err)
	}
	disk.on.Store(false)
	time.Sleep(250 * time.Millisecond)
	synctest.Wait()
	_, lsn, err := m.tryPut("a job put once space returned")
	if err != nil {
		t.Fatalf("put 250 ms after space returned: %v", err)
	}
	segtest.WaitDurable(t, l, lsn)
	closeAndRecover(t, l, m, dir, opts)
}

// TestBulkSegmentsNotZeroed: segments made while the log is filled in
// bulk are reserved, not zero-filled; before and after, they are.
func TestBulkSegmentsNotZeroed(t *testing.T) { synctest.Test(t, testBulkSegmentsNotZeroed) }

func testBulkSegmentsNotZeroed(t *testing.T) {
	var mu sync.Mutex
	var zeroed []bool
	opts := segment.Options{SegmentSize: 1024}
	segment.SetAllocateSeen(&opts, func(zero bool) {
		mu.Lock()
		zeroed = append(zeroed, zero)
		mu.Unlock()
	})
	dir := t.TempDir()
	l, m := open(t, dir, opts)
	synctest.Wait()
	fill := func() { // past a segment: the spare is taken and another made
		for range 8 {
			_, lsn := m.put(t, strings.Repeat("b", 200))
			segtest.WaitDurable(t, l, lsn)
		}
		synctest.Wait()
	}
	l.SetBulk(true)
	fill()
	l.SetBulk(false)
	fill()
	mu.Lock()
	got := slices.Clone(zeroed)
	mu.Unlock()
	// The first segment and its spare, made before: zeroed. Then at least
	// one made in bulk, and the last, made after, zeroed again.
	if len(got) < 4 || !got[0] || !got[1] || !got[len(got)-1] || !slices.Contains(got[2:], false) {
		t.Errorf("segments made, zero-filled or not: %v", got)
	}
	closeAndRecover(t, l, m, dir, opts)
}

// failingWrites is a writeAt hook that fails while on is set and counts
// the attempts.
type failingWrites struct {
	on       atomic.Bool
	attempts atomic.Int64
	failed   chan struct{} // gets a token per failed attempt
}

func (w *failingWrites) writeAt(f *os.File, b []byte, off int64) (int, error) {
	w.attempts.Add(1)
	if w.on.Load() {
		select {
		case w.failed <- struct{}{}:
		default:
		}
		return 0, syscall.EIO
	}
	return f.WriteAt(b, off)
}

// TestWriteErrorRetried: while writes fail, commits wait (the log is not
// disabled and nothing is acknowledged); once writes work again the waiting
// commits complete, and later ones too.
func TestWriteErrorRetried(t *testing.T) { synctest.Test(t, testWriteErrorRetried) }

func testWriteErrorRetried(t *testing.T) {
	w := &failingWrites{failed: make(chan struct{}, 16)}
	var opts segment.Options
	segment.SetWriteAt(&opts, w.writeAt)
	dir := t.TempDir()
	l, m := open(t, dir, opts)
	_, lsn := m.put(t, "before the error")
	segtest.WaitDurable(t, l, lsn)

	w.on.Store(true)
	_, lsn = m.put(t, "written while the disk fails")
	done := make(chan struct{})
	l.OnDurable(lsn, func() { close(done) })
	for range 3 { // the first attempt and two retries
		select {
		case <-w.failed:
		case <-time.After(10 * time.Second):
			t.Fatal("the writer did not retry the failed write")
		}
	}
	select {
	case <-done:
		t.Fatal("a commit was acknowledged although its write failed")
	default:
	}
	if l.Durable() >= lsn {
		t.Fatalf("Durable %d covers the failed record at %d", l.Durable(), lsn)
	}

	w.on.Store(false)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting commit did not complete once writes worked again")
	}
	_, lsn = m.put(t, "after the error")
	segtest.WaitDurable(t, l, lsn)
	closeAndRecover(t, l, m, dir, segment.Options{})
}

// TestSyncErrorRewrittenAndRetried: after a failed fsync nothing is
// acknowledged; the writer tries again by itself (no further append is
// needed), and first writes again everything since the last good fsync,
// because the kernel may have dropped those pages when it reported the
// error. Then the held commit completes and the record is recovered.
func TestSyncErrorRewrittenAndRetried(t *testing.T) {
	synctest.Test(t, testSyncErrorRewrittenAndRetried)
}

func testSyncErrorRewrittenAndRetried(t *testing.T) {
	var failSyncs atomic.Int64 // fsyncs still to fail
	failed := make(chan struct{}, 16)
	var mu sync.Mutex
	writes := map[int64]int{} // offset -> times written, once failing began
	var tracking atomic.Bool
	var opts segment.Options
	segment.SetFdatasync(&opts, func(next func(*os.File) error, f *os.File) error {
		if failSyncs.Add(-1) >= 0 {
			failed <- struct{}{}
			return syscall.EIO
		}
		return next(f)
	})
	segment.SetWriteAt(&opts, func(f *os.File, b []byte, off int64) (int, error) {
		if tracking.Load() && off > 24 {
			mu.Lock()
			writes[off]++
			mu.Unlock()
		}
		return f.WriteAt(b, off)
	})
	dir := t.TempDir()
	l, m := open(t, dir, opts)
	_, lsn := m.put(t, "before the error")
	segtest.WaitDurable(t, l, lsn)

	tracking.Store(true)
	failSyncs.Store(3)
	_, lsn = m.put(t, "synced only at the fourth try")
	done := make(chan struct{})
	l.OnDurable(lsn, func() { close(done) })
	for range 3 {
		select {
		case <-failed:
		case <-time.After(10 * time.Second):
			t.Fatal("the writer did not retry the failed fsync by itself")
		}
		select {
		case <-done:
			t.Fatal("a commit was acknowledged although its fsync failed")
		default:
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the held commit did not complete once fsync worked again")
	}
	mu.Lock()
	var rewritten bool
	for _, n := range writes {
		rewritten = rewritten || n >= 4 // written, then again before each retry
	}
	mu.Unlock()
	if !rewritten {
		t.Errorf("the record was not written again before each retry: writes by offset %v", writes)
	}
	closeAndRecover(t, l, m, dir, segment.Options{})
}

// TestCompactionWaitsForFsync: while fsync fails, compaction may move a
// segment's live jobs forward but must not remove the segment, since the
// moved records are not durable yet; once fsync works it finishes.
func TestCompactionWaitsForFsync(t *testing.T) { synctest.Test(t, testCompactionWaitsForFsync) }

func testCompactionWaitsForFsync(t *testing.T) {
	const segSize = 4096
	var failing atomic.Bool
	var opts segment.Options
	opts.SegmentSize = segSize
	segment.SetFdatasync(&opts, func(next func(*os.File) error, f *os.File) error {
		if failing.Load() {
			return syscall.EIO
		}
		return next(f)
	})
	dir := t.TempDir()
	l, m := open(t, dir, opts)
	keeper, lsn := m.put(t, "keeper")
	segtest.WaitDurable(t, l, lsn)
	failing.Store(true)
	for range 80 { // several segments past the keeper's, none of them synced
		id, _ := m.put(t, strings.Repeat("x", 200))
		m.del(t, id)
	}
	synctest.Wait()
	if l.Stats().RecordsMigrated == 0 {
		t.Fatalf("compaction did not move the keeper while fsync failed: %+v", l.Stats())
	}
	// The moves are written but cannot be made durable: while the writer
	// retries the fsync, segment 1 must stay.
	time.Sleep(5 * time.Second)
	synctest.Wait()
	if _, err := os.Stat(segPath(dir, 1)); err != nil {
		t.Fatalf("segment 1 was removed while the keeper's new record was not durable: %v", err)
	}
	failing.Store(false)
	time.Sleep(time.Second) // the longest backoff
	synctest.Wait()
	if st := l.Stats(); st.OldestIndex <= 1 {
		t.Fatalf("compaction did not finish once fsync worked: %+v", st)
	}
	got, _ := closeAndRecover(t, l, m, dir, segment.Options{SegmentSize: segSize})
	if _, ok := got[keeper]; !ok {
		t.Fatal("the keeper was lost")
	}
}

// TestFailingFsyncBacklog: while fsync fails the log keeps what it wrote,
// to write it again; past a bound it refuses new jobs as on a full disk
// (deletes still go in), and takes them again once an fsync works.
func TestFailingFsyncBacklog(t *testing.T) { synctest.Test(t, testFailingFsyncBacklog) }

func testFailingFsyncBacklog(t *testing.T) {
	var failing atomic.Bool
	var opts segment.Options
	opts.SyncEvery = 50 * time.Millisecond
	segment.SetMaxUnsynced(&opts, 16<<10)
	segment.SetFdatasync(&opts, func(next func(*os.File) error, f *os.File) error {
		if failing.Load() {
			return syscall.EIO
		}
		return next(f)
	})
	l, m := open(t, t.TempDir(), opts)
	failing.Store(true)
	body := strings.Repeat("b", 1000)
	var last uint64
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("puts were never refused while fsync failed")
		}
		id, _, err := m.tryPut(body)
		if errors.Is(err, segment.ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = id
		synctest.Wait() // the writer writes it
	}
	if last == 0 {
		t.Fatal("the first put was refused already")
	}
	m.del(t, last) // deletes are always taken
	failing.Store(false)
	time.Sleep(time.Second) // the longest backoff
	synctest.Wait()
	if _, _, err := m.tryPut(body); err != nil {
		t.Fatalf("puts still refused after fsync worked again: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseReportsFailedFinalSync: Close says so when its last fsync fails.
func TestCloseReportsFailedFinalSync(t *testing.T) {
	var opts segment.Options
	opts.SyncEvery = time.Hour
	segment.SetFdatasync(&opts, func(func(*os.File) error, *os.File) error { return syscall.EIO })
	l, m := open(t, t.TempDir(), opts)
	_, lsn := m.put(t, "never synced")
	segtest.WaitDurable(t, l, lsn) // written: -f 1h acknowledges without an fsync
	if err := l.Close(); err == nil {
		t.Fatal("Close reported no error although its final fsync failed")
	}
}

// TestCloseGivesUpOnFailingWrites: Close does not hang on a disk that keeps
// failing; it stops retrying after its grace, reports an error, and the
// record it could not write was never acknowledged.
func TestCloseGivesUpOnFailingWrites(t *testing.T) { synctest.Test(t, testCloseGivesUpOnFailingWrites) }

func testCloseGivesUpOnFailingWrites(t *testing.T) {
	const grace = 10 * time.Second // the default, free in a bubble
	w := &failingWrites{failed: make(chan struct{}, 16)}
	var opts segment.Options
	segment.SetWriteAt(&opts, w.writeAt)
	l, m := open(t, t.TempDir(), opts)
	w.on.Store(true)
	_, lsn := m.put(t, "never written")
	acked := make(chan struct{})
	l.OnDurable(lsn, func() { close(acked) })
	<-w.failed
	start := time.Now()
	err := l.Close()
	if err == nil {
		t.Fatal("Close reported no error although a record was never written")
	}
	if d := time.Since(start); d != grace {
		t.Errorf("Close took %v, want its grace, %v", d, grace)
	}
	select {
	case <-acked:
		t.Fatal("the record that was never written was acknowledged")
	default:
	}
}

// TestGroupCommit holds the writer inside its first write while many
// goroutines append; every record then goes out in one more write and one
// fsync, and every OnDurable callback fires, after the record is synced.
func TestGroupCommit(t *testing.T) {
	const appenders, each = 16, 25
	var writes atomic.Int64
	entered := make(chan struct{})
	release := make(chan struct{})
	var opts segment.Options // SyncEvery 0: fsync before acknowledging
	segment.SetWriteAt(&opts, func(f *os.File, b []byte, off int64) (int, error) {
		if writes.Add(1) == 1 {
			close(entered)
			<-release
		}
		return f.WriteAt(b, off)
	})
	l, m := open(t, t.TempDir(), opts)

	_, first := m.put(t, "first")
	<-entered
	var wg sync.WaitGroup
	var fired atomic.Int64
	var early atomic.Int64
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, lsn := m.put(t, fmt.Sprintf("g%d job %d", g, i))
				l.OnDurable(lsn, func() {
					if l.Synced() < lsn || l.Durable() < lsn {
						early.Add(1)
					}
					fired.Add(1)
				})
			}
		}()
	}
	wg.Wait()
	close(release)
	_, last := m.put(t, "last")
	segtest.WaitDurable(t, l, max(first, last))
	if n := fired.Load(); n != appenders*each {
		t.Errorf("%d callbacks fired, want %d", n, appenders*each)
	}
	if n := early.Load(); n > 0 {
		t.Errorf("%d callbacks fired before their record was synced", n)
	}
	// One write for "first", one for everything appended meanwhile, at most
	// one for "last".
	if n := writes.Load(); n > 3 {
		t.Errorf("%d records took %d writes, want them grouped into at most 3", appenders*each+2, n)
	}
}

// TestGroupCommitConcurrent: many goroutines append and wait, as connections
// do; every callback fires and durability only moves forward.
func TestGroupCommitConcurrent(t *testing.T) {
	const appenders, each = 32, 100
	var writes atomic.Int64
	var opts segment.Options
	segment.SetWriteAt(&opts, func(f *os.File, b []byte, off int64) (int, error) {
		writes.Add(1)
		return f.WriteAt(b, off)
	})
	l, m := open(t, t.TempDir(), opts)
	var wg sync.WaitGroup
	var backwards atomic.Int64
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen uint64
			for i := range each {
				_, lsn := m.put(t, fmt.Sprintf("g%d job %d", g, i))
				done := make(chan uint64, 1)
				l.OnDurable(lsn, func() { done <- l.Durable() })
				select {
				case d := <-done:
					if d < lsn || d < seen {
						backwards.Add(1)
					}
					seen = d
				case <-time.After(10 * time.Second):
					t.Errorf("LSN %d not durable after 10s", lsn)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := backwards.Load(); n > 0 {
		t.Errorf("durable LSN went backwards or short %d times", n)
	}
	t.Logf("%d records in %d writes (one fsync each): %.1f records per fsync",
		appenders*each, writes.Load(), float64(appenders*each)/float64(writes.Load()))
}

// TestSyncTimer: with SyncEvery set, a commit is acknowledged once written,
// and the tail left by a burst that then goes idle is fsynced by the timer,
// without waiting for another write.
func TestSyncTimer(t *testing.T) { synctest.Test(t, testSyncTimer) }

func testSyncTimer(t *testing.T) {
	const every = 500 * time.Millisecond
	l, m := open(t, t.TempDir(), segment.Options{SyncEvery: every})
	for _, body := range []string{"one", "two"} {
		_, lsn := m.put(t, body)
		segtest.WaitDurable(t, l, lsn)
		synctest.Wait()
		if l.Synced() >= lsn {
			t.Fatalf("%q synced at once; SyncEvery %v should have delayed it", body, every)
		}
		time.Sleep(every)
		synctest.Wait()
		if l.Synced() < lsn {
			t.Fatalf("%q not synced %v later (synced %d, written %d)", body, every, l.Synced(), l.Written())
		}
	}
}

// TestCloseSyncs: Close fsyncs what the policy left unsynced.
func TestCloseSyncs(t *testing.T) {
	for _, opts := range []segment.Options{{NoSync: true}, {SyncEvery: time.Hour}} {
		t.Run(fmt.Sprintf("NoSync=%v,SyncEvery=%v", opts.NoSync, opts.SyncEvery), func(t *testing.T) {
			dir := t.TempDir()
			l, m := open(t, dir, opts)
			var lsn uint64
			for i := range 10 {
				_, lsn = m.put(t, fmt.Sprintf("job %d", i))
			}
			segtest.WaitDurable(t, l, lsn)
			if l.Synced() >= lsn {
				t.Fatalf("synced %d already covers %d: the policy should have left it", l.Synced(), lsn)
			}
			want := m.want()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if l.Synced() < lsn {
				t.Fatalf("after Close synced is %d, want %d", l.Synced(), lsn)
			}
			got, _ := recoverDir(t, dir, opts)
			sameItems(t, got, want)
		})
	}
}

// TestCloseTrims: a clean Close leaves no segment at its preallocated
// size, the one written and the spare trimmed to what they hold, and a
// reopen recovers every item and appends on.
func TestCloseTrims(t *testing.T) {
	dir := t.TempDir()
	l, m := open(t, dir, segment.Options{})
	var lsn uint64
	for i := range 10 {
		_, lsn = m.put(t, fmt.Sprintf("job %d", i))
	}
	segtest.WaitDurable(t, l, lsn)
	want := m.want()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seqs, _ := segtest.Segments(t, dir)
	for _, seq := range seqs {
		if fi, err := os.Stat(segPath(dir, seq)); err != nil || fi.Size() >= 4096 {
			t.Errorf("segment %d after Close: %v bytes (%v), want it trimmed to its frames", seq, fi.Size(), err)
		}
	}
	l, m = open(t, dir, segment.Options{})
	if got := len(m.ids()); got != len(want) {
		t.Fatalf("reopened with %d items, want %d", got, len(want))
	}
	_, lsn = m.put(t, "after")
	segtest.WaitDurable(t, l, lsn)
	want = m.want()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := recoverDir(t, dir, segment.Options{})
	sameItems(t, got, want)
}

// TestAppendAfterClose is refused.
func TestAppendAfterClose(t *testing.T) {
	l, m := open(t, t.TempDir(), segment.Options{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.tryPut("late"); err == nil {
		t.Fatal("Append after Close succeeded")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// room is an allocate hook for a disk with space for n more segments.
type room struct{ n atomic.Int64 }

func (r *room) allocate(next func(*os.File, int64) error, file *os.File, size int64) error {
	if r.n.Add(-1) < 0 {
		r.n.Add(1)
		return syscall.ENOSPC
	}
	return next(file, size)
}

// fillDisk puts items of body bytes until the log refuses one for want
// of space (ErrNoSpace), each durable, and returns their ids; more than
// limit puts fail the test.
func fillDisk(t *testing.T, l *testLog, m *model, body, limit int) []uint64 {
	t.Helper()
	var ids []uint64
	for i := 0; ; i++ {
		if i == limit {
			t.Fatalf("%d puts accepted on a disk meant to fill", limit)
		}
		id, lsn, err := m.tryPut(strings.Repeat("b", body))
		if errors.Is(err, segment.ErrNoSpace) {
			return ids
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		segtest.WaitDurable(t, l, lsn)
	}
}

// TestCompactionAfterDiskFull: compaction that wants to move a job while
// the disk is full moves it into the current segment's room if it fits
// there beside the deletes (TestDiskFullOfOwnGarbageRecovers), else once
// space returns; either way the old segment goes, puts resume once space
// returns, and the job is never lost.
func TestCompactionAfterDiskFull(t *testing.T) { synctest.Test(t, testCompactionAfterDiskFull) }

func testCompactionAfterDiskFull(t *testing.T) {
	const segSize = 1024
	var disk room
	disk.n.Store(3) // the first segment, its spare, and one more
	opts := segment.Options{SegmentSize: segSize}
	segment.SetAllocate(&opts, disk.allocate)
	dir := t.TempDir()
	l, m := open(t, dir, opts)
	keeper, _ := m.put(t, "the keeper")
	ballast := fillDisk(t, l, m, 150, 200)
	if st := l.Stats(); st.CurrentIndex < 3 {
		t.Fatalf("disk full at segment %d; the test needs 3", st.CurrentIndex)
	}
	// Deleting the ballast leaves the keeper as all the live data, in the
	// oldest of three full segments: compaction wants to move it, but the
	// disk is full.
	for _, id := range ballast {
		segtest.WaitDurable(t, l, m.del(t, id))
	}
	synctest.Wait()
	if _, _, err := m.tryPut("while full"); !errors.Is(err, segment.ErrNoSpace) {
		t.Fatalf("a put with no spare to be made: %v, want ErrNoSpace", err)
	}

	disk.n.Store(100)
	time.Sleep(250 * time.Millisecond) // the full disk's recheck
	synctest.Wait()
	if st := l.Stats(); st.OldestIndex <= 1 {
		seqs, sizes := segtest.Segments(t, dir)
		t.Fatalf("segment 1 not compacted away once space returned: %v %v %+v", seqs, sizes, st)
	}
	if _, lsn, err := m.tryPut("once space returned"); err != nil {
		t.Fatalf("a put once space returned: %v", err)
	} else {
		segtest.WaitDurable(t, l, lsn)
	}
	got, _ := closeAndRecover(t, l, m, dir, opts)
	if _, ok := got[keeper]; !ok {
		t.Fatal("the keeper was lost")
	}
}

// TestRestartsDoNotPileUpSegments: every start writes to a new segment, so
// a server restarted with no traffic (a crash loop, a rolling update) used
// to leave one more preallocated segment each time. Start now compacts
// away the segments with nothing live, and the ids keep going up.
func TestRestartsDoNotPileUpSegments(t *testing.T) { synctest.Test(t, testRestartsDoNotPileUpSegments) }

func testRestartsDoNotPileUpSegments(t *testing.T) {
	dir := t.TempDir()
	opts := segment.Options{SegmentSize: 64 << 10}
	l, m := open(t, dir, opts)
	id, lsn := m.put(t, "kept")
	segtest.WaitDurable(t, l, lsn)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		l, _ := open(t, dir, opts)
		synctest.Wait()
		// The kept job's segment, the current one and the spare.
		if seqs, _ := segtest.Segments(t, dir); len(seqs) > 3 {
			t.Fatalf("segments left after a restart with no traffic: %v", seqs)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, last := recoverDir(t, dir, opts)
	if len(got) != 1 || got[id].body != "kept" || last < id {
		t.Fatalf("recovered %v, last id %d; want job %d", got, last, id)
	}
}
