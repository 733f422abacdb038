package member

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// TestShardGroups: three members formed with three shard groups
// (docs/design/shards.md S6). Each tube lives in the group its name
// hashes to, and every command reaches it through any member: puts take
// ids of their group's prefix, commands by id find their group, stats and
// list-tubes are one server's, a reserve across groups hands out the most
// urgent job of all the watched tubes and, waiting, wakes for a put into
// any of them through another member. Each member comes to lead one
// group.
func TestShardGroups(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	if p == nil || len(p.Groups) != 3 {
		t.Fatalf("placement %+v, want 3 groups", p)
	}
	for g := range 3 {
		testproc.WaitFor(t, 20*time.Second, fmt.Sprintf("group %d served", g), func() bool {
			for _, m := range c.up {
				if m.shards.serving(uint16(g)) != nil {
					return true
				}
			}
			return false
		})
	}
	c.balanced() // each member leads one group
	tubes := tubePerGroup(p, "t")
	order := []int{2, 0, 1} // the order the tubes are made in
	producer := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	worker := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	other := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	ids := make([]uint64, 3)
	for _, g := range order {
		expectLine(t, producer, "use "+tubes[g], "USING "+tubes[g])
		id, err := producer.Put(uint32(10+g), 0, 60, []byte(tubes[g]))
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := p.GroupOfID(id); !ok || int(got) != g {
			t.Fatalf("the put into %s (group %d) took id %d, of group %d", tubes[g], g, id, got)
		}
		ids[g] = id
	}
	got, err := other.StatsInt("stats", "current-jobs-ready", "total-jobs", "current-tubes", "cmd-put")
	if err != nil || !slices.Equal(got, []int64{3, 3, 4, 0}) {
		t.Fatalf("stats through m3: ready, total-jobs, current-tubes, cmd-put %v %v, want 3 3 4 0 (the puts were m1's)", got, err)
	}
	r, err := other.Do("list-tubes", nil)
	want := "---\n- default\n- " + tubes[2] + "\n- " + tubes[0] + "\n- " + tubes[1] + "\n"
	if err != nil || string(r.Body) != want {
		t.Fatalf("list-tubes through m3: %q %v, want the order of creation %q", r.Body, err, want)
	}

	for i, tube := range tubes {
		expectLine(t, worker, "watch "+tube, fmt.Sprintf("WATCHING %d", i+2))
	}
	expectLine(t, worker, "ignore default", "WATCHING 3")
	for g, tube := range tubes {
		counts, err := other.StatsInt("stats-tube "+tube, "current-jobs-ready", "current-watching", "current-using")
		wantUsing := int64(0)
		if g == order[2] {
			wantUsing = 1 // the producer's
		}
		if err != nil || !slices.Equal(counts, []int64{1, 1, wantUsing}) {
			t.Fatalf("stats-tube %s: ready, watching, using %v %v, want 1 1 %d", tube, counts, err, wantUsing)
		}
	}
	// The most urgent first across groups: priorities 10, 11, 12.
	for g := range 3 {
		r, err := worker.Do("reserve-with-timeout 0", nil)
		if err != nil || r.Kind != testproc.ReplyReserved || r.N != ids[g] || string(r.Body) != tubes[g] {
			t.Fatalf("reserve %d: %+v %v, want job %d of %s", g, r, err, ids[g], tubes[g])
		}
	}
	expectLine(t, worker, "reserve-with-timeout 0", "TIMED_OUT")
	expectLine(t, other, fmt.Sprintf("release %d 0 0", ids[1]), "NOT_FOUND") // not m3's
	expectLine(t, worker, fmt.Sprintf("release %d 0 0", ids[1]), "RELEASED")
	expectLine(t, worker, fmt.Sprintf("bury %d 0", ids[2]), "BURIED")
	expectLine(t, worker, fmt.Sprintf("delete %d", ids[0]), "DELETED")
	expectLine(t, other, fmt.Sprintf("kick-job %d", ids[2]), "KICKED")
	js, err := other.Stats(fmt.Sprintf("stats-job %d", ids[2]))
	if err != nil || js["tube"] != tubes[2] || js["kicks"] != "1" || js["state"] != "ready" {
		t.Fatalf("stats-job %d: %v %v", ids[2], js, err)
	}
	// An id of a prefix no group took is no job, whatever the command
	// before it answered (an ignore of a tube not watched says OK).
	stray := meta.JobID(7, 1)
	for _, line := range []string{"delete %d", "peek %d", "stats-job %d", "touch %d", "kick-job %d", "reserve-job %d", "release %d 0 0", "bury %d 0"} {
		expectLine(t, other, "ignore nosuchtube", "WATCHING 1")
		expectLine(t, other, fmt.Sprintf(line, stray), "NOT_FOUND")
	}
	for _, id := range []uint64{ids[1], ids[2]} {
		r, err := worker.Do("reserve-with-timeout 0", nil)
		if err != nil || r.N != id {
			t.Fatalf("reserve: %+v %v, want job %d", r, err, id)
		}
		expectLine(t, worker, fmt.Sprintf("delete %d", id), "DELETED")
	}

	// A reserve waiting in every group wakes for a put through another
	// member into one of them; the others' waits end.
	start := time.Now()
	worker.WriteString("reserve-with-timeout 10\r\n")
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	// current-waiting counts the member's own sessions in a reserve.
	beside := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	if n, err := beside.StatsInt("stats", "current-waiting"); err != nil || n[0] != 1 {
		t.Fatalf("stats through m2 while its worker waits: current-waiting %v %v, want 1", n, err)
	}
	if n, err := other.StatsInt("stats", "current-waiting"); err != nil || n[0] != 0 {
		t.Fatalf("stats through m3: current-waiting %v %v, want 0", n, err)
	}
	expectLine(t, other, "use "+tubes[1], "USING "+tubes[1])
	id, err := other.Put(0, 0, 60, []byte("late"))
	if err != nil {
		t.Fatal(err)
	}
	r, err = worker.ReadReply(true)
	if err != nil || r.Kind != testproc.ReplyReserved || r.N != id || string(r.Body) != "late" {
		t.Fatalf("the waiting reserve: %+v %v, want job %d", r, err, id)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the waiting reserve took %v", d)
	}
	expectLine(t, worker, fmt.Sprintf("delete %d", id), "DELETED")
	// A reserve that times out across groups ends at its timeout.
	start = time.Now()
	expectLine(t, worker, "reserve-with-timeout 1", "TIMED_OUT")
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("reserve-with-timeout 1 took %v", d)
	}
	got, err = other.StatsInt("stats", "current-jobs-ready", "current-jobs-reserved", "total-jobs", "current-waiting")
	if err != nil || !slices.Equal(got, []int64{0, 0, 4, 0}) {
		t.Fatalf("stats at the end: ready, reserved, total-jobs, waiting %v %v, want 0 0 4 0", got, err)
	}
}

