package replication

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// openShared opens a SharedLog, closed when the test ends.
func openShared(t testing.TB, cfg WALConfig) *SharedLog {
	t.Helper()
	s, err := OpenSharedLog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// attach attaches group g to s, a new member's of voters.
func attach(t testing.TB, s *SharedLog, g uint16, voters []uint64) *GroupLog {
	t.Helper()
	l, err := s.Attach(t.Context(), g, voters, false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// interleaved is group g's log on a SharedLog whose group 0 appends an
// entry before each of its appends, naming the same job id as the first
// entry's index: the groups' frames interleave in the segments, and the
// same ids are each group's own items.
type interleaved struct {
	*GroupLog
	zero *GroupLog
}

func (l *interleaved) Append(ents []*pb.Entry) {
	if len(ents) > 0 {
		last, _ := l.zero.LastIndex()
		l.zero.Append([]*pb.Entry{entry(last+1, 1, full(ents[0].GetIndex(), 1))})
	}
	l.GroupLog.Append(ents)
}

// openGroup is group g's log on a SharedLog of cfg's, closed when the
// test ends, interleaved with group 0's writes.
func openGroup(t testing.TB, cfg WALConfig, g uint16) Log {
	s := openShared(t, cfg)
	return &interleaved{GroupLog: attach(t, s, g, cfg.Voters), zero: s.Group(0)}
}

// segmentVersions are the versions of dir's segments' headers, by
// segment; a spare still being made has no header yet and is left out.
func segmentVersions(t testing.TB, dir string) map[uint32]uint32 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "sprout.*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]uint32{}
	for _, name := range names {
		var seq uint32
		if _, err := fmt.Sscanf(filepath.Base(name), "sprout.%08d.wal", &seq); err != nil {
			t.Fatal(err)
		}
		v, ok, err := segment.FileVersion(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // dropped since the listing: the log compacted
		}
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out[seq] = v
		}
	}
	return out
}

// TestSharedLogVersions: a member holding group 0 alone writes version 2
// segments; attaching a second group moves appends to a version 3 segment
// at once, and every segment after it is of version 3, also after a
// restart with group 0 alone attached; a version 2 release refuses the
// directory (segment.VersionError, as TestSetVersion shows a version 2
// reader does).
func TestSharedLogVersions(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1}, 0)
	cfg.Wal.SegmentSize = 4 << 10
	s := openShared(t, cfg)
	zero := s.Group(0)
	zero.Append([]*pb.Entry{entry(2, 1, full(1, 1))})
	awaitDurable(t, zero)
	for seq, v := range segmentVersions(t, dir) {
		if v != segment.VersionRaftLog {
			t.Fatalf("group 0 alone: segment %d of version %d", seq, v)
		}
	}
	before := zero.Locate(2)
	one := attach(t, s, 1, []uint64{1})
	one.Append([]*pb.Entry{entry(2, 1, full(1, 1))})
	zero.Append([]*pb.Entry{entry(3, 1, full(2, 1))})
	awaitDurable(t, one)
	awaitDurable(t, zero)
	switched := one.Locate(2)
	if switched <= before || zero.Locate(3) != switched {
		t.Fatalf("group 1's first entry in segment %d, group 0's next in %d, after %d", switched, zero.Locate(3), before)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openShared(t, cfg)
	zero = s.Group(0)
	if got := s.Groups(); len(got) != 2 || got[1] != 1 {
		t.Fatalf("reopened holding groups %v", got)
	}
	// A few segments more, group 0 alone writing: 20 entries fill three
	// of 4 KiB, but a spare made late (a starved machine) lets a segment
	// run past its size, so on until two rotations, 200 entries at most.
	last := uint32(0)
	for i := 0; i < 200 && last <= switched+1; i++ {
		r := full(uint64(3+i), 1)
		r.Body = bytes.Repeat([]byte("b"), 600)
		zero.Append([]*pb.Entry{entry(uint64(4+i), 1, r)})
		awaitDurable(t, zero)
		last = zero.Locate(uint64(4 + i))
	}
	if last <= switched+1 {
		t.Fatalf("group 0's last entry in segment %d: no rotation since %d", last, switched)
	}
	for seq, v := range segmentVersions(t, dir) {
		if want := segment.VersionMultiRaft; seq >= switched && v != want || seq < before+1 && v != segment.VersionRaftLog {
			t.Errorf("segment %d of version %d (the switch at %d)", seq, v, switched)
		}
	}
}

