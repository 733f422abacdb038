package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/meta"
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
		Bearer: testToken, Timeout: 2 * moveStall})
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
// left (added again under its id), asked through a follower of the group,
// which holds it across a restart too.
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
	puts := startPutting(c.up[through].Addr().String(), []string{tube}, 0)
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
	// The giver led: it handed the leadership to the third replica before
	// its removal, rather than leave the group to an election.
	if !strings.Contains(c.outs[giver].String(), "handed a group's leadership over before leaving it") {
		t.Errorf("%s, leading group 1, did not hand the leadership over before its removal", giver)
	}
	time.Sleep(300 * time.Millisecond)
	acked, err := puts.stop()
	if err != nil {
		t.Fatal(err)
	}
	n := len(acked)
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

	// Back to the member it left, asked through a replica that follows
	// (a replica is added by the group's leader alone, so it forwards the
	// request there).
	var via string
	testproc.WaitFor(t, 20*time.Second, "a follower of group 1 that knows its leader", func() bool {
		for name, m := range c.up {
			if n := m.shards.node(1); n != nil {
				if info, _ := n.Leader(); !info.Serving && info.Name != "" {
					via = name
					return true
				}
			}
		}
		return false
	})
	status, out, body = moveThrough(t, c.up[via], 1, spare, giver)
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
	// As sproutctl writes its flags: every member a peer, itself too.
	nc.Peers = append(slices.Clone(c.peers), replication.Member{Name: name, ID: replication.MemberID(name), Addr: addr})
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