// TestShardGroupsRefused: a member's --cluster-groups must be its
// cluster's: unset takes the cluster's, another number is refused at
// start in one line.
func TestShardGroupsRefused(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	c.stop("m3")
	c.groups = 2
	_, err := Start(c.config("m3"))
	if err == nil || !strings.Contains(err.Error(), "--cluster-groups 2 disagrees with this cluster's 3, set when it was formed: drop it or set 3") {
		t.Fatalf("m3 restarted with 2 groups: %v", err)
	}
	c.groups = 0
	m := c.start("m3")
	if n := m.shards.groups(); n != 3 {
		t.Fatalf("m3 restarted without --cluster-groups runs %d groups, want the cluster's 3", n)
	}
}

// TestShardGroupsFirstLeaders: a new cluster's groups are first led by
// the members the formation prefers (docs/design/shards.md 1.3), one
// each, in the first election (term 2): the balancer has nothing to move.
// The members start together, as a StatefulSet's pods do in parallel,
// with an election timeout of 3 to 6 s: the preferred member campaigns
// as soon as it reaches its group's majority, before any other's timer.
// (At 1 to 2 s, five race-built members starting on an overloaded
// machine let another's timer fire first.)
func TestShardGroupsFirstLeaders(t *testing.T) {
	c := prepareCluster(t, 5, 5, 3, nil)
	c.electionTick = 60
	type started struct {
		name string
		m    *Member
		err  error
	}
	done := make(chan started)
	for _, p := range c.peers {
		go func() {
			m, err := Start(c.config(p.Name))
			done <- started{p.Name, m, err}
		}()
	}
	for range c.peers {
		s := <-done
		if s.err != nil {
			t.Fatalf("starting %s: %v", s.name, s.err)
		}
		c.up[s.name] = s.m
	}
	p := c.up["m1"].shards.placement
	for _, grp := range p.Groups {
		var leader *Member
		testproc.WaitFor(t, 20*time.Second, fmt.Sprintf("group %d led", grp.ID), func() bool {
			for _, m := range c.up {
				if m.shards.serving(grp.ID) != nil {
					leader = m
					return true
				}
			}
			return false
		})
		st := leader.shards.node(grp.ID).Status()
		if leader.node.Name() != grp.Preferred || st.Term != 2 {
			t.Errorf("group %d first led by %s in term %d, want %s, the formation's preferred, in term 2",
				grp.ID, leader.node.Name(), st.Term, grp.Preferred)
		}
	}
}

// TestFormationRecorded: group 0's first leader records the formation
// it runs (formation.go), and a member that runs another stops with a
// FormationError: one of a formation's members started with its own
// --cluster-groups, whichever side the record takes; a member joining a
// cluster of one group with two, whose -b then records one group (none).
func TestFormationRecorded(t *testing.T) {
	t.Run("formed", func(t *testing.T) {
		c := newClusterWith(t, 3, 2, 0, map[string]int{"m3": 3})
		stopped := func(m *Member) bool {
			select {
			case <-m.Done():
				return true
			default:
				return false
			}
		}
		var formed replication.Formed
		testproc.WaitFor(t, 20*time.Second, "the formation recorded, and the members that disagree stopped", func() bool {
			for _, m := range c.up {
				if f := m.node.Tubes().Formed; f.Groups != 0 && !stopped(m) {
					formed = f
				}
			}
			if formed.Groups == 0 {
				return false
			}
			for _, m := range c.up {
				if stopped(m) != (m.shards.formed() != formed) {
					return false
				}
			}
			return true
		})
		for name, m := range c.up {
			t.Logf("%s runs %+v, stopped %v: %v", name, m.shards.formed(), stopped(m), m.Err())
			if !stopped(m) {
				continue
			}
			var fe *FormationError
			want := fmt.Sprintf("--cluster-groups %d disagrees with this cluster's %d, set when it was formed: start it on an empty -b", m.shards.formed().Groups, formed.Groups)
			if err := m.Err(); !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s stopped with %v, want %q", name, err, want)
			}
		}
	})
	t.Run("joined", func(t *testing.T) {
		c := newShardedCluster(t, 0)
		c.finalized()
		c.join(c.up["m2"], "m4", 2)
		select {
		case <-c.up["m4"].Done():
			want := "--cluster-groups 2 disagrees with this cluster's 1, set when it was formed: its -b records the cluster's now"
			if err := c.up["m4"].Err(); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("m4 stopped with %v, want %q", err, want)
			}
			if rec, err := readFormation(c.dirs["m4"]); err != nil || rec != (formation{}) {
				t.Fatalf("m4's formation record %+v %v, want none (one group)", rec, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("m4, running two groups in a cluster of one, still runs")
		}
	})
}

