package conformance

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// halfCloseWait bounds one half-closed exchange: the largest moves 45 MB.
const halfCloseWait = 30 * time.Second

// halfCloseBody is the size of the job whose peeks make the large replies,
// and the -z both servers run with.
const halfCloseBody = 900_000

// halfCloser is one client of TestHalfClose: it writes its bytes (while
// reading, as `nc -N` and `cat cmds | nc` do), shuts down its writing side,
// and reads until the server closes the connection.
type halfCloser struct {
	name string
	// pieces are written in order, each with its own write; with
	// TCP_NODELAY a piece of one byte is a segment of its own.
	pieces []string
	// settle pauses between the last piece and the half-close, so that a
	// reserve the bytes end with is waiting when the end of file comes.
	settle time.Duration
	// readLate starts reading only after the half-close, so that the
	// replies pile up in the server meanwhile.
	readLate bool
}

// inOne is a client that writes s at once.
func inOne(name, s string) halfCloser { return halfCloser{name: name, pieces: []string{s}} }

// byteByByte is a client that writes s one byte per write.
func byteByByte(name, s string) halfCloser {
	c := halfCloser{name: name}
	for i := range len(s) {
		c.pieces = append(c.pieces, s[i:i+1])
	}
	return c
}

// TestHalfClose runs clients that pipeline commands, then shut down their
// writing side (`nc -N`, a batch script) against beanstalkd and Sprout, and
// compares every byte each server sends until it closes. beanstalkd runs
// every command received before the end of file and delivers every reply
// before it closes; a command cut short by the end of file is dropped; a
// reserve that waits, or would wait, on a half-closed connection ends in
// TIMED_OUT at once, and the commands after it still run.
//
// The clients run in order, on servers that have seen the same commands,
// so job ids agree.
func TestHalfClose(t *testing.T) {
	ref := testproc.Reference(t)
	z := fmt.Sprint(halfCloseBody)
	refAddr := StartBinary(t, ref.Path, "-z", z)
	sutAddr := StartSprout(t, "-z", z)

	body := strings.Repeat("b", halfCloseBody)
	smallCmds := strings.Repeat("list-tube-used\r\nuse tube-with-a-long-name\r\n", 50_000)
	clients := []halfCloser{
		inOne("a large job", fmt.Sprintf("put 0 0 600 %d\r\n%s\r\n", len(body), body)), // job 1
		// 45,000,900 bytes of replies: gnet used to close at the end of
		// file and send what the socket took at once, 4 to 7 of them.
		inOne("50 peeks of a 900 KB job", strings.Repeat("peek 1\r\n", 50)),
		// 2.9 MB of replies in 100,000 small ones, read as they come.
		inOne("100,000 small replies", smallCmds),
		inOne("a job to peek", fmt.Sprintf("put 0 0 60 1000\r\n%s\r\n", strings.Repeat("p", 1000))), // job 2
		// 12.7 MB of replies in 12,500 of 1 KB, which the client reads
		// only after its end of file: at the end of file the server has
		// filled the sockets and its output cap, and has commands left to
		// run. Unpatched, Sprout sent 4 MB and closed.
		{name: "12,500 replies read late", readLate: true, pieces: []string{strings.Repeat("peek 2\r\n", 12_500)}},
		byteByByte("one byte at a time", "use bytes\r\nput 0 0 60 5\r\nhello\r\nlist-tube-used\r\npeek 3\r\n"+
			"watch bytes\r\nignore default\r\nreserve\r\nreserve\r\nlist-tubes-watched\r\n"), // job 3
		inOne("a reserve that would wait", "watch empty\r\nignore default\r\nreserve\r\n"),
		inOne("a reserve-with-timeout that would wait", "watch empty\r\nignore default\r\nreserve-with-timeout 5\r\n"),
		inOne("commands after a reserve that would wait",
			"use empty2\r\nwatch empty2\r\nignore default\r\nreserve\r\nput 0 0 60 1\r\nx\r\nreserve\r\nreserve\r\nlist-tube-used\r\n"), // job 4
		{name: "a reserve waiting at the end of file, commands queued behind it", settle: 200 * time.Millisecond,
			pieces: []string{"use empty3\r\nwatch empty3\r\nignore default\r\nreserve\r\nput 0 0 60 1\r\ny\r\nreserve\r\n"}}, // job 5
		inOne("a body cut short", "list-tube-used\r\nput 0 0 60 10\r\nabc"),
		// Sprout reads most of a large body from the socket itself.
		inOne("a large body cut short", "list-tube-used\r\nput 0 0 60 800000\r\n"+strings.Repeat("c", 300_000)),
		inOne("a large put, then a peek of it", "use big\r\nput 0 0 60 300000\r\n"+strings.Repeat("d", 300_000)+"\r\npeek-ready\r\n"),
		inOne("a line cut short", "list-tube-used\r\nstats"),
		inOne("a too-big body cut short", "list-tube-used\r\nput 0 0 60 99999999\r\nabc"),
		inOne("an over-long line cut short", "list-tube-used\r\n"+strings.Repeat("x", 300)),
		inOne("quit", "list-tube-used\r\nquit\r\nlist-tube-used\r\n"),
		inOne("nothing", ""),
	}
	runHalfClosers(t, refAddr, sutAddr, clients)
}

