package conformance

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// SelfTestEnv names the environment variable that makes StartSprout start a
// second beanstalkd instead of Sprout, to test the harness on its own.
const SelfTestEnv = "SPROUT_CONFORMANCE_SELFTEST"

// SproutPackage is the import path StartSprout builds.
const SproutPackage = testproc.SproutPackage

const (
	// startTimeout bounds how long a started server may take to accept and
	// answer its first connection.
	startTimeout = 5 * time.Second
	// sendTimeout bounds a write to a server that stopped reading.
	sendTimeout = 10 * time.Second
	// maxReplyLine and maxReplyBody bound what Conn buffers from a server
	// that misframes its replies, so a bug fails the test instead of
	// exhausting memory.
	maxReplyLine = 4 << 10
	maxReplyBody = 64 << 20
)

// ErrNoReply is returned by Conn.ReadReply when no complete reply arrived
// within the timeout. It is distinct from a closed connection (io.EOF).
var ErrNoReply = errors.New("conformance: no reply within the timeout")

// SelfTest reports whether SPROUT_CONFORMANCE_SELFTEST asks StartSprout for a
// second beanstalkd.
func SelfTest() bool {
	v := os.Getenv(SelfTestEnv)
	return v != "" && v != "0"
}

// StartBeanstalkd starts the reference server (testproc.Reference: a
// beanstalkd 1.13 build where there is one, else Debian's 1.12) on a free
// 127.0.0.1 port and returns its address. It fails the test (it does not skip
// it) when there is none: the comparison is the whole point.
func StartBeanstalkd(t testing.TB, extraArgs ...string) (addr string) {
	t.Helper()
	return StartBinary(t, testproc.Beanstalkd(t), extraArgs...)
}

// StartSprout builds cmd/sprout (once per test process) and starts it like
// StartBeanstalkd, with extraArgs after -l and -p. With
// SPROUT_CONFORMANCE_SELFTEST=1 it starts a second beanstalkd instead.
// Sprout runs two event loops whatever the machine's default, so that
// connections meet across loops (a put waking a reserve on another loop).
func StartSprout(t testing.TB, extraArgs ...string) (addr string) {
	t.Helper()
	if SelfTest() {
		return StartBeanstalkd(t, extraArgs...)
	}
	return StartBinary(t, testproc.SproutBinary(t), append([]string{"--loops", "2"}, extraArgs...)...)
}

// StartBinary starts the beanstalkd-compatible server at path with
// `-l 127.0.0.1 -p PORT` followed by args, waits until it accepts a
// connection and answers list-tube-used, and kills it by PID when the test
// ends. A server that exits early or stays silent for startTimeout fails the
// test with its output.
//
// The readiness probe (testproc.Probe) ends with quit and waits for the
// server to close the connection, so by the time StartBinary returns the
// probe is counted in total-connections and no longer in
// current-connections, on every server.
func StartBinary(t testing.TB, path string, args ...string) (addr string) {
	t.Helper()
	return testproc.StartConfig(t, testproc.Config{
		Binary:       path,
		Args:         args,
		Ready:        testproc.Probe,
		StartTimeout: startTimeout,
	}).Addr()
}

// RemoveSproutBuild deletes the binary StartSprout built. Call it from
// TestMain after m.Run.
func RemoveSproutBuild() { testproc.RemoveSproutBinary() }

// Conn is a raw client connection: Send writes bytes verbatim, and
// ReadReply returns the server's replies one at a time, each exactly as it
// came off the wire. A background goroutine splits the incoming stream into
// replies as it arrives, so waiting for a reply never loses or reorders
// bytes, and ReadReply(0) can check for a reply without waiting.
type Conn struct {
	nc      net.Conn
	replies chan []byte   // complete replies, in order; written only by the reader goroutine
	failed  chan struct{} // closed by the reader goroutine after it stores readErr
	readErr error         // why the reader stopped; written before failed is closed
	closed  chan struct{} // closed by Close, to release a reader blocked on replies
	once    sync.Once     // guards closing closed
}

