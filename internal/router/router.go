package router

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/atomicmax"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/store"
)

// retryEvery is how often calls a member could not send, or that a
// member not serving yet refused, go again.
const retryEvery = 100 * time.Millisecond

// Router is a cluster member's router (docs/design/shards.md 5): its
// sessions live where their clients connect. With one group (G = 1), a
// session opened while this member serves it runs on the group's store,
// as a single node's does; any other session reaches the leader of the
// group that owns each command (RouterConfig.Placement) over the commands
// stream (Link), and stays open when a leader changes: its calls go again
// to the next one. The Server answers the sessions of other members, and
// this member's own remote sessions in the groups it leads (through an
// in-process loop, so a session never changes how it reaches a group).
type Router struct {
	cfg RouterConfig
	// epoch is the origin of the times a remote session notes a put's
	// command line at (Session.NextID); immutable.
	epoch  time.Time
	link   *Link
	server *Server
	self   *selfLoop
	stop   chan struct{}
	done   chan struct{}

	// holdingJobs: a graceful shutdown began (HoldJobs); no reserve of
	// a session here is handed a job.
	holdingJobs atomic.Bool

	// greeted, by group: the group's leader known first has been told
	// that this process's sessions are all the member has (a close of
	// session 0, before any call of theirs): it drops the owner clients
	// the member's last process left there. Leaders after it have none: a
	// lost leadership closes them all (Detach). greetMu makes one
	// greeting at a time.
	greeted [meta.MaxGroups]atomic.Bool
	greetMu sync.Mutex

	// holdLocal, by group: until when (unix nanoseconds) commands for it
	// go the other way, not run here (HoldLocal); 0: no hold.
	holdLocal [meta.MaxGroups]atomic.Int64
	// runningLocal, by group: the commands running on its store here now
	// (Session.runHere), each counted before its last look at the hold,
	// so that once HoldLocal is set and this is 0 no command runs here
	// (LocalDone).
	runningLocal [meta.MaxGroups]atomic.Int32

	remote  atomic.Int64  // the remote sessions open (Stats)
	local   atomic.Uint64 // the commands run on this member's stores (Session.runHere)
	waiting atomic.Int64  // remote sessions with a reserve pending (stats' current-waiting, G > 1)

	// lead is, by group, the leadership the calls go to (nil: none
	// known): leaderChanged's, which resyncs the group when it changes.
	lead [meta.MaxGroups]atomic.Pointer[leadership]
	// handled is, by group, the leadership whose resync has marked the
	// group's pending calls to go again (LinkConfig.Marked): the Link is
	// given no other (linkLeader).
	handled [meta.MaxGroups]atomic.Pointer[leadership]

	mu       sync.Mutex
	sessions uint64 // the last session id given; 0 names the member's refs
	// tag is this process's: its sessions' ids begin with it (sessionTag),
	// and its greetings name it.
	tag uint32
	// open are the sessions open now, for Holding.
	open    map[*Session]struct{}
	refs    map[string]*refCount
	refsSeq uint64 // the last refs item sent, to any group
	// refWaits are what waits for a refs item to be acknowledged, by its
	// group and number: each ack also acknowledges every item sent to
	// the group before it.
	refWaits map[refItem]func()
	// refsOut are, by group, the last refs item sent to it and the last
	// it acknowledged: one is on its way while the first is greater.
	refsOut map[uint16][2]uint64
	// reported are the leaders other members said they are of groups
	// (KindLeaders): how a member learns the leaders of the groups it
	// holds no replica of (docs/design/shards.md 1.4). reportMu guards
	// them, not mu: the Link asks for leaders under mu (sendRefsLocked).
	reportMu sync.Mutex
	reported map[uint16]reportedLeader
	reportAt time.Time // when this member last reported its own
}

// reportedLeader is a member's report that it leads a group.
type reportedLeader struct {
	member uint64
	term   uint64
	at     time.Time // when the report came: one not renewed goes stale
	// index, voters and learners are the group's replicas the report
	// named, as of the membership change of that index.
	index            uint64
	voters, learners []uint64
	tubes            int
	jobs             int64
	behind           []uint64
}

// Report is what a group's leader last reported of the group
// (KindLeaders, KindLeadersBehind), while fresh.
type Report struct {
	Leader uint64 // the member leading it
	Term   uint64 // the Raft term it was elected in
	// Voters and Learners are its replicas' members, by Raft id, as of
	// the membership change of index Index.
	Voters, Learners []uint64
	Index            uint64
	// Tubes and Jobs are the leader's store's: its tubes, and its jobs
	// ready, reserved, delayed and buried.
	Tubes int
	Jobs  int64
	// Behind are the voters the leader would not hand the group to
	// (LeaderReport.Behind): none from a member of a release before.
	Behind []uint64
}

// fresh reports whether the report still holds at now.
func (rep reportedLeader) fresh(now time.Time) bool { return now.Sub(rep.at) <= reportStale }