// TestSharedLogV2Directory: a directory a release before the shared log
// wrote (testdata/v2log: group 0's entries 2 to 45, commit 42, written by
// OpenWALLog at 2bf40a8) opens as group 0's, whole; a second group then
// attached writes on in version 3 segments, and a restart finds both.
func TestSharedLogV2Directory(t *testing.T) {
	dir := t.TempDir()
	copySegments(t, "testdata/v2log", dir)
	cfg := testWALConfig(dir, []uint64{1, 2, 3}, 0)
	cfg.Wal.SegmentSize = 4 << 10
	whole := NewMemoryLog([]uint64{1, 2, 3}, 1<<20)
	whole.Append(v2Entries())
	check := func(zero Log) {
		t.Helper()
		hs, cs, _ := zero.InitialState()
		if hs.GetTerm() != 2 || hs.GetVote() != 2 || hs.GetCommit() != 42 || len(cs.GetVoters()) != 3 {
			t.Fatalf("group 0 opened with %v %v", hs, cs)
		}
		first, _ := zero.FirstIndex()
		last, _ := zero.LastIndex()
		if first > 3 || last != 45 {
			t.Fatalf("group 0 holds %d to %d", first, last)
		}
		for i := first; i <= last; i++ {
			got, _ := zero.Term(i)
			want, _ := whole.Term(i)
			if got != want {
				t.Fatalf("entry %d of term %d, want %d", i, got, want)
			}
		}
		if got, want := jobsAt(t, zero, 42), jobsAt(t, whole, 42); !bytes.Equal(got, want) {
			t.Fatalf("group 0's jobs at 42:\n%s", diffJobs(got, want))
		}
	}
	s := openShared(t, cfg)
	check(s.Group(0))
	one := attach(t, s, 1, []uint64{1, 2, 3})
	one.Append([]*pb.Entry{entry(2, 1, full(1, 1))})
	one.SetHardState(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(0)), Commit: new(uint64(2))})
	awaitDurable(t, one)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openShared(t, cfg)
	check(s.Group(0))
	one = s.Group(1)
	if one == nil {
		t.Fatal("group 1 not found after a restart")
	}
	if got, want := jobsAt(t, one, 2), withoutIDs(wal.AppendFrame(nil, new(full(1, 1)))); !bytes.Equal(got, want) {
		t.Fatalf("group 1's jobs:\n%s", diffJobs(got, want))
	}
}

// v2Entries is what testdata/v2log holds (made by TestGenV2 in a copy of
// this package at 2bf40a8, this function and all): entries 2 to 40 of
// term 1 and 41 to 45 of term 2, each a put of job i, every third
// deleting job i-2; then a hard state of term 2, vote 2, commit 42, and
// compaction to 20.
func v2Entries() []*pb.Entry {
	var ents []*pb.Entry
	for i := uint64(2); i <= 45; i++ {
		term := uint64(1)
		if i > 40 {
			term = 2
		}
		recs := []wal.Record{full(i, uint32(i))}
		if i%3 == 0 {
			recs = append(recs, wal.Record{Kind: wal.KindDelete, ID: i - 2})
		}
		ents = append(ents, entry(i, term, recs...))
	}
	return ents
}

// checkedMigrator is a group's logSim as its log's Migrator, checking that
// every job it is asked to move is one of its group's: ids from base on.
type checkedMigrator struct {
	t    testing.TB
	sim  *logSim
	base uint64
}

func (m checkedMigrator) Migrate(seg uint32, ids []uint64) {
	for _, id := range ids {
		if id <= m.base || id > m.base+1<<30 {
			m.t.Errorf("asked to move job %x, of another group than the one of jobs from %x", id, m.base)
		}
	}
	m.sim.Migrate(seg, ids)
}

