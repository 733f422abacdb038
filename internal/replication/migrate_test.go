package replication

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestMigrateRequests: three members share their directories among three
// groups, each keeping 1024 entries for followers a little behind (as
// members do). Group 1 holds live jobs and then writes nothing, led by a
// member whose segments are large (so its own compaction never moves
// them: its segments are not like the others'); group 2 put and deleted
// a job and writes nothing either. Group 0 churns through many segments,
// led elsewhere. The other two members' directories stay within twice
// their live data plus a few segments: they ask group 1's leader to
// rewrite its jobs out of their old segments (migrate requests), and the
// idle groups' entries kept for followers let go of old segments. Group
// 1's jobs are all there afterwards, on every member, and after every
// member restarts.
func TestMigrateRequests(t *testing.T) {
	const segSize = 32 << 10
	c := newWALCluster(t, 3, segSize, func(cfg *NodeConfig) { cfg.Retain = 1024 })
	large := c.peers[0].Name
	c.kill(large)
	c.segSize = 4 << 20
	c.start(large, nil)
	c.segSize = segSize
	var ids []uint64
	for _, m := range c.peers {
		ids = append(ids, m.ID)
	}
	groups := map[uint16]map[string]*Node{1: {}, 2: {}}
	start := func(name string) {
		for g, nodes := range groups {
			l, err := c.wals[name].Shared().Attach(t.Context(), g, ids, false)
			if err != nil {
				t.Fatal(err)
			}
			nodes[name] = startGroup(t, c, g, name, l)
		}
	}
	for _, m := range c.peers {
		start(m.Name)
	}
	lead := func(nodes map[string]*Node, to string) *Node {
		t.Helper()
		if l := c.awaitServing(10*time.Second, groupUp(nodes)...); l.Name() != to {
			if err := l.TransferLeadership(to); err != nil {
				t.Fatal(err)
			}
		}
		testproc.WaitFor(t, 10*time.Second, "a group led by "+to, func() bool {
			info, _ := nodes[to].Leader()
			return info.Serving
		})
		return nodes[to]
	}
	l1 := lead(groups[1], large)
	l0 := c.awaitServing(10 * time.Second)
	if l0.Name() == large {
		l0 = lead(c.nodes, c.peers[1].Name)
	}

	idle := map[uint64]string{}
	cl := newNetClient(l1, "idle")
	for i := range 40 {
		body := fmt.Sprintf("idle %d %s", i, strings.Repeat("i", 1000))
		id, _ := cl.put(body)
		idle[id] = body
	}
	awaitAck(t, l1.Journal(), cl.client.PendingAck(), 10*time.Second)
	cl.client.Close()
	l2 := c.awaitServing(10*time.Second, groupUp(groups[2])...)
	gone := newNetClient(l2, "gone")
	id, _ := gone.put("put and deleted")
	gone.client.Delete(id)
	awaitAck(t, l2.Journal(), gone.client.PendingAck(), 10*time.Second)
	gone.client.Close()

	ch := newChurn(t, c)
	ch.unmeasured = map[string]bool{large: true} // its segments are not the bound's
	ch.keep(l0, 20)
	for range 8 {
		ch.run(c.awaitServing(10*time.Second), 10, 40, 60)
		for name, over := range ch.over {
			if over > boundSegments {
				t.Fatalf("%s's directory grew to %.1f segments past twice its live data", name, over)
			}
		}
	}
	ch.check(c.awaitServing(10 * time.Second))
	for name, over := range ch.over {
		st := c.wals[name].Stats()
		t.Logf("%s: at most %.1f segments past twice its live data; now segments %d to %d, %d bytes, %d live",
			name, over, st.OldestIndex, st.CurrentIndex, dirBytes(t, c.dirs[name]), st.LiveBytes)
		if st.OldestIndex < 10 {
			t.Errorf("%s's oldest segment is %d: the idle groups hold it", name, st.OldestIndex)
		}
	}
	asked := uint64(0)
	for name, n := range groups[1] {
		if n != l1 {
			asked += n.Stats().MigrateAsked
			t.Logf("%s asked for %d of group 1's jobs to be rewritten", name, n.Stats().MigrateAsked)
		}
	}
	if asked == 0 || l1.Stats().MigrateRewritten == 0 {
		t.Errorf("group 1's followers asked for %d rewrites, its leader made %d", asked, l1.Stats().MigrateRewritten)
	}

	holdsIdle := func() {
		t.Helper()
		for name, n := range groups[1] {
			testproc.WaitFor(t, 10*time.Second, name+"'s group 1 holding its jobs", func() bool {
				v := viewOf(n.Store())
				if len(v) != len(idle) {
					return false
				}
				for id, body := range idle {
					if v[id].body != body {
						return false
					}
				}
				return true
			})
		}
	}
	holdsIdle()
	for _, m := range c.peers {
		c.kill(m.Name)
	}
	for _, m := range c.peers {
		c.start(m.Name, nil)
		start(m.Name)
	}
	holdsIdle()
}
