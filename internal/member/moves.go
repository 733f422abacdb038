package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
)

// Moving a group's replica (docs/design/shards.md 1.4): the member that
// receives it is added to the group as a learner, a snapshot of the group
// fills it, the leader promotes it once it has caught up, then the member
// that gives it is removed (a leader removed hands its leadership over
// first). Each step is one of the group's own membership changes, so a
// move cut short leaves the group with its replicas or one more, and the
// same move asked again goes on from where it stands.
const (
	// moveStall is how long a move's receiver may show no progress
	// (catchUp) before the move gives up on it and takes it out again:
	// a receiver down, or whose snapshots fail.
	moveStall = time.Minute
	// moveCap bounds a move however its receiver progresses. A fixed
	// minute, as moveStall was once, gave up on a group whose snapshot
	// takes longer (some 5 GB at replication's pace), and the planner,
	// seeing the same state again, planned the same move again, for
	// good. Progress is judged from what the group's leader sees: a
	// snapshot's stream is not seen from here, only its receiver's
	// member heard from, so a receiver up whose replica never takes the
	// snapshot (not running there) would seem to progress for ever, and
	// one whose log rises but never within promoteSlack (writes
	// outpacing it) is never promoted. 15 minutes is some 80 GB at the
	// snapshots' pace: past that, the move is given up, and the planner
	// holds every other until then (one at a time over the cluster).
	moveCap = 15 * time.Minute
	// movePoll is how often a move looks whether the receiver is a voter;
	// catchUpLook, how often it judges the receiver's progress (which
	// reads the group's status and the member's figures).
	movePoll    = 50 * time.Millisecond
	catchUpLook = time.Second
)

// learnerSeen is what a group's leader sees of a learner at a look: the
// last entry it holds (Match), whether its member was heard from lately,
// and how many snapshots failed on the leader's member so far (the
// member's count: snapshots are not counted by receiver).
type learnerSeen struct {
	match  uint64
	heard  bool
	failed uint64
}

// catchUp judges, look by look, whether a learner still catches up: its
// Match rises, or a snapshot may be streaming to it (raft leaves Match
// where it is until the snapshot is taken, which may take minutes): its
// member is heard from and no snapshot has failed here since its Match
// last rose. A learner that showed neither for stall, or has been one for
// limit, has stalled. The first look sets where it starts from.
type catchUp struct {
	stall, limit time.Duration
	began, since time.Time // the first look; the last that saw progress
	seen         learnerSeen
}

// stalled takes the look at now, which saw s, and reports whether the
// learner has stalled.
func (c *catchUp) stalled(now time.Time, s learnerSeen) bool {
	switch {
	case c.began.IsZero():
		c.began, c.since, c.seen = now, now, s
	case s.match > c.seen.match:
		c.since, c.seen = now, s
	case s.heard && s.failed == c.seen.failed:
		// A failure elsewhere counts too (the count is the member's),
		// which at worst gives up on a move a minute after it, as
		// before.
		c.since = now
	}
	return now.Sub(c.since) >= c.stall || now.Sub(c.began) >= c.limit
}

// learnerSeen is what n, this member's replica of its group, leading,
// sees of member name's replica.
func (m *Member) learnerSeen(n *replication.Node, name string) learnerSeen {
	s := learnerSeen{heard: m.node.Host().HeardFrom(name, m.node.ElectionTimeout()),
		failed: m.node.Stats().Transport.SnapshotsFailed}
	for _, ms := range n.Status().Members {
		if ms.Name == name && ms.Match != nil {
			s.match = *ms.Match
		}
	}
	return s
}

// errNoReplica: a move asked of a member that holds no replica of the
// group, after it was forwarded once.
var errNoReplica = errors.New("member: this member holds no replica of the group")

// moveSlot holds the group whose replica this member moves, one move at
// a time: the balancer hands no leadership of it over meanwhile, since
// the move's steps are proposed here.
type moveSlot struct{ g atomic.Int32 } // the group + 1; 0: none

// take claims the slot for group g, if it is free.
func (s *moveSlot) take(g uint16) bool { return s.g.CompareAndSwap(0, int32(g)+1) }

// free gives the slot up.
func (s *moveSlot) free() { s.g.Store(0) }

// in reports whether a move of group g holds the slot.
func (s *moveSlot) in(g uint16) bool { return s.g.Load() == int32(g)+1 }

// GroupReplicas is a group's replicas by member name: a move's answer.
type GroupReplicas struct {
	Group    int      `json:"group"`
	Replicas []string `json:"replicas"`
	Learners []string `json:"learners,omitempty"`
}

