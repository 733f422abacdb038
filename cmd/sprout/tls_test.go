package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"

	"github.com/sproutmq/sprout/internal/testproc"
)

// freeAddr is a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// tlsServer runs the binary with a TLS client port and its side port over
// TLS, both serving files issued by ca, and extra flags.
type tlsServer struct {
	p              *testproc.Process
	addr, httpAddr string
}

func startTLSServer(t *testing.T, cert, key string, extra ...string) tlsServer {
	t.Helper()
	s := tlsServer{addr: freeAddr(t), httpAddr: freeAddr(t)}
	s.p = testproc.StartConfig(t, testproc.Config{
		Binary: testproc.SproutBinary(t),
		Args: append([]string{"--tls-listen", s.addr, "--tls-cert", cert, "--tls-key", key,
			"--http", s.httpAddr, "--http-tls-cert", cert, "--http-tls-key", key}, extra...),
		Ready: testproc.Probe,
	})
	return s
}

// peerName is the common name of the certificate a new TLS connection to
// addr is served, or the error.
func peerName(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: replyTimeout}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// metric reads one series from the side port over TLS.
func metric(t *testing.T, base string, cfg *tls.Config, series string) string {
	t.Helper()
	r := testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodGet, URL: base + "/metrics",
		Timeout: replyTimeout, TLS: cfg})
	for _, line := range strings.Split(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestTLSMutual runs the binary with mutual TLS on its client port: a
// beanstalkd client library with a certificate from the CA puts, reserves
// and deletes; one without a certificate is refused, counted on the side
// port, which serves its metrics over TLS.
func TestTLSMutual(t *testing.T) {
	dir := t.TempDir()
	ca := testproc.NewTestCA(t, "sprout CA")
	files, err := ca.WriteFiles(dir, "server", time.Time{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s := startTLSServer(t, files.Cert, files.Key, "--tls-client-ca", files.CA)
	client := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.TLSCert(t, "worker", time.Time{})}}
	nc, err := tls.Dial("tcp", s.addr, client)
	if err != nil {
		t.Fatal(err)
	}
	c := beanstalk.NewConn(nc)
	defer c.Close()
	id, err := c.Put([]byte("over TLS"), 1, 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if rid, body, err := c.Reserve(time.Second); err != nil || rid != id || string(body) != "over TLS" {
		t.Fatalf("reserve: %d %q %v", rid, body, err)
	}
	if err := c.Delete(id); err != nil {
		t.Fatal(err)
	}

	anon, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: ca.Pool()})
	if err == nil {
		_ = anon.SetDeadline(time.Now().Add(replyTimeout))
		_, _ = anon.Write([]byte("list-tube-used\r\n"))
		if _, err := anon.Read(make([]byte, 1)); err == nil {
			t.Fatal("a client without a certificate was served")
		}
		anon.Close()
	}
	base := "https://" + s.httpAddr
	testproc.WaitFor(t, replyTimeout, "the refusal counted", func() bool {
		return metric(t, base, client, `sprout_tls_handshake_failures_total{listener="client_tls",reason="no_client_certificate"}`) == "1"
	})
	if got := metric(t, base, client, `sprout_tls_handshakes_total{listener="client_tls"}`); got != "1" {
		t.Errorf("handshakes: %q, want 1", got)
	}
	if got := metric(t, base, client, `sprout_listener_connections{listener="client_tls"}`); got != "1" {
		t.Errorf("TLS connections: %q, want 1", got)
	}
}

// TestTLSRotation: the certificates are read again on SIGHUP, and when a
// Kubernetes secret volume's ..data symlink moves to new files; new
// connections get the new certificate, connections open before keep
// working; a file that cannot be read keeps the old certificate in
// service, is counted and marked stale, and the server serves on.
func TestTLSRotation(t *testing.T) {
	dir := t.TempDir()
	ca := testproc.NewTestCA(t, "sprout CA")
	// A secret volume: tls.crt and tls.key point into ..data, a symlink to
	// the current version's directory.
	version := func(name string) {
		v := filepath.Join(dir, ".."+name)
		if err := os.Mkdir(v, 0o700); err != nil {
			t.Fatal(err)
		}
		c, k, err := ca.Issue(name, time.Time{}, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		for f, b := range map[string][]byte{"tls.crt": c, "tls.key": k} {
			if err := os.WriteFile(filepath.Join(v, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(".."+name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("first")
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	s := startTLSServer(t, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	base := "https://" + s.httpAddr

	old, err := testproc.Dialer{Timeout: replyTimeout, ReplyTimeout: replyTimeout, TLS: client}.Dial(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.Put(0, 0, 60, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if name, err := peerName(s.addr, client); err != nil || name != "first" {
		t.Fatalf("served %q, %v", name, err)
	}

	version("second")
	testproc.WaitFor(t, 20*time.Second, "the swapped files served", func() bool {
		name, err := peerName(s.addr, client)
		return err == nil && name == "second"
	})
	testproc.WaitFor(t, replyTimeout, "the side port's certificate too", func() bool {
		name, err := peerName(s.httpAddr, client)
		return err == nil && name == "second"
	})

	// SIGHUP: the files rewritten in place, read at once.
	c, k, err := ca.Issue("third", time.Time{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(dir, "..second")
	if err := os.WriteFile(filepath.Join(current, "tls.crt"), c, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(current, "tls.key"), k, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, replyTimeout, "SIGHUP's certificate served", func() bool {
		name, err := peerName(s.addr, client)
		return err == nil && name == "third"
	})

	// A bad file: the old certificate stays, the server says so once.
	if err := os.WriteFile(filepath.Join(current, "tls.crt"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf(`sprout_tls_certificate_stale{certificate="%s"}`, "--tls-cert and --tls-key")
	testproc.WaitFor(t, replyTimeout, "the bad file noticed", func() bool {
		return metric(t, base, client, stale) == "1"
	})
	if got := metric(t, base, client, `sprout_tls_reloads_total{result="failed"}`); got != "2" {
		t.Errorf("failed reloads %q, want 2 (the client port's and the side port's certificate)", got)
	}
	if name, err := peerName(s.addr, client); err != nil || name != "third" {
		t.Errorf("after a bad file: served %q, %v", name, err)
	}
	if n := strings.Count(s.p.Output(), "cannot reload a certificate"); n != 2 {
		t.Errorf("%d errors logged for the bad file, want one per certificate:\n%s", n, s.p.Output())
	}

	// The connection made at the start was never touched.
	if err := old.ExpectLine("list-tube-used\r\n", "USING default"); err != nil {
		t.Fatal(err)
	}
	if s.p.Exited() {
		t.Fatalf("the server stopped:\n%s", s.p.Output())
	}
}
