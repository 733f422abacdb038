package wal_test

import (
	"bytes"
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

	"github.com/sproutmq/sprout/store/wal"
)

// A cluster log's frames, as these tests write them: a kind of 16 or more,
// then any bytes.
const (
	kindCheckpoint = wal.ClusterKinds
	kindEntry      = wal.ClusterKinds + 1
)

func clusterFrame(dst []byte, kind wal.Kind, body string) []byte {
	start := len(dst)
	dst = wal.BeginFrame(dst)
	dst = append(dst, byte(kind))
	dst = append(dst, body...)
	return wal.EndFrame(dst, start)
}

// written is a group a test appended, and where it went.
type written struct {
	seg   uint32
	off   int64
	frame []byte
	lsn   uint64
}

func appendGroup(t testing.TB, l *wal.Log, body string) written {
	t.Helper()
	f := clusterFrame(nil, kindEntry, body)
	lsn, seg, off, err := l.AppendGroup(len(f), func(b []byte) []byte { return append(b, f...) }, 0)
	if err != nil {
		t.Fatalf("AppendGroup: %v", err)
	}
	return written{seg, off, f, lsn}
}

// openCluster opens dir as a cluster's log and returns it, not started,
// with the frames it replayed.
func openCluster(t testing.TB, dir string, opts wal.Options) (*wal.Log, []wal.Frame) {
	t.Helper()
	var frames []wal.Frame
	l, err := wal.OpenCluster(dir, opts, wal.Cluster{Replay: func(f wal.Frame) error {
		f.Payload = bytes.Clone(f.Payload)
		frames = append(frames, f)
		return nil
	}})
	if err != nil {
		t.Fatalf("OpenCluster: %v", err)
	}
	return l, frames
}

