package replication

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
	"github.com/sproutmq/sprout/store/wal"
)

// awaitDurable waits for everything written to l so far to be durable.
func awaitDurable(t testing.TB, l Log) {
	t.Helper()
	done := make(chan struct{})
	l.OnDurable(func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the log's writes not durable within 10 s")
	}
}

// copyLog copies a log directory's segments as a crash may leave them
// while the writer is busy: newest first, so each older segment holds at
// least everything written before what the newer ones hold (a write
// under way is torn, at the end). A segment that compaction removes
// meanwhile was removed for what was written after the newer ones were
// read, which no crash could lose: the copy starts again.
func copyLog(t testing.TB, src string) string {
	t.Helper()
	for range 100 {
		dst := t.TempDir()
		if copySegments(t, src, dst) {
			return dst
		}
	}
	t.Fatal("segments vanished under every copy")
	return ""
}

// copySegments copies src's segments to dst, newest first; false if one
// vanished meanwhile.
func copySegments(t testing.TB, src, dst string) bool {
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".wal") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	slices.Reverse(names)
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(src, name))
		if errors.Is(err, os.ErrNotExist) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return true
}

// jobsAt is the live jobs (without the id watermark) that folding l's
// head and its entries through index gives.
func jobsAt(t testing.TB, l Log, index uint64) []byte {
	t.Helper()
	first, _ := l.FirstIndex()
	var ents []*pb.Entry
	if index >= first {
		var err error
		if ents, err = l.Entries(first, index+1, math.MaxUint64); err != nil {
			t.Fatalf("entries %d to %d: %v", first, index, err)
		}
	}
	data, err := foldRecords(headOf(t, l), ents)
	if err != nil {
		t.Fatal(err)
	}
	return withoutIDs(data)
}

// withoutIDs is records' frames but the id watermarks.
func withoutIDs(data []byte) []byte {
	records, _ := wal.DecodeFrames(nil, data)
	var out []byte
	for i := range records {
		if records[i].Kind != wal.KindIDs {
			out = wal.AppendFrame(out, &records[i])
		}
	}
	return out
}

// streamedJobs is the live jobs l's own snapshot streams, folded (the id
// watermark left out), and the snapshot's index.
func streamedJobs(t testing.TB, l Log) ([]byte, uint64) {
	t.Helper()
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := foldRecords(snapshotData(t, l, snap), nil)
	if err != nil {
		t.Fatal(err)
	}
	return withoutIDs(data), snap.GetMetadata().GetIndex()
}

// logSim plays raft and a leader's store against a WALLog: entries of
// puts, updates and deletes, hard states, a new leader's entries
// superseding an uncommitted tail, snapshots installed, compaction, and
// the migration of the jobs the log hands over, which go into the next
// entry as a leader's rewrites do. whole is every entry, never compacted.
type logSim struct {
	t      testing.TB
	rng    *rand.Rand
	l      *WALLog
	whole  *MemoryLog
	jobs   map[uint64]wal.Record // as of the last entry
	nextID uint64
	idMark uint64 // the id watermark of the last entry
	term   uint64
	commit uint64
	// synced is the hard state as of the last write to l that asks for an
	// fsync: what l.OnDurable waits for. A hard state that only raises the
	// commit index is written unsynced (GroupLog.SetHardState), so a crash
	// may lose it until a later write is durable.
	synced *pb.HardState

	mu     sync.Mutex
	toMove []uint64 // guarded by mu: handed over by the log's Migrate
}

func newLogSim(t testing.TB, seed uint64, l *WALLog) *logSim {
	s := &logSim{t: t, rng: rand.New(rand.NewPCG(seed, 1)), l: l, whole: NewMemoryLog([]uint64{1}, math.MaxInt),
		jobs: map[uint64]wal.Record{}, term: 1, commit: 1}
	s.synced, _, _ = l.InitialState()
	l.SetMigrator(s)
	return s
}

func (s *logSim) Migrate(_ uint32, ids []uint64) {
	s.mu.Lock()
	s.toMove = append(s.toMove, ids...)
	s.mu.Unlock()
}

func (s *logSim) last() uint64 { last, _ := s.whole.LastIndex(); return last }

