package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// TestShardGroupsLostReservation: a job a session held in a group whose
// leader was lost (an election, no handover) is ready at the new leader;
// the holder's touch answers NOT_FOUND, as after a TTR, and from then on
// the session holds nothing: its member counts no job held (a graceful
// shutdown waits for none), and a reserve on another group's tube times
// out instead of answering DEADLINE_SOON for the job it lost.
func TestShardGroupsLostReservation(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	c.balanced()
	g, elsewhere := c.ledBy("m1"), c.ledBy("m2")
	tubes := tubePerGroup(p, "r")
	holder := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, holder, "use "+tubes[g], "USING "+tubes[g])
	expectLine(t, holder, "watch "+tubes[g], "WATCHING 2")
	expectLine(t, holder, "ignore default", "WATCHING 1")
	const ttr = 5
	id, err := holder.Put(0, 0, ttr, []byte("lost with its leader"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := holder.Do("reserve-with-timeout 5", nil)
	if err != nil || r.N != id {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, id)
	}
	reserved := time.Now()
	if n := c.up["m2"].sessions.Holding(); n != 1 {
		t.Fatalf("m2's sessions hold %d jobs, want 1", n)
	}

	c.crashLeader("m1", g)
	expectLine(t, holder, fmt.Sprintf("touch %d", id), "NOT_FOUND")
	if n := c.up["m2"].sessions.Holding(); n != 0 {
		t.Fatalf("after its touch answered NOT_FOUND, m2's sessions hold %d jobs, want none", n)
	}
	if left := time.Until(reserved.Add(ttr*time.Second - time.Second)); left < time.Second {
		t.Skipf("the election took until %v before the job's TTR: too late to tell DEADLINE_SOON", left)
	}
	expectLine(t, holder, "watch "+tubes[elsewhere], "WATCHING 2")
	expectLine(t, holder, "ignore "+tubes[g], "WATCHING 1")
	expectLine(t, holder, fmt.Sprintf("reserve-with-timeout %d", ttr), "TIMED_OUT")
}

// crashLeader stops member name at once, handing nothing over (as a
// crash), and waits until another member serves group g, which it led.
func (c *testCluster) crashLeader(name string, g uint16) {
	c.t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	c.up[name].Shutdown(done)
	delete(c.up, name)
	testproc.WaitFor(c.t, 10*time.Second, fmt.Sprintf("group %d served again", g), func() bool {
		for _, m := range c.up {
			if m.shards.serving(g) != nil {
				return true
			}
		}
		return false
	})
}

// TestShardGroupsLostReservationForgotten: sessions whose jobs' group
// lost its leader (an election, no handover) learn from the new leader
// that they no longer hold them, without touching them (OpHeld): their
// member then counts no job held, and reserves already waiting, bounded
// by those jobs' TTRs, owe no DEADLINE_SOON and time out: one across two
// other groups (its own timer), and one in a single other group (that
// group's leader bounds its wait, and the session goes on waiting when
// the bound comes).
func TestShardGroupsLostReservationForgotten(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	c.balanced()
	g := c.ledBy("m1")
	tubes := tubePerGroup(p, "f")
	const ttr, timeout = 6, 7
	type end struct {
		line string
		at   time.Time
	}
	var reserved time.Time
	// holder reserves a job of group g through m2, then waits in a
	// reserve watching tubes elsewhere alone.
	holder := func(watch ...string) (*testproc.Conn, uint64, <-chan end) {
		conn := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
		expectLine(t, conn, "use "+tubes[g], "USING "+tubes[g])
		id, err := conn.Put(0, 0, ttr, []byte("lost with its leader"))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := conn.Do(fmt.Sprintf("reserve-job %d", id), nil); err != nil || r.N != id {
			t.Fatalf("reserve-job: %+v %v, want job %d", r, err, id)
		}
		if reserved.IsZero() {
			reserved = time.Now()
		}
		for i, tube := range watch {
			expectLine(t, conn, "watch "+tube, fmt.Sprintf("WATCHING %d", i+2))
		}
		expectLine(t, conn, "ignore default", fmt.Sprintf("WATCHING %d", len(watch)))
		ended := make(chan end, 1)
		go func() {
			r, err := conn.Do(fmt.Sprintf("reserve-with-timeout %d", timeout), nil)
			line := string(r.Line)
			if err != nil {
				line = err.Error()
			}
			ended <- end{line, time.Now()}
		}()
		return conn, id, ended
	}
	across, acrossJob, acrossEnd := holder(tubes[c.ledBy("m2")], tubes[c.ledBy("m3")])
	single, singleJob, singleEnd := holder(tubes[c.ledBy("m3")])
	testproc.WaitFor(t, 5*time.Second, "both reserves waiting", func() bool {
		return c.up["m2"].sessions.Waiting() == 2
	})
	if n := c.up["m2"].sessions.Holding(); n != 2 {
		t.Fatalf("m2's sessions hold %d jobs, want 2", n)
	}

	c.crashLeader("m1", g)
	soon := reserved.Add(ttr*time.Second - time.Second) // the first job's DEADLINE_SOON by the estimate
	if left := time.Until(soon); left < time.Second {
		t.Skipf("the election took until %v before the jobs' DEADLINE_SOON: too late to tell", left)
	}
	// Well before the estimates' TTRs would drop them: the new leader said so.
	testproc.WaitFor(t, time.Until(soon)-200*time.Millisecond, "m2's sessions learning they hold nothing", func() bool {
		return c.up["m2"].sessions.Holding() == 0
	})
	for _, w := range []struct {
		what  string
		ended <-chan end
		conn  *testproc.Conn
		job   uint64
	}{{"across two groups", acrossEnd, across, acrossJob}, {"in one other group", singleEnd, single, singleJob}} {
		e := <-w.ended
		if e.line != "TIMED_OUT" || e.at.Sub(reserved) < timeout*time.Second-time.Second {
			t.Errorf("the reserve %s answered %q %v after the first job was reserved, want TIMED_OUT after its %d s",
				w.what, e.line, e.at.Sub(reserved).Round(time.Millisecond), timeout)
		}
		expectLine(t, w.conn, fmt.Sprintf("touch %d", w.job), "NOT_FOUND")
	}
}

