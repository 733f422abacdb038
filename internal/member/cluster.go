package member

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
	"github.com/sproutmq/sprout/store/wal/cbinlog"
)

// startNode starts a cluster member's parts up to its store: the clients'
// listener, if Config.Engine brings none, so that the client address the
// member tells the others has its port; its log in -b; the node, whose
// store the engine will serve; and the proxy to the leader, which
// becomes the engine's Route.
func (m *Member) startNode() error {
	ec := &m.cfg.Engine
	if ec.Listener == nil {
		ln, err := engine.Listen(ec.Network, ec.Address)
		if err != nil {
			return &StartError{StepListen, err}
		}
		ec.Listener = ln
	}
	ec.Network, ec.Address = ec.Listener.Addr().Network(), ec.Listener.Addr().String()

	nc := *m.cfg.Cluster
	self := nc.SelfAddr()
	// Where the other members reach this one's clients' port and --http:
	// as they listen, or, listening on every interface, at the host of
	// its own --cluster-peers entry (a joining member's --cluster-listen
	// without one); "" without --http.
	nc.ClientAddr = replication.WithHost(ec.Address, self)
	if m.httpLn != nil {
		nc.HTTPAddr = replication.WithHost(m.httpLn.Addr().String(), self)
	}
	nc.Retain = clusterLogRetain
	wc := nc.WALConfig(m.cfg.WALDir)
	wc.Wal = m.cfg.WAL
	wc.Wal.Logger = m.log
	wc.Wal.Importer = cbinlog.Importer{}
	opened := time.Now()
	clog, err := replication.OpenWALLog(wc)
	if err != nil {
		return &StartError{StepLog, err}
	}
	m.clusterLog = clog
	// Fresh: group 0 alone, with no entry past its bootstrap.
	held := clog.Shared().Groups()
	ls := clog.Shared().Stats()
	m.log.Info().Str("dir", m.cfg.WALDir).Str("took", time.Since(opened).Round(time.Millisecond).String()).
		Int("groups", len(held)).Uint32("oldest_segment", ls.OldestIndex).Uint32("current_segment", ls.CurrentIndex).
		Int64("disk_bytes", ls.DiskBytes).Msg("cluster log read")
	last, err := clog.LastIndex()
	if err != nil {
		return &StartError{StepLog, err}
	}
	rec, err := readFormation(m.cfg.WALDir)
	if err != nil {
		return &StartError{StepLog, err}
	}
	if m.shards, err = planShards(m.cfg, held, len(held) == 1 && last <= 1, rec); err != nil {
		return &StartError{StepNode, err}
	}
	record := false
	if g := m.shards.groups(); g > 1 && rec.Groups == 0 {
		rec = formation{Groups: g, Replicas: cmp.Or(m.cfg.Replicas, 3)} // as asked: the formation caps it at the members
		record = true
	}
	m.shards.formation = rec
	nc.Log, nc.Logger = clog, m.log
	if m.metrics != nil {
		nc.Observer = m.metrics
	}
	nc.CloseClients = m.closeClients
	// Group 0's leadership is handed over at a shutdown with one group too.
	nc.OnServe = func(st *store.Store, handed []byte) { m.takeHanded(0, st, handed) }
	nc.CampaignFirst = m.shards.campaignsFirst(0, nc.Node)
	m.routerMade = make(chan struct{})
	node, err := replication.StartNode(nc)
	if err != nil {
		return &StartError{StepNode, err}
	}
	m.node, m.store = node, node.Store()
	m.shards.nodes[0].Store(node)
	m.proxy = replication.NewProxy(replication.ProxyConfig{
		Leader: node.Leader, Self: node.Name(), Local: m.serveLocal,
		Wait: node.ElectionTimeout(), Logger: m.log,
	})
	m.startRouter(ec)
	// After the router is made: group 0 handed to this member meanwhile
	// waits for it (takeHanded).
	if err := m.refuseFormedAtStart(); err != nil {
		return &StartError{StepNode, err}
	}
	if record {
		if err := writeFormation(m.cfg.WALDir, rec); err != nil {
			return &StartError{StepLog, err}
		}
	}
	// Before startShards starts the balancer, which calls leaders' side
	// ports (callLeader) from its first tick.
	m.forwarding = m.forwardingTransport()
	ctx, cancel := context.WithTimeout(context.Background(), shardsStartTimeout)
	defer cancel()
	if err := m.startShards(ctx); err != nil {
		return &StartError{StepNode, err}
	}
	return nil
}

