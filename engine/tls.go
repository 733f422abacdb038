package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// TLS on the client port: the handshake runs in Go on a goroutine of the
// connection's own; then the socket is enrolled in an event loop like any
// other, and its session reads and writes through the same tls.Conn, driven
// by the loop (see doc.go, "TLS", for why not kTLS).

// TLSConfig serves clients over TLS, beside the plaintext listener or
// alone (Config.Network "none").
type TLSConfig struct {
	// Address is host:port to listen on; Listener, if set, is served
	// instead. Stop closes it.
	Address  string
	Listener net.Listener
	// Config is the server's TLS configuration: its certificate (a
	// GetCertificate or GetConfigForClient that reloads is fine) and, for
	// mutual TLS, ClientAuth and ClientCAs. Versions below TLS 1.2 are
	// refused whatever it says; Go's servers never renegotiate.
	Config *tls.Config
	// HandshakeTimeout bounds each handshake, from accept to its end; 0
	// means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
}

// DefaultHandshakeTimeout bounds a TLS handshake: a client that has not
// finished it by then (a slowloris sending a byte a second) is closed.
const DefaultHandshakeTimeout = 10 * time.Second

// handshakeReserve is the memory a connection in its handshake is taken
// to hold: its goroutine's stack and crypto/tls's buffers (a record of at
// most 16 KiB in, the server's flight out). Handshakes together may hold
// at most half the buffer budget; past that a new TLS connection is closed
// at once, as at MaxConnections, so that handshakes that never end cannot
// make the budget close the connections that serve.
const handshakeReserve = 32 << 10

// TLSFailure is why a TLS handshake failed.
type TLSFailure int

// The reasons a handshake fails, as the metrics label them.
const (
	TLSTimeout       TLSFailure = iota // not done within the handshake timeout
	TLSClosed                          // the client closed or reset the connection
	TLSNotTLS                          // the first bytes were no TLS record (plaintext)
	TLSNoClientCert                    // mutual TLS, and the client sent no certificate
	TLSBadClientCert                   // its certificate did not verify (another CA, expired)
	TLSClientAlert                     // the client gave up with an alert (it refused ours)
	TLSProtocol                        // anything else: versions, ciphers, malformed messages
	NumTLSFailures
)

var tlsFailureNames = [NumTLSFailures]string{
	"timeout", "closed", "not_tls", "no_client_certificate", "bad_client_certificate", "client_alert", "protocol",
}

// String is the reason's label.
func (f TLSFailure) String() string { return tlsFailureNames[f] }

// tlsServing is the TLS listener's state; nil without one.
type tlsServing struct {
	config  *tls.Config   // immutable
	timeout time.Duration // immutable
	// maxHandshakes bounds the handshakes in flight (handshakeReserve).
	maxHandshakes int64 // immutable

	// Counters, safe from any goroutine: handshakes in flight (the
	// accept loop adds, the handshake's goroutine subtracts); TLS
	// sessions open and opened (the loops, at OnOpen and OnClose);
	// handshakes that worked, and that failed by reason.
	handshaking atomic.Int64
	current     atomic.Int64
	total       atomic.Uint64
	ok          atomic.Uint64
	failed      [NumTLSFailures]atomic.Uint64
}

func newTLSServing(cfg *TLSConfig, budget int64) *tlsServing {
	c := servingConfig(cfg.Config)
	if get := c.GetConfigForClient; get != nil {
		// The configuration a handshake gets from it gets the same
		// settings, made once per configuration it returns.
		var last atomic.Pointer[[2]*tls.Config]
		c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			inner, err := get(h)
			if inner == nil || err != nil {
				return inner, err
			}
			if p := last.Load(); p != nil && p[0] == inner {
				return p[1], nil
			}
			adjusted := servingConfig(inner)
			last.Store(&[2]*tls.Config{inner, adjusted})
			return adjusted, nil
		}
	}
	t := &tlsServing{config: c, timeout: cfg.HandshakeTimeout,
		maxHandshakes: max(budget/2/handshakeReserve, 1)}
	if t.timeout <= 0 {
		t.timeout = DefaultHandshakeTimeout
	}
	return t
}

// servingConfig is a copy of c with what the engine needs: TLS 1.2 at
// least, and full records from the first (replies of 64 KiB bodies).
func servingConfig(c *tls.Config) *tls.Config {
	c = c.Clone()
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	c.DynamicRecordSizingDisabled = true
	return c
}

// TLSStats are the TLS listener's figures. Safe from any goroutine.
type TLSStats struct {
	// Handshakes counts those that succeeded, Failed those that did not,
	// by reason; Handshaking is those in progress.
	Handshakes  uint64
	Failed      [NumTLSFailures]uint64
	Handshaking int64
	// Current is the TLS connections open (served by the event loops),
	// Total those opened.
	Current int64
	Total   uint64
}

