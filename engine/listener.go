package engine

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// collectBurst's pace: a collection per burstGC accepts, while the live
// heap is under burstGCHeap (above it, a collection costs more than the
// connections' holes do).
const (
	burstGC     = 1024
	burstGCHeap = 256 << 20
)

// logInterval is the least time between two log lines about the same
// overload (refused connections, descriptor exhaustion, buffer budget).
const logInterval = 10 * time.Second

// listen opens the listening socket, unless one was handed over. Sprout
// owns it and its accept loop, rather than gnet, because gnet v2 stops the
// whole engine on any accept error other than EAGAIN, EINTR, ECONNRESET and
// ECONNABORTED, so one EMFILE at the open-file limit would end every
// connection.
//
// It also opens the TLS listener (Config.TLS), and returns nil for the
// plaintext one when Network is "none".
func (s *Server) listen() (plain, tlsLn net.Listener, err error) {
	if t := s.cfg.TLS; t != nil {
		if tlsLn = t.Listener; tlsLn == nil {
			if tlsLn, err = Listen("tcp", t.Address); err != nil {
				return nil, nil, fmt.Errorf("engine: TLS listener: %w", err)
			}
		}
	}
	switch {
	case s.cfg.Listener != nil:
		plain = s.cfg.Listener
	case s.cfg.Network == NetworkNone:
		if tlsLn == nil {
			return nil, nil, errors.New("engine: network none without a TLS listener: nothing to serve")
		}
	default:
		if plain, err = Listen(s.cfg.Network, s.cfg.Address); err != nil && tlsLn != nil {
			_ = tlsLn.Close()
		}
	}
	return plain, tlsLn, err
}

// NetworkNone is Config.Network for a server with no plaintext listener,
// only a TLS one (-l none).
const NetworkNone = "none"

// Listen opens a listener as the server does for Config's Network and
// Address: "tcp" or "unix"; a unix socket file left by an earlier run is
// replaced, as beanstalkd does, and any other kind of file is an error.
func Listen(network, address string) (net.Listener, error) {
	switch network {
	case "tcp":
	case "unix":
		if err := removeStaleSocket(address); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("engine: unknown network " + network)
	}
	return net.Listen(network, address)
}

// acceptor is the accept loop: it hands each connection to an event loop,
// refuses connections past MaxConnections, and survives running out of
// descriptors. Only its own goroutine touches it.
type acceptor struct {
	srv *Server
	ln  net.Listener
	tls bool // the TLS listener: each connection is handshaken first (tls.go)
	// spare is a descriptor held back for the open-file limit: closing it
	// frees one to accept a waiting connection and close it at once, so
	// its client hears a close instead of waiting in the backlog.
	spare   *os.File
	backoff time.Duration

	accepted   uint64      // connections handed to the loops
	collecting atomic.Bool // a collectBurst collection runs
	heapLive   []metrics.Sample
	ips        ipInterner

	refusedLog, shedLog, errLog everyInterval
}

func newAcceptor(s *Server, ln net.Listener) *acceptor {
	a := &acceptor{srv: s, ln: ln}
	a.spare, _ = os.Open(os.DevNull)
	return a
}

// run accepts until the listener is closed.
func (a *acceptor) run() {
	defer func() {
		if a.spare != nil {
			_ = a.spare.Close()
		}
	}()
	s := a.srv
	for {
		nc, err := a.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if outOfDescriptors(err) {
				a.shed(err)
			} else {
				a.failed(err)
			}
			continue
		}
		a.backoff = 0
		if s.openConnections() >= int64(s.cfg.MaxConnections) {
			s.conns.refused.Add(1) // before the close its client may see
			_ = nc.Close()
			if n, ok := a.refusedLog.note(1); ok {
				s.log.Warn().Uint64("refused", n).Int("max_connections", s.cfg.MaxConnections).
					Msg("connection refused: at max-connections")
			}
			continue
		}
		if a.tls {
			// Route sees the connection once its handshake is done.
			a.ips.shareAddrs(nc)
			s.startHandshake(nc)
			continue
		}
		if s.cfg.Route != nil && s.cfg.Route(nc) {
			continue
		}
		a.ips.shareAddrs(nc)
		// gnet takes its own descriptor (a dup) and closes nc, whatever
		// the outcome.
		a.collectBurst()
		if _, err := s.client.EnrollContext(nc, nil); err != nil {
			if outOfDescriptors(err) {
				a.shed(err)
			} else if e := s.log.Debug(); e.Enabled() {
				e.Err(err).Msg("accept: cannot register the connection")
			}
		}
	}
}

// Serve serves nc as the accept loop serves a connection Route leaves
// to it: for a connection Route took and then gave back (a proxy that
// waited for a leader and found that this server now leads). The
// connection limit applies as at accept; nc is closed on any failure.
// Safe from any goroutine once Ready is closed.
func (s *Server) Serve(nc net.Conn) {
	select {
	case <-s.stopping:
		_ = nc.Close()
		return
	default:
	}
	if s.openConnections() >= int64(s.cfg.MaxConnections) {
		s.conns.refused.Add(1)
		_ = nc.Close()
		return
	}
	// A TLS client the Route took after its handshake, and gave back:
	// nothing has been read through its tls.Conn.
	if tc, ok := nc.(*tls.Conn); ok {
		if tio, ok := tc.NetConn().(*tlsIO); ok && s.tls != nil {
			s.enrollTLS(tc, tio)
			return
		}
	}
	if _, err := s.client.EnrollContext(nc, nil); err != nil {
		if e := s.log.Debug(); e.Enabled() {
			e.Err(err).Msg("serve: cannot register the connection")
		}
	}
}

