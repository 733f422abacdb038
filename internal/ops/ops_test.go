package ops_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// sprout is an in-process server with its side port.
type sprout struct {
	engine  *engine.Server
	addr    string // the beanstalkd port
	metrics string // the side port's base URL
}

// startSprout runs engine, store (with a log in a temporary directory if
// durable) and side port until the test ends.
func startSprout(t testing.TB, durable bool, tubeSeries int) *sprout {
	t.Helper()
	m := ops.NewMetrics()
	var wl *wal.Log
	if durable {
		var err error
		if wl, err = wal.Open(t.TempDir(), wal.Options{Observer: m}); err != nil {
			t.Fatal(err)
		}
	}
	st := store.New(store.Options{Log: wl})
	cfg := engine.Config{Address: "127.0.0.1:0", Loops: 2, Metrics: m, Version: testVersion}
	if wl != nil {
		if err := wl.Start(st); err != nil {
			t.Fatal(err)
		}
	}
	srv := engine.New(cfg, st)
	errc := make(chan error, 1)
	go func() { errc <- srv.Run() }()
	select {
	case <-srv.Ready():
	case err := <-errc:
		t.Fatal(err)
	}
	base := startOps(t, ops.Config{Engine: srv, Store: st, Metrics: m, TubeSeries: tubeSeries, Logger: zerolog.Nop()})
	t.Cleanup(func() {
		// Registered after startOps's, so this runs first: the side port
		// stops after the engine, before the log and the store close.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Error(err)
		}
		<-errc
	})
	t.Cleanup(func() {
		if wl != nil {
			_ = wl.Close()
		}
		st.Close()
	})
	return &sprout{engine: srv, addr: srv.Addr().String(), metrics: base}
}

// client is a raw beanstalkd connection.
type client struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t, c, bufio.NewReader(c)}
}

