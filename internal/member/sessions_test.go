package member

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestSessionsWhereClientsConnect: once the cluster is finalized, a
// member that does not lead serves its clients' sessions itself and sends
// their commands to the leader (internal/router): the replies are one
// server's, the tubes' references count wherever their sessions live,
// and when the leader changes those sessions stay open and go on, while
// the old leader's own clients, served from the store it rebuilds, close.
func TestSessionsWhereClientsConnect(t *testing.T) {
	c := newTestCluster(t)
	lname, l := c.serving(20 * time.Second)
	c.finalized()
	f := c.others(lname)
	producer := testproc.DialTest(t, f[0].Addr().String(), replyTimeout)
	worker := testproc.DialTest(t, f[1].Addr().String(), replyTimeout)
	direct := testproc.DialTest(t, l.Addr().String(), replyTimeout)
	expect := func(c *testproc.Conn, line, want string) {
		t.Helper()
		if err := c.ExpectLine(line, want); err != nil {
			t.Fatal(err)
		}
	}
	expect(producer, "use jobs", "USING jobs")
	expect(worker, "watch jobs", "WATCHING 2")
	expect(worker, "ignore default", "WATCHING 1")
	expect(worker, "ignore jobs", "NOT_IGNORED")
	expect(worker, "list-tube-used", "USING default")
	// Counted at the leader, wherever the sessions live: the producer
	// (f0) uses jobs and watches default, the worker (f1) uses default
	// and watches jobs, the direct client uses and watches default.
	tubeRefs := func(through *testproc.Conn, tube string, using, watching int64) {
		t.Helper()
		got, err := through.StatsInt("stats-tube "+tube, "current-using", "current-watching")
		if err != nil || got[0] != using || got[1] != watching {
			t.Fatalf("stats-tube %s: using/watching %v %v, want %d/%d", tube, got, err, using, watching)
		}
	}
	tubeRefs(direct, "jobs", 1, 1)
	tubeRefs(producer, "default", 2, 2)

	// A reserve waiting through one follower is woken by a put through
	// the other.
	worker.WriteString("reserve-with-timeout 10\r\n")
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	id, err := producer.Put(3, 0, 60, []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := worker.ReadReply(true); err != nil || r.Kind != testproc.ReplyReserved || r.N != id || string(r.Body) != "first" {
		t.Fatalf("the waiting reserve: %+v %v, want job %d", r, err, id)
	}
	// A put refused after its header still takes an id, as in beanstalkd.
	producer.WriteString("put 0 0 60 3\r\nabcXY")
	if err := producer.Flush(); err != nil {
		t.Fatal(err)
	}
	if r, err := producer.ReadReply(false); err != nil || string(r.Line) != "EXPECTED_CRLF" {
		t.Fatalf("a put without its CRLF: %+v %v", r, err)
	}
	next, err := producer.Put(0, 0, 60, []byte("second"))
	if err != nil || next != id+2 {
		t.Fatalf("the put after a refused one: id %d %v, want %d", next, err, id+2)
	}
	expect(worker, fmt.Sprintf("release %d 5 0", id), "RELEASED")
	if r, err := worker.Do("reserve-with-timeout 0", nil); err != nil || r.N != next {
		t.Fatalf("reserve: %+v %v, want the more urgent job %d", r, err, next)
	}
	expect(worker, fmt.Sprintf("bury %d 0", next), "BURIED")
	expect(producer, "kick 5", "KICKED 1")
	expect(worker, fmt.Sprintf("touch %d", id), "NOT_FOUND")
	if st, err := producer.Stats(fmt.Sprint("stats-job ", next)); err != nil || st["state"] != "ready" || st["kicks"] != "1" || st["buries"] != "1" {
		t.Fatalf("stats-job %d through a follower: %v %v", next, st, err)
	}
	if r, err := producer.Do(fmt.Sprint("peek ", id), nil); err != nil || r.N != id || string(r.Body) != "first" {
		t.Fatalf("peek: %+v %v", r, err)
	}

	// The leadership moves to the producer's member: the followers'
	// sessions stay open, the old leader's own client closes.
	to := f[0]
	testproc.WaitFor(t, 10*time.Second, "the leadership moving to "+to.Node().Name(), func() bool {
		if err := l.Node().TransferLeadership(to.Node().Name()); err != nil {
			t.Fatal(err)
		}
		info, _ := to.Node().Leader()
		return info.Serving && info.Name == to.Node().Name()
	})
	third, err := producer.Put(0, 0, 60, []byte("third"))
	if err != nil || third <= next {
		t.Fatalf("a put after the leader changed, on the session opened before: %d %v", third, err)
	}
	for _, want := range []uint64{next, third, id} {
		r, err := worker.Do("reserve-with-timeout 5", nil)
		if err != nil || r.N != want {
			t.Fatalf("reserve after the leader changed: %+v %v, want job %d", r, err, want)
		}
		expect(worker, fmt.Sprint("delete ", want), "DELETED")
	}
	if r, err := direct.Do("list-tube-used", nil); err == nil {
		t.Errorf("the old leader's own client was answered after it lost the leadership: %+v", r)
	}
	// The new leader has every member's references again, once each
	// member's sync (sent when it learned of the leader, again until the
	// leader serves) has reached it.
	testproc.WaitFor(t, 5*time.Second, "every member's references at the new leader", func() bool {
		jobs, err := producer.StatsInt("stats-tube jobs", "current-using", "current-watching")
		def, err2 := worker.StatsInt("stats-tube default", "current-using", "current-watching")
		return err == nil && err2 == nil && jobs[0] == 1 && jobs[1] == 1 && def[0] == 1 && def[1] == 1
	})
	c.readyEverywhere(0)
	// The worker's member counts its one remote session, its requests,
	// and the keyed outcomes its replica keeps; /metrics shows them.
	st := f[1].sessions.Stats()
	if st.RemoteSessions != 1 || st.Requests == 0 || st.DedupEntries == 0 {
		t.Errorf("the router's figures on the worker's member: %+v", st)
	}
	if r := api(t, f[1], "/metrics"); !strings.Contains(string(r.Body), "\nsprout_router_remote_sessions 1\n") {
		t.Errorf("/metrics without sprout_router_remote_sessions 1:\n%s", r.Body)
	}
}

// TestSessionsWithoutLeader: a member's clients whose group has no leader
// (two of three members down) are answered within about an election
// timeout as one server whose log cannot take a change would be
// (docs/design/shards.md 5.7), never left hanging; once a leader is back
// the same connections go on.
func TestSessionsWithoutLeader(t *testing.T) {
	c := newTestCluster(t)
	lname, _ := c.serving(20 * time.Second)
	c.finalized()
	f := c.others(lname)
	alone, other := f[0], f[1].Node().Name()
	client := testproc.DialTest(t, alone.Addr().String(), 10*time.Second)
	c.stop(lname)
	c.stop(other)
	// Nor one reported: a report the stopped members sent just before
	// stays fresh a moment, and a put sent on it to the stopped leader
	// may have run there, which closes the connection (FailedLost).
	testproc.WaitFor(t, 10*time.Second, "the member left alone knowing no leader", func() bool {
		info, _ := alone.Node().Leader()
		_, reported := alone.sessions.Reported()[0]
		return info.Name == "" && !reported
	})
	for _, step := range []struct{ send, want string }{
		{"put 0 0 60 1\r\nx\r\n", "OUT_OF_MEMORY"},
		{"stats\r\n", "INTERNAL_ERROR"},
		{"delete 1\r\n", "INTERNAL_ERROR"},
		{"release 1 0 0\r\n", "OUT_OF_MEMORY"},
		{"bury 1 0\r\n", "INTERNAL_ERROR"},
		{"kick-job 1\r\n", "NOT_FOUND"},
		{"reserve-with-timeout 1\r\n", "TIMED_OUT"},
		{"use elsewhere\r\n", "USING elsewhere"},
	} {
		start := time.Now()
		client.WriteString(step.send)
		if err := client.Flush(); err != nil {
			t.Fatal(err)
		}
		r, err := client.ReadReply(false)
		if err != nil || string(r.Line) != step.want {
			t.Fatalf("%q without a leader: %q %v, want %q", step.send, r.Line, err, step.want)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%q without a leader answered after %v", step.send, took)
		}
	}
	c.start(lname)
	c.start(other)
	c.serving(20 * time.Second)
	if id, err := client.Put(0, 0, 60, []byte("back")); err != nil || id == 0 {
		t.Fatalf("a put once a leader is back, on the same connection: %d %v", id, err)
	}
	if err := client.ExpectLine("list-tube-used", "USING elsewhere"); err != nil {
		t.Fatal(err)
	}
}

// finalized waits until every member up runs cluster version 3: sessions
// live where their clients connect.
func (c *testCluster) finalized() {
	c.t.Helper()
	testproc.WaitFor(c.t, 10*time.Second, "every member finalized", func() bool {
		for _, m := range c.up {
			if !m.Node().Host().Finalized() {
				return false
			}
		}
		return true
	})
}

// TestShardGroupsQuitReleasesAtOnce: a client's quit gives its jobs back
// before its connection closes, as beanstalkd's does, also in a group
// its member leads: another client that looks at once, through the same
// member, finds the job ready. (The close went through the member's own
// loop, and the other client's stats-job, run on the store at once,
// could overtake it.)
func TestShardGroupsQuitReleasesAtOnce(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tube := tubePerGroup(p, "quits")[1]
	via := c.leaderOf(1)
	looker := testproc.DialTest(t, via.Addr().String(), replyTimeout)
	for i := range 30 {
		holder, id := reserveOne(t, via, tube, 60)
		holder.WriteString("quit\r\n")
		if err := holder.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := holder.ReadReply(false); err == nil {
			t.Fatal("quit was answered")
		}
		st, err := looker.Stats(fmt.Sprintf("stats-job %d", id))
		if err != nil || st["state"] != "ready" {
			t.Fatalf("round %d: stats-job of the quit client's job: %v %v, want ready", i, st, err)
		}
		expectLine(t, looker, fmt.Sprintf("delete %d", id), "DELETED")
	}
}

// TestShardGroupsShutdownWaitsForSessions: a member's graceful shutdown
// waits for the jobs its own sessions hold, in whichever group, not for
// its store's reservations: a job of a group another member leads,
// reserved through this member, holds the shutdown until its worker
// deletes it (the store here never saw it reserved).
func TestShardGroupsShutdownWaitsForSessions(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	tube := tubePerGroup(c.up["m1"].shards.placement, "drain")[1]
	leader := c.leaderOf(1)
	var via *Member
	for _, m := range c.up {
		if m != leader {
			via = m
			break
		}
	}
	worker, id := reserveOne(t, via, tube, 120)
	via.cfg.ShutdownTimeout = time.Minute
	name := via.node.Name()
	done := make(chan struct{})
	go func() {
		via.Shutdown(context.Background())
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("the shutdown did not wait for the job its worker holds")
	case <-time.After(1500 * time.Millisecond):
	}
	expectLine(t, worker, fmt.Sprintf("delete %d", id), "DELETED")
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the shutdown goes on waiting once the job is deleted")
	}
	delete(c.up, name)
}

// reserveOne connects to via, puts a job of ttr seconds into tube, and
// reserves it: the connection that holds it, and the job's id.
func reserveOne(t *testing.T, via *Member, tube string, ttr int) (*testproc.Conn, uint64) {
	t.Helper()
	conn := testproc.DialTest(t, via.Addr().String(), replyTimeout)
	expectLine(t, conn, "use "+tube, "USING "+tube)
	expectLine(t, conn, "watch "+tube, "WATCHING 2")
	id, err := conn.Put(0, 0, ttr, []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := conn.Do("reserve-with-timeout 0", nil); err != nil || r.N != id {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	return conn, id
}
