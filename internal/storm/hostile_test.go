package storm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

const (
	// politeEvery is the pace of the polite client's round trips.
	politeEvery = 10 * time.Millisecond
	// attackTime is how long each hostile phase lasts.
	attackTime = 2 * time.Second
	// settleTime lets a server finish with its setup before its RSS is
	// taken as the base.
	settleTime = 300 * time.Millisecond
	// afterWithin bounds the wait for a server to be back in order once
	// the hostile clients are gone.
	afterWithin = 5 * time.Second

	// Loose bounds, asserted on every run: they catch breakage only.
	looseRSSGrowth   = 64 << 20
	looseWorstPolite = time.Second
	// Goals, reported on every run and asserted with SPROUT_STORM_GOALS=1.
	goalMixRSSGrowth  = 16 << 20
	goalWorstPolite   = 50 * time.Millisecond
	hoardJobs         = 1500
	hoardBody         = 60_000
	pipelinedReserves = 1500
	reservers         = 8
	statsFlooders     = 8
	slowlorisConns    = 500
	halfClosers       = 50
)

// hostileCase is one kind of abuse.
type hostileCase struct {
	name string
	// sproutArgs are extra flags for sprout (not beanstalkd).
	sproutArgs []string
	// setup runs before the server's RSS is taken as the base.
	setup func(ctl *testproc.Conn) error
	// attack starts the hostile clients on m; they run until it disperses.
	attack func(m *mob, addr string) error
	// inspect runs at the end of the hostile phase, the clients still
	// there; nil to skip.
	inspect func(m *mob, ctl *testproc.Conn) error
	// after must hold once the hostile clients are gone.
	after func(ctl *testproc.Conn) error
	// mix marks the run the memory goal is about.
	mix bool
	// sproutOnly skips the comparison with beanstalkd.
	sproutOnly bool
}

// TestHostileClients runs each kind of abuse against a fresh sprout, then
// against a fresh beanstalkd for comparison, while a polite client does a
// put/reserve/delete round trip every 10 ms in a tube of its own:
//
//   - slowloris: 500 connections holding a partial command line or a
//     partial put body, dripping a byte now and then;
//   - long-lines: 4 connections sending 64 MiB each with no "\r\n";
//   - huge-put: `put 0 0 0 4294967295`, then 256 MiB of body;
//   - reservers: 1,500 jobs of 60 KB; 8 clients each pipeline 1,500
//     `reserve-with-timeout 0` and never read;
//   - stats-flood: 8 clients send stats after stats and never read;
//   - half-close: 50 clients wait in reserve, shut their write side down,
//     and 50 jobs are put into the tube they watched at once;
//   - mix: reservers and stats-flood together;
//   - buffer-budget (sprout only): the reservers under
//     --max-buffer-memory 1 MiB, which must close some of them.
//
// On sprout, strictly: the server stays up, the polite client is answered
// every time, and once the hostile clients are gone no job is lost or left
// reserved and only the control connection remains. Loosely (breakage
// only): RSS growth over the level after setup < 64 MiB, the polite
// client's worst reply < 1 s (256 MiB and 4 s for a race-built server).
// Goals (SPROUT_STORM_GOALS=1): mix RSS growth ≤ 16 MiB, worst polite reply
// < 50 ms. beanstalkd's figures are logged.
func TestHostileClients(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and abuses them for several seconds each")
	}
	for _, hc := range hostileCases() {
		t.Run(hc.name, func(t *testing.T) {
			bin := testproc.SproutBinary(t)
			sp := hostileRun(t, serverSpec{name: "sprout", binary: bin, args: sproutArgs(t, bin, hc.sproutArgs...)}, hc)
			sp.report(t, hc)
			sp.assert(t, hc)
			if hc.sproutOnly {
				return
			}
			bs := hostileRun(t, serverSpec{name: "beanstalkd", binary: testproc.Beanstalkd(t)}, hc)
			bs.report(t, hc)
		})
	}
}

