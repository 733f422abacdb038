package replication

import (
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/store/wal"
)

func entry(index, term uint64, records ...wal.Record) *pb.Entry {
	var data []byte
	for i := range records {
		data = wal.AppendFrame(data, &records[i])
	}
	return &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryNormal.Enum(), Data: data}
}

func full(id uint64, pri uint32) wal.Record {
	return wal.Record{Kind: wal.KindFull, ID: id, Tube: "t", State: wal.StateReady, Pri: pri, Body: []byte("b\r\n")}
}

func commit(l Log, index uint64) {
	l.SetHardState(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(index)})
}

// headOf reads l's head whole (Log.ReadHead), as frames.
func headOf(t testing.TB, l Log) []byte {
	t.Helper()
	var b []byte
	err := l.ReadHead(func(records []wal.Record, _ []wal.Loc) error {
		for i := range records {
			b = wal.AppendFrame(b, &records[i])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshotData reads the records of l's snapshot snap whole, as its
// stream hands them out.
func snapshotData(t testing.TB, l Log, snap *pb.Snapshot) []byte {
	t.Helper()
	var b []byte
	eachChunk(t, l, snap, func(chunk []byte) { b = append(b, chunk...) })
	return b
}

// eachChunk calls fn with each chunk of l's snapshot snap, checking that
// each is whole records within snapshotChunk, or one larger record.
func eachChunk(t testing.TB, l Log, snap *pb.Snapshot, fn func(chunk []byte)) {
	t.Helper()
	r, err := l.OpenSnapshot(snap.GetMetadata())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		chunk, err := r.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := wal.ScanFrames(chunk, func(wal.Kind, uint64, int) { n++ }); err != nil || n == 0 ||
			len(chunk) > snapshotChunk && n > 1 {
			t.Fatalf("a chunk of %d bytes holds %d records (%v)", len(chunk), n, err)
		}
		fn(chunk)
	}
}

// transfer streams snapshot snap of from into to's spool, as the
// transport does, and installs it there.
func transfer(t testing.TB, from Log, snap *pb.Snapshot, to Log) {
	t.Helper()
	sink, err := to.ReceiveSnapshot(t.Context(), snap.GetMetadata())
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	eachChunk(t, from, snap, func(chunk []byte) {
		if err := sink.Write(chunk); err != nil {
			t.Fatal(err)
		}
	})
	if err := sink.Finish(); err != nil {
		t.Fatal(err)
	}
	if !to.Received(snap.GetMetadata()) {
		t.Fatal("a snapshot received whole is not Received")
	}
	to.InstallSnapshot(snap)
}

// logKinds are the Logs the Log tests run against: MemoryLog, the
// reference, WALLog, in a directory of the test's, and a GroupLog of a
// group other than 0 on a SharedLog whose group 0 writes too
// (openGroup).
var logKinds = []struct {
	name string
	open func(t testing.TB, voters []uint64, retain int) Log
}{
	{"memory", func(_ testing.TB, voters []uint64, retain int) Log { return NewMemoryLog(voters, retain) }},
	{"wal", func(t testing.TB, voters []uint64, retain int) Log {
		return openWAL(t, testWALConfig(t.TempDir(), voters, retain))
	}},
	{"group", func(t testing.TB, voters []uint64, retain int) Log {
		return openGroup(t, testWALConfig(t.TempDir(), voters, retain), 7)
	}},
}

// testWALConfig is member voters[0]'s log in dir, in a cluster of
// voters, with small segments.
func testWALConfig(dir string, voters []uint64, retain int) WALConfig {
	return WALConfig{Dir: dir, ClusterID: 0xc1, ID: voters[0], Name: fmt.Sprint("m", voters[0]), Voters: voters,
		Retain: retain, Wal: wal.Options{SegmentSize: 16 << 10}}
}

// openWAL opens a WALLog, closed when the test ends.
func openWAL(t testing.TB, cfg WALConfig) *WALLog {
	t.Helper()
	l, err := OpenWALLog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestLog: entries are superseded from the first index written again;
// compaction drops only entries that hold no live job's latest full
// record, keeps the id watermark of what it drops, and never goes past
// the commit index; a snapshot is the fold of what is held, and is the
// same whether the log was compacted or not; an installed snapshot's
// records are the head.
func TestLog(t *testing.T) {
	for _, kind := range logKinds {
		t.Run(kind.name, func(t *testing.T) {
			testLog(t, func(voters []uint64, retain int) Log { return kind.open(t, voters, retain) })
		})
	}
}

func testLog(t *testing.T, open func(voters []uint64, retain int) Log) {
	ents := []*pb.Entry{
		entry(2, 2, full(1, 10), full(2, 20)),
		entry(3, 2, full(3, 30), wal.Record{Kind: wal.KindDelete, ID: 2}),
		entry(4, 2, wal.Record{Kind: wal.KindUpdate, ID: 1, State: wal.StateBuried, Pri: 11}),
		entry(5, 2, wal.Record{Kind: wal.KindIDs, ID: 100}),
		entry(6, 2, full(4, 40)),
		entry(7, 2, full(1, 12), full(3, 31)), // compaction's rewrites
	}
	l := open([]uint64{1}, 0)
	whole := open([]uint64{1}, 0)
	for _, x := range []Log{l, whole} {
		x.Append(ents)
		commit(x, 7)
	}

	l.Compact(4)
	if first, _ := l.FirstIndex(); first != 2 {
		t.Fatalf("compacted to %d with jobs 1 and 3 live only in entries 2 and 3", first)
	}
	l.Compact(7)
	if first, _ := l.FirstIndex(); first != 6 {
		t.Fatalf("first index %d after compaction, want 6 (job 4's put)", first)
	}
	if term, err := l.Term(5); term != 2 || err != nil {
		t.Errorf("term of the entry before the first: %d, %v", term, err)
	}
	if _, err := l.Entries(5, 7, math.MaxUint64); !errors.Is(err, raft.ErrCompacted) {
		t.Errorf("reading a compacted entry: %v", err)
	}
	head, err := wal.DecodeFrames(nil, headOf(t, l))
	if err != nil || !reflect.DeepEqual(head, []wal.Record{{Kind: wal.KindIDs, ID: 100}}) {
		t.Errorf("head %+v, %v: want the id watermark of what was dropped", head, err)
	}

	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := whole.Snapshot()
	data := snapshotData(t, l, snap)
	if snap.GetMetadata().GetIndex() != 7 || len(snap.GetData()) > 0 || !reflect.DeepEqual(data, snapshotData(t, whole, ref)) {
		t.Errorf("the compacted log's snapshot (index %d, %d bytes of data in raft's message) differs from the whole log's",
			snap.GetMetadata().GetIndex(), len(snap.GetData()))
	}
	records, _ := wal.DecodeFrames(nil, data)
	var got []uint64
	for _, r := range records {
		got = append(got, r.ID)
	}
	if want := []uint64{4, 1, 3, 100}; !reflect.DeepEqual(got, want) {
		t.Errorf("snapshot records %v, want jobs 4, 1 and 3 (their latest full records, in log order) and the watermark 100", got)
	}

	// A log that installs the snapshot holds its records as its head.
	// (Each stream reads a view the log makes for it: one that closed is
	// gone, and Snapshot makes another of the same snapshot.)
	fresh := open([]uint64{1}, 0)
	if _, err := l.OpenSnapshot(snap.GetMetadata()); !errors.Is(err, ErrSnapshotGone) {
		t.Errorf("a view read whole opened again: %v", err)
	}
	if snap, err = l.Snapshot(); err != nil || snap.GetMetadata().GetIndex() != 7 {
		t.Fatalf("the snapshot made again: %v, %v", snap.GetMetadata(), err)
	}
	transfer(t, l, snap, fresh)
	if first, _ := fresh.FirstIndex(); first != 8 {
		t.Errorf("first index %d after installing snapshot 7", first)
	}
	if !reflect.DeepEqual(headOf(t, fresh), data) {
		t.Error("the installed snapshot's records are not the head")
	}

	// A new leader's entries supersede an uncommitted tail.
	l.Append([]*pb.Entry{entry(8, 2, full(5, 1)), entry(9, 2, full(6, 1))})
	l.Append([]*pb.Entry{entry(8, 3, full(7, 1))})
	if last, _ := l.LastIndex(); last != 8 {
		t.Errorf("last index %d after superseding 8 and 9 with 8", last)
	}
	if term, _ := l.Term(8); term != 3 {
		t.Errorf("entry 8 has term %d, want the new leader's 3", term)
	}
	l.Compact(9) // past the commit index: only what is committed counts
	if first, _ := l.FirstIndex(); first != 6 {
		t.Errorf("compacted past the commit index, to %d", first)
	}
}
