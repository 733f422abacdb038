package storm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/internal/testproc/procstat"
)

const (
	// replyTimeout bounds every exchange a checking client has with a
	// server; a server that does not answer within it has failed.
	replyTimeout = 5 * time.Second
	// stopGrace is how long a server may take to stop after SIGTERM.
	stopGrace = 15 * time.Second
	// serverOutputLimit caps the log kept per server: a flood must not
	// grow the test process without bound.
	serverOutputLimit = 4 << 20
	// goalsEnv, set to 1, makes the goal figures assertions.
	goalsEnv = "SPROUT_STORM_GOALS"
)

// TestMain removes the sprout binary testproc.SproutBinary built.
func TestMain(m *testing.M) { testproc.Main(m) }

// newFlags are the engine flags these tests exercise that an older sprout
// does not have. Such a binary runs without them, for a baseline.
var newFlags = []string{"max-connections", "max-buffer-memory"}

// supportsFlag reports whether bin accepts --name: `bin --name 1 -v` exits
// 0 once the flag parses, and 5 (usage) when it is unknown.
func supportsFlag(t *testing.T, bin, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := exec.CommandContext(ctx, bin, "--"+name, "1", "-v").Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &exit) && exit.ExitCode() == 5:
		return false
	}
	t.Fatalf("probing %s for --%s: %v", bin, name, err)
	return false
}

