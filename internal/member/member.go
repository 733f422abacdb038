package member

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
	"github.com/sproutmq/sprout/store/wal/cbinlog"
)

// Defaults and bounds of the shutdown.
const (
	// DefaultShutdownTimeout is how long Shutdown waits for workers to
	// finish their jobs when Config.ShutdownTimeout is 0: under
	// Kubernetes' default 30 s grace period, leaving time to flush the log.
	DefaultShutdownTimeout = 25 * time.Second
	// heldRepliesGrace bounds how long the engine's stop waits for the
	// log to make held replies durable before connections close.
	heldRepliesGrace = 5 * time.Second
	// httpShutdownGrace bounds how long stopping the side port waits for
	// the requests in flight (a scrape, a profile).
	httpShutdownGrace = 5 * time.Second
	// handOversGrace bounds how long a graceful shutdown goes on handing
	// the groups it leads over (each may take an election timeout when
	// its transfer does not happen); the rest go to elections.
	handOversGrace = 3 * time.Second
	// failGrace bounds how long a member that cannot go on waits for the
	// engine to stop.
	failGrace = 5 * time.Second
)

// Config is a resolved configuration: every default filled in
// (cmd/sprout resolves flags into it).
type Config struct {
	// Engine is the engine's configuration, resolved
	// (engine.Config.Resolve). Its Listener, if set, is the clients'
	// socket (one systemd handed over, or bound before privileges were
	// dropped); Start sets its Route and Metrics.
	Engine engine.Config
	// WALDir is -b: the log's directory; "" keeps jobs in memory (a
	// single node only). WAL is the log's settings; Start sets its
	// Logger, Importer and Observer.
	WALDir string
	WAL    wal.Options
	// HTTP is the side port; its Addr "" for none.
	HTTP HTTPConfig
	// Cluster is the member to run, checked (NodeConfig.Validate); nil
	// for a single node. Start fills in its wiring: addresses, log,
	// logger, observer, CloseClients.
	Cluster *replication.NodeConfig
	// Groups and Replicas are the shard groups and each one's replicas
	// when the cluster is formed (--cluster-groups, --cluster-replicas;
	// docs/design/shards.md 1.3): 0 is the cluster's, as the member's log
	// holds it, or 1 group for a new one, and 3 replicas.
	Groups, Replicas int
	// ShutdownTimeout is how long Shutdown waits for workers to finish
	// their jobs; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Certs, if set, are the certificates the member serves with, read
	// from files (internal/certs): the side port shows their figures.
	// Engine.TLS, HTTP.TLS and Cluster.TLSSource take them from it.
	Certs  ops.Certs
	Logger zerolog.Logger
}

// HTTPConfig is the side port's: metrics, probes, pprof, /cluster, the
// admin API and the web console.
type HTTPConfig struct {
	Addr         string // host:port; "" for no side port
	Pprof        bool   // mount net/http/pprof
	MetricsTubes int    // tubes with series of their own; 0 for ops' default
	AdminToken   string // "" makes the admin API read-only
	// TLS, if set, serves the side port over TLS (--http-tls-cert).
	TLS *tls.Config
}

// clusterLogRetain is how many applied entries a member's log keeps below
// what it may drop, so that a follower a little behind gets entries
// rather than a snapshot.
const clusterLogRetain = 1024

// StartError is Start's failure: which step failed, and why. Err wraps
// the cause (segment.ErrLocked, replication.ErrRemoved, a listener's
// *net.OpError, ...).
type StartError struct {
	Step Step
	Err  error
}

// Step names a step of Start.
type Step string

const (
	StepHTTP   Step = "http"   // the side port's listener
	StepListen Step = "listen" // the clients' listener
	StepLog    Step = "log"    // opening or recovering the log
	StepNode   Step = "node"   // starting the cluster node
	StepEngine Step = "engine" // starting the engine
)

