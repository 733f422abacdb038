package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// Version is reported by stats and -v.
const Version = "0.1.0"

// Server joins gnet to the store: it owns the listener, the per-connection
// sessions and the server-wide counters.
type Server struct {
	cfg   Config         // immutable after New
	store *store.Store   // immutable
	log   zerolog.Logger // immutable
	id    string         // immutable: stats "id"
	start time.Time      // immutable
	uname unameInfo      // immutable

	engine  gnet.Engine   // set in OnBoot, before ready is closed
	ready   chan struct{} // closed once the listener accepts
	stopped chan struct{} // closed when Run returns

	draining atomic.Bool
	cmds     [codec.NumCounters]atomic.Uint64
	conns    struct {
		current, total, producers, workers atomic.Int64
	}

	throttledMu sync.Mutex
	throttled   map[*session]struct{} // guarded by throttledMu: sessions paused on a full outbound buffer

	flushersMu sync.Mutex
	flushers   map[gnet.EventLoop]*loopFlusher // guarded by flushersMu
}

// New prepares a server on st; Run starts it.
func New(cfg Config, st *store.Store) *Server {
	if cfg.MaxJobSize <= 0 {
		cfg.MaxJobSize = DefaultMaxJobSize
	}
	if cfg.MaxInputBuffered <= 0 {
		cfg.MaxInputBuffered = DefaultMaxInputBuffered(cfg.MaxJobSize)
	}
	if cfg.MaxOutputBuffered <= 0 {
		cfg.MaxOutputBuffered = DefaultMaxOutputBuffered
	}
	if cfg.DrainPoll <= 0 {
		cfg.DrainPoll = 5 * time.Millisecond
	}
	if cfg.Network == "" {
		cfg.Network = "tcp"
	}
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	return &Server{
		cfg:       cfg,
		store:     st,
		log:       cfg.Logger,
		id:        hex.EncodeToString(raw[:]),
		start:     time.Now(),
		uname:     readUname(),
		ready:     make(chan struct{}),
		stopped:   make(chan struct{}),
		throttled: make(map[*session]struct{}),
		flushers:  make(map[gnet.EventLoop]*loopFlusher),
	}
}

// flusherFor returns the held-reply flusher of event loop el.
func (s *Server) flusherFor(el gnet.EventLoop) *loopFlusher {
	s.flushersMu.Lock()
	defer s.flushersMu.Unlock()
	f := s.flushers[el]
	if f == nil {
		f = newLoopFlusher(el, s.cfg.Durability)
		s.flushers[el] = f
	}
	return f
}

// Ready is closed once the server accepts connections.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// SetDraining makes every later put answer DRAINING (beanstalkd's SIGUSR1).
// It cannot be undone.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Run serves until Stop; it returns the listener error, if any.
func (s *Server) Run() error {
	defer close(s.stopped)
	addr, err := s.listenAddr()
	if err != nil {
		return err
	}
	loops := s.cfg.Loops
	opts := []gnet.Option{
		gnet.WithMulticore(loops <= 0),
		gnet.WithReuseAddr(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithTicker(true),
		gnet.WithLogger(gnetLogger{s.log}),
	}
	if loops > 0 {
		opts = append(opts, gnet.WithNumEventLoop(loops))
	}
	return gnet.Run(&handler{srv: s}, addr, opts...)
}

// Stop shuts the server down:
//  1. the listener and every connection are closed by gnet;
//  2. each closed connection's reserved jobs go back to ready (OnClose);
//  3. Run returns.
//
// The store stays open; the caller closes it after Run has returned.
func (s *Server) Stop(ctx context.Context) error {
	select {
	case <-s.ready:
	case <-s.stopped:
		return nil
	}
	err := s.engine.Stop(ctx)
	select {
	case <-s.stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

func (s *Server) listenAddr() (string, error) {
	switch s.cfg.Network {
	case "tcp":
		return "tcp://" + s.cfg.Address, nil
	case "unix":
		if err := removeStaleSocket(s.cfg.Address); err != nil {
			return "", err
		}
		return "unix://" + s.cfg.Address, nil
	}
	return "", fmt.Errorf("engine: unknown network %q", s.cfg.Network)
}

// removeStaleSocket deletes a socket file left by an earlier run, as
// beanstalkd does; any other kind of file is an error.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("engine: %s exists and is not a socket", path)
	}
	return os.Remove(path)
}

// count bumps a cmd-* counter.
func (s *Server) count(c codec.Counter) { s.cmds[c].Add(1) }

// throttle parks a session whose client is not reading; the ticker wakes it
// until its outbound buffer has drained.
func (s *Server) throttle(ss *session) {
	s.throttledMu.Lock()
	s.throttled[ss] = struct{}{}
	s.throttledMu.Unlock()
}

func (s *Server) unthrottle(ss *session) {
	s.throttledMu.Lock()
	delete(s.throttled, ss)
	s.throttledMu.Unlock()
}

// wakeThrottled asks each parked session's loop to look again.
func (s *Server) wakeThrottled() {
	s.throttledMu.Lock()
	for ss := range s.throttled {
		_ = ss.conn.Wake(nil)
	}
	s.throttledMu.Unlock()
}

// gnetLogger routes gnet's own logging into zerolog.
type gnetLogger struct{ l zerolog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug().Msgf(f, a...) }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Info().Msgf(f, a...) }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn().Msgf(f, a...) }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error().Msgf(f, a...) }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Fatal().Msgf(f, a...) }
