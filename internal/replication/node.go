package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/internal/atomicmax"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// DefaultTick is the node's tick. With DefaultElectionTick (10) and
// DefaultHeartbeatTick (1): the leader sends heartbeats every 100 ms, and
// a follower that has heard nothing for its randomized election timeout,
// 1 to 2 s, campaigns; the first of two followers to do so does it after
// 1.33 s on average, so a new leader serves about 1.4 s after the old one
// is lost (median) and within 2.2 s at worst (both timeouts near 2 s, a
// tick late, and a round trip of votes and the first entry), inside the
// failover goal's 3 s and its 1.5 s median. Shorter ticks would fail over
// faster but elect spuriously when a loaded two-core machine stalls a
// member for half a second, and each spurious election rebuilds the old
// leader's store.
const DefaultTick = 100 * time.Millisecond

// rebuildGrace bounds how long a member that lost its leadership waits
// for its clients to close before it rebuilds its store (Node.rebuild);
// past it the member stops. It lost the leadership most likely to a
// starved CPU, which starves the close too: in CI (five members built
// with the race detector, beside other packages' tests) closing took
// over 2 s, and the member stopped with a tube move under way.
const rebuildGrace = 10 * time.Second

// NodeConfig configures a member (StartNode). The names in its errors are
// the flags that set it.
type NodeConfig struct {
	// Node is this member's name (--node); it must be among Peers, but
	// for a joining member's (JoinID), whose address is then Listen's.
	Node string
	// Listen is where the other members connect (--cluster-listen).
	Listen string
	// Peers are the initial members, this one included (--cluster-peers,
	// ParsePeers).
	Peers []Member
	// ClientAddr is where clients reach this member (-l and -p): members
	// tell each other theirs in their hellos, for the proxy.
	ClientAddr string
	// HTTPAddr is where this member serves --http, "" without it: members
	// tell each other theirs, so that a follower forwards the admin API
	// to the leader.
	HTTPAddr string
	// TLSCert, TLSKey and TLSCA are PEM files (--cluster-tls-cert, -key,
	// -ca): all three for mutual TLS, or none for plaintext.
	TLSCert, TLSKey, TLSCA string
	// TLSSource, if set with them, gives their contents at each
	// handshake instead of StartNode reading them once, so that files
	// read again without a restart (internal/certs) serve new
	// connections; connections open keep theirs.
	TLSSource TLSSource
	// ClusterID is 0 to derive it from the initial members' names
	// (ClusterID); the wal-backed log keeps it in the directory.
	ClusterID uint64
	// JoinID, for a member that joins a running cluster (--cluster-join
	// CLUSTER:ID), is its Raft id, chosen when it was added; ClusterID is
	// then the cluster's. Peers then name the members it can reach first.
	JoinID uint64

	// Tick is DefaultTick when 0; ElectionTick and HeartbeatTick are in
	// ticks, the core's defaults when 0.
	Tick                        time.Duration
	ElectionTick, HeartbeatTick int
	// MaxBatch is the core's (DefaultMaxBatch when 0).
	MaxBatch int
	// SendQueue is each peer's queue of messages (DefaultSendQueue when
	// 0).
	SendQueue int

	// Log is the member's log (a WALLog: OpenWALLog with WALConfig's
	// settings); required. Retain is the entries WALConfig has the log
	// keep below the applied index, so that a follower a little behind
	// gets entries rather than a snapshot.
	Log    Log
	Retain int
	// CloseClients is called on the node's goroutine when this member
	// lost a leadership it served (ActRebuild), before its store is
	// rebuilt from the log: whatever serves clients from the store
	// (engine.Server.CloseClients) closes them, and returns once none is
	// open, or with ctx's error, which stops the member. Nil: nothing but
	// the node uses the store (tests).
	CloseClients func(ctx context.Context) error
	// OnServe is called on the node's goroutine when this member begins
	// to serve the group with reservations handed over to it (HandOver's
	// body), before it takes any command: it gives them to their
	// sessions on st, the node's store. Set with the config, so that no
	// leadership is gained before it is (one handed over reaches a member
	// as soon as its node runs). Nil: the jobs go back to ready (tests).
	OnServe func(st *store.Store, handed []byte)
	// NoFinalize keeps the cluster at version 2 (finalize.go): group 0's
	// leader never proposes finalization. For tests of the release
	// before's behaviour.
	NoFinalize bool
	// CampaignFirst has this member campaign as soon as it reaches a
	// majority of the group's voters, unless a leader is known by then
	// (maybeCampaignFirst): a new group's preferred first leader, of a
	// formation or a growth, so that the leaderships are spread from the
	// start (the others wait out raft's randomized election timeout).
	CampaignFirst bool
	// Observer, if set, is told of each proposal (on the node's goroutine).
	Observer Observer
	Logger   zerolog.Logger

	// listener, if set, is the transport's instead of listening on
	// Listen: tests bind their ports first.
	listener net.Listener
	// maxProtocol, if set, caps the members' protocols this member
	// speaks: tests make a member of an older release so.
	maxProtocol uint16
}

// Validate checks cfg as StartNode does before it touches anything: each
// error is a *ConfigError, one line, naming the setting at fault.
func (cfg *NodeConfig) Validate() error {
	if err := checkName(cfg.Node); err != nil {
		return configErrorf(SettingNode, "%q: %v", cfg.Node, err)
	}
	if err := checkAddr(cfg.Listen, true); err != nil {
		return configErrorf(SettingListen, "%v", err)
	}
	if len(cfg.Peers) == 0 {
		return configErrorf(SettingPeers, "empty: want NAME=HOST:PORT,...")
	}
	if err := validateMembers(cfg.Node, cfg.Peers, cfg.JoinID != 0); err != nil {
		return err
	}
	files := []struct {
		setting Setting
		path    string
	}{
		{SettingTLSCert, cfg.TLSCert}, {SettingTLSKey, cfg.TLSKey}, {SettingTLSCA, cfg.TLSCA},
	}
	set := 0
	for _, f := range files {
		if f.path != "" {
			set++
		}
	}
	if set > 0 && set < len(files) {
		for _, f := range files {
			if f.path == "" {
				return configErrorf(f.setting, "missing: the certificate, its key and the CA go together")
			}
		}
	}
	if cfg.JoinID != 0 && cfg.ClusterID == 0 {
		return configErrorf(SettingJoin, "needs the cluster's id: CLUSTER:ID, as the member's addition printed it")
	}
	if cfg.Tick < 0 || cfg.ElectionTick < 0 || cfg.HeartbeatTick < 0 || cfg.SendQueue < 0 {
		return configErrorf(SettingTiming, "the tick, its counts and the send queue cannot be negative")
	}
	return nil
}

// SelfAddr is where the other members reach this one, as it knows at
// start: its --cluster-peers entry's address, or, for a joining member
// not named there, its --cluster-listen (a wildcard host there is filled
// by each peer from its book: doc.go, "Membership changes").
func (cfg *NodeConfig) SelfAddr() string {
	for _, m := range cfg.Peers {
		if m.Name == cfg.Node {
			return m.Addr
		}
	}
	return cfg.Listen
}

