package replication

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// fakeLeader is a Proxy's view of the leader, set by the test.
type fakeLeader struct {
	// asked counts the calls of Leader: Route asks once per connection,
	// and the goroutine that serves it asks again before it waits.
	asked atomic.Int64

	mu      sync.Mutex
	info    LeaderInfo    // guarded by mu
	changed chan struct{} // guarded by mu
}

func newFakeLeader() *fakeLeader { return &fakeLeader{changed: make(chan struct{})} }

func (f *fakeLeader) Leader() (LeaderInfo, <-chan struct{}) {
	f.asked.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.info, f.changed
}

// waiting waits until the proxy has asked who leads twice since asked
// was before: a connection dialled since is with its goroutine, which
// found no leader to go to and waits for a change.
func (f *fakeLeader) waiting(t *testing.T, before int64) {
	t.Helper()
	testproc.WaitFor(t, 5*time.Second, "the connection waiting for a leader", func() bool {
		return f.asked.Load() >= before+2
	})
}

func (f *fakeLeader) set(info LeaderInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.info = info
	close(f.changed)
	f.changed = make(chan struct{})
}

// upstream is a leader's client port as the proxy sees it: each
// connection's lines are answered "NAME: LINE"; at the client's end of
// file it answers "NAME: bye" and closes.
type upstream struct {
	name string
	ln   net.Listener
	wg   sync.WaitGroup
}

func startUpstream(t *testing.T, name string) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{name: name, ln: ln}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						_, _ = io.WriteString(c, name+": bye\n")
						return
					}
					_, _ = io.WriteString(c, name+": "+line)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		u.wg.Wait()
	})
	return u
}

func (u *upstream) addr() string { return u.ln.Addr().String() }

// proxyFront is a listener whose connections go through Route, as the
// engine's accept loop sends them; local ones are recorded.
type proxyFront struct {
	ln    net.Listener
	local chan net.Conn
}

