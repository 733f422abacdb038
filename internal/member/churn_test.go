package member

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestShardGroupsChurnLeavesNothing: clients that come and go through
// every member of a cluster of one group and of three, each session
// using and watching tubes (of several groups: reserving across them),
// and ending every way a client can (quit, a close while it holds jobs,
// a close while its reserve waits, a close with puts unanswered), while
// each group's leadership is handed over once and (with three) a tube
// moves to another group, or (groups=3,crash) a member leading a group
// stops as a crash stops it and starts again, leave nothing behind
// once they are gone: no session, owner client or unanswered call on
// any member, no job reserved or reserve waiting in any group, no
// reference to any tube, no goroutine more than before; and every
// acknowledged job is there, with its body, unless one DELETED answered
// for it, and none was deleted twice. A leak here is one a long-running
// cluster would accumulate. SPROUT_CHURN (a duration, default 4s) sets
// how long the clients churn: `make soak` runs it for minutes.
func TestShardGroupsChurnLeavesNothing(t *testing.T) {
	churn := 4 * time.Second
	if v := os.Getenv("SPROUT_CHURN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SPROUT_CHURN=%q: %v", v, err)
		}
		churn = d
	}
	for _, groups := range []int{1, 3} {
		t.Run(fmt.Sprintf("groups=%d", groups), func(t *testing.T) { churnLeavesNothing(t, groups, churn, false) })
	}
	t.Run("groups=3,crash", func(t *testing.T) { churnLeavesNothing(t, 3, churn, true) })
}

// churnLeavesNothing is TestShardGroupsChurnLeavesNothing on three
// members of groups groups (1 or 3), for churn; with crash, m3 stops
// halfway as a crash stops it (handing nothing over) and starts again
// a second later, instead of the handovers and the move.
func churnLeavesNothing(t *testing.T, groups int, churn time.Duration, crash bool) {
	c := newShardedCluster(t, groups)
	c.finalized()
	tubes := []string{"churn-a", "churn-b"}
	if groups > 1 {
		c.balanced()
		// Two tubes a group, and default.
		p := c.up["m1"].shards.placement
		tubes = append(tubePerGroup(p, "churn-a"), tubePerGroup(p, "churn-b")...)
	}
	addrs := &memberAddrs{}
	for _, name := range []string{"m1", "m2", "m3"} {
		addrs.list = append(addrs.list, c.up[name].Addr().String())
	}
	for _, addr := range addrs.list {
		warm := testproc.DialTest(t, addr, replyTimeout)
		for _, tube := range tubes {
			expectLine(t, warm, "use "+tube, "USING "+tube)
			expectLine(t, warm, "watch "+tube, "WATCHING 2")
			if _, err := warm.Put(0, 0, 60, []byte("warm")); err != nil {
				t.Fatal(err)
			}
			if r, err := warm.Do("reserve-with-timeout 0", nil); err != nil || r.Kind != testproc.ReplyReserved {
				t.Fatalf("warming up: %q %v", r.Line, err)
			} else {
				expectLine(t, warm, "delete "+strconv.FormatUint(r.N, 10), "DELETED")
			}
			expectLine(t, warm, "ignore "+tube, "WATCHING 1")
		}
		warm.Close()
	}
	c.leaveNothing(groups, tubes, nil)
	goroutines := ownGoroutines()

	// A member crashed closes its clients, and the leader's own close
	// with one group when its leadership goes.
	b := &churnBook{closes: groups == 1 || crash, downs: crash, bodies: map[uint64]string{}, deleted: map[uint64]int{}, maybe: map[uint64]bool{}}
	end := time.Now().Add(churn)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for n := 0; time.Now().Before(end) && !t.Failed(); n++ {
				if err := churnSession(rng, addrs.at(w), tubes, fmt.Sprintf("w%d-s%d", w, n), b); err != nil {
					t.Errorf("worker %d, session %d: %v", w, n, err)
				}
			}
		})
	}
	// What happens to the cluster under them, on the test's goroutine
	// (c.up is its own): halfway, a crash of m3 and its start again; or
	// each group's leadership handed over, one at a time, as the
	// balancer and a shutdown hand it (no client's connection closes for
	// it, and what the sessions hold there goes with it), and later (with
	// three groups) a tube moved to another group under them, where
	// their commands for it go again.
	time.Sleep(churn / 2)
	switch {
	case crash:
		c.crashLeader("m3", c.ledBy("m3"))
		time.Sleep(time.Second)
		addrs.set(2, c.start("m3").Addr().String()) // on a new client port
	default:
		for g := range uint16(groups) {
			l := c.leaderOf(g)
			to := "m1"
			if l == c.up["m1"] {
				to = "m2"
			}
			if err := l.handOver(l.shards.node(g), g, to); err != nil {
				t.Errorf("handing group %d over: %v", g, err)
				break
			}
			testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("group %d handed over", g), func() bool {
				return c.leaderOf(g) != l
			})
		}
		if groups > 1 {
			time.Sleep(time.Until(end.Add(-churn / 4)))
			from := c.up["m1"].shards.placement.Owner(tubes[0])
			to := (int(from) + 1) % groups
			if status, _, body := moveTubeThrough(t, c.up["m2"], tubes[0], to); status != http.StatusOK {
				t.Errorf("moving %s from group %d to %d: %d %s", tubes[0], from, to, status, body)
			}
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d sessions, %d closed under their clients; %d puts acknowledged, %d deleted, %d puts left unanswered", b.sessions, b.closed, len(b.bodies), len(b.deleted), b.unanswered)
	if len(b.bodies) == 0 || len(b.deleted) == 0 {
		t.Fatalf("the churn put %d jobs and deleted %d: it tested nothing", len(b.bodies), len(b.deleted))
	}
	c.leaveNothing(groups, tubes, b)
	testproc.WaitForWhy(t, 10*time.Second, "the goroutines back to before the churn", func() (bool, string) {
		n := ownGoroutines()
		// A few come and go with the timers of a live cluster.
		return n <= goroutines+8, fmt.Sprintf("%d goroutines, %d before", n, goroutines)
	})
}

