package engine_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// tlsServer is a server with a TLS listener beside its plaintext one, on
// a certificate from its own CA for 127.0.0.1.
type tlsServer struct {
	srv       *engine.Server
	plainAddr string
	addr      string // the TLS listener's
	ca        *testproc.CA
}

// startTLS starts a server whose TLS listener takes cfg.TLS's settings
// (its Config is made here when nil) with a certificate for 127.0.0.1.
func startTLS(t *testing.T, cfg engine.Config, mutual bool) *tlsServer {
	t.Helper()
	ca := testproc.NewTestCA(t, "sprout test CA")
	if cfg.TLS == nil {
		cfg.TLS = &engine.TLSConfig{}
	}
	cfg.TLS.Address = "127.0.0.1:0"
	cfg.TLS.Config = &tls.Config{Certificates: []tls.Certificate{ca.TLSCert(t, "server", time.Time{}, "127.0.0.1")}}
	if mutual {
		cfg.TLS.Config.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.TLS.Config.ClientCAs = ca.Pool()
	}
	srv, _, addr := startServerOn(t, cfg, store.New(store.Options{}))
	return &tlsServer{srv: srv, plainAddr: addr, addr: srv.TLSAddr().String(), ca: ca}
}

// clientConfig trusts the server's CA, with certs as the client's own.
func (ts *tlsServer) clientConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ts.ca.Pool(), Certificates: certs, ServerName: "127.0.0.1"}
}

// dialTLS connects and handshakes; the connection is closed at the end.
func dialTLS(t testing.TB, addr string, cfg *tls.Config) *rawConn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

// A beanstalkd client library over TLS, unchanged: its connection is a
// tls.Conn. put, reserve, delete, with a body that takes several records.
func TestTLSClient(t *testing.T) {
	ts := startTLS(t, engine.Config{MaxJobSize: 1 << 20}, false)
	nc, err := tls.Dial("tcp", ts.addr, ts.clientConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := beanstalk.NewConn(nc)
	defer c.Close()
	for _, size := range []int{5, 64 << 10, 200 << 10} {
		body := []byte(strings.Repeat("0123456789", size/10+1)[:size])
		id, err := c.Put(body, 1, 0, time.Minute)
		if err != nil {
			t.Fatalf("put %d bytes: %v", size, err)
		}
		rid, got, err := c.Reserve(time.Second)
		if err != nil || rid != id || string(got) != string(body) {
			t.Fatalf("reserve: id %d (want %d), %d bytes (want %d), %v", rid, id, len(got), size, err)
		}
		if err := c.Delete(id); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	st, ok := ts.srv.TLSStats()
	if !ok || st.Handshakes != 1 || st.Current != 1 || st.Total != 1 {
		t.Errorf("TLS stats %+v, want one handshake and one connection open", st)
	}
}

// Mutual TLS: a client with a certificate from the CA is served; one
// without a certificate, with one from another CA, or with an expired one
// is refused in the handshake, and each is counted by its reason.
func TestTLSMutual(t *testing.T) {
	ts := startTLS(t, engine.Config{}, true)
	good := dialTLS(t, ts.addr, ts.clientConfig(ts.ca.TLSCert(t, "worker", time.Time{})))
	good.send("put 0 0 60 2\r\nhi\r\nreserve\r\ndelete 1\r\n")
	good.expect("INSERTED 1\r\n")
	good.expect("RESERVED 1 2\r\nhi\r\n")
	good.expect("DELETED\r\n")

	other := testproc.NewTestCA(t, "another CA")
	for _, c := range []struct {
		name   string
		certs  []tls.Certificate
		reason engine.TLSFailure
	}{
		{"no certificate", nil, engine.TLSNoClientCert},
		{"another CA", []tls.Certificate{other.TLSCert(t, "intruder", time.Time{})}, engine.TLSBadClientCert},
		{"expired", []tls.Certificate{ts.ca.TLSCert(t, "old", time.Now().Add(-time.Hour))}, engine.TLSBadClientCert},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, _ := ts.srv.TLSStats()
			cfg := ts.clientConfig()
			if len(c.certs) > 0 {
				// Sent whatever CAs the server names (Go's client would
				// otherwise keep a certificate from another CA to itself).
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					return &c.certs[0], nil
				}
			}
			refused(t, ts.addr, cfg)
			testproc.WaitFor(t, 5*time.Second, "the refusal counted", func() bool {
				st, _ := ts.srv.TLSStats()
				return st.Failed[c.reason] == before.Failed[c.reason]+1
			})
		})
	}
	good.send("list-tube-used\r\n") // the others never touched it
	good.expect("USING default\r\n")
}

