package member

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
)

// shards are a cluster member's shard groups (docs/design/shards.md S6,
// S7). Group 0 is the member's node. With --cluster-groups G > 1, groups
// 1 to G-1 run beside it on the same host and log (each a GroupLog of the
// member's SharedLog), first placed by the formation: meta.Formation of
// the initial members, G and R, which every member computes alike, and
// which says too which group owns each tube and each id. The router
// routes by it. Group 0 holds the membership too, so every member holds
// it, whatever the placement says. A group's replicas move between the
// members since (moveReplica): each group's own Raft membership says
// where they are, and its leader's reports (router.Router.Reported) tell
// every member; a member starts its replica of a group it was added to,
// and drops its log of one it was removed from (followReplicas).
type shards struct {
	placement *meta.State // immutable: the formation; nil with one group
	// formation is its G and R as recorded (formationFile), R as asked
	// (placement caps it at the initial members): what a member added
	// starts with. Immutable once the member has started.
	formation formation
	// fresh: the member's first start, when it starts the formation's
	// groups placed on it. At a later start it starts the groups its log
	// holds; the others, if it is added to them, as reports say.
	fresh bool
	// routing is what the sessions route by (tubemoves.go): the
	// placement with group 0's moves of tubes; set with placement.
	routing atomic.Pointer[routing]
	// frozenChecks are, by group, what its leader refuses while a
	// prefix's placement freezes some of its tubes (Member.frozenTube).
	frozenChecks []func(tube []byte) bool
	// nodes are the groups' replicas on this member, by group: nodes[0]
	// is group 0's from the start, the others set while running. It has
	// room for every group the cluster may grow (meta.MaxGroups); count
	// are the cluster's groups as this member knows them: the formation's
	// and those grown (group 0's TubeBook.Grown; growth.go).
	nodes []atomic.Pointer[replication.Node]
	count atomic.Int32
	// grownSeen are the grown groups this member has taken (growth.go:
	// grew, seedGrown). Guarded by grownMu.
	grownMu   sync.Mutex
	grownSeen map[uint16]bool
	// left is, by group, the membership change whose index removed this
	// member's replica last: a report as of it or before does not bring
	// the replica back. Guarded by leftMu.
	leftMu sync.Mutex
	left   map[uint16]uint64
}

// groups is how many shard groups the cluster has.
func (sh *shards) groups() int { return int(sh.count.Load()) }

