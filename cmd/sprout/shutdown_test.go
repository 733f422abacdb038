package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// dialTCP is dial for a "host:port" address.
func dialTCP(t *testing.T, addr string) *client {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return dial(t, a)
}

// expect sends request and checks the reply's lines, without "\r\n".
func (c *client) expect(request string, want ...string) {
	c.t.Helper()
	if got := c.call(request); got != want[0] {
		c.t.Fatalf("%q: got %q, want %q", request, got, want[0])
	}
	for _, w := range want[1:] {
		if got := c.line(); got != w {
			c.t.Fatalf("%q: got %q, want %q", request, got, w)
		}
	}
}

// waitExit waits for p to exit 0 within d and returns how long it took.
func waitExit(t *testing.T, p *testproc.Process, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if !p.Wait(d) {
		t.Fatalf("still running %v after the signal:\n%s", d, p.Output())
	}
	if code := p.ExitCode(); code != 0 {
		t.Fatalf("exit status %d:\n%s", code, p.Output())
	}
	return time.Since(start)
}

// TestGracefulShutdown: on SIGTERM the listener closes, put answers
// DRAINING, no job is handed out, and a worker can still finish the job it
// holds; the server exits 0 once it has, not at the timeout.
func TestGracefulShutdown(t *testing.T) {
	p := testproc.Start(t, testproc.SproutBinary(t), "--shutdown-timeout", "20s")
	worker, other := dialTCP(t, p.Addr()), dialTCP(t, p.Addr())
	other.expect("put 0 0 60 1\r\na\r\n", "INSERTED 1")
	other.expect("put 0 0 60 1\r\nb\r\n", "INSERTED 2")
	worker.expect("reserve\r\n", "RESERVED 1 1", "a")

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 5*time.Second, "the listener closed after SIGTERM", func() bool {
		return testproc.Accepts(p.Addr(), time.Second) != nil
	})
	other.expect("put 0 0 60 1\r\nc\r\n", "DRAINING")
	other.expect("reserve-with-timeout 0\r\n", "TIMED_OUT") // job 2 is ready, but not handed out
	// The shutdown waits for the worker: it said so, and while the worker
	// is served it has not gone on.
	testproc.WaitFor(t, 5*time.Second, "the shutdown waiting for workers", func() bool {
		return strings.Contains(p.Output(), "waiting for workers to finish theirs")
	})
	worker.expect("touch 1\r\n", "TOUCHED")
	if p.Exited() || strings.Contains(p.Output(), "no job is reserved") {
		t.Fatalf("went on while a job was reserved:\n%s", p.Output())
	}
	worker.expect("delete 1\r\n", "DELETED")
	took := waitExit(t, p, 5*time.Second)
	t.Logf("exited %v after the worker deleted its job", took)
}

// TestShutdownTimeout: a worker that never finishes holds the shutdown up
// only until --shutdown-timeout.
func TestShutdownTimeout(t *testing.T) {
	p := testproc.Start(t, testproc.SproutBinary(t), "--shutdown-timeout", "1s")
	worker := dialTCP(t, p.Addr())
	worker.expect("put 0 0 60 1\r\na\r\n", "INSERTED 1")
	worker.expect("reserve\r\n", "RESERVED 1 1", "a")
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, p, 10*time.Second)
	took := time.Since(start)
	if took < time.Second {
		t.Fatalf("exited after %v, before the 1 s timeout", took)
	}
	t.Logf("exited %v after SIGTERM with a job held (timeout 1s)", took)
	if !strings.Contains(p.Output(), "shutdown timeout") {
		t.Errorf("no shutdown timeout logged:\n%s", p.Output())
	}
}

// TestSecondSignalStopsAtOnce: a second SIGTERM ends the wait for workers.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	p := testproc.Start(t, testproc.SproutBinary(t), "--shutdown-timeout", "60s")
	worker := dialTCP(t, p.Addr())
	worker.expect("put 0 0 60 1\r\na\r\n", "INSERTED 1")
	worker.expect("reserve\r\n", "RESERVED 1 1", "a")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 5*time.Second, "the first signal taken", func() bool {
		return strings.Contains(p.Output(), "waiting for workers to finish theirs")
	})
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	t.Logf("exited %v after the second signal", waitExit(t, p, 5*time.Second))
}

