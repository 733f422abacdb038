package replication

import (
	"errors"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/store/wal"
)

// TestJournal: positions count the bytes of the records appended, and no
// record has a place in the log before it is committed (ActLocate); a
// callback for a position already published runs at once, the others when
// a position at least theirs is published, in position order.
func TestJournal(t *testing.T) {
	notified := 0
	j := NewJournal(func() { notified++ })
	r := full(1, 1)
	p1, loc, _ := j.Append(&r, wal.Loc{})
	size := uint64(len(wal.AppendFrame(nil, &r)))
	if p1 != size || loc != (wal.Loc{}) {
		t.Fatalf("first record at %d (%+v), want %d, placed nowhere yet", p1, loc, size)
	}
	p2, _, _ := j.Append(&wal.Record{Kind: wal.KindDelete, ID: 1}, wal.Loc{})
	if notified != 1 {
		t.Errorf("notified %d times for one batch", notified)
	}
	batch, end, records := j.take(0)
	if end != p2 || uint64(len(batch)) != p2 || records != 2 {
		t.Errorf("took %d bytes (%d records) ending at %d, want %d (2)", len(batch), records, end, p2)
	}

	var ran []uint64
	for _, pos := range []uint64{p2, 0, p1} {
		j.OnAcked(pos, func() { ran = append(ran, pos) })
	}
	if !slices.Equal(ran, []uint64{0}) {
		t.Fatalf("before any publish, ran %v", ran)
	}
	j.Publish(p1)
	j.Publish(p1 - 1) // never backwards
	if j.Acked() != p1 || !slices.Equal(ran, []uint64{0, p1}) {
		t.Errorf("acked %d, ran %v", j.Acked(), ran)
	}
	j.Publish(p2)
	if !slices.Equal(ran, []uint64{0, p1, p2}) {
		t.Errorf("ran %v", ran)
	}
}

// TestJournalRecycles: a batch given back once raft has copied it is
// where the next batch is written, so a busy leader allocates none; what
// the next holds is its own records only.
func TestJournalRecycles(t *testing.T) {
	j := NewJournal(nil)
	r := full(1, 1)
	for range 100 {
		j.Append(&r, wal.Loc{})
	}
	first, _, _ := j.take(0)
	j.recycle(first)
	j.Append(&wal.Record{Kind: wal.KindDelete, ID: 1}, wal.Loc{})
	next, _, records := j.take(0)
	if &next[:1][0] != &first[:1][0] {
		t.Error("the next batch was not written into the one given back")
	}
	want := wal.AppendFrame(nil, &wal.Record{Kind: wal.KindDelete, ID: 1})
	if records != 1 || !slices.Equal(next, want) {
		t.Errorf("the next batch holds %d records, %d bytes; want the delete's %d", records, len(next), len(want))
	}
	j.recycle(make([]byte, 0, 3*maxBatchRoom))
	if j.Append(&r, wal.Loc{}); cap(j.batch) > 2*maxBatchRoom {
		t.Errorf("a batch of %d bytes' room was kept", cap(j.batch))
	}
}

