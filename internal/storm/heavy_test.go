//go:build storm

package storm

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/benchmarks/load"
	"github.com/sproutmq/sprout/internal/testproc"
)

const (
	// heavyConns are held at once: just under heavyNofile, the machine's
	// hard limit, which the server runs under.
	heavyConns  = 19_000
	heavyNofile = 20_000
	// heavyWaiters of the connections wait in a blocking reserve; the
	// rest stay idle.
	heavyWaiters = 18_000
	// heavyJobs are put: each waiter gets about two.
	heavyJobs      = 2 * heavyWaiters
	heavyProducers = 8
	// heavySources spread the connections over 127.0.0.2 and up, so that
	// no source address runs short of ephemeral ports.
	heavySources = 8
	heavyDialers = 64
	// heavyStep bounds each step of the test.
	heavyStep = 2 * time.Minute
)

// TestConcurrentConnections holds 19,000 connections to one server (its
// open-file limit set to 20,000), spread over eight source addresses in
// 127.0.0.0/8; 18,000 of them wait in a blocking reserve while eight
// producers put 36,000 jobs, and each waiter deletes what it gets and
// reserves again. Every job must be delivered exactly once and deleted,
// and once the connections are gone the server's descriptors must be back.
// RSS per idle connection (RSS with them open less RSS before, divided by
// their number) is reported for sprout and for beanstalkd in the same run.
//
// Heavy: build tag storm (make storm). It runs one goroutine per
// connection, more than the race detector allows.
func TestConcurrentConnections(t *testing.T) {
	if testproc.RaceEnabled {
		t.Skip("one goroutine per connection: more than the race detector's 8,128")
	}
	sp := manyConnections(t, serverSpec{name: "sprout", binary: testproc.SproutBinary(t), nofile: heavyNofile})
	bs := manyConnections(t, serverSpec{name: "beanstalkd", binary: testproc.Beanstalkd(t), nofile: heavyNofile})
	t.Logf("RSS per idle connection: sprout %.0f B, beanstalkd %.0f B (%.2f×); with 18,000 of them waiting in reserve: sprout %.0f B, beanstalkd %.0f B",
		sp.perIdle, bs.perIdle, sp.perIdle/bs.perIdle, sp.perWaiting, bs.perWaiting)
	t.Logf("%d jobs delivered to %d waiters in %v (sprout), %v (beanstalkd)",
		heavyJobs, heavyWaiters, sp.deliver.Round(time.Millisecond), bs.deliver.Round(time.Millisecond))
}

type heavyResult struct {
	perIdle, perWaiting float64 // RSS bytes per connection
	deliver             time.Duration
}