// moveReplica moves group g's replica from member from to member to, on
// this member's replica of g, and returns the group's replicas after. A
// receiver that stops catching up (catchUp: moveStall without progress,
// or moveCap in all), or one still catching up when ctx ends, is removed
// again, and the group keeps its replicas.
func (m *Member) moveReplica(ctx context.Context, g uint16, from, to string) (GroupReplicas, error) {
	n := m.shards.node(g)
	if n == nil {
		return GroupReplicas{}, fmt.Errorf("%w: group %d", errNoReplica, g)
	}
	if from == to {
		return GroupReplicas{}, fmt.Errorf("%w: from and to are both %s", replication.ErrBadMember, from)
	}
	fromID, toID := m.idOf(from), m.idOf(to)
	// planned is the index of the membership holds looked at last: the
	// giver's removal applies only on the replicas it saw (RemoveReplica).
	var planned uint64
	holds := func(id uint64) (voter, learner bool) {
		var voters, learners []uint64
		voters, learners, planned = n.Replicas()
		return slices.Contains(voters, id), slices.Contains(learners, id)
	}
	if v, l := holds(fromID); !v && !l {
		return m.replicasOf(g, n), fmt.Errorf("%w: %s holds no replica of group %d", replication.ErrUnknownMember, from, g)
	}
	if v, l := holds(toID); !v && !l {
		add, cancel := context.WithTimeout(ctx, moveStall)
		_, err := n.AddReplica(add, to)
		cancel()
		if err != nil {
			return m.replicasOf(g, n), err
		}
		m.log.Info().Int("group", int(g)).Str("from", from).Str("to", to).Msg("moving a group's replica: the receiver added as a learner")
	}
	// giveUp takes the learner out again, so the group can change again
	// (one learner at a time), with what is left.
	giveUp := func(why string) (GroupReplicas, error) {
		undo, cancel := context.WithTimeout(context.Background(), replication.ChangeTimeout)
		_, _, now := n.Replicas()
		_, err := n.RemoveReplica(undo, to, now)
		cancel()
		return m.replicasOf(g, n), fmt.Errorf("%w: %s did not catch up with group %d (%s); removed again: %v",
			replication.ErrChangeTimeout, to, g, why, err)
	}
	watch := catchUp{stall: moveStall, limit: moveCap}
	var look time.Time
	for {
		if v, _ := holds(toID); v {
			break
		}
		if now := time.Now(); now.Sub(look) >= catchUpLook {
			look = now
			if watch.stalled(now, m.learnerSeen(n, to)) {
				return giveUp(fmt.Sprintf("no progress for %v, or a learner for %v", moveStall, moveCap))
			}
		}
		select {
		case <-ctx.Done():
			return giveUp(ctx.Err().Error())
		case <-n.Done():
			return GroupReplicas{}, fmt.Errorf("%w: this member's replica of group %d stopped", replication.ErrNoLeader, g)
		case <-time.After(movePoll):
		}
	}
	if err := m.leaveLeadership(n, g, from, to); err != nil {
		return m.replicasOf(g, n), err
	}
	if info, _ := n.Leader(); !info.Serving && info.Name == from {
		// The giver came to lead the group meanwhile (an election, a
		// handover): removed from here, it would hand the leadership
		// over by raft's way alone, closing its sessions that wait for
		// a reply of the group. Asked again, the move goes to it and
		// goes on from here; the planner has a voter too many given up
		// (MoveExcess) by the group's leader.
		return m.replicasOf(g, n), fmt.Errorf("%w: the giver %s leads group %d now; the move goes on there", replication.ErrNotServing, from, g)
	}
	// The removal may stop this replica before its answer: by applying
	// it (ErrRemoved), or as the leader's report of the group without
	// this member comes first (followReplicas leaves the group).
	remove, cancel := context.WithTimeout(ctx, moveStall)
	defer cancel()
	if _, err := n.RemoveReplica(remove, from, planned); err != nil && !errors.Is(n.Err(), replication.ErrRemoved) && m.shards.node(g) == n {
		return m.replicasOf(g, n), err
	}
	m.log.Info().Int("group", int(g)).Str("from", from).Str("to", to).Msg("moved a group's replica")
	return m.replicasOf(g, n), nil
}

// leaveLeadership hands group g's leadership over, if this member leads
// it and is from, the giver of a move to to (to "": a voter given up),
// before its removal: to a voter heard from lately that is neither and
// may lead (Book.MayLead), as the balancer does (handOver), so the group is
// not left to an election and no session here closes waiting for a reply
// of the group. A removed leader hands over by itself too
// (replication.Core.handOver), but only to a voter holding its whole log
// at that instant, else the others wait out an election timeout (the
// fault test saw 1.4 s gaps so), and it closes the sessions. It returns
// the handover's error when one was tried and this member still leads:
// the removal waits for the move asked again. With no voter to take it,
// the removal goes on as raft hands over.
func (m *Member) leaveLeadership(n *replication.Node, g uint16, from, to string) error {
	if info, _ := n.Leader(); !info.Serving || from != m.node.Name() {
		return nil
	}
	voters, _, _ := n.Replicas()
	names := m.memberNames()
	book := m.node.Book()
	for _, id := range voters {
		name := names[id]
		if name == "" || name == from || name == to || !book.MayLead(id) || !m.heardLately(name) {
			continue
		}
		err := m.handOver(n, g, name)
		if err == nil {
			m.log.Info().Int("group", int(g)).Str("to", name).Msg("handed a group's leadership over before leaving it")
		} else if info, _ := n.Leader(); info.Serving {
			return fmt.Errorf("%w: the giver's leadership of group %d was not handed to %s: %v", replication.ErrNotServing, g, name, err)
		}
		return nil
	}
	return nil
}