// TLSStats reports the TLS listener's figures; ok is false without one.
func (s *Server) TLSStats() (st TLSStats, ok bool) {
	t := s.tls
	if t == nil {
		return st, false
	}
	st = TLSStats{Handshakes: t.ok.Load(), Handshaking: t.handshaking.Load(),
		Current: t.current.Load(), Total: t.total.Load()}
	for i := range st.Failed {
		st.Failed[i] = t.failed[i].Load()
	}
	return st, true
}

// TLSAddr is the TLS listener's address, once Ready; nil without one.
func (s *Server) TLSAddr() net.Addr {
	if s.tlsLn == nil {
		return nil
	}
	return s.tlsLn.Addr()
}

// startHandshake takes a connection the TLS listener accepted, unless the
// handshakes in flight are at their bound; the handshake runs on a
// goroutine of its own. Accept loop only.
func (s *Server) startHandshake(nc net.Conn) {
	t := s.tls
	if t.handshaking.Add(1) > t.maxHandshakes {
		t.handshaking.Add(-1)
		s.conns.refused.Add(1)
		_ = nc.Close()
		return
	}
	s.handshakes.Add(1)
	go s.handshake(nc)
}

// handshake runs a TLS handshake on nc, bounded by the handshake timeout
// and by the server's stop, then hands the connection to the Route (a
// cluster member that does not lead proxies its plaintext) or to an event
// loop.
func (s *Server) handshake(nc net.Conn) {
	t := s.tls
	defer s.handshakes.Done()
	defer t.handshaking.Add(-1)
	tio := &tlsIO{raw: nc}
	tc := tls.Server(tio, t.config)
	ctx, cancel := context.WithTimeout(s.lifetime, t.timeout)
	_ = nc.SetDeadline(time.Now().Add(t.timeout))
	err := tc.HandshakeContext(ctx)
	cancel()
	_ = nc.SetDeadline(time.Time{})
	if err != nil {
		reason := tlsFailureOf(err)
		if s.lifetime.Err() == nil {
			t.failed[reason].Add(1)
		}
		if e := s.log.Debug(); e.Enabled() {
			e.Err(err).Str("reason", reason.String()).Str("remote", nc.RemoteAddr().String()).
				Msg("TLS handshake failed")
		}
		_ = nc.Close()
		return
	}
	t.ok.Add(1)
	if s.cfg.Route != nil && s.cfg.Route(tc) {
		return
	}
	s.enrollTLS(tc, tio)
}

// enrollTLS hands a connection whose handshake is done to an event loop:
// the socket itself (gnet takes a copy of its descriptor), with the
// tls.Conn that carries on over it.
func (s *Server) enrollTLS(tc *tls.Conn, tio *tlsIO) {
	raw := tio.raw
	tio.raw = nil // from here on, the loop feeds it; enrolling orders this before OnOpen
	if _, err := s.client.EnrollContext(raw, &tlsHandoff{tc: tc, tio: tio}); err != nil {
		if e := s.log.Debug(); e.Enabled() {
			e.Err(err).Msg("TLS: cannot register the connection")
		}
	}
}

// tlsHandoff is the context a TLS connection is enrolled with, for OnOpen.
type tlsHandoff struct {
	tc  *tls.Conn
	tio *tlsIO
}

// tlsFailureOf classifies a handshake's error.
func tlsFailureOf(err error) TLSFailure {
	var ne net.Error
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return TLSTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.Is(err, context.Canceled):
		return TLSClosed
	case errors.As(err, &rh):
		return TLSNotTLS
	case errors.As(err, &cv):
		return TLSBadClientCert
	case strings.Contains(err.Error(), "didn't provide a certificate"):
		return TLSNoClientCert
	case errors.As(err, &op) && op.Op == "remote error":
		return TLSClientAlert
	}
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknown) || errors.As(err, &invalid) {
		return TLSBadClientCert
	}
	return TLSProtocol
}

// tlsIO is what a TLS client's tls.Conn reads and writes. During the
// handshake (on its own goroutine) that is the socket, read one record at
// a time so that nothing past the handshake is taken from it: what the
// client sends next stays in the socket for the event loop. Once enrolled
// it is the loop's: Read hands out the ciphertext the session was given
// (in), again a record at a time, so that tls.Conn holds at most one; when
// that is used up it says "would block", which tls.Conn passes on without
// failing; Write appends to the loop's scratch (out), which the session
// then writes to the socket through gnet.
//
// Its fields belong to whoever drives the tls.Conn: the handshake's
// goroutine, then (enrollTLS hands over, ordered by gnet's enrolment) the
// connection's event loop, or the Route's goroutines for a proxied one.
type tlsIO struct {
	raw net.Conn // the socket, until the connection is enrolled (or for good, when proxied)

	hdr  [recordHeaderLen]byte
	have int // bytes of hdr read, while reading the socket
	left int // bytes of the current record still to hand out

	in  []byte  // enrolled: whole records to hand out, aliasing gnet's buffer during pump
	out *[]byte // enrolled: the loop's scratch the records written go to (loopState.tlsOut)
}

