package replication

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// The network tests run members in this process over real loopback TCP,
// each with its own store and a MemoryLog that outlives the node (its
// disk): closing a node is a kill, starting one again on the same log a
// restart. Time is real; waits are bounded by deadlines.

// testTick makes an election timeout of 500 ms to 1 s: faster than
// cmd/sprout's 1 to 2 s, and still long enough that a leader stalled by
// the race detector on a busy machine (make test runs packages side by
// side on two cores) keeps its lease; at 25 ms one in four loaded runs of
// TestNodeWALChurn lost its leader.
const testTick = 50 * time.Millisecond

// gatedLog is a MemoryLog whose writes become durable only while the
// test does not hold it, and which reports its disk full (fullLog) while
// the test says so.
type gatedLog struct {
	*MemoryLog
	mu      sync.Mutex
	held    bool     // guarded by mu
	waiting []func() // guarded by mu: OnDurable callbacks held back
	noSpace atomic.Bool
}

// Full implements fullLog.
func (g *gatedLog) Full() bool { return g.noSpace.Load() }

func (g *gatedLog) OnDurable(fn func()) {
	g.mu.Lock()
	if g.held {
		g.waiting = append(g.waiting, fn)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	fn()
}

func (g *gatedLog) hold() {
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
}

// release makes every write durable and runs the callbacks held back.
func (g *gatedLog) release() {
	g.mu.Lock()
	g.held = false
	waiting := g.waiting
	g.waiting = nil
	g.mu.Unlock()
	for _, fn := range waiting {
		fn()
	}
}

type netCluster struct {
	t      testing.TB
	peers  []Member
	tweak  func(*NodeConfig) // each test's changes to the configuration
	logs   map[string]*gatedLog
	nodes  map[string]*Node
	output *testproc.SyncBuffer // every member's log lines

	// Members on directories (newWALCluster) rather than MemoryLogs: each
	// one's directory, and its log while the member runs.
	dirs    map[string]string
	wals    map[string]*WALLog
	segSize int64

	mu      sync.Mutex
	rebuilt map[string]int // guarded by mu: the leaderships each member lost while serving
	rebuild chan string    // a member's name, as it rebuilds (its CloseClients)
}

// newNetCluster starts n members, m1 to mn, on 127.0.0.1, with logs that
// keep retain entries below the applied index.
func newNetCluster(t testing.TB, n, retain int, tweak func(*NodeConfig)) *netCluster {
	c, lns := makeNetCluster(t, n, tweak)
	var ids []uint64
	for _, m := range c.peers {
		ids = append(ids, m.ID)
	}
	for _, m := range c.peers {
		c.logs[m.Name] = &gatedLog{MemoryLog: NewMemoryLog(ids, retain)}
	}
	c.startAll(lns)
	return c
}

// newWALCluster starts n members, m1 to mn, on 127.0.0.1, each with its
// log in a directory of its own (WALLog), in segments of segSize bytes.
func newWALCluster(t testing.TB, n int, segSize int64, tweak func(*NodeConfig)) *netCluster {
	c, lns := makeNetCluster(t, n, tweak)
	c.dirs, c.wals, c.segSize = map[string]string{}, map[string]*WALLog{}, segSize
	for _, m := range c.peers {
		c.dirs[m.Name] = t.TempDir()
	}
	c.startAll(lns)
	return c
}

// makeNetCluster makes the members' listeners and names.
func makeNetCluster(t testing.TB, n int, tweak func(*NodeConfig)) (*netCluster, []net.Listener) {
	c := &netCluster{t: t, tweak: tweak, logs: map[string]*gatedLog{}, nodes: map[string]*Node{},
		output: &testproc.SyncBuffer{}, rebuilt: map[string]int{}, rebuild: make(chan string, 16)}
	var lns []net.Listener
	for i := 1; i <= n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		name := fmt.Sprintf("m%d", i)
		c.peers = append(c.peers, Member{Name: name, Addr: ln.Addr().String(), ID: MemberID(name)})
	}
	return c, lns
}

// startAll starts every member, member i on lns[i].
func (c *netCluster) startAll(lns []net.Listener) {
	for i, m := range c.peers {
		c.start(m.Name, lns[i])
	}
	c.t.Cleanup(func() {
		for name := range c.nodes {
			c.kill(name)
		}
		if c.t.Failed() {
			c.t.Logf("the members' log:\n%s", c.output)
		}
	})
}

// config is member name's configuration, the test's changes made.
func (c *netCluster) config(name string) NodeConfig {
	i := slices.IndexFunc(c.peers, func(m Member) bool { return m.Name == name })
	cfg := NodeConfig{
		Node: name, Listen: c.peers[i].Addr, Peers: c.peers,
		ClientAddr: fmt.Sprintf("127.0.0.1:%d", 11300+i),
		HTTPAddr:   fmt.Sprintf("127.0.0.1:%d", 8080+i),
		Tick:       testTick,
		Logger:     zerolog.New(c.output).Level(zerolog.InfoLevel).With().Timestamp().Logger(),
		CloseClients: func(context.Context) error {
			c.mu.Lock()
			c.rebuilt[name]++
			c.mu.Unlock()
			c.rebuild <- name
			return nil
		},
	}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	if c.dirs == nil {
		cfg.Log = c.logs[name]
		return cfg
	}
	if c.wals[name] == nil {
		wcfg := cfg.WALConfig(c.dirs[name])
		wcfg.Wal = wal.Options{SegmentSize: c.segSize, Logger: cfg.Logger}
		l, err := OpenWALLog(wcfg)
		if err != nil {
			c.t.Fatal(err)
		}
		c.wals[name] = l
	}
	cfg.Log = c.wals[name]
	return cfg
}