// shardsStartTimeout bounds the wait for the log's spare segment when
// the first group other than 0 is attached (replication.SharedLog.Attach).
const shardsStartTimeout = 30 * time.Second

// foreignWait is how long a member of several groups waits to learn of
// a group another member leads before it stops: group 0's log names a
// grown group (growth.go), which a member just added may still be
// catching up on. A member of one group cannot learn of any: it stops
// after foreignWaitOne.
const (
	foreignWait    = 2 * time.Minute
	foreignWaitOne = 5 * time.Second
)

// awaitForeign stops the member unless it learns of group g, which
// member from reported leading, within foreignWait.
func (m *Member) awaitForeign(from uint64, g uint16) {
	defer m.foreignWait.Store(false)
	wait := foreignWait
	if m.shards.placement == nil {
		wait = foreignWaitOne
	}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if int(g) < m.shards.groups() {
			return
		}
	}
	m.foreignOnce.Do(func() {
		err := &FormationError{fmt.Sprintf("member %x leads group %d, and this member runs %d group(s): "+
			"start it with the cluster's --cluster-groups", from, g, m.shards.groups())}
		m.log.Error().Err(err).Msg("stopping: this member does not run every group of the cluster")
		m.foreign <- err // watch stops the member, once it has started
	})
}

// startRouter makes the member's router (internal/router) and hands the
// engine its sessions. Until the cluster is finalized (version 3) a
// member that does not lead proxies its clients' bytes to the leader,
// as the release before does; from then on every member serves its own
// clients, and a session opened while it does not lead sends its
// commands to the leader over the commands stream, staying open when the
// leader changes.
func (m *Member) startRouter(ec *engine.Config) {
	node, host, sh := m.node, m.node.Host(), m.shards
	rc := router.RouterConfig{
		Self: node.ID(), Send: host.SendItems, LeaderWait: node.ElectionTimeout(),
		Serving: sh.serving, Leased: sh.leased, Replica: sh.replica, Term: sh.term, Replicas: sh.replicas,
		// A member that runs fewer groups than the cluster would route
		// their tubes to the groups it has: it stops. Unless the group
		// was grown and this member learns of it in a moment (the group
		// 0 log it follows names it: growth.go).
		Foreign: func(from uint64, g uint16) {
			if !m.foreignWait.CompareAndSwap(false, true) {
				return
			}
			go m.awaitForeign(from, g)
		},
		Removed:       func() []uint64 { return node.Book().Removed },
		Moves:         m.takeMove,
		AnswersHeld:   host.AnswersHeld,
		SyncsSessions: host.SyncsSessions,
		Behind:        m.behind,
		ReadsBehind:   host.ReadsBehind,
		Peers: func() []uint64 {
			var ids []uint64
			for _, mb := range node.Book().Members {
				ids = append(ids, mb.ID)
			}
			return ids
		},
		// A put's size was checked by the member its client reached (its
		// -z); a payload refused whole would close the stream for every
		// session, so the leader takes any a member may send.
		MaxJobSize: engine.MaxMaxJobSize,
		Leader: func(g uint16) (uint64, bool) {
			n := sh.node(g)
			if n == nil {
				return 0, false
			}
			info, _ := n.Leader()
			return info.ID, info.ID != 0 && host.Routes(info.ID)
		},
	}
	if sh.placement != nil {
		rc.Placement = func() *meta.State { return sh.routing.Load().state }
		rc.MovedFrom, rc.Frozen, rc.MovedTo, rc.Staged, rc.Uncounted = m.movedFrom, m.frozen, m.movedTo, m.staged, m.uncounted
		for g := range meta.MaxGroups { // grown groups too
			sh.frozenChecks = append(sh.frozenChecks, func(tube []byte) bool { return m.frozenTube(uint16(g), tube) })
		}
	}
	m.setSessions(router.NewRouter(rc))
	host.OnItemsStream(func(to uint64, ev replication.ItemsEvent) {
		switch ev {
		case replication.ItemsUp, replication.ItemsFrom:
			m.sessions.StreamUp(to)
		case replication.ItemsRoom:
			m.sessions.Room()
		}
	})
	host.OnItems(m.sessions.Handle)
	// Routed: the member serves its clients' sessions itself. Not before
	// finalization, nor while the leader is a member of the release
	// before (during a rolling upgrade from it), which reads no commands
	// stream: its connections go to the proxy then, as they did. With no
	// leader known, a session waits for one here.
	routed := func() bool {
		if !host.Finalized() {
			return false
		}
		info, _ := node.Leader()
		return info.ID == 0 || host.Routes(info.ID)
	}
	ec.Queues = m.sessions.NewQueue
	ec.Idle = func() bool { return m.sessions.Holding() == 0 }
	ec.Route = func(nc net.Conn) bool { return !routed() && m.proxy.Route(nc) }
	ec.Serving = func() bool { return routed() || m.proxy.Serving() }
	ec.Leased = node.Leased
	ec.LogStats = func() (wal.Stats, bool) { return m.logFigures(), true }
	go m.followLeader()
}

