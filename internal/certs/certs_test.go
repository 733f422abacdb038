package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/testproc"
)

// write writes name in dir and returns its path.
func write(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func issue(t *testing.T, ca *testproc.CA, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, err := ca.Issue(cn, time.Time{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

func cn(k *KeyPair) string { return k.Certificate().Leaf.Subject.CommonName }

// At start a file that cannot be used is an error that names the flags
// that gave it.
func TestLoadErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	ca := testproc.NewTestCA(t, "ca")
	c, k := issue(t, ca, "a")
	_, k2 := issue(t, ca, "b")
	cert, key := write(t, dir, "c.pem", c), write(t, dir, "k.pem", k)
	s := NewSet(zerolog.Nop())
	for _, tc := range []struct{ name, cert, key string }{
		{"missing", filepath.Join(dir, "none.pem"), key},
		{"not PEM", write(t, dir, "junk.pem", []byte("junk")), key},
		{"another key", cert, write(t, dir, "k2.pem", k2)},
	} {
		if _, err := s.KeyPair("--tls-cert", tc.cert, tc.key); err == nil || !strings.HasPrefix(err.Error(), "--tls-cert: ") {
			t.Errorf("%s: %v, want an error naming --tls-cert", tc.name, err)
		}
	}
	if _, err := s.CAs("--tls-client-ca", write(t, dir, "empty.pem", nil)); err == nil ||
		!strings.HasPrefix(err.Error(), "--tls-client-ca: ") {
		t.Errorf("an empty CA bundle: %v", err)
	}
	if _, err := s.KeyPair("--tls-cert", cert, key); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Stats().Entries); n != 1 {
		t.Errorf("%d entries, want only the one that loaded", n)
	}
}

// Reload puts new files in service; a bad file keeps the old one, is
// counted and marked stale, once, until a good one comes.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca := testproc.NewTestCA(t, "ca")
	c, k := issue(t, ca, "first")
	cert, key := write(t, dir, "c.pem", c), write(t, dir, "k.pem", k)
	var logs bytes.Buffer
	s := NewSet(zerolog.New(&logs))
	pair, err := s.KeyPair("--tls-cert", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if cn(pair) != "first" {
		t.Fatalf("serving %q", cn(pair))
	}
	c, k = issue(t, ca, "second")
	write(t, dir, "c.pem", c)
	write(t, dir, "k.pem", k)
	s.Reload()
	if cn(pair) != "second" || s.Stats().Reloads != 1 {
		t.Fatalf("after Reload: serving %q, stats %+v", cn(pair), s.Stats())
	}

	write(t, dir, "c.pem", []byte("-----BEGIN CERTIFICATE-----\ncut short"))
	s.Reload()
	st := s.Stats()
	if cn(pair) != "second" || st.Failures != 1 || !st.Entries[0].Stale {
		t.Fatalf("after a bad file: serving %q, stats %+v", cn(pair), st)
	}
	if n := strings.Count(logs.String(), `"level":"error"`); n != 1 {
		t.Errorf("%d errors logged, want 1:\n%s", n, logs.String())
	}
	s.poll()
	s.poll() // the same bad file: nothing more
	if st := s.Stats(); st.Failures != 1 {
		t.Errorf("a bad file was read again: %+v", st)
	}
	write(t, dir, "c.pem", c)
	s.Reload()
	if st := s.Stats(); cn(pair) != "second" || st.Entries[0].Stale || st.Reloads != 2 {
		t.Errorf("after the good file came back: %+v", st)
	}
	if want := pair.Certificate().Leaf.NotAfter.Unix(); s.Stats().Entries[0].NotAfter.Unix() != want {
		t.Errorf("expiry %v, want %v", s.Stats().Entries[0].NotAfter, want)
	}
}

// A change is read once the files have stayed the same for a poll: a
// certificate replaced before its key is not read half way.
func TestPollWaitsForTheFilesToSettle(t *testing.T) {
	dir := t.TempDir()
	ca := testproc.NewTestCA(t, "ca")
	c, k := issue(t, ca, "first")
	cert, key := write(t, dir, "c.pem", c), write(t, dir, "k.pem", k)
	s := NewSet(zerolog.Nop())
	pair, err := s.KeyPair("--tls-cert", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	c, k = issue(t, ca, "second")
	write(t, dir, "c.pem.new", c)
	if err := os.Rename(filepath.Join(dir, "c.pem.new"), cert); err != nil {
		t.Fatal(err)
	}
	s.poll() // the certificate changed; its key not yet
	write(t, dir, "k.pem.new", k)
	if err := os.Rename(filepath.Join(dir, "k.pem.new"), key); err != nil {
		t.Fatal(err)
	}
	s.poll() // changed again
	if cn(pair) != "first" || s.Stats().Failures != 0 {
		t.Fatalf("read before the files settled: %q, %+v", cn(pair), s.Stats())
	}
	s.poll()
	if cn(pair) != "second" || s.Stats().Failures != 0 {
		t.Fatalf("not read once settled: %q, %+v", cn(pair), s.Stats())
	}
}

// Kubernetes updates a secret volume by pointing its ..data symlink at a
// new directory; the files' paths stay the same. Watch sees it, and a
// server's new handshakes use the new certificate and client CAs while a
// connection made before keeps working.
func TestWatchSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := testproc.NewTestCA(t, "ca one"), testproc.NewTestCA(t, "ca two")
	version := func(name string, ca *testproc.CA) {
		c, k := issue(t, ca, name)
		v := filepath.Join(dir, ".."+name)
		if err := os.Mkdir(v, 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, v, "tls.crt", c)
		write(t, v, "tls.key", k)
		write(t, v, "ca.crt", ca.PEM)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(".."+name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("first", ca1)
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	s := NewSet(zerolog.Nop())
	pair, err := s.KeyPair("--tls-cert", filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	cas, err := s.CAs("--tls-client-ca", filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerConfig(pair, cas))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go echo(ln)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Watch(ctx, 10*time.Millisecond)

	client := func(ca *testproc.CA) *tls.Config {
		return &tls.Config{RootCAs: pool(ca1, ca2), Certificates: []tls.Certificate{ca.TLSCert(t, "client", time.Time{})}}
	}
	old, err := tls.Dial("tcp", ln.Addr().String(), client(ca1))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	roundTrip(t, old)
	if got := old.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "first" {
		t.Fatalf("served %q", got)
	}

	version("second", ca2)
	testproc.WaitFor(t, 5*time.Second, "the new files read", func() bool {
		return cn(pair) == "second" && cas.Pool().Equal(pool(ca2))
	})
	nc, err := tls.Dial("tcp", ln.Addr().String(), client(ca2))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	roundTrip(t, nc)
	if got := nc.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "second" {
		t.Errorf("a new connection was served %q", got)
	}
	if c, err := tls.Dial("tcp", ln.Addr().String(), client(ca1)); err == nil {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err == nil {
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Error("a client of the old CA was served after the CA changed")
			}
		}
		c.Close()
	}
	roundTrip(t, old) // the connection made before is untouched
}

func pool(cas ...*testproc.CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

// echo answers every byte with itself.
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			b := make([]byte, 1)
			for {
				if _, err := c.Read(b); err != nil {
					return
				}
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
	}
}

func roundTrip(t *testing.T, c *tls.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}
