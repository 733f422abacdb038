package member

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
)

// shards are a cluster member's shard groups (docs/design/shards.md S6).
// Group 0 is the member's node. With --cluster-groups G > 1, groups 1 to
// G-1 run beside it on the same host and log (each a GroupLog of the
// member's SharedLog), placed by the formation: meta.Formation of the
// initial members, G and R, which every member computes alike. The
// router routes by that placement. A member runs the replicas the
// placement gives it; it learns the leaders of the other groups from
// their reports (router.Router.Reported). Group 0 holds the membership
// too, so every member holds it, whatever the placement says.
// Membership changes need the planner (S7), not built: a cluster of
// several groups does not change its members yet.
type shards struct {
	placement *meta.State // immutable; nil with one group
	// nodes are the groups' replicas on this member, by group: nodes[0]
	// is group 0's from the start, the others set once started.
	nodes []atomic.Pointer[replication.Node]
}

// groups is how many shard groups the cluster has.
func (sh *shards) groups() int { return len(sh.nodes) }

// node is group g's replica on this member, nil if it has not started.
func (sh *shards) node(g uint16) *replication.Node {
	if int(g) >= len(sh.nodes) {
		return nil
	}
	return sh.nodes[g].Load()
}

// serving is group g's store while this member serves it, else nil.
func (sh *shards) serving(g uint16) *store.Store {
	n := sh.node(g)
	if n == nil {
		return nil
	}
	if info, _ := n.Leader(); info.Serving {
		return n.Store()
	}
	return nil
}

// leased reports whether this member's leadership of group g is
// confirmed (replication.Node.Leased); false for a group it does not hold.
func (sh *shards) leased(g uint16) bool {
	n := sh.node(g)
	return n != nil && n.Leased()
}

// replica is this member's store of group g, served or followed; nil if
// it holds none.
func (sh *shards) replica(g uint16) *store.Store {
	if n := sh.node(g); n != nil {
		return n.Store()
	}
	return nil
}

// term is the Raft term of group g's leader as this member knows it; 0
// for a group it does not hold.
func (sh *shards) term(g uint16) uint64 {
	if n := sh.node(g); n != nil {
		info, _ := n.Leader()
		return info.Term
	}
	return 0
}

// FormationError refuses a member whose --cluster-groups or
// --cluster-replicas the cluster cannot take: they disagree with what
// its log holds, or ask for what is not built yet.
type FormationError struct{ Reason string }

func (e *FormationError) Error() string { return e.Reason }

// planShards decides the member's shard groups from its configuration and
// its log (held: the groups the log holds; fresh: it holds nothing yet).
// A log that holds groups keeps them. A restart takes G from
// --cluster-groups, which must place on this member exactly the groups
// its log holds, or without it from the log, when the log can tell: it
// holds group 0 alone (one group), or every group is on every member (as
// many as it holds). With fewer replicas than members, a member holds
// some of the groups only, and one restarted without --cluster-groups is
// refused. Each refusal is one line.
func planShards(cfg Config, held []uint16, fresh bool) (*shards, error) {
	nc := cfg.Cluster
	replicas := cfg.Replicas
	if replicas == 0 {
		replicas = 3
	}
	everywhere := replicas >= len(nc.Peers) // every group on every member
	groups := cfg.Groups
	switch {
	case fresh && groups == 0:
		groups = 1
	case fresh:
	case groups == 0 && (len(held) == 1 || everywhere):
		groups = len(held)
	case groups == 0:
		return nil, &FormationError{fmt.Sprintf("this member holds groups %v of a cluster whose groups are each on %d of its %d members: "+
			"its log cannot tell how many there are; restart it with the cluster's --cluster-groups", sortedGroups(held), replicas, len(nc.Peers))}
	case everywhere && groups != len(held):
		return nil, &FormationError{fmt.Sprintf("--cluster-groups %d disagrees with this cluster's %d, set when it was formed: drop it or set %d",
			groups, len(held), len(held))}
	}
	if groups > meta.MaxGroups {
		return nil, &FormationError{fmt.Sprintf("--cluster-groups %d: at most %d", groups, meta.MaxGroups)}
	}
	sh := &shards{nodes: make([]atomic.Pointer[replication.Node], groups)}
	placed := []uint16{0}
	if groups > 1 {
		if nc.JoinID != 0 {
			return nil, &FormationError{"--cluster-join: a cluster of several groups (--cluster-groups) does not add members yet"}
		}
		var members []meta.Member
		for _, p := range nc.Peers {
			members = append(members, meta.Member{Name: p.Name, ID: replication.MemberID(p.Name)})
		}
		placement, err := meta.Formation(members, groups, replicas)
		if err != nil {
			return nil, &FormationError{err.Error()}
		}
		sh.placement = placement
		for _, grp := range placement.Groups[1:] {
			if grp.Holds(nc.Node) {
				placed = append(placed, grp.ID)
			}
		}
	}
	// A group placed here that the log does not hold yet starts as at
	// the formation (a member stopped while it started its groups).
	if !fresh && slices.ContainsFunc(held, func(g uint16) bool { return !slices.Contains(placed, g) }) {
		return nil, &FormationError{fmt.Sprintf("--cluster-groups %d with --cluster-replicas %d places groups %v on this member, but its log holds %v, "+
			"set when the cluster was formed: set the cluster's", groups, replicas, placed, sortedGroups(held))}
	}
	return sh, nil
}

