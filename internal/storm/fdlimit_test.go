package storm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

const (
	// serverNofile is the open-file limit the flooded server runs under.
	serverNofile = 1024
	// floodConns is how many connections the flood opens: well past
	// serverNofile.
	floodConns = 1500
	// floodDialers open the flood's connections in parallel.
	floodDialers = 32
	// floodSettle is how long the flood is held after its last dial before
	// the server is checked.
	floodSettle = 500 * time.Millisecond
	// recoverWithin bounds how long after the flood closes a new client
	// must be answered.
	recoverWithin = 2 * time.Second
	// durableHold and durableHoldPuts: on -b the flood is held until the
	// producer has had this many puts acknowledged (about three 64 KiB
	// segments of 1 KB jobs), or for durableHold at most.
	durableHold     = 3 * time.Second
	durableHoldPuts = 200
	// maxLogLines bounds the warn lines one flood may cause: the server
	// logs at most once per interval, never once per connection.
	maxLogLines = 50
	// The server's log messages for a refused and a shed connection.
	msgRefused = "connection refused: at max-connections"
	msgShed    = "accept: out of descriptors; shedding new connections"
)

// TestDescriptorExhaustion floods sprout, running under an open-file limit
// of 1,024, with 1,500 connections while a client connected before the
// flood keeps working:
//
//   - default: the default --max-connections (the limit less the
//     descriptors open at start less 64) closes the connections past it at
//     once, and says so in a rate-limited warn line;
//   - emfile: --max-connections 100000 lets accept run into EMFILE; the
//     server sheds new connections (accept and close) and says so in a
//     rate-limited warn line;
//   - durable-default and durable-emfile: the same on -b DIR -s 65536 -f 0
//     while a producer keeps putting 1 KB jobs, so segments rotate while
//     the server is at its limit.
//
// In every case the process must stay up; the pre-flood client must get
// put, reserve, delete and stats answered during the flood (on -b at
// EMFILE a put may be answered OUT_OF_MEMORY: no descriptor is left for
// the next segment); a new client must be answered within 2 s of the flood
// closing; the server's descriptors must come back to their pre-flood
// count. On -b, puts must resume after the flood, and every job
// acknowledged with INSERTED must be there after a restart on the same
// directory.
func TestDescriptorExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("floods servers for several seconds")
	}
	for _, tc := range []struct {
		name    string
		durable bool
		args    []string
		// want is the log message the flood must cause.
		want string
	}{
		{name: "default", want: msgRefused},
		{name: "emfile", args: []string{"--max-connections", "100000"}, want: msgShed},
		{name: "durable-default", durable: true, want: msgRefused},
		{name: "durable-emfile", durable: true, args: []string{"--max-connections", "100000"}, want: msgShed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := testproc.SproutBinary(t)
			args := sproutArgs(t, bin, tc.args...)
			dir := ""
			if tc.durable {
				dir = t.TempDir()
				args = append(args, "-b", dir, "-s", "65536", "-f", "0")
			}
			spec := serverSpec{name: "sprout", binary: bin, args: args, nofile: serverNofile}
			s := spec.start(t)
			floodServer(t, s, dir, tc.durable && tc.want == msgShed, tc.want)
		})
	}
}

