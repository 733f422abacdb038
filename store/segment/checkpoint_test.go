package segment_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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

// A cluster's Raft log keeps its frames as these tests write them: a kind
// (a checkpoint, an entry), then any bytes; segments begin with a
// checkpoint, and compaction's moves take effect once reported.
const (
	kindCheckpoint = 16
	kindEntry      = 17
)

// checkpointed is opts as a cluster's Raft log sets them.
func checkpointed(opts segment.Options) segment.Options {
	opts.Version, opts.Checkpoints, opts.MovesLater = segment.VersionRaftLog, true, true
	return opts
}

func clusterFrame(dst []byte, kind byte, body string) []byte {
	start := len(dst)
	dst = segment.BeginFrame(dst)
	dst = append(dst, kind)
	dst = append(dst, body...)
	return segment.EndFrame(dst, start)
}

// written is a group a test appended, and where it went.
type written struct {
	seg   uint32
	off   int64
	frame []byte
	lsn   uint64
}

func appendGroup(t testing.TB, l *testLog, body string) written {
	t.Helper()
	f := clusterFrame(nil, kindEntry, body)
	lsn, seg, off, err := l.Append(&segment.Group{Size: len(f), Encode: func(b []byte) []byte { return append(b, f...) }})
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return written{seg, off, f, lsn}
}