// idOf is the Raft id of the member named name, 0 if none is.
func (m *Member) idOf(name string) uint64 {
	for _, mb := range m.node.Book().Members {
		if mb.Name == name {
			return mb.ID
		}
	}
	return 0
}

// replicasOf is group g's replicas as n, its replica here, has them, or
// as its leader reported them since.
func (m *Member) replicasOf(g uint16, n *replication.Node) GroupReplicas {
	names := m.memberNames()
	voters, learners, index := n.Replicas()
	if rep, ok := m.sessions.Reported()[g]; ok && rep.Index > index {
		voters, learners = rep.Voters, rep.Learners // a later change: n may have stopped before it
	}
	out := GroupReplicas{Group: int(g), Replicas: []string{}}
	for _, id := range voters {
		out.Replicas = append(out.Replicas, names[id])
	}
	for _, id := range learners {
		out.Learners = append(out.Learners, names[id])
	}
	return out
}

// forwardedMove names the members that forwarded a request of the
// membership or groups endpoints, in order ("a,b"). A member forwards it
// on while fewer than maxForwards did, never to one of them: a member
// that has just handed a group's leadership over passes on a request
// forwarded to it in the meantime, and two members with each other's
// stale view cannot pass it back and forth.
const forwardedMove = "X-Sprout-Forwarded-Move"

// maxForwards bounds the members a request is forwarded by.
const maxForwards = 2

// forwardedBy is the chain of forwardedMove with self added, and whether
// the request may go on to member to: not when maxForwards members have
// forwarded it, or when to is one of them or self.
func forwardedBy(chain, self, to string) (string, bool) {
	var by []string
	if chain != "" {
		by = strings.Split(chain, ",")
	}
	if len(by) >= maxForwards || to == self || slices.Contains(by, to) {
		return "", false
	}
	return strings.Join(append(by, self), ","), true
}

// registerGroups adds the groups' endpoint to mux, in a cluster of
// several groups, guarded as the membership endpoint is:
//
//	POST /cluster/groups/{id}/moves  {"from","to"}: move a replica (200)
//
// A member that does not lead the group forwards the request to the
// group's leader. Errors are the membership endpoint's
// (writeChangeError).
func (m *Member) registerGroups(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.Handle("POST /cluster/groups/{id}/moves", guard(http.HandlerFunc(m.serveReplicaMove)))
}

// serveReplicaMove is POST /cluster/groups/{id}/moves (and the admin API's
// /api/v1/groups/{id}/moves).
func (m *Member) serveReplicaMove(w http.ResponseWriter, r *http.Request) {
	g, err := strconv.ParseUint(r.PathValue("id"), 10, 16)
	if err != nil || int(g) >= m.shards.groups() || g == 0 {
		admin.WriteError(w, &admin.Error{Status: http.StatusNotFound,
			Message: fmt.Sprintf("no group %q: groups 1 to %d move their replicas", r.PathValue("id"), m.shards.groups()-1)})
		return
	}
	// The leader adds the receiver (Node.AddReplica): this member, if
	// it leads the group or is elected meanwhile (a group just formed),
	// else the one it forwards the move to.
	l, err := m.awaitGroupLeader(r.Context(), uint16(g))
	if err != nil {
		return // the client went away
	}
	if !l.Serving {
		m.forward(w, r, l, fmt.Sprintf("group %d", g))
		return
	}
	var req struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMemberRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: "want {\"from\": MEMBER, \"to\": MEMBER}: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), moveCap)
	defer cancel()
	// One move at a time on this member, planned or asked: a planned
	// one would take the receiver, promoted, for a replica too many.
	slotWait := time.After(moveStall)
	for !m.moving.take(uint16(g)) {
		select {
		case <-ctx.Done():
			return // the client went away
		case <-slotWait:
			writeChangeError(w, fmt.Errorf("%w: another move is under way here", replication.ErrChangeInProgress))
			return
		case <-time.After(movePoll):
		}
	}
	out, err := m.moveReplica(ctx, uint16(g), req.From, req.To)
	m.moving.free()
	if err != nil {
		writeChangeError(w, err)
		return
	}
	m.log.Info().Int("group", int(g)).Str("from", req.From).Str("to", req.To).Str("remote", r.RemoteAddr).Msg("group replica moved")
	admin.WriteValue(w, http.StatusOK, out)
}

