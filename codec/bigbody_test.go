package codec_test

import (
	"bytes"
	"testing"

	"github.com/sproutmq/sprout/codec"
)

// TestLargeBodyGrowsAsItArrives: with -z raised to 1 GiB, a header declaring
// a huge body must not make the parser allocate it before the bytes come,
// and a large body fed in pieces still arrives intact.
func TestLargeBodyGrowsAsItArrives(t *testing.T) {
	p := codec.NewParser(1 << 30)
	var cmd codec.Command
	n, ok := p.Parse([]byte("put 0 0 60 1073741824\r\n"), &cmd)
	if !ok || cmd.Op != codec.OpPut || cmd.Status != codec.OK {
		t.Fatalf("header: %+v ok=%v n=%d", cmd, ok, n)
	}
	if held := p.BodyHeld(); held > 1<<20 {
		t.Fatalf("parser holds %d bytes for a body none of which has arrived", held)
	}

	const size = 3<<20 + 5
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	p = codec.NewParser(1 << 30)
	in := append([]byte("put 1 2 3 3145733\r\n"), body...)
	in = append(in, "\r\n"...)
	n, ok = p.Parse(in, &cmd)
	if !ok || cmd.Op != codec.OpPut {
		t.Fatalf("header: %+v", cmd)
	}
	in = in[n:]
	for len(in) > 0 {
		piece := in[:min(len(in), 70000)]
		n, ok = p.Parse(piece, &cmd)
		in = in[n:]
		if ok {
			break
		}
		if held := p.BodyHeld(); held > 2*(size+2-len(in)) && held > 1<<20 {
			t.Fatalf("parser holds %d bytes with %d received", held, size+2-len(in))
		}
	}
	if !ok || cmd.Op != codec.OpPutBody || cmd.Status != codec.OK || len(in) != 0 {
		t.Fatalf("body: op %v status %v, %d bytes left", cmd.Op, cmd.Status, len(in))
	}
	if !bytes.Equal(cmd.Body[:size], body) || string(cmd.Body[size:]) != "\r\n" {
		t.Fatal("body corrupted")
	}
	if cap(cmd.Body) != size+2 {
		t.Errorf("body capacity %d, want exactly %d", cap(cmd.Body), size+2)
	}
}

// TestBodySpace fills a body through BodySpace and BodyFilled, as the
// engine does when it reads a large body from the socket itself: the body
// is allocated once, for what has arrived, and comes out as Parse would
// give it.
func TestBodySpace(t *testing.T) {
	const size = 64 << 10
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	in := append([]byte("put 1 2 3 65536\r\n"), body[:1000]...)
	p := codec.NewParser(1 << 20)
	var cmd codec.Command
	n, ok := p.Parse(in, &cmd)
	if !ok || cmd.Op != codec.OpPut || cmd.Status != codec.OK {
		t.Fatalf("header: %+v", cmd)
	}
	if need := p.BodyNeed(); need != size+2 {
		t.Fatalf("BodyNeed %d before the body, want %d", need, size+2)
	}
	// The rest has arrived where the caller reads it: size the body for
	// all of it before Parse copies the first part.
	if space := p.BodySpace(len(in) - n + size + 2 - 1000); len(space) != size+2 {
		t.Fatalf("space %d, want the whole body", len(space))
	}
	if held := p.BodyHeld(); held != size+2 {
		t.Fatalf("body holds %d, want %d", held, size+2)
	}
	if m, ok := p.Parse(in[n:], &cmd); ok || m != 1000 {
		t.Fatalf("first part: %d consumed, ok %v", m, ok)
	}
	rest := append(append([]byte{}, body[1000:]...), "\r\n"...)
	for len(rest) > 0 {
		space := p.BodySpace(len(rest))
		k := copy(space, rest[:min(len(rest), 20000)])
		rest = rest[k:]
		if ok := p.BodyFilled(k, &cmd); ok != (len(rest) == 0) {
			t.Fatalf("BodyFilled: ok %v with %d left", ok, len(rest))
		}
	}
	if cmd.Op != codec.OpPutBody || cmd.Status != codec.OK || cmd.BodyAliased || cap(cmd.Body) != size+2 {
		t.Fatalf("body: op %v status %v aliased %v cap %d", cmd.Op, cmd.Status, cmd.BodyAliased, cap(cmd.Body))
	}
	if !bytes.Equal(cmd.Body[:size], body) || cmd.Pri != 1 || cmd.Delay != 2 || cmd.TTR != 3 {
		t.Fatal("body or header fields corrupted")
	}
	if p.BodyNeed() != 0 || p.BodySpace(100) != nil {
		t.Fatal("space outside a body")
	}

	// A body filled this way allocates once: its buffer.
	header := []byte("put 0 0 0 65536\r\n")
	allocs := testing.AllocsPerRun(20, func() {
		p.Parse(header, &cmd)
		for done := false; !done; {
			space := p.BodySpace(size + 2)
			done = p.BodyFilled(len(space), &cmd)
		}
	})
	if allocs != 1 {
		t.Errorf("%v allocations per body filled in place, want 1", allocs)
	}
}

