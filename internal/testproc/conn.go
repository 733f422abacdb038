package testproc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"testing"
	"time"
)

// ReplyKind names the first word of a server reply.
type ReplyKind uint8

// The replies callers look for; anything else is ReplyOther, and the caller
// reads Reply.Line.
const (
	ReplyOther ReplyKind = iota
	ReplyInserted
	ReplyReserved
	ReplyDeleted
	ReplyUsing
	ReplyWatching
	ReplyTimedOut
	ReplyDeadlineSoon
	ReplyOK
	ReplyFound
	ReplyNotFound
)

var replyWords = [...]string{
	ReplyOther:        "other",
	ReplyInserted:     "INSERTED",
	ReplyReserved:     "RESERVED",
	ReplyDeleted:      "DELETED",
	ReplyUsing:        "USING",
	ReplyWatching:     "WATCHING",
	ReplyTimedOut:     "TIMED_OUT",
	ReplyDeadlineSoon: "DEADLINE_SOON",
	ReplyOK:           "OK",
	ReplyFound:        "FOUND",
	ReplyNotFound:     "NOT_FOUND",
}

// String returns the protocol word of k.
func (k ReplyKind) String() string {
	if int(k) < len(replyWords) {
		return replyWords[k]
	}
	return replyWords[ReplyOther]
}

// hasBody reports whether a reply of kind k carries a body.
func (k ReplyKind) hasBody() bool { return k == ReplyReserved || k == ReplyFound || k == ReplyOK }

// kindOf maps a reply's first word to its kind; string(word) in a switch
// does not allocate.
func kindOf(word []byte) ReplyKind {
	switch string(word) {
	case "INSERTED":
		return ReplyInserted
	case "RESERVED":
		return ReplyReserved
	case "DELETED":
		return ReplyDeleted
	case "USING":
		return ReplyUsing
	case "WATCHING":
		return ReplyWatching
	case "TIMED_OUT":
		return ReplyTimedOut
	case "DEADLINE_SOON":
		return ReplyDeadlineSoon
	case "OK":
		return ReplyOK
	case "FOUND":
		return ReplyFound
	case "NOT_FOUND":
		return ReplyNotFound
	}
	return ReplyOther
}

// Reply is one parsed server reply. From ReadReply and Expect, Line and Body
// alias the connection's buffers and are valid only until the next read;
// from Do and the methods built on it they are the caller's.
type Reply struct {
	Kind ReplyKind
	// N is the number after the word: the job id of INSERTED, RESERVED and
	// FOUND, the count of WATCHING.
	N uint64
	// Body is the body of RESERVED, FOUND and OK, without its CRLF, when
	// the read was asked to keep it.
	Body []byte
	// Line is the reply line without its CRLF.
	Line []byte
}

// Clone returns r with its own copies of Line and Body.
func (r Reply) Clone() Reply {
	r.Line = bytes.Clone(r.Line)
	if r.Body != nil {
		r.Body = bytes.Clone(r.Body)
	}
	return r
}

// ProtocolError is a reply the caller did not expect, or bytes that are not
// a well-formed reply.
type ProtocolError struct {
	Want string
	Got  string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("testproc: protocol: want %s, got %q", e.Want, e.Got)
}

// ErrNotFound is a stats command answered NOT_FOUND, from StatsInt.
var ErrNotFound = errors.New("testproc: NOT_FOUND")

// MaxReplyLine and MaxReplyBody bound what a Conn buffers from a server that
// misframes its replies, so that a bug fails the test instead of exhausting
// memory.
const (
	MaxReplyLine = 4 << 10
	MaxReplyBody = 64 << 20
)

var crlf = []byte("\r\n")

// Conn is one client connection speaking the beanstalkd protocol on a raw
// socket. Writes are buffered until Flush, so a caller pipelines by writing
// several commands, flushing once and then reading as many replies; the
// write, flush and read path allocates nothing. Do, ExpectLine, Put, Stats,
// StatsInt and Pipeline are one exchange each, for tests. A Conn is used by
// one goroutine at a time, except that one goroutine may write while
// another reads.
type Conn struct {
	nc           net.Conn
	replyTimeout time.Duration // immutable: the deadline Do sets ahead of each exchange; zero sets none
	r            *bufio.Reader // reading goroutine only
	w            *bufio.Writer // writing goroutine only
	scratch      []byte        // writing goroutine only: command formatting
	line         []byte        // reading goroutine only: a line read in pieces, or one a body follows
	body         []byte        // reading goroutine only: a kept reply body
}

