package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/console"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store"
)

// opsShutdownGrace bounds how long stopping the side port waits for the
// requests in flight (a scrape, a profile).
const opsShutdownGrace = 5 * time.Second

// opsPort is the HTTP side port (--http): metrics, probes, pprof, the
// admin API and the web console. A nil *opsPort, without --http, does nothing.
type opsPort struct {
	addr       string       // immutable: --http
	pprof      bool         // immutable
	tubes      int          // immutable: --metrics-tubes
	adminToken string       // immutable: --admin-token
	maxJobSize int          // immutable: -z, for the admin API's puts
	metrics    *ops.Metrics // immutable
	api        *admin.API   // set by start
	server     *ops.Server  // set by start
}

// newOpsPort prepares the side port when --http is given. Its metrics
// must be hooked into the engine's and the log's options (run does), so
// it is made before the log is opened and the engine made.
func newOpsPort(cfg config) *opsPort {
	if cfg.httpAddr == "" {
		return nil
	}
	return &opsPort{addr: cfg.httpAddr, pprof: cfg.pprof, tubes: cfg.metricsTubes, adminToken: cfg.adminToken,
		maxJobSize: cfg.engine.MaxJobSize, metrics: ops.NewMetrics()}
}

// start serves the side port for srv and st until stop; for a cluster
// member m, its /cluster and figures too, and the admin API and console
// on its node's current store (or forwarded to the leader).
func (p *opsPort) start(srv *engine.Server, st *store.Store, m *member, log zerolog.Logger) error {
	if p == nil {
		return nil
	}
	api := admin.Config{
		Store:      st,
		Engine:     srv,
		MaxJobSize: p.maxJobSize,
		Token:      p.adminToken,
		Logger:     log,
	}
	side := ops.Config{
		Addr:       p.addr,
		Pprof:      p.pprof,
		TubeSeries: p.tubes,
		Engine:     srv,
		Store:      st,
		Metrics:    p.metrics,
		Logger:     log,
	}
	if m != nil {
		configureMember(&side, &api, m)
	}
	p.api = admin.New(api)
	con, err := console.New(console.Config{Auth: p.api.Auth(), Cluster: m != nil, Logger: log})
	if err != nil {
		p.api.Close()
		return err
	}
	side.API, side.Console = p.api, con
	if m != nil {
		// Membership changes (cluster_members.go), guarded as the API's
		// changes are; the console behind them.
		side.Console = membersHandler(m.node, p.api.Auth().Middleware, con, log)
	}
	s, err := ops.Start(side)
	if err != nil {
		p.api.Close()
		return err
	}
	p.server = s
	return nil
}

// configureMember configures a cluster member's side port: /cluster, /readyz
// and the figures from its node and proxy, and the admin API on the
// node's current store, which an installed snapshot replaces, served
// there while the member leads and forwarded to the leader otherwise
// (internal/admin/doc.go, Cluster mode).
func configureMember(side *ops.Config, api *admin.Config, m *member) {
	side.Cluster, side.Proxy = m.node, m.proxy
	api.Cluster, api.LeaderWait = adminCluster{m.node}, m.node.ElectionTimeout()
}

// adminCluster is the node as the admin API sees it: who serves, and
// where another leader's --http is.
type adminCluster struct{ node *replication.Node }

func (c adminCluster) Name() string { return c.node.Name() }

func (c adminCluster) Leader() (admin.Leader, <-chan struct{}) {
	info, changed := c.node.Leader()
	l := admin.Leader{Serving: info.Serving, Name: info.Name}
	if info.Name != "" && info.Name != c.node.Name() {
		for _, ms := range c.node.Status().Members {
			if ms.Name == info.Name {
				l.HTTP = ms.HTTP
			}
		}
	}
	return l, changed
}

// stop shuts the side port down, after the engine: probes and scrapes are
// answered until then. The admin API's history stops with it.
func (p *opsPort) stop(ctx context.Context, log zerolog.Logger) {
	if p == nil || p.server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, opsShutdownGrace)
	defer cancel()
	if err := p.server.Shutdown(ctx); err != nil {
		log.Error().Err(err).Msg("stopping the operations endpoint")
	}
	if p.api != nil {
		p.api.Close()
	}
}