func (e *StartError) Error() string { return fmt.Sprintf("member: %s: %v", e.Step, e.Err) }
func (e *StartError) Unwrap() error { return e.Err }

// Member is a running Sprout. Its parts are set by Start and immutable
// afterwards; Shutdown stops them.
type Member struct {
	cfg     Config         // immutable after Start
	log     zerolog.Logger // immutable
	metrics *ops.Metrics   // immutable; nil without a side port

	wal        *wal.Log            // a single node's log; nil in memory or in a cluster
	clusterLog *replication.WALLog // a cluster member's log; nil for a single node
	node       *replication.Node   // nil for a single node
	shards     *shards             // the shard groups beyond group 0; nil for a single node
	proxy      *replication.Proxy  // nil for a single node
	sessions   *router.Router      // nil for a single node: the cluster member's sessions; set under mu (sessionsMade)
	routerMade chan struct{}       // closed once sessions is made (setSessions); made before group 0's node starts
	store      *store.Store
	engine     *engine.Server
	httpLn     net.Listener // nil without a side port
	http       *ops.Server  // nil without a side port
	api        *admin.API   // nil without a side port

	engineDone chan struct{} // closed when the engine's Run has returned
	engineErr  error         // Run's result, once engineDone is closed

	// engineUp is the engine once made, for the node's and the proxy's
	// callbacks, which can run before Start returns. Guarded by mu.
	mu       sync.Mutex
	engineUp *engine.Server
	err      error // guarded by mu: why the member stopped on its own

	stopOnce sync.Once
	// foreignOnce stops a member that runs fewer groups than its cluster
	// once (startRouter), through foreign (capacity 1), which watch
	// reads once the member has started.
	foreignOnce sync.Once
	foreign     chan error
	foreignWait atomic.Bool // awaitForeign is waiting
	// moving: the group whose replica move (or, group 0, a drained
	// member's removal) is under way here, one at a time (makeMove,
	// removeDrained, serveReplicaMove).
	moving moveSlot
	// replicasReady: every replica of a group but 0 here has caught up with
	// its leader once (replicasCaughtUp): latched.
	replicasReady atomic.Bool
	// drainHeld names the drained member whose removal the quorum check
	// refused last (removeDrained), so that a refusal asked again every
	// look is logged once at warn, not every second.
	drainHeld atomic.Pointer[string]
	// planner is what this member, leading group 0, keeps of the
	// replica moves it plans (planMoves; the balance loop's alone).
	planner movePlanner
	// movesMade counts the planned replica moves this member began, by
	// who planned them (makeMove): sprout_member_replica_moves_total.
	movesMade [numPlanners]atomic.Uint64
	// tubeMoves are the moves of tubes this member drives (tubemoves.go).
	tubeMoves tubeMoving
	// endingAdopts: an endPlacedAdopts pass runs.
	endingAdopts atomic.Bool
	// settling: a settleMoves pass runs. settleSeen is when it first saw
	// each move group 0 has not settled (its passes' alone).
	settling   atomic.Bool
	settleSeen map[uint64]time.Time
	// learnersSeen is how each learner this member still sees, leading
	// its group, has caught up since it first saw it (dropStaleLearners;
	// the balance loop's alone). learnerTimeout, set by tests only, is how
	// long a learner may show no progress: 0 is staleLearner.
	learnersSeen   map[groupMember]*catchUp
	learnerTimeout atomic.Int64
	// stagesSeen is when this member, leading their group, first saw each
	// move's copy taken ahead of its freeze that no adopt here took in and
	// group 0 has not decided (resolveStages; the balance loop's alone).
	stagesSeen map[uint64]time.Time
	// driverTerms is, by source group, the latest term of its leadership
	// a move's driver told this member's adopts (fenceDriver).
	driverTermsMu sync.Mutex
	driverTerms   map[uint16]uint64 // guarded by driverTermsMu
	// stageParts is when this member, leading their destination, last
	// took a part of each move's copy (time.Time by move): a copy longer
	// than stageLost goes on as long as its parts come.
	stageParts sync.Map
	// keepLostMoves, set by tests only, has the balancer leave the moves
	// of tubes whose driver was lost as they are (resolveTubeMoves): a
	// test that makes a move's steps by hand takes longer than its tick.
	keepLostMoves atomic.Bool
	// stepTimeoutOverride, set by tests only, is stepTimeout's bound in
	// place of tubeMoveTimeout (ns).
	stepTimeoutOverride atomic.Int64
	// afterStage, set by tests only, is called on a move's driver between
	// its copy of the tube ahead of the freeze and the freeze.
	afterStage atomic.Pointer[func()]
	// stageLostAfter, set by tests only, is resolveStages' wait: 0 is
	// stageLost.
	stageLostAfter atomic.Int64
	// stageChunkBytes, set by tests only, is stageTube's chunk: 0 is
	// stageChunk.
	stageChunkBytes atomic.Int64
	// afterImport, set by tests only, is called on a move's destination
	// leader between its import of the tube's jobs and its wait for the
	// log: where a test takes that leadership away.
	afterImport atomic.Pointer[func(g uint16)]
	// beforePrefixStep, set by tests only, is called on a group's leader
	// as it begins its step of a prefix placement.
	beforePrefixStep atomic.Pointer[func(g uint16, step string)]
	// beforeRecord and beforeTransfer, set by tests only, are called as a
	// handover of group g logs its sessions' reservations, and as it asks
	// raft for the transfer.
	beforeRecord, beforeTransfer atomic.Pointer[func(g uint16)]
	// placing is the prefix placement this member drives (placements.go),
	// and prefixesSeen the placements its resolver saw undriven at its
	// last tick (the balance loop's alone).
	placing      placing
	prefixesSeen map[string]uint64
	// growing is the growth of the groups this member drives, and growMu
	// orders the starts of grown groups' replicas here (growth.go).
	growing growing
	growMu  sync.Mutex
	// comebacks are the members that came back lately (balanceLeaders
	// looks), given no leadership for receiverSettle.
	comebacks comebacks
	// handingOver lets one leadership handover run at a time here
	// (handover.go): each stops and starts its group's commands.
	handingOver sync.Mutex
	// forwarding carries the calls this member makes to groups' leaders'
	// side ports (forward, callLeader); a cluster member's, made as its
	// node starts (startNode), before the balancer's first call.
	forwarding *http.Transport
	done       chan struct{} // closed once every part has stopped
}