// entries makes n entries from index on, changing jobs.
func (s *logSim) entries(index uint64, n int) []*pb.Entry {
	var ents []*pb.Entry
	for k := range n {
		var recs []wal.Record
		s.mu.Lock()
		moves := s.toMove
		s.toMove = nil
		s.mu.Unlock()
		for _, id := range moves {
			if r, ok := s.jobs[id]; ok {
				recs = append(recs, r)
			}
		}
		for range 1 + s.rng.IntN(4) {
			var ids []uint64
			for id := range s.jobs {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			switch op := s.rng.IntN(10); {
			case op < 5 || len(ids) < 20:
				if s.nextID == s.idMark {
					// Ids run behind a watermark logged ahead of them, as
					// a store's do (NextID).
					s.idMark += 64
					recs = append(recs, wal.Record{Kind: wal.KindIDs, ID: s.idMark})
				}
				s.nextID++
				r := wal.Record{Kind: wal.KindFull, ID: s.nextID, Tube: "t", State: wal.StateReady, Pri: s.rng.Uint32N(100),
					TTR: int64(time.Minute), Body: []byte(strings.Repeat("b", s.rng.IntN(600)) + "\r\n")}
				s.jobs[r.ID] = r
				recs = append(recs, r)
			case op < 8:
				id := ids[s.rng.IntN(len(ids))]
				delete(s.jobs, id)
				recs = append(recs, wal.Record{Kind: wal.KindDelete, ID: id})
			default:
				r := s.jobs[ids[s.rng.IntN(len(ids))]]
				r.Pri++
				s.jobs[r.ID] = r
				u := r
				u.Kind, u.Tube, u.Body = wal.KindUpdate, "", nil
				recs = append(recs, u)
			}
		}
		ents = append(ents, entry(index+uint64(k), s.term, recs...))
	}
	return ents
}

// rebuildJobs makes jobs what the entries through index make.
func (s *logSim) rebuildJobs(index uint64) {
	s.jobs = map[uint64]wal.Record{}
	records, _ := wal.DecodeFrames(nil, jobsAt(s.t, s.whole, index))
	for _, r := range records {
		s.jobs[r.ID] = r
	}
}

func (s *logSim) setHardState() {
	hs := &pb.HardState{Term: new(s.term), Vote: new(uint64(1)), Commit: new(s.commit)}
	prev, _, _ := s.whole.InitialState()
	s.whole.SetHardState(hs)
	s.l.SetHardState(hs)
	if raft.MustSync(hs, prev, 0) {
		s.synced = hs
	}
}

// append appends ents to the whole and to l, whose fsync for them covers
// every hard state set before.
func (s *logSim) append(ents []*pb.Entry) {
	s.whole.Append(ents)
	s.l.Append(ents)
	s.synced, _, _ = s.whole.InitialState()
}

// step takes one random step.
func (s *logSim) step() {
	switch op := s.rng.IntN(20); {
	case op < 12:
		ents := s.entries(s.last()+1, 1+s.rng.IntN(3))
		s.append(ents)
	case op < 17:
		s.commit += uint64(s.rng.IntN(int(s.last()-s.commit) + 1))
		s.setHardState()
		s.l.Compact(s.commit)
	case op < 19 && s.last() > s.commit:
		// A new leader: its entries replace the uncommitted tail.
		from := s.commit + 1 + uint64(s.rng.IntN(int(s.last()-s.commit)))
		s.term++
		s.setHardState()
		s.rebuildJobs(from - 1)
		ents := s.entries(from, 1+s.rng.IntN(3))
		s.append(ents)
	default:
		// A snapshot at the commit index from the leader: this log drops
		// its entries, the whole keeps them.
		data, err := foldRecords(nil, mustEntries(s.t, s.whole, 2, s.commit+1))
		if err != nil {
			s.t.Fatal(err)
		}
		term, _ := s.whole.Term(s.commit)
		installData(s.t, s.l, &pb.SnapshotMetadata{
			Index: new(s.commit), Term: new(term), ConfState: &pb.ConfState{Voters: []uint64{1}}}, data)
		s.whole.Append(nil)
		s.synced, _, _ = s.whole.InitialState() // the snapshot frame asks for an fsync
		s.rebuildJobs(s.commit)
		if s.last() > s.commit {
			s.term++ // what followed the snapshot comes again, from a leader
			ents := s.entries(s.commit+1, 1)
			s.append(ents)
		}
	}
}

func mustEntries(t testing.TB, l Log, lo, hi uint64) []*pb.Entry {
	t.Helper()
	if lo >= hi {
		return nil
	}
	ents, err := l.Entries(lo, hi, math.MaxUint64)
	if err != nil {
		t.Fatalf("entries %d to %d: %v", lo, hi, err)
	}
	return ents
}

// check compares a log opened on the directory (or a crash's copy of it)
// with what was durable then: its hard state is at least that one,
// folding its head and committed entries gives the jobs the whole log's
// entries give at its commit index, and it names every id they did.
func (s *logSim) check(l *WALLog, durable *pb.HardState) {
	s.t.Helper()
	hs, _, _ := l.InitialState()
	if hs.GetCommit() < durable.GetCommit() || hs.GetTerm() < durable.GetTerm() ||
		hs.GetTerm() == durable.GetTerm() && hs.GetVote() != durable.GetVote() {
		s.t.Fatalf("reopened with hard state %v; %v was durable", hs, durable)
	}
	c := hs.GetCommit()
	first, _ := l.FirstIndex()
	for i := first - 1; i <= c; i++ {
		got, err := l.Term(i)
		want, _ := s.whole.Term(i)
		if err != nil || got != want {
			s.t.Fatalf("entry %d (of %d to %d committed) has term %d (%v), want %d", i, first, c, got, err, want)
		}
	}
	if got, want := jobsAt(s.t, l, c), jobsAt(s.t, s.whole, c); !bytes.Equal(got, want) {
		s.t.Fatalf("the jobs at commit %d differ after reopening (log from %d):\n%s", c, first, diffJobs(got, want))
	}
	// No id named by a committed entry is issued again: the head's
	// watermark covers what was dropped.
	top, want := maxID(headOf(s.t, l)), uint64(0)
	last, _ := l.LastIndex()
	for _, e := range mustEntries(s.t, l, first, last+1) {
		top = max(top, maxID(e.GetData()))
	}
	for _, e := range mustEntries(s.t, s.whole, 2, c+1) {
		want = max(want, maxID(e.GetData()))
	}
	if top < want {
		s.t.Fatalf("reopened, the log names ids up to %d; its committed entries named %d", top, want)
	}
}

// TestWALLogCrash: a member's log is copied while its writer is busy, as
// a crash leaves it, time after time; each copy opens with everything
// that was durable before (its hard state, and the jobs of its committed
// entries, whatever was superseded, installed or compacted since), and
// the log's own directory after Close with everything. Small segments
// make compaction migrate and remove segments throughout, and the log
// restarts on its directory now and then, and goes on.
func TestWALLogCrash(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testWALConfig(dir, []uint64{1}, 0)
			cfg.Wal.SegmentSize = 8 << 10
			s := newLogSim(t, seed, openWAL(t, cfg))
			for round := range 12 {
				for step := range 40 {
					s.step()
					if step%8 != 7 {
						continue
					}
					if got, want := jobsAt(t, s.l, s.commit), jobsAt(t, s.whole, s.commit); !bytes.Equal(got, want) {
						t.Fatalf("the log's jobs at commit %d differ from its entries':\n%s", s.commit, diffJobs(got, want))
					}
					if got, index := streamedJobs(t, s.l); !bytes.Equal(got, jobsAt(t, s.whole, index)) {
						t.Fatalf("the log's snapshot at %d streams other jobs than its entries fold to:\n%s",
							index, diffJobs(got, jobsAt(t, s.whole, index)))
					}
				}
				awaitDurable(t, s.l)
				durable := s.synced
				for range 1 + s.rng.IntN(20) {
					s.step()
				}
				crashed := copyLog(t, dir)
				l := openWAL(t, testWALConfig(crashed, []uint64{1}, 0))
				s.check(l, durable)
				if err := l.Close(); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if round%3 == 2 {
					// The member restarts on its directory and goes on.
					if err := s.l.Close(); err != nil {
						t.Fatal(err)
					}
					s.l = openWAL(t, cfg)
					s.l.SetMigrator(s)
				}
			}
			final, _, _ := s.l.InitialState()
			if err := s.l.Close(); err != nil {
				t.Fatal(err)
			}
			l := openWAL(t, cfg)
			s.check(l, final)
			st := l.Stats()
			if st.OldestIndex < 3 {
				t.Errorf("the oldest segment is %d: compaction removed none", st.OldestIndex)
			}
			t.Logf("last index %d, commit %d; segments %d to %d, %d bytes on disk, %d live",
				s.last(), s.commit, st.OldestIndex, st.CurrentIndex, st.DiskBytes, st.LiveBytes)
		})
	}
}

