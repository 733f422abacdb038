package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/store/wal"
)

const (
	// DefaultPingTimeout bounds how long /healthz waits for the event loops.
	DefaultPingTimeout = time.Second
	// maxScrapes bounds the /metrics requests served at once: a scrape of
	// many tubes takes CPU the event loops would rather have.
	maxScrapes = 4
)

// Config is what Register needs.
type Config struct {
	// Pprof mounts net/http/pprof at /debug/pprof/, and with a Router
	// /debug/sprout/router.
	Pprof bool
	// TubeSeries is how many tubes get their own series; 0 means
	// DefaultTubeSeries.
	TubeSeries int
	// PingTimeout bounds /healthz's wait for the event loops; 0 means
	// DefaultPingTimeout.
	PingTimeout time.Duration
	Engine      Engine
	Store       Store
	// Metrics, if set, are the histograms the engine and the log report to.
	Metrics *Metrics
	// Cluster, if set, is this server's cluster member: GET /cluster
	// shows its view, /readyz also waits for its Ready, and /metrics adds
	// its figures (and Metrics' proposal sizes). Proxy, if set, is its
	// proxy to the leader, whose connections /metrics counts; Router, its
	// router, whose sessions and requests /metrics counts.
	Cluster Cluster
	Proxy   Proxy
	Router  Router
	// Groups, if set, are the groups of a cluster of several: the
	// queue's figures on /metrics are then those of the groups this
	// member leads, labelled with the group, rather than Store's.
	Groups Groups
	// Log, if set, reads the figures of the log this member writes, for
	// the sprout_binlog_* series, in place of Store's LogStats: a
	// cluster member's store has a journal, which counts only the
	// records it appends, and its log is shared by its groups.
	Log func() wal.Stats
	// Certs, if set, are the certificates the server reads from files:
	// /metrics adds their expiry and reloads.
	Certs  Certs
	Logger zerolog.Logger
}

// A request's body must arrive within bodyTime, plus a second for each
// bodyRate bytes of it read: without a bound, a client that sends a
// request's headers and then its body a byte at a time (to the login,
// which needs no credential, or to any endpoint, whose refusal net/http
// follows by reading the rest of the body) holds a connection and a
// goroutine for as long as it likes. The time grows with what arrives,
// not with what the request declares, which the client chooses.
// http.Server's ReadTimeout would bound them too, but also cancels a
// handler that runs past it (a long clear, a tube's move) once the body
// has been read.
var bodyTime = 30 * time.Second // a variable for tests

const bodyRate = 1 << 20

// boundBodies gives each request with a body a read deadline for it,
// moved on as the body is read and lifted at its end.
func boundBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			b := &boundedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), began: time.Now()}
			if b.rc.SetReadDeadline(b.began.Add(bodyTime)) == nil {
				r.Body = b
			}
		}
		h.ServeHTTP(w, r)
	})
}

// boundedBody moves its request's read deadline on as it is read (a
// second for each bodyRate bytes), and lifts it at the body's end. One that
// failed (its time up, say), or that the handler did not read to its end,
// keeps the deadline for net/http's reading of the rest; the next request
// on the connection sets its own.
type boundedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	began time.Time
	read  int64
	ended bool
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.ended {
		return n, err
	}
	b.read += int64(n)
	switch {
	case err == io.EOF:
		b.ended = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case n > 0:
		more := time.Duration(b.read/bodyRate)*time.Second + time.Duration(b.read%bodyRate)*time.Second/bodyRate
		_ = b.rc.SetReadDeadline(b.began.Add(bodyTime + more))
	}
	return n, err
}

// Server is the running side port.
type Server struct {
	log  zerolog.Logger // immutable
	http *http.Server   // immutable
	ln   net.Listener   // immutable
	done chan struct{}  // closed once Serve has returned
}

// Serve serves h on ln, on a goroutine of its own, until Shutdown: the
// side port's one router, which Register's routes are part of
// (internal/member builds it).
func Serve(ln net.Listener, h http.Handler, logger zerolog.Logger) *Server {
	return serve(ln, h, levelWriter{logger, zerolog.DebugLevel}, logger)
}

// serve is Serve with net/http's error lines written to errorLog.
func serve(ln net.Listener, h http.Handler, errorLog io.Writer, logger zerolog.Logger) *Server {
	s := &Server{
		log: logger,
		http: &http.Server{
			Handler: boundBodies(h),
			// Also bounds a TLS handshake (ServeTLS).
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       time.Minute,
			// Malformed requests and the like are the client's business.
			ErrorLog: log.New(errorLog, "", 0),
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Str("address", ln.Addr().String()).Msg("operations endpoint stopped")
		}
	}()
	return s
}

// Addr is the address the side port listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops the side port:
//  1. the listener closes, so no new request is taken;
//  2. idle connections close, and requests in flight (a scrape, a
//     profile) are waited for until ctx is done;
//  3. what is left is closed.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.http.Close())
	}
	<-s.done
	return err
}