// forwardMove sends a move of group g to the member that leads it, as its
// reports say, waiting for one up to an election timeout (a member just
// started has none yet): this member holds no replica of it.
func (m *Member) forwardMove(w http.ResponseWriter, r *http.Request, g uint16) {
	l, err := m.awaitGroupLeader(r.Context(), g)
	if err != nil {
		return // the client went away
	}
	m.forward(w, r, l, fmt.Sprintf("group %d", g))
}

// awaitGroupLeader is group g's leader, waiting up to an election timeout
// until this member serves the group or knows the leader's --http; past
// that, the leader as known (its HTTP maybe empty). It fails only when
// ctx ends.
func (m *Member) awaitGroupLeader(ctx context.Context, g uint16) (admin.Leader, error) {
	return awaitLeader(ctx, m.node.ElectionTimeout(), func() admin.Leader {
		l, _, _ := adminGroups{m}.Leader(g)
		return l
	})
}

// awaitLeader is what leader says, asked again every reportedLeaderPoll
// for up to within (an election timeout) until it names this member
// serving, or another member with its --http: a leadership moving (a
// balancing handover, an election) leaves no leader known for a moment.
// It fails only when ctx ends.
func awaitLeader(ctx context.Context, within time.Duration, leader func() admin.Leader) (admin.Leader, error) {
	l := leader()
	for wait := time.Now().Add(within); l.HTTP == "" && !l.Serving && time.Now().Before(wait); {
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(reportedLeaderPoll):
		}
		l = leader()
	}
	return l, nil
}

// forwardingTransport is the member's one transport for forward, made
// with its side port (router): one per request would keep each's idle
// connection, and its goroutines, for ever.
func (m *Member) forwardingTransport() *http.Transport {
	return forwardTransport(m.cfg.HTTP.TLS != nil, m.cfg.Cluster.TLSSource)
}

// sideScheme is the scheme of the members' side ports: https when they
// serve TLS.
func (m *Member) sideScheme() string {
	if m.cfg.HTTP.TLS != nil {
		return "https"
	}
	return "http"
}

// forward sends a request of the membership or groups endpoint, its
// credentials checked here, to l's --http: what leads there serves it,
// and a member that no longer does forwards it on (forwardedBy).
func (m *Member) forward(w http.ResponseWriter, r *http.Request, l admin.Leader, what string) {
	by, ok := forwardedBy(r.Header.Get(forwardedMove), m.node.Name(), l.Name)
	if !ok || l.HTTP == "" {
		admin.WriteError(w, &admin.Error{Status: http.StatusServiceUnavailable,
			Message: fmt.Sprintf("%s: this member does not lead it, and its leader's --http is not known here, or it came from there", what)})
		return
	}
	scheme := m.sideScheme()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: scheme, Host: l.HTTP})
			pr.Out.Host = l.HTTP
			admin.ForwardCredentials(pr.Out.Header, m.cfg.HTTP.AdminToken)
			pr.Out.Header.Set(forwardedMove, by)
		},
		Transport: m.forwarding,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			admin.WriteError(w, &admin.Error{Status: http.StatusServiceUnavailable,
				Message: fmt.Sprintf("forwarding to %s, the leader of %s: %v", l.Name, what, err)})
		},
	}
	proxy.ServeHTTP(w, r)
}

// The replicas move by themselves (docs/design/shards.md 1.4). Group
// 0's leader plans every group's moves (meta.PlanMove on its view, one
// move at a time over the cluster) and sends each to the leader of the
// group it concerns (a KindMove item), which makes it: a member added
// receives replicas, a draining member gives its own away. It plans the
// next only once the last is made, was not taken, or has had its time.
// Group 0's leader then removes a draining member that holds no replica
// of another group. A group led by a member of a release before, which
// takes no move (replication.Host.TakesMoves), is moved by that member
// alone, as that release plans: each member on its own view.
const (
	// moveQuiet is how long a move sent may show nothing on the
	// planner's view before it is taken for not taken (the receiver was
	// busy with another, or no longer led the group): the leaders'
	// reports come every 500 ms.
	moveQuiet = 3 * time.Second
	// moveDue is how long a move sent may take at most: the receiver
	// gives up on it after moveCap at most and takes its learner out
	// again. A move begun is held for as long (underWay): PlanMove plans
	// none while the group has the learner anyway, and holding it keeps
	// the planner off the group's voter too many between the promotion
	// and the giver's removal.
	moveDue = moveCap + moveQuiet
)

// movePlanner is what group 0's leader keeps between its looks (the
// balance loop's alone): the move it planned last, while under way, and
// when it first saw a group with more voters than R.
type movePlanner struct {
	meta.Move
	leader string // the group's leader that was to make it; "": none under way
	at     time.Time
	// excess is the group PlanMove last wanted a voter taken from
	// (MoveExcess), and since when: a move shows so between its
	// receiver's promotion and its giver's removal, a moment, and only a
	// move cut short stays so.
	excess      uint16
	excessSince time.Time
}