// TestSharedLogCrash: three groups (0, 1 and 2) play raft and a leader's
// store on one SharedLog, in turns at random; the directory is copied as
// a crash leaves it, time after time, and each copy opens with
// everything each group had durable (its hard state, and the jobs of its
// committed entries), each group's entries its own; the log restarts on
// its directory now and then, and goes on; compaction removes segments
// throughout, each group asked to move its own jobs alone.
func TestSharedLogCrash(t *testing.T) {
	groups := []uint16{0, 1, 2}
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testWALConfig(dir, []uint64{1}, 0)
			cfg.Wal.SegmentSize = 8 << 10
			s := openShared(t, cfg)
			sims := make([]*logSim, len(groups))
			for i, g := range groups {
				sims[i] = newLogSim(t, seed*10+uint64(g), &WALLog{GroupLog: attach(t, s, g, []uint64{1})})
				base := uint64(g) << 40
				sims[i].nextID, sims[i].idMark = base, base
				sims[i].l.SetMigrator(checkedMigrator{t, sims[i], base})
			}
			reopen := func(s *SharedLog) {
				for i, g := range groups {
					sims[i].l = &WALLog{GroupLog: s.Group(g)}
					sims[i].l.SetMigrator(checkedMigrator{t, sims[i], uint64(g) << 40})
				}
			}
			rng := sims[0].rng
			for round := range 9 {
				for range 120 {
					sims[rng.IntN(len(sims))].step()
				}
				durable := make([]*pb.HardState, len(sims))
				for i, sim := range sims {
					awaitDurable(t, sim.l)
					durable[i] = sim.synced
				}
				for range 1 + rng.IntN(30) {
					sims[rng.IntN(len(sims))].step()
				}
				crashed := openShared(t, testWALConfig(copyLog(t, dir), []uint64{1}, 0))
				for i, g := range groups {
					sims[i].check(&WALLog{GroupLog: crashed.Group(g)}, durable[i])
				}
				if err := crashed.Close(); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if round%3 == 2 {
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = openShared(t, cfg)
					reopen(s)
				}
			}
			final := make([]*pb.HardState, len(sims))
			for i, sim := range sims {
				final[i], _, _ = sim.l.InitialState()
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openShared(t, cfg)
			for i, g := range groups {
				sims[i].check(&WALLog{GroupLog: s.Group(g)}, final[i])
			}
			st := s.Stats()
			if st.OldestIndex < 3 {
				t.Errorf("the oldest segment is %d: compaction removed none", st.OldestIndex)
			}
			t.Logf("segments %d to %d, %d bytes on disk, %d live", st.OldestIndex, st.CurrentIndex, st.DiskBytes, st.LiveBytes)
		})
	}
}

// TestSharedLogCrashUnsyncedCommit: what the crash tests take for durable
// once OnDurable has fired is the hard state of the group's last write
// that asks for an fsync (logSim.synced), not its latest one: a hard
// state that only raises the commit index is written unsynced, so while
// the writer is busy (here held in the callback that published the
// append's fsync) a crash copy opens without it; the next write that asks
// for an fsync, of this group or another's, covers it.
func TestSharedLogCrashUnsyncedCommit(t *testing.T) {
	dir := t.TempDir()
	s := openShared(t, testWALConfig(dir, []uint64{1}, 0))
	one := attach(t, s, 1, []uint64{1})
	sim := newLogSim(t, 1, &WALLog{GroupLog: s.Group(0)})
	sim.setHardState() // its first term: synced
	release := make(chan struct{})
	releaseWriter := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseWriter) // before the log's Close
	held := make(chan struct{})
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			t.Fatal("every append was durable before its callback was set: the writer was never held")
		}
		sim.append(sim.entries(sim.last()+1, 2))
		// 0: set; 1: the test goes on, and the callback, on the writer,
		// holds it; 2: it ran first (perhaps on this goroutine), and holds
		// nothing.
		var state atomic.Int32
		sim.l.OnDurable(func() {
			if state.CompareAndSwap(0, 2) {
				return
			}
			close(held)
			<-release
		})
		if state.CompareAndSwap(0, 1) {
			break
		}
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the append not durable within 10 s")
	}
	sim.commit = sim.last()
	sim.setHardState() // the same term: unsynced, and the writer is held
	awaitDurable(t, sim.l)
	latest, _, _ := sim.l.InitialState()
	if sim.synced.GetCommit() >= latest.GetCommit() {
		t.Fatalf("synced %v, latest %v: the commit was meant to be raised unsynced", sim.synced, latest)
	}
	crash := func() *SharedLog {
		t.Helper()
		crashed := openShared(t, testWALConfig(copyLog(t, dir), []uint64{1}, 0))
		sim.check(&WALLog{GroupLog: crashed.Group(0)}, sim.synced)
		return crashed
	}
	crashed := crash()
	if hs, _, _ := crashed.Group(0).InitialState(); hs.GetCommit() >= latest.GetCommit() {
		t.Fatalf("a copy while the writer was held has commit %d: it was meant to be unwritten", hs.GetCommit())
	}
	if err := crashed.Close(); err != nil {
		t.Fatal(err)
	}
	releaseWriter()
	// Group 1's append asks for an fsync, which covers group 0's commit.
	one.Append([]*pb.Entry{entry(2, 1, full(1<<40|1, 1))})
	awaitDurable(t, one)
	sim.synced = latest
	crash()
}

