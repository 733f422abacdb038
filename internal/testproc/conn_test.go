package testproc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// loopConn is a net.Conn whose reads repeat script forever and whose
// writes vanish: a server that always answers the same, without a socket.
type loopConn struct {
	net.Conn // nil: only Read, Write and Close are called
	script   []byte
	off      int
}

func (c *loopConn) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], c.script[c.off:])
		n += k
		c.off = (c.off + k) % len(c.script)
	}
	return n, nil
}

func (c *loopConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *loopConn) Close() error                { return nil }

// replay is a Conn reading wire, in reads of at most chunk bytes (zero:
// all at once), then the end of the stream.
func replay(wire string, chunk int) *Conn {
	var r io.Reader = strings.NewReader(wire)
	if chunk > 0 {
		r = &chunkReader{r: r, n: chunk}
	}
	return NewConn(&readerConn{r: r}, 0)
}

type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// readerConn is a net.Conn reading from r.
type readerConn struct {
	net.Conn // nil: only Read and Close are called
	r        io.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *readerConn) Close() error               { return nil }

// TestReadReply feeds the client replies, whole and malformed.
func TestReadReply(t *testing.T) {
	tests := []struct {
		name, wire string
		kind       ReplyKind
		n          uint64
		body       string
		wantErr    bool
	}{
		{"inserted", "INSERTED 42\r\n", ReplyInserted, 42, "", false},
		{"reserved", "RESERVED 7 5\r\nhello\r\n", ReplyReserved, 7, "hello", false},
		{"reserved empty body", "RESERVED 8 0\r\n\r\n", ReplyReserved, 8, "", false},
		{"found", "FOUND 18446744073709551615 2\r\nhi\r\n", ReplyFound, 18446744073709551615, "hi", false},
		{"ok", "OK 9\r\n---\na: 1\n\r\n", ReplyOK, 0, "---\na: 1\n", false},
		{"deleted", "DELETED\r\n", ReplyDeleted, 0, "", false},
		{"not found", "NOT_FOUND\r\n", ReplyNotFound, 0, "", false},
		{"error word", "OUT_OF_MEMORY\r\n", ReplyOther, 0, "", false},
		{"bare newline", "DELETED\n", 0, 0, "", true},
		{"body without crlf", "RESERVED 7 5\r\nhelloXX", 0, 0, "", true},
		{"bad id", "INSERTED x\r\n", 0, 0, "", true},
		{"id past uint64", "INSERTED 18446744073709551616\r\n", 0, 0, "", true},
		{"reserved without size", "RESERVED 7\r\n", 0, 0, "", true},
		{"huge body", "OK 99999999999\r\n", 0, 0, "", true},
		{"line too long", strings.Repeat("x", MaxReplyLine+10) + "\r\n", 0, 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, keep := range []bool{true, false} {
				rep, err := replay(tt.wire, 0).ReadReply(keep)
				if tt.wantErr {
					var pe *ProtocolError
					if !errors.As(err, &pe) {
						t.Fatalf("keep %v: got %v, %v; want a protocol error", keep, rep, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("keep %v: %v", keep, err)
				}
				wantBody := tt.body
				if !keep {
					wantBody = ""
				}
				if rep.Kind != tt.kind || rep.N != tt.n || string(rep.Body) != wantBody {
					t.Errorf("keep %v: got kind %v n %d body %q; want %v %d %q", keep, rep.Kind, rep.N, rep.Body, tt.kind, tt.n, wantBody)
				}
			}
		})
	}
}

// frames are replies as they come off the wire, each in one string.
var frames = [...]string{
	"USING default\r\n",
	"RESERVED 1 4\r\na\r\nb\r\n",
	"FOUND 2 0\r\n\r\n",
	"OK 10\r\n---\n- \"a\"\n\r\n",
	"BAD\nFORMAT\r\n", // a bare LF inside a line is the line's
	strings.Repeat("L", MaxReplyLine-2) + "\r\n",
	"TIMED_OUT\r\n",
}

// TestReadFrame reads a stream of replies, whole and split at every byte,
// and requires each back exactly as sent, then io.EOF.
func TestReadFrame(t *testing.T) {
	wire := strings.Join(frames[:], "")
	for _, chunk := range []int{0, 1, 7} {
		c := replay(wire, chunk)
		for i, want := range frames {
			got, err := c.ReadFrame()
			if err != nil || string(got) != want {
				t.Fatalf("chunk %d, frame %d: got %.40q, %v; want %.40q", chunk, i, got, err, want)
			}
		}
		if got, err := c.ReadFrame(); err != io.EOF {
			t.Fatalf("chunk %d: after the last frame got %q, %v; want io.EOF", chunk, got, err)
		}
	}
}

// TestReadCutShort: a connection closed inside a reply is not its clean end.
func TestReadCutShort(t *testing.T) {
	for _, wire := range []string{"INSERT", "INSERTED 1\r", "RESERVED 1 5\r\nhel", "RESERVED 1 5\r\n"} {
		for _, keep := range []bool{true, false} {
			_, err := replay(wire, 0).ReadReply(keep)
			var pe *ProtocolError
			if err == io.EOF || !errors.As(err, &pe) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%q, keep %v: got %v; want a protocol error or io.ErrUnexpectedEOF", wire, keep, err)
			}
		}
	}
	if _, err := NewConn(&readerConn{r: iotest.TimeoutReader(strings.NewReader(""))}, 0).ReadReply(true); err != io.EOF {
		t.Errorf("empty stream: got %v; want io.EOF", err)
	}
}

