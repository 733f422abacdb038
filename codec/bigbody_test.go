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
