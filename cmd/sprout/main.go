package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/gctune"
	"github.com/sproutmq/sprout/internal/hostinfo"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
	"github.com/sproutmq/sprout/store/wal/cbinlog"
)

// heldRepliesGrace bounds how long the last step of a shutdown waits for
// the log to make held replies durable before connections close.
const heldRepliesGrace = 5 * time.Second

// Exit codes beyond parseArgs's, as beanstalkd uses them.
const (
	exitWALLock = 10  // another server holds the -b directory
	exitReplay  = 1   // the log could not be read
	exitSocket  = 111 // the listener could not be set up
)

func main() {
	opts, act, code := parseArgs(os.Args[1:], os.Environ(), os.Stderr)
	switch act {
	case actionPrintVersion:
		fmt.Println(versionLine())
	case actionPrintUsage:
		writeUsage(os.Stderr)
	case actionRun:
		code = run(resolve(opts, hostinfo.Probe(), thisProcess()))
	}
	os.Exit(code)
}

// thisProcess is what resolve needs to know of the running process.
func thisProcess() process {
	return process{
		lookupEnv:     os.LookupEnv,
		goMemoryLimit: debug.SetMemoryLimit(-1), // -1 reads it
		terminal:      isatty.IsTerminal(os.Stderr.Fd()),
		version:       buildVersion(),
	}
}

// run serves until SIGTERM or SIGINT (see handleSignals); SIGUSR1 enters
// drain mode, as in beanstalkd.
//
// Before serving: the configuration is logged; the Go memory limit and the
// collector's headroom are set, before the log's recovery allocates; the
// side port's histograms are made; -u's socket is opened and privileges
// dropped; the log is opened and recovered. run fills in cfg's wiring
// (logger, metrics, listener, log) as it goes. In cluster mode (--node)
// the clients' socket is opened, then the member starts (startMember: its
// Raft log, its node, whose store the engine serves, and its proxy to the
// leader, which becomes the engine's Route).
//
// Shutdown order: the engine stops accepting and handing jobs out, waits
// for workers to finish theirs, sends the replies held for the log and
// closes connections (their reserved jobs go back to ready); then the HTTP
// side port stops, then the log writes and fsyncs everything appended,
// then the store's timers stop. A cluster member, once its side port has
// stopped, closes its proxied connections, then stops its node (its
// connections to the other members, then its store).
func run(cfg config) int {
	log := newLogger(cfg)
	cfg.engine.Logger = log
	logConfig(log, cfg)
	debug.SetMemoryLimit(cfg.goMemoryLimit)
	defer startGCTuner(cfg)()
	if !cfg.pprof {
		// Nothing reads the heap profile without /debug/pprof, and its
		// sampling cost 1.2% of the CPU with 64 KiB bodies.
		runtime.MemProfileRate = 0
	}
	side := newOpsPort(cfg)
	if side != nil {
		cfg.engine.Metrics = side.metrics
		cfg.wal.Observer = side.metrics
	}
	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			log.Error().Err(err).Msg("cannot start the CPU profile")
			return exitUsage
		}
		defer stop()
	}
	if cfg.cluster != nil && systemdHandedOver() {
		// A re-execution could not hand the socket over again.
		log.Error().Msg("a socket systemd hands over (LISTEN_FDS) is not supported in cluster mode; use -l and -p")
		return exitUsage
	}
	// Before the log: -u drops privileges once the socket is bound.
	ln, code := prepareListener(cfg, log)
	if code != exitOK {
		return code
	}
	if ln != nil {
		// The engine logs Network and Address; make them say what is served.
		cfg.engine.Listener = ln
		cfg.engine.Network, cfg.engine.Address = ln.Addr().Network(), ln.Addr().String()
	}

	var st *store.Store
	var m *member
	if cfg.cluster != nil {
		var observer replication.Observer
		if side != nil {
			observer = side.metrics
		}
		if m, code = startMember(&cfg, ln, observer, log); code != exitOK {
			return code
		}
		defer m.close()
		st = m.node.Store()
	} else {
		var closeStore func()
		if st, closeStore, code = openStore(cfg, log); code != exitOK {
			return code
		}
		defer closeStore()
	}
	srv := engine.New(cfg.engine, st)
	if m != nil {
		m.attach(srv)
	}
	if err := side.start(srv, st, m, log); err != nil {
		log.Error().Err(err).Str("address", cfg.httpAddr).Msg("cannot serve the operations endpoint")
		return exitSocket
	}
	defer side.stop(context.Background(), log)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGPIPE)
	go handleSignals(sigs, srv, log, cfg.shutdownTimeout)

	start := time.Now()
	if err := srv.Run(); err != nil {
		log.Error().Err(err).Str("address", cfg.engine.Address).Msg("cannot serve")
		return exitSocket
	}
	if m != nil {
		if code := int(m.exit.Load()); code != exitOK {
			return code
		}
	}
	log.Info().Str("served_for", time.Since(start).Round(time.Millisecond).String()).Msg("connections closed; flushing the log")
	return 0
}