const (
	// reportEvery is how often a member of a cluster of several groups
	// tells the others which groups it leads, besides at each change.
	reportEvery = 500 * time.Millisecond
	// reportStale is how long a report holds without being renewed: a
	// leader lost stops reporting, and its groups' calls then wait for
	// the next leader's report as for an election.
	reportStale = 3 * reportEvery
)

// refItem names a refs item: its group and number.
type refItem struct {
	group uint16
	n     uint64
}

// RouterConfig is what a Router needs of its member.
type RouterConfig struct {
	// Self is this member's Raft id.
	Self uint64
	// Placement is what the sessions route by: which group owns each
	// tube and each id prefix, and how many groups there are (the meta
	// group's state, as this member applied it). Nil, or a nil state, is
	// one group, group 0, owning every tube and id (G = 1). It is called
	// for every command: it must be cheap.
	Placement func() *meta.State
	// Serving is group g's store while this member serves it, else nil:
	// nil from before its store is rebuilt (Detach) until it serves
	// again. With one group, sessions opened while it is set run on the
	// store.
	Serving func(g uint16) *store.Store
	// Leader is group g's leader, if one is known and it takes requests
	// on the commands stream (a member of the release before, which
	// reads none, is no leader to the router: its requests wait).
	Leader func(g uint16) (member uint64, ok bool)
	// Send queues a payload for another member's commands stream without
	// blocking (replication.Host.SendItems).
	Send func(to uint64, payload []byte) bool
	// MaxJobSize bounds a put's body (the server's -z).
	MaxJobSize int
	// Leased is ServerConfig.Leased.
	Leased func(g uint16) bool
	// Replica is this member's store of group g, served or followed, nil
	// if it holds none: the sizes of their dedup tables are a figure of
	// Stats. Nil leaves it 0.
	Replica func(g uint16) *store.Store
	// LeaderWait bounds how long a request waits while the group has no
	// leader (docs/design/shards.md 5.7): the election timeout. 0 means
	// 2 s.
	LeaderWait time.Duration
	// Removed lists the members removed from the cluster: while this
	// member serves, what their sessions left here goes (Server.Forget),
	// looked at every forgetEvery. Nil looks at nothing.
	Removed func() []uint64
	// Peers are the other members, which a member of a cluster of several
	// groups tells the groups it leads, with their terms: members that
	// hold no replica of a group learn its leader so. Nil with one group.
	Peers func() []uint64
	// Term is the Raft term of group g's leader as this member's replica
	// knows it (0: it holds none, the leader's reports tell it): of the
	// groups it leads in their reports, and of each group's leadership
	// (a member elected again is another). Nil: none known.
	Term func(g uint16) uint64
	// Replicas are the replicas of a group this member leads, as of the
	// membership change of index (replication.Node.Replicas): the
	// report carries them. Nil reports none.
	Replicas func(g uint16) (voters, learners []uint64, index uint64)
	// Behind are the voters of a group this member leads that it would
	// not hand the leadership to: the report to members that read it
	// (ReadsBehind) carries them. Nil reports none.
	Behind func(g uint16) []uint64
	// ReadsBehind reports whether member reads KindLeadersBehind (it
	// speaks protocol 8: replication.Host.ReadsBehind); one that does not
	// is sent KindLeaders, which it reads. Nil: none does.
	ReadsBehind func(member uint64) bool
	// Frozen is ServerConfig.Frozen.
	Frozen func(g uint16) (tubes func(tube []byte) bool, moving bool)
	// MovedTo is ServerConfig.MovedTo.
	MovedTo func(g uint16) []uint16
	// Staged is ServerConfig.Staged.
	Staged func(g uint16) func(tube []byte) bool
	// Uncounted is ServerConfig.Uncounted.
	Uncounted func(g uint16) func(tube []byte) bool
	// MovedFrom are the groups tubes moved to from group g, and on from
	// those (internal/replication's TubeBook): a job keeps its id, of
	// g's prefix, when its tube moves, and a command by id that g does not
	// find asks them in turn. Nil, or none, asks g alone.
	MovedFrom func(g uint16) []uint16
	// Foreign is told of a report of a group this member does not have:
	// it runs fewer groups than the cluster (started without the
	// cluster's --cluster-groups). Nil ignores them.
	Foreign func(from uint64, g uint16)
	// Moves is told of a replica move of group g that member from, as
	// group 0's leader, asks this one to make (KindMove). It must not
	// block: it runs on the stream's reader. Nil ignores them.
	Moves func(from uint64, g uint16, giver, receiver string)
	// AnswersHeld is LinkConfig.AnswersHeld.
	AnswersHeld func(member uint64) bool
	// SyncsSessions reports whether member reads KindSessions (it speaks
	// protocol 7: replication.Host.SyncsSessions); one that does not
	// would refuse the payload, and with it the stream. Nil: none does.
	SyncsSessions func(member uint64) bool
}

// forgetEvery is how often a serving member looks for what removed
// members' sessions left (RouterConfig.Removed).
const forgetEvery = time.Second

