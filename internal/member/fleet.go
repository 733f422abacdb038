package member

import (
	"maps"
	"slices"

	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store"
)

// fleetCluster is the member's node as GET /cluster shows it in a
// cluster of several groups: every group of the cluster, those this
// member holds no replica of as their leaders last reported them, so
// that any member's /cluster (and the console's fleet page, and
// sproutctl groups) shows the whole fleet; and the tubes moves placed.
type fleetCluster struct {
	*replication.Node
	m *Member
}

// Status implements ops.Cluster.
func (f fleetCluster) Status() replication.Status {
	st := f.Node.Status()
	st.Groups = f.m.fleetGroups(st.Groups)
	rt := f.m.shards.routing.Load().state
	if len(rt.Exact) > 0 {
		st.Placed = maps.Clone(rt.Exact)
	}
	for _, p := range rt.Placements {
		if st.Prefixes == nil {
			st.Prefixes = map[string]uint16{}
		}
		st.Prefixes[p.Prefix] = p.Group
	}
	return st
}

// Ready implements ops.Cluster: group 0's Ready, and every replica of
// another group this member holds caught up with its group's leader once
// (replicasCaughtUp). Group 0 holds the metadata alone: the jobs are in
// the other groups, and a replica restarted far behind weakens its group
// as a member behind weakens group 0 (it acknowledges nothing new until
// it has caught up), so a rolling update must not take the next member
// while one of them is still catching up.
func (f fleetCluster) Ready() bool {
	return f.Node.Ready() && f.m.replicasCaughtUp()
}

// replicasCaughtUp reports whether every replica of a group but 0 this
// member holds has caught up with its group's leader once
// (replication.Node.HasCaughtUp); a replica that stopped on its own (its
// removal, a lost log) is not waited for. Latched once true, as each
// replica's is: a replica a move adds later, a learner filling from a
// snapshot, counts in no group's majority, and would make a member that
// serves look not ready for as long as its snapshot takes.
func (m *Member) replicasCaughtUp() bool {
	if m.replicasReady.Load() {
		return true
	}
	for g := 1; g < m.shards.groups(); g++ {
		if n := m.shards.node(uint16(g)); n != nil && n.Err() == nil && !n.HasCaughtUp() {
			return false
		}
	}
	m.replicasReady.Store(true)
	return true
}

// ReplicaMoves implements ops' mover: the replica moves this member
// began making (makeMove).
func (f fleetCluster) ReplicaMoves() ops.ReplicaMoves {
	made := &f.m.movesMade
	return ops.ReplicaMoves{Planned: made[byGroup0Leader].Load(), Asked: made[byAsker].Load(), Alone: made[byItself].Load()}
}

// fleetGroups completes held, the groups this member runs, with the
// cluster's others, in order of id: each with its leader's name, its
// replicas and its leader's figures, from the leader's last fresh report;
// a group no fresh report names is listed with no leader, no replicas.
func (m *Member) fleetGroups(held []replication.GroupStatus) []replication.GroupStatus {
	reported := m.sessions.Reported()
	names := m.memberNames()
	nameOf := func(ids []uint64) []string {
		out := []string{}
		for _, id := range ids {
			if n, ok := names[id]; ok {
				out = append(out, n)
			} else {
				out = append(out, replication.FormatID(id))
			}
		}
		slices.Sort(out)
		return out
	}
	// Every group's store holds a default tube; stats and list-tubes
	// count it once (router.SumStats), and the admin API lists it in
	// the group that owns its name only: so do the groups' tubes here,
	// which then add up to stats' current-tubes.
	defaultOwner := int(m.shards.routing.Load().state.Owner(store.DefaultTube))
	notDefault := func(s *replication.GroupStatus) {
		if s.ID != defaultOwner && s.Tubes > 0 {
			s.Tubes--
		}
	}
	out := make([]replication.GroupStatus, 0, m.shards.groups())
	for g := range m.shards.groups() {
		if i := slices.IndexFunc(held, func(s replication.GroupStatus) bool { return s.ID == g }); i >= 0 {
			s := held[i]
			s.Held = true
			notDefault(&s)
			out = append(out, s)
			continue
		}
		s := replication.GroupStatus{ID: g, Replicas: []string{}}
		if rep, ok := reported[uint16(g)]; ok {
			s.Leader, s.Term = names[rep.Leader], rep.Term
			s.Replicas, s.Tubes, s.Jobs = nameOf(rep.Voters), rep.Tubes, rep.Jobs
			notDefault(&s)
			if len(rep.Learners) > 0 {
				s.Learners = nameOf(rep.Learners)
			}
		}
		out = append(out, s)
	}
	return out
}
