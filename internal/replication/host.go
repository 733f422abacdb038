package replication

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/store"
)

// Host is what a member's Raft groups share (docs/design/shards.md, 2.3):
// its place among the members and its transport, one connection per peer
// and direction whatever the groups. Each group is a Node: group 0, which
// StartNode starts with its host, holds the membership (its changes add
// and remove the transport's peers, and a member removed from it stops
// whole); StartGroup starts another group on the same host, its replicas
// placed statically on members of group 0. Only tests start other groups
// yet.
type Host struct {
	self      Member     // immutable
	cluster   uint64     // immutable
	transport *transport // immutable
	// tick is every group's tick (group 0's NodeConfig.Tick): one ticker
	// gives each its ticks at once, so their heartbeats to a peer meet
	// in one drain of its writer and go as one frame (shards.md, 2.2).
	// stopTicks is closed when group 0 ends.
	tick      time.Duration // immutable
	stopTicks chan struct{}

	// version is the cluster version once finalized (finalize.go), 0
	// before; finalizeLog moves the member's log to version 3 segments
	// (nil: a log that has none). Set before group 0 launches.
	version     atomic.Uint32
	finalizeLog func(context.Context) error

	mu     sync.Mutex
	groups map[groupID]*Node // guarded by mu: the groups running
	closed bool              // guarded by mu
}

// ErrGroupRunning refuses StartGroup for a group the host runs already,
// or for group 0, which StartNode starts.
var ErrGroupRunning = errors.New("replication: the group runs on this member already")

// Host is the member's host, shared by its groups.
func (n *Node) Host() *Host { return n.host }

// StartGroup starts group g's replica on this member: its own log
// (cfg.Log), its replicas (cfg.Peers, members of group 0, this one among
// them), its timing and its store's callbacks (CloseClients); the
// member-wide settings (listeners, TLS, the cluster) are the host's and
// cfg's are not read. Its messages share the host's connections.
func (h *Host) StartGroup(g uint16, cfg NodeConfig) (*Node, error) {
	group := groupID(g)
	if group == group0 || int(group) >= maxGroups {
		return nil, fmt.Errorf("%w: group %d (groups 1 to %d start here)", ErrGroupRunning, g, maxGroups-1)
	}
	return h.startGroup(group, cfg, noState)
}

// startGroup starts group's replica, as StartGroup says, with the state
// machine makeState makes (newNode).
func (h *Host) startGroup(group groupID, cfg NodeConfig, makeState func(*Node) Applier) (*Node, error) {
	cfg.Node, cfg.ClusterID, cfg.Tick = h.self.Name, h.cluster, h.tick
	cfg.fillDefaults()
	if cfg.Log == nil {
		return nil, ErrNoLog
	}
	if !slices.ContainsFunc(cfg.Peers, func(m Member) bool { return m.Name == h.self.Name }) {
		return nil, fmt.Errorf("replication: group %v's replicas do not include this member, %s", group, h.self.Name)
	}
	book := cfg.Log.Membership()
	if len(book.Members) == 0 {
		book.Members = nil
		for _, m := range cfg.Peers {
			if h.transport.peer(m.ID) == nil && m.ID != h.self.ID {
				return nil, fmt.Errorf("replication: group %v's replica %s is not a member", group, m.Name)
			}
			book.Members = append(book.Members, m)
		}
	}
	start, err := startState(cfg, h.self, book)
	if err != nil {
		return nil, err
	}
	n, err := h.newNode(group, cfg, book, start, makeState)
	if err != nil {
		return nil, err
	}
	n.launch()
	return n, nil
}