// start starts member name on its log, on ln or (a restart) on its
// address again.
func (c *netCluster) start(name string, ln net.Listener) *Node {
	c.t.Helper()
	cfg := c.config(name)
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			c.t.Fatal(err)
		}
	}
	cfg.listener = ln
	n, err := StartNode(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[name] = n
	return n
}

// kill stops a member; its log stays, as a disk does (a directory's
// log is closed: what it was given is written).
func (c *netCluster) kill(name string) {
	if n := c.nodes[name]; n != nil {
		n.Close()
	}
	delete(c.nodes, name)
	if l := c.wals[name]; l != nil {
		if err := l.Close(); err != nil {
			c.t.Errorf("closing %s's log: %v", name, err)
		}
		delete(c.wals, name)
	}
}

// crash stops a member on a directory as a crash would: what its
// directory holds while it runs is what it finds when it restarts
// (copyLog), whatever its log had not made durable.
func (c *netCluster) crash(name string) {
	// Cut off first: a member that went on acknowledging entries while
	// its directory was copied would find, restarted on the copy, that
	// the cluster knows it wrote entries the copy missed, which no crash
	// can do (an entry is acknowledged once durable).
	if n := c.nodes[name]; n != nil {
		for _, p := range n.host.transport.peers {
			p.cut.Store(true)
		}
	}
	image := copyLog(c.t, c.dirs[name])
	c.kill(name)
	c.dirs[name] = image
}

// restart starts a member that was killed, crashed or rebuilt, on its
// log: a directory's is opened again, as a restarted process does.
func (c *netCluster) restart(name string) *Node {
	c.kill(name)
	return c.start(name, nil)
}

// join adds member name through via (a learner, then promoted) and
// starts it on a fresh log of its own, as --cluster-join does.
func (c *netCluster) join(via *Node, name string) *Node {
	c.t.Helper()
	return c.start(name, c.add(via, name))
}

// add adds member name through via, as a learner, and returns the
// listener it is to be started on (start), with --cluster-join's
// configuration and a fresh log of its own.
func (c *netCluster) add(via *Node, name string) net.Listener {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	added, err := via.AddMember(ctx, name, ln.Addr().String())
	if err != nil {
		c.t.Fatal(err)
	}
	cluster, id, err := ParseJoin(via.JoinString(added.ID))
	if err != nil || id != added.ID || cluster != via.cfg.ClusterID {
		c.t.Fatalf("the join string %q reads as %x:%x, %v", via.JoinString(added.ID), cluster, id, err)
	}
	c.peers = append(c.peers, Member{Name: name, Addr: ln.Addr().String(), ID: MemberID(name)})
	if c.dirs != nil {
		c.dirs[name] = c.t.TempDir()
	} else {
		c.logs[name] = &gatedLog{MemoryLog: NewJoinMemoryLog(2)}
	}
	tweak := c.tweak
	c.tweak = func(cfg *NodeConfig) {
		if tweak != nil {
			tweak(cfg)
		}
		// The cluster's id as the initial members' names made it: c.peers
		// now names the new member too.
		cfg.ClusterID = cluster
		if cfg.Node == name {
			cfg.JoinID = id
		}
	}
	return ln
}

// up lists the members running, by name.
func (c *netCluster) up() []*Node {
	var ns []*Node
	for _, m := range c.peers {
		if n := c.nodes[m.Name]; n != nil {
			ns = append(ns, n)
		}
	}
	return ns
}

// others are the members running but n, by name.
func (c *netCluster) others(n *Node) []*Node {
	return slices.DeleteFunc(c.up(), func(o *Node) bool { return o == n })
}

// awaitServing waits for one of nodes (every member up, if none is
// named) to serve, and returns it.
func (c *netCluster) awaitServing(timeout time.Duration, nodes ...*Node) *Node {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.up()
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline.C)}}
		for _, n := range nodes {
			info, changed := n.Leader()
			if info.Serving {
				return n
			}
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(changed)})
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			var st []string
			for _, n := range nodes {
				st = append(st, fmt.Sprintf("%+v", n.Status()))
			}
			c.t.Fatalf("no member serves within %v:\n%s", timeout, strings.Join(st, "\n"))
		}
	}
}

// awaitAck waits until pos may be acknowledged on j.
func awaitAck(t testing.TB, j *Journal, pos uint64, timeout time.Duration) {
	t.Helper()
	acked := make(chan struct{})
	j.OnAcked(pos, func() { close(acked) })
	select {
	case <-acked:
	case <-time.After(timeout):
		t.Fatalf("position %d not acknowledged within %v (acknowledged: %d)", pos, timeout, j.Acked())
	}
}

// netClient puts jobs on a member's store, as a connection on it would.
type netClient struct {
	node   *Node
	store  *store.Store
	client *store.Client
}

func newNetClient(n *Node, tube string) *netClient {
	s := n.Store()
	cl := s.NewClient(nil)
	cl.Use([]byte(tube))
	return &netClient{node: n, store: s, client: cl}
}

// put stores a job and returns its id and the position its INSERTED
// waits for.
func (c *netClient) put(body string) (uint64, uint64) {
	id := c.store.NextID()
	if _, err := c.client.Put(id, 100, 0, 60, []byte(body+"\r\n")); err != nil {
		panic(err)
	}
	return id, c.client.PendingAck()
}

// converged waits until every member up holds the jobs the serving
// member holds, and returns them.
func (c *netCluster) converged(leader *Node, timeout time.Duration) map[uint64]jobView {
	c.t.Helper()
	want := viewOf(leader.Store())
	for _, n := range c.up() {
		testproc.WaitFor(c.t, timeout, n.self.Name+"'s store converging", func() bool {
			return diffViews(want, viewOf(n.Store())) == ""
		})
	}
	return want
}
