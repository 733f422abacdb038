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

// fakeQueue answers as the single node's queue on its own store client,
// but leaves the answers of the commands pend says pending: it computes
// each at once and hands it to the test (on pending), which delivers it
// later, from its own goroutine, as a remote group's reply would come.
type fakeQueue struct {
	engine.Queue
	answers engine.Answers
	pend    func(method string) bool
	pending chan<- func() // delivers one pending answer
	acks    store.AckSource
	pos     *atomic.Uint64 // with acks: the position every answer waits for

	inFlight   atomic.Bool
	overlapped *atomic.Bool // a method was called while an answer was pending
	closed     chan struct{}
}

// fakeQueues makes each connection's fakeQueue on st.
type fakeQueues struct {
	st         *store.Store
	pend       func(method string) bool
	pending    chan func()
	overlapped atomic.Bool
	acks       store.AckSource
	pos        atomic.Uint64
	closed     chan *fakeQueue
}

func newFakeQueues(st *store.Store, pend func(string) bool) *fakeQueues {
	return &fakeQueues{st: st, pend: pend, pending: make(chan func(), 16), closed: make(chan *fakeQueue, 16)}
}

func (fs *fakeQueues) make(a engine.Answers) engine.Queue {
	q := &fakeQueue{answers: a, pend: fs.pend, pending: fs.pending, acks: fs.acks, pos: &fs.pos,
		overlapped: &fs.overlapped, closed: make(chan struct{})}
	q.Queue = engine.LocalQueue(fs.st.NewClient(q))
	go func() { <-q.closed; fs.closed <- q }()
	return q
}

// next returns the next pending answer's delivery, failing the test if
// none comes within 5 s.
func (fs *fakeQueues) next(t *testing.T) func() {
	t.Helper()
	select {
	case deliver := <-fs.pending:
		return deliver
	case <-time.After(5 * time.Second):
		t.Fatal("no answer pending within 5s")
		return nil
	}
}

// do answers with call now, or leaves its answer pending.
func (q *fakeQueue) do(method string, a *engine.Answer, call func(*engine.Answer) bool) bool {
	if q.inFlight.Load() {
		q.overlapped.Store(true)
	}
	if !q.pend(method) {
		return call(a)
	}
	var later engine.Answer
	if !call(&later) {
		return false // a reserve that waits: the store's Notifier answers
	}
	q.inFlight.Store(true)
	q.pending <- func() {
		q.inFlight.Store(false)
		q.answers.Answered(later)
	}
	return false
}

// JobReserved and WaitEnded make the fake the store's Notifier for its
// client: a reserve that waited ends as a pending answer.
func (q *fakeQueue) JobReserved(j *store.Job) {
	q.answers.Answered(engine.Answer{Job: j, Reserve: store.Reserved})
}

func (q *fakeQueue) WaitEnded(r store.ReserveResult) {
	q.answers.Answered(engine.Answer{Reserve: r})
}

func (q *fakeQueue) AckNeeded() (store.AckSource, uint64) {
	if q.acks != nil {
		return q.acks, q.pos.Load()
	}
	return q.Queue.AckNeeded()
}

func (q *fakeQueue) Close() {
	q.Queue.Close()
	close(q.closed)
}

func (q *fakeQueue) Use(tube []byte, a *engine.Answer) bool {
	return q.do("use", a, func(a *engine.Answer) bool { return q.Queue.Use(tube, a) })
}

func (q *fakeQueue) Watch(tube []byte, a *engine.Answer) bool {
	return q.do("watch", a, func(a *engine.Answer) bool { return q.Queue.Watch(tube, a) })
}

func (q *fakeQueue) Ignore(tube []byte, a *engine.Answer) bool {
	return q.do("ignore", a, func(a *engine.Answer) bool { return q.Queue.Ignore(tube, a) })
}

func (q *fakeQueue) ListTubes(a *engine.Answer) bool {
	return q.do("list-tubes", a, q.Queue.ListTubes)
}