// TestWALLogRestart: a log reopened on its directory holds what it held:
// its state, its membership, every entry from its first on with its
// term, its head; entries superseded in a segment before the one their
// successors are in stay superseded; and it goes on appending.
func TestWALLogRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1, 2, 3}, 0)
	cfg.Wal.SegmentSize = 4 << 10
	l := openWAL(t, cfg)
	body := strings.Repeat("x", 300)
	for i := uint64(2); i <= 40; i++ {
		l.Append([]*pb.Entry{entry(i, 1, full(i, 1), wal.Record{Kind: wal.KindIDs, ID: 1000 + i})})
		awaitDurable(t, l) // appends move to a new segment once its spare is made
		_ = body
	}
	commit(l, 20)
	// A new leader's entries from 25 on, in a later segment than 25 to 40.
	for i := uint64(25); i <= 30; i++ {
		l.Append([]*pb.Entry{entry(i, 2, full(100+i, 2))})
		awaitDurable(t, l)
	}
	before := l.Locate(24)
	if after := l.Locate(25); after <= before {
		t.Fatalf("entry 25 superseded in segment %d, entry 24 is in %d: the test meant a later one", after, before)
	}
	l.Compact(10)
	want := struct {
		first, last uint64
		head        []byte
		jobs        []byte
	}{}
	want.first, _ = l.FirstIndex()
	want.last, _ = l.LastIndex()
	want.jobs = jobsAt(t, l, 20)
	hs, cs, _ := l.InitialState()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openWAL(t, cfg)
	gotHS, gotCS, _ := l.InitialState()
	if !proto.Equal(gotHS, hs) || !proto.Equal(gotCS, cs) {
		t.Errorf("reopened with %v %v, closed with %v %v", gotHS, gotCS, hs, cs)
	}
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	if first > want.first || last != 30 {
		t.Errorf("reopened holding %d to %d; held %d to %d", first, last, want.first, want.last)
	}
	for i := first; i <= last; i++ {
		term, _ := l.Term(i)
		if wantTerm := uint64(1); i >= 25 && term != 2 || i < 25 && term != wantTerm {
			t.Errorf("entry %d has term %d", i, term)
		}
	}
	if got := jobsAt(t, l, 20); !bytes.Equal(got, want.jobs) {
		t.Error("the jobs at the commit index differ after reopening")
	}
	l.Append([]*pb.Entry{entry(31, 2, full(500, 1))})
	awaitDurable(t, l)
	if e := mustEntries(t, l, 31, 32); len(e) != 1 || e[0].GetTerm() != 2 {
		t.Errorf("appended after reopening: %v", e)
	}
}