// memberAddrs are the members' client addresses, which the workers
// read while a member crashed starts again on a new one.
type memberAddrs struct {
	mu   sync.Mutex
	list []string
}

// at is worker w's member's address.
func (a *memberAddrs) at(w int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.list[w%len(a.list)]
}

func (a *memberAddrs) set(i int, addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.list[i] = addr
}

// ownGoroutines counts the process's goroutines but those of HTTP
// connections kept alive (the admin API's clients and servers: a tube's
// move is asked through one member, which asks its group's leader).
func ownGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "net/http.") {
			count++
		}
	}
	return count
}

// churnBook is what the churn's clients were told: each acknowledged
// job's body, and how many times each deleted job was answered DELETED.
type churnBook struct {
	// closes: a client's connection may close under it, the leader's
	// own clients with one group, when its leadership goes (a session
	// of one group's leader lives on its store). downs: a member may be
	// down, or shutting down (refusing a put DRAINING), when a client
	// dials it.
	closes, downs bool

	mu      sync.Mutex
	bodies  map[uint64]string
	deleted map[uint64]int
	// maybe are the jobs whose delete's connection closed before its
	// answer; unanswered counts the puts whose connection closed before
	// theirs.
	maybe      map[uint64]bool
	unanswered int
	sessions   int
	closed     int // the connections closed under their clients
}

func (b *churnBook) put(id uint64, body string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.bodies[id]; ok {
		return fmt.Errorf("id %d acknowledged for %q and again for %q", id, old, body)
	}
	b.bodies[id] = body
	return nil
}

func (b *churnBook) deleteOf(id uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.deleted[id]++; b.deleted[id] > 1 {
		return fmt.Errorf("job %d answered DELETED %d times", id, b.deleted[id])
	}
	return nil
}

func (b *churnBook) bodyOf(id uint64) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	body, ok := b.bodies[id]
	return body, ok
}