// floodServer runs one flood against s; dir is s's -b directory or "".
// oomOK accepts OUT_OF_MEMORY for the pre-flood client's put.
func floodServer(t *testing.T, s *testproc.Process, dir string, oomOK bool, wantLog string) {
	pre := testproc.DialTest(t, s.Addr(), replyTimeout)
	if err := useOnly(pre, "pre-flood"); err != nil {
		t.Fatal(err)
	}
	if err := answered(pre, false); err != nil {
		t.Fatalf("pre-flood client before the flood: %v", err)
	}
	before := mustReadProc(t, s.PID())
	segsBefore := segments(t, dir)
	var prod *producer
	if dir != "" {
		prod = startProducer(t, s.Addr())
		for deadline := time.Now().Add(replyTimeout); prod.count() == 0; {
			if time.Now().After(deadline) {
				t.Fatal("no put acknowledged before the flood")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	f := startFlood(s.Addr(), floodConns)
	f.dialed.Wait()
	time.Sleep(floodSettle)
	ackedAtFlood, segsAtFlood, segsDuring := 0, 0, 0
	if prod != nil {
		// Hold the flood until the producer has filled a few segments,
		// so that they rotate while the server is at its limit.
		ackedAtFlood, segsAtFlood = prod.count(), segments(t, dir)
		deadline := time.Now().Add(durableHold)
		for prod.count() < ackedAtFlood+durableHoldPuts && time.Now().Before(deadline) && !s.Exited() {
			time.Sleep(20 * time.Millisecond)
		}
		segsDuring = segments(t, dir)
	}
	during, procErr := readProc(s.PID())
	alive := !s.Exited()
	liveErr := answered(pre, oomOK)
	var ackedDuring int
	if prod != nil {
		ackedDuring = prod.count()
	}

	f.close()
	closed := time.Now()
	recoverErr := newClientAnswered(s.Addr(), recoverWithin)
	recovered := time.Since(closed)
	fdsBack, after := fdsReturn(s.PID(), before.fds, 5*time.Second)

	t.Logf("flood of %d: %d still open when released (accepted, or in the listen backlog), %d closed by the server (slowest close %v after its dial), %d dials failed",
		floodConns, f.held.Load(), f.closedByServer.Load(), time.Duration(f.slowestClose.Load()), f.dialFailed.Load())
	if procErr != nil {
		t.Logf("server before the flood: %v; during and after: gone", before)
	} else {
		t.Logf("server before the flood: %v; during: %v; after: %v", before, during, after)
	}
	for _, msg := range []string{msgRefused, msgShed} {
		lines := logLines(s.Output(), msg)
		t.Logf("log: %d lines %q", len(lines), msg)
		for _, l := range lines[:min(len(lines), 3)] {
			t.Logf("  %s", l)
		}
	}

	if !alive || procErr != nil {
		t.Errorf("the server died in the flood (%v, %v):\n%s", s.State(), procErr, tail(s.Output()))
	}
	if liveErr != nil {
		t.Errorf("pre-flood client during the flood: %v", liveErr)
	}
	if recoverErr != nil {
		t.Errorf("new client after the flood: %v", recoverErr)
	} else {
		t.Logf("new client answered %v after the flood closed", recovered.Round(time.Millisecond))
	}
	if alive {
		n := len(logLines(s.Output(), wantLog))
		if n == 0 {
			t.Errorf("the server never logged %q", wantLog)
		}
		if n > maxLogLines {
			t.Errorf("the server logged %q %d times in one flood; want it rate-limited (at most %d)", wantLog, n, maxLogLines)
		}
		if wantLog == msgRefused {
			if f.closedByServer.Load() == 0 {
				t.Errorf("no connection past --max-connections was closed by the server")
			}
			// The margin below the limit is there so that the log and the
			// listener always get a descriptor; a burst that the acceptor
			// takes faster than connections are refused can still exhaust it.
			shed := len(logLines(s.Output(), msgShed))
			goal(t, shed == 0, "the default --max-connections kept the server off EMFILE (%d lines %q)", shed, msgShed)
		}
		if !fdsBack {
			t.Errorf("the server holds %d descriptors 5 s after the flood closed, %d before it", after.fds, before.fds)
		}
	}
	if prod == nil {
		return
	}

	// Puts must resume once descriptors are back: give the producer a
	// moment, then stop it.
	time.Sleep(time.Second)
	prod.stop()
	acked := prod.ids()
	t.Logf("producer: %d puts acknowledged (%d before the flood was complete, %d while it was held, %d after it), %d OUT_OF_MEMORY; "+
		"segment files: %d before the flood, %d once it was complete, %d at the end of its hold, %d at the end",
		len(acked), ackedAtFlood, ackedDuring-ackedAtFlood, len(acked)-ackedDuring, prod.oom,
		segsBefore, segsAtFlood, segsDuring, segments(t, dir))
	if prod.err != nil {
		t.Errorf("producer: %v", prod.err)
	}
	if alive && len(acked) == ackedDuring {
		t.Errorf("no put was acknowledged after the flood closed")
	}
	// Under the default --max-connections the log keeps its descriptors,
	// so segments must have rotated while the flood was held; at EMFILE
	// the puts may all be refused meanwhile.
	if alive && !oomOK && segsDuring == segsAtFlood {
		t.Errorf("no segment rotated while the flood was held (%d puts acknowledged meanwhile)", ackedDuring-ackedAtFlood)
	}
	stopServer(t, "sprout", s)
	verifyJobs(t, serverSpec{name: "sprout", binary: testproc.SproutBinary(t), args: []string{"-b", dir, "-f", "0"}}, acked)
}

// answered checks that c, using and watching a tube of its own, gets a
// put, reserve and delete, and stats answered. With oomOK a put answered
// OUT_OF_MEMORY counts as answered.
func answered(c *testproc.Conn, oomOK bool) error {
	if _, err := roundTrip(c, []byte("alive")); err != nil && !(oomOK && errors.Is(err, errOutOfMemory)) {
		return err
	}
	_, err := c.Stats("stats")
	return err
}

// newClientAnswered dials and probes until a new client is answered, and
// fails once within has passed.
func newClientAnswered(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		left := time.Until(deadline)
		err := testproc.Probe(addr, max(left, 10*time.Millisecond))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answered within %v: %w", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fdsReturn waits until pid holds at most want descriptors (a few more
// are allowed: a new segment, a probe still closing).
func fdsReturn(pid, want int, within time.Duration) (bool, procStat) {
	const slack = 4
	deadline := time.Now().Add(within)
	for {
		st, err := readProc(pid)
		if err != nil {
			return false, st
		}
		if st.fds <= want+slack {
			return true, st
		}
		if time.Now().After(deadline) {
			return false, st
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// segments counts the log segments in dir ("" counts 0).
func segments(t *testing.T, dir string) int {
	t.Helper()
	if dir == "" {
		return 0
	}
	names, err := filepath.Glob(filepath.Join(dir, "sprout.*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// flood opens connections that say nothing and notes which ones the
// server closes before the flood is released.
type flood struct {
	dialed  sync.WaitGroup // done once every dial has returned
	readers sync.WaitGroup // done once every connection has been classified

	mu    sync.Mutex
	conns []net.Conn // guarded by mu: every connection dialed

	held           atomic.Int64 // still open when released
	closedByServer atomic.Int64 // EOF or reset before release
	slowestClose   atomic.Int64 // nanoseconds from dial to the server's close, the slowest
	dialFailed     atomic.Int64
}

func startFlood(addr string, n int) *flood {
	f := &flood{}
	for d := range floodDialers {
		f.dialed.Add(1)
		go func() {
			defer f.dialed.Done()
			for i := d; i < n; i += floodDialers {
				t0 := time.Now()
				c, err := net.DialTimeout("tcp", addr, 3*time.Second)
				if err != nil {
					f.dialFailed.Add(1)
					continue
				}
				f.mu.Lock()
				f.conns = append(f.conns, c)
				f.mu.Unlock()
				f.readers.Add(1)
				go f.watch(c, t0)
			}
		}()
	}
	return f
}

// watch waits for the server to close c, or for the flood's release
// (after which a read fails on the closed connection, not with EOF).
func (f *flood) watch(c net.Conn, dialed time.Time) {
	defer f.readers.Done()
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // the test's own bound
	_, err := c.Read(b[:])
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		f.held.Add(1) // released, or the server wrote something, or the minute ran out
		return
	}
	f.closedByServer.Add(1)
	took := int64(time.Since(dialed))
	for {
		old := f.slowestClose.Load()
		if took <= old || f.slowestClose.CompareAndSwap(old, took) {
			return
		}
	}
}

// close releases the flood: every connection is reset (no TIME_WAIT left
// behind to hold ports for the next test).
func (f *flood) close() {
	f.dialed.Wait()
	f.mu.Lock()
	for _, c := range f.conns {
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	}
	f.mu.Unlock()
	f.readers.Wait()
}

// producer puts 1 KB jobs one after another on a connection of its own and
// keeps the ids acknowledged with INSERTED.
type producer struct {
	quit  *stopper
	done  chan struct{}
	mu    sync.Mutex
	acked []uint64 // guarded by mu
	// Written by the producer's goroutine before done is closed.
	oom int   // puts answered OUT_OF_MEMORY
	err error // what stopped it early
}

// putWait bounds the wait for one put's reply: a put held while the log
// has no descriptor for its next segment may wait out the flood.
const putWait = 30 * time.Second

func startProducer(t *testing.T, addr string) *producer {
	t.Helper()
	c := testproc.DialTest(t, addr, replyTimeout)
	if err := c.ExpectLine("use durable", "USING durable"); err != nil {
		t.Fatal(err)
	}
	p := &producer{quit: newStopper(), done: make(chan struct{})}
	body := bytes.Repeat([]byte("d"), 1000)
	frame := append(fmt.Appendf(nil, "put 0 0 60 %d\r\n", len(body)), body...)
	frame = append(frame, "\r\n"...)
	go func() {
		defer close(p.done)
		for !p.quit.stopping() {
			_ = c.SetDeadline(time.Now().Add(putWait))
			c.Write(frame)
			if err := c.Flush(); err != nil {
				p.err = err
				return
			}
			r, err := c.ReadReply(false)
			switch {
			case err != nil:
				p.err = fmt.Errorf("put: %w", err)
				return
			case r.Kind == testproc.ReplyInserted:
				p.mu.Lock()
				p.acked = append(p.acked, r.N)
				p.mu.Unlock()
			case string(r.Line) == "OUT_OF_MEMORY":
				p.oom++
				time.Sleep(10 * time.Millisecond)
			default:
				p.err = fmt.Errorf("put: got %q", r.Line)
				return
			}
		}
	}()
	return p
}

func (p *producer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

func (p *producer) stop() {
	p.quit.stop()
	<-p.done
}

func (p *producer) ids() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint64(nil), p.acked...)
}

// verifyJobs starts spec (a sprout on the directory the jobs were put
// into) and checks with stats-job that every acknowledged job is there.
func verifyJobs(t *testing.T, spec serverSpec, ids []uint64) {
	t.Helper()
	s := spec.start(t)
	c := testproc.DialTest(t, s.Addr(), replyTimeout)
	missing := 0
	var firstMissing []uint64
	const batch = 256
	for start := 0; start < len(ids); start += batch {
		part := ids[start:min(start+batch, len(ids))]
		_ = c.SetDeadline(time.Now().Add(replyTimeout))
		for _, id := range part {
			c.WriteCmdID("stats-job", id)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, id := range part {
			r, err := c.ReadReply(false)
			if err != nil {
				t.Fatalf("stats-job %d: %v", id, err)
			}
			if r.Kind != testproc.ReplyOK {
				missing++
				if len(firstMissing) < 10 {
					firstMissing = append(firstMissing, id)
				}
			}
		}
	}
	t.Logf("after a restart: %d of %d acknowledged jobs present", len(ids)-missing, len(ids))
	if missing > 0 {
		t.Errorf("%d acknowledged jobs lost across the restart (first: %v)", missing, firstMissing)
	}
	stopServer(t, spec.name, s)
}