// TestSharedLogGroupCommit: groups appending at once share the writer's
// batches and fsyncs: far fewer fsyncs than appends, and each group's
// OnDurable runs once an fsync covered its appends.
func TestSharedLogGroupCommit(t *testing.T) {
	cfg := testWALConfig(t.TempDir(), []uint64{1}, 0)
	obs := &syncCounter{}
	cfg.Wal.Observer = obs
	s := openShared(t, cfg)
	logs := []*GroupLog{s.Group(0), attach(t, s, 1, []uint64{1}), attach(t, s, 2, []uint64{1})}
	for _, l := range logs {
		awaitDurable(t, l)
	}
	syncs0, batches0 := obs.counts()
	const n = 200
	var wg sync.WaitGroup
	for _, l := range logs {
		wg.Go(func() {
			for i := range uint64(n) {
				index := i + 2
				l.Append([]*pb.Entry{entry(index, 1, full(index, 1))})
				l.SetHardState(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(index)})
			}
			done := make(chan struct{})
			l.OnDurable(func() {
				if syncs, _ := obs.counts(); syncs == syncs0 {
					t.Errorf("group %d's appends durable before an fsync", l.Group())
				}
				close(done)
			})
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("group %d's appends not durable", l.Group())
			}
		})
	}
	wg.Wait()
	syncs, batches := obs.counts()
	syncs, batches = syncs-syncs0, batches-batches0
	t.Logf("%d groups' %d appends and hard states each: %d batches, %d fsyncs", len(logs), n, batches, syncs)
	if syncs > len(logs)*n/3 {
		t.Errorf("%d fsyncs for %d appends: they did not share fsyncs", syncs, len(logs)*n)
	}
	for _, l := range logs {
		if last, _ := l.LastIndex(); last != n+1 {
			t.Errorf("group %d holds entries to %d", l.Group(), last)
		}
	}
}

// gatedObserver counts fsyncs, and holds the writer in ObserveBatch while
// the test holds gate, saying so on entered.
type gatedObserver struct {
	syncCounter
	gate    sync.Mutex
	entered chan struct{}
}

func (o *gatedObserver) ObserveBatch(bytes, records int) {
	select {
	case o.entered <- struct{}{}:
	default:
	}
	o.gate.Lock()
	defer o.gate.Unlock()
	o.syncCounter.ObserveBatch(bytes, records)
}