// TestShardGroupsRestartOfFive: a member of five with five groups of
// three replicas holds some of the groups only. Restarted with the
// cluster's --cluster-groups it runs the groups it held, and serves the
// jobs put before; without it (its log cannot tell G), or with a G that
// places other groups on it, it is refused in one line. The fault test
// of the binary (internal/clusterfault, -members 5) found every such
// restart refused: G was taken to be the number of groups held.
func TestShardGroupsRestartOfFive(t *testing.T) {
	c := newClusterOf(t, 5, 5, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	var placed []uint16
	for _, grp := range p.Groups {
		if grp.ID == 0 || grp.Holds("m1") {
			placed = append(placed, grp.ID)
		}
	}
	if len(placed) == len(p.Groups) {
		t.Fatalf("m1 holds every group (%v): the test needs one that holds some", placed)
	}
	tubes := tubePerGroup(p, "r")
	producer := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	var ids []uint64
	for _, tube := range tubes {
		expectLine(t, producer, "use "+tube, "USING "+tube)
		id, err := producer.Put(0, 0, 60, []byte(tube))
		if err != nil {
			t.Fatalf("put into %s: %v", tube, err)
		}
		ids = append(ids, id)
	}
	c.stop("m1")
	refuse := func(groups, replicas int, want string) {
		t.Helper()
		c.groups, c.replicas = groups, replicas
		if _, err := Start(c.config("m1")); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("m1 restarted with --cluster-groups %d --cluster-replicas %d: %v, want %q", groups, replicas, err, want)
		}
	}
	// The member recorded the formation's G and R (formationFile): flags
	// may only repeat them.
	refuse(3, 0, "--cluster-groups 3 disagrees with this cluster's 5, set when it was formed: drop it or set 5")
	refuse(0, 2, "--cluster-replicas 2 disagrees with this cluster's 3, set when it was formed: drop it or set 3")
	// A directory without the record (written by the release before):
	// the log alone cannot tell G, nor allow groups it does not have.
	record := filepath.Join(c.dirs["m1"], formationFile)
	if err := os.Remove(record); err != nil {
		t.Fatal(err)
	}
	refuse(0, 3, fmt.Sprintf("this member holds groups %v of a cluster whose groups are each on 3 of its 5 members: its log cannot tell how many there are", placed))
	refuse(3, 3, fmt.Sprintf("--cluster-groups 3 disagrees with this member's log, which holds group %d", placed[slices.IndexFunc(placed, func(g uint16) bool { return g >= 3 })]))
	// Restarted with the flags once, the record is written again; then
	// without them.
	for _, flags := range [][2]int{{5, 3}, {0, 0}} {
		c.groups, c.replicas = flags[0], flags[1]
		m := c.start("m1")
		for g := range p.Groups {
			if held, want := m.shards.node(uint16(g)) != nil, slices.Contains(placed, uint16(g)); held != want {
				t.Fatalf("m1 restarted with %v holds group %d: %v, placed there: %v", flags, g, held, want)
			}
		}
		if flags[0] != 0 {
			c.stop("m1")
		}
	}
	m := c.up["m1"]
	// Its replicas name the others: a group whose replicas never changed
	// has no book in the log, and a replica restarted knowing no names
	// reported its leader as "" (GET /cluster) whenever another led.
	for _, gs := range m.node.Host().Groups() {
		for _, name := range slices.Concat(gs.Replicas, gs.Learners) {
			if !strings.HasPrefix(name, "m") {
				t.Fatalf("m1 restarted names group %d's replicas %v", gs.ID, gs.Replicas)
			}
		}
	}
	conn := testproc.DialTest(t, m.Addr().String(), replyTimeout)
	for i, id := range ids {
		testproc.WaitFor(t, 20*time.Second, fmt.Sprintf("job %d through the restarted m1", id), func() bool {
			r, err := conn.Do(fmt.Sprintf("peek %d", id), nil)
			return err == nil && r.Kind == testproc.ReplyFound && string(r.Body) == tubes[i]
		})
	}
	// Its GET /cluster shows the whole fleet: the groups it holds no
	// replica of too, as their leaders report them, each with its one job.
	var view string
	testproc.WaitFor(t, 10*time.Second, "every group in m1's /cluster", func() bool {
		var st replication.Status
		if err := json.Unmarshal(api(t, m, "/cluster").Body, &st); err != nil {
			t.Fatal(err)
		}
		view = fmt.Sprintf("%+v", st.Groups)
		if len(st.Groups) != len(p.Groups) {
			return false
		}
		for g, gs := range st.Groups {
			held, replicas := slices.Contains(placed, uint16(g)), 3
			if g == 0 {
				replicas = 5 // group 0 is on every member
			}
			if gs.ID != g || gs.Held != held || gs.Leader == "" || len(gs.Replicas) != replicas || gs.Jobs != 1 || gs.Tubes < 1 {
				return false
			}
		}
		return true
	})
	t.Logf("m1's groups: %s", view)
}

// TestShardGroupsNoHandoverToTheDown: a member of five stops; the member
// that takes over its group leads two, and the balancer must not hand a
// group to the stopped one, which leads none: raft drops every proposal
// of a group while its leadership is being transferred, until the
// transfer gives up an election timeout later, so each such handover
// paused the group for a second, again every few seconds while the member
// stayed down. internal/clusterfault saw it as a one-second gap in a
// group after a kill -9 of a member leading none.
func TestShardGroupsNoHandoverToTheDown(t *testing.T) {
	c := newClusterOf(t, 5, 5, 3)
	c.finalized()
	testproc.WaitFor(t, 40*time.Second, "each member leading one group", func() bool {
		led := map[string]int{}
		for g := range 5 {
			led[reportedLeader(c, uint16(g))]++
		}
		return len(led) == 5 && led[""] == 0
	})
	// The member leading group 0 stops; a voter of group 0 takes it over.
	down, _ := c.serving(10 * time.Second)
	c.stop(down)
	logged := map[string]int{} // each member's log so far: handovers before the stop were to a member up
	for name, out := range c.outs {
		logged[name] = len(out.String())
	}
	c.serving(10 * time.Second)
	var survivor *Member
	for _, m := range c.up {
		survivor = m
	}
	tubes := tubePerGroup(survivor.shards.placement, "h")
	// A session may be closed while group 0's leadership settles: dial
	// again until a put goes through.
	var conn *testproc.Conn
	testproc.WaitFor(t, 10*time.Second, "group 0 taking puts again", func() bool {
		if conn != nil {
			conn.Close()
		}
		var err error
		if conn, err = testproc.Dial(survivor.Addr().String(), replyTimeout); err != nil {
			return false
		}
		if conn.ExpectLine("use "+tubes[0], "USING "+tubes[0]) != nil {
			return false
		}
		_, err = conn.Put(0, 0, 60, []byte("again"))
		return err == nil
	})
	defer conn.Close()
	var slowest time.Duration
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		start := time.Now()
		if _, err := conn.Put(0, 0, 60, []byte("on")); err != nil {
			t.Fatalf("put into group 0 with %s down: %v", down, err)
		}
		slowest = max(slowest, time.Since(start))
	}
	for name, out := range c.outs {
		for _, line := range strings.Split(out.String()[logged[name]:], "\n") {
			if strings.Contains(line, "handing a group's leadership over") && strings.Contains(line, `"to":"`+down+`"`) {
				t.Errorf("%s handed a group over to %s, which is down: %s", name, down, line)
			}
		}
	}
	// A transfer that never completes holds proposals an election
	// timeout: 500 ms here (10 ticks of clusterTick).
	if slowest > 300*time.Millisecond {
		t.Errorf("a put into group 0 took %v with %s down", slowest, down)
	}
}

// reportedLeader is group g's leader as the first member up holding it
// knows it.
func reportedLeader(c *testCluster, g uint16) string {
	for _, m := range c.up {
		if n := m.shards.node(g); n != nil {
			info, _ := n.Leader()
			return info.Name
		}
	}
	return ""
}

