package crashtest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// replyTimeout bounds every exchange with a server.
const replyTimeout = 10 * time.Second

// TestMain removes the sprout binary testproc.SproutBinary built.
func TestMain(m *testing.M) { testproc.Main(m) }

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

// conn is a protocol client whose failures fail the test.
type conn struct {
	t *testing.T
	*testproc.Conn
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	return &conn{t: t, Conn: testproc.DialTest(t, addr, replyTimeout)}
}

// pipeline sends every command at once and reads one reply for each.
func (c *conn) pipeline(cmds []string) []testproc.Reply {
	c.t.Helper()
	replies, err := c.Pipeline(cmds)
	if err != nil {
		c.t.Fatal(err)
	}
	return replies
}

// do sends one command (and a body, if not nil) and returns its reply.
func (c *conn) do(cmd string, body []byte) testproc.Reply {
	c.t.Helper()
	r, err := c.Do(cmd, body)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *conn) expect(cmd, want string) {
	c.t.Helper()
	if err := c.ExpectLine(cmd, want); err != nil {
		c.t.Fatal(err)
	}
}

// put puts a job in the used tube and returns its id.
func (c *conn) put(pri uint32, delay, ttr int, body []byte) uint64 {
	c.t.Helper()
	id, err := c.Put(pri, delay, ttr, body)
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

// reserveJob reserves the given job and fails unless it gets it.
func (c *conn) reserveJob(id uint64) {
	c.t.Helper()
	if r := c.do(fmt.Sprintf("reserve-job %d", id), nil); r.Kind != testproc.ReplyReserved || r.N != id {
		c.t.Fatalf("reserve-job %d: got %q", id, r.Line)
	}
}

// stats returns the fields of a stats command's reply, or nil for
// NOT_FOUND.
func (c *conn) stats(cmd string) map[string]string {
	c.t.Helper()
	m, err := c.Stats(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

// fields parses the YAML body of a stats reply read in a pipeline.
func fields(t *testing.T, r testproc.Reply) map[string]string {
	t.Helper()
	m, _, err := testproc.ParseYAML(r.Body)
	if err != nil {
		t.Fatalf("%s: %v", r.Line, err)
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