// refCount is how many of the member's sessions use and watch a tube
// that lives elsewhere.
type refCount struct{ using, watching uint32 }

// NewRouter starts a router: its loop to its own Server, and its retries.
func NewRouter(cfg RouterConfig) *Router {
	// Session ids begin with a tag drawn for the process: a leader keeps
	// a session's owner client and the last sequence it took, and must
	// not take a session of this process for one of the member's last.
	tag := rand.Uint32N(maxSessionTag) + 1
	r := &Router{cfg: cfg, open: make(map[*Session]struct{}), refs: make(map[string]*refCount), refWaits: make(map[refItem]func()), refsOut: make(map[uint16][2]uint64),
		reported: make(map[uint16]reportedLeader),
		stop:     make(chan struct{}), done: make(chan struct{}),
		tag: tag, sessions: uint64(tag) << sessionCounterBits, epoch: time.Now()}
	r.self = newSelfLoop(func(payload []byte) { _ = r.Handle(cfg.Self, payload) })
	r.server = NewServer(ServerConfig{Group: r.group, Send: r.send, MaxJobSize: cfg.MaxJobSize, Leased: cfg.Leased, Frozen: cfg.Frozen,
		MovedTo: cfg.MovedTo, Staged: cfg.Staged, Uncounted: cfg.Uncounted})
	r.link = NewLink(LinkConfig{Leader: r.linkLeader, Send: r.send, AnswersHeld: cfg.AnswersHeld, SyncRefs: r.syncRefs,
		Marked: func(g uint16) { r.handled[g].Store(r.lead[g].Load()) }})
	go r.retry()
	return r
}

// Handle takes a payload of the commands stream from member from: its
// requests for the Server, its answers for the Link, decoded once.
func (r *Router) Handle(from uint64, payload []byte) error {
	defer r.server.Flush()
	return Each(payload, r.cfg.MaxJobSize, func(it *Item) {
		switch it.Kind {
		case KindReply, KindEvent:
			r.link.handle(from, it)
		case KindLeaders, KindLeadersBehind:
			r.noteLeaders(from, it.Leaders, it.Kind == KindLeadersBehind)
		case KindMove:
			if r.cfg.Moves != nil {
				r.cfg.Moves(from, it.Group, string(it.Move.From), string(it.Move.To))
			}
		default:
			r.server.handle(from, it)
		}
	})
}

// NewQueue is engine.Config.Queues: a new connection's session.
func (r *Router) NewQueue(answers engine.Answers) engine.Queue {
	r.mu.Lock()
	r.sessions++
	s := &Session{r: r, id: r.sessions, answers: answers}
	s.byTube = s.rerouteByTube
	r.open[s] = struct{}{}
	r.mu.Unlock()
	if r.groups() == 1 {
		if st := r.cfg.Serving(0); st != nil {
			s.client = st.NewClient(s)
			s.local = engine.ClientQueue(s.client)
			return s
		}
	}
	s.used, s.watched = store.DefaultTube, []string{store.DefaultTube}
	r.remote.Add(1)
	r.changeRefs(store.DefaultTube, 1, 1, nil)
	return s
}

// HoldJobs stops handing this member's sessions jobs, for a graceful
// shutdown, as store.Store.HoldJobs does for one server's: a reserve waits
// its timeout as if every watched tube were empty (DEADLINE_SOON still
// due for a job held), and reserve-job finds nothing, whichever member
// leads the groups; everything else goes on, so that workers finish the
// jobs they hold (Holding). A reserve already waiting stays waiting: one
// across groups stops waiting in them (crossReserve.hold), and a job a
// group hands one waiting in it alone is declined, back as if never
// reserved. It cannot be undone.
func (r *Router) HoldJobs() {
	r.holdingJobs.Store(true)
	r.mu.Lock()
	crosses := make([]*crossReserve, 0, len(r.open))
	for s := range r.open {
		if cr := s.cross.Load(); cr != nil {
			crosses = append(crosses, cr)
		}
	}
	r.mu.Unlock()
	for _, cr := range crosses {
		cr.hold()
	}
}

// Holding is how many jobs this member's sessions hold reserved, in
// every group: what a graceful shutdown waits to see end (engine.Config.Idle).
// A member's store counts other members' sessions' jobs too, and not its
// own sessions' jobs in the groups other members lead; the jobs the
// other members' sessions hold here go with the leaderships it hands
// over as it stops.
func (r *Router) Holding() int {
	r.mu.Lock()
	open := make([]*Session, 0, len(r.open))
	for s := range r.open {
		open = append(open, s)
	}
	r.mu.Unlock()
	n := 0
	for _, s := range open {
		n += s.holding()
	}
	return n
}

