package store

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// clockJournal is a recordingJournal that stamps each batch with the
// leader's clock, as a cluster's journal does: a KindClock record before
// the first record appended since the batch before was taken.
type clockJournal struct {
	recordingJournal
	clock   func() int64 // set before the store appends
	batched bool         // guarded by mu: the batch has its clock
}

func (j *clockJournal) Append(rec *wal.Record, prev wal.Loc) (uint64, wal.Loc, error) {
	j.mu.Lock()
	if !j.batched {
		j.batched = true
		j.records = append(j.records, wal.Record{Kind: wal.KindClock, Time: j.clock()})
	}
	j.mu.Unlock()
	return j.recordingJournal.Append(rec, prev)
}

func (j *clockJournal) take() []wal.Record {
	j.mu.Lock()
	j.batched = false
	j.mu.Unlock()
	return j.recordingJournal.take()
}

// group is a leader's store and a follower's, as two members of a shard
// group hold them: the follower applies what the leader's journal
// gathered, a batch at a time (ship: a committed entry), and may take
// over. Both run on one hand-driven monotonic clock.
type group struct {
	now      atomic.Int64 // the timer goroutines read it
	journal  *clockJournal
	leader   *Store
	follower *Store
	log      []wal.Record // every record shipped, in order
}

func newGroup(t *testing.T) *group {
	g := &group{journal: &clockJournal{}}
	g.now.Store(int64(time.Hour))
	g.leader = newStore(Options{Now: g.now.Load, Dedup: true}, g.journal)
	g.journal.clock = g.leader.Clock
	g.follower = New(Options{Now: g.now.Load, Dedup: true})
	t.Cleanup(g.leader.Close)
	t.Cleanup(g.follower.Close)
	return g
}

// ship hands the leader's batch to the follower, and returns it.
func (g *group) ship() []wal.Record {
	batch := g.journal.take()
	g.log = append(g.log, batch...)
	g.follower.Apply(batch, nil)
	return batch
}

// entries is a table's live entries with their times, by key.
func entries(d *DedupTable) map[wal.Req]string {
	out := map[wal.Req]string{}
	for r := range d.Records() {
		if r.Kind == wal.KindReq {
			out[r.Req] = fmt.Sprintf("id %d count %d at %d", r.ID, r.Count, r.Time)
		}
	}
	return out
}

func key(n uint64) wal.Req { return wal.Req{Incarnation: 0xfeed, Number: n} }

