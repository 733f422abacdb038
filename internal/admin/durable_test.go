package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// gate is an AckSource that lets nothing past its limit through while
// shut, in front of the log's real durable position (as engine's
// durable_test does).
type gate struct {
	log *wal.Log

	mu      sync.Mutex
	limit   uint64 // guarded by mu: MaxUint64 when open
	waiting []func()
}

func (g *gate) Acked() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return min(g.limit, g.log.Durable())
}

func (g *gate) OnAcked(pos uint64, fn func()) {
	g.mu.Lock()
	if pos > g.limit {
		g.waiting = append(g.waiting, func() { g.log.OnDurable(pos, fn) })
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.log.OnDurable(pos, fn)
}

func (g *gate) shut() {
	g.mu.Lock()
	g.limit = g.log.Durable()
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	g.limit = math.MaxUint64
	waiting := g.waiting
	g.waiting = nil
	g.mu.Unlock()
	for _, w := range waiting {
		w()
	}
}

// inProcess is the API on a store with a log behind a gate, served by
// httptest, with an engine that is made but not run (its stats and
// counters work without the event loops).
func inProcess(t *testing.T, ackTimeout time.Duration) (*gate, *store.Store, string) {
	t.Helper()
	return inProcessWith(t, nil, func(cfg *admin.Config) { cfg.AckTimeout = ackTimeout }, nil)
}

// inProcessWith is inProcess with the store's Options changed by options,
// if set, and the API's Config by configure, and served wrapped in wrap,
// if set.
func inProcessWith(t *testing.T, options func(*store.Options), configure func(*admin.Config), wrap func(http.Handler) http.Handler) (*gate, *store.Store, string) {
	t.Helper()
	wl, err := wal.Open(t.TempDir(), wal.Options{SegmentSize: 1 << 20, SyncEvery: 0})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{log: wl, limit: math.MaxUint64}
	opts := store.Options{Log: wl, Acks: g}
	if options != nil {
		options(&opts)
	}
	st := store.New(opts)
	if err := wl.Start(st); err != nil {
		t.Fatal(err)
	}
	srv := engine.New(engine.Config{Loops: 1, Version: "test"}, st)
	cfg := admin.Config{Store: st, Engine: srv, MaxJobSize: 1000, Token: testToken, Logger: zerolog.Nop()}
	configure(&cfg)
	api := admin.New(cfg)
	var h http.Handler = api
	if wrap != nil {
		h = wrap(api)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		g.open()
		hs.Close()
		api.Close()
		_ = wl.Close()
		st.Close()
	})
	return g, st, hs.URL
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	return send(t, "POST", url, body)
}

// send makes a request with the test's token.
func send(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestPutWaitsUntilDurable: a put is answered only once the log says it
// may be acknowledged; so is a listing that shows it, and a clear.
func TestPutWaitsUntilDurable(t *testing.T) {
	g, _, base := inProcess(t, 0)
	g.shut()
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 3)
	go func() {
		resp, body := post(t, base+"/api/v1/tubes/d/jobs", `{"body": "durable"}`)
		answers <- answer{resp.StatusCode, body}
	}()
	select {
	case a := <-answers:
		t.Fatalf("answered before durable: %d %s", a.status, a.body)
	case <-time.After(200 * time.Millisecond):
	}
	g.open()
	select {
	case a := <-answers:
		if a.status != http.StatusCreated || !strings.Contains(a.body, `"id":`) {
			t.Fatalf("put: %d %s", a.status, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer once durable")
	}

	// A clear's deletes too.
	g.shut()
	go func() {
		resp, body := post(t, base+"/api/v1/tubes/d/clear", `{"state": "all"}`)
		answers <- answer{resp.StatusCode, body}
	}()
	select {
	case a := <-answers:
		t.Fatalf("clear answered before durable: %d %s", a.status, a.body)
	case <-time.After(200 * time.Millisecond):
	}
	g.open()
	if a := <-answers; a.status != http.StatusOK || !strings.Contains(a.body, `"deleted":1`) {
		t.Fatalf("clear: %d %s", a.status, a.body)
	}
}

// TestAckTimeout: a request whose change is not acknowledged in time is
// answered 503, saying the change was made; one whose client gives up
// ends.
func TestAckTimeout(t *testing.T) {
	g, st, base := inProcess(t, 100*time.Millisecond)
	g.shut()
	resp, body := post(t, base+"/api/v1/tubes/d/jobs", `{"body": "x"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "the change was made") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if ts, ok := st.TubeStats([]byte("d")); !ok || ts.Ready != 1 {
		t.Fatalf("the put was not made: %+v", ts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/tubes/d/jobs", strings.NewReader(`{"body": "x"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d before durable", resp.StatusCode)
	}
}

// TestDiskFull: a put the log refuses for want of space is 507, and says
// why; nothing is stored.
func TestDiskFull(t *testing.T) {
	_, st, base := inProcess(t, 0)
	defer admin.SetPut(func(*store.Client, uint64, uint32, uint32, uint32, []byte) (*store.Job, error) {
		return nil, store.ErrNoSpace
	})()
	resp, body := post(t, base+"/api/v1/tubes/full/jobs", `{"body": "x"}`)
	var e struct{ Error string }
	if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != http.StatusInsufficientStorage ||
		!strings.Contains(e.Error, "disk is full") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if ts, ok := st.TubeStats([]byte("full")); ok && ts.TotalJobs != 0 {
		t.Fatalf("a job was stored: %+v", ts)
	}
}