// TestSharedLogOneFsyncTwoGroups: the appends of two groups made while
// the writer is busy go into one batch, and one fsync makes both durable.
// The writer is held after writing group 0's append; groups 1 and 2
// append meanwhile; each group's OnDurable sees the fsyncs done so far,
// and groups 1 and 2 see the same count, one more than group 0's at
// least.
func TestSharedLogOneFsyncTwoGroups(t *testing.T) {
	cfg := testWALConfig(t.TempDir(), []uint64{1}, 0)
	obs := &gatedObserver{entered: make(chan struct{}, 1)}
	cfg.Wal.Observer = obs
	s := openShared(t, cfg)
	logs := []*GroupLog{s.Group(0), attach(t, s, 1, []uint64{1}), attach(t, s, 2, []uint64{1})}
	for _, l := range logs {
		awaitDurable(t, l)
	}
	seen := make([]chan int, len(logs))
	durable := func(i int) {
		seen[i] = make(chan int, 1)
		logs[i].OnDurable(func() { syncs, _ := obs.counts(); seen[i] <- syncs })
	}
	before, _ := obs.counts()
	obs.gate.Lock()
	select {
	case <-obs.entered: // left by the batches above
	default:
	}
	logs[0].Append([]*pb.Entry{entry(2, 1, full(1, 1))})
	durable(0)
	// The writer takes group 0's append and is held once it wrote it:
	// nothing of group 0's is pending any more.
	select {
	case <-obs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("group 0's append not written")
	}
	logs[1].Append([]*pb.Entry{entry(2, 1, full(1, 1))})
	logs[2].Append([]*pb.Entry{entry(2, 1, full(1, 1))})
	durable(1)
	durable(2)
	obs.gate.Unlock()
	var got [3]int
	for i := range seen {
		select {
		case got[i] = <-seen[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("group %d's append not durable", i)
		}
	}
	if got[1] != got[2] || got[0] <= before || got[1] < got[0] {
		t.Errorf("fsyncs done when each group's append was durable: %v (%d before): groups 1 and 2 should share one", got, before)
	}
	t.Logf("fsyncs done when each group's append was durable: %v (%d before)", got, before)
}

// TestSharedLogDrop: a group dropped is gone after a restart: its index,
// its jobs (no longer live: the segments holding them go once the other
// groups' do not hold them) and its hold; the other groups keep theirs.
// A dropped group's log refuses writes.
func TestSharedLogDrop(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1}, 0)
	cfg.Wal.SegmentSize = 4 << 10
	s := openShared(t, cfg)
	zero, one := s.Group(0), attach(t, s, 1, []uint64{1})
	body := wal.Record{Kind: wal.KindFull, ID: 1, Tube: "t", State: wal.StateReady, Body: bytes.Repeat([]byte("b"), 1000)}
	for i := uint64(2); i < 10; i++ {
		r := body
		r.ID = i
		one.Append([]*pb.Entry{entry(i, 1, r)})
		awaitDurable(t, one)
	}
	lastOne := one.Locate(9)
	commit(one, 9)
	one.Compact(9)
	// Group 0's job goes into a segment after group 1's (a segment
	// outgrows its size while the next is being made, so without this
	// they may share one, which that job then keeps): group 0 writes
	// records of no job until its log has moved on.
	at := uint64(2)
	for ; ; at++ {
		zero.Append([]*pb.Entry{entry(at, 1, wal.Record{Kind: wal.KindIDs, ID: at})})
		awaitDurable(t, zero)
		if zero.Locate(at) > lastOne {
			break
		}
		if at > 500 {
			t.Fatalf("group 0's log is still in segment %d after %d writes", lastOne, at)
		}
	}
	at++
	zero.Append([]*pb.Entry{entry(at, 1, full(1, 1))})
	commit(zero, at)
	zero.Compact(at)
	awaitDurable(t, zero)
	liveBefore, firstOne := s.Stats().LiveBytes, one.Locate(2)
	if err := s.Drop(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Drop(1); err == nil {
		t.Error("a group dropped twice")
	}
	if err := s.Drop(0); err == nil {
		t.Error("group 0 dropped")
	}
	if live := s.Stats().LiveBytes; live >= liveBefore || live <= 0 {
		t.Errorf("live bytes %d after the drop, %d before: group 1's jobs still counted, or group 0's not", live, liveBefore)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a dropped group's log took an append")
			}
		}()
		one.Append([]*pb.Entry{entry(10, 1, full(10, 1))})
	}()
	// Group 0 alone, on past the segments group 1 wrote, until compaction
	// has removed them: removal follows an fsync and a later step of the
	// writer, which on a loaded machine may come some writes later.
	last := at
	for i := at + 1; i < at+30 || s.Stats().OldestIndex <= firstOne && i < at+500; i++ {
		zero.Append([]*pb.Entry{entry(i, 1, wal.Record{Kind: wal.KindIDs, ID: i})})
		commit(zero, i)
		zero.Compact(i)
		awaitDurable(t, zero)
		last = i
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openShared(t, cfg)
	if got := s.Groups(); len(got) != 1 || got[0] != 0 || s.Group(1) != nil {
		t.Fatalf("groups after the drop and a restart: %v", got)
	}
	if got, want := jobsAt(t, s.Group(0), last), withoutIDs(wal.AppendFrame(nil, new(full(1, 1)))); !bytes.Equal(got, want) {
		t.Errorf("group 0's jobs:\n%s", diffJobs(got, want))
	}
	if st := s.Stats(); st.OldestIndex <= firstOne {
		t.Errorf("segments from %d kept; group 1's jobs were in %d", st.OldestIndex, firstOne)
	}
	hs, _, _ := s.Group(0).InitialState()
	if !proto.Equal(hs, &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(last)}) {
		t.Errorf("group 0's hard state after a restart: %v", hs)
	}
}

