package replication

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/store/wal"
)

// Why a membership change was refused or not seen through (doc.go,
// "Membership changes"); cmd/sprout answers each with its HTTP status.
var (
	// ErrChangeInProgress: another change is not finished (409).
	ErrChangeInProgress = errors.New("replication: a membership change is in progress")
	// ErrMemberExists: the name or the address is a member's (409).
	ErrMemberExists = errors.New("replication: already a member")
	// ErrUnknownMember: no member has that name (404).
	ErrUnknownMember = errors.New("replication: no such member")
	// ErrBadMember: a name or address that cannot be a member's (400).
	ErrBadMember = errors.New("replication: not a member's name and address")
	// ErrQuorumAtRisk: a voter's removal would leave the voters up short
	// of a majority of the voters left (409; Node.checkRemoval).
	ErrQuorumAtRisk = errors.New("replication: the removal would leave too few voters up for a majority")
	// ErrNoLeader: no leader is known to take the change (503).
	ErrNoLeader = errors.New("replication: no leader is known")
	// ErrChangeTimeout: the change was not applied here in time (503); it
	// may still be.
	ErrChangeTimeout = errors.New("replication: the membership change was not applied in time")
	// ErrRemoved is why a member removed from the cluster stops, or
	// refuses to start.
	ErrRemoved = errors.New("replication: this member was removed from the cluster")
	// ErrNotServing refuses a change proposed to a member that does not
	// lead the group (or no longer does: whether a change it took commits
	// is then unknown, until the member has applied the new leader's log).
	ErrNotServing = errors.New("replication: this member does not lead the group")
)

// ChangeTimeout bounds how long a membership change request waits to
// be applied on the member that took it.
const ChangeTimeout = 10 * time.Second

// ErrStaticGroup refuses a change of the wrong kind for the group: group
// 0's members change (AddMember, RemoveMember), the other groups'
// replicas (AddReplica, RemoveReplica), which are members already.
var ErrStaticGroup = errors.New("replication: group 0 changes its members, the other groups their replicas among the members")

// changeReq is an operator's membership change, on its way to the node
// goroutine and waiting there for its change to be applied.
type changeReq struct {
	add        bool
	replica    bool // a group's replica (AddReplica, RemoveReplica), not a member
	name, addr string
	planned    uint64            // a removal's membership's index, which it was planned on (RemoveReplica); 0: any
	done       chan changeResult // capacity 1
	// Set by the node goroutine: the member, the change's type, when it
	// was last proposed, and when the wait ends.
	member   Member
	on       *pb.ConfState // the replicas of planned, proposed with it
	typ      pb.ConfChangeType
	proposed time.Time
	deadline time.Time
}

// changeRetry is how long a proposed membership change goes unapplied
// here before it is proposed again: a leader drops a change proposed
// while another is applied there but not yet here (its previous one, a
// promotion), and a proposal forwarded by a follower may be lost. A
// change proposed twice is applied once: raft adds a learner, or removes
// a member, that is already so as a no-op, and the book replaces the
// entry.
const changeRetry = time.Second

type changeResult struct {
	member Member
	err    error
}

// AddMember adds a member as a learner (a new Raft id, chosen here) and
// returns it once the addition is applied on this member: the new member
// can then be started (--cluster-join, JoinString), and the leader
// promotes it once it has caught up.
func (n *Node) AddMember(ctx context.Context, name, addr string) (Member, error) {
	return n.change(ctx, &changeReq{add: true, name: name, addr: addr})
}

// RemoveMember removes the member named name and returns it once the
// removal is applied on this member. A voter's removal that would leave
// the voters up short of a majority of those left is refused
// (ErrQuorumAtRisk, checkRemoval); a member that is down may be removed
// while the others are up.
func (n *Node) RemoveMember(ctx context.Context, name string) (Member, error) {
	return n.change(ctx, &changeReq{name: name})
}