// Dial connects to a server at addr.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &Conn{
		nc:      nc,
		replies: make(chan []byte, 256),
		failed:  make(chan struct{}),
		closed:  make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

// Send writes b to the server as is. It gives up after sendTimeout if the
// server stops reading.
func (c *Conn) Send(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(sendTimeout))
	_, err := c.nc.Write(b)
	return err
}

// ReadReply returns the next reply: one line ending in \r\n and, when the
// line is `RESERVED <id> <n>`, `FOUND <id> <n>` or `OK <n>`, the n+2 bytes
// that follow it. It waits at most timeout; zero or less means only a reply
// that has already arrived. It returns ErrNoReply when none arrived, io.EOF
// when the server closed the connection, and another error when the server
// misframed a reply. Replies that arrived before the connection closed are
// still returned first.
func (c *Conn) ReadReply(timeout time.Duration) ([]byte, error) {
	select {
	case r := <-c.replies:
		return r, nil
	default:
	}
	if timeout <= 0 {
		select {
		case <-c.failed:
			return c.afterFailure()
		default:
			return nil, ErrNoReply
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-c.replies:
		return r, nil
	case <-c.failed:
		return c.afterFailure()
	case <-timer.C:
		return nil, ErrNoReply
	}
}

// afterFailure drains replies that raced with the reader's failure.
func (c *Conn) afterFailure() ([]byte, error) {
	select {
	case r := <-c.replies:
		return r, nil
	default:
		return nil, c.readErr
	}
}

// CloseWrite half-closes the connection: the server sees end of input but
// can still reply.
func (c *Conn) CloseWrite() error {
	return c.nc.(*net.TCPConn).CloseWrite()
}

// Close closes the connection.
func (c *Conn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.nc.Close()
}

// readLoop splits the byte stream into replies until the connection fails.
func (c *Conn) readLoop() {
	defer close(c.failed)
	r := bufio.NewReader(c.nc)
	for {
		reply, err := readOneReply(r)
		if err != nil {
			c.readErr = err
			return
		}
		select {
		case c.replies <- reply:
		case <-c.closed:
			c.readErr = net.ErrClosed
			return
		}
	}
}

// readOneReply reads one reply as described at ReadReply.
func readOneReply(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for !bytes.HasSuffix(line, []byte("\r\n")) {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxReplyLine {
			return nil, fmt.Errorf("conformance: reply line longer than %d bytes: %.80q", maxReplyLine, line)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			return nil, fmt.Errorf("conformance: connection closed inside a reply: %q", line)
		}
		if err != nil {
			return nil, err
		}
	}
	n, hasBody, err := replyBodyLength(line)
	if err != nil || !hasBody {
		return line, err
	}
	reply := make([]byte, len(line)+n+2)
	copy(reply, line)
	if _, err := io.ReadFull(r, reply[len(line):]); err != nil {
		return nil, fmt.Errorf("conformance: reading the %d-byte body of %q: %v", n, line, err)
	}
	if !bytes.HasSuffix(reply, []byte("\r\n")) {
		return nil, fmt.Errorf("conformance: the body of %q does not end in \\r\\n: %q", line, reply)
	}
	return reply, nil
}

// replyBodyLength tells whether a reply line announces a body and how long it
// is (excluding its trailing \r\n).
func replyBodyLength(line []byte) (n int, hasBody bool, err error) {
	fields := strings.Fields(string(line))
	var size string
	switch {
	case len(fields) == 3 && (fields[0] == "RESERVED" || fields[0] == "FOUND"):
		size = fields[2]
	case len(fields) == 2 && fields[0] == "OK":
		size = fields[1]
	default:
		return 0, false, nil
	}
	n, err = strconv.Atoi(size)
	if err != nil || n < 0 || n > maxReplyBody {
		return 0, false, fmt.Errorf("conformance: reply %q announces an invalid body length", line)
	}
	return n, true, nil
}