// sproutArgs returns args without the `--name value` pairs of newFlags that
// bin does not know. The test goes on without them, so that today's binary
// yields a baseline, and fails at its end, naming the missing flag.
func sproutArgs(t *testing.T, bin string, args ...string) []string {
	t.Helper()
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		name, isLong := strings.CutPrefix(args[i], "--")
		if isLong && i+1 < len(args) && slices.Contains(newFlags, name) && !supportsFlag(t, bin, name) {
			t.Logf("baseline: this sprout has no --%s; running without it", name)
			value := args[i+1]
			t.Cleanup(func() {
				t.Errorf("this sprout has no --%s %s: the test ran without it (a baseline, not a pass)", name, value)
			})
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// serverSpec is a server to start.
type serverSpec struct {
	name   string // "sprout" or "beanstalkd", for messages
	binary string
	args   []string // after -l 127.0.0.1 -p PORT
	// nofile, when positive, is the open-file limit (soft and hard) of the
	// server alone; the test process keeps its own.
	nofile int
}

// start runs the server, waits until it answers the protocol, and kills it
// when the test ends.
func (s serverSpec) start(t *testing.T) *testproc.Process {
	t.Helper()
	bin := s.binary
	if s.nofile > 0 {
		bin = limitedWrapper(t, s.binary, s.nofile)
	}
	p := testproc.StartConfig(t, testproc.Config{
		Binary: bin, Args: s.args, Ready: testproc.Probe, OutputLimit: serverOutputLimit,
	})
	if s.nofile > 0 {
		if got := openFileLimit(t, p.PID()); got != s.nofile {
			t.Fatalf("%s runs with an open-file limit of %d, want %d", s.name, got, s.nofile)
		}
	}
	return p
}

// limitedWrapper writes a script that sets the open-file limit, soft and
// hard, and execs binary in its place, so that the PID is the server's.
// (prlimit would do, but testproc puts -l and -p first, which prlimit
// reads as its own.) The hard limit matters: Go raises its soft limit to
// the hard one at start.
func limitedWrapper(t *testing.T, binary string, nofile int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limited-"+filepath.Base(binary))
	script := fmt.Sprintf("#!/bin/sh\nulimit -n %d || exit 1\nexec '%s' \"$@\"\n", nofile, binary)
	if strings.Contains(binary, "'") {
		t.Fatalf("binary path %q holds a quote", binary)
	}
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// openFileLimit reads the soft "Max open files" of process pid.
func openFileLimit(t *testing.T, pid int) int {
	t.Helper()
	n, err := procstat.OpenFileLimit(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stopServer stops s with SIGTERM and checks it exits 0.
func stopServer(t *testing.T, name string, s *testproc.Process) {
	t.Helper()
	if s.Exited() {
		return
	}
	if !s.Stop(stopGrace) {
		t.Errorf("%s did not stop within %v of SIGTERM:\n%s", name, stopGrace, tail(s.Output()))
		return
	}
	if code := s.ExitCode(); code != 0 {
		t.Errorf("%s exited with %v after SIGTERM:\n%s", name, s.State(), tail(s.Output()))
	}
}

// tail returns the last few KiB of a server's output, for messages.
func tail(out string) string {
	const keep = 3 << 10
	if len(out) > keep {
		out = "…" + out[len(out)-keep:]
	}
	return strings.TrimSpace(out)
}

// logLines returns the lines of a server's output that contain msg.
func logLines(out, msg string) []string {
	var lines []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, msg) {
			lines = append(lines, line)
		}
	}
	return lines
}

// procStat is what /proc says about a server.
type procStat struct {
	procstat.Usage
	fds int
}

func (p procStat) String() string {
	return fmt.Sprintf("RSS %s, %d fds, %d threads", mib(p.RSS), p.fds, p.Threads)
}

// readProc reads the server's usage and counts its descriptors.
func readProc(pid int) (procStat, error) {
	u, err := procstat.Read(pid)
	if err != nil {
		return procStat{}, err
	}
	fds, err := procstat.FDs(pid)
	return procStat{Usage: u, fds: fds}, err
}

func mustReadProc(t *testing.T, pid int) procStat {
	t.Helper()
	st, err := readProc(pid)
	if err != nil {
		t.Fatalf("reading /proc of the server: %v", err)
	}
	return st
}

func mustCountSockets(t *testing.T, pid int) int {
	t.Helper()
	n, err := procstat.Sockets(pid)
	if err != nil {
		t.Fatalf("counting the server's sockets: %v", err)
	}
	return n
}

// rssWatch records the highest RSS of a process from the moment it is
// started: VmHWM after resetting it, and, in case the kernel refuses the
// reset, samples every 20 ms.
type rssWatch struct {
	pid     int
	base    int64 // VmRSS when started; immutable
	hwmOK   bool  // the VmHWM reset worked; immutable
	quit    *stopper
	done    chan struct{} // closed when the sampler has returned
	mu      sync.Mutex
	sampled int64 // guarded by mu: highest VmRSS sampled
}

func watchRSS(t *testing.T, pid int) *rssWatch {
	t.Helper()
	w := &rssWatch{pid: pid, quit: newStopper(), done: make(chan struct{})}
	w.hwmOK = procstat.ResetPeak(pid) == nil
	st := mustReadProc(t, pid)
	w.base, w.sampled = st.RSS, st.RSS
	go func() {
		defer close(w.done)
		w.quit.every(20*time.Millisecond, func() bool {
			if st, err := procstat.Read(pid); err == nil {
				w.mu.Lock()
				w.sampled = max(w.sampled, st.RSS)
				w.mu.Unlock()
			}
			return true
		})
	}()
	return w
}

// growth stops the watch and returns the peak RSS above the base.
func (w *rssWatch) growth() int64 {
	w.quit.stop()
	<-w.done
	w.mu.Lock()
	peak := w.sampled
	w.mu.Unlock()
	if st, err := procstat.Read(w.pid); err == nil {
		peak = max(peak, st.RSS)
		if w.hwmOK {
			peak = max(peak, st.PeakRSS)
		}
	}
	return peak - w.base
}

// raceMemory is how much more memory a bound on the server's RSS allows
// under the race detector, whose shadow memory grows with the heap: the
// hostile clients' breakage bound, 64 MiB, measured 67 to 97 MiB there on
// attacks that take 10 to 60 MiB without it.
func raceMemory() int64 {
	if testproc.RaceEnabled {
		return 4
	}
	return 1
}

// raceSlowdown is how much longer a bound on the polite client's replies
// allows under the race detector, which slows the server and the clients
// alike: under stats-flood the worst reply of a run measured 8-21 ms
// without it, and 121 ms to 2.1 s with it (median 450 ms, 17 of 157 runs
// over 1 s; a 2-core machine at load averages of 4 to 12).
func raceSlowdown() time.Duration {
	if testproc.RaceEnabled {
		return 4
	}
	return 1
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// errOutOfMemory is a put answered OUT_OF_MEMORY: a server with -b says so
// when it cannot make the log's next segment.
var errOutOfMemory = errors.New("storm: put answered OUT_OF_MEMORY")

// roundTrip puts a job in the tube c uses (and watches alone), reserves it
// and deletes it, and returns the slowest of the three replies.
func roundTrip(c *testproc.Conn, body []byte) (time.Duration, error) {
	var worst time.Duration
	timed := func(line string, body []byte) (testproc.Reply, error) {
		t0 := time.Now()
		r, err := c.Do(line, body)
		worst = max(worst, time.Since(t0))
		return r, err
	}
	r, err := timed(fmt.Sprintf("put 0 0 60 %d", len(body)), body)
	if err != nil {
		return worst, err
	}
	if string(r.Line) == "OUT_OF_MEMORY" {
		return worst, errOutOfMemory
	}
	if r.Kind != testproc.ReplyInserted {
		return worst, fmt.Errorf("put: got %q", r.Line)
	}
	id := r.N
	if r, err = timed("reserve-with-timeout 1", nil); err != nil {
		return worst, err
	}
	if r.Kind != testproc.ReplyReserved || r.N != id {
		return worst, fmt.Errorf("reserve-with-timeout 1 after putting job %d: got %q", id, r.Line)
	}
	if r, err = timed(fmt.Sprintf("delete %d", id), nil); err != nil {
		return worst, err
	}
	if r.Kind != testproc.ReplyDeleted {
		return worst, fmt.Errorf("delete %d: got %q", id, r.Line)
	}
	return worst, nil
}

// useOnly makes c use tube and watch it alone.
func useOnly(c *testproc.Conn, tube string) error {
	if err := c.ExpectLine("use "+tube, "USING "+tube); err != nil {
		return err
	}
	if err := c.ExpectLine("watch "+tube, "WATCHING 2"); err != nil {
		return err
	}
	return c.ExpectLine("ignore default", "WATCHING 1")
}

// goals reports whether goal figures are assertions in this run.
func goals() bool { return os.Getenv(goalsEnv) == "1" }

// goal logs whether a goal figure was met, and fails the test on a miss
// when goals are enforced.
func goal(t *testing.T, met bool, format string, args ...any) {
	t.Helper()
	judge(t, met, goals(), format, args...)
}

// raceGoal is goal for a figure the race detector distorts, so that under
// it the figure is only reported: the clients' timings (the clients
// themselves are slow) and the server's memory (testproc.SproutBinary then
// builds it with the race detector, whose shadow memory and bookkeeping make
// its RSS several times larger).
func raceGoal(t *testing.T, met bool, format string, args ...any) {
	t.Helper()
	if testproc.RaceEnabled {
		format += " (race detector on: not judged)"
	}
	judge(t, met, goals() && !testproc.RaceEnabled, format, args...)
}

func judge(t *testing.T, met, enforce bool, format string, args ...any) {
	t.Helper()
	verdict := "met"
	if !met {
		verdict = "not met"
	}
	msg := fmt.Sprintf("goal: "+format+": %s", append(args, verdict)...)
	if !met && enforce {
		t.Error(msg)
		return
	}
	t.Log(msg)
}

// stopper asks goroutines to end. It may be stopped more than once.
type stopper struct {
	once sync.Once
	c    chan struct{}
}

func newStopper() *stopper { return &stopper{c: make(chan struct{})} }

func (s *stopper) stop() { s.once.Do(func() { close(s.c) }) }

func (s *stopper) stopping() bool {
	select {
	case <-s.c:
		return true
	default:
		return false
	}
}

// every calls f every period until s stops or f returns false.
func (s *stopper) every(period time.Duration, f func() bool) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-s.c:
			return
		case <-tick.C:
		}
		if !f() {
			return
		}
	}
}

// firstError keeps the first error reported to it, from any goroutine.
type firstError struct {
	mu  sync.Mutex
	err error // guarded by mu
}

func (e *firstError) set(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
}

func (e *firstError) get() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}
