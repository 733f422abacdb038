package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sproutmq/sprout/internal/testproc"
)

// AdminClearConfig is a run of the admin API's clear beside protocol
// traffic: Jobs jobs of Body bytes put into one tube (Depth at a time),
// then round trips (put, reserve, delete) on another tube, measured for
// Idle alone and then while POST /api/v1/tubes/{tube}/clear deletes the
// jobs.
type AdminClearConfig struct {
	Jobs, Body, Depth int
	Idle              time.Duration
	// Durable runs the server with -b on a fresh directory and -f SyncMS.
	Durable bool
	SyncMS  int
	// Progress, if set, is told what the run is doing.
	Progress func(step string)
}

// AdminClearResult is the round trips' latency idle and during the clear.
type AdminClearResult struct {
	Idle, During LatencySummary
	// Deleted is what the clear answered; Took how long it took.
	Deleted int
	Took    time.Duration
}

// LatencySummary is a histogram's count and percentiles.
type LatencySummary struct {
	Count         int64
	P50, P99, Max time.Duration
}

func summarize(h *hdrhistogram.Histogram) LatencySummary {
	return LatencySummary{
		Count: h.TotalCount(),
		P50:   time.Duration(h.ValueAtQuantile(50)),
		P99:   time.Duration(h.ValueAtQuantile(99)),
		Max:   time.Duration(h.Max()),
	}
}

const adminBenchToken = "sproutbench-admin-token-0123456789"

// AdminClear runs cfg against spec (Sprout: it needs --http and
// --admin-token).
func AdminClear(ctx context.Context, spec ServerSpec, cfg AdminClearConfig) (AdminClearResult, error) {
	var res AdminClearResult
	progress := func(s string) {
		if cfg.Progress != nil {
			cfg.Progress(s)
		}
	}
	port, err := testproc.FreePort()
	if err != nil {
		return res, err
	}
	httpAddr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--http", httpAddr, "--admin-token", adminBenchToken}
	if cfg.Durable {
		dir, err := os.MkdirTemp("", "sproutbench-admin-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		args = append(args, "-b", dir, "-f", strconv.Itoa(cfg.SyncMS))
	}
	srv, err := StartServer(spec, args...)
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	dial := func() (*testproc.Conn, error) {
		c, err := testproc.Dialer{Timeout: 5 * time.Second, BufSize: 64 << 10}.Dial(srv.Addr)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Hour))
			context.AfterFunc(ctx, func() { _ = c.Close() })
		}
		return c, err
	}
	filler, err := dial()
	if err != nil {
		return res, err
	}
	defer filler.Close()
	progress(fmt.Sprintf("putting %d jobs of %d B into tube bulk", cfg.Jobs, cfg.Body))
	if err := filler.ExpectLine("use bulk", "USING bulk"); err != nil {
		return res, err
	}
	if err := fill([]*testproc.Conn{filler}, newMeter(int64(cfg.Jobs)), [][]byte{testproc.PutFrame(cfg.Body)}, cfg.Jobs, cfg.Depth); err != nil {
		return res, fmt.Errorf("load: putting the jobs: %w", errors.Join(err, ctx.Err()))
	}

	probe, err := dial()
	if err != nil {
		return res, err
	}
	defer probe.Close()
	for _, step := range [][2]string{{"use probe", "USING probe"}, {"watch probe", "WATCHING 2"}, {"ignore default", "WATCHING 1"}} {
		if err := probe.ExpectLine(step[0], step[1]); err != nil {
			return res, err
		}
	}
	// Warm up, then measure idle.
	if _, err := roundTrips(probe, until(time.Now().Add(500*time.Millisecond))); err != nil {
		return res, err
	}
	progress(fmt.Sprintf("measuring put/reserve/delete round trips on tube probe for %v, idle", cfg.Idle))
	idle, err := roundTrips(probe, until(time.Now().Add(cfg.Idle)))
	if err != nil {
		return res, err
	}
	res.Idle = summarize(idle)

	progress("measuring again while POST /api/v1/tubes/bulk/clear runs")
	type cleared struct {
		deleted int
		err     error
	}
	done := make(chan cleared, 1)
	began := time.Now()
	go func() {
		n, err := postClear(ctx, "http://"+httpAddr+"/api/v1/tubes/bulk/clear")
		done <- cleared{n, err}
	}()
	during, err := roundTrips(probe, func() bool { return len(done) > 0 })
	if err != nil {
		return res, err
	}
	c := <-done
	res.Took = time.Since(began)
	if c.err != nil {
		return res, c.err
	}
	res.Deleted = c.deleted
	res.During = summarize(during)
	if report := srv.RaceReport(); report != "" {
		return res, fmt.Errorf("load: the server reported a data race:\n%s", report)
	}
	return res, nil
}

// roundTrips does put, reserve-with-timeout 0 and delete on c, one after
// the other, until over says so, and records each whole round trip. One
// that ends after over says so is not recorded: it may not have
// overlapped what was measured.
func roundTrips(c *testproc.Conn, over func() bool) (*hdrhistogram.Histogram, error) {
	h := newHistogram()
	frame := testproc.PutFrame(16)
	for !over() {
		t0 := time.Now()
		c.Write(frame)
		if err := c.Flush(); err != nil {
			return h, err
		}
		put, err := c.Expect(testproc.ReplyInserted)
		if err != nil {
			return h, err
		}
		c.WriteString("reserve-with-timeout 0\r\n")
		if err := c.Flush(); err != nil {
			return h, err
		}
		r, err := c.Expect(testproc.ReplyReserved)
		if err != nil {
			return h, err
		}
		if r.N != put.N {
			return h, fmt.Errorf("load: reserved job %d, put %d", r.N, put.N)
		}
		c.WriteCmdID("delete", put.N)
		if err := c.Flush(); err != nil {
			return h, err
		}
		if _, err := c.Expect(testproc.ReplyDeleted); err != nil {
			return h, err
		}
		took := time.Since(t0)
		if over() {
			break
		}
		_ = h.RecordValue(int64(took))
	}
	return h, nil
}

// until is over at t.
func until(t time.Time) func() bool { return func() bool { return time.Now().After(t) } }

// postClear clears every job of a tube through the admin API and returns
// how many it deleted.
func postClear(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"state": "all"}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminBenchToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var n int
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("load: clear: %d %s", resp.StatusCode, b)
	}
	if _, err := fmt.Sscanf(string(b), `{"deleted":%d}`, &n); err != nil {
		return 0, fmt.Errorf("load: clear answered %q", b)
	}
	return n, nil
}
