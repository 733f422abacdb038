package replication

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/segment"
)

// hasVersion3 reports whether dir holds a version 3 segment.
func hasVersion3(t testing.TB, dir string) bool {
	for _, v := range segmentVersions(t, dir) {
		if v == segment.VersionMultiRaft {
			return true
		}
	}
	return false
}

// TestFinalize: three members on directories, every one speaking
// protocol 3, finalize their cluster by themselves: each applies the
// version, keeps it across a restart (its book holds it), and its log
// moves to version 3 segments; the jobs acknowledged before and after are
// all there. A member restarted as the release before (protocol 2 only)
// is refused by the others in one line, and gets none of the jobs put
// meanwhile; back on protocol 3 it catches up.
func TestFinalize(t *testing.T) {
	var mu sync.Mutex
	capped := map[string]uint16{}
	c := newWALCluster(t, 3, 64<<10, func(cfg *NodeConfig) {
		mu.Lock()
		defer mu.Unlock()
		cfg.maxProtocol = capped[cfg.Node]
	})
	acked := 0
	put := func(what string) {
		t.Helper()
		l := c.awaitServing(10 * time.Second)
		_, pos := newNetClient(l, "t").put(fmt.Sprint(what, " ", acked))
		awaitAck(t, l.Journal(), pos, 10*time.Second)
		acked++
	}
	put("before")
	finalized := func(nodes ...*Node) {
		t.Helper()
		for _, n := range nodes {
			testproc.WaitFor(t, 10*time.Second, n.Name()+" finalized", func() bool {
				return n.Status().Version == clusterVersion
			})
			testproc.WaitFor(t, 10*time.Second, n.Name()+"'s log in version 3 segments", func() bool {
				return hasVersion3(t, c.dirs[n.Name()])
			})
		}
	}
	finalized(c.up()...)
	put("after")

	// A restart keeps the version: it is the log's.
	n := c.restart("m2")
	if v := n.Host().Version(); v != clusterVersion {
		t.Errorf("m2 restarted at cluster version %d", v)
	}
	put("after m2's restart")

	// m3 comes back as the release before: refused.
	mu.Lock()
	capped["m3"] = 2
	mu.Unlock()
	old := c.restart("m3")
	put("while m3 speaks protocol 2")
	testproc.WaitFor(t, 10*time.Second, "m3 refused in one line", func() bool {
		return strings.Contains(c.output.String(), "protocol version 2; this cluster runs 3")
	})
	l := c.awaitServing(10*time.Second, c.nodes["m1"], c.nodes["m2"])
	if got, want := len(viewOf(old.Store())), len(viewOf(l.Store())); got >= want {
		t.Errorf("m3 on protocol 2 holds %d jobs, the leader %d: it was not refused", got, want)
	}
	mu.Lock()
	capped["m3"] = 0
	mu.Unlock()
	c.restart("m3")
	put("after m3 came back")
	finalized(c.up()...)
	if got := c.converged(c.awaitServing(10*time.Second), 10*time.Second); len(got) != acked {
		t.Errorf("%d jobs, want the %d acknowledged", len(got), acked)
	}
}

