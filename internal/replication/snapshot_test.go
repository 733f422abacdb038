package replication

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// foldRecords is the reference a snapshot's stream is checked against:
// folding the head's records and then the entries' (wal.Fold), each live
// job's full record, in id order, then the highest id any record named.
func foldRecords(head []byte, ents []*pb.Entry) ([]byte, error) {
	live := make(map[uint64]*wal.Recovered)
	lastID := uint64(0)
	fold := func(b []byte) error {
		records, err := wal.DecodeFrames(nil, b)
		for i := range records {
			wal.Fold(live, &records[i], wal.Loc{})
			lastID = max(lastID, records[i].ID)
		}
		return err
	}
	if err := fold(head); err != nil {
		return nil, fmt.Errorf("the log's head: %w", err)
	}
	for _, e := range ents {
		if err := fold(recordsOf(e)); err != nil {
			return nil, fmt.Errorf("entry %d: %w", e.GetIndex(), err)
		}
	}
	jobs := make([]*wal.Recovered, 0, len(live))
	for _, j := range live {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b *wal.Recovered) int { return cmp.Compare(a.ID, b.ID) })
	var data []byte
	for _, j := range jobs {
		data = wal.AppendFrame(data, &j.Record)
	}
	if lastID > 0 {
		data = wal.AppendFrame(data, &wal.Record{Kind: wal.KindIDs, ID: lastID})
	}
	return data, nil
}

// installData makes l install the snapshot md whose records are data, as
// if a peer had streamed them: spooled in chunks, then installed.
func installData(t testing.TB, l Log, md *pb.SnapshotMetadata, data []byte) {
	t.Helper()
	sink, err := l.ReceiveSnapshot(t.Context(), md)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	for _, c := range headChunks(data) {
		if err := sink.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Finish(); err != nil {
		t.Fatal(err)
	}
	l.InstallSnapshot(&pb.Snapshot{Metadata: md})
}

// bigJobs is the records of n jobs of size bytes each, from id 1, then
// the id watermark: a snapshot's records, as the leader's stream hands
// them out.
func bigJobs(n, size int) []byte {
	var data []byte
	body := []byte(strings.Repeat("s", size-2) + "\r\n")
	for id := 1; id <= n; id++ {
		data = wal.AppendFrame(data, &wal.Record{Kind: wal.KindFull, ID: uint64(id), Tube: "snap",
			State: wal.StateReady, Pri: uint32(id), TTR: int64(time.Minute), Body: body})
	}
	return wal.AppendFrame(data, &wal.Record{Kind: wal.KindIDs, ID: uint64(n)})
}

// TestWALLogSpoolCrash: a snapshot is spooled into a log and installed,
// after a spool given up midway and one closed whole but not installed,
// and the directory is copied, as a crash would
// leave it, after every chunk, after the spool finished, after the
// install and once it is durable. Every copy opens as the log was before
// (its entries, no head) or with the whole snapshot as its head, never
// between; the last one with the snapshot. The spools given up leave
// nothing, and the segments they wrote are removed in time.
func TestWALLogSpoolCrash(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1}, 0)
	cfg.Wal.SegmentSize = 256 << 10
	l := openWAL(t, cfg)
	l.Append([]*pb.Entry{entry(2, 1, full(1, 1)), entry(3, 1, full(2, 2))})
	commit(l, 3)
	awaitDurable(t, l)

	data := bigJobs(300, 10<<10) // 3 MiB: four chunks
	chunks := headChunks(data)
	md := &pb.SnapshotMetadata{Index: new(uint64(20)), Term: new(uint64(2)), ConfState: &pb.ConfState{Voters: []uint64{1}}}

	given, err := l.ReceiveSnapshot(t.Context(), md)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks[:2] {
		if err := given.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	given.Close()
	if l.Received(md) {
		t.Fatal("a spool given up is Received")
	}
	// Received whole, but closed before raft installed it (it came from
	// an older term): given up too.
	ignored, err := l.ReceiveSnapshot(t.Context(), md)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if err := ignored.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := ignored.Finish(); err != nil || !l.Received(md) {
		t.Fatalf("a spool finished: %v, received %v", err, l.Received(md))
	}
	ignored.Close()
	if l.Received(md) {
		t.Fatal("a spool closed uninstalled is still Received")
	}
	oldest := l.Stats().OldestIndex

	copies := []string{copyLog(t, dir)}
	sink, err := l.ReceiveSnapshot(t.Context(), md)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if err := sink.Write(c); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, copyLog(t, dir))
	}
	if err := sink.Finish(); err != nil {
		t.Fatal(err)
	}
	copies = append(copies, copyLog(t, dir))
	l.InstallSnapshot(&pb.Snapshot{Metadata: md})
	copies = append(copies, copyLog(t, dir))
	awaitDurable(t, l)
	copies = append(copies, copyLog(t, dir))

	installed := 0
	for i, c := range copies {
		cl := openWAL(t, testWALConfig(c, []uint64{1}, 0))
		first, _ := cl.FirstIndex()
		last, _ := cl.LastIndex()
		head := headOf(t, cl)
		switch {
		case first == 2 && last == 3 && len(head) == 0:
			if installed > 0 {
				t.Errorf("copy %d: the log as before, after a copy with the snapshot", i)
			}
		case first == 21 && last == 20 && bytes.Equal(withoutIDs(head), withoutIDs(data)) && maxID(head) >= maxID(data):
			// (Reopened, the head ends with the first segment's id floor too.)
			installed++
		default:
			t.Errorf("copy %d: entries %d to %d, a head of %d bytes (the snapshot's are %d): neither before nor after",
				i, first, last, len(head), len(data))
		}
		if err := cl.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if installed == 0 {
		t.Error("no copy holds the snapshot, not even the one taken once its install was durable")
	}

	// The head stays on disk: a fresh store is filled from it.
	if got := headOf(t, l); !bytes.Equal(got, data) {
		t.Errorf("a head of %d bytes, want the snapshot's %d", len(got), len(data))
	}
	// The entries dropped, nothing holds the segments before the head's:
	// the spool given up goes with them.
	testproc.WaitFor(t, 10*time.Second, "the segments before the head removed", func() bool {
		return l.Stats().OldestIndex > oldest
	})
}

