package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/internal/testproc"
)

// testMember is the harness's member id as the book has it.
func testMember(id uint64) Member {
	return Member{Name: fmt.Sprintf("m%d", id), Addr: fmt.Sprintf("127.0.0.1:%d", 7000+id), ID: id}
}

// join starts member id on an empty log, as --cluster-join does, after
// its addition was proposed; the harness then ticks it with the others.
func (c *cluster) join(id uint64) *member {
	m := &member{id: id, disk: &simDisk{MemoryLog: NewJoinMemoryLog(c.retain), join: true, retain: c.retain}}
	c.members[id] = m
	c.ids = append(c.ids, id)
	c.start(m)
	return m
}

// conf is the membership member m applied last (its log's, at start).
func conf(m *member) *pb.ConfState {
	if n := len(m.memberships); n > 0 {
		return m.memberships[n-1].ConfState
	}
	_, cs, _ := m.disk.InitialState()
	return cs
}

// propose proposes a change on member m and settles the cluster.
func (c *cluster) propose(m *member, typ pb.ConfChangeType, who Member) {
	c.t.Helper()
	if err := m.core.ProposeChange(typ, who, nil); err != nil {
		c.t.Fatalf("member %d proposing %v of %s: %v", m.id, typ, who.Name, err)
	}
	c.run(m)
	c.stabilize()
}

// stabilizeBatched is stabilize, with each round's messages stepped into
// every member before any of them runs, as a member's node takes all the
// messages that arrived together: a follower steps a leader's commit and
// what it sent after it before it applies anything.
func (c *cluster) stabilizeBatched() {
	c.t.Helper()
	for range 1000 {
		for _, id := range c.ids {
			c.fsync(c.members[id])
		}
		msgs := c.net
		c.net = nil
		to := make(map[uint64]*member)
		for _, msg := range msgs {
			if m := c.members[msg.GetTo()]; m != nil && m.up {
				if err := m.core.Step(msg); err != nil {
					c.t.Fatalf("member %d: step %v: %v", m.id, msg.GetType(), err)
				}
				to[m.id] = m
			}
		}
		for _, m := range to {
			c.run(m)
		}
		if len(msgs) == 0 && !c.unsynced() {
			return
		}
	}
	c.t.Fatal("the cluster did not settle")
}

// add proposes id's addition on via, starts it, and waits until every
// member has it for a voter.
func (c *cluster) add(via *member, id uint64) {
	c.t.Helper()
	c.propose(via, pb.ConfChangeAddLearnerNode, testMember(id))
	c.join(id)
	var all []uint64
	for _, o := range c.ids {
		if c.members[o].up {
			all = append(all, o)
		}
	}
	c.awaitConf(all, all, nil)
}

// awaitConf ticks the cluster until every member of ids that is up has
// applied a membership with exactly voters and learners.
func (c *cluster) awaitConf(ids []uint64, voters, learners []uint64) {
	c.t.Helper()
	same := func(a, b []uint64) bool {
		return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
	}
	for range electionRounds * testElectionTick {
		done := true
		for _, id := range ids {
			cs := conf(c.members[id])
			done = done && same(cs.GetVoters(), voters) && same(cs.GetLearners(), learners)
		}
		if done {
			return
		}
		c.tick()
	}
	for _, id := range ids {
		c.t.Logf("member %d: %v", id, conf(c.members[id]))
	}
	c.t.Fatalf("members %v did not reach voters %v, learners %v", ids, voters, learners)
}

