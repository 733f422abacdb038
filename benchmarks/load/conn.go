package load

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// ReplyKind names the first word of a server reply.
type ReplyKind uint8

// The replies the scenarios expect; anything else is ReplyOther and, where a
// scenario did not ask for it, a protocol error.
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
)

var replyWords = map[string]ReplyKind{
	"INSERTED":      ReplyInserted,
	"RESERVED":      ReplyReserved,
	"DELETED":       ReplyDeleted,
	"USING":         ReplyUsing,
	"WATCHING":      ReplyWatching,
	"TIMED_OUT":     ReplyTimedOut,
	"DEADLINE_SOON": ReplyDeadlineSoon,
	"OK":            ReplyOK,
}

// String returns the protocol word of k.
func (k ReplyKind) String() string {
	for w, v := range replyWords {
		if v == k {
			return w
		}
	}
	return "other"
}

// Reply is one parsed server reply. Body and Line alias the connection's
// buffers and are valid only until the next ReadReply.
type Reply struct {
	Kind ReplyKind
	// N is the number after the word: the job id of INSERTED and RESERVED,
	// the count of WATCHING.
	N uint64
	// Body is the payload of OK, kept only when ReadReply was asked to.
	Body []byte
	// Line is the reply line without its CRLF, for error messages.
	Line []byte
}

// ProtocolError is a reply the scenario did not expect, or bytes that are not
// a well-formed reply.
type ProtocolError struct {
	Want string
	Got  string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("load: protocol: want %s, got %q", e.Want, e.Got)
}

// maxReplyLine bounds a reply line, so a server that misframes its replies
// fails the run instead of growing a buffer.
const maxReplyLine = 4 << 10

// Conn is one client connection speaking the beanstalkd protocol on a raw
// socket. Commands are buffered until Flush, so a caller pipelines by writing
// several commands, flushing once and then reading as many replies. A Conn is
// used by one goroutine at a time.
type Conn struct {
	nc      net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	scratch []byte // only touched by the owning goroutine: command formatting
	body    []byte // only touched by the owning goroutine: a kept reply body
}

// Dial connects to addr from the local address local (nil lets the kernel
// choose) within timeout. bufSize sizes the read and write buffers.
func Dial(addr string, local net.IP, timeout time.Duration, bufSize int) (*Conn, error) {
	nc, err := dialRaw(addr, local, timeout)
	if err != nil {
		return nil, err
	}
	return newConn(nc, bufSize), nil
}

func dialRaw(addr string, local net.IP, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if local != nil {
		d.LocalAddr = &net.TCPAddr{IP: local}
	}
	return d.Dial("tcp", addr)
}

func newConn(nc net.Conn, bufSize int) *Conn {
	if bufSize < maxReplyLine {
		bufSize = maxReplyLine
	}
	return &Conn{nc: nc, r: bufio.NewReaderSize(nc, bufSize), w: bufio.NewWriterSize(nc, bufSize)}
}

// Close closes the socket.
func (c *Conn) Close() error { return c.nc.Close() }

// SetDeadline bounds every read and write that follows; a zero time removes
// the bound. It may be called from another goroutine to unblock a read.
func (c *Conn) SetDeadline(t time.Time) error { return c.nc.SetDeadline(t) }

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