// newNode makes group g's node on the host from its configuration, the
// members its log (or cfg) names and the state its log starts from, and
// attaches it to the transport; launch starts it. Its state machine is
// what makeState makes for it (its journal made), or a store if that is
// nil.
func (h *Host) newNode(g groupID, cfg NodeConfig, book Book, start startPoint, makeState func(*Node) Applier) (*Node, error) {
	logger := cfg.Logger.With().Str("node", cfg.Node).Logger()
	if g != group0 {
		logger = logger.With().Stringer("group", g).Logger()
	}
	n := &Node{
		born:          time.Now(),
		cfg:           cfg,
		self:          h.self,
		host:          h,
		group:         g,
		conf:          start.cs,
		removed:       book.Removed,
		changes:       make(chan *changeReq),
		transfers:     make(chan uint64),
		log:           cfg.Log,
		logger:        logger,
		startCommit:   start.commit,
		inbox:         make(chan *pb.Message, inboxSize),
		ticks:         make(chan struct{}, 1),
		snapIn:        make(chan snapshotIn),
		wake:          make(chan struct{}, 1),
		stop:          make(chan struct{}),
		halted:        make(chan struct{}),
		done:          make(chan struct{}),
		unreachable:   make(map[uint64]struct{}),
		leaderChanged: make(chan struct{}),
		campaignFirst: cfg.CampaignFirst,
	}
	n.byID, n.confIndex, n.draining, n.cordoned = bookIndex(book), book.Index, slices.Clone(book.Draining), slices.Clone(book.Cordoned)
	n.setTubes(book.Tubes)
	n.journal = NewJournal(n.signal)
	if n.state = makeState(n); n.state == nil {
		// Group g issues ids of prefix g (docs/design/shards.md, 4), and
		// keeps the outcomes of keyed requests (5.6).
		n.store = store.New(store.Options{Journal: n.journal, Acks: n.journal, IDPrefix: uint8(g), Dedup: true, LogPauses: true})
		n.store.SetPauses(book.Tubes.Paused)
		n.state = n.store
		st := n.store
		n.journal.clock = func() (int64, bool) {
			if !h.Finalized() {
				return 0, false // a member of the release before could not read it
			}
			return st.Clock(), true
		}
	}
	if l, ok := cfg.Log.(fullLog); ok {
		n.journal.full = l.Full
	}
	var err error
	if n.core, err = NewCore(n.coreConfig(book, 0)); err != nil {
		return nil, err
	}
	n.noteTick(n.born)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, errStopped
	case h.groups[g] != nil:
		return nil, fmt.Errorf("%w: group %v", ErrGroupRunning, g)
	}
	h.groups[g] = n
	h.transport.attach(g, groupEnd{
		deliver: n.deliver, deliverSnapshot: n.deliverSnapshot,
		openSnapshot: n.openSnapshot, receiveSnapshot: n.receiveSnapshot,
		unreachable: n.noteUnreachable, snapshotSent: n.noteSnapshotSent,
		migrateAsked: n.migrateAsked,
	})
	return n, nil
}

// startPoint is what a node starts from in its log.
type startPoint struct {
	cs     *pb.ConfState
	commit uint64
}

// startState reads the state cfg's log starts from, refusing a log whose
// membership no longer holds self.
func startState(cfg NodeConfig, self Member, book Book) (startPoint, error) {
	hs, cs, err := cfg.Log.InitialState()
	if err != nil {
		return startPoint{}, fmt.Errorf("replication: the log's state: %w", err)
	}
	if book.removed(self.ID) || len(cs.GetVoters())+len(cs.GetLearners()) > 0 && !inConf(cs, self.ID) {
		return startPoint{}, fmt.Errorf("%w: %s (%x) is not in the membership its log holds: start it on an empty directory after adding it again", ErrRemoved, cfg.Node, self.ID)
	}
	return startPoint{cs: cs, commit: hs.GetCommit()}, nil
}

// release takes n off the host once its goroutine has stopped. Group 0's
// end is the member's: every other group stops, then the transport
// (after letting a removed member's last messages go).
func (h *Host) release(n *Node, drain time.Duration) {
	h.mu.Lock()
	if h.groups[n.group] == n {
		delete(h.groups, n.group)
		h.transport.detach(n.group)
	}
	var rest []*Node
	if n.group == group0 {
		h.closed = true
		for _, o := range h.groups {
			rest = append(rest, o)
		}
	}
	h.mu.Unlock()
	if n.group != group0 {
		return
	}
	close(h.stopTicks)
	for _, o := range rest {
		o.Close()
	}
	if drain > 0 {
		h.transport.drain(drain)
	}
	h.transport.close()
}

// runTicker gives every group its ticks, each at once: a group busy when
// one comes takes it when it can (a tick waiting in its channel), and
// Node.tick counts the time that passed, not the ticks that came.
func (h *Host) runTicker() {
	ticker := time.NewTicker(h.tick)
	defer ticker.Stop()
	for {
		select {
		case <-h.stopTicks:
			return
		case <-ticker.C:
		}
		h.mu.Lock()
		for _, n := range h.groups {
			select {
			case n.ticks <- struct{}{}:
			default:
			}
		}
		h.mu.Unlock()
	}
}