// openStore opens and recovers the write-ahead log, if -b says to, and
// returns the store on it (in memory without -b) and what closes them
// once the engine has stopped: the log, which writes and fsyncs
// everything appended, then the store's timers. It returns the exit code
// on failure, exitOK otherwise.
func openStore(cfg config, log zerolog.Logger) (*store.Store, func(), int) {
	var wl *wal.Log
	opened := time.Now()
	if cfg.walDir != "" {
		cfg.wal.Logger = log
		cfg.wal.Importer = cbinlog.Importer{}
		var err error
		if wl, err = wal.Open(cfg.walDir, cfg.wal); err != nil {
			log.Error().Err(err).Str("dir", cfg.walDir).Msg("cannot open the write-ahead log")
			if errors.Is(err, wal.ErrLocked) {
				return nil, nil, exitWALLock
			}
			return nil, nil, exitReplay
		}
	}
	st := store.New(store.Options{Log: wl})
	if wl != nil {
		if err := wl.Start(st); err != nil {
			log.Error().Err(err).Str("dir", cfg.walDir).Msg("cannot start the write-ahead log")
			st.Close()
			return nil, nil, exitReplay
		}
		g := st.Stats()
		ls := wl.Stats()
		log.Info().Str("dir", cfg.walDir).Str("took", time.Since(opened).Round(time.Millisecond).String()).
			Int64("ready", g.Ready).Int64("delayed", g.Delayed).Int64("buried", g.Buried).
			Uint32("oldest_segment", ls.OldestIndex).Uint32("current_segment", ls.CurrentIndex).
			Int64("disk_bytes", ls.DiskBytes).Msg("write-ahead log recovered")
	}
	return st, func() {
		if wl != nil {
			if err := wl.Close(); err != nil {
				log.Error().Err(err).Msg("closing the write-ahead log")
			}
		}
		st.Close()
	}, exitOK
}

// handleSignals runs the server's signals:
//   - SIGUSR1: drain, as beanstalkd: put answers DRAINING, the rest goes on.
//   - SIGTERM or SIGINT: a graceful shutdown (engine.BeginShutdown): no new
//     connection, put answers DRAINING, no job is handed out; once no job is
//     reserved, or after timeout, the server stops.
//   - a second SIGTERM or SIGINT: stop at once (the log is still flushed).
func handleSignals(sigs <-chan os.Signal, srv *engine.Server, log zerolog.Logger, timeout time.Duration) {
	ctx, now := context.WithCancel(context.Background())
	defer now()
	shuttingDown := false
	for sig := range sigs {
		switch {
		case sig == syscall.SIGUSR1:
			log.Info().Msg("draining: puts are refused")
			srv.SetDraining()
		case !shuttingDown:
			shuttingDown = true
			go shutdown(ctx, srv, log, sig, timeout)
		default:
			log.Warn().Str("signal", sig.String()).Msg("second signal: stopping now")
			now()
		}
	}
}

// shutdown is the graceful shutdown of handleSignals; cancelling ctx cuts
// every wait short.
func shutdown(ctx context.Context, srv *engine.Server, log zerolog.Logger, sig os.Signal, timeout time.Duration) {
	srv.BeginShutdown()
	log.Info().Str("signal", sig.String()).Str("timeout", timeout.String()).
		Uint64("reserved_jobs", srv.Stats().CurrentJobsReserved).
		Msg("shutting down: no new connections or jobs; waiting for workers to finish theirs")
	idle, cancel := context.WithTimeout(ctx, timeout)
	err := srv.WaitIdle(idle)
	cancel()
	switch {
	case err == nil:
		log.Info().Msg("no job is reserved; stopping")
	case ctx.Err() == nil:
		log.Warn().Uint64("reserved_jobs", srv.Stats().CurrentJobsReserved).
			Msg("shutdown timeout: stopping; reserved jobs go back to ready")
	}
	stop, cancel := context.WithTimeout(ctx, heldRepliesGrace)
	defer cancel()
	if err := srv.Stop(stop); err != nil && ctx.Err() == nil {
		log.Error().Err(err).Msg("shutdown")
	}
}

// newLogger writes JSON lines, or human console output when the format
// is console.
func newLogger(cfg config) zerolog.Logger {
	var w io.Writer = os.Stderr
	if cfg.logFormat == "console" {
		w = zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(cfg.logLevel).With().Timestamp().Logger()
}

// startGCTuner keeps the heap goal cfg.gcHeadroom above the live heap
// (resolve leaves it 0 when GOGC says what the operator wants).
func startGCTuner(cfg config) (stop func()) {
	return gctune.Start(uint64(cfg.gcHeadroom))
}

// startCPUProfile profiles the whole process until the returned stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