// TestHalfCloseDurable runs half-closing clients against servers with a
// log (-b), where Sprout holds each reply until what it says is written:
// the held replies go out before the connection closes.
func TestHalfCloseDurable(t *testing.T) {
	ref := testproc.Reference(t)
	refAddr := StartBinary(t, ref.Path, "-b", t.TempDir())
	sutAddr := StartSprout(t, "-b", t.TempDir())
	runHalfClosers(t, refAddr, sutAddr, []halfCloser{
		inOne("500 puts", strings.Repeat("put 0 0 60 3\r\nabc\r\n", 500)), // jobs 1-500
		inOne("puts, reserves and deletes", "put 0 0 60 1\r\na\r\nreserve\r\ndelete 1\r\nreserve\r\nrelease 2 0 0\r\nbury 2\r\n"+
			"reserve-with-timeout 0\r\nkick 1\r\npeek 2\r\n"), // job 501
		{name: "a reserve waiting behind held replies", settle: 200 * time.Millisecond,
			pieces: []string{"use e\r\nwatch e\r\nignore default\r\nput 0 0 60 1\r\nb\r\nreserve\r\ndelete 502\r\nreserve\r\nput 0 0 60 1\r\nc\r\n"}}, // jobs 502, 503
		byteByByte("one byte at a time", "put 0 0 60 2\r\nhi\r\npeek 504\r\ndelete 504\r\n"), // job 504
	})
}

// runHalfClosers plays each client against beanstalkd, then Sprout, and
// compares what they sent.
func runHalfClosers(t *testing.T, refAddr, sutAddr string, clients []halfCloser) {
	t.Helper()
	for _, c := range clients {
		refGot, refErr := c.run(refAddr)
		if refErr != nil {
			t.Fatalf("%s: test bug: beanstalkd: %v after %d bytes", c.name, refErr, len(refGot))
		}
		sutGot, sutErr := c.run(sutAddr)
		if sutErr != nil {
			t.Errorf("%s: sprout: %v after %d of beanstalkd's %d bytes", c.name, sutErr, len(sutGot), len(refGot))
			continue
		}
		if !bytes.Equal(refGot, sutGot) {
			t.Errorf("%s: sprout sent %d bytes, beanstalkd %d; %s", c.name, len(sutGot), len(refGot), firstDifference(refGot, sutGot))
			continue
		}
		t.Logf("%s: %d bytes, then the end of file, from both", c.name, len(refGot))
	}
}

// run plays the client against the server at addr and returns what the
// server sent before closing the connection; an error means it did not
// close within halfCloseWait.
func (c halfCloser) run(addr string) ([]byte, error) {
	nc, err := net.DialTimeout("tcp", addr, replyWait)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	tc := nc.(*net.TCPConn)
	_ = tc.SetNoDelay(true)
	_ = tc.SetDeadline(time.Now().Add(halfCloseWait))
	type result struct {
		got []byte
		err error
	}
	read := make(chan result, 1)
	readAll := func() {
		got, err := io.ReadAll(tc)
		read <- result{got, err}
	}
	if !c.readLate {
		go readAll()
	}
	for _, p := range c.pieces {
		if _, err := tc.Write([]byte(p)); err != nil {
			return nil, fmt.Errorf("write: %w", err)
		}
	}
	time.Sleep(c.settle)
	if err := tc.CloseWrite(); err != nil {
		return nil, err
	}
	if c.readLate {
		time.Sleep(100 * time.Millisecond) // the server has the end of file before anything is read
		go readAll()
	}
	r := <-read
	return r.got, r.err
}

// firstDifference describes where a and b first differ.
func firstDifference(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-40)
	return fmt.Sprintf("first difference at byte %d: beanstalkd %q, sprout %q",
		i, a[from:min(len(a), i+40)], b[from:min(len(b), i+40)])
}

// TestEmptyBodiesOnly: with -z 0 only empty bodies are taken, as
// beanstalkd's; Sprout took it for the default 65535 and inserted them.
func TestEmptyBodiesOnly(t *testing.T) {
	ref := testproc.Reference(t)
	refAddr := StartBinary(t, ref.Path, "-z", "0")
	sutAddr := StartSprout(t, "-z", "0")
	runHalfClosers(t, refAddr, sutAddr, []halfCloser{
		inOne("puts with bodies and without", "put 0 0 60 1\r\nx\r\nput 0 0 60 0\r\n\r\npeek-ready\r\n"+
			"put 0 0 60 1 x\r\nab\r\nlist-tube-used\r\n"), // job 1
	})
}