// Node is a member's replica of one Raft group (group 0, the membership's,
// started by StartNode; others by Host.StartGroup): the goroutine that
// owns its Core, carries out the core's actions (doc.go) on the Log, the
// transport and the store, and feeds it ticks and peers' messages; and
// what operations read of it.
type Node struct {
	cfg   NodeConfig // immutable after StartNode, defaults filled in
	self  Member     // immutable
	host  *Host      // immutable: what the member's groups share
	group groupID    // immutable
	// byID are the members in the book, and conf raft's membership:
	// written on the node goroutine under mu, so it reads them without.
	byID    map[uint64]Member
	conf    *pb.ConfState
	removed []uint64 // the ids removed, as byID
	// confIndex is the index of the change conf is as of (Book.Index).
	confIndex uint64
	draining  []uint64                 // Book.Draining, as byID
	cordoned  []uint64                 // Book.Cordoned, as byID
	tubes     atomic.Pointer[TubeBook] // Book.Tubes, read without a lock (FrozenTube)
	moving    atomic.Bool              // a tube of tubes.Frozen is not yet moved out (AnyFrozen)
	// tubesMu orders setTubes' publishing and telling onTubes with
	// OnTubes' first call, so that no book reaches fn after a later one.
	tubesMu sync.Mutex
	onTubes atomic.Pointer[func(TubeBook)]
	log     Log      // immutable; written on the node goroutine
	journal *Journal // immutable
	// state is the group's state machine, made with the node and kept for
	// its life: a restore empties it and fills it again (Applier.Reset),
	// so whatever serves it keeps the one it was given. For a shard group
	// it is store, else store is nil. Immutable; changed only on the node
	// goroutine.
	state  Applier
	store  *store.Store
	logger zerolog.Logger // immutable
	// startCommit is the commit index the log held at start: Replayed
	// says when it is applied. Immutable.
	startCommit uint64

	inbox  chan *pb.Message // peers' messages, to the node goroutine
	ticks  chan struct{}    // the host's ticks; capacity 1
	snapIn chan snapshotIn  // peers' snapshots, each with its verdict
	wake   chan struct{}    // the mailbox or the journal has news; capacity 1
	stop   chan struct{}    // closed by Close
	halted chan struct{}    // closed when the node goroutine takes no more events
	done   chan struct{}    // closed when it has also left the host (group 0: stopped it)

	closeOnce sync.Once

	// The mailbox: news from other goroutines for the node goroutine.
	durable     atomic.Uint64       // every write through this number is durable
	mailMu      sync.Mutex          // guards the two below
	unreachable map[uint64]struct{} // guarded by mailMu
	snapReports []snapshotReport    // guarded by mailMu
	migrateIn   []uint64            // guarded by mailMu: a peer's migrate request

	// Node goroutine only.
	core        *Core
	toldDurable uint64    // the last number given to Core.Durable
	lastTick    time.Time // when the last tick was taken
	// born is when the node started; leaseUntil, the time since born
	// until which its leadership is confirmed (Leased), or 0.
	born       time.Time
	leaseUntil atomic.Int64
	// tickAt is when the core took each of its last ticks, by its number
	// (Core.Ticks) modulo its length: the lease runs from the tick a
	// majority was last heard at (leaseEnd).
	tickAt   []takenTick
	caughtUp bool   // a core of this node caught up with its leader (Core.CaughtUp): latched
	stopped  bool   // the member stopped on its own (lost, removed) or is closing
	lost     error  // ErrLogLost, with the indexes, once found
	lead     uint64 // the leader last published
	restores int    // ActRestores the core handed out: its first is the log's head, the rest snapshots
	// A rebuild under way (Node.rebuild): when the leadership was lost,
	// and the commit index the store must apply to follow again; zero
	// when none is.
	rebuilding    time.Time
	rebuildTarget uint64
	serving       bool      // whether this member served at the last publish
	lastAsk       time.Time // when askMigrations last looked
	lastFinalize  time.Time // when maybeFinalize last proposed
	campaignFirst bool      // cfg.CampaignFirst, until done or moot
	campaignBegan bool      // maybeCampaignFirst has read campaignTerm
	campaignTerm  uint64    // the term when the first campaign began
	// rewriting: a rewrite for the members' compaction runs (startRewrite);
	// rewrites waits for it.
	rewriting atomic.Bool
	rewrites  sync.WaitGroup

	refusedSteps atomic.Uint64 // peers' messages the core refused

	// What the node goroutine publishes, for Status, Ready, Leader and
	// Stats on any goroutine.
	mu             sync.Mutex
	pub            published               // guarded by mu
	peers          map[uint64]PeerProgress // guarded by mu: on the leader, as of the last tick; nil otherwise
	lastIndex      uint64                  // guarded by mu: the leader's last index as of the last tick
	leaderInfo     LeaderInfo              // guarded by mu
	leaderChanged  chan struct{}           // guarded by mu: closed, and replaced, when leaderInfo changes
	leaderChanges  uint64                  // guarded by mu
	err            error                   // guarded by mu: why the node stopped on its own, if it did (Err)
	membersChanged uint64                  // guarded by mu: membership changes applied
	rebuilds       uint64                  // guarded by mu: leaderships lost while serving, each a rebuild
	lastRebuild    time.Duration           // guarded by mu: the last rebuild's time from the loss to following
	rebuildingNow  bool                    // guarded by mu: from a rebuild's start to its store following again
	askedIDs       uint64                  // guarded by mu: jobs asked of the leader to rewrite
	rewrittenIDs   uint64                  // guarded by mu: jobs rewritten on members' asks
	stalls         atomic.Uint64           // ticks that found over half an election timeout missed
	slowRounds     atomic.Uint64           // rounds over half an election timeout

	// Membership change requests (AddMember, RemoveMember), to the node
	// goroutine; removedBy is set by the transport when a peer refused
	// this member as removed.
	changes chan *changeReq
	// transfers carries TransferLeadership's requests: the member to hand
	// the leadership to.
	transfers chan uint64
	removedBy atomic.Pointer[string]
	waiting   *changeReq // node goroutine only: the request waiting for its change
}

// published is the node goroutine's view after its last round.
type published struct {
	term, commit, applied uint64
	lead                  uint64
	state                 raft.StateType
	serving, stopped      bool
	caughtUp              bool
	proposals, bytes      uint64
}

type snapshotIn struct {
	m       *pb.Message
	verdict chan error
}

type snapshotReport struct {
	to uint64
	ok bool
}

// migratingLog is a Log that compacts itself by moving live jobs
// (GroupLog, WALLog): the serving leader gives it its store, whose
// rewrites it proposes (doc.go, "Snapshots and a bounded log"); a
// member that does not lead gives it its Asker, and asks the leader for
// those rewrites (migrate.go).
type migratingLog interface {
	SetMigrator(segment.Migrator)
	Asker() segment.Migrator
	takeAsks(now time.Time, wait time.Duration) []uint64
}

// follow makes the log ask the leader for its moves, as a shard group's
// member that does not serve.
func (n *Node) follow() {
	if l, ok := n.log.(migratingLog); ok && n.store != nil {
		l.SetMigrator(l.Asker())
	}
}

// fullLog is a Log that can run out of disk (WALLog): while it is full,
// the journal refuses every record but deletes, as a single node's log
// does.
type fullLog interface{ Full() bool }

// errStopped answers a peer's snapshot that arrived as the node stopped.
var errStopped = errors.New("replication: the node stopped")

// ErrNoLog refuses a NodeConfig without its Log: a member that reported
// writes durable with nothing on disk would lose what it acknowledged.
var ErrNoLog = errors.New("replication: a member needs its log (NodeConfig.Log)")

// ErrLogLost is why a member stops when the leader knows it wrote entries
// its log does not hold: its directory was emptied or replaced.
// It cannot rejoin under its Raft id (doc.go, "Snapshots and a bounded
// log"); raft itself would panic on the heartbeat that shows it.
var ErrLogLost = errors.New("replication: this member's log lost entries the cluster knows it wrote")

