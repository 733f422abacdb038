package storm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

const (
	// soakEnv sets the soak's length (a Go duration, as in 10m).
	soakEnv         = "SPROUT_SOAK"
	defaultSoakTime = 30 * time.Second

	soakTubes     = 4
	soakProducers = 4
	soakConsumers = 4
	soakChurners  = 2
	// soakPutEvery paces each producer: about 1,000 puts/s in all, well
	// within what the consumers take, so the queue stays short and the
	// server's memory has no reason to grow.
	soakPutEvery   = 4 * time.Millisecond
	soakChurnEvery = 10 * time.Millisecond
	soakKickEvery  = 200 * time.Millisecond

	// Drift allowed between the first and the last third of the samples
	// after warm-up: a relative part and an absolute slack.
	driftRatio     = 1.2
	driftRSSSlack  = 8 << 20
	driftFDSlack   = 16
	driftThreadAdd = 4
	// The clients' p99 is noisy on a shared 2-core machine: only a clear
	// blow-up fails.
	driftP99Ratio = 5
	driftP99Slack = 100 * time.Millisecond
)

// TestSoak runs a mixed workload on a -b directory with small segments
// (so they rotate and compaction runs): producers put into four tubes,
// consumers reserve and delete, release (some with a delay) or bury, a
// kicker kicks the buried back, and churners keep opening connections
// that put, or reserve and vanish with the job, or read stats, or just
// close. Every few seconds the server's RSS, descriptors and threads and
// the clients' p99 latency over the interval are sampled.
//
// After a warm-up (a fifth of the run) the last third of the samples is
// compared with the first: RSS may grow by at most 20% + 8 MiB, descriptors
// by 20% + 16, threads by 20% + 4, and p99 by 5× + 100 ms. Then the
// workload stops, everything left is kicked, drained and deleted: every
// job acknowledged with INSERTED must have been deleted exactly once, the
// server must hold no job, and its sockets must be back to what they were
// before the workload (no leaked descriptors).
//
// 30 s by default; SPROUT_SOAK=10m (make soak) for a longer run.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a workload for 30 s")
	}
	total := defaultSoakTime
	if v := os.Getenv(soakEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			t.Fatalf("%s=%q: want a duration of at least 10s", soakEnv, v)
		}
		total = d
	}
	every := min(max(total/60, time.Second), 5*time.Second)
	warmUp := total / 5

	bin := testproc.SproutBinary(t)
	spec := serverSpec{name: "sprout", binary: bin, args: []string{"-b", t.TempDir(), "-s", "1048576"}}
	s := spec.start(t)
	ctl := testproc.DialTest(t, s.Addr(), replyTimeout)
	// An answer means the server has accepted ctl: the count below holds it.
	if _, err := ctl.Stats("stats"); err != nil {
		t.Fatal(err)
	}
	start := mustReadProc(t, s.PID())
	startSockets := mustCountSockets(t, s.PID())

	w := newSoakWork(s.Addr())
	w.run()
	var samples []soakSample
	began := time.Now()
	for time.Since(began) < total {
		time.Sleep(every)
		if s.Exited() {
			w.halt()
			t.Fatalf("the server died during the soak:\n%s", tail(s.Output()))
		}
		st := mustReadProc(t, s.PID())
		v, err := ctl.StatsInt("stats", "current-jobs-ready", "current-connections")
		if err != nil {
			w.halt()
			t.Fatalf("stats during the soak: %v", err)
		}
		sm := soakSample{at: time.Since(began), proc: st, p99: w.takeP99(), ready: v[0], conns: v[1]}
		samples = append(samples, sm)
		if err := w.get(); err != nil {
			w.halt()
			t.Fatalf("soak client: %v", err)
		}
	}
	w.halt()
	if err := w.get(); err != nil {
		t.Fatalf("soak client: %v", err)
	}
	for _, sm := range samples {
		t.Logf("%5.0fs: %v, p99 %v, %d ready, %d connections", sm.at.Seconds(), sm.proc, sm.p99.Round(10*time.Microsecond), sm.ready, sm.conns)
	}
	t.Logf("workload: %d puts, %d deletes, %d releases, %d buries, %d kicked, %d churned connections",
		w.puts.Load(), w.deletes.Load(), w.releases.Load(), w.buries.Load(), w.kicked.Load(), w.churned.Load())
	checkDrift(t, samples, warmUp)

	w.drain(t, ctl)
	if err := w.ledgerBalanced(); err != nil {
		t.Error(err)
	}
	v, err := ctl.StatsInt("stats", "current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried")
	if err != nil {
		t.Fatal(err)
	}
	if v[0]+v[1]+v[2]+v[3] != 0 {
		t.Errorf("after the drain the server holds jobs: ready %d, reserved %d, delayed %d, buried %d", v[0], v[1], v[2], v[3])
	}
	socketsBack(t, s.PID(), startSockets)
	end := mustReadProc(t, s.PID())
	t.Logf("server before the workload: %v, %d sockets; after it: %v", start, startSockets, end)
	stopServer(t, "sprout", s)
}

