package ops

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/certs"
)

// TLS figures: the client port's handshakes and connections, read from the
// engine at scrape time; the side port's own handshakes, counted as they
// happen (httpTLS); and the certificates' expiry and reloads, read from the
// certs.Set at scrape time.

// Certs is what the side port reads of the certificates; *certs.Set has it.
type Certs interface {
	Stats() certs.Stats
}

// Listener labels.
const (
	listenerClient    = "client"     // the plaintext client port
	listenerClientTLS = "client_tls" // the TLS client port (--tls-listen)
	listenerHTTP      = "http"       // the side port over TLS
)

// httpTLS counts the side port's TLS handshakes. Safe for concurrent use.
type httpTLS struct {
	ok     atomic.Uint64
	failed [engine.NumTLSFailures]atomic.Uint64
}

// handshakeError is the prefix net/http logs a failed handshake with.
var handshakeError = []byte("http: TLS handshake error from ")

// note counts a handshake failure net/http logged, and reports whether
// the line was one.
func (h *httpTLS) note(line []byte) bool {
	if !bytes.HasPrefix(line, handshakeError) {
		return false
	}
	h.failed[tlsFailureOfText(string(line))].Add(1)
	return true
}

// tlsFailureOfText reads the reason from net/http's line, which carries
// the handshake's error as text only; the engine reads its own from the
// error itself (engine's tlsFailureOf), into the same reasons.
func tlsFailureOfText(s string) engine.TLSFailure {
	switch {
	case strings.Contains(s, "i/o timeout"), strings.Contains(s, "deadline exceeded"):
		return engine.TLSTimeout
	case strings.HasSuffix(s, "EOF"), strings.Contains(s, "connection reset"), strings.Contains(s, "broken pipe"):
		return engine.TLSClosed
	case strings.Contains(s, "does not look like a TLS handshake"), strings.Contains(s, "HTTP request to an HTTPS server"):
		return engine.TLSNotTLS
	case strings.Contains(s, "didn't provide a certificate"):
		return engine.TLSNoClientCert
	case strings.Contains(s, "failed to verify certificate"):
		return engine.TLSBadClientCert
	case strings.Contains(s, "remote error"):
		return engine.TLSClientAlert
	}
	return engine.TLSProtocol
}

// ServeTLS is Serve over TLS with config, its handshakes counted in m
// (sprout_tls_handshakes_total with listener="http"): those that fail as
// net/http logs them, those that succeed as their connection is verified.
func ServeTLS(ln net.Listener, h http.Handler, config *tls.Config, m *Metrics, logger zerolog.Logger) *Server {
	c := config.Clone()
	verify := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		m.httpTLS.ok.Add(1)
		return nil
	}
	m.servesTLS.Store(true)
	return serve(tls.NewListener(ln, c), h, tlsErrorWriter{m: m, next: levelWriter{logger, zerolog.DebugLevel}}, logger)
}

// tlsErrorWriter counts the handshake failures among net/http's error
// lines, and logs every line as before.
type tlsErrorWriter struct {
	m    *Metrics
	next levelWriter
}

func (w tlsErrorWriter) Write(p []byte) (int, error) {
	w.m.httpTLS.note(p)
	return w.next.Write(p)
}

// tlsCollector reads the TLS figures at scrape time.
type tlsCollector struct {
	engine  Engine
	certs   Certs    // nil without certificates
	metrics *Metrics // nil without one; the side port's handshakes

	handshakes, failures, inProgress *prometheus.Desc
	connections                      *prometheus.Desc
	expiry, stale, reloads           *prometheus.Desc
}

func newTLSCollector(e Engine, c Certs, m *Metrics) *tlsCollector {
	return &tlsCollector{engine: e, certs: c, metrics: m,
		handshakes: prometheus.NewDesc("sprout_tls_handshakes_total",
			"TLS handshakes completed, by listener (client_tls: --tls-listen; http: the side port).", []string{"listener"}, nil),
		failures: prometheus.NewDesc("sprout_tls_handshake_failures_total",
			"TLS handshakes that failed, by listener and reason: timeout, closed, not_tls (plaintext on the TLS port), "+
				"no_client_certificate, bad_client_certificate (another CA, expired), client_alert (the client refused ours), protocol.",
			[]string{"listener", "reason"}, nil),
		inProgress: prometheus.NewDesc("sprout_tls_handshakes_in_progress",
			"TLS handshakes on the client port not yet done.", nil, nil),
		connections: prometheus.NewDesc("sprout_listener_connections",
			"Open client connections, by listener (client: plaintext; client_tls: --tls-listen).", []string{"listener"}, nil),
		expiry: prometheus.NewDesc("sprout_tls_certificate_expiry_timestamp_seconds",
			"When the certificate in service expires (a CA bundle's first to expire), in Unix seconds, by the flag that names it.",
			[]string{"certificate"}, nil),
		stale: prometheus.NewDesc("sprout_tls_certificate_stale",
			"1 while a certificate's files have changed and could not be read: the previous one is still in service.",
			[]string{"certificate"}, nil),
		reloads: prometheus.NewDesc("sprout_tls_reloads_total",
			"Certificates and CA bundles read again (SIGHUP, or their files changed), by result: ok, failed.",
			[]string{"result"}, nil),
	}
}

func (c *tlsCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *tlsCollector) Collect(ch chan<- prometheus.Metric) {
	const (
		counter = prometheus.CounterValue
		gauge   = prometheus.GaugeValue
	)
	open := float64(c.engine.Stats().CurrentConnections)
	if st, ok := c.engine.TLSStats(); ok {
		ch <- prometheus.MustNewConstMetric(c.handshakes, counter, float64(st.Handshakes), listenerClientTLS)
		for r, n := range st.Failed {
			ch <- prometheus.MustNewConstMetric(c.failures, counter, float64(n), listenerClientTLS, engine.TLSFailure(r).String())
		}
		ch <- prometheus.MustNewConstMetric(c.inProgress, gauge, float64(st.Handshaking))
		ch <- prometheus.MustNewConstMetric(c.connections, gauge, float64(st.Current), listenerClientTLS)
		open -= float64(st.Current)
	}
	ch <- prometheus.MustNewConstMetric(c.connections, gauge, max(open, 0), listenerClient)
	if m := c.metrics; m != nil && m.servesTLS.Load() {
		ch <- prometheus.MustNewConstMetric(c.handshakes, counter, float64(m.httpTLS.ok.Load()), listenerHTTP)
		for r := range m.httpTLS.failed {
			ch <- prometheus.MustNewConstMetric(c.failures, counter, float64(m.httpTLS.failed[r].Load()),
				listenerHTTP, engine.TLSFailure(r).String())
		}
	}
	if c.certs == nil {
		return
	}
	st := c.certs.Stats()
	ch <- prometheus.MustNewConstMetric(c.reloads, counter, float64(st.Reloads), "ok")
	ch <- prometheus.MustNewConstMetric(c.reloads, counter, float64(st.Failures), "failed")
	for _, e := range st.Entries {
		ch <- prometheus.MustNewConstMetric(c.expiry, gauge, float64(e.NotAfter.Unix()), e.Name)
		ch <- prometheus.MustNewConstMetric(c.stale, gauge, bit(e.Stale), e.Name)
	}
}
