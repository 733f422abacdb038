package member

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/testproc"
)

// TestShardGroupsGrow: three members of two groups grow to four while a
// client pipelines puts into a tube whose slot goes to a new group: the
// new groups are elected, each takes its slots' tubes live with their
// jobs and ids, a job reserved before stays its holder's, every
// acknowledged put is there once, every member routes every tube by the
// four groups' slots, new puts take the new group's ids, and a member
// restarted runs the grown groups again from its log. A growth to what is
// not a multiple is refused.
func TestShardGroupsGrow(t *testing.T) {
	c := newClusterOf(t, 3, 2, 0)
	c.finalized()
	var tubes []string
	movers := map[string]int{} // tube → its group after the growth, if it moves
	for i := range 24 {
		tube := fmt.Sprintf("grow-%d", i)
		tubes = append(tubes, tube)
		if g := meta.Slot(tube) % 4; g >= 2 {
			movers[tube] = g
		}
	}
	var moving string
	for _, tube := range tubes {
		if movers[tube] != 0 {
			moving = tube
			break
		}
	}
	if moving == "" || len(movers) == len(tubes) {
		t.Fatalf("no tube moves, or every one: %v", movers)
	}
	setup := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	ids := map[string][]uint64{}
	for _, tube := range tubes {
		expectLine(t, setup, "use "+tube, "USING "+tube)
		for i := range 2 {
			id, err := setup.Put(uint32(i), 0, 60, fmt.Appendf(nil, "%s-%d", tube, i))
			if err != nil {
				t.Fatal(err)
			}
			ids[tube] = append(ids[tube], id)
		}
	}
	expectLine(t, setup, "watch "+moving, "WATCHING 2")
	expectLine(t, setup, "ignore default", "WATCHING 1")
	held := ids[moving][0]
	if r, err := setup.Do("reserve-with-timeout 5", nil); err != nil || r.N != held {
		t.Fatalf("reserve: %+v %v, want %d", r, err, held)
	}

	puts := startPipeliner(t, c.up["m2"], moving, 2)
	time.Sleep(200 * time.Millisecond)
	rep := testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodPost,
		URL: fmt.Sprintf("http://%s/cluster/groups/grow", c.up["m3"].HTTPAddr()), Body: map[string]int{"to": 4},
		Bearer: testToken, Timeout: 2 * growTimeout})
	var res growResult
	if rep.Status != http.StatusOK || json.Unmarshal(rep.Body, &res) != nil || res.From != 2 || res.To != 4 {
		t.Fatalf("growth to 4: %d %s", rep.Status, rep.Body)
	}
	if len(res.Tubes) != len(movers) {
		t.Errorf("the growth moved %v, want the %d tubes of the new groups' slots", res.Tubes, len(movers))
	}
	t.Logf("grown: %d tubes, %d jobs, held at most %d ms", len(res.Tubes), res.Jobs, res.Paused)
	// Each new group was first led by the replica the growth preferred,
	// one that led the fewest groups: in its first election, term 2.
	for _, g := range c.up["m1"].node.Tubes().Grown {
		led := false
		for name, m := range c.up {
			n := m.shards.node(g.ID)
			if n == nil || m.shards.serving(g.ID) == nil {
				continue
			}
			led = true
			if st := n.Status(); name != g.Preferred || st.Term != 2 {
				t.Errorf("grown group %d led by %s in term %d, want %s, the growth's preferred, in term 2", g.ID, name, st.Term, g.Preferred)
			}
		}
		if !led {
			t.Errorf("grown group %d led by none of the members", g.ID)
		}
	}
	time.Sleep(200 * time.Millisecond)
	acked := puts.stopped()

	routesByFour := func(m *Member) bool {
		if m.shards.groups() != 4 {
			return false
		}
		for _, tube := range tubes {
			if int(m.shards.routing.Load().state.Owner(tube)) != meta.Slot(tube)%4 {
				return false
			}
		}
		return true
	}
	for _, m := range c.up {
		testproc.WaitFor(t, 5*time.Second, m.node.Name()+" routing by four groups", func() bool { return routesByFour(m) })
	}
	if st, err := setup.Stats(fmt.Sprintf("stats-job %d", held)); err != nil || st["state"] != "reserved" {
		t.Fatalf("the held job after the growth: %v %v", st, err)
	}
	expectLine(t, setup, fmt.Sprintf("delete %d", held), "DELETED")
	for tube, tubeIDs := range ids {
		for _, id := range tubeIDs {
			if id == held {
				continue
			}
			if st, err := setup.Stats(fmt.Sprintf("stats-job %d", id)); err != nil || st["tube"] != tube {
				t.Fatalf("stats-job %d of %s: %v %v", id, tube, st, err)
			}
		}
	}
	expectPeekable(t, setup, acked)
	want := len(acked) + 1
	if st, err := setup.Stats("stats-tube " + moving); err != nil || st["current-jobs-ready"] != fmt.Sprint(want) {
		t.Fatalf("stats-tube %s: %v %v, want %d ready", moving, st, err, want)
	}
	expectLine(t, setup, "use "+moving, "USING "+moving)
	if id, err := setup.Put(0, 0, 60, []byte("after")); err != nil || int(id>>meta.SeqBits) != movers[moving] {
		t.Fatalf("a put after the growth: id %d (%v), want one of group %d", id, err, movers[moving])
	}
	var st struct {
		Groups []struct {
			ID     int    `json:"id"`
			Leader string `json:"leader"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(api(t, c.up["m1"], "/cluster").Body, &st); err != nil || len(st.Groups) != 4 || st.Groups[3].Leader == "" {
		t.Fatalf("GET /cluster after the growth: %+v %v", st.Groups, err)
	}

	// A member restarted runs the grown groups it holds again.
	held3 := c.up["m3"].shards.groups()
	c.stop("m3")
	m3 := c.start("m3")
	testproc.WaitFor(t, 20*time.Second, "m3 routing by four groups again", func() bool { return routesByFour(m3) })
	if held3 != 4 {
		t.Fatalf("m3 counted %d groups before its restart", held3)
	}
	for _, tube := range tubes {
		if r, err := setup.Do("stats-tube "+tube, nil); err != nil || r.Kind != testproc.ReplyOK {
			t.Fatalf("stats-tube %s after m3's restart: %+v %v", tube, r, err)
		}
	}
	rep = testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodPost,
		URL: fmt.Sprintf("http://%s/cluster/groups/grow", c.up["m1"].HTTPAddr()), Body: map[string]int{"to": 6},
		Bearer: testToken, Timeout: replyTimeout})
	if rep.Status != http.StatusConflict {
		t.Errorf("a growth of 4 groups to 6: %d %s", rep.Status, rep.Body)
	}

	// A member added now starts with the formation's two groups, as the
	// addition's answer says, and learns of the grown ones.
	if out := c.join(c.up["m1"], "m4", 2); out["groups"] != 2.0 {
		t.Fatalf("the addition's answer: %v, want groups 2", out)
	}
	m4 := c.up["m4"]
	testproc.WaitFor(t, 30*time.Second, "m4 routing by four groups", func() bool { return routesByFour(m4) })
	added := testproc.DialTest(t, m4.Addr().String(), replyTimeout)
	expectLine(t, added, "use "+moving, "USING "+moving)
	if id, err := added.Put(0, 0, 60, []byte("via m4")); err != nil || int(id>>meta.SeqBits) != movers[moving] {
		t.Fatalf("a put through the member added: id %d (%v), want one of group %d", id, err, movers[moving])
	}
	select {
	case <-m4.Done():
		t.Fatalf("m4 stopped: %v", m4.Err())
	case <-time.After(time.Second):
	}
}

// TestShardGroupsGrowResumed: group 0's leader, which drives a growth,
// is stopped while the groups grow under pipelined puts; asked again
// through another member, the growth goes on where it stopped and ends
// with every tube routed by the new count, every acknowledged put there.
func TestShardGroupsGrowResumed(t *testing.T) {
	c := newClusterOf(t, 3, 2, 0)
	c.finalized()
	var driver *Member
	for _, m := range c.up {
		if m.shards.serving(0) != nil {
			driver = m
		}
	}
	if driver == nil {
		t.Fatal("group 0 has no leader")
	}
	var via, producerVia *Member
	for _, m := range c.up {
		switch {
		case m == driver:
		case via == nil:
			via = m
		default:
			producerVia = m
		}
	}
	tube := ""
	for i := 0; tube == ""; i++ {
		if name := fmt.Sprintf("resumed-%d", i); meta.Slot(name)%4 >= 2 {
			tube = name
		}
	}
	puts := startPipeliner(t, producerVia, tube, 2)
	time.Sleep(200 * time.Millisecond)
	grow := func(m *Member) testproc.APIReply {
		return testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodPost,
			URL: fmt.Sprintf("http://%s/cluster/groups/grow", m.HTTPAddr()), Body: map[string]int{"to": 4},
			Bearer: testToken, Timeout: 2 * growTimeout})
	}
	go grow(via) // forwarded to the driver, which stops meanwhile
	testproc.WaitFor(t, 10*time.Second, "the growth begun", func() bool { return driver.shards.groups() == 4 })
	c.stop(driver.node.Name())
	var rep testproc.APIReply
	testproc.WaitFor(t, 60*time.Second, "the growth resumed and done", func() bool {
		rep = grow(via)
		return rep.Status == http.StatusOK
	})
	t.Logf("resumed: %s", rep.Body)
	acked := puts.stopped()
	for _, m := range c.up {
		if m == driver {
			continue
		}
		testproc.WaitFor(t, 5*time.Second, m.node.Name()+" routing by four groups", func() bool {
			return m.shards.groups() == 4 && int(m.shards.routing.Load().state.Owner(tube)) == meta.Slot(tube)%4
		})
	}
	client := testproc.DialTest(t, via.Addr().String(), replyTimeout)
	expectPeekable(t, client, acked)
	if st, err := client.Stats("stats-tube " + tube); err != nil || st["current-jobs-ready"] != fmt.Sprint(len(acked)) {
		t.Fatalf("stats-tube %s: %v %v, want %d ready", tube, st, err, len(acked))
	}
}

// TestShardGroupsGrownReplicaMovedAway: a grown group's replicas, moved
// off the members the growth named, stay off them: a later change of
// group 0's book (a tube's move) does not start them there again, empty,
// beside the group (found by review: they elected a group of their own).
func TestShardGroupsGrownReplicaMovedAway(t *testing.T) {
	c := newClusterOf(t, 6, 2, 3)
	c.finalized()
	rep := testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodPost,
		URL: fmt.Sprintf("http://%s/cluster/groups/grow", c.up["m1"].HTTPAddr()), Body: map[string]int{"to": 4},
		Bearer: testToken, Timeout: 2 * growTimeout})
	if rep.Status != http.StatusOK {
		t.Fatalf("growth: %d %s", rep.Status, rep.Body)
	}
	named := c.up["m1"].node.Tubes().Grown[0] // group 2
	var spares []string
	for _, p := range c.peers {
		if !slices.Contains(named.Replicas, p.Name) {
			spares = append(spares, p.Name)
		}
	}
	for i, giver := range named.Replicas {
		status, _, body := moveThrough(t, c.up[spares[0]], int(named.ID), giver, spares[i])
		for try := 0; status != http.StatusOK && try < 20; try++ {
			time.Sleep(500 * time.Millisecond)
			status, _, body = moveThrough(t, c.up[spares[0]], int(named.ID), giver, spares[i])
		}
		if status != http.StatusOK {
			t.Fatalf("moving group %d's replica from %s to %s: %d %s", named.ID, giver, spares[i], status, body)
		}
		testproc.WaitFor(t, 10*time.Second, giver+" dropping its replica", func() bool { return c.up[giver].shards.node(named.ID) == nil })
	}
	tube := "moved-away"
	owner := int(c.up["m1"].shards.routing.Load().state.Owner(tube))
	status, _, body := moveTubeThrough(t, c.up[spares[0]], tube, (owner+1)%4)
	for try := 0; status == http.StatusServiceUnavailable && try < 20; try++ { // a group's leader not yet known
		time.Sleep(500 * time.Millisecond)
		status, _, body = moveTubeThrough(t, c.up[spares[0]], tube, (owner+1)%4)
	}
	if status != http.StatusOK {
		t.Fatalf("a tube's move: %d %s", status, body)
	}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, name := range named.Replicas {
			if c.up[name].shards.node(named.ID) != nil {
				t.Fatalf("%s runs a replica of group %d again", name, named.ID)
			}
		}
	}
}

// TestDrivingLeavesGrowthFree: the balancer's look whether a growth is
// under way (driving(0), each tick) does not make a growth asked
// meanwhile fail as under way: it took the growth's lock for an instant,
// and a reviewing helper's stress refused 11,370 of 200,000 growths.
func TestDrivingLeavesGrowthFree(t *testing.T) {
	m := &Member{}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			m.driving(0)
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for i := range 200000 {
		if !m.growing.begin() {
			t.Fatalf("growth %d refused as under way while none was", i)
		}
		m.growing.end()
	}
}

// TestGrownReplicaStartRetried: a grown group's replica whose start fails
// once on a member (a log it could not attach for a moment) starts there
// all the same, a while later: before, startGrown logged the failure and
// left the replica down until the member restarted, the group one replica
// short. Failed on two of its three members, the group had no quorum, no
// leader to report it (followReplicas' startOriginal restarts a replica
// only as its leader's report names it), and the growth stopped there.
func TestGrownReplicaStartRetried(t *testing.T) {
	for _, failing := range [][]string{{"m3"}, {"m2", "m3"}} {
		t.Run(fmt.Sprint(failing), func(t *testing.T) {
			c := newClusterOf(t, 3, 2, 0)
			c.finalized()
			var failed sync.Map // member name → a start of group 2 failed there
			fail := func(member string, g uint16) bool {
				if g != 2 || !slices.Contains(failing, member) {
					return false
				}
				_, again := failed.LoadOrStore(member, true)
				return !again
			}
			failGroupStart.Store(&fail)
			defer failGroupStart.Store(nil)
			// Asked on a goroutine of its own, which must not fail the
			// test (testproc.DoAPI would): its answer is looked at below.
			type answer struct {
				status int
				body   string
				err    error
			}
			grown := make(chan answer, 1)
			go func() {
				req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/cluster/groups/grow", c.up["m1"].HTTPAddr()),
					strings.NewReader(`{"to": 4}`))
				if err != nil {
					grown <- answer{err: err}
					return
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+testToken)
				resp, err := (&http.Client{Timeout: 2 * growTimeout}).Do(req)
				if err != nil {
					grown <- answer{err: err}
					return
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				grown <- answer{resp.StatusCode, string(body), err}
			}()
			testproc.WaitFor(t, 30*time.Second, "group 2's replicas running on every member", func() bool {
				for _, m := range c.up {
					if m.shards.node(2) == nil {
						return false
					}
				}
				return true
			})
			for _, name := range failing {
				if _, ok := failed.Load(name); !ok {
					t.Fatalf("%s's start of group 2 never failed: the test's hook missed", name)
				}
			}
			select {
			case rep := <-grown:
				if rep.err != nil || rep.status != http.StatusOK {
					t.Fatalf("growth: %d %s %v", rep.status, rep.body, rep.err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the growth did not end")
			}
		})
	}
}

// TestPlaceGrown: a growth's new groups go on the members up holding the
// fewest replicas, then on members down, draining ones last of all; a
// member added and not started yet (down, holding none) no longer goes
// into every new group. A group that would have no majority of its
// replicas up is refused: it could elect no leader.
func TestPlaceGrown(t *testing.T) {
	formed := func(m int) *meta.State {
		var members []meta.Member
		for i := range m {
			members = append(members, meta.Member{Name: fmt.Sprintf("m%d", i+1)})
		}
		s, err := meta.Formation(members, 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	downAre := func(names ...string) func(string) bool {
		return func(name string) bool { return !slices.Contains(names, name) }
	}
	for _, c := range []struct {
		name    string
		members int
		joined  []string // added to the book, holding none
		down    []string
		drain   string
		never   []string // in no new group
		refused bool
	}{
		{"every member up", 3, nil, nil, "", nil, false},
		{"two joined, not started", 3, []string{"m4", "m5"}, []string{"m4", "m5"}, "", []string{"m4", "m5"}, false},
		{"one down of five", 5, nil, []string{"m2"}, "", []string{"m2"}, false},
		{"draining, last", 4, nil, nil, "m4", []string{"m4"}, false},
		{"two down of four: each group on both up and one down", 4, nil, []string{"m3", "m4"}, "", nil, false},
		{"two down of three", 3, nil, []string{"m2", "m3"}, "", nil, true},
	} {
		s := formed(c.members)
		for _, name := range c.joined {
			s.Members = append(s.Members, meta.Member{Name: name})
		}
		if c.drain != "" {
			for i := range s.Members {
				if s.Members[i].Name == c.drain {
					s.Members[i].Draining = true
				}
			}
		}
		up := downAre(c.down...)
		grown, err := placeGrown(s, map[string]int{}, up, 2, 4)
		if c.refused {
			if !errors.Is(err, errGrowthUnplaced) {
				t.Errorf("%s: %v %+v, want refused", c.name, err, grown)
			}
			continue
		}
		if err != nil || len(grown) != 2 {
			t.Errorf("%s: %v %+v, want two groups", c.name, err, grown)
			continue
		}
		for _, g := range grown {
			ups := 0
			for _, r := range g.Replicas {
				if up(r) {
					ups++
				}
			}
			if len(g.Replicas) != 3 || ups < min(3, c.members+len(c.joined)-len(c.down)) ||
				slices.ContainsFunc(g.Replicas, func(r string) bool { return slices.Contains(c.never, r) }) {
				t.Errorf("%s: group %d on %v (%d up), want three, as many up as there are, none of %v", c.name, g.ID, g.Replicas, ups, c.never)
			}
		}
	}
}

// TestShardGroupsGrowPlacesOnMembersUp: group 0's leader places a
// growth's groups on the members it is connected to: a member stopped,
// holding the fewest replicas, is in none of them (it was in each).
func TestShardGroupsGrowPlacesOnMembersUp(t *testing.T) {
	c := newClusterOf(t, 4, 2, 3)
	c.finalized()
	driver := c.leaderOf(0)
	var down string
	for _, name := range slices.Sorted(maps.Keys(c.up)) {
		if c.up[name] != driver && !driver.shards.placement.Groups[1].Holds(name) {
			down = name
		}
	}
	if down == "" {
		t.Fatal("group 0's leader is the only member holding no replica of group 1")
	}
	c.stop(down)
	testproc.WaitFor(t, 10*time.Second, down+" seen down by group 0's leader", func() bool {
		for _, mb := range driver.node.Status().Members {
			if mb.Name == down {
				return !mb.Connected
			}
		}
		return false
	})
	grown, err := driver.newGroups(2, 4)
	if err != nil {
		t.Fatalf("placing groups 2 and 3 with %s down: %v", down, err)
	}
	for _, g := range grown {
		if slices.Contains(g.Replicas, down) {
			t.Errorf("group %d placed on %v, with %s down", g.ID, g.Replicas, down)
		}
	}
}
