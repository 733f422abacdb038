package engine_test

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// gatedLog is a write-ahead log whose acknowledgements the test controls:
// the store's AckSource, which lets nothing past its limit through while shut.
type gatedLog struct {
	log *wal.Log

	mu      sync.Mutex
	limit   uint64 // highest position acknowledged; MaxUint64 when open
	waiting []gatedWaiter
}

type gatedWaiter struct {
	pos uint64
	fn  func()
}

func (g *gatedLog) Acked() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return min(g.limit, g.log.Durable())
}

func (g *gatedLog) OnAcked(pos uint64, fn func()) {
	g.mu.Lock()
	if pos > g.limit {
		g.waiting = append(g.waiting, gatedWaiter{pos, fn})
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.log.OnDurable(pos, fn)
}

// shut stops acknowledgements where the log is now.
func (g *gatedLog) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit = g.log.Durable()
}

// openTo lets acknowledgements through up to limit (MaxUint64: all of them).
func (g *gatedLog) openTo(limit uint64) {
	g.mu.Lock()
	g.limit = limit
	var due []gatedWaiter
	due, g.waiting = dueAt(g.waiting, limit)
	g.mu.Unlock()
	for _, w := range due {
		g.log.OnDurable(w.pos, w.fn)
	}
}

// dueAt splits ws into the waiters due once limit is acknowledged and
// the others, which keep ws's memory.
func dueAt(ws []gatedWaiter, limit uint64) (due, keep []gatedWaiter) {
	keep = ws[:0]
	for _, w := range ws {
		if w.pos <= limit {
			due = append(due, w)
		} else {
			keep = append(keep, w)
		}
	}
	return due, keep
}

func (g *gatedLog) open() { g.openTo(math.MaxUint64) }

// drop forgets the callbacks waiting behind the gate, as a cluster
// member's journal forgets those of a leadership it lost.
func (g *gatedLog) drop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting = nil
}

// startDurable runs a server on a fresh write-ahead log behind a gate.
func startDurable(t *testing.T, loops int) (*gatedLog, string, string) {
	t.Helper()
	g, st := gatedStore(t)
	_, network, addr := startServerOn(t, engine.Config{Loops: loops}, st)
	return g, network, addr
}

// gatedStore is a store on a fresh write-ahead log, acknowledged through
// a gate. The log closes when the test ends, after a server started on
// the store afterwards has stopped.
func gatedStore(t *testing.T) (*gatedLog, *store.Store) {
	t.Helper()
	wl, err := wal.Open(t.TempDir(), wal.Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wl.Close() })
	g := &gatedLog{log: wl, limit: math.MaxUint64}
	st := store.New(store.Options{Log: wl, Acks: g})
	if err := wl.Start(st); err != nil {
		t.Fatal(err)
	}
	return g, st
}

// TestRepliesWaitForDurability: no reply to a change, nor any reply after
// it on the same connection, leaves before the change is durable; then every
// connection on every loop gets all its replies, in order.
func TestRepliesWaitForDurability(t *testing.T) {
	g, network, addr := startDurable(t, 2)
	const conns = 24
	cs := make([]*rawConn, conns)
	for i := range cs {
		cs[i] = dialRaw(t, network, addr)
	}
	// Commands that change nothing durable are answered at once.
	cs[0].send("use warm\r\n")
	cs[0].expect("USING warm\r\n")

	g.shut()
	for i, c := range cs {
		c.send(fmt.Sprintf("put 0 0 60 1\r\n%c\r\nuse t%d\r\nput 0 0 60 2\r\nab\r\nlist-tube-used\r\n", 'a'+i%26, i))
	}
	quitter := dialRaw(t, network, addr)
	quitter.send("put 0 0 60 1\r\nq\r\n")
	quitter.expectSilence(100 * time.Millisecond)
	_ = quitter.c.Close() // a connection that leaves while held must not upset the others
	for _, c := range cs {
		c.expectSilence(10 * time.Millisecond)
	}
	// Holding is per connection: one with nothing pending is answered.
	other := dialRaw(t, network, addr)
	other.send("use free\r\n")
	other.expect("USING free\r\n")

	g.open()
	ids := make(map[string]bool)
	for i, c := range cs {
		for _, want := range []string{"INSERTED", "", "INSERTED", ""} {
			got, err := c.reply(5 * time.Second)
			if err != nil {
				t.Fatalf("conn %d: %v", i, err)
			}
			switch want {
			case "INSERTED":
				var id uint64
				if _, err := fmt.Sscanf(got, "INSERTED %d\r\n", &id); err != nil {
					t.Fatalf("conn %d: got %q, want INSERTED", i, got)
				}
				if ids[got] {
					t.Fatalf("conn %d: %q twice", i, got)
				}
				ids[got] = true
			default:
				if wantUse := fmt.Sprintf("USING t%d\r\n", i); got != wantUse {
					t.Fatalf("conn %d: got %q, want %q", i, got, wantUse)
				}
			}
		}
	}
	if len(ids) != 2*conns {
		t.Fatalf("%d distinct ids, want %d", len(ids), 2*conns)
	}
	cs[1].send("stats-tube t1\r\n")
	if got, _ := cs[1].reply(5 * time.Second); !strings.Contains(got, "\ncurrent-jobs-ready: 1\n") {
		t.Fatalf("stats-tube t1: %q", got)
	}
}