// TestDedupPutAcrossFailover: a put resent after its leader is lost is
// answered from the table with the id first given, once its record
// committed; a put whose record never committed runs again at the new
// leader. A retry at the same leader is answered from its own table and
// waits for the original's reply.
func TestDedupPutAcrossFailover(t *testing.T) {
	g := newGroup(t)
	c := g.leader.NewClient(nil)
	defer c.Close()
	c.Use([]byte("mail"))
	id, put, err := c.PutKeyed(key(1), 5, 0, 60, []byte("first\r\n"))
	if err != nil || !put {
		t.Fatalf("PutKeyed: id %d, put %v, %v", id, put, err)
	}
	pos := c.PendingAck()
	other := g.leader.NewClient(nil)
	defer other.Close()
	again, put, err := other.PutKeyed(key(1), 9, 0, 60, []byte("second\r\n"))
	if again != id || put || err != nil {
		t.Fatalf("resent to the same leader: id %d, put %v, %v; want %d from the table", again, put, err, id)
	}
	if other.PendingAck() != pos || pos == 0 {
		t.Errorf("the answer from the table waits for %d, the original's reply for %d", other.PendingAck(), pos)
	}
	batch := g.ship()
	if batch[0].Kind != wal.KindClock {
		t.Fatalf("the batch begins with %+v, not the leader's clock", batch[0])
	}
	var keyed []wal.Record
	for _, r := range batch {
		if !r.Req.IsZero() {
			keyed = append(keyed, r)
		}
	}
	if len(keyed) != 1 || keyed[0].Kind != wal.KindFull || keyed[0].ID != id || keyed[0].Req != key(1) {
		t.Fatalf("the keyed records logged: %+v; want the put's alone", keyed)
	}

	// The leader puts again, and is lost before that batch commits.
	lost, _, err := c.PutKeyed(key(2), 5, 0, 60, []byte("lost\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	g.journal.take()

	nc := g.follower.NewClient(nil)
	defer nc.Close()
	nc.Use([]byte("mail"))
	got, put, err := nc.PutKeyed(key(1), 9, 0, 60, []byte("second\r\n"))
	if got != id || put || err != nil {
		t.Fatalf("resent to the new leader: id %d, put %v, %v; want %d from the table", got, put, err, id)
	}
	if st := g.follower.Stats(); st.TotalJobs != 1 || st.Ready != 1 {
		t.Errorf("after the resent put the new leader holds %+v; want the one job", st)
	}
	if p, ok := g.follower.peek(id, nil); !ok || string(p.Body()) != "first\r\n" {
		t.Errorf("job %d on the new leader: %v", id, p)
	}
	rerun, put, err := nc.PutKeyed(key(2), 5, 0, 60, []byte("lost\r\n"))
	if err != nil || !put || rerun == id {
		t.Fatalf("the put that never committed, resent: id %d, put %v, %v; want it run again", rerun, put, err)
	}
	if rerun <= lost {
		// Not required, but what the watermark gives: the new leader goes
		// on above every id the old one logged it might issue.
		t.Errorf("the new leader issued %d, not above the lost leader's %d", rerun, lost)
	}
	if st := g.follower.Stats(); st.TotalJobs != 2 {
		t.Errorf("total-jobs %d after the put ran again; want 2", st.TotalJobs)
	}
	if err := g.follower.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// TestDedupVerdicts: each keyed command that changed something answers
// its verdict again from the table, at its leader and, once committed, at
// the follower that takes over, and changes nothing more; the
// follower's entry is the leader's.
func TestDedupVerdicts(t *testing.T) {
	type setup struct {
		g    *group
		c    *Client // the leader's client
		jobs []uint64
	}
	// prepare puts n jobs, the first reserved by c if reserve, and ships
	// them: committed before the command under test.
	prepare := func(t *testing.T, n int, reserve bool, bury bool) *setup {
		g := newGroup(t)
		c := g.leader.NewClient(nil)
		t.Cleanup(c.Close)
		s := &setup{g: g, c: c}
		for i := range n {
			id := g.leader.NextID()
			if _, err := c.Put(id, uint32(i), 0, 60, []byte("job\r\n")); err != nil {
				t.Fatal(err)
			}
			s.jobs = append(s.jobs, id)
		}
		if bury {
			for range n {
				j, _ := c.Reserve(0)
				if err := c.Bury(j.ID(), 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		if reserve {
			if j, r := c.Reserve(0); r != Reserved || j.ID() != s.jobs[0] {
				t.Fatalf("Reserve: %v %v", j, r)
			}
		}
		g.ship()
		return s
	}
	cases := []struct {
		name           string
		jobs           int
		reserve, bury  bool
		run            func(c *Client, k wal.Req, jobs []uint64) string
		want, wantNext string // the first verdict, and an unkeyed repeat's
	}{
		{"delete", 1, true, false, func(c *Client, k wal.Req, jobs []uint64) string {
			return fmt.Sprint(c.DeleteKeyed(k, jobs[0]))
		}, "true", "false"},
		{"release", 1, true, false, func(c *Client, k wal.Req, jobs []uint64) string {
			return fmt.Sprint(c.ReleaseKeyed(k, jobs[0], 7, 0))
		}, "<nil>", ErrNotFound.Error()},
		{"bury", 1, true, false, func(c *Client, k wal.Req, jobs []uint64) string {
			return fmt.Sprint(c.BuryKeyed(k, jobs[0], 7))
		}, "<nil>", ErrNotFound.Error()},
		{"kick", 3, false, true, func(c *Client, k wal.Req, jobs []uint64) string {
			return fmt.Sprint(c.KickKeyed(k, 5))
		}, "3", "0"},
		{"kick-job", 2, false, true, func(c *Client, k wal.Req, jobs []uint64) string {
			return fmt.Sprint(c.KickJobKeyed(k, jobs[1]))
		}, "<nil>", ErrNotFound.Error()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := prepare(t, tc.jobs, tc.reserve, tc.bury)
			g, k := s.g, key(7)
			if got := tc.run(s.c, k, s.jobs); got != tc.want {
				t.Fatalf("first: %s, want %s", got, tc.want)
			}
			before := viewOf(g.leader)
			batch := g.ship()
			if got := tc.run(s.c, k, s.jobs); got != tc.want {
				t.Errorf("resent to the leader: %s, want %s", got, tc.want)
			}
			if recs := g.journal.take(); len(recs) != 0 {
				t.Errorf("the resent command logged %+v", recs)
			}
			if after := viewOf(g.leader); !maps.Equal(after, before) {
				t.Error("the resent command changed the leader's jobs")
			}
			keyed := 0
			for _, r := range batch {
				if r.Req == k {
					keyed++
				}
			}
			if want := map[string]int{"kick": 3}[tc.name]; keyed != max(want, 1) {
				t.Errorf("%d records carry the key; want %d", keyed, max(want, 1))
			}
			// The clock stood still: the batch's time is the leader's.
			if l, f := entries(g.leader.DedupTable()), entries(g.follower.DedupTable()); len(l) != 1 || !maps.Equal(l, f) {
				t.Errorf("the leader's table %v, the follower's %v", l, f)
			}

			nc := g.follower.NewClient(nil)
			defer nc.Close()
			before = viewOf(g.follower)
			if got := tc.run(nc, k, s.jobs); got != tc.want {
				t.Errorf("resent to the new leader: %s, want %s", got, tc.want)
			}
			if after := viewOf(g.follower); !maps.Equal(after, before) {
				t.Error("the resent command changed the new leader's jobs")
			}
			// Without the table the same command, as another request,
			// would answer otherwise: the verdict came from it.
			if got := tc.run(nc, key(8), s.jobs); got != tc.wantNext {
				t.Errorf("as a new request on the new leader: %s, want %s", got, tc.wantNext)
			}
		})
	}
}

// TestDedupNothingKeptForNoChange: a keyed command that changed nothing
// keeps nothing, so resent it runs again.
func TestDedupNothingKeptForNoChange(t *testing.T) {
	g := newGroup(t)
	c := g.leader.NewClient(nil)
	defer c.Close()
	if c.DeleteKeyed(key(1), 99) {
		t.Fatal("deleted a job that does not exist")
	}
	if n := c.KickKeyed(key(2), 10); n != 0 {
		t.Fatalf("kicked %d of none", n)
	}
	id := g.leader.NextID()
	if _, err := c.Put(id, 1, 0, 60, []byte("x\r\n")); err != nil {
		t.Fatal(err)
	}
	if !c.DeleteKeyed(key(1), id) {
		t.Error("the delete resent once the job exists did not run")
	}
	if d := g.leader.DedupTable(); d.Len() != 1 {
		t.Errorf("%d entries; want the one delete that deleted", d.Len())
	}
}

// TestDedupExpiry: entries expire DedupTTL after their entry time by the
// replicated clock: on a follower by the KindClock records it applies,
// whatever its own clock says; on the leader by its own clock, which
// applied clocks keep from going back.
func TestDedupExpiry(t *testing.T) {
	var now atomic.Int64
	s := New(Options{Now: now.Load, Dedup: true})
	defer s.Close()
	// Far ahead of this store's wall clock, so that only the records move
	// its clock: a follower's table never reads its own.
	t0 := s.Clock() + int64(time.Hour)
	full := wal.Record{Kind: wal.KindFull, ID: 1, Req: key(1), Tube: "t", State: wal.StateReady, TTR: int64(time.Minute), Body: []byte("x\r\n")}
	s.Apply([]wal.Record{{Kind: wal.KindClock, Time: t0}, full}, nil)
	s.Apply([]wal.Record{{Kind: wal.KindClock, Time: t0 + int64(DedupTTL) - 1}}, nil)
	if got := entries(s.DedupTable()); len(got) != 1 {
		t.Fatalf("a nanosecond before its expiry the table holds %v", got)
	}
	s.Apply([]wal.Record{{Kind: wal.KindClock, Time: t0 - int64(time.Hour)}}, nil) // an older clock moves nothing
	if c := s.Clock(); c != t0+int64(DedupTTL)-1 {
		t.Fatalf("the clock went to %d after an older one was applied; want %d", c, t0+int64(DedupTTL)-1)
	}
	c := s.NewClient(nil)
	defer c.Close()
	c.Use([]byte("t"))
	if id, put, _ := c.PutKeyed(key(1), 0, 0, 60, []byte("y\r\n")); id != 1 || put {
		t.Fatalf("before expiry: id %d, put %v; want 1 from the table", id, put)
	}
	s.Apply([]wal.Record{{Kind: wal.KindClock, Time: t0 + int64(DedupTTL)}}, nil)
	if d := s.DedupTable(); d.Len() != 0 {
		t.Fatalf("at its expiry the table holds %v", entries(d))
	}
	if id, put, _ := c.PutKeyed(key(1), 0, 0, 60, []byte("y\r\n")); id == 1 || !put {
		t.Fatalf("after expiry: id %d, put %v; want a new put", id, put)
	}

	// As a leader: its own clock, once past the applied one.
	g := newGroup(t)
	lc := g.leader.NewClient(nil)
	defer lc.Close()
	first, _, _ := lc.PutKeyed(key(5), 0, 0, 60, []byte("a\r\n"))
	g.now.Add(int64(DedupTTL) - 1)
	if id, put, _ := lc.PutKeyed(key(5), 0, 0, 60, []byte("a\r\n")); id != first || put {
		t.Fatalf("a nanosecond before expiry the leader answered %d, put %v", id, put)
	}
	g.now.Add(1)
	if id, put, _ := lc.PutKeyed(key(5), 0, 0, 60, []byte("a\r\n")); id == first || !put {
		t.Fatalf("at expiry the leader answered %d, put %v; want a new put", id, put)
	}
	if d := g.leader.DedupTable(); d.Len() != 1 {
		t.Errorf("the leader keeps %d entries; the expired one should have gone", d.Len())
	}
}

// TestDedupDeterministic: followers that apply the same records have the
// same table whatever their clocks, and it is the table the records fold
// to without a store (DedupTable.AddFrames over the log's frames, as a
// snapshot is made); a store that applies a snapshot (the live jobs, then
// that table's records) answers every live key as the leader would, and
// none that expired.
func TestDedupDeterministic(t *testing.T) {
	g := newGroup(t)
	var clients []*Client
	for i := range 3 {
		c := g.leader.NewClient(nil)
		defer c.Close()
		c.Use([]byte(fmt.Sprintf("tube-%d", i)))
		clients = append(clients, c)
	}
	other := New(Options{Now: g.now.Load, Dedup: true})
	defer other.Close()
	other.wallBase += int64(24 * 365 * time.Hour) // its wall clock a year ahead
	var ids []uint64
	n := uint64(0)
	for step := range 400 {
		c := clients[step%len(clients)]
		n++
		switch step % 7 {
		case 0, 1, 2:
			id, _, err := c.PutKeyed(key(n), uint32(step), 0, 60, []byte("j\r\n"))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		case 3:
			if j, r := c.Reserve(0); r == Reserved {
				_ = c.BuryKeyed(key(n), j.ID(), 2)
			}
		case 4:
			c.KickKeyed(key(n), 2)
		case 5:
			c.DeleteKeyed(key(n), ids[len(ids)/2])
		case 6:
			if j, r := c.Reserve(0); r == Reserved {
				_ = c.ReleaseKeyed(key(n), j.ID(), 3, 0)
			}
		}
		if step%10 == 9 {
			other.Apply(g.ship(), nil)
			g.now.Add(int64(DedupTTL / 12)) // 400 steps: 40 TTL/12, so early keys expire
		}
	}
	other.Apply(g.ship(), nil)

	want := entries(g.follower.DedupTable())
	if len(want) < 50 {
		t.Fatalf("only %d live entries: the workload proves little", len(want))
	}
	if got := entries(other.DedupTable()); !maps.Equal(got, want) {
		t.Errorf("two followers with different clocks differ: %d entries against %d", len(got), len(want))
	}
	var frames []byte
	for i := range g.log {
		frames = wal.AppendFrame(frames, &g.log[i])
	}
	fold := NewDedupTable()
	if err := fold.AddFrames(frames); err != nil {
		t.Fatal(err)
	}
	if got := entries(fold); !maps.Equal(got, want) {
		t.Errorf("the fold of the log's frames differs from the follower's table: %d entries against %d", len(got), len(want))
	}
	if fold.Clock() != g.follower.DedupTable().Clock() {
		t.Errorf("clocks: the fold's %d, the follower's %d", fold.Clock(), g.follower.DedupTable().Clock())
	}

	// A snapshot: the live jobs (their full records, keys and all, as a
	// snapshot copies them from the log), then the table's records.
	live := map[uint64]*wal.Recovered{}
	for i := range g.log {
		wal.Fold(live, &g.log[i], wal.Loc{})
	}
	var snap []wal.Record
	for _, id := range slices.Sorted(maps.Keys(live)) {
		snap = append(snap, live[id].Record)
	}
	for r := range fold.Records() {
		snap = append(snap, r)
	}
	restored := New(Options{Now: g.now.Load, Dedup: true})
	defer restored.Close()
	restored.Apply(snap, nil)
	if got := entries(restored.DedupTable()); !maps.Equal(got, want) {
		t.Errorf("restored from the snapshot: %d entries against %d", len(got), len(want))
	}
	// Every key the table holds answers from it; one that expired runs.
	rc := restored.NewClient(nil)
	defer rc.Close()
	for k := range want {
		before := restored.Stats().TotalJobs
		if id, put, _ := rc.PutKeyed(k, 0, 0, 60, []byte("again\r\n")); put || id == 0 {
			t.Fatalf("key %v, live in the table, ran again as a put", k)
		}
		if restored.Stats().TotalJobs != before {
			t.Fatalf("key %v answered from the table made a job", k)
		}
	}
	if _, ok := want[key(1)]; ok {
		t.Fatal("the first key is still live: nothing expired")
	}
	if _, put, _ := rc.PutKeyed(key(1), 0, 0, 60, []byte("again\r\n")); !put {
		t.Error("an expired key answered from the restored table")
	}

	// Reset empties the table and the clock; the records make them again.
	if err := restored.Reset(); err != nil {
		t.Fatal(err)
	}
	if d := restored.DedupTable(); d.Len() != 0 || d.Clock() != 0 {
		t.Errorf("after Reset: %d entries, clock %d", d.Len(), d.Clock())
	}
	restored.Apply(snap, nil)
	if got := entries(restored.DedupTable()); !maps.Equal(got, want) {
		t.Errorf("after Reset and the snapshot again: %d entries against %d", len(got), len(want))
	}
}

// TestDedupOff: without Options.Dedup a keyed call is the unkeyed one:
// nothing kept, no key logged, applied keys and entries ignored.
func TestDedupOff(t *testing.T) {
	rec := &recordingJournal{}
	s := newStore(Options{}, rec)
	defer s.Close()
	c := s.NewClient(nil)
	defer c.Close()
	a, _, _ := c.PutKeyed(key(1), 0, 0, 60, []byte("x\r\n"))
	b, put, _ := c.PutKeyed(key(1), 0, 0, 60, []byte("x\r\n"))
	if a == b || !put {
		t.Fatalf("the same key put twice gave %d and %d, put %v: want two puts", a, b, put)
	}
	c.KickKeyed(key(2), 1)
	for _, r := range rec.take() {
		if !r.Req.IsZero() {
			t.Errorf("a record with a key logged: %+v", r)
		}
	}
	s.Apply([]wal.Record{{Kind: wal.KindReq, ID: 3, Req: key(3), Time: 1, Count: 1}, {Kind: wal.KindDelete, ID: 4, Req: key(4)}}, nil)
	if s.DedupTable() != nil {
		t.Error("a table without Options.Dedup")
	}
	if _, put, _ := c.PutKeyed(key(3), 0, 0, 60, []byte("x\r\n")); !put {
		t.Error("an applied KindReq answered a put")
	}

	dir := t.TempDir()
	l, err := wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer func() {
		if recover() == nil {
			t.Error("New took Options.Dedup with a single node's Log")
		}
	}()
	New(Options{Log: l, Dedup: true}).Close()
}

// TestDedupKeyedNoSpace: a keyed put the log refuses keeps nothing: the
// request runs again when resent.
func TestDedupKeyedNoSpace(t *testing.T) {
	full := &fullJournal{}
	s := newStore(Options{Dedup: true}, full)
	defer s.Close()
	c := s.NewClient(nil)
	defer c.Close()
	full.full.Store(true)
	if _, _, err := c.PutKeyed(key(1), 0, 0, 60, []byte("x\r\n")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put on a full log: %v", err)
	}
	full.full.Store(false)
	if _, put, err := c.PutKeyed(key(1), 0, 0, 60, []byte("x\r\n")); err != nil || !put {
		t.Fatalf("resent once there is room: put %v, %v; want the put", put, err)
	}
}

// fullJournal is a recordingJournal that refuses every record but a
// delete while full is set.
type fullJournal struct {
	recordingJournal
	full atomic.Bool
}

func (f *fullJournal) Append(rec *wal.Record, prev wal.Loc) (uint64, wal.Loc, error) {
	if f.full.Load() && rec.Kind != wal.KindDelete {
		return 0, wal.Loc{}, wal.ErrNoSpace
	}
	return f.recordingJournal.Append(rec, prev)
}

// TestDedupShrinks: after a burst has expired, a run keeps only the blocks
// its entries left need, so a member does not keep a burst's room for
// ever.
func TestDedupShrinks(t *testing.T) {
	d := NewDedupTable()
	const burst, after = 200 * runBlock, 3*runBlock + 7
	for n := range uint64(burst) {
		d.set(key(n+1), dedupEntry{at: 1})
	}
	for n := range uint64(after) {
		d.set(key(burst+n+1), dedupEntry{at: 1 + int64(DedupTTL)})
	}
	d.expire(1 + int64(DedupTTL))
	if d.Len() != after {
		t.Fatalf("after the burst expired: %d entries, want %d", d.Len(), after)
	}
	s := d.sender(key(0).Incarnation)
	if len(s.runs) != 1 || len(s.runs[0].blocks) > after/runBlock+2 {
		t.Errorf("the run kept %d blocks for %d entries", len(s.runs[0].blocks), after)
	}
	for n := range uint64(after) {
		if e, ok := d.get(key(burst + n + 1)); !ok || e.at != 1+int64(DedupTTL) {
			t.Fatalf("entry %d lost in the expiry", burst+n+1)
		}
	}
	if _, ok := d.get(key(burst)); ok {
		t.Error("an expired entry is still found")
	}
}

// TestDedupNumberOrders: keys come from each sender nearly in order, but
// not quite: requests overtaking each other, a restarted member numbering
// from a lower start, a request resent long after. Each key is found with
// its own outcome, none that was never added is, the records make the
// same table, and expiry drops each entry once.
func TestDedupNumberOrders(t *testing.T) {
	d := NewDedupTable()
	want := map[wal.Req]uint64{}
	at := int64(1)
	add := func(sender, number uint64) {
		k := wal.Req{Incarnation: sender, Number: number}
		if _, ok := want[k]; ok {
			t.Fatalf("the test adds %v twice", k)
		}
		id := uint64(len(want) + 1)
		want[k] = id
		d.set(k, dedupEntry{Outcome: Outcome{ID: id, Count: 1}, at: at})
		at++
	}
	for n := uint64(1000); n < 2000; n += 2 {
		add(7, n)
		if n%10 == 0 {
			add(7, n-5) // overtaken by two others, inserted in place
		}
		add(9, 1<<50+n)
	}
	for n := uint64(10); n < 300; n += 2 {
		add(7, n) // numbering from a new start, below the first: a run of its own
	}
	add(7, 13) // resent long after: far from the newest run's end, a run of its own
	add(7, 1<<40)
	for b := range uint64(maxRuns + 2) { // blocks numbered from ever lower starts: more runs than maxRuns
		for n := range uint64(2 * nearEnd) {
			add(7, 1<<30-b<<20+2*n)
		}
	}
	check := func(d *DedupTable) {
		t.Helper()
		for k, id := range want {
			if e, ok := d.get(k); !ok || e.ID != id {
				t.Fatalf("%v: found %v (%v), want id %d", k, e, ok, id)
			}
		}
		for _, k := range []wal.Req{{Incarnation: 7, Number: 1001}, {Incarnation: 7, Number: 11}, {Incarnation: 7, Number: 1<<40 + 1},
			{Incarnation: 7, Number: 5}, {Incarnation: 9, Number: 1000}, {Incarnation: 8, Number: 1000}} {
			if e, ok := d.get(k); ok {
				t.Fatalf("%v was never added, found %v", k, e)
			}
		}
		if d.Len() != len(want) {
			t.Fatalf("Len %d, want %d", d.Len(), len(want))
		}
	}
	check(d)
	if s := d.sender(7); len(s.runs) != maxRuns {
		t.Errorf("sender 7 has %d runs, want maxRuns (%d): the test is to reach it", len(s.runs), maxRuns)
	}
	d.clock = at
	again := NewDedupTable()
	seen := map[wal.Req]bool{}
	for r := range d.Records() {
		if r.Kind == wal.KindReq {
			if seen[r.Req] {
				t.Fatalf("%v in the records twice", r.Req)
			}
			seen[r.Req] = true
		}
		again.Add(&r)
	}
	check(again)
	// Expiry by time: the first half of the entries made, whatever their
	// numbers.
	half := at / 2
	d.expire(half + int64(DedupTTL))
	kept := 0
	for k := range want {
		if _, ok := d.get(k); ok {
			kept++
		}
	}
	if d.Len() != kept || kept > len(want)-int(half)+1+nearEnd {
		t.Errorf("after expiring the first %d of %d: %d found, Len %d", half, len(want), kept, d.Len())
	}
	d.expire(at + int64(DedupTTL))
	if d.Len() != 0 || len(d.senders) != 0 {
		t.Errorf("all expired: Len %d, %d senders", d.Len(), len(d.senders))
	}
}

// BenchmarkDedupFold is a replica of a busy group folding its log's keyed
// records: 200,000 a second of the replicated clock (a KindClock every
// 100), from three members numbering their requests, a few out of order
// as concurrent sessions send them; in its steady state the table holds
// the window's 2,000,000 entries, larger than the caches.
func BenchmarkDedupFold(b *testing.B) {
	const perSecond, batch = 200_000, 100
	d := NewDedupTable()
	var n, clock uint64
	fold := func() {
		n++
		if n%batch == 0 {
			clock += uint64(time.Second) / perSecond * batch
			d.Add(&wal.Record{Kind: wal.KindClock, Time: int64(clock)})
		}
		number := n
		if n%50 == 0 {
			number -= 3 // sent behind three others
		}
		d.Add(&wal.Record{Kind: wal.KindFull, ID: n, Req: wal.Req{Incarnation: 1 + n%3, Number: 1<<40 + number}})
	}
	for range int(DedupTTL/time.Second) * perSecond {
		fold()
	}
	b.ReportAllocs()
	for b.Loop() {
		fold()
	}
}

// TestKeyRunBlocks: a run's entries across blocks, against a sorted slice:
// numbers appended, inserted in place near the end (across a block's
// edge too), dropped from the front; search finds each and places the
// missing where they go.
func TestKeyRunBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var r keyRun
	var want []uint64
	next := uint64(1000)
	for step := range 20 * runBlock {
		switch x := rng.IntN(10); {
		case x < 6:
			next += 3
			r.push(numbered{number: next})
			want = append(want, next)
		case x < 8 && len(want) > 0:
			number := next - uint64(rng.IntN(min(len(want), nearEnd))*3) - 1
			i, ok := r.search(number)
			if j, wok := slices.BinarySearch(want, number); i != j || ok != wok {
				t.Fatalf("step %d: search(%d) = %d %v, want %d %v", step, number, i, ok, j, wok)
			}
			if !ok {
				r.insertAt(i, numbered{number: number})
				want = slices.Insert(want, i, number)
			}
		case len(want) > 0:
			r.dropFirst()
			want = want[1:]
		}
		if r.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, r.len(), len(want))
		}
		if step%97 == 0 {
			for i, n := range want {
				if r.at(i).number != n {
					t.Fatalf("step %d: entry %d is %d, want %d", step, i, r.at(i).number, n)
				}
			}
		}
	}
	if len(r.blocks) < 3 {
		t.Errorf("the run has %d blocks: the test is to cross blocks' edges", len(r.blocks))
	}
}

// TestDedupPauseTube: a keyed pause-tube's key follows its record (a
// KindReq: a KindMeta carries none), so a pause-tube resent after a
// failover is answered PAUSED from the table and neither begins the
// pause again nor counts again, at its leader and at the follower that
// takes over; one that paused nothing (no such tube) keeps no key.
func TestDedupPauseTube(t *testing.T) {
	g := &group{journal: &clockJournal{}}
	g.now.Store(int64(time.Hour))
	g.leader = newStore(Options{Now: g.now.Load, Dedup: true, LogPauses: true}, g.journal)
	g.journal.clock = g.leader.Clock
	g.follower = New(Options{Now: g.now.Load, Dedup: true, LogPauses: true})
	t.Cleanup(g.leader.Close)
	t.Cleanup(g.follower.Close)
	g.leader.Lead()
	c := g.leader.NewClient(nil)
	defer c.Close()
	c.Use([]byte("mail"))
	if !c.PauseTubeKeyed(key(1), []byte("mail"), time.Minute) {
		t.Fatal("the pause-tube found no tube")
	}
	if c.PauseTubeKeyed(key(2), []byte("none"), time.Minute) {
		t.Fatal("a tube nobody made was paused")
	}
	batch := g.ship()
	var keys []wal.Req
	for _, r := range batch {
		switch {
		case r.Kind == wal.KindReq:
			keys = append(keys, r.Req)
		case r.Kind == wal.KindMeta && r.State == wal.MetaPause:
			// What a replica's log keeps (internal/replication's TubeBook).
			g.follower.SetPauses(map[string]Pause{r.Tube: {Dur: time.Duration(r.Delay), Until: r.Deadline}})
		}
	}
	if !slices.Equal(keys, []wal.Req{key(1)}) {
		t.Fatalf("keys logged %v; want the pause's alone: %+v", keys, batch)
	}
	g.now.Add(int64(5 * time.Second)) // within DedupTTL
	check := func(s *Store, who string) {
		t.Helper()
		ts, ok := s.TubeStats([]byte("mail"))
		if !ok || ts.CmdPause > 1 || ts.PauseTimeLeft > 55*time.Second || ts.PauseTimeLeft < 50*time.Second {
			t.Errorf("%s: stats-tube mail %+v; want one pause-tube, 55 s left", who, ts)
		}
	}
	again := g.leader.NewClient(nil)
	defer again.Close()
	if !again.PauseTubeKeyed(key(1), []byte("mail"), time.Minute) {
		t.Error("resent to the same leader: NOT_FOUND")
	}
	check(g.leader, "the leader")

	nc := g.follower.NewClient(nil)
	defer nc.Close()
	nc.Use([]byte("mail"))
	g.follower.Lead()
	if !nc.PauseTubeKeyed(key(1), []byte("mail"), time.Minute) {
		t.Error("resent to the new leader: NOT_FOUND")
	}
	check(g.follower, "the new leader")
	if !g.follower.Answered(key(1)) || g.follower.Answered(key(2)) {
		t.Error("the new leader's table: want key 1's pause alone")
	}
}

// TestDedupEntriesIdle: DedupEntries (the gauge
// sprout_cluster_dedup_entries) counts the entries a keyed request could
// still be answered from. On an idle cluster no batch comes to expire the
// table, so the entries stay held past DedupTTL; the count must not stay
// up with them, on the leader or on a follower, whose wall clock runs on
// too. Found by a reviewing helper.
func TestDedupEntriesIdle(t *testing.T) {
	g := newGroup(t)
	c := g.leader.NewClient(nil)
	defer c.Close()
	c.Use([]byte("t"))
	for n := range uint64(3) {
		if _, put, err := c.PutKeyed(key(n+1), 0, 0, 60, []byte("x\r\n")); err != nil || !put {
			t.Fatalf("PutKeyed: put %v, %v", put, err)
		}
	}
	g.ship()
	for name, s := range map[string]*Store{"leader": g.leader, "follower": g.follower} {
		if n := s.DedupEntries(); n != 3 {
			t.Errorf("%s: %d entries, want 3", name, n)
		}
	}
	// The follower's wall clock is its own, microseconds off the leader's.
	g.now.Add(int64(DedupTTL - time.Millisecond))
	for name, s := range map[string]*Store{"leader": g.leader, "follower": g.follower} {
		if n := s.DedupEntries(); n != 3 {
			t.Errorf("%s, a millisecond before expiry: %d entries, want 3", name, n)
		}
	}
	g.now.Add(int64(2 * time.Millisecond)) // idle: no batch proposed, none applied
	for name, s := range map[string]*Store{"leader": g.leader, "follower": g.follower} {
		if n := s.DedupEntries(); n != 0 {
			t.Errorf("%s, idle past DedupTTL: %d entries, want 0", name, n)
		}
		if d := s.DedupTable(); d.Len() != 3 {
			t.Errorf("%s: the table itself holds %d entries; counting should not change it", name, d.Len())
		}
	}
}
