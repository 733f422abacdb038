package ops_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/certs"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/testproc"
)

// The TLS figures: the client port's handshakes and connections from the
// engine, the side port's own handshakes over TLS (ServeTLS), and the
// certificates' expiry, staleness and reloads.
func TestTLSMetrics(t *testing.T) {
	dir := t.TempDir()
	ca := testproc.NewTestCA(t, "ca")
	notAfter := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	files, err := ca.WriteFiles(dir, "http", notAfter, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	set := certs.NewSet(zerolog.Nop())
	pair, err := set.KeyPair("--http-tls-cert", files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.CAs("--tls-client-ca", files.CA); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "http.pem"), []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	set.Reload() // the certificate fails, the CA bundle reloads

	e := newFakeEngine()
	e.stats.CurrentConnections = 5
	e.tls = engine.TLSStats{Handshakes: 7, Handshaking: 2, Current: 3, Total: 9}
	e.tls.Failed[engine.TLSTimeout] = 4
	m := ops.NewMetrics()
	mux := http.NewServeMux()
	if err := ops.Register(mux, ops.Config{Engine: e, Store: &fakeStore{}, Metrics: m, Certs: set}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ops.ServeTLS(ln, mux, certs.ServerConfig(pair, nil), m, zerolog.Nop())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	base := "https://" + srv.Addr().String()

	// A plaintext request on the TLS side port fails its handshake.
	if resp, err := http.Get("http://" + srv.Addr().String() + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the TLS side port served plaintext")
		}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	var fams families
	testproc.WaitFor(t, 5*time.Second, "the plaintext request counted", func() bool {
		fams = scrapeWith(t, client, base, acceptText)
		v, _ := fams.value("sprout_tls_handshake_failures_total", "listener=http,reason=not_tls")
		return v == 1
	})
	for _, w := range []struct {
		name, labels string
		want         float64
	}{
		{"sprout_tls_handshakes_total", "listener=client_tls", 7},
		{"sprout_tls_handshake_failures_total", "listener=client_tls,reason=timeout", 4},
		{"sprout_tls_handshake_failures_total", "listener=client_tls,reason=bad_client_certificate", 0},
		{"sprout_tls_handshakes_in_progress", "", 2},
		{"sprout_listener_connections", "listener=client_tls", 3},
		{"sprout_listener_connections", "listener=client", 2},
		{"sprout_tls_handshakes_total", "listener=http", 1}, // this scrape's connection, kept alive
		{"sprout_tls_certificate_expiry_timestamp_seconds", "certificate=--http-tls-cert", float64(notAfter.Unix())},
		{"sprout_tls_certificate_stale", "certificate=--http-tls-cert", 1},
		{"sprout_tls_certificate_stale", "certificate=--tls-client-ca", 0},
		{"sprout_tls_reloads_total", "result=ok", 1},
		{"sprout_tls_reloads_total", "result=failed", 1},
	} {
		if v, ok := fams.value(w.name, w.labels); !ok || v != w.want {
			t.Errorf("%s{%s} = %v (present %v), want %v", w.name, w.labels, v, ok, w.want)
		}
	}
}