// TestJournalTakesParts: a batch larger than the limit is handed over in
// parts of whole records, each within the limit, the rest led by a clock
// record of its own; the parts' ends are the positions of their last
// records, and every record is handed over once, in order.
func TestJournalTakesParts(t *testing.T) {
	j := NewJournal(nil)
	j.clock = func() (int64, bool) { return 42, true }
	var ends []uint64
	for id := range uint64(100) {
		r := full(id+1, 1)
		r.Body = make([]byte, 1000)
		pos, _, _ := j.Append(&r, wal.Loc{})
		ends = append(ends, pos)
	}
	const limit = 10 << 10
	// A part raft refused is put back and taken again: the same records,
	// its end no later than its last record's, and no second clock.
	jobsOf := func(b []byte) []uint64 {
		recs, err := wal.DecodeFrames(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, r := range recs {
			if r.Kind != wal.KindClock {
				ids = append(ids, r.ID)
			}
		}
		return ids
	}
	first, firstEnd, firstRecords := j.take(limit)
	j.untake(first, firstRecords)
	again, last, _ := j.take(limit)
	if ids := jobsOf(again); !slices.Equal(ids, jobsOf(first)) || last > firstEnd || last < ends[ids[len(ids)-1]-2] {
		t.Fatalf("taken again: jobs %v ending at %d; first %v ending at %d", ids, last, jobsOf(first), firstEnd)
	}
	ids := jobsOf(again)
	for parts := 1; ; parts++ {
		b, end, records := j.take(limit)
		if cap(b) > limit+clockFrameSize {
			t.Errorf("part %d: %d bytes in an array of %d: recycled, it would keep the whole batch", parts, len(b), cap(b))
		}
		if b == nil {
			if parts < 10 {
				t.Errorf("%d parts of at most %d bytes for 100 KB", parts, limit)
			}
			break
		}
		if len(b) > limit {
			t.Errorf("part %d: %d bytes, over %d", parts, len(b), limit)
		}
		recs, err := wal.DecodeFrames(nil, b)
		if err != nil || len(recs) != records || recs[0].Kind != wal.KindClock || recs[0].Time != 42 || recs[1].Kind == wal.KindClock {
			t.Fatalf("part %d: %d records (%v), said %d, first %+v", parts, len(recs), err, records, recs[0])
		}
		top := recs[len(recs)-1].ID
		if end <= last || end > ends[top-1] || end < ends[top-2] {
			t.Errorf("part %d ends at %d after %d; its last record, %d, ends at %d", parts, end, last, top, ends[top-1])
		}
		last = end
		ids = append(ids, jobsOf(b)...)
	}
	if len(ids) != 100 || !slices.IsSorted(ids) || ids[0] != 1 || ids[99] != 100 {
		t.Errorf("handed over %d records, %v", len(ids), ids)
	}
	big := full(200, 1)
	big.Body = make([]byte, 3*limit)
	j.Append(&big, wal.Loc{})
	if b, _, records := j.take(limit); records != 2 || len(b) < 3*limit {
		t.Errorf("a record over the limit: %d bytes, %d records; want it whole, after its clock", len(b), records)
	}
}

// TestStepRefusesDamagedRecords: an append or a snapshot whose records do
// not decode is refused before raft sees it.
func TestStepRefusesDamagedRecords(t *testing.T) {
	c := newCluster(t, 3, 100)
	c.elect(1)
	f := c.members[2]
	e := entry(10, 2, full(9, 1))
	e.Data[len(e.Data)-3] ^= 1
	bad := []*pb.Message{
		{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(2)),
			Index: new(uint64(9)), LogTerm: new(uint64(2)), Entries: []*pb.Entry{e}},
		{Type: pb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(2)),
			Snapshot: &pb.Snapshot{Data: e.Data, Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(2))}}},
	}
	before := f.core.Status()
	for _, m := range bad {
		if err := f.core.Step(m); err == nil {
			t.Errorf("%v with damaged records was taken", m.GetType())
		}
	}
	if after := f.core.Status(); after.GetCommit() != before.GetCommit() || after.Applied != before.Applied {
		t.Errorf("status changed: %+v, then %+v", before, after)
	}
}

// TestJournalFull: while the member's log says its disk is full, the
// journal refuses every record but deletes, as a single node's log does;
// once it has room, it takes them again.
func TestJournalFull(t *testing.T) {
	j := NewJournal(nil)
	noRoom := true
	j.full = func() bool { return noRoom }
	for _, r := range []wal.Record{full(1, 1), {Kind: wal.KindUpdate, ID: 1, State: wal.StateBuried}, {Kind: wal.KindIDs, ID: 9}} {
		if _, _, err := j.Append(&r, wal.Loc{}); !errors.Is(err, wal.ErrNoSpace) {
			t.Errorf("%v appended on a full disk: %v", r.Kind, err)
		}
	}
	if _, _, err := j.Append(&wal.Record{Kind: wal.KindDelete, ID: 1}, wal.Loc{}); err != nil {
		t.Errorf("a delete refused on a full disk: %v", err)
	}
	noRoom = false
	r := full(2, 1)
	if _, _, err := j.Append(&r, wal.Loc{}); err != nil {
		t.Errorf("a put refused once the disk has room: %v", err)
	}
}
