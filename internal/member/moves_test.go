package member

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// moveThrough asks member via's side port to move group g's replica from
// one member to another, and returns the answer.
func moveThrough(t *testing.T, via *Member, g int, from, to string) (int, GroupReplicas, string) {
	t.Helper()
	rep := testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodPost,
		URL:    fmt.Sprintf("http://%s/cluster/groups/%d/moves", via.HTTPAddr(), g),
		Body:   map[string]string{"from": from, "to": to},
		Bearer: testToken, Timeout: 2 * moveTimeout})
	var out GroupReplicas
	if rep.Status == http.StatusOK {
		if err := json.Unmarshal(rep.Body, &out); err != nil {
			t.Fatalf("a move's answer %s: %v", rep.Body, err)
		}
	}
	return rep.Status, out, string(rep.Body)
}

// TestShardGroupsMoveReplica: four members, two groups of three replicas,
// so one member holds no replica of group 1. Group 1's replica moves from
// its leader to that member, asked through that member (which forwards
// it) while a client pipelines puts into the group: the receiver is
// filled and promoted, the leader hands over and drops its log, and every
// put acknowledged is there, once. Both members keep where the replica
// went across a restart, and the replica moves back to the member it
// left (added again under its id), which holds it across a restart too.
func TestShardGroupsMoveReplica(t *testing.T) {
	c := newClusterOf(t, 4, 2, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	var spare string
	for _, peer := range c.peers {
		if !p.Groups[1].Holds(peer.Name) {
			spare = peer.Name
		}
	}
	tube := tubePerGroup(p, "mv")[1]
	var giver string
	testproc.WaitFor(t, 20*time.Second, "group 1 led", func() bool {
		giver = reportedLeader(c, 1)
		return giver != ""
	})

	// Puts into group 1 all along, through a member that stays a replica.
	var through string
	for _, name := range p.Groups[1].Voters() {
		if name != giver {
			through = name
		}
	}
	var (
		mu    sync.Mutex
		acked = map[uint64]string{}
	)
	stop := make(chan struct{})
	putting := make(chan error, 1)
	go func() {
		conn, err := testproc.Dial(c.up[through].Addr().String(), replyTimeout)
		if err != nil {
			putting <- err
			return
		}
		defer conn.Close()
		if err := conn.ExpectLine("use "+tube, "USING "+tube); err != nil {
			putting <- err
			return
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				putting <- nil
				return
			default:
			}
			body := fmt.Sprintf("job-%d", i)
			id, err := conn.Put(0, 0, 60, []byte(body))
			if err != nil {
				putting <- fmt.Errorf("put %d through %s: %w", i, through, err)
				return
			}
			mu.Lock()
			acked[id] = body
			mu.Unlock()
		}
	}()
	time.Sleep(300 * time.Millisecond)

	if status, _, body := moveThrough(t, c.up[spare], 1, spare, giver); status != http.StatusNotFound {
		t.Fatalf("moving from %s, which holds no replica: %d %s, want 404", spare, status, body)
	}
	if status, _, body := moveThrough(t, c.up[giver], 1, giver, "m9"); status != http.StatusNotFound {
		t.Fatalf("moving to m9, no member: %d %s, want 404", status, body)
	}
	status, out, body := moveThrough(t, c.up[spare], 1, giver, spare)
	if status != http.StatusOK {
		t.Fatalf("moving group 1's replica from %s to %s through %s: %d %s", giver, spare, spare, status, body)
	}
	if len(out.Replicas) != 3 || !slices.Contains(out.Replicas, spare) || slices.Contains(out.Replicas, giver) || len(out.Learners) != 0 {
		t.Fatalf("group 1's replicas after the move: %+v, want three voters with %s and without %s", out, spare, giver)
	}
	testproc.WaitFor(t, 10*time.Second, giver+" dropping group 1", func() bool {
		return c.up[giver].shards.node(1) == nil && c.up[giver].clusterLog.Shared().Group(1) == nil
	})
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if err := <-putting; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n == 0 {
		t.Fatal("no put acknowledged")
	}
	// Every acknowledged job on the new replica, as on the others.
	testproc.WaitFor(t, 20*time.Second, fmt.Sprintf("%s's replica of group 1 holding the %d jobs", spare, n), func() bool {
		st := c.up[spare].shards.replica(1)
		return st != nil && st.Stats().Ready == int64(n)
	})
	check := testproc.DialTest(t, c.up[giver].Addr().String(), replyTimeout)
	for id, want := range acked {
		r, err := check.Do(fmt.Sprintf("peek %d", id), nil)
		if err != nil || r.Kind != testproc.ReplyFound || string(r.Body) != want {
			t.Fatalf("peek %d through %s: %+v %v, want %q", id, giver, r, err, want)
		}
	}
	check.Close()

	// Across restarts: the receiver starts it from its log, the giver
	// does not start it again.
	c.stop(spare)
	c.stop(giver)
	c.start(spare)
	c.start(giver)
	if c.up[giver].shards.node(1) != nil {
		t.Fatalf("%s restarted holds group 1 again", giver)
	}
	testproc.WaitFor(t, 20*time.Second, spare+" restarted holding group 1's jobs", func() bool {
		st := c.up[spare].shards.replica(1)
		return st != nil && st.Stats().Ready == int64(n)
	})

	// Back to the member it left, asked through it.
	status, out, body = moveThrough(t, c.up[giver], 1, spare, giver)
	if status != http.StatusOK || !slices.Contains(out.Replicas, giver) || slices.Contains(out.Replicas, spare) {
		t.Fatalf("moving group 1's replica back from %s to %s: %d %s", spare, giver, status, body)
	}
	testproc.WaitFor(t, 20*time.Second, giver+" holding group 1's jobs again", func() bool {
		st := c.up[giver].shards.replica(1)
		return st != nil && st.Stats().Ready == int64(n)
	})
	testproc.WaitFor(t, 10*time.Second, spare+" dropping group 1", func() bool {
		return c.up[spare].shards.node(1) == nil
	})
	// Its log, which holds the group again, no longer counts it removed.
	c.stop(giver)
	c.start(giver)
	testproc.WaitFor(t, 20*time.Second, giver+" restarted holding group 1's jobs", func() bool {
		st := c.up[giver].shards.replica(1)
		return st != nil && st.Stats().Ready == int64(n)
	})
}