// TestSharedLogHost: three members run group 0 and group 1, each member
// both groups' logs on the one SharedLog of its directory (version 3
// segments, no other directory). Both groups acknowledge; a member
// restarted finds both groups in its directory and catches up in each;
// then every member restarts at once, so that each group's jobs can only
// come from the members' directories, and both groups hold every job
// they acknowledged.
func TestSharedLogHost(t *testing.T) {
	c := newWALCluster(t, 3, 64<<10, nil)
	var ids []uint64
	for _, m := range c.peers {
		ids = append(ids, m.ID)
	}
	g1 := map[string]*Node{}
	startOne := func(name string) {
		l, err := c.wals[name].Shared().Attach(t.Context(), 1, ids, false)
		if err != nil {
			t.Fatal(err)
		}
		g1[name] = startGroup(t, c, 1, name, l)
	}
	for _, m := range c.peers {
		startOne(m.Name)
	}
	acked := [2]map[uint64]string{{}, {}}
	puts := func(n int, what string) {
		t.Helper()
		l0 := c.awaitServing(10 * time.Second)
		l1 := c.awaitServing(10*time.Second, groupUp(g1)...)
		for g, l := range []*Node{l0, l1} {
			for i := range n {
				body := fmt.Sprintf("group %d %s %d", g, what, i)
				id, pos := newNetClient(l, "tube").put(body)
				awaitAck(t, l.Journal(), pos, 10*time.Second)
				acked[g][id] = body
			}
		}
	}
	// holds checks that every replica of group g holds exactly the jobs it
	// acknowledged.
	holds := func(g int, nodes []*Node) {
		t.Helper()
		for _, n := range nodes {
			testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("%s's group %d holding its jobs", n.Name(), g), func() bool {
				v := viewOf(n.Store())
				if len(v) != len(acked[g]) {
					return false
				}
				for id, body := range acked[g] {
					if v[id].body != body {
						return false
					}
				}
				return true
			})
		}
	}
	puts(30, "before")

	for name, dir := range c.dirs {
		vs := segmentVersions(t, dir)
		has3 := false
		for _, v := range vs {
			has3 = has3 || v == segment.VersionMultiRaft
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("%s's directory holds a directory, %s", name, e.Name())
			}
		}
		if !has3 {
			t.Errorf("%s's segments are of versions %v: none of 3", name, vs)
		}
	}

	// One member restarts: both groups from its one directory.
	down := c.peers[1].Name
	c.kill(down)
	delete(g1, down)
	puts(10, "while one is down")
	c.start(down, nil)
	if got := c.wals[down].Shared().Groups(); len(got) != 2 {
		t.Fatalf("%s restarted holding groups %v", down, got)
	}
	startOne(down)
	puts(10, "after one restarted")
	holds(0, c.up())
	holds(1, groupUp(g1))

	// Every member restarts at once.
	for _, m := range c.peers {
		c.kill(m.Name)
		delete(g1, m.Name)
	}
	for _, m := range c.peers {
		c.start(m.Name, nil)
		startOne(m.Name)
	}
	holds(0, c.up())
	holds(1, groupUp(g1))
	puts(5, "after every member restarted")
	holds(0, c.up())
	holds(1, groupUp(g1))
}

// TestSharedLogUnledGroupKeepsItsSegment: a group with no migrator here
// (no node runs it: a node's asks its leader, TestMigrateRequests) keeps
// a segment holding its live jobs until its leader's rewrites move them:
// nothing of it is lost, nor of the group that leads here and writes on.
// (Compaction removes the oldest segment first, so meanwhile the
// directory grows past its bound: the test logs by how much.)
func TestSharedLogUnledGroupKeepsItsSegment(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1}, 0)
	cfg.Wal.SegmentSize = 8 << 10
	s := openShared(t, cfg)
	one := attach(t, s, 1, []uint64{1})
	job := wal.Record{Kind: wal.KindFull, ID: 7, Tube: "t", State: wal.StateReady, Body: []byte("group 1's job\r\n")}
	one.Append([]*pb.Entry{entry(2, 1, job)})
	commit(one, 2)
	one.Compact(2)
	awaitDurable(t, one)
	pinned := one.Locate(2)
	sim := newLogSim(t, 1, &WALLog{GroupLog: s.Group(0)}) // group 0 leads here, and migrates
	for range 600 {
		sim.step()
	}
	awaitDurable(t, sim.l)
	durable, _, _ := sim.l.InitialState()
	st := s.Stats()
	t.Logf("segments %d to %d, %d bytes on disk, %d live; group 1's job in %d", st.OldestIndex, st.CurrentIndex, st.DiskBytes, st.LiveBytes, pinned)
	if st.OldestIndex > pinned || st.CurrentIndex < pinned+3 {
		t.Fatalf("segments %d to %d: group 1's job was in %d", st.OldestIndex, st.CurrentIndex, pinned)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openShared(t, cfg)
	sim.check(&WALLog{GroupLog: s.Group(0)}, durable)
	want := withoutIDs(wal.AppendFrame(nil, &job))
	if got := jobsAt(t, s.Group(1), 2); !bytes.Equal(got, want) {
		t.Fatalf("group 1's jobs after a restart:\n%s", diffJobs(got, want))
	}
}