// Dialer says how to connect. The zero Dialer has no timeouts.
type Dialer struct {
	// Timeout bounds the connect.
	Timeout time.Duration
	// Local is the source address; nil lets the kernel choose.
	Local net.IP
	// BufSize sizes the read and write buffers, at least MaxReplyLine.
	BufSize int
	// ReplyTimeout, when positive, is the deadline Do and the methods built
	// on it set ahead of each exchange; it also bounds what is read and
	// written until the first of them.
	ReplyTimeout time.Duration
	// TLS, if set, speaks TLS with this client configuration; the
	// handshake is done within Timeout.
	TLS *tls.Config
}

// Dial connects to addr.
func (d Dialer) Dial(addr string) (*Conn, error) {
	nd := net.Dialer{Timeout: d.Timeout}
	if d.Local != nil {
		nd.LocalAddr = &net.TCPAddr{IP: d.Local}
	}
	nc, err := nd.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if d.TLS != nil {
		tc := tls.Client(nc, d.TLS)
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if d.Timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		}
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	c := NewConn(nc, d.BufSize)
	if d.ReplyTimeout > 0 {
		c.replyTimeout = d.ReplyTimeout
		_ = nc.SetDeadline(time.Now().Add(d.ReplyTimeout))
	}
	return c, nil
}

// Dial connects to addr within timeout, which then bounds each exchange of
// Do and the methods built on it.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	return Dialer{Timeout: timeout, ReplyTimeout: timeout}.Dial(addr)
}

