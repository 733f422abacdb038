package engine

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/panjf2000/gnet/v2"
)

// wireConn records what replies write, and how many slices it was handed
// by reference.
type wireConn struct {
	gnet.Conn
	wire  bytes.Buffer
	calls []int // per write: the number of slices
}

func (w *wireConn) Write(b []byte) (int, error) {
	w.calls = append(w.calls, 1)
	return w.wire.Write(b)
}

func (w *wireConn) Writev(bs [][]byte) (int, error) {
	w.calls = append(w.calls, len(bs))
	n := 0
	for _, b := range bs {
		m, _ := w.wire.Write(b)
		n += m
	}
	return n, nil
}

func body(n int, c byte) []byte { return append(bytes.Repeat([]byte{c}, n), "\r\n"...) }

// TestRepliesKeepOrder: small replies, copied small bodies and referenced
// large bodies come out in order, whether written whole, in parts at reply
// boundaries, or moved to another queue first.
func TestRepliesKeepOrder(t *testing.T) {
	big, small := body(1000, 'B'), body(10, 's')
	want := "INSERTED 1\r\n" +
		"RESERVED 7 1000\r\n" + string(big) +
		"FOUND 8 10\r\n" + string(small) +
		"FOUND 9 1000\r\n" + string(big) +
		"DELETED\r\n"
	fill := func(r *replies) (ends []int) {
		r.add("INSERTED 1\r\n")
		ends = append(ends, len(r.buf))
		r.appendJob("RESERVED", 7, big)
		ends = append(ends, len(r.buf))
		r.appendJob("FOUND", 8, small)
		ends = append(ends, len(r.buf))
		r.appendJob("FOUND", 9, big)
		ends = append(ends, len(r.buf))
		r.add("DELETED\r\n")
		return append(ends, len(r.buf))
	}

	t.Run("whole", func(t *testing.T) {
		var r replies
		fill(&r)
		if r.size() != len(want) || len(r.refs) != 2 {
			t.Fatalf("size %d refs %d, want %d and 2", r.size(), len(r.refs), len(want))
		}
		var w wireConn
		r.writeTo(&w, len(r.buf))
		if w.wire.String() != want || !r.empty() || r.size() != 0 {
			t.Fatalf("wire %q, left %+v", w.wire.String(), r)
		}
		if len(w.calls) != 1 || w.calls[0] != 5 {
			t.Fatalf("writes %v, want one writev of 5 slices", w.calls)
		}
	})
	t.Run("in parts", func(t *testing.T) {
		var r replies
		ends := fill(&r)
		var w wireConn
		sent := 0
		for _, end := range ends {
			r.writeTo(&w, end-sent)
			sent = end
		}
		if w.wire.String() != want || !r.empty() {
			t.Fatalf("wire %q", w.wire.String())
		}
	})
	t.Run("moved", func(t *testing.T) {
		var src, held replies
		ends := fill(&src)
		held.add("KICKED 1\r\n")
		held.moveTail(&src, ends[0])
		if src.size() != len("INSERTED 1\r\n") || len(src.refs) != 0 {
			t.Fatalf("source kept %q and %d refs", src.buf, len(src.refs))
		}
		var w wireConn
		src.writeTo(&w, len(src.buf))
		held.writeTo(&w, len(held.buf))
		if got := w.wire.String(); got != "INSERTED 1\r\nKICKED 1\r\n"+strings.TrimPrefix(want, "INSERTED 1\r\n") {
			t.Fatalf("wire %q", got)
		}
	})
}

// TestRepliesReferenceLargeBodies: a large body is handed to the socket
// from the job's own memory, not copied into the reply buffer.
func TestRepliesReferenceLargeBodies(t *testing.T) {
	big := body(64<<10, 'x')
	var r replies
	r.appendJob("RESERVED", 1, big)
	if len(r.buf) > 32 || len(r.refs) != 1 || &r.refs[0].body[0] != &big[0] {
		t.Fatalf("the body was copied: buf %d bytes, refs %d", len(r.buf), len(r.refs))
	}
}

// TestRepliesSplitLongWritev: one writev takes at most maxIovecs slices,
// so a long pipeline of replies with large bodies is written in several.
func TestRepliesSplitLongWritev(t *testing.T) {
	big := body(600, 'y')
	var r replies
	var want strings.Builder
	for id := range uint64(1500) {
		r.appendJob("FOUND", id, big)
		want.WriteString("FOUND " + strconv.FormatUint(id, 10) + " 600\r\n" + string(big))
	}
	var w wireConn
	r.writeTo(&w, len(r.buf))
	if w.wire.String() != want.String() {
		t.Fatal("replies corrupted")
	}
	for i, n := range w.calls {
		if n > maxIovecs {
			t.Fatalf("write %d took %d slices, more than %d", i, n, maxIovecs)
		}
	}
	if len(w.calls) < 3 {
		t.Fatalf("3,000 slices went out in %d writes", len(w.calls))
	}
}