func (q *fakeQueue) Put(id uint64, at int64, pri, delay, ttr uint32, body []byte, a *engine.Answer) bool {
	return q.do("put", a, func(a *engine.Answer) bool {
		if q.acks != nil {
			q.pos.Add(1)
		}
		return q.Queue.Put(id, at, pri, delay, ttr, body, a)
	})
}

func (q *fakeQueue) Reserve(timeout time.Duration, a *engine.Answer) bool {
	return q.do("reserve", a, func(a *engine.Answer) bool { return q.Queue.Reserve(timeout, a) })
}

func (q *fakeQueue) ReserveJob(id uint64, a *engine.Answer) bool {
	return q.do("reserve-job", a, func(a *engine.Answer) bool { return q.Queue.ReserveJob(id, a) })
}

func (q *fakeQueue) Delete(id uint64, a *engine.Answer) bool {
	return q.do("delete", a, func(a *engine.Answer) bool { return q.Queue.Delete(id, a) })
}

func (q *fakeQueue) Touch(id uint64, a *engine.Answer) bool {
	return q.do("touch", a, func(a *engine.Answer) bool { return q.Queue.Touch(id, a) })
}

func (q *fakeQueue) Release(id uint64, pri, delay uint32, a *engine.Answer) bool {
	return q.do("release", a, func(a *engine.Answer) bool { return q.Queue.Release(id, pri, delay, a) })
}

func (q *fakeQueue) Bury(id uint64, pri uint32, a *engine.Answer) bool {
	return q.do("bury", a, func(a *engine.Answer) bool { return q.Queue.Bury(id, pri, a) })
}

func (q *fakeQueue) KickJob(id uint64, a *engine.Answer) bool {
	return q.do("kick-job", a, func(a *engine.Answer) bool { return q.Queue.KickJob(id, a) })
}

func (q *fakeQueue) Kick(n uint32, a *engine.Answer) bool {
	return q.do("kick", a, func(a *engine.Answer) bool { return q.Queue.Kick(n, a) })
}

func (q *fakeQueue) Peek(id uint64, a *engine.Answer) bool {
	return q.do("peek", a, func(a *engine.Answer) bool { return q.Queue.Peek(id, a) })
}

func (q *fakeQueue) PeekReady(a *engine.Answer) bool {
	return q.do("peek-ready", a, q.Queue.PeekReady)
}

func (q *fakeQueue) PeekDelayed(a *engine.Answer) bool {
	return q.do("peek-delayed", a, q.Queue.PeekDelayed)
}

func (q *fakeQueue) PeekBuried(a *engine.Answer) bool {
	return q.do("peek-buried", a, q.Queue.PeekBuried)
}

func (q *fakeQueue) JobStats(id uint64, a *engine.Answer) bool {
	return q.do("stats-job", a, func(a *engine.Answer) bool { return q.Queue.JobStats(id, a) })
}

func (q *fakeQueue) TubeStats(tube []byte, a *engine.Answer) bool {
	return q.do("stats-tube", a, func(a *engine.Answer) bool { return q.Queue.TubeStats(tube, a) })
}

func (q *fakeQueue) PauseTube(tube []byte, d time.Duration, a *engine.Answer) bool {
	return q.do("pause-tube", a, func(a *engine.Answer) bool { return q.Queue.PauseTube(tube, d, a) })
}

func (q *fakeQueue) Stats(a *engine.Answer) bool {
	return q.do("stats", a, q.Queue.Stats)
}

func pendAll(string) bool { return true }

// startFake runs a server whose connections' queues are fakes on a store
// of their own.
func startFake(t *testing.T, pend func(string) bool) (*engine.Server, *fakeQueues, string) {
	t.Helper()
	st := store.New(store.Options{})
	fs := newFakeQueues(st, pend)
	srv, _, addr := startServerOn(t, engine.Config{Queues: fs.make}, st)
	return srv, fs, addr
}

