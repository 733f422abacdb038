package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testproc.RemoveSproutBinary()
	os.Exit(code)
}

// lineConn is a client that sends command lines and reads reply lines.
type lineConn struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dial(t *testing.T, addr string) *lineConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &lineConn{t: t, c: c, rd: bufio.NewReader(c)}
}

// do sends line and returns the reply line (and body, if any, after it).
func (l *lineConn) do(line string) string {
	l.t.Helper()
	if _, err := fmt.Fprint(l.c, line); err != nil {
		l.t.Fatalf("send %q: %v", line, err)
	}
	_ = l.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply, err := l.rd.ReadString('\n')
	if err != nil {
		l.t.Fatalf("reply to %q: %v", line, err)
	}
	var id, n int
	if _, err := fmt.Sscanf(reply, "RESERVED %d %d\r\n", &id, &n); err == nil {
		body := make([]byte, n+2)
		if _, err := l.rd.Read(body); err != nil {
			l.t.Fatal(err)
		}
		reply += string(body)
	}
	return reply
}

func (l *lineConn) expect(line, want string) {
	l.t.Helper()
	if got := l.do(line); got != want {
		l.t.Fatalf("%q: got %q, want %q", line, got, want)
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
	worker, other := dial(t, p.Addr()), dial(t, p.Addr())
	other.expect("put 0 0 60 1\r\na\r\n", "INSERTED 1\r\n")
	other.expect("put 0 0 60 1\r\nb\r\n", "INSERTED 2\r\n")
	worker.expect("reserve\r\n", "RESERVED 1 1\r\na\r\n")

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			break // the listener is closed
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting 5 s after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	other.expect("put 0 0 60 1\r\nc\r\n", "DRAINING\r\n")
	other.expect("reserve-with-timeout 0\r\n", "TIMED_OUT\r\n") // job 2 is ready, but not handed out
	worker.expect("touch 1\r\n", "TOUCHED\r\n")
	time.Sleep(300 * time.Millisecond)
	if p.Exited() {
		t.Fatalf("exited while a job was reserved:\n%s", p.Output())
	}
	worker.expect("delete 1\r\n", "DELETED\r\n")
	took := waitExit(t, p, 5*time.Second)
	t.Logf("exited %v after the worker deleted its job", took)
}

// TestShutdownTimeout: a worker that never finishes holds the shutdown up
// only until --shutdown-timeout.
func TestShutdownTimeout(t *testing.T) {
	p := testproc.Start(t, testproc.SproutBinary(t), "--shutdown-timeout", "1s")
	worker := dial(t, p.Addr())
	worker.expect("put 0 0 60 1\r\na\r\n", "INSERTED 1\r\n")
	worker.expect("reserve\r\n", "RESERVED 1 1\r\na\r\n")
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
	worker := dial(t, p.Addr())
	worker.expect("put 0 0 60 1\r\na\r\n", "INSERTED 1\r\n")
	worker.expect("reserve\r\n", "RESERVED 1 1\r\na\r\n")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
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
	c := dial(t, p.Addr())
	c.expect("put 0 0 60 4\r\nheld\r\n", "INSERTED 1\r\n")
	c.expect("reserve\r\n", "RESERVED 1 4\r\nheld\r\n")
	c.expect("put 0 0 60 4\r\nlast\r\n", "INSERTED 2\r\n")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, p, 10*time.Second)

	p = testproc.Start(t, bin, "-b", dir, "-f", "0")
	c = dial(t, p.Addr())
	c.expect("reserve-with-timeout 0\r\n", "RESERVED 1 4\r\nheld\r\n")
	c.expect("reserve-with-timeout 0\r\n", "RESERVED 2 4\r\nlast\r\n")
}

// TestEnvironmentAndFlags: SPROUT_* variables override the defaults and
// flags override them.
func TestEnvironmentAndFlags(t *testing.T) {
	p := testproc.StartConfig(t, testproc.Config{
		Binary: testproc.SproutBinary(t),
		Env:    []string{"SPROUT_MAX_JOB_SIZE=5", "SPROUT_LOG_LEVEL=error"},
	})
	c := dial(t, p.Addr())
	c.expect("put 0 0 60 6\r\nsixsix\r\n", "JOB_TOO_BIG\r\n")
	c.expect("put 0 0 60 5\r\nfive5\r\n", "INSERTED 1\r\n")

	p = testproc.StartConfig(t, testproc.Config{
		Binary: testproc.SproutBinary(t),
		Args:   []string{"--max-job-size", "6"},
		Env:    []string{"SPROUT_MAX_JOB_SIZE=5"},
	})
	c = dial(t, p.Addr())
	c.expect("put 0 0 60 6\r\nsixsix\r\n", "INSERTED 1\r\n")
	if !strings.Contains(p.Output(), `"max_job_size":6`) {
		t.Errorf("the effective configuration was not logged:\n%s", p.Output())
	}
}
