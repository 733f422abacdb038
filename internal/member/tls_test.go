package member

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// casSource is a replication.TLSSource whose CA a test sets.
type casSource struct{ pool *x509.CertPool }

func (s *casSource) Certificate() *tls.Certificate { return nil }
func (s *casSource) Pool() *x509.CertPool          { return s.pool }

// A member that does not lead reaches the leader's side port over TLS
// when its certificate is from the members' CA, as that CA is at each
// connection, and for the leader's host; from another CA it is refused.
func TestForwardTLS(t *testing.T) {
	members, other := testproc.NewTestCA(t, "members"), testproc.NewTestCA(t, "other")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("leader"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{members.TLSCert(t, "leader", time.Time{}, "127.0.0.1")}}
	srv.StartTLS()
	defer srv.Close()

	src := &casSource{pool: other.Pool()}
	client := &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{DialTLSContext: forwardDialTLS(src)}}
	if resp, err := client.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatal("a leader whose certificate is from another CA was trusted")
	}
	src.pool = members.Pool() // the members' CA, rotated in
	client.CloseIdleConnections()
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("the leader's side port: %v", err)
	}
	resp.Body.Close()

	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	if resp, err := client.Get("https://localhost:" + port); err == nil {
		resp.Body.Close()
		t.Error("a certificate for 127.0.0.1 was trusted for localhost")
	}
}

// TestForwardTLSChecksIPHost: a leader's side port reached at an IP
// address must present a certificate valid for that IP: one of the
// members' CA for another host (a name, another IP) is not the leader's.
// The check read the connection's ServerName, which Go leaves empty for
// an IP address (no SNI), and took any such certificate, and with it the
// admin token a forwarded request carries. Found by a reviewing helper.
func TestForwardTLSChecksIPHost(t *testing.T) {
	members := testproc.NewTestCA(t, "members")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("impostor"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{
		members.TLSCert(t, "impostor", time.Time{}, "other.example", "10.9.9.9")}}
	srv.StartTLS()
	defer srv.Close()

	client := &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{DialTLSContext: forwardDialTLS(&casSource{pool: members.Pool()})}}
	resp, err := client.Get(srv.URL) // https://127.0.0.1:PORT
	if err == nil {
		resp.Body.Close()
		t.Fatal("a certificate for other.example and 10.9.9.9 was trusted for 127.0.0.1")
	}
}

// TestForwardTransportGoesDirect: the transport to the members' side
// ports takes no proxy from the environment: through one, an https
// request is dialled in plain TCP and its TLS made by the transport,
// without forwardDialTLS's check (a leader of the members' CA was then
// refused as unknown). Found by a reviewing helper.
func TestForwardTransportGoesDirect(t *testing.T) {
	members := testproc.NewTestCA(t, "members")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("leader"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{members.TLSCert(t, "leader", time.Time{}, "127.0.0.1")}}
	srv.StartTLS()
	defer srv.Close()
	tr := forwardTransport(true, &casSource{pool: members.Pool()})
	if tr.Proxy != nil {
		t.Fatal("the forwarding transport takes a proxy")
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatalf("the leader's side port: %v", err)
	}
	resp.Body.Close()
}
