package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// startServer runs an in-process server in memory on a free loopback port
// (or cfg's unix socket) and returns its network and address.
func startServer(t testing.TB, cfg engine.Config) (*engine.Server, string, string) {
	t.Helper()
	return startServerOn(t, cfg, store.New(store.Options{}))
}

// startServerOn is startServer on st, which it closes at the end.
func startServerOn(t testing.TB, cfg engine.Config, st *store.Store) (*engine.Server, string, string) {
	t.Helper()
	if cfg.Network == "" {
		cfg.Network = "tcp"
	}
	if cfg.Network == "tcp" && cfg.Address == "" {
		cfg.Address = freePort(t)
	}
	if cfg.Loops == 0 {
		cfg.Loops = 2
	}
	srv := engine.New(cfg, st)
	errc := make(chan error, 1)
	go func() { errc <- srv.Run() }()
	select {
	case <-srv.Ready():
	case err := <-errc:
		t.Fatalf("server did not start: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("server did not start within 5s")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
		st.Close()
	})
	return srv, cfg.Network, cfg.Address
}

// freePort is a free 127.0.0.1 address (testproc.FreePort: never one a
// bind to port 0 elsewhere could take meanwhile).
func freePort(t testing.TB) string {
	t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// rawConn speaks bytes to the server and reads whole replies.
type rawConn struct {
	t  testing.TB
	c  net.Conn
	rd *bufio.Reader
}

func dialRaw(t testing.TB, network, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatalf("send %q: %v", s, err)
	}
}

// reply reads one reply, with its body for RESERVED, FOUND and OK.
func (r *rawConn) reply(timeout time.Duration) (string, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(timeout))
	line, err := r.rd.ReadString('\n')
	if err != nil {
		return line, err
	}
	f := strings.Fields(line)
	n := -1
	switch {
	case len(f) == 3 && (f[0] == "RESERVED" || f[0] == "FOUND"):
		n, _ = strconv.Atoi(f[2])
	case len(f) == 2 && f[0] == "OK":
		n, _ = strconv.Atoi(f[1])
	}
	if n >= 0 {
		body := make([]byte, n+2)
		if _, err := io.ReadFull(r.rd, body); err != nil {
			return line, err
		}
		line += string(body)
	}
	return line, nil
}

func (r *rawConn) expect(want string) {
	r.t.Helper()
	got, err := r.reply(5 * time.Second)
	if err != nil || got != want {
		r.t.Fatalf("got %q (err %v), want %q", got, err, want)
	}
}

func (r *rawConn) expectSilence(d time.Duration) {
	r.t.Helper()
	if got, err := r.reply(d); err == nil {
		r.t.Fatalf("got %q, want no reply yet", got)
	}
}

func TestGoBeanstalkClient(t *testing.T) {
	_, network, addr := startServer(t, engine.Config{})
	c, err := beanstalk.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	tube := beanstalk.NewTube(c, "emails")
	id, err := tube.Put([]byte("hello"), 10, 0, time.Minute)
	if err != nil || id != 1 {
		t.Fatalf("put: id %d err %v", id, err)
	}
	if body, err := c.Peek(id); err != nil || string(body) != "hello" {
		t.Fatalf("peek: %q %v", body, err)
	}
	ts := beanstalk.NewTubeSet(c, "emails")
	rid, body, err := ts.Reserve(time.Second)
	if err != nil || rid != id || string(body) != "hello" {
		t.Fatalf("reserve: %d %q %v", rid, body, err)
	}
	stats, err := c.StatsJob(id)
	if err != nil || stats["state"] != "reserved" || stats["tube"] != `"emails"` || stats["reserves"] != "1" {
		t.Fatalf("stats-job: %v %v", stats, err)
	}
	if err := c.Touch(id); err != nil {
		t.Fatalf("touch: %v", err)
	}
	if err := c.Bury(id, 5); err != nil {
		t.Fatalf("bury: %v", err)
	}
	if pid, _, err := tube.PeekBuried(); err != nil || pid != id {
		t.Fatalf("peek-buried: %d %v", pid, err)
	}
	if n, err := tube.Kick(10); err != nil || n != 1 {
		t.Fatalf("kick: %d %v", n, err)
	}
	if _, _, err := ts.Reserve(time.Second); err != nil {
		t.Fatalf("reserve after kick: %v", err)
	}
	if err := c.Release(id, 1, time.Second); err != nil {
		t.Fatalf("release: %v", err)
	}
	if pid, _, err := tube.PeekDelayed(); err != nil || pid != id {
		t.Fatalf("peek-delayed: %d %v", pid, err)
	}
	if err := c.KickJob(id); err != nil {
		t.Fatalf("kick-job: %v", err)
	}
	if body, err := c.ReserveJob(id); err != nil || string(body) != "hello" {
		t.Fatalf("reserve-job: %q %v", body, err)
	}
	if err := c.Delete(id); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.Delete(id); !errors.Is(err, beanstalk.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, _, err := ts.Reserve(0); !errors.Is(err, beanstalk.ErrTimeout) {
		t.Fatalf("empty reserve: %v", err)
	}
	if err := tube.Pause(time.Second); err != nil {
		t.Fatalf("pause: %v", err)
	}
	tubes, err := c.ListTubes()
	if err != nil || strings.Join(tubes, ",") != "default,emails" {
		t.Fatalf("list-tubes: %v %v", tubes, err)
	}
	st, err := c.Stats()
	if err != nil || st["cmd-put"] != "1" || st["cmd-delete"] != "2" || st["current-tubes"] != "2" {
		t.Fatalf("stats: %v %v", st, err)
	}
}

// TestUnixSocket serves on a unix socket, replacing a stale socket file
// left by an earlier run.
func TestUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sprout.sock")
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if ul, ok := stale.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	_ = stale.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket should remain: %v", err)
	}

	_, network, addr := startServer(t, engine.Config{Network: "unix", Address: path})
	c, err := beanstalk.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.Put([]byte("x"), 0, 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := c.Peek(id); err != nil || string(body) != "x" {
		t.Fatalf("peek over unix socket: %q %v", body, err)
	}
}

func TestUnixSocketRefusesRegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := store.New(store.Options{})
	defer st.Close()
	srv := engine.New(engine.Config{Network: "unix", Address: path}, st)
	if err := srv.Run(); err == nil {
		t.Fatal("Run on a regular file succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Fatal("regular file was touched")
	}
}

// TestPipelinedBehindBlockingReserve: commands sent after a blocking
// reserve are answered, in order, once another connection's put wakes it.
func TestPipelinedBehindBlockingReserve(t *testing.T) {
	_, network, addr := startServer(t, engine.Config{})
	consumer := dialRaw(t, network, addr)
	producer := dialRaw(t, network, addr)

	consumer.send("reserve\r\nlist-tube-used\r\nwatch other\r\n")
	consumer.expectSilence(100 * time.Millisecond)
	producer.send("put 0 0 60 3\r\nabc\r\n")
	producer.expect("INSERTED 1\r\n")
	consumer.expect("RESERVED 1 3\r\nabc\r\n")
	consumer.expect("USING default\r\n")
	consumer.expect("WATCHING 2\r\n")
}

// TestPutBodiesOutliveInput: a put body that arrives whole is parsed in
// place in the connection's input buffer; whatever its size, the stored
// job must keep it after the buffer is reused for later input.
func TestPutBodiesOutliveInput(t *testing.T) {
	_, network, addr := startServer(t, engine.Config{})
	c := dialRaw(t, network, addr)
	sizes := []int{0, 1, 64, store.MaxCopiedBody, store.MaxCopiedBody + 1, 4000, 60000}
	for i, n := range sizes {
		c.send(fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", n, strings.Repeat(string(rune('a'+i)), n)))
		c.expect(fmt.Sprintf("INSERTED %d\r\n", i+1))
	}
	// Refill the input buffer with other bytes.
	for range 100 {
		c.send("put 0 0 60 500\r\n" + strings.Repeat("z", 500) + "\r\n")
	}
	for range 100 {
		if _, err := c.reply(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range sizes {
		c.send(fmt.Sprintf("peek %d\r\n", i+1))
		c.expect(fmt.Sprintf("FOUND %d %d\r\n%s\r\n", i+1, n, strings.Repeat(string(rune('a'+i)), n)))
	}
}

// TestCrossLoopHandoff runs consumers and producers spread over several
// event loops and checks every job is delivered exactly once.
func TestCrossLoopHandoff(t *testing.T) {
	srv, network, addr := startServer(t, engine.Config{Loops: 4})
	const consumers, producers, perProducer = 8, 4, 200
	total := producers * perProducer

	got := make(chan uint64, total)
	var wg sync.WaitGroup
	for i := 0; i < consumers; i++ {
		c, err := beanstalk.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := beanstalk.NewTubeSet(c, "work")
			for {
				id, _, err := ts.Reserve(2 * time.Second)
				if err != nil {
					return // timed out: the queue has run dry
				}
				if err := c.Delete(id); err != nil {
					t.Errorf("delete %d: %v", id, err)
					return
				}
				got <- id
			}
		}()
	}
	// The producers start once every consumer waits in reserve, so that
	// each put is handed to a waiting consumer, on whichever loop.
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().CurrentWaiting < consumers {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d consumers waiting after 5s", srv.Stats().CurrentWaiting, consumers)
		}
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < producers; i++ {
		c, err := beanstalk.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			tube := beanstalk.NewTube(c, "work")
			for k := 0; k < perProducer; k++ {
				if _, err := tube.Put([]byte("job"), 0, 0, time.Minute); err != nil {
					t.Errorf("put: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(got)
	seen := make(map[uint64]bool)
	for id := range got {
		if seen[id] {
			t.Fatalf("job %d delivered twice", id)
		}
		seen[id] = true
	}
	if len(seen) != total {
		t.Fatalf("delivered %d jobs, want %d", len(seen), total)
	}
}

// TestTimersAreMillisecondPrecise checks a delayed job reaches a blocked
// reserve close to its due time, not on a coarse tick.
func TestTimersAreMillisecondPrecise(t *testing.T) {
	_, network, addr := startServer(t, engine.Config{})
	c := dialRaw(t, network, addr)
	// Timed from before the put, which starts the delay: from its answer,
	// a test descheduled meanwhile would see the job come early.
	start := time.Now()
	c.send("put 0 1 60 1\r\nx\r\n")
	c.expect("INSERTED 1\r\n")
	c.send("reserve\r\n")
	c.expect("RESERVED 1 1\r\nx\r\n")
	late := time.Since(start) - time.Second
	t.Logf("delayed job delivered %v after its due time", late)
	if late < -5*time.Millisecond || late > 250*time.Millisecond {
		t.Fatalf("delay fired %v off its due time", late)
	}

	start = time.Now()
	c.send("reserve-with-timeout 1\r\n")
	c.expect("TIMED_OUT\r\n")
	late = time.Since(start) - time.Second
	t.Logf("reserve timeout answered %v after its due time", late)
	if late < -5*time.Millisecond || late > 250*time.Millisecond {
		t.Fatalf("timeout fired %v off its due time", late)
	}
}

// TestCloseReleasesReservedJobs: a closed connection's job is ready at once.
func TestCloseReleasesReservedJobs(t *testing.T) {
	_, network, addr := startServer(t, engine.Config{})
	a := dialRaw(t, network, addr)
	a.send("put 0 0 100 1\r\nx\r\nreserve\r\n")
	a.expect("INSERTED 1\r\n")
	a.expect("RESERVED 1 1\r\nx\r\n")
	b := dialRaw(t, network, addr)
	b.send("reserve-with-timeout 0\r\n")
	b.expect("TIMED_OUT\r\n")
	b.send("reserve\r\n")
	_ = a.c.Close()
	b.expect("RESERVED 1 1\r\nx\r\n")
}

// TestSlowReaderIsThrottled: a client that pipelines without reading stops
// being served once its unread replies pass the cap; others are unaffected;
// when it reads, it is served again and nothing is lost.
func TestSlowReaderIsThrottled(t *testing.T) {
	srv, network, addr := startServer(t, engine.Config{MaxOutputBuffered: 256 << 10})
	body := strings.Repeat("z", 60000)
	setup := dialRaw(t, network, addr)
	setup.send(fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", len(body), body))
	setup.expect("INSERTED 1\r\n")

	slow, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	const peeks = 400 // 24 MB of replies
	go func() {
		_, _ = io.WriteString(slow, strings.Repeat("peek 1\r\n", peeks))
	}()
	deadline := time.Now().Add(5 * time.Second)
	for srv.ThrottledCount() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("slow reader was never throttled")
		}
		time.Sleep(5 * time.Millisecond)
	}

	other := dialRaw(t, network, addr)
	start := time.Now()
	other.send("stats-job 1\r\n")
	if r, err := other.reply(2 * time.Second); err != nil || !strings.HasPrefix(r, "OK ") {
		t.Fatalf("other client: %q %v", r, err)
	}
	t.Logf("other client answered in %v while a reader was throttled", time.Since(start))

	rd := bufio.NewReader(slow)
	want := fmt.Sprintf("FOUND 1 %d\r\n%s\r\n", len(body), body)
	buf := make([]byte, len(want))
	for i := 0; i < peeks; i++ {
		_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(rd, buf); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if !bytes.Equal(buf, []byte(want)) {
			t.Fatalf("reply %d corrupted", i)
		}
	}
}

// TestBlockedInputHeldBack: a client piling up input behind a blocked
// reserve is held back, as beanstalkd holds it back by not reading it: the
// server stops reading its socket at pauseReadingAt bytes unread, far
// below the 2 MiB sent and under the input cap, rather than buffering it
// all or closing the connection; once the reserve times out, every
// command behind it runs, in order, as beanstalkd runs them.
func TestBlockedInputHeldBack(t *testing.T) {
	const limit = 64 << 10
	srv, network, addr := startServer(t, engine.Config{MaxInputBuffered: limit})
	c := dialRaw(t, network, addr)
	c.send("reserve-with-timeout 1\r\n")
	const commands = 131072 // 2 MiB behind the reserve
	written := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c.c, strings.Repeat("list-tube-used\r\n", commands))
		written <- err
	}()
	waitFor(t, "the input behind the reserve to be read", func() bool { return srv.Limits().BufferHeld >= limit/2 })
	for range 30 {
		if held := srv.Limits().BufferHeld; held > limit {
			t.Fatalf("%d bytes of input held behind the reserve, want at most %d", held, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.expect("TIMED_OUT\r\n")
	for i := range commands {
		if line, err := c.reply(10 * time.Second); err != nil || line != "USING default\r\n" {
			t.Fatalf("reply %d behind the reserve: %q (%v)", i, line, err)
		}
	}
	if err := <-written; err != nil {
		t.Fatalf("the client's write: %v", err)
	}
	other := dialRaw(t, network, addr)
	other.send("list-tube-used\r\n")
	other.expect("USING default\r\n")
}

// TestEndBehindPausedReserve: a client pipelines 64,000 bytes of commands
// behind a reserve that waits for ever, so that its session pauses
// reading, then ends its writing side. The session sees the end though it
// reads nothing (gnet patch 0005), and does as beanstalkd does: after a
// half-close the reserve answers TIMED_OUT and every command after it
// runs; after a close the connection goes, instead of waiting to be handed
// the next job. It used to wait for ever in both.
func TestEndBehindPausedReserve(t *testing.T) {
	const limit = 64 << 10
	const commands = 4000 // 64,000 bytes: the end still fits the receive window
	input := "reserve\r\n" + strings.Repeat("list-tube-used\r\n", commands)
	for _, close := range []bool{false, true} {
		name := "half-close"
		if close {
			name = "close"
		}
		t.Run(name, func(t *testing.T) {
			srv, network, addr := startServer(t, engine.Config{MaxInputBuffered: limit})
			c := dialRaw(t, network, addr)
			c.send(input)
			waitFor(t, "the input behind the reserve to be read", func() bool { return srv.Limits().BufferHeld >= limit/2 })
			if close {
				_ = c.c.Close()
				waitFor(t, "the connection to go", func() bool { return srv.Stats().CurrentConnections == 0 })
				return
			}
			if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			c.expect("TIMED_OUT\r\n")
			for i := range commands {
				if line, err := c.reply(5 * time.Second); err != nil || line != "USING default\r\n" {
					t.Fatalf("reply %d behind the reserve: %q (%v)", i, line, err)
				}
			}
			if line, err := c.reply(5 * time.Second); err != io.EOF {
				t.Fatalf("after the replies: %q (%v), want the end of file", line, err)
			}
		})
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

func TestDrainMode(t *testing.T) {
	srv, network, addr := startServer(t, engine.Config{})
	c := dialRaw(t, network, addr)
	srv.SetDraining()
	c.send("put 0 0 1 1\r\nx\r\nput 0 0 1 1\r\nxy\r\n")
	c.expect("DRAINING\r\n")
	c.expect("EXPECTED_CRLF\r\n")
}

// TestPutAgeFromHeader: a job is made when its put's command line comes,
// as beanstalkd's is, so a body that comes 3 s later makes a job 3 s old.
// The store's clock moves by hand, once the header has been read
// (cmd-put counts it) and a little more.
func TestPutAgeFromHeader(t *testing.T) {
	var clock atomic.Int64
	_, network, addr := startServerOn(t, engine.Config{}, store.New(store.Options{Now: clock.Load}))
	c, other := dialRaw(t, network, addr), dialRaw(t, network, addr)
	c.send("put 0 0 60 1\r\n")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		other.send("stats\r\n")
		if got, _ := other.reply(5 * time.Second); strings.Contains(got, "\ncmd-put: 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the put's header was not read")
		}
	}
	time.Sleep(20 * time.Millisecond)
	clock.Add(int64(3 * time.Second))
	c.send("x\r\n")
	c.expect("INSERTED 1\r\n")
	c.send("stats-job 1\r\n")
	if got, err := c.reply(5 * time.Second); err != nil || !strings.Contains(got, "\nage: 3\n") {
		t.Fatalf("stats-job: %q (err %v), want age 3", got, err)
	}
}

// TestPartialLineIsKept: a command line split across packets, and a line
// held back by a stray '\r', stay buffered until the rest arrives.
func TestPartialLineIsKept(t *testing.T) {
	_, network, addr := startServer(t, engine.Config{})
	c := dialRaw(t, network, addr)
	c.send("list-tu")
	c.expectSilence(50 * time.Millisecond)
	c.send("be-used\r\n")
	c.expect("USING default\r\n")
	c.send("list-tube-used\rx\r\n")
	c.expectSilence(50 * time.Millisecond)
	c.send(strings.Repeat("X", 224) + "\r\n") // fills the 224-byte window: one BAD_FORMAT
	c.expect("BAD_FORMAT\r\n")
	c.send("list-tube-used\r\n")
	c.expect("USING default\r\n")
}