// Start starts a member as cfg says (doc.go, "Starting"). On failure it
// stops what it started and returns a *StartError.
func Start(cfg Config) (*Member, error) {
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	m := &Member{cfg: cfg, log: cfg.Logger, engineDone: make(chan struct{}), done: make(chan struct{}), foreign: make(chan error, 1)}
	if err := m.start(); err != nil {
		m.closeParts()
		return nil, err
	}
	return m, nil
}

// start is Start's steps; on failure the caller closes what was made.
func (m *Member) start() error {
	if m.cfg.HTTP.Addr != "" {
		m.metrics = ops.NewMetrics()
		m.cfg.Engine.Metrics = m.metrics
		m.cfg.WAL.Observer = m.metrics
		ln, err := net.Listen("tcp", m.cfg.HTTP.Addr)
		if err != nil {
			return &StartError{StepHTTP, err}
		}
		m.httpLn = ln
	}
	if m.cfg.Cluster != nil {
		if err := m.startNode(); err != nil {
			return err
		}
	} else if err := m.openStore(); err != nil {
		return err
	}
	m.engine = engine.New(m.cfg.Engine, m.store)
	m.mu.Lock()
	m.engineUp = m.engine
	m.mu.Unlock()
	go func() {
		defer close(m.engineDone)
		m.engineErr = m.engine.Run()
	}()
	select {
	case <-m.engine.Ready():
	case <-m.engineDone:
		return &StartError{StepEngine, m.engineErr}
	}
	if m.httpLn != nil {
		h, err := m.router()
		if err != nil {
			return &StartError{StepHTTP, err}
		}
		if m.cfg.HTTP.TLS != nil {
			m.http = ops.ServeTLS(m.httpLn, h, m.cfg.HTTP.TLS, m.metrics, m.log)
		} else {
			m.http = ops.Serve(m.httpLn, h, m.log)
		}
		m.log.Info().Str("address", m.httpLn.Addr().String()).Bool("tls", m.cfg.HTTP.TLS != nil).Bool("pprof", m.cfg.HTTP.Pprof).
			Int("metrics_tubes", m.cfg.HTTP.MetricsTubes).Bool("admin_token", m.cfg.HTTP.AdminToken != "").
			Msg("operations endpoint listening")
	}
	if m.node != nil {
		go m.watch()
	}
	return nil
}