// TestWALLogEntriesReadBack: entries the cache no longer holds are read
// back from their segments, with raft's size limits; a damaged one is an
// error, not another entry.
func TestWALLogEntriesReadBack(t *testing.T) {
	cfg := testWALConfig(t.TempDir(), []uint64{1}, 0)
	cfg.CacheBytes = 1 // nothing stays once durable
	l := openWAL(t, cfg)
	var sizes []uint64
	for i := uint64(2); i <= 20; i++ {
		e := entry(i, 1, full(i, uint32(i)))
		sizes = append(sizes, uint64(proto.Size(e)))
		l.Append([]*pb.Entry{e})
		awaitDurable(t, l)
	}
	l.Append(nil) // evicts what is durable
	got, err := l.Entries(2, 21, sizes[0]+sizes[1])
	if err != nil || len(got) != 2 || got[1].GetIndex() != 3 {
		t.Fatalf("entries within two entries' size: %d, %v", len(got), err)
	}
	got, err = l.Entries(5, 6, 0)
	records, _ := wal.DecodeFrames(nil, got[0].GetData())
	if err != nil || len(got) != 1 || len(records) != 1 || records[0].Pri != 5 {
		t.Fatalf("entry 5 read back: %v, %v", got, err)
	}
	if _, err := l.Entries(21, 22, math.MaxUint64); !errors.Is(err, raft.ErrUnavailable) {
		t.Errorf("an entry past the last: %v", err)
	}
}

// TestWALLogIdentity: a directory is one member's of one cluster: opened
// as another member, or by another cluster, it is refused in one line
// that names no flag, with what the binary needs to say how to start it.
func TestWALLogIdentity(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1, 2, 3}, 0)
	l := openWAL(t, cfg)
	commit(l, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, cfg WALConfig, says string, sameName bool) {
		t.Helper()
		_, err := OpenWALLog(cfg)
		var fe *ForeignLogError
		if !errors.As(err, &fe) || fe.SameName() != sameName || fe.Dir != dir {
			t.Fatalf("%s on the directory: %v, want a ForeignLogError of %s (same name %v)", what, err, dir, sameName)
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || strings.Contains(msg, "--") || !strings.Contains(msg, says) {
			t.Errorf("%s on the directory: %q, want one line saying %q and naming no flag", what, msg, says)
		}
	}
	other := cfg
	other.ClusterID = 0xc2
	refused("the same member of another cluster", other, "cluster c1", true)
	other.Name = "m9"
	refused("another cluster's member", other, "cluster c1", false)
	other = testWALConfig(dir, []uint64{2, 1, 3}, 0)
	other.ClusterID = cfg.ClusterID
	refused("another member", other, "member m1", false)
	openWAL(t, cfg) // and its own member still opens it
}