// A member added as a learner catches up through a snapshot, and the
// leader promotes it; a follower's proposal to remove another goes
// through the leader; the leader removing itself steps down, and the
// others elect a leader and serve every job.
func TestMembershipChanges(t *testing.T) {
	c := newCluster(t, 3, 2)
	leader := c.awaitLeader(1, 2, 3)
	p := c.producer(leader, "grow")
	for i := range 20 {
		p.put(0, fmt.Sprintf("job %d", i))
	}
	c.stabilize()
	if !p.acked() {
		t.Fatal("the puts were not acknowledged")
	}
	want := viewOf(leader.store)

	// Added as a learner: every member applies it, with its name and
	// address in the book, before the member even starts.
	c.propose(leader, pb.ConfChangeAddLearnerNode, testMember(4))
	c.awaitConf([]uint64{1, 2, 3}, []uint64{1, 2, 3}, []uint64{4})
	for _, id := range []uint64{1, 2, 3} {
		if b := c.members[id].core.Book(); !slices.Contains(b.Members, testMember(4)) {
			t.Errorf("member %d's book %+v lacks m4", id, b)
		}
	}
	for range 3 * testElectionTick {
		c.tick()
	}
	if cs := conf(leader); !slices.Contains(cs.GetLearners(), 4) {
		t.Fatalf("a learner that never started was promoted: %v", cs)
	}
	snapshots := c.snapshots
	c.join(4)
	c.awaitConf([]uint64{1, 2, 3, 4}, []uint64{1, 2, 3, 4}, nil)
	if c.snapshots == snapshots {
		t.Error("the new member caught up without a snapshot")
	}
	if b := c.members[4].core.Book(); len(b.Members) != 4 {
		t.Errorf("the new member's book %+v: want the four members, from the snapshot and the changes", b)
	}
	c.converged(want)

	// A follower proposes a removal: raft forwards it to the leader.
	var follower *member
	for _, id := range []uint64{1, 2, 3} {
		if id != leader.id {
			follower = c.members[id]
			break
		}
	}
	var gone uint64
	for _, id := range []uint64{1, 2, 3} {
		if id != leader.id && id != follower.id {
			gone = id
		}
	}
	c.propose(follower, pb.ConfChangeRemoveNode, testMember(gone))
	rest := slices.DeleteFunc([]uint64{1, 2, 3, 4}, func(id uint64) bool { return id == gone })
	c.awaitConf(rest, rest, nil)
	if b := leader.core.Book(); !b.removed(gone) {
		t.Errorf("the leader's book %+v does not have m%d removed", b, gone)
	}
	c.crash(c.members[gone])

	// The leader removes itself: it steps down once the change applies
	// (its store rebuilt, as any leader that loses its leadership), having
	// handed leadership to a member with its whole log, which leads at
	// once, with no election timeout; it serves every job.
	old := leader.id
	if err := leader.core.ProposeChange(pb.ConfChangeRemoveNode, testMember(old), nil); err != nil {
		t.Fatal(err)
	}
	c.run(leader)
	c.stabilizeBatched()
	if len(leader.rebuilds) == 0 {
		t.Error("the removed leader was not rebuilt")
	}
	rest = slices.DeleteFunc(rest, func(id uint64) bool { return id == old })
	c.members[old].up = false
	var handed *member
	for _, id := range rest {
		if m := c.members[id]; m.core.Status().RaftState == raft.StateLeader {
			handed = m
		}
	}
	if handed == nil {
		t.Fatal("no member leads right after the leader's removal: it did not hand leadership over")
	}
	next := c.awaitLeader(rest...)
	if next != handed {
		t.Errorf("member %d serves, not %d, which the removed leader handed leadership to", next.id, handed.id)
	}
	c.awaitConf(rest, rest, nil)
	p = c.producer(next, "grow")
	p.put(0, "after")
	c.stabilize()
	if !p.acked() {
		t.Error("the two members left do not acknowledge")
	}
	want = viewOf(next.store)
	if len(want) != 21 {
		t.Errorf("the new leader holds %d jobs, want 21", len(want))
	}
	c.converged(want)
}

// A membership the log holds already is not applied again at start, and
// a restarted member comes back with the book and the membership.
func TestMembershipRestart(t *testing.T) {
	c := newCluster(t, 3, 2)
	c.add(c.awaitLeader(1, 2, 3), 4)
	for _, id := range []uint64{1, 4} {
		m := c.members[id]
		before := len(m.memberships)
		c.crash(m)
		c.start(m)
		if len(m.memberships) != before {
			t.Errorf("member %d applied a change again at start", id)
		}
		if b := m.core.Book(); len(b.Members) != 4 {
			t.Errorf("member %d restarted with the book %+v", id, b)
		}
		if cs := conf(m); len(cs.GetVoters()) != 4 {
			t.Errorf("member %d restarted with the membership %v", id, cs)
		}
	}
	c.awaitLeader(1, 2, 3, 4)
}

// TestNodeJoinsWithoutLeaderAddress: a member started to join with a
// --cluster-peers that does not name group 0's leader (written before
// the leader was added) takes the leader's hello at the address the hello
// gives, is filled and promoted; a stranger's hello is refused once the
// book has named its peers.
func TestNodeJoinsWithoutLeaderAddress(t *testing.T) {
	c := newNetCluster(t, 3, 2, nil)
	leader := c.awaitServing(10 * time.Second)
	ln := c.add(leader, "m4")
	joining := c.tweak // add's: the cluster's id, m4's join id
	c.tweak = func(cfg *NodeConfig) {
		joining(cfg)
		if cfg.Node == "m4" {
			cfg.Peers = slices.DeleteFunc(slices.Clone(cfg.Peers), func(m Member) bool { return m.Name == leader.Name() })
		}
	}
	joined := c.start("m4", ln)
	awaitVoter(t, leader, "m4")
	testproc.WaitFor(t, 10*time.Second, "m4 knowing the leader", func() bool {
		return joined.Status().Leader == leader.Name()
	})
	tr := joined.host.transport
	if tr.strangers.Load() {
		t.Error("m4 takes strangers' hellos after the book named its peers")
	}
	in := hello{Version: helloVersion, Kind: streamMessages, Cluster: tr.cfg.cluster, FromID: 99,
		From: "m9", To: "m4", Max: maxProtocol, Incarnation: 1, Addr: "127.0.0.1:1"}
	if _, refusal, _ := tr.check(&in, nil, "127.0.0.1:5555"); refusal != `"m9" is not a member` {
		t.Errorf("a stranger's hello after the book: refusal %q", refusal)
	}
}