// ReadReply reads one reply. The body of RESERVED is checked for framing and
// discarded; the body of OK is kept in Reply.Body when keepBody is set.
func (c *Conn) ReadReply(keepBody bool) (Reply, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return Reply{}, &ProtocolError{Want: "a reply line", Got: string(line[:64]) + "…"}
		}
		return Reply{}, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return Reply{}, &ProtocolError{Want: "a CRLF-terminated line", Got: string(line)}
	}
	line = line[:len(line)-2]
	word, rest, _ := bytes.Cut(line, []byte{' '})
	rep := Reply{Kind: replyWords[string(word)], Line: line} // the map lookup does not allocate
	switch rep.Kind {
	case ReplyInserted, ReplyWatching:
		if rep.N, err = strconv.ParseUint(string(rest), 10, 64); err != nil {
			return rep, &ProtocolError{Want: "a number", Got: string(line)}
		}
	case ReplyReserved:
		id, size, ok := bytes.Cut(rest, []byte{' '})
		if !ok {
			return rep, &ProtocolError{Want: "RESERVED <id> <bytes>", Got: string(line)}
		}
		if rep.N, err = strconv.ParseUint(string(id), 10, 64); err != nil {
			return rep, &ProtocolError{Want: "a job id", Got: string(line)}
		}
		n, err := strconv.Atoi(string(size))
		if err != nil || n < 0 {
			return rep, &ProtocolError{Want: "a body size", Got: string(line)}
		}
		if err := c.readBody(n, false); err != nil {
			return rep, err
		}
	case ReplyOK:
		n, err := strconv.Atoi(string(rest))
		if err != nil || n < 0 {
			return rep, &ProtocolError{Want: "a body size", Got: string(line)}
		}
		if err := c.readBody(n, keepBody); err != nil {
			return rep, err
		}
		if keepBody {
			rep.Body = c.body
		}
	}
	return rep, nil
}

// readBody consumes a body of n bytes and its CRLF, keeping it in c.body when
// keep is set.
func (c *Conn) readBody(n int, keep bool) error {
	if keep {
		if cap(c.body) < n+2 {
			c.body = make([]byte, n+2)
		}
		c.body = c.body[:n+2]
		if _, err := io.ReadFull(c.r, c.body); err != nil {
			return err
		}
		if !bytes.HasSuffix(c.body, []byte("\r\n")) {
			return &ProtocolError{Want: "a body ending in CRLF", Got: "other bytes"}
		}
		c.body = c.body[:n]
		return nil
	}
	if _, err := c.r.Discard(n); err != nil {
		return err
	}
	var crlf [2]byte
	if _, err := io.ReadFull(c.r, crlf[:]); err != nil {
		return err
	}
	if crlf != [2]byte{'\r', '\n'} {
		return &ProtocolError{Want: "a body ending in CRLF", Got: string(crlf[:])}
	}
	return nil
}

// Expect reads one reply and fails unless it is of kind want.
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

// Stats sends stats and returns the value of field (for example
// "current-connections") from the YAML reply.
func (c *Conn) Stats(field string) (string, error) { return c.statsField("stats\r\n", field) }

// StatsInt is Stats for a numeric field.
func (c *Conn) StatsInt(field string) (int64, error) { return parseStat(c.Stats(field)) }

// StatsTubeInt sends stats-tube for tube and returns the numeric field
// (for example "current-jobs-ready") from the YAML reply.
func (c *Conn) StatsTubeInt(tube, field string) (int64, error) {
	return parseStat(c.statsField("stats-tube "+tube+"\r\n", field))
}

// statsField sends cmd, a stats command with its CRLF, and returns field's
// value from the YAML reply.
func (c *Conn) statsField(cmd, field string) (string, error) {
	c.WriteString(cmd)
	if err := c.Flush(); err != nil {
		return "", err
	}
	rep, err := c.ReadReply(true)
	if err != nil {
		return "", err
	}
	if rep.Kind != ReplyOK {
		return "", &ProtocolError{Want: "OK", Got: string(rep.Line)}
	}
	for line := range bytes.SplitSeq(rep.Body, []byte{'\n'}) {
		k, v, ok := bytes.Cut(line, []byte(": "))
		if ok && string(k) == field {
			return string(bytes.Trim(bytes.TrimSpace(v), `"`)), nil
		}
	}
	return "", fmt.Errorf("load: stats has no field %q", field)
}

func parseStat(v string, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// PutFrame returns the bytes of one put command with a body of size bytes:
// priority 1024, no delay, a 60 s TTR.
func PutFrame(size int) []byte {
	body := bytes.Repeat([]byte{'x'}, size)
	b := fmt.Appendf(nil, "put 1024 0 60 %d\r\n", size)
	b = append(b, body...)
	return append(b, '\r', '\n')
}