// join adds a member named name to c through member via (POST
// /cluster/members) and starts it with the join string and groups
// --cluster-groups; it returns the addition's answer.
func (c *testCluster) join(via *Member, name string, groups int) map[string]any {
	c.t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		c.t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rep := testproc.DoAPI(c.t, testproc.APIRequest{Method: http.MethodPost, URL: "http://" + via.HTTPAddr().String() + "/cluster/members",
		Body: map[string]string{"name": name, "address": addr}, Bearer: testToken, Timeout: replyTimeout})
	var out map[string]any
	if err := json.Unmarshal(rep.Body, &out); rep.Status != http.StatusCreated || err != nil {
		c.t.Fatalf("adding %s: %d %s", name, rep.Status, rep.Body)
	}
	c.dirs[name], c.outs[name] = c.t.TempDir(), &testproc.SyncBuffer{}
	cfg := c.config(name)
	cfg.Groups = groups
	nc := *cfg.Cluster
	nc.Listen = addr
	if nc.ClusterID, nc.JoinID, _, err = replication.SelectJoin(out["join"].(string), name); err != nil {
		c.t.Fatal(err)
	}
	cfg.Cluster = &nc
	m, err := Start(cfg)
	if err != nil {
		c.t.Fatalf("starting %s: %v\n%s", name, err, c.outs[name])
	}
	c.up[name] = m
	return out
}

// TestShardGroupsMembersByHand: a cluster of several groups grows by a
// member and shrinks by another, by hand: the member added learns the
// groups and replicas to start with from its addition's answer, holds
// group 0 only until a group's replica moves to it, and a member holding
// a group's replica is not removed before it has moved away. A member
// started with fewer groups than the cluster's stops, rather than route
// their tubes to the groups it has.
func TestShardGroupsMembersByHand(t *testing.T) {
	c := newShardedCluster(t, 2)
	c.finalized()
	p := c.up["m1"].shards.placement
	tubes := tubePerGroup(p, "hand")
	producer := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	acked := map[uint64]string{}
	for i := range 20 {
		tube := tubes[i%2]
		expectLine(t, producer, "use "+tube, "USING "+tube)
		body := fmt.Sprintf("%s-%d", tube, i)
		id, err := producer.Put(0, 0, 60, []byte(body))
		if err != nil {
			t.Fatalf("put into %s: %v", tube, err)
		}
		acked[id] = body
	}

	added := c.join(c.up["m1"], "m4", 2)
	if added["groups"] != 2.0 || added["replicas"] != 3.0 {
		t.Fatalf("the addition's answer %v: want groups 2, replicas 3", added)
	}
	testproc.WaitFor(t, 20*time.Second, "m4 a voter of group 0", func() bool {
		voters, _, _ := c.up["m1"].Node().Replicas()
		return slices.Contains(voters, c.up["m4"].Node().ID())
	})
	if c.up["m4"].shards.node(1) != nil {
		t.Fatal("m4 holds group 1 as it joins: it should hold group 0 only")
	}
	if status, out, body := moveThrough(t, c.up["m4"], 1, "m1", "m4"); status != http.StatusOK || !slices.Contains(out.Replicas, "m4") {
		t.Fatalf("moving group 1's replica from m1 to m4: %d %s", status, body)
	}

	remove := func(name string) testproc.APIReply {
		return testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodDelete, URL: "http://" + c.up["m2"].HTTPAddr().String() + "/cluster/members/" + name,
			Bearer: testToken, Timeout: replyTimeout})
	}
	if rep := remove("m4"); rep.Status != http.StatusConflict || !strings.Contains(string(rep.Body), "m4 holds replicas of groups [1]") {
		t.Fatalf("removing m4, which holds group 1: %d %s, want 409", rep.Status, rep.Body)
	}
	testproc.WaitFor(t, 10*time.Second, "m1 dropping group 1", func() bool { return c.up["m1"].shards.node(1) == nil })
	if rep := remove("m1"); rep.Status != http.StatusOK {
		t.Fatalf("removing m1, which holds group 0 only: %d %s", rep.Status, rep.Body)
	}
	select {
	case <-c.up["m1"].Done():
		if !errors.Is(c.up["m1"].Err(), replication.ErrRemoved) {
			t.Fatalf("m1 stopped with %v, want ErrRemoved", c.up["m1"].Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("m1, removed, still runs")
	}
	delete(c.up, "m1")

	conn := testproc.DialTest(t, c.up["m4"].Addr().String(), replyTimeout)
	for id, want := range acked {
		testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("job %d through m4", id), func() bool {
			r, err := conn.Do(fmt.Sprintf("peek %d", id), nil)
			return err == nil && r.Kind == testproc.ReplyFound && string(r.Body) == want
		})
	}

	// A member started with one group in this cluster of two stops.
	c.join(c.up["m2"], "m5", 0)
	select {
	case <-c.up["m5"].Done():
		var fe *FormationError
		if err := c.up["m5"].Err(); !errors.As(err, &fe) || !strings.Contains(err.Error(), "start it with the cluster's --cluster-groups") {
			t.Fatalf("m5 stopped with %v, want the FormationError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("m5, running one group of two, still runs")
	}
}