// group0 is the membership's group, or nil before it starts.
func (h *Host) group0() *Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.groups[group0]
}

// memberNamed is the cluster's member named name, from group 0's book.
func (h *Host) memberNamed(name string) (Member, bool) {
	n := h.group0()
	if n == nil {
		return Member{}, false
	}
	return n.Book().byName(name)
}

// mayLead reports whether the member of Raft id id may lead a group, by
// group 0's book (Book.MayLead); true before group 0 starts.
func (h *Host) mayLead(id uint64) bool {
	n := h.group0()
	return n == nil || n.Book().MayLead(id)
}

// isRemoved and noteRemoved are the transport's questions to the
// membership (group 0).
func (h *Host) isRemoved(id uint64) bool {
	n := h.group0()
	return n != nil && n.isRemoved(id)
}

func (h *Host) noteRemoved(by string) {
	if n := h.group0(); n != nil {
		n.noteRemoved(by)
	}
}

// GroupStatus is one Raft group as this member sees it: GET /cluster's
// groups.
type GroupStatus struct {
	ID     int    `json:"id"`
	Leader string `json:"leader"` // a member's name; "" while none is known
	// Term is the Raft term its replica here is in, or the one its
	// leader was elected in as it last reported: a leader elected again
	// is a leadership changed, though its name is the same.
	Term     uint64   `json:"term"`
	Replicas []string `json:"replicas"`           // the members voting in it
	Learners []string `json:"learners,omitempty"` // members catching up, not yet voting
	// Tubes and Jobs are this member's replica's: the tubes it holds, and
	// its jobs ready, reserved, delayed and buried; for a group this
	// member holds no replica of (Held false: a cluster of several
	// groups lists them all), its leader's as last reported.
	Tubes int   `json:"tubes"`
	Jobs  int64 `json:"jobs"`
	Held  bool  `json:"held"`
	// Digest is its replica's StoreDigest, with GET /cluster?digest=1
	// only (GroupDigests): a walk of every job.
	Digest string `json:"digest,omitempty"`
}

// GroupDigests are the digests of the groups' replicas this member runs
// (StoreDigest), by group: members at rest agree on each group's.
func (h *Host) GroupDigests() map[int]string {
	out := make(map[int]string)
	for _, n := range h.nodes() {
		_, out[int(n.group)] = StoreDigest(n.store)
	}
	return out
}

// Groups are the groups this member runs, by id.
func (h *Host) Groups() []GroupStatus {
	nodes := h.nodes()
	out := make([]GroupStatus, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.groupStatus())
	}
	return out
}

// groupStats are the figures of the groups this member runs, by id.
func (h *Host) groupStats() []GroupStats {
	nodes := h.nodes()
	out := make([]GroupStats, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, GroupStats{Group: int(n.group), Stats: n.groupStats()})
	}
	return out
}

// nodes are the shard groups' nodes, by group.
func (h *Host) nodes() []*Node {
	h.mu.Lock()
	nodes := slices.Collect(maps.Values(h.groups))
	h.mu.Unlock()
	nodes = slices.DeleteFunc(nodes, func(n *Node) bool { return n.store == nil })
	slices.SortFunc(nodes, func(a, b *Node) int { return int(a.group) - int(b.group) })
	return nodes
}

// groupStatus is n's line in Host.Groups.
func (n *Node) groupStatus() GroupStatus {
	n.mu.Lock()
	lead, term, conf, byID := n.pub.lead, n.pub.term, n.conf, n.byID
	n.mu.Unlock()
	names := func(ids []uint64) []string {
		out := []string{}
		for _, id := range ids {
			if m, ok := byID[id]; ok {
				out = append(out, m.Name)
			} else {
				out = append(out, FormatID(id))
			}
		}
		slices.Sort(out)
		return out
	}
	st := n.store.Stats()
	return GroupStatus{ID: int(n.group), Leader: byID[lead].Name, Term: term, Replicas: names(conf.GetVoters()),
		Learners: names(conf.GetLearners()), Tubes: st.Tubes, Jobs: st.Jobs(), Held: true}
}
