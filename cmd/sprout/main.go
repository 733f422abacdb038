// Command sprout is a beanstalkd-compatible work-queue server.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
	"github.com/sproutmq/sprout/store/wal/cbinlog"
)

// shutdownGrace bounds how long a SIGTERM/SIGINT stop may take.
const shutdownGrace = 10 * time.Second

// Exit codes beyond parseArgs's, as beanstalkd uses them.
const (
	exitWALLock = 10  // another server holds the -b directory
	exitReplay  = 1   // the log could not be read
	exitSocket  = 111 // the listener could not be set up
)

func main() {
	opts, act, code := parseArgs(os.Args[1:], os.Stderr)
	switch act {
	case actionPrintVersion:
		fmt.Println(versionLine())
	case actionPrintUsage:
		writeUsage(os.Stderr)
	case actionRun:
		code = run(opts)
	}
	os.Exit(code)
}

// run serves until SIGTERM or SIGINT. SIGUSR1 enters drain mode, as in
// beanstalkd.
//
// Shutdown order: the engine stops accepting and closes connections
// (their reserved jobs go back to ready), then the HTTP side port stops,
// then the log writes and fsyncs everything appended, then the store's
// timers stop.
func run(opts options) int {
	log := zerolog.New(os.Stderr).Level(opts.logLevel).With().Timestamp().Logger()
	opts.cfg.Logger = log
	side := newOpsPort(&opts)
	if opts.cpuProfile != "" {
		stop, err := startCPUProfile(opts.cpuProfile)
		if err != nil {
			log.Error().Err(err).Msg("cannot start the CPU profile")
			return exitUsage
		}
		defer stop()
	}

	var wl *wal.Log
	if opts.walDir != "" {
		wo := opts.wal
		wo.Logger = log
		wo.MaxJobSize = opts.cfg.MaxJobSize
		wo.Importer = cbinlog.Importer{}
		var err error
		if wl, err = wal.Open(opts.walDir, wo); err != nil {
			log.Error().Err(err).Str("dir", opts.walDir).Msg("cannot open the write-ahead log")
			if errors.Is(err, wal.ErrLocked) {
				return exitWALLock
			}
			return exitReplay
		}
	}
	st := store.New(store.Options{Log: wl})
	defer st.Close()
	if wl != nil {
		if err := wl.Start(st); err != nil {
			log.Error().Err(err).Str("dir", opts.walDir).Msg("cannot start the write-ahead log")
			return exitReplay
		}
		defer func() {
			if err := wl.Close(); err != nil {
				log.Error().Err(err).Msg("closing the write-ahead log")
			}
		}()
		opts.cfg.Durability = wl
	}
	srv := engine.New(opts.cfg, st)
	if err := side.start(srv, st, log); err != nil {
		log.Error().Err(err).Str("address", opts.httpAddr).Msg("cannot serve the operations endpoint")
		return exitSocket
	}
	defer side.stop(context.Background(), log)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGPIPE)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				log.Info().Msg("entering drain mode")
				srv.SetDraining()
				continue
			}
			log.Info().Str("signal", sig.String()).Msg("shutting down")
			ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			if err := srv.Stop(ctx); err != nil {
				log.Error().Err(err).Msg("shutdown")
			}
			cancel()
			return
		}
	}()

	if err := srv.Run(); err != nil {
		log.Error().Err(err).Str("address", opts.cfg.Address).Msg("cannot serve")
		return exitSocket
	}
	return 0
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
