package crashtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// startTimeout bounds how long a server may take to accept connections.
	startTimeout = 10 * time.Second
	// replyTimeout bounds every exchange with a server.
	replyTimeout = 10 * time.Second
)

// The sprout binary is built once per test process, into a directory
// TestMain removes.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// sproutBinary builds cmd/sprout (once) and returns its path.
func sproutBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "sprout-crashtest-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "sprout")
		out, err := exec.Command("go", "build", "-o", build.path, "github.com/sproutmq/sprout/cmd/sprout").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build ./cmd/sprout: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

func beanstalkdBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("beanstalkd")
	if err != nil {
		t.Fatalf("the reference server beanstalkd is not on PATH (%v); install it with: apt-get install -y beanstalkd", err)
	}
	return path
}

// lockedBuffer collects a server's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// server is a sprout or beanstalkd process on a loopback port.
type server struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{} // closed once the process has been waited for
	output *lockedBuffer
}

// start runs binary with args plus -l 127.0.0.1 -p <free port> and waits
// until it accepts connections. It is killed by PID when the test ends.
func start(t *testing.T, binary string, args ...string) *server {
	t.Helper()
	// A free port is found by binding and releasing it; another process may
	// take it in between, so a server that cannot listen is tried again.
	for attempt := 1; ; attempt++ {
		s, err := tryStart(t, binary, args)
		if err == nil {
			return s
		}
		if attempt == 3 || !strings.Contains(s.output.String(), "in use") {
			t.Fatal(err)
		}
	}
}

func tryStart(t *testing.T, binary string, args []string) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &server{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		exited: make(chan struct{}),
		output: &lockedBuffer{},
	}
	s.cmd = exec.Command(binary, append(append([]string(nil), args...), "-l", "127.0.0.1", "-p", strconv.Itoa(port))...)
	s.cmd.Stdout, s.cmd.Stderr = s.output, s.output
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", binary, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.kill)
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.exited:
			return s, fmt.Errorf("%s %s exited at start (%v):\n%s",
				filepath.Base(binary), strings.Join(args, " "), s.cmd.ProcessState, s.output.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			c.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return s, fmt.Errorf("%s did not accept connections within %v:\n%s", binary, startTimeout, s.output.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill sends SIGKILL to the server's PID and waits for it to exit.
func (s *server) kill() { s.signal(syscall.SIGKILL) }

func (s *server) signal(sig syscall.Signal) {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = syscall.Kill(s.cmd.Process.Pid, sig)
	<-s.exited
}

// stop asks the server to shut down with SIGTERM and checks it exits 0.
func (s *server) stop(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		s.kill()
		t.Fatalf("server did not stop within 15s of SIGTERM:\n%s", s.output.String())
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("server exited with %v after SIGTERM:\n%s", s.cmd.ProcessState, s.output.String())
	}
}

// runToExit runs binary with args and returns its exit code and output; it
// fails the test if the process is still running after timeout.
func runToExit(t *testing.T, timeout time.Duration, binary string, args ...string) (int, string) {
	t.Helper()
	var out lockedBuffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("%s %s still running after %v:\n%s", filepath.Base(binary), strings.Join(args, " "), timeout, out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// reply is one server reply: its line without "\r\n" and, for FOUND, OK
// and RESERVED, its body without "\r\n".
type reply struct {
	line string
	body []byte
}

// conn speaks the protocol over one connection; a failure fails the test.
type conn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, replyTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{t: t, c: c, r: bufio.NewReader(c)}
}

// pipeline sends every command at once and reads one reply for each.
func (c *conn) pipeline(cmds []string) []reply {
	c.t.Helper()
	_ = c.c.SetDeadline(time.Now().Add(replyTimeout))
	var out bytes.Buffer
	for _, cmd := range cmds {
		out.WriteString(cmd)
		out.WriteString("\r\n")
	}
	errc := make(chan error, 1)
	go func() { _, err := c.c.Write(out.Bytes()); errc <- err }()
	replies := make([]reply, 0, len(cmds))
	for _, cmd := range cmds {
		r, err := c.read()
		if err != nil {
			c.t.Fatalf("%s: %v", cmd, err)
		}
		replies = append(replies, r)
	}
	if err := <-errc; err != nil {
		c.t.Fatalf("writing commands: %v", err)
	}
	return replies
}

func (c *conn) read() (reply, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	r := reply{line: strings.TrimSuffix(line, "\r\n")}
	f := strings.Fields(r.line)
	if len(f) > 0 && (f[0] == "OK" || f[0] == "FOUND" || f[0] == "RESERVED") {
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			return r, fmt.Errorf("reply %q", r.line)
		}
		r.body = make([]byte, n+2)
		if _, err := io.ReadFull(c.r, r.body); err != nil {
			return r, err
		}
		r.body = r.body[:n]
	}
	return r, nil
}

// do sends one command (and a body, if not nil) and returns its reply.
func (c *conn) do(cmd string, body []byte) reply {
	c.t.Helper()
	_ = c.c.SetDeadline(time.Now().Add(replyTimeout))
	msg := []byte(cmd + "\r\n")
	if body != nil {
		msg = append(append(msg, body...), "\r\n"...)
	}
	if _, err := c.c.Write(msg); err != nil {
		c.t.Fatalf("%s: %v", cmd, err)
	}
	r, err := c.read()
	if err != nil {
		c.t.Fatalf("%s: %v", cmd, err)
	}
	return r
}

func (c *conn) expect(cmd, want string) {
	c.t.Helper()
	if got := c.do(cmd, nil).line; got != want {
		c.t.Fatalf("%s: got %q, want %q", cmd, got, want)
	}
}

// put puts a job in the used tube and returns its id.
func (c *conn) put(pri, delay, ttr int, body []byte) uint64 {
	c.t.Helper()
	cmd := fmt.Sprintf("put %d %d %d %d", pri, delay, ttr, len(body))
	r := c.do(cmd, body)
	id, ok := strings.CutPrefix(r.line, "INSERTED ")
	if !ok {
		c.t.Fatalf("%s: got %q, want INSERTED", cmd, r.line)
	}
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		c.t.Fatalf("%s: got %q", cmd, r.line)
	}
	return n
}

// reserve reserves the given job and fails unless it gets it.
func (c *conn) reserveJob(id uint64) {
	c.t.Helper()
	if r := c.do(fmt.Sprintf("reserve-job %d", id), nil); !strings.HasPrefix(r.line, fmt.Sprintf("RESERVED %d ", id)) {
		c.t.Fatalf("reserve-job %d: got %q", id, r.line)
	}
}

// statsJob returns stats-job as a map, or nil for NOT_FOUND.
func (c *conn) statsJob(id uint64) map[string]string {
	c.t.Helper()
	r := c.do(fmt.Sprintf("stats-job %d", id), nil)
	if r.line == "NOT_FOUND" {
		return nil
	}
	if !strings.HasPrefix(r.line, "OK ") {
		c.t.Fatalf("stats-job %d: got %q", id, r.line)
	}
	return parseYAML(r.body)
}

// parseYAML reads the flat "key: value" lines of a stats reply.
func parseYAML(b []byte) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			m[k] = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return m
}

// binlogFiles lists the beanstalkd binlog.N files in dir.
func binlogFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "binlog.*"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}