// transcriptScript touches every command a Queue answers, with changes,
// misses and refusals, and quits: the connection ends with it.
const transcriptScript = "put 5 0 60 5\r\nhello\r\nput 1 0 60 3\r\nabc\r\nuse other\r\nput 0 0 60 2\r\nhi\r\n" +
	"list-tube-used\r\nwatch other\r\nlist-tubes-watched\r\nignore nothing\r\nignore default\r\nignore other\r\n" +
	"list-tubes\r\npeek-ready\r\npeek 1\r\npeek 9\r\nstats-job 2\r\nstats-tube other\r\nstats-tube none\r\n" +
	"reserve-with-timeout 0\r\ntouch 3\r\nrelease 3 7 0\r\nreserve\r\nbury 3 9\r\npeek-buried\r\nkick 1\r\n" +
	"reserve-job 3\r\nbury 3 1\r\nkick-job 3\r\nkick-job 3\r\npeek-delayed\r\ndelete 3\r\ndelete 3\r\n" +
	"touch 1\r\nrelease 1 0 0\r\nbury 1 0\r\npause-tube other 0\r\npause-tube none 0\r\nuse default\r\n" +
	"reserve-job 1\r\ndelete 1\r\nput 0 0 60 3\r\nabcd\r\nput 0 0 60 3\r\nxyz\r\nstats-job 4\r\nquit\r\nlist-tubes\r\n"

// sendScript sends script in one write on a new connection, and sends
// every byte the server sends back on the channel once it closes the
// connection (or in 10 s).
func sendScript(t *testing.T, addr, script string) <-chan []byte {
	t.Helper()
	c := dialRaw(t, "tcp", addr)
	c.send(script)
	done := make(chan []byte, 1)
	go func() {
		_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c.c)
		done <- b
	}()
	return done
}

// wireTranscript sends script in one write and returns every byte the
// server sends until it closes the connection; deliver, if set, runs each
// pending answer meanwhile.
func wireTranscript(t *testing.T, addr, script string, fs *fakeQueues) []byte {
	t.Helper()
	done := sendScript(t, addr, script)
	if fs == nil {
		return <-done
	}
	for {
		select {
		case b := <-done:
			return b
		case deliver := <-fs.pending:
			deliver()
		}
	}
}

// Every command a Queue answers later gives, pipelined behind others that
// also wait, byte for byte the replies of the single node, in order, one
// command in flight at a time, and quit ends the connection after them.
func TestPendingAnswersInOrder(t *testing.T) {
	_, _, plainAddr := startServer(t, engine.Config{})
	want := wireTranscript(t, plainAddr, transcriptScript, nil)
	if !strings.HasPrefix(string(want), "INSERTED 1\r\nINSERTED 2\r\nUSING other\r\n") {
		t.Fatalf("the single node's transcript is %q", want)
	}
	_, fs, addr := startFake(t, pendAll)
	got := wireTranscript(t, addr, transcriptScript, fs)
	if string(got) != string(want) {
		t.Errorf("with every answer pending the replies are\n%q\nwant\n%q", got, want)
	}
	if fs.overlapped.Load() {
		t.Error("a command ran while another's answer was pending")
	}
}

func pendOnly(methods ...string) func(string) bool {
	return func(m string) bool {
		for _, p := range methods {
			if m == p {
				return true
			}
		}
		return false
	}
}

// expectEOF waits for the server to close the connection.
func (r *rawConn) expectEOF() {
	r.t.Helper()
	if got, err := r.reply(5 * time.Second); err != io.EOF {
		r.t.Fatalf("got %q (err %v), want the connection closed", got, err)
	}
}

// A quit pipelined behind a pending answer waits for it: the answer is
// sent, then the connection closes.
func TestQuitBehindPendingAnswer(t *testing.T) {
	_, fs, addr := startFake(t, pendOnly("put"))
	c := dialRaw(t, "tcp", addr)
	c.send("put 0 0 60 5\r\nhello\r\nquit\r\n")
	fs.next(t)()
	c.expect("INSERTED 1\r\n")
	c.expectEOF()
}