// refused checks that a TLS client configured so cannot use the server:
// in TLS 1.3 a client learns of its refused certificate only at its first
// read, so a command is sent and no reply may come.
func refused(t *testing.T, addr string, cfg *tls.Config) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return // refused in the handshake
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("list-tube-used\r\n")); err != nil {
		return
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Fatalf("served %q", line)
	}
}

// Plaintext on the TLS port is refused at once and counted; a TLS client
// on the plaintext port fails its handshake, and neither hangs.
func TestTLSWrongPort(t *testing.T) {
	ts := startTLS(t, engine.Config{}, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.send("put 0 0 60 2\r\nhi\r\n")
	if got, err := c.reply(5 * time.Second); err == nil {
		t.Fatalf("the TLS port answered plaintext with %q", got)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the TLS port left a plaintext client waiting")
	}
	testproc.WaitFor(t, 5*time.Second, "the plaintext client counted", func() bool {
		st, _ := ts.srv.TLSStats()
		return st.Failed[engine.TLSNotTLS] == 1
	})

	d := net.Dialer{Timeout: 5 * time.Second, Deadline: time.Now().Add(5 * time.Second)}
	if tc, err := tls.DialWithDialer(&d, "tcp", ts.plainAddr, ts.clientConfig()); err == nil {
		tc.Close()
		t.Fatal("a TLS handshake succeeded on the plaintext port")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a TLS client on the plaintext port waited for its handshake: %v", err)
	}
	if n := ts.srv.Limits().TLSOnPlaintext; n != 1 {
		t.Errorf("%d TLS clients on the plaintext port counted, want 1", n)
	}
	p := dialRaw(t, "tcp", ts.plainAddr) // the plaintext port serves on
	p.send("list-tube-used\r\n")
	p.expect("USING default\r\n")
}

// A handshake that does not finish within the timeout is closed, and one
// a client gives up half way is counted as closed.
func TestTLSHandshakeTimeout(t *testing.T) {
	ts := startTLS(t, engine.Config{TLS: &engine.TLSConfig{HandshakeTimeout: 300 * time.Millisecond}}, false)
	silent := dialRaw(t, "tcp", ts.addr)
	start := time.Now()
	if _, err := silent.reply(5 * time.Second); err == nil || time.Since(start) > 4*time.Second {
		t.Fatalf("a silent client was not closed at the handshake timeout: %v after %v", err, time.Since(start))
	}
	half := dialRaw(t, "tcp", ts.addr)
	half.send("\x16\x03\x01\x02\x00\x01") // a ClientHello's first bytes
	_ = half.c.Close()
	testproc.WaitFor(t, 5*time.Second, "both counted", func() bool {
		st, _ := ts.srv.TLSStats()
		return st.Failed[engine.TLSTimeout] == 1 && st.Failed[engine.TLSClosed] == 1 && st.Handshaking == 0
	})
}

// A client that pipelines commands, sends close_notify and shuts its
// side down gets every reply, then the server's close_notify and the end.
func TestTLSHalfClose(t *testing.T) {
	ts := startTLS(t, engine.Config{}, false)
	c, err := testproc.Dialer{Timeout: 5 * time.Second, TLS: ts.clientConfig()}.Dial(ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 200
	for i := range n {
		c.WriteString(fmt.Sprintf("put 0 0 60 3\r\n%03d\r\n", i))
	}
	c.WriteString("reserve-with-timeout 0\r\nreserve\r\n")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		if _, err := c.Expect(testproc.ReplyInserted); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	for _, want := range []string{"RESERVED 1 3\r\n000\r\n", "RESERVED 2 3\r\n001\r\n"} {
		frame, err := c.ReadFrame()
		if err != nil || string(frame) != want {
			t.Fatalf("got %q (%v), want %q", frame, err, want)
		}
	}
	if _, err := c.ReadReply(false); err == nil {
		t.Fatal("a reply after the last command")
	}
}

// With no plaintext listener (-l none) the server serves TLS alone.
func TestTLSOnly(t *testing.T) {
	ca := testproc.NewTestCA(t, "sprout test CA")
	srv := engine.New(engine.Config{Network: engine.NetworkNone, Loops: 1, TLS: &engine.TLSConfig{
		Address: "127.0.0.1:0",
		Config:  &tls.Config{Certificates: []tls.Certificate{ca.TLSCert(t, "server", time.Time{}, "127.0.0.1")}},
	}}, store.New(store.Options{}))
	go func() { _ = srv.Run() }()
	<-srv.Ready()
	t.Cleanup(func() { _ = srv.Stop(t.Context()) })
	if srv.Addr().String() != srv.TLSAddr().String() {
		t.Errorf("Addr %s, TLSAddr %s", srv.Addr(), srv.TLSAddr())
	}
	c := dialTLS(t, srv.TLSAddr().String(), &tls.Config{RootCAs: ca.Pool()})
	c.send("list-tube-used\r\n")
	c.expect("USING default\r\n")
}

// Handshakes in flight are bounded by half the buffer budget: past it a
// TLS connection is closed at once and counted as refused, and the
// connections already served are not touched.
func TestTLSHandshakeBudget(t *testing.T) {
	const budget = 4 * engine.HandshakeReserve // room for two handshakes
	ts := startTLS(t, engine.Config{MaxBufferMemory: budget}, false)
	served := dialTLS(t, ts.addr, ts.clientConfig())
	testproc.WaitFor(t, 5*time.Second, "its handshake over", func() bool {
		st, _ := ts.srv.TLSStats()
		return st.Handshaking == 0
	})
	for range 2 {
		dialRaw(t, "tcp", ts.addr) // handshakes that never come
	}
	testproc.WaitFor(t, 5*time.Second, "two handshakes in flight", func() bool {
		st, _ := ts.srv.TLSStats()
		return st.Handshaking == 2
	})
	extra := dialRaw(t, "tcp", ts.addr)
	if _, err := extra.reply(5 * time.Second); err == nil {
		t.Fatal("a third handshake was not refused")
	}
	if ts.srv.Limits().Refused != 1 {
		t.Errorf("refused %d, want 1", ts.srv.Limits().Refused)
	}
	served.send("list-tube-used\r\n")
	served.expect("USING default\r\n")
}

// slowlorisConns and slowlorisTimeout size TestTLSSlowloris; the storm
// build tag (slowloris_heavy_test.go) runs it at the default timeout.
var (
	slowlorisConns   = 1000
	slowlorisTimeout = 2 * time.Second
)

// A slowloris on the TLS port, 1,000 connections sending a ClientHello a
// byte a second: each is closed at the handshake timeout and counted, and
// meanwhile a TLS client and a plaintext client keep their round trips
// quick. The bound on their latency is generous, for a shared machine;
// what it catches is a server that serves them after the slow handshakes.
func TestTLSSlowloris(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 connections")
	}
	ts := startTLS(t, engine.Config{TLS: &engine.TLSConfig{HandshakeTimeout: slowlorisTimeout}}, false)
	fast := dialTLS(t, ts.addr, ts.clientConfig())
	plain := dialRaw(t, "tcp", ts.plainAddr)

	hello := []byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
	stop := make(chan struct{})
	done := make(chan struct{}, slowlorisConns)
	for range slowlorisConns {
		c, err := net.DialTimeout("tcp", ts.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			defer c.Close()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for i := 0; ; i = (i + 1) % len(hello) {
				if _, err := c.Write(hello[i : i+1]); err != nil {
					return // closed by the server
				}
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		}()
	}
	defer close(stop)
	start := time.Now()
	var worst time.Duration
	for time.Since(start) < slowlorisTimeout+time.Second {
		for _, c := range []*rawConn{fast, plain} {
			t0 := time.Now()
			c.send("put 0 0 60 2\r\nhi\r\nreserve\r\n")
			for _, want := range []string{"INSERTED ", "RESERVED "} {
				if got, err := c.reply(5 * time.Second); err != nil || !strings.HasPrefix(got, want) {
					t.Fatalf("got %q (%v), want %s...", got, err, want)
				}
			}
			worst = max(worst, time.Since(t0))
		}
	}
	const bound = time.Second
	if worst > bound {
		t.Errorf("a round trip beside the slowloris took %v, bound %v", worst, bound)
	}
	testproc.WaitFor(t, slowlorisTimeout+10*time.Second, "every slow handshake closed", func() bool {
		st, _ := ts.srv.TLSStats()
		return st.Failed[engine.TLSTimeout] == uint64(slowlorisConns) && st.Handshaking == 0
	})
	for range slowlorisConns {
		<-done
	}
	t.Logf("slowest round trip beside %d slow handshakes: %v", slowlorisConns, worst)
}

// A configuration that picks its certificate and client CAs at each
// handshake (internal/certs, which reloads them) serves mutual TLS, and
// the engine's settings reach the configuration it picks: a TLS 1.1
// client is refused.
func TestTLSConfigForClient(t *testing.T) {
	ca := testproc.NewTestCA(t, "sprout test CA")
	picked := &tls.Config{
		Certificates: []tls.Certificate{ca.TLSCert(t, "server", time.Time{}, "127.0.0.1")},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
		MinVersion: tls.VersionTLS10,
	}
	srv, _, _ := startServerOn(t, engine.Config{TLS: &engine.TLSConfig{Address: "127.0.0.1:0", Config: &tls.Config{
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return picked, nil },
	}}}, store.New(store.Options{}))
	addr := srv.TLSAddr().String()
	cfg := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.TLSCert(t, "worker", time.Time{})}}
	c := dialTLS(t, addr, cfg)
	c.send("list-tube-used\r\n")
	c.expect("USING default\r\n")
	old := cfg.Clone()
	old.MaxVersion = tls.VersionTLS11
	old.MinVersion = tls.VersionTLS10
	if tc, err := tls.Dial("tcp", addr, old); err == nil {
		tc.Close()
		t.Fatal("a TLS 1.1 client was served")
	}
	refused(t, addr, &tls.Config{RootCAs: ca.Pool()})
}