// AddReplica adds the member named name, a member of the cluster (group
// 0's), to this group, not group 0, as a learner: under its member's Raft
// id, which the host's connections route by. Only the group's serving
// leader adds one (else ErrNotServing): the first step of a move,
// planned on this member's view of the group. It returns once the addition
// is applied here; the member then starts its replica, which a snapshot
// fills, and the leader promotes it once it has caught up. A learner's
// vote counts for no candidate, and by its promotion it knows the term's
// leader, so raft grants no other candidate its vote in that term: a
// replica removed and added again under the same id votes once a term.
func (n *Node) AddReplica(ctx context.Context, name string) (Member, error) {
	return n.change(ctx, &changeReq{add: true, replica: true, name: name})
}

// RemoveReplica removes the replica of the member named name from this
// group, not group 0, and returns once the removal is applied here. A
// leader removed hands its leadership over (Core.handOver); the removed
// replica stops (ErrRemoved), its member still one. planned is the index
// of the group's membership the removal was planned on (Replicas' index):
// it applies on those replicas alone, and ends with ErrChangeInProgress,
// changing nothing, when another change came first (Core.refuseChange),
// wherever that change was proposed. Like RemoveMember, it refuses to
// leave the group's voters up short of a majority (ErrQuorumAtRisk).
func (n *Node) RemoveReplica(ctx context.Context, name string, planned uint64) (Member, error) {
	return n.change(ctx, &changeReq{replica: true, name: name, planned: planned})
}

// JoinString is what a member added with id starts with: --cluster-join
// CLUSTER:ID, both in hex.
func (n *Node) JoinString(id uint64) string { return FormatID(n.cfg.ClusterID) + ":" + FormatID(id) }

// ParseJoin reads --cluster-join CLUSTER:ID.
func ParseJoin(s string) (cluster, id uint64, err error) {
	c, i, ok := strings.Cut(s, ":")
	if ok {
		_, err = fmt.Sscanf(c+" "+i, "%x %x", &cluster, &id)
	}
	if !ok || err != nil || cluster == 0 || id == 0 || raft.IsLocalMsgTarget(id) {
		return 0, 0, configErrorf(SettingJoin, "%q is not CLUSTER:ID in hex, as the member's addition printed it", s)
	}
	return cluster, id, nil
}

// SelectJoin reads --cluster-join for the member named node: the plain
// CLUSTER:ID, or a list NAME=CLUSTER:ID,... shared by every member, of
// which node takes its own entry. found is false when the list has no
// entry for node: it starts as an initial member. A name listed again
// takes its later entry: a member replaced after it lost its disk is
// added again under its name, and its new entry appended to the list
// (deploy/README.md). A malformed list or entries of two clusters are
// refused whoever reads it.
func SelectJoin(s, node string) (cluster, id uint64, found bool, err error) {
	if !strings.Contains(s, "=") {
		cluster, id, err = ParseJoin(s)
		return cluster, id, err == nil, err
	}
	var first uint64
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		name, join, ok := strings.Cut(entry, "=")
		if !ok {
			return 0, 0, false, configErrorf(SettingJoin, "%q is not NAME=CLUSTER:ID", entry)
		}
		if err := checkName(name); err != nil {
			return 0, 0, false, configErrorf(SettingJoin, "%q: %v", entry, err)
		}
		c, i, err := ParseJoin(join)
		if err != nil {
			return 0, 0, false, configErrorf(SettingJoin, "%q is not NAME=CLUSTER:ID in hex, as the member's addition printed it", entry)
		}
		if first == 0 {
			first = c
		} else if c != first {
			return 0, 0, false, configErrorf(SettingJoin, "%q is of cluster %x, the entries before of %x", entry, c, first)
		}
		if name == node {
			cluster, id, found = c, i, true
		}
	}
	return cluster, id, found, nil
}

func (n *Node) change(ctx context.Context, req *changeReq) (Member, error) {
	if (n.group != group0) != req.replica {
		return Member{}, ErrStaticGroup
	}
	req.done = make(chan changeResult, 1)
	select {
	case n.changes <- req:
	case <-n.halted:
		return Member{}, errStopped
	case <-ctx.Done():
		return Member{}, ctx.Err()
	}
	select {
	case r := <-req.done:
		return r.member, r.err
	case <-n.halted:
		return Member{}, errStopped
	case <-ctx.Done():
		return Member{}, ctx.Err()
	}
}