// openStore opens and recovers a single node's log, if it has one, and
// makes the store on it.
func (m *Member) openStore() error {
	if m.cfg.WALDir == "" {
		m.store = store.New(store.Options{})
		return nil
	}
	opened := time.Now()
	m.cfg.WAL.Logger = m.log
	m.cfg.WAL.Importer = cbinlog.Importer{}
	wl, err := wal.Open(m.cfg.WALDir, m.cfg.WAL)
	if err != nil {
		return &StartError{StepLog, err}
	}
	m.wal = wl
	m.store = store.New(store.Options{Log: wl})
	if err := wl.Start(m.store); err != nil {
		return &StartError{StepLog, err}
	}
	g, ls := m.store.Stats(), wl.Stats()
	m.log.Info().Str("dir", m.cfg.WALDir).Str("took", time.Since(opened).Round(time.Millisecond).String()).
		Int64("ready", g.Ready).Int64("delayed", g.Delayed).Int64("buried", g.Buried).
		Uint32("oldest_segment", ls.OldestIndex).Uint32("current_segment", ls.CurrentIndex).
		Int64("disk_bytes", ls.DiskBytes).Msg("write-ahead log recovered")
	return nil
}

// Engine is the member's engine.
func (m *Member) Engine() *engine.Server { return m.engine }

// Store is the member's store, the same for its life.
func (m *Member) Store() *store.Store { return m.store }

// Node is a cluster member's node; nil for a single node.
func (m *Member) Node() *replication.Node { return m.node }

// Addr is the clients' address.
func (m *Member) Addr() net.Addr { return m.engine.Addr() }

// HTTPAddr is the side port's address; nil without one.
func (m *Member) HTTPAddr() net.Addr {
	if m.httpLn == nil {
		return nil
	}
	return m.httpLn.Addr()
}

// Drain makes every put answer DRAINING, as beanstalkd's SIGUSR1 does;
// everything else goes on.
func (m *Member) Drain() {
	m.log.Info().Msg("draining: puts are refused")
	m.engine.SetDraining()
}

// Done is closed once the member has stopped: after Shutdown, or when it
// stopped on its own (Err).
func (m *Member) Done() <-chan struct{} { return m.done }

// Err is why the member stopped on its own: its cluster log is not the
// one the cluster knows (replication.ErrLogLost), or it was removed
// (replication.ErrRemoved). Nil while it runs and after a Shutdown.
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Shutdown stops the member gracefully, in this order:
//  1. the engine takes no new connection, put answers DRAINING and no
//     job is handed out (engine.Server.BeginShutdown; a cluster member's
//     sessions get none from any group either: router.Router.HoldJobs);
//  2. it waits until no job is reserved, for Config.ShutdownTimeout at
//     most, so workers can finish the jobs they hold;
//  3. the engine stops: replies held for the log are sent as the log
//     makes them durable (5 s at most), then every connection closes and
//     their reserved jobs go back to ready;
//  4. a cluster member hands each group it leads to another voter
//     (handOverLeaderships), so that no group waits for an election;
//  5. the side port stops, answering the requests in flight (5 s at
//     most); the admin API's history stops;
//  6. a cluster member's proxy closes the connections it carries, then
//     its node stops (its transport: the peers see it gone);
//  7. the log writes and fsyncs what it was given, and closes;
//  8. the store's timers stop.
//
// When ctx is done every wait above ends at once (a second SIGTERM). It
// returns once every part has stopped; a second call waits for the first.
func (m *Member) Shutdown(ctx context.Context) {
	m.stopOnce.Do(func() { go m.stop(ctx, true) })
	<-m.done
}