func hostileCases() []hostileCase {
	hoardAfter := func(ctl *testproc.Conn) error { return tubeHolds(ctl, "hoard", hoardJobs) }
	noneInDefault := func(ctl *testproc.Conn) error { return tubeHolds(ctl, "default", 0) }
	reserversAndStats := func(m *mob, addr string) error {
		if err := reserve(m, addr); err != nil {
			return err
		}
		return statsFlood(m, addr)
	}
	return []hostileCase{
		{name: "slowloris", attack: slowloris, after: noneInDefault},
		{name: "long-lines", attack: longLines, after: noneInDefault},
		{name: "huge-put", attack: hugePut, after: noneInDefault},
		{name: "reservers", setup: fillHoard, attack: reserve, after: hoardAfter},
		{name: "stats-flood", attack: statsFlood, after: noneInDefault},
		{name: "half-close", attack: halfClose, inspect: halfClosedEnded,
			after: func(ctl *testproc.Conn) error { return tubeHolds(ctl, "empty", halfClosers) }},
		{name: "mix", setup: fillHoard, attack: reserversAndStats, after: hoardAfter, mix: true},
		{name: "buffer-budget", sproutArgs: []string{"--max-buffer-memory", "1048576"}, setup: fillHoard,
			attack: reserve, inspect: someReserverClosed, after: hoardAfter, sproutOnly: true},
	}
}

// hostileResult is what one run measured.
type hostileResult struct {
	server   string
	growth   int64 // peak RSS over the level after setup
	base     procStat
	rounds   int
	worst    time.Duration
	politeOK error // nil when every polite round trip was answered
	alive    bool  // the server was up at the end of the attack
	output   string
	attack   error // setting up the attack failed
	inspect  error
	after    error // the state once the hostile clients are gone
	notes    []string
}

func hostileRun(t *testing.T, spec serverSpec, hc hostileCase) hostileResult {
	t.Helper()
	s := spec.start(t)
	res := hostileResult{server: spec.name}
	ctl := testproc.DialTest(t, s.Addr(), replyTimeout)
	if hc.setup != nil {
		if err := hc.setup(ctl); err != nil {
			t.Fatalf("%s: setup: %v", spec.name, err)
		}
	}
	time.Sleep(settleTime)
	res.base = mustReadProc(t, s.PID())
	w := watchRSS(t, s.PID())
	pol := startPolite(t, s.Addr())
	m := newMob()
	res.attack = hc.attack(m, s.Addr())
	for end := time.Now().Add(attackTime); time.Now().Before(end) && !s.Exited(); {
		time.Sleep(50 * time.Millisecond)
	}
	if hc.inspect != nil && res.attack == nil {
		res.inspect = hc.inspect(m, ctl)
	}
	m.disperse()
	pol.stop()
	res.alive = !s.Exited()
	res.growth = w.growth()
	res.rounds, res.worst, res.politeOK = pol.rounds, pol.worst, pol.err
	res.notes = m.notes()
	if res.alive {
		res.after = settled(ctl, hc.after)
	}
	res.output = s.Output()
	if spec.name == "sprout" {
		stopServer(t, spec.name, s)
	} else {
		s.Stop(stopGrace)
	}
	return res
}

// settled waits until the control connection is the server's only one and
// after holds.
func settled(ctl *testproc.Conn, after func(*testproc.Conn) error) error {
	deadline := time.Now().Add(afterWithin)
	for {
		err := func() error {
			v, err := ctl.StatsInt("stats", "current-connections", "current-jobs-reserved")
			if err != nil {
				return err
			}
			if v[0] != 1 || v[1] != 0 {
				return fmt.Errorf("%d connections and %d reserved jobs; want only the control connection and none reserved", v[0], v[1])
			}
			if err := tubeHolds(ctl, "polite", 0); err != nil {
				return err
			}
			if after != nil {
				return after(ctl)
			}
			return nil
		}()
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				err = fmt.Errorf("%v after the hostile clients left: %w", afterWithin, err)
			}
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r hostileResult) report(t *testing.T, hc hostileCase) {
	t.Helper()
	t.Logf("%s: RSS %s after setup, peak growth %s during the attack; polite client: %d round trips, worst reply %v",
		r.server, mib(r.base.RSS), mib(r.growth), r.rounds, r.worst.Round(10*time.Microsecond))
	for _, n := range r.notes {
		t.Logf("%s: %s", r.server, n)
	}
	if r.server != "sprout" {
		for _, err := range []error{r.attack, r.inspect, r.politeOK, r.after} {
			if err != nil {
				t.Logf("%s (not asserted): %v", r.server, err)
			}
		}
		if !r.alive {
			t.Logf("%s (not asserted): died", r.server)
		}
		return
	}
	if hc.mix {
		raceGoal(t, r.growth <= goalMixRSSGrowth, "sprout's RSS growth under the mix %s ≤ %s", mib(r.growth), mib(goalMixRSSGrowth))
	}
	raceGoal(t, r.worst < goalWorstPolite, "sprout's worst polite reply %v < %v", r.worst.Round(10*time.Microsecond), goalWorstPolite)
}

