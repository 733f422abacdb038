package engine_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
)

// router is a Route that takes the connections its decide says to, and
// keeps them for the test.
type router struct {
	mu     sync.Mutex
	take   bool       // guarded by mu
	taken  []net.Conn // guarded by mu
	gotOne chan struct{}
}

func newRouter() *router { return &router{gotOne: make(chan struct{}, 16)} }

func (r *router) route(nc net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.take {
		return false
	}
	r.taken = append(r.taken, nc)
	r.gotOne <- struct{}{}
	return true
}

func (r *router) setTake(take bool) {
	r.mu.Lock()
	r.take = take
	r.mu.Unlock()
}

// A connection Route takes is not served, nor counted; one it leaves is;
// one it took and gives back with Serve is served as any other.
func TestRouteTakesConnections(t *testing.T) {
	r := newRouter()
	srv, network, addr := startServer(t, engine.Config{Route: r.route})

	local := dialRaw(t, network, addr)
	local.send("put 0 0 60 1\r\na\r\n")
	local.expect("INSERTED 1\r\n")

	r.setTake(true)
	taken := dialRaw(t, network, addr)
	<-r.gotOne
	taken.send("stats-job 1\r\n")
	taken.expectSilence(100 * time.Millisecond)
	if n := srv.Stats().CurrentConnections; n != 1 {
		t.Errorf("current-connections %d with one served and one taken, want 1", n)
	}

	r.mu.Lock()
	back := r.taken[0]
	r.mu.Unlock()
	srv.Serve(back)
	// What the client sent while the connection was elsewhere was left
	// in the socket: it is served now.
	if got, err := taken.reply(5 * time.Second); err != nil || !strings.HasPrefix(got, "OK ") {
		t.Fatalf("stats-job through the connection given back: %q, %v", got, err)
	}
	if n := srv.Stats().CurrentConnections; n != 2 {
		t.Errorf("current-connections %d, want 2", n)
	}
}