// TestShardGroupsFailover: the member leading a group stops; that group
// elects a new leader among the two left, the others go on, the
// sessions of the members left stay open, and every job acknowledged
// before and after is there to reserve, once.
func TestShardGroupsFailover(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	c.balanced()
	tubes := tubePerGroup(p, "f")
	producer := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	worker := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	acked := map[uint64]string{}
	put := func(round int) {
		t.Helper()
		for _, tube := range tubes {
			if err := producer.ExpectLine("use "+tube, "USING "+tube); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				body := fmt.Sprintf("%s %d %d", tube, round, i)
				id, err := producer.Put(0, 0, 60, []byte(body))
				if err != nil {
					t.Fatalf("put %q: %v", body, err)
				}
				acked[id] = body
			}
		}
	}
	put(0)
	info, _ := c.up["m1"].shards.node(1).Leader()
	lost := info.Name
	if lost == "m1" || lost == "m2" {
		// Keep the producer's and the worker's members: stop m3, and the
		// group it leads is the one to fail over.
		lost = "m3"
	}
	c.stop(lost)
	put(1) // through m1: the group m3 led waits for its new leader
	for i, tube := range tubes {
		if err := worker.ExpectLine("watch "+tube, fmt.Sprintf("WATCHING %d", i+2)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint64]bool{}
	for range len(acked) {
		r, err := worker.Do("reserve-with-timeout 5", nil)
		if err != nil || r.Kind != testproc.ReplyReserved {
			t.Fatalf("reserve after %d of %d: %+v %v", len(got), len(acked), r, err)
		}
		if want, ok := acked[r.N]; !ok || want != string(r.Body) || got[r.N] {
			t.Fatalf("reserved job %d %q: acknowledged as %q (%v), reserved before: %v", r.N, r.Body, want, ok, got[r.N])
		}
		got[r.N] = true
		if err := worker.ExpectLine(fmt.Sprintf("delete %d", r.N), "DELETED"); err != nil {
			t.Fatal(err)
		}
	}
	if err := worker.ExpectLine("reserve-with-timeout 0", "TIMED_OUT"); err != nil {
		t.Fatal(err)
	}
}

// newBalancedCluster is three members with three groups, finalized,
// each leading one.
func newBalancedCluster(t *testing.T) *testCluster {
	c := newShardedCluster(t, 3)
	c.finalized()
	c.balanced()
	return c
}

// balanced waits until each of the three members leads one of the three
// groups.
func (c *testCluster) balanced() {
	c.t.Helper()
	testproc.WaitFor(c.t, 30*time.Second, "each member leading one group", func() bool {
		led := map[string]int{}
		for g := range 3 {
			info, _ := c.up["m1"].shards.node(uint16(g)).Leader()
			led[info.Name]++
		}
		return led["m1"] == 1 && led["m2"] == 1 && led["m3"] == 1
	})
}

// ledBy is a group of three that member name serves, once it serves one
// (balanced, a leader may still be taking over).
func (c *testCluster) ledBy(name string) uint16 {
	c.t.Helper()
	var led uint16
	testproc.WaitFor(c.t, 10*time.Second, name+" serving a group", func() bool {
		for g := range 3 {
			if c.up[name].shards.serving(uint16(g)) != nil {
				led = uint16(g)
				return true
			}
		}
		return false
	})
	return led
}

// tubePerGroup names a tube of each group of p, by group: the first names
// prefix followed by a number that each group owns.
func tubePerGroup(p *meta.State, prefix string) []string {
	tubes := make([]string, len(p.Groups))
	for i := 0; slices.Contains(tubes, ""); i++ {
		if name := fmt.Sprintf("%s%d", prefix, i); tubes[p.Owner(name)] == "" {
			tubes[p.Owner(name)] = name
		}
	}
	return tubes
}