// TestShardGroupsGrowAndShrink: a cluster of three members and four groups
// (groups 1 to 3 on every member) grows to five members and shrinks back
// to three while a client puts into every group. Each member added learns
// the groups and replicas to start with from its addition's answer and
// receives replicas until the members hold one or two each; each member
// removed is marked draining (202), gives its replicas away, and is then
// removed by group 0's leader. Every put acknowledged is there at the
// end. A member started with fewer groups than the cluster's stops,
// rather than route their tubes to the groups it has.
func TestShardGroupsGrowAndShrink(t *testing.T) {
	c := newShardedCluster(t, 4)
	c.finalized()
	p := c.up["m1"].shards.placement
	tubes := tubePerGroup(p, "grow")
	puts := startPutting(c.up["m1"].Addr().String(), tubes, 5*time.Millisecond)

	// held is how many replicas of groups 1 to 3 each member up holds,
	// and whether a move is under way, as m1 sees them.
	held := func() (map[string]int, bool) {
		loads := map[string]int{}
		for name := range c.up {
			h, _, _ := c.up["m1"].holding(name)
			loads[name] = len(h)
		}
		moving := false
		for g := 1; g < 4; g++ {
			if n := c.up["m1"].shards.node(uint16(g)); n != nil {
				_, learners, _ := n.Replicas()
				moving = moving || len(learners) > 0
			}
		}
		return loads, moving
	}
	learners := watchLearners(c.up["m1"], c.up["m2"], c.up["m3"])
	for _, name := range []string{"m4", "m5"} {
		added := c.join(c.up["m2"], name, 4)
		learners.add(c.up[name])
		if added["groups"] != 4.0 || added["replicas"] != 3.0 {
			t.Fatalf("the addition's answer %v: want groups 4, replicas 3", added)
		}
		// As every member sees it: the next addition goes through m2,
		// which refuses it while it still sees a learner.
		testproc.WaitFor(t, 20*time.Second, name+" a voter of group 0", func() bool {
			for _, m := range c.up {
				if voters, _, _ := m.Node().Replicas(); !slices.Contains(voters, c.up[name].Node().ID()) {
					return false
				}
			}
			return true
		})
	}
	testproc.WaitFor(t, 60*time.Second, "the replicas spread over five members", func() bool {
		loads, moving := held()
		for _, n := range loads {
			if n < 1 || n > 2 {
				return false
			}
		}
		return !moving && len(loads) == 5
	})
	// A member added after the cluster was finalized is too (a snapshot
	// of group 0 brings it the version): its sessions live where its
	// clients connect, not proxied to group 0's leader, which a partition
	// from that leader would leave them without.
	c.finalized()

	for _, name := range []string{"m4", "m5"} {
		rep := testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodDelete, URL: "http://" + c.up["m3"].HTTPAddr().String() + "/cluster/members/" + name,
			Bearer: testToken, Timeout: replyTimeout})
		if rep.Status != http.StatusAccepted || !strings.Contains(string(rep.Body), `"draining":true`) {
			t.Fatalf("removing %s, which holds replicas: %d %s, want 202 draining", name, rep.Status, rep.Body)
		}
	}
	for _, name := range []string{"m4", "m5"} {
		select {
		case <-c.up[name].Done():
			if !errors.Is(c.up[name].Err(), replication.ErrRemoved) {
				t.Fatalf("%s stopped with %v, want ErrRemoved", name, c.up[name].Err())
			}
		case <-time.After(60 * time.Second):
			loads, moving := held()
			t.Fatalf("%s, draining, still runs: replicas %v, moving %v", name, loads, moving)
		}
		delete(c.up, name)
	}
	if loads, _ := held(); loads["m1"] != 3 || loads["m2"] != 3 || loads["m3"] != 3 {
		t.Fatalf("back on three members, they hold %v replicas of groups 1 to 3, want 3 each", loads)
	}
	// Group 0's leader planned every move (docs/design/shards.md 1.4):
	// none planned by a member alone, and so one under way at a time.
	if both := learners.stop(); both != "" {
		t.Errorf("two moves under way at once: %s", both)
	}
	var own, asked, alone uint64
	for _, mb := range learners.members {
		made := &mb.movesMade
		own, asked, alone = own+made[byGroup0Leader].Load(), asked+made[byAsker].Load(), alone+made[byItself].Load()
	}
	if alone != 0 || asked == 0 {
		t.Errorf("moves made: %d planned by group 0's leader for itself, %d asked of another, %d planned by a member alone; want some asked, none alone",
			own, asked, alone)
	}
	time.Sleep(200 * time.Millisecond)
	acked, err := puts.stop()
	if err != nil {
		t.Fatal(err)
	}
	conn := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	if len(acked) < 50 {
		t.Fatalf("%d puts acknowledged: too few to tell", len(acked))
	}
	for id, want := range acked {
		r, err := conn.Do(fmt.Sprintf("peek %d", id), nil)
		if err != nil || r.Kind != testproc.ReplyFound || string(r.Body) != want {
			t.Fatalf("peek %d through m3: %+v %v, want %q", id, r, err, want)
		}
	}

	// A member started with one group in this cluster of four stops
	// (formation.go), its -b recording the cluster's four.
	c.join(c.up["m2"], "m6", 0)
	select {
	case <-c.up["m6"].Done():
		var fe *FormationError
		if err := c.up["m6"].Err(); !errors.As(err, &fe) || !strings.Contains(err.Error(), "--cluster-groups unset runs 1, and this cluster's is 4") {
			t.Fatalf("m6 stopped with %v, want the FormationError", err)
		}
		if rec, err := readFormation(c.dirs["m6"]); err != nil || rec != (formation{Groups: 4, Replicas: 3}) {
			t.Fatalf("m6's formation record %+v %v, want the cluster's 4 groups of 3", rec, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("m6, running one group of four, still runs")
	}
}

// learnerWatch looks, every few milliseconds, at the replicas of each
// group as its leader holds them, for two groups with a learner at once:
// two replica moves under way.
type learnerWatch struct {
	mu      sync.Mutex
	members []*Member // guarded by mu while watched
	both    string    // guarded by mu: the first sighting
	done    chan struct{}
	ended   chan struct{}
}

func watchLearners(members ...*Member) *learnerWatch {
	w := &learnerWatch{members: members, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		for {
			select {
			case <-w.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			w.look()
		}
	}()
	return w
}

func (w *learnerWatch) add(m *Member) {
	w.mu.Lock()
	w.members = append(w.members, m)
	w.mu.Unlock()
}

func (w *learnerWatch) look() {
	w.mu.Lock()
	defer w.mu.Unlock()
	var moving []string
	for _, m := range w.members {
		for g := range m.shards.groups() {
			if g == 0 {
				continue
			}
			n := m.shards.node(uint16(g))
			if n == nil {
				continue
			}
			if info, _ := n.Leader(); !info.Serving {
				continue
			}
			if _, l, _ := n.Replicas(); len(l) > 0 {
				moving = append(moving, fmt.Sprintf("group %d (led by %s, learners %v)", g, m.node.Name(), l))
			}
		}
	}
	if len(moving) > 1 && w.both == "" {
		w.both = strings.Join(moving, ", ")
	}
}

// stop ends the watch and returns its first sighting of two moves under
// way at once, "" if none.
func (w *learnerWatch) stop() string {
	close(w.done)
	<-w.ended
	return w.both
}

// putter puts jobs, one after another, into tubes in turn through one
// connection, until stopped, and keeps those acknowledged.
type putter struct {
	done  chan struct{}
	ended chan error
	mu    sync.Mutex
	acked map[uint64]string // id: body
}

// startPutting puts into tubes through the member at addr, pause between
// puts.
func startPutting(addr string, tubes []string, pause time.Duration) *putter {
	p := &putter{done: make(chan struct{}), ended: make(chan error, 1), acked: map[uint64]string{}}
	go func() { p.ended <- p.run(addr, tubes, pause) }()
	return p
}

func (p *putter) run(addr string, tubes []string, pause time.Duration) error {
	conn, err := testproc.Dial(addr, replyTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	used := ""
	for i := 0; ; i++ {
		select {
		case <-p.done:
			return nil
		case <-time.After(pause):
		}
		tube := tubes[i%len(tubes)]
		if tube != used {
			if err := conn.ExpectLine("use "+tube, "USING "+tube); err != nil {
				return err
			}
			used = tube
		}
		body := fmt.Sprintf("%s-%d", tube, i)
		id, err := conn.Put(0, 0, 60, []byte(body))
		if err != nil {
			return fmt.Errorf("put %d through %s: %w", i, addr, err)
		}
		p.mu.Lock()
		p.acked[id] = body
		p.mu.Unlock()
	}
}

// stop ends the puts and returns those acknowledged, and why they ended
// early, if they did.
func (p *putter) stop() (map[uint64]string, error) {
	close(p.done)
	err := <-p.ended
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked, err
}

// TestForwardedBy: a request of the membership or groups endpoints goes
// on from a member that no longer leads (it handed the group over while
// the request came), but through two members at most, and never back to
// one that forwarded it.
func TestForwardedBy(t *testing.T) {
	for _, tc := range []struct {
		chain, self, to string
		want            string
		ok              bool
	}{
		{"", "a", "b", "a", true},    // asked of a: first hop
		{"a", "b", "c", "a,b", true}, // b handed the leadership to c meanwhile
		{"a", "b", "a", "", false},   // b's view names a, which sent it: no ping-pong
		{"a,b", "c", "d", "", false}, // two members forwarded it already
		{"a", "b", "b", "", false},   // b names itself, yet does not serve
		{"a,b", "c", "a", "", false}, // back to the first
	} {
		got, ok := forwardedBy(tc.chain, tc.self, tc.to)
		if got != tc.want || ok != tc.ok {
			t.Errorf("forwardedBy(%q, %q, %q) = %q, %v; want %q, %v", tc.chain, tc.self, tc.to, got, ok, tc.want, tc.ok)
		}
	}
}

// TestAwaitLeader: a request for a group's leader waits out a moment
// with no leader known (a handover under way), and one whose leader's
// --http stays unknown, until its bound; a member serving the group
// itself needs no --http.
func TestAwaitLeader(t *testing.T) {
	answers := func(ls ...admin.Leader) func() admin.Leader {
		return func() admin.Leader {
			l := ls[0]
			if len(ls) > 1 {
				ls = ls[1:]
			}
			return l
		}
	}
	moved := admin.Leader{Name: "m4", HTTP: "127.0.0.1:8004"}
	if l, err := awaitLeader(t.Context(), time.Second, answers(admin.Leader{}, admin.Leader{Name: "m4"}, moved)); err != nil || l != moved {
		t.Errorf("a leadership on its way: %+v %v, want %+v", l, err, moved)
	}
	self := admin.Leader{Name: "m1", Serving: true}
	if l, err := awaitLeader(t.Context(), time.Second, answers(self)); err != nil || l != self {
		t.Errorf("this member serving: %+v %v", l, err)
	}
	began := time.Now()
	if l, err := awaitLeader(t.Context(), 3*reportedLeaderPoll, answers(admin.Leader{Name: "m4"})); err != nil || l.HTTP != "" || time.Since(began) < 3*reportedLeaderPoll {
		t.Errorf("a leader whose --http stays unknown: %+v %v after %v, want it as known after %v", l, err, time.Since(began), 3*reportedLeaderPoll)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := awaitLeader(ctx, time.Second, answers(admin.Leader{})); !errors.Is(err, context.Canceled) {
		t.Errorf("a client gone: %v, want context.Canceled", err)
	}
}

// TestMovePlanner: the move group 0's leader planned last holds back the
// next while it may be under way: until made, not begun within moveQuiet
// (not taken), past moveDue, or another member is known to lead its
// group. A voter too many is taken only once it has stayed moveQuiet: a
// move between its receiver's promotion and its giver's removal shows so
// for a moment.
func TestMovePlanner(t *testing.T) {
	t0 := time.Unix(1000, 0)
	state := func(replicas ...meta.Replica) *meta.State {
		return &meta.State{Replicas: 3, Groups: []meta.Group{{ID: 0}, {ID: 1, Replicas: replicas}}}
	}
	v := func(name string) meta.Replica { return meta.Replica{Member: name} }
	l := func(name string) meta.Replica { return meta.Replica{Member: name, Learner: true} }
	before := state(v("m1"), v("m2"), v("m3"))
	learning := state(v("m1"), v("m2"), v("m3"), l("m4"))
	promoted := state(v("m1"), v("m2"), v("m3"), v("m4"))
	after := state(v("m2"), v("m3"), v("m4"))
	ledBy := func(name string) func(uint16) string { return func(uint16) string { return name } }
	mv := meta.Move{Group: 1, From: "m1", To: "m4", Why: meta.MoveSpread}
	for _, c := range []struct {
		name     string
		cur      *meta.State
		leader   string
		after    time.Duration
		underWay bool
	}{
		{"just sent", before, "m2", time.Second, true},
		{"not taken", before, "m2", moveQuiet, false},
		{"a learner", learning, "m2", 30 * time.Second, true},
		{"promoted", promoted, "m2", 30 * time.Second, true},
		{"a learner catching up for minutes", learning, "m2", 5 * time.Minute, true},
		{"past its time", learning, "m2", moveDue, false},
		{"made", after, "m2", time.Second, false},
		{"the group's leader unknown", learning, "", time.Second, true},
		{"another leader", learning, "m3", time.Second, false},
	} {
		p := movePlanner{Move: mv, leader: "m2", at: t0}
		if got := p.underWay(c.cur, ledBy(c.leader), t0.Add(c.after)); got != c.underWay {
			t.Errorf("%s: under way %v, want %v", c.name, got, c.underWay)
		}
		if !c.underWay && p.underWay(learning, ledBy("m2"), t0) {
			t.Errorf("%s: the move is still held after it was found over", c.name)
		}
	}
	var none movePlanner
	if none.underWay(learning, ledBy("m2"), t0) {
		t.Error("a planner that planned nothing holds a move under way")
	}

	excess := meta.Move{Group: 1, From: "m1", Why: meta.MoveExcess}
	var p movePlanner
	for _, step := range []struct {
		mv    meta.Move
		at    time.Duration
		due   bool
		about string
	}{
		{mv, 0, true, "a spread move"},
		{excess, 0, false, "a voter too many, first seen"},
		{excess, moveQuiet - time.Millisecond, false, "a voter too many, not yet for moveQuiet"},
		{excess, moveQuiet, true, "a voter too many for moveQuiet"},
		{meta.Move{Group: 2, From: "m1", Why: meta.MoveExcess}, moveQuiet, false, "another group's, first seen"},
		{meta.Move{}, moveQuiet + time.Second, true, "nothing planned"},
		{excess, 2 * moveQuiet, false, "group 1's again, first seen anew"},
	} {
		if got := p.due(step.mv, t0.Add(step.at)); got != step.due {
			t.Errorf("%s: due %v, want %v", step.about, got, step.due)
		}
	}
}

// TestCatchUp: a move's receiver is given up once it stalls, not at a
// fixed time: a group whose snapshot and catching up take more than a
// minute was given up after one, its learner taken out, and the same move
// planned again, for good (the planner's state was what it had been).
// Its Match rising, or a snapshot that may be streaming (Match standing
// still, its member heard from, no snapshot failed since), is progress;
// a minute of neither, or moveCap in all, is a stall.
func TestCatchUp(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type look struct {
		at      time.Duration
		seen    learnerSeen
		stalled bool
	}
	for _, c := range []struct {
		name  string
		looks []look
	}{
		{"its log rising for minutes", []look{
			{0, learnerSeen{match: 10, heard: true}, false},
			{50 * time.Second, learnerSeen{match: 2000, heard: true}, false},
			{100 * time.Second, learnerSeen{match: 4000, heard: true}, false},
			{150 * time.Second, learnerSeen{match: 6000, heard: true}, false},
			{200 * time.Second, learnerSeen{match: 8000, heard: true}, false},
		}},
		{"a snapshot streaming for minutes", []look{
			{0, learnerSeen{heard: true}, false},
			{time.Minute, learnerSeen{heard: true}, false},
			{3 * time.Minute, learnerSeen{heard: true}, false},
			{4 * time.Minute, learnerSeen{match: 90000, heard: true}, false},
		}},
		{"its member down", []look{
			{0, learnerSeen{match: 10, heard: true}, false},
			{30 * time.Second, learnerSeen{match: 10}, false},
			{moveStall + time.Second, learnerSeen{match: 10}, true},
		}},
		{"a snapshot failed", []look{
			{0, learnerSeen{heard: true, failed: 4}, false},
			{30 * time.Second, learnerSeen{heard: true, failed: 5}, false},
			{50 * time.Second, learnerSeen{heard: true, failed: 5}, false},
			{moveStall, learnerSeen{heard: true, failed: 5}, true},
		}},
		{"a snapshot failed, then taken", []look{
			{0, learnerSeen{heard: true, failed: 4}, false},
			{30 * time.Second, learnerSeen{heard: true, failed: 5}, false},
			{50 * time.Second, learnerSeen{match: 500, heard: true, failed: 5}, false},
			{3 * time.Minute, learnerSeen{match: 500, heard: true, failed: 5}, false},
		}},
		{"rising for ever, never within reach", []look{
			{0, learnerSeen{match: 1, heard: true}, false},
			{moveCap - time.Second, learnerSeen{match: 2, heard: true}, false},
			{moveCap, learnerSeen{match: 3, heard: true}, true},
		}},
	} {
		w := catchUp{stall: moveStall, limit: moveCap}
		for _, l := range c.looks {
			if got := w.stalled(t0.Add(l.at), l.seen); got != l.stalled {
				t.Errorf("%s: at %v, %+v: stalled %v, want %v", c.name, l.at, l.seen, got, l.stalled)
			}
		}
	}
}

// TestShardGroupsMoveGiverLeads: a replica's giver that leads its group
// hands the leadership over before its removal, whichever way the move
// reaches it, and a move whose giver came to lead meanwhile removes it
// only there. Four members, group 1 on three. A voter too many taken
// from the group's leader (the planner's MoveExcess, made by makeMove)
// hands over first; then, the giver a follower when the move began and
// leading as it would be removed (a handover mid-move), the member that
// began it refuses to remove it, and the same move asked again goes to
// the giver, which hands over and leaves, while a client puts into the
// group through it, none of whose puts is cut off.
func TestShardGroupsMoveGiverLeads(t *testing.T) {
	c := newClusterOf(t, 4, 2, 3)
	c.finalized()
	voters := func(via string) []string {
		m := c.up[via]
		return m.replicasOf(1, m.shards.node(1)).Replicas
	}
	leading := func() string {
		var name string
		testproc.WaitFor(t, 20*time.Second, "group 1 led", func() bool {
			name = reportedLeader(c, 1)
			return name != "" && c.up[name].shards.serving(1) != nil
		})
		return name
	}
	addVoter := func(leader, name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), replication.ChangeTimeout)
		defer cancel()
		if _, err := c.up[leader].shards.node(1).AddReplica(ctx, name); err != nil {
			t.Fatalf("adding %s to group 1 through %s: %v", name, leader, err)
		}
		testproc.WaitFor(t, 20*time.Second, name+" a voter of group 1", func() bool {
			return slices.Contains(voters(leader), name)
		})
	}
	var spare string
	for _, peer := range c.peers {
		if !c.up["m1"].shards.placement.Groups[1].Holds(peer.Name) {
			spare = peer.Name
		}
	}

	// A voter too many, given up by the leader.
	leader := leading()
	addVoter(leader, spare)
	if !c.up[leader].makeMove(meta.Move{Group: 1, From: leader, Why: meta.MoveExcess}, byGroup0Leader, "") {
		t.Fatalf("%s, leading group 1, did not make the move", leader)
	}
	testproc.WaitFor(t, 20*time.Second, leader+" dropping group 1", func() bool {
		return c.up[leader].shards.node(1) == nil
	})
	if !strings.Contains(c.outs[leader].String(), "handed a group's leadership over before leaving it") {
		t.Fatalf("%s, a voter too many and leading group 1, left it to raft's own handover", leader)
	}

	// The giver leads by the time its removal comes.
	began := leading()
	addVoter(began, leader)
	var giver string
	for _, name := range voters(began) {
		if name != began && name != leader {
			giver = name
		}
	}
	puts := startPutting(c.up[giver].Addr().String(), []string{tubePerGroup(c.up[giver].shards.placement, "gl")[1]}, 0)
	if err := c.up[began].handOver(c.up[began].shards.node(1), 1, giver); err != nil {
		t.Fatalf("handing group 1 from %s to %s: %v", began, giver, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), moveStall)
	defer cancel()
	if _, err := c.up[began].moveReplica(ctx, 1, giver, leader); !errors.Is(err, replication.ErrNotServing) {
		t.Fatalf("%s moving group 1's replica from %s, leading it now: %v, want ErrNotServing", began, giver, err)
	}
	if got := voters(began); !slices.Contains(got, giver) {
		t.Fatalf("%s removed %s, leading group 1: voters %v", began, giver, got)
	}
	status, out, body := moveThrough(t, c.up[began], 1, giver, leader)
	if status != http.StatusOK || slices.Contains(out.Replicas, giver) || !slices.Contains(out.Replicas, leader) {
		t.Fatalf("the move asked again through %s: %d %s", began, status, body)
	}
	if !strings.Contains(c.outs[giver].String(), "handed a group's leadership over before leaving it") {
		t.Fatalf("%s, giving its replica of group 1 while leading it, left it to raft's own handover", giver)
	}
	time.Sleep(300 * time.Millisecond)
	acked, err := puts.stop()
	if err != nil {
		for _, name := range slices.Sorted(maps.Keys(c.up)) {
			t.Logf("%s's calls pending: %v", name, c.up[name].sessions.DescribePending())
		}
		t.Fatalf("puts through %s, which led group 1 as it left it: %v", giver, err)
	}
	if len(acked) == 0 {
		t.Fatal("no put acknowledged")
	}
}

// TestStaleMove: a planned move is made only on replicas it still fits,
// as the group's leader holds them: the planner's view of a group comes
// from reports a change may have passed. The growth bench saw group 0's
// leader send "group 2 from m3 to m1" when m1 was a voter already, and
// the move removed m3, leaving the group a voter short.
func TestStaleMove(t *testing.T) {
	voters := []string{"m1", "m2", "m3"}
	draining := func(name string) bool { return name == "m9" }
	for _, c := range []struct {
		name     string
		mv       meta.Move
		voters   []string
		learners []string
		stale    bool
	}{
		{"spread", meta.Move{From: "m3", To: "m4"}, voters, nil, false},
		{"to a voter already", meta.Move{From: "m3", To: "m1"}, voters, nil, true},
		{"from no replica", meta.Move{From: "m5", To: "m4"}, voters, nil, true},
		{"cut short after the promotion", meta.Move{From: "m3", To: "m4"}, append(slices.Clone(voters), "m4"), nil, false},
		{"the receiver a learner", meta.Move{From: "m3", To: "m4"}, voters, []string{"m4"}, false},
		{"short", meta.Move{To: "m4"}, voters[:2], nil, false},
		{"short, the receiver a replica already", meta.Move{To: "m2"}, voters[:2], nil, true},
		{"short no longer", meta.Move{To: "m4"}, voters, nil, true},
		{"a voter too many", meta.Move{From: "m1", Why: meta.MoveExcess}, append(slices.Clone(voters), "m4"), nil, false},
		{"no voter too many", meta.Move{From: "m1", Why: meta.MoveExcess}, voters, nil, true},
		{"a drain no member can take", meta.Move{From: "m9"}, []string{"m1", "m2", "m9"}, nil, false},
	} {
		why := staleMove(c.mv, c.voters, c.learners, 3, draining)
		if (why != "") != c.stale {
			t.Errorf("%s: %+v on voters %v learners %v: %q, want stale %v", c.name, c.mv, c.voters, c.learners, why, c.stale)
		}
	}
}

// TestShardGroupsStaleLearner: a learner left in a group by a replica
// move whose maker was lost (here: added by hand, on a member that is
// down, so it never catches up) is taken out by the group's leader once
// it has been one for the learner timeout: while it stayed, the planner
// planned no replica move for any group, drains' included. The group
// keeps its voters.
func TestShardGroupsStaleLearner(t *testing.T) {
	c := newClusterOf(t, 4, 2, 3)
	c.finalized()
	leader := c.leaderOf(1)
	n := leader.shards.node(1)
	voters := c.leadersReplicas(1)
	var outsider string
	for name := range c.up {
		if !slices.Contains(voters, name) {
			outsider = name
		}
	}
	if outsider == "" {
		t.Fatalf("group 1's voters %v: every member holds one", voters)
	}
	c.stop(outsider)
	for _, m := range c.up {
		m.learnerTimeout.Store(int64(2 * time.Second))
	}
	if _, err := n.AddReplica(t.Context(), outsider); err != nil {
		t.Fatalf("adding %s, down, to group 1 as a learner: %v", outsider, err)
	}
	if got := leader.replicasOf(1, n).Learners; !slices.Equal(got, []string{outsider}) {
		t.Fatalf("group 1's learners %v, want %s", got, outsider)
	}
	testproc.WaitFor(t, 30*time.Second, "the learner that cannot catch up taken out", func() bool {
		l := c.leaderOf(1)
		return len(l.replicasOf(1, l.shards.node(1)).Learners) == 0
	})
	if got := c.leadersReplicas(1); !slices.Equal(got, voters) {
		t.Fatalf("group 1's voters after: %v, want %v", got, voters)
	}
}

// TestDrained: a draining member that holds no replica of a group but 0
// is removed; not one that holds one, and none while a group's replicas
// are not known (its leader's report lapsed, no replica on the member
// that looks): the member may hold one still.
func TestDrained(t *testing.T) {
	group := func(id uint16, members ...string) meta.Group {
		g := meta.Group{ID: id}
		for _, m := range members {
			g.Replicas = append(g.Replicas, meta.Replica{Member: m})
		}
		return g
	}
	s := &meta.State{Members: []meta.Member{{Name: "m1"}, {Name: "m2"}, {Name: "m3"}, {Name: "m4", Draining: true}},
		Groups: []meta.Group{group(0, "m1", "m2", "m3", "m4"), group(1, "m1", "m2", "m3"), group(2, "m1", "m2", "m4")}}
	if name, ok := drained(s); ok {
		t.Errorf("m4 holds a replica of group 2, yet %s is drained", name)
	}
	s.Groups[2] = group(2, "m1", "m2", "m3")
	if name, ok := drained(s); !ok || name != "m4" {
		t.Errorf("m4 holds none: %q %v, want m4 drained", name, ok)
	}
	s.Groups[1].Replicas = nil // its report lapsed
	if name, ok := drained(s); ok {
		t.Errorf("group 1's replicas unknown, yet %s is drained", name)
	}
}

// TestShardGroupsJoinerView: a member added to the cluster sees each
// group's replicas as they are, those of a group never changed since the
// formation too (its leader reports index 0), though its own formation,
// computed from the peers it was given, differs: group 0's leader plans
// every move on its view, and a joiner leading group 0 that counted its
// formation's replicas planned moves to members that held one already.
func TestShardGroupsJoinerView(t *testing.T) {
	c := newClusterOf(t, 3, 4, 2)
	c.finalized()
	c.join(c.up["m1"], "m4", 4)
	joiner := c.up["m4"]
	var wrong string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		view := joiner.currentPlacement(joiner.sessions.Reported(), joiner.memberNames())
		wrong = ""
		for _, g := range view.Groups[1:] {
			var seen []string
			for _, r := range g.Replicas {
				seen = append(seen, r.Member)
			}
			slices.Sort(seen)
			if want := c.leadersReplicas(g.ID); !slices.Equal(seen, want) {
				wrong += fmt.Sprintf(" group %d: %v, its leader holds %v;", g.ID, seen, want)
			}
		}
		if wrong == "" {
			return
		}
	}
	t.Fatalf("m4's view of the groups' replicas after 30 s:%s", wrong)
}

// leadersReplicas are group g's replicas, sorted, as a member serving it
// holds them; nil while none does.
func (c *testCluster) leadersReplicas(g uint16) []string {
	for _, m := range c.up {
		if n := m.shards.serving(g); n != nil {
			out := m.replicasOf(g, m.shards.node(g)).Replicas
			slices.Sort(out)
			return out
		}
	}
	return nil
}

// TestShardGroupsFormedShortGainReplicas: a cluster formed with fewer
// members than R (two, R 3 by default: each group on both) gives each
// group its third replica once a third member joins, and keeps it,
// whichever member plans. Before, the members that formed it planned
// with the formation's R, 2, and the joiner, whose formation is of the
// three peers it was given, with 3: the groups stayed on two replicas,
// or lost the third again with group 0's leadership.
func TestShardGroupsFormedShortGainReplicas(t *testing.T) {
	c := newClusterOf(t, 2, 3, 0)
	c.finalized()
	c.join(c.up["m1"], "m3", 3)
	all := []string{"m1", "m2", "m3"}
	onAll := func() bool {
		for g := uint16(1); g < 3; g++ {
			if !slices.Equal(c.leadersReplicas(g), all) {
				return false
			}
		}
		return true
	}
	testproc.WaitFor(t, 60*time.Second, "groups 1 and 2 on the three members", onAll)
	// Group 0's leadership goes to the joiner and back: both plan alike.
	for _, to := range []string{"m3", "m1"} {
		from := c.leaderOf(0)
		if from.node.Name() != to {
			if err := from.handOver(from.node, 0, to); err != nil {
				t.Fatalf("handing group 0 from %s to %s: %v", from.node.Name(), to, err)
			}
		}
		for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if !onAll() && c.leadersReplicas(1) != nil && c.leadersReplicas(2) != nil {
				t.Fatalf("group 0 led by %s: groups' replicas %v and %v, want %v", to, c.leadersReplicas(1), c.leadersReplicas(2), all)
			}
		}
	}
}