// openFrames opens dir as a cluster's log opens it and returns it, not
// started, with the frames it replayed.
func openFrames(t testing.TB, dir string, opts segment.Options) (*testLog, []segment.Frame) {
	t.Helper()
	l, frames, err := tryOpenFrames(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l, frames
}

func tryOpenFrames(dir string, opts segment.Options) (*testLog, []segment.Frame, error) {
	d, err := segment.LockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var frames []segment.Frame
	l, err := segment.Open(d, checkpointed(opts), func(f segment.Frame) error {
		if f.Payload[0] < kindCheckpoint {
			return segment.ErrCorrupt
		}
		f.Payload = bytes.Clone(f.Payload)
		frames = append(frames, f)
		return nil
	})
	if err != nil {
		_ = d.Close()
		return nil, nil, err
	}
	return &testLog{Log: l, dir: d}, frames, nil
}

// startCluster starts l holding every segment, its first one beginning
// with checkpoint.
func startCluster(t testing.TB, l *testLog, checkpoint string) {
	t.Helper()
	l.Hold(1)
	l.SetCheckpoint(clusterFrame(nil, kindCheckpoint, checkpoint))
	if err := l.Start(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
}

// entriesOf is the entry frames among frames, as written groups.
func entriesOf(frames []segment.Frame) []written {
	var out []written
	for _, f := range frames {
		if f.Payload[0] == kindEntry {
			out = append(out, written{seg: f.Seg, off: f.Off, frame: f.Payload})
		}
	}
	return out
}

// TestClusterFramesReplay: a cluster's groups land in segments with
// version 2 headers, each segment beginning with the checkpoint set when
// appends moved to it; they read back as written, and a reopen replays
// them in order with the places AppendGroup gave.
func TestClusterFramesReplay(t *testing.T) {
	dir := t.TempDir()
	opts := segment.Options{SegmentSize: 4096}
	l, frames := openFrames(t, dir, opts)
	if len(frames) != 0 {
		t.Fatalf("a new directory replayed %d frames", len(frames))
	}
	startCluster(t, l, "first")
	// Appends move to a new segment only once its spare is made: each
	// rotation waits for the next spare, so that a machine busy enough
	// to delay the spare maker does not leave them all in a few
	// segments written past their size.
	spare := func() {
		t.Helper()
		select {
		case <-l.SpareMade():
		case <-time.After(10 * time.Second):
			t.Fatal("no spare made")
		}
	}
	spare()
	var groups []written
	for i := range 120 {
		if i == 60 {
			l.SetCheckpoint(clusterFrame(nil, kindCheckpoint, "second"))
		}
		// Each waits for the last, as raft waits for its writes.
		groups = append(groups, appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("x", 200))))
		segtest.WaitDurable(t, l, groups[i].lsn)
		if i > 0 && groups[i].seg != groups[i-1].seg {
			spare()
		}
	}
	segtest.WaitDurable(t, l, groups[len(groups)-1].lsn)
	for _, i := range []int{0, 59, 119} {
		g := groups[i]
		got, err := l.ReadFrame(g.seg, g.off, len(g.frame))
		if err != nil || !bytes.Equal(got, g.frame[segment.FrameHeader:]) {
			t.Errorf("group %d read back as %q, %v", i, got, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, frames = openFrames(t, dir, opts)
	defer segtest.CloseUnstarted(t, l)
	got := entriesOf(frames)
	if len(got) != len(groups) {
		t.Fatalf("%d entries replayed, %d written", len(got), len(groups))
	}
	for i, g := range groups {
		if got[i].seg != g.seg || got[i].off != g.off || !bytes.Equal(got[i].frame, g.frame[segment.FrameHeader:]) {
			t.Fatalf("group %d replayed at %d:%d, written at %d:%d", i, got[i].seg, got[i].off, g.seg, g.off)
		}
	}
	seen := map[uint32]bool{}
	for _, f := range frames {
		if seen[f.Seg] {
			continue
		}
		seen[f.Seg] = true
		cp := string(f.Payload[1:])
		if f.Payload[0] != kindCheckpoint || f.Off != segment.HeaderSize {
			t.Errorf("segment %d begins with kind %d at %d, not a checkpoint", f.Seg, f.Payload[0], f.Off)
		} else if want := "first"; f.Seg > groups[60].seg && cp != "second" || f.Seg < groups[59].seg && cp != want {
			t.Errorf("segment %d's checkpoint is %q", f.Seg, cp)
		}
	}
	if len(seen) < 5 {
		t.Errorf("%d segments: the test meant to cross several", len(seen))
	}
	data, err := os.ReadFile(segPath(dir, groups[0].seg))
	if err != nil || data[8] != 2 {
		t.Errorf("a cluster segment's header has version %d (%v), want 2", data[8], err)
	}
}

// TestReadsAcrossManySegments: frames read back at once from more
// segments than the log keeps descriptors for (maxReaders) each read as
// written. A read closed another's descriptor for its own between that
// one's look-up and its read, which failed on a closed file.
func TestReadsAcrossManySegments(t *testing.T) {
	dir := t.TempDir()
	l, _ := openFrames(t, dir, segment.Options{SegmentSize: 4096})
	startCluster(t, l, "first")
	// Until they span 40 segments: two fit in one, more while a spare
	// is late (appends stay in the current segment meanwhile).
	var groups []written
	for i := 0; len(groups) == 0 || groups[len(groups)-1].seg-groups[0].seg+1 < 40; i++ {
		if i == 2000 {
			t.Fatalf("2000 frames in %d segments, want more than twice maxReaders", groups[len(groups)-1].seg-groups[0].seg+1)
		}
		groups = append(groups, appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("x", 1500))))
		segtest.WaitDurable(t, l, groups[i].lsn)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := range 8 {
		wg.Go(func() {
			var buf []byte
			for k := range 2000 {
				g := groups[(k*7919+r*104729)%len(groups)]
				got, err := l.ReadFrameInto(&buf, g.seg, g.off, len(g.frame))
				if err == nil && !bytes.Equal(got, g.frame[segment.FrameHeader:]) {
					err = fmt.Errorf("the frame at %d:%d read back otherwise", g.seg, g.off)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestClusterTornTail: a frame torn at the end of the log, in the segment
// a crash left open (unsealed), is cut off at reopen; a damaged frame
// before the end refuses the start unless damaged frames are skipped.
func TestClusterTornTail(t *testing.T) {
	dir := t.TempDir()
	opts := segment.Options{SegmentSize: 4096}
	l, _ := openFrames(t, dir, opts)
	startCluster(t, l, "cp")
	var groups []written
	for i := range 40 {
		groups = append(groups, appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("y", 300))))
	}
	segtest.WaitDurable(t, l, groups[len(groups)-1].lsn)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	corrupt := func(g written) {
		f, err := os.OpenFile(segPath(dir, g.seg), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("torn"), g.off+int64(len(g.frame))/2); err != nil {
			t.Fatal(err)
		}
	}

	corrupt(groups[39])
	setSeal(t, dir, groups[39].seg, segment.SealOpen) // as a crash before Close sealed it
	l, frames := openFrames(t, dir, opts)
	segtest.CloseUnstarted(t, l)
	if got := entriesOf(frames); len(got) != 39 {
		t.Fatalf("%d entries after a torn last one, want 39", len(got))
	}

	corrupt(groups[10])
	if _, _, err := tryOpenFrames(dir, opts); !errors.As(err, new(*segment.DamageError)) {
		t.Fatalf("damage inside the log: %v", err)
	}
	opts.SkipDamaged = true
	l, frames = openFrames(t, dir, opts)
	segtest.CloseUnstarted(t, l)
	if got := entriesOf(frames); len(got) != 38 {
		t.Fatalf("%d entries skipping one damaged, want 38", len(got))
	}
}

// TestDamagedLengthInLastSegment: a frame of the last segment whose
// length is above Options.MaxPayload (a single node's log sets it),
// followed by good frames, is damage that refuses the start, not a torn
// tail whose cut would take the acknowledged frames after it (found by a
// reviewing helper).
func TestDamagedLengthInLastSegment(t *testing.T) {
	dir := t.TempDir()
	opts := segment.Options{SegmentSize: 1 << 20, MaxPayload: 1 << 16}
	l, _ := openFrames(t, dir, opts)
	startCluster(t, l, "cp")
	var groups []written
	for i := range 10 {
		groups = append(groups, appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("y", 100))))
	}
	segtest.WaitDurable(t, l, groups[9].lsn)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(segPath(dir, groups[3].seg), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, 0x7fffffff), groups[3].off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, frames, err := tryOpenFrames(dir, opts); !errors.As(err, new(*segment.DamageError)) {
		t.Fatalf("opened with %d entries, %v: a damaged length taken for a torn tail", len(entriesOf(frames)), err)
	}
}

// migrations records a cluster's Migrate calls and plays the leader: each
// job handed over is rewritten at the head, as the proposal carrying it
// would be once applied.
type migrations struct {
	mu    sync.Mutex
	l     *testLog
	size  uint32
	calls []uint64 // guarded by mu
}

func (m *migrations) Migrate(seg uint32, ids []uint64) {
	m.mu.Lock()
	m.calls = append(m.calls, ids...)
	m.mu.Unlock()
	g := clusterFrame(nil, kindEntry, "moves")
	_, to, _, _ := m.l.Append(&segment.Group{Size: len(g), Encode: func(b []byte) []byte { return append(b, g...) }})
	var moves []segment.Move
	for _, id := range ids {
		moves = append(moves, segment.Move{ID: id, From: segment.Loc{Seg: seg, Size: m.size}, To: segment.Loc{Seg: to, Size: m.size}})
	}
	m.l.Moved(moves)
}

func (m *migrations) ids() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// TestClusterHoldAndMigrate: a cluster's segments go only below the one
// it holds from and once nothing live is in them; the oldest segment's
// live jobs are handed to a Migrator only while one is set; once they
// moved, the segments below the one held go.
func TestClusterHoldAndMigrate(t *testing.T) { synctest.Test(t, testClusterHoldAndMigrate) }

func testClusterHoldAndMigrate(t *testing.T) {
	dir := t.TempDir()
	const segSize = 4096
	l, _ := openFrames(t, dir, segment.Options{SegmentSize: segSize})
	startCluster(t, l, "cp")
	first := appendGroup(t, l, "puts job 7")
	l.Moved([]segment.Move{{ID: 7, To: segment.Loc{Seg: first.seg, Size: 100}}})
	var last written
	for i := range 60 {
		last = appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("z", 400)))
		segtest.WaitDurable(t, l, last.lsn)
		synctest.Wait() // the spare is made
	}
	segtest.WaitDurable(t, l, last.lsn)
	synctest.Wait()
	before, _ := segtest.Segments(t, dir)
	if before[0] != first.seg || len(before) < 6 {
		t.Fatalf("segments %v: the test meant to fill several after %d", before, first.seg)
	}
	if got := l.Stats().LiveBytes; got != 100 {
		t.Errorf("live bytes %d, want job 7's 100", got)
	}

	held := last.seg - 1
	l.Hold(held)
	time.Sleep(time.Second)
	synctest.Wait()
	if now, _ := segtest.Segments(t, dir); now[0] != first.seg {
		t.Fatalf("segments %v: the one holding job 7 went", now)
	}

	m := &migrations{l: l, size: 100}
	l.SetMigrator(m)
	time.Sleep(time.Second)
	synctest.Wait()
	if got := m.ids(); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("migrated %v, want job 7", got)
	}
	now, _ := segtest.Segments(t, dir)
	if now[0] != held {
		t.Fatalf("segments %v after the move: want every one below %d gone", now, held)
	}
}

// TestClusterFullDisk: with no spare segment to be had, a cluster log
// still takes every group (Full says the disk is full); groups whose
// writes fail are not durable until the writes work, and nothing after
// them is; then everything is there.
func TestClusterFullDisk(t *testing.T) { synctest.Test(t, testClusterFullDisk) }

func testClusterFullDisk(t *testing.T) {
	var disk full
	var failWrites atomic.Bool
	opts := segment.Options{SegmentSize: 2048}
	segment.SetAllocate(&opts, disk.allocate)
	segment.SetWriteAt(&opts, func(f *os.File, b []byte, off int64) (int, error) {
		if failWrites.Load() && off+int64(len(b)) > 2048 {
			return 0, syscall.ENOSPC
		}
		return f.WriteAt(b, off)
	})
	dir := t.TempDir()
	l, _ := openFrames(t, dir, opts)
	startCluster(t, l, "cp")
	synctest.Wait()

	disk.on.Store(true)
	failWrites.Store(true)
	var groups []written
	for i := range 30 {
		groups = append(groups, appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("f", 150))))
	}
	synctest.Wait()
	if !l.Full() {
		t.Fatal("Full is false with no spare to be had")
	}
	durable := make(chan struct{})
	l.OnDurable(groups[len(groups)-1].lsn, func() { close(durable) })
	time.Sleep(2 * time.Second)
	synctest.Wait()
	select {
	case <-durable:
		t.Fatal("groups written past the disk's room are durable")
	default:
	}
	if l.Durable() >= groups[len(groups)-1].lsn {
		t.Fatalf("durable through %d", l.Durable())
	}

	disk.on.Store(false)
	failWrites.Store(false)
	time.Sleep(2 * time.Second)
	synctest.Wait()
	select {
	case <-durable:
	default:
		t.Fatal("not durable once the disk had room")
	}
	if l.Full() {
		t.Error("still full once a spare could be made")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, frames := openFrames(t, dir, opts)
	segtest.CloseUnstarted(t, l)
	if got := entriesOf(frames); len(got) != len(groups) {
		t.Fatalf("%d entries after reopening, %d written", len(got), len(groups))
	}
}

