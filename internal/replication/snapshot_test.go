package replication

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

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