func startCluster(t testing.TB, l *wal.Log, checkpoint string) {
	t.Helper()
	l.SetCheckpoint(clusterFrame(nil, kindCheckpoint, checkpoint))
	if err := l.Start(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
}

// entriesOf is the entry frames among frames, as written records.
func entriesOf(frames []wal.Frame) []written {
	var out []written
	for _, f := range frames {
		if wal.Kind(f.Payload[0]) == kindEntry {
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
	opts := wal.Options{SegmentSize: 4096}
	l, frames := openCluster(t, dir, opts)
	if len(frames) != 0 {
		t.Fatalf("a new directory replayed %d frames", len(frames))
	}
	startCluster(t, l, "first")
	var groups []written
	for i := range 120 {
		if i == 60 {
			l.SetCheckpoint(clusterFrame(nil, kindCheckpoint, "second"))
		}
		// Each waits for the last, as raft waits for its writes: appends
		// move to a new segment only once its spare is made.
		groups = append(groups, appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("x", 200))))
		waitDurable(t, l, groups[i].lsn)
	}
	waitDurable(t, l, groups[len(groups)-1].lsn)
	for _, i := range []int{0, 59, 119} {
		g := groups[i]
		got, err := l.ReadFrame(g.seg, g.off, len(g.frame))
		if err != nil || !bytes.Equal(got, g.frame[wal.FrameHeader:]) {
			t.Errorf("group %d read back as %q, %v", i, got, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, frames = openCluster(t, dir, opts)
	defer closeUnstarted(t, l)
	got := entriesOf(frames)
	if len(got) != len(groups) {
		t.Fatalf("%d entries replayed, %d written", len(got), len(groups))
	}
	for i, g := range groups {
		if got[i].seg != g.seg || got[i].off != g.off || !bytes.Equal(got[i].frame, g.frame[wal.FrameHeader:]) {
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
		if wal.Kind(f.Payload[0]) != kindCheckpoint || f.Off != wal.HeaderSize {
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

// TestClusterTornTail: a frame torn at the end of the log is cut off at
// reopen; a damaged frame before the end refuses the start unless damaged
// frames are skipped.
func TestClusterTornTail(t *testing.T) {
	dir := t.TempDir()
	opts := wal.Options{SegmentSize: 4096}
	l, _ := openCluster(t, dir, opts)
	startCluster(t, l, "cp")
	var groups []written
	for i := range 40 {
		groups = append(groups, appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("y", 300))))
	}
	waitDurable(t, l, groups[len(groups)-1].lsn)
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
	l, frames := openCluster(t, dir, opts)
	closeUnstarted(t, l)
	if got := entriesOf(frames); len(got) != 39 {
		t.Fatalf("%d entries after a torn last one, want 39", len(got))
	}

	corrupt(groups[10])
	if _, err := wal.OpenCluster(dir, opts, wal.Cluster{Replay: func(wal.Frame) error { return nil }}); err == nil ||
		!strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damage inside the log: %v", err)
	}
	opts.SkipDamaged = true
	l, frames = openCluster(t, dir, opts)
	closeUnstarted(t, l)
	if got := entriesOf(frames); len(got) != 38 {
		t.Fatalf("%d entries skipping one damaged, want 38", len(got))
	}
}

// migrations records a cluster's Migrate calls and plays the leader: each
// job handed over is rewritten at the head, as the proposal carrying it
// would be once applied.
type migrations struct {
	mu    sync.Mutex
	l     *wal.Log
	size  uint32
	calls []uint64 // guarded by mu
}

func (m *migrations) Migrate(seg uint32, ids []uint64) {
	m.mu.Lock()
	m.calls = append(m.calls, ids...)
	m.mu.Unlock()
	g := clusterFrame(nil, kindEntry, "moves")
	_, to, _, _ := m.l.AppendGroup(len(g), func(b []byte) []byte { return append(b, g...) }, 0)
	var moves []wal.Move
	for _, id := range ids {
		moves = append(moves, wal.Move{ID: id, From: wal.Loc{Seg: seg, Size: m.size}, To: wal.Loc{Seg: to, Size: m.size}})
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
	l, _ := openCluster(t, dir, wal.Options{SegmentSize: segSize})
	startCluster(t, l, "cp")
	first := appendGroup(t, l, "puts job 7")
	l.Moved([]wal.Move{{ID: 7, To: wal.Loc{Seg: first.seg, Size: 100}}})
	var last written
	for i := range 60 {
		last = appendGroup(t, l, fmt.Sprintf("entry %d %s", i, strings.Repeat("z", 400)))
		waitDurable(t, l, last.lsn)
		synctest.Wait() // the spare is made
	}
	waitDurable(t, l, last.lsn)
	synctest.Wait()
	before, _ := segments(t, dir)
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
	if now, _ := segments(t, dir); now[0] != first.seg {
		t.Fatalf("segments %v: the one holding job 7 went", now)
	}

	m := &migrations{l: l, size: 100}
	l.SetMigrator(m)
	time.Sleep(time.Second)
	synctest.Wait()
	if got := m.ids(); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("migrated %v, want job 7", got)
	}
	now, _ := segments(t, dir)
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
	opts := wal.Options{SegmentSize: 2048}
	wal.SetAllocate(&opts, disk.allocate)
	wal.SetWriteAt(&opts, func(f *os.File, b []byte, off int64) (int, error) {
		if failWrites.Load() && off+int64(len(b)) > 2048 {
			return 0, syscall.ENOSPC
		}
		return f.WriteAt(b, off)
	})
	dir := t.TempDir()
	l, _ := openCluster(t, dir, opts)
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
	l, frames := openCluster(t, dir, opts)
	closeUnstarted(t, l)
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
	var opts wal.Options
	wal.SetFdatasync(&opts, func(next func(*os.File) error, f *os.File) error {
		if failSyncs.Add(-1) >= 0 {
			return syscall.EIO
		}
		return next(f)
	})
	dir := t.TempDir()
	l, _ := openCluster(t, dir, opts)
	startCluster(t, l, "cp")
	waitDurable(t, l, appendGroup(t, l, "before").lsn)
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
	l, frames := openCluster(t, dir, wal.Options{})
	closeUnstarted(t, l)
	if got := entriesOf(frames); len(got) != 2 {
		t.Fatalf("%d entries after reopening, want 2", len(got))
	}
}

// TestClusterAndSingleDirectories: neither mode opens the other's
// directory by mistake, each refusing in one line; a cluster log told how
// converts a single node's directory, which keeps every job, and removes
// a single node's segment a conversion left behind.
func TestClusterAndSingleDirectories(t *testing.T) {
	single := t.TempDir()
	l, m := open(t, single, wal.Options{})
	var ids []uint64
	for i := range 5 {
		id, _ := m.put(t, "t", fmt.Sprint("job ", i), wal.StateReady, 0)
		ids = append(ids, id)
	}
	waitDurable(t, l, m.del(t, ids[0]))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leftover, err := os.ReadFile(segPath(single, 1))
	if err != nil {
		t.Fatal(err)
	}

	refuse := wal.Cluster{Replay: func(wal.Frame) error { return nil }}
	if _, err := wal.OpenCluster(single, wal.Options{}, refuse); err == nil ||
		strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "single node") {
		t.Fatalf("a cluster log on a single node's directory: %v", err)
	}

	var converted []uint64
	var lastID uint64
	convert := wal.Cluster{
		Replay: func(wal.Frame) error { return nil },
		Convert: func(jobs []wal.Recovered, last uint64) ([]byte, error) {
			for _, j := range jobs {
				converted = append(converted, j.ID)
			}
			lastID = last
			return clusterFrame(nil, kindCheckpoint, "converted"), nil
		},
	}
	l, err = wal.OpenCluster(single, wal.Options{}, convert)
	if err != nil {
		t.Fatal(err)
	}
	closeUnstarted(t, l)
	if !slices.Equal(converted, ids[1:]) || lastID < ids[4] {
		t.Errorf("converted jobs %v (last id %d), want %v", converted, lastID, ids[1:])
	}
	l, frames := openCluster(t, single, wal.Options{})
	closeUnstarted(t, l)
	if len(frames) != 1 || string(frames[0].Payload[1:]) != "converted" {
		t.Fatalf("after the conversion the directory replays %d frames", len(frames))
	}
	if _, err := os.Stat(segPath(single, 1)); !os.IsNotExist(err) {
		t.Errorf("the single node's segment is still there: %v", err)
	}
	if _, err := wal.Open(single, wal.Options{}); err == nil ||
		strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "cluster member") {
		t.Fatalf("a single node on a cluster's directory: %v", err)
	}

	// A conversion that stopped once its segment was in place.
	if err := os.WriteFile(segPath(single, 1), leftover, 0o600); err != nil {
		t.Fatal(err)
	}
	l, frames = openCluster(t, single, wal.Options{})
	closeUnstarted(t, l)
	if len(frames) != 1 {
		t.Fatalf("%d frames with a conversion's leftover", len(frames))
	}
	if _, err := os.Stat(segPath(single, 1)); !os.IsNotExist(err) {
		t.Errorf("the conversion's leftover is still there: %v", err)
	}
}

// TestScanFrames reads kinds, ids and sizes without decoding.
func TestScanFrames(t *testing.T) {
	recs := []wal.Record{
		{Kind: wal.KindFull, ID: 3, Tube: "t", State: wal.StateReady, Body: []byte("ab\r\n")},
		{Kind: wal.KindDelete, ID: 9},
	}
	var b []byte
	var sizes []int
	for i := range recs {
		n := len(b)
		b = wal.AppendFrame(b, &recs[i])
		sizes = append(sizes, len(b)-n)
	}
	var got []string
	err := wal.ScanFrames(b, func(kind wal.Kind, id uint64, size int) {
		got = append(got, fmt.Sprint(kind, id, size))
	})
	want := []string{fmt.Sprint(wal.KindFull, 3, sizes[0]), fmt.Sprint(wal.KindDelete, 9, sizes[1])}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("scanned %v, %v; want %v", got, err, want)
	}
	if err := wal.ScanFrames(b[:len(b)-1], func(wal.Kind, uint64, int) {}); err == nil {
		t.Error("a cut frame scanned")
	}
}

// fakeBinlog is an Importer of a foreign log made of one file.
type fakeBinlog struct{ jobs []wal.Record }

func (b fakeBinlog) Files(dir string) ([]string, error) {
	path := dir + "/binlog.1"
	if _, err := os.Stat(path); err != nil {
		return nil, nil
	}
	return []string{path}, nil
}

func (b fakeBinlog) Read(string, int) ([]wal.Record, uint64, error) { return b.jobs, 50, nil }

// TestClusterConvertsABinlog: a beanstalkd binlog is imported, as a
// single node imports it, and handed to Convert: its jobs and highest id
// become the cluster's first segment, and the binlog is gone.
func TestClusterConvertsABinlog(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/binlog.1", []byte("beanstalkd"), 0o600); err != nil {
		t.Fatal(err)
	}
	imp := fakeBinlog{jobs: []wal.Record{
		{ID: 7, Tube: "t", State: wal.StateReady, Body: []byte("seven\r\n")},
		{ID: 9, Tube: "t", State: wal.StateBuried, Body: []byte("nine\r\n")},
	}}
	var got []uint64
	var lastID uint64
	l, err := wal.OpenCluster(dir, wal.Options{Importer: imp}, wal.Cluster{
		Replay: func(wal.Frame) error { return nil },
		Convert: func(jobs []wal.Recovered, last uint64) ([]byte, error) {
			for _, j := range jobs {
				got = append(got, j.ID)
			}
			lastID = last
			return clusterFrame(nil, kindCheckpoint, "converted"), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	closeUnstarted(t, l)
	if !slices.Equal(got, []uint64{7, 9}) || lastID < 50 {
		t.Errorf("converted %v, last id %d; want jobs 7 and 9 and at least 50", got, lastID)
	}
	if _, err := os.Stat(dir + "/binlog.1"); !os.IsNotExist(err) {
		t.Errorf("the binlog is still there: %v", err)
	}
	segs, _ := segments(t, dir)
	if len(segs) != 1 {
		t.Errorf("segments %v after the conversion, want the cluster's one", segs)
	}
}

// TestClusterCheckpointWithGroup: a group appended with a new checkpoint
// (a member's hard state, its membership) is never followed at replay by
// the checkpoint before it, even when the writer itself, not an append,
// moves to a new segment right after the group (the current one outgrew
// its size while the spare was made): a crash then would take the older
// state for the last, and a member could vote twice in a term.
func TestClusterCheckpointWithGroup(t *testing.T) {
	testCheckpointWithGroup(t, func(l *wal.Log, f, checkpoint []byte, rotated func()) {
		if _, _, _, err := l.AppendGroupCheckpoint(len(f), func(b []byte) []byte { return append(b, f...) }, 0, checkpoint); err != nil {
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
func testCheckpointWithGroup(t *testing.T, appendState func(l *wal.Log, f, checkpoint []byte, rotated func())) {
	const segSize = 4096
	gate := make(chan struct{})
	var made atomic.Int32
	opts := wal.Options{SegmentSize: segSize}
	wal.SetAllocate(&opts, func(next func(*os.File, int64) error, f *os.File, size int64) error {
		if made.Add(1) > 1 { // Start's segment is made at once, the spares wait
			<-gate
		}
		return next(f, size)
	})
	dir := t.TempDir()
	l, _ := openCluster(t, dir, opts)
	startCluster(t, l, "state 1")
	var last written
	for size := 0; size <= segSize; size += len(last.frame) {
		last = appendGroup(t, l, fmt.Sprintf("entry %s", strings.Repeat("x", 300)))
	}
	waitDurable(t, l, last.lsn)
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

	l, frames := openCluster(t, dir, opts)
	defer closeUnstarted(t, l)
	var states []string
	for _, f := range frames {
		if wal.Kind(f.Payload[0]) == kindCheckpoint {
			states = append(states, fmt.Sprintf("%q in segment %d", f.Payload[1:], f.Seg))
		}
	}
	if n := len(states); n < 3 || !strings.HasPrefix(states[n-1], `"state 2"`) {
		t.Fatalf("replayed states %v: the last is not the newest, and not in the segment after the group's", states)
	}
}
