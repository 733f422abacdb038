package engine_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/engine"
)

// waitFor polls cond every few milliseconds until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expectClosed fails unless the server closes c within 5 s, discarding
// whatever it sent first.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if err != nil && !isReset(err) {
		t.Fatalf("want the connection closed, got %v", err)
	}
}

// TestMaxConnections: past the limit a new connection is closed at once and
// counted; the open ones are served; once one closes, a new one is accepted.
func TestMaxConnections(t *testing.T) {
	srv, network, addr := startServer(t, engine.Config{MaxConnections: 3})
	var open []*rawConn
	for range 3 {
		c := dialRaw(t, network, addr)
		c.send("list-tube-used\r\n")
		c.expect("USING default\r\n")
		open = append(open, c)
	}
	extra, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	expectClosed(t, extra)
	if l := srv.Limits(); l.Refused != 1 || l.Open != 3 || l.MaxConnections != 3 {
		t.Fatalf("limits %+v, want 1 refused, 3 open, max 3", l)
	}
	open[0].send("put 0 0 10 1\r\nx\r\n")
	open[0].expect("INSERTED 1\r\n")

	_ = open[1].c.Close()
	waitFor(t, "the closed connection to be counted", func() bool { return srv.Limits().Open == 2 })
	again := dialRaw(t, network, addr)
	again.send("reserve-with-timeout 0\r\n")
	again.expect("RESERVED 1 1\r\nx\r\n")
}

// TestBufferBudgetClosesLargestHolders: connections holding partial put
// bodies past the server-wide budget are closed, largest first, and their
// memory leaves the count; a polite client is unaffected.
func TestBufferBudgetClosesLargestHolders(t *testing.T) {
	const budget = 256 << 10
	srv, network, addr := startServer(t, engine.Config{MaxBufferMemory: budget, MaxJobSize: 1 << 20})
	polite := dialRaw(t, network, addr)

	// Four connections each hold 40,000 body bytes of a 60,000-byte put,
	// and one holds 100,000 of a 200,000-byte put: over 260,000 bytes in
	// all (a body in parts may have room for more), past the budget;
	// closing the largest brings it back.
	type holder struct{ declared, sent int }
	sizes := []holder{{60_000, 40_000}, {60_000, 40_000}, {60_000, 40_000}, {60_000, 40_000}, {200_000, 100_000}}
	var holders []net.Conn
	for i, h := range sizes {
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		holders = append(holders, c)
		if _, err := fmt.Fprintf(c, "put 0 0 10 %d\r\n%s", h.declared, strings.Repeat("b", h.sent)); err != nil {
			t.Fatal(err)
		}
		if i < len(sizes)-1 {
			// Let each be accounted before the next, so the largest is the
			// one past the budget.
			waitFor(t, "the partial body to be accounted", func() bool { return srv.Limits().BufferHeld >= int64(40_000*(i+1)) })
		}
	}
	expectClosed(t, holders[len(holders)-1])
	waitFor(t, "the evicted connection's bytes to be released", func() bool {
		l := srv.Limits()
		return l.Evicted == 1 && l.BufferHeld <= budget
	})
	for _, c := range holders[:len(holders)-1] {
		if _, err := fmt.Fprintf(c, "%s\r\n", strings.Repeat("b", 20_000)); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, len("INSERTED 1\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, reply); err != nil || !strings.HasPrefix(string(reply), "INSERTED ") {
			t.Fatalf("a smaller holder lost its put: %q %v", reply, err)
		}
	}
	polite.send("stats-tube default\r\n")
	if r, err := polite.reply(2 * time.Second); err != nil || !strings.Contains(r, "current-jobs-ready: 4\n") {
		t.Fatalf("polite client: %q %v", r, err)
	}
}