// startChange checks an operator's request against the membership and
// proposes it, or answers it at once; on the node goroutine. One change
// at a time: none while this member waits for one, or a learner is not
// yet promoted (but its own removal).
func (n *Node) startChange(req *changeReq) {
	answer := func(m Member, err error) { req.done <- changeResult{member: m, err: err} }
	if n.stopped || n.lost != nil {
		answer(Member{}, errStopped)
		return
	}
	if n.waiting != nil {
		answer(Member{}, fmt.Errorf("%w: %s of %s", ErrChangeInProgress, n.waiting.verb(), n.waiting.name))
		return
	}
	if req.add && req.replica && !n.core.Serving() {
		// A replica is added by its group's leader, on its view: a
		// member that no longer leads (a stall it has just noticed)
		// would have raft forward a move planned on what it saw before.
		answer(Member{}, fmt.Errorf("%w: a replica of group %d is added by its leader", ErrNotServing, n.group))
		return
	}
	if req.planned != 0 && req.planned != n.confIndex {
		answer(Member{}, fmt.Errorf("%w: the membership it was planned on (index %d) changed since (index %d)",
			ErrChangeInProgress, req.planned, n.confIndex))
		return
	}
	book := n.core.Book()
	target, known := book.byName(req.name)
	if req.replica {
		// A group's book may name members that hold no replica of it.
		known = known && inConf(n.conf, target.ID)
	}
	if !req.add && !known {
		answer(Member{}, fmt.Errorf("%w: %q", ErrUnknownMember, req.name))
		return
	}
	for _, id := range n.conf.GetLearners() {
		if !req.add && known && target.ID == id {
			continue
		}
		m, _ := book.byID(id)
		answer(Member{}, fmt.Errorf("%w: %s is a learner, not yet promoted (start it, or remove it)", ErrChangeInProgress, m.Name))
		return
	}
	typ := pb.ConfChangeRemoveNode
	switch {
	case req.add && req.replica:
		m, ok := n.host.memberNamed(req.name)
		if !ok {
			answer(Member{}, fmt.Errorf("%w: %q is not a member of the cluster", ErrUnknownMember, req.name))
			return
		}
		if known {
			answer(Member{}, fmt.Errorf("%w: %s holds a replica of the group", ErrMemberExists, m.Name))
			return
		}
		target, typ = m, pb.ConfChangeAddLearnerNode
	case req.add:
		if err := checkName(req.name); err != nil {
			answer(Member{}, fmt.Errorf("%w: %v", ErrBadMember, err))
			return
		}
		if err := checkAddr(req.addr, false); err != nil {
			answer(Member{}, fmt.Errorf("%w: %v", ErrBadMember, err))
			return
		}
		for _, m := range book.Members {
			if m.Name == req.name || strings.EqualFold(m.Addr, req.addr) {
				answer(Member{}, fmt.Errorf("%w: %s at %s", ErrMemberExists, m.Name, m.Addr))
				return
			}
		}
		target = Member{Name: req.name, Addr: req.addr, ID: newMemberID(book)}
		typ = pb.ConfChangeAddLearnerNode
	default:
		if voters := n.conf.GetVoters(); len(voters) == 1 && voters[0] == target.ID {
			answer(Member{}, fmt.Errorf("%w: %s is the only voter", ErrBadMember, target.Name))
			return
		}
		if err := n.checkRemoval(target.ID); err != nil {
			answer(Member{}, err)
			return
		}
		if other, ok := n.lastButOne(target.ID); ok {
			n.core.TransferLeadership(other)
			answer(Member{}, fmt.Errorf("%w: removed by itself, the leader, %s, would leave %s the only voter, which might "+
				"never learn that the removal committed and then wait for %s's vote for good: the leadership goes to %s first; ask again",
				ErrNotServing, target.Name, n.nameOf(other), target.Name, n.nameOf(other)))
			return
		}
	}
	var planned *pb.ConfState
	if req.planned != 0 {
		planned = n.conf
	}
	if err := n.core.ProposeChange(typ, target, planned); err != nil {
		answer(Member{}, fmt.Errorf("%w: %v", ErrNoLeader, err))
		return
	}
	now := time.Now()
	req.member, req.typ, req.proposed, req.deadline, req.on = target, typ, now, now.Add(ChangeTimeout), planned
	n.waiting = req
	n.logger.Info().Str("change", req.verb()).Str("member", target.Name).Str("address", target.Addr).
		Str("id", fmt.Sprintf("%x", target.ID)).Msg("proposed a membership change")
}

