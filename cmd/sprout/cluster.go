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
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store/wal"
	"github.com/sproutmq/sprout/store/wal/cbinlog"
)

// clusterLogRetain is how many applied entries the member's log keeps
// below what it may drop, so that a follower a little behind gets entries
// rather than a snapshot.
const clusterLogRetain = 1024

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

// member is this process as a cluster member: its node and its proxy to
// the leader.
type member struct {
	node   *replication.Node   // immutable after startMember
	proxy  *replication.Proxy  // immutable after startMember
	log    *replication.WALLog // immutable
	logger zerolog.Logger      // immutable
	// exit is the exit status run returns once the engine stopped because
	// the member could not go on (its log lost, or removed); 0 otherwise.
	exit atomic.Int32

	mu  sync.Mutex
	srv *engine.Server // guarded by mu: set by attach, once the engine is made
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
	nc.CloseClients = m.closeClients
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

// attach is told of the engine that serves the node's store.
func (m *member) attach(srv *engine.Server) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.srv = srv
	close(m.attached)
}

// closeClients is the node's CloseClients, when the member lost a
// leadership it served and rebuilds its store: every client connection
// closes (engine.Server.CloseClients); none is answered from this store
// again.
func (m *member) closeClients(ctx context.Context) error {
	srv := m.engine()
	if srv == nil {
		return nil // no engine, no client
	}
	return srv.CloseClients(ctx)
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