// A session closed while it awaits an answer is never answered: its queue
// is closed, and the answer that comes later is dropped. (A client that
// closes in order is seen as half-closed: its session still awaits the
// answer, and closes once it is sent, as TestHalfCloseWhileAwaiting.)
func TestCloseWhileAwaiting(t *testing.T) {
	srv, fs, addr := startFake(t, pendOnly("delete"))
	c := dialRaw(t, "tcp", addr)
	c.send("put 0 0 60 5\r\nhello\r\ndelete 1\r\n")
	c.expect("INSERTED 1\r\n")
	deliver := fs.next(t)
	// A reset, which the server sees as a close; an orderly close would
	// read as a half-close, which awaits the answer.
	_ = c.c.(*net.TCPConn).SetLinger(0)
	_ = c.c.Close()
	select {
	case <-fs.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the queue of a session closed while awaiting was not closed")
	}
	// Read once the loop has closed the session: INSERTED's count is
	// added after the client may have read it.
	before := srv.Limits().BytesOut
	deliver()
	// Ping runs a task on every loop after the answer's: it has been
	// dropped by then, or sent.
	if err := srv.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := srv.Limits().BytesOut; after != before {
		t.Errorf("%d bytes sent to a closed session's connection", after-before)
	}
	if open := srv.Limits().Open; open != 0 {
		t.Errorf("%d connections open, want 0", open)
	}
}

// A reserve that waits on a session that closes gives up its wait: a job
// put later stays ready.
func TestCloseWhileReserveWaits(t *testing.T) {
	srv, fs, addr := startFake(t, pendAll)
	c := dialRaw(t, "tcp", addr)
	c.send("reserve\r\n")
	waitFor(t, "the reserve to wait", func() bool { return fs.st.Stats().Waiting == 1 })
	_ = c.c.Close()
	<-fs.closed
	p := dialRaw(t, "tcp", addr)
	p.send("put 0 0 60 2\r\nhi\r\n")
	fs.next(t)()
	p.expect("INSERTED 1\r\n")
	if err := srv.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := fs.st.Stats(); st.Ready != 1 || st.Reserved != 0 {
		t.Errorf("after the waiting session closed: %d ready, %d reserved; want 1, 0", st.Ready, st.Reserved)
	}
}

// A client's half-close while its session awaits an answer: the answer
// and every command received before the end are answered, then the
// connection closes; a reserve that waits ends in TIMED_OUT at once.
func TestHalfCloseWhileAwaiting(t *testing.T) {
	t.Run("pending answer", func(t *testing.T) {
		_, fs, addr := startFake(t, pendOnly("put", "stats"))
		c := dialRaw(t, "tcp", addr)
		c.send("put 0 0 60 5\r\nhello\r\npeek-ready\r\nstats\r\nlist-tube-used\r\n")
		deliver := fs.next(t)
		if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		deliver()
		c.expect("INSERTED 1\r\n")
		c.expect("FOUND 1 5\r\nhello\r\n")
		fs.next(t)()
		stats, err := c.reply(5 * time.Second)
		if err != nil || !strings.HasPrefix(stats, "OK ") || !strings.Contains(stats, "\ncurrent-jobs-ready: 1\n") {
			t.Fatalf("stats: %q (err %v)", stats, err)
		}
		c.expect("USING default\r\n")
		c.expectEOF()
	})
	t.Run("waiting reserve", func(t *testing.T) {
		_, fs, addr := startFake(t, pendAll)
		c := dialRaw(t, "tcp", addr)
		c.send("reserve\r\nlist-tube-used\r\n")
		waitFor(t, "the reserve to wait", func() bool { return fs.st.Stats().Waiting == 1 })
		if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		c.expect("TIMED_OUT\r\n")
		c.expect("USING default\r\n")
		c.expectEOF()
	})
}

// Draining and stopping do not wait for a pending answer: WaitIdle sees no
// job reserved, Stop closes the session, and the answer that comes after
// is dropped.
func TestShutdownWhileAwaiting(t *testing.T) {
	srv, fs, addr := startFake(t, pendOnly("put"))
	c := dialRaw(t, "tcp", addr)
	c.send("put 0 0 60 5\r\nhello\r\n")
	deliver := fs.next(t)
	w := dialRaw(t, "tcp", addr)
	w.send("watch other\r\nignore default\r\nreserve\r\n")
	waitFor(t, "the reserve to wait", func() bool { return fs.st.Stats().Waiting == 1 })

	srv.BeginShutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle with a session awaiting: %v", err)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("Stop with a session awaiting: %v", err)
	}
	for range 2 {
		select {
		case <-fs.closed:
		case <-ctx.Done():
			t.Fatal("a session awaiting an answer was not closed by Stop")
		}
	}
	deliver()
	if got, err := c.reply(5 * time.Second); err != io.EOF && !isReset(err) {
		t.Errorf("after Stop: %q (err %v), want the connection closed", got, err)
	}
}