// StartNode validates cfg, listens on cfg.Listen, restores the store from
// the log and starts the member: its goroutine, its ticker and its
// connections to the peers. A validation error is one line naming the
// flag at fault.
func StartNode(cfg NodeConfig) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	var names []string
	var ids []uint64
	for _, m := range cfg.Peers {
		names, ids = append(names, m.Name), append(ids, m.ID)
	}
	if cfg.ClusterID == 0 {
		cfg.ClusterID = ClusterID(names)
	}
	var mtls *memberTLS
	switch {
	case cfg.TLSCert != "" && cfg.TLSSource != nil:
		mtls = newMemberTLS(cfg.TLSSource)
	case cfg.TLSCert != "":
		var err error
		if mtls, err = loadTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSCA); err != nil {
			return nil, err
		}
	}
	if cfg.Log == nil {
		return nil, ErrNoLog
	}
	// Who the members are: the log's book once a change was applied (or
	// a snapshot installed), else --cluster-peers. A joining member knows
	// only itself until its first snapshot; its peers' ids it learns from
	// their hellos (hints).
	self := Member{Name: cfg.Node, ID: MemberID(cfg.Node)}
	if cfg.JoinID != 0 {
		self.ID = cfg.JoinID
	}
	var hints map[string]string
	book := cfg.Log.Membership()
	self.Addr = cfg.SelfAddr()
	if len(book.Members) == 0 {
		book.Members = nil
		if cfg.JoinID != 0 {
			book.Members = []Member{self}
		}
		for _, m := range cfg.Peers {
			switch {
			case m.Name == cfg.Node:
				if cfg.JoinID == 0 {
					book.Members = append(book.Members, self)
				}
			case cfg.JoinID == 0:
				book.Members = append(book.Members, m)
			default:
				if hints == nil {
					hints = make(map[string]string)
				}
				hints[m.Name] = m.Addr
			}
		}
	}
	start, err := startState(cfg, self, book) // before the transport listens
	if err != nil {
		return nil, err
	}
	h := &Host{self: self, cluster: cfg.ClusterID, tick: cfg.Tick, stopTicks: make(chan struct{}), groups: make(map[groupID]*Node)}
	h.transport, err = newTransport(transportConfig{
		self: self, members: book.Members, cluster: cfg.ClusterID, hints: hints, joining: cfg.JoinID != 0 && len(book.Members) == 1,
		removed: h.isRemoved, removedSelf: h.noteRemoved,
		listen: cfg.Listen, listener: cfg.listener, client: cfg.ClientAddr, http: cfg.HTTPAddr,
		tls: mtls, queue: cfg.SendQueue, log: cfg.Logger.With().Str("node", cfg.Node).Logger(), maxProtocol: cfg.maxProtocol,
	})
	if err != nil {
		return nil, err
	}
	n, err := h.newNode(group0, cfg, book, start, noState)
	if err != nil {
		h.transport.close()
		return nil, err
	}
	if f, ok := cfg.Log.(finalizer); ok {
		h.finalizeLog = f.Finalize
	}
	h.setVersion(book)
	if mtls == nil && !allLoopback(cfg.Listen, cfg.Peers) {
		n.logger.Warn().Str("listen", cfg.Listen).
			Msg("members talk in plaintext: give every member a TLS certificate, its key and the CA for mutual TLS")
	}
	n.launch()
	n.logger.Info().Str("listen", n.host.transport.addr().String()).Str("client", cfg.ClientAddr).
		Str("id", fmt.Sprintf("%x", n.self.ID)).Str("cluster", fmt.Sprintf("%x", cfg.ClusterID)).Int("members", len(book.Members)).
		Bool("joining", cfg.JoinID != 0 && n.conf.GetVoters() == nil && n.conf.GetLearners() == nil).
		Bool("tls", mtls != nil).Dur("tick", cfg.Tick).Int("election_ticks", cfg.ElectionTick).
		Msg("cluster member started")
	return n, nil
}

// fillDefaults gives cfg's timing and queue their defaults where unset.
func (cfg *NodeConfig) fillDefaults() {
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.ElectionTick == 0 {
		cfg.ElectionTick = DefaultElectionTick // the core's default, which tick needs too
	}
	if cfg.SendQueue == 0 {
		cfg.SendQueue = DefaultSendQueue
	}
}

// launch runs the node: its first round restores the store from the log
// (ActRestore), so Store has one when it returns (it cannot rebuild: the
// node has served nothing yet); then its goroutine, and for group 0 the
// host's connections to the peers and its ticker.
func (n *Node) launch() {
	n.follow()
	n.process(0)
	n.publish(true)
	n.lastTick = time.Now()
	if n.group == group0 {
		n.host.transport.start()
		go n.host.runTicker()
	}
	go n.run()
}

// coreConfig is the Config of the member's core: at start, and when the
// core is made again on the log after a lost leadership (rebuild), its
// writes then numbered after seq, the last of the core before it.
func (n *Node) coreConfig(book Book, seq uint64) Config {
	cfg := Config{
		ID: n.self.ID, Log: n.log, Journal: n.journal,
		ElectionTick: n.cfg.ElectionTick, HeartbeatTick: n.cfg.HeartbeatTick, MaxBatch: n.cfg.MaxBatch,
		Logger: raftLogger{n.logger}, Observer: n.cfg.Observer, Book: book, Seq: seq,
		CaughtUp: n.caughtUp, ReadNonce: rand.Uint64(),
	}
	if n.group != group0 {
		cfg.MayLead = n.host.mayLead // a group's book has no marks: group 0's has
	}
	return cfg
}

// allLoopback reports whether every member address, and the listening
// one, stays on this machine.
func allLoopback(listen string, members []Member) bool {
	if !isLoopback(listen) {
		return false
	}
	for _, m := range members {
		if !isLoopback(m.Addr) {
			return false
		}
	}
	return true
}

// Close stops the member:
//  1. the node goroutine takes no more events (a write the log was given
//     still becomes durable, as the log decides);
//  2. the transport stops: connections close, peers see the member gone;
//  3. the store closes.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		close(n.stop)
		<-n.done
		n.state.Close()
	})
}

// TransferLeadership asks this member, if it leads, to hand the
// leadership to the member named: raft's leadership transfer, which
// succeeds once that member holds the whole log (the leader then steps
// down and rebuilds, as on any lost leadership it served), and is
// otherwise dropped after an election timeout. It returns once the
// request is with the node goroutine: ErrUnknownMember for a name not in
// the book, errStopped once the member stopped.
func (n *Node) TransferLeadership(name string) error {
	var id uint64
	n.mu.Lock()
	for mid, m := range n.byID {
		if m.Name == name {
			id = mid
		}
	}
	n.mu.Unlock()
	if id == 0 {
		return fmt.Errorf("%w: %s", ErrUnknownMember, name)
	}
	select {
	case n.transfers <- id:
		return nil
	case <-n.halted:
		return errStopped
	}
}

// CaughtUp reports whether the member named name holds the group's log
// to within promoteSlack entries of this member's, and its replica
// answered within the last election timeout, as of this member's last
// tick, while it leads: raft hands a leadership over only to a replica
// holding the whole log, and holds the group's proposals while it
// catches up, for an election timeout at most; a replica not running
// (its member restarting, its groups not all started) never takes it.
// False on a follower.
func (n *Node) CaughtUp(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, p := range n.peers {
		if n.byID[id].Name == name {
			return p.Active && p.Match+promoteSlack >= n.lastIndex
		}
	}
	return false
}

// AwaitReplicas waits, while this member leads, until every voter of
// the group heard from within d holds the log durably up to the last
// entry this member held when called, as of its ticks (a replica's match
// is what its fsyncs acknowledged), or until ctx ends: it returns the
// names of those still behind then, nil when none. A quorum's
// acknowledgement says nothing of the others: a bulk write paced by it
// alone (a tube's copy) can leave a slower replica's log behind its
// fsyncs by its bound, and that member's own groups refuse writes while
// it is. A voter not heard from is down, and waited for by nobody; one
// raft does not stream the log to (probed, or sent a snapshot: a replica
// that has just come back, or come empty) is behind already, and waiting
// would only hold every part for ctx's whole bound; a learner catches up
// as it can (a replica's move would slow every tube's).
func (n *Node) AwaitReplicas(ctx context.Context, d time.Duration) []string {
	last, err := n.log.LastIndex()
	if err != nil {
		return nil
	}
	tick := time.NewTicker(n.cfg.Tick)
	defer tick.Stop()
	for {
		var behind []string
		n.mu.Lock()
		serving, seen := n.pub.serving, n.lastIndex >= last // the last tick's view holds it
		for id, p := range n.peers {
			if id != n.self.ID && p.Match < last && p.Streamed && slices.Contains(n.conf.GetVoters(), id) {
				behind = append(behind, n.nameOf(id))
			}
		}
		n.mu.Unlock()
		if !serving {
			return nil
		}
		behind = slices.DeleteFunc(behind, func(name string) bool { return !n.host.HeardFrom(name, d) })
		if seen && len(behind) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return behind
		case <-tick.C:
		}
	}
}

// AbortTransfer ends the leadership transfer this member's raft has
// begun and not completed, if any: raft takes the group's proposals again
// at once, not an election timeout after the transfer began (a transfer
// to the leader itself aborts the one in progress: raft's stepLeader).
func (n *Node) AbortTransfer() error {
	select {
	case n.transfers <- n.self.ID:
		return nil
	case <-n.halted:
		return errStopped
	}
}

// Done is closed once the member has stopped: after Close, after a
// Rebuild returned, or when it found its log lost (Err).
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is why the member stopped on its own: an ErrLogLost; nil while it
// runs, and after Close or a Rebuild.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Name is the member's name (--node).
func (n *Node) Name() string { return n.self.Name }

// ID is this member's Raft id.
func (n *Node) ID() uint64 { return n.self.ID }

// ElectionTimeout is the longest a follower waits for its leader before it
// campaigns (raft draws each timeout between ElectionTick and twice that,
// in ticks): how long a new connection may wait for a leader to be known.
func (n *Node) ElectionTimeout() time.Duration {
	return 2 * time.Duration(n.cfg.ElectionTick) * n.cfg.Tick
}