// lastButOne reports whether removing voter id is this member, leading,
// removing itself from two voters, and names the other. Raft then commits
// the removal with both, and the leader stops once it applies it; the
// other may not yet have learned that it committed (the message saying
// so lost as the leader stops), and then campaigns in the old
// configuration, where it needs the removed leader's vote, for good. So
// the leadership goes to the other first (lastButOne's callers), which
// then removes this member as a follower: a removal it makes itself. On
// the node goroutine.
func (n *Node) lastButOne(id uint64) (other uint64, ok bool) {
	voters := n.conf.GetVoters()
	if id != n.self.ID || len(voters) != 2 || !slices.Contains(voters, id) ||
		n.core.Status().RaftState != raft.StateLeader {
		return 0, false
	}
	for _, v := range voters {
		if v != id {
			other = v
		}
	}
	return other, true
}

// checkRemoval refuses the removal of voter id (ErrQuorumAtRisk) when
// the voters that would be left, counting only those up as this member
// sees them (voterUp), are no majority of them: removed, it would leave
// a group that commits nothing, an addition included (one needs a
// majority too), so that nothing could bring the majority back but the
// members that are down. That is etcd's strict reconfiguration check.
// The removal of a voter that is down passes while the others are up:
// it is how an operator gets rid of a lost member. A learner's removal
// changes no majority and is not checked. On the node goroutine.
func (n *Node) checkRemoval(id uint64) error {
	voters := n.conf.GetVoters()
	if !slices.Contains(voters, id) {
		return nil
	}
	up := n.votersUp()
	left, counted := 0, 0
	var down []string
	for _, v := range voters {
		if v == id {
			continue
		}
		left++
		if up(v) {
			counted++
		} else {
			down = append(down, n.nameOf(v))
		}
	}
	if need := left/2 + 1; counted < need {
		return fmt.Errorf("%w: without %s, %d of the %d voters left are up (%s not heard from lately), and a majority is %d: "+
			"bring a member back, or remove one that is down first",
			ErrQuorumAtRisk, n.nameOf(id), counted, left, strings.Join(down, ", "), need)
	}
	return nil
}

// votersUp is what checkRemoval counts as up, as this member sees the
// voters now: itself; on the group's leader, a voter it heard from within
// the last election timeout (the lease's count, Core.Progress) whose
// messages connection from here is open (a member killed ends it at once;
// one stopped or cut off is no longer heard within an election timeout);
// on a member that does not lead, which hears only its leader, a voter
// whose connection from here is open, the leader only if heard from
// within an election timeout. A follower's view is the weaker: the
// leader checks a removal forwarded to it again (refusedProposal). On
// the node goroutine.
func (n *Node) votersUp() func(id uint64) bool {
	connected := func(id uint64) bool {
		p := n.host.transport.peer(id)
		return p != nil && p.up.Load()
	}
	st := n.core.Status()
	if st.RaftState == raft.StateLeader {
		active := make(map[uint64]bool)
		n.core.Progress(func(id uint64, p PeerProgress) { active[id] = p.Active })
		return func(id uint64) bool { return id == n.self.ID || active[id] && connected(id) }
	}
	lead := st.Lead
	within := time.Duration(n.cfg.ElectionTick) * n.cfg.Tick
	return func(id uint64) bool {
		switch {
		case id == n.self.ID:
			return true
		case id == lead:
			return connected(id) && n.host.HeardFrom(n.nameOf(id), within)
		}
		return connected(id)
	}
}

