package replication

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// dirBytes is what the segment files in dir take, preallocated ones
// included.
func dirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".wal") {
			continue
		}
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

// churn is puts and deletes through a member's store at a steady live
// set, with a few jobs kept from the start: what the cluster must keep
// within its disk bound.
type churn struct {
	t       *testing.T
	c       *netCluster
	window  []uint64        // the churning jobs live, oldest first
	kept    map[uint64]bool // acknowledged puts not deleted
	deleted map[uint64]bool // acknowledged deletes
	// over is, for each member, the most its directory held past twice
	// its live data, in segments; but for the members in unmeasured.
	over       map[string]float64
	unmeasured map[string]bool
}

func newChurn(t *testing.T, c *netCluster) *churn {
	return &churn{t: t, c: c, kept: map[uint64]bool{}, deleted: map[uint64]bool{}, over: map[string]float64{}}
}

// keep puts n jobs that stay.
func (ch *churn) keep(l *Node, n int) {
	cl := newNetClient(l, "kept")
	defer cl.client.Close()
	var ids []uint64
	for i := range n {
		id, _ := cl.put(fmt.Sprintf("kept %d %s", i, strings.Repeat("k", 400)))
		ids = append(ids, id)
	}
	awaitAck(ch.t, l.Journal(), cl.client.PendingAck(), 10*time.Second)
	for _, id := range ids {
		ch.kept[id] = true
	}
}

// run puts and deletes through leader l, rounds of batch puts each
// deleting the oldest churning jobs past live, each round acknowledged
// before the next, and measures every member's directory after each.
//
// A leader may lose its lease in the middle of a round (a member just
// restarted is installing a snapshot while another is down, and the
// leader hears from no majority for an election timeout): its
// unacknowledged changes are dropped by its rebuild, or committed by the
// next leader. That round counts for nothing (its deletes' outcome is
// unknown, so their jobs are no longer expected either way) and the
// rounds go on through whoever serves next.
func (ch *churn) run(l *Node, rounds, batch, live int) {
	cl := newNetClient(l, "churn")
	defer func() { cl.client.Close() }()
	for round := range rounds {
		rebuilds := l.Stats().Rebuilds
		var puts, dels []uint64
		for k := range batch {
			id, _ := cl.put(fmt.Sprintf("round %d job %d %s", round, k, strings.Repeat("c", 500)))
			puts = append(puts, id)
			ch.window = append(ch.window, id)
			if len(ch.window) > live {
				if cl.client.Delete(ch.window[0]) {
					dels = append(dels, ch.window[0])
				}
				ch.window = ch.window[1:]
			}
		}
		if !ackedOrDeposed(ch.t, l, rebuilds, cl.client.PendingAck(), 10*time.Second) {
			ch.t.Logf("round %d: %s lost its leadership before acknowledging it", round, l.self.Name)
			for _, id := range dels {
				delete(ch.kept, id)
			}
			cl.client.Close()
			l = ch.c.awaitServing(10 * time.Second)
			cl = newNetClient(l, "churn")
			continue
		}
		for _, id := range puts {
			ch.kept[id] = true
		}
		for _, id := range dels {
			delete(ch.kept, id)
			ch.deleted[id] = true
		}
		ch.measure()
	}
}

// ackedOrDeposed waits until l's journal acknowledges pos (true) or l
// stops serving or is rebuilt past rebuilds (false: pos may never be
// acknowledged). Neither within timeout fails the test.
func ackedOrDeposed(t *testing.T, l *Node, rebuilds, pos uint64, timeout time.Duration) bool {
	t.Helper()
	acked := make(chan struct{})
	l.Journal().OnAcked(pos, func() { close(acked) })
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		info, changed := l.Leader()
		if !info.Serving || l.Stats().Rebuilds > rebuilds {
			select {
			case <-acked:
				return true
			default:
				return false
			}
		}
		select {
		case <-acked:
			return true
		case <-changed:
		case <-deadline.C:
			t.Fatalf("position %d not acknowledged within %v (acknowledged: %d)", pos, timeout, l.Journal().Acked())
		}
	}
}