// Addr is the address the member listens on for its peers.
func (n *Node) Addr() string { return n.host.transport.addr().String() }

// Store is the member's store, the same for the member's life: the one
// clients use on the serving leader, emptied and filled again in place
// when a snapshot is installed.
func (n *Node) Store() *store.Store { return n.store }

// Journal is the member's journal: its store's store.Journal and
// store.AckSource.
func (n *Node) Journal() *Journal { return n.journal }

// The node goroutine.

// run takes events until Close or a rebuild: ticks, peers' messages and
// snapshots, and the mailbox; after each it carries out the core's
// actions.
func (n *Node) run() {
	defer close(n.done)
	defer func() {
		var drain time.Duration
		if errors.Is(n.lost, ErrRemoved) {
			drain = n.cfg.Tick // sendLast's messages
		}
		n.host.release(n, drain)
	}()
	defer close(n.halted)
	defer n.rewrites.Wait()
	yielded := false // the last round ended with actions left (process)
	for {
		tick := false
		var verdict chan error // a peer's snapshot's, once its round is carried out
		var verr error
		if yielded {
			// A tick and the peers' messages that came meanwhile go
			// first, in that order (an answer counts at the tick it is
			// stepped in), then the rest of the actions: a select would
			// pick the node's own wake as often as them.
			select {
			case <-n.stop:
				return
			case <-n.ticks:
				n.tick(time.Now())
				tick = true
			default:
			}
			n.stepQueued()
		} else {
			select {
			case <-n.stop:
				return
			case <-n.ticks:
				// Now, not the tick's time: a tick waiting in the channel
				// through a stall says when it fired.
				n.tick(time.Now())
				tick = true
			case m := <-n.inbox:
				n.step(m)
				n.stepQueued() // so one round of actions covers what came
			case in := <-n.snapIn:
				verdict, verr = in.verdict, n.step(in.m)
			case to := <-n.transfers:
				n.core.TransferLeadership(to)
			case req := <-n.changes:
				n.startChange(req)
			case <-n.wake:
			}
		}
		if by := n.removedBy.Load(); by != nil && n.lost == nil {
			n.stopRemoved(fmt.Sprintf("%s refused it as removed", *by))
		}
		began := time.Now()
		stopped := n.lost != nil
		if !stopped {
			stopped, yielded = n.process(n.roundBudget())
		}
		n.noteSlowRound(began)
		n.rebuilt()
		n.publish(tick)
		if verdict != nil {
			// After the round: raft's install of the snapshot is written
			// (Log.InstallSnapshot) before the sender hears of it and the
			// transport takes another.
			verdict <- verr
		}
		if stopped {
			return
		}
	}
}

// tick gives the core the ticks due since the last: one, or more after a
// stall (up to an election timeout's), so that the leader's lease counts
// time that passed, not ticks that were taken.
func (n *Node) tick(now time.Time) {
	due := int(now.Sub(n.lastTick) / n.cfg.Tick)
	if due > n.cfg.ElectionTick/2 {
		n.stalls.Add(1)
		n.logger.Warn().Dur("stalled", now.Sub(n.lastTick)).Bool("leading", n.core.Serving()).
			Msg("the group's goroutine missed its ticks: starved of CPU, its leadership may lapse")
	}
	due = min(max(due, 1), n.cfg.ElectionTick)
	n.lastTick = n.lastTick.Add(time.Duration(due) * n.cfg.Tick)
	if now.Sub(n.lastTick) > n.cfg.Tick {
		n.lastTick = now // more were missed than are given: start afresh
	}
	before := n.core.Ticks()
	for range due {
		n.core.Tick()
		n.noteTick(now)
	}
	if due > 1 {
		// The peers' messages that waited through the stall go now,
		// counted as heard before it: they answer what was sent then.
		n.core.CreditUpTo(max(before, 1))
		n.stepQueued()
		n.core.CreditUpTo(0)
	}
	n.askMigrations(now)
	n.maybeFinalize(now)
	n.maybeCampaignFirst()
	if w := n.waiting; w != nil {
		switch {
		case now.After(w.deadline):
			n.waiting = nil
			w.done <- changeResult{member: w.member, err: ErrChangeTimeout}
		case w.add && w.replica && !n.core.Serving():
			// Proposed as the leader, it would now be forwarded to the
			// next one: whether it commits is the new leader's log's to
			// say, and its planner's to look at again.
			n.waiting = nil
			w.done <- changeResult{member: w.member, err: fmt.Errorf("%w: the leadership was lost under a replica's addition", ErrNotServing)}
		case now.Sub(w.proposed) >= changeRetry:
			w.proposed = now
			if err := n.core.ProposeChange(w.typ, w.member, w.on); err == nil {
				n.logger.Info().Str("change", w.verb()).Str("member", w.member.Name).
					Msg("a membership change not applied yet: proposed again")
			}
		}
	}
}

// maybeCampaignFirst campaigns for NodeConfig.CampaignFirst, on each
// tick while the messages connections to a majority of the voters are
// open and no leader is known, in the node's first firstCampaignTimeouts
// election timeouts: a pre-vote that reached a member whose replica of
// the group had not started yet was dropped. Once it is moot
// (firstCampaignOver), it stops for good.
func (n *Node) maybeCampaignFirst() {
	if !n.campaignFirst {
		return
	}
	st := n.core.Status()
	if !n.campaignBegan {
		n.campaignBegan, n.campaignTerm = true, st.GetTerm()
	}
	if firstCampaignOver(st, n.self.ID, n.campaignTerm) ||
		time.Since(n.born) > time.Duration(firstCampaignTimeouts*n.cfg.ElectionTick)*n.cfg.Tick {
		n.campaignFirst = false
		return
	}
	voters := n.conf.GetVoters()
	reached := 0
	for _, id := range voters {
		if p := n.host.transport.peer(id); id == n.self.ID || p != nil && p.up.Load() {
			reached++
		}
	}
	if reached <= len(voters)/2 {
		return
	}
	if err := n.core.Campaign(); err != nil {
		n.logger.Debug().Err(err).Msg("the first campaign was refused")
	}
}

// firstCampaignOver reports whether CampaignFirst's campaign is moot, by
// the group's raft state st on member self, whose term was began when the
// campaign did: a leader is known, this member leads or is a candidate
// (its own election, or raft's), or another member's election began (the
// term rose, or this member voted for another). Granting a vote resets
// raft's own timer; a campaign here would not wait, and a later term's
// pre-vote granted by a member that has not heard the winner yet would
// depose it.
func firstCampaignOver(st raft.BasicStatus, self, began uint64) bool {
	return st.Lead != 0 || st.RaftState == raft.StateLeader || st.RaftState == raft.StateCandidate ||
		st.GetTerm() > began || st.GetVote() != 0 && st.GetVote() != self
}

// firstCampaignTimeouts bounds how long CampaignFirst campaigns, in
// election timeouts from the node's start.
const firstCampaignTimeouts = 3

// noteSlowRound warns of a round (the actions of what one wake brought)
// that took over half an election timeout: meanwhile the group answered
// no peer, and its leader may lose its quorum.
func (n *Node) noteSlowRound(began time.Time) {
	if d := time.Since(began); d > time.Duration(n.cfg.ElectionTick/2)*n.cfg.Tick {
		n.slowRounds.Add(1)
		n.logger.Warn().Dur("took", d).Bool("leading", n.core.Serving()).
			Msg("a round of the group's actions was slow: it answered no peer meanwhile")
	}
}

// step gives the core a peer's message; one it refuses is logged, and
// so is a forwarded removal the leader refuses (refusedProposal). A
// heartbeat that commits past this member's last entry says the leader
// knows it wrote entries it no longer has: the member stops (ErrLogLost)
// rather than let raft panic on it. But a replica of a group but 0 that
// does not vote in it (added again, it starts empty under the id of the
// replica removed before) drops it: the leader sent it to that one
// before it applied the removal, and it arrived late. Its leader then
// probes and fills it from a snapshot; it lost nothing that counted.
func (n *Node) step(m *pb.Message) error {
	if n.lost != nil {
		return errStopped
	}
	if m.GetType() == pb.MsgHeartbeat {
		if last, err := n.log.LastIndex(); err == nil && m.GetCommit() > last {
			if n.group != group0 && !slices.Contains(n.conf.GetVoters(), n.self.ID) {
				n.logger.Debug().Uint64("commit", m.GetCommit()).Uint64("last", last).
					Msg("a heartbeat meant for this replica's removed predecessor: dropped")
				return nil
			}
			n.fail(fmt.Errorf("%w: the leader, %s, commits through entry %d, and its log ends at %d",
				ErrLogLost, n.byID[m.GetFrom()].Name, m.GetCommit(), last),
				"cannot rejoin under this member's id: its log is not the one the cluster knows; stopping")
			return n.lost
		}
	}
	if n.refusedProposal(m) {
		return nil
	}
	err := n.core.Step(m)
	if errors.Is(err, ErrBadRecords) {
		n.refusedSteps.Add(1)
		n.host.transport.logOnce("records "+n.byID[m.GetFrom()].Name, func(e *zerolog.Event) *zerolog.Event {
			return e.Str("peer", n.byID[m.GetFrom()].Name).Err(err)
		}, zerolog.ErrorLevel, "refused a member's message")
	}
	return err
}