// do sends cmd and returns the first line of the reply (a job's body, if
// any, is read and dropped).
func (c *client) do(cmd string) string {
	c.t.Helper()
	_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.c.Write([]byte(cmd)); err != nil {
		c.t.Fatal(err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("%q: %v", cmd, err)
	}
	if strings.HasPrefix(line, "RESERVED ") || strings.HasPrefix(line, "OK ") {
		f := strings.Fields(line)
		var n int
		for _, ch := range f[len(f)-1] {
			n = n*10 + int(ch-'0')
		}
		if _, err := c.r.Discard(n + 2); err != nil {
			c.t.Fatal(err)
		}
	}
	return line
}

// series is one expected series: its type and the range of its value (a
// histogram's count).
type series struct {
	name, labels string
	typ          dto.MetricType
	min, max     float64
}

// TestMetricsFromRunningServer: after a put, reserve and delete on a
// durable server, /metrics shows them in both text formats, every family
// has help, and sprout's names follow Prometheus's conventions.
func TestMetricsFromRunningServer(t *testing.T) {
	s := startSprout(t, true, 0)
	c := dial(t, s.addr)
	for _, step := range []struct{ cmd, want string }{
		{"use jobs\r\n", "USING jobs\r\n"},
		{"put 0 0 60 5\r\nhello\r\n", "INSERTED "},
		{"watch jobs\r\n", "WATCHING 2\r\n"},
		{"reserve\r\n", "RESERVED "},
		{"delete 1\r\n", "DELETED\r\n"},
		{"put 2000 0 60 2\r\nhi\r\n", "INSERTED "},
	} {
		if got := c.do(step.cmd); !strings.HasPrefix(got, step.want) {
			t.Fatalf("%q: %q, want %q", step.cmd, got, step.want)
		}
	}
	const (
		counter   = dto.MetricType_COUNTER
		gauge     = dto.MetricType_GAUGE
		histogram = dto.MetricType_HISTOGRAM
	)
	const many = 1e12
	want := []series{
		{"sprout_commands_total", "command=put", counter, 2, 2},
		{"sprout_commands_total", "command=reserve", counter, 1, 1},
		{"sprout_commands_total", "command=delete", counter, 1, 1},
		{"sprout_commands_total", "command=pause-tube", counter, 0, 0},
		{"sprout_current_jobs", "state=ready", gauge, 1, 1},
		{"sprout_current_jobs", "state=reserved", gauge, 0, 0},
		{"sprout_current_jobs", "state=delayed", gauge, 0, 0},
		{"sprout_current_jobs", "state=buried", gauge, 0, 0},
		{"sprout_current_jobs_urgent", "", gauge, 0, 0},
		{"sprout_jobs_total", "", counter, 2, 2},
		{"sprout_job_timeouts_total", "", counter, 0, 0},
		{"sprout_current_tubes", "", gauge, 2, 2},
		{"sprout_current_connections", "", gauge, 1, 1},
		{"sprout_connections_total", "", counter, 1, 1},
		{"sprout_current_producers", "", gauge, 1, 1},
		{"sprout_current_workers", "", gauge, 1, 1},
		{"sprout_current_waiting", "", gauge, 0, 0},
		{"sprout_uptime_seconds", "", gauge, 0, 10},
		{"sprout_draining", "", gauge, 0, 0},
		{"sprout_max_job_size_bytes", "", gauge, engine.DefaultMaxJobSize, engine.DefaultMaxJobSize},
		{"sprout_build_info", "version=" + testVersion, gauge, 1, 1},
		{"sprout_max_connections", "", gauge, 1, many},
		{"sprout_connections_refused_total", "", counter, 0, 0},
		{"sprout_connections_shed_total", "", counter, 0, 0},
		{"sprout_connections_evicted_total", "", counter, 0, 0},
		{"sprout_connections_tls_on_plaintext_total", "", counter, 0, 0},
		{"sprout_connections_fenced_total", "", counter, 0, 0},
		{"sprout_listener_connections", "listener=client", gauge, 1, 1},
		{"sprout_buffer_bytes", "", gauge, 0, 1 << 20},
		{"sprout_buffer_budget_bytes", "", gauge, 64 << 20, 1 << 30},
		{"sprout_received_bytes_total", "", counter, 50, 200},
		{"sprout_sent_bytes_total", "", counter, 50, 200},
		{"sprout_binlog_records_written_total", "", counter, 3, many},
		{"sprout_binlog_records_migrated_total", "", counter, 0, 0},
		{"sprout_binlog_current_index", "", gauge, 1, 1},
		{"sprout_binlog_oldest_index", "", gauge, 1, 1},
		{"sprout_binlog_max_size_bytes", "", gauge, wal.DefaultSegmentSize, wal.DefaultSegmentSize},
		{"sprout_binlog_disk_bytes", "", gauge, 1, many},
		{"sprout_binlog_live_bytes", "", gauge, 1, many},
		{"sprout_binlog_room_bytes", "", gauge, 64 << 10, 8 << 20},
		{"sprout_binlog_fsync_duration_seconds", "", histogram, 1, many},
		{"sprout_binlog_batch_bytes", "", histogram, 1, many},
		{"sprout_binlog_batch_records", "", histogram, 1, many},
		{"sprout_command_duration_seconds", "command=put", histogram, 2, 2},
		{"sprout_command_duration_seconds", "command=delete", histogram, 1, 1},
		{"sprout_command_duration_seconds", "command=stats", histogram, 0, 0},
		{"sprout_tube_current_jobs", "state=ready,tube=jobs", gauge, 1, 1},
		{"sprout_tube_current_jobs", "state=reserved,tube=jobs", gauge, 0, 0},
		{"sprout_tube_current_jobs", "state=ready,tube=default", gauge, 0, 0},
		{"sprout_tube_current_jobs_urgent", "tube=jobs", gauge, 0, 0},
		{"sprout_tube_current_using", "tube=jobs", gauge, 1, 1},
		{"sprout_tube_current_watching", "tube=jobs", gauge, 1, 1},
		{"sprout_tube_current_watching", "tube=default", gauge, 1, 1},
		{"sprout_tube_current_waiting", "tube=jobs", gauge, 0, 0},
		{"sprout_tube_paused", "tube=jobs", gauge, 0, 0},
		{"sprout_tube_jobs_total", "tube=jobs", counter, 2, 2},
		{"sprout_tube_deletes_total", "tube=jobs", counter, 1, 1},
		{"sprout_other_tubes", "", gauge, 0, 0},
		{"go_goroutines", "", gauge, 1, many},
		{"process_cpu_seconds_total", "", counter, 0, many},
		{"go_gc_heap_allocs_bytes_total", "", counter, 1, many},
		{"go_memstats_alloc_bytes", "", gauge, 1, many},
		// The runtime's own view of the tail: scheduling delays, GC pauses
		// and mutex waits (the process has run goroutines and collected).
		{"go_sched_latencies_seconds", "", histogram, 1, many},
		{"go_gc_pauses_seconds", "", histogram, 0, many},
		{"go_sync_mutex_wait_total_seconds_total", "", counter, 0, many},
	}
	for _, tc := range []struct {
		accept string
		want   []series
	}{
		{acceptText, want},
		// All of sprout's but the command histogram, which is 468 lines.
		{acceptOpenMetrics, slices.DeleteFunc(slices.Clone(want), func(s series) bool {
			return !strings.HasPrefix(s.name, "sprout_") || s.name == "sprout_command_duration_seconds"
		})},
	} {
		t.Run(strings.SplitN(tc.accept, ";", 2)[0], func(t *testing.T) {
			var names []string
			if tc.accept == acceptOpenMetrics {
				for _, w := range tc.want {
					names = append(names, w.name)
				}
			}
			start := time.Now()
			fams := scrape(t, s.metrics, tc.accept, names...)
			t.Logf("scraped and parsed %d families in %v", len(fams), time.Since(start))
			for _, w := range tc.want {
				if fams[w.name].GetType() != w.typ {
					t.Errorf("%s: type %v, want %v", w.name, fams[w.name].GetType(), w.typ)
					continue
				}
				v, ok := fams.value(w.name, w.labels)
				if !ok || v < w.min || v > w.max {
					t.Errorf("%s{%s} = %v (present: %v), want %v to %v", w.name, w.labels, v, ok, w.min, w.max)
				}
			}
			if got := fams.labelValues("sprout_tube_jobs_total", "tube"); strings.Join(got, " ") != "default jobs" {
				t.Errorf("tubes with series: %v", got)
			}
			checkConventions(t, fams, names == nil, tc.want)
		})
	}
}

// checkConventions: every family has help; sprout's counters, and only
// they, end in _total; every command has a counter; and, for a whole
// scrape, every sprout family was expected.
func checkConventions(t *testing.T, fams families, whole bool, want []series) {
	t.Helper()
	for name, mf := range fams {
		if mf.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		// OpenMetrics names a counter's family without _total.
		if base, ok := strings.CutSuffix(name, "_total"); ok && mf.GetType() == dto.MetricType_COUNTER && fams[base] != nil {
			t.Errorf("counter %s clashes with %s %s in OpenMetrics", name, fams[base].GetType(), base)
		}
		if !strings.HasPrefix(name, "sprout_") {
			continue
		}
		if isCounter := mf.GetType() == dto.MetricType_COUNTER; isCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s is a %v", name, mf.GetType())
		}
	}
	if n := len(fams["sprout_commands_total"].GetMetric()); n != int(codec.NumCounters) {
		t.Errorf("%d cmd-* counters, want %d", n, codec.NumCounters)
	}
	if !whole {
		return
	}
	for name := range fams {
		if strings.HasPrefix(name, "sprout_") && !slices.ContainsFunc(want, func(s series) bool { return s.name == name }) {
			t.Errorf("%s is not checked by the test", name)
		}
	}
}