// TestShardGroupsDropRemovedReplica: a member removed from the cluster
// while it still held a replica of group 1 (as group 0's leader may,
// on a report a second old: removeDrained) leaves the group: group 1's
// leader takes its replica out (dropRemovedReplicas), and the group
// gains a live voter on the member that held none. Before, the gone
// voter stayed, counted in the group's quorum, and the planner moved
// nothing while it did.
func TestShardGroupsDropRemovedReplica(t *testing.T) {
	c := newClusterOf(t, 4, 2, 3)
	c.finalized()
	l0, l1 := c.leaderOf(0), c.leaderOf(1)
	voters, _, _ := l1.shards.node(1).Replicas()
	var victim string
	for name, m := range c.up {
		if m != l0 && m != l1 && slices.Contains(voters, m.node.ID()) {
			victim = name
		}
	}
	if victim == "" {
		t.Fatalf("no member holds group 1 but its leader %s and group 0's %s: voters %v", l1.node.Name(), l0.node.Name(), voters)
	}
	gone := c.up[victim].node.ID()
	tube := tubePerGroup(l0.shards.placement, "drop")[1]
	conn := testproc.DialTest(t, l0.Addr().String(), replyTimeout)
	expectLine(t, conn, "use "+tube, "USING "+tube)
	id, err := conn.Put(0, 0, 60, []byte("kept"))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), replication.ChangeTimeout)
	defer cancel()
	if _, err := l0.node.RemoveMember(ctx, victim); err != nil {
		t.Fatalf("removing %s from the cluster: %v", victim, err)
	}
	select {
	case <-c.up[victim].Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s, removed, still runs", victim)
	}
	delete(c.up, victim)
	testproc.WaitFor(t, 60*time.Second, "group 1 on three live voters, "+victim+"'s replica out", func() bool {
		n := c.leaderOf(1).shards.node(1)
		if n == nil {
			return false
		}
		voters, learners, _ := n.Replicas()
		if len(voters) != 3 || len(learners) != 0 || slices.Contains(voters, gone) {
			return false
		}
		for _, v := range voters {
			if !slices.ContainsFunc(slices.Collect(maps.Values(c.up)), func(m *Member) bool { return m.node.ID() == v }) {
				return false
			}
		}
		return true
	})
	r, err := conn.Do(fmt.Sprintf("peek %d", id), nil)
	if err != nil || r.Kind != testproc.ReplyFound || string(r.Body) != "kept" {
		t.Fatalf("peek %d after the replica moved: %+v %v", id, r, err)
	}
}

