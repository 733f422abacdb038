package store

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// recordingJournal is a journal that keeps every record appended, in
// order, as a leader's log would hand them to Raft; everything is durable
// at once.
type recordingJournal struct {
	mu      sync.Mutex
	records []wal.Record
}

func (r *recordingJournal) Append(rec *wal.Record, prev wal.Loc) (uint64, wal.Loc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *rec
	c.Body = bytes.Clone(rec.Body)
	r.records = append(r.records, c)
	loc := wal.Loc{}
	if rec.Kind == wal.KindFull {
		loc = wal.Loc{Seg: 1, Size: 1}
	}
	return uint64(len(r.records)), loc, nil
}

func (r *recordingJournal) NoteMigrated()                 {}
func (r *recordingJournal) Recovered() []wal.Recovered    { return nil }
func (r *recordingJournal) LastID() uint64                { return 0 }
func (r *recordingJournal) Stats() wal.Stats              { return wal.Stats{} }
func (r *recordingJournal) Durable() uint64               { return ^uint64(0) }
func (r *recordingJournal) OnDurable(_ uint64, fn func()) { fn() }

// take hands over the records appended since the last take.
func (r *recordingJournal) take() []wal.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.records
	r.records = nil
	return out
}

// replicaView is what a replica must agree on with its leader about a job.
// A job the leader has reserved is ready on a replica, and its reserve and
// timeout counts are the ones last logged: reservations are not.
type replicaView struct {
	tube                 string
	state                State
	pri, delay, ttr      uint32
	buries, kicks, relea uint32
	reserves, timeouts   uint32
	deadlineWall         int64 // delayed jobs only
	body                 string
}

func viewOf(s *Store) map[uint64]replicaView {
	out := map[uint64]replicaView{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		var jobs []*Job
		sh.eachLocked(func(j *Job) { jobs = append(jobs, j) })
		sh.mu.RUnlock()
		for _, j := range jobs {
			j.tube.mu.Lock()
			v := replicaView{
				tube: j.tube.name, state: j.state, pri: j.pri, delay: j.delay, ttr: j.ttr,
				buries: j.counts.buries, kicks: j.counts.kicks, relea: j.counts.releases,
				reserves: j.counts.reserves, timeouts: j.counts.timeouts, body: string(j.Body()),
			}
			if j.state == StateDelayed {
				v.deadlineWall = s.wall(j.deadline)
			}
			j.tube.mu.Unlock()
			out[j.id] = v
		}
	}
	return out
}

