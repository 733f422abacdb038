package member

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

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