// TestBudgetCountsUnreadReplies: replies a client does not read count
// against the budget once the kernel's socket buffers are full, and the
// budget closes that client; its reserved jobs go back to ready. The
// output cap is far above the kernel's socket buffers (4 MiB here), so
// gnet must hold more than the budget before the client is throttled.
func TestBudgetCountsUnreadReplies(t *testing.T) {
	const budget = 1 << 20
	srv, network, addr := startServer(t, engine.Config{MaxBufferMemory: budget, MaxOutputBuffered: 32 << 20})
	setup := dialRaw(t, network, addr)
	body := strings.Repeat("z", 60_000)
	for i := 1; i <= 2; i++ {
		setup.send(fmt.Sprintf("put 0 0 600 %d\r\n%s\r\n", len(body), body))
		setup.expect(fmt.Sprintf("INSERTED %d\r\n", i))
	}

	hog, err := net.DialTCP(network, nil, mustResolve(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	_ = hog.SetReadBuffer(4 << 10)
	// One reserved job, then peeks of it that are never read: hundreds of
	// megabytes of replies against a budget of one.
	go func() {
		_, _ = io.WriteString(hog, "reserve-with-timeout 0\r\n"+strings.Repeat("peek 1\r\n", 4000))
	}()
	waitFor(t, "the hog to be closed by the budget", func() bool { return srv.Limits().Evicted == 1 })
	waitFor(t, "its bytes to be released", func() bool { return srv.Limits().BufferHeld < budget })
	// OnClose releases the bytes, then the hog's reserved job.
	waitFor(t, "the hog's reserved job to be back to ready", func() bool {
		setup.send("stats-job 1\r\n")
		r, err := setup.reply(2 * time.Second)
		return err == nil && strings.Contains(r, "state: ready\n")
	})
}

func mustResolve(t *testing.T, addr string) *net.TCPAddr {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// opRecorder is an engine.Metrics that keeps the commands it is told of.
type opRecorder struct {
	mu  sync.Mutex
	ops []string
}

func (r *opRecorder) ObserveCommand(op codec.Op, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op.String())
}

// TestMetricsAndByteCounts: each executed command is reported once by name
// (a put once, for its body), and the bytes parsed and replied are counted.
func TestMetricsAndByteCounts(t *testing.T) {
	rec := &opRecorder{}
	srv, network, addr := startServer(t, engine.Config{Metrics: rec})
	c := dialRaw(t, network, addr)
	in := "put 0 0 10 3\r\nabc\r\nreserve\r\ndelete 1\r\nbogus\r\n"
	c.send(in)
	c.expect("INSERTED 1\r\n")
	c.expect("RESERVED 1 3\r\nabc\r\n")
	c.expect("DELETED\r\n")
	c.expect("UNKNOWN_COMMAND\r\n")
	rec.mu.Lock()
	got := strings.Join(rec.ops, " ")
	rec.mu.Unlock()
	if got != "put reserve delete" {
		t.Fatalf("observed %q, want %q", got, "put reserve delete")
	}
	// The loop counts what it wrote once the write returns, which may be
	// after the client has read it.
	out := len("INSERTED 1\r\nRESERVED 1 3\r\nabc\r\nDELETED\r\nUNKNOWN_COMMAND\r\n")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		l := srv.Limits()
		if l.BytesIn == uint64(len(in)) && l.BytesOut == uint64(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bytes in %d out %d, want %d and %d", l.BytesIn, l.BytesOut, len(in), out)
		}
	}
}

// TestServesAGivenListener: a listener opened elsewhere (as systemd hands
// one over) is served, and Stop closes it.
func TestServesAGivenListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, _, _ := startServer(t, engine.Config{Listener: ln, Address: "unused"})
	if srv.Addr().String() != ln.Addr().String() {
		t.Fatalf("serving %v, want %v", srv.Addr(), ln.Addr())
	}
	c := dialRaw(t, "tcp", ln.Addr().String())
	c.send("list-tube-used\r\n")
	c.expect("USING default\r\n")
}

// TestLongPipelineOfLargeReplies: 1,500 pipelined peeks of a 600-byte job
// all arrive intact (each reply is two slices of a writev, and one writev
// takes at most IOV_MAX of them).
func TestLongPipelineOfLargeReplies(t *testing.T) {
	_, network, addr := startServer(t, engine.Config{MaxOutputBuffered: 8 << 20})
	c := dialRaw(t, network, addr)
	body := strings.Repeat("p", 600)
	c.send(fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", len(body), body))
	c.expect("INSERTED 1\r\n")
	c.send(strings.Repeat("peek 1\r\n", 1500))
	for i := range 1500 {
		r, err := c.reply(5 * time.Second)
		if err != nil || r != "FOUND 1 600\r\n"+body+"\r\n" {
			t.Fatalf("reply %d: %q %v", i, r, err)
		}
	}
}