type soakSample struct {
	at    time.Duration
	proc  procStat
	p99   time.Duration
	ready int64
	conns int64
}

// checkDrift compares the last third of the samples after warmUp with the
// first third.
func checkDrift(t *testing.T, samples []soakSample, warmUp time.Duration) {
	t.Helper()
	var steady []soakSample
	for _, sm := range samples {
		if sm.at >= warmUp {
			steady = append(steady, sm)
		}
	}
	if len(steady) < 3 {
		t.Fatalf("only %d samples after the warm-up", len(steady))
	}
	third := len(steady) / 3
	first, last := steady[:third], steady[len(steady)-third:]
	mean := func(ss []soakSample, f func(soakSample) float64) float64 {
		var sum float64
		for _, s := range ss {
			sum += f(s)
		}
		return sum / float64(len(ss))
	}
	for _, d := range []struct {
		name   string
		value  func(soakSample) float64
		ratio  float64
		slack  float64
		format func(float64) string
	}{
		{"RSS", func(s soakSample) float64 { return float64(s.proc.RSS) }, driftRatio, driftRSSSlack,
			func(v float64) string { return mib(int64(v)) }},
		{"descriptors", func(s soakSample) float64 { return float64(s.proc.fds) }, driftRatio, driftFDSlack,
			func(v float64) string { return fmt.Sprintf("%.1f", v) }},
		{"threads", func(s soakSample) float64 { return float64(s.proc.Threads) }, driftRatio, driftThreadAdd,
			func(v float64) string { return fmt.Sprintf("%.1f", v) }},
		{"client p99", func(s soakSample) float64 { return float64(s.p99) }, driftP99Ratio, float64(driftP99Slack),
			func(v float64) string { return time.Duration(v).Round(10 * time.Microsecond).String() }},
	} {
		a, b := mean(first, d.value), mean(last, d.value)
		bound := a*d.ratio + d.slack
		t.Logf("drift of %s: first third %s, last third %s (bound %s)", d.name, d.format(a), d.format(b), d.format(bound))
		if b > bound {
			t.Errorf("%s grew from %s to %s over the soak; the bound is %s", d.name, d.format(a), d.format(b), d.format(bound))
		}
	}
}

