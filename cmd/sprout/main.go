package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/certs"
	"github.com/sproutmq/sprout/internal/gctune"
	"github.com/sproutmq/sprout/internal/hostinfo"
	"github.com/sproutmq/sprout/internal/member"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store/segment"
)

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
// What concerns the process comes first: the certificate files are read
// (loadCerts: one that cannot be read exits 5, naming its flags, as a bad
// flag does); the configuration is logged;
// the Go memory limit and the collector's headroom are set, before the
// log's recovery allocates; the CPU profile starts; -u's socket is opened
// and privileges dropped (prepareListener). Then the member starts
// (internal/member: its log, store, cluster node, engine and side port,
// in its documented order), and run waits for it to stop: after a
// signal's Shutdown, or on its own (a cluster member whose log was lost,
// that was removed, or whose --cluster-groups group 0 found not to be the
// cluster's: 5, as at start), whose reason is the exit status.
func run(cfg config) int {
	log := newLogger(cfg, os.Stderr)
	cfg.engine.Logger = log
	// A file that cannot be read is refused as a flag's value is: one
	// line naming the flags, status 5.
	tlsCerts, err := loadCerts(cfg, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sprout: %v\n", err)
		return exitUsage
	}
	logConfig(log, cfg)
	debug.SetMemoryLimit(cfg.goMemoryLimit)
	defer startGCTuner(cfg)()
	if !cfg.pprof {
		// Nothing reads the heap profile without /debug/pprof, and its
		// sampling cost 1.2% of the CPU with 64 KiB bodies.
		runtime.MemProfileRate = 0
	}
	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			log.Error().Err(err).Msg("cannot start the CPU profile")
			return exitUsage
		}
		defer stop()
	}
	// Before the log: -u drops privileges once the socket is bound.
	ln, code := prepareListener(cfg, log)
	if code != exitOK {
		return code
	}
	if ln != nil {
		if cfg.cluster != nil && ln.Addr().Network() != "tcp" {
			_ = ln.Close()
			log.Error().Str("address", ln.Addr().String()).
				Msg("a unix socket is not supported in cluster mode: members proxy clients to the leader's TCP address")
			return exitUsage
		}
		// The engine logs Network and Address; make them say what is served.
		cfg.engine.Listener = ln
		cfg.engine.Network, cfg.engine.Address = ln.Addr().Network(), ln.Addr().String()
	}
	// Signals that come while the member starts (a long recovery) wait
	// in the channel, and are handled once it serves.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	if tlsCerts.hasFiles() {
		signal.Notify(sigs, syscall.SIGHUP)
	}
	signal.Ignore(syscall.SIGPIPE)
	m, err := member.Start(memberConfig(cfg, tlsCerts, log))
	if err != nil {
		return startFailed(err, cfg, log)
	}
	watching, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	go tlsCerts.watch(watching)
	go handleSignals(sigs, m, tlsCerts.set, log)

	start := time.Now()
	<-m.Done()
	var formationErr *member.FormationError
	switch err := m.Err(); {
	case errors.Is(err, replication.ErrRemoved):
		return exitRemoved
	case errors.As(err, &formationErr):
		return exitUsage // as at start: its groups are not the cluster's
	case err != nil:
		return exitReplay
	}
	log.Info().Str("served_for", time.Since(start).Round(time.Millisecond).String()).Msg("stopped")
	return 0
}

// memberConfig is what the member needs of cfg, its TLS configurations
// made from the certificates read.
func memberConfig(cfg config, tc *served, log zerolog.Logger) member.Config {
	if t := cfg.engine.TLS; t != nil {
		t.Config = tc.client
	}
	if n := cfg.cluster; n != nil && tc.cluster != nil {
		n.TLSSource = tc.cluster
	}
	return member.Config{
		Engine: cfg.engine, WALDir: cfg.walDir, WAL: cfg.wal,
		HTTP: member.HTTPConfig{Addr: cfg.httpAddr, Pprof: cfg.pprof, MetricsTubes: cfg.metricsTubes,
			AdminToken: cfg.adminToken, TLS: tc.http},
		Cluster: cfg.cluster, Groups: cfg.groups, Replicas: cfg.replicas, ShutdownTimeout: cfg.shutdownTimeout, Certs: tc.set, Logger: log,
	}
}

// startFailed logs why the member could not start, once, and returns the
// exit status beanstalkd would: 10 for a log directory another server
// holds, 1 for a log that cannot be read, 12 for a member removed from
// its cluster, 111 for a socket that cannot be served, 5 for a cluster
// member's TLS files that cannot be used (named in the error).
func startFailed(err error, cfg config, log zerolog.Logger) int {
	var se *member.StartError
	if !errors.As(err, &se) {
		log.Error().Err(err).Msg("cannot start")
		return exitReplay
	}
	switch se.Step {
	case member.StepHTTP:
		log.Error().Err(se.Err).Str("address", cfg.httpAddr).Msg("cannot serve the operations endpoint")
		return exitSocket
	case member.StepListen, member.StepEngine:
		log.Error().Err(se.Err).Str("address", cfg.engine.Address).Msg("cannot serve")
		return exitSocket
	case member.StepLog:
		log.Error().Str("error", describe(se.Err)).Str("dir", cfg.walDir).Msg("cannot open the write-ahead log")
		if errors.Is(se.Err, segment.ErrLocked) {
			return exitWALLock
		}
		return exitReplay
	}
	log.Error().Str("error", describe(se.Err)).Msg("cannot start the cluster member")
	var opErr *net.OpError
	switch {
	case errors.Is(se.Err, replication.ErrRemoved):
		return exitRemoved
	case errors.As(se.Err, &opErr):
		return exitSocket
	}
	return exitUsage // a TLS file that cannot be used, named in the error
}

// handleSignals runs the server's signals:
//   - SIGUSR1: drain, as beanstalkd: put answers DRAINING, the rest goes on.
//   - SIGTERM or SIGINT: a graceful shutdown (member.Member.Shutdown): no
//     new connection, put answers DRAINING, no job is handed out; once no
//     job is reserved, or after --shutdown-timeout, the server stops.
//   - a second SIGTERM or SIGINT: stop at once (the log is still flushed).
//   - SIGHUP, with certificate files: read them again (certs.Set.Reload);
//     without any, SIGHUP is not caught.
func handleSignals(sigs <-chan os.Signal, m *member.Member, tlsCerts *certs.Set, log zerolog.Logger) {
	ctx, now := context.WithCancel(context.Background())
	defer now()
	shuttingDown := false
	for sig := range sigs {
		switch {
		case sig == syscall.SIGUSR1:
			m.Drain()
		case sig == syscall.SIGHUP:
			log.Info().Msg("SIGHUP: reading the certificates again")
			tlsCerts.Reload()
		case !shuttingDown:
			shuttingDown = true
			log.Info().Str("signal", sig.String()).Msg("shutting down")
			go m.Shutdown(ctx)
		default:
			log.Warn().Str("signal", sig.String()).Msg("second signal: stopping now")
			now()
		}
	}
}

// logTime is the logs' timestamp: RFC 3339 in milliseconds, since a
// failover, a handover or a slow fsync takes a fraction of a second.
const logTime = "2006-01-02T15:04:05.000Z07:00"

// newLogger writes JSON lines to w, or human console output when the
// format is console.
func newLogger(cfg config, w io.Writer) zerolog.Logger {
	zerolog.TimeFieldFormat = logTime
	if cfg.logFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: logTime}
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