// TestWALLogSnapshotView: the frames a snapshot's view reads stay while a
// stream reads them, though the log is compacted past them meanwhile and
// their segments would go; once the stream closes they go.
func TestWALLogSnapshotView(t *testing.T) {
	cfg := testWALConfig(t.TempDir(), []uint64{1}, 0)
	cfg.Wal.SegmentSize = 16 << 10
	l := openWAL(t, cfg)
	body := strings.Repeat("v", 2000)
	var ents []*pb.Entry
	for i := uint64(2); i <= 40; i++ {
		r := full(i, uint32(i))
		r.Body = []byte(body + "\r\n")
		ents = append(ents, entry(i, 1, r))
	}
	l.Append(ents)
	commit(l, 40)
	awaitDurable(t, l)
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := foldRecords(nil, ents)
	r, err := l.OpenSnapshot(snap.GetMetadata())
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	got := bytes.Clone(first)

	// Every job deleted and the log compacted past them all: without the
	// view, their segments would be removed.
	var dels []wal.Record
	for i := uint64(2); i <= 40; i++ {
		dels = append(dels, wal.Record{Kind: wal.KindDelete, ID: i})
	}
	l.Append([]*pb.Entry{entry(41, 1, dels...), entry(42, 1)})
	commit(l, 42)
	l.Compact(42)
	awaitDurable(t, l)
	oldest := l.Stats().OldestIndex
	for {
		chunk, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the view after compaction: %v", err)
		}
		got = append(got, chunk...)
	}
	folded, _ := foldRecords(got, nil)
	if !bytes.Equal(folded, want) {
		t.Errorf("the view streamed %d bytes of jobs; the entries fold to %d", len(folded), len(want))
	}
	if _, err := l.OpenSnapshot(snap.GetMetadata()); !errors.Is(err, ErrSnapshotGone) {
		t.Errorf("a view compacted past opened again: %v", err)
	}
	r.Close()
	l.Append([]*pb.Entry{entry(43, 1)}) // a write for the removal to follow
	commit(l, 43)
	testproc.WaitFor(t, 10*time.Second, "the view's segments removed", func() bool {
		return l.Stats().OldestIndex > oldest
	})
}

// TestSnapshotCarriesDedupTable: a snapshot carries the request keys its
// records make (docs/design/shards.md 5.6) after its jobs, so a store
// installed from it answers a resent request from the keys the sender's
// had, those of jobs long deleted among them, and not those expired.
func TestSnapshotCarriesDedupTable(t *testing.T) {
	t0 := time.Now()
	at := func(i uint64) int64 { return t0.Add(time.Duration(i) * time.Second).UnixNano() }
	from := openWAL(t, testWALConfig(t.TempDir(), []uint64{1, 2, 3}, 0))
	for i := uint64(2); i <= 21; i++ {
		put := full(i, 1)
		put.Req = wal.Req{Incarnation: 9, Number: i}
		recs := []wal.Record{{Kind: wal.KindClock, Time: at(i)}, put}
		if i%2 == 0 { // every other job deleted, by a keyed delete
			recs = append(recs, wal.Record{Kind: wal.KindDelete, ID: i, Req: wal.Req{Incarnation: 9, Number: 100 + i}})
		}
		from.Append([]*pb.Entry{entry(i, 1, recs...)})
	}
	awaitDurable(t, from)
	commit(from, 21)
	snap, err := from.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	to := openWAL(t, testWALConfig(t.TempDir(), []uint64{2, 1, 3}, 0))
	transfer(t, from, snap, to)

	st := store.New(store.Options{Dedup: true})
	defer st.Close()
	if err := to.ReadHead(func(records []wal.Record, locs []wal.Loc) error {
		st.Apply(records, locs)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Entry times 12 s to 21 s are within DedupTTL of the latest, 21 s:
	// ten puts and five deletes.
	if n := st.DedupEntries(); n != 15 {
		t.Errorf("the installed store keeps %d request keys, want 15", n)
	}
	c := st.NewClient(nil)
	defer c.Close()
	if id, put, err := c.PutKeyed(wal.Req{Incarnation: 9, Number: 12}, 0, 0, 60, []byte("x\r\n")); err != nil || put || id != 12 {
		t.Errorf("the put of job 12 (deleted since) resent: id %d, put %v, %v; want its first answer, 12", id, put, err)
	}
	if !c.DeleteKeyed(wal.Req{Incarnation: 9, Number: 112}, 12) {
		t.Error("the delete of job 12 resent: not answered as first")
	}
	if _, put, _ := c.PutKeyed(wal.Req{Incarnation: 9, Number: 4}, 0, 0, 60, []byte("y\r\n")); !put {
		t.Error("a put whose key expired was answered from the table")
	}
}