// TestWALLogTakesOverASingleNode: a single node's directory becomes the
// log of a cluster of one, its jobs the head of a snapshot at index 1,
// and ids go on above the highest it issued; a cluster of three refuses
// it, in one line.
func TestWALLogTakesOverASingleNode(t *testing.T) {
	dir := t.TempDir()
	single, err := wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := single.Start(nil); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		r := full(id, uint32(id))
		if _, _, err := single.Append(&r, wal.Loc{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := single.Append(&wal.Record{Kind: wal.KindDelete, ID: 2}, wal.Loc{Seg: 1}); err != nil {
		t.Fatal(err)
	}
	if err := single.Close(); err != nil {
		t.Fatal(err)
	}

	leftover, err := os.ReadFile(filepath.Join(dir, segment.SegmentName(1)))
	if err != nil {
		t.Fatal(err)
	}

	if _, err := OpenWALLog(testWALConfig(dir, []uint64{1, 2, 3}, 0)); !errors.Is(err, ErrSingleNodeLog) ||
		strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "--") {
		t.Fatalf("a cluster of three on a single node's directory: %v, want ErrSingleNodeLog in one line naming no flag", err)
	}
	l := openWAL(t, testWALConfig(dir, []uint64{1}, 0))
	if first, _ := l.FirstIndex(); first != 2 {
		t.Errorf("first index %d, want 2 as every initial member", first)
	}
	if ids, top := headJobs(t, l); !slices.Equal(ids, []uint64{1, 3}) || top < 3 {
		t.Errorf("head jobs %v, ids up to %d: want jobs 1 and 3 and the id watermark", ids, top)
	}
	if _, err := os.Stat(filepath.Join(dir, segment.SegmentName(1))); !os.IsNotExist(err) {
		t.Errorf("the single node's segment is still there: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := wal.Open(dir, wal.Options{}); !errors.Is(err, wal.ErrClusterLog) ||
		strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "--") {
		t.Fatalf("a single node on the member's directory: %v, want ErrClusterLog in one line naming no flag", err)
	}

	// A conversion that stopped once its segment was in place left the
	// single node's segment: it goes, and the member's log is as it was.
	if err := os.WriteFile(filepath.Join(dir, segment.SegmentName(1)), leftover, 0o600); err != nil {
		t.Fatal(err)
	}
	l = openWAL(t, testWALConfig(dir, []uint64{1}, 0))
	if ids, top := headJobs(t, l); !slices.Equal(ids, []uint64{1, 3}) || top < 3 {
		t.Errorf("head jobs %v, ids up to %d after the leftover: want jobs 1 and 3 and the id watermark", ids, top)
	}
	if _, err := os.Stat(filepath.Join(dir, segment.SegmentName(1))); !os.IsNotExist(err) {
		t.Errorf("the conversion's leftover is still there: %v", err)
	}
}

// headJobs is the ids of the jobs in l's head, each of which must be in a
// segment, and the highest id it names.
func headJobs(t *testing.T, l *WALLog) (ids []uint64, top uint64) {
	t.Helper()
	err := l.ReadHead(func(records []wal.Record, locs []wal.Loc) error {
		for i, r := range records {
			top = max(top, r.ID)
			if r.Kind != wal.KindFull {
				continue
			}
			ids = append(ids, r.ID)
			if locs[i].Seg == 0 {
				t.Errorf("the head's job %d is in no segment", r.ID)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the head: %v", err)
	}
	return ids, top
}

// fakeBinlog is an Importer of a foreign log made of one file.
type fakeBinlog struct{ jobs []wal.Record }

func (b fakeBinlog) Files(dir string) ([]string, error) {
	path := filepath.Join(dir, "binlog.1")
	if _, err := os.Stat(path); err != nil {
		return nil, nil
	}
	return []string{path}, nil
}

func (b fakeBinlog) Read(string, int) ([]wal.Record, uint64, error) { return b.jobs, 50, nil }

// TestWALLogTakesOverABinlog: a beanstalkd binlog is imported, as a single
// node imports it, and its jobs and highest id become the head of the
// cluster's log; the binlog is gone, and one segment is left.
func TestWALLogTakesOverABinlog(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "binlog.1"), []byte("beanstalkd"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testWALConfig(dir, []uint64{1}, 0)
	cfg.Wal.Importer = fakeBinlog{jobs: []wal.Record{
		{ID: 7, Tube: "t", State: wal.StateReady, Body: []byte("seven\r\n")},
		{ID: 9, Tube: "t", State: wal.StateBuried, Body: []byte("nine\r\n")},
	}}
	l := openWAL(t, cfg)
	if ids, top := headJobs(t, l); !slices.Equal(ids, []uint64{7, 9}) || top < 50 {
		t.Errorf("head jobs %v, ids up to %d: want jobs 7 and 9 and the id watermark 50", ids, top)
	}
	if _, err := os.Stat(filepath.Join(dir, "binlog.1")); !os.IsNotExist(err) {
		t.Errorf("the binlog is still there: %v", err)
	}
	if l.Stats().OldestIndex != 2 {
		t.Errorf("segments from %d: want the binlog's import gone, the member's from 2", l.Stats().OldestIndex)
	}
}

// diffJobs says how the jobs in got's frames differ from want's.
func diffJobs(got, want []byte) string {
	g, _ := wal.DecodeFrames(nil, got)
	w, _ := wal.DecodeFrames(nil, want)
	gm, wm := map[uint64]wal.Record{}, map[uint64]wal.Record{}
	for _, r := range g {
		gm[r.ID] = r
	}
	for _, r := range w {
		wm[r.ID] = r
	}
	var out []string
	for id, r := range wm {
		if x, ok := gm[id]; !ok {
			out = append(out, fmt.Sprintf("job %d missing", id))
		} else if x.Pri != r.Pri || x.State != r.State {
			out = append(out, fmt.Sprintf("job %d: pri %d, want %d", id, x.Pri, r.Pri))
		}
	}
	for id := range gm {
		if _, ok := wm[id]; !ok {
			out = append(out, fmt.Sprintf("job %d should be gone", id))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// syncCounter counts a wal's fsyncs and batches.
type syncCounter struct {
	mu             sync.Mutex
	syncs, batches int
}

func (o *syncCounter) ObserveBatch(int, int) { o.mu.Lock(); o.batches++; o.mu.Unlock() }
func (o *syncCounter) ObserveSync(time.Duration) {
	o.mu.Lock()
	o.syncs++
	o.mu.Unlock()
}

func (o *syncCounter) counts() (syncs, batches int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.syncs, o.batches
}

// TestWALLogGroupCommit: a member's writes are durable only once fsynced,
// whatever the single node's sync policy says (-F here), and the writes
// made while an fsync runs share the next one: many appends, few fsyncs.
func TestWALLogGroupCommit(t *testing.T) {
	cfg := testWALConfig(t.TempDir(), []uint64{1}, 0)
	obs := &syncCounter{}
	cfg.Wal.NoSync, cfg.Wal.SyncEvery, cfg.Wal.Observer = true, time.Hour, obs
	l := openWAL(t, cfg)
	const n = 300
	durable := make(chan int, n)
	for i := range n {
		index := uint64(i + 2)
		l.Append([]*pb.Entry{entry(index, 1, full(index, 1))})
		l.SetHardState(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(index)})
		l.OnDurable(func() {
			if syncs, _ := obs.counts(); syncs == 0 {
				t.Errorf("write %d durable before any fsync", i)
			}
			durable <- i
		})
	}
	// Each write is reported once. Not necessarily in order: a callback
	// asked for once its write is durable runs at once, on the caller's
	// goroutine, while the writer may still be running earlier ones that
	// the same fsync released (the node keeps the highest reported).
	seen := make(map[int]bool)
	for range n {
		select {
		case got := <-durable:
			if seen[got] {
				t.Fatalf("write %d reported durable twice", got)
			}
			seen[got] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d writes of %d not durable within 10 s", n-len(seen), n)
		}
	}
	syncs, batches := obs.counts()
	t.Logf("%d appends and hard states: %d batches written, %d fsyncs", n, batches, syncs)
	if syncs > n/3 {
		t.Errorf("%d fsyncs for %d appends: they did not share fsyncs", syncs, n)
	}
}

// TestWALLogCommitNeedsNoFsync: a hard state that only raises the commit
// index (raft.MustSync) is written without an fsync of its own: OnDurable
// after it waits for nothing more, and the next append's fsync covers
// it; a new term is fsynced. Close leaves the last commit on disk.
func TestWALLogCommitNeedsNoFsync(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1}, 0)
	obs := &syncCounter{}
	cfg.Wal.Observer = obs
	l := openWAL(t, cfg)
	// durable waits for OnDurable and returns the fsyncs made: the writer
	// observes an fsync before it publishes what the fsync made durable
	// (segment's writer: syncDone, then the core's), so the count is
	// settled once the callback runs.
	durable := func() int {
		t.Helper()
		awaitDurable(t, l)
		syncs, _ := obs.counts()
		return syncs
	}
	l.SetHardState(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(1))})
	l.Append([]*pb.Entry{entry(2, 1, full(1, 1))})
	base := durable()
	l.SetHardState(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(2))})
	if got := durable(); got != base {
		t.Errorf("a commit-only hard state took %d fsyncs, want none", got-base)
	}
	l.Append([]*pb.Entry{entry(3, 1, full(2, 2))})
	if got := durable(); got != base+1 {
		t.Errorf("the next append took %d fsyncs, want 1", got-base)
	}
	l.SetHardState(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(0)), Commit: new(uint64(3))})
	if got := durable(); got != base+2 {
		t.Errorf("a new term took %d fsyncs, want 1", got-base-1)
	}
	l.SetHardState(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(0)), Commit: new(uint64(3))})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openWAL(t, testWALConfig(dir, []uint64{1}, 0))
	hs, _, err := l.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetTerm() != 2 || hs.GetCommit() != 3 {
		t.Errorf("after Close: term %d commit %d, want 2 and 3", hs.GetTerm(), hs.GetCommit())
	}
}