// TestShardGroupsLeaveRecordsRemovalFirst: a member whose replica leaves
// its group counts the removal (leftAt) before it clears the replica's
// node. followReplicas starts a group whose node is nil on any report
// later than that count, and a report from before the removal still
// names the member: a balancer look in between started a new node on the
// log about to be dropped (SharedLog.Attach hands back a log still held),
// and the Drop after dropped it under that node.
func TestShardGroupsLeaveRecordsRemovalFirst(t *testing.T) {
	c := newClusterOf(t, 4, 2, 3)
	c.finalized()
	leader := c.leaderOf(1)
	voters := c.leadersReplicas(1)
	var giver, spare string
	for _, name := range slices.Sorted(maps.Keys(c.up)) {
		switch {
		case !slices.Contains(voters, name):
			spare = name
		case name != leader.node.Name() && giver == "":
			giver = name
		}
	}
	sh := c.up[giver].shards
	seen, stop := make(chan uint64, 1), make(chan struct{})
	defer close(stop)
	go func() {
		for sh.node(1) != nil {
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
			}
		}
		seen <- sh.leftAt(1)
	}()
	if status, _, body := moveThrough(t, leader, 1, giver, spare); status != http.StatusOK {
		t.Fatalf("moving group 1's replica from %s to %s: %d %s", giver, spare, status, body)
	}
	select {
	case left := <-seen:
		if left == 0 {
			t.Fatalf("%s's replica of group 1 was cleared before its removal was counted: a report from before it could start the group again", giver)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s's replica of group 1 still runs after its removal", giver)
	}
}