// followLeader tells the router of every change of leader, until the node
// stops.
func (m *Member) followLeader() {
	for {
		_, changed := m.node.Leader()
		m.sessions.LeaderChanged()
		select {
		case <-changed:
		case <-m.node.Done():
			return
		}
	}
}

// started is the engine, once made: the node's and the proxy's callbacks
// may run before Start has made it.
func (m *Member) started() *engine.Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.engineUp
}

// closeClients is the node's CloseClients, when the member lost a
// leadership it served and rebuilds its store: every client connection
// served from that store closes (engine.Server.CloseClientsWhere); none
// is answered from it again.
func (m *Member) closeClients(ctx context.Context) error {
	// The router serves other members' sessions, their owner clients
	// holding jobs of group 0, from before the engine is made (startNode
	// starts the other groups between, which takes seconds on a loaded
	// machine): they close whether or not it is.
	if r := m.sessionsMade(); r != nil {
		r.Detach(0)
	}
	srv := m.started()
	if srv == nil {
		return nil // no engine, no client connection
	}
	// Sessions that reach the leader through the router stay open: their
	// calls go to the next leader.
	return srv.CloseClientsWhere(ctx, func(q engine.Queue) bool { return router.ClosesWith(q, 0) }, m.store.Acks())
}

// setSessions makes r the member's router, which a handover waits for
// (takeHanded).
func (m *Member) setSessions(r *router.Router) {
	m.mu.Lock()
	m.sessions = r
	m.mu.Unlock()
	close(m.routerMade)
}

// sessionsMade is the member's router once startRouter made it: group
// 0's node runs, and may lose a leadership, before that.
func (m *Member) sessionsMade() *router.Router {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions
}

// serveLocal is the proxy's Local: a connection that waited for a leader
// and found this member serving goes to the engine.
func (m *Member) serveLocal(nc net.Conn) {
	srv := m.started()
	if srv == nil {
		_ = nc.Close()
		return
	}
	srv.Serve(nc)
}

// watch stops the member when its node stopped on its own: its log is
// not the one the cluster knows (replication.ErrLogLost), so it cannot
// serve, nor rejoin under its name; or it was removed from the cluster
// (replication.ErrRemoved). A node closed by Shutdown has no Err.
func (m *Member) watch() {
	select {
	case <-m.node.Done():
		if err := m.node.Err(); err != nil {
			m.fail(err)
		}
	case err := <-m.foreign:
		m.fail(err)
	}
}

// adminCluster is the node as the admin API sees it: who serves, and
// where another leader's --http is.
type adminCluster struct{ node *replication.Node }

func (c adminCluster) Name() string { return c.node.Name() }

func (c adminCluster) Leader() (admin.Leader, <-chan struct{}) {
	info, changed := c.node.Leader()
	return admin.Leader{Serving: info.Serving, Name: info.Name, HTTP: httpOf(c.node, info.Name)}, changed
}

// httpOf is the --http address member name told node, "" for node's
// own member or one not known.
func httpOf(node *replication.Node, name string) string {
	if name == "" || name == node.Name() {
		return ""
	}
	for _, ms := range node.Status().Members {
		if ms.Name == name {
			return ms.HTTP
		}
	}
	return ""
}

// adminGroups are the member's shard groups as the admin API sees them
// (internal/admin/doc.go, Several shard groups): placed by the formation
// and the moves of tubes (routing), each led where its replica, or for a
// group this member holds no replica of, the leaders' reports
// (router.Router.Reported) say. A job by id goes to its id's group, or
// to a group its tube may have moved to where this member's replica
// holds it (groupOfJob).
type adminGroups struct{ m *Member }