// measure notes how far past twice its live data each member's
// directory is, once its compaction has caught up with the round just
// acknowledged: removing a segment follows its rewrite, which the log
// does behind the writes, so on a loaded machine the peak right after a
// round is a matter of scheduling. A member that does not get back under
// boundSegments within five seconds keeps the figure it reached, and
// fails (one second was too short at a load average of 10 on two cores:
// 8.2 segments, then back under the bound).
func (ch *churn) measure() {
	for name, w := range ch.c.wals {
		if ch.unmeasured[name] {
			continue
		}
		over := func() float64 {
			return float64(dirBytes(ch.t, ch.c.dirs[name])-2*w.Stats().LiveBytes) / float64(ch.c.segSize)
		}
		now := over()
		for deadline := time.Now().Add(5 * time.Second); now > boundSegments && time.Now().Before(deadline); now = over() {
			time.Sleep(10 * time.Millisecond)
		}
		ch.over[name] = max(ch.over[name], now)
	}
}

// boundSegments is how many segments past twice its live data a member's
// directory may hold: the single node's bound, a few segments.
const boundSegments = 6

// check makes sure every acknowledged put not deleted is on every
// member's store and no acknowledged delete came back, once they agree.
func (ch *churn) check(leader *Node) {
	ch.t.Helper()
	want := ch.c.converged(leader, 10*time.Second)
	for id := range ch.kept {
		if _, ok := want[id]; !ok {
			ch.t.Errorf("acknowledged job %d is gone", id)
		}
	}
	for id := range ch.deleted {
		if _, ok := want[id]; ok {
			ch.t.Errorf("job %d, whose delete was acknowledged, is back", id)
		}
	}
}

// TestNodeWALChurn: three members on directories, puts and deletes at a
// steady live set with some jobs kept from the start. Every member's
// directory stays within twice its live data plus a few segments: the
// leader migrates the kept jobs out of its oldest segments, and the
// followers remove theirs as the rewrites reach them. After the leader
// crashes, the new one migrates the jobs it applied (they are in its
// segments); the crashed member restarts on its directory under its id
// and catches up; and all three crashing at once lose no acknowledged
// change.
func TestNodeWALChurn(t *testing.T) {
	const segSize = 32 << 10
	c := newWALCluster(t, 3, segSize, nil)
	l := c.awaitServing(10 * time.Second)
	ch := newChurn(t, c)
	ch.keep(l, 20)
	ch.run(l, 60, 40, 60)
	ch.check(l)
	for name, over := range ch.over {
		t.Logf("%s: at most %.1f segments past twice its live data; now %d bytes, %d live",
			name, over, dirBytes(t, c.dirs[name]), c.wals[name].Stats().LiveBytes)
		if over > boundSegments {
			t.Errorf("%s's directory grew to %.1f segments past twice its live data", name, over)
		}
	}
	for name, w := range c.wals {
		if st := w.Stats(); st.OldestIndex < 10 {
			t.Errorf("%s's oldest segment is %d: the kept jobs were not moved out", name, st.OldestIndex)
		}
	}

	// The leader crashes; the new one moves the kept jobs it applied.
	crashed := l.self.Name
	c.crash(crashed)
	nl := c.awaitServing(10 * time.Second)
	oldest, current := c.wals[nl.self.Name].Stats().OldestIndex, c.wals[nl.self.Name].Stats().CurrentIndex
	clear(ch.over)
	ch.run(nl, 60, 40, 60)
	if now := c.wals[nl.self.Name].Stats().OldestIndex; now <= oldest+3 {
		t.Errorf("the new leader's oldest segment went from %d to %d: it did not move the jobs it applied", oldest, now)
	}
	for name, over := range ch.over {
		t.Logf("after the failover, %s: at most %.1f segments past twice its live data", name, over)
		if over > boundSegments {
			t.Errorf("after the failover %s's directory grew to %.1f segments past twice its live data", name, over)
		}
	}

	// The crashed member comes back on its directory, under its id; the
	// leader compacted past its log meanwhile, so a snapshot of the
	// leader's (read back from its segments) fills it. The leader keeps
	// the entries of its newest retainSegments segments for followers,
	// and compacts on its ticks: churn goes on until it has removed the
	// segment it wrote when the crash came (on a loaded machine raft's
	// entries are fewer and larger, the churn above may fill fewer
	// segments, and compaction may lag).
	for deadline := time.Now().Add(30 * time.Second); c.wals[nl.self.Name].Stats().OldestIndex <= current; {
		if time.Now().After(deadline) {
			t.Fatalf("the leader's oldest segment is %d after 30 s of churn, still at or below %d, which it wrote at the crash",
				c.wals[nl.self.Name].Stats().OldestIndex, current)
		}
		ch.run(nl, 10, 40, 60)
	}
	back := c.restart(crashed)
	ch.check(nl)
	if got := back.Stats().Transport.SnapshotsReceived; got == 0 {
		t.Errorf("%s caught up without a snapshot", crashed)
	}
	testproc.WaitFor(t, 10*time.Second, crashed+" following", func() bool {
		for _, m := range nl.Status().Members {
			if m.Name == crashed && m.Connected && m.Match != nil && *m.Match > 0 {
				return back.Status().Leader == nl.self.Name
			}
		}
		return false
	})

	// All three crash at once.
	for _, m := range c.peers {
		c.crash(m.Name)
	}
	for _, m := range c.peers {
		c.restart(m.Name)
	}
	ch.check(c.awaitServing(10 * time.Second))
}

