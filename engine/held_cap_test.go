package engine_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
)

// TestHeldRepliesKeepTheOutputCap: replies held for the log count against
// the output cap like any others. A client that pipelines peeks of a large
// job behind a reply held for the log must not have them all written into
// gnet's outbound buffer when the log catches up: the session stops being
// served at MaxOutputBuffered, as it does without a log.
func TestHeldRepliesKeepTheOutputCap(t *testing.T) {
	g, st := gatedStore(t)
	const maxOut = 64 << 10
	srv, network, addr := startServerOn(t, engine.Config{Loops: 1, MaxOutputBuffered: maxOut}, st)
	c := dialRaw(t, network, addr)
	const size, peeks = 60000, 500
	c.send(fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", size, strings.Repeat("x", size)))
	c.expect("INSERTED 1\r\n")

	g.shut()
	// A change the log has not acknowledged: its reply, and every one
	// after it, is held.
	c.send("use other\r\nput 0 0 60 1\r\ny\r\n")
	c.send(strings.Repeat("peek 1\r\n", peeks))
	time.Sleep(200 * time.Millisecond) // every peek parsed and held
	g.open()
	time.Sleep(200 * time.Millisecond) // the held replies flushed
	held := srv.Limits().BufferHeld
	// The socket takes a few MiB at once; what gnet keeps beyond it is the
	// client's unread replies, which the cap bounds.
	if held > 4*maxOut+size {
		t.Errorf("%d bytes of unread replies held for one connection, output cap %d", held, maxOut)
	}
	// Every reply still comes, in order.
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	want := len("USING other\r\nINSERTED 2\r\n") + peeks*(len(fmt.Sprintf("FOUND 1 %d\r\n", size))+size+2)
	if n, err := io.CopyN(io.Discard, c.rd, int64(want)); err != nil {
		t.Fatalf("read %d of %d bytes of replies: %v", n, want, err)
	}
}