// underWay reports whether the move planned last may still be under way
// at now on cur, as group g's leader is leaderOf(g); once it is not, it
// is forgotten.
func (p *movePlanner) underWay(cur *meta.State, leaderOf func(uint16) string, now time.Time) bool {
	if p.leader == "" {
		return false
	}
	made, begun := p.Progress(cur)
	age := now.Sub(p.at)
	leader := leaderOf(p.Group)
	if !made && age < moveDue && (begun || age < moveQuiet) && (leader == p.leader || leader == "") {
		return true
	}
	p.leader = ""
	return false
}

// due reports whether mv, planned at now, is to be made now: a voter too
// many is taken only once the group has had it for moveQuiet.
func (p *movePlanner) due(mv meta.Move, now time.Time) bool {
	if mv.Why != meta.MoveExcess {
		p.excessSince = time.Time{}
		return true
	}
	if p.excessSince.IsZero() || p.excess != mv.Group {
		p.excess, p.excessSince = mv.Group, now
	}
	return now.Sub(p.excessSince) >= moveQuiet
}

// planReplicas plans the replicas' moves on cur if this member leads
// group 0, or, if group 0's leader is of a release before, makes the
// move planned on cur, if this member leads its group. live says whether
// this member is connected to a member; leaderOf names a group's leader
// as this member sees it.
func (m *Member) planReplicas(cur *meta.State, live func(string) bool, leaderOf func(uint16) string, now time.Time) {
	info, _ := m.node.Leader()
	switch {
	case info.Serving:
		m.planMoves(cur, live, leaderOf, now)
		return
	case info.ID == 0 || !live(info.Name) || !m.node.Host().PlansOwnMoves(info.ID):
		// It plans, or will once one is elected, or may: cut off from
		// it, this member's view is no better than its own. Only a
		// leader whose open connection speaks a release before's
		// protocol leaves the moves to the members: live is from a
		// look before, and a connection that dropped since tells no
		// release.
		m.planner = movePlanner{}
		return
	}
	if mv, ok := meta.PlanMove(cur, live); ok && leaderOf(mv.Group) == m.node.Name() {
		m.makeMove(mv, byItself, "")
	}
}

// planMoves, on group 0's leader, plans the next replica move once the
// last is not under way, and has the group's leader make it; with none
// due, it removes a member that has drained.
func (m *Member) planMoves(cur *meta.State, live func(string) bool, leaderOf func(uint16) string, now time.Time) {
	p := &m.planner
	if p.underWay(cur, leaderOf, now) {
		return
	}
	mv, ok := meta.PlanMove(cur, live)
	if !ok {
		p.excessSince = time.Time{} // no voter too many left
		m.removeDrained(cur)
		return
	}
	leader := leaderOf(mv.Group)
	leaderID := m.idOf(leader)
	switch {
	case !p.due(mv, now):
		return
	case leader == "":
		return // an election: plan again at the next look
	case leader == m.node.Name():
		if !m.makeMove(mv, byGroup0Leader, "") {
			return
		}
	case m.node.Host().TakesMoves(leaderID):
		if !m.sessions.SendMove(leaderID, mv.Group, mv.From, mv.To) {
			return
		}
		m.log.Info().Int("group", int(mv.Group)).Str("from", mv.From).Str("to", mv.To).Str("why", mv.Why).Str("leader", leader).
			Msg("a replica move planned, sent to the group's leader")
	default:
		// A member of a release before plans its groups' moves itself;
		// one cut off from this member waits to hear from it again.
		return
	}
	p.Move, p.leader, p.at = mv, leader, now
}

// takeMove is a move of group g that member from asks of this one
// (router.KindMove): made if from leads group 0 as this member sees it,
// and this member leads g and makes no other move.
func (m *Member) takeMove(from uint64, g uint16, giver, receiver string) {
	if info, _ := m.node.Leader(); info.ID != from {
		m.log.Debug().Int("group", int(g)).Uint64("from", from).Msg("a replica move from a member not leading group 0 ignored")
		return
	}
	m.makeMove(meta.Move{Group: g, From: giver, To: receiver}, byAsker, m.memberNames()[from])
}

// Who planned a move makeMove makes: Member.movesMade's index.
const (
	byGroup0Leader = iota // this member, leading group 0
	byAsker               // group 0's leader, which asked this member
	byItself              // this member alone, as a release before does
	numPlanners
)