// TestShutdownKeepsAcknowledgedPuts: with -b -f 0, a put acknowledged just
// before SIGTERM is there after a restart, and so is the job a worker held.
func TestShutdownKeepsAcknowledgedPuts(t *testing.T) {
	dir := t.TempDir()
	bin := testproc.SproutBinary(t)
	p := testproc.Start(t, bin, "-b", dir, "-f", "0", "--shutdown-timeout", "1s")
	c := dialTCP(t, p.Addr())
	c.expect("put 0 0 60 4\r\nheld\r\n", "INSERTED 1")
	c.expect("reserve\r\n", "RESERVED 1 4", "held")
	c.expect("put 0 0 60 4\r\nlast\r\n", "INSERTED 2")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, p, 10*time.Second)

	p = testproc.Start(t, bin, "-b", dir, "-f", "0")
	c = dialTCP(t, p.Addr())
	c.expect("reserve-with-timeout 0\r\n", "RESERVED 1 4", "held")
	c.expect("reserve-with-timeout 0\r\n", "RESERVED 2 4", "last")
}

// TestEnvironmentAndFlags: SPROUT_* variables override the defaults and
// flags override them.
func TestEnvironmentAndFlags(t *testing.T) {
	p := testproc.StartConfig(t, testproc.Config{
		Binary: testproc.SproutBinary(t),
		Env:    []string{"SPROUT_MAX_JOB_SIZE=5", "SPROUT_LOG_LEVEL=error"},
	})
	c := dialTCP(t, p.Addr())
	c.expect("put 0 0 60 6\r\nsixsix\r\n", "JOB_TOO_BIG")
	c.expect("put 0 0 60 5\r\nfive5\r\n", "INSERTED 1")

	p = testproc.StartConfig(t, testproc.Config{
		Binary: testproc.SproutBinary(t),
		Args:   []string{"--max-job-size", "6"},
		Env:    []string{"SPROUT_MAX_JOB_SIZE=5"},
	})
	c = dialTCP(t, p.Addr())
	c.expect("put 0 0 60 6\r\nsixsix\r\n", "INSERTED 1")
	if !strings.Contains(p.Output(), `"max_job_size":6`) {
		t.Errorf("the effective configuration was not logged:\n%s", p.Output())
	}
}

// httpStatus returns the status code of a GET of url, or 0 if it fails.
func httpStatus(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestProbesDuringShutdown: /readyz turns 503 as soon as SIGTERM starts
// the drain, while /healthz stays 200 and workers finish their jobs.
func TestProbesDuringShutdown(t *testing.T) {
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := testproc.Start(t, testproc.SproutBinary(t), "--http", fmt.Sprintf("127.0.0.1:%d", port))
	worker := dialTCP(t, p.Addr())
	worker.expect("put 0 0 60 1\r\na\r\n", "INSERTED 1")
	worker.expect("reserve\r\n", "RESERVED 1 1", "a")
	if got := httpStatus(base + "/readyz"); got != 200 {
		t.Fatalf("/readyz before SIGTERM: %d", got)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 5*time.Second, "/readyz 503 after SIGTERM", func() bool {
		return httpStatus(base+"/readyz") == 503
	})
	if got := httpStatus(base + "/healthz"); got != 200 {
		t.Fatalf("/healthz while draining: %d", got)
	}
	worker.expect("delete 1\r\n", "DELETED")
	waitExit(t, p, 5*time.Second)
}

// TestListensOnIPv6: -l ::1 serves on the IPv6 loopback.
func TestListensOnIPv6(t *testing.T) {
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		_ = ln.Close()
	}
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("::1", strconv.Itoa(port))
	p := testproc.StartConfig(t, testproc.Config{
		Binary:   testproc.SproutBinary(t),
		Args:     []string{"-l", "::1", "-p", strconv.Itoa(port)},
		NoListen: true,
	})
	testproc.WaitFor(t, 5*time.Second, "accepting on "+addr, func() bool {
		if p.Exited() {
			t.Fatalf("exited:\n%s", p.Output())
		}
		return testproc.Accepts(addr, time.Second) == nil
	})
	c := dialTCP(t, addr)
	c.expect("put 0 0 60 2\r\nv6\r\n", "INSERTED 1")
	c.expect("reserve-with-timeout 0\r\n", "RESERVED 1 2", "v6")
}