// TestChangeWaitEnds: a membership applied ends the wait for a change
// made (the member there, or removed), and for a change raft dropped
// because another was applied first: an addition not there, and a
// replica's removal whose member is still there, which proposed again
// would remove a second voter beside the change that came first. A
// member's removal waits on (proposed again, as an operator asked it).
func TestChangeWaitEnds(t *testing.T) {
	for _, c := range []struct {
		name                    string
		req                     changeReq
		changed, there, removed bool
		ended, inProgress       bool
	}{
		{"an addition made", changeReq{add: true, replica: true}, true, true, false, true, false},
		{"an addition dropped", changeReq{add: true, replica: true}, true, false, false, true, true},
		{"an addition, nothing changed", changeReq{add: true}, false, false, false, false, false},
		{"a replica's removal made", changeReq{replica: true}, true, false, true, true, false},
		{"a replica's removal after another change", changeReq{replica: true}, true, true, false, true, true},
		{"a replica's removal, nothing changed", changeReq{replica: true}, false, true, false, false, false},
		{"a member's removal after another change", changeReq{}, true, true, false, false, false},
		{"a member's removal made", changeReq{}, true, false, true, true, false},
	} {
		ended, err := c.req.endedBy(c.changed, c.there, c.removed)
		if ended != c.ended || errors.Is(err, ErrChangeInProgress) != c.inProgress || !ended && err != nil {
			t.Errorf("%s: ended %v, %v; want ended %v, in progress %v", c.name, ended, err, c.ended, c.inProgress)
		}
	}
}

// awaitVoter waits until leader has promoted member name.
func awaitVoter(t *testing.T, leader *Node, name string) {
	t.Helper()
	testproc.WaitFor(t, 20*time.Second, name+" promoted", func() bool {
		for _, m := range leader.Status().Members {
			if m.Name == name {
				return m.Role == "voter"
			}
		}
		return false
	})
}