// framesOf lists the frames of the log in dir, as replay finds them.
func framesOf(t testing.TB, dir string) []segment.Frame {
	t.Helper()
	d, err := segment.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var frames []segment.Frame
	w, err := segment.Open(d, segmentOptions(wal.Options{}), func(f segment.Frame) error {
		f.Payload = slices.Clone(f.Payload[:1])
		frames = append(frames, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return frames
}

// TestWALLogTornSnapshot: a crash that tore the hard state written after
// an installed snapshot leaves the snapshot installed and committed; one
// that tore the snapshot's own frames leaves the log as it was before.
func TestWALLogTornSnapshot(t *testing.T) {
	write := func(t *testing.T) (string, *pb.Snapshot) {
		dir := t.TempDir()
		l := openWAL(t, testWALConfig(dir, []uint64{1}, 0))
		l.Append([]*pb.Entry{entry(2, 1, full(1, 1)), entry(3, 1, full(2, 2))})
		commit(l, 3)
		awaitDurable(t, l)
		data, _ := foldRecords(nil, []*pb.Entry{entry(2, 1, full(7, 7)), entry(9, 2, full(8, 8))})
		snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
			Index: new(uint64(9)), Term: new(uint64(2)), ConfState: &pb.ConfState{Voters: []uint64{1}}}}
		installData(t, l, snap.GetMetadata(), data)
		l.SetHardState(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(0)), Commit: new(uint64(9))})
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return dir, snap
	}
	cut := func(t *testing.T, dir string, f segment.Frame, at int64) {
		// As a crash leaves it: the segment still written to, open.
		path := filepath.Join(dir, fmt.Sprintf("sprout.%08d.wal", f.Seg))
		segtest.LeaveOpen(t, path)
		if err := os.Truncate(path, f.Off+at); err != nil {
			t.Fatal(err)
		}
	}
	last := func(frames []segment.Frame, kind wal.Kind) segment.Frame {
		for i := len(frames) - 1; i >= 0; i-- {
			if wal.Kind(frames[i].Payload[0]) == kind {
				return frames[i]
			}
		}
		t.Fatalf("no frame of kind %d", kind)
		return segment.Frame{}
	}

	t.Run("hard state torn", func(t *testing.T) {
		dir, snap := write(t)
		cut(t, dir, last(framesOf(t, dir), kindHardState), 5)
		l := openWAL(t, testWALConfig(dir, []uint64{1}, 0))
		hs, _, _ := l.InitialState()
		first, _ := l.FirstIndex()
		if head := headOf(t, l); hs.GetCommit() != 9 || first != 10 || !bytes.Equal(head, snap.GetData()) {
			t.Errorf("commit %d, first index %d, head of %d bytes: want the snapshot at 9 installed", hs.GetCommit(), first, len(head))
		}
	})
	t.Run("snapshot torn", func(t *testing.T) {
		dir, _ := write(t)
		cut(t, dir, last(framesOf(t, dir), kindSnapshot), 5)
		l := openWAL(t, testWALConfig(dir, []uint64{1}, 0))
		hs, _, _ := l.InitialState()
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		if head := headOf(t, l); hs.GetCommit() != 3 || first != 2 || last != 3 || len(head) != 0 {
			t.Errorf("commit %d, entries %d to %d, head of %d bytes: want the log before the snapshot", hs.GetCommit(), first, last, len(head))
		}
	})
}