// TestClusterFsyncFails: a group is durable only once an fsync that
// covers it works, after the failed ones; what was written is there after
// a reopen.
func TestClusterFsyncFails(t *testing.T) { synctest.Test(t, testClusterFsyncFails) }

func testClusterFsyncFails(t *testing.T) {
	var failSyncs atomic.Int64
	var opts segment.Options
	segment.SetFdatasync(&opts, func(next func(*os.File) error, f *os.File) error {
		if failSyncs.Add(-1) >= 0 {
			return syscall.EIO
		}
		return next(f)
	})
	dir := t.TempDir()
	l, _ := openFrames(t, dir, opts)
	startCluster(t, l, "cp")
	segtest.WaitDurable(t, l, appendGroup(t, l, "before").lsn)
	failSyncs.Store(3)
	g := appendGroup(t, l, "synced at the fourth try")
	done := make(chan struct{})
	l.OnDurable(g.lsn, func() { close(done) })
	synctest.Wait()
	for failSyncs.Load() > 0 {
		select {
		case <-done:
			t.Fatal("durable although its fsync failed")
		default:
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
	}
	time.Sleep(2 * time.Second)
	synctest.Wait()
	select {
	case <-done:
	default:
		t.Fatal("not durable once fsync worked again")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, frames := openFrames(t, dir, segment.Options{})
	segtest.CloseUnstarted(t, l)
	if got := entriesOf(frames); len(got) != 2 {
		t.Fatalf("%d entries after reopening, want 2", len(got))
	}
}

// TestVersions: a log opens only segments of its own version; one of
// another user's, or of none known, is refused with a *VersionError that
// says whose it is, and left as it is.
func TestVersions(t *testing.T) {
	dir := t.TempDir()
	l, m := open(t, dir, segment.Options{}) // a journal's
	segtest.WaitDurable(t, l, lastLSN(m.put(t, "a journal's item")))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, err := tryOpenFrames(dir, segment.Options{})
	var ve *segment.VersionError
	if !errors.As(err, &ve) || ve.Version != segment.VersionJournal || ve.Want != segment.VersionRaftLog ||
		!strings.Contains(err.Error(), "job journal") {
		t.Fatalf("a Raft log on a journal's segments: %v", err)
	}
	hdr := make([]byte, segment.HeaderSize)
	copy(hdr, "SPROUTWL")
	hdr[8] = 9
	other := t.TempDir()
	if err := os.WriteFile(segPath(other, 1), hdr, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := openItems(t, other, segment.Options{}); !errors.As(err, &ve) || ve.Version != 9 {
		t.Fatalf("a segment of version 9: %v", err)
	}
	got, _ := recoverDir(t, dir, segment.Options{})
	if len(got) != 1 {
		t.Errorf("the journal recovers %d items after the refusals, want its one", len(got))
	}
}

// TestClusterCheckpointWithGroup: a group appended with a new checkpoint
// (a member's hard state, its membership) is never followed at replay by
// the checkpoint before it, even when the writer itself, not an append,
// moves to a new segment right after the group (the current one outgrew
// its size while the spare was made): a crash then would take the older
// state for the last, and a member could vote twice in a term.
func TestClusterCheckpointWithGroup(t *testing.T) {
	testCheckpointWithGroup(t, func(l *testLog, f, checkpoint []byte, rotated func()) {
		g := segment.Group{Size: len(f), Encode: func(b []byte) []byte { return append(b, f...) }, Checkpoint: checkpoint}
		if _, _, _, err := l.Append(&g); err != nil {
			t.Fatal(err)
		}
		rotated()
	})
}

// testCheckpointWithGroup holds the spare until the current segment
// outgrew its size, appends a state group and its checkpoint with
// appendState (which lets the spare go and waits for the writer to move
// to it, rotated), and checks that the last state replayed is the new
// one.
func testCheckpointWithGroup(t *testing.T, appendState func(l *testLog, f, checkpoint []byte, rotated func())) {
	const segSize = 4096
	gate := make(chan struct{})
	var made atomic.Int32
	opts := segment.Options{SegmentSize: segSize}
	segment.SetAllocate(&opts, func(next func(*os.File, int64) error, f *os.File, size int64) error {
		if made.Add(1) > 1 { // Start's segment is made at once, the spares wait
			<-gate
		}
		return next(f, size)
	})
	dir := t.TempDir()
	l, _ := openFrames(t, dir, opts)
	startCluster(t, l, "state 1")
	var last written
	for size := 0; size <= segSize; size += len(last.frame) {
		last = appendGroup(t, l, fmt.Sprintf("entry %s", strings.Repeat("x", 300)))
	}
	segtest.WaitDurable(t, l, last.lsn)
	if st := l.Stats(); st.CurrentIndex != last.seg {
		t.Fatalf("appends moved to segment %d with no spare made", st.CurrentIndex)
	}
	state := clusterFrame(nil, kindCheckpoint, "state 2")
	appendState(l, state, state, func() {
		close(gate)
		deadline := time.Now().Add(10 * time.Second)
		for l.Stats().CurrentIndex == last.seg {
			if time.Now().After(deadline) {
				t.Fatal("the writer did not move to the spare within 10 s")
			}
			time.Sleep(time.Millisecond)
		}
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, frames := openFrames(t, dir, opts)
	defer segtest.CloseUnstarted(t, l)
	var states []string
	for _, f := range frames {
		if f.Payload[0] == kindCheckpoint {
			states = append(states, fmt.Sprintf("%q in segment %d", f.Payload[1:], f.Seg))
		}
	}
	if n := len(states); n < 3 || !strings.HasPrefix(states[n-1], `"state 2"`) {
		t.Fatalf("replayed states %v: the last is not the newest, and not in the segment after the group's", states)
	}
}