// sortedGroups is a sorted copy of groups.
func sortedGroups(groups []uint16) []uint16 {
	s := slices.Clone(groups)
	slices.Sort(s)
	return s
}

// startShards starts groups 1 to G-1 on the member's host and log, each
// on its replicas' members as the placement says.
func (m *Member) startShards(ctx context.Context) error {
	sh := m.shards
	if sh.placement == nil {
		return nil
	}
	shared := m.clusterLog.Shared()
	for _, grp := range sh.placement.Groups[1:] {
		g := grp.ID
		if !grp.Holds(m.node.Name()) {
			continue
		}
		var peers []replication.Member
		var voters []uint64
		for _, p := range m.cfg.Cluster.Peers {
			if slices.Contains(grp.Voters(), p.Name) {
				peers = append(peers, p)
				voters = append(voters, replication.MemberID(p.Name))
			}
		}
		l, err := shared.Attach(ctx, g, voters, false)
		if err != nil {
			return fmt.Errorf("group %d's log: %w", g, err)
		}
		nc := *m.cfg.Cluster
		nc.Log, nc.Peers, nc.Logger, nc.Retain = l, peers, m.log, clusterLogRetain
		nc.Observer, nc.MetaDir = nil, "" // group 0's figures; the meta group is the host's
		nc.CloseClients = func(ctx context.Context) error {
			// Its sessions live on other members or reach it as owner
			// clients, which close (5.1); but a session of this member
			// whose reply of a command run on the store here waits for
			// the group's log closes: it would wait for ever.
			m.sessions.Detach(g)
			srv, n := m.started(), sh.node(g)
			if srv == nil || n == nil {
				return nil
			}
			return srv.CloseClientsWhere(ctx, func(q engine.Queue) bool { return router.ClosesWith(q, g) }, n.Store().Acks())
		}
		n, err := m.node.Host().StartGroup(g, nc)
		if err != nil {
			return fmt.Errorf("group %d: %w", g, err)
		}
		sh.nodes[g].Store(n)
		go m.followGroup(n)
	}
	go m.balanceLeaders()
	return nil
}

// Handing a leadership over (handOver): the member's sessions stop
// running commands for the group on its store, the replies of those that
// ran are acknowledged, then raft transfers the leadership.
const (
	// handOverGrace lets commands that passed the router's check before
	// the hold reach the log: an event loop runs one in microseconds.
	handOverGrace = 10 * time.Millisecond
	// handOverSettle bounds the wait for their acknowledgement.
	handOverSettle = time.Second
	// handOverHold is how long the hold lasts: past a transfer, which
	// raft drops after an election timeout if it has not happened.
	handOverHold = 5 * time.Second
)