// makeMove makes mv, if this member leads its group and makes no other
// move, on a goroutine of its own (a move takes seconds), and reports
// whether it began. planner is who planned it; by names group 0's
// leader when it asked.
func (m *Member) makeMove(mv meta.Move, planner int, by string) bool {
	n := m.shards.node(mv.Group)
	if n == nil {
		return false
	}
	if info, _ := n.Leader(); !info.Serving {
		return false
	}
	moveLog := m.log.With().Int("group", int(mv.Group)).Str("from", mv.From).Str("to", mv.To).Logger()
	if mv.Why != "" {
		moveLog = moveLog.With().Str("why", mv.Why).Logger()
	}
	if by != "" {
		moveLog = moveLog.With().Str("planned_by", by).Logger()
	}
	_, _, planned := n.Replicas() // what planStale looks at, or earlier
	if why := m.planStale(mv, n); why != "" {
		moveLog.Info().Str("reason", why).Msg("a planned replica move not made: the group's replicas changed since the view it was planned on")
		return false
	}
	if !m.moving.take(mv.Group) {
		return false
	}
	moveLog.Info().Msg("making a planned replica move")
	m.movesMade[planner].Add(1)
	go func() {
		defer m.moving.free()
		// A change alone has the minute a move's steps have; a move,
		// its receiver's catching up (moveReplica).
		change, cancel := context.WithTimeout(context.Background(), moveStall)
		defer cancel()
		var err error
		switch {
		case mv.To == "": // no member can take it, or a voter too many
			if err = m.leaveLeadership(n, mv.Group, mv.From, ""); err == nil {
				_, err = n.RemoveReplica(change, mv.From, planned)
			}
		case mv.From == "": // the group is short of voters: promoted once caught up
			_, err = n.AddReplica(change, mv.To)
		default:
			_, err = m.moveReplica(context.Background(), mv.Group, mv.From, mv.To)
		}
		if err != nil && !errors.Is(n.Err(), replication.ErrRemoved) {
			moveLog.Warn().Err(err).Msg("a planned replica move did not complete")
			return
		}
		moveLog.Info().Msg("moved a group's replica, as planned")
	}()
	return true
}

// planStale says why mv, planned on a view of its group, is not to be
// made on the replicas n, the group's leader here, holds: "" if it is
// (staleMove).
func (m *Member) planStale(mv meta.Move, n *replication.Node) string {
	now := m.replicasOf(mv.Group, n)
	book := m.node.Book()
	draining := func(name string) bool { return slices.Contains(book.Draining, m.idOf(name)) }
	return staleMove(mv, now.Replicas, now.Learners, m.shards.wantedReplicas(len(book.Members)), draining)
}

// staleMove says why mv is not to be made on a group whose leader holds
// voters and learners, of r voters wanted: "" if it is. The planner sees
// a group it holds no replica of through its leader's reports, which a
// change may have passed: a move to a member that is a voter already
// would remove the giver and leave the group a voter short. A receiver
// that is a voter of a group with a voter too many is a move cut short
// after the promotion, which goes on.
func staleMove(mv meta.Move, voters, learners []string, r int, draining func(string) bool) string {
	holds := func(name string) bool { return slices.Contains(voters, name) || slices.Contains(learners, name) }
	switch {
	case mv.From != "" && !holds(mv.From):
		return mv.From + " holds no replica of the group"
	case mv.From == "" && holds(mv.To):
		return mv.To + " holds a replica of the group already"
	case mv.From == "" && len(voters) >= r:
		return "the group is not short of voters"
	case mv.To == "" && len(voters) <= r && !draining(mv.From):
		// Neither a voter too many nor a draining member's replica
		// that no member can take.
		return "the group has no voter too many"
	case mv.From != "" && mv.To != "" && slices.Contains(voters, mv.To) && len(voters) <= r:
		return mv.To + " is a voter of the group already"
	}
	return ""
}

// dropRemovedReplicas, on each group but 0 this member leads, takes out
// a replica of a member the cluster removed (group 0's book lists its id
// as removed), one at a time. Group 0's leader removes a draining member
// once it holds no replica as the groups' reports show them
// (removeDrained), and a report a second old may not show the replica a
// move just gave it. Such a replica never answers again, yet counts in
// its group's quorum, and the planner, which sees a voter no member
// holds, neither removes it nor a live voter (meta.PlanMove): the group
// would run one failure from stopping for good. Taken out, the group is
// short of a voter, and group 0's leader plans it one (meta.MoveShort).
// A removed id never comes back (replication: newMemberID), so the
// replica is gone for good.
func (m *Member) dropRemovedReplicas() {
	removed := m.node.Book().Removed
	if len(removed) == 0 {
		return
	}
	m.eachLed(func(g uint16, n *replication.Node) bool {
		voters, learners, _ := n.Replicas()
		replicas := slices.Concat(voters, learners)
		i := slices.IndexFunc(replicas, func(id uint64) bool { return slices.Contains(removed, id) })
		return i < 0 || !m.takeOut(g, n, replicas[i], "the replica of a member the cluster removed")
	})
}

// eachLed calls fn with each group but 0 this member leads, and its
// replica here, until fn returns false.
func (m *Member) eachLed(fn func(g uint16, n *replication.Node) bool) {
	for g := 1; g < m.shards.groups(); g++ {
		n := m.shards.node(uint16(g))
		if n == nil {
			continue
		}
		if info, _ := n.Leader(); info.Serving && !fn(uint16(g), n) {
			return
		}
	}
}