// socketsBack waits until the server holds no more sockets than want.
func socketsBack(t *testing.T, pid, want int) {
	t.Helper()
	deadline := time.Now().Add(afterWithin)
	for {
		n := mustCountSockets(t, pid)
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the server holds %d sockets %v after the workload ended, %d before it: leaked descriptors", n, afterWithin, want)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// soakWork is the soak's clients and their ledger.
type soakWork struct {
	addr string
	*stopper
	wg sync.WaitGroup
	firstError

	mu       sync.Mutex
	inserted map[uint64]bool // guarded by mu: INSERTED received
	deleted  map[uint64]int  // guarded by mu: DELETED received, per job
	lat      []time.Duration // guarded by mu: reply latencies since takeP99

	puts, deletes, releases, buries, kicked, churned atomic.Int64
}

func newSoakWork(addr string) *soakWork {
	return &soakWork{addr: addr, stopper: newStopper(), inserted: make(map[uint64]bool), deleted: make(map[uint64]int)}
}

func soakTube(i int) string { return fmt.Sprintf("soak-%d", i%soakTubes) }

// timed sends one command and records its reply's latency.
func (w *soakWork) timed(c *testproc.Conn, line string, body []byte) (testproc.Reply, error) {
	t0 := time.Now()
	r, err := c.Do(line, body)
	d := time.Since(t0)
	w.mu.Lock()
	w.lat = append(w.lat, d)
	w.mu.Unlock()
	return r, err
}

// takeP99 returns the p99 of the latencies since the last call.
func (w *soakWork) takeP99() time.Duration {
	w.mu.Lock()
	lat := w.lat
	w.lat = nil
	w.mu.Unlock()
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[len(lat)*99/100]
}

func (w *soakWork) noteInserted(id uint64) {
	w.puts.Add(1)
	w.mu.Lock()
	w.inserted[id] = true
	w.mu.Unlock()
}

func (w *soakWork) noteDeleted(id uint64) {
	w.deletes.Add(1)
	w.mu.Lock()
	w.deleted[id]++
	w.mu.Unlock()
}

// loop runs f every period on a connection of its own until stop; a
// failure stops the loop and is reported.
func (w *soakWork) loop(name string, period time.Duration, setup func(c *testproc.Conn) error, f func(c *testproc.Conn, rng *rand.Rand) error) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		c, err := testproc.Dial(w.addr, replyTimeout)
		if err != nil {
			w.set(fmt.Errorf("%s: %w", name, err))
			return
		}
		defer c.Close()
		if setup != nil {
			if err := setup(c); err != nil {
				w.set(fmt.Errorf("%s: %w", name, err))
				return
			}
		}
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(len(name))))
		w.every(period, func() bool {
			if err := f(c, rng); err != nil {
				w.set(fmt.Errorf("%s: %w", name, err))
				return false
			}
			return true
		})
	}()
}

func (w *soakWork) run() {
	watchAll := func(c *testproc.Conn) error {
		for i := range soakTubes {
			if _, err := c.Do("watch "+soakTube(i), nil); err != nil {
				return err
			}
		}
		return c.ExpectLine("ignore default", fmt.Sprintf("WATCHING %d", soakTubes))
	}
	for p := range soakProducers {
		tube := soakTube(p)
		w.loop(fmt.Sprintf("producer %d", p), soakPutEvery,
			func(c *testproc.Conn) error { return c.ExpectLine("use "+tube, "USING "+tube) },
			func(c *testproc.Conn, rng *rand.Rand) error { return w.put(c, rng) })
	}
	for i := range soakConsumers {
		w.loop(fmt.Sprintf("consumer %d", i), time.Millisecond, watchAll,
			func(c *testproc.Conn, rng *rand.Rand) error { return w.consume(c, rng) })
	}
	w.loop("kicker", soakKickEvery, nil, func(c *testproc.Conn, _ *rand.Rand) error { return w.kickAll(c) })
	for i := range soakChurners {
		w.loop(fmt.Sprintf("churner %d", i), soakChurnEvery, nil,
			func(_ *testproc.Conn, rng *rand.Rand) error { return w.churn(rng) })
	}
}

// halt stops the clients and waits for them.
func (w *soakWork) halt() {
	w.stop()
	w.wg.Wait()
}

// put puts a job of 100 to 2,000 bytes into the tube c uses.
func (w *soakWork) put(c *testproc.Conn, rng *rand.Rand) error {
	body := make([]byte, 100+rng.IntN(1900))
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	r, err := w.timed(c, fmt.Sprintf("put %d 0 60 %d", rng.IntN(100), len(body)), body)
	if err != nil {
		return err
	}
	if r.Kind != testproc.ReplyInserted {
		return fmt.Errorf("put: got %q", r.Line)
	}
	w.noteInserted(r.N)
	return nil
}