// Stats are a router's figures, for /metrics.
type Stats struct {
	// RemoteSessions are this member's sessions that reach the leader
	// over the commands stream, open now.
	RemoteSessions int64
	// Requests counts the requests they sent; Resent, the requests,
	// waits and refs sent again (a new leader, a stream opened again, a
	// refusal, a full queue); Expired, those given up for want of a
	// leader (docs/design/shards.md 5.7).
	Requests, Resent, Expired uint64
	// Local counts the commands they ran on this member's store of a
	// group it leads, at once (the local fast path), instead of sending
	// them.
	Local uint64
	// Owners are the owner clients this member holds, while it leads, for
	// remote sessions.
	Owners int
	// Pending are the calls (requests, waits, references) its sessions
	// sent over the commands stream and have no answer for yet.
	Pending int
	// DedupEntries are the outcomes of keyed requests its replica keeps
	// (5.6): every replica keeps every one for store.DedupTTL.
	DedupEntries int
}

// HoldLocal has this member's sessions send their commands for group g
// to its leader until then, rather than run them on its store here
// (Session.runHere): a member about to hand g's leadership over stops
// making replies that only its own leadership could acknowledge, so that
// no session has to close for one when it goes (ClosesWith).
func (r *Router) HoldLocal(g uint16, until time.Time) { r.holdLocal[g].Store(until.UnixNano()) }

// LocalDone waits, until deadline at most, until no command for group g
// runs on its store here: called after HoldLocal, it returns once every
// command that passed the hold before it was set has been run, and made
// the appends it will make, so that the group's journal's Appended
// covers them. It reports whether none runs.
func (r *Router) LocalDone(g uint16, deadline time.Time) bool {
	for r.runningLocal[g].Load() != 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(localPoll)
	}
	return true
}

// localPoll is how often LocalDone looks: a command runs on a store in
// microseconds, unless its event loop's thread is descheduled.
const localPoll = 200 * time.Microsecond

// heldLocal reports whether HoldLocal holds group g now.
func (r *Router) heldLocal(g uint16) bool {
	until := r.holdLocal[g].Load()
	return until != 0 && time.Now().UnixNano() < until
}

// Waiting is how many of this member's sessions wait in a reserve: stats'
// current-waiting with several groups (5.5).
func (r *Router) Waiting() int64 { return r.waiting.Load() }

// Stats reads the router's figures.
func (r *Router) Stats() Stats {
	st := Stats{RemoteSessions: r.remote.Load(), Requests: r.link.requests.Load(), Resent: r.link.resent.Load(),
		Expired: r.link.expired.Load(), Local: r.local.Load(), Owners: r.server.Owners(), Pending: r.link.Pending()}
	if r.cfg.Replica != nil {
		for g := range r.groups() {
			if rs := r.cfg.Replica(uint16(g)); rs != nil {
				st.DedupEntries += rs.DedupEntries()
			}
		}
	}
	return st
}

// DescribeOwners is Server.DescribeOwners.
func (r *Router) DescribeOwners() []string { return r.server.DescribeOwners() }

// DescribePending is Link.DescribePending.
func (r *Router) DescribePending() []string { return r.link.DescribePending(time.Now()) }

// placement is the placement the sessions route by, nil for one group.
func (r *Router) placement() *meta.State {
	if r.cfg.Placement == nil {
		return nil
	}
	return r.cfg.Placement()
}

// groups is how many groups there are.
func (r *Router) groups() int {
	if p := r.placement(); p != nil {
		return len(p.Groups)
	}
	return 1
}

// ownerOf is the group that owns tube.
func (r *Router) ownerOf(tube string) uint16 {
	if p := r.placement(); p != nil {
		return p.Owner(tube)
	}
	return 0
}

// movedFrom is RouterConfig.MovedFrom.
func (r *Router) movedFrom(g uint16) []uint16 {
	if r.cfg.MovedFrom == nil {
		return nil
	}
	return r.cfg.MovedFrom(g)
}

// groupOfID is the group whose ids carry id's prefix, false for one no
// group took (with one group, every id is group 0's to answer).
func (r *Router) groupOfID(id uint64) (uint16, bool) {
	if p := r.placement(); p != nil {
		return p.GroupOfID(id)
	}
	return 0, true
}

// Refreeze ends the reserves and waits of group g's sessions here that
// watch a tube now moving out of it (Server.Refreeze).
func (r *Router) Refreeze(g uint16) { r.server.Refreeze(g) }

// Unfrozen is Server.Unfrozen.
func (r *Router) Unfrozen(g uint16, tube []byte, change func()) bool {
	return r.server.Unfrozen(g, tube, change)
}

// Holders is Server.Holders.
func (r *Router) Holders(g uint16, held []store.Held) []Holder { return r.server.Holders(g, held) }

// HolderClients is Server.HolderClients.
func (r *Router) HolderClients(g uint16, holders []Holder) map[uint64]*store.Client {
	return r.server.HolderClients(g, holders)
}

// Gate is Server.Gate.
func (r *Router) Gate(g uint16) { r.server.Gate(g) }

// Ungate is Server.Ungate.
func (r *Router) Ungate(g uint16) { r.server.Ungate(g) }

// Held is Server.Held.
func (r *Router) Held(g uint16) []Holder { return r.server.Held(g) }