// TestShardGroupsOfFive: five members, five groups of three replicas
// each, so that each member holds three groups and not the other two.
// Every member puts into and reserves from every group, those it holds no
// replica of through the leaders the others report; the leaders spread,
// one group each.
func TestShardGroupsOfFive(t *testing.T) {
	c := newClusterOf(t, 5, 5, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	// Each holds group 0, which holds the membership too, and the others
	// the placement gives it.
	for name, m := range c.up {
		for g := 1; g < 5; g++ {
			if held, want := m.shards.node(uint16(g)) != nil, p.Groups[g].Holds(name); held != want {
				t.Fatalf("%s holds group %d: %v, placed there: %v", name, g, held, want)
			}
		}
	}
	testproc.WaitFor(t, 40*time.Second, "each member leading one group", func() bool {
		led := map[string]int{}
		for g := range 5 {
			for _, m := range c.up {
				if m.shards.serving(uint16(g)) != nil {
					led[m.node.Name()]++
				}
			}
		}
		return len(led) == 5 && led["m1"] == 1 && led["m2"] == 1 && led["m3"] == 1 && led["m4"] == 1 && led["m5"] == 1
	})
	tubes := tubePerGroup(p, "q")
	names := []string{"m1", "m2", "m3", "m4", "m5"}
	acked := map[uint64]string{}
	for _, name := range names {
		conn := testproc.DialTest(t, c.up[name].Addr().String(), replyTimeout)
		for g, tube := range tubes {
			if err := conn.ExpectLine("use "+tube, "USING "+tube); err != nil {
				t.Fatalf("through %s: %v", name, err)
			}
			body := name + " " + tube
			id, err := conn.Put(uint32(g), 0, 60, []byte(body))
			if err != nil {
				t.Fatalf("put through %s into %s (group %d): %v", name, tube, g, err)
			}
			if got, _ := p.GroupOfID(id); int(got) != g {
				t.Fatalf("put through %s into %s took id %d of group %d, want %d", name, tube, id, got, g)
			}
			acked[id] = body
		}
	}
	for _, name := range names {
		conn := testproc.DialTest(t, c.up[name].Addr().String(), replyTimeout)
		got, err := conn.StatsInt("stats", "current-jobs-ready", "current-tubes")
		if err != nil || got[0] != 25 || got[1] != 6 {
			t.Fatalf("stats through %s: ready, tubes %v %v, want 25 6", name, got, err)
		}
	}
	// The admin API through any member reaches each tube's group: a put
	// through a member that holds no replica of the group lands there,
	// and the fleet's figures are the protocol's.
	for g, tube := range tubes {
		via := names[g]
		for _, name := range names {
			if !p.Groups[g].Holds(name) {
				via = name
			}
		}
		r := testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodPost, Bearer: testToken, Timeout: replyTimeout,
			URL:  "http://" + c.up[via].HTTPAddr().String() + "/api/v1/tubes/" + tube + "/jobs",
			Body: map[string]any{"body": via + " api " + tube, "pri": g}})
		var put struct{ ID uint64 }
		if err := json.Unmarshal(r.Body, &put); r.Status != http.StatusCreated || err != nil {
			t.Fatalf("admin put through %s into %s: %d %s", via, tube, r.Status, r.Body)
		}
		if got, _ := p.GroupOfID(put.ID); int(got) != g {
			t.Fatalf("admin put through %s into %s took id %d of group %d, want %d", via, tube, put.ID, got, g)
		}
		acked[put.ID] = via + " api " + tube
	}
	for _, name := range names {
		var st map[string]any
		if r := api(t, c.up[name], "/api/v1/stats"); r.Status != http.StatusOK || json.Unmarshal(r.Body, &st) != nil ||
			st["current-jobs-ready"] != float64(30) || st["current-tubes"] != float64(6) {
			t.Fatalf("admin stats through %s: %d %s, want 30 ready in 6 tubes", name, r.Status, r.Body)
		}
		var list struct{ Tubes []struct{ Name string } }
		if r := api(t, c.up[name], "/api/v1/tubes"); r.Status != http.StatusOK || json.Unmarshal(r.Body, &list) != nil || len(list.Tubes) != 6 {
			t.Fatalf("admin tubes through %s: %d %s, want 6", name, r.Status, r.Body)
		}
	}

	// A worker on each member takes six jobs across every group, the
	// most urgent first: group 0's tube has priority 0.
	seen := map[uint64]bool{}
	for _, name := range names {
		w := testproc.DialTest(t, c.up[name].Addr().String(), replyTimeout)
		for i, tube := range tubes {
			if err := w.ExpectLine("watch "+tube, fmt.Sprintf("WATCHING %d", i+2)); err != nil {
				t.Fatal(err)
			}
		}
		for range 6 {
			r, err := w.Do("reserve-with-timeout 5", nil)
			if err != nil || r.Kind != testproc.ReplyReserved || acked[r.N] != string(r.Body) || seen[r.N] {
				t.Fatalf("reserve through %s: %+v %v (acknowledged as %q, seen %v)", name, r, err, acked[r.N], seen[r.N])
			}
			seen[r.N] = true
			if err := w.ExpectLine(fmt.Sprintf("delete %d", r.N), "DELETED"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(seen) != len(acked) {
		t.Fatalf("%d jobs reserved of %d", len(seen), len(acked))
	}
}

// TestShardGroupsDeadlineSoon: a reserve on tubes of other groups than
// the one where the session holds a job near its TTR answers
// DEADLINE_SOON as one server would (docs/design/shards.md 6.4): waiting,
// when the job comes within a second of its TTR; at once while it is;
// not once its TTR has passed (the job went back). So does a reserve
// across two other groups.
func TestShardGroupsDeadlineSoon(t *testing.T) {
	c := newBalancedCluster(t)
	tubes := tubePerGroup(c.up["m1"].shards.placement, "d")
	producer := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	worker := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, producer, "use "+tubes[0], "USING "+tubes[0])
	expectLine(t, worker, "watch "+tubes[0], "WATCHING 2")
	expectLine(t, worker, "ignore default", "WATCHING 1")
	for _, across := range [][]string{{tubes[1]}, {tubes[1], tubes[2]}} {
		if _, err := producer.Put(0, 0, 2, []byte("soon")); err != nil {
			t.Fatal(err)
		}
		r, err := worker.Do("reserve-with-timeout 0", nil)
		if err != nil || r.Kind != testproc.ReplyReserved {
			t.Fatalf("reserve: %+v %v", r, err)
		}
		reserved := time.Now()
		for i, tube := range across {
			expectLine(t, worker, "watch "+tube, fmt.Sprintf("WATCHING %d", i+2))
		}
		expectLine(t, worker, "ignore "+tubes[0], fmt.Sprintf("WATCHING %d", len(across)))
		expectLine(t, worker, "reserve-with-timeout 5", "DEADLINE_SOON")
		if d := time.Since(reserved); d < 500*time.Millisecond || d > 2*time.Second {
			t.Fatalf("watching %v: DEADLINE_SOON %v after the reserve of a job of TTR 2 s, want about 1 s", across, d)
		}
		expectLine(t, worker, "reserve-with-timeout 0", "DEADLINE_SOON")
		time.Sleep(time.Until(reserved.Add(2200 * time.Millisecond)))
		expectLine(t, worker, "reserve-with-timeout 0", "TIMED_OUT")
		// Back to the job's tube, which it is ready in again.
		expectLine(t, worker, "watch "+tubes[0], fmt.Sprintf("WATCHING %d", len(across)+1))
		for i, tube := range across {
			expectLine(t, worker, "ignore "+tube, fmt.Sprintf("WATCHING %d", len(across)-i))
		}
		r, err = worker.Do("reserve-with-timeout 0", nil)
		if err != nil || r.Kind != testproc.ReplyReserved {
			t.Fatalf("reserve of the job back from its TTR: %+v %v", r, err)
		}
		expectLine(t, worker, fmt.Sprintf("delete %d", r.N), "DELETED")
	}
	// Already soon, with a ready job only in a paused tube of another
	// group: DEADLINE_SOON at once, in one group and across two
	// (beanstalkd answers so; its waiting connection's timer is due).
	expectLine(t, producer, "use "+tubes[0], "USING "+tubes[0])
	if _, err := producer.Put(0, 0, 2, []byte("soon")); err != nil {
		t.Fatal(err)
	}
	expectLine(t, producer, "use "+tubes[1], "USING "+tubes[1])
	if _, err := producer.Put(0, 0, 60, []byte("paused")); err != nil {
		t.Fatal(err)
	}
	expectLine(t, producer, "pause-tube "+tubes[1]+" 10", "PAUSED")
	r, err := worker.Do("reserve-with-timeout 0", nil)
	if err != nil || r.Kind != testproc.ReplyReserved || string(r.Body) != "soon" {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	expectLine(t, worker, "watch "+tubes[1], "WATCHING 2")
	expectLine(t, worker, "ignore "+tubes[0], "WATCHING 1")
	time.Sleep(1200 * time.Millisecond)
	for _, also := range []string{"", tubes[2]} {
		if also != "" {
			expectLine(t, worker, "watch "+also, "WATCHING 2")
		}
		start := time.Now()
		expectLine(t, worker, "reserve-with-timeout 5", "DEADLINE_SOON")
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("watching a paused tube%s: DEADLINE_SOON after %v, want at once", also, d)
		}
		expectLine(t, worker, "reserve-with-timeout 0", "DEADLINE_SOON")
	}
}

// expectLine sends line on c and fails the test unless the reply's line
// is want.
func expectLine(t *testing.T, c *testproc.Conn, line, want string) {
	t.Helper()
	if err := c.ExpectLine(line, want); err != nil {
		t.Fatal(err)
	}
}

// TestShardGroupsLocal: a member runs its sessions' commands for a group
// it leads on its own store at once (the local fast path, router
// Session.runHere), and the other way when something of the session is
// on its way: both ways share the session's owner client, so a job
// reserved one way is deleted the other. A reserve that would wait goes
// the other way and is woken by a put through another member. When the
// member hands the group over (handOver), no session closes, not even
// one pipelining puts into it; its next put reaches the new leader; and
// the jobs sessions held there are still theirs on the new leader (a
// touch TOUCHED, a delete DELETED, a release by a session of another
// member RELEASED), while a reserve that waited through a third member
// is answered by the new leader.
func TestShardGroupsLocal(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	c.balanced()
	m1 := c.up["m1"]
	g := c.ledBy("m1")
	tubes := tubePerGroup(p, "l")
	here, there := tubes[g], tubes[(int(g)+1)%3]
	conn := testproc.DialTest(t, m1.Addr().String(), replyTimeout)
	counts := func() (local, sent uint64) {
		st := m1.sessions.Stats()
		return st.Local, st.Requests
	}
	expectCounts := func(what string, local0, sent0, dLocal, dSent uint64) {
		t.Helper()
		if local, sent := counts(); local-local0 != dLocal || sent-sent0 != dSent {
			t.Fatalf("%s: %d run here and %d sent, want %d and %d", what, local-local0, sent-sent0, dLocal, dSent)
		}
	}

	expectLine(t, conn, "use "+here, "USING "+here)
	expectLine(t, conn, "watch "+here, "WATCHING 2")
	expectLine(t, conn, "ignore default", "WATCHING 1")
	l0, s0 := counts()
	id1, err := conn.Put(5, 0, 60, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := conn.Do("reserve-with-timeout 0", nil)
	if err != nil || r.N != id1 {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, id1)
	}
	expectCounts("a put and a reserve in the group m1 leads", l0, s0, 2, 0)
	if !m1.sessions.LocalDone(g, time.Now()) {
		t.Fatal("a command run here is still counted as running (router.Router.LocalDone)")
	}

	// A put into another group's tube is on its way when the delete
	// comes: the delete goes the other way, to the same owner client.
	expectLine(t, conn, "use "+there, "USING "+there)
	l0, s0 = counts()
	conn.WriteString(fmt.Sprintf("put 0 0 60 3\r\ntwo\r\ndelete %d\r\n", id1))
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if r, err := conn.ReadReply(false); err != nil || r.Kind != testproc.ReplyInserted {
		t.Fatalf("pipelined put: %+v %v", r, err)
	}
	if r, err := conn.ReadReply(false); err != nil || string(r.Line) != "DELETED" {
		t.Fatalf("delete sent behind a put in flight, of a job reserved here: %+v %v", r, err)
	}
	expectCounts("a put elsewhere and a delete behind it", l0, s0, 0, 2)

	// A reserve with nothing ready waits the other way; a put through
	// m2 wakes it.
	conn.WriteString("reserve-with-timeout 10\r\n")
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	producer := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, producer, "use "+here, "USING "+here)
	id2, err := producer.Put(1, 0, 60, []byte("woken"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := conn.ReadReply(true); err != nil || r.N != id2 || string(r.Body) != "woken" {
		t.Fatalf("the waiting reserve: %+v %v, want job %d", r, err, id2)
	}

	// A session of m2 holds a job of the group too, and one of m3 waits.
	worker := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, worker, "watch "+here, "WATCHING 2")
	id3, err := producer.Put(2, 0, 60, []byte("held by m2"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := worker.Do("reserve-with-timeout 5", nil); err != nil || r.N != id3 {
		t.Fatalf("m2's reserve: %+v %v, want job %d", r, err, id3)
	}
	waiter := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	expectLine(t, waiter, "watch "+here, "WATCHING 2")
	expectLine(t, waiter, "ignore default", "WATCHING 1")
	waiter.WriteString("reserve-with-timeout 20\r\n")
	if err := waiter.Flush(); err != nil {
		t.Fatal(err)
	}

	// The group goes to another member, while a client pipelines puts
	// into another tube of it through m1: no session closes.
	var to string
	for _, name := range []string{"m2", "m3"} {
		if p.Groups[g].Holds(name) {
			to = name
		}
	}
	busy := testproc.DialTest(t, m1.Addr().String(), replyTimeout)
	busyTube := here + "-busy"
	for p.Owner(busyTube) != g {
		busyTube += "x"
	}
	expectLine(t, busy, "use "+busyTube, "USING "+busyTube)
	stop := make(chan struct{})
	putting := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				putting <- nil
				return
			default:
			}
			for range 10 {
				busy.WriteString("put 100 0 60 4\r\nbusy\r\n")
			}
			if err := busy.Flush(); err != nil {
				putting <- err
				return
			}
			for range 10 {
				if r, err := busy.ReadReply(false); err != nil || r.Kind != testproc.ReplyInserted {
					putting <- fmt.Errorf("a put while the group is handed over: %+v %v", r, err)
					return
				}
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	if err := m1.handOver(m1.shards.node(g), g, to); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 10*time.Second, "the group led elsewhere", func() bool {
		info, _ := m1.shards.node(g).Leader()
		return info.Name != "" && info.Name != "m1"
	})
	time.Sleep(200 * time.Millisecond)
	close(stop)
	if err := <-putting; err != nil {
		t.Fatal(err)
	}
	expectLine(t, conn, fmt.Sprintf("touch %d", id2), "TOUCHED") // its still
	if st, err := conn.Stats(fmt.Sprintf("stats-job %d", id2)); err != nil || st["state"] != "reserved" || st["reserves"] != "1" {
		t.Fatalf("stats-job %d after the handover: %v %v", id2, st, err)
	}
	expectLine(t, conn, fmt.Sprintf("delete %d", id2), "DELETED")
	expectLine(t, worker, fmt.Sprintf("release %d 2 0", id3), "RELEASED")
	if r, err := waiter.ReadReply(true); err != nil || r.N != id3 {
		t.Fatalf("m3's waiting reserve after the handover: %+v %v, want job %d", r, err, id3)
	}
	expectLine(t, conn, "use "+here, "USING "+here)
	id4, err := conn.Put(9, 0, 60, []byte("after"))
	if err != nil {
		t.Fatalf("a put after the handover, on the same connection: %v", err)
	}
	if r, err := conn.Do("reserve-with-timeout 5", nil); err != nil || r.N != id4 {
		t.Fatalf("reserve after the handover: %+v %v, want job %d", r, err, id4)
	}
}

// TestShardGroupsRefsAtOnce: a connection to the member that leads the
// default tube's group counts in stats-tube default from its first
// command on, as on one server: the member sets its sessions' totals in
// a group it leads at once, not through its own commands stream.
func TestShardGroupsRefsAtOnce(t *testing.T) {
	c := newBalancedCluster(t)
	g := c.up["m1"].shards.placement.Owner("default")
	var m *Member
	// Balanced, a leader may still be taking over (serving once its
	// term's first entry commits).
	testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("a member serving group %d", g), func() bool {
		for _, mb := range c.up {
			if mb.shards.serving(g) != nil {
				m = mb
				return true
			}
		}
		return false
	})
	for i := 1; i <= 20; i++ {
		conn := testproc.DialTest(t, m.Addr().String(), replyTimeout)
		got, err := conn.StatsInt("stats-tube default", "current-using", "current-watching")
		if err != nil || got[0] != int64(i) || got[1] != int64(i) {
			t.Fatalf("connection %d's first stats-tube default: using, watching %v %v, want %d %d", i, got, err, i, i)
		}
	}
}

// TestReceiversStartChains: with five members and five groups of three
// (the formation of TestShardGroupsOfFive), m1 leading groups 1 and 3
// and m3 none, m1 shares no group it leads with m3, so it never hears
// from m3; the chain that balances them (m1 to m2 in group 3, then m2 to
// m3 in group 0) must still start from m1's view. Only m1's own hop is
// judged by what m1 hears.
func TestReceiversStartChains(t *testing.T) {
	var members []meta.Member
	for i := 1; i <= 5; i++ {
		members = append(members, meta.Member{Name: fmt.Sprintf("m%d", i), ID: uint64(i)})
	}
	p, err := meta.Formation(members, 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[uint16]string{0: "m2", 1: "m1", 2: "m4", 3: "m1", 4: "m5"}
	reachable := map[string]bool{"m1": true, "m2": true, "m3": true, "m4": true, "m5": true}
	heard := func(g uint16, name string) bool { // the replicas of groups 1 and 3 answer m1's heartbeats
		return p.Groups[1].Holds(name) || p.Groups[3].Holds(name)
	}
	if heard(1, "m3") {
		t.Fatalf("the formation puts m3 in a group m1 leads: %+v", p.Groups)
	}
	var from []string
	for _, tr := range meta.PlanLeaders(p, leaders, receivers("m1", leaders, reachable, heard, noneBehind)) {
		from = append(from, tr.From+"→"+tr.To)
		if tr.From == "m1" && !heard(tr.Group, tr.To) {
			t.Errorf("m1 plans to hand group %d to %s, which it does not hear", tr.Group, tr.To)
		}
	}
	if !slices.ContainsFunc(from, func(s string) bool { return strings.HasPrefix(s, "m1→") }) {
		t.Fatalf("m1's plan %v gives nothing away: m3 would lead nothing for good", from)
	}
	// A member not connected receives nothing, wherever the hop is.
	reachable["m3"] = false
	for _, tr := range meta.PlanLeaders(p, leaders, receivers("m1", leaders, reachable, heard, noneBehind)) {
		if tr.To == "m3" {
			t.Errorf("m1 plans group %d to m3, which is not connected", tr.Group)
		}
	}
}

// noneBehind is a view of leaders' reports that name no replica behind
// (reports of a release before, or none yet).
func noneBehind(uint16, string) bool { return false }

// TestComebacks: a member that comes back (connected, then not, then again)
// receives no leadership for receiverSettle; one connected late at the
// cluster's start, never seen connected before, is no comeback.
func TestComebacks(t *testing.T) {
	var c comebacks
	start := time.Now()
	c.look(map[string]bool{"m1": true, "m2": true, "m3": false}, start)
	c.look(map[string]bool{"m1": true, "m2": false, "m3": true}, start.Add(time.Second))
	for _, name := range []string{"m1", "m3"} {
		if !c.settled(name, start.Add(time.Second)) {
			t.Errorf("%s is not settled, never having gone", name)
		}
	}
	back := start.Add(2 * time.Second)
	c.look(map[string]bool{"m1": true, "m2": true, "m3": true}, back)
	if c.settled("m2", back.Add(receiverSettle-time.Millisecond)) {
		t.Errorf("m2, back at %v, is settled within receiverSettle", back)
	}
	if !c.settled("m2", back.Add(receiverSettle)) {
		t.Errorf("m2 is not settled receiverSettle after it came back")
	}
}

// TestShutdownReceiver: a graceful shutdown hands a group to a member that
// may lead before one cordoned or draining, then to one that has not
// just come back (in a rolling restart, the member restarted last would
// take every group while it catches up), then to the one leading fewest;
// to a comeback only when it is the one heard from.
func TestShutdownReceiver(t *testing.T) {
	start, now := time.Now(), time.Now().Add(2*time.Second)
	m := &Member{} // its comebacks as balanceLeaders keeps them: m1 went, and came back now
	m.comebacks.look(map[string]bool{"m1": true, "m2": true, "m3": true}, start)
	m.comebacks.look(map[string]bool{"m1": false, "m2": true, "m3": true}, start.Add(time.Second))
	m.comebacks.look(map[string]bool{"m1": true, "m2": true, "m3": true}, now)
	for _, tc := range []struct {
		candidates    []string
		barred, leads map[string]int
		want, comment string
	}{
		{[]string{"m1", "m2", "m3"}, nil, nil, "m2", "m1 came back just now"},
		{[]string{"m1", "m2", "m3"}, nil, map[string]int{"m2": 1}, "m3", "m2 leads more"},
		{[]string{"m1", "m2", "m3"}, map[string]int{"m2": 1, "m3": 1}, nil, "m1", "the others are barred"},
		{[]string{"m1"}, nil, nil, "m1", "the only one heard from"},
		{nil, nil, nil, "", "none heard from"},
	} {
		got := shutdownReceiver(tc.candidates, func(name string) [3]int {
			return [3]int{tc.barred[name], m.unsettled(name, now), tc.leads[name]}
		})
		if got != tc.want {
			t.Errorf("%v (%s): %q, want %q", tc.candidates, tc.comment, got, tc.want)
		}
	}
	if m.unsettled("m1", now.Add(receiverSettle)) != 0 {
		t.Errorf("m1 is unsettled receiverSettle after it came back")
	}
}

// TestReplicaStartedAfterAStartCutShort: a member whose first start
// failed before it started its replica of a formation group (a crash, a
// start that timed out) starts it once it runs again: it is that group's
// voter, its log does not hold the group, and the group's membership
// never changed. Before, nothing started it again, and the group ran on
// two of its three voters, one failure from losing its quorum (found by
// a reviewing helper).
func TestReplicaStartedAfterAStartCutShort(t *testing.T) {
	c := prepareCluster(t, 3, 3, 0, nil)
	c.start("m1")
	c.start("m2")
	fail := func(member string, g uint16) bool { return member == "m3" && g == 2 }
	failGroupStart.Store(&fail)
	m, err := Start(c.config("m3"))
	failGroupStart.Store(nil)
	if err == nil {
		c.up["m3"] = m
		t.Fatal("m3 started though its start of group 2 failed")
	}
	m3 := c.start("m3")
	testproc.WaitFor(t, 20*time.Second, "m3's replica of group 2 running", func() bool { return m3.shards.node(2) != nil })
	// The group's quorum holds with m2 down: m3's replica votes.
	tube := tubePerGroup(m3.shards.placement, "cut")[2]
	c.stop("m2")
	conn := testproc.DialTest(t, c.up["m1"].Addr().String(), 20*time.Second)
	expectLine(t, conn, "use "+tube, "USING "+tube)
	if _, err := conn.Put(0, 0, 60, []byte("x")); err != nil {
		t.Fatalf("a put into group 2 with m1 and m3 up: %v", err)
	}
}

// TestBalancersSettle: four members' balancers, each planning on its own
// view as balanceLeaders does (receivers: the replicas of the groups it
// leads judged as it hears them, the others' as their leaders report
// them; a transfer only for a group whose leader has not changed within
// leaderSettle, to a member that gave none away within leaderSettle),
// one look a second. m2's replicas of groups 2 and 3 are behind (a
// replica not running, a link cut), as only their leaders can tell: m2
// can lead nothing, so some member leads two. With the others' replicas
// judged as connected (before protocol 8's reports), each planner
// started a chain of transfers towards m2 whose last hop it could not
// judge; the member it handed to found that hop behind and, leading
// most, started a chain back: group 1 went back and forth every 4 s for
// good. The leaderships must settle.
func TestBalancersSettle(t *testing.T) {
	s := &meta.State{Replicas: 3}
	for i := 1; i <= 4; i++ {
		s.Members = append(s.Members, meta.Member{Name: fmt.Sprintf("m%d", i), ID: uint64(i)})
	}
	for g, voters := range [][]string{{"m4", "m1", "m3"}, {"m3", "m1", "m4"}, {"m2", "m1", "m3"}, {"m3", "m2", "m4"}} {
		grp := meta.Group{ID: uint16(g)}
		for _, v := range voters {
			grp.Replicas = append(grp.Replicas, meta.Replica{Member: v})
		}
		s.Groups = append(s.Groups, grp)
	}
	leaders := map[uint16]string{0: "m1", 1: "m4", 2: "m1", 3: "m4"}
	behind := func(g uint16, name string) bool { return name == "m2" && (g == 2 || g == 3) }
	type view struct {
		changed map[uint16]time.Time
		gave    map[string]time.Time
		led     map[uint16]string
	}
	views := map[string]*view{}
	start := time.Now()
	for _, mb := range s.Members {
		v := &view{changed: map[uint16]time.Time{}, gave: map[string]time.Time{}, led: map[uint16]string{}}
		for g, l := range leaders {
			v.changed[g], v.led[g] = start.Add(-time.Minute), l
		}
		views[mb.Name] = v
	}
	var moved []string
	for tick := 1; tick <= 60; tick++ {
		now := start.Add(time.Duration(tick) * balanceEvery)
		for _, v := range views { // each balancer's look at the leaders
			for g, name := range leaders {
				if was := v.led[g]; was != name {
					v.changed[g], v.gave[was], v.led[g] = now, now, name
				}
			}
		}
		var handed []meta.Transfer
		for _, mb := range s.Members {
			self, v := mb.Name, views[mb.Name]
			ready := map[string]bool{}
			for _, other := range s.Members {
				ready[other.Name] = now.Sub(v.gave[other.Name]) >= leaderSettle
			}
			heard := func(g uint16, name string) bool { return !behind(g, name) }
			for _, tr := range meta.PlanLeaders(s, leaders, receivers(self, leaders, ready, heard, behind)) {
				if tr.From == self && now.Sub(v.changed[tr.Group]) >= leaderSettle {
					handed = append(handed, tr)
					v.changed[tr.Group] = now
				}
			}
		}
		for _, tr := range handed {
			leaders[tr.Group] = tr.To
			moved = append(moved, fmt.Sprintf("%ds: group %d %s→%s", tick, tr.Group, tr.From, tr.To))
		}
	}
	if len(moved) > 4 {
		t.Errorf("the leaderships never settle: %d transfers in a minute: %v", len(moved), moved)
	}
}

// TestReportsNameReplicasBehind: a group's leader tells the other members
// which of its voters it would not hand the group to, so that their
// balancers plan on its view (TestBalancersSettle): none while every
// replica keeps up, a member stopped once it falls silent.
func TestReportsNameReplicasBehind(t *testing.T) {
	c := newBalancedCluster(t)
	g := c.ledBy("m2")
	behind := func() []uint64 { return c.up["m1"].sessions.Reported()[g].Behind }
	testproc.WaitFor(t, 10*time.Second, "m2's report naming none behind", func() bool {
		_, ok := c.up["m1"].sessions.Reported()[g]
		return ok && len(behind()) == 0
	})
	c.stop("m3")
	testproc.WaitFor(t, 10*time.Second, "m2's report naming m3 behind", func() bool {
		return slices.Equal(behind(), []uint64{replication.MemberID("m3")})
	})
}