// TestSharedLogIDFloors: each group's id floor is its own. Two groups
// whose ids are of their own prefixes (store.Options.IDPrefix: group g's
// from g<<45) put and delete jobs, then write entries naming no id until
// the segments that named theirs are removed; reopened, each group's head
// and entries name at least its highest id, and nothing of the other
// group's prefix.
func TestSharedLogIDFloors(t *testing.T) {
	cfg := testWALConfig(t.TempDir(), []uint64{1}, 0)
	cfg.Wal.SegmentSize = 4 << 10
	s := openShared(t, cfg)
	logs := []*GroupLog{s.Group(0), attach(t, s, 1, []uint64{1})}
	top, index := []uint64{0, 0}, []uint64{1, 1}
	write := func(g int, recs ...wal.Record) {
		index[g]++
		logs[g].Append([]*pb.Entry{entry(index[g], 1, recs...)})
		commit(logs[g], index[g])
		logs[g].Compact(index[g])
	}
	for i := range uint64(20) {
		for g := range logs {
			id := uint64(g)<<45 + i + 1
			r := full(id, 1)
			r.Body = bytes.Repeat([]byte("b"), 300)
			write(g, r)
			write(g, wal.Record{Kind: wal.KindDelete, ID: id})
			top[g] = id
		}
	}
	first := s.Stats().CurrentIndex
	for i := range 400 {
		write(i%2, wal.Record{Kind: wal.KindIDs})
		if i%50 == 0 {
			awaitDurable(t, logs[0])
		}
	}
	awaitDurable(t, logs[0])
	awaitDurable(t, logs[1])
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openShared(t, cfg)
	if st := s.Stats(); st.OldestIndex <= first {
		t.Fatalf("segments %d to %d: the ones up to %d, which named the jobs, not removed", st.OldestIndex, st.CurrentIndex, first)
	}
	for g := range logs {
		l := s.Group(uint16(g))
		got := maxID(headOf(t, l))
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		for _, e := range mustEntries(t, l, first, last+1) {
			got = max(got, maxID(e.GetData()))
		}
		if got < top[g] || got>>45 != uint64(g) {
			t.Errorf("group %d names ids up to %x after a restart; its own went to %x", g, got, top[g])
		}
	}
}

