package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/member"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// The cluster tests run three real sprout processes (race-built under
// -race, as testproc builds them) on 127.0.0.1, each with its side port,
// and talk to them as clients do. Waits are bounded by deadlines.

// failoverBound is the cluster's failover goal for the worst case: from
// the leader's loss to the first put acknowledged through a surviving
// member.
const failoverBound = 3 * time.Second

type testMember struct {
	name     string
	peerAddr string // --cluster-listen
	httpAddr string // --http
	dir      string // -b
	proc     *testproc.Process
	// peers is its --cluster-peers, when not the cluster's; args are
	// added to its command line (--cluster-join), env to its environment.
	peers string
	args  []string
	env   []string
}

type testCluster struct {
	t       *testing.T
	members []*testMember
	peers   string   // --cluster-peers
	args    []string // added to every member's command line
}

// startCluster starts members m1, m2 and m3, with args added to their
// command lines; it does not wait for a leader (awaitServing does).
func startCluster(t *testing.T, args ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, args: args}
	var peers []string
	for i := 1; i <= 3; i++ {
		m := c.newMember(fmt.Sprintf("m%d", i))
		c.members = append(c.members, m)
		peers = append(peers, m.name+"="+m.peerAddr)
	}
	c.peers = strings.Join(peers, ",")
	for _, m := range c.members {
		if err := c.start(m); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// newMember makes member name's directory and addresses.
func (c *testCluster) newMember(name string) *testMember {
	m := &testMember{name: name, dir: c.t.TempDir()}
	for _, addr := range []*string{&m.peerAddr, &m.httpAddr} {
		port, err := testproc.FreePort()
		if err != nil {
			c.t.Fatal(err)
		}
		*addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	return m
}

// start starts m (again), on a new client port; it waits only until m
// accepts connections, which its proxy holds until a leader is known.
func (c *testCluster) start(m *testMember) error {
	peers := m.peers
	if peers == "" {
		peers = c.peers
	}
	args := []string{"--http", m.httpAddr, "-b", m.dir, "--node", m.name, "--cluster-listen", m.peerAddr,
		"--cluster-peers", peers, "--log-format", "json"}
	p, err := testproc.Launch(testproc.Config{
		Binary: testproc.SproutBinary(c.t),
		Args:   append(append(args, c.args...), m.args...),
		Env:    m.env,
	})
	var se *testproc.StartError
	if errors.As(err, &se) {
		p = se.Process
	} else if err != nil {
		return err
	}
	m.proc = p
	c.t.Cleanup(func() {
		p.Kill()
		if report := p.RaceReport(); report != "" {
			c.t.Errorf("%s reported a data race:\n%s", m.name, report)
		}
		if c.t.Failed() {
			c.t.Logf("%s's output:\n%s", m.name, p.Output())
		}
	})
	return err
}

// up lists the members running.
func (c *testCluster) up() []*testMember {
	var up []*testMember
	for _, m := range c.members {
		if m.proc != nil && !m.proc.Exited() {
			up = append(up, m)
		}
	}
	return up
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// status is m's GET /cluster.
func (m *testMember) status() (replication.Status, error) {
	var st replication.Status
	resp, err := httpClient.Get("http://" + m.httpAddr + "/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("/cluster: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// ready is m's /readyz status code; 0 if it does not answer.
func (m *testMember) ready() int {
	resp, err := httpClient.Get("http://" + m.httpAddr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// readyJobs is the ready jobs in m's own store, from its /metrics (a
// follower's replica, not the leader's figure a proxied stats shows).
func (m *testMember) readyJobs() (int, error) { return m.currentJobs("ready") }

// currentJobs is the jobs in state in m's own store, from its /metrics.
func (m *testMember) currentJobs(state string) (int, error) {
	v, err := m.metric("sprout_current_jobs", `sprout_current_jobs{state="`+state+`"}`)
	return int(v), err
}

// metric is the value of m's /metrics series (its name and labels as
// written), in the family name.
func (m *testMember) metric(name, series string) (float64, error) {
	all, err := testproc.MetricSeries(httpClient, "http://"+m.httpAddr, name)
	if err != nil {
		return 0, err
	}
	v, ok := all[series]
	if !ok {
		return 0, fmt.Errorf("no %s in %s's metrics", series, m.name)
	}
	return v, nil
}

// awaitServing waits until one of members (every member up, if none is
// named) serves and every one of them names it leader.
func (c *testCluster) awaitServing(timeout time.Duration, members ...*testMember) *testMember {
	c.t.Helper()
	if len(members) == 0 {
		members = c.up()
	}
	deadline := time.Now().Add(timeout)
	for {
		var leader *testMember
		agreed := true
		var views []string
		for _, m := range members {
			st, err := m.status()
			views = append(views, fmt.Sprintf("%s: %+v %v", m.name, st, err))
			if err != nil {
				agreed = false
				continue
			}
			if st.Serving {
				leader = m
			}
			if leader != nil && st.Leader != leader.name || st.Leader == "" {
				agreed = false
			}
		}
		if leader != nil && agreed {
			for _, m := range members { // the first view may predate the leader
				if st, err := m.status(); err != nil || st.Leader != leader.name {
					agreed = false
				}
			}
			if agreed {
				return leader
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no leader all agree on within %v:\n%s", timeout, strings.Join(views, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitBalanced waits until the shard groups' leaders, as every member up
// names them, are settled: each group has one, and no member leads more
// than its share (members hand leaderships over until each leads about
// G/M). A handover during a test would move what the leader alone keeps:
// reservations, pauses.
func (c *testCluster) awaitBalanced(timeout time.Duration) {
	c.t.Helper()
	members := c.up()
	testproc.WaitFor(c.t, timeout, "the groups' leaders balanced", func() bool {
		leaders := map[int]string{}
		for _, m := range members {
			st, err := m.status()
			if err != nil {
				return false
			}
			for _, g := range st.Groups {
				if was, ok := leaders[g.ID]; g.Leader == "" || ok && was != g.Leader {
					return false
				}
				leaders[g.ID] = g.Leader
			}
		}
		share := (len(leaders) + len(members) - 1) / len(members)
		led := map[string]int{}
		for _, name := range leaders {
			if led[name]++; led[name] > share {
				return false
			}
		}
		return len(leaders) > 0
	})
}

// others are the members up but m.
func (c *testCluster) others(m *testMember) []*testMember {
	var out []*testMember
	for _, o := range c.up() {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

func dialMember(t *testing.T, m *testMember) *testproc.Conn {
	t.Helper()
	return testproc.DialTest(t, m.proc.Addr(), 5*time.Second)
}

// putThrough puts body through members, one after the other, on a new
// connection each time, until one acknowledges it; it returns the id and
// when that happened.
func putThrough(t *testing.T, timeout time.Duration, body string, members ...*testMember) (uint64, time.Time) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for i := 0; time.Now().Before(deadline); i++ {
		m := members[i%len(members)]
		c, err := testproc.Dial(m.proc.Addr(), time.Second)
		if err == nil {
			var id uint64
			id, err = c.Put(0, 0, 60, []byte(body))
			c.Close()
			if err == nil {
				return id, time.Now()
			}
		}
		last = err
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no member acknowledged a put within %v: %v", timeout, last)
	return 0, time.Time{}
}

// measureFailover puts through members until one acknowledges, logs the
// time since the leader was lost (how, says what) and holds it to
// failoverBound.
func measureFailover(t *testing.T, what string, lost time.Time, members ...*testMember) {
	t.Helper()
	_, acked := putThrough(t, 10*time.Second, "after the leader's loss", members...)
	failover := acked.Sub(lost)
	t.Logf("failover (%s of the leader to the first put acknowledged through another member): %v",
		what, failover.Round(time.Millisecond))
	if failover > failoverBound {
		t.Errorf("failover after %s took %v, over %v", what, failover, failoverBound)
	}
}

// goesOn checks that c, a client of a member that does not lead, opened
// in a finalized cluster before the leader was lost, is still served:
// its used tube is still tube, and a put into it is acknowledged.
func goesOn(t *testing.T, what string, c *testproc.Conn, tube string) {
	t.Helper()
	if err := c.ExpectLine("list-tube-used", "USING "+tube); err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if _, err := c.Put(0, 0, 60, []byte(what)); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// awaitFinalized waits until every member up runs cluster version 3: its
// clients' sessions live where they connect (internal/router).
func (c *testCluster) awaitFinalized(timeout time.Duration) {
	c.t.Helper()
	for _, m := range c.up() {
		testproc.WaitFor(c.t, timeout, m.name+" finalized", func() bool {
			st, err := m.status()
			return err == nil && st.Version == 3
		})
	}
}

// expectClosed checks that the server closed c: a read ends in end of
// file or a reset, not in a timeout.
func expectClosed(t *testing.T, what string, c *testproc.Conn, within time.Duration) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(within))
	rep, err := c.ReadReply(false)
	var ne net.Error
	switch {
	case err == nil:
		t.Errorf("%s: got %q, want the connection closed", what, rep.Line)
	case errors.As(err, &ne) && ne.Timeout():
		t.Errorf("%s: still open after %v", what, within)
	}
}

// TestClusterServes: three members serve one queue wherever a client
// connects; /cluster, /readyz and every member's own store agree. Then
// the leader is killed (-9): a surviving member acknowledges a put within
// failoverBound, a follower's client stays open and goes on with the new
// leader, nothing acknowledged is lost, and the killed member and a
// follower are restarted.
func TestClusterServes(t *testing.T) {
	c := startCluster(t)
	started := time.Now()
	l := c.awaitServing(20 * time.Second)
	t.Logf("%s leads, %v after the members started", l.name, time.Since(started).Round(time.Millisecond))
	f := c.others(l)

	// Puts through one follower, reserves through the other.
	producer := dialMember(t, f[0])
	var ids []uint64
	for i := range 10 {
		id, err := producer.Put(0, 0, 60, fmt.Appendf(nil, "job-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := dialMember(t, l).Put(0, 0, 60, []byte("direct")); err != nil {
		t.Fatal(err)
	}
	worker := dialMember(t, f[1])
	r, err := worker.Do("reserve-with-timeout 5", nil)
	if err != nil || r.Kind != testproc.ReplyReserved || r.N != ids[0] || string(r.Body) != "job-0" {
		t.Fatalf("reserve through %s: %+v %v; want job %d, job-0", f[1].name, r, err, ids[0])
	}
	if err := worker.ExpectLine(fmt.Sprint("delete ", ids[0]), "DELETED"); err != nil {
		t.Fatal(err)
	}
	const ready = 10 // 11 put, 1 deleted
	for _, m := range c.members {
		got, err := dialMember(t, m).StatsInt("stats", "current-jobs-ready")
		if err != nil || got[0] != ready {
			t.Errorf("stats through %s: current-jobs-ready %v %v, want %d", m.name, got, err, ready)
		}
		testproc.WaitFor(t, 5*time.Second, m.name+"'s own store holding the jobs", func() bool {
			n, err := m.readyJobs()
			return err == nil && n == ready
		})
	}

	// What operations see: /cluster and /readyz on every member.
	lst, err := l.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.members {
		// Applied catches up with commit; the leader's match indexes are
		// read at its ticks.
		testproc.WaitFor(t, 5*time.Second, m.name+" applying the leader's commit", func() bool {
			st, err := m.status()
			return err == nil && st.Applied >= lst.Commit && (m != l || st.Members[0].Match != nil)
		})
		st, err := m.status()
		if err != nil {
			t.Fatal(err)
		}
		if st.Node != m.name || st.Leader != l.name || st.Term != lst.Term || st.Commit < lst.Commit || len(st.Members) != 3 {
			t.Errorf("%s's /cluster: %+v", m.name, st)
		}
		for _, ms := range st.Members {
			if (ms.Match != nil) != (m == l) || ms.Address == "" || ms.Client == "" {
				t.Errorf("%s's /cluster, member %+v: a match index only on the leader, and both addresses", m.name, ms)
			}
		}
		if code := m.ready(); code != http.StatusOK {
			t.Errorf("%s's /readyz: %d", m.name, code)
		}
		// Every member of this release: the cluster finalizes itself.
		testproc.WaitFor(t, 10*time.Second, m.name+" finalized", func() bool {
			st, err := m.status()
			return err == nil && st.Version == 3
		})
	}

	// Kill the leader: a survivor acknowledges within failoverBound, and
	// a client of a follower stays open and goes on with the next one.
	through := dialMember(t, f[0])
	if err := through.ExpectLine("use failover", "USING failover"); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	l.proc.Kill()
	measureFailover(t, "kill -9", killed, f...)
	nl := c.awaitServing(10*time.Second, f...)
	goesOn(t, "a client of a follower after the leader was killed", through, "failover")
	survivor := dialMember(t, f[0])
	for _, id := range ids[1:] {
		st, err := survivor.Stats(fmt.Sprint("stats-job ", id))
		if err != nil || st == nil || st["state"] != "ready" {
			t.Errorf("acknowledged job %d after the failover: %v %v", id, st, err)
		}
	}
	if st, _ := survivor.Stats(fmt.Sprint("stats-job ", ids[0])); st != nil {
		t.Errorf("deleted job %d came back: %v", ids[0], st)
	}

	t.Run("restart the killed leader", func(t *testing.T) {
		// Its log is in its directory: it rejoins as a follower and
		// catches up with what was committed without it.
		if err := c.start(l); err != nil {
			t.Fatal(err)
		}
		testproc.WaitFor(t, 10*time.Second, l.name+" back and ready", func() bool {
			return !l.proc.Exited() && l.ready() == http.StatusOK
		})
		// A put the failover cut short may have been done all the same:
		// the leader's count is the one to reach.
		testproc.WaitFor(t, 10*time.Second, l.name+"'s store caught up", func() bool {
			want, err := nl.readyJobs()
			got, err2 := l.readyJobs()
			return err == nil && err2 == nil && got == want && got >= ready+1
		})
		rejoined := dialMember(t, l)
		if _, err := rejoined.Put(0, 0, 60, []byte("through the restarted member")); err != nil {
			t.Error(err)
		}
		if st, _ := rejoined.Stats(fmt.Sprint("stats-job ", ids[0])); st != nil {
			t.Errorf("deleted job %d came back on %s: %v", ids[0], l.name, st)
		}
	})

	t.Run("restart a follower", func(t *testing.T) {
		var follower *testMember
		for _, m := range c.others(nl) {
			follower = m
		}
		// A client of the follower holds a job when the follower dies: its
		// session's owner client at the leader holds it until the
		// follower, started again, tells the leader its sessions are new.
		held, _ := putThrough(t, 5*time.Second, "held by a follower's client", nl)
		holder := dialMember(t, follower)
		if _, err := holder.Do(fmt.Sprint("reserve-job ", held), nil); err != nil {
			t.Fatal(err)
		}
		follower.proc.Kill()
		// Committed while it is down: it must find these on its return.
		var missed []uint64
		for i := range 5 {
			id, _ := putThrough(t, 5*time.Second, fmt.Sprint("while down ", i), nl)
			missed = append(missed, id)
		}
		if err := c.start(follower); err != nil {
			t.Fatal(err)
		}
		testproc.WaitFor(t, 10*time.Second, follower.name+" back and ready", func() bool {
			return !follower.proc.Exited() && follower.ready() == http.StatusOK
		})
		testproc.WaitFor(t, 10*time.Second, follower.name+"'s store caught up", func() bool {
			want, err := nl.readyJobs()
			got, err2 := follower.readyJobs()
			return err == nil && err2 == nil && got == want
		})
		through := dialMember(t, follower)
		testproc.WaitFor(t, 5*time.Second, "the job a client of the killed follower held, ready again", func() bool {
			st, err := through.Stats(fmt.Sprint("stats-job ", held))
			return err == nil && st["state"] == "ready"
		})
		for _, id := range missed {
			st, err := through.Stats(fmt.Sprint("stats-job ", id))
			if err != nil || st == nil || st["state"] != "ready" {
				t.Errorf("job %d put while %s was down: %v %v", id, follower.name, st, err)
			}
		}
	})
}

// TestClusterPausedLeader: a leader stopped (SIGSTOP) past an election
// timeout is replaced; when it runs again (SIGCONT) it rebuilds its store
// in place, in the same process (one start, one configuration line), its
// side port answering throughout; every client it had is closed, while a
// follower's client stays open and goes on with the new leader; the job
// the paused leader had handed out is ready on the new one, and the
// member follows it.
func TestClusterPausedLeader(t *testing.T) {
	c := startCluster(t)
	l := c.awaitServing(20 * time.Second)
	f := c.others(l)
	direct := dialMember(t, l)
	id, err := direct.Put(0, 0, 60, []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := direct.Do("reserve-with-timeout 5", nil); err != nil || r.N != id {
		t.Fatalf("reserve on the leader: %+v %v", r, err)
	}
	c.awaitFinalized(10 * time.Second)
	through := dialMember(t, f[0])
	if err := through.ExpectLine("use paused", "USING paused"); err != nil {
		t.Fatal(err)
	}

	if err := l.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	measureFailover(t, "SIGSTOP", time.Now(), f...)
	nl := c.awaitServing(10*time.Second, f...)
	goesOn(t, "a client of a follower after the leader was paused", through, "paused")

	if err := l.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 10*time.Second, l.name+" rebuilding its store", func() bool {
		return strings.Contains(l.proc.Output(), "the store is rebuilt from the log")
	})
	expectClosed(t, "a client of the paused leader", direct, 5*time.Second)
	if !strings.Contains(l.proc.Output(), "lost the leadership it served") {
		t.Errorf("%s's log does not say why it rebuilt its store", l.name)
	}
	if n := len(configLines(l.proc.Output())); n != 1 || l.proc.Exited() {
		t.Errorf("%s logged its configuration %d times (exited: %v): the rebuild is in place, one start", l.name, n, l.proc.Exited())
	}

	// The job the paused leader had handed out is ready on the new one.
	worker := dialMember(t, nl)
	r, err := worker.Do("reserve-with-timeout 5", nil)
	if err != nil || r.Kind != testproc.ReplyReserved || r.N != id || string(r.Body) != "held" {
		t.Errorf("reserve on the new leader: %+v %v; want job %d, held", r, err, id)
	}
	// Done with it: a reservation lives on the leader only, so the
	// members' ready counts agree once it is deleted.
	if err := worker.ExpectLine(fmt.Sprint("delete ", id), "DELETED"); err != nil {
		t.Error(err)
	}

	// The rebuilt member follows, ready, its store caught up; a client
	// that connects to it now reaches the new leader.
	testproc.WaitFor(t, 10*time.Second, l.name+" ready after its rebuild", func() bool {
		return !l.proc.Exited() && l.ready() == http.StatusOK
	})
	testproc.WaitFor(t, 10*time.Second, l.name+"'s store caught up", func() bool {
		want, err := nl.readyJobs()
		got, err2 := l.readyJobs()
		return err == nil && err2 == nil && got == want
	})
	rebuilt := dialMember(t, l)
	if id, err := rebuilt.Put(0, 0, 60, []byte("after")); err != nil || id == 0 {
		t.Errorf("a put through the rebuilt member: %d %v", id, err)
	}
}

// configLine is what the tests read of the "configuration" log line.
type configLine struct {
	PID             int `json:"pid"`
	OpenDescriptors int `json:"open_descriptors"`
}

// configLines are the configuration lines in a server's output: one per
// image the process ran.
func configLines(output string) []configLine {
	var out []configLine
	for line := range strings.SplitSeq(output, "\n") {
		if !strings.Contains(line, `"message":"configuration"`) {
			continue
		}
		var cl configLine
		if json.Unmarshal([]byte(line), &cl) == nil {
			out = append(out, cl)
		}
	}
	return out
}

// TestParseArgsCluster: cluster mode's flags, from the command line and
// the environment, and each refusal in one line naming the flag.
func TestParseArgsCluster(t *testing.T) {
	const peers = "a=127.0.0.1:7001,b=127.0.0.1:7002,c=127.0.0.1:7003"
	member := []string{"-b", "/var/lib/sprout", "--node", "a", "--cluster-listen", "127.0.0.1:7001", "--cluster-peers", peers}
	with := func(extra ...string) []string { return append(append([]string{}, member...), extra...) }
	refused := func(name string, args []string, line string) parseCase {
		return parseCase{name: name, args: args, wantAction: actionFail, wantCode: exitUsage, wantStderr: "sprout: " + line + "\n"}
	}
	runParseCases(t, []parseCase{
		{name: "a member", args: member, want: func(o *options) {
			o.walDir, o.node, o.clusterListen, o.clusterPeers = "/var/lib/sprout", "a", "127.0.0.1:7001", peers
		}},
		{name: "from the environment", args: []string{"-b", "d"},
			env: []string{"SPROUT_NODE=a", "SPROUT_CLUSTER_LISTEN=:7001", "SPROUT_CLUSTER_PEERS=" + peers,
				"SPROUT_CLUSTER_TLS_CERT=c.pem", "SPROUT_CLUSTER_TLS_KEY=k.pem", "SPROUT_CLUSTER_TLS_CA=ca.pem"},
			want: func(o *options) {
				o.walDir, o.node, o.clusterListen, o.clusterPeers = "d", "a", ":7001", peers
				o.clusterTLSCert, o.clusterTLSKey, o.clusterTLSCA = "c.pem", "k.pem", "ca.pem"
			}},
		refused("no -b", []string{"--node", "a", "--cluster-listen", ":7001", "--cluster-peers", peers},
			"-b is required in cluster mode (--node): each member keeps its Raft log in its own directory"),
		refused("no --node", []string{"--cluster-peers", peers}, "--cluster-peers needs --node: it is for cluster mode"),
		refused("no --cluster-listen", []string{"-b", "d", "--node", "a", "--cluster-peers", peers},
			"--cluster-listen is required in cluster mode: HOST:PORT where the other members connect"),
		refused("a unix socket", with("-l", "unix:/run/sprout.sock"),
			"-l unix:PATH is not supported in cluster mode: members proxy clients to the leader's TCP address"),
		refused("not among the peers", with("--node", "d"), "--cluster-peers: does not include this member, d"),
		refused("a bad name", with("--node", "a b"), `--node: "a b": a member's name holds only letters, digits, '-', '_' and '.', not ' '`),
		refused("a bad peer", with("--cluster-peers", "a=127.0.0.1:7001,b"), `--cluster-peers: "b" is not NAME=HOST:PORT`),
		refused("a name twice", with("--cluster-peers", "a=127.0.0.1:7001,a=127.0.0.1:7002"), "--cluster-peers: names a twice"),
		refused("a bad listen address", with("--cluster-listen", "7001"), `--cluster-listen: "7001" is not HOST:PORT`),
		refused("half the TLS files", with("--cluster-tls-cert", "c.pem"),
			"--cluster-tls-key: missing: the certificate, its key and the CA go together"),
		refused("an empty --node", []string{"--node", ""}, `invalid --node: "" (want a member's name)`),
		// A shared list of join strings: the member with an entry joins, and
		// need not be among the peers; the one without starts as an initial
		// member; a malformed list is refused by every member.
		{name: "a join list, with an entry", args: with("--node", "d", "--cluster-join", "a=c0ffee:1,d=c0ffee:2"),
			want: func(o *options) {
				o.walDir, o.node, o.clusterListen, o.clusterPeers = "/var/lib/sprout", "d", "127.0.0.1:7001", peers
				o.clusterJoin = "a=c0ffee:1,d=c0ffee:2"
			}},
		{name: "a join list from the environment, without an entry", args: member,
			env: []string{"SPROUT_CLUSTER_JOIN=d=c0ffee:2"},
			want: func(o *options) {
				o.walDir, o.node, o.clusterListen, o.clusterPeers = "/var/lib/sprout", "a", "127.0.0.1:7001", peers
				o.clusterJoin = "d=c0ffee:2"
			}},
		refused("a join list, no entry, not among the peers", with("--node", "e", "--cluster-join", "d=c0ffee:2"),
			"--cluster-peers: does not include this member, e"),
		refused("a malformed join list", with("--cluster-join", "d=c0ffee:2,e"), `--cluster-join: "e" is not NAME=CLUSTER:ID`),
		// A member replaced after it lost its disk has its new entry
		// appended (deploy/README.md): the later entry counts, and the
		// list does not stop the others from starting.
		{name: "a join list naming one again", args: with("--node", "d", "--cluster-join", "d=c0ffee:2,a=c0ffee:1,d=c0ffee:3"),
			want: func(o *options) {
				o.walDir, o.node, o.clusterListen, o.clusterPeers = "/var/lib/sprout", "d", "127.0.0.1:7001", peers
				o.clusterJoin = "d=c0ffee:2,a=c0ffee:1,d=c0ffee:3"
			}},
		{name: "a join list naming another again", args: member, env: []string{"SPROUT_CLUSTER_JOIN=d=c0ffee:2,d=c0ffee:3"},
			want: func(o *options) {
				o.walDir, o.node, o.clusterListen, o.clusterPeers = "/var/lib/sprout", "a", "127.0.0.1:7001", peers
				o.clusterJoin = "d=c0ffee:2,d=c0ffee:3"
			}},
	})
}

// TestClusterRefusals: the binary refuses a configuration that cannot run
// in one line on stderr, with exit status 5, before it serves; a socket
// handed over by systemd too.
func TestClusterRefusals(t *testing.T) {
	bin := testproc.SproutBinary(t)
	run := func(cmd *exec.Cmd) (string, int) {
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := run(exec.Command(bin, "--node", "a", "--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "a=127.0.0.1:7001"))
	if code != exitUsage || strings.Count(out, "\n") != 1 || !strings.Contains(out, "-b is required in cluster mode") {
		t.Errorf("without -b: exit %d, %q", code, out)
	}

	// A unix socket systemd hands over cannot be proxied to.
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := unixListener(t)
	srv := startActivated(t, files, "-b", t.TempDir(), "--node", "a",
		"--cluster-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--cluster-peers", "a=127.0.0.1:"+strconv.Itoa(port), "--log-format", "json")
	if code, out := srv.wait(t); code != exitUsage || !strings.Contains(out, "a unix socket is not supported in cluster mode") {
		t.Errorf("with a unix socket handed over: exit %d, %q", code, out)
	}
}

// TestClusterSocketActivation: a member serves the TCP socket systemd
// hands over (it rebuilds in place, so nothing needs the socket again),
// and tells the others its port.
func TestClusterSocketActivation(t *testing.T) {
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	files, addrs := tcpListeners(1)(t)
	srv := startActivated(t, files, "-b", t.TempDir(), "--node", "a",
		"--cluster-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--cluster-peers", "a=127.0.0.1:"+strconv.Itoa(port), "--log-format", "json")
	c := dial(t, addrs[0])
	// The one member leads once it has applied its first entry: until
	// then its proxy holds the connection, and the put waits.
	c.expect("put 0 0 60 2\r\nhi\r\n", "INSERTED 1")
	if out := srv.stop(t); !strings.Contains(out, `"serving the socket systemd handed over"`) {
		t.Errorf("the member's log does not say it serves the socket handed over:\n%s", out)
	}
}

// TestDescribeLogRefusals: the lower layers refuse a log directory in
// words that name no flag; the line the operator reads says which flag
// starts it.
func TestDescribeLogRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a single node on a member's directory", fmt.Errorf("%w: /d", wal.ErrClusterLog),
			"start it as that member (--node), or on another directory"},
		{"a cluster of several on a single node's", fmt.Errorf("%w: /d", replication.ErrSingleNodeLog),
			"only as its first member alone (--cluster-peers naming --node only)"},
		{"a member restarted with other initial members",
			&replication.ForeignLogError{Dir: "/d", Cluster: 0xc1, ID: 0x2a, Name: "m1", WantCluster: 0xc2, WantID: 0x2a, WantName: "m1"},
			"/d is the log of member m1 of cluster c1, not of this one (c2): start it with the --cluster-peers it first started with, or with --cluster-join c1:2a, or on another directory"},
		{"another member's directory",
			&replication.ForeignLogError{Dir: "/d", Cluster: 0xc1, ID: 0x2a, Name: "m1", WantCluster: 0xc1, WantID: 0x2b, WantName: "m2"},
			"/d is the log of member m1 (2a), not of m2 (2b): start on another directory"},
		{"a damaged frame", &segment.DamageError{Path: "/d/sprout.00000001.wal", Offset: 24, Err: segment.ErrCorrupt},
			"/d/sprout.00000001.wal: damaged frame at offset 24: segment: corrupt frame (start with --skip-damaged to skip it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.err.Error(), "--") {
				t.Errorf("the lower layer's error names a flag: %q", tc.err)
			}
			if got := describe(&member.StartError{Step: member.StepLog, Err: tc.err}); !strings.HasSuffix(got, tc.want) {
				t.Errorf("described as %q, want it to end %q", got, tc.want)
			}
		})
	}
}

// TestSingleNodeOnAMembersDirectory: a single node started on a cluster
// member's -b directory stops at once with exit status 1, in one line
// that says how to start on it.
func TestSingleNodeOnAMembersDirectory(t *testing.T) {
	dir := t.TempDir()
	hdr := make([]byte, segment.HeaderSize)
	copy(hdr, "SPROUTWL")
	binary.LittleEndian.PutUint32(hdr[8:], segment.VersionRaftLog)
	if err := os.WriteFile(filepath.Join(dir, segment.SegmentName(1)), hdr, 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testproc.SproutBinary(t), "-b", dir, "-l", "127.0.0.1", "-p", strconv.Itoa(port), "--log-format", "json")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != exitReplay || !strings.Contains(string(out), "start it as that member (--node)") {
		t.Errorf("exit %d, %s", code, out)
	}
}
