package conformance

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strconv"
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
	startTimeout = 30 * time.Second
	// sendTimeout bounds a write to a server that stopped reading.
	sendTimeout = 10 * time.Second
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

// StartSproutTLS is StartSprout serving TLS too, on a listener of its own
// with a certificate from a throwaway CA; it returns that listener's
// address and a client configuration that trusts it. The plaintext port
// is still the one the readiness probe uses.
func StartSproutTLS(t testing.TB, extraArgs ...string) (addr string, client *tls.Config) {
	t.Helper()
	ca := testproc.NewTestCA(t, "conformance CA")
	files, err := ca.WriteFiles(t.TempDir(), "sprout", time.Time{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	StartSprout(t, append([]string{"--tls-listen", addr, "--tls-cert", files.Cert, "--tls-key", files.Key},
		extraArgs...)...)
	return addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
}

// RemoveSproutBuild deletes the binary StartSprout built. Call it from
// TestMain after m.Run.
func RemoveSproutBuild() { testproc.RemoveSproutBinary() }

// Conn is a raw client connection: Send writes bytes verbatim, and
// ReadReply returns the server's replies one at a time, each exactly as it
// came off the wire (testproc.Conn.ReadFrame). A background goroutine splits
// the incoming stream into replies as it arrives, so waiting for a reply
// never loses or reorders bytes, and ReadReply(0) can check for a reply
// without waiting.
type Conn struct {
	tc      *testproc.Conn // Send writes, the reader goroutine reads
	replies chan []byte    // complete replies, in order; written only by the reader goroutine
	failed  chan struct{}  // closed by the reader goroutine after it stores readErr
	readErr error          // why the reader stopped; written before failed is closed
	closed  chan struct{}  // closed by Close, to release a reader blocked on replies
	once    sync.Once      // guards closing closed
}

// Dial connects to a server at addr.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	return DialTLS(addr, timeout, nil)
}

// DialTLS connects to a server at addr over TLS with the client
// configuration config (nil: in plaintext, as Dial).
func DialTLS(addr string, timeout time.Duration, config *tls.Config) (*Conn, error) {
	tc, err := testproc.Dialer{Timeout: timeout, TLS: config}.Dial(addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{
		tc:      tc,
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
	_ = c.tc.SetWriteDeadline(time.Now().Add(sendTimeout))
	c.tc.Write(b)
	return c.tc.Flush()
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
func (c *Conn) CloseWrite() error { return c.tc.CloseWrite() }

// Close closes the connection.
func (c *Conn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.tc.Close()
}

// readLoop splits the byte stream into replies until the connection fails.
func (c *Conn) readLoop() {
	defer close(c.failed)
	for {
		reply, err := c.tc.ReadFrame()
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