// TestHeldRepliesOfLaterCommits: when the log catches up with one
// connection's change but not yet with another's on the same loop, the first
// is answered and the second still waits, until its own change is durable.
func TestHeldRepliesOfLaterCommits(t *testing.T) {
	g, network, addr := startDurable(t, 1)
	a, b := dialRaw(t, network, addr), dialRaw(t, network, addr)
	g.shut()
	a.send("put 0 0 60 1\r\na\r\n")
	a.expectSilence(50 * time.Millisecond) // meanwhile the real log writes it
	afterA := g.log.Durable()
	b.send("put 0 0 60 1\r\nb\r\n")
	b.expectSilence(50 * time.Millisecond)
	if g.log.Durable() <= afterA {
		t.Fatal("the log did not write b's put")
	}
	g.openTo(afterA)
	a.expect("INSERTED 1\r\n")
	b.expectSilence(50 * time.Millisecond)
	g.open()
	b.expect("INSERTED 2\r\n")
}

// TestJobsAreShownOnlyOnceDurable: a job whose put is not yet durable is
// reserved or peeked, but the reply waits, so no consumer ever works on a
// job a crash could take back. This holds for an immediate reserve, a
// reserve that was blocked when the put came, reserve-job, peek and
// stats-job.
func TestJobsAreShownOnlyOnceDurable(t *testing.T) {
	g, network, addr := startDurable(t, 2)
	producer := dialRaw(t, network, addr)
	waiter := dialRaw(t, network, addr)
	waiter.send("watch w\r\nignore default\r\nreserve\r\n")
	waiter.expect("WATCHING 2\r\n")
	waiter.expect("WATCHING 1\r\n")

	g.shut()
	producer.send("put 0 0 60 1\r\na\r\nuse w\r\nput 0 0 60 1\r\nb\r\nuse x\r\nput 0 0 60 1\r\nc\r\n")
	// stats shows no job, so it is not held: its total-jobs tells when the
	// puts have been made.
	probe := dialRaw(t, network, addr)
	testproc.WaitFor(t, 5*time.Second, "the puts made", func() bool {
		probe.send("stats\r\n")
		got, _ := probe.reply(5 * time.Second)
		return strings.Contains(got, "total-jobs: 3\n")
	})
	peeker := dialRaw(t, network, addr)
	peeker.send("peek-ready\r\npeek 1\r\n")
	statser := dialRaw(t, network, addr)
	statser.send("stats-job 1\r\n")
	// The peeks must run before job 1 is reserved, and connections on other
	// loops race: the cmd-* counters, counted as a command runs, say when.
	testproc.WaitFor(t, 5*time.Second, "the peeks made", func() bool {
		probe.send("stats\r\n")
		got, _ := probe.reply(5 * time.Second)
		return strings.Contains(got, "cmd-peek: 1\n") &&
			strings.Contains(got, "cmd-peek-ready: 1\n") && strings.Contains(got, "cmd-stats-job: 1\n")
	})
	reserver := dialRaw(t, network, addr)
	reserver.send("reserve-with-timeout 0\r\n")
	byID := dialRaw(t, network, addr)
	byID.send("reserve-job 3\r\n")
	for _, c := range []*rawConn{producer, waiter, peeker, statser, reserver, byID} {
		c.expectSilence(50 * time.Millisecond)
	}

	g.open()
	producer.expect("INSERTED 1\r\n")
	producer.expect("USING w\r\n")
	producer.expect("INSERTED 2\r\n")
	producer.expect("USING x\r\n")
	producer.expect("INSERTED 3\r\n")
	peeker.expect("FOUND 1 1\r\na\r\n")
	peeker.expect("FOUND 1 1\r\na\r\n")
	if got, err := statser.reply(5 * time.Second); err != nil || !strings.HasPrefix(got, "OK ") {
		t.Fatalf("stats-job: %q %v", got, err)
	}
	reserver.expect("RESERVED 1 1\r\na\r\n")
	waiter.expect("RESERVED 2 1\r\nb\r\n")
	byID.expect("RESERVED 3 1\r\nc\r\n")

	// Durable jobs are shown at once, whatever else is still pending.
	g.shut()
	reserver.send("release 1 0 0\r\n") // not durable: answered later
	producer.send("put 0 0 60 1\r\nd\r\n")
	byID.send("peek 2\r\n")
	byID.expect("FOUND 2 1\r\nb\r\n")
	reserver.expectSilence(50 * time.Millisecond)
	g.open()
	reserver.expect("RELEASED\r\n")
	producer.expect("INSERTED 4\r\n")
}

// TestQuitAfterHeldReplies: "put ... quit" pipelined sends INSERTED once the
// put is durable, then closes; nothing after quit is run.
func TestQuitAfterHeldReplies(t *testing.T) {
	g, network, addr := startDurable(t, 1)
	c := dialRaw(t, network, addr)
	g.shut()
	c.send("put 0 0 60 1\r\na\r\nquit\r\nput 0 0 60 1\r\nb\r\n")
	c.expectSilence(50 * time.Millisecond)
	// Whatever follows quit is dropped, not kept while the reply waits:
	// 16 MiB sent after it must not stay in the server's heap.
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	chunk := []byte(strings.Repeat("stats\r\n", 64<<10/7))
	for range 16 << 20 / len(chunk) {
		c.send(string(chunk))
	}
	c.waitSent() // the loop read all but what the server's socket holds
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if grew := int64(ms.HeapAlloc) - int64(before); grew > 4<<20 {
		t.Fatalf("the heap grew by %d bytes while input after quit arrived", grew)
	}
	g.open()
	c.expect("INSERTED 1\r\n")
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := c.rd.ReadByte(); err == nil {
		t.Fatalf("got %q after quit, want the connection closed", b)
	}
	probe := dialRaw(t, network, addr)
	probe.send("peek 2\r\n")
	probe.expect("NOT_FOUND\r\n")
}