// Over the network: a member added through a follower starts with
// --cluster-join's identity on an empty log, is filled by a snapshot and
// promoted; a removed member stops with ErrRemoved; the changes are
// counted.
func TestNodeMembership(t *testing.T) {
	c := newNetCluster(t, 3, 2, nil)
	leader := c.awaitServing(10 * time.Second)
	cl := newNetClient(leader, "members")
	var pos uint64
	for i := range 10 {
		_, pos = cl.put(fmt.Sprintf("job %d", i))
	}
	awaitAck(t, leader.Journal(), pos, 10*time.Second)
	others := c.others(leader)
	follower := others[len(others)-1]
	// A follower drops a proposal while it knows no leader: this one may
	// not have heard from it yet (the acknowledgement needed the other).
	testproc.WaitFor(t, 10*time.Second, follower.Name()+" knowing the leader", func() bool {
		return follower.Status().Leader == leader.Name()
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := follower.AddMember(ctx, "m4", "not an address"); !errors.Is(err, ErrBadMember) {
		t.Errorf("adding a member with a bad address: %v, want ErrBadMember", err)
	}
	if _, err := follower.AddMember(ctx, "m1", "127.0.0.1:1"); !errors.Is(err, ErrMemberExists) {
		t.Errorf("adding m1 again: %v, want ErrMemberExists", err)
	}
	ln := c.add(follower, "m4")
	if _, err := leader.AddMember(ctx, "m5", "127.0.0.1:2"); !errors.Is(err, ErrChangeInProgress) {
		t.Errorf("adding m5 while m4 is a learner: %v, want ErrChangeInProgress", err)
	}
	joined := c.start("m4", ln)
	awaitVoter(t, leader, "m4")
	c.converged(leader, 10*time.Second)
	if st := joined.Status(); st.Leader != leader.Name() || len(st.Members) != 4 {
		t.Errorf("the new member's view: %+v", st)
	}

	// Remove a follower other than the one that took the addition.
	var gone *Node
	for _, n := range c.up() {
		if n != leader && n != follower && n != joined {
			gone = n
		}
	}
	if _, err := leader.RemoveMember(ctx, "nobody"); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("removing a member that is not one: %v, want ErrUnknownMember", err)
	}
	if _, err := leader.RemoveMember(ctx, gone.Name()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone.Done():
		if !errors.Is(gone.Err(), ErrRemoved) {
			t.Errorf("the removed member stopped with %v, want ErrRemoved", gone.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the removed member did not stop")
	}
	if n := leader.Stats().MembershipChanges; n != 3 {
		t.Errorf("the leader counted %d membership changes, want 3 (add, promote, remove)", n)
	}
	_, pos = cl.put("after")
	awaitAck(t, leader.Journal(), pos, 10*time.Second)

	// A member removed while it was down learns it from the others'
	// refusals when it comes back, and stops.
	name := follower.Name()
	c.kill(name)
	if _, err := leader.RemoveMember(ctx, name); err != nil {
		t.Fatal(err)
	}
	back := c.start(name, nil)
	select {
	case <-back.Done():
		if !errors.Is(back.Err(), ErrRemoved) {
			t.Errorf("%s, removed while down, stopped with %v, want ErrRemoved", name, back.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s, removed while down, still runs", name)
	}
	_, pos = cl.put("after the removals")
	awaitAck(t, leader.Journal(), pos, 10*time.Second)
}

// Three members grow to five, the second addition proposed by a
// follower: the snapshot the first new member got is built again for the
// second, whose membership must hold it.
func TestMembershipGrowsTwice(t *testing.T) {
	c := newCluster(t, 3, 2)
	leader := c.awaitLeader(1, 2, 3)
	c.add(leader, 4)
	c.add(c.members[leader.id%3+1], 5)
}

// A WALLog keeps the membership and the book across a restart, and its
// checkpoints carry them into every segment; a joining member's new
// directory starts with no membership.
func TestWALLogMembership(t *testing.T) {
	dir := t.TempDir()
	cfg := testWALConfig(dir, []uint64{1, 2, 3}, 0)
	l := openWAL(t, cfg)
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{9}}
	book := Book{Index: 5, Members: []Member{testMember(1), testMember(2), testMember(3), testMember(9)}, Removed: []uint64{4}}
	l.SetMembership(cs, book)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openWAL(t, cfg)
	_, got, _ := l.InitialState()
	if !slices.Equal(got.GetVoters(), cs.GetVoters()) || !slices.Equal(got.GetLearners(), cs.GetLearners()) {
		t.Errorf("membership after a restart: %v, want %v", got, cs)
	}
	if b := l.Membership(); b.Index != 5 || !slices.Equal(b.Members, book.Members) || !slices.Equal(b.Removed, book.Removed) {
		t.Errorf("book after a restart: %+v, want %+v", b, book)
	}

	join := testWALConfig(t.TempDir(), []uint64{9}, 0)
	join.Join = true
	j := openWAL(t, join)
	_, got, _ = j.InitialState()
	if first, _ := j.FirstIndex(); len(got.GetVoters())+len(got.GetLearners()) != 0 || first != 1 {
		t.Errorf("a joining member's new log: membership %v, first index %d; want none, 1", got, first)
	}
}

// A group's checkpoint piece, made again at every hard state, carries
// the membership and book as they are then: its membership half, kept
// from one piece to the next, is made again after each change, whether
// a change applied or a snapshot installed.
func TestGroupLogPieceFollowsMembership(t *testing.T) {
	l := openWAL(t, testWALConfig(t.TempDir(), []uint64{1, 2, 3}, 0))
	hardState := func(commit uint64) {
		l.SetHardState(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(commit)})
	}
	check := func(what string, voters []uint64, index uint64, members int) {
		t.Helper()
		l.mu.Lock()
		d := decoder{b: slices.Clone(l.piece)}
		l.mu.Unlock()
		hs, cs, book := d.hardState(), d.confState(), d.book()
		if d.err != nil {
			t.Fatalf("%s: the piece does not decode: %v", what, d.err)
		}
		if !slices.Equal(cs.GetVoters(), voters) || book.Index != index || len(book.Members) != members || hs.GetTerm() != 1 {
			t.Errorf("%s: the piece says voters %v, book at %d of %d members, hard state %v; want %v, %d, %d",
				what, cs.GetVoters(), book.Index, len(book.Members), hs, voters, index, members)
		}
	}
	three := []Member{testMember(1), testMember(2), testMember(3)}
	l.SetMembership(&pb.ConfState{Voters: []uint64{1, 2, 3}}, Book{Index: 5, Members: three})
	hardState(5)
	hardState(6)
	check("after a change", []uint64{1, 2, 3}, 5, 3)
	l.SetMembership(&pb.ConfState{Voters: []uint64{1, 2, 3, 4}}, Book{Index: 7, Members: append(slices.Clone(three), testMember(4))})
	hardState(7)
	check("after a second change", []uint64{1, 2, 3, 4}, 7, 4)
	l.mu.Lock()
	l.installedLocked(&pb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: []uint64{1, 2}}}, nil)
	l.mu.Unlock()
	hardState(9)
	check("after a snapshot", []uint64{1, 2}, 9, 4)
}

// A peer's membership change that does not decode is refused when it
// comes in, as damaged records are, rather than stopping the member when
// it applies.
func TestMembershipChangeDamaged(t *testing.T) {
	c := newCluster(t, 3, 2)
	leader := c.awaitLeader(1, 2, 3)
	to := c.members[leader.id%3+1]
	for _, data := range [][]byte{{0xff, 0xff}, mustMarshal(t, &pb.ConfChangeV2{Context: []byte("{not json")})} {
		m := &pb.Message{Type: pb.MsgApp.Enum(), From: new(leader.id), To: new(to.id), Term: new(leader.core.Status().GetTerm()),
			Entries: []*pb.Entry{{Type: pb.EntryConfChangeV2.Enum(), Index: new(uint64(100)), Term: new(uint64(1)), Data: data}}}
		if err := to.core.Step(m); !errors.Is(err, ErrBadRecords) {
			t.Errorf("a damaged change (%q): %v, want ErrBadRecords", data, err)
		}
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSetMarks: group 0's serving leader marks a member draining, or
// cordoned, a control record every member applies to its book; the mark
// survives a restart (the log's book), a follower asked is refused (the
// member forwards), it is taken back, the other mark stays unset, and
// jobs go on around it.
func TestSetMarks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		set           func(n *Node, ctx context.Context, name string, on bool) error
		marked, other func(Book) []uint64
	}{
		{"draining", (*Node).SetDraining, func(b Book) []uint64 { return b.Draining }, func(b Book) []uint64 { return b.Cordoned }},
		{"cordoned", (*Node).SetCordoned, func(b Book) []uint64 { return b.Cordoned }, func(b Book) []uint64 { return b.Draining }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newWALCluster(t, 3, 64<<10, nil)
			l := c.awaitServing(10 * time.Second)
			id1, pos := newNetClient(l, "t").put("before")
			awaitAck(t, l.Journal(), pos, 10*time.Second)
			others := c.others(l)
			target, follower := others[1].Name(), others[0].Name()
			if err := tc.set(c.nodes[follower], t.Context(), target, true); !errors.Is(err, ErrNotServing) {
				t.Fatalf("setting the mark on a follower: %v, want ErrNotServing", err)
			}
			if err := tc.set(l, t.Context(), "nobody", true); !errors.Is(err, ErrUnknownMember) {
				t.Fatalf("marking no member: %v, want ErrUnknownMember", err)
			}
			if err := tc.set(l, t.Context(), target, true); err != nil {
				t.Fatal(err)
			}
			targetID := c.nodes[target].ID()
			marked := func(n *Node, want bool) {
				t.Helper()
				testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("%s seeing %s %s: %v", n.Name(), target, tc.name, want), func() bool {
					return slices.Contains(tc.marked(n.Book()), targetID) == want
				})
				if other := tc.other(n.Book()); len(other) != 0 {
					t.Fatalf("%s: the other mark is set too: %v", n.Name(), other)
				}
			}
			for _, n := range c.up() {
				marked(n, true)
			}
			marked(c.restart(target), true)
			l = c.awaitServing(10 * time.Second)
			if err := tc.set(l, t.Context(), target, false); err != nil {
				t.Fatal(err)
			}
			for _, n := range c.up() {
				marked(n, false)
			}
			id2, pos := newNetClient(l, "t").put("after")
			awaitAck(t, l.Journal(), pos, 10*time.Second)
			if id2 <= id1 || id2 > id1+1<<12 {
				t.Fatalf("ids %d then %d across the marks: they must go on", id1, id2)
			}
		})
	}
}