// reportedLeaderPoll is how often a request waiting for the leader of a
// group this member holds no replica of looks at the reports again.
const reportedLeaderPoll = 100 * time.Millisecond

func (a adminGroups) Count() int                     { return a.m.shards.groups() }
func (a adminGroups) OfTube(name string) uint16      { return a.m.shards.routing.Load().state.Owner(name) }
func (a adminGroups) OfJob(id uint64) (uint16, bool) { return a.m.groupOfJob(id) }
func (a adminGroups) Waiting() int64                 { return a.m.sessions.Waiting() }
func (a adminGroups) Unfrozen(g uint16, tube []byte, change func()) bool {
	return a.m.sessions.Unfrozen(g, tube, change)
}

func (a adminGroups) Leader(g uint16) (admin.Leader, *store.Store, <-chan struct{}) {
	node := a.m.node
	if n := a.m.shards.node(g); n != nil {
		info, changed := n.Leader()
		l := admin.Leader{Serving: info.Serving, Name: info.Name, HTTP: httpOf(node, info.Name)}
		if !info.Serving {
			return l, nil, changed
		}
		return l, n.Store(), changed
	}
	changed := make(chan struct{})
	time.AfterFunc(reportedLeaderPoll, func() { close(changed) })
	rep, ok := a.m.sessions.Reported()[g]
	if !ok {
		return admin.Leader{}, nil, changed
	}
	for _, ms := range node.Status().Members {
		if ms.ID == replication.FormatID(rep.Leader) && ms.Name != node.Name() {
			return admin.Leader{Name: ms.Name, HTTP: ms.HTTP}, nil, changed
		}
	}
	return admin.Leader{}, nil, changed
}

// forwardDialTLS dials a leader's side port, when side ports serve TLS,
// for a member that does not lead (the admin API's forwarding, a move's):
// over TLS checked against the host dialled (forwardTLS). An
// http.Transport's own TLS leaves a host that is an IP address out of
// the connection's ServerName (no SNI for one), and a check against it
// then took any certificate of the members' CA, or of the system's
// roots, for the leader's (found by a reviewing helper).
//
// A transport that dials so must not go through a proxy (Proxy nil): an
// https request through one is dialled in plain TCP and its TLS made by
// the transport, with none of this check (forwardTransport).
func forwardDialTLS(src replication.TLSSource) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		// The bounds http.DefaultTransport has for its own dial and
		// handshake, which a dial of one's own goes without.
		ctx, cancel := context.WithTimeout(ctx, forwardDialWait)
		defer cancel()
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
			Config: forwardTLS(src, host)}
		return d.DialContext(ctx, network, addr)
	}
}

// forwardDialWait bounds a forwarding's dial and TLS handshake, as
// http.DefaultTransport's 30 s dial and 10 s handshake do.
const forwardDialWait = 40 * time.Second

// forwardTransport is a transport to the members' side ports: direct,
// never through a proxy from the environment (members reach each other),
// over TLS checked by forwardDialTLS when they serve it (src's CA).
func forwardTransport(tlsOn bool, src replication.TLSSource) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	if tlsOn {
		t.DialTLSContext = forwardDialTLS(src)
	}
	return t
}

// forwardTLS is how a member that does not lead reaches the leader's side
// port at host: the leader's certificate must be valid for host (a name
// or an IP address) and come from the system's roots or from the
// members' CA (src's, as it is at each connection, so a rotated CA is
// followed; nil without members' TLS).
func forwardTLS(src replication.TLSSource, host string) *tls.Config {
	return &tls.Config{
		ServerName: host,
		MinVersion: tls.VersionTLS12,
		// Verified by VerifyConnection, against roots read at each
		// connection; tls.Config's RootCAs would be fixed at start.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("member: the leader's side port sent no certificate")
			}
			opts := x509.VerifyOptions{DNSName: host, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			var pools []*x509.CertPool
			if src != nil {
				pools = append(pools, src.Pool())
			}
			if system, err := x509.SystemCertPool(); err == nil {
				pools = append(pools, system)
			}
			var err error
			for _, p := range pools {
				opts.Roots = p
				if _, err = cs.PeerCertificates[0].Verify(opts); err == nil {
					return nil
				}
			}
			return err
		},
	}
}
