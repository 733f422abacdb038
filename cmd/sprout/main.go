// Command sprout is a beanstalkd-compatible work-queue server.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
)

// shutdownGrace bounds how long a SIGTERM/SIGINT stop may take.
const shutdownGrace = 10 * time.Second

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
func run(opts options) int {
	log := zerolog.New(os.Stderr).Level(opts.logLevel).With().Timestamp().Logger()
	opts.cfg.Logger = log

	st := store.New(store.Options{})
	defer st.Close()
	srv := engine.New(opts.cfg, st)

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
		return 111 // beanstalkd's exit code for socket set-up failures
	}
	return 0
}