// churnSession is one client's session through addr: it uses and
// watches some of tubes, puts, reserves (across groups when it watches
// several), deletes, releases, buries, touches and kicks, and ends one of
// the ways a client ends.
func churnSession(rng *rand.Rand, addr string, tubes []string, name string, b *churnBook) error {
	conn, err := testproc.Dial(addr, replyTimeout)
	if err != nil {
		if b.downs {
			time.Sleep(50 * time.Millisecond)
			return nil // its member is down
		}
		return err
	}
	defer conn.Close()
	b.mu.Lock()
	b.sessions++
	b.mu.Unlock()
	// What the command on its way did, if its connection closed before
	// the answer: a put, a delete of a job, or neither.
	var putting bool
	var deleting uint64
	err = churnCommands(conn, rng, tubes, name, b, &putting, &deleting)
	if err == nil || !b.closedUnder(err) {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	if putting {
		b.unanswered++
	}
	if deleting != 0 {
		b.maybe[deleting] = true
	}
	return nil
}

// closedUnder reports whether err is the server closing the connection
// (closes), or refusing a put while it shuts down (downs).
func (b *churnBook) closedUnder(err error) bool {
	var pe *testproc.ProtocolError
	if errors.As(err, &pe) && pe.Got == "DRAINING" {
		return b.downs
	}
	return b.closes && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// churnCommands is churnSession's commands on conn; putting and deleting
// say what the command on its way does, for a connection closed under
// it.
func churnCommands(conn *testproc.Conn, rng *rand.Rand, tubes []string, name string, b *churnBook, putting *bool, deleting *uint64) error {
	pick := func() string { return tubes[rng.IntN(len(tubes))] }
	expect := func(line string, want ...string) (testproc.Reply, error) {
		r, err := conn.Do(line, nil)
		if err != nil {
			return r, err
		}
		for _, w := range want {
			if strings.HasPrefix(string(r.Line), w) {
				return r, nil
			}
		}
		return r, fmt.Errorf("%s: %q, want one of %q", line, r.Line, want)
	}
	if rng.IntN(3) > 0 {
		tube := pick()
		if _, err := expect("use "+tube, "USING "+tube); err != nil {
			return err
		}
	}
	for range rng.IntN(4) {
		if _, err := expect("watch "+pick(), "WATCHING "); err != nil {
			return err
		}
	}
	if rng.IntN(2) == 0 {
		if _, err := expect("ignore default", "WATCHING ", "NOT_IGNORED"); err != nil {
			return err
		}
	}
	var held []uint64
	for i := range 1 + rng.IntN(24) {
		switch op := rng.IntN(10); {
		case op < 4:
			body := fmt.Sprintf("%s-%d", name, i)
			delay := 0
			if rng.IntN(10) == 0 {
				delay = 1
			}
			*putting = true
			id, err := conn.Put(uint32(rng.IntN(4)), delay, 1+rng.IntN(3), []byte(body))
			if err != nil {
				return err
			}
			*putting = false
			if err := b.put(id, body); err != nil {
				return err
			}
		case op < 7:
			r, err := conn.Do(fmt.Sprintf("reserve-with-timeout %d", rng.IntN(2)), nil)
			if err != nil {
				return err
			}
			switch r.Kind {
			case testproc.ReplyReserved:
				if body, ok := b.bodyOf(r.N); ok && body != string(r.Body) {
					return fmt.Errorf("job %d reserved with %q, put with %q", r.N, r.Body, body)
				}
				held = append(held, r.N)
			case testproc.ReplyTimedOut, testproc.ReplyDeadlineSoon:
			default:
				return fmt.Errorf("reserve: %q", r.Line)
			}
		case op < 9 && len(held) > 0:
			k := rng.IntN(len(held))
			id := held[k]
			held = append(held[:k], held[k+1:]...)
			ids := strconv.FormatUint(id, 10)
			switch rng.IntN(4) {
			case 0, 1:
				*deleting = id
				r, err := expect("delete "+ids, "DELETED", "NOT_FOUND")
				if err != nil {
					return err
				}
				*deleting = 0
				if r.Kind == testproc.ReplyDeleted {
					if err := b.deleteOf(id); err != nil {
						return err
					}
				}
			case 2:
				if _, err := expect("release "+ids+" 1 0", "RELEASED", "NOT_FOUND"); err != nil {
					return err
				}
			default:
				if _, err := expect("bury "+ids+" 2", "BURIED", "NOT_FOUND"); err != nil {
					return err
				}
			}
		case op < 9:
			if _, err := expect("kick 3", "KICKED "); err != nil {
				return err
			}
		default:
			for _, id := range held {
				if _, err := expect("touch "+strconv.FormatUint(id, 10), "TOUCHED", "NOT_FOUND"); err != nil {
					return err
				}
			}
		}
	}
	switch rng.IntN(4) {
	case 0:
		conn.WriteString("quit\r\n")
		return conn.Flush()
	case 1: // a close while it holds what it holds
		return nil
	case 2: // a close while its reserve waits, across groups or not
		conn.WriteString("reserve-with-timeout 5\r\n")
		if err := conn.Flush(); err != nil {
			return err
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		return nil
	default: // a close with puts on their way, their answers unread
		n := 1 + rng.IntN(3)
		for range n {
			conn.WriteString("put 0 0 60 10\r\nunanswered\r\n")
		}
		b.mu.Lock()
		b.unanswered += n
		b.mu.Unlock()
		err := conn.Flush()
		if err != nil && b.closedUnder(err) {
			return nil // counted already
		}
		return err
	}
}

// leaveNothing waits until no member holds anything of a client gone:
// sessions, owner clients, unanswered calls, reserved jobs, waiting
// reserves, references to tubes; then, with b, checks every job b was
// told of.
func (c *testCluster) leaveNothing(groups int, tubes []string, b *churnBook) {
	c.t.Helper()
	testproc.WaitForWhy(c.t, 15*time.Second, "nothing left of the clients gone", func() (bool, string) {
		for _, name := range []string{"m1", "m2", "m3"} {
			m := c.up[name]
			if st := m.sessions.Stats(); st.RemoteSessions != 0 || st.Owners != 0 || st.Pending != 0 {
				return false, fmt.Sprintf("%s: %d remote sessions, %d owner clients, %d calls pending; owners: %v", name, st.RemoteSessions, st.Owners, st.Pending, m.sessions.DescribeOwners())
			}
			for g := range groups {
				if s := m.shards.serving(uint16(g)); s != nil {
					if st := s.Stats(); st.Reserved != 0 || st.Waiting != 0 {
						return false, fmt.Sprintf("group %d (%s): %d jobs reserved, %d reserves waiting", g, name, st.Reserved, st.Waiting)
					}
					for _, tube := range append([]string{"default"}, tubes...) {
						if ts, ok := s.TubeStats([]byte(tube)); ok && (ts.Using != 0 || ts.Watching != 0 || ts.Waiting != 0) {
							return false, fmt.Sprintf("group %d (%s): tube %s used %d, watched %d, waited on %d", g, name, tube, ts.Using, ts.Watching, ts.Waiting)
						}
					}
				}
			}
		}
		return true, ""
	})
	if b == nil {
		return
	}
	check := testproc.DialTest(c.t, c.up["m1"].Addr().String(), replyTimeout)
	defer check.Close()
	var there, maybe int64
	for id, body := range b.bodies {
		r, err := check.Do("peek "+strconv.FormatUint(id, 10), nil)
		switch {
		case err != nil:
			c.t.Fatal(err)
		case b.maybe[id] && b.deleted[id] == 0:
			maybe++ // deleted or not: its answer never came
		case b.deleted[id] > 0 && r.Kind != testproc.ReplyNotFound:
			c.t.Errorf("job %d answered DELETED, then peek: %q", id, r.Line)
		case b.deleted[id] == 0 && (r.Kind != testproc.ReplyFound || string(r.Body) != body):
			c.t.Errorf("job %d (%q) acknowledged and never deleted: peek %q %q", id, body, r.Line, r.Body)
		case b.deleted[id] == 0:
			there++
		}
	}
	// Jobs no client was told of: the puts whose answers went unread.
	st, err := check.StatsInt("stats", "current-jobs-ready", "current-jobs-delayed", "current-jobs-buried", "current-jobs-reserved")
	if err != nil {
		c.t.Fatal(err)
	}
	if all := st[0] + st[1] + st[2] + st[3]; all < there || all > there+maybe+int64(b.unanswered) {
		c.t.Errorf("stats: %d jobs (%v), want %d acknowledged and not deleted, and at most %d more (deletes and puts unanswered)", all, st, there, maybe+int64(b.unanswered))
	}
}