// Adopt is Server.Adopt.
func (r *Router) Adopt(g uint16, st *store.Store, held []Holder) int {
	return r.server.Adopt(g, st, held)
}

// Replaced tells the router that tubes moved between groups: each group's
// leader gets the member's references to the tubes it owns now, and none
// to those it no longer owns (a sync per group); and the groups tubes
// moved to get the closes of the sessions that closed lately where the
// tubes were (Link.CloseMoved).
func (r *Router) Replaced() {
	for g := range r.groups() {
		r.syncRefs(uint16(g))
		if to := r.movedFrom(uint16(g)); len(to) > 0 {
			r.link.CloseMoved(uint16(g), to)
		}
	}
}

// LeaderChanged is called when a group's leader, or whether this member
// serves it, may have changed: each group whose leader the calls go to
// did gets the member's references anew, and its pending calls again.
func (r *Router) LeaderChanged() {
	r.checkLeaders()
	r.report(time.Now()) // a leadership of its own gained or lost, at once
}

// checkLeaders looks at every group's leader (leaderChanged).
func (r *Router) checkLeaders() {
	for g := range r.groups() {
		r.leaderChanged(uint16(g))
	}
}

func (r *Router) leaderChanged(g uint16) {
	r.greet(g)
	lead := r.leadership(g)
	last := r.lead[g].Swap(&lead)
	if last == nil && lead != (leadership{}) || last != nil && *last != lead {
		r.resync(g)
	}
}

// resync sends group g's leader the member's sessions open now, its
// references to its tubes anew and every call pending, in that order:
// Link.LeaderChanged drops the refs items the sync replaces, has the sync
// made (LinkConfig.SyncRefs: syncRefs), and only then sends the calls
// again, so that one resent for a tube only this member's sessions keep
// (watched, empty) finds it.
func (r *Router) resync(g uint16) {
	r.syncSessions(g)
	r.link.LeaderChanged(g)
	r.askHeld(g)
}

// syncSessions sends group g's leader, if another member that reads it,
// the sessions open on this member (KindSessions): it closes the owner
// clients of those that ended meanwhile, whose closes the Link recalls
// only for closeRecall (docs/design/shards.md, question 12). Sent before
// the calls resent: a session listed keeps its owner, and one opened
// after the list has an id above its Upto.
func (r *Router) syncSessions(g uint16) {
	lead, ok := r.leader(g)
	if !ok || lead == r.cfg.Self || r.cfg.SyncsSessions == nil || !r.cfg.SyncsSessions(lead) {
		return
	}
	r.mu.Lock()
	ss := Sessions{Upto: r.sessions, IDs: make([]uint64, 0, len(r.open))}
	for s := range r.open {
		ss.IDs = append(ss.IDs, s.id)
	}
	r.mu.Unlock()
	slices.Sort(ss.IDs)
	if payload, err := AppendItem(nil, &Item{Kind: KindSessions, Group: g, Sessions: ss}); err == nil {
		r.send(lead, payload)
	}
}

// askHeld has each session ask group g's leader whether it still holds
// the jobs of g it counts as held (Session.askHeld): after a crash the
// new leader has them ready again, and the session's estimate would
// answer DEADLINE_SOON for them until their TTR (docs/design/shards.md
// 6.4).
func (r *Router) askHeld(g uint16) {
	if _, ok := r.leader(g); !ok {
		return // asked once one is known: the next resync
	}
	r.mu.Lock()
	open := make([]*Session, 0, len(r.open))
	for s := range r.open {
		open = append(open, s)
	}
	r.mu.Unlock()
	for _, s := range open {
		s.askHeld(g)
	}
}

// StreamUp is called when a commands stream to or from member to opened:
// in each group it leads, what was sent on the broken one, the calls
// and references or their answers, may be lost, so the references and
// the pending calls go again (a change made twice is answered once by
// its key: 5.6; one answered is answered again). Room: the calls not
// taken go.
func (r *Router) StreamUp(to uint64) {
	for g := range r.groups() {
		if lead, ok := r.leader(uint16(g)); ok && lead == to {
			r.resync(uint16(g))
		}
	}
}

// Room is called when a full queue to a member drained: the calls and
// the replies it refused go.
func (r *Router) Room() {
	for g := range r.groups() {
		r.link.Retry(uint16(g))
	}
	r.server.Flush()
}

// Detach is called before this member's store of group g is rebuilt (it
// lost the leadership it served, and Serving says nil already): the
// Server closes its owner clients there. The caller then closes the
// sessions that ClosesWith g picks.
func (r *Router) Detach(g uint16) { r.server.Detach(g) }

// Close stops the router: its owner clients close, its loop and retries
// end. Sessions still open answer nothing more.
func (r *Router) Close() {
	close(r.stop)
	<-r.done
	r.server.Close()
	r.self.close()
}

// group is the Server's store of group g while this member serves it.
func (r *Router) group(g uint16) *store.Store { return r.cfg.Serving(g) }