// TestNodeWALRestartsOneAtATime: members on directories crash and
// restart one at a time while puts and deletes go on through whichever
// leads; no acknowledged change is lost, and each restarted member
// rejoins and catches up.
func TestNodeWALRestartsOneAtATime(t *testing.T) {
	c := newWALCluster(t, 3, 64<<10, nil)
	ch := newChurn(t, c)
	for i, m := range append(c.peers, c.peers...) {
		l := c.awaitServing(10 * time.Second)
		ch.run(l, 5, 20, 40)
		victim := m.Name
		if i%2 == 1 {
			victim = l.self.Name // every other time, the leader
		}
		c.crash(victim)
		ch.run(c.awaitServing(10*time.Second), 3, 20, 40)
		c.restart(victim)
	}
	ch.check(c.awaitServing(10 * time.Second))
}

// TestNodeWALTakesOverASingleNode: a single node's -b directory started
// as a cluster of one keeps every job, and ids go on above its own.
func TestNodeWALTakesOverASingleNode(t *testing.T) {
	dir := t.TempDir()
	single, err := wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(store.Options{Log: single})
	if err := single.Start(s); err != nil {
		t.Fatal(err)
	}
	cl := s.NewClient(nil)
	cl.Use([]byte("old"))
	var ids []uint64
	for i := range 5 {
		id := s.NextID()
		if _, err := cl.Put(id, 7, 0, 60, []byte(fmt.Sprintf("job %d\r\n", i))); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cl.Delete(ids[0])
	cl.Close()
	s.Close()
	if err := single.Close(); err != nil {
		t.Fatal(err)
	}

	c, lns := makeNetCluster(t, 1, nil)
	c.dirs, c.wals, c.segSize = map[string]string{"m1": dir}, map[string]*WALLog{}, 64<<10
	c.startAll(lns)
	l := c.awaitServing(10 * time.Second)
	got := viewOf(l.Store())
	for _, id := range ids[1:] {
		if j, ok := got[id]; !ok || j.tube != "old" || j.pri != 7 {
			t.Errorf("job %d after the takeover: %+v, %v", id, j, ok)
		}
	}
	if _, ok := got[ids[0]]; ok || len(got) != 4 {
		t.Errorf("%d jobs after the takeover, want the 4 not deleted", len(got))
	}
	nc := newNetClient(l, "new")
	if id, pos := nc.put("new"); id <= ids[4] {
		t.Errorf("the cluster issued id %d, not above the single node's %d", id, ids[4])
	} else {
		awaitAck(t, l.Journal(), pos, 5*time.Second)
	}
}