// TestApplyMakesAReplica: a replica that applies, batch by batch, the
// records a leader's commands logged (compaction's rewrites among them)
// holds the leader's jobs, each in its state with its fields and body, but
// for what is not logged: the leader's reservations.
func TestApplyMakesAReplica(t *testing.T) {
	var clock atomic.Int64 // the timer goroutines read it
	clock.Store(int64(time.Second))
	now := clock.Load
	rec := &recordingJournal{}
	leader := newStore(Options{Now: now}, rec)
	defer leader.Close()
	replica := New(Options{Now: now})
	defer replica.Close()

	rng := rand.New(rand.NewPCG(5, 6))
	clients := make([]*Client, 4)
	for i := range clients {
		clients[i] = leader.NewClient(nil)
		clients[i].Use([]byte(fmt.Sprintf("tube-%d", i%3)))
	}
	var ids []uint64
	var all []wal.Record // every record committed, for the reset below
	for step := range 3000 {
		c := clients[rng.IntN(len(clients))]
		pick := func() uint64 {
			if len(ids) == 0 {
				return 0
			}
			return ids[rng.IntN(len(ids))]
		}
		switch op := rng.IntN(10); {
		case op < 3:
			id := leader.NextID()
			body := bytes.Repeat([]byte{byte(step)}, rng.IntN(MaxCopiedBody*2))
			if _, err := c.Put(id, rng.Uint32N(2000), rng.Uint32N(3)*100, 1+rng.Uint32N(100), append(body, '\r', '\n')); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		case op == 3:
			c.Reserve(0)
		case op == 4:
			_, _ = c.ReserveJob(pick())
		case op == 5:
			_ = c.Release(pick(), rng.Uint32N(2000), rng.Uint32N(2)*50)
		case op == 6:
			_ = c.Bury(pick(), rng.Uint32N(2000))
		case op == 7:
			if rng.IntN(2) == 0 {
				c.Kick(uint32(rng.IntN(5)))
			} else {
				_ = c.KickJob(pick())
			}
		case op == 8:
			c.Delete(pick())
		default:
			leader.Migrate(1, slices.Clone(ids)) // compaction rewrites every live job
		}
		if step%37 == 0 {
			committed := rec.take()
			all = append(all, committed...)
			replica.Apply(committed, nil) // a committed entry
			clock.Add(int64(time.Millisecond))
		}
	}
	committed := rec.take()
	all = append(all, committed...)
	replica.Apply(committed, nil)

	want := viewOf(leader)
	for id, v := range want {
		if v.state == StateReserved {
			v.state = StateReady
			want[id] = v
		}
	}
	got := viewOf(replica)
	for id, v := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("job %d: on the leader (%+v), not on the replica", id, v)
			continue
		}
		if v.state == StateReady && leaderReserved(leader, id) {
			// The last logged counts, not the leader's reservations.
			g.reserves, g.timeouts = v.reserves, v.timeouts
		}
		if g != v {
			t.Errorf("job %d:\nleader  %+v\nreplica %+v", id, v, g)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("job %d: on the replica, not on the leader", id)
		}
	}
	if len(want) == 0 {
		t.Fatal("the workload left no jobs to compare")
	}
	ls, rs := leader.Stats(), replica.Stats()
	if ls.Ready+ls.Reserved != rs.Ready || ls.Delayed != rs.Delayed || ls.Buried != rs.Buried || rs.Reserved != 0 {
		t.Errorf("counts: leader %+v, replica %+v", ls, rs)
	}
	if rs.TotalJobs != ls.TotalJobs {
		t.Errorf("total-jobs: leader %d, replica %d", ls.TotalJobs, rs.TotalJobs)
	}
	if err := replica.CheckInvariants(); err != nil {
		t.Errorf("replica invariants:\n%v", err)
	}
	// A replica promoted to leader never issues an id the leader may have
	// taken: it goes on above the logged watermark, as after a restart.
	if next, mark := replica.NextID(), leader.idMark.Load(); mark == 0 || next <= mark {
		t.Errorf("the replica's next id %d is not above the leader's watermark, %d", next, mark)
	}

	// Reset, then every record applied again, makes the same replica in
	// the same store: how a member restores a snapshot, or rebuilds from
	// its log after losing a leadership. A client of the replica (as the
	// digest's, or the admin API's) keeps a valid tube.
	watcher := replica.NewClient(nil)
	defer watcher.Close()
	watcher.Use([]byte("tube-1"))
	before, beforeStats := viewOf(replica), replica.Stats()
	if err := replica.Reset(); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if n, st := len(viewOf(replica)), replica.Stats(); n != 0 || st.Ready+st.Delayed+st.Buried+st.TotalJobs != 0 {
		t.Fatalf("after Reset: %d jobs, counts %+v", n, st)
	}
	if names := replica.TubeNames(); !slices.Equal(names, []string{"default", "tube-1"}) {
		t.Errorf("after Reset the tubes are %q; want the default and the one a client uses", names)
	}
	if err := replica.CheckInvariants(); err != nil {
		t.Errorf("invariants after Reset:\n%v", err)
	}
	replica.Apply(all, nil)
	if after := viewOf(replica); !maps.Equal(after, before) {
		t.Errorf("applied again after Reset: %d jobs, %d before; they differ", len(after), len(before))
	}
	if st := replica.Stats(); st.Ready != beforeStats.Ready || st.Delayed != beforeStats.Delayed ||
		st.Buried != beforeStats.Buried || st.TotalJobs != beforeStats.TotalJobs || st.Urgent != beforeStats.Urgent {
		t.Errorf("counts after Reset and Apply: %+v; before: %+v", st, beforeStats)
	}
	if err := replica.CheckInvariants(); err != nil {
		t.Errorf("invariants after Reset and Apply:\n%v", err)
	}
}

func leaderReserved(s *Store, id uint64) bool {
	j := s.lookup(id)
	if j == nil {
		return false
	}
	j.tube.mu.Lock()
	defer j.tube.mu.Unlock()
	return j.state == StateReserved
}

// unplacedJournal is a recordingJournal that, as a cluster's leader's
// journal, knows no record's place when it is appended: the member's log
// says where it went once it is committed (Located).
type unplacedJournal struct{ recordingJournal }

func (r *unplacedJournal) Append(rec *wal.Record, prev wal.Loc) (uint64, wal.Loc, error) {
	lsn, _, err := r.recordingJournal.Append(rec, prev)
	return lsn, wal.Loc{}, err
}