// process carries out the core's actions, in order, until it has none,
// or, given a budget, until a Ready's actions end past it: then it
// reports that it yielded, and run steps what came meanwhile before it
// goes on (a long run of committed entries, or of a large batch's
// proposals, comes in parts: readyRecords, readyBytes), so that a
// follower applying a long run still answers its leader's heartbeats. It
// reports whether the member stopped (ActRebuild).
func (n *Node) process(budget time.Duration) (stopped, yielded bool) {
	began := time.Now()
	for {
		n.readMail()
		acts := n.core.Ready()
		if len(acts) == 0 {
			if n.durable.Load() > n.toldDurable {
				continue // made durable while the actions were carried out
			}
			return false, false
		}
		for i, a := range acts {
			if n.do(a) {
				n.sendLast(acts[i+1:])
				return true, false
			}
		}
		if budget > 0 && time.Since(began) > budget {
			return false, true
		}
	}
}

// stepQueued steps the messages queued in the inbox, without waiting.
func (n *Node) stepQueued() {
	for range cap(n.inbox) {
		select {
		case m := <-n.inbox:
			n.step(m)
		default:
			return
		}
	}
}

// roundBudget is process's budget in the node's goroutine: a quarter of
// an election timeout, well within the leader's wait for its quorum.
func (n *Node) roundBudget() time.Duration {
	return time.Duration(n.cfg.ElectionTick) * n.cfg.Tick / 4
}

// sendLast sends the messages among the actions left when the member
// stopped, if it stopped because it was removed: a removed leader hands
// its leadership over (Core.handOver) in the round that applies its
// removal, after the removal's ActMembership. run lets them go out
// before it closes the transport.
func (n *Node) sendLast(rest []Action) {
	if !errors.Is(n.lost, ErrRemoved) {
		return
	}
	for _, a := range rest {
		if a.Kind != ActSend {
			continue
		}
		n.host.transport.send(n.group, a.Messages)
		for _, m := range a.Messages {
			if m.GetType() == pb.MsgTimeoutNow {
				n.logger.Info().Str("to", n.nameOf(m.GetTo())).Msg("removed while leading: handed the leadership over")
			}
		}
	}
}

// readMail gives the core the news other goroutines left.
func (n *Node) readMail() {
	if d := n.durable.Load(); d > n.toldDurable {
		n.toldDurable = d
		n.core.Durable(d)
	}
	n.mailMu.Lock()
	if len(n.unreachable) == 0 && len(n.snapReports) == 0 && n.migrateIn == nil {
		n.mailMu.Unlock()
		return
	}
	unreachable := n.unreachable
	n.unreachable = make(map[uint64]struct{})
	reports := n.snapReports
	n.snapReports = nil
	asked := n.migrateIn
	n.migrateIn = nil
	n.mailMu.Unlock()
	if asked != nil {
		n.startRewrite(asked)
	}
	for id := range unreachable {
		n.core.Unreachable(id)
	}
	for _, r := range reports {
		n.core.SnapshotSent(r.to, r.ok)
	}
}

// do carries out one action; it reports whether the member stopped.
func (n *Node) do(a Action) bool {
	switch a.Kind {
	case ActRestore:
		return n.restore(a)
	case ActSend:
		n.host.transport.send(n.group, a.Messages)
	case ActWrite:
		a.write(n.log)
		seq := a.Seq
		n.log.OnDurable(func() {
			atomicmax.Uint64(&n.durable, seq)
			n.signal()
		})
	case ActApply:
		n.state.Apply(a.Records, a.Locs)
	case ActLocate:
		n.state.Located(a.Records, a.Locs)
	case ActCompact:
		n.log.Compact(a.Index)
	case ActPublish:
		n.journal.Publish(a.Pos)
	case ActServe:
		n.logger.Info().Uint64("term", a.Term).Msg("leading: serving clients")
		if a.Passed != 0 {
			n.logger.Warn().Uint64("term", a.Term).Uint64("handed_in", a.Passed).
				Msg("the reservations a leader handed over are not taken: its record is not the last before this term; its jobs are ready")
		}
		if n.store != nil {
			n.store.Lead() // it logs the pauses its freed tubes drop
		}
		if a.Handed != nil && n.cfg.OnServe != nil && n.store != nil {
			n.cfg.OnServe(n.store, a.Handed) // before the round publishes that it serves
		}
		if l, ok := n.log.(migratingLog); ok && n.store != nil {
			// The serving leader's store moves live jobs for the log's
			// compaction; the core serves at most once, so nothing unsets it.
			l.SetMigrator(n.store)
		}
	case ActMembership:
		return n.membership(a)
	case ActControl:
		n.applyControlAct(a)
	case ActRebuild:
		return n.rebuild(a.Term, a.Messages)
	}
	return false
}

// rebuild carries out ActRebuild: this member led term and lost it, and
// its store may hold changes that never commit. It drops them in place
// (doc.go, "Losing leadership"), the node, its transport and whatever
// else the process serves staying up:
//  1. the node stops serving (published at once: the proxy sends new
//     connections elsewhere, the admin API's waits answer 503); once
//     the log has made its last write durable, the answers that write
//     held go to their peers (afterDurable: the vote it granted as it
//     stepped down), whatever the steps below are doing then;
//  2. CloseClients closes every client of the store: their reservations
//     go back to ready, their held replies are never sent;
//  3. the journal drops what it gathered and the replies waiting on it;
//  4. the log stops migrating (it asks the leader, as a follower does),
//     a rewrite for the members' compaction ends, and the log makes durable
//     what it was given, so that the core made next reads only what this
//     member has written;
//  5. a new core is made on the log, as at start: its first actions
//     empty the store and fill it again from the log's head and committed
//     entries (ActRestore, ActApply), and it follows.
//
// It reports whether the member stopped: Close came, or the clients did
// not close (the store cannot be rebuilt under them).
func (n *Node) rebuild(term uint64, afterDurable []*pb.Message) bool {
	start := time.Now()
	n.logger.Warn().Uint64("led_term", term).Uint64("term", n.core.Status().GetTerm()).
		Msg("lost the leadership it served: its store may hold changes that never commit; rebuilding it from the log")
	n.publish(false)
	if len(afterDurable) > 0 {
		// As soon as the log holds the write they answer: the vote is
		// awaited by a campaign that lasts an election timeout, and the
		// clients need not wait for the disk to close (nor stay open
		// while it is stuck).
		n.log.OnDurable(func() { n.host.transport.send(n.group, afterDurable) })
	}
	if n.cfg.CloseClients != nil {
		ctx, cancel := context.WithTimeout(context.Background(), rebuildGrace)
		err := n.cfg.CloseClients(ctx)
		cancel()
		if err != nil {
			n.fail(fmt.Errorf("replication: closing the clients before a rebuild: %w", err), "the member cannot rebuild its store; stopping")
			return true
		}
	}
	n.journal.reset()
	n.follow()
	n.rewrites.Wait() // nothing rewrites the store under its rebuild
	if !n.logDurable() {
		return true
	}
	// The book as the old core knew it: the initial members, or the
	// log's once a change was applied (StartNode's rule), with every
	// change applied since.
	core, err := NewCore(n.coreConfig(n.core.Book(), n.core.seq))
	if err != nil {
		n.fail(fmt.Errorf("replication: rebuilding from the log: %w", err), "the member cannot rebuild its store; stopping")
		return true
	}
	n.core, n.restores = core, 0
	clear(n.tickAt)
	n.noteTick(time.Now())
	n.mu.Lock()
	n.rebuilds++
	n.rebuildingNow = true
	n.mu.Unlock()
	n.rebuildTarget = core.Status().GetCommit()
	n.rebuilding = start
	n.logger.Info().Dur("took", time.Since(start)).Uint64("commit", n.rebuildTarget).
		Msg("clients closed and the log durable: the store is rebuilt from the log")
	return false
}

