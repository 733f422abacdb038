package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
	"github.com/sproutmq/sprout/store/wal/cbinlog"
)

// clusterLogRetain is how many applied entries the member's log keeps
// below what it may drop, so that a follower a little behind gets entries
// rather than a snapshot.
const clusterLogRetain = 1024

// rebuildGrace bounds each step of a re-execution: closing the clients,
// and waiting for the log to make what it was given durable.
const rebuildGrace = 2 * time.Second

// exitRemoved is the exit status of a member removed from the cluster:
// it stops serving, and refuses to start again on its directory.
const exitRemoved = 12

// failGrace bounds how long a member that stopped on its own waits for
// the engine to stop before it exits.
const failGrace = 5 * time.Second

// newClusterLog opens the member's Raft log in its -b directory
// (replication.WALLog; internal/replication/doc.go, "The log on disk"):
// the same segments, writer and import of a beanstalkd binlog as a single
// node's log. A directory another cluster or member wrote is refused.
func newClusterLog(cfg *config, nc *replication.NodeConfig, log zerolog.Logger) (*replication.WALLog, error) {
	nc.Retain = clusterLogRetain
	wc := nc.WALConfig(cfg.walDir)
	wc.Wal = cfg.wal
	wc.Wal.Logger = log
	wc.Wal.Importer = cbinlog.Importer{}
	return replication.OpenWALLog(wc)
}

// clusterFlags are the flags that mean nothing without --node.
var clusterFlags = []struct {
	name  string
	value func(o *options) string
}{
	{"--cluster-listen", func(o *options) string { return o.clusterListen }},
	{"--cluster-peers", func(o *options) string { return o.clusterPeers }},
	{"--cluster-join", func(o *options) string { return o.clusterJoin }},
	{"--cluster-tls-cert", func(o *options) string { return o.clusterTLSCert }},
	{"--cluster-tls-key", func(o *options) string { return o.clusterTLSKey }},
	{"--cluster-tls-ca", func(o *options) string { return o.clusterTLSCA }},
}

// checkCluster refuses a cluster configuration that cannot run, in one
// line naming the flag at fault (replication.NodeConfig.Validate's lines,
// and the ones only the command line knows): a cluster flag without
// --node, cluster mode without -b or on a unix socket.
func checkCluster(o options) error {
	if o.node == "" {
		for _, f := range clusterFlags {
			if f.value(&o) != "" {
				return fmt.Errorf("%s needs --node: it is for cluster mode", f.name)
			}
		}
		return nil
	}
	switch {
	case o.walDir == "":
		return errors.New("-b is required in cluster mode (--node): each member keeps its Raft log in its own directory")
	case strings.HasPrefix(o.host, "unix:"):
		return errors.New("-l unix:PATH is not supported in cluster mode: members proxy clients to the leader's TCP address")
	case o.clusterListen == "":
		return errors.New("--cluster-listen is required in cluster mode: HOST:PORT where the other members connect")
	case o.clusterPeers == "":
		return errors.New("--cluster-peers is required in cluster mode: NAME=HOST:PORT,... for every initial member, this one included (a joining member: those it reaches first)")
	}
	cfg, err := nodeConfig(o)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "replication: "))
	}
	return nil
}

// nodeConfig is what the options say of the member; run adds the wiring.
func nodeConfig(o options) (*replication.NodeConfig, error) {
	peers, err := replication.ParsePeers(o.clusterPeers)
	if err != nil {
		return nil, err
	}
	nc := &replication.NodeConfig{
		Node: o.node, Listen: o.clusterListen, Peers: peers,
		TLSCert: o.clusterTLSCert, TLSKey: o.clusterTLSKey, TLSCA: o.clusterTLSCA,
	}
	if o.clusterJoin != "" {
		// Without an entry for this member in a list, it is an initial one.
		if nc.ClusterID, nc.JoinID, _, err = replication.SelectJoin(o.clusterJoin, o.node); err != nil {
			return nil, err
		}
	}
	return nc, nil
}

// systemdHandedOver reports whether systemd passed this process a socket
// (LISTEN_PID and LISTEN_FDS, as inheritedListener reads them).
func systemdHandedOver() bool {
	_, fds := os.LookupEnv("LISTEN_FDS")
	return fds && os.Getenv("LISTEN_PID") == strconv.Itoa(os.Getpid())
}

