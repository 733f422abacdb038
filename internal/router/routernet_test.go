package router

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// routerNet is two members' Routers in one process, joined by ordered
// in-process commands streams, one goroutine per ordered pair: member 1
// leads nothing, member 2 leads and serves every group on stores of its
// own (or, with lead1, member 1 leads the groups lead1 names). Sessions of
// either member reach every group through their routers, as in a cluster
// of groups; setLeader moves a group's leadership, as an election does.
type routerNet struct {
	t         *testing.T
	placement *meta.State             // immutable after newRouterNet
	stores    map[uint16]*store.Store // immutable after newRouterNet: each group's first store
	leaders   map[uint16]uint64       // guarded by lmu: 0 while a group has none
	// elected are the stores of groups a member was elected to lead
	// (setLeader), fresh ones: the log's jobs, none of the references.
	elected map[uint64]map[uint16]*store.Store // guarded by lmu
	terms   map[uint16]uint64                  // guarded by lmu: elections since the first
	lmu     sync.Mutex

	mu sync.Mutex
	// routers are written under mu as newRouterNet makes them, a
	// stream's goroutine perhaps looking one up meanwhile; only read
	// after.
	routers map[uint64]*Router
	queues  map[[2]uint64]chan []byte // guarded by mu: each ordered pair's stream
	closed  bool                      // guarded by mu: the test ended, the streams closed
}

func newRouterNet(t *testing.T, groups int, lead1 ...uint16) *routerNet {
	t.Helper()
	placement, err := meta.Formation([]meta.Member{{Name: "m1", ID: 1}, {Name: "m2", ID: 2}}, groups, 2)
	if err != nil {
		t.Fatal(err)
	}
	n := &routerNet{t: t, placement: placement, routers: map[uint64]*Router{}, stores: map[uint16]*store.Store{},
		leaders: map[uint16]uint64{}, queues: map[[2]uint64]chan []byte{}, elected: map[uint64]map[uint16]*store.Store{}, terms: map[uint16]uint64{}}
	for g := range uint16(groups) {
		st := store.New(store.Options{IDPrefix: uint8(g), Dedup: true})
		t.Cleanup(st.Close)
		n.stores[g] = st
		n.leaders[g] = 2
	}
	for _, g := range lead1 {
		n.leaders[g] = 1
	}
	for _, self := range []uint64{1, 2} {
		self := self
		r := NewRouter(RouterConfig{
			Self:      self,
			Placement: func() *meta.State { return placement },
			Serving: func(g uint16) *store.Store {
				n.lmu.Lock()
				defer n.lmu.Unlock()
				if n.leaders[g] != self {
					return nil
				}
				if st := n.elected[self][g]; st != nil {
					return st
				}
				return n.stores[g]
			},
			Leader: func(g uint16) (uint64, bool) {
				n.lmu.Lock()
				defer n.lmu.Unlock()
				return n.leaders[g], n.leaders[g] != 0
			},
			Term: func(g uint16) uint64 {
				n.lmu.Lock()
				defer n.lmu.Unlock()
				return 1 + n.terms[g]
			},
			MaxJobSize: 1 << 16,
			Send:       func(to uint64, payload []byte) bool { return n.queue(self, to, payload) },
		})
		n.mu.Lock()
		n.routers[self] = r
		n.mu.Unlock()
	}
	t.Cleanup(func() {
		n.mu.Lock()
		n.closed = true
		for _, q := range n.queues {
			close(q)
		}
		n.mu.Unlock()
		for _, r := range n.routers {
			r.Close()
		}
	})
	for _, r := range n.routers {
		r.LeaderChanged()
	}
	return n
}

// queue sends payload on the stream from member from to member to,
// handled in order by to's router.
func (n *routerNet) queue(from, to uint64, payload []byte) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	k := [2]uint64{from, to}
	q := n.queues[k]
	if q == nil {
		q = make(chan []byte, 4096)
		n.queues[k] = q
		go func() {
			for p := range q {
				var r *Router
				for r == nil {
					n.mu.Lock()
					r = n.routers[to]
					n.mu.Unlock()
					if r == nil {
						time.Sleep(time.Millisecond)
					}
				}
				if err := r.Handle(from, p); err != nil {
					n.t.Errorf("%d → %d: %v", from, to, err)
				}
			}
		}()
	}
	q <- bytes.Clone(payload)
	return true
}

// tube is a tube name that group g owns.
func (n *routerNet) tube(g uint16, prefix string) string {
	for i := range 100000 {
		if name := fmt.Sprintf("%s%d", prefix, i); n.placement.Owner(name) == g {
			return name
		}
	}
	n.t.Fatalf("no tube of group %d", g)
	return ""
}