// logDurable waits until the log has made durable what it was given; it
// reports false if the node stopped first.
func (n *Node) logDurable() bool {
	durable := make(chan struct{})
	n.log.OnDurable(func() { close(durable) })
	select {
	case <-durable:
		return true
	case <-n.stop:
		return false
	}
}

// rebuilt notes, once the store rebuilt after a lost leadership has
// applied everything the log held committed, that the member follows
// again: logged, with how long it took since the loss (Stats.LastRebuild).
func (n *Node) rebuilt() {
	if n.rebuilding.IsZero() || n.core.Applied() < n.rebuildTarget {
		return
	}
	took := time.Since(n.rebuilding)
	n.rebuilding = time.Time{}
	n.mu.Lock()
	n.lastRebuild, n.rebuildingNow = took, false
	n.mu.Unlock()
	n.logger.Info().Dur("took", took).Uint64("applied", n.core.Applied()).
		Msg("rebuilt from the log: following again")
}

// restore carries out ActRestore: the store is emptied in place and
// filled from the log's head, read back a frame at a time (Log.ReadHead),
// at start or once an installed snapshot is durable. A store that refuses
// to be emptied (a client holds a reservation, which a member that does
// not serve never has) even once its clients are closed again
// (resetStore), or a head that cannot be read, stops the member:
// serving on from the old jobs, or from part of the new, would be wrong.
// It reports whether the member stopped.
func (n *Node) restore(a Action) bool {
	start := time.Now()
	if err := n.resetStore(); err != nil {
		n.fail(fmt.Errorf("replication: cannot restore the store: %w", err), "the member cannot go on; stopping")
		return true
	}
	records := 0
	err := n.log.ReadHead(func(recs []wal.Record, locs []wal.Loc) error {
		n.state.Apply(recs, locs)
		records += len(recs)
		return nil
	})
	if err != nil {
		n.fail(fmt.Errorf("replication: the log's head, as of %d: %w", a.Index, err), "the member cannot go on; stopping")
		return true
	}
	if n.store != nil {
		n.store.SetPauses(n.Tubes().Paused) // the tubes emptied took theirs with them
	}
	if n.restores++; n.restores > 1 {
		n.logger.Info().Uint64("index", a.Index).Int("records", records).Dur("took", time.Since(start)).
			Msg("installed a snapshot")
	}
	return false
}

// resetStore empties the store for a restore. One still held by a client
// (store.ErrClientsHold) has its clients closed again (CloseClients), up
// to resetTries times, before the member gives up: a rebuild closed them
// as the leadership was lost, yet once, in CI's fault rounds under heavy
// load, a reservation was there when the restore came, and the member
// stopped (a member's group 0 skipped its router's owner clients while
// its engine was not made yet: internal/member's closeClients, fixed).
// A holder whose close is on its way is waited out, a pause before each
// close again (the router's Detach waits for the closes of its owner
// clients under way since then too); the error names the tube and a
// holder (an owner client: its member, session, group, whether it was
// closed). A member that stops loses every group it holds, where a
// second close costs a moment.
func (n *Node) resetStore() error {
	err := n.state.Reset()
	for try := 0; try < resetTries && errors.Is(err, store.ErrClientsHold) && n.cfg.CloseClients != nil; try++ {
		n.logger.Warn().Err(err).Int("try", try+1).
			Msg("the store is held by a client after its clients closed: closing them again")
		select {
		case <-time.After(resetPause << try): // a close on its way lands
		case <-n.stop:
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), rebuildGrace)
		cerr := n.cfg.CloseClients(ctx)
		cancel()
		if cerr != nil {
			return fmt.Errorf("%w (closing the clients again: %v)", err, cerr)
		}
		err = n.state.Reset()
	}
	return err
}

// resetTries bounds resetStore's closes of the clients after the first;
// resetPause, doubled each time, is the wait before each (0.7 s in all).
const (
	resetTries = 3
	resetPause = 100 * time.Millisecond
)

// fail stops the member on its own with err (Err), logging msg once, at
// error.
func (n *Node) fail(err error, msg string) {
	n.lost = err
	n.stopped = true
	n.mu.Lock()
	n.err = err
	n.mu.Unlock()
	n.logger.Error().Err(err).Msg(msg)
}

// publish makes the round's outcome visible to other goroutines; on a
// tick, the leader's view of its followers too, and its lease renewed.
func (n *Node) publish(tick bool) {
	bs := n.core.Status()
	proposals, bytes := n.core.Proposed()
	serving := n.core.Serving()
	switch {
	case !serving:
		n.leaseUntil.Store(0)
	case tick || n.leaseUntil.Load() == 0:
		// The core counted a majority heard as of this tick (or has just
		// begun to serve). Only a tick renews it: a round run first after
		// a stall, before the tick that finds the majority gone, must not.
		n.leaseUntil.Store(n.leaseEnd())
	}
	lead := bs.Lead
	if n.stopped {
		lead = 0
	}
	var peers map[uint64]PeerProgress
	var last uint64
	if tick && bs.RaftState == raft.StateLeader {
		peers = make(map[uint64]PeerProgress, len(n.byID))
		n.core.Progress(func(id uint64, p PeerProgress) { peers[id] = p })
		last, _ = n.log.LastIndex()
	}

	n.caughtUp = n.caughtUp || n.core.CaughtUp()

	n.mu.Lock()
	defer n.mu.Unlock()
	n.pub = published{term: bs.GetTerm(), commit: bs.GetCommit(), applied: n.core.Applied(), lead: lead,
		state: bs.RaftState, serving: serving, stopped: n.stopped, caughtUp: n.caughtUp, proposals: proposals, bytes: bytes}
	if tick {
		n.peers, n.lastIndex = peers, last
	}
	// The same leader in a later term is a new leader: it lost the
	// leadership between (its store rebuilt, what it had taken gone), if
	// this member never saw it without one.
	reelected := lead != 0 && bs.GetTerm() != n.leaderInfo.Term
	if lead == n.lead && serving == n.serving && !reelected {
		// A leader whose client address was not known yet (its hello
		// not read) gets it as soon as it is.
		if n.leaderInfo.Name != "" && n.leaderInfo.Client == "" && lead != n.self.ID {
			if c := n.peerClient(lead); c != nil {
				n.leaderInfo.Client = *c
				close(n.leaderChanged)
				n.leaderChanged = make(chan struct{})
			}
		}
		return
	}
	if lead != 0 && (lead != n.lead || reelected) {
		n.leaderChanges++
		n.logger.Info().Str("leader", n.nameOf(lead)).Uint64("term", bs.GetTerm()).Msg("a new leader")
	}
	n.lead, n.serving = lead, serving
	n.leaderInfo = LeaderInfo{Term: bs.GetTerm(), Serving: serving}
	if name := n.nameOf(lead); name != "" {
		n.leaderInfo.Name, n.leaderInfo.ID = name, lead
		if lead == n.self.ID {
			n.leaderInfo.Client = n.cfg.ClientAddr
		} else if c := n.peerClient(lead); c != nil {
			n.leaderInfo.Client = *c
		}
	}
	close(n.leaderChanged)
	n.leaderChanged = make(chan struct{})
}

// The transport's side, on its goroutines.

// deliver hands a peer's message to the node goroutine without waiting:
// false, and the message is dropped, when its inbox is full (the node is
// busy: a long round, a rebuild) or the node has stopped. Raft sends
// again what matters. Waiting would stall the peer's connection, which
// carries every group's messages: one busy group would cut the others
// off from that peer, and their leaders would lose their quorum.
func (n *Node) deliver(m *pb.Message) bool {
	select {
	case <-n.halted:
		return false
	default:
	}
	select {
	case n.inbox <- m:
		return true
	default:
		return false
	}
}

// openSnapshot opens the records of a snapshot this member sends.
func (n *Node) openSnapshot(m *pb.Message) (SnapshotReader, error) {
	return n.log.OpenSnapshot(m.GetSnapshot().GetMetadata())
}