// member is this process as a cluster member: its node, its proxy to the
// leader, and what it does when the node says to start again.
type member struct {
	node   *replication.Node   // immutable after startMember
	proxy  *replication.Proxy  // immutable after startMember
	log    *replication.WALLog // immutable
	logger zerolog.Logger      // immutable
	// exit is the exit status run returns once the engine stopped because
	// the member could not go on (its log lost, or a failed re-execution);
	// 0 otherwise.
	exit atomic.Int32

	mu  sync.Mutex
	srv *engine.Server // guarded by mu: set by attach, once the engine is made
	// stopSide stops the side port (--http), answering the requests in
	// flight until ctx ends. Guarded by mu: set by the side port once it
	// serves; nil without one.
	stopSide func(ctx context.Context)
	// attached is closed by attach.
	attached chan struct{}
}

// startMember starts the member cfg.cluster describes: it opens the
// clients' listener (if prepareListener did not) so that the client
// address, which the member tells the others, has its port; the log; the
// node, whose store the engine will serve; and the proxy, which becomes
// the engine's Route. It returns the exit code on failure, exitOK
// otherwise.
func startMember(cfg *config, ln net.Listener, metrics replication.Observer, log zerolog.Logger) (*member, int) {
	if ln == nil {
		var err error
		if ln, err = engine.Listen(cfg.engine.Network, cfg.engine.Address); err != nil {
			log.Error().Err(err).Str("address", cfg.engine.Address).Msg("cannot listen")
			return nil, exitSocket
		}
		cfg.engine.Listener = ln
		cfg.engine.Network, cfg.engine.Address = ln.Addr().Network(), ln.Addr().String()
	}
	nc := *cfg.cluster
	self := replication.Member{Name: nc.Node, Addr: nc.SelfAddr()}
	// Where the other members reach this one's clients' port and --http:
	// as they listen, or, listening on every interface, at the host of
	// its own --cluster-peers entry (a joining member's --cluster-listen
	// without one); "" without --http.
	nc.ClientAddr = replication.WithHost(ln.Addr().String(), self.Addr)
	nc.HTTPAddr = replication.WithHost(cfg.httpAddr, self.Addr)
	clog, err := newClusterLog(cfg, &nc, log)
	if err != nil {
		_ = ln.Close()
		log.Error().Err(err).Str("dir", cfg.walDir).Msg("cannot open the cluster log")
		if errors.Is(err, wal.ErrLocked) {
			return nil, exitWALLock
		}
		return nil, exitReplay
	}
	m := &member{log: clog, logger: log, attached: make(chan struct{})}
	nc.Log, nc.Logger = clog, log
	nc.Observer = metrics
	nc.Rebuild, nc.Restored = m.rebuild, m.restored
	if m.node, err = replication.StartNode(nc); err != nil {
		_ = ln.Close()
		_ = clog.Close()
		log.Error().Err(err).Msg("cannot start the cluster member")
		if errors.Is(err, replication.ErrRemoved) {
			return nil, exitRemoved
		}
		var opErr *net.OpError
		if errors.As(err, &opErr) {
			return nil, exitSocket
		}
		return nil, exitUsage // a TLS file that cannot be used, named in err
	}
	m.proxy = replication.NewProxy(replication.ProxyConfig{
		Leader: m.node.Leader, Self: m.node.Name(), Local: m.serveLocal,
		Wait: m.node.ElectionTimeout(), Logger: log,
	})
	cfg.engine.Route = m.proxy.Route
	go m.watch()
	return m, exitOK
}

// attach is told of the engine serving st, the node's store when the
// engine was made; a snapshot installed since replaced it.
func (m *member) attach(srv *engine.Server, st *store.Store) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.srv = srv
	close(m.attached)
	if now := m.node.Store(); now != st {
		m.setStoreLocked(now)
	}
}

// restored is the node's Restored: the engine serves the new store.
func (m *member) restored(st *store.Store) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv != nil {
		m.setStoreLocked(st)
	}
}

// setStoreLocked has the engine serve st. A follower serves no session of
// its own, so it cannot fail unless something is badly wrong; then the
// member starts again, as it would on losing the leadership. m.mu must be
// held.
func (m *member) setStoreLocked(st *store.Store) {
	if err := m.srv.SetStore(st); err != nil {
		m.logger.Error().Err(err).Msg("cannot serve the store a snapshot installed; starting again")
		go m.rebuild(0)
	}
}

// serveLocal is the proxy's Local: a connection that waited for a leader
// and found this member serving goes to the engine.
func (m *member) serveLocal(nc net.Conn) {
	m.mu.Lock()
	srv := m.srv
	m.mu.Unlock()
	if srv == nil {
		_ = nc.Close()
		return
	}
	srv.Serve(nc)
}

// setStopSide is told how to stop the side port before re-executing.
func (m *member) setStopSide(stop func(ctx context.Context)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopSide = stop
}

// engine is the engine, once attached.
func (m *member) engine() *engine.Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.srv
}