// TestWALLogIDFloorSurvivesRestarts: an id watermark whose entry was
// compacted and whose segment was removed after a restart still holds
// after the next one: the header of a segment begun after a restart
// covers the ids its predecessors named.
func TestWALLogIDFloorSurvivesRestarts(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1}, 0)
	l := openWAL(t, cfg)
	l.Append([]*pb.Entry{entry(2, 1, wal.Record{Kind: wal.KindIDs, ID: 1000}, full(1, 1))})
	commit(l, 2)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openWAL(t, cfg)
	l.Append([]*pb.Entry{entry(3, 1, full(1, 2))}) // job 1 rewritten: entry 2 holds nothing live
	commit(l, 3)
	l.Compact(3)
	awaitDurable(t, l)
	testproc.WaitFor(t, 10*time.Second, "the first segment removed", func() bool { return l.Stats().OldestIndex > 1 })
	if got := maxID(headOf(t, l)); got != 1000 {
		t.Fatalf("the head's watermark is %d once entry 2 is dropped, want 1000", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openWAL(t, cfg)
	if got := maxID(headOf(t, l)); got < 1000 {
		t.Errorf("after the second restart the head's watermark is %d: ids up to 1000 may be issued again", got)
	}
}

// TestWALLogDedupWindow: compaction keeps the entries whose time (their
// leading KindClock) is within store.DedupTTL of the latest folded, or of
// the wall clock less clockSkew, though they hold no live job: a store
// rebuilt from the log must have the request keys a resent request may
// come with (docs/design/shards.md 5.6). Entries without a clock go as
// before, and the window ends by the wall clock when the group goes idle.
func TestWALLogDedupWindow(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var wall atomic.Int64
	wall.Store(t0.UnixNano())
	cfg := testWALConfig(t.TempDir(), []uint64{1, 2, 3}, 0)
	cfg.Now = func() time.Time { return time.Unix(0, wall.Load()) }
	l := openWAL(t, cfg)
	at := func(i uint64) int64 { return t0.Add(time.Duration(i) * time.Second).UnixNano() }
	for i := uint64(2); i <= 21; i++ {
		key := wal.Req{Incarnation: 9, Number: i}
		put := full(i, 1)
		put.Req = key
		l.Append([]*pb.Entry{entry(i, 1,
			wal.Record{Kind: wal.KindClock, Time: at(i)},
			put,
			wal.Record{Kind: wal.KindDelete, ID: i, Req: wal.Req{Incarnation: 9, Number: 100 + i}})})
	}
	l.Append([]*pb.Entry{entry(22, 1, full(22, 1))}) // no clock: a release before's
	awaitDurable(t, l)
	commit(l, 22)
	first := func() uint64 {
		f, _ := l.FirstIndex()
		return f
	}

	wall.Store(at(21))
	l.Compact(22)
	// The latest entry time is 21 s, the wall clock less its skew 20 s:
	// entries of 11 s and before are past the window.
	if got := first(); got != 12 {
		t.Fatalf("compacted to first index %d, want 12: the entries of the last %v kept", got, store.DedupTTL)
	}
	keys := 0
	for _, e := range mustEntries(t, l, 12, 23) {
		_ = wal.ScanReqs(e.GetData(), func(r *wal.Record) {
			if !r.Req.IsZero() {
				keys++
			}
		})
	}
	if keys != 2*10 {
		t.Errorf("the entries kept hold %d request keys, want 20", keys)
	}

	wall.Store(at(40)) // idle since: the wall clock ends the window
	l.Compact(22)
	if got := first(); got != 22 {
		t.Errorf("idle past the window: first index %d, want 22 (only the live job's entry)", got)
	}
}

// TestWALLogSnapshotKeepsBook: the book that came with a snapshot (its
// Data, Core.Step's) is written in the snapshot's frame, so a log opened
// again after the install, before any SetMembership, has it: it had the
// book from before with the snapshot's index, and the entries that made
// the difference are never applied again.
func TestWALLogSnapshotKeepsBook(t *testing.T) {
	dir := t.TempDir()
	l := openWAL(t, testWALConfig(dir, []uint64{1}, 0))
	data, _ := foldRecords(nil, []*pb.Entry{entry(2, 1, full(7, 7))})
	md := &pb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(2)), ConfState: &pb.ConfState{Voters: []uint64{1}}}
	sink, err := l.ReceiveSnapshot(t.Context(), md)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range headChunks(data) {
		if err := sink.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Finish(); err != nil {
		t.Fatal(err)
	}
	book, _ := json.Marshal(Book{Index: 9, Version: 3, Draining: []uint64{9}})
	l.InstallSnapshot(&pb.Snapshot{Metadata: md, Data: book})
	sink.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openWAL(t, testWALConfig(dir, []uint64{1}, 0))
	if b := l.Membership(); b.Index != 9 || b.Version != 3 || !slices.Equal(b.Draining, []uint64{9}) {
		t.Errorf("the book after the install, opened again: %+v; want the snapshot's (index 9, version 3, draining 9)", b)
	}
}