// TestSetMarkLeadershipLost: a mark asked for while the leader hands its
// leadership over is held in its journal (raft drops proposals during the
// transfer), which drops it when the leadership goes. The request must
// not wait for ever (the admin API's DELETE /cluster/members hung until
// its client gave up): it ends once the leadership has been gone an
// election timeout, with ErrNotServing, or with the mark applied.
func TestSetMarkLeadershipLost(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	l := c.awaitServing(10 * time.Second)
	others := c.others(l)
	to, target := others[0], others[1]
	// The receiver lags: its writes are not durable, so it acknowledges
	// nothing, and the transfer waits for it to catch up.
	c.logs[to.Name()].hold()
	_, pos := newNetClient(l, "t").put("lagging")
	awaitAck(t, l.Journal(), pos, 10*time.Second)
	if err := l.TransferLeadership(to.Name()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- l.SetCordoned(ctx, target.Name(), true)
	}()
	testproc.WaitFor(t, 5*time.Second, "the mark held in the leader's journal", func() bool { return l.Journal().pending() > 0 })
	c.logs[to.Name()].release()
	c.awaitServing(10*time.Second, to)
	select {
	case err := <-done:
		applied := slices.Contains(l.Book().Cordoned, target.ID())
		if err == nil && !applied || err != nil && !errors.Is(err, ErrNotServing) {
			t.Fatalf("the mark after the leadership moved: %v (applied here: %v), want ErrNotServing or applied", err, applied)
		}
		t.Logf("answered after %v: %v, applied %v", time.Since(began).Round(time.Millisecond), err, applied)
	case <-time.After(10 * time.Second):
		t.Fatalf("the mark still waits %v after it was asked for, its leadership gone", time.Since(began).Round(time.Millisecond))
	}
}