// A cluster member's Route sees a TLS connection once its handshake is
// done, as the *tls.Conn: taken, it is the Route's to read in the clear;
// given back with Serve, the engine serves it over the same TLS session,
// with what the client sent meanwhile.
func TestTLSRoute(t *testing.T) {
	r := newRouter()
	r.setTake(true)
	ts := startTLS(t, engine.Config{Route: r.route}, false)

	taken := dialTLS(t, ts.addr, ts.clientConfig())
	<-r.gotOne
	r.mu.Lock()
	nc := r.taken[0]
	r.mu.Unlock()
	if _, ok := nc.(*tls.Conn); !ok {
		t.Fatalf("Route was given a %T, want the *tls.Conn", nc)
	}
	taken.send("list-tube-used\r\n")
	line := make([]byte, len("list-tube-used\r\n"))
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(nc, line); err != nil || string(line) != "list-tube-used\r\n" {
		t.Fatalf("the Route read %q, %v", line, err)
	}

	r.setTake(false)
	back := dialTLS(t, ts.addr, ts.clientConfig())
	back.send("use given-back\r\n")
	back.expect("USING given-back\r\n") // left to the engine

	r.setTake(true)
	later := dialTLS(t, ts.addr, ts.clientConfig())
	<-r.gotOne
	later.send("list-tube-used\r\n") // sent while the Route holds it
	r.mu.Lock()
	nc = r.taken[1]
	r.mu.Unlock()
	ts.srv.Serve(nc)
	later.expect("USING default\r\n")
	if st, _ := ts.srv.TLSStats(); st.Current != 2 {
		t.Errorf("%d TLS sessions served, want 2", st.Current)
	}
}
