package segment_test

import (
	"os"
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

// The writer goes on writing while an fsync runs on a goroutine of its
// own. These tests hold an fsync where they want it and write meanwhile.

// heldSyncs is an fdatasync hook the test steers: each fsync waits until
// the test says how it ends (nil: do it; an error: fail with it). Once
// free is set they all just run; so they do once the test is over, even
// one it failed while holding, so that Close can finish.
type heldSyncs struct {
	calls   chan heldSync
	free    atomic.Bool
	over    chan struct{} // closed when the test ends
	cleanup sync.Once
}

type heldSync struct {
	f   *os.File
	end chan error
}

func newHeldSyncs(o *segment.Options) *heldSyncs {
	h := &heldSyncs{calls: make(chan heldSync), over: make(chan struct{})}
	segment.SetFdatasync(o, h.fdatasync)
	return h
}

func (h *heldSyncs) fdatasync(next func(*os.File) error, f *os.File) error {
	if h.free.Load() {
		return next(f)
	}
	s := heldSync{f: f, end: make(chan error, 1)}
	select {
	case h.calls <- s:
	case <-h.over:
		return next(f)
	}
	select {
	case err := <-s.end:
		if err != nil {
			return err
		}
	case <-h.over:
	}
	return next(f)
}

// next waits for the next fsync to begin and returns it, held.
func (h *heldSyncs) next(t *testing.T) heldSync {
	t.Helper()
	// Registered after open's, so it runs before Close.
	h.cleanup.Do(func() { t.Cleanup(func() { close(h.over) }) })
	select {
	case s := <-h.calls:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no fsync began")
		return heldSync{}
	}
}

// writeLog records every write to a segment.
type writeLog struct {
	mu     sync.Mutex
	writes []span // guarded by mu
}

type span struct{ off, end int64 }

func (w *writeLog) writeAt(f *os.File, b []byte, off int64) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, span{off, off + int64(len(b))})
	w.mu.Unlock()
	return f.WriteAt(b, off)
}

// mark is where the writes from now on begin, for since.
func (w *writeLog) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

func (w *writeLog) since(i int) []span {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]span(nil), w.writes[i:]...)
}

func (w *writeLog) last() span {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes[len(w.writes)-1]
}

// covered reports whether one of ws writes all of s.
func covered(ws []span, s span) bool {
	for _, w := range ws {
		if w.off <= s.off && s.end <= w.end {
			return true
		}
	}
	return false
}

// TestWritesGoOnWhileFsyncRuns: with SyncEvery set, commits are written
// and acknowledged while an fsync runs, however long it takes; what was
// written meanwhile is fsynced by the next one.
func TestWritesGoOnWhileFsyncRuns(t *testing.T) { synctest.Test(t, testWritesGoOnWhileFsyncRuns) }

func testWritesGoOnWhileFsyncRuns(t *testing.T) {
	opts := segment.Options{SyncEvery: 50 * time.Millisecond}
	syncs := newHeldSyncs(&opts)
	l, m := open(t, t.TempDir(), opts)
	_, first := m.put(t, "before the fsync")
	segtest.WaitDurable(t, l, first)
	time.Sleep(50 * time.Millisecond)
	held := syncs.next(t)
	var last uint64
	for i := range 20 {
		_, last = m.put(t, strings.Repeat("w", i))
		segtest.WaitDurable(t, l, last) // fails the test after 10 s, were it waiting for the fsync
	}
	time.Sleep(time.Second)
	synctest.Wait()
	if got := l.Synced(); got != 0 {
		t.Fatalf("synced %d while the only fsync is held", got)
	}
	syncs.free.Store(true)
	held.end <- nil
	synctest.Wait()
	if got := l.Synced(); got != first {
		t.Fatalf("synced %d, want %d: what was written when the fsync began", got, first)
	}
	time.Sleep(50 * time.Millisecond)
	synctest.Wait()
	if got := l.Synced(); got != last {
		t.Fatalf("synced %d, want %d once the next fsync ran", got, last)
	}
}

// TestPipelinedFsync: with SyncEvery 0, a commit appended while an fsync
// runs is acknowledged only once an fsync that began after its write has
// finished. A small one waits for the running fsync to be written; records
// past 64 KiB are written meanwhile.
func TestPipelinedFsync(t *testing.T) { synctest.Test(t, testPipelinedFsync) }

