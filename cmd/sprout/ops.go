package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/console"
	"github.com/sproutmq/sprout/internal/ops"
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
// member m, its /cluster and figures too.
func (p *opsPort) start(srv *engine.Server, st *store.Store, m *member, log zerolog.Logger) error {
	if p == nil {
		return nil
	}
	if m != nil {
		return p.startMember(srv, m, log)
	}
	p.api = admin.New(admin.Config{
		Store:      st,
		Engine:     srv,
		MaxJobSize: p.maxJobSize,
		Token:      p.adminToken,
		Logger:     log,
	})
	con, err := console.New(console.Config{Auth: p.api.Auth(), Logger: log})
	if err != nil {
		p.api.Close()
		return err
	}
	s, err := ops.Start(ops.Config{
		Addr:       p.addr,
		Pprof:      p.pprof,
		TubeSeries: p.tubes,
		Engine:     srv,
		Store:      st,
		Metrics:    p.metrics,
		API:        p.api,
		Console:    con,
		Logger:     log,
	})
	if err != nil {
		p.api.Close()
		return err
	}
	p.server = s
	return nil
}

// startMember serves a cluster member's side port: metrics, probes and
// /cluster. The admin API and the console are not served yet: their
// changes would have to reach the leader's store, and they read a store
// a snapshot may replace.
func (p *opsPort) startMember(srv *engine.Server, m *member, log zerolog.Logger) error {
	if p.adminToken != "" {
		log.Warn().Msg("the admin API and the web console are not served in cluster mode yet; --admin-token guards membership changes only")
	}
	s, err := ops.Start(ops.Config{
		Addr:       p.addr,
		Pprof:      p.pprof,
		TubeSeries: p.tubes,
		Engine:     srv,
		Store:      memberStore{m.node},
		Metrics:    p.metrics,
		Cluster:    m.node,
		Proxy:      m.proxy,
		// Membership changes (cluster_members.go); everything else 404.
		Console: membersHandler(m.node, admin.NewAuth(p.adminToken, log).Middleware, nil, log),
		Logger:  log,
	})
	if err != nil {
		return err
	}
	p.server = s
	return nil
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
