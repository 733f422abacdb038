package cbinlog

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// beanstalkd is a reference server started by a test on a binlog directory.
type beanstalkd struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{} // closed when the process has been waited for
	output *lockedBuffer
}

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

// startBeanstalkd starts Debian's beanstalkd with -b dir on a free
// 127.0.0.1 port, with args after the flags, and waits until it accepts
// connections. The test kills it by PID if it is still running at the end.
func startBeanstalkd(t *testing.T, dir string, args ...string) *beanstalkd {
	t.Helper()
	path, err := exec.LookPath("beanstalkd")
	if err != nil {
		t.Fatalf("these tests read binlogs written by the reference server, and beanstalkd is not on PATH (%v); install it with: apt-get install -y beanstalkd", err)
	}
	// The free port is found by binding and releasing it, so another
	// process may take it in between: a bind failure tries a new port.
	for attempt := 1; ; attempt++ {
		b, err := tryStart(t, path, dir, args)
		if err == nil {
			return b
		}
		if attempt == 3 || !strings.Contains(b.output.String(), "in use") {
			t.Fatal(err)
		}
	}
}

func tryStart(t *testing.T, path, dir string, args []string) (*beanstalkd, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	b := &beanstalkd{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		exited: make(chan struct{}),
		output: &lockedBuffer{},
	}
	argv := append([]string{"-b", dir, "-l", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)
	b.cmd = exec.Command(path, argv...)
	b.cmd.Stdout, b.cmd.Stderr = b.output, b.output
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting beanstalkd: %v", err)
	}
	go func() {
		b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() { b.stop(syscall.SIGKILL) })

	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case <-b.exited:
			return b, fmt.Errorf("beanstalkd %s exited early (%v):\n%s",
				strings.Join(argv, " "), b.cmd.ProcessState, b.output.String())
		default:
		}
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		if time.Now().After(deadline) {
			b.stop(syscall.SIGKILL)
			return b, fmt.Errorf("beanstalkd on %s did not accept connections: %v\n%s", b.addr, err, b.output.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends sig to the server by PID and waits for it to exit.
func (b *beanstalkd) stop(sig syscall.Signal) {
	select {
	case <-b.exited:
		return
	default:
	}
	b.cmd.Process.Signal(sig)
	<-b.exited
}

// client speaks the protocol to a beanstalkd, failing the test on any
// unexpected reply.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (b *beanstalkd) dial(t *testing.T) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", b.addr, 5*time.Second)
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

// parseYAML reads the flat "key: value" lines of a stats reply.
func parseYAML(data []byte) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
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