// TestBodyAlloc: with an allocator, a body that arrives in parts is
// allocated by it once made at its full size (smaller first steps are the
// parser's own), and comes out intact and capped at its size; a nil from
// the allocator leaves the allocation to the parser; DropBody hands back
// the buffer of a put cut short.
func TestBodyAlloc(t *testing.T) {
	var asked []int
	pool := make([]byte, 64<<10)
	alloc := func(n int) []byte {
		asked = append(asked, n)
		if n > len(pool) {
			return nil
		}
		return pool
	}
	const size = 40 << 10
	body := bytes.Repeat([]byte("abcdefgh"), size/8)
	in := append(append([]byte("put 0 0 60 40960\r\n"), body...), "\r\n"...)

	p := codec.NewParser(1 << 20)
	var cmd codec.Command
	n, ok := p.Parse(in, &cmd)
	if !ok || cmd.Op != codec.OpPut {
		t.Fatalf("header: %+v", cmd)
	}
	p.SetBodyAlloc(alloc)
	in = in[n:]
	for _, piece := range []int{1000, 15000, len(in) - 16000} {
		n, ok = p.Parse(in[:piece], &cmd)
		in = in[n:]
	}
	if !ok || cmd.Op != codec.OpPutBody || !bytes.Equal(cmd.Body[:size], body) {
		t.Fatalf("body: op %v, ok %v", cmd.Op, ok)
	}
	if len(asked) != 1 || asked[0] != size+2 || &cmd.Body[0] != &pool[0] || cap(cmd.Body) != size+2 {
		t.Fatalf("allocator asked for %v; body from the pool %v, capacity %d", asked, &cmd.Body[0] == &pool[0], cap(cmd.Body))
	}

	// The allocator is kept for the next put; this one it declines.
	asked = nil
	n, _ = p.Parse([]byte("put 0 0 60 70000\r\n"), &cmd)
	if n == 0 || cmd.Op != codec.OpPut {
		t.Fatalf("header: %+v", cmd)
	}
	space := p.BodySpace(70002)
	if len(asked) != 1 || len(space) != 70002 {
		t.Fatalf("allocator asked for %v, space %d", asked, len(space))
	}
	if ok := p.BodyFilled(10, &cmd); ok {
		t.Fatal("10 bytes completed a 70000-byte body")
	}
	if got := p.DropBody(); len(got) != 10 || &got[0] != &space[0] {
		t.Fatalf("DropBody = %d bytes of the body's buffer: %v", len(got), len(got) > 0 && &got[0] == &space[0])
	}
	if p.InBody() || p.DropBody() != nil {
		t.Fatal("after DropBody the parser is still in the body")
	}
	n, ok = p.Parse([]byte("reserve\r\n"), &cmd)
	if !ok || cmd.Op != codec.OpReserve || n != 9 {
		t.Fatalf("after DropBody: %+v", cmd)
	}
}
