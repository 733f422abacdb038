package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
)

// TestBodyReadIntoJob pins the copies on a large put body's way in: what
// gnet reads with the header (at most engine.ReadBufferCap bytes) is
// copied into the job once, and the rest is read from the socket straight
// into it. The event loop is held while the client sends, so the whole put
// waits in the socket when the loop reads it; the sizes fit the socket's
// receive buffer.
func TestBodyReadIntoJob(t *testing.T) {
	for _, size := range []int{20 << 10, 64 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			srv, _, addr := startServer(t, engine.Config{MaxJobSize: 1 << 20, Loops: 1})
			c := dialRaw(t, "tcp", addr)
			body := strings.Repeat("0123456789abcdef", size/16)
			header := fmt.Sprintf("put 0 0 60 %d\r\n", size)

			c.send("list-tube-used\r\n") // the connection is open on the loop
			c.expect("USING default\r\n")
			before := srv.BodyBytesRead()
			release := srv.BlockLoop(0)
			c.send(header + body + "\r\n")
			c.waitSent() // every byte has reached the server's socket
			release()
			c.expect("INSERTED 1\r\n")

			copied := engine.ReadBufferCap - len(header)
			if got, want := srv.BodyBytesRead()-before, uint64(size+2-copied); got != want {
				t.Errorf("%d body bytes read straight into the job, want %d (the %d that came with the header are copied)", got, want, copied)
			}
			c.send("peek 1\r\n")
			c.expect(fmt.Sprintf("FOUND 1 %d\r\n%s\r\n", size, body))
		})
	}
}

// TestBodyHeldForWhatArrived pins the memory a put body that stops half
// way holds: one that lacks at most four times what has arrived is made
// whole at once, to read its rest straight into it without first asking
// the socket how much has come; a larger one is made for what the socket
// holds, and then grows as Parse grows it, to twice what has arrived.
// Either way the rest, when it comes, completes it intact.
func TestBodyHeldForWhatArrived(t *testing.T) {
	for _, tc := range []struct{ size, sent, held int }{
		{65_535, 16_000, 65_535 + 2},
		{200_000, 16_000, 2 * 16_000},
	} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			srv, _, addr := startServer(t, engine.Config{MaxJobSize: 1 << 20, Loops: 1})
			c := dialRaw(t, "tcp", addr)
			c.send("list-tube-used\r\n") // the connection is open on the loop
			c.expect("USING default\r\n")
			body := strings.Repeat("0123456789abcdef", tc.size/16+1)[:tc.size]

			release := srv.BlockLoop(0)
			c.send(fmt.Sprintf("put 0 0 60 %d\r\n%s", tc.size, body[:tc.sent]))
			c.waitSent() // one read of the loop takes header and part alike
			release()
			waitFor(t, "the partial body to be accounted", func() bool { return srv.Limits().BufferHeld != 0 })
			if got := srv.Limits().BufferHeld; got != int64(tc.held) {
				t.Errorf("%d bytes held for %d of a %d-byte body, want %d", got, tc.sent, tc.size, tc.held)
			}

			c.send(body[tc.sent:] + "\r\n")
			c.expect("INSERTED 1\r\n")
			c.send("peek 1\r\n")
			c.expect(fmt.Sprintf("FOUND 1 %d\r\n%s\r\n", tc.size, body))
		})
	}
}

// TestBodyReadInPieces: a body that trickles in, so that each read finds
// only part of what the body lacks, arrives intact, and so does the
// command pipelined after it.
func TestBodyReadInPieces(t *testing.T) {
	_, _, addr := startServer(t, engine.Config{MaxJobSize: 1 << 20, Loops: 1})
	c := dialRaw(t, "tcp", addr)
	const size = 300 << 10
	body := strings.Repeat("abcdefghijklmnopqrstuvwxyz012345", size/32)
	c.send(fmt.Sprintf("put 0 0 60 %d\r\n", size))
	for rest := body; len(rest) > 0; {
		piece := rest[:min(len(rest), 7000)]
		c.send(piece)
		rest = rest[len(piece):]
		c.waitSent() // each piece reaches the server alone
	}
	c.send("\r\nlist-tube-used\r\n")
	c.expect("INSERTED 1\r\n")
	c.expect("USING default\r\n")
	c.send("peek 1\r\n")
	c.expect(fmt.Sprintf("FOUND 1 %d\r\n%s\r\n", size, body))
}

// TestBodyCutShort: a client that goes away half way through a large body
// is closed without an answer, and the server serves on.
func TestBodyCutShort(t *testing.T) {
	_, _, addr := startServer(t, engine.Config{MaxJobSize: 1 << 20, Loops: 1})
	c := dialRaw(t, "tcp", addr)
	c.send("put 0 0 60 100000\r\n" + strings.Repeat("x", 60000))
	c.waitSent()
	_ = c.c.Close()

	d := dialRaw(t, "tcp", addr)
	d.send("put 0 0 60 3\r\nabc\r\n")
	d.expect("INSERTED 2\r\n")
	d.send("stats-tube default\r\n")
	got, err := d.reply(5 * time.Second)
	if err != nil || !strings.Contains(got, "total-jobs: 1\n") {
		t.Fatalf("stats-tube: %q, %v; want one job in the tube", got, err)
	}
}

// TestRecycledBodies: large bodies reuse the memory of deleted jobs, and
// every reply still carries its own job's bytes: jobs put, reserved and
// deleted in turn, and a peek of a job pipelined with its delete and the
// next put, whose reply is written after the put has taken memory (the
// deleted body's is not reused while the reply may still name it).
func TestRecycledBodies(t *testing.T) {
	srv, _, addr := startServer(t, engine.Config{MaxJobSize: 1 << 20, Loops: 1})
	c := dialRaw(t, "tcp", addr)
	const size = 48 << 10
	body := func(i int) string { return strings.Repeat(fmt.Sprintf("%07d|", i), size/8) }
	for i := 1; i <= 20; i++ {
		c.send(fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", size, body(i)))
		c.expect(fmt.Sprintf("INSERTED %d\r\n", i))
		c.send("reserve\r\n")
		c.expect(fmt.Sprintf("RESERVED %d %d\r\n%s\r\n", i, size, body(i)))
		c.send(fmt.Sprintf("delete %d\r\n", i))
		c.expect("DELETED\r\n")
	}
	if srv.BodiesReused() == 0 {
		t.Fatal("no body was recycled")
	}

	c.send(fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", size, body(21)))
	c.expect("INSERTED 21\r\n")
	// One write: the loop runs all of it in one callback.
	c.send(fmt.Sprintf("peek 21\r\ndelete 21\r\nput 0 0 60 %d\r\n%s\r\npeek 22\r\n", size, body(22)))
	c.expect(fmt.Sprintf("FOUND 21 %d\r\n%s\r\n", size, body(21)))
	c.expect("DELETED\r\n")
	c.expect("INSERTED 22\r\n")
	c.expect(fmt.Sprintf("FOUND 22 %d\r\n%s\r\n", size, body(22)))
}