func testPipelinedFsync(t *testing.T) {
	var opts segment.Options
	syncs := newHeldSyncs(&opts)
	l, m := open(t, t.TempDir(), opts)
	var early atomic.Int64
	commit := func(body string) (uint64, chan struct{}) {
		_, lsn := m.put(t, body)
		done := make(chan struct{})
		l.OnDurable(lsn, func() {
			if l.Synced() < lsn {
				early.Add(1)
			}
			close(done)
		})
		return lsn, done
	}
	isDone := func(c chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	_, a := commit("a")
	first := syncs.next(t)
	b, bDone := commit("b")
	synctest.Wait()
	if l.Written() >= b {
		t.Fatalf("written %d: a small commit was written while the fsync ran", l.Written())
	}
	c, cDone := commit(strings.Repeat("c", 64<<10))
	synctest.Wait()
	if l.Written() < c {
		t.Fatalf("written %d, want %d: 64 KiB waited for the fsync", l.Written(), c)
	}
	if isDone(a) || isDone(bDone) || isDone(cDone) {
		t.Fatal("acknowledged before an fsync finished")
	}
	first.end <- nil
	second := syncs.next(t) // at once, for b and c
	synctest.Wait()
	if !isDone(a) || isDone(bDone) || isDone(cDone) {
		t.Fatalf("after the first fsync: released a %v, b %v, c %v; want only a", isDone(a), isDone(bDone), isDone(cDone))
	}
	second.end <- nil
	synctest.Wait()
	if !isDone(bDone) || !isDone(cDone) {
		t.Fatal("b and c not released by the fsync that covered them")
	}
	if n := early.Load(); n > 0 {
		t.Fatalf("%d commits released before their record was fsynced", n)
	}
	syncs.free.Store(true)
}

// TestFailedFsyncRewritesWhatWasWrittenMeanwhile: an fsync that works
// drops only the copies made before it began; one that fails has every
// byte written since the last good one written again before the next
// fsync, those written while it ran included.
func TestFailedFsyncRewritesWhatWasWrittenMeanwhile(t *testing.T) {
	synctest.Test(t, testFailedFsyncRewritesWhatWasWrittenMeanwhile)
}

func testFailedFsyncRewritesWhatWasWrittenMeanwhile(t *testing.T) {
	var opts segment.Options
	segment.SetPipelineMin(&opts, 1) // every record is written while an fsync runs
	syncs := newHeldSyncs(&opts)
	var writes writeLog
	segment.SetWriteAt(&opts, writes.writeAt)
	dir := t.TempDir()
	l, m := open(t, dir, opts)
	put := func(body string) (uint64, span) {
		_, lsn := m.put(t, body)
		synctest.Wait()
		return lsn, writes.last()
	}

	// A good fsync, with b written while it runs: only b is written
	// again after the next one fails.
	a, aAt := put("a")
	held := syncs.next(t)
	b, bAt := put("b")
	held.end <- nil
	segtest.WaitDurable(t, l, a)
	held = syncs.next(t) // covers b
	mark := writes.mark()
	held.end <- syscall.EIO
	held = syncs.next(t) // after the backoff and the rewrite
	if again := writes.since(mark); !covered(again, bAt) || covered(again, aAt) {
		t.Fatalf("written again %v before the retry; want b's %v and not a's %v", again, bAt, aAt)
	}
	if l.Durable() >= b {
		t.Fatal("b acknowledged although its fsync failed")
	}
	held.end <- nil
	segtest.WaitDurable(t, l, b)

	// A failed fsync, with d written while it runs: c and d are both
	// written again.
	c, cAt := put("c")
	held = syncs.next(t)
	d, dAt := put("d")
	mark = writes.mark()
	held.end <- syscall.EIO
	held = syncs.next(t)
	if again := writes.since(mark); !covered(again, cAt) || !covered(again, dAt) {
		t.Fatalf("written again %v before the retry; want c's %v and d's %v", again, cAt, dAt)
	}
	if l.Durable() >= c {
		t.Fatal("c acknowledged although its fsync failed")
	}
	syncs.free.Store(true)
	held.end <- nil
	segtest.WaitDurable(t, l, d)
	closeAndRecover(t, l, m, dir, segment.Options{})
}

// TestFileKeptOpenWhileFsyncRuns: a segment the writer moves on from
// while an fsync of it runs is neither trimmed nor closed until that
// fsync has finished; then it is.
func TestFileKeptOpenWhileFsyncRuns(t *testing.T) { synctest.Test(t, testFileKeptOpenWhileFsyncRuns) }

func testFileKeptOpenWhileFsyncRuns(t *testing.T) {
	const segSize = 1024
	opts := segment.Options{SegmentSize: segSize, SyncEvery: 50 * time.Millisecond}
	syncs := newHeldSyncs(&opts)
	dir := t.TempDir()
	l, m := open(t, dir, opts)
	synctest.Wait() // the spare is made
	body := strings.Repeat("b", 240)
	for range 3 { // about 900 bytes: the fourth would pass segSize
		segtest.WaitDurable(t, l, lastLSN(m.put(t, body)))
	}
	if st := l.Stats(); st.CurrentIndex != 1 {
		t.Fatalf("appends went on to segment %d; the test wants three records in 1", st.CurrentIndex)
	}
	time.Sleep(50 * time.Millisecond)
	held := syncs.next(t)
	if held.f.Name() != segPath(dir, 1) {
		t.Fatalf("fsync of %s, want segment 1", held.f.Name())
	}
	before, err := held.f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	for range 6 { // segments 2 and 3, while segment 1's fsync runs
		segtest.WaitDurable(t, l, lastLSN(m.put(t, body)))
		synctest.Wait()
	}
	if st := l.Stats(); st.CurrentIndex < 3 {
		t.Fatalf("appends are in segment %d; the test wants the writer two past the one syncing", st.CurrentIndex)
	}
	after, err := held.f.Stat()
	if err != nil {
		t.Fatalf("segment 1 closed while its fsync ran: %v", err)
	}
	if after.Size() != before.Size() {
		t.Fatalf("segment 1 trimmed from %d to %d bytes while its fsync ran", before.Size(), after.Size())
	}
	syncs.free.Store(true)
	held.end <- nil
	synctest.Wait()
	if _, sizes := segtest.Segments(t, dir); sizes[1] >= segSize {
		t.Errorf("segment 1 is %d bytes once its fsync finished; want it trimmed", sizes[1])
	}
}

func lastLSN(_, lsn uint64) uint64 { return lsn }