// DialTest is Dial for a test: a failure fails it, and the connection is
// closed when it ends.
func DialTest(t testing.TB, addr string, timeout time.Duration) *Conn {
	t.Helper()
	c, err := Dial(addr, timeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// NewConn speaks the protocol over nc, with read and write buffers of
// bufSize bytes (at least MaxReplyLine).
func NewConn(nc net.Conn, bufSize int) *Conn {
	bufSize = max(bufSize, MaxReplyLine)
	return &Conn{nc: nc, r: bufio.NewReaderSize(nc, bufSize), w: bufio.NewWriterSize(nc, bufSize)}
}

// Close closes the socket.
func (c *Conn) Close() error { return c.nc.Close() }

// CloseWrite half-closes the connection: the server reads end of input but
// can still reply. Over TLS it sends close_notify, then half-closes the
// socket.
func (c *Conn) CloseWrite() error {
	if tc, ok := c.nc.(*tls.Conn); ok {
		if err := tc.CloseWrite(); err != nil {
			return err
		}
		return tc.NetConn().(*net.TCPConn).CloseWrite()
	}
	return c.nc.(*net.TCPConn).CloseWrite()
}

// SetDeadline bounds every read and write that follows; a zero time removes
// the bound. It may be called from another goroutine to unblock a read.
func (c *Conn) SetDeadline(t time.Time) error { return c.nc.SetDeadline(t) }

// SetWriteDeadline bounds the writes that follow.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.nc.SetWriteDeadline(t) }

// Write buffers raw protocol bytes, such as a prebuilt put frame.
func (c *Conn) Write(p []byte) { _, _ = c.w.Write(p) } // errors resurface at Flush

// WriteString buffers a command line; s includes its CRLF.
func (c *Conn) WriteString(s string) { _, _ = c.w.WriteString(s) }

// WriteCmdID buffers "verb id\r\n", for delete and friends.
func (c *Conn) WriteCmdID(verb string, id uint64) {
	b := append(c.scratch[:0], verb...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, id, 10)
	b = append(b, '\r', '\n')
	c.scratch = b
	_, _ = c.w.Write(b)
}

// Flush sends everything buffered.
func (c *Conn) Flush() error { return c.w.Flush() }

// ReadReply reads one reply. The body of RESERVED, FOUND and OK is checked
// for framing and kept in Reply.Body when keepBody is set, else discarded.
// A server that closed the connection before the reply's first byte yields
// io.EOF; one that closed it inside a reply, or sent what is not a reply,
// a *ProtocolError or io.ErrUnexpectedEOF.
func (c *Conn) ReadReply(keepBody bool) (Reply, error) {
	line, err := c.readLine()
	if err != nil {
		return Reply{}, err
	}
	word, _, _ := bytes.Cut(line, []byte{' '})
	kind := kindOf(word)
	if kind.hasBody() {
		// Reading the body may move the buffered bytes under line.
		c.line = append(c.line[:0], line...)
		line = c.line
	}
	word, rest, _ := bytes.Cut(line, []byte{' '})
	rep := Reply{Kind: kind, Line: line}
	var ok bool
	switch rep.Kind {
	case ReplyInserted, ReplyWatching:
		if rep.N, ok = parseUint(rest); !ok {
			return rep, &ProtocolError{Want: "a number", Got: string(line)}
		}
	case ReplyReserved, ReplyFound:
		var id, size []byte
		if id, size, ok = bytes.Cut(rest, []byte{' '}); !ok {
			return rep, &ProtocolError{Want: rep.Kind.String() + " <id> <bytes>", Got: string(line)}
		}
		if rep.N, ok = parseUint(id); !ok {
			return rep, &ProtocolError{Want: "a job id", Got: string(line)}
		}
		rep.Body, err = c.readBody(line, size, keepBody)
	case ReplyOK:
		rep.Body, err = c.readBody(line, rest, keepBody)
	}
	return rep, err
}

// readLine returns the next reply line without its CRLF. Replies nearly
// always arrive whole in the buffer, and the line is returned where it lies.
func (c *Conn) readLine() ([]byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err == nil && len(line) >= 2 && line[len(line)-2] == '\r' {
		return line[:len(line)-2], nil
	}
	return c.readLineSlow(line, err)
}

// readLineSlow collects a line that did not end in CRLF where ReadSlice
// stopped, because it is longer than the buffer or holds a bare LF, into
// c.line, up to MaxReplyLine bytes.
func (c *Conn) readLineSlow(part []byte, err error) ([]byte, error) {
	buf := append(c.line[:0], part...)
	defer func() { c.line = buf }()
	for {
		switch {
		case len(buf) > MaxReplyLine:
			return nil, &ProtocolError{Want: fmt.Sprintf("a reply line of at most %d bytes", MaxReplyLine), Got: string(buf[:80]) + "…"}
		case err == nil && bytes.HasSuffix(buf, crlf):
			return buf[:len(buf)-2], nil
		case err == io.EOF && len(buf) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, &ProtocolError{Want: "a reply line ending in CRLF before the connection closed", Got: string(buf)}
		case err != nil && err != bufio.ErrBufferFull:
			return nil, err
		}
		part, err = c.r.ReadSlice('\n')
		buf = append(buf, part...)
	}
}

// readBody consumes the body whose size line announced, and its CRLF,
// returning it when keep is set.
func (c *Conn) readBody(line, size []byte, keep bool) ([]byte, error) {
	size64, ok := parseUint(size)
	if !ok || size64 > MaxReplyBody {
		return nil, &ProtocolError{Want: fmt.Sprintf("a body size of at most %d", MaxReplyBody), Got: string(line)}
	}
	n := int(size64)
	if keep {
		if cap(c.body) < n+2 {
			c.body = make([]byte, n+2)
		}
		c.body = c.body[:n+2]
		if _, err := io.ReadFull(c.r, c.body); err != nil {
			return nil, unexpectedEOF(err)
		}
		if !bytes.HasSuffix(c.body, crlf) {
			return nil, &ProtocolError{Want: "a body ending in CRLF", Got: string(c.body[n:])}
		}
		return c.body[:n], nil
	}
	if _, err := c.r.Discard(n); err != nil {
		return nil, unexpectedEOF(err)
	}
	// Peek, not a read into a local array, which would escape to the heap.
	end, err := c.r.Peek(2)
	if err != nil {
		return nil, unexpectedEOF(err)
	}
	if !bytes.Equal(end, crlf) {
		return nil, &ProtocolError{Want: "a body ending in CRLF", Got: string(end)}
	}
	_, _ = c.r.Discard(2)
	return nil, nil
}

// parseUint parses a decimal uint64. strconv would need a string, and the
// conversion allocates.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		d := uint64(c - '0')
		if c < '0' || c > '9' || n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// unexpectedEOF keeps a connection closed inside a body from reading as
// the clean end of the stream.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ReadFrame reads one reply and returns its bytes exactly as they came off
// the wire: the line with its CRLF and, for RESERVED, FOUND and OK, the body
// with its CRLF. The slice is the caller's. Errors are ReadReply's.
func (c *Conn) ReadFrame() ([]byte, error) {
	r, err := c.ReadReply(true)
	if err != nil {
		return nil, err
	}
	size := len(r.Line) + 2
	if r.Kind.hasBody() {
		size += len(r.Body) + 2
	}
	frame := make([]byte, 0, size)
	frame = append(append(frame, r.Line...), crlf...)
	if r.Kind.hasBody() {
		frame = append(append(frame, r.Body...), crlf...)
	}
	return frame, nil
}

// Expect reads one reply, discarding any body, and fails unless it is of
// kind want.
func (c *Conn) Expect(want ReplyKind) (Reply, error) {
	rep, err := c.ReadReply(false)
	if err != nil {
		return rep, err
	}
	if rep.Kind != want {
		return rep, &ProtocolError{Want: want.String(), Got: string(rep.Line)}
	}
	return rep, nil
}

// Do sends line (without its CRLF) and, if body is not nil, body as the
// command's data, and returns the reply with its body, within the Dialer's
// ReplyTimeout. Errors name the command.
func (c *Conn) Do(line string, body []byte) (Reply, error) {
	if c.replyTimeout > 0 {
		_ = c.nc.SetDeadline(time.Now().Add(c.replyTimeout))
	}
	c.writeCommand(line, body)
	if err := c.Flush(); err != nil {
		return Reply{}, fmt.Errorf("%s: %w", line, err)
	}
	r, err := c.ReadReply(true)
	if err != nil {
		return Reply{}, fmt.Errorf("%s: %w", line, err)
	}
	return r.Clone(), nil
}

func (c *Conn) writeCommand(line string, body []byte) {
	c.WriteString(line)
	c.Write(crlf)
	if body != nil {
		c.Write(body)
		c.Write(crlf)
	}
}

// ExpectLine sends line and requires the reply line want.
func (c *Conn) ExpectLine(line, want string) error {
	r, err := c.Do(line, nil)
	if err != nil {
		return err
	}
	if string(r.Line) != want {
		return fmt.Errorf("%s: got %q, want %q", line, r.Line, want)
	}
	return nil
}

// Put puts a job into the tube in use and returns its id; a reply other than
// INSERTED is a *ProtocolError.
func (c *Conn) Put(pri uint32, delay, ttr int, body []byte) (uint64, error) {
	line := fmt.Sprintf("put %d %d %d %d", pri, delay, ttr, len(body))
	r, err := c.Do(line, body)
	if err != nil {
		return 0, err
	}
	if r.Kind != ReplyInserted {
		return 0, fmt.Errorf("%s: %w", line, &ProtocolError{Want: "INSERTED", Got: string(r.Line)})
	}
	return r.N, nil
}

// Stats sends a stats command (stats, stats-tube NAME, stats-job ID) and
// returns the fields of its YAML document; nil for NOT_FOUND.
func (c *Conn) Stats(line string) (map[string]string, error) {
	r, err := c.Do(line, nil)
	if err != nil {
		return nil, err
	}
	switch r.Kind {
	case ReplyNotFound:
		return nil, nil
	case ReplyOK:
	default:
		return nil, fmt.Errorf("%s: %w", line, &ProtocolError{Want: "OK", Got: string(r.Line)})
	}
	fields, _, err := ParseYAML(r.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", line, err)
	}
	return fields, nil
}

// StatsInt sends a stats command and returns its numeric fields, in order.
// NOT_FOUND is ErrNotFound.
func (c *Conn) StatsInt(line string, fields ...string) ([]int64, error) {
	m, err := c.Stats(line)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("%s: %w", line, ErrNotFound)
	}
	out := make([]int64, len(fields))
	for i, f := range fields {
		if out[i], err = strconv.ParseInt(m[f], 10, 64); err != nil {
			return nil, fmt.Errorf("%s: field %s is %q", line, f, m[f])
		}
	}
	return out, nil
}

// Pipeline sends every line (without its CRLF) at once and reads one reply
// for each, with its body, within the Dialer's ReplyTimeout. The lines are
// written from another goroutine while the replies are read, so that a long
// pipeline cannot fill both directions' buffers and stall. A failed read
// closes the connection, to end the writer.
func (c *Conn) Pipeline(lines []string) ([]Reply, error) {
	if c.replyTimeout > 0 {
		_ = c.nc.SetDeadline(time.Now().Add(c.replyTimeout))
	}
	errc := make(chan error, 1)
	go func() {
		for _, line := range lines {
			c.writeCommand(line, nil)
		}
		errc <- c.Flush()
	}()
	replies := make([]Reply, 0, len(lines))
	for _, line := range lines {
		r, err := c.ReadReply(true)
		if err != nil {
			c.nc.Close() // ends the writer, if it is stuck
			<-errc
			return replies, fmt.Errorf("%s: %w", line, err)
		}
		replies = append(replies, r.Clone())
	}
	if err := <-errc; err != nil {
		return replies, fmt.Errorf("writing the pipeline: %w", err)
	}
	return replies, nil
}

// PutFrame returns the bytes of one put command with a body of size bytes
// of 'x': priority 1024, no delay, a 60 s TTR.
func PutFrame(size int) []byte {
	b := fmt.Appendf(nil, "put 1024 0 60 %d\r\n", size)
	b = append(b, bytes.Repeat([]byte{'x'}, size)...)
	return append(b, crlf...)
}