// leader is the Link's: group g's leader, this member only while it
// serves (a leader still applying would refuse).
func (r *Router) leader(g uint16) (uint64, bool) {
	if !r.greeted[g].Load() {
		return 0, false // calls wait for the greeting
	}
	return r.serving(g)
}

// serving is group g's leader if it serves: this member only while it
// serves (a leader still applying would refuse). A group this member
// holds no replica of has the leader the last fresh report named.
func (r *Router) serving(g uint16) (uint64, bool) {
	lead, ok := r.cfg.Leader(g)
	if !ok {
		var rep reportedLeader
		rep, ok = r.freshReport(g)
		lead = rep.member
	}
	if ok && lead == r.cfg.Self && r.group(g) == nil {
		return 0, false
	}
	return lead, ok
}

// linkLeader is the leader the Link sends group g's calls to: leader's,
// once a resync has marked the calls pending to go again to it
// (handled). Between a new leader becoming known and that, a call made
// waits, as for a leader not known, and goes after the member's
// references and the calls made before it (docs/design/shards.md 5.4),
// where it would have overtaken them. Two changes resynced at once may
// mark the later leadership handled before its own resync marks.
func (r *Router) linkLeader(g uint16) (uint64, bool) {
	lead := r.leadership(g)
	if h := r.handled[g].Load(); lead == (leadership{}) || h == nil || *h != lead {
		return 0, false
	}
	return lead.member, true
}

// leadership is a group's leader as the calls go to it: a member and
// the term it was elected in. The same member elected again is another
// leadership: it lost the leadership between, its store was rebuilt from
// the log, and the requests it had taken and not answered, their replies
// held for the log, went with it unanswered; so they go again, as to any
// new leader.
type leadership struct{ member, term uint64 }

// leadership is group g's leader (leader) and its term: Term's, or the
// fresh report's of that leader, or 0 if neither knows it.
func (r *Router) leadership(g uint16) leadership {
	lead, ok := r.leader(g)
	if !ok {
		return leadership{}
	}
	l := leadership{member: lead}
	if r.cfg.Term != nil {
		l.term = r.cfg.Term(g)
	}
	if l.term == 0 {
		if rep, ok := r.freshReport(g); ok && rep.member == lead {
			l.term = rep.term
		}
	}
	return l
}

// freshReport is group g's leader's report, if another member reported
// it and the report is fresh.
func (r *Router) freshReport(g uint16) (reportedLeader, bool) {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	rep, ok := r.reported[g]
	if !ok || !rep.fresh(time.Now()) {
		return reportedLeader{}, false
	}
	return rep, true
}

// Reported is what the groups' leaders among the other members
// reported, fresh reports only, by group.
func (r *Router) Reported() map[uint16]Report {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	now := time.Now()
	out := make(map[uint16]Report, len(r.reported))
	for g, rep := range r.reported {
		if rep.fresh(now) {
			out[g] = Report{Leader: rep.member, Term: rep.term, Voters: rep.voters, Learners: rep.learners, Index: rep.index,
				Tubes: rep.tubes, Jobs: rep.jobs, Behind: rep.behind}
		}
	}
	return out
}

// noteLeaders takes member from's report of the groups it leads: each
// replaces what is known of the group unless that is of a later term.
// Calls pending for a group whose leader it changes go to it. A report
// that names no voters behind (withBehind false: sent while from's
// protocol was not known here, its connection dialled again) keeps those
// the same leadership named before.
func (r *Router) noteLeaders(from uint64, reports []LeaderReport, withBehind bool) {
	now := time.Now()
	var changed []uint16
	r.reportMu.Lock()
	for _, l := range reports {
		if int(l.Group) >= r.groups() {
			if r.cfg.Foreign != nil {
				r.cfg.Foreign(from, l.Group)
			}
			continue
		}
		old, ok := r.reported[l.Group]
		if ok && old.term > l.Term && old.fresh(now) {
			continue
		}
		behind := slices.Clone(l.Behind)
		if !withBehind && ok && old.member == from && old.term == l.Term {
			behind = old.behind
		}
		r.reported[l.Group] = reportedLeader{member: from, term: l.Term, at: now, index: l.Index,
			voters: slices.Clone(l.Voters), learners: slices.Clone(l.Learners), tubes: int(l.Tubes), jobs: int64(l.Jobs),
			behind: behind}
		if !ok || old.member != from || old.term != l.Term {
			changed = append(changed, l.Group)
		}
	}
	r.reportMu.Unlock()
	for _, g := range changed {
		r.leaderChanged(g)
	}
}