// testAcks is an AckSource the test moves forward.
type testAcks struct {
	mu      sync.Mutex
	acked   uint64
	waiting []gatedWaiter
}

func (a *testAcks) Acked() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked
}

func (a *testAcks) OnAcked(pos uint64, fn func()) {
	a.mu.Lock()
	if pos > a.acked {
		a.waiting = append(a.waiting, gatedWaiter{pos, fn})
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	fn()
}

func (a *testAcks) ackTo(pos uint64) {
	a.mu.Lock()
	a.acked = pos
	var due []gatedWaiter
	due, a.waiting = dueAt(a.waiting, pos)
	a.mu.Unlock()
	for _, w := range due {
		w.fn()
	}
}

// A Queue that names an AckSource of its own (a local group's journal) has
// its replies held, in order, until that source acknowledges them, on a
// server whose store has no log.
func TestHeldRepliesWaitForTheQueuesSource(t *testing.T) {
	st := store.New(store.Options{})
	fs := newFakeQueues(st, pendOnly())
	acks := new(testAcks)
	fs.acks = acks
	_, _, addr := startServerOn(t, engine.Config{Queues: fs.make}, st)
	c := dialRaw(t, "tcp", addr)
	c.send("list-tube-used\r\nput 0 0 60 1\r\na\r\nlist-tube-used\r\nput 0 0 60 1\r\nb\r\n")
	c.expect("USING default\r\n")
	waitFor(t, "both puts", func() bool { return fs.pos.Load() == 2 })
	c.expectSilence(20 * time.Millisecond)
	acks.ackTo(1)
	c.expect("INSERTED 1\r\n")
	c.expect("USING default\r\n")
	c.expectSilence(20 * time.Millisecond)
	acks.ackTo(2)
	c.expect("INSERTED 2\r\n")
}

// remoteJobQueue answers a peek of remoteID as a cluster member's router
// does for a job in another member's store (JobID and JobBody, no Job),
// and every other command as the single node's queue.
type remoteJobQueue struct{ engine.Queue }

const remoteID = 77

func (q remoteJobQueue) Peek(id uint64, a *engine.Answer) bool {
	if id == remoteID {
		a.JobID, a.JobBody = remoteID, []byte("remote\r\n")
		return true
	}
	return q.Queue.Peek(id, a)
}

// TestAnswerScratchCleared: the loop's scratch answer keeps nothing of the
// command before. A peek the store answers NOT_FOUND after one a router
// answered with a remote job is NOT_FOUND, on the same connection and on
// another of the loop's (CI saw a cluster's new leader answer thousands
// of peeks of absent ids with the job a routed session reserved last).
func TestAnswerScratchCleared(t *testing.T) {
	st := store.New(store.Options{})
	queues := func(a engine.Answers) engine.Queue { return remoteJobQueue{engine.LocalQueue(st.NewClient(nil))} }
	_, _, addr := startServerOn(t, engine.Config{Queues: queues, Loops: 1}, st)
	c := dialRaw(t, "tcp", addr)
	c.send("peek 77\r\n")
	c.expect("FOUND 77 6\r\nremote\r\n")
	c.send("peek 5\r\n")
	c.expect("NOT_FOUND\r\n")
	c.send("peek 77\r\n")
	c.expect("FOUND 77 6\r\nremote\r\n")
	other := dialRaw(t, "tcp", addr)
	other.send("peek 5\r\npeek-ready\r\n")
	other.expect("NOT_FOUND\r\n")
	other.expect("NOT_FOUND\r\n")
}