const (
	recordHeaderLen = 5
	// maxRecord is the largest record TLS allows on the wire: 2^14 bytes
	// of plaintext and up to 2048 of expansion.
	maxRecord = recordHeaderLen + 1<<14 + 2048
)

// errWouldBlock is what tlsIO's Read says when the loop has handed it
// everything: a temporary error, which tls.Conn returns without marking the
// connection failed.
var errWouldBlock = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "engine: no more TLS input for now" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

func (t *tlsIO) Read(p []byte) (int, error) {
	if t.raw != nil {
		return t.readSocket(p)
	}
	if len(t.in) == 0 {
		return 0, errWouldBlock
	}
	if t.left == 0 {
		// The session feeds whole records only (recordsIn).
		t.left = recordHeaderLen + recordLen(t.in)
	}
	n := copy(p[:min(len(p), t.left)], t.in)
	t.in, t.left = t.in[n:], t.left-n
	return n, nil
}

// readSocket reads at most to the end of the current record: its header
// whole first (tls.Conn asks for at least that much), then its body.
func (t *tlsIO) readSocket(p []byte) (int, error) {
	if t.left == 0 {
		for t.have < recordHeaderLen {
			n, err := t.raw.Read(t.hdr[t.have:])
			t.have += n
			if err != nil {
				return 0, err
			}
		}
		t.have = 0
		t.left = recordLen(t.hdr[:])
		n := copy(p, t.hdr[:])
		if n < recordHeaderLen {
			return n, io.ErrShortBuffer // tls.Conn never asks for less
		}
		return n, nil
	}
	n, err := t.raw.Read(p[:min(len(p), t.left)])
	t.left -= n
	return n, err
}

func (t *tlsIO) Write(p []byte) (int, error) {
	if t.raw != nil {
		return t.raw.Write(p)
	}
	*t.out = append(*t.out, p...)
	return len(p), nil
}

// The rest of net.Conn matters only while the socket is tlsIO's.

func (t *tlsIO) Close() error {
	if t.raw != nil {
		return t.raw.Close()
	}
	return nil
}

func (t *tlsIO) LocalAddr() net.Addr {
	if t.raw != nil {
		return t.raw.LocalAddr()
	}
	return nil
}

func (t *tlsIO) RemoteAddr() net.Addr {
	if t.raw != nil {
		return t.raw.RemoteAddr()
	}
	return nil
}

func (t *tlsIO) SetDeadline(d time.Time) error {
	if t.raw != nil {
		return t.raw.SetDeadline(d)
	}
	return nil
}

func (t *tlsIO) SetReadDeadline(d time.Time) error {
	if t.raw != nil {
		return t.raw.SetReadDeadline(d)
	}
	return nil
}

func (t *tlsIO) SetWriteDeadline(d time.Time) error {
	if t.raw != nil {
		return t.raw.SetWriteDeadline(d)
	}
	return nil
}

// tlsConn is a TLS session's gnet.Conn: the socket's, with the input and
// output methods the session uses going through the tls.Conn. Peek and
// Discard are over the plaintext decrypted so far; InboundBuffered counts
// it with the ciphertext gnet holds (a record not yet whole); Write and
// Writev encrypt and hand the records to gnet at once. Loop goroutine
// only, except for what gnet.Conn allows elsewhere (Close, Wake, ...),
// which goes to the socket's.
type tlsConn struct {
	gnet.Conn
	tc  *tls.Conn
	tio *tlsIO
	// plain is the decrypted input the session has not consumed: in the
	// loop's scratch (loopState.tlsIn) during a callback that decrypted
	// into it (scratch), in own otherwise.
	plain   []byte
	own     []byte
	scratch bool
	// ended: the client sent close_notify (or its stream broke): no more
	// input will come.
	ended bool
}

// ownKeep is the most capacity an emptied leftover buffer keeps, so that
// an idle TLS connection does not hold a large one.
const ownKeep = 4 << 10