// handOver hands group g's leadership, led here through n, to member to,
// without closing any of this member's sessions (router.ClosesWith): it
// holds their local fast path for g (router.Router.HoldLocal), waits
// until what ran on the store here is acknowledged, then asks raft for
// the transfer. If it does not happen, the hold ends by itself.
func (m *Member) handOver(n *replication.Node, g uint16, to string) error {
	m.sessions.HoldLocal(g, time.Now().Add(handOverHold))
	time.Sleep(handOverGrace)
	acks := n.Store().Acks()
	if j, ok := acks.(interface{ Appended() uint64 }); ok {
		done := make(chan struct{})
		acks.OnAcked(j.Appended(), func() { close(done) })
		select {
		case <-done:
		case <-time.After(handOverSettle):
		case <-n.Done():
		}
	}
	return n.TransferLeadership(to)
}

// followGroup tells the router of every change of a group's leader,
// until its node stops.
func (m *Member) followGroup(n *replication.Node) {
	for {
		_, changed := n.Leader()
		m.sessions.LeaderChanged()
		select {
		case <-changed:
		case <-n.Done():
			return
		}
	}
}

// Leaders are kept balanced (docs/design/shards.md 1.5): each member
// leads about G/M groups. Each member sees every leader, from its
// replicas and the others' reports, and plans alike (meta.PlanLeaders);
// a member hands over the groups the plan moves from it, raft's
// leadership transfer. Raft drops every proposal of the group while the
// transfer is on, until the receiver has caught up and taken over, or
// for an election timeout if it never does: so a member is planned to
// receive only while this one is connected to it (a member down is no
// receiver, though it leads fewest) and has heard from it within a third
// of an election timeout (a member stopped or cut off keeps its
// connection up for seconds, but sends nothing).
const (
	// balanceEvery is how often a member looks at the leaders.
	balanceEvery = time.Second
	// leaderSettle is how long a group's leadership stays where it went
	// before it is moved again: the election, or the last transfer, has
	// settled. The design's 10 s is for a fleet whose members come and
	// go; at formation the groups are empty and a transfer is cheap.
	leaderSettle = 3 * time.Second
)

// balanceLeaders moves this member's surplus leaderships to members that
// lead fewer groups, until the member stops.
func (m *Member) balanceLeaders() {
	sh := m.shards
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	leaders := make(map[uint16]string)
	changed := make(map[uint16]time.Time) // when each group's leader was last seen to change
	for {
		select {
		case <-m.node.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		reported := m.sessions.Reported()
		names := make(map[uint64]string)
		for _, mb := range m.node.Book().Members {
			names[mb.ID] = mb.Name
		}
		for g := range sh.groups() {
			var info replication.LeaderInfo
			if n := sh.node(uint16(g)); n != nil {
				info, _ = n.Leader()
			} else {
				info.Name = names[reported[uint16(g)]]
			}
			if leaders[uint16(g)] != info.Name {
				changed[uint16(g)] = now
			}
			if info.Name == "" {
				delete(leaders, uint16(g))
			} else {
				leaders[uint16(g)] = info.Name
			}
		}
		reachable := map[string]bool{}
		for _, mb := range m.node.Status().Members {
			reachable[mb.Name] = mb.Connected
		}
		heardWithin := m.node.ElectionTimeout() / 3 // heartbeats come every tick, a tenth of it
		caughtUp := func(_ uint16, to string) bool {
			return reachable[to] && m.node.Host().HeardFrom(to, heardWithin)
		}
		for _, tr := range meta.PlanLeaders(sh.placement, leaders, caughtUp) {
			if tr.From != m.node.Name() || now.Sub(changed[tr.Group]) < leaderSettle {
				continue
			}
			if n := sh.node(tr.Group); n != nil && m.handOver(n, tr.Group, tr.To) == nil {
				changed[tr.Group] = now
				m.log.Info().Int("group", int(tr.Group)).Str("to", tr.To).Msg("handing a group's leadership over, to balance leaders")
			}
		}
	}
}
