package cbinlog

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// startBeanstalkd starts Debian's beanstalkd with -b dir on a free
// 127.0.0.1 port, with args after the flags, and waits until it accepts
// connections. The test kills it by PID if it is still running at the end.
// These tests read binlogs written by the reference server, so a missing
// beanstalkd fails them.
func startBeanstalkd(t *testing.T, dir string, args ...string) *testproc.Process {
	t.Helper()
	return testproc.StartConfig(t, testproc.Config{
		Binary:       testproc.Beanstalkd(t),
		Args:         append([]string{"-b", dir}, args...),
		StartTimeout: 5 * time.Second,
	})
}

// client speaks the protocol to a beanstalkd, failing the test on any
// unexpected reply.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, srv *testproc.Process) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", srv.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dialing beanstalkd: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// do sends a command line, and body if not nil, and returns the reply line
// without its "\r\n" and the reply's body, if it has one.
func (c *client) do(line string, body []byte) (reply string, data []byte) {
	c.t.Helper()
	msg := []byte(line + "\r\n")
	if body != nil {
		msg = append(append(msg, body...), "\r\n"...)
	}
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.c.Write(msg); err != nil {
		c.t.Fatalf("%s: %v", line, err)
	}
	reply, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("%s: reading reply: %v", line, err)
	}
	reply = strings.TrimSuffix(reply, "\r\n")
	f := strings.Fields(reply)
	if len(f) > 0 && (f[0] == "OK" || f[0] == "FOUND" || f[0] == "RESERVED") {
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			c.t.Fatalf("%s: reply %q", line, reply)
		}
		data = make([]byte, n+2)
		if _, err := io.ReadFull(c.r, data); err != nil {
			c.t.Fatalf("%s: reading reply body: %v", line, err)
		}
		data = data[:n]
	}
	return reply, data
}

// expect sends a command and checks its reply line.
func (c *client) expect(line, want string) {
	c.t.Helper()
	if got, _ := c.do(line, nil); got != want {
		c.t.Fatalf("%s: got %q, want %q", line, got, want)
	}
}

// put puts a job and returns its id.
func (c *client) put(pri uint32, delay, ttr int, body []byte) uint64 {
	c.t.Helper()
	line := fmt.Sprintf("put %d %d %d %d", pri, delay, ttr, len(body))
	reply, _ := c.do(line, body)
	idText, ok := strings.CutPrefix(reply, "INSERTED ")
	if !ok {
		c.t.Fatalf("%s: got %q, want INSERTED", line, reply)
	}
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		c.t.Fatalf("%s: got %q", line, reply)
	}
	return id
}

// stats returns a stats-job reply as a map, or nil for NOT_FOUND.
func (c *client) stats(id uint64) map[string]string {
	c.t.Helper()
	reply, data := c.do(fmt.Sprintf("stats-job %d", id), nil)
	if reply == "NOT_FOUND" {
		return nil
	}
	if !strings.HasPrefix(reply, "OK ") {
		c.t.Fatalf("stats-job %d: got %q", id, reply)
	}
	return parseYAML(data)
}

// serverStats returns the stats reply as a map.
func (c *client) serverStats() map[string]string {
	c.t.Helper()
	reply, data := c.do("stats", nil)
	if !strings.HasPrefix(reply, "OK ") {
		c.t.Fatalf("stats: got %q", reply)
	}
	return parseYAML(data)
}

// parseYAML reads the flat "key: value" lines of a stats reply. A value in
// double quotes (1.13 quotes tube names; 1.12 does not) is read without
// them: no value the tests look at contains a quote.
func parseYAML(data []byte) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			m[k] = v
		}
	}
	return m
}

// exists reports whether the path names an existing file.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