// Register adds the side port's own routes to mux: GET /metrics,
// /healthz, /readyz, in cluster mode /cluster, and with Pprof
// /debug/pprof/ (and /debug/sprout/router with a router).
func Register(mux *http.ServeMux, cfg Config) error {
	if cfg.TubeSeries <= 0 {
		cfg.TubeSeries = DefaultTubeSeries
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	reg := prometheus.NewRegistry()
	queue := newCollector(cfg.Engine, cfg.Store, cfg.TubeSeries, cfg.Groups)
	queue.logStats = cfg.Log
	if cl := cfg.Cluster; cl != nil && cfg.Groups == nil {
		queue.kept = newKeptCounters(func() (uint64, bool) {
			st := cl.Stats()
			return st.Rebuilds, st.Rebuilding
		})
	}
	cs := []prometheus.Collector{
		queue,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	if m := cfg.Metrics; m != nil {
		cs = append(cs, m.commandVec)
		if _, ok := cfg.Store.LogStats(); ok {
			cs = append(cs, m.fsync, m.batchBytes, m.batchRecords)
		}
		if cfg.Cluster != nil {
			cs = append(cs, m.proposalBytes, m.proposalRecords)
		}
	}
	if cfg.Cluster != nil {
		cs = append(cs, newClusterCollector(cfg.Cluster, cfg.Proxy, cfg.Router))
	}
	cs = append(cs, newTLSCollector(cfg.Engine, cfg.Certs, cfg.Metrics))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("ops: registering metrics: %w", err)
		}
	}
	goRuntime, err := goRuntimeGatherer()
	if err != nil {
		return err
	}
	gatherers := prometheus.Gatherers{reg, goRuntime}
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{
		// A metric the collector cannot make is a bug the operator
		// should see; the rest of the scrape is still served.
		ErrorLog:            levelWriter{cfg.Logger, zerolog.WarnLevel},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: maxScrapes,
		EnableOpenMetrics:   true,
	})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), cfg.PingTimeout)
		defer cancel()
		if err := cfg.Engine.Ping(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-cfg.Engine.Ready():
		default:
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if cfg.Engine.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if cfg.Cluster != nil && !cfg.Cluster.Ready() {
			http.Error(w, "no leader known, or not caught up", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if cfg.Cluster != nil {
		mux.HandleFunc("GET /cluster", serveCluster(cfg.Cluster))
	}
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		if d, ok := cfg.Router.(routerDescriber); ok {
			mux.HandleFunc("GET /debug/sprout/router", serveRouterDebug(d))
		}
	}
	return nil
}

// routerDescriber is a Router that names what it holds for its sessions
// (*router.Router): /debug/sprout/router lists it, with Pprof.
type routerDescriber interface {
	DescribePending() []string
	DescribeOwners() []string
}

// serveRouterDebug answers GET /debug/sprout/router: the calls this
// member's sessions wait on, and the owner clients it holds for others',
// as text, for a call or session that never ends.
func serveRouterDebug(d routerDescriber) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		pending, owners := d.DescribePending(), d.DescribeOwners()
		fmt.Fprintf(w, "calls waiting (%d):\n", len(pending))
		for _, line := range pending {
			fmt.Fprintf(w, "  %s\n", line)
		}
		fmt.Fprintf(w, "owner clients (%d):\n", len(owners))
		for _, line := range owners {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
}

// goRuntime is the Go runtime's figures, less go_memstats_alloc_bytes_total:
// OpenMetrics names a counter's family without _total, so that family
// would clash with the gauge go_memstats_alloc_bytes and make the
// exposition invalid. go_gc_heap_allocs_bytes_total, added in its place,
// counts the same bytes.
func goRuntimeGatherer() (prometheus.Gatherer, error) {
	const clashing = "go_memstats_alloc_bytes_total"
	reg := prometheus.NewRegistry()
	err := reg.Register(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^(/gc/heap/allocs:bytes|/sched/latencies:seconds|/gc/pauses:seconds|/sync/mutex/wait/total:seconds)$`)})))
	if err != nil {
		return nil, fmt.Errorf("ops: registering the Go collector: %w", err)
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := reg.Gather()
		return slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == clashing }), err
	}), nil
}

// levelWriter logs what the standard library and promhttp report, one
// event per line, at a fixed level.
type levelWriter struct {
	l     zerolog.Logger
	level zerolog.Level
}

func (w levelWriter) Write(p []byte) (int, error) {
	w.l.WithLevel(w.level).Msg(string(trimNewline(p)))
	return len(p), nil
}

// Println implements promhttp.Logger.
func (w levelWriter) Println(v ...any) {
	w.l.WithLevel(w.level).Msg(fmt.Sprint(v...))
}

func trimNewline(p []byte) []byte {
	if n := len(p); n > 0 && p[n-1] == '\n' {
		return p[:n-1]
	}
	return p
}