// watch stops the engine when the node stopped on its own: its log is not
// the one the cluster knows (replication.ErrLogLost), so it cannot serve,
// nor rejoin under its name; or it was removed from the cluster
// (replication.ErrRemoved).
func (m *member) watch() {
	<-m.node.Done()
	switch err := m.node.Err(); {
	case errors.Is(err, replication.ErrRemoved):
		m.fail(exitRemoved)
	case err != nil:
		m.fail(exitReplay)
	}
}

// fail makes run return code once the engine has stopped, and stops it.
func (m *member) fail(code int) {
	if !m.exit.CompareAndSwap(0, int32(code)) {
		return
	}
	go func() {
		<-m.attached
		ctx, cancel := context.WithTimeout(context.Background(), failGrace)
		defer cancel()
		_ = m.engine().Stop(ctx)
	}()
}

// rebuild is the node's Rebuild, called on its goroutine when this member
// lost a leadership it served (the node has logged it, with the terms):
// its store may hold changes that never commit, so the process starts
// again from the log, crash-only (internal/replication/doc.go, "Losing
// leadership"):
//  1. the proxy closes, and with it the connections waiting for a leader;
//  2. every client connection closes (engine.Server.CloseClients): none is
//     answered from this store again;
//  3. the side port stops, answering the requests in flight: an admin API
//     request waiting for its change to commit is answered 503 (it saw the
//     leadership go), not cut off by the execution;
//  4. the log makes durable what it was given;
//  5. every descriptor but stdin, stdout and stderr is marked
//     close-on-exec (they all are already; this makes sure);
//  6. the process executes its own binary again, with its arguments and
//     environment: same pid, a fresh image, recovery as at start.
//
// If the execution fails, the member exits instead (exitReplay).
func (m *member) rebuild(uint64) {
	start := time.Now()
	m.proxy.Close()
	closed := uint64(0)
	if srv := m.engine(); srv != nil {
		before := srv.Stats().CurrentConnections
		ctx, cancel := context.WithTimeout(context.Background(), rebuildGrace)
		if err := srv.CloseClients(ctx); err != nil {
			m.logger.Warn().Err(err).Msg("not every client connection closed before re-executing")
		}
		cancel()
		if after := srv.Stats().CurrentConnections; after < before {
			closed = before - after
		}
	}
	m.mu.Lock()
	stopSide := m.stopSide
	m.mu.Unlock()
	if stopSide != nil {
		ctx, cancel := context.WithTimeout(context.Background(), rebuildGrace)
		stopSide(ctx)
		cancel()
	}
	if !waitDurable(m.log, rebuildGrace) {
		m.logger.Warn().Dur("waited", rebuildGrace).Msg("the cluster log did not make everything durable before re-executing")
	}
	closeOnExecAll()
	exe, err := executable()
	if err == nil {
		m.logger.Info().Int("pid", os.Getpid()).Str("exe", exe).Uint64("clients_closed", closed).
			Dur("took", time.Since(start)).Msg("re-executing: starting again from the cluster log")
		err = syscall.Exec(exe, os.Args, os.Environ())
	}
	m.logger.Error().Err(err).Msg("cannot re-execute; exiting")
	m.fail(exitReplay)
}

// executable is this process's own binary: /proc/self/exe where there is
// one (the file that was executed, even if it has been replaced since),
// else what os.Executable finds.
func executable() (string, error) {
	const self = "/proc/self/exe"
	if _, err := os.Stat(self); err == nil {
		return self, nil
	}
	return os.Executable()
}

// waitDurable waits until everything given to l is durable, for at most d.
func waitDurable(l replication.Log, d time.Duration) bool {
	done := make(chan struct{})
	l.OnDurable(func() { close(done) })
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// closeOnExecAll marks every open descriptor past stderr close-on-exec,
// so that none leaks into the image a re-execution starts. Go opens its
// files and sockets close-on-exec, and so do gnet (its epoll, its eventfd,
// its duplicates of the connections) and the log; this is the guarantee
// against anything that did not (a descriptor handed over at start, a
// library's). Where /proc/self/fd cannot be read it does nothing.
func closeOnExecAll() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// close stops the member after the engine: the proxied connections close,
// then the node (its transport, then its store), then the log, which
// writes and fsyncs what it was given.
func (m *member) close() {
	m.proxy.Close()
	m.node.Close()
	if err := m.log.Close(); err != nil {
		m.logger.Error().Err(err).Msg("closing the cluster log")
	}
}

// memberStore is what the side port reads of the store in cluster mode:
// the node's current one, which an installed snapshot replaces.
type memberStore struct{ node *replication.Node }

func (s memberStore) EachTube(fn func(st *store.TubeStats)) { s.node.Store().EachTube(fn) }
func (s memberStore) LogStats() (wal.Stats, bool)           { return s.node.Store().LogStats() }