// node is group g's replica on this member, nil if it has not started.
func (sh *shards) node(g uint16) *replication.Node {
	if int(g) >= sh.groups() {
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
// its log holds, or ask for what is not built yet (at start), or with
// the formation group 0 records (formation.go: it stops).
type FormationError struct{ Reason string }

func (e *FormationError) Error() string { return e.Reason }

// planShards decides the member's shard groups from its configuration,
// the formation it recorded (rec: formationFile; zero if none) and its
// log (held: the groups the log holds; fresh: it holds nothing yet). A
// log that holds groups keeps them. A restart takes G and R from the
// record, which --cluster-groups and --cluster-replicas may only repeat;
// without one (a directory of a release that wrote none) from the flags,
// or from the log when it can tell: it holds group 0 alone (one group),
// or every group is on every member (as many as it holds). With fewer
// replicas than members, a member holds some of the groups only, and one
// restarted so without --cluster-groups is refused. Each refusal is one
// line.
func planShards(cfg Config, held []uint16, fresh bool, rec formation) (*shards, error) {
	nc := cfg.Cluster
	for _, f := range []struct {
		flag       string
		set, known int
	}{{"--cluster-groups", cfg.Groups, rec.Groups}, {"--cluster-replicas", cfg.Replicas, rec.Replicas}} {
		if f.known != 0 && f.set != 0 && f.set != f.known {
			return nil, &FormationError{fmt.Sprintf("%s %d disagrees with this cluster's %d, set when it was formed: drop it or set %d",
				f.flag, f.set, f.known, f.known)}
		}
	}
	replicas := cmp.Or(rec.Replicas, cfg.Replicas, 3)
	everywhere := replicas >= len(nc.Peers) // every group on every member
	groups := cfg.Groups
	switch {
	case rec.Groups != 0:
		groups = rec.Groups
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
	// A member that joined the cluster starts no group from the formation
	// (whose members it is not among): it is added to groups since.
	sh := &shards{nodes: make([]atomic.Pointer[replication.Node], meta.MaxGroups), fresh: fresh && nc.JoinID == 0, left: map[uint16]uint64{}}
	sh.count.Store(int32(groups))
	if groups > 1 {
		var members []meta.Member
		for _, p := range nc.Peers {
			members = append(members, meta.Member{Name: p.Name, ID: replication.MemberID(p.Name)})
		}
		placement, err := meta.Formation(members, groups, replicas)
		if err != nil {
			return nil, &FormationError{err.Error()}
		}
		sh.placement = placement
		sh.routing.Store(newRouting(placement, replication.TubeBook{}))
	}
	// The log may hold other groups than the formation placed here (they
	// move), but none the cluster does not have; with a record, groups
	// grown since (growth.go) too, which group 0's book names.
	for _, g := range sortedGroups(held) {
		if int(g) >= groups && rec.Groups == 0 {
			return nil, &FormationError{fmt.Sprintf("--cluster-groups %d disagrees with this member's log, which holds group %d: "+
				"set the cluster's, set when it was formed", groups, g)}
		}
	}
	return sh, nil
}

// campaignsFirst reports whether the member named is group g's preferred
// first leader in a formation this member starts from (fresh): it then
// campaigns as soon as it reaches the group (NodeConfig.CampaignFirst).
// Not at G = 1, whose cluster elects as it did before groups.
func (sh *shards) campaignsFirst(g uint16, name string) bool {
	return sh.fresh && sh.placement != nil && int(g) < len(sh.placement.Groups) && sh.placement.Groups[g].Preferred == name
}

// sortedGroups is a sorted copy of groups.
func sortedGroups(groups []uint16) []uint16 {
	s := slices.Clone(groups)
	slices.Sort(s)
	return s
}

// startShards starts this member's replicas of groups 1 to G-1: those its
// log holds, or at its first start those the formation places on it.
// Groups it is added to later start as their leaders' reports say
// (followReplicas).
func (m *Member) startShards(ctx context.Context) error {
	sh := m.shards
	go m.recordFormation()
	if sh.placement == nil {
		m.node.OnTubes(func(b replication.TubeBook) { m.checkFormed(b.Formed) })
		return nil
	}
	m.seedGrown()
	m.node.OnTubes(func(b replication.TubeBook) { m.tubesChanged(0, b) })
	held := m.clusterLog.Shared().Groups()
	for _, grp := range sh.placement.Groups[1:] {
		var err error
		switch {
		case slices.Contains(held, grp.ID):
			err = m.startGroup(ctx, grp.ID, nil, false, false)
		case sh.fresh && grp.Holds(m.node.Name()):
			err = m.startGroup(ctx, grp.ID, grp.Voters(), false, sh.campaignsFirst(grp.ID, m.node.Name()))
		}
		if err != nil {
			return err
		}
	}
	// The grown groups this member's log holds (growth.go).
	for _, g := range sortedGroups(held) {
		if int(g) >= len(sh.placement.Groups) {
			if err := m.startGroup(ctx, g, nil, false, false); err != nil {
				return err
			}
		}
	}
	go m.balanceLeaders()
	return nil
}

// startGroup starts this member's replica of group g: on its log if the
// log holds the group (replicas nil), else a new one, as one of the
// voters named (the formation's or a growth's), or when join as a
// replica added since, which starts empty and is filled by a snapshot of
// the group's leader. Its book names every member: a log holds no book
// for a group whose replicas never changed since the formation. With
// campaign, a new group's preferred first leader, it campaigns as soon as
// it reaches the group (replication.NodeConfig.CampaignFirst).
func (m *Member) startGroup(ctx context.Context, g uint16, replicas []string, join, campaign bool) error {
	sh := m.shards
	self := m.node.Name()
	if fail := failGroupStart.Load(); fail != nil && (*fail)(self, g) {
		return fmt.Errorf("group %d: a start made to fail (a test's)", g)
	}
	var peers []replication.Member
	var voters []uint64
	for _, p := range m.node.Book().Members {
		if p.Name == self || replicas == nil || slices.Contains(replicas, p.Name) {
			peers = append(peers, p)
		}
		if slices.Contains(replicas, p.Name) {
			voters = append(voters, p.ID)
		}
	}
	if join {
		voters = nil
	}
	l, err := m.clusterLog.Shared().Attach(ctx, g, voters, join)
	if err != nil {
		return fmt.Errorf("group %d's log: %w", g, err)
	}
	nc := *m.cfg.Cluster
	nc.Log, nc.Peers, nc.Logger, nc.Retain = l, peers, m.log, clusterLogRetain
	nc.Observer = nil // group 0's figures
	nc.CampaignFirst = campaign
	nc.CloseClients = func(ctx context.Context) error { return m.closeGroupClients(ctx, g, sh.node(g)) }
	nc.OnServe = func(st *store.Store, handed []byte) { m.takeHanded(g, st, handed) }
	n, err := m.node.Host().StartGroup(g, nc)
	if err != nil {
		return fmt.Errorf("group %d: %w", g, err)
	}
	sh.nodes[g].Store(n)
	n.OnTubes(func(b replication.TubeBook) { m.tubesChanged(g, b) })
	go m.followGroup(n, g)
	return nil
}

// closeGroupClients is what group g's replica n here calls on losing the
// leadership (replication.NodeConfig.CloseClients). Its sessions live on
// other members or reach it as owner clients, which close (5.1); but a
// session of this member whose reply of a command run on the store here
// waits for the group's log closes: it would wait for ever.
func (m *Member) closeGroupClients(ctx context.Context, g uint16, n *replication.Node) error {
	m.sessions.Detach(g)
	srv := m.started()
	if srv == nil || n == nil {
		return nil
	}
	return srv.CloseClientsWhere(ctx, func(q engine.Queue) bool { return router.ClosesWith(q, g) }, n.Store().Acks())
}

// failGroupStart, set by tests only, makes startGroup fail for a member
// and group it names: a start cut short, as by a crash.
var failGroupStart atomic.Pointer[func(member string, g uint16) bool]

// followReplicas starts this member's replica of each group a leader's
// report names it in (added since: replication.Node.AddReplica) and
// drops the one of each group a later report no longer names it in
// (removed without hearing of it: raft's leader stops sending to a
// replica it removed, which may not have applied its removal yet).
// names are the members' by Raft id (memberNames). A report whose
// membership never changed (index 0) that names this member, for a
// group its log does not hold, is a replica of the formation's or a
// growth's that never started here (startOriginal).
func (m *Member) followReplicas(reported map[uint16]router.Report, names map[uint64]string) {
	sh := m.shards
	self := m.node.ID()
	for g, rep := range reported {
		if g == 0 || int(g) >= sh.groups() {
			continue
		}
		if rep.Index == 0 {
			if slices.Contains(rep.Voters, self) && sh.node(g) == nil {
				m.startOriginal(g, rep, names)
			}
			continue
		}
		named := slices.Contains(rep.Voters, self) || slices.Contains(rep.Learners, self)
		n := sh.node(g)
		switch {
		case n == nil && named && rep.Index > sh.leftAt(g):
			var replicas []string
			for _, id := range slices.Concat(rep.Voters, rep.Learners) {
				replicas = append(replicas, names[id])
			}
			ctx, cancel := context.WithTimeout(context.Background(), shardsStartTimeout)
			err := m.startGroup(ctx, g, replicas, true, false)
			cancel()
			if err != nil {
				m.log.Error().Err(err).Int("group", int(g)).Msg("cannot start the replica of a group this member was added to")
				continue
			}
			m.log.Info().Int("group", int(g)).Uint64("index", rep.Index).Msg("added to a group: its replica starts here, empty until a snapshot fills it")
		case n != nil && !named:
			if _, _, index := n.Replicas(); rep.Index > index {
				m.leaveGroup(g, n, rep.Index)
			}
		}
	}
}

// startOriginal starts this member's replica of group g as one of the
// voters the group was made with (rep, its leader's report, whose
// membership never changed): a first start cut short before it started
// the group (startShards), or a crash between a growth's record and its
// start (startGrown), left the member a voter of a group it never ran,
// for good: the group one failure from losing its quorum. Never having
// run, the replica never voted nor acknowledged, so it starts as a new
// member's log of those voters, caught up by the leader.
func (m *Member) startOriginal(g uint16, rep router.Report, names map[uint64]string) {
	m.growMu.Lock() // startGrown's, which may start it meanwhile
	defer m.growMu.Unlock()
	if m.shards.node(g) != nil || m.shards.leftAt(g) > 0 || slices.Contains(m.clusterLog.Shared().Groups(), g) {
		return // running, or left since (a report from before that), or on its log
	}
	var voters []string
	for _, id := range rep.Voters {
		name, ok := names[id]
		if !ok {
			return // a member not known yet: the next look
		}
		voters = append(voters, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), shardsStartTimeout)
	err := m.startGroup(ctx, g, voters, false, false)
	cancel()
	if err != nil {
		m.log.Error().Err(err).Int("group", int(g)).Msg("cannot start the replica of a group this member was made a voter of")
		return
	}
	m.log.Warn().Int("group", int(g)).Strs("voters", voters).
		Msg("a replica of a group this member was made a voter of never started here (a start cut short): started now")
}

// leftAt is the index of the change that last removed this member's
// replica of group g, 0 if none did since the member started.
func (sh *shards) leftAt(g uint16) uint64 {
	sh.leftMu.Lock()
	defer sh.leftMu.Unlock()
	return sh.left[g]
}

// leaveGroup ends this member's replica n of group g, removed from the
// group by the change of index at (or later): it stops, the member's
// sessions forget the group's replica here, and the group's part of the
// log goes (replication.SharedLog.Drop), its space freed as the segments
// holding it are.
func (m *Member) leaveGroup(g uint16, n *replication.Node, at uint64) {
	sh := m.shards
	// The removal is recorded before the node is cleared: followReplicas
	// starts a group whose node is nil on any report later than left,
	// and a report from before the removal still names this member, so
	// in between it would start a new node on the log about to be dropped
	// (SharedLog.Attach hands back the group's log while it is held).
	// Recorded for an n already replaced, it is below the change that
	// added the member again, and followReplicas looks at it only while
	// no node runs.
	_, _, index := n.Replicas()
	sh.leftMu.Lock()
	sh.left[g] = max(sh.left[g], at, index)
	sh.leftMu.Unlock()
	if !sh.nodes[g].CompareAndSwap(n, nil) {
		return
	}
	n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), handOverSettle)
	defer cancel()
	if err := m.closeGroupClients(ctx, g, n); err != nil {
		m.log.Warn().Err(err).Int("group", int(g)).Msg("closing the sessions waiting for a group's log here")
	}
	m.sessions.LeaderChanged()
	if err := m.clusterLog.Shared().Drop(g); err != nil {
		m.log.Error().Err(err).Int("group", int(g)).Msg("cannot drop the log of a group this member left")
		return
	}
	m.log.Info().Int("group", int(g)).Uint64("index", max(at, index)).Msg("removed from a group: its replica here stopped and its log is dropped")
}

// followGroup tells the router of every change of group g's leader,
// until its replica n stops; one stopped by its removal leaves the group.
func (m *Member) followGroup(n *replication.Node, g uint16) {
	for {
		_, changed := n.Leader()
		m.sessions.LeaderChanged()
		select {
		case <-changed:
		case <-n.Done():
			if errors.Is(n.Err(), replication.ErrRemoved) {
				m.leaveGroup(g, n, 0)
			}
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
// receiver, though it leads fewest) and, for a group this one leads, has
// heard from it within a third of an election timeout (a member stopped
// or cut off keeps its connection up for seconds, but sends nothing); a
// member that came back (comebacks) only once it has been back a while.
const (
	// balanceEvery is how often a member looks at the leaders.
	balanceEvery = time.Second
	// leaderSettle is how long a group's leadership stays where it went
	// before it is moved again: the election, or the last transfer, has
	// settled. The design's 10 s is for a fleet whose members come and
	// go; at formation the groups are empty and a transfer is cheap.
	leaderSettle = 3 * time.Second
	// receiverSettle is how long a member that comes back (restarted, or
	// its connection cut and made again) is given no leadership: it is
	// replaying its log and catching its groups up, short of CPU, and a
	// group handed to it would wait on it.
	receiverSettle = 5 * time.Second
	// balanceStalled is how late a look may come before it is taken for
	// a stall (the member stopped, or starved of CPU): its view is then
	// as old as the stall, so the look is skipped.
	balanceStalled = 2 * balanceEvery
)

// comebacks are the members that came back lately, as the balancer sees
// them: connected once, then not, then connected again. The balancer
// looks; a graceful shutdown's handover asks too (Member.unsettled).
type comebacks struct {
	mu   sync.Mutex
	up   map[string]bool      // guarded by mu: connected at the last look; absent: never connected
	back map[string]time.Time // guarded by mu: when each came back
}

// look notes whom the member is connected to now.
func (c *comebacks) look(reachable map[string]bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up == nil {
		c.up, c.back = map[string]bool{}, map[string]time.Time{}
	}
	for name, conn := range reachable {
		was, known := c.up[name]
		switch {
		case conn && known && !was:
			c.back[name] = now
		case !conn && !known:
			continue // not connected yet, as at the cluster's start
		}
		c.up[name] = conn
	}
}

// settled reports whether member name may be handed a leadership: it did
// not come back within receiverSettle of now.
func (c *comebacks) settled(name string, now time.Time) bool {
	c.mu.Lock()
	at, ok := c.back[name]
	c.mu.Unlock()
	return !ok || now.Sub(at) >= receiverSettle
}

// unsettled is 1 if member name came back within receiverSettle of now,
// else 0: a handover's receiver is one settled, where there is one.
func (m *Member) unsettled(name string, now time.Time) int {
	if m.comebacks.settled(name, now) {
		return 0
	}
	return 1
}

// balanceLeaders moves this member's surplus leaderships to members that
// lead fewer groups, until the member stops.
func (m *Member) balanceLeaders() {
	sh := m.shards
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	leaders := make(map[uint16]string)
	changed := make(map[uint16]time.Time) // when each group's leader was last seen to change
	gave := make(map[string]time.Time)    // when each member was last seen to lose a leadership
	last := time.Now()
	for {
		select {
		case <-m.node.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if now.Sub(last) > balanceStalled {
			// Back from a stall: the leaders' reports, the connections
			// and this member's own leaderships are as they were before
			// it, and its groups may not yet have noticed theirs. A move
			// planned on that view (a replica the groups since moved, a
			// leadership since lost) would be undone by the next.
			m.log.Debug().Dur("late", now.Sub(last)-balanceEvery).Msg("the balancer skips a look after a stall")
			last = now
			continue
		}
		last = now
		reported, names := m.sessions.Reported(), m.memberNames()
		m.followReplicas(reported, names)
		m.dropRemovedReplicas()
		m.dropStaleLearners(now)
		for g := range sh.groups() {
			name := m.leaderOf(uint16(g), reported, names)
			if prev := leaders[uint16(g)]; prev != name {
				changed[uint16(g)] = now
				if prev != "" {
					gave[prev] = now
				}
			}
			if name == "" {
				delete(leaders, uint16(g))
			} else {
				leaders[uint16(g)] = name
			}
		}
		reachable, ready := m.reachable(), map[string]bool{}
		m.comebacks.look(reachable, now)
		for name, conn := range reachable {
			// Nor one that gave a leadership away lately: a member
			// shutting down hands its groups over (handOverLeaderships)
			// and leads fewer, and one handed back to it then goes to an
			// election as it stops, the jobs held in it ready again.
			ready[name] = conn && m.comebacks.settled(name, now) && now.Sub(gave[name]) >= leaderSettle
		}
		caughtUp := receivers(m.node.Name(), leaders, ready, m.caughtUp, reportedBehind(reported, names))
		cur := m.currentPlacement(reported, names)
		m.planReplicas(cur, m.upIn(reachable),
			func(g uint16) string { return m.leaderOf(g, reported, names) }, now)
		m.resolveTubeMoves()
		m.resolvePrefixes()
		go m.settleMoves()
		for _, tr := range meta.PlanLeaders(cur, leaders, caughtUp) {
			// Nor while this member moves a replica of the group: the
			// move's removal of its giver, led then, would close the
			// giver's sessions (moveReplica).
			if tr.From != m.node.Name() || now.Sub(changed[tr.Group]) < leaderSettle || m.driving(tr.Group) || m.moving.in(tr.Group) {
				continue
			}
			n := sh.node(tr.Group)
			if n == nil {
				continue
			}
			// Tried, the group is left alone a while either way: a
			// transfer that did not happen held its commands for an
			// election timeout (handOver), and its receiver may be cut off.
			err := m.handOver(n, tr.Group, tr.To)
			changed[tr.Group] = time.Now()
			if err != nil {
				m.log.Warn().Int("group", int(tr.Group)).Str("to", tr.To).Err(err).Msg("a leadership to balance the leaders was not handed over")
				continue
			}
			m.log.Info().Int("group", int(tr.Group)).Str("to", tr.To).Msg("handed a group's leadership over, to balance leaders")
		}
	}
}

// leaderOf is the name of group g's leader as this member sees it: from
// its replica of g, else (none, or one just added that has heard of no
// leader yet) from the leader's report (reported, names by Raft id); ""
// when neither names one.
func (m *Member) leaderOf(g uint16, reported map[uint16]router.Report, names map[uint64]string) string {
	if n := m.shards.node(g); n != nil {
		if info, _ := n.Leader(); info.Name != "" {
			return info.Name
		}
	}
	if rep, ok := reported[g]; ok {
		return names[rep.Leader]
	}
	return ""
}

// reachable is whether this member is connected to each member, as group
// 0's status says.
func (m *Member) reachable() map[string]bool {
	reachable := map[string]bool{}
	for _, mb := range m.node.Status().Members {
		reachable[mb.Name] = mb.Connected
	}
	return reachable
}

// upIn is whether a member is up as the replica planners judge it: this
// member, or one it is connected to (reachable). A member gives or
// receives replicas while connected: a member hears Raft messages only
// from those it shares a group with, and a member just added shares
// group 0 with its leader alone.
func (m *Member) upIn(reachable map[string]bool) func(name string) bool {
	return func(name string) bool { return name == m.node.Name() || reachable[name] }
}

// receivers is meta.PlanLeaders' caughtUp as member self judges it: a
// member connected here (reachable), and caught up with group g as g's
// leader judges it: for a group self leads, heard from lately and holding
// the group's log (caughtUp); for another's, not named behind in its
// leader's report (behind). Only the replicas of a group a member leads
// answer its heartbeats and appends, so every planner shares the
// leader's view: a member that shares no group it leads with the one
// leading fewest still starts the chain of transfers towards it, and no
// member starts one whose last hop its leader knows is impossible (a
// replica behind), which the member it hands to would undo, leading most
// then (TestBalancersSettle). A leader of a release before names none
// behind.
func receivers(self string, leaders map[uint16]string, reachable map[string]bool,
	caughtUp, behind func(uint16, string) bool) func(uint16, string) bool {
	return func(g uint16, to string) bool {
		if !reachable[to] {
			return false
		}
		if leaders[g] == self {
			return caughtUp(g, to)
		}
		return !behind(g, to)
	}
}

// reportedBehind reports whether group g's leader named member name
// behind in its report (router.Report.Behind; names by Raft id).
func reportedBehind(reported map[uint16]router.Report, names map[uint64]string) func(uint16, string) bool {
	return func(g uint16, name string) bool {
		return slices.ContainsFunc(reported[g].Behind, func(id uint64) bool { return names[id] == name })
	}
}

// behind is router.RouterConfig.Behind: the voters of group g, which
// this member leads, that it would not hand g to (caughtUp).
func (m *Member) behind(g uint16) []uint64 {
	voters, _, _ := m.shards.replicas(g)
	var names map[uint64]string
	var out []uint64
	for _, id := range voters {
		if id == m.node.ID() {
			continue
		}
		if names == nil {
			names = m.memberNames()
		}
		if !m.caughtUp(g, names[id]) {
			out = append(out, id)
		}
	}
	return out
}

// caughtUp reports whether the member named name, a replica of group g
// this member leads, was heard from lately and holds g's log
// (Node.CaughtUp): a transfer to one behind would hold the group's
// commands while it catches up.
func (m *Member) caughtUp(g uint16, name string) bool {
	n := m.shards.node(g)
	return n != nil && m.heardLately(name) && n.CaughtUp(name)
}

// currentPlacement is the formation with the members as they are now
// (group 0's) and each group's replicas as they are now: as this member's
// replica of the group has them, or as the group's leader reported them,
// whichever is of the later membership change (a replica just added has
// applied none yet); names are the members' by Raft id. A group it holds
// no replica of is as reported, whatever the report's index (a group
// never changed reports 0), and with no report, no replica is known:
// the formation's are no guide (a member that joined computed its own
// from the peers it was given), and a planner that counted them moved
// replicas to a member that held one already, over and over.
func (m *Member) currentPlacement(reported map[uint16]router.Report, names map[uint64]string) *meta.State {
	sh := m.shards
	p := *sh.routing.Load().state // the formation's groups and those grown
	p.Members = nil
	book := m.node.Book()
	for id, name := range names {
		p.Members = append(p.Members, meta.Member{Name: name, ID: id, Draining: slices.Contains(book.Draining, id),
			Cordoned: slices.Contains(book.Cordoned, id)})
	}
	slices.SortFunc(p.Members, func(a, b meta.Member) int { return cmp.Compare(a.Name, b.Name) })
	p.Replicas = sh.wantedReplicas(len(p.Members))
	p.Groups = slices.Clone(p.Groups)
	for i := range p.Groups {
		g := p.Groups[i].ID
		var voters, learners []uint64
		var index uint64
		n := sh.node(g)
		if n != nil {
			voters, learners, index = n.Replicas()
		}
		rep, ok := reported[g]
		switch {
		case ok && (n == nil || rep.Index > index):
			voters, learners = rep.Voters, rep.Learners
		case n == nil:
			p.Groups[i].Replicas = nil
			continue
		}
		var rs []meta.Replica
		for _, id := range voters {
			rs = append(rs, meta.Replica{Member: names[id]})
		}
		for _, id := range learners {
			rs = append(rs, meta.Replica{Member: names[id], Learner: true})
		}
		p.Groups[i].Replicas = rs
	}
	return &p
}

// wantedReplicas is R, the voters each group is to have in a cluster of
// members: as the cluster was formed with (asked: the formation capped it
// at the members it had then), at most members. Every member counts
// alike, whether it formed the cluster or joined it (the formation's R is
// of the peers it was started with), so two planners do not undo each
// other's moves; and a cluster formed with fewer members than R gains
// the replicas asked as members join, which the groups it grows have
// already.
func (sh *shards) wantedReplicas(members int) int {
	return min(cmp.Or(sh.formation.Replicas, 3), members)
}

// replicas is router.RouterConfig.Replicas: group g's replicas as this
// member's replica has them.
func (sh *shards) replicas(g uint16) (voters, learners []uint64, index uint64) {
	if n := sh.node(g); n != nil {
		return n.Replicas()
	}
	return nil, nil, 0
}

// holding are the groups but 0 the member named holds a replica of, as
// this member knows them now (currentPlacement), and a group whose
// replicas it does not know (one it holds none of, with no fresh report
// of its leader's), if any: the member may hold one there too.
func (m *Member) holding(name string) (held []uint16, unknown uint16, known bool) {
	known = true
	for _, g := range m.currentPlacement(m.sessions.Reported(), m.memberNames()).Groups[1:] {
		switch {
		case g.Replicas == nil && known:
			unknown, known = g.ID, false
		case g.Holds(name):
			held = append(held, g.ID)
		}
	}
	return held, unknown, known
}

// memberNames are the cluster's members' names, by Raft id (group 0's
// book).
func (m *Member) memberNames() map[uint64]string {
	names := make(map[uint64]string)
	for _, mb := range m.node.Book().Members {
		names[mb.ID] = mb.Name
	}
	return names
}