// receiveSnapshot says whether this member takes a peer's snapshot, before
// any of its records is read, and opens the log's spool for them. Raft
// would ignore one from an older term, or one at or below the commit
// index: it is refused at once.
func (n *Node) receiveSnapshot(ctx context.Context, m *pb.Message) (SnapshotSink, error) {
	md := m.GetSnapshot().GetMetadata()
	n.mu.Lock()
	term, commit, stopped := n.pub.term, n.pub.commit, n.pub.stopped
	n.mu.Unlock()
	switch {
	case stopped:
		return nil, errStopped
	case m.GetTerm() < term:
		return nil, fmt.Errorf("replication: a snapshot of term %d; this member is at term %d", m.GetTerm(), term)
	case md.GetIndex() <= commit:
		return nil, fmt.Errorf("replication: snapshot %d; this member has committed %d", md.GetIndex(), commit)
	}
	return n.log.ReceiveSnapshot(ctx, md)
}

// deliverSnapshot hands a peer's snapshot, received whole, to the node
// goroutine and returns the core's verdict on it, once the round it
// started is carried out.
func (n *Node) deliverSnapshot(m *pb.Message) error {
	in := snapshotIn{m: m, verdict: make(chan error, 1)}
	select {
	case n.snapIn <- in:
	case <-n.halted:
		return errStopped
	}
	select {
	case err := <-in.verdict:
		return err
	case <-n.halted:
		return errStopped
	}
}

func (n *Node) noteUnreachable(id uint64) {
	n.mailMu.Lock()
	n.unreachable[id] = struct{}{}
	n.mailMu.Unlock()
	n.signal()
}

func (n *Node) noteSnapshotSent(id uint64, ok bool) {
	n.mailMu.Lock()
	n.snapReports = append(n.snapReports, snapshotReport{id, ok})
	n.mailMu.Unlock()
	n.signal()
}

// signal wakes the node goroutine; it never blocks (the journal calls it
// under a tube lock).
func (n *Node) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// What operations read.

// Status is what GET /cluster shows.
type Status struct {
	Node    string `json:"node"`
	Leader  string `json:"leader"` // a member's name, or "" when none is known
	Term    uint64 `json:"term"`
	State   string `json:"state"`   // leader, follower, candidate, pre-candidate, stopped
	Serving bool   `json:"serving"` // this member leads and takes commands
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	// Version is the cluster version (Host.Version): 2, or 3 once the
	// cluster is finalized.
	Version int `json:"cluster_version"`
	// Members are the members in the address book, by name.
	Members []MemberStatus `json:"members"`
	// Groups are the Raft groups this member runs (Host.Groups); in a
	// cluster of several groups, every group, those it does not run as
	// their leaders reported them (internal/member's fleetCluster).
	Groups []GroupStatus `json:"groups"`
	// Jobs are this member's own store's (ready, reserved, delayed and
	// buried), counted. Digest sums them (Node.Digest): only GET
	// /cluster?digest=1 fills it, since it walks every job, which a page
	// polled every few seconds should not pay.
	Jobs   int    `json:"jobs"`
	Digest string `json:"digest,omitempty"`
	// Placed are the tubes moves placed, by name, and their groups: they
	// live there, not where their names' hash says (a cluster of several
	// groups: internal/member's fleetCluster).
	Placed map[string]uint16 `json:"placed,omitempty"`
	// Prefixes are the prefixes placed (sproutctl tubes place), and
	// their groups: the tubes whose names start with one live there, a
	// tube placed by name or a longer prefix's excepted.
	Prefixes map[string]uint16 `json:"prefixes,omitempty"`
}

// MemberStatus is one member as this one sees it.
type MemberStatus struct {
	Name    string `json:"name"`
	ID      string `json:"id"`      // the Raft id, in hex
	Address string `json:"address"` // where members reach it
	// Role is voter or learner (a member added, not yet promoted); "" for
	// one this member's membership does not hold yet.
	Role string `json:"role"`
	// Client is its client address (-l/-p), as it told this member.
	Client string `json:"client,omitempty"`
	// HTTP is its --http address, as it told this member.
	HTTP string `json:"http,omitempty"`
	// Connected: this member's connection to it is open (always true for
	// this member itself).
	Connected bool `json:"connected"`
	// Protocol is the members' protocol that connection speaks (the
	// highest both speak); for this member itself, the highest it speaks.
	// 0 while it is not connected.
	Protocol int `json:"protocol,omitempty"`
	// Match is, on the leader only, the last entry the member is known to
	// hold (the leader's own last entry for itself), as of the last tick.
	Match *uint64 `json:"match,omitempty"`
	// Draining: the member is being removed, its groups' replicas moving
	// away first (Node.SetDraining).
	Draining bool `json:"draining,omitempty"`
	// Cordoned: the member leads no group (Node.SetCordoned).
	Cordoned bool `json:"cordoned,omitempty"`
}

// Status reports the member's view of the cluster. It never waits for
// the node goroutine.
func (n *Node) Status() Status {
	n.mu.Lock()
	pub, peers, last := n.pub, n.peers, n.lastIndex
	byID, conf, draining, cordoned := n.byID, n.conf, n.draining, n.cordoned
	book := n.bookLocked()
	n.mu.Unlock()
	st := Status{Node: n.self.Name, Term: pub.term, State: stateName(pub.state), Serving: pub.serving,
		Commit: pub.commit, Applied: pub.applied, Version: n.host.Version()}
	if pub.stopped {
		st.State = "stopped"
	}
	if m, ok := byID[pub.lead]; ok {
		st.Leader = m.Name
	}
	for _, m := range book {
		ms := MemberStatus{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), Address: m.Addr, Role: role(conf, m.ID),
			Draining: slices.Contains(draining, m.ID), Cordoned: slices.Contains(cordoned, m.ID)}
		if m.ID == n.self.ID {
			ms.Client, ms.HTTP, ms.Connected = n.cfg.ClientAddr, n.cfg.HTTPAddr, true
			ms.Protocol = int(n.host.transport.maxProtocol())
			if peers != nil {
				ms.Match = &last
			}
		} else if p := n.host.transport.peer(m.ID); p != nil {
			if c := p.client.Load(); c != nil {
				ms.Client = *c
			}
			if h := p.http.Load(); h != nil {
				ms.HTTP = *h
			}
			ms.Connected = p.up.Load()
			ms.Protocol = int(p.protocol.Load())
			if p, ok := peers[m.ID]; ok {
				ms.Match = &p.Match
			}
		}
		st.Members = append(st.Members, ms)
	}
	st.Groups = n.host.Groups()
	if n.store != nil {
		st.Jobs = int(n.store.Stats().Jobs())
	}
	return st
}

func stateName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateFollower:
		return "follower"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	}
	return s.String()
}

// Ready reports what /readyz says of this group's replica: it runs, it
// knows a leader (itself, once it serves), and it has caught up with the
// leader once (HasCaughtUp). A member restarted during a rolling update is
// therefore not ready while it is still behind, and the next member is
// not taken meanwhile (deploy/README.md, "Rolling out one pod at a
// time"). Catching up is latched: once caught up, a follower stays
// ready as the leader commits on (as it does while it lags by the
// entries in flight), and only a lost leader or a stop makes it not
// ready again (HasCaughtUp).
func (n *Node) Ready() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.pub
	return !p.stopped && p.lead != 0 && p.caughtUp && (p.lead != n.self.ID || p.serving)
}

// HasCaughtUp reports whether this replica has caught up with its
// group's leader once since the node started: it applied every entry the
// leader had committed when this member, knowing it, asked (raft's
// ReadIndex), or it served as the leader itself (Core.CaughtUp). Latched.
// As of the node goroutine's last round.
func (n *Node) HasCaughtUp() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pub.caughtUp
}

// Replayed reports whether the member has applied what its log said was
// committed when it started (Ready without a leader).
func (n *Node) Replayed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pub.applied >= n.startCommit
}

// LeaderInfo is the leader as this member knows it.
type LeaderInfo struct {
	// Name is the leader's name; "" when none is known.
	Name string
	// ID is the leader's Raft id (0 when none is known): what the
	// commands stream addresses it by (Host.SendItems).
	ID uint64
	// Client is its client address, as it told this member: where a
	// proxy dials.
	Client string
	Term   uint64
	// Serving: this member is the leader and takes commands.
	Serving bool
}

// Leased reports whether this member serves and its node has confirmed
// its lease (a majority heard within an election timeout, Core.Tick) in
// the last half election timeout: false as soon as the node's goroutine
// stalls (a SIGSTOP, a frozen VM) for longer, before it can take the tick
// that finds its leadership gone. What engine.Config.Leased asks before a
// job is handed out. Half an election timeout: the others elect no
// leader before an election timeout has passed since they last heard
// from this one, which a renewing tick found at most a tick ago.
func (n *Node) Leased() bool {
	until := n.leaseUntil.Load()
	return until != 0 && int64(time.Since(n.born)) < until
}