// prodCons is one job's traffic as the load generator sends it: a put, a
// reserve and a delete, each flushed and its reply read.
func prodCons(tb testing.TB, c *Conn, frame []byte) {
	c.Write(frame)
	_ = c.Flush()
	r, err := c.Expect(ReplyInserted)
	if err != nil {
		tb.Fatal(err)
	}
	c.WriteString("reserve\r\n")
	_ = c.Flush()
	if _, err := c.Expect(ReplyReserved); err != nil {
		tb.Fatal(err)
	}
	c.WriteCmdID("delete", r.N)
	_ = c.Flush()
	if _, err := c.Expect(ReplyDeleted); err != nil {
		tb.Fatal(err)
	}
}

const prodConsReplies = "INSERTED 12345\r\nRESERVED 12345 64\r\n" +
	"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\nDELETED\r\n"

// TestHotPathAllocs pins the load generator's hot path: writing commands
// and reading their replies allocates nothing, or the generator measures
// its own garbage collector against the servers.
func TestHotPathAllocs(t *testing.T) {
	c := NewConn(&loopConn{script: []byte(prodConsReplies)}, 16<<10)
	frame := PutFrame(64)
	if n := testing.AllocsPerRun(1000, func() { prodCons(t, c, frame) }); n != 0 {
		t.Errorf("put, reserve and delete allocate %v times; want 0", n)
	}
	c = NewConn(&loopConn{script: []byte("OK 9\r\n---\na: 1\n\r\n")}, 0)
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := c.ReadReply(true); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("reading a kept body allocates %v times; want 0", n)
	}
}

func BenchmarkProdCons(b *testing.B) {
	c := NewConn(&loopConn{script: []byte(prodConsReplies)}, 16<<10)
	frame := PutFrame(64)
	b.ReportAllocs()
	for b.Loop() {
		prodCons(b, c, frame)
	}
}

func TestParseYAML(t *testing.T) {
	tests := []struct {
		name, doc string
		fields    map[string]string
		items     []string
		wantErr   bool
	}{
		{"stats", "---\ncurrent-jobs-ready: 3\nversion: \"1.13\"\nos: #1 SMP\n", map[string]string{"current-jobs-ready": "3", "version": "1.13", "os": "#1 SMP"}, nil, false},
		{"stats-tube 1.13", "---\nname: \"default\"\ncurrent-waiting: 0\n", map[string]string{"name": "default", "current-waiting": "0"}, nil, false},
		{"empty value", "---\nhostname: \n", map[string]string{"hostname": ""}, nil, false},
		{"list", "---\n- default\n- \"other\"\n", map[string]string{}, []string{"default", "other"}, false},
		{"no header", "current-jobs-ready: 3\n", nil, nil, true},
		{"stray line", "---\nstray\n", nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fields, items, err := ParseYAML([]byte(tt.doc))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %v %v; want an error", fields, items)
				}
				return
			}
			if err != nil || !maps(fields, tt.fields) || !slices.Equal(items, tt.items) {
				t.Errorf("got %v %q %v; want %v %q", fields, items, err, tt.fields, tt.items)
			}
		})
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestRaceReportKept: a race report is found across writes and kept past
// the output limit.
func TestRaceReportKept(t *testing.T) {
	b := &buffer{limit: 10}
	out := "startup chatter past the limit\n==================\nWARNING: DATA" + " RACE\nRead at 0x00c000 by goroutine 7:\n"
	for i := 0; i < len(out); i += 5 {
		b.Write([]byte(out[i:min(i+5, len(out))]))
	}
	if got := b.raceReport(); !strings.HasPrefix(got, raceMarker) || !strings.Contains(got, "by goroutine 7") {
		t.Errorf("race report %q", got)
	}
	if b.String() == out {
		t.Error("the output limit was not applied")
	}
	clean := &buffer{}
	clean.Write(bytes.Repeat([]byte("WARNING: DATA RAC\n"), 100))
	if got := clean.raceReport(); got != "" {
		t.Errorf("race report %q from output without one", got)
	}
}