// TestMetricsWithoutLog: an in-memory server shows no binlog figures.
func TestMetricsWithoutLog(t *testing.T) {
	s := startSprout(t, false, 0)
	for name := range scrape(t, s.metrics, acceptText) {
		if strings.HasPrefix(name, "sprout_binlog_") {
			t.Errorf("%s shown without a log", name)
		}
	}
}

// TestTubeSeriesCap: the first N tubes in list-tubes order get their own
// series and the rest are summed under <other>.
func TestTubeSeriesCap(t *testing.T) {
	st := &fakeStore{}
	st.setTubes(
		store.TubeStats{Name: "default", Ready: 1, TotalJobs: 1},
		store.TubeStats{Name: "a", Ready: 2, Urgent: 1, TotalJobs: 5, CmdDelete: 3},
		store.TubeStats{Name: "b", Delayed: 4, TotalJobs: 4, Pause: time.Minute, PauseTimeLeft: time.Second, Watching: 2},
		store.TubeStats{Name: "c", Buried: 8, TotalJobs: 8, Pause: time.Minute, PauseTimeLeft: time.Second, Using: 1},
	)
	for _, tc := range []struct {
		cap   int
		own   string // tubes with series, sorted
		other map[string]float64
	}{
		{1, "<other> default", map[string]float64{
			"sprout_other_tubes":                      3,
			"sprout_tube_current_jobs{state=ready}":   2,
			"sprout_tube_current_jobs{state=delayed}": 4,
			"sprout_tube_current_jobs{state=buried}":  8,
			"sprout_tube_current_jobs_urgent":         1,
			"sprout_tube_paused":                      2,
			"sprout_tube_jobs_total":                  17,
			"sprout_tube_deletes_total":               3,
			"sprout_tube_current_watching":            2,
			"sprout_tube_current_using":               1,
		}},
		{3, "<other> a b default", map[string]float64{
			"sprout_other_tubes":                      1,
			"sprout_tube_current_jobs{state=buried}":  8,
			"sprout_tube_current_jobs{state=delayed}": 0,
			"sprout_tube_paused":                      1,
			"sprout_tube_jobs_total":                  8,
		}},
		{4, "a b c default", map[string]float64{"sprout_other_tubes": 0}},
		{ops.DefaultTubeSeries, "a b c default", map[string]float64{"sprout_other_tubes": 0}},
	} {
		t.Run(strings.ReplaceAll(tc.own, " ", ","), func(t *testing.T) {
			base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: st, TubeSeries: tc.cap})
			fams := scrape(t, base, acceptText)
			if got := strings.Join(fams.labelValues("sprout_tube_paused", "tube"), " "); got != tc.own {
				t.Errorf("tubes with series: %q, want %q", got, tc.own)
			}
			for key, want := range tc.other {
				name, state, _ := strings.Cut(strings.TrimSuffix(key, "}"), "{")
				lbls := "tube=" + ops.OtherTube
				switch {
				case name == "sprout_other_tubes":
					lbls = ""
				case state != "":
					lbls = state + "," + lbls
				}
				if got, _ := fams.value(name, lbls); got != want {
					t.Errorf("%s{%s} = %v, want %v", name, lbls, got, want)
				}
			}
			if v, _ := fams.value("sprout_tube_paused", "tube=b"); tc.cap >= 3 && v != 1 {
				t.Errorf("tube b paused = %v, want 1", v)
			}
		})
	}
}