// takeOut removes member id's replica of group g (n, led here), what for
// the log, on a goroutine of its own that holds the move slot; false if
// the slot is taken or the group names no such member.
func (m *Member) takeOut(g uint16, n *replication.Node, id uint64, what string) bool {
	_, _, planned := n.Replicas() // what the caller looked at, or earlier
	members := n.Book().Members   // the group's: it names its replicas
	j := slices.IndexFunc(members, func(mb replication.Member) bool { return mb.ID == id })
	if j < 0 || !m.moving.take(g) {
		return false
	}
	gone := members[j].Name
	go func() {
		defer m.moving.free()
		ctx, cancel := context.WithTimeout(context.Background(), replication.ChangeTimeout)
		defer cancel()
		if _, err := n.RemoveReplica(ctx, gone, planned); err != nil {
			m.log.Warn().Err(err).Int("group", int(g)).Str("member", gone).Msg("cannot take out " + what)
			return
		}
		m.log.Warn().Int("group", int(g)).Str("member", gone).Msg("took out " + what)
	}()
	return true
}

// staleLearner is how long a learner may show no progress, and
// staleLearnerCap how long it may stay one, before its group's leader
// takes it out (dropStaleLearners): a move's own wait (moveStall,
// moveCap), then its removal of a receiver that did not catch up.
const (
	staleLearner    = moveStall + replication.ChangeTimeout
	staleLearnerCap = moveCap + replication.ChangeTimeout
)

// groupMember names a member's replica of a group.
type groupMember struct {
	group  uint16
	member uint64
}

// dropStaleLearners, on each group but 0 this member leads, takes out a
// learner that has stalled as this member saw it (catchUp: no progress
// for staleLearner, or a learner for staleLearnerCap), one at a time. A
// move adds its receiver as a learner and takes it out again if it stops
// catching up, but a move whose maker was lost (its member died, or lost
// the group's leadership) leaves it; a learner that catches up is
// promoted by the group's leader by itself, so one that stalls that long
// is not catching up (its member down, or cut off), while one still
// catching up (a snapshot of many gigabytes) is left to finish. While a
// group has a learner the planner plans no replica move (meta.PlanMove),
// so one left for good would stop every move, drains' among them. Group
// 0's learners are members' own, kept.
func (m *Member) dropStaleLearners(now time.Time) {
	if m.learnersSeen == nil {
		m.learnersSeen = make(map[groupMember]*catchUp)
	}
	stall := time.Duration(m.learnerTimeout.Load())
	if stall == 0 {
		stall = staleLearner
	}
	still := make(map[groupMember]bool)
	var stale []groupMember
	m.eachLed(func(g uint16, n *replication.Node) bool {
		_, learners, _ := n.Replicas()
		if len(learners) == 0 {
			return true
		}
		names := m.memberNames()
		for _, id := range learners {
			k := groupMember{g, id}
			still[k] = true
			watch, ok := m.learnersSeen[k]
			if !ok {
				watch = &catchUp{stall: stall, limit: staleLearnerCap}
				m.learnersSeen[k] = watch
			}
			if watch.stalled(now, m.learnerSeen(n, names[id])) {
				stale = append(stale, k)
			}
		}
		return true
	})
	maps.DeleteFunc(m.learnersSeen, func(k groupMember, _ *catchUp) bool { return !still[k] })
	for _, k := range stale {
		if m.takeOut(k.group, m.shards.node(k.group), k.member, "a learner that stopped catching up, left by a replica move that was lost") {
			delete(m.learnersSeen, k) // seen afresh if the removal fails
			return
		}
	}
}

// removeDrained, on group 0's leader, removes a member that has drained
// (drained), one at a time. Its removal is checked as an operator's is
// (replication.ErrQuorumAtRisk): with another member down, a drained
// member that runs stays until that one is back or removed, and the
// refusal, asked again at every look, is logged once.
func (m *Member) removeDrained(cur *meta.State) {
	name, ok := drained(cur)
	if !ok || !m.moving.take(0) {
		return
	}
	go func() {
		defer m.moving.free()
		ctx, cancel := context.WithTimeout(context.Background(), replication.ChangeTimeout)
		defer cancel()
		_, err := m.node.RemoveMember(ctx, name)
		switch {
		case errors.Is(err, replication.ErrQuorumAtRisk):
			if held := m.drainHeld.Swap(&name); held == nil || *held != name {
				m.log.Warn().Err(err).Str("member", name).Msg("a member that has drained stays: its removal would leave no majority of voters up")
			}
			return
		case err != nil:
			m.drainHeld.Store(nil)
			m.log.Warn().Err(err).Str("member", name).Msg("cannot remove a member that has drained")
			return
		}
		m.drainHeld.Store(nil)
		m.log.Info().Str("member", name).Msg("removed a member that has drained")
	}()
}

// drained is a member of cur that is draining and holds no replica of a
// group but 0, the first by name; none while a group's replicas are not
// known (no replica here, and its leader's report lapsed): the member may
// hold one still, even lead it.
func drained(cur *meta.State) (string, bool) {
	groups := cur.Groups[1:]
	if slices.ContainsFunc(groups, func(g meta.Group) bool { return len(g.Replicas) == 0 }) {
		return "", false
	}
	for _, mb := range cur.Members {
		if mb.Draining && !slices.ContainsFunc(groups, func(g meta.Group) bool { return g.Holds(mb.Name) }) {
			return mb.Name, true
		}
	}
	return "", false
}

