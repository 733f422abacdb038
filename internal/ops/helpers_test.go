package ops_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/rs/zerolog"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// Accept headers for the two text formats.
const (
	acceptText        = "text/plain;version=0.0.4"
	acceptOpenMetrics = "application/openmetrics-text;version=1.0.0"
)

// testVersion is the version the tests' engines report.
const testVersion = "1.2.3-test"

// fakeEngine stands in for *engine.Server where a test needs to set what
// it reports: a server not yet ready, draining, or with a loop that does
// not answer.
type fakeEngine struct {
	stats    codec.ServerStats
	limits   engine.Limits
	tls      engine.TLSStats // zero: no TLS listener
	ready    chan struct{}
	draining atomic.Bool
	ping     func(ctx context.Context) error // nil answers at once
}

func newFakeEngine() *fakeEngine {
	e := &fakeEngine{ready: make(chan struct{})}
	close(e.ready)
	e.stats.Version = testVersion
	return e
}

func (e *fakeEngine) Stats() codec.ServerStats { return e.stats }
func (e *fakeEngine) Limits() engine.Limits    { return e.limits }

func (e *fakeEngine) TLSStats() (engine.TLSStats, bool) { return e.tls, e.tls != engine.TLSStats{} }
func (e *fakeEngine) Ready() <-chan struct{}            { return e.ready }
func (e *fakeEngine) Draining() bool                    { return e.draining.Load() }

func (e *fakeEngine) Ping(ctx context.Context) error {
	if e.ping == nil {
		return nil
	}
	return e.ping(ctx)
}

// stuckLoop is a Ping whose loop never runs the task.
func stuckLoop(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("engine: 1 of 2 event loops did not answer: %w", ctx.Err())
}

// fakeStore reports a list of tubes and, if log is set, a log.
type fakeStore struct {
	mu    sync.Mutex
	tubes []store.TubeStats // guarded by mu
	log   *wal.Stats
}

func (s *fakeStore) setTubes(tubes ...store.TubeStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tubes = tubes
}

func (s *fakeStore) EachTube(fn func(st *store.TubeStats)) {
	s.mu.Lock()
	tubes := slices.Clone(s.tubes)
	s.mu.Unlock()
	for i := range tubes {
		fn(&tubes[i])
	}
}

func (s *fakeStore) LogStats() (wal.Stats, bool) {
	if s.log == nil {
		return wal.Stats{}, false
	}
	return *s.log, true
}

// startOps runs the side port on a free loopback port until the test ends
// and returns its base URL.
func startOps(t testing.TB, cfg ops.Config) string {
	t.Helper()
	mux := http.NewServeMux()
	if err := ops.Register(mux, cfg); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ops.Serve(ln, mux, zerolog.Nop())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return "http://" + srv.Addr().String()
}

// get returns the status and body of a GET.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// families are the metric families of one scrape, by name (a counter's
// with its _total).
type families map[string]*dto.MetricFamily

// scrape fetches /metrics asking for format (an Accept header), checks
// that the server answered in it and parses the answer. Given names, it
// asks for those families alone: expfmt's OpenMetrics parser checks each
// line against the grammar and takes milliseconds a line.
func scrape(t testing.TB, base, accept string, names ...string) families {
	t.Helper()
	return scrapeWith(t, http.DefaultClient, base, accept, names...)
}

// scrapeWith is scrape with client (a TLS side port's).
func scrapeWith(t testing.TB, client *http.Client, base, accept string, names ...string) families {
	t.Helper()
	q := url.Values{"name[]": names}
	req, err := http.NewRequest(http.MethodGet, base+"/metrics?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %s\n%s", resp.Status, b)
	}
	format := expfmt.ResponseFormat(resp.Header)
	if want := strings.SplitN(accept, ";", 2)[0]; !strings.HasPrefix(string(format), want) {
		t.Fatalf("asked for %s, got %s", accept, format)
	}
	fams := families{}
	dec := expfmt.NewDecoder(resp.Body, format)
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("parsing %s: %v", format, err)
		}
		fams[mf.GetName()] = &mf
	}
	return fams
}

// labels renders a metric's labels as a=b,c=d in name order.
func labels(m *dto.Metric) string {
	pairs := map[string]string{}
	for _, l := range m.GetLabel() {
		pairs[l.GetName()] = l.GetValue()
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(pairs)) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + pairs[k])
	}
	return b.String()
}

// value returns the value of the series name{lbls} (lbls as labels
// renders them), a histogram's count, and whether it exists.
func (f families) value(name, lbls string) (float64, bool) {
	mf := f[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if labels(m) != lbls {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// labelValues lists the values label takes in family name.
func (f families) labelValues(name, label string) []string {
	var out []string
	for _, m := range f[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	slices.Sort(out)
	return out
}
