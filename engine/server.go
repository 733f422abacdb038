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
	acks  store.AckSource // immutable: what the store's replies wait for; nil in memory
	// holds is whether any reply may wait for an AckSource: the store has
	// a log, or the connections' queues are made elsewhere and name their
	// own (Config.Queues); immutable.
	holds bool
	// pauseInputAt is the unread input at which a session that cannot
	// consume it stops reading: pauseInputAt(cfg.MaxInputBuffered);
	// immutable.
	pauseInputAt int
	// bodies recycles large job bodies, in memory only (bodies.go); nil
	// with a log. bodyAlloc is its alloc, made once for the parsers.
	bodies    *bodyPool          // immutable
	bodyAlloc func(n int) []byte // immutable
	log       zerolog.Logger     // immutable
	id        string             // immutable: stats "id"
	start     time.Time          // immutable
	uname     unameInfo          // immutable

	client   *gnet.Client  // set in Run before ready is closed: the event loops
	ln       net.Listener  // set in Run before ready is closed; nil when Network is "none"
	tlsLn    net.Listener  // set in Run before ready is closed; nil without Config.TLS
	ready    chan struct{} // closed once the listener accepts
	stopped  chan struct{} // closed when Run returns
	stopping chan struct{} // closed by the first Stop
	stopOnce sync.Once
	stopCtx  context.Context // set before stopping is closed: bounds the wait for held replies
	// lifetime ends once no connection is accepted any more: TLS
	// handshakes in progress then give up.
	lifetime    context.Context
	endLifetime context.CancelFunc

	// tls serves the TLS listener (tls.go); nil without Config.TLS.
	tls *tlsServing // immutable
	// handshakes are the TLS handshakes in progress, waited for at stop.
	handshakes sync.WaitGroup

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
		// waiting for want of descriptors; evicted: closed by the budget;
		// fenced: closed instead of handed a job (Config.Leased), or of
		// answering from a store not leased (FailedFenced).
		refused, shed, evicted, fenced atomic.Uint64
		// tlsOnPlaintext: closed for starting with a TLS handshake.
		tlsOnPlaintext atomic.Uint64
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
		holds:      st.Acks() != nil || cfg.Queues != nil,
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
	s.pauseInputAt = pauseInputAt(cfg.MaxInputBuffered)
	s.lifetime, s.endLifetime = context.WithCancel(context.Background())
	if cfg.TLS != nil {
		s.tls = newTLSServing(cfg.TLS, cfg.MaxBufferMemory)
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
	defer s.endLifetime()
	ln, tlsLn, err := s.listen()
	if err != nil {
		return err
	}
	closeListeners := func() {
		for _, l := range []net.Listener{ln, tlsLn} {
			if l != nil {
				_ = l.Close()
			}
		}
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
		closeListeners()
		return err
	}
	eventLoops, err := s.findLoops(client)
	if len(eventLoops) == 0 {
		_ = client.Stop()
		closeListeners()
		return err
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("health checks will not reach every event loop")
	}
	s.client, s.ln, s.tlsLn, s.eventLoops = client, ln, tlsLn, eventLoops
	stopBudget := make(chan struct{})
	go s.enforceBudget(stopBudget)
	e := s.log.Info().Str("network", s.cfg.Network)
	if ln != nil {
		e = e.Str("address", ln.Addr().String())
	}
	if tlsLn != nil {
		e = e.Str("tls_address", tlsLn.Addr().String()).Str("tls_handshake_timeout", s.tls.timeout.String())
	}
	e.Int("loops", len(eventLoops)).Int("max_connections", s.cfg.MaxConnections).Int64("max_buffer_memory", s.cfg.MaxBufferMemory).
		Msg("listening")
	close(s.ready)

	var accepting sync.WaitGroup
	for _, l := range []net.Listener{ln, tlsLn} {
		if l == nil {
			continue
		}
		a := newAcceptor(s, l)
		a.tls = l == tlsLn
		accepting.Add(1)
		go func() {
			defer accepting.Done()
			a.run()
		}()
	}
	<-s.stopping
	closeListeners()
	accepting.Wait()
	s.endLifetime() // handshakes in progress give up
	s.handshakes.Wait()
	s.awaitHeldReplies(s.stopCtx)
	s.goodbyeTLS(s.stopCtx)
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

// Addr is the address the server listens on, once Ready: the plaintext
// listener's, or the TLS listener's when it has none (Network "none").
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return s.tlsLn.Addr()
	}
	return s.ln.Addr()
}

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