func startFront(t *testing.T, p *Proxy) *proxyFront {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &proxyFront{ln: ln, local: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.Route(c) {
				f.local <- c
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return f
}

type lineConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (f *proxyFront) dial(t *testing.T) *lineConn {
	t.Helper()
	c, err := net.Dial("tcp", f.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &lineConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (l *lineConn) send(s string) {
	l.t.Helper()
	if _, err := io.WriteString(l.c, s); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lineConn) read(timeout time.Duration) (string, error) {
	_ = l.c.SetReadDeadline(time.Now().Add(timeout))
	return l.r.ReadString('\n')
}

func (l *lineConn) expect(want string) {
	l.t.Helper()
	if got, err := l.read(5 * time.Second); got != want || err != nil {
		l.t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

func (l *lineConn) expectEOF() {
	l.t.Helper()
	if got, err := l.read(5 * time.Second); err != io.EOF {
		l.t.Fatalf("got %q, %v; want the connection closed", got, err)
	}
}

// startProxy runs a proxy for member "self" behind a front listener, with
// the leader it knows set to first (none, if zero); local serves what it
// gives back (nil: nothing may be).
func startProxy(t *testing.T, first LeaderInfo, wait time.Duration, local func(net.Conn)) (*fakeLeader, *Proxy, *proxyFront) {
	t.Helper()
	if local == nil {
		local = func(c net.Conn) { t.Errorf("served locally: %v", c.RemoteAddr()); _ = c.Close() }
	}
	leader := newFakeLeader()
	if first != (LeaderInfo{}) {
		leader.set(first)
	}
	p := NewProxy(ProxyConfig{Leader: leader.Leader, Self: "self", Local: local, Wait: wait})
	t.Cleanup(p.Close)
	return leader, p, startFront(t, p)
}

// A connection is copied to the leader both ways, in order; the client's
// half-close reaches the leader, whose last words and close come back.
func TestProxyCopiesAndHalfCloses(t *testing.T) {
	a := startUpstream(t, "a")
	_, p, front := startProxy(t, LeaderInfo{Name: "a", Client: a.addr(), Term: 2}, time.Second, nil)

	c := front.dial(t)
	c.send("one\ntwo\n")
	c.expect("a: one\n")
	c.expect("a: two\n")
	big := strings.Repeat("x", 1<<20) + "\n"
	c.send(big)
	if got, err := c.read(5 * time.Second); err != nil || got != "a: "+big {
		t.Fatalf("a 1 MiB line: %d bytes, %v", len(got), err)
	}
	c.send("three\n")
	if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.expect("a: three\n")
	c.expect("a: bye\n")
	c.expectEOF()
	testproc.WaitFor(t, 5*time.Second, "the proxied connection forgotten", func() bool { return p.Stats().Current == 0 })
	if st := p.Stats(); st.Total != 1 {
		t.Errorf("stats %+v, want one connection in all", st)
	}
}

// When the leader changes, connections to the old one close; new ones
// reach the new leader.
func TestProxyClosesOnLeaderChange(t *testing.T) {
	a, b := startUpstream(t, "a"), startUpstream(t, "b")
	leader, p, front := startProxy(t, LeaderInfo{Name: "a", Client: a.addr(), Term: 2}, time.Second, nil)

	old := front.dial(t)
	old.send("hi\n")
	old.expect("a: hi\n")
	leader.set(LeaderInfo{Name: "b", Client: b.addr(), Term: 3})
	old.expectEOF()
	c := front.dial(t)
	c.send("hi\n")
	c.expect("b: hi\n")
	testproc.WaitFor(t, 5*time.Second, "one connection open", func() bool { return p.Stats().Current == 1 })
	if st := p.Stats(); st.LeaderChanged != 1 || st.Total != 2 {
		t.Errorf("stats %+v, want one closed for the change and one open", st)
	}
}

// With no leader known a connection waits; a leader found within the
// wait serves it, and none closes it when the wait is over.
func TestProxyWaitsForALeader(t *testing.T) {
	a := startUpstream(t, "a")
	leader, p, front := startProxy(t, LeaderInfo{}, 300*time.Millisecond, nil)

	start := time.Now()
	lonely := front.dial(t)
	lonely.expectEOF()
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("closed after %v; the wait is 300ms", waited)
	}
	if st := p.Stats(); st.NoLeader != 1 {
		t.Errorf("stats %+v, want one closed for want of a leader", st)
	}

	before := leader.asked.Load()
	c := front.dial(t)
	c.send("early\n")
	leader.waiting(t, before)
	leader.set(LeaderInfo{Name: "a", Client: a.addr(), Term: 2})
	c.expect("a: early\n")
}

// A leader that cannot be reached is tried again, and a change of leader
// is taken at once; this member's own leadership is waited for until it
// serves, and the connection is then given to the engine.
func TestProxyUnreachableAndSelf(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	b := startUpstream(t, "b")
	locals := make(chan net.Conn, 1)
	leader, p, front := startProxy(t, LeaderInfo{Name: "a", Client: deadAddr, Term: 2}, 5*time.Second,
		func(c net.Conn) { locals <- c })

	c := front.dial(t)
	c.send("hi\n")
	testproc.WaitFor(t, 5*time.Second, "a failed dial", func() bool { return p.Stats().DialFailures > 0 })
	leader.set(LeaderInfo{Name: "b", Client: b.addr(), Term: 3})
	c.expect("b: hi\n")

	leader.set(LeaderInfo{Name: "self", Client: "127.0.0.1:1", Term: 4})
	c.expectEOF() // b is no longer the leader
	before := leader.asked.Load()
	mine := front.dial(t)
	leader.waiting(t, before) // self leads but does not serve
	select {
	case <-locals:
		t.Fatal("served locally before this member serves")
	default:
	}
	leader.set(LeaderInfo{Name: "self", Client: "127.0.0.1:1", Term: 4, Serving: true})
	select {
	case nc := <-locals:
		if nc.RemoteAddr().String() != mine.c.LocalAddr().String() {
			t.Errorf("another connection given back: %v", nc.RemoteAddr())
		}
		_ = nc.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("not given back once this member serves")
	}
	// And while it serves, Route leaves new connections to the engine.
	front.dial(t)
	select {
	case nc := <-front.local:
		_ = nc.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("Route took a connection while this member serves")
	}
}

// Close ends every connection, proxied or waiting, and later ones.
func TestProxyClose(t *testing.T) {
	a := startUpstream(t, "a")
	leader, p, front := startProxy(t, LeaderInfo{Name: "a", Client: a.addr(), Term: 2}, 5*time.Second, nil)
	c := front.dial(t)
	c.send("hi\n")
	c.expect("a: hi\n")
	leader.set(LeaderInfo{})
	c.expectEOF() // no leader known: nothing to stay connected to
	before := leader.asked.Load()
	waiting := front.dial(t)
	leader.waiting(t, before)
	p.Close()
	waiting.expectEOF()
	late := front.dial(t)
	if _, err := late.read(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Errorf("a connection after Close: %v, want it closed", err)
	}
}