// group0Leader is group 0's leader, one on its way (a handover to
// balance the leaders) waited for up to an election timeout; an error
// once r's client went away.
func (m *Member) group0Leader(r *http.Request) (admin.Leader, error) {
	return awaitLeader(r.Context(), m.node.ElectionTimeout(), func() admin.Leader {
		l, _ := adminCluster{m.node}.Leader()
		return l
	})
}

// forwardedToGroup0 forwards r to group 0's leader when this member does
// not serve group 0, whose log takes the marks on members (cordon,
// drain), and reports whether it did (or the client went away). A
// leadership on its way (a handover to balance the leaders) is waited
// for, up to an election timeout.
func (m *Member) forwardedToGroup0(w http.ResponseWriter, r *http.Request) bool {
	l, err := m.group0Leader(r)
	switch {
	case err != nil:
		return true // the client went away
	case l.Serving:
		return false
	}
	m.forwardToGroup0(w, r, l)
	return true
}

// forwardToGroup0Within bounds a request forwarded to group 0's leader,
// which makes a mark or a removal at once: waiting for every group's
// replicas to be known there, then for the change to apply. A leader
// stopped or cut off after it was named, whose port still takes the
// connection, would otherwise hold the request for as long as its client
// waits, though a new leader has been elected meanwhile.
const forwardToGroup0Within = replicasKnownWait + replication.ChangeTimeout + 5*time.Second

// forwardToGroup0 forwards r to l, group 0's leader, bounded by
// forwardToGroup0Within (503 past it).
func (m *Member) forwardToGroup0(w http.ResponseWriter, r *http.Request, l admin.Leader) {
	ctx, cancel := context.WithTimeout(r.Context(), forwardToGroup0Within)
	defer cancel()
	m.forward(w, r.WithContext(ctx), l, "group 0")
}

// removalForwarded forwards a member's removal to group 0's leader when
// this member does not lead it (registerMembers), and reports whether it
// did (or the client went away). Unlike a mark, a removal can be proposed
// from here, through Raft: so it is, when the leader's side port is not
// known or the request came from there, rather than refused.
func (m *Member) removalForwarded(w http.ResponseWriter, r *http.Request) bool {
	l, err := m.group0Leader(r)
	switch {
	case err != nil:
		return true // the client went away
	case l.Serving || l.HTTP == "":
		return false
	}
	if _, ok := forwardedBy(r.Header.Get(forwardedMove), m.node.Name(), l.Name); !ok {
		return false
	}
	m.forwardToGroup0(w, r, l)
	return true
}

// markedInGroup0 sets a member's mark (mark: SetCordoned or SetDraining)
// on group 0's serving leader, this member or the one the request is
// forwarded to, and reports whether it did; else the request has been
// answered. A leadership that moves under the mark may drop it
// (replication.ErrNotServing): the request goes on to the next leader.
func (m *Member) markedInGroup0(w http.ResponseWriter, r *http.Request, mark func(context.Context) error) bool {
	if m.forwardedToGroup0(w, r) {
		return false
	}
	err := mark(r.Context())
	if errors.Is(err, replication.ErrNotServing) && m.forwardedToGroup0(w, r) {
		return false
	}
	if err != nil {
		writeChangeError(w, err)
		return false
	}
	return true
}

// cordon marks the member named cordoned (on) or no longer, group 0's
// control record on its serving leader (forwarded there otherwise), and
// answers once applied here: the balancers hand over what it leads and
// give it none (meta.PlanLeaders), within a few of their rounds.
func (m *Member) cordon(w http.ResponseWriter, r *http.Request, name string, on bool) {
	if !m.markedInGroup0(w, r, func(ctx context.Context) error { return m.node.SetCordoned(ctx, name, on) }) {
		return
	}
	m.log.Info().Str("member", name).Bool("cordoned", on).Str("remote", r.RemoteAddr).Msg("member cordoned, or no longer: it leads no group while cordoned")
	admin.WriteValue(w, http.StatusOK, map[string]any{"name": name, "cordoned": on})
}

// drain marks the member named draining (group 0's control record, on
// its serving leader: forwarded there otherwise) and answers 202: its
// replicas move away, then it is removed (planReplicas).
func (m *Member) drain(w http.ResponseWriter, r *http.Request, name string, held []uint16) {
	if !m.markedInGroup0(w, r, func(ctx context.Context) error { return m.node.SetDraining(ctx, name, true) }) {
		return
	}
	m.log.Info().Str("member", name).Uints16("groups", held).Str("remote", r.RemoteAddr).Msg("member draining: its replicas move away, then it is removed")
	admin.WriteValue(w, http.StatusAccepted, map[string]any{"name": name, "draining": true, "groups": held})
}