// consume reserves a job and deletes it (80%), releases it (10%), releases
// it with a 1 s delay (5%) or buries it (5%).
func (w *soakWork) consume(c *testproc.Conn, rng *rand.Rand) error {
	// Not timed: the reserve waits for a job by design.
	r, err := c.Do("reserve-with-timeout 1", nil)
	if err != nil {
		return err
	}
	if r.Kind == testproc.ReplyTimedOut {
		return nil
	}
	if r.Kind != testproc.ReplyReserved {
		return fmt.Errorf("reserve: got %q", r.Line)
	}
	id := r.N
	line, want := fmt.Sprintf("delete %d", id), "DELETED"
	switch n := rng.IntN(100); {
	case n < 10:
		line, want = fmt.Sprintf("release %d %d 0", id, rng.IntN(100)), "RELEASED"
	case n < 15:
		line, want = fmt.Sprintf("release %d 0 1", id), "RELEASED"
	case n < 20:
		line, want = fmt.Sprintf("bury %d 0", id), "BURIED"
	}
	if r, err = w.timed(c, line, nil); err != nil {
		return err
	}
	if string(r.Line) != want {
		return fmt.Errorf("%s: got %q", line, r.Line)
	}
	switch want {
	case "DELETED":
		w.noteDeleted(id)
	case "RELEASED":
		w.releases.Add(1)
	case "BURIED":
		w.buries.Add(1)
	}
	return nil
}

// kickAll kicks the buried jobs of every tube back.
func (w *soakWork) kickAll(c *testproc.Conn) error {
	for i := range soakTubes {
		tube := soakTube(i)
		if err := c.ExpectLine("use "+tube, "USING "+tube); err != nil {
			return err
		}
		r, err := w.timed(c, "kick 1000", nil)
		if err != nil {
			return err
		}
		var n int64
		if _, err := fmt.Sscanf(string(r.Line), "KICKED %d", &n); err != nil {
			return fmt.Errorf("kick: got %q", r.Line)
		}
		w.kicked.Add(n)
	}
	return nil
}

// churn opens a connection, does one of four short things on it and
// closes it: stats; a put; a reserve whose job goes back when the
// connection closes; nothing at all.
func (w *soakWork) churn(rng *rand.Rand) error {
	c, err := testproc.Dial(w.addr, replyTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	w.churned.Add(1)
	tube := soakTube(rng.IntN(soakTubes))
	switch rng.IntN(4) {
	case 0:
		_, err = c.Stats("stats")
		return err
	case 1:
		if err := c.ExpectLine("use "+tube, "USING "+tube); err != nil {
			return err
		}
		return w.put(c, rng)
	case 2:
		if err := c.ExpectLine("watch "+tube, "WATCHING 2"); err != nil {
			return err
		}
		r, err := w.timed(c, "reserve-with-timeout 0", nil)
		if err != nil {
			return err
		}
		if r.Kind != testproc.ReplyReserved && r.Kind != testproc.ReplyTimedOut {
			return fmt.Errorf("reserve-with-timeout 0: got %q", r.Line)
		}
	}
	return nil
}

// drain kicks and deletes every job left, once the workload has stopped.
func (w *soakWork) drain(t *testing.T, ctl *testproc.Conn) {
	t.Helper()
	c := testproc.DialTest(t, w.addr, replyTimeout)
	defer c.Close()
	for i := range soakTubes {
		if _, err := c.Do("watch "+soakTube(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := w.kickAll(ctl); err != nil {
			t.Fatal(err)
		}
		r, err := c.Do("reserve-with-timeout 2", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == testproc.ReplyTimedOut {
			v, err := ctl.StatsInt("stats", "current-jobs-ready", "current-jobs-delayed", "current-jobs-buried")
			if err != nil {
				t.Fatal(err)
			}
			if v[0]+v[1]+v[2] == 0 {
				return
			}
			continue
		}
		if r.Kind != testproc.ReplyReserved {
			t.Fatalf("drain: reserve got %q", r.Line)
		}
		if err := c.ExpectLine(fmt.Sprintf("delete %d", r.N), "DELETED"); err != nil {
			t.Fatal(err)
		}
		w.noteDeleted(r.N)
		if time.Now().After(deadline) {
			t.Fatal("the drain did not end within 30 s")
		}
	}
}

// ledgerBalanced checks that every inserted job was deleted exactly once,
// and nothing else was.
func (w *soakWork) ledgerBalanced() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []string
	for id := range w.inserted {
		if n := w.deleted[id]; n != 1 && len(errs) < 10 {
			errs = append(errs, fmt.Sprintf("job %d deleted %d times", id, n))
		}
	}
	for id := range w.deleted {
		if !w.inserted[id] && len(errs) < 10 {
			errs = append(errs, fmt.Sprintf("job %d deleted, never inserted", id))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d jobs inserted, %d deleted: %v", len(w.inserted), len(w.deleted), errs)
	}
	return nil
}