// A replica removed and added again while cut off (a group's placement
// moving it away and straight back) comes back with its older log: it
// applies its removal and its member starts it again, empty (the
// member's shards). What the older one acknowledged on coming back must
// not count for the new one: the leader's match for it never exceeds
// what it holds, it is filled by a snapshot, promoted, and holds every
// job.
func TestMembershipReaddedReplica(t *testing.T) {
	c := newCluster(t, 4, 1000) // logs long enough to catch the older replica up from entries
	leader := c.elect(1)
	for i := range 5 {
		c.putAcked(leader, fmt.Sprintf("before %d", i))
	}
	older := c.members[3]
	c.partition([]uint64{3}, []uint64{1, 2, 4})
	c.propose(leader, pb.ConfChangeRemoveNode, testMember(3))
	c.awaitConf([]uint64{1, 2, 4}, []uint64{1, 2, 4}, nil)
	for i := range 5 {
		c.putAcked(leader, fmt.Sprintf("between %d", i))
	}
	c.propose(leader, pb.ConfChangeAddLearnerNode, testMember(3))
	c.awaitConf([]uint64{1, 2, 4}, []uint64{1, 2, 4}, []uint64{3})
	joined := leader.core.Book().Joined[3]
	if joined == 0 {
		t.Fatalf("the leader's book %+v has no index at which 3 joined again", leader.core.Book())
	}
	for i := range 5 {
		c.putAcked(leader, fmt.Sprintf("after %d", i))
	}
	want := viewOf(leader.store)

	c.stopRemoved = true
	c.heal()
	restarted := false
	for range electionRounds * testElectionTick {
		c.tick()
		m3 := c.members[3]
		if m3 == older && !m3.up {
			// The member's shards drop the removed replica's log and
			// start it again, empty.
			c.crash(m3)
			c.members[3] = &member{id: 3, disk: &simDisk{MemoryLog: NewJoinMemoryLog(c.retain), join: true, retain: c.retain}}
			c.start(c.members[3])
			restarted = true
		}
		held, _ := c.members[3].disk.LastIndex()
		leader.core.Progress(func(id uint64, p PeerProgress) {
			if id == 3 && p.Match > held {
				t.Fatalf("the leader counts replica 3 holding entries through %d; it holds through %d", p.Match, held)
			}
		})
		if slices.Equal(slices.Sorted(slices.Values(conf(leader).GetVoters())), []uint64{1, 2, 3, 4}) && c.members[3].store != nil {
			break
		}
	}
	if !restarted {
		t.Fatal("the older replica never applied its removal")
	}
	c.awaitConf([]uint64{1, 2, 3, 4}, []uint64{1, 2, 3, 4}, nil)
	c.converged(want)
}

