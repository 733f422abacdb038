package member

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/wal"
)

// clusterTick makes an election timeout of 500 ms to 1 s, as the
// replication package's network tests have it.
const clusterTick = 50 * time.Millisecond

// testCluster is three members running in this process, each on its own
// directory and loopback ports.
type testCluster struct {
	t *testing.T
	// groups and replicas are the --cluster-groups and --cluster-replicas
	// the members start with; 0: the cluster's.
	groups, replicas int
	// ownGroups are the --cluster-groups of the members that start with
	// another than groups.
	ownGroups map[string]int
	// electionTick is the members' election timeout in ticks, 0 for the
	// default.
	electionTick int
	peers        []replication.Member
	dirs         map[string]string
	outs         map[string]*testproc.SyncBuffer
	up           map[string]*Member
}

func newTestCluster(t *testing.T) *testCluster { return newShardedCluster(t, 0) }

// newShardedCluster is newTestCluster with groups shard groups (0: one).
func newShardedCluster(t *testing.T, groups int) *testCluster { return newClusterOf(t, 3, groups, 0) }

// newClusterOf is a cluster of members members formed with groups shard
// groups of replicas replicas each (0: the defaults).
func newClusterOf(t *testing.T, members, groups, replicas int) *testCluster {
	return newClusterWith(t, members, groups, replicas, nil)
}

// newClusterWith is newClusterOf with some members started with their
// own --cluster-groups (own, by name).
func newClusterWith(t *testing.T, members, groups, replicas int, own map[string]int) *testCluster {
	c := prepareCluster(t, members, groups, replicas, own)
	for _, p := range c.peers {
		c.start(p.Name)
	}
	return c
}

// prepareCluster is newClusterWith's cluster before any member starts.
func prepareCluster(t *testing.T, members, groups, replicas int, own map[string]int) *testCluster {
	c := &testCluster{t: t, groups: groups, replicas: replicas, ownGroups: own,
		dirs: map[string]string{}, outs: map[string]*testproc.SyncBuffer{}, up: map[string]*Member{}}
	for i := 1; i <= members; i++ {
		port, err := testproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("m%d", i)
		c.peers = append(c.peers, replication.Member{Name: name, ID: replication.MemberID(name), Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
		c.dirs[name] = t.TempDir()
		c.outs[name] = &testproc.SyncBuffer{}
	}
	t.Cleanup(func() {
		for name, m := range c.up {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			m.Shutdown(ctx)
			if t.Failed() {
				t.Logf("%s's log:\n%s", name, c.outs[name])
			}
		}
	})
	return c
}

// start starts member name on its directory, on new client and side
// ports.
func (c *testCluster) start(name string) *Member {
	c.t.Helper()
	m, err := Start(c.config(name))
	if err != nil {
		c.t.Fatalf("starting %s: %v\n%s", name, err, c.outs[name])
	}
	c.up[name] = m
	return m
}

// config is member name's configuration.
func (c *testCluster) config(name string) Config {
	var listen string
	for _, p := range c.peers {
		if p.Name == name {
			listen = p.Addr
		}
	}
	log := zerolog.New(c.outs[name]).With().Timestamp().Str("member", name).Logger()
	groups, own := c.ownGroups[name]
	if !own {
		groups = c.groups
	}
	return Config{
		Engine: engine.Config{Network: "tcp", Address: "127.0.0.1:0", Loops: 1, Logger: log},
		WALDir: c.dirs[name], WAL: wal.Options{SegmentSize: 1 << 20},
		HTTP: HTTPConfig{Addr: "127.0.0.1:0", AdminToken: testToken},
		Cluster: &replication.NodeConfig{
			Node: name, Listen: listen, Peers: c.peers, Tick: clusterTick, ElectionTick: c.electionTick,
		},
		Groups: groups, Replicas: c.replicas,
		// A graceful shutdown waits for the jobs its sessions hold
		// (Router.Holding): not for the default 25 s here.
		ShutdownTimeout: 2 * time.Second,
		Logger:          log,
	}
}

// stop shuts member name down, as SIGTERM does.
func (c *testCluster) stop(name string) {
	c.up[name].Shutdown(context.Background())
	delete(c.up, name)
}

// serving waits for one of the members up to lead and serve.
func (c *testCluster) serving(timeout time.Duration) (string, *Member) {
	c.t.Helper()
	var name string
	testproc.WaitFor(c.t, timeout, "a member serving", func() bool {
		for n, m := range c.up {
			if info, _ := m.Node().Leader(); info.Serving && info.Name == n {
				name = n
				return true
			}
		}
		return false
	})
	return name, c.up[name]
}

// others are the members up but name.
func (c *testCluster) others(name string) []*Member {
	var ms []*Member
	for _, p := range c.peers {
		if m := c.up[p.Name]; m != nil && p.Name != name {
			ms = append(ms, m)
		}
	}
	return ms
}

// readyEverywhere waits until every member's own store holds n ready
// jobs.
func (c *testCluster) readyEverywhere(n int64) {
	c.t.Helper()
	for name, m := range c.up {
		testproc.WaitFor(c.t, 10*time.Second, fmt.Sprintf("%s's store holding %d ready jobs", name, n), func() bool {
			return m.Store().Stats().Ready == n
		})
	}
}

// api GETs path on m's side port with the admin token.
func api(t *testing.T, m *Member, path string) testproc.APIReply {
	return testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodGet, URL: "http://" + m.HTTPAddr().String() + path,
		Bearer: testToken, Timeout: replyTimeout})
}

