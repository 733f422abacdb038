package replication

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/store/wal"
)

// BenchmarkWALLogAppend measures a member's log as raft drives it: each
// op is one entry (a batch of 16 puts of 200 bytes) and a hard state;
// inflight is how many such writes wait for durability at once (1: each
// waits for the last, as a follower with one append in flight).
// Reported: entries per second and fsyncs per entry.
func BenchmarkWALLogAppend(b *testing.B) {
	for _, inflight := range []int{1, 16} {
		b.Run(fmt.Sprint("inflight=", inflight), func(b *testing.B) {
			cfg := testWALConfig(b.TempDir(), []uint64{1}, 0)
			obs := &syncCounter{}
			cfg.Wal.Observer = obs
			l, err := OpenWALLog(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var recs []wal.Record
			for i := range 16 {
				r := full(uint64(i+1), 1)
				r.Body = []byte(strings.Repeat("x", 198) + "\r\n")
				recs = append(recs, r)
			}
			done := make(chan struct{}, inflight)
			b.ResetTimer()
			for i := range b.N {
				if i >= inflight {
					<-done
				}
				index := uint64(i + 2)
				l.Append([]*pb.Entry{entry(index, 1, recs...)})
				l.SetHardState(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(index)})
				l.Compact(index)
				l.OnDurable(func() { done <- struct{}{} })
			}
			for range min(inflight, b.N) {
				<-done
			}
			b.StopTimer()
			syncs, _ := obs.counts()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(float64(syncs)/float64(b.N), "fsyncs/entry")
		})
	}
}

// BenchmarkGroupLogHardState measures a hard state's write as raft asks
// it on every replica in every round that advances the commit index: not
// synced, but a checkpoint piece of the group (hard state, membership,
// address book of three members) made again each time.
func BenchmarkGroupLogHardState(b *testing.B) {
	cfg := testWALConfig(b.TempDir(), []uint64{1, 2, 3}, 0)
	cfg.Wal.SegmentSize = 64 << 20
	l, err := OpenWALLog(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var members []Member
	for _, name := range []string{"m1", "m2", "m3"} {
		members = append(members, Member{Name: name, Addr: "127.0.0.1:1", ID: MemberID(name)})
	}
	l.SetMembership(&pb.ConfState{Voters: []uint64{1, 2, 3}}, Book{Index: 1, Members: members})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l.SetHardState(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(i + 1))})
	}
}

// BenchmarkGroupLogEntries measures entries read back from the log, not
// cached, as a rebuild's replay and a follower's catch-up read them: 4,000
// entries of 19 puts of 64 bytes, read 1 MiB at a time (raft's
// MaxCommittedSizePerReady and MaxSizePerMsg here). Reported: entries per
// second.
func BenchmarkGroupLogEntries(b *testing.B) {
	cfg := testWALConfig(b.TempDir(), []uint64{1}, 0)
	cfg.CacheBytes = 1 // nothing stays once durable
	cfg.Wal.SegmentSize = 64 << 20
	l, err := OpenWALLog(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const entries = 4000
	var recs []wal.Record
	for i := range 19 {
		r := full(uint64(i+1), 1)
		r.Body = []byte(strings.Repeat("x", 62) + "\r\n")
		recs = append(recs, r)
	}
	for i := uint64(2); i < entries+2; i++ {
		l.Append([]*pb.Entry{entry(i, 1, recs...)})
		awaitDurable(b, l)
	}
	l.Append([]*pb.Entry{entry(entries+2, 1, recs...)}) // evicts the others
	awaitDurable(b, l)
	b.ResetTimer()
	for range b.N {
		for lo := uint64(2); lo < entries+2; {
			ents, err := l.Entries(lo, entries+2, maxMsgSize)
			if err != nil || len(ents) == 0 {
				b.Fatalf("entries from %d: %d, %v", lo, len(ents), err)
			}
			lo += uint64(len(ents))
		}
	}
	b.ReportMetric(float64(b.N*entries)/b.Elapsed().Seconds(), "entries/s")
}