func (r hostileResult) assert(t *testing.T, hc hostileCase) {
	t.Helper()
	if r.attack != nil {
		t.Errorf("setting up the attack: %v", r.attack)
	}
	if !r.alive {
		t.Fatalf("sprout died under %s:\n%s", hc.name, tail(r.output))
	}
	if r.politeOK != nil {
		t.Errorf("polite client after %d round trips: %v", r.rounds, r.politeOK)
	}
	if r.inspect != nil {
		t.Errorf("during the attack: %v", r.inspect)
	}
	if r.after != nil {
		t.Errorf("%v", r.after)
	}
	if bound := looseRSSGrowth * raceMemory(); r.growth >= bound {
		t.Errorf("RSS grew by %s under %s; the loose bound is %s", mib(r.growth), hc.name, mib(bound))
	}
	if bound := looseWorstPolite * raceSlowdown(); r.worst >= bound {
		t.Errorf("the polite client waited %v for a reply; the loose bound is %v", r.worst, bound)
	}
}

// tubeHolds checks that tube has want ready jobs and none reserved. With
// more ready, the error shows the first: a job none of the test's clients
// put is told apart from one the server kept.
func tubeHolds(ctl *testproc.Conn, tube string, want int64) error {
	v, err := ctl.StatsInt("stats-tube "+tube, "current-jobs-ready", "current-jobs-reserved")
	if want == 0 && errors.Is(err, testproc.ErrNotFound) {
		return nil // never made, or gone once empty
	}
	if err != nil {
		return err
	}
	if v[0] != want || v[1] != 0 {
		err := fmt.Errorf("tube %s: %d ready and %d reserved, want %d ready and none reserved", tube, v[0], v[1], want)
		if v[0] > want {
			err = fmt.Errorf("%w; the first ready: %s", err, firstReady(ctl, tube))
		}
		return err
	}
	return nil
}

// firstReady describes the first ready job of tube, which ctl then uses.
func firstReady(ctl *testproc.Conn, tube string) string {
	if err := ctl.ExpectLine("use "+tube, "USING "+tube); err != nil {
		return err.Error()
	}
	r, err := ctl.Do("peek-ready", nil)
	if err != nil || r.Kind != testproc.ReplyFound {
		return fmt.Sprintf("peek-ready: %q, %v", r.Line, err)
	}
	m, err := ctl.Stats(fmt.Sprintf("stats-job %d", r.N))
	if err != nil {
		return err.Error()
	}
	body := string(r.Body)
	if len(body) > 64 {
		body = body[:64] + "…"
	}
	return fmt.Sprintf("job %d, body %q (%d bytes), pri %s, age %s s, ttr %s", r.N, body, len(r.Body), m["pri"], m["age"], m["ttr"])
}

// fillHoard puts hoardJobs jobs of hoardBody bytes into tube hoard.
func fillHoard(ctl *testproc.Conn) error {
	if err := ctl.ExpectLine("use hoard", "USING hoard"); err != nil {
		return err
	}
	frame := testproc.PutFrame(hoardBody)
	// Small batches: the control connection must not look like the
	// biggest holder of buffers to a server on a tight budget.
	const batch = 8
	for done := 0; done < hoardJobs; done += batch {
		_ = ctl.SetDeadline(time.Now().Add(replyTimeout))
		for range min(batch, hoardJobs-done) {
			ctl.Write(frame)
		}
		if err := ctl.Flush(); err != nil {
			return err
		}
		for range min(batch, hoardJobs-done) {
			if _, err := ctl.Expect(testproc.ReplyInserted); err != nil {
				return err
			}
		}
	}
	return nil
}

// mob is a crowd of hostile connections and the goroutines driving them.
type mob struct {
	*stopper
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn       // guarded by mu
	tally map[string]int64 // guarded by mu: named counts for the report
	order []string         // guarded by mu: tally's names in first-seen order
}

func newMob() *mob { return &mob{stopper: newStopper(), tally: make(map[string]int64)} }

// dial opens a connection the mob resets when it disperses.
func (m *mob) dial(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, replyTimeout)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.conns = append(m.conns, c)
	m.mu.Unlock()
	return c, nil
}

// spawn runs f until it returns; disperse waits for it.
func (m *mob) spawn(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// count adds n to the named tally.
func (m *mob) count(name string, n int64) {
	m.mu.Lock()
	if _, ok := m.tally[name]; !ok {
		m.order = append(m.order, name)
	}
	m.tally[name] += n
	m.mu.Unlock()
}

func (m *mob) get(name string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tally[name]
}

func (m *mob) notes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, name := range m.order {
		out = append(out, fmt.Sprintf("%s: %d", name, m.tally[name]))
	}
	return out
}