// report tells the other members which groups this member leads and
// serves, with one group nothing: each member holds it. A member that
// reads it is told which voters are behind (KindLeadersBehind), one of a
// release before is not (KindLeaders).
func (r *Router) report(now time.Time) {
	if r.cfg.Peers == nil || r.cfg.Term == nil || r.groups() == 1 {
		return
	}
	r.reportMu.Lock()
	r.reportAt = now
	r.reportMu.Unlock()
	var led []LeaderReport
	for k := range r.groups() {
		g := uint16(k)
		if st := r.group(g); st != nil { // served here: this member leads it
			figures := st.Stats()
			l := LeaderReport{Group: g, Term: r.cfg.Term(g), Tubes: uint32(figures.Tubes), Jobs: uint64(figures.Jobs())}
			if r.cfg.Replicas != nil {
				l.Voters, l.Learners, l.Index = r.cfg.Replicas(g)
			}
			if r.cfg.Behind != nil {
				l.Behind = r.cfg.Behind(g)
			}
			led = append(led, l)
		}
	}
	payloads := make(map[Kind][]byte, 2)
	for _, to := range r.cfg.Peers() {
		if to == r.cfg.Self {
			continue
		}
		kind := KindLeaders
		if r.cfg.ReadsBehind != nil && r.cfg.ReadsBehind(to) {
			kind = KindLeadersBehind
		}
		payload, ok := payloads[kind]
		if !ok {
			var err error
			if payload, err = AppendItem(nil, &Item{Kind: kind, Leaders: led}); err != nil {
				return
			}
			payloads[kind] = payload
		}
		r.cfg.Send(to, payload)
	}
}

// SendMove asks member to, group g's leader, to move g's replica from
// member giver to member receiver (KindMove): group 0's leader plans the
// moves of every group (docs/design/shards.md 1.4). Only a member whose
// connection speaks protocol 5 reads a move (replication.Host.TakesMoves):
// one of a release before refuses the payload, and with it its stream.
func (r *Router) SendMove(to uint64, g uint16, giver, receiver string) bool {
	payload, err := AppendItem(nil, &Item{Kind: KindMove, Group: g, Move: Move{From: []byte(giver), To: []byte(receiver)}})
	return err == nil && r.cfg.Send(to, payload)
}

// A session's id is its process's tag and a count: the ids of one
// process grow by one (a leader's Sessions sync reads "at or below Upto"),
// and a greeting, naming its tag in its Seq, closes the owner clients of
// the member's other processes alone (Server.closeOwner). One made before
// the greeting came for a session of this process (a tube's move imports
// a reservation its session holds: Server.HolderClients) stays. A
// member of a release before greets with Seq 0: every owner client of
// the member closes, as before.
const (
	sessionCounterBits = 39        // 5.5e11 sessions a process
	maxSessionTag      = 1<<24 - 1 // tags from 1: 0 is a greeting of any
)

// sessionTag is the tag of session id's process.
func sessionTag(id uint64) uint32 { return uint32(id >> sessionCounterBits) }

// greet tells group g's leader, once per process, that this member's
// sessions are new (see greeted), and reports whether it has.
func (r *Router) greet(g uint16) bool {
	if r.greeted[g].Load() {
		return true
	}
	r.greetMu.Lock()
	defer r.greetMu.Unlock()
	if r.greeted[g].Load() {
		return true
	}
	lead, ok := r.serving(g)
	if !ok {
		return false
	}
	payload, err := AppendItem(nil, &Item{Kind: KindClose, Group: g, Session: 0, Seq: r.tag})
	if err != nil || !r.send(lead, payload) {
		return false
	}
	r.greeted[g].Store(true)
	return true
}

// send sends a payload to member to: to itself through its loop.
func (r *Router) send(to uint64, payload []byte) bool {
	if to == r.cfg.Self {
		r.self.push(payload)
		return true
	}
	return r.cfg.Send(to, payload)
}

// retry sends again, every retryEvery, the calls not taken, and gives up
// on those that waited too long for a leader (Link.Expire), group by
// group.
func (r *Router) retry() {
	defer close(r.done)
	t := time.NewTicker(retryEvery)
	defer t.Stop()
	wait := r.cfg.LeaderWait
	if wait <= 0 {
		wait = 2 * time.Second
	}
	lost := map[uint16]time.Time{} // when each group was last seen without a leader serving
	var forgot time.Time           // when Removed was last looked at
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.reportMu.Lock()
			due := now.Sub(r.reportAt) >= reportEvery
			r.reportMu.Unlock()
			if due {
				r.report(now)
			}
			r.checkLeaders() // greets a leader known only now, if need be
			forget := r.cfg.Removed != nil && now.Sub(forgot) >= forgetEvery
			var removed []uint64
			if forget {
				forgot, removed = now, r.cfg.Removed()
			}
			for k := range r.groups() {
				g := uint16(k)
				if _, ok := r.serving(g); ok {
					delete(lost, g)
					r.link.Retry(g)
					if forget {
						r.server.Forget(removed, g)
					}
					continue
				}
				if lost[g].IsZero() {
					lost[g] = now
				}
				r.link.Expire(g, lost[g], now, wait)
			}
		}
	}
}

