package replication

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// groupLogs are a new log for every member of c, for a group whose
// replicas are c's members: MemoryLogs keeping retain entries.
func groupLogs(c *netCluster, retain int) map[string]*gatedLog {
	var ids []uint64
	for _, m := range c.peers {
		ids = append(ids, m.ID)
	}
	logs := map[string]*gatedLog{}
	for _, m := range c.peers {
		logs[m.Name] = &gatedLog{MemoryLog: NewMemoryLog(ids, retain)}
	}
	return logs
}

// startGroups starts group g's replica on every member of c, each on a
// log of its own, and returns them by member.
func startGroups(t testing.TB, c *netCluster, g uint16, logs map[string]*gatedLog) map[string]*Node {
	t.Helper()
	nodes := map[string]*Node{}
	for _, m := range c.peers {
		if nodes[m.Name] = startGroup(t, c, g, m.Name, logs[m.Name]); nodes[m.Name] == nil {
			t.Fatalf("group %d on %s did not start", g, m.Name)
		}
	}
	return nodes
}

// startGroup starts group g's replica on member name, on log.
func startGroup(t testing.TB, c *netCluster, g uint16, name string, log Log) *Node {
	t.Helper()
	n, err := c.nodes[name].Host().StartGroup(g, NodeConfig{Peers: c.peers, Log: log, Tick: testTick,
		Logger: zerolog.New(c.output).Level(zerolog.InfoLevel).With().Timestamp().Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// groupUp are the nodes of a group that run.
func groupUp(nodes map[string]*Node) []*Node {
	var up []*Node
	for _, n := range nodes {
		select {
		case <-n.Done():
		default:
			up = append(up, n)
		}
	}
	return up
}

// TestHostTwoGroups: three members run group 0 and a second group, each
// on its own logs, over one transport per member. Each elects, replicates
// and acknowledges on its own; when the second group loses its leader's
// replica it elects another while group 0 keeps its leader and term and
// goes on acknowledging; the replica started again catches up; messages
// for the group while its replica was down were dropped and counted, on
// connections that stayed up. When the second group's leader loses its
// majority it rebuilds in place, unnoticed by group 0; when group 0's
// replica stops, the member's other groups stop with it. Only group 0's
// membership changes, and only a group's leader adds a replica.
func TestHostTwoGroups(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	logs := groupLogs(c, 100)
	g1 := startGroups(t, c, 1, logs)
	l0 := c.awaitServing(10 * time.Second)
	l1 := c.awaitServing(10*time.Second, groupUp(g1)...)
	term0 := l0.Status().Term

	put := func(l *Node, body string) uint64 {
		t.Helper()
		id, pos := newNetClient(l, "tube").put(body)
		awaitAck(t, l.Journal(), pos, 10*time.Second)
		return id
	}
	if id := put(l0, "group 0's first"); id != 1 {
		t.Errorf("group 0's first id: %d, want 1", id)
	}
	if id := put(l1, "group 1's first"); id != 1<<store.IDSeqBits+1 {
		t.Errorf("group 1's first id: %d, want its prefix's first, %d", id, 1<<store.IDSeqBits+1)
	}
	// Every member lists both groups, each with its leader, voters and
	// its replica's jobs.
	for _, n := range c.up() {
		var got []GroupStatus
		testproc.WaitFor(t, 5*time.Second, n.Name()+"'s groups", func() bool {
			got = n.Status().Groups
			return len(got) == 2 && got[0].Jobs == 1 && got[1].Jobs == 1 &&
				got[0].Leader == l0.Name() && got[1].Leader == l1.Name()
		})
		for i, g := range got {
			if g.ID != i || !slices.Equal(g.Replicas, []string{"m1", "m2", "m3"}) || g.Tubes != 2 || len(g.Learners) != 0 { // "default" and "tube"
				t.Errorf("%s's group %d: %+v", n.Name(), i, g)
			}
		}
	}

	// Each group's figures, on the member leading group 1.
	if gs := c.nodes[l1.Name()].Stats().Groups; len(gs) != 2 || gs[0].Group != 0 || gs[1].Group != 1 ||
		!gs[1].Serving || gs[1].Proposals == 0 || gs[0].Serving != (l0.Name() == l1.Name()) {
		t.Errorf("%s's groups' figures: %+v", l1.Name(), gs)
	}
	if _, err := l1.AddMember(t.Context(), "m4", "127.0.0.1:1"); !errors.Is(err, ErrStaticGroup) {
		t.Errorf("a member added to group 1: %v", err)
	}
	// A replica is added by the group's leader alone: a follower does
	// not have raft forward a move it planned on its own view.
	for name, n := range g1 {
		info, _ := n.Leader()
		_, err := n.AddReplica(t.Context(), "m1")
		switch {
		case info.Serving && !errors.Is(err, ErrMemberExists):
			t.Errorf("group 1's leader adding m1, a replica: %v, want ErrMemberExists", err)
		case !info.Serving && !errors.Is(err, ErrNotServing):
			t.Errorf("group 1's follower on %s adding a replica: %v, want ErrNotServing", name, err)
		}
	}
	if _, err := c.nodes["m1"].Host().StartGroup(1, NodeConfig{Peers: c.peers, Log: logs["m1"]}); !errors.Is(err, ErrGroupRunning) {
		t.Errorf("group 1 started twice: %v", err)
	}

	// Group 1 loses its leader's replica; its member stays, and so does
	// group 0's replica on it.
	down := l1.Name()
	l1.Close()
	var rest []*Node
	for name, n := range g1 {
		if name != down {
			rest = append(rest, n)
		}
	}
	for i := range 20 {
		put(l0, fmt.Sprint("group 0 during group 1's failover ", i))
	}
	l1 = c.awaitServing(10*time.Second, rest...)
	put(l1, "group 1 after its failover")
	if st := l0.Status(); st.Term != term0 || st.Leader != l0.Name() || !st.Serving {
		t.Errorf("group 0 changed while group 1 failed over: term %d (was %d), leader %q (was %s)", st.Term, term0, st.Leader, l0.Name())
	}
	// The new leader's heartbeats reach the member without its replica
	// at its next ticks: waited for, since an election under load may
	// have come between.
	testproc.WaitFor(t, 5*time.Second, "a message of group 1 counted unrouted on "+down+" while its replica was down", func() bool {
		return c.nodes[down].Stats().Transport.MessagesUnrouted > 0
	})
	if st := c.nodes[down].Stats().Transport; st.Refused != 0 {
		t.Errorf("%s refused connections: %+v", down, st)
	}

	// The replica starts again on its log and catches up.
	g1[down] = startGroup(t, c, 1, down, logs[down])
	want := viewOf(l1.Store())
	testproc.WaitFor(t, 10*time.Second, down+"'s group 1 catching up", func() bool {
		return diffViews(want, viewOf(g1[down].Store())) == ""
	})
	if got := len(viewOf(l0.Store())); got != 21 {
		t.Errorf("group 0 holds %d jobs, want 21", got)
	}
	if got := len(want); got != 2 {
		t.Errorf("group 1 holds %d jobs, want 2", got)
	}

	// Group 1's leader loses its majority and rebuilds in place; group 0,
	// with its leader on any member, does not notice.
	for name, n := range g1 {
		if n != l1 {
			n.Close()
			delete(g1, name)
		}
	}
	testproc.WaitFor(t, 10*time.Second, "group 1's leader stepping down", func() bool {
		return l1.Stats().Rebuilds == 1 && !l1.Status().Serving
	})
	put(l0, "group 0 after group 1's rebuild")
	if st := l0.Status(); st.Term != term0 || st.Leader != l0.Name() {
		t.Errorf("group 0 changed while group 1 rebuilt: term %d (was %d), leader %q (was %s)", st.Term, term0, st.Leader, l0.Name())
	}
	if got := viewOf(l1.Store()); diffViews(want, got) != "" {
		t.Errorf("group 1's store after its rebuild: %s", diffViews(want, got))
	}

	// Group 0's end is the member's: its other groups stop with it.
	c.kill(l1.Name())
	select {
	case <-l1.Done():
	case <-time.After(5 * time.Second):
		t.Error("group 1 runs on after its member's group 0 stopped")
	}
}

// TestHostTicksTogether: one ticker gives a member's groups their ticks at
// once, so the heartbeats of four groups led by one member go to each
// peer together, a frame carrying several; a ticker per group would send
// them apart.
func TestHostTicksTogether(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	l0 := c.awaitServing(10 * time.Second)
	var leaders []*Node
	for g := uint16(1); g <= 3; g++ {
		nodes := startGroups(t, c, g, groupLogs(c, 100))
		l := c.awaitServing(10*time.Second, groupUp(nodes)...)
		if l.Name() != l0.Name() {
			if err := l.TransferLeadership(l0.Name()); err != nil {
				t.Fatal(err)
			}
			l = nodes[l0.Name()]
			testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("group %d's leadership on %s", g, l0.Name()), func() bool {
				return l.Status().Serving
			})
		}
		leaders = append(leaders, l)
	}
	before := c.nodes[l0.Name()].Stats().Transport
	time.Sleep(20 * testTick) // the measurement: twenty ticks of heartbeats
	after := c.nodes[l0.Name()].Stats().Transport
	beats, frames := after.Heartbeats-before.Heartbeats, after.HeartbeatFrames-before.HeartbeatFrames
	// 4 groups × 2 peers × 20 ticks (heartbeat tick 1) = 160 heartbeats,
	// in 40 frames when all go together, 160 when none do: a ticker per
	// group sent 158–160 here, one ticker 48–77.
	if beats < 80 || float64(beats) < 1.5*float64(frames) {
		t.Errorf("%d heartbeats in %d frames over twenty ticks: the groups' heartbeats went apart", beats, frames)
	}
	t.Logf("%d heartbeats in %d frames", beats, frames)
	for _, l := range leaders {
		if !l.Status().Serving {
			t.Errorf("group %d lost its leader during the measurement", l.group)
		}
	}
}

// TestHeardFrom: a member hears from the members that answer it, and
// stops hearing from one that stopped at once, though its connection
// could look up for seconds (a SIGSTOP).
func TestHeardFrom(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	leader := c.awaitServing(10 * time.Second)
	others := c.others(leader)
	within := leader.ElectionTimeout() / 3
	testproc.WaitFor(t, 5*time.Second, "the leader hearing from both followers", func() bool {
		return leader.Host().HeardFrom(others[0].Name(), within) && leader.Host().HeardFrom(others[1].Name(), within)
	})
	if leader.Host().HeardFrom("nobody", within) {
		t.Error("heard from a member not known")
	}
	stopped := others[1].Name()
	c.kill(stopped)
	testproc.WaitFor(t, within+2*time.Second, "the leader no longer hearing from "+stopped, func() bool {
		return !leader.Host().HeardFrom(stopped, within)
	})
	if !leader.Host().HeardFrom(others[0].Name(), within) {
		t.Errorf("the leader stopped hearing from %s, which runs", others[0].Name())
	}
}

// TestHostStaleHeartbeat: a replica of a group but 0 started again empty
// and voting nowhere, under the id of one its leader still counts as
// holding the log (a replica removed and added again, before the leader
// applied the removal), gets heartbeats that commit past its empty log.
// It drops them and goes on, where a voter would stop (ErrLogLost).
func TestHostStaleHeartbeat(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	logs := groupLogs(c, 100)
	g1 := startGroups(t, c, 1, logs)
	l1 := c.awaitServing(10*time.Second, groupUp(g1)...)
	for i := range 5 {
		_, pos := newNetClient(l1, "tube").put(fmt.Sprint("job ", i))
		awaitAck(t, l1.Journal(), pos, 10*time.Second)
	}
	var other string
	for name := range g1 {
		if name != l1.Name() {
			other = name
			break
		}
	}
	g1[other].Close()
	<-g1[other].Done()
	fresh := startGroup(t, c, 1, other, NewMemoryLog(nil, 0)) // empty, voting nowhere
	heartbeats := 20 * testTick                               // the leader's, every tick
	select {
	case <-fresh.Done():
		t.Fatalf("the replica started empty stopped: %v", fresh.Err())
	case <-time.After(heartbeats):
	}
	if err := fresh.Err(); err != nil {
		t.Fatalf("the replica started empty: %v", err)
	}
}

// TestHostBusyGroup: a group whose node is stuck (its mutex held here, as
// a long round would hold its goroutine) does not stall the member's other
// groups, whose messages share its connections: what comes for the stuck
// group past its inbox's room is dropped and counted, group 0's replica on
// the same member goes on taking its leader's entries, and the stuck group
// catches up once free. Were the transport to wait for room, the peer's
// connection would carry nothing more until the stuck group took again.
func TestHostBusyGroup(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	g1 := startGroups(t, c, 1, groupLogs(c, 100))
	l0 := c.awaitServing(10 * time.Second)
	l1 := c.awaitServing(10*time.Second, groupUp(g1)...)
	var stuck *Node // group 1's replica on a member leading neither group
	for name, n := range g1 {
		if name != l0.Name() && name != l1.Name() {
			stuck = n
			break
		}
	}
	from := c.nodes[l0.Name()]
	term := l1.Status().Term
	stuck.mu.Lock()
	locked := true
	defer func() {
		if locked {
			stuck.mu.Unlock()
		}
	}()

	// Group 1's answers from group 0's leader's member to the stuck
	// replica, which a follower ignores once it steps them, until it has
	// no room for them.
	answer := &pb.Message{Type: pb.MsgHeartbeatResp.Enum(), From: new(from.self.ID), To: new(stuck.self.ID), Term: new(term)}
	shed := func() uint64 { return c.nodes[stuck.Name()].host.transport.stats().MessagesShed }
	send := func() {
		for range 100 {
			from.host.transport.send(groupID(1), []*pb.Message{answer})
		}
	}
	testproc.WaitFor(t, 10*time.Second, "the stuck replica's inbox full", func() bool {
		send()
		return len(stuck.inbox) == cap(stuck.inbox)
	})
	send()
	id, pos := newNetClient(l0, "tube").put("while group 1 is stuck on " + stuck.Name())
	// Bounds that leave room for a loaded machine: what is checked is that
	// the put arrives beside the stuck group at all.
	awaitAck(t, l0.Journal(), pos, 15*time.Second)
	testproc.WaitFor(t, 15*time.Second, "group 0's replica beside the stuck group taking the put", func() bool {
		_, ok := c.nodes[stuck.Name()].Store().NewClient(nil).Peek(id)
		return ok
	})

	if shed() == 0 {
		t.Error("nothing was shed")
	}
	stuck.mu.Unlock()
	locked = false
	id, pos = newNetClient(l1, "tube").put("after")
	awaitAck(t, l1.Journal(), pos, 15*time.Second)
	testproc.WaitFor(t, 15*time.Second, "the stuck group catching up", func() bool {
		_, ok := stuck.Store().NewClient(nil).Peek(id)
		return ok
	})
	t.Logf("%d of group 1's messages shed on %s while it was stuck", shed(), stuck.Name())
}