// CloseClients ends every session: a reserved job goes back to ready,
// and the server still accepts.
func TestCloseClients(t *testing.T) {
	st := store.New(store.Options{})
	srv, network, addr := startServerOn(t, engine.Config{Route: newRouter().route}, st)

	worker := dialRaw(t, network, addr)
	producer := dialRaw(t, network, addr)
	producer.send("put 0 0 60 1\r\na\r\n")
	producer.expect("INSERTED 1\r\n")
	worker.send("reserve\r\n")
	worker.expect("RESERVED 1 1\r\na\r\n")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.CloseClients(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*rawConn{worker, producer} {
		if got, err := c.reply(5 * time.Second); err != io.EOF {
			t.Errorf("after CloseClients: %q, %v; want EOF", got, err)
		}
	}
	if g := st.Stats(); g.Reserved != 0 || g.Ready != 1 {
		t.Errorf("after CloseClients: %d reserved, %d ready; want 0 and 1", g.Reserved, g.Ready)
	}
	if n := srv.Stats().CurrentConnections; n != 0 {
		t.Errorf("current-connections %d after CloseClients", n)
	}
	again := dialRaw(t, network, addr)
	again.send("stats-job 1\r\n")
	if got, err := again.reply(5 * time.Second); err != nil || !strings.Contains(got, "state: ready") {
		t.Errorf("a new connection after CloseClients: %q, %v", got, err)
	}
}

// TestCloseClientsForgetsHeldReplies: a member that lost its leadership
// closes its clients and its journal forgets the replies they waited for
// (their callbacks are never called). The loop must not go on waiting
// for those: a new client's reply is sent once its own change is
// acknowledged.
func TestCloseClientsForgetsHeldReplies(t *testing.T) {
	g, st := gatedStore(t)
	srv, network, addr := startServerOn(t, engine.Config{Route: newRouter().route, Loops: 1}, st)

	g.shut()
	lost := dialRaw(t, network, addr)
	lost.send("put 0 0 60 4\r\nlost\r\n")
	lost.expectSilence(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.CloseClients(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := lost.reply(5 * time.Second); err != io.EOF {
		t.Fatalf("a held reply after CloseClients: %q, %v; want EOF", got, err)
	}
	g.drop()

	again := dialRaw(t, network, addr)
	again.send("put 0 0 60 5\r\nagain\r\n")
	again.expectSilence(20 * time.Millisecond)
	g.open()
	again.expect("INSERTED 2\r\n")
}

// TestServingClosesLateSessions: a connection the Route left to the
// server whose session opens once Serving says no (the member lost its
// leadership between the accept and the open) is closed, not served; the
// server serves again once Serving says yes.
func TestServingClosesLateSessions(t *testing.T) {
	var serving atomic.Bool
	srv, network, addr := startServer(t, engine.Config{Route: newRouter().route, Serving: serving.Load})
	late := dialRaw(t, network, addr)
	if got, err := late.reply(5 * time.Second); err != io.EOF {
		t.Fatalf("a session opened while not serving: %q, %v; want EOF", got, err)
	}
	if st := srv.Stats(); st.CurrentConnections != 0 || srv.Limits().Refused != 1 {
		t.Errorf("after the late session: %d connections, %d refused; want 0 and 1", st.CurrentConnections, srv.Limits().Refused)
	}
	serving.Store(true)
	c := dialRaw(t, network, addr)
	c.send("list-tube-used\r\n")
	c.expect("USING default\r\n")
}

// TestLeasedFencesJobs: while Leased says no, a reserve that finds a job,
// at once or after waiting, closes its connection without RESERVED, and
// the job is ready again for a client served once Leased says yes.
func TestLeasedFencesJobs(t *testing.T) {
	var leased atomic.Bool
	leased.Store(true)
	srv, network, addr := startServer(t, engine.Config{Leased: leased.Load})
	producer := dialRaw(t, network, addr)
	producer.send("put 0 0 60 3\r\none\r\n")
	producer.expect("INSERTED 1\r\n")

	leased.Store(false)
	now := dialRaw(t, network, addr)
	now.send("reserve-with-timeout 0\r\n")
	if got, err := now.reply(5 * time.Second); err != io.EOF {
		t.Fatalf("a reserve while not leased: %q, %v; want EOF", got, err)
	}
	leased.Store(true)
	waiting := dialRaw(t, network, addr)
	waiting.send("reserve-with-timeout 0\r\n")
	waiting.expect("RESERVED 1 3\r\none\r\n")
	waiting.send("delete 1\r\nreserve\r\n")
	waiting.expect("DELETED\r\n")
	waiting.expectSilence(20 * time.Millisecond) // blocked

	leased.Store(false)
	producer.send("put 0 0 60 3\r\ntwo\r\n")
	producer.expect("INSERTED 2\r\n")
	if got, err := waiting.reply(5 * time.Second); err != io.EOF {
		t.Fatalf("a waiting reserve given a job while not leased: %q, %v; want EOF", got, err)
	}
	leased.Store(true)
	again := dialRaw(t, network, addr)
	again.send("reserve-with-timeout 0\r\n")
	again.expect("RESERVED 2 3\r\ntwo\r\n")
	if n := srv.Limits().Fenced; n != 2 {
		t.Errorf("Limits().Fenced = %d, want 2", n)
	}
}

// fencedStatsQueue is a fakeQueue whose stats the queue fences
// (engine.FailedFenced), as a cluster member's session on the store of a
// group whose leadership is not leased does.
type fencedStatsQueue struct{ *fakeQueue }

func (q fencedStatsQueue) Stats(a *engine.Answer) bool {
	a.Failed = engine.FailedFenced
	return true
}

// TestFailedFencedCloses: a read the queue fences (FailedFenced) closes
// the connection with no reply, as a RESERVED the engine fences itself,
// and is counted so; the replies before it go.
func TestFailedFencedCloses(t *testing.T) {
	st := store.New(store.Options{})
	fs := newFakeQueues(st, func(string) bool { return false })
	srv, network, addr := startServerOn(t, engine.Config{Queues: func(a engine.Answers) engine.Queue {
		return fencedStatsQueue{fs.make(a).(*fakeQueue)}
	}}, st)
	c := dialRaw(t, network, addr)
	c.send("use a\r\nstats\r\nuse b\r\n")
	c.expect("USING a\r\n")
	if got, err := c.reply(5 * time.Second); err != io.EOF {
		t.Fatalf("a fenced stats: %q, %v; want EOF", got, err)
	}
	if n := srv.Limits().Fenced; n != 1 {
		t.Errorf("Limits().Fenced = %d, want 1", n)
	}
}

// TestCloseClientsStopped: a server stopped has no client left to close.
// A cluster member hands its leaderships over after its engine stopped,
// losing each, and closes the clients before it rebuilds the store: that
// must not fail (the member's group would stop with an error).
func TestCloseClientsStopped(t *testing.T) {
	srv, network, addr := startServerOn(t, engine.Config{Route: newRouter().route}, store.New(store.Options{}))
	c := dialRaw(t, network, addr)
	c.send("use a\r\n")
	c.expect("USING a\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.CloseClients(ctx); err != nil {
		t.Errorf("CloseClients after Stop: %v", err)
	}
	if err := srv.CloseClientsWhere(ctx, func(engine.Queue) bool { return true }, nil); err != nil {
		t.Errorf("CloseClientsWhere after Stop: %v", err)
	}
}

// Without a Route nothing is tracked, and CloseClients says so.
func TestCloseClientsNeedsRoute(t *testing.T) {
	srv, _, _ := startServer(t, engine.Config{})
	if err := srv.CloseClients(context.Background()); err != engine.ErrNoRoute {
		t.Errorf("CloseClients without a Route: %v, want ErrNoRoute", err)
	}
}

// noWaits is the Notifier of store clients that never wait in a reserve.
type noWaits struct{}

func (noWaits) JobReserved(*store.Job)        {}
func (noWaits) WaitEnded(store.ReserveResult) {}

// TestCloseClientsWhereKeepsOtherLogs: a cluster member's sessions wait
// for the logs of two groups, and it loses one group's leadership. It
// closes the sessions picked, and its loop stops waiting only for that
// group's log: a session left open that waits for the other is answered
// once its own log acknowledges its change.
func TestCloseClientsWhereKeepsOtherLogs(t *testing.T) {
	lostLog, lostStore := gatedStore(t)
	keptLog, keptStore := gatedStore(t)
	var made atomic.Int32
	var onLost sync.Map // the queues on lostStore
	srv, network, addr := startServerOn(t, engine.Config{Route: newRouter().route, Loops: 1,
		Queues: func(engine.Answers) engine.Queue {
			if made.Add(1) == 1 {
				q := engine.LocalQueue(lostStore.NewClient(noWaits{}))
				onLost.Store(q, true)
				return q
			}
			return engine.LocalQueue(keptStore.NewClient(noWaits{}))
		}}, lostStore)

	lost := dialRaw(t, network, addr)
	lost.send("list-tube-used\r\n")
	lost.expect("USING default\r\n")
	kept := dialRaw(t, network, addr)
	kept.send("list-tube-used\r\n")
	kept.expect("USING default\r\n")
	lostLog.shut()
	keptLog.shut()
	lost.send("put 0 0 60 4\r\nlost\r\n")
	kept.send("put 0 0 60 4\r\nkept\r\n")
	kept.expectSilence(20 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	picked := func(q engine.Queue) bool { _, ok := onLost.Load(q); return ok }
	if err := srv.CloseClientsWhere(ctx, picked, lostLog); err != nil {
		t.Fatal(err)
	}
	if got, err := lost.reply(5 * time.Second); err != io.EOF {
		t.Fatalf("the session on the lost log: %q, %v; want EOF", got, err)
	}
	lostLog.drop()
	keptLog.open()
	kept.expect("INSERTED 1\r\n")
}