// refusedProposal reports whether the leader drops m, a proposal a
// follower forwarded, because it removes a voter checkRemoval refuses on
// the leader's view (a follower checked it on its own, which sees less:
// votersUp), or it removes the leader from two voters (lastButOne: the
// leadership goes to the other first); and any membership change while
// the leader hands its leadership over, whose next leader's first entry
// must follow the handover's. The follower's request then ends
// as one not applied in time (ErrChangeTimeout); a refusal is logged
// here, once a minute per member. On the node goroutine.
func (n *Node) refusedProposal(m *pb.Message) bool {
	if m.GetType() != pb.MsgProp || n.core.Status().RaftState != raft.StateLeader {
		return false
	}
	for _, e := range m.GetEntries() {
		if e.GetType() != pb.EntryConfChange && e.GetType() != pb.EntryConfChangeV2 {
			continue
		}
		if n.core.handingOver() {
			return true // as its own would be (ProposeChange): the follower's request asks again
		}
		cc, _, err := decodeChange(e)
		if err != nil {
			continue // Core.check refuses it
		}
		for _, ch := range cc.AsV2().GetChanges() {
			if ch.GetType() != pb.ConfChangeRemoveNode {
				continue
			}
			if err := n.checkRemoval(ch.GetNodeId()); err != nil {
				from := n.nameOf(m.GetFrom())
				n.host.transport.logOnce("removal "+from, func(e *zerolog.Event) *zerolog.Event {
					return e.Int("group", int(n.group)).Str("from", from).Err(err)
				}, zerolog.WarnLevel, "refused a removal a member forwarded: it would leave no majority of voters up")
				return true
			}
			if other, ok := n.lastButOne(ch.GetNodeId()); ok {
				// The other voter forwarded it: it makes it itself, once
				// it leads (lastButOne), asked again.
				n.core.TransferLeadership(other)
				return true
			}
		}
	}
	return false
}

// endedBy reports whether a membership applied ends the wait for r, and
// how: r's member there (an addition) or removed (a removal), or another
// change applied first (changed), which raft dropped r for. A replica's
// removal ends then too, its member still there: it was planned on the
// replicas before (internal/member's planner, which plans again), and
// proposed again it would remove a second voter beside the change that
// came first (a deposed leader's removal of a voter too many, and its
// next leader's of another); applied, it is applied as none
// (Core.refuseChange).
func (r *changeReq) endedBy(changed, there, removed bool) (bool, error) {
	switch {
	case r.add && there, !r.add && removed:
		return true, nil
	case changed && !removed && (!there || r.replica && !r.add):
		return true, fmt.Errorf("%w: another change was applied first", ErrChangeInProgress)
	}
	return false, nil
}

func (r *changeReq) verb() string {
	if r.add {
		return "addition"
	}
	return "removal"
}

// newMemberID is a random Raft id no member has, nor had: a name reused
// after its disk was emptied never gets an id the cluster knew.
func newMemberID(book Book) uint64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		id := binary.LittleEndian.Uint64(b[:])
		if _, used := book.byID(id); !used && id != 0 && !raft.IsLocalMsgTarget(id) && !book.removed(id) {
			return id
		}
	}
}