// TestOtherCountersMonotonic: the counters summed under <other> never go
// down, whatever tubes past the cap come and go between scrapes, and
// count what each gained.
func TestOtherCountersMonotonic(t *testing.T) {
	st := &fakeStore{}
	base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: st, TubeSeries: 1})
	def := store.TubeStats{Name: "default", TotalJobs: 100}
	tube := func(name string, jobs, deletes uint64) store.TubeStats {
		return store.TubeStats{Name: name, TotalJobs: jobs, CmdDelete: deletes, Ready: int(jobs - deletes)}
	}
	for _, step := range []struct {
		name                 string
		tubes                []store.TubeStats
		jobs, deletes, ready float64
	}{
		{"a and b past the cap", []store.TubeStats{def, tube("a", 5, 1), tube("b", 3, 0)}, 8, 1, 7},
		{"b freed, a gained one", []store.TubeStats{def, tube("a", 6, 1)}, 9, 1, 5},
		{"c new", []store.TubeStats{def, tube("a", 6, 2), tube("c", 1, 0)}, 10, 2, 5},
		{"a freed and made again", []store.TubeStats{def, tube("c", 1, 1), tube("a", 2, 0)}, 12, 3, 2},
		{"none past the cap", []store.TubeStats{def}, 12, 3, 0},
		{"a back", []store.TubeStats{def, tube("a", 4, 0)}, 16, 3, 4},
	} {
		st.setTubes(step.tubes...)
		fams := scrape(t, base, acceptText)
		jobs, _ := fams.value("sprout_tube_jobs_total", "tube="+ops.OtherTube)
		deletes, _ := fams.value("sprout_tube_deletes_total", "tube="+ops.OtherTube)
		ready, _ := fams.value("sprout_tube_current_jobs", "state=ready,tube="+ops.OtherTube)
		if jobs != step.jobs || deletes != step.deletes || ready != step.ready {
			t.Errorf("%s: <other> jobs %v, deletes %v, ready %v; want %v, %v, %v",
				step.name, jobs, deletes, ready, step.jobs, step.deletes, step.ready)
		}
	}
}