// TestSharedLogEntriesInSpans: entries the cache no longer holds are read
// back a run at a time (GroupLog.spanLocked), alone in the log or across
// another group's frames between them, and across segment ends, each the
// entry written, and none changed by a later read; a damaged frame within
// a run is an error, not an entry.
func TestSharedLogEntriesInSpans(t *testing.T) {
	for _, between := range []bool{false, true} {
		t.Run(fmt.Sprintf("between=%v", between), func(t *testing.T) {
			cfg := testWALConfig(t.TempDir(), []uint64{1}, 0)
			cfg.CacheBytes = 1 // nothing stays once durable
			s := openShared(t, cfg)
			g := attach(t, s, 1, cfg.Voters)
			var l Log = g
			if between {
				l = &interleaved{GroupLog: g, zero: s.Group(0)}
			}
			var want []*pb.Entry
			for i := uint64(2); i <= 61; i++ { // 1 is the group's first, its voters
				body := bytes.Repeat([]byte{byte('a' + i%26)}, int(i*37%700))
				e := entry(i, 1, wal.Record{Kind: wal.KindFull, ID: i, Tube: "t", State: wal.StateReady, Body: append(body, "\r\n"...)})
				want = append(want, e)
				l.Append([]*pb.Entry{e})
				awaitDurable(t, l)
			}
			g.mu.Lock()
			segs := map[uint32]bool{}
			for _, m := range g.ents[:len(g.ents)-1] { // the last stays: an append evicts
				segs[m.seg] = true
				if m.ent != nil {
					t.Fatal("an entry is still cached")
				}
			}
			g.mu.Unlock()
			if len(segs) < 2 {
				t.Fatalf("the entries are in %d segment, want several", len(segs))
			}
			got := append(mustEntries(t, l, 2, 32), mustEntries(t, l, 32, 62)...) // the second read may reuse the first's buffer
			if len(got) != len(want) {
				t.Fatalf("read back %d entries, want %d", len(got), len(want))
			}
			for i := range want {
				if !proto.Equal(got[i], want[i]) {
					t.Fatalf("entry %d read back differs from the one written", i+2)
				}
			}

			// A byte of entry 30's frame changed on disk: the run it is in fails.
			g.mu.Lock()
			m := g.ents[30-g.prevIndex-1]
			g.mu.Unlock()
			f, err := os.OpenFile(filepath.Join(cfg.Dir, segment.SegmentName(m.seg)), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			b := []byte{0}
			at := m.off + int64(m.size)/2
			if _, err := f.ReadAt(b, at); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0xff
			if _, err := f.WriteAt(b, at); err != nil {
				t.Fatal(err)
			}
			_ = f.Close()
			var damage *segment.DamageError
			if _, err := l.Entries(28, 33, math.MaxUint64); !errors.As(err, &damage) {
				t.Fatalf("entries over a damaged frame: %v, want a segment.DamageError", err)
			}
		})
	}
}

// TestSpanRuns: a run read at once (GroupLog.spanLocked) stops at a cached
// entry, another segment, a frame out of order, maxSpan, and where other
// groups' frames between its own would outweigh them (spanSlack).
func TestSpanRuns(t *testing.T) {
	const k = 1 << 10
	at := func(seg uint32, off int64, size int) entryMeta { return entryMeta{seg: seg, off: off, size: size} }
	cached := at(1, 3*k, k)
	cached.ent = &pb.Entry{}
	for _, c := range []struct {
		what string
		ents []entryMeta
		j    uint64 // the run from entry 1 ends before j
		end  int64
	}{
		{"back to back", []entryMeta{at(1, 0, k), at(1, k, k), at(1, 2*k, k)}, 4, 3 * k},
		{"a cached entry", []entryMeta{at(1, 0, k), at(1, k, k), cached}, 3, 2 * k},
		{"a cached first", []entryMeta{cached, at(1, 4*k, k)}, 2, 0},
		{"another segment", []entryMeta{at(1, 0, k), at(2, k, k)}, 2, k},
		{"out of order", []entryMeta{at(1, 4*k, k), at(1, 0, k)}, 2, 5 * k},
		{"a small gap", []entryMeta{at(1, 0, k), at(1, 10*k, k)}, 3, 11 * k},
		{"a gap past the run's own and the slack", []entryMeta{at(1, 0, k), at(1, k+spanSlack+3*k, k)}, 2, k},
		{"past maxSpan", []entryMeta{at(1, 0, maxSpan/2), at(1, maxSpan/2, maxSpan/2), at(1, maxSpan, k)}, 3, maxSpan},
	} {
		l := &GroupLog{ents: c.ents}
		if j, end, _ := l.spanLocked(1, uint64(len(c.ents))+1); j != c.j || end != c.end {
			t.Errorf("%s: the run ends before %d at %d, want %d at %d", c.what, j, end, c.j, c.end)
		}
	}
}

// TestIdleGroupKeepsItsBase: a group with nothing live that stops writing
// while another group writes on compacts every entry away (its last ones
// are older than the newest retainSegments segments); its log still
// begins where it did after a restart, every time, and it holds no more
// of the old segments than an active group would. Before the group
// marked its base (markBaseLocked) a restart replayed it as a new
// member's log: its acknowledged entries and commit index forgotten.
func TestIdleGroupKeepsItsBase(t *testing.T) {
	cfg := testWALConfig(t.TempDir(), []uint64{1}, 1024)
	cfg.Wal.SegmentSize = 4 << 10
	s := openShared(t, cfg)
	zero, idle := s.Group(0), attach(t, s, 1, []uint64{1})
	for i := uint64(2); i <= 21; i++ { // a put and its delete: nothing live
		r := wal.Record{Kind: wal.KindFull, ID: 1<<40 | i, Tube: "t", State: wal.StateReady, Body: []byte("b\r\n")}
		idle.Append([]*pb.Entry{entry(i, 1, r, wal.Record{Kind: wal.KindDelete, ID: 1<<40 | i})})
	}
	commit(idle, 21)
	awaitDurable(t, idle)
	next := uint64(2)
	busy := func(n int) { // group 0 writes; the idle group compacts at each tick, as a node does
		for range n {
			zero.Append([]*pb.Entry{entry(next, 1, wal.Record{Kind: wal.KindIDs, ID: next})})
			commit(zero, next)
			zero.Compact(next)
			if next%20 == 0 {
				s.Group(1).Compact(21)
			}
			awaitDurable(t, zero)
			next++
		}
	}
	restart := func(when string) {
		t.Helper()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openShared(t, cfg)
		zero = s.Group(0)
		l := s.Group(1)
		hs, _, _ := l.InitialState()
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		term, err := l.Term(21)
		if first != 22 || last != 21 || hs.GetCommit() != 21 || err != nil || term != 1 {
			t.Fatalf("%s: the idle group's log is %d..%d, commit %d, term of 21 %d (%v); want 22..21, commit 21, term 1",
				when, first, last, hs.GetCommit(), term, err)
		}
	}
	busy(400)
	if first, _ := s.Group(1).FirstIndex(); first != 22 {
		t.Fatalf("the idle group kept its entries from %d: the test compacts nothing", first)
	}
	restart("after its entries were compacted")
	busy(800) // its mark gets old, and is written again
	st := s.Group(1).Stats()
	if held := st.CurrentIndex - st.OldestIndex + 1; held > retainSegments+3 {
		t.Errorf("the log keeps segments %d..%d: the idle group's mark holds the old ones", st.OldestIndex, st.CurrentIndex)
	}
	restart("after its mark was written again")
}
