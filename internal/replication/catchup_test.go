package replication

import (
	"fmt"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestCaughtUpAsksTheLeader: a follower restarted behind is caught up
// (Core.CaughtUp, what /readyz waits for) only once it has applied what
// the leader had committed when it asked. The leader's heartbeat tells it
// the leader and a commit index, but one no further than the follower's
// own log: that is not enough. A request lost is asked again after an
// election timeout, and until an answer comes the follower is not caught
// up, even once it holds everything. Once caught up it stays so while the
// leader commits on; the leader is caught up as it serves.
func TestCaughtUpAsksTheLeader(t *testing.T) {
	c := newCluster(t, 3, 1000)
	l := c.elect(1)
	c.putAcked(l, "first")
	for _, m := range c.up() {
		if !m.core.CaughtUp() {
			t.Fatalf("member %d not caught up in a cluster at rest", m.id)
		}
	}

	lag := c.members[3]
	c.crash(lag)
	for i := range 20 {
		c.putAcked(l, fmt.Sprintf("job %d", i))
	}
	commit := l.core.Status().GetCommit()
	c.start(lag)
	if lag.core.CaughtUp() {
		t.Fatal("a member restarted behind is caught up before it knows a leader")
	}
	l.core.Tick() // a heartbeat
	c.run(l)
	c.deliver()
	if lead := lag.core.Status().Lead; lead != l.id {
		t.Fatalf("after the leader's heartbeat member 3 knows leader %d", lead)
	}
	if lag.core.CaughtUp() || lag.core.Applied() >= commit {
		t.Fatalf("after the heartbeat: caught up %v, applied %d of the leader's %d: want not caught up, behind",
			lag.core.CaughtUp(), lag.core.Applied(), commit)
	}
	asked := slices.IndexFunc(c.net, func(m *pb.Message) bool { return m.GetType() == pb.MsgReadIndex && m.GetFrom() == lag.id })
	if asked < 0 {
		t.Fatal("member 3 knows the leader and did not ask it for its commit index")
	}
	c.net = slices.Delete(c.net, asked, asked+1) // lost
	c.stabilize()
	if lag.core.Applied() < commit {
		t.Fatalf("member 3 applied %d of %d: it did not catch up", lag.core.Applied(), commit)
	}
	if lag.core.CaughtUp() {
		t.Fatal("member 3 caught up with no answer from the leader")
	}
	for range testElectionTick {
		c.tick()
	}
	if !lag.core.CaughtUp() {
		t.Fatalf("member 3 not caught up an election timeout after its request was lost (%d asked)", c.sent[pb.MsgReadIndex])
	}

	c.partition([]uint64{lag.id}, []uint64{1, 2}) // the leader commits on without it
	for i := range 5 {
		c.putAcked(l, fmt.Sprintf("after %d", i))
	}
	if !lag.core.CaughtUp() || !l.core.CaughtUp() {
		t.Errorf("as the leader commits on: member 3 caught up %v, the leader %v; want both still", lag.core.CaughtUp(), l.core.CaughtUp())
	}
}

// TestCaughtUpAsksTheNextLeader: a follower whose leader is cut off
// before it answers asks the next leader once it knows it.
func TestCaughtUpAsksTheNextLeader(t *testing.T) {
	c := newCluster(t, 3, 1000)
	l := c.elect(1)
	c.putAcked(l, "first")
	lag := c.members[3]
	c.crash(lag)
	for i := range 5 {
		c.putAcked(l, fmt.Sprintf("job %d", i))
	}
	c.start(lag)
	l.core.Tick()
	c.run(l)
	c.deliver() // member 3 learns the leader, and asks it
	if !slices.ContainsFunc(c.net, func(m *pb.Message) bool { return m.GetType() == pb.MsgReadIndex && m.GetTo() == l.id }) {
		t.Fatal("member 3 did not ask the leader")
	}
	c.partition([]uint64{l.id}, []uint64{2, 3})
	nl := c.awaitLeader(2, 3)
	if nl.id != 2 {
		t.Fatalf("member %d leads, want 2 (member 3's log is behind)", nl.id)
	}
	c.stabilize()
	if !lag.core.CaughtUp() || lag.core.Applied() < nl.core.Status().GetCommit() {
		t.Fatalf("member 3: caught up %v, applied %d of the new leader's %d; want caught up",
			lag.core.CaughtUp(), lag.core.Applied(), nl.core.Status().GetCommit())
	}
	if n := c.sent[pb.MsgReadIndex]; n < 2 {
		t.Errorf("%d requests sent, want member 3's to the old leader and to the new", n)
	}
}