func (n *Node) leaseGrace() time.Duration {
	return n.cfg.Tick * time.Duration(n.cfg.ElectionTick) / 2
}

// leaseMargin is the ticks a lease keeps short of an election timeout
// from the heartbeat round a majority last answered (Core.LeaseAgo): the
// followers' ticks may fall up to a tick before the leader's, and one
// more is kept to spare (it was an answer's own delay, counted when
// answers were credited as they came).
const leaseMargin = 2

// takenTick is when the core took its tick of number n, since the node
// was born.
type takenTick struct {
	n  uint64
	at time.Duration
}

// noteTick notes that the core's last tick (or, at its making, its tick
// 0) was taken at now.
func (n *Node) noteTick(now time.Time) {
	if n.tickAt == nil {
		n.tickAt = make([]takenTick, n.cfg.ElectionTick+1)
	}
	t := n.core.Ticks()
	n.tickAt[t%uint64(len(n.tickAt))] = takenTick{n: t, at: now.Sub(n.born)}
}

// takenAt is when the core took its tick t, if it is among the last
// noted.
func (n *Node) takenAt(t uint64) (time.Duration, bool) {
	if len(n.tickAt) == 0 {
		return 0, false
	}
	e := n.tickAt[t%uint64(len(n.tickAt))]
	return e.at, e.n == t
}

// leaseEnd is the time since born until which the serving leader's lease
// runs, renewed as of its last tick: half an election timeout from that
// tick (leaseGrace), but never past an election timeout less leaseMargin
// from the tick of the heartbeat round a majority last answered
// (Core.LeaseAgo), when the others may elect another leader; 0 (not
// leased) if that tick is not known. Both
// run from when the ticks were taken, not from now: a round that ends
// long after its tick (a goroutine starved or paused between the two,
// a slow action) renewed it from its end, up to half an election timeout
// after the others could serve (TestLeaseRunsFromTheTick); and a tick
// taken late counts as one tick, so ticks counted since the majority was
// heard may fall a tick short of the time that passed. Renewed from the
// tick alone, a tick that found the majority heard nine ticks before gave
// half a timeout more (found by a reviewing helper).
func (n *Node) leaseEnd() int64 {
	ticks := n.core.Ticks()
	ago := n.core.LeaseAgo()
	if ago > ticks || ago+leaseMargin >= uint64(n.cfg.ElectionTick) {
		return 0
	}
	heard, ok := n.takenAt(ticks - ago)
	last, ok2 := n.takenAt(ticks)
	if !ok || !ok2 {
		return 0
	}
	return int64(min(last+n.leaseGrace(), heard+time.Duration(n.cfg.ElectionTick-leaseMargin)*n.cfg.Tick))
}

// Leader returns the leader as this member knows it, and a channel
// closed when that changes (a new leader, none, this member starting or
// stopping to serve): what a proxy watches to close its connections to a
// leader that is no more.
func (n *Node) Leader() (LeaderInfo, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaderInfo, n.leaderChanged
}

// Stats are the member's figures for /metrics, read at scrape time.
type Stats struct {
	Term, Commit, Applied uint64
	// Serving: this member leads and takes commands.
	Serving bool
	// LeaderChanges counts the times this member learned of a new leader.
	LeaderChanges uint64
	// Proposals this member made as leader, and their bytes; their sizes
	// go to the Observer as they happen.
	Proposals, ProposedBytes uint64
	// FollowerLag is, on the leader, how many entries each other member
	// is behind its log, by name, as of the last tick; nil elsewhere.
	FollowerLag map[string]uint64
	// MessagesRefused counts peers' messages whose records did not decode.
	MessagesRefused uint64
	// MembershipChanges counts membership changes applied (each
	// addition, promotion and removal; not those a restart finds applied).
	MembershipChanges uint64
	// Rebuilds counts the leaderships this member lost while serving, each
	// followed by its store rebuilt in place from its log; LastRebuild is
	// how long the last finished one took, from the loss to applying what
	// the log held committed (0 before the first); Rebuilding is true from
	// a rebuild's start (Rebuilds counts it) until then.
	Rebuilds    uint64
	LastRebuild time.Duration
	Rebuilding  bool
	// MigrateAsked counts the jobs this member asked its groups' leaders
	// to rewrite, out of the segments it would remove; MigrateRewritten,
	// those it rewrote as leader on its members' asks (migrate.go).
	MigrateAsked, MigrateRewritten uint64
	// Stalls counts the ticks that found over half an election timeout
	// missed (the group's goroutine starved of CPU), and SlowRounds the
	// rounds of its actions that took as long (it answered no peer
	// meanwhile): either can cost a leader its leadership.
	Stalls, SlowRounds uint64
	Transport          TransportStats
	// Groups are the figures above (but Transport, the member's, and
	// Groups) of each Raft group the member runs, by id: group 0, the
	// node's own, and the shard groups it holds a replica of.
	Groups []GroupStats
}

// GroupStats are one group's figures on this member.
type GroupStats struct {
	Group int
	Stats
}

// Stats reads the member's figures, its group's and its host's.
func (n *Node) Stats() Stats {
	s := n.groupStats()
	s.Transport = n.host.transport.stats()
	s.Groups = n.host.groupStats()
	return s
}

// groupStats are n's own figures, without the host's.
func (n *Node) groupStats() Stats {
	n.mu.Lock()
	s := Stats{Term: n.pub.term, Commit: n.pub.commit, Applied: n.pub.applied, Serving: n.pub.serving,
		LeaderChanges: n.leaderChanges, Proposals: n.pub.proposals, ProposedBytes: n.pub.bytes,
		MembershipChanges: n.membersChanged, Rebuilds: n.rebuilds, LastRebuild: n.lastRebuild, Rebuilding: n.rebuildingNow,
		MigrateAsked: n.askedIDs, MigrateRewritten: n.rewrittenIDs}
	if n.peers != nil {
		s.FollowerLag = make(map[string]uint64, len(n.peers))
		for id, p := range n.peers {
			s.FollowerLag[n.byID[id].Name] = n.lastIndex - min(p.Match, n.lastIndex)
		}
	}
	n.mu.Unlock()
	s.MessagesRefused = n.refusedSteps.Load()
	s.Stalls, s.SlowRounds = n.stalls.Load(), n.slowRounds.Load()
	return s
}

// raftLogger writes raft's lines to the member's log: its info (its own
// steps, which the node reports itself) at debug.
type raftLogger struct{ log zerolog.Logger }

func (l raftLogger) line(e *zerolog.Event, v ...any) {
	if e != nil {
		e.Str("from", "raft").Msg(fmt.Sprint(v...))
	}
}

func (l raftLogger) linef(e *zerolog.Event, format string, v ...any) {
	if e != nil {
		e.Str("from", "raft").Msg(fmt.Sprintf(format, v...))
	}
}

func (l raftLogger) Debug(v ...any)                   { l.line(l.log.Debug(), v...) }
func (l raftLogger) Debugf(format string, v ...any)   { l.linef(l.log.Debug(), format, v...) }
func (l raftLogger) Info(v ...any)                    { l.line(l.log.Debug(), v...) }
func (l raftLogger) Infof(format string, v ...any)    { l.linef(l.log.Debug(), format, v...) }
func (l raftLogger) Warning(v ...any)                 { l.line(l.log.Warn(), v...) }
func (l raftLogger) Warningf(format string, v ...any) { l.linef(l.log.Warn(), format, v...) }
func (l raftLogger) Error(v ...any)                   { l.line(l.log.Error(), v...) }
func (l raftLogger) Errorf(format string, v ...any)   { l.linef(l.log.Error(), format, v...) }

// Fatal and Panic stop the process by panicking, as raft's own logger's
// Panic does: raft calls them on a broken invariant.
func (l raftLogger) Fatal(v ...any)                 { l.Panic(v...) }
func (l raftLogger) Fatalf(format string, v ...any) { l.Panicf(format, v...) }
func (l raftLogger) Panic(v ...any) {
	l.line(l.log.Error(), v...)
	panic(fmt.Sprint(v...))
}
func (l raftLogger) Panicf(format string, v ...any) {
	l.linef(l.log.Error(), format, v...)
	panic(fmt.Sprintf(format, v...))
}