// TestProbes: /healthz follows Ping, /readyz follows Ready and Draining.
func TestProbes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ready, draining bool
		ping            func(ctx context.Context) error
		healthz, readyz int
	}{
		{"serving", true, false, nil, 200, 200},
		{"starting", false, false, func(context.Context) error { return engine.ErrNotServing }, 503, 503},
		{"draining", true, true, nil, 200, 503},
		{"a loop does not answer", true, false, stuckLoop, 503, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFakeEngine()
			if !tc.ready {
				e.ready = make(chan struct{})
			}
			e.draining.Store(tc.draining)
			e.ping = tc.ping
			base := startOps(t, ops.Config{Engine: e, Store: &fakeStore{}, PingTimeout: 50 * time.Millisecond})
			start := time.Now()
			if code, body := get(t, base+"/healthz"); code != tc.healthz {
				t.Errorf("/healthz: %d %q, want %d", code, body, tc.healthz)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("/healthz took %v with a 50ms ping timeout", d)
			}
			if code, body := get(t, base+"/readyz"); code != tc.readyz {
				t.Errorf("/readyz: %d %q, want %d", code, body, tc.readyz)
			}
		})
	}
}

// TestRoutes: pprof only when asked for; nothing else is served.
func TestRoutes(t *testing.T) {
	for _, tc := range []struct {
		pprof bool
		path  string
		want  int
	}{
		{false, "/debug/pprof/", 404},
		{false, "/debug/pprof/cmdline", 404},
		{true, "/debug/pprof/", 200},
		{true, "/debug/pprof/cmdline", 200},
		{false, "/", 404},
		{false, "/metrics/x", 404},
	} {
		base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Pprof: tc.pprof})
		if code, _ := get(t, base+tc.path); code != tc.want {
			t.Errorf("pprof %v: GET %s = %d, want %d", tc.pprof, tc.path, code, tc.want)
		}
	}
	base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}})
	resp, err := http.Post(base+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics = %s", resp.Status)
	}
}

// describingRouter is a router whose sessions wait on one call and
// which holds one owner client.
type describingRouter struct{}

func (describingRouter) Stats() router.Stats { return router.Stats{Pending: 1, Owners: 1} }
func (describingRouter) DescribePending() []string {
	return []string{"pending: session 7 group 2 seq 9 put, sent true, taken 1, made 20s ago"}
}
func (describingRouter) DescribeOwners() []string { return []string{"member 1 session 3 group 2"} }

// TestRouterDebug: with pprof, /debug/sprout/router lists the calls the
// router's sessions wait on and the owner clients it holds; without, it
// is not served.
func TestRouterDebug(t *testing.T) {
	for _, pprof := range []bool{false, true} {
		base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Router: describingRouter{}, Pprof: pprof})
		code, body := get(t, base+"/debug/sprout/router")
		if !pprof {
			if code != http.StatusNotFound {
				t.Errorf("without pprof: GET /debug/sprout/router = %d, want 404", code)
			}
			continue
		}
		want := "calls waiting (1):\n  pending: session 7 group 2 seq 9 put, sent true, taken 1, made 20s ago\n" +
			"owner clients (1):\n  member 1 session 3 group 2\n"
		if code != http.StatusOK || body != want {
			t.Errorf("GET /debug/sprout/router = %d %q, want 200 %q", code, body, want)
		}
	}
}

// TestObserveCommandDoesNotAllocate pins the event loops' cost.
func TestObserveCommandDoesNotAllocate(t *testing.T) {
	m := ops.NewMetrics()
	if n := testing.AllocsPerRun(1000, func() { m.ObserveCommand(codec.OpReserve, 3*time.Microsecond) }); n != 0 {
		t.Fatalf("ObserveCommand allocates %v times", n)
	}
}

func BenchmarkObserveCommand(b *testing.B) {
	m := ops.NewMetrics()
	for b.Loop() {
		m.ObserveCommand(codec.OpDelete, 2*time.Microsecond)
	}
}