// membership carries out an ActMembership: the log keeps it, the
// transport follows group 0's book, the request waiting for it is answered; a
// member no longer in the membership stops. It reports whether the node
// stopped.
func (n *Node) membership(a Action) bool {
	if a.Refused {
		// Its wait here, if any, ended as the change before it applied.
		n.logger.Info().Uint64("index", a.Index).Msg("a change planned on replicas changed since applied as none")
		return false
	}
	n.log.SetMembership(a.ConfState, a.Book)
	if n.group == group0 {
		for _, id := range a.Book.Removed {
			n.host.transport.removePeer(id)
		}
		if len(a.Book.Members) > 1 {
			n.host.transport.booked(a.Book.Members)
		}
		for _, m := range a.Book.Members {
			n.host.transport.addPeer(m)
		}
		// A member added after the cluster was finalized learns the
		// version from the snapshot that fills its replica: it applies
		// no finalization record. Without it, it would take itself for
		// a member of a cluster not finalized, and hand every client
		// connection to the proxy to group 0's leader.
		n.host.setVersion(a.Book)
	}
	n.mu.Lock()
	changed := !slices.Equal(n.conf.GetVoters(), a.ConfState.GetVoters()) ||
		!slices.Equal(n.conf.GetLearners(), a.ConfState.GetLearners()) || len(n.byID) != len(a.Book.Members)
	n.byID, n.conf, n.removed, n.confIndex = bookIndex(a.Book), a.ConfState, slices.Clone(a.Book.Removed), a.Index
	n.draining = slices.Clone(a.Book.Draining) // a snapshot's book brings them
	n.cordoned = slices.Clone(a.Book.Cordoned)
	n.setTubes(a.Book.Tubes)
	if changed {
		n.membersChanged++
	}
	n.mu.Unlock()
	n.logger.Info().Uint64("index", a.Index).Strs("voters", n.names(a.ConfState.GetVoters())).
		Strs("learners", n.names(a.ConfState.GetLearners())).Msg("membership")
	if w := n.waiting; w != nil {
		_, there := a.Book.byID(w.member.ID)
		if ended, err := w.endedBy(changed, there, a.Book.removed(w.member.ID)); ended {
			n.waiting = nil
			w.done <- changeResult{member: w.member, err: err}
		}
	}
	if !inConf(a.ConfState, n.self.ID) {
		n.stopRemoved(fmt.Sprintf("its removal was applied at index %d", a.Index))
		return true
	}
	return false
}

// stopRemoved stops a member removed from the cluster (ErrRemoved), or
// this member's replica of a group but 0 removed from that group: a
// replica moved away, which its member outlives.
func (n *Node) stopRemoved(why string) {
	n.lost = fmt.Errorf("%w: %s", ErrRemoved, why)
	n.stopped = true
	n.mu.Lock()
	n.err = n.lost
	n.mu.Unlock()
	if n.group != group0 {
		n.logger.Info().Str("why", why).Msg("removed from the group: its replica here stops")
		return
	}
	n.logger.Error().Err(n.lost).Msg("removed from the cluster: stopping")
}

// noteRemoved is the transport's: a peer refused this member as removed.
func (n *Node) noteRemoved(by string) {
	n.removedBy.CompareAndSwap(nil, &by)
	n.signal()
}

// isRemoved is the transport's: id was removed from the cluster.
func (n *Node) isRemoved(id uint64) bool { return n.Book().removed(id) }

// Replicas are the group's replicas as of the last membership change
// this member applied, by Raft id (a member's), and that change's index:
// of two views of a group's replicas, the one of the higher index is the
// later.
func (n *Node) Replicas() (voters, learners []uint64, index uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.conf.GetVoters()), slices.Clone(n.conf.GetLearners()), n.confIndex
}

// Book is the member's address book as of the last change it applied.
func (n *Node) Book() Book {
	n.mu.Lock()
	defer n.mu.Unlock()
	b := Book{Members: n.bookLocked()}
	b.Removed = n.removedLocked()
	b.Draining = slices.Clone(n.draining)
	b.Cordoned = slices.Clone(n.cordoned)
	return b
}

// SetDraining marks the member named name draining (on) or no longer, a
// control record in group 0's log, and returns once it is applied here.
// Only group 0's serving leader proposes it (ErrNotServing): the member
// asked forwards the request to it.
func (n *Node) SetDraining(ctx context.Context, name string, on bool) error {
	return n.setMarked(ctx, controlDrain, name, on)
}

// SetCordoned marks the member named name cordoned (on) or no longer, as
// SetDraining does draining: a cordoned member leads no group (a cluster
// of several groups' balancer hands its leaderships over and gives it
// none), and keeps its replicas.
func (n *Node) SetCordoned(ctx context.Context, name string, on bool) error {
	return n.setMarked(ctx, controlCordon, name, on)
}

// setMarked proposes the control record what (controlDrain or
// controlCordon) for the member named name, on or off, and returns once
// it is applied here.
func (n *Node) setMarked(ctx context.Context, what uint8, name string, on bool) error {
	if n.group != group0 {
		return ErrStaticGroup
	}
	m, ok := n.Book().byName(name)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownMember, name)
	}
	if info, _ := n.Leader(); !info.Serving {
		return ErrNotServing
	}
	pri := uint32(0)
	if on {
		pri = 1
	}
	return n.proposeControl(ctx, &wal.Record{Kind: wal.KindControl, State: what, Deadline: int64(m.ID), Pri: pri},
		func() bool {
			b := n.Book()
			return slices.Contains(*b.marked(what), m.ID) == on
		})
}

