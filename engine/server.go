package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/internal/hostinfo"
	"github.com/sproutmq/sprout/store"
)

// Server joins gnet to the store: it owns the listener and its accept
// loop, the per-connection sessions and the server-wide counters.
type Server struct {
	cfg   Config          // immutable after New
	store *store.Store    // immutable: the store every session uses
	acks  store.AckSource // immutable: what held replies wait for; nil in memory
	// bodies recycles large job bodies, in memory only (bodies.go); nil
	// with a log. bodyAlloc is its alloc, made once for the parsers.
	bodies    *bodyPool          // immutable
	bodyAlloc func(n int) []byte // immutable
	log       zerolog.Logger     // immutable
	id        string             // immutable: stats "id"
	start     time.Time          // immutable
	uname     unameInfo          // immutable

	client   *gnet.Client  // set in Run before ready is closed: the event loops
	ln       net.Listener  // set in Run before ready is closed
	ready    chan struct{} // closed once the listener accepts
	stopped  chan struct{} // closed when Run returns
	stopping chan struct{} // closed by the first Stop
	stopOnce sync.Once
	stopCtx  context.Context // set before stopping is closed: bounds the wait for held replies

	// eventLoops are the client's loops, for Ping; set in Run before
	// ready is closed.
	eventLoops []gnet.EventLoop

	draining atomic.Bool
	// heldSessions counts sessions whose replies wait for the log.
	heldSessions atomic.Int64
	cmds         [codec.NumCounters]atomic.Uint64
	conns        struct {
		current, total, producers, workers atomic.Int64
		// refused: closed at once at MaxConnections; shed: closed or left
		// waiting for want of descriptors; evicted: closed by the budget.
		refused, shed, evicted atomic.Uint64
	}

	bytesIn, bytesOut atomic.Uint64
	// bodyBytesRead are the bytes of put bodies read from the socket
	// straight into jobs (session.readBody), a part of bytesIn.
	bodyBytesRead atomic.Uint64

	// bufferHeld is the sum of every session's holding; overBudget wakes
	// the enforcer when it passes MaxBufferMemory.
	bufferHeld atomic.Int64
	overBudget chan struct{}
	evictLog   everyInterval

	watchedMu sync.Mutex
	watched   map[*session]struct{} // guarded by watchedMu: sessions with unread replies in gnet

	loopsMu sync.Mutex
	loops   map[gnet.EventLoop]*loopState // guarded by loopsMu
}

// New prepares a server on st; Run starts it. A cfg that did not come
// from Config.Resolve is resolved here, against a probe of the host made
// now.
func New(cfg Config, st *store.Store) *Server {
	if !cfg.resolved {
		cfg = cfg.Resolve(hostinfo.Probe())
	}
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	s := &Server{
		cfg:        cfg,
		store:      st,
		acks:       st.Acks(),
		log:        cfg.Logger,
		id:         hex.EncodeToString(raw[:]),
		start:      time.Now(),
		uname:      readUname(),
		ready:      make(chan struct{}),
		stopped:    make(chan struct{}),
		stopping:   make(chan struct{}),
		overBudget: make(chan struct{}, 1),
		watched:    make(map[*session]struct{}),
		loops:      make(map[gnet.EventLoop]*loopState),
	}
	if s.acks == nil {
		s.bodies = newBodyPool()
		s.bodyAlloc = s.bodies.alloc
		st.SetRecycler(s.bodies.recycle)
	}
	return s
}

// Ready is closed once the server accepts connections.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run serves until Stop; it returns an error if it cannot start.
//
// The event loops are a gnet client engine, with no listener of gnet's:
// the accept loop (acceptor) hands each connection to them.
func (s *Server) Run() error {
	defer close(s.stopped)
	ln, err := s.listen()
	if err != nil {
		return err
	}
	client, err := gnet.NewClient(&handler{srv: s},
		gnet.WithNumEventLoop(s.cfg.Loops),
		gnet.WithReadBufferCap(readBufferCap),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithTicker(true),
		gnet.WithLogger(gnetLogger{s.log}),
	)
	if err == nil {
		err = client.Start()
	}
	if err != nil {
		_ = ln.Close()
		return err
	}
	eventLoops, err := s.findLoops(client)
	if len(eventLoops) == 0 {
		_ = client.Stop()
		_ = ln.Close()
		return err
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("health checks will not reach every event loop")
	}
	s.client, s.ln, s.eventLoops = client, ln, eventLoops
	stopBudget := make(chan struct{})
	go s.enforceBudget(stopBudget)
	s.log.Info().Str("network", s.cfg.Network).Str("address", ln.Addr().String()).
		Int("loops", len(eventLoops)).Int("max_connections", s.cfg.MaxConnections).Int64("max_buffer_memory", s.cfg.MaxBufferMemory).
		Msg("listening")
	close(s.ready)

	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		newAcceptor(s, ln).run()
	}()
	<-s.stopping
	_ = ln.Close()
	<-accepting
	s.awaitHeldReplies(s.stopCtx)
	err = client.Stop()
	close(stopBudget)
	return err
}

// readBufferCap is the most gnet reads from a socket per event, into each
// loop's buffer. Command lines and small bodies come through it (a hundred
// pipelined puts of 64 bytes are 9.5 KiB); a larger body's rest is read
// where the job keeps it (session.readBody), so gnet's default of 64 KiB
// would only mean copying most of a 64 KiB body twice.
const readBufferCap = 16 << 10

// Addr is the address the server listens on, once Ready.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// count bumps a cmd-* counter.
func (s *Server) count(c codec.Counter) { s.cmds[c].Add(1) }

// CountCommand adds n to a cmd-* counter of stats, for a change made
// outside the protocol (the admin API) that stands for n of its commands:
// a clear of n jobs counts n deletes. Safe from any goroutine.
func (s *Server) CountCommand(c codec.Counter, n uint64) { s.cmds[c].Add(n) }

// gnetLogger routes gnet's own logging into zerolog.
type gnetLogger struct{ l zerolog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug().Msgf(f, a...) }

func (g gnetLogger) Infof(f string, a ...any) { g.l.Debug().Msgf(f, a...) } // gnet's own chatter

func (g gnetLogger) Warnf(f string, a ...any) { g.l.Warn().Msgf(f, a...) }

func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error().Msgf(f, a...) }

func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Fatal().Msgf(f, a...) }