// pump decrypts the whole records gnet holds into plain (in scratch, the
// loop's, until settle), and reports
// whether the client's input has ended (close_notify: what came before it
// is served, as after a half-close) and any failure of the TLS layer,
// after which the connection must close. A KeyUpdate the client asks to
// be answered is written as it is read.
func (c *tlsConn) pump(scratch *[]byte) (ended bool, err error) {
	if c.ended {
		c.dropInput()
		return true, nil
	}
	in, _ := c.Conn.Peek(-1)
	whole, ok := recordsIn(in)
	if whole > 0 {
		c.tio.in, c.tio.left = in[:whole], 0
		err = c.decrypt(scratch)
		c.tio.in = nil // it aliases gnet's buffer
		_, _ = c.Conn.Discard(whole)
	}
	if !ok && err == nil {
		err = errRecordTooLong
	}
	c.flush() // a KeyUpdate's answer, or an alert
	if c.ended {
		c.dropInput()
	}
	return c.ended, err
}

// decrypt reads from the tls.Conn until the records handed to it are used
// up: into the loop's scratch when nothing was left of the input, after
// what was left in the connection's own buffer otherwise.
func (c *tlsConn) decrypt(scratch *[]byte) error {
	if len(c.plain) == 0 {
		c.plain, c.scratch = (*scratch)[:0], true
	} else {
		c.own = append(c.own[:0], c.plain...)
		c.plain = c.own
	}
	defer func() {
		// plain may have moved to a larger array.
		if c.scratch {
			*scratch = c.plain[:0]
		} else {
			c.own = c.plain
		}
	}()
	for {
		if cap(c.plain)-len(c.plain) < 1<<14 {
			c.plain = slices.Grow(c.plain, 1<<14)
		}
		n, err := c.tc.Read(c.plain[len(c.plain):cap(c.plain)])
		c.plain = c.plain[:len(c.plain)+n]
		switch {
		case err == nil:
		case errors.Is(err, errWouldBlock):
			return nil
		case errors.Is(err, io.EOF):
			c.ended = true
			return nil
		default:
			return err
		}
	}
}

// dropInput throws away what the client sends once its input has ended.
func (c *tlsConn) dropInput() {
	if n := c.Conn.InboundBuffered(); n > 0 {
		_, _ = c.Conn.Discard(n)
	}
}

// errRecordTooLong: a record header announces more than TLS allows.
var errRecordTooLong = errors.New("engine: a TLS record longer than TLS allows")

// recordsIn is the length of the whole TLS records at the start of in,
// and false if the next one's header announces more than maxRecord (the
// tls.Conn would refuse it; gnet must not buffer it meanwhile).
func recordsIn(in []byte) (int, bool) {
	n := 0
	for len(in)-n >= recordHeaderLen {
		size := recordHeaderLen + recordLen(in[n:])
		if size > maxRecord {
			return n, false
		}
		if len(in)-n < size {
			break
		}
		n += size
	}
	return n, true
}

// recordLen is the length a record header announces.
func recordLen(hdr []byte) int { return int(hdr[3])<<8 | int(hdr[4]) }

// flush writes the records the tls.Conn has made to the socket.
func (c *tlsConn) flush() {
	out := c.tio.out
	if len(*out) == 0 {
		return
	}
	_, _ = c.Conn.Write(*out)
	*out = (*out)[:0]
}

// finish ends ss before the client can see its end: the session closes
// (its reserved jobs go back to ready, as OnClose would make them, which
// then finds it closed), then close_notify goes out. The client reads the
// end of its stream from close_notify, before gnet closes the socket and
// runs OnClose: a client that sent quit and saw the end must find its
// jobs released, as with a plaintext connection.
func (c *tlsConn) finish(ss *session) {
	ss.close()
	c.goodbye()
}

// goodbye sends close_notify before the server closes the connection.
func (c *tlsConn) goodbye() {
	_ = c.tc.CloseWrite()
	c.flush()
}

func (c *tlsConn) Peek(n int) ([]byte, error) {
	if n < 0 || n > len(c.plain) {
		return c.plain, nil
	}
	return c.plain[:n], nil
}

func (c *tlsConn) Discard(n int) (int, error) {
	n = min(n, len(c.plain))
	c.plain = c.plain[n:]
	return n, nil
}

// settle moves what is left of the decrypted input out of the loop's
// scratch into the connection's own buffer, at the end of the callback
// that decrypted it: a partial command line, or input queued behind a
// blocked reserve.
func (c *tlsConn) settle() {
	switch {
	case len(c.plain) == 0:
		c.plain = nil
		if cap(c.own) > ownKeep {
			c.own = nil
		}
	case c.scratch:
		c.own = append(c.own[:0], c.plain...)
		c.plain = c.own
	}
	c.scratch = false
}

func (c *tlsConn) InboundBuffered() int { return len(c.plain) + c.Conn.InboundBuffered() }

func (c *tlsConn) Write(b []byte) (int, error) {
	n, err := c.tc.Write(b)
	c.flush()
	return n, err
}

func (c *tlsConn) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		m, err := c.tc.Write(b)
		n += m
		if err != nil {
			c.flush()
			return n, err
		}
	}
	c.flush()
	return n, nil
}
