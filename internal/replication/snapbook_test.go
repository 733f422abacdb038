package replication

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sproutmq/sprout/store/wal"
)

// TestSnapshotBookAsOfItsIndex: the book a MsgSnap carries (its Context)
// is the book as of the snapshot's index. The leader builds the snapshot
// at its commit index (logState.snapshotLocked), which runs ahead of what
// it has applied while its own disk is slower than a majority's; the book
// it sent was its core's, as of what it applied. A control record
// committed but not yet applied on the leader was then in neither the
// book the follower merged nor the entries it applied after the snapshot
// (their index is at or below the book's, which the install sets to the
// snapshot's): the follower's book never had it. Found by a reviewing
// helper.
func TestSnapshotBookAsOfItsIndex(t *testing.T) {
	c := newCluster(t, 5, 4)
	l := c.elect(1)
	rng := rand.New(rand.NewPCG(3, 4))
	p := c.producer(l, "work")
	var ids []uint64
	p.workload(rng, &ids, 30)
	c.run(l)
	c.stabilize()
	lag := c.members[3]
	c.crash(lag)
	c.compactPast(t, l, lag, p, rng, &ids, 20)

	// A control record (member 9 draining): members 2, 4 and 5 make it
	// durable, so it commits; the leader's own disk has not synced it
	// yet, so the leader has not applied it.
	if _, _, err := l.journal.Append(&wal.Record{Kind: wal.KindControl, State: controlDrain, Deadline: 9, Pri: 1}, wal.Loc{}); err != nil {
		t.Fatal(err)
	}
	c.run(l)
	others := []*member{c.members[2], c.members[4], c.members[5]}
	for range 3 {
		c.deliver()
		for _, f := range others {
			c.fsync(f)
		}
	}
	last, _ := l.disk.LastIndex()
	if st := l.core.Status(); slices.Contains(l.core.Book().Draining, 9) || st.GetCommit() != last {
		t.Fatalf("setup: the leader committed %d of %d, its book draining %v; want the record committed, not applied there",
			st.GetCommit(), last, l.core.Book().Draining)
	}

	// Member 3 comes back and is sent a snapshot while the leader's disk
	// still lags.
	c.start(lag)
	for range 5 * testElectionTick {
		if c.snapshots > 0 {
			break
		}
		l.core.Tick()
		c.run(l)
		for range 3 {
			c.deliver()
			for _, f := range append(others, lag) {
				c.fsync(f)
			}
		}
	}
	for range 5 * testElectionTick {
		if c.snapshots > 0 {
			break
		}
		c.tick() // the leader's disk syncs too
	}
	if c.snapshots == 0 {
		t.Fatal("no snapshot was sent")
	}
	for range 3 {
		c.tick()
	}
	c.converged(viewOf(l.store))
	for _, id := range c.ids {
		if b := c.members[id].core.Book(); !slices.Contains(b.Draining, 9) {
			t.Errorf("member %d's book (index %d) has draining %v: the committed record that marks member 9 draining is lost",
				id, b.Index, b.Draining)
		}
	}
}

// TestSnapshotBookSurvivesCrash: a follower that installs a snapshot and
// crashes before the ActMembership that follows the install is durable
// comes back with the snapshot's book. The log's install moved the book's
// index to the snapshot's but kept the book it had, and the snapshot
// frame carried no book: the book that came with the snapshot was
// written only by the later SetMembership. A crash between the two left a
// log whose book said it was as of the snapshot's index and held none of
// what came with it; the entries through that index are never applied
// again, so the member never learnt it. Found by a reviewing helper.
func TestSnapshotBookSurvivesCrash(t *testing.T) {
	c := newCluster(t, 3, 4)
	l := c.elect(1)
	lag := c.members[3]
	c.crash(lag)
	// Member 9 marked draining while member 3 is down.
	if _, _, err := l.journal.Append(&wal.Record{Kind: wal.KindControl, State: controlDrain, Deadline: 9, Pri: 1}, wal.Loc{}); err != nil {
		t.Fatal(err)
	}
	c.run(l)
	c.stabilize()
	rng := rand.New(rand.NewPCG(5, 6))
	var ids []uint64
	c.compactPast(t, l, lag, c.producer(l, "work"), rng, &ids, 10)

	// Member 3 comes back; the round that steps the snapshot is carried
	// out, and its install made durable, then the actions that follow
	// (ActRestore, ActMembership), whose writes are not durable yet.
	c.start(lag)
	restores := lag.restores
	for round := 0; c.snapshots == 0 && round < 10*testElectionTick; round++ {
		for _, id := range c.ids {
			if m := c.members[id]; m.up {
				m.core.Tick()
				c.run(m)
			}
		}
		for range 10 {
			for _, id := range c.ids {
				c.fsync(c.members[id])
			}
			if c.deliver() == 0 || c.snapshots > 0 {
				break
			}
		}
	}
	if c.snapshots == 0 {
		t.Fatal("no snapshot was sent")
	}
	lag.disk.sync() // the install is durable
	c.run(lag)      // its restore and membership
	if lag.restores != restores+1 || !slices.Contains(lag.core.Book().Draining, 9) {
		t.Fatalf("setup: member 3 restored %d times, its book draining %v; want the snapshot installed, member 9 draining",
			lag.restores-restores, lag.core.Book().Draining)
	}
	c.crash(lag)
	c.start(lag)
	for range 3 {
		c.tick()
	}
	c.converged(viewOf(l.store))
	if b := lag.core.Book(); !slices.Contains(b.Draining, 9) {
		t.Errorf("member 3, restarted after installing a snapshot, has a book (index %d) with draining %v: "+
			"what the snapshot's book said is lost", b.Index, b.Draining)
	}
}

// compactPast runs rounds of p's workload through leader l, then has l
// write every live job again (compaction) and runs a little more, so
// that l's log no longer holds the entries after lag's last: lag, down
// meanwhile, needs a snapshot to catch up.
func (c *cluster) compactPast(t *testing.T, l, lag *member, p *producer, rng *rand.Rand, ids *[]uint64, rounds int) {
	t.Helper()
	lagLast, _ := lag.disk.LastIndex()
	for range rounds {
		p.workload(rng, ids, 10)
		c.run(l)
		c.stabilize()
	}
	l.store.Migrate(1, slices.Clone(*ids))
	c.run(l)
	c.stabilize()
	for range 3 {
		p.workload(rng, ids, 5)
		c.run(l)
		c.stabilize()
	}
	if first, _ := l.disk.FirstIndex(); first <= lagLast+1 {
		t.Fatalf("the leader's log begins at %d: member %d (last %d) needs no snapshot", first, lag.id, lagLast)
	}
}