// TestNoFinalize: with NoFinalize, a cluster of members that all speak
// protocol 3 stays at version 2, its segments too: the release before can
// still take its directories.
func TestNoFinalize(t *testing.T) {
	c := newWALCluster(t, 3, 64<<10, func(cfg *NodeConfig) { cfg.NoFinalize = true })
	l := c.awaitServing(10 * time.Second)
	_, pos := newNetClient(l, "t").put("job")
	awaitAck(t, l.Journal(), pos, 10*time.Second)
	c.converged(l, 10*time.Second)
	// Longer than finalization takes (TestFinalize) with ticks to spare.
	deadline := time.Now().Add(3 * finalizeEvery)
	for time.Now().Before(deadline) {
		for _, n := range c.up() {
			if n.Host().Version() != 2 || hasVersion3(t, c.dirs[n.Name()]) {
				t.Fatalf("%s finalized: version %d", n.Name(), n.Host().Version())
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRoutes: a member of the release before, which speaks protocol 3
// and reads no commands stream, is no router to the others
// (Host.Routes), while every member of a later release, and a member
// itself, is; one that speaks protocol 4 routes but takes no replica
// move (Host.TakesMoves), which the others of this release do; one of
// protocol 5 takes moves but does not answer held (Host.AnswersHeld),
// which this release's members do; the cluster finalizes all the same.
func TestRoutes(t *testing.T) {
	c := newWALCluster(t, 5, 64<<10, func(cfg *NodeConfig) {
		switch cfg.Node {
		case "m3":
			cfg.maxProtocol = 3
		case "m4":
			cfg.maxProtocol = 4
		case "m5":
			cfg.maxProtocol = 5
		}
	})
	c.awaitServing(10 * time.Second)
	byName := map[string]*Node{}
	for _, n := range c.up() {
		byName[n.Name()] = n
	}
	m1, m2, m3, m4, m5 := byName["m1"], byName["m2"], byName["m3"], byName["m4"], byName["m5"]
	testproc.WaitFor(t, 10*time.Second, "the members connected and finalized", func() bool {
		tr := m1.Host().transport
		return m1.Status().Version == clusterVersion && tr.protocolOf(m2.ID()) != 0 &&
			tr.protocolOf(m3.ID()) != 0 && tr.protocolOf(m4.ID()) != 0 && tr.protocolOf(m5.ID()) != 0
	})
	h := m1.Host()
	if !h.Routes(m1.ID()) || !h.Routes(m2.ID()) || !h.Routes(m4.ID()) {
		t.Error("m1 does not count itself, m2 or m4, of later releases, as routers")
	}
	if h.Routes(m3.ID()) {
		t.Errorf("m1 counts m3, which speaks protocol %d, as a router", h.transport.protocolOf(m3.ID()))
	}
	if !h.TakesMoves(m1.ID()) || !h.TakesMoves(m2.ID()) {
		t.Error("m1 does not count itself or m2, of this release, as taking moves")
	}
	if h.TakesMoves(m3.ID()) || h.TakesMoves(m4.ID()) {
		t.Errorf("m1 counts m3 or m4, which speak protocols %d and %d, as taking moves",
			h.transport.protocolOf(m3.ID()), h.transport.protocolOf(m4.ID()))
	}
	if !h.TakesMoves(m5.ID()) {
		t.Errorf("m1 does not count m5, which speaks protocol %d, as taking moves", h.transport.protocolOf(m5.ID()))
	}
	// Plans its own moves: only a member connected and known to be of a
	// release before; not this member, one of this release, or one not
	// connected (no release known: a connection that just dropped).
	if !h.PlansOwnMoves(m3.ID()) || !h.PlansOwnMoves(m4.ID()) {
		t.Errorf("m1 does not count m3 or m4, which speak protocols %d and %d, as planning their own moves",
			h.transport.protocolOf(m3.ID()), h.transport.protocolOf(m4.ID()))
	}
	for _, n := range []*Node{m1, m2, m5} {
		if h.PlansOwnMoves(n.ID()) {
			t.Errorf("m1 counts %s, which speaks protocol %d, as planning its own moves", n.Name(), h.transport.protocolOf(n.ID()))
		}
	}
	if !h.AnswersHeld(m1.ID()) || !h.AnswersHeld(m2.ID()) {
		t.Error("m1 does not count itself or m2, of this release, as answering held")
	}
	for _, n := range []*Node{m3, m4, m5} {
		if h.AnswersHeld(n.ID()) {
			t.Errorf("m1 counts %s, which speaks protocol %d, as answering held", n.Name(), h.transport.protocolOf(n.ID()))
		}
	}
	// m3 stopped: its connection closed, m1 knows no release of it, and
	// a member that planned moves on that would plan beside group 0's
	// leader.
	c.kill("m3")
	testproc.WaitFor(t, 10*time.Second, "m1's connection to m3 closed", func() bool {
		return h.transport.protocolOf(m3.ID()) == 0
	})
	if h.PlansOwnMoves(m3.ID()) {
		t.Error("m1 counts m3, to which it has no connection, as planning its own moves")
	}
}