// TestShardGroupsShutdownHoldsJobs: a member shutting down gracefully
// hands its sessions no job, whichever member leads the group (as one
// server's store.HoldJobs): its worker's reserve times out with a job
// ready in a group another member leads, and its reserve-job finds
// nothing; the job it holds it still deletes, and the shutdown, which
// waited for it, then ends.
func TestShardGroupsShutdownHoldsJobs(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	c.balanced()
	tube := tubePerGroup(p, "s")[c.ledBy("m1")]
	producer := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	expectLine(t, producer, "use "+tube, "USING "+tube)
	held, err := producer.Put(0, 0, 60, []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	ready, err := producer.Put(1, 0, 60, []byte("ready"))
	if err != nil {
		t.Fatal(err)
	}
	worker := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, worker, "watch "+tube, "WATCHING 2")
	if r, err := worker.Do("reserve-with-timeout 5", nil); err != nil || r.N != held {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, held)
	}

	stopped := c.beginShutdown("m2")
	expectLine(t, worker, "reserve-with-timeout 1", "TIMED_OUT")
	expectLine(t, worker, fmt.Sprintf("reserve-job %d", ready), "NOT_FOUND")
	select {
	case <-stopped:
		t.Fatal("m2 stopped while its worker held a job")
	default:
	}
	c.endShutdown("m2", worker, held, stopped)
	if st, err := producer.Stats(fmt.Sprintf("stats-job %d", ready)); err != nil || st["state"] != "ready" {
		t.Fatalf("stats-job %d: %v %v, want it ready", ready, st, err)
	}
}