// stop carries out Shutdown's steps, the first two and the fourth only
// when graceful.
func (m *Member) stop(ctx context.Context, graceful bool) {
	defer close(m.done)
	if graceful {
		m.engine.BeginShutdown()
		if m.sessions != nil {
			m.sessions.HoldJobs() // the groups other members lead hand out jobs too
		}
		m.log.Info().Str("timeout", m.cfg.ShutdownTimeout.String()).
			Uint64("reserved_jobs", m.engine.Stats().CurrentJobsReserved).
			Msg("shutting down: no new connections or jobs; waiting for workers to finish theirs")
		idle, cancel := context.WithTimeout(ctx, m.cfg.ShutdownTimeout)
		err := m.engine.WaitIdle(idle)
		cancel()
		switch {
		case err == nil:
			m.log.Info().Msg("no job is reserved; stopping")
		case ctx.Err() == nil:
			m.log.Warn().Uint64("reserved_jobs", m.engine.Stats().CurrentJobsReserved).
				Msg("shutdown timeout: stopping; reserved jobs go back to ready")
		default:
			m.log.Warn().Msg("stopping now")
		}
	}
	grace := heldRepliesGrace
	if !graceful {
		grace = failGrace
	}
	held, cancel := context.WithTimeout(ctx, grace)
	if err := m.engine.Stop(held); err != nil && ctx.Err() == nil {
		m.log.Error().Err(err).Msg("stopping the engine")
	}
	cancel()
	<-m.engineDone
	if graceful && m.node != nil && ctx.Err() == nil {
		handing, cancel := context.WithTimeout(ctx, handOversGrace)
		m.handOverLeaderships(handing)
		cancel()
	}
	m.log.Info().Msg("connections closed; flushing the log")
	m.closeParts()
}

// closeParts stops what Start made, after the engine: the side port, the
// proxy and the node, the log, the store (Shutdown's steps 5 to 8). Parts
// never made are skipped, so a failed Start calls it too.
func (m *Member) closeParts() {
	if m.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownGrace)
		if err := m.http.Shutdown(ctx); err != nil {
			m.log.Error().Err(err).Msg("stopping the operations endpoint")
		}
		cancel()
	} else if m.httpLn != nil {
		_ = m.httpLn.Close()
	}
	if m.forwarding != nil {
		m.forwarding.CloseIdleConnections()
	}
	if m.api != nil {
		m.api.Close()
	}
	if m.proxy != nil {
		m.proxy.Close()
	}
	if m.sessions != nil {
		m.sessions.Close()
	}
	if m.node != nil {
		m.node.Close() // closes the node's store
	} else if m.store != nil {
		defer m.store.Close() // after its log
	}
	var err error
	switch {
	case m.clusterLog != nil:
		err = m.clusterLog.Close()
	case m.wal != nil:
		err = m.wal.Close()
	}
	if err != nil {
		m.log.Error().Err(err).Msg("closing the write-ahead log")
	}
	if m.engine == nil && m.cfg.Engine.Listener != nil {
		_ = m.cfg.Engine.Listener.Close() // the engine would have closed it
	}
}

// fail stops a member that cannot go on, with err as its Err.
func (m *Member) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
	m.stopOnce.Do(func() { go m.stop(context.Background(), false) })
}
