package member

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// The member tests run whole servers in this process, on loopback ports
// of their own: a single node here, three cluster members in
// cluster_test.go. What only a process shows (signals, exit statuses,
// kill -9, privileges) stays in cmd/sprout's tests of the binary.

const (
	replyTimeout = 10 * time.Second
	testToken    = "member-test-token-0123456789"
)

// singleConfig is a single node's configuration on free loopback ports,
// its log lines in out; dir "" keeps it in memory.
func singleConfig(out *testproc.SyncBuffer, dir string) Config {
	log := zerolog.New(out).With().Timestamp().Logger()
	return Config{
		Engine: engine.Config{Network: "tcp", Address: "127.0.0.1:0", Loops: 1, Logger: log},
		WALDir: dir, WAL: wal.Options{SegmentSize: 1 << 20},
		HTTP:   HTTPConfig{Addr: "127.0.0.1:0", AdminToken: testToken},
		Logger: log,
	}
}

// startMember starts cfg's member, shut down when the test ends; the
// member's log is shown if the test failed.
func startMember(t *testing.T, cfg Config, out *testproc.SyncBuffer) *Member {
	t.Helper()
	m, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // at once: the test is over
		m.Shutdown(ctx)
		if t.Failed() {
			t.Logf("the member's log:\n%s", out)
		}
	})
	return m
}

// TestSingleNode: a member serves the protocol and the side port's one
// router; Shutdown stops it in order: the client's connection ends, Done
// is closed, both ports are closed.
func TestSingleNode(t *testing.T) {
	out := &testproc.SyncBuffer{}
	m := startMember(t, singleConfig(out, ""), out)
	c := testproc.DialTest(t, m.Addr().String(), replyTimeout)
	id, err := c.Put(1, 0, 60, []byte("hello"))
	if err != nil || id != 1 {
		t.Fatalf("put: %d %v", id, err)
	}
	base := "http://" + m.HTTPAddr().String()
	// Every part of the router answers from the handler that owns it.
	for _, tc := range []struct {
		path   string
		status int
		has    string
	}{
		{"/healthz", http.StatusOK, "ok"},
		{"/readyz", http.StatusOK, "ready"},
		{"/metrics", http.StatusOK, `sprout_current_jobs{state="ready"} 1`},
		{"/api/v1/stats", http.StatusOK, `"current-jobs-ready":1`},
		{"/api/v1/tubes/default", http.StatusOK, `"current-jobs-ready":1`},
		{"/", http.StatusOK, "<html"},
		{"/cluster", http.StatusNotFound, ""},         // a single node
		{"/cluster/members", http.StatusNotFound, ""}, // the console's 404
		{"/debug/pprof/", http.StatusNotFound, ""},    // without --pprof
	} {
		r := testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodGet, URL: base + tc.path, Bearer: testToken, Timeout: replyTimeout})
		if r.Status != tc.status || !strings.Contains(string(r.Body), tc.has) {
			t.Errorf("GET %s: %d %.200q; want %d with %q", tc.path, r.Status, r.Body, tc.status, tc.has)
		}
	}

	// A worker holds the job: the shutdown waits for it, refusing puts
	// meanwhile, and goes on once the job is deleted.
	worker := testproc.DialTest(t, m.Addr().String(), replyTimeout)
	if r, err := worker.Do("reserve-with-timeout 0", nil); err != nil || r.N != id {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	done := make(chan struct{})
	go func() {
		m.Shutdown(context.Background())
		close(done)
	}()
	testproc.WaitFor(t, replyTimeout, "puts refused as the shutdown begins", func() bool {
		r, err := c.Do("put 0 0 60 1", []byte("x"))
		return err == nil && string(r.Line) == "DRAINING"
	})
	select {
	case <-done:
		t.Fatal("Shutdown returned while a job was reserved")
	default:
	}
	if err := worker.ExpectLine("delete "+strconv.FormatUint(id, 10), "DELETED"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(replyTimeout):
		t.Fatalf("Shutdown did not return once no job was reserved:\n%s", out)
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Done is not closed after Shutdown")
	}
	if m.Err() != nil {
		t.Errorf("Err after a Shutdown: %v", m.Err())
	}
	for _, addr := range []net.Addr{m.Addr(), m.HTTPAddr()} {
		if nc, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
			nc.Close()
			t.Errorf("%s still accepts after Shutdown", addr)
		}
	}
}

// TestDurableRestart: a member on a log directory keeps its jobs across a
// Shutdown and a new Start on the same directory; the directory is
// locked while a member holds it.
func TestDurableRestart(t *testing.T) {
	dir := t.TempDir()
	out := &testproc.SyncBuffer{}
	m, err := Start(singleConfig(out, dir))
	if err != nil {
		t.Fatal(err)
	}
	c := testproc.DialTest(t, m.Addr().String(), replyTimeout)
	id, err := c.Put(7, 0, 60, []byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(singleConfig(out, dir))
	var se *StartError
	if !errors.As(err, &se) || se.Step != StepLog || !errors.Is(err, segment.ErrLocked) {
		t.Errorf("a second member on the same directory: %v; want a StepLog StartError wrapping segment.ErrLocked", err)
	}
	m.Shutdown(context.Background())

	m = startMember(t, singleConfig(out, dir), out)
	c = testproc.DialTest(t, m.Addr().String(), replyTimeout)
	st, err := c.Stats("stats-job " + strconv.FormatUint(id, 10))
	if err != nil || st["state"] != "ready" || st["pri"] != "7" {
		t.Errorf("job %d after the restart: %v %v", id, st, err)
	}
}

// TestStartErrors: a side port whose address is taken fails Start at its
// step, and nothing Start made stays open: the clients' port of a cluster
// member it opened is closed again.
func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	out := &testproc.SyncBuffer{}
	cfg := singleConfig(out, "")
	cfg.HTTP.Addr = busy.Addr().String()
	_, err = Start(cfg)
	var se *StartError
	var opErr *net.OpError
	if !errors.As(err, &se) || se.Step != StepHTTP || !errors.As(err, &opErr) {
		t.Errorf("Start with a busy side port: %v; want a StepHTTP StartError wrapping the listen error", err)
	}
}