// A core that starts again (a restart, a rebuild) on a log holding a
// change that removes its member, not yet applied, acknowledges no entry
// past it, as one that appended it does (Core.leaving); a change the
// book holds already, or another member's removal, is not one.
func TestMembershipLeavingAtStart(t *testing.T) {
	removal := func(id uint64) []byte {
		ctx, err := json.Marshal(testMember(id))
		if err != nil {
			t.Fatal(err)
		}
		return mustMarshal(t, &pb.ConfChangeV2{Context: ctx,
			Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}}})
	}
	l := NewMemoryLog([]uint64{1, 2, 3}, 100)
	l.Append([]*pb.Entry{
		{Index: new(uint64(2)), Term: new(uint64(1)), Type: pb.EntryConfChangeV2.Enum(), Data: removal(2)},
		{Index: new(uint64(3)), Term: new(uint64(1)), Type: pb.EntryConfChangeV2.Enum(), Data: removal(3)},
		{Index: new(uint64(4)), Term: new(uint64(1))},
	})
	for _, tc := range []struct {
		id, bookIndex, want uint64
	}{{3, 0, 3}, {2, 0, 2}, {1, 0, 0}, {3, 3, 0}, {2, 2, 0}} {
		book := Book{Index: tc.bookIndex, Members: []Member{testMember(1), testMember(2), testMember(3)}}
		c, err := NewCore(Config{ID: tc.id, Log: l, Journal: NewJournal(nil), ElectionTick: testElectionTick, Book: book})
		if err != nil {
			t.Fatal(err)
		}
		if c.leaving != tc.want {
			t.Errorf("member %d starting with the book at %d: leaving %d, want %d", tc.id, tc.bookIndex, c.leaving, tc.want)
		}
	}
}

// TestMembershipPlannedRemovals: two removals planned on the same
// replicas (a deposed mover's of the giver, and its successor's of a
// voter too many) do not both apply: the second is applied as none on
// every member, so the group keeps a majority of what it had. A member
// whose own removal is so refused acknowledges again: with another
// voter cut off, the group still commits through it. A removal planned
// on the replicas there are applies, as does one with no plan (an
// operator's).
func TestMembershipPlannedRemovals(t *testing.T) {
	c := newCluster(t, 4, 2)
	leader := c.elect(1)
	c.putAcked(leader, "before")
	planned := conf(leader) // voters 1 2 3 4
	if err := leader.core.ProposeChange(pb.ConfChangeRemoveNode, testMember(3), planned); err != nil {
		t.Fatal(err)
	}
	c.run(leader)
	c.stabilize()
	c.awaitConf([]uint64{1, 2, 4}, []uint64{1, 2, 4}, nil)
	c.crash(c.members[3])
	if err := leader.core.ProposeChange(pb.ConfChangeRemoveNode, testMember(4), planned); err != nil {
		t.Fatal(err)
	}
	c.run(leader)
	c.stabilize()
	for range 3 * testElectionTick {
		c.tick()
	}
	for _, id := range []uint64{1, 2, 4} {
		m := c.members[id]
		last := m.memberships[len(m.memberships)-1]
		if !last.Refused || !slices.Equal(slices.Sorted(slices.Values(last.ConfState.GetVoters())), []uint64{1, 2, 4}) {
			t.Errorf("member %d: the removal planned on %v applied as %+v; want refused, voters 1 2 4", id, planned.GetVoters(), last)
		}
	}
	c.awaitConf([]uint64{1, 2, 4}, []uint64{1, 2, 4}, nil)

	// Member 4's removal was in its log: it acknowledges again, so with 2
	// cut off, 1 and 4 commit.
	c.partition([]uint64{2}, []uint64{1, 4})
	c.putAcked(leader, "without 2")
	c.heal()

	// With no plan (an operator's), a removal applies on any replicas.
	c.propose(leader, pb.ConfChangeRemoveNode, testMember(4))
	c.awaitConf([]uint64{1, 2}, []uint64{1, 2}, nil)
}

// TestMembershipHandOverMayLead: a leader that removes itself hands its
// leadership to a voter that may lead (Config.MayLead: a group's book
// has no marks, group 0's has), not to a cordoned or draining one, which
// would hand it on at once; with none, to one that may not. Each voter
// holds the whole log, so before, the receiver was any of them.
func TestMembershipHandOverMayLead(t *testing.T) {
	for round := range 6 {
		barred := map[uint64]bool{2: true, 3: true, 4: round%3 == 0}
		c := newCluster(t, 4, 2)
		c.mayLead = func(id uint64) bool { return !barred[id] }
		for _, m := range c.members {
			c.restart(m) // its core made again with mayLead
		}
		leader := c.elect(1)
		c.putAcked(leader, "before")
		if err := leader.core.ProposeChange(pb.ConfChangeRemoveNode, testMember(1), nil); err != nil {
			t.Fatal(err)
		}
		c.run(leader)
		c.stabilizeBatched()
		var handed []uint64
		for _, id := range []uint64{2, 3, 4} {
			if c.members[id].core.Status().RaftState == raft.StateLeader {
				handed = append(handed, id)
			}
		}
		want := []uint64{4}
		if barred[4] {
			want = []uint64{2, 3, 4} // any: none may lead
		}
		if len(handed) != 1 || !slices.Contains(want, handed[0]) {
			t.Fatalf("round %d, barred %v: leading right after the removal %v; want one of %v", round, barred, handed, want)
		}
	}
}

