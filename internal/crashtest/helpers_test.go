package crashtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// replyTimeout bounds every exchange with a server.
const replyTimeout = 10 * time.Second

// TestMain removes the sprout binary testproc.SproutBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	testproc.RemoveSproutBinary()
	os.Exit(code)
}

// stop asks the server to shut down with SIGTERM and checks it exits 0.
func stop(t *testing.T, s *testproc.Process) {
	t.Helper()
	if !s.Stop(15 * time.Second) {
		t.Fatalf("server did not stop within 15s of SIGTERM:\n%s", s.Output())
	}
	if code := s.ExitCode(); code != 0 {
		t.Errorf("server exited with %v after SIGTERM:\n%s", s.State(), s.Output())
	}
}

// runToExit runs binary with args and returns its exit code and output; it
// fails the test if the process is still running after timeout.
func runToExit(t *testing.T, timeout time.Duration, binary string, args ...string) (int, string) {
	t.Helper()
	p := testproc.StartConfig(t, testproc.Config{Binary: binary, Args: args, NoListen: true})
	if !p.Wait(timeout) {
		p.Kill()
		t.Fatalf("%s %s still running after %v:\n%s", filepath.Base(binary), strings.Join(args, " "), timeout, p.Output())
	}
	return p.ExitCode(), p.Output()
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