// proposeControl proposes r, a control record (SetDraining, ProposeTube),
// and returns once applied says this member has applied it; or with
// ErrNotServing when the leadership it was proposed under has been gone
// an election timeout and it is not applied: the journal drops what it
// holds with a leadership lost (raft drops proposals while a transfer is
// under way, and the journal keeps them), and a record the log took
// commits by then under the next leader, which this member follows.
func (n *Node) proposeControl(ctx context.Context, r *wal.Record, applied func() bool) error {
	n.mu.Lock()
	term := n.pub.term
	n.mu.Unlock()
	if _, _, err := n.journal.Append(r, wal.Loc{}); err != nil {
		return err
	}
	n.signal()
	began := time.Now()
	warned := false
	var lost time.Time
	for !applied() {
		n.mu.Lock()
		pub := n.pub
		n.mu.Unlock()
		if lost.IsZero() && (!pub.serving || pub.term != term) {
			lost = time.Now()
		}
		if !lost.IsZero() && time.Since(lost) > n.ElectionTimeout() {
			return fmt.Errorf("%w: its leadership was lost before the record was applied (it may be yet)", ErrNotServing)
		}
		if !warned && time.Since(began) > slowControl {
			// A control record waits for its group's log alone, which
			// takes milliseconds: say where the group stands.
			warned = true
			n.logger.Warn().Uint8("record", r.State).Str("tube", r.Tube).Dur("waited", time.Since(began)).
				Str("state", stateName(pub.state)).Bool("serving", pub.serving).Uint64("term", pub.term).
				Uint64("commit", pub.commit).Uint64("applied", pub.applied).Int("journal_pending", n.journal.pending()).
				Msg("a control record is not applied yet")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrChangeTimeout, ctx.Err())
		case <-n.halted:
			return errStopped
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// slowControl is how long a control record waits before proposeControl
// says so in the log.
const slowControl = 5 * time.Second

// bookLocked lists the members, in the order of the book. n.mu must be
// held.
func (n *Node) bookLocked() []Member {
	members := make([]Member, 0, len(n.byID))
	for _, m := range n.byID {
		members = append(members, m)
	}
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return members
}

// removedLocked are the ids removed. n.mu must be held.
func (n *Node) removedLocked() []uint64 { return slices.Clone(n.removed) }

// bookIndex indexes the book's members by id.
func bookIndex(b Book) map[uint64]Member {
	m := make(map[uint64]Member, len(b.Members))
	for _, mem := range b.Members {
		m[mem.ID] = mem
	}
	return m
}

// nameOf is the name of member id: from the book, or the transport for a
// peer a joining member knows only from its hello. On the node goroutine.
func (n *Node) nameOf(id uint64) string {
	if m, ok := n.byID[id]; ok {
		return m.Name
	}
	if p := n.host.transport.peer(id); p != nil {
		return p.Name
	}
	return ""
}

func (n *Node) names(ids []uint64) []string {
	names := make([]string, 0, len(ids))
	for _, id := range ids {
		if name := n.nameOf(id); name != "" {
			names = append(names, name)
		} else {
			names = append(names, fmt.Sprintf("%x", id))
		}
	}
	return names
}

// peerClient is peer id's client address, as its hello said.
func (n *Node) peerClient(id uint64) *string {
	if p := n.host.transport.peer(id); p != nil {
		return p.client.Load()
	}
	return nil
}

// inConf reports whether id is a voter or a learner in cs.
func inConf(cs *pb.ConfState, id uint64) bool {
	return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id)
}

// role is id's role in cs: voter, learner, or "".
func role(cs *pb.ConfState, id uint64) string {
	switch {
	case slices.Contains(cs.GetVoters(), id):
		return "voter"
	case slices.Contains(cs.GetLearners(), id):
		return "learner"
	}
	return ""
}