// disperse stops the goroutines and resets every connection.
func (m *mob) disperse() {
	m.stop()
	m.mu.Lock()
	for _, c := range m.conns {
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// stream writes chunk to c again and again, up to limit bytes, until the
// mob disperses or the server stops taking them; it counts what went in.
func (m *mob) stream(c net.Conn, chunk []byte, limit int64, counter string) {
	var sent int64
	defer func() { m.count(counter, sent) }()
	for sent < limit && !m.stopping() {
		_ = c.SetWriteDeadline(time.Now().Add(attackTime + afterWithin))
		n, err := c.Write(chunk)
		sent += int64(n)
		if err != nil {
			if !m.stopping() {
				m.count("connections the server closed while they wrote", 1)
			}
			return
		}
	}
}

// streamers opens n connections that each stream chunk, up to limit
// bytes.
func (m *mob) streamers(addr string, n int, chunk []byte, limit int64, counter string) error {
	for i := range n {
		c, err := m.dial(addr)
		if err != nil {
			return fmt.Errorf("connection %d of %d: %w", i+1, n, err)
		}
		m.spawn(func() { m.stream(c, chunk, limit, counter) })
	}
	return nil
}

// slowloris holds partial command lines and partial put bodies open,
// dripping a byte into each every 500 ms.
func slowloris(m *mob, addr string) error {
	conns := make([]net.Conn, 0, slowlorisConns)
	for i := range slowlorisConns {
		c, err := m.dial(addr)
		if err != nil {
			return fmt.Errorf("slowloris connection %d: %w", i, err)
		}
		start := "reserve-with-tim" // a command line, never ended
		if i%2 == 0 {
			start = "put 0 0 60 1024\r\n" + strings.Repeat("b", 512) // half a body
		}
		if _, err := c.Write([]byte(start)); err != nil {
			return err
		}
		conns = append(conns, c)
	}
	m.count("slowloris connections", int64(len(conns)))
	m.spawn(func() {
		m.every(500*time.Millisecond, func() bool {
			for _, c := range conns {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write([]byte("x")); err != nil {
					m.count("slowloris connections closed by the server", 1)
				}
			}
			return true
		})
	})
	return nil
}

// longLines sends 64 MiB on each of 4 connections without a line end.
func longLines(m *mob, addr string) error {
	return m.streamers(addr, 4, bytes.Repeat([]byte("x"), 64<<10), 64<<20, "bytes sent without a line end")
}

// hugePut declares a 4 GiB body and streams 256 MiB of it.
func hugePut(m *mob, addr string) error {
	c, err := m.dial(addr)
	if err != nil {
		return err
	}
	if _, err := c.Write([]byte("put 0 0 0 4294967295\r\n")); err != nil {
		return err
	}
	chunk := bytes.Repeat([]byte("y"), 64<<10)
	m.spawn(func() { m.stream(c, chunk, 256<<20, "body bytes sent") })
	m.spawn(func() { readReplies(m, c, "huge-put") })
	return nil
}

// readReplies notes the first reply line on c, if any comes.
func readReplies(m *mob, c net.Conn, who string) {
	_ = c.SetReadDeadline(time.Now().Add(attackTime + afterWithin))
	var b [64]byte
	n, err := c.Read(b[:])
	if n > 0 {
		line, _, _ := bytes.Cut(b[:n], []byte("\r\n"))
		m.count(fmt.Sprintf("%s replies starting %q", who, line), 1)
	} else if err != nil && !m.stopping() {
		m.count(who+" connections closed by the server", 1)
	}
}

// reserve starts the never-reading reservers: each watches hoard and
// pipelines pipelinedReserves reserve-with-timeout 0.
func reserve(m *mob, addr string) error {
	script := []byte("watch hoard\r\nignore default\r\n" +
		strings.Repeat("reserve-with-timeout 0\r\n", pipelinedReserves))
	for i := range reservers {
		c, err := m.dial(addr)
		if err != nil {
			return fmt.Errorf("reserver %d: %w", i, err)
		}
		// A small, fixed receive buffer: the kernel holds little of what
		// the client never reads, whatever the machine's autotuning, so
		// the server has to.
		if err := c.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
			return err
		}
		// A server may stop reading a client that does not read; the
		// write then waits until the mob disperses.
		m.spawn(func() { m.stream(c, script, int64(len(script)), "reserve bytes sent") })
	}
	return nil
}

// statsFlood sends stats after stats on statsFlooders connections, 8 MiB
// each, and never reads.
func statsFlood(m *mob, addr string) error {
	return m.streamers(addr, statsFlooders, bytes.Repeat([]byte("stats\r\n"), 64<<10/7), 8<<20, "stats bytes sent")
}

// halfClose has halfClosers clients wait in reserve on tube empty, shut
// their write side down, and then puts as many jobs into empty: none may
// go to a half-closed client and stay reserved.
func halfClose(m *mob, addr string) error {
	ctl, err := testproc.Dial(addr, replyTimeout)
	if err != nil {
		return err
	}
	defer ctl.Close()
	conns := make([]*net.TCPConn, 0, halfClosers)
	for i := range halfClosers {
		c, err := m.dial(addr)
		if err != nil {
			return fmt.Errorf("half-closer %d: %w", i, err)
		}
		if _, err := c.Write([]byte("watch empty\r\nignore default\r\nreserve\r\n")); err != nil {
			return err
		}
		conns = append(conns, c.(*net.TCPConn))
	}
	for deadline := time.Now().Add(replyTimeout); ; {
		v, err := ctl.StatsInt("stats", "current-waiting")
		if err != nil {
			return err
		}
		if v[0] >= halfClosers {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d half-closers are waiting", v[0], halfClosers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range conns {
		if err := c.CloseWrite(); err != nil {
			return err
		}
		m.spawn(func() { untilEOF(m, c) })
	}
	if err := ctl.ExpectLine("use empty", "USING empty"); err != nil {
		return err
	}
	for range halfClosers {
		if r, err := ctl.Do("put 0 0 60 4", []byte("half")); err != nil || r.Kind != testproc.ReplyInserted {
			return fmt.Errorf("put into empty: %q, %v", r.Line, err)
		}
	}
	return nil
}

// untilEOF reads what the server sends a half-closed client until it
// closes the connection, and notes the replies.
func untilEOF(m *mob, c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(attackTime))
	got, err := io.ReadAll(c)
	var word string
	for line := range strings.SplitSeq(string(got), "\r\n") {
		if w, _, _ := strings.Cut(line, " "); w == "TIMED_OUT" || w == "RESERVED" {
			word = w
			m.count("half-closed clients answered "+w, 1)
		}
	}
	if word == "" {
		m.count("half-closed clients answered nothing", 1)
	}
	if err == nil || errors.Is(err, syscall.ECONNRESET) {
		m.count("half-closed clients closed by the server", 1)
	}
}

// halfClosedEnded requires the server to have closed every half-closed
// client by the end of the attack.
func halfClosedEnded(m *mob, _ *testproc.Conn) error {
	m.wg.Wait() // every untilEOF has returned: EOF or its deadline
	if n := m.get("half-closed clients closed by the server"); n != halfClosers {
		return fmt.Errorf("%d of %d half-closed clients were closed by the server", n, halfClosers)
	}
	return nil
}

// someReserverClosed requires the server to have closed at least one of
// the never-reading reservers while they were connected: under
// --max-buffer-memory 1 MiB, 8 reservers each holding up to --max-output
// of unread replies are over budget. The server's own count tells: the
// control and polite connections and the reservers left.
func someReserverClosed(m *mob, ctl *testproc.Conn) error {
	v, err := ctl.StatsInt("stats", "current-connections")
	if err != nil {
		return err
	}
	open := v[0] - 2
	m.count("reservers the server still served at the end", open)
	if open >= reservers {
		return fmt.Errorf("all %d never-reading reservers still connected: nothing was closed to keep within --max-buffer-memory", reservers)
	}
	return nil
}

// polite is a well-behaved client doing a put/reserve/delete round trip
// every politeEvery in a tube of its own, until stopped.
type polite struct {
	conn *testproc.Conn // only touched by the client's goroutine until done
	quit *stopper
	done chan struct{}
	// Written by the client's goroutine before done is closed.
	rounds int
	worst  time.Duration // slowest single reply
	err    error         // the first failure; the client stops at it
}

func startPolite(t *testing.T, addr string) *polite {
	t.Helper()
	c := testproc.DialTest(t, addr, replyTimeout)
	if err := useOnly(c, "polite"); err != nil {
		t.Fatalf("polite client: %v", err)
	}
	p := &polite{conn: c, quit: newStopper(), done: make(chan struct{})}
	body := []byte("a polite job")
	go func() {
		defer close(p.done)
		p.quit.every(politeEvery, func() bool {
			worst, err := roundTrip(c, body)
			p.worst = max(p.worst, worst)
			if err != nil {
				p.err = err
				return false
			}
			p.rounds++
			return true
		})
	}()
	return p
}

// stop ends the round trips, waits for the one in flight and closes the
// connection.
func (p *polite) stop() {
	p.quit.stop()
	<-p.done
	p.conn.Close()
}
