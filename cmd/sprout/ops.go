package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/store"
)

// opsShutdownGrace bounds how long stopping the side port waits for the
// requests in flight (a scrape, a profile).
const opsShutdownGrace = 5 * time.Second

// opsPort is the HTTP side port (--http): metrics, probes and pprof. A nil
// *opsPort, without --http, does nothing.
type opsPort struct {
	opts    *options     // immutable
	metrics *ops.Metrics // immutable
	server  *ops.Server  // set by start
}

// newOpsPort prepares the side port when --http is given: its histograms
// are hooked into the engine's and the log's options, so it must be called
// before the log is opened and the engine made.
func newOpsPort(opts *options) *opsPort {
	if opts.httpAddr == "" {
		return nil
	}
	m := ops.NewMetrics()
	opts.cfg.Metrics = m
	opts.wal.Observer = m
	return &opsPort{opts: opts, metrics: m}
}

// start serves the side port for srv and st until stop.
func (p *opsPort) start(srv *engine.Server, st *store.Store, log zerolog.Logger) error {
	if p == nil {
		return nil
	}
	s, err := ops.Start(ops.Config{
		Addr:       p.opts.httpAddr,
		Pprof:      p.opts.pprof,
		TubeSeries: p.opts.metricsTubes,
		Engine:     srv,
		Store:      st,
		Metrics:    p.metrics,
		Logger:     log,
	})
	p.server = s
	return err
}

// stop shuts the side port down, after the engine: probes and scrapes are
// answered until then.
func (p *opsPort) stop(ctx context.Context, log zerolog.Logger) {
	if p == nil || p.server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, opsShutdownGrace)
	defer cancel()
	if err := p.server.Shutdown(ctx); err != nil {
		log.Error().Err(err).Msg("stopping the operations endpoint")
	}
}