func manyConnections(t *testing.T, spec serverSpec) heavyResult {
	t.Helper()
	var res heavyResult
	s := spec.start(t)
	ctl := testproc.DialTest(t, s.Addr(), replyTimeout)
	time.Sleep(settleTime)
	base := mustReadProc(t, s.PID())

	began := time.Now()
	conns := openMany(t, s.Addr(), heavyConns)
	waitStat(t, ctl, "current-connections", heavyConns+1)
	t.Logf("%s: %d connections open in %v", spec.name, heavyConns, time.Since(began).Round(time.Millisecond))
	time.Sleep(time.Second)
	idle := mustReadProc(t, s.PID())
	res.perIdle = float64(idle.RSS-base.RSS) / heavyConns

	d := &deliveries{got: make(map[uint64]int)}
	for _, c := range conns[:heavyWaiters] {
		d.wg.Add(1)
		go d.wait(c)
	}
	waitStat(t, ctl, "current-waiting", heavyWaiters)
	time.Sleep(time.Second)
	waiting := mustReadProc(t, s.PID())
	res.perWaiting = float64(waiting.RSS-base.RSS) / heavyConns

	began = time.Now()
	inserted := produce(t, s.Addr())
	for deadline := time.Now().Add(heavyStep); d.count() < heavyJobs; {
		if err := d.get(); err != nil {
			t.Fatalf("%s: waiter: %v", spec.name, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d jobs delivered after %v", spec.name, d.count(), heavyJobs, heavyStep)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.deliver = time.Since(began)
	waitStat(t, ctl, "current-waiting", heavyWaiters) // every job deleted, every waiter back
	v, err := ctl.StatsInt("stats", "current-jobs-ready", "current-jobs-reserved")
	if err != nil {
		t.Fatal(err)
	}
	if v[0] != 0 || v[1] != 0 {
		t.Errorf("%s: %d jobs ready and %d reserved once all were delivered and deleted", spec.name, v[0], v[1])
	}
	d.exactlyOnce(t, spec.name, inserted)

	for _, c := range conns {
		c.Close()
	}
	d.wg.Wait()
	back, after := fdsReturn(s.PID(), base.fds, 30*time.Second)
	t.Logf("%s: before: %v; %d idle connections: %v; %d of them waiting: %v; after: %v",
		spec.name, base, heavyConns, idle, heavyWaiters, waiting, after)
	if !back {
		t.Errorf("%s holds %d descriptors 30 s after the connections closed, %d before", spec.name, after.fds, base.fds)
	}
	if spec.name == "sprout" {
		stopServer(t, spec.name, s)
	} else {
		s.Stop(stopGrace)
	}
	return res
}

// openMany opens n idle connections, spread over heavySources source
// addresses; they are closed when the test ends.
func openMany(t *testing.T, addr string, n int) []*testproc.Conn {
	t.Helper()
	sources := load.LoopbackSources(heavySources)
	conns := make([]*testproc.Conn, n)
	errs := make(chan error, heavyDialers)
	var wg sync.WaitGroup
	for d := range heavyDialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := d; i < n; i += heavyDialers {
				c, err := testproc.Dialer{Timeout: 10 * time.Second, Local: sources[i%len(sources)]}.Dial(addr)
				if err != nil {
					errs <- fmt.Errorf("connection %d of %d: %w", i+1, n, err)
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return conns
}

// waitStat waits until the server's stats field reaches want.
func waitStat(t *testing.T, ctl *testproc.Conn, field string, want int64) {
	t.Helper()
	deadline := time.Now().Add(heavyStep)
	for {
		v, err := ctl.StatsInt("stats", field)
		if err != nil {
			t.Fatal(err)
		}
		if v[0] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %s is %d after %v, want %d", field, v[0], heavyStep, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// produce puts heavyJobs jobs into tube storm over heavyProducers
// connections, pipelined, and returns their ids.
func produce(t *testing.T, addr string) []uint64 {
	t.Helper()
	var mu sync.Mutex
	var ids []uint64
	errs := make(chan error, heavyProducers)
	var wg sync.WaitGroup
	frame := testproc.PutFrame(64)
	for range heavyProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := testproc.Dial(addr, replyTimeout)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(heavyStep))
			if err := c.ExpectLine("use storm", "USING storm"); err != nil {
				errs <- err
				return
			}
			_ = c.SetDeadline(time.Now().Add(heavyStep))
			const batch = 100
			for done := 0; done < heavyJobs/heavyProducers; done += batch {
				for range batch {
					c.Write(frame)
				}
				if err := c.Flush(); err != nil {
					errs <- err
					return
				}
				for range batch {
					r, err := c.Expect(testproc.ReplyInserted)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					ids = append(ids, r.N)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("producer: %v", err)
	}
	return ids
}

// deliveries counts the jobs each waiter got.
type deliveries struct {
	wg sync.WaitGroup // one per waiter
	firstError
	mu  sync.Mutex
	got map[uint64]int // guarded by mu: RESERVED (then DELETED) per job id
	n   int            // guarded by mu: jobs deleted
}

// wait watches storm alone and, until the connection closes, reserves,
// deletes and reserves again.
func (d *deliveries) wait(c *testproc.Conn) {
	defer d.wg.Done()
	_ = c.SetDeadline(time.Now().Add(3 * heavyStep))
	c.WriteString("watch storm\r\nignore default\r\nreserve\r\n")
	if err := c.Flush(); err != nil {
		d.set(err)
		return
	}
	for range 2 {
		if _, err := c.Expect(testproc.ReplyWatching); err != nil {
			d.set(err)
			return
		}
	}
	for {
		r, err := c.Expect(testproc.ReplyReserved)
		if err != nil {
			d.set(err) // also when the test closes the connection; ignored then
			return
		}
		c.WriteCmdID("delete", r.N)
		c.WriteString("reserve\r\n")
		if err := c.Flush(); err != nil {
			d.set(err)
			return
		}
		if _, err := c.Expect(testproc.ReplyDeleted); err != nil {
			d.set(fmt.Errorf("delete %d: %w", r.N, err))
			return
		}
		d.mu.Lock()
		d.got[r.N]++
		d.n++
		d.mu.Unlock()
	}
}

func (d *deliveries) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// exactlyOnce checks that every inserted job was delivered once, and no
// other.
func (d *deliveries) exactlyOnce(t *testing.T, server string, inserted []uint64) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	var bad []string
	for _, id := range inserted {
		if n := d.got[id]; n != 1 && len(bad) < 10 {
			bad = append(bad, fmt.Sprintf("job %d delivered %d times", id, n))
		}
	}
	if len(d.got) != len(inserted) {
		bad = append(bad, fmt.Sprintf("%d distinct jobs delivered, %d inserted", len(d.got), len(inserted)))
	}
	if len(bad) > 0 {
		t.Errorf("%s: %v", server, bad)
	}
}