// TestMembershipRemovalKeepsMajority: a voter's removal that would leave
// the voters up short of a majority of those left is refused, on the
// leader's view whichever member takes it. m3 is cut off from the leader
// alone: the leader no longer hears it, while the follower's connection
// to it stays open. The leader refuses the follower's removal at once
// (the voters left, the leader and m3, are one up of two); the follower,
// which sees m3 connected, passes the leader's removal on, and the leader
// drops it, so that it is never applied. Once m3 is down for good, its
// own removal is taken.
func TestMembershipRemovalKeepsMajority(t *testing.T) {
	c := newNetCluster(t, 3, 2, nil)
	leader := c.awaitServing(10 * time.Second)
	var follower, cut *Node
	for _, n := range c.others(leader) {
		if follower == nil {
			follower = n
		} else {
			cut = n
		}
	}
	testproc.WaitFor(t, 10*time.Second, follower.Name()+" knowing the leader", func() bool {
		return follower.Status().Leader == leader.Name()
	})
	leader.host.transport.peer(cut.self.ID).cut.Store(true)
	time.Sleep(2 * leader.ElectionTimeout()) // the leader's lease no longer counts it

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := leader.RemoveMember(ctx, follower.Name()); !errors.Is(err, ErrQuorumAtRisk) {
		t.Fatalf("the leader removing %s with %s cut off: %v, want ErrQuorumAtRisk", follower.Name(), cut.Name(), err)
	}
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if _, err := follower.RemoveMember(short, leader.Name()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s removing the leader with %s cut off from it: %v, want it not applied (the leader drops it)", follower.Name(), cut.Name(), err)
	}
	if st := leader.Status(); st.Leader != leader.Name() || len(st.Members) != 3 {
		t.Fatalf("after the refused removals: %+v, want three members and the same leader", st)
	}
	if !strings.Contains(c.output.String(), "refused a removal a member forwarded") {
		t.Errorf("the leader did not log the removal it dropped:\n%s", c.output)
	}

	c.kill(cut.Name())
	if _, err := leader.RemoveMember(ctx, cut.Name()); err != nil {
		t.Fatalf("removing %s, which is down: %v", cut.Name(), err)
	}
	_, pos := newNetClient(leader, "after").put("after the removal")
	awaitAck(t, leader.Journal(), pos, 10*time.Second)
}

// TestMembershipLeaderOfTwoHandsOverBeforeItsRemoval: with two voters,
// the leader asked to remove itself would leave the other the only voter,
// which might never learn that the removal committed and would then wait
// for the removed leader's vote for good. It hands the leadership over
// instead and asks for the request again; the new leader then removes it
// as a follower, and goes on alone. The same removal forwarded by the
// follower is dropped, and the leadership handed over: the follower,
// leading, proposes it again itself, and it applies.
func TestMembershipLeaderOfTwoHandsOverBeforeItsRemoval(t *testing.T) {
	for _, forwarded := range []bool{false, true} {
		t.Run(fmt.Sprintf("forwarded %v", forwarded), func(t *testing.T) {
			c := newNetCluster(t, 2, 2, nil)
			leader := c.awaitServing(10 * time.Second)
			other := c.others(leader)[0]
			testproc.WaitFor(t, 10*time.Second, other.Name()+" knowing the leader", func() bool {
				return other.Status().Leader == leader.Name()
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if !forwarded {
				if _, err := leader.RemoveMember(ctx, leader.Name()); !errors.Is(err, ErrNotServing) {
					t.Fatalf("the leader %s removing itself from two voters: %v, want ErrNotServing (handed over first)", leader.Name(), err)
				}
				if got := c.awaitServing(10*time.Second, other); got != other {
					t.Fatalf("%s serves, want %s: the leadership handed over", got.Name(), other.Name())
				}
			}
			if _, err := other.RemoveMember(ctx, leader.Name()); err != nil {
				t.Fatalf("%s removing %s: %v", other.Name(), leader.Name(), err)
			}
			if st := other.Status(); st.Leader != other.Name() || len(st.Members) != 1 {
				t.Fatalf("after the removal: %+v, want %s alone, leading", st, other.Name())
			}
			if !strings.Contains(c.output.String(), `"voters":["`+other.Name()+`"]`) {
				t.Errorf("no membership of %s alone logged", other.Name())
			}
			if strings.Contains(c.output.String(), "removed while leading") {
				t.Errorf("%s was removed while it led, want it removed as a follower", leader.Name())
			}
			_, pos := newNetClient(other, "after").put("after the removal")
			awaitAck(t, other.Journal(), pos, 10*time.Second)
		})
	}
}
