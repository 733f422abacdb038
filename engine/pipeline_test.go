package engine_test

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
)

// pipeQueue is a fakeQueue that pipelines the commands of ops
// (engine.Pipeliner).
type pipeQueue struct {
	*fakeQueue
	ops map[codec.Op]bool
}

func (q *pipeQueue) Pipelines(op codec.Op) bool { return q.ops[op] }

// changes are what a cluster member's remote session pipelines.
var changes = map[codec.Op]bool{codec.OpPut: true, codec.OpPutBody: true, codec.OpDelete: true,
	codec.OpRelease: true, codec.OpBury: true, codec.OpTouch: true, codec.OpKick: true,
	codec.OpKickJob: true, codec.OpPauseTube: true}

// startPipelined runs a server whose connections' queues leave every
// answer pending and pipeline ops.
func startPipelined(t *testing.T, ops map[codec.Op]bool) (*fakeQueues, string) {
	t.Helper()
	st := store.New(store.Options{})
	fs := newFakeQueues(st, pendAll)
	_, _, addr := startServerOn(t, engine.Config{Queues: func(a engine.Answers) engine.Queue {
		return &pipeQueue{fakeQueue: fs.make(a).(*fakeQueue), ops: ops}
	}}, st)
	return fs, addr
}

// pipelinedTranscript is wireTranscript, but the answers pending are
// delivered together once none has come for a moment, so that the engine
// has sent every command it may before any answer; most is the most
// delivered together.
func pipelinedTranscript(t *testing.T, addr, script string, fs *fakeQueues) (replies []byte, most int) {
	t.Helper()
	done := sendScript(t, addr, script)
	var batch []func()
	for {
		var quiet <-chan time.Time
		if len(batch) > 0 {
			quiet = time.After(50 * time.Millisecond)
		}
		select {
		case b := <-done:
			return b, most
		case deliver := <-fs.pending:
			batch = append(batch, deliver)
		case <-quiet:
			most = max(most, len(batch))
			for _, deliver := range batch {
				deliver()
			}
			batch = batch[:0]
		}
	}
}

// Pipelined answers: the transcript of every command, sent in one write
// to a session whose changes pipeline and whose every answer is pending,
// is byte for byte the single node's, and changes were in flight several
// at once.
func TestPipelinedAnswersInOrder(t *testing.T) {
	// Puts that pipeline behind one another, one refused with its body,
	// one too big, changes by id between them, and commands that wait for
	// them; then the transcript of every command.
	puts := "put 0 0 60 2\r\nab\r\nput 0 0 60 2\r\nabc\r\nput 0 0 60 1\r\nz\r\n" +
		"put 0 0 60 70000\r\n" + strings.Repeat("x", 70000) + "\r\nput 0 0 60 1\r\ny\r\n" +
		"delete 1\r\ndelete 1\r\nrelease 9 0 0\r\nbury 9 0\r\ntouch 9\r\nkick-job 9\r\nlist-tube-used\r\n" +
		"put 0 0 60 1\r\nw\r\npeek-ready\r\nput 0 0 60 1\r\nv\r\nstats-job 3\r\nbad\r\nput 0 0 60 1\r\nu\r\nquit\r\n"
	for _, script := range []string{puts, transcriptScript} {
		_, _, plainAddr := startServer(t, engine.Config{})
		want := wireTranscript(t, plainAddr, script, nil)
		if !strings.HasPrefix(string(want), "INSERTED 1\r\n") {
			t.Fatalf("the single node's transcript is %q", want)
		}
		fs, addr := startPipelined(t, changes)
		got, most := pipelinedTranscript(t, addr, script, fs)
		if string(got) != string(want) {
			t.Errorf("pipelined, the replies are\n%q\nwant\n%q", got, want)
		}
		if most < 3 {
			t.Errorf("at most %d answers were pending at once; the changes did not pipeline", most)
		}
	}
}

// At most engine.MaxPipelined answers are pending at once, and put bodies
// of at most engine.MaxPipelinedBytes (the put that reaches it the last):
// the rest of a long pipeline waits for them, and every reply comes, in
// order.
func TestPipelineBound(t *testing.T) {
	for _, size := range []int{1, 60000} {
		wantMost := min(engine.MaxPipelined, (engine.MaxPipelinedBytes+size-1)/size)
		fs, addr := startPipelined(t, changes)
		var script, want strings.Builder
		body := strings.Repeat("x", size)
		for i := 1; i <= 3*wantMost; i++ {
			script.WriteString("put 0 0 60 " + strconv.Itoa(size) + "\r\n" + body + "\r\n")
			want.WriteString("INSERTED " + strconv.Itoa(i) + "\r\n")
		}
		script.WriteString("quit\r\n")
		got, most := pipelinedTranscript(t, addr, script.String(), fs)
		if string(got) != want.String() {
			t.Errorf("bodies of %d bytes: the replies are\n%.200q\nwant\n%.200q", size, got, want.String())
		}
		if most != wantMost {
			t.Errorf("bodies of %d bytes: %d answers were pending at once, want %d", size, most, wantMost)
		}
	}
}

// A client that pipelines puts and then shuts down its writing side
// hears every INSERTED, in order, once their answers come, and then the
// connection closes.
func TestHalfCloseWhilePipelined(t *testing.T) {
	fs, addr := startPipelined(t, changes)
	c := dialRaw(t, "tcp", addr)
	c.send("put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\nput 0 0 60 1\r\nc\r\nlist-tube-used\r\n")
	var pending []func()
	for range 3 {
		pending = append(pending, fs.next(t))
	}
	if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	for _, deliver := range pending {
		deliver()
	}
	for _, want := range []string{"INSERTED 1\r\n", "INSERTED 2\r\n", "INSERTED 3\r\n", "USING default\r\n"} {
		c.expect(want)
	}
	c.expectEOF()
}

// scriptedQueue pipelines puts and leaves their answers to the test.
type scriptedQueue struct {
	*fakeQueue
	answers engine.Answers
	puts    chan struct{}
}

func (q *scriptedQueue) Pipelines(op codec.Op) bool { return changes[op] }

func (q *scriptedQueue) Put(uint64, int64, uint32, uint32, uint32, []byte, *engine.Answer) bool {
	q.puts <- struct{}{}
	return false
}

// An answer that cannot be given (FailedLost: a lost leader may have run
// the put) closes the connection with no reply after it, not even those
// of the puts pipelined behind it: the client would take the next for
// its. The answers race the loop's task (in one batch or several), so
// the scenario runs a number of times.
func TestLostAnswerEndsPipeline(t *testing.T) {
	st := store.New(store.Options{})
	fs := newFakeQueues(st, pendAll)
	queues := make(chan *scriptedQueue, 1)
	_, _, addr := startServerOn(t, engine.Config{Queues: func(a engine.Answers) engine.Queue {
		q := &scriptedQueue{fakeQueue: fs.make(a).(*fakeQueue), answers: a, puts: make(chan struct{}, 8)}
		queues <- q
		return q
	}}, st)
	for range 20 {
		c := dialRaw(t, "tcp", addr)
		q := <-queues
		c.send("put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\nput 0 0 60 1\r\nc\r\n")
		for range 3 {
			select {
			case <-q.puts:
			case <-time.After(5 * time.Second):
				t.Fatal("the puts were not all in flight")
			}
		}
		q.answers.Answered(engine.Answer{N: 1})
		q.answers.Answered(engine.Answer{Failed: engine.FailedLost})
		q.answers.Answered(engine.Answer{N: 3})
		c.expect("INSERTED 1\r\n")
		c.expectEOF()
	}
}