// openConnections is the connections MaxConnections counts: those served,
// and TLS ones in their handshake.
func (s *Server) openConnections() int64 {
	n := s.conns.current.Load()
	if s.tls != nil {
		n += s.tls.handshaking.Load()
	}
	return n
}

// collectBurst starts a garbage collection every burstGC accepts while the
// live heap is small. Each accept leaves about 630 bytes of garbage (Go's
// accepted net.Conn, gnet's enrolment) between the connection's long-lived
// objects; collected only at the heap's usual pace, a storm of connections
// leaves holes in memory that the idle connections then pin (measured with
// 19,700 idle connections: 1,006 bytes of RSS each without, 881 with).
// Collecting during a burst lets the next accepts reuse them. With a large
// heap (many stored jobs) a collection costs more, and the holes matter
// less, so the runtime's own pacing is left alone.
func (a *acceptor) collectBurst() {
	a.accepted++
	if a.accepted%burstGC != 0 {
		return
	}
	if a.heapLive == nil {
		a.heapLive = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	}
	metrics.Read(a.heapLive)
	if v := a.heapLive[0].Value; v.Kind() != metrics.KindUint64 || v.Uint64() > burstGCHeap ||
		!a.collecting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		runtime.GC()
		a.collecting.Store(false)
	}()
}

// maxInternedIPs bounds ipInterner's table; past it the table starts over.
const maxInternedIPs = 1024

// ipInterner shares the IP slices of accepted connections' addresses. Go's
// accept makes each *net.TCPAddr's IP point into the 32-byte socket
// address it was decoded from (64 bytes for IPv6), once for the local
// address and once for the remote one, and gnet keeps both addresses for
// the connection's life. Connections come from few hosts and reach few
// local addresses, so pointing the IPs at one shared copy per address lets
// those socket addresses go: 64 bytes of every idle connection. Only the
// accept loop's goroutine touches it.
type ipInterner struct {
	ips map[netip.Addr]net.IP // made at the first connection
}

// shareAddrs re-points nc's local and remote IPs at shared copies. It must
// run before nc is handed to gnet, while nothing else reads its addresses;
// an interned IP is never written to.
func (in *ipInterner) shareAddrs(nc net.Conn) {
	if a, ok := nc.LocalAddr().(*net.TCPAddr); ok {
		a.IP = in.intern(a.IP)
	}
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		a.IP = in.intern(a.IP)
	}
}

// intern returns the shared copy of ip, equal to it byte for byte.
func (in *ipInterner) intern(ip net.IP) net.IP {
	key, ok := netip.AddrFromSlice(ip)
	if !ok {
		return ip
	}
	if shared, ok := in.ips[key]; ok {
		return shared
	}
	if in.ips == nil || len(in.ips) >= maxInternedIPs {
		// Starting over keeps the table small when clients come from
		// everywhere; connections keep the copies they were given.
		in.ips = make(map[netip.Addr]net.IP)
	}
	shared := slices.Clone(ip)
	in.ips[key] = shared
	return shared
}

// shed handles running out of descriptors (or kernel memory for sockets):
// every open connection keeps being served; a waiting connection is
// accepted and closed with the spare descriptor if there is one; without
// one, new connections wait in the backlog while the loop backs off, and
// accepting resumes by itself once descriptors are freed.
func (a *acceptor) shed(err error) {
	s := a.srv
	s.conns.shed.Add(1)
	if n, ok := a.shedLog.note(1); ok {
		s.log.Warn().Err(err).Uint64("shed", n).Int64("open_connections", s.conns.current.Load()).
			Msg("accept: out of descriptors; shedding new connections")
	}
	if a.spare != nil {
		_ = a.spare.Close()
		a.spare = nil
		if nc, err := a.ln.Accept(); err == nil {
			_ = nc.Close()
		}
	}
	if a.spare, _ = os.Open(os.DevNull); a.spare == nil {
		a.sleep()
	}
}

// failed handles any other accept error: it is logged, the loop backs off
// and tries again; the listener is never given up while the server runs.
func (a *acceptor) failed(err error) {
	if n, ok := a.errLog.note(1); ok {
		a.srv.log.Error().Err(err).Uint64("errors", n).Msg("accept failed; retrying")
	}
	a.sleep()
}

// sleep backs off from 5 ms up to 500 ms while accepting keeps failing.
func (a *acceptor) sleep() {
	a.backoff = min(max(2*a.backoff, 5*time.Millisecond), 500*time.Millisecond)
	time.Sleep(a.backoff)
}

// outOfDescriptors reports the accept errors that mean "no room for one
// more socket now", which pass once connections close.
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// everyInterval lets an event be logged at most once per logInterval, with
// how many happened since the last line. Safe for concurrent use.
type everyInterval struct {
	mu    sync.Mutex
	last  time.Time // guarded by mu
	count uint64    // guarded by mu: events since the last line
}

// note counts n events and reports whether to log now, with the count
// since the last line.
func (e *everyInterval) note(n uint64) (count uint64, log bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count += n
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < logInterval {
		return 0, false
	}
	e.last = now
	count, e.count = e.count, 0
	return count, true
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