// TestShardGroupsShutdownHoldsWaitingReserves: reserves of a member's
// workers already waiting when its graceful shutdown begins are handed no
// job either: one waiting in a group another member leads (its job
// declined, back as if never reserved) and one waiting across two groups
// time out, and the jobs put meanwhile stay ready.
func TestShardGroupsShutdownHoldsWaitingReserves(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	c.balanced()
	g, other := c.ledBy("m1"), c.ledBy("m3")
	one, across, elsewhere := tubePerGroup(p, "w")[g], tubePerGroup(p, "x")[g], tubePerGroup(p, "x")[other]
	producer := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	expectLine(t, producer, "use "+one, "USING "+one)
	held, err := producer.Put(0, 0, 60, []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	m2 := c.up["m2"]
	holder := testproc.DialTest(t, m2.Addr().String(), replyTimeout)
	expectLine(t, holder, "watch "+one, "WATCHING 2")
	if r, err := holder.Do("reserve-with-timeout 5", nil); err != nil || r.N != held {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, held)
	}
	waiter := func(tubes ...string) *testproc.Conn {
		w := testproc.DialTest(t, m2.Addr().String(), replyTimeout)
		for i, tube := range tubes {
			expectLine(t, w, "watch "+tube, fmt.Sprintf("WATCHING %d", i+2))
		}
		expectLine(t, w, "ignore default", fmt.Sprintf("WATCHING %d", len(tubes)))
		w.WriteString("reserve-with-timeout 3\r\n")
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return w
	}
	alone, both := waiter(one), waiter(across, elsewhere)
	waiting := func(tube string) bool {
		st, err := producer.Stats("stats-tube " + tube)
		return err == nil && st["current-waiting"] == "1"
	}
	testproc.WaitFor(t, 5*time.Second, "both reserves waiting", func() bool {
		return waiting(one) && waiting(across) && waiting(elsewhere)
	})

	m2.cfg.ShutdownTimeout = time.Minute // past the reserves' timeouts
	stopped := c.beginShutdown("m2")
	var put []uint64
	for _, tube := range []string{one, across, elsewhere} {
		expectLine(t, producer, "use "+tube, "USING "+tube)
		id, err := producer.Put(0, 0, 60, []byte("meanwhile"))
		if err != nil {
			t.Fatal(err)
		}
		put = append(put, id)
	}
	for name, w := range map[string]*testproc.Conn{one: alone, across + " and " + elsewhere: both} {
		if r, err := w.ReadReply(false); err != nil || string(r.Line) != "TIMED_OUT" {
			t.Errorf("a reserve waiting on %s as the shutdown began: %q %v, want TIMED_OUT", name, r.Line, err)
		}
	}
	for _, id := range put {
		if st, err := producer.Stats(fmt.Sprintf("stats-job %d", id)); err != nil || st["state"] != "ready" || st["reserves"] != "0" {
			t.Errorf("stats-job %d: state %s, reserves %s (%v); want ready, never reserved", id, st["state"], st["reserves"], err)
		}
	}
	c.endShutdown("m2", holder, held, stopped)
}

// TestShutdownHoldsJobsDeadlineSoon: with one group, a member that does
// not lead it and shuts down gracefully still answers DEADLINE_SOON to its
// worker's reserve when the job the worker holds comes near its TTR, as
// one server holding its jobs does, not TIMED_OUT at the reserve's end.
func TestShutdownHoldsJobsDeadlineSoon(t *testing.T) {
	c := newShardedCluster(t, 1)
	c.finalized()
	leader, _ := c.serving(10 * time.Second)
	name := "m1"
	if leader == name {
		name = "m2"
	}
	worker := testproc.DialTest(t, c.up[name].Addr().String(), replyTimeout)
	id, err := worker.Put(0, 0, 2, []byte("soon"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := worker.Do("reserve-with-timeout 5", nil); err != nil || r.N != id {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, id)
	}
	reserved := time.Now()
	stopped := c.beginShutdown(name)
	expectLine(t, worker, "reserve-with-timeout 5", "DEADLINE_SOON")
	if d := time.Since(reserved); d > 2*time.Second {
		t.Fatalf("DEADLINE_SOON %v after the reserve of a job of TTR 2 s, want about 1 s", d)
	}
	c.endShutdown(name, worker, id, stopped)
}

// beginShutdown begins the graceful shutdown of the member named name and
// returns once it drains; the channel closes when it has stopped.
func (c *testCluster) beginShutdown(name string) <-chan struct{} {
	c.t.Helper()
	m := c.up[name]
	stopped := make(chan struct{})
	go func() {
		m.Shutdown(context.Background())
		close(stopped)
	}()
	testproc.WaitFor(c.t, 5*time.Second, name+" draining", m.engine.Draining)
	return stopped
}

// endShutdown deletes held, the last job the workers of the member named
// name hold, through worker, and waits for the member's shutdown to end.
func (c *testCluster) endShutdown(name string, worker *testproc.Conn, held uint64, stopped <-chan struct{}) {
	c.t.Helper()
	if err := worker.ExpectLine(fmt.Sprintf("delete %d", held), "DELETED"); err != nil {
		c.t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("%s still shutting down 10 s after its worker's job was deleted", name)
	}
	delete(c.up, name)
}

// TestShardGroupsHandOverStays: a handover whose transfer does not happen
// leaves the leadership serving as before (a job its holder's session
// gave back by closing is handed out again), and voids the reservations
// it logged: a leader chosen later by an election, with nothing else
// logged between, does not give the job to the session that held it
// when the handover was tried, which is gone: the job is ready there, as
// after any failover, not held by a closed session until its TTR.
func TestShardGroupsHandOverStays(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	c.balanced()
	m1 := c.up["m1"]
	g := c.ledBy("m1")
	tube := tubePerGroup(p, "h")[g]
	producer := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, producer, "use "+tube, "USING "+tube)
	id, err := producer.Put(0, 0, 60, []byte("job"))
	if err != nil {
		t.Fatal(err)
	}
	holder := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, holder, "watch "+tube, "WATCHING 2")
	if r, err := holder.Do("reserve-with-timeout 5", nil); err != nil || r.N != id {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, id)
	}

	if err := m1.handOver(m1.shards.node(g), g, "nobody"); !errors.Is(err, replication.ErrUnknownMember) {
		t.Fatalf("a handover to nobody: %v", err)
	}
	if m1.shards.serving(g) == nil {
		t.Fatal("the leadership went")
	}
	holder.Close() // its reservation ends on m1, which logs nothing of it
	other := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	expectLine(t, other, "watch "+tube, "WATCHING 2")
	if r, err := other.Do("reserve-with-timeout 5", nil); err != nil || r.N != id {
		t.Fatalf("reserve after the handover stayed: %+v %v, want job %d", r, err, id)
	}

	done, cancel := context.WithCancel(context.Background())
	cancel()
	m1.Shutdown(done) // at once: no handover
	delete(c.up, "m1")
	testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("group %d served again", g), func() bool {
		return c.up["m2"].shards.serving(g) != nil || c.up["m3"].shards.serving(g) != nil
	})
	if st, err := producer.Stats(fmt.Sprintf("stats-job %d", id)); err != nil || st["state"] != "ready" {
		t.Fatalf("stats-job %d after the election: %v %v, want it ready", id, st, err)
	}
}