// changeRefs adds using and watching to the member's counts of tube and
// sends the new totals to the leader of the group that owns it; done, if
// set, is called once that leader has them.
func (r *Router) changeRefs(tube string, using, watching int, done func()) {
	r.mu.Lock()
	// The owner is read under r.mu, as syncRefs reads it: a placement
	// change's syncs (Replaced) then either come after this total, and
	// carry it to the tube's new group, or before it, and this goes there.
	g := r.ownerOf(tube)
	c := r.refs[tube]
	if c == nil {
		c = new(refCount)
		r.refs[tube] = c
	}
	c.using = uint32(int(c.using) + using)
	c.watching = uint32(int(c.watching) + watching)
	counts := []RefCount{{Tube: []byte(tube), Using: c.using, Watching: c.watching}}
	if c.using == 0 && c.watching == 0 {
		delete(r.refs, tube)
	}
	if st := r.refsHereLocked(g); st != nil {
		// The group is led here, and no refs item to it is on its way
		// (an older total would overwrite this one): set the total at
		// once, as one server counts a use or watch before its reply,
		// so that a command run here next (Session.runHere) sees it.
		st.RaiseStamp(r.link.stamp.Load())
		st.SetRefs(r.cfg.Self, []byte(tube), c.using, c.watching)
		atomicmax.Uint64(&r.link.stamp, st.LatestStamp()) // a tube it made is stamped
		r.mu.Unlock()
		if done != nil {
			done()
		}
		return
	}
	r.sendRefsLocked(g, Refs{Counts: counts}, done)
}

// refsHereLocked is group g's store if this member leads and serves it
// and no refs item to it is on its way, else nil. r.mu is held.
func (r *Router) refsHereLocked(g uint16) *store.Store {
	if out := r.refsOut[g]; out[0] > out[1] {
		return nil
	}
	if lead, ok := r.leader(g); !ok || lead != r.cfg.Self {
		return nil
	}
	return r.group(g)
}

// moveRefs moves one use from tube from to tube to (a session's use).
func (r *Router) moveRefs(from, to string, done func()) {
	r.changeRefs(from, -1, 0, nil)
	r.changeRefs(to, 1, 0, done)
}

// syncRefs sends group g's leader every count of its tubes at once (a new
// leader knows none of them), which acknowledges the refs items it
// replaces.
func (r *Router) syncRefs(g uint16) {
	r.mu.Lock()
	counts := make([]RefCount, 0, len(r.refs))
	for tube, c := range r.refs {
		if r.ownerOf(tube) == g {
			counts = append(counts, RefCount{Tube: []byte(tube), Using: c.using, Watching: c.watching})
		}
	}
	r.sendRefsLocked(g, Refs{Sync: true, Counts: counts}, nil)
}

// sendRefsLocked sends refs as the member's next refs item to group g and
// unlocks r.mu. It sends under r.mu: totals computed in one order must
// reach the leader in that order, or an older total would overwrite a
// newer.
func (r *Router) sendRefsLocked(g uint16, refs Refs, done func()) {
	defer r.mu.Unlock()
	r.refsSeq++
	n := r.refsSeq
	if done != nil {
		r.refWaits[refItem{g, n}] = done
	}
	out := r.refsOut[g]
	out[0] = n
	r.refsOut[g] = out
	r.link.Refs(g, uint32(n), refs, func(*Item) { r.refsAcked(g, n) })
}

// refsAcked runs what waited for group g's refs item n and those sent to
// it before.
func (r *Router) refsAcked(g uint16, n uint64) {
	r.mu.Lock()
	if out := r.refsOut[g]; n > out[1] {
		out[1] = n
		r.refsOut[g] = out
	}
	var ready []func()
	for k, f := range r.refWaits {
		if k.group == g && k.n <= n {
			ready = append(ready, f)
			delete(r.refWaits, k)
		}
	}
	r.mu.Unlock()
	for _, f := range ready {
		f()
	}
}

// selfLoop hands the payloads a member sends itself to its router, in
// order, on a goroutine of their own: a Server's reply must not run the
// Link's callbacks under the Server's locks, nor the other way round.
type selfLoop struct {
	handle func([]byte)

	mu     sync.Mutex
	queue  [][]byte // guarded by mu
	wake   chan struct{}
	closed chan struct{}
	done   chan struct{}
}

func newSelfLoop(handle func([]byte)) *selfLoop {
	l := &selfLoop{handle: handle, wake: make(chan struct{}, 1), closed: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *selfLoop) push(payload []byte) {
	l.mu.Lock()
	l.queue = append(l.queue, append([]byte(nil), payload...))
	l.mu.Unlock()
	wakeUp(l.wake)
}

// wakeUp signals a goroutine waiting on wake, a channel of one, without
// blocking: a signal already pending covers this one.
func wakeUp(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

func (l *selfLoop) run() {
	defer close(l.done)
	for {
		select {
		case <-l.closed:
			return
		case <-l.wake:
		}
		l.mu.Lock()
		q := l.queue
		l.queue = nil
		l.mu.Unlock()
		for _, p := range q {
			l.handle(p)
		}
	}
}

func (l *selfLoop) close() {
	close(l.closed)
	<-l.done
}