// netSession is a session on a member, driven as the engine drives it:
// a command either answers now or later, through answers.
type netSession struct {
	t       *testing.T
	s       *Session
	answers answerChan
}

func (n *routerNet) session(member uint64) *netSession {
	answers := make(answerChan, 64)
	return &netSession{t: n.t, s: n.routers[member].NewQueue(answers).(*Session), answers: answers}
}

// do runs cmd and returns its answer, now or once it comes.
func (c *netSession) do(what string, cmd func(a *engine.Answer) bool) engine.Answer {
	c.t.Helper()
	var a engine.Answer
	if cmd(&a) {
		return a
	}
	select {
	case a := <-c.answers:
		return a
	case <-time.After(5 * time.Second):
		c.t.Fatalf("%s: no answer", what)
	}
	return engine.Answer{}
}

// start runs cmd, which must not answer now.
func (c *netSession) start(what string, cmd func(a *engine.Answer) bool) {
	c.t.Helper()
	var a engine.Answer
	if cmd(&a) {
		c.t.Fatalf("%s answered at once: %+v", what, a)
	}
}

func (c *netSession) use(tube string) {
	c.t.Helper()
	c.do("use "+tube, func(a *engine.Answer) bool { return c.s.Use([]byte(tube), a) })
}

func (c *netSession) watch(tube string) {
	c.t.Helper()
	c.do("watch "+tube, func(a *engine.Answer) bool { return c.s.Watch([]byte(tube), a) })
}

func (c *netSession) ignore(tube string) {
	c.t.Helper()
	c.do("ignore "+tube, func(a *engine.Answer) bool { return c.s.Ignore([]byte(tube), a) })
}

func (c *netSession) put(pri, ttr uint32) uint64 {
	c.t.Helper()
	id := c.s.NextID()
	a := c.do("put", func(a *engine.Answer) bool { return c.s.Put(id, c.s.Clock(), pri, 0, ttr, []byte("j\r\n"), a) })
	if a.Err != nil || a.N == 0 {
		c.t.Fatalf("put: %+v", a)
	}
	return a.N
}

func (c *netSession) reserveJob(id uint64) engine.Answer {
	c.t.Helper()
	return c.do("reserve-job", func(a *engine.Answer) bool { return c.s.ReserveJob(id, a) })
}

// tubeFigures are a tube's using, watching and waiting as its group's
// store counts them (stats-tube), and whether it exists.
type tubeFigures struct {
	exists                   bool
	using, watching, waiting int
}

func (n *routerNet) figures(tube string) tubeFigures {
	st := n.current(n.placement.Owner(tube))
	ts, ok := st.TubeStats([]byte(tube))
	if !ok {
		return tubeFigures{}
	}
	return tubeFigures{true, ts.Using, ts.Watching, ts.Waiting}
}

// waitFigures waits until tube's figures are want.
func (n *routerNet) waitFigures(tube string, want tubeFigures) {
	n.t.Helper()
	var got tubeFigures
	ok := false
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if got = n.figures(tube); got == want {
			ok = true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !ok {
		n.t.Fatalf("stats-tube %s: %+v, want %+v", tube, got, want)
	}
}

// jobState is a job's state in its group's store.
func (n *routerNet) jobState(id uint64) string {
	for _, st := range n.stores {
		c := st.NewClient(nil)
		js, ok := c.JobStats(id)
		c.Close()
		if ok {
			return js.State.String()
		}
	}
	return "gone"
}

func (n *routerNet) waitJobState(id uint64, want string) {
	n.t.Helper()
	testproc.WaitFor(n.t, 3*time.Second, fmt.Sprintf("job %d %s (it is %s)", id, want, n.jobState(id)), func() bool {
		return n.jobState(id) == want
	})
}

// setLeader makes member m group g's leader (0: none known), on st if
// set (a store of its own), and tells both routers.
func (n *routerNet) setLeader(g uint16, m uint64, st *store.Store) {
	n.elect(g, m, st)
	for _, r := range n.routers {
		r.LeaderChanged()
	}
}

// elect is setLeader without telling the routers: every member's Leader
// and Term name the new leadership, and no router has resynced the group
// yet (the moment before its LeaderChanged).
func (n *routerNet) elect(g uint16, m uint64, st *store.Store) {
	n.lmu.Lock()
	n.leaders[g] = m
	n.terms[g]++
	if st != nil {
		if n.elected[m] == nil {
			n.elected[m] = map[uint16]*store.Store{}
		}
		n.elected[m][g] = st
	}
	n.lmu.Unlock()
}

// current is group g's store as its leader serves it.
func (n *routerNet) current(g uint16) *store.Store {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	if st := n.elected[n.leaders[g]][g]; st != nil {
		return st
	}
	return n.stores[g]
}