// TestShutdownHandsOverLeaderships: a member that shuts down gracefully
// (SIGTERM) hands each group it leads to another voter before its node
// stops, with one group and with three. Another member serves the group
// well within an election timeout of the shutdown's return, and a worker
// on another member keeps the job it holds there: its touch answers
// TOUCHED. Left to an election, the group waits an election timeout at
// least and the job is ready again (NOT_FOUND).
func TestShutdownHandsOverLeaderships(t *testing.T) {
	for _, groups := range []int{1, 3} {
		t.Run(fmt.Sprintf("groups=%d", groups), func(t *testing.T) {
			c := newShardedCluster(t, groups)
			c.finalized()
			var leaving string
			var g uint16
			tube := "default"
			if groups == 1 {
				leaving, _ = c.serving(10 * time.Second)
			} else {
				c.balanced()
				leaving, g = "m3", c.ledBy("m3")
				tube = tubePerGroup(c.up["m1"].shards.placement, "s")[g]
			}
			var stays []string
			for _, name := range []string{"m1", "m2", "m3"} {
				if name != leaving {
					stays = append(stays, name)
				}
			}
			// On stays[0], which the shutdown picks (each leads as
			// many, and it comes first by name): the leadership goes to
			// the holder's own member, within 10 s of its start.
			worker := testproc.DialTest(t, c.up[stays[0]].Addr().String(), replyTimeout)
			expectLine(t, worker, "use "+tube, "USING "+tube)
			watching := "WATCHING 2"
			if tube == "default" {
				watching = "WATCHING 1"
			}
			expectLine(t, worker, "watch "+tube, watching)
			id, err := worker.Put(0, 0, 60, []byte("held across the shutdown"))
			if err != nil {
				t.Fatal(err)
			}
			if r, err := worker.Do("reserve-with-timeout 5", nil); err != nil || r.N != id {
				t.Fatalf("reserve: %+v %v, want job %d", r, err, id)
			}

			c.stop(leaving)
			stopped := time.Now()
			et := c.up[stays[0]].Node().ElectionTimeout()
			testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("group %d served again", g), func() bool {
				return c.up[stays[0]].shards.serving(g) != nil || c.up[stays[1]].shards.serving(g) != nil
			})
			if took := time.Since(stopped); took > et/2 {
				t.Errorf("group %d served again %v after %s's shutdown returned, want within half an election timeout (%v): "+
					"its leadership was not handed over", g, took, leaving, et/2)
			}
			// touch, unlike delete, needs the job reserved by the session.
			if err := worker.ExpectLine(fmt.Sprintf("touch %d", id), "TOUCHED"); err != nil {
				t.Fatalf("the worker's touch of the job it held: %v", err)
			}
			if err := worker.ExpectLine(fmt.Sprintf("delete %d", id), "DELETED"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestShardGroupsCordon: a member cordoned through another member's side
// port (which forwards to group 0's leader) hands the group it leads
// over, and the balancers give it none while it stays cordoned; the
// members' list shows it; a graceful shutdown of another hands its groups
// elsewhere. No longer cordoned, it leads its share again.
func TestShardGroupsCordon(t *testing.T) {
	c := newBalancedCluster(t)
	call := func(method, path string) testproc.APIReply {
		t.Helper()
		return testproc.DoAPI(t, testproc.APIRequest{Method: method, URL: "http://" + c.up["m2"].HTTPAddr().String() + path,
			Bearer: testToken, Timeout: replyTimeout})
	}
	cordon := func(method string) {
		t.Helper()
		rep := call(method, "/cluster/members/m3/cordon")
		if want := fmt.Sprintf(`"cordoned":%v`, method == http.MethodPost); rep.Status != http.StatusOK || !strings.Contains(string(rep.Body), want) {
			t.Fatalf("%s /cluster/members/m3/cordon: %d %s, want 200 with %s", method, rep.Status, rep.Body, want)
		}
	}
	leads := func(name string) int {
		n := 0
		for g := range 3 {
			if info, _ := c.up["m2"].shards.node(uint16(g)).Leader(); info.Name == name {
				n++
			}
		}
		return n
	}
	cordon(http.MethodPost)
	testproc.WaitFor(t, 20*time.Second, "m3 leading no group", func() bool { return leads("m3") == 0 })
	// Past the balancers' settling time, and a few of their rounds: none
	// comes back to it, though it leads fewest.
	time.Sleep(leaderSettle + 3*balanceEvery)
	if n := leads("m3"); n != 0 {
		t.Fatalf("m3, cordoned, leads %d groups again", n)
	}
	var list struct {
		Members []replication.MemberStatus `json:"members"`
	}
	if err := json.Unmarshal(call(http.MethodGet, "/cluster/members").Body, &list); err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		if m.Cordoned != (m.Name == "m3") {
			t.Errorf("/cluster/members lists %s cordoned: %v", m.Name, m.Cordoned)
		}
	}
	// A graceful shutdown hands its groups to a member that may lead,
	// though the cordoned one leads fewest.
	c.stop("m1")
	// m1 saw m2 lead each group before it stopped; m2 publishes what it
	// leads at the end of the round that sent its first appends. An
	// election (a handover failed) would take an election timeout.
	m2 := c.up["m2"]
	testproc.WaitForWhy(t, m2.Node().ElectionTimeout()/2, "m2 leading the 3 groups after m1's shutdown", func() (bool, string) {
		n, cordoned := leads("m2"), leads("m3")
		return n == 3, fmt.Sprintf("m2 leads %d, m3, cordoned, %d", n, cordoned)
	})
	c.start("m1")
	cordon(http.MethodDelete)
	c.balanced()
}

// TestShardGroupsHandOverReceiverLost: a handover whose receiver stops
// under it (as the transfer is asked for) is aborted once the receiver
// has been silent a third of an election timeout, not left to raft,
// which drops the group's proposals until an election timeout has
// passed: the group serves here again, and takes a put, sooner than
// that. A handover whose receiver needs this member's vote, too few other
// voters being heard from, happens as quickly as any.
func TestShardGroupsHandOverReceiverLost(t *testing.T) {
	c := newBalancedCluster(t)
	m1 := c.up["m1"]
	g := c.ledBy("m1")
	tube := tubePerGroup(m1.shards.placement, "r")[g]
	et := m1.Node().ElectionTimeout()
	m3 := c.up["m3"]
	delete(c.up, "m3")
	hook := func(uint16) {
		now, cancel := context.WithCancel(context.Background())
		cancel()
		m3.Shutdown(now) // at once: silent from here on
	}
	m1.beforeTransfer.Store(&hook)
	began := time.Now()
	err := m1.handOver(m1.shards.node(g), g, "m3")
	took := time.Since(began)
	m1.beforeTransfer.Store(nil)
	t.Logf("the handover to m3, stopped, gave up after %v (election timeout %v)", took, et)
	if !errors.Is(err, errLeadershipStayed) {
		t.Fatalf("a handover to a member stopped: %v, want errLeadershipStayed", err)
	}
	if m1.shards.serving(g) == nil {
		t.Fatal("the group is not served here after its handover stayed")
	}
	if took >= et {
		t.Errorf("the handover to a stopped member gave up after %v, not before an election timeout (%v): "+
			"the transfer was not aborted", took, et)
	}
	producer := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, producer, "use "+tube, "USING "+tube)
	if _, err := producer.Put(0, 0, 60, []byte("after")); err != nil {
		t.Fatalf("a put into group %d after its handover stayed: %v", g, err)
	}
	// m3 silent, m2 is elected only with m1's vote, which m1 sends as it
	// steps down (replication's TestStepDownSendsVote): the handover is
	// as quick as any.
	testproc.WaitFor(t, 5*time.Second, "m3 no longer heard from", func() bool {
		return !m1.node.Host().HeardFrom("m3", et/3)
	})
	began = time.Now()
	if err := m1.handOver(m1.shards.node(g), g, "m2"); err != nil {
		t.Fatalf("a handover to m2 with m3 down: %v", err)
	}
	testproc.WaitFor(t, 5*time.Second, "m2 serving the group", func() bool {
		return c.up["m2"].shards.serving(g) != nil
	})
	// A campaign that lost would be tried again after the randomized
	// election timeout, its least half of et.
	took = time.Since(began)
	t.Logf("m2, needing m1's vote, served %v after the handover began", took)
	if took >= et/2 {
		t.Errorf("m2 served %v after the handover began, not within the least election timeout (%v): its campaign was lost", took, et/2)
	}
}

// TestShardGroupsHandOverNotLogged: a handover whose record of its
// sessions' reservations is not logged in time (here its followers stop
// as it logs it, so nothing commits) keeps the leadership rather than
// transfer it without them: no transfer is asked for, and it says why.
// A transfer then would leave the worker's job to be handed out again,
// as after a failover, though the leader meant to hand it over.
func TestShardGroupsHandOverNotLogged(t *testing.T) {
	wait := handOverRecordWait
	handOverRecordWait = 50 * time.Millisecond // within an election timeout: 500 ms here
	t.Cleanup(func() { handOverRecordWait = wait })
	c := newBalancedCluster(t)
	m1 := c.up["m1"]
	g := c.ledBy("m1")
	tube := tubePerGroup(m1.shards.placement, "n")[g]
	worker := testproc.DialTest(t, m1.Addr().String(), replyTimeout)
	expectLine(t, worker, "use "+tube, "USING "+tube)
	id, err := worker.Put(0, 0, 60, []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	expectLine(t, worker, "watch "+tube, "WATCHING 2")
	if r, err := worker.Do("reserve-with-timeout 5", nil); err != nil || r.N != id {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, id)
	}

	followers := []*Member{c.up["m2"], c.up["m3"]}
	delete(c.up, "m2")
	delete(c.up, "m3")
	stopFollowers := func(uint16) {
		now, cancel := context.WithCancel(context.Background())
		cancel()
		for _, f := range followers {
			f.Shutdown(now) // at once: nothing commits from here on
		}
	}
	transferred := false
	noteTransfer := func(uint16) { transferred = true }
	m1.beforeRecord.Store(&stopFollowers)
	m1.beforeTransfer.Store(&noteTransfer)
	err = m1.handOver(m1.shards.node(g), g, "m2")
	m1.beforeRecord.Store(nil)
	m1.beforeTransfer.Store(nil)
	if !errors.Is(err, errNotLogged) {
		t.Fatalf("a handover whose record cannot commit: %v, want errNotLogged", err)
	}
	if transferred {
		t.Fatal("the handover asked for the transfer though its record was not logged")
	}
}

// TestShardGroupsHandOverBeforeAcked: a handover goes on when what ran
// on its leader's store was not yet acknowledged when its wait for it
// ended (a slow disk; here the wait is none). Puts pipelined as it goes,
// from a session on the leader (run on its store) and from one on a
// third member (sent to the leader), lose nothing: every INSERTED job is
// there once, the third member's session answers every put, the
// leader's own session answers or closes (never hangs), and the job a
// worker holds stays its own across the handovers (their records commit
// after what ran).
func TestShardGroupsHandOverBeforeAcked(t *testing.T) {
	wait := handOverAckWait
	handOverAckWait = 0
	t.Cleanup(func() { handOverAckWait = wait })
	c := newBalancedCluster(t)
	g := c.ledBy("m1")
	tube := tubePerGroup(c.up["m1"].shards.placement, "a")[g]

	worker := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, worker, "use "+tube, "USING "+tube)
	held, err := worker.Put(0, 0, 60, []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	expectLine(t, worker, "watch "+tube, "WATCHING 2")
	if r, err := worker.Do("reserve-with-timeout 5", nil); err != nil || r.N != held {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, held)
	}

	const puts = 300
	acked := map[string]uint64{} // body → id, of every INSERTED
	pipeline := func(addr, prefix string) *testproc.Conn {
		p := testproc.DialTest(t, addr, replyTimeout)
		expectLine(t, p, "use "+tube, "USING "+tube)
		for i := range puts {
			body := fmt.Sprintf("%s-%d", prefix, i)
			p.WriteString(fmt.Sprintf("put 1 0 60 %d\r\n%s\r\n", len(body), body))
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// answers reads p's replies to its puts; with closes, the connection
	// may close instead of answering the rest, as a member closes a
	// session waiting on a leadership it lost.
	answers := func(p *testproc.Conn, prefix string, closes bool) int {
		for i := range puts {
			r, err := p.ReadReply(false)
			if err != nil {
				if closes && errors.Is(err, io.EOF) {
					return i
				}
				t.Fatalf("put %s-%d: %v", prefix, i, err)
			}
			if r.Kind != testproc.ReplyInserted {
				t.Fatalf("put %s-%d: %q", prefix, i, r.Line)
			}
			acked[fmt.Sprintf("%s-%d", prefix, i)] = r.N
		}
		return puts
	}
	wentOn := 0
	for round := 0; round < 6 && wentOn < 2; round++ {
		leader := c.leaderOf(g)
		var others []string
		for _, name := range []string{"m1", "m2", "m3"} {
			if name != leader.node.Name() {
				others = append(others, name)
			}
		}
		local := pipeline(leader.Addr().String(), fmt.Sprintf("l%d", round))
		remote := pipeline(c.up[others[1]].Addr().String(), fmt.Sprintf("r%d", round))
		warned := strings.Count(c.outs[leader.node.Name()].String(), "before its log acknowledged what ran here")
		err := leader.handOver(leader.shards.node(g), g, others[0])
		got := answers(local, fmt.Sprintf("l%d", round), true)
		answers(remote, fmt.Sprintf("r%d", round), false)
		local.Close()
		remote.Close()
		t.Logf("round %d: %s → %s: %v; the leader's session answered %d puts", round, leader.node.Name(), others[0], err, got)
		if err == nil && strings.Count(c.outs[leader.node.Name()].String(), "before its log acknowledged what ran here") > warned {
			wentOn++
		}
	}
	if wentOn == 0 {
		t.Fatal("no handover went on with what ran unacknowledged: the case was not tested")
	}

	expectLine(t, worker, fmt.Sprintf("touch %d", held), "TOUCHED")
	consumer := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	expectLine(t, consumer, "watch "+tube, "WATCHING 2")
	seen := map[string]uint64{}
	for {
		r, err := consumer.Do("reserve-with-timeout 0", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == testproc.ReplyTimedOut {
			break
		}
		if r.Kind != testproc.ReplyReserved {
			t.Fatalf("reserve: %q", r.Line)
		}
		body := string(r.Body)
		if id, dup := seen[body]; dup {
			t.Fatalf("%q is in jobs %d and %d", body, id, r.N)
		}
		seen[body] = r.N
		expectLine(t, consumer, fmt.Sprintf("delete %d", r.N), "DELETED")
	}
	for body, id := range acked {
		if seen[body] != id {
			t.Errorf("%q was INSERTED as job %d; found as %d", body, id, seen[body])
		}
	}
	t.Logf("%d puts acknowledged, %d jobs found", len(acked), len(seen))
}

// TestCloseClientsBeforeEngine: group 0's owner clients are detached
// when the member loses its leadership before its engine is made. The
// router serves other members' sessions from startRouter on, and
// startNode starts the other groups before the engine is made: a
// handover's reservation adopted then, and the leadership lost, left
// group 0's store held, and the rebuild's restore stopped the member
// (a CI fault round, fifty-fifth session).
func TestCloseClientsBeforeEngine(t *testing.T) {
	st, id := storeWithJob(t)
	var serving atomic.Bool
	serving.Store(true)
	r := router.NewRouter(router.RouterConfig{
		Self: 1,
		Serving: func(g uint16) *store.Store {
			if g == 0 && serving.Load() {
				return st
			}
			return nil
		},
		Send:   func(uint64, []byte) bool { return true },
		Leader: func(uint16) (uint64, bool) { return 1, true },
	})
	defer r.Close()
	m := &Member{log: zerolog.Nop(), store: st}
	m.sessions = r
	held := []router.Holder{{Member: 2, Session: 7, ID: id, Deadline: time.Now().Add(time.Minute).UnixNano()}}
	if took := r.Adopt(0, st, held); took != 1 {
		t.Fatalf("adopted %d reservations, want 1", took)
	}
	serving.Store(false) // the leadership is lost: the rebuild closes the clients
	if err := m.closeClients(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := st.Stats().Reserved; n != 0 {
		t.Errorf("%d jobs reserved after the clients closed, want 0", n)
	}
	if err := st.Reset(); err != nil {
		t.Errorf("the rebuild's reset: %v", err)
	}
}

// storeWithJob is a store holding one ready job, id, closed with t.
func storeWithJob(t *testing.T) (*store.Store, uint64) {
	t.Helper()
	st := store.New(store.Options{})
	t.Cleanup(st.Close)
	producer := st.NewClient(nil)
	producer.Use([]byte("work"))
	id := st.NextID()
	if _, err := producer.Put(id, 0, 0, 60, []byte("held\r\n")); err != nil {
		t.Fatal(err)
	}
	return st, id
}

// TestHandedBeforeRouter: a leadership handed over to a member as its
// node starts, before its router is made, keeps the reservations that
// came with it: the node's goroutine waits for the router, and gives them
// before it serves. They were dropped (the jobs ready again) while the
// node took handovers only once the member registered for them after
// the router.
func TestHandedBeforeRouter(t *testing.T) {
	st, id := storeWithJob(t)
	m := &Member{log: zerolog.Nop(), store: st, routerMade: make(chan struct{})}
	handed, err := json.Marshal([]router.Holder{{Member: 2, Session: 7, ID: id, Deadline: time.Now().Add(time.Minute).UnixNano()}})
	if err != nil {
		t.Fatal(err)
	}
	took := make(chan struct{})
	go func() {
		m.takeHanded(0, st, handed) // on the node's goroutine, no router yet
		close(took)
	}()
	select {
	case <-took:
		t.Fatal("the handover returned before the router was made")
	case <-time.After(50 * time.Millisecond):
	}
	r := router.NewRouter(router.RouterConfig{
		Self:    1,
		Serving: func(g uint16) *store.Store { return st },
		Send:    func(uint64, []byte) bool { return true },
		Leader:  func(uint16) (uint64, bool) { return 1, true },
	})
	defer r.Close()
	m.setSessions(r)
	<-took
	if n := st.Stats().Reserved; n != 1 {
		t.Fatalf("%d jobs reserved once the router is made, want the one handed over", n)
	}
	if held := r.Held(0); len(held) != 1 || held[0].Member != 2 || held[0].Session != 7 || held[0].ID != id {
		t.Errorf("the router holds %+v, want job %d for member 2's session 7", held, id)
	}
}

// TestShardGroupsHandedAwayNotBack: the balancers give no leadership to a
// member that has just handed its own away, as a graceful shutdown does
// before its node stops (handOverLeaderships): leading fewer than the
// others, it was handed one back within a balancer's tick or two, which
// then went to an election as it stopped, the jobs held in it ready
// again. After leaderSettle it may lead again.
func TestShardGroupsHandedAwayNotBack(t *testing.T) {
	c := newBalancedCluster(t)
	leaving := c.up["m3"]
	g := c.ledBy("m3")
	// The balancers move no leadership that changed within leaderSettle:
	// the groups' leaderships settle, as in a cluster that has run a
	// while.
	time.Sleep(leaderSettle + balanceEvery)
	leaving.handOverLeaderships(context.Background())
	handed := time.Now()
	testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("group %d served elsewhere", g), func() bool {
		return c.up["m1"].shards.serving(g) != nil || c.up["m2"].shards.serving(g) != nil
	})
	// The balancers tick every second: a leadership handed back comes
	// within two. None may before leaderSettle has passed since they saw
	// m3 give its group away, a tick at most after the handover.
	for time.Since(handed) < leaderSettle-balanceEvery/2 {
		for g := range 3 {
			if leaving.shards.serving(uint16(g)) != nil {
				t.Fatalf("m3 leads group %d %v after it handed its leadership over, want none for %v",
					g, time.Since(handed).Round(time.Millisecond), leaderSettle)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