// TestApplyLocations: a replica notes where each applied full record is
// in its log, so once it leads, compaction's Migrate finds the jobs it
// applied; a leader's own records are placed once committed (Located),
// and a job deleted meanwhile stays gone.
func TestApplyLocations(t *testing.T) {
	journal := &unplacedJournal{}
	s := newStore(Options{}, journal)
	defer s.Close()
	put := func(id uint64) wal.Record {
		return wal.Record{Kind: wal.KindFull, ID: id, Tube: "t", State: wal.StateReady, TTR: int64(time.Minute), Body: []byte("x\r\n")}
	}
	s.Apply([]wal.Record{put(1), put(2), {Kind: wal.KindUpdate, ID: 1, State: wal.StateBuried, TTR: int64(time.Minute)}},
		[]wal.Loc{{Seg: 3, Size: 10}, {Seg: 3, Size: 10}, {}})
	s.Apply([]wal.Record{put(2)}, []wal.Loc{{Seg: 5, Size: 10}}) // compaction's rewrite of job 2
	if f1, f2 := s.lookup(1).file(), s.lookup(2).file(); f1 != 3 || f2 != 5 {
		t.Fatalf("applied jobs' files %d and %d, want 3 and 5", f1, f2)
	}
	s.Migrate(3, []uint64{1, 2})
	if recs := journal.take(); len(recs) != 1 || recs[0].ID != 1 || recs[0].State != wal.StateBuried {
		t.Fatalf("migrating segment 3 logged %+v, want job 1 alone, buried", recs)
	}

	c := s.NewClient(nil)
	defer c.Close()
	own, gone := s.NextID(), uint64(0)
	if _, err := c.Put(own, 1, 0, 60, []byte("own\r\n")); err != nil {
		t.Fatal(err)
	}
	gone = s.NextID()
	if _, err := c.Put(gone, 1, 0, 60, []byte("gone\r\n")); err != nil {
		t.Fatal(err)
	}
	c.Delete(gone)
	if f := s.lookup(own).file(); f != 0 {
		t.Fatalf("a put not yet committed is in segment %d", f)
	}
	s.Located([]wal.Record{put(own), put(gone)}, []wal.Loc{{Seg: 7, Size: 10}, {Seg: 7, Size: 10}})
	if f := s.lookup(own).file(); f != 7 {
		t.Fatalf("the leader's own job is in segment %d once located, want 7", f)
	}
	if s.lookup(gone) != nil {
		t.Fatal("locating a deleted job brought it back")
	}
	journal.take()
	s.Migrate(7, []uint64{own, gone})
	if recs := journal.take(); len(recs) != 1 || recs[0].ID != own {
		t.Fatalf("migrating segment 7 logged %+v, want the leader's own job", recs)
	}
}