// TestClusterInProcess: three members in one process serve one queue
// wherever a client connects, and their side ports agree. Handing the
// leadership over rebuilds the old leader in place: its clients are
// closed, the job one of them held is ready on the new leader, and the
// old leader goes on in the same process with the same store and side
// port, following. A member shut down and started again on its directory
// catches up.
func TestClusterInProcess(t *testing.T) {
	c := newTestCluster(t)
	lname, l := c.serving(20 * time.Second)
	f := c.others(lname)

	producer := testproc.DialTest(t, f[0].Addr().String(), replyTimeout)
	var ids []uint64
	for i := range 10 {
		id, err := producer.Put(0, 0, 60, fmt.Appendf(nil, "job-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	worker := testproc.DialTest(t, f[1].Addr().String(), replyTimeout)
	if r, err := worker.Do("reserve-with-timeout 5", nil); err != nil || r.N != ids[0] || string(r.Body) != "job-0" {
		t.Fatalf("reserve through a follower: %+v %v; want job %d", r, err, ids[0])
	}
	if err := worker.ExpectLine("delete "+strconv.FormatUint(ids[0], 10), "DELETED"); err != nil {
		t.Fatal(err)
	}
	c.readyEverywhere(9)

	for name, m := range c.up {
		var st replication.Status
		r := api(t, m, "/cluster")
		if err := json.Unmarshal(r.Body, &st); err != nil || st.Node != name || st.Leader != lname || len(st.Members) != 3 {
			t.Errorf("%s's /cluster: %d %s", name, r.Status, r.Body)
		}
		// Through a follower the admin API is the leader's.
		var stats map[string]any
		r = api(t, m, "/api/v1/stats")
		if err := json.Unmarshal(r.Body, &stats); err != nil || stats["current-jobs-ready"] != float64(9) {
			t.Errorf("%s's /api/v1/stats: %d %s", name, r.Status, r.Body)
		}
		if r := api(t, m, "/cluster/members"); r.Status != http.StatusOK {
			t.Errorf("%s's /cluster/members: %d %s", name, r.Status, r.Body)
		}
	}

	// The leader hands its leadership over, with a client of its own
	// holding a job: it rebuilds in place.
	direct := testproc.DialTest(t, l.Addr().String(), replyTimeout)
	if r, err := direct.Do("reserve-with-timeout 5", nil); err != nil || r.N != ids[1] {
		t.Fatalf("reserve on the leader: %+v %v; want job %d", r, err, ids[1])
	}
	st, httpAddr := l.Store(), l.HTTPAddr().String()
	rebuilds := l.Node().Stats().Rebuilds
	var to string
	for name := range c.up {
		if name != lname {
			to = name
			break
		}
	}
	testproc.WaitFor(t, 10*time.Second, lname+" handing the leadership to "+to, func() bool {
		if err := l.Node().TransferLeadership(to); err != nil {
			t.Fatal(err)
		}
		info, _ := c.up[to].Node().Leader()
		return info.Serving && info.Name == to
	})
	// Once or more: under load the leadership may come back to it before
	// it settles (its rebuild drops the vote it had not yet persisted or
	// sent, it may win the next election, and it is asked again), and each
	// leadership it loses is a rebuild.
	testproc.WaitFor(t, 10*time.Second, lname+" rebuilt and following", func() bool {
		info, _ := l.Node().Leader()
		return l.Node().Stats().Rebuilds > rebuilds && info.Name == to && l.Node().Ready()
	})
	if r, err := direct.Do("list-tube-used", nil); err == nil {
		t.Errorf("the old leader's client was answered after the rebuild: %+v", r)
	}
	if l.Store() != st || l.HTTPAddr().String() != httpAddr {
		t.Error("the old leader's store or side port changed with the rebuild")
	}
	if r := api(t, l, "/readyz"); r.Status != http.StatusOK {
		t.Errorf("the rebuilt member's /readyz: %d %s", r.Status, r.Body)
	}
	nl := c.up[to]
	again := testproc.DialTest(t, nl.Addr().String(), replyTimeout)
	if r, err := again.Do("reserve-with-timeout 5", nil); err != nil || r.N != ids[1] {
		t.Errorf("the job the old leader had handed out, on the new one: %+v %v; want job %d", r, err, ids[1])
	}
	if err := again.ExpectLine("delete "+strconv.FormatUint(ids[1], 10), "DELETED"); err != nil {
		t.Fatal(err)
	}
	c.readyEverywhere(8)

	// The rebuilt member leads again, and serves.
	testproc.WaitFor(t, 10*time.Second, lname+" leading again", func() bool {
		if err := nl.Node().TransferLeadership(lname); err != nil {
			t.Fatal(err)
		}
		info, _ := l.Node().Leader()
		return info.Serving && info.Name == lname
	})
	back := testproc.DialTest(t, l.Addr().String(), replyTimeout)
	if id, err := back.Put(0, 0, 60, []byte("led again")); err != nil || id == 0 {
		t.Fatalf("a put on the rebuilt member leading again: %d %v", id, err)
	}
	c.readyEverywhere(9)
	to = lname
	nl = l

	// A follower shut down and started again catches up with what was
	// committed without it.
	var down string
	for name := range c.up {
		if name != to {
			down = name
			break
		}
	}
	c.stop(down)
	through := testproc.DialTest(t, nl.Addr().String(), replyTimeout)
	for i := range 5 {
		if _, err := through.Put(0, 0, 60, fmt.Appendf(nil, "while down %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.start(down)
	c.readyEverywhere(14)
}