// TestIDPrefix: a store with a prefix issues ids in it, from 1, through
// its logged watermark; records of its prefix raise its counter when
// applied, those of another prefix (a job moved in from another group)
// do not; a reset starts again in the prefix.
func TestIDPrefix(t *testing.T) {
	const prefix = 3
	base := uint64(prefix) << IDSeqBits
	j := &recordingJournal{}
	s := New(Options{Journal: j, IDPrefix: prefix})
	defer s.Close()
	if id := s.NextID(); id != base+1 {
		t.Fatalf("the first id: %d, want %d", id, base+1)
	}
	var mark uint64
	for _, r := range j.take() {
		if r.Kind == wal.KindIDs {
			mark = r.ID
		}
	}
	if mark <= base+1 || mark>>IDSeqBits != prefix {
		t.Errorf("the logged watermark %d is not above the id in its prefix", mark)
	}
	full := func(id uint64) wal.Record {
		return wal.Record{Kind: wal.KindFull, ID: id, Tube: "t", State: wal.StateReady, Body: []byte("x\r\n")}
	}
	other := uint64(5)<<IDSeqBits + 100
	s.Apply([]wal.Record{full(other)}, []wal.Loc{{}})
	if id := s.NextID(); id>>IDSeqBits != prefix {
		t.Errorf("after a job of prefix 5 was applied the next id is %d, of prefix %d", id, id>>IDSeqBits)
	}
	s.Apply([]wal.Record{full(base + 1000)}, []wal.Loc{{}})
	if id := s.NextID(); id != base+1001 {
		t.Errorf("after its own job %d was applied the next id is %d, want %d", base+1000, id, base+1001)
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if id := s.NextID(); id != base+1 {
		t.Errorf("after a reset the first id is %d, want %d", id, base+1)
	}
	s0 := New(Options{})
	defer s0.Close()
	if id := s0.NextID(); id != 1 {
		t.Errorf("prefix 0's first id is %d, want 1", id)
	}
}

// TestImportKeepsEmptyTubePause: a paused tube moved in with no jobs is
// freed as its import ends (its sessions' references reach the store
// after it), and its pause waits for it: the tube made again is paused
// until the same end, and no record ends the pause, so the replicas keep
// it too. A tube freed otherwise loses its pause, as in beanstalkd.
func TestImportKeepsEmptyTubePause(t *testing.T) {
	j := &recordingJournal{}
	now := int64(time.Hour)
	s := newStore(Options{Now: func() int64 { return now }, LogPauses: true}, j)
	t.Cleanup(s.Close)
	s.Lead()
	c := s.NewOwnerClient(nil)
	if _, err := c.ImportTube([]byte("idle"), nil, TubeFigures{Pause: time.Minute, PauseLeft: 40 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(s.TubeNames(), "idle") {
		t.Fatal("the empty tube imported is still held, by nothing")
	}
	var ended int
	for _, r := range j.take() {
		if r.Kind == wal.KindMeta && r.State == wal.MetaPause && r.Delay == 0 {
			ended++
		}
	}
	if ended != 0 {
		t.Errorf("%d records end the imported tube's pause", ended)
	}
	user := s.NewClient(nil)
	user.Use([]byte("idle"))
	ts, ok := s.TubeStats([]byte("idle"))
	if !ok || ts.Pause != time.Minute || ts.PauseTimeLeft != 40*time.Second {
		t.Fatalf("stats-tube idle once used: %+v; want paused 1m with 40s left", ts)
	}
	user.Use([]byte("default"))
	for _, r := range j.take() {
		if r.Kind == wal.KindMeta && r.State == wal.MetaPause && r.Delay == 0 {
			ended++
		}
	}
	if ended != 1 {
		t.Errorf("the tube freed by its user: %d records end its pause, want 1", ended)
	}
}

// TestImportCountsNoPut: a tube's jobs moved into a group were counted in
// total-jobs where they were put, so their import counts them in the
// tube's total-jobs only, on the leader and on its replicas (the records
// carry wal.ImportKey), and leaves no entry in the dedup table. A put
// there still counts. Summed over both groups, total-jobs is the puts.
func TestImportCountsNoPut(t *testing.T) {
	src := New(Options{IDPrefix: 2})
	t.Cleanup(src.Close)
	sc := src.NewClient(nil)
	sc.Use([]byte("t"))
	for i := range 5 {
		if _, err := sc.Put(src.NextID(), 1, 0, 30, fmt.Appendf(nil, "job-%d\r\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	frames, n, _, fig, ok := src.ExportTube([]byte("t"))
	if !ok || n != 5 {
		t.Fatalf("export: %d jobs, %v", n, ok)
	}

	log := &recordingJournal{}
	dst := newStore(Options{IDPrefix: 1, Dedup: true}, log)
	t.Cleanup(dst.Close)
	replica := New(Options{IDPrefix: 1, Dedup: true})
	t.Cleanup(replica.Close)
	d := dst.NewClient(nil)
	if made, err := d.ImportTube([]byte("t"), frames, fig, nil); err != nil || made != n {
		t.Fatalf("import: %d, %v", made, err)
	}
	d.Use([]byte("t"))
	if _, err := d.Put(dst.NextID(), 1, 0, 30, []byte("here\r\n")); err != nil {
		t.Fatal(err)
	}
	replica.Apply(log.take(), nil)
	for name, s := range map[string]*Store{"leader": dst, "replica": replica} {
		if st := s.Stats(); st.TotalJobs != 1 || st.Ready != 6 {
			t.Errorf("%s: total-jobs %d, ready %d; want 1 (the put here), 6", name, st.TotalJobs, st.Ready)
		}
		if ts, _ := s.TubeStats([]byte("t")); ts.TotalJobs != 6 {
			t.Errorf("%s: the tube's total-jobs %d, want 6", name, ts.TotalJobs)
		}
		if n := s.DedupEntries(); n != 0 {
			t.Errorf("%s: %d dedup entries from an import", name, n)
		}
	}
	if sum := src.Stats().TotalJobs + dst.Stats().TotalJobs; sum != 6 {
		t.Errorf("total-jobs summed over both groups: %d, want the 6 puts", sum)
	}
}
