package member

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// placeThrough asks member via's side port to place prefix in group g.
func placeThrough(t *testing.T, via *Member, prefix string, g int) (int, prefixPlaceResult, string) {
	t.Helper()
	return postGroup[prefixPlaceResult](t, via, "/cluster/placements/"+prefix, g)
}

// TestShardGroupsPlacePrefix: a prefix placed in a group takes there the
// tubes starting with it from every other group, live, while a client
// pipelines puts into one of them through another member: their jobs keep
// their ids, a reserved one stays its holder's, every acknowledged put is
// there once, and a tube made later with the prefix is made in the group.
// A tube moved by name keeps its group. Placed again elsewhere, the
// prefix's tubes move again; the refusals.
func TestShardGroupsPlacePrefix(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tubes := tubePerGroup(p, "img-") // tubes[g] hashes to group g
	other := tubePerGroup(p, "doc-")[1]
	// tubes[0] is moved by name to group 1: the prefix does not take it.
	if status, _, body := moveTubeThrough(t, c.up["m1"], tubes[0], 1); status != http.StatusOK {
		t.Fatalf("move of %s: %d %s", tubes[0], status, body)
	}
	setup := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	ids := map[string][]uint64{}
	for _, tube := range append(slices.Clone(tubes), other) {
		expectLine(t, setup, "use "+tube, "USING "+tube)
		for i := range 3 {
			id, err := setup.Put(uint32(i), 0, 60, fmt.Appendf(nil, "%s-%d", tube, i))
			if err != nil {
				t.Fatal(err)
			}
			ids[tube] = append(ids[tube], id)
		}
	}
	expectLine(t, setup, "watch "+tubes[1], "WATCHING 2")
	expectLine(t, setup, "ignore default", "WATCHING 1")
	held := ids[tubes[1]][0]
	if r, err := setup.Do("reserve-with-timeout 5", nil); err != nil || r.N != held {
		t.Fatalf("reserve: %+v %v, want %d", r, err, held)
	}

	puts := startPipeliner(t, c.up["m2"], tubes[1], 3)
	time.Sleep(200 * time.Millisecond)
	status, res, body := placeThrough(t, c.up["m3"], "img-", 2)
	if status != http.StatusOK || res.Group != 2 || !slices.Equal(res.Tubes, []string{tubes[1]}) {
		t.Fatalf("placement of img- in group 2: %d %s", status, body)
	}
	t.Logf("placed %+v", res)
	routes := func(want map[string]uint16) {
		t.Helper()
		for _, m := range c.up {
			testproc.WaitFor(t, 5*time.Second, m.node.Name()+" routing by the placement", func() bool {
				for tube, g := range want {
					if m.shards.routing.Load().state.Owner(tube) != g {
						return false
					}
				}
				return true
			})
		}
	}
	routes(map[string]uint16{tubes[0]: 1, tubes[1]: 2, tubes[2]: 2, "img-new": 2, other: 1})
	var st struct {
		Prefixes map[string]int `json:"prefixes"`
	}
	if err := json.Unmarshal(api(t, c.up["m1"], "/cluster").Body, &st); err != nil || st.Prefixes["img-"] != 2 {
		t.Fatalf("GET /cluster prefixes: %v (%v)", st.Prefixes, err)
	}
	// The held job moved with its holder's reservation.
	if st, err := setup.Stats(fmt.Sprintf("stats-job %d", held)); err != nil || st["state"] != "reserved" {
		t.Fatalf("the held job after the placement: %v %v", st, err)
	}
	expectLine(t, setup, fmt.Sprintf("delete %d", held), "DELETED")
	// A tube made now with the prefix is made in group 2.
	expectLine(t, setup, "use img-new", "USING img-new")
	if id, err := setup.Put(0, 0, 60, []byte("new")); err != nil || id>>meta.SeqBits != 2 {
		t.Fatalf("a put into a new tube of the prefix: id %d (%v), want one of group 2", id, err)
	}
	time.Sleep(200 * time.Millisecond)

	// Placed again in group 0: its tubes of group 2 move there, the one
	// moved by name stays.
	status, res, body = placeThrough(t, c.up["m2"], "img-", 0)
	if status != http.StatusOK || !slices.Equal(res.Tubes, slices.Sorted(slices.Values([]string{"img-new", tubes[1], tubes[2]}))) {
		t.Fatalf("placement of img- in group 0: %d %s", status, body)
	}
	routes(map[string]uint16{tubes[0]: 1, tubes[1]: 0, tubes[2]: 0, "img-new": 0, other: 1})
	time.Sleep(200 * time.Millisecond)
	acked := puts.stopped()

	// Every job is where its tube lives, with its id; every acknowledged
	// put is there once.
	for tube, tubeIDs := range ids {
		for _, id := range tubeIDs {
			if id == held {
				continue
			}
			st, err := setup.Stats(fmt.Sprintf("stats-job %d", id))
			if err != nil || st["tube"] != tube {
				t.Fatalf("stats-job %d of %s: %v %v", id, tube, st, err)
			}
		}
	}
	expectPeekable(t, setup, acked)
	stats, err := setup.Stats("stats-tube " + tubes[1])
	if want := fmt.Sprint(len(acked) + 2); err != nil || stats["current-jobs-ready"] != want {
		t.Fatalf("stats-tube %s: %v %v, want %s ready", tubes[1], stats, err, want)
	}
	list, err := setup.Do("list-tubes", nil)
	if err != nil || countLines(string(list.Body), "- "+tubes[1]) != 1 || countLines(string(list.Body), "- img-new") != 1 {
		t.Fatalf("list-tubes: %q %v", list.Body, err)
	}
	t.Logf("%d puts acknowledged", len(acked))
	c.settledAll()

	// The refusals.
	if status, _, body := placeThrough(t, c.up["m1"], "img-", 0); status != http.StatusConflict {
		t.Errorf("a placement where the prefix is: %d %s", status, body)
	}
	if status, _, body := placeThrough(t, c.up["m1"], "img-", 7); status != http.StatusNotFound {
		t.Errorf("a placement in no group: %d %s", status, body)
	}
	// Not a tube's name's prefix: "#3" is the key of grown group 3's slots.
	if status, _, body := placeThrough(t, c.up["m1"], "%233", 0); status != http.StatusBadRequest {
		t.Errorf("a placement of %q: %d %s", "#3", status, body)
	}

	// Undone: its tubes go back to their names' groups; the one moved by
	// name stays.
	unset := func() testproc.APIReply {
		return testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodDelete,
			URL:    fmt.Sprintf("http://%s/cluster/placements/img-", c.up["m3"].HTTPAddr()),
			Bearer: testToken, Timeout: 2 * tubeMoveTimeout})
	}
	if rep := unset(); rep.Status != http.StatusOK {
		t.Fatalf("undoing the placement: %d %s", rep.Status, rep.Body)
	} else {
		t.Logf("undone: %s", rep.Body)
	}
	routes(map[string]uint16{tubes[0]: 1, tubes[1]: 1, tubes[2]: 2, "img-new": p.Owner("img-new"), other: 1})
	for tube, tubeIDs := range ids {
		for _, id := range tubeIDs {
			if st, err := setup.Stats(fmt.Sprintf("stats-job %d", id)); id != held && (err != nil || st["tube"] != tube) {
				t.Fatalf("stats-job %d of %s after the undoing: %v %v", id, tube, st, err)
			}
		}
	}
	if stats, err := setup.Stats("stats-tube " + tubes[1]); err != nil || stats["current-jobs-ready"] != fmt.Sprint(len(acked)+2) {
		t.Fatalf("stats-tube %s after the undoing: %v %v", tubes[1], stats, err)
	}
	expectLine(t, setup, "use "+tubes[2], "USING "+tubes[2])
	if id, err := setup.Put(0, 0, 60, []byte("back")); err != nil || id>>meta.SeqBits != 2 {
		t.Fatalf("a put after the undoing: id %d (%v), want one of group 2", id, err)
	}
	if rep := unset(); rep.Status != http.StatusConflict {
		t.Errorf("undoing a placement that is not: %d %s", rep.Status, rep.Body)
	}
}

// TestShardGroupsPlacePrefixResolved: a placement whose driver is lost
// after a group froze the prefix (here: records proposed with no
// placement driving them) is aborted by group 0's leader and thawed in
// the group: a put sent while the tube was frozen is answered once it
// has, in the tube's own group.
func TestShardGroupsPlacePrefixResolved(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tube := tubePerGroup(p, "lost-")[1]
	const move = 0x5eed
	c.formationRecorded()
	if err := c.leaderOf(0).node.ProposePrefix(t.Context(), replication.PrefixPending, "lost-", move, 2, nil); err != nil {
		t.Fatal(err)
	}
	n := c.leaderOf(1).shards.node(1)
	if err := n.ProposePrefix(t.Context(), replication.PrefixFreeze, "lost-", move, 2, nil); err != nil {
		t.Fatal(err)
	}
	client := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, client, "use "+tube, "USING "+tube)
	begun := time.Now()
	id, err := client.Put(0, 0, 60, []byte("waited"))
	if err != nil || id>>meta.SeqBits != 1 {
		t.Fatalf("a put while the prefix was frozen: id %d, %v", id, err)
	}
	t.Logf("the put waited %v", time.Since(begun))
	testproc.WaitFor(t, 5*time.Second, "the freeze thawed", func() bool { return len(n.Tubes().FrozenPrefixes) == 0 })
	if placed, ok := c.up["m3"].node.Tubes().Decided[move]; !ok || placed {
		t.Fatalf("the lost placement's outcome in group 0: decided %v, placed %v", ok, placed)
	}
	if _, _, pending := c.up["m3"].node.Tubes().Pending(); pending {
		t.Fatal("the lost placement is still pending")
	}
	if owner := c.up["m3"].shards.routing.Load().state.Owner(tube); owner != 1 {
		t.Fatalf("the tube routes to group %d", owner)
	}
}

// TestShardGroupsPlacePrefixLeaderLost: a source group's leadership,
// handed away as the group begins its finish step of a placement, does
// not fail the placement: its driver calls the group's next leader, which
// finishes it (the tube's copy dropped, the prefix recorded moved out),
// and every job is in the destination with its id.
func TestShardGroupsPlacePrefixLeaderLost(t *testing.T) {
	c, tube, conn := usingTubeOfGroup1(t, "lost-")
	from, to := uint16(1), uint16(2)
	var ids []uint64
	for i := range 20 {
		id, err := conn.Put(uint32(i%3), 0, 60, fmt.Appendf(nil, "job-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	first := c.leaderOf(from)
	handOver, handed := c.handAwayOnce(first, from)
	hook := func(g uint16, step string) {
		if step == "finish" {
			handOver(g)
		}
	}
	for _, m := range c.up {
		m.beforePrefixStep.Store(&hook)
	}
	status, res, body := placeThrough(t, c.up["m3"], "lost-", int(to))
	if status != http.StatusOK || !slices.Equal(res.Tubes, []string{tube}) {
		t.Fatalf("placement of lost- in group %d: %d %s", to, status, body)
	}
	next := c.leaderOf(from)
	if !handed.Load() || next == first {
		t.Fatalf("group %d's leadership was not handed over under the placement (its leader %s)", from, next.node.Name())
	}
	called := false
	for _, out := range c.outs {
		called = called || strings.Contains(out.String(), "calling its next")
	}
	if !called {
		t.Fatal("the placement's driver did not call the group's next leader")
	}
	testproc.WaitFor(t, 5*time.Second, "the prefix recorded moved out of group 1", func() bool {
		f, ok := next.shards.node(from).Tubes().FrozenPrefixes["lost-"]
		return ok && f.Moved
	})
	for _, id := range ids {
		st, err := conn.Stats(fmt.Sprintf("stats-job %d", id))
		if err != nil || st["tube"] != tube || st["state"] != "ready" {
			t.Fatalf("stats-job %d after the placement: %v %v", id, st, err)
		}
	}
	if st, err := conn.Stats("stats-tube " + tube); err != nil || st["current-jobs-ready"] != strconv.Itoa(len(ids)) {
		t.Fatalf("stats-tube %s: %v %v", tube, st, err)
	}
}

// TestShardGroupsPlacePrefixAbortedForgets: a prefix placement aborted
// after its destination took a tube's copies drops them and ends the
// adopt with them (TubeBook.Adopted). Before, the note stayed, and the destination's
// leader counted every tube routed elsewhere as moving for as long as it
// ran (Member.frozen): the commands by id of those that reached it
// waited, then failed.
func TestShardGroupsPlacePrefixAbortedForgets(t *testing.T) {
	c, tube, conn := usingTubeOfGroup1(t, "gate-")
	id, err := conn.Put(0, 0, 60, []byte("stays"))
	if err != nil {
		t.Fatal(err)
	}
	const to = 2
	hook := func(g uint16, step string) {
		if g != 0 || step != "take" {
			return
		}
		// Group 1 hands its tube to group 2 meanwhile; once group 2
		// holds the copies, group 0 decides the placement aborted.
		for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(5 * time.Millisecond) {
			if l := c.leaderOf(to); l != nil && len(l.shards.node(to).Tubes().Adopted) > 0 {
				break
			}
		}
		g0 := c.leaderOf(0)
		prefix, pl, ok := g0.node.Tubes().Pending()
		if !ok {
			t.Error("no placement pending as group 0 takes")
			return
		}
		if err := g0.node.ProposePrefix(t.Context(), replication.PrefixAbort, prefix, pl.Move, to, nil); err != nil {
			t.Errorf("aborting the placement: %v", err)
		}
	}
	for _, m := range c.up {
		m.beforePrefixStep.Store(&hook)
	}
	if status, _, body := placeThrough(t, c.up["m3"], "gate-", to); status == http.StatusOK {
		t.Fatalf("the placement aborted under it answered %d %s", status, body)
	}
	dest := c.leaderOf(to)
	testproc.WaitFor(t, 5*time.Second, "group 2 holding no adopt", func() bool {
		return len(dest.shards.node(to).Tubes().Adopted) == 0 && !dest.adopting(dest.shards.node(to))
	})
	if ts, ok := dest.shards.node(to).Store().TubeStats([]byte(tube)); ok && ts.Ready+ts.Reserved+ts.Delayed+ts.Buried > 0 {
		t.Fatalf("group 2 still holds copies of %s: %+v", tube, ts)
	}
	if st, err := conn.Stats(fmt.Sprintf("stats-job %d", id)); err != nil || st["tube"] != tube {
		t.Fatalf("stats-job %d after the abort: %v %v", id, st, err)
	}
}

// TestShardGroupsPlacePrefixSlowCopy: a placement's copies have their
// own bound, as a move's do, not a step's: with the steps bounded at 2 s,
// copies that take over 3 s (the destination's first import of one
// slowed) still place their tubes. With the take bounded as a step at
// the driver, or the copies at their source, the placement is aborted.
func TestShardGroupsPlacePrefixSlowCopy(t *testing.T) {
	c, tubes, client := formedWithTubes(t, "slow-")
	ids := putEach(t, client, tubes[:2], 2)
	expectLine(t, client, "use default", "USING default")
	var slowed atomic.Int32
	hook := func(g uint16) {
		if g == 2 && slowed.Add(1) == 1 {
			time.Sleep(3 * time.Second)
		}
	}
	for _, m := range c.up {
		m.stepTimeoutOverride.Store(int64(2 * time.Second))
		m.stageChunkBytes.Store(1) // a part a job: the copies go on after the slow one
		m.afterImport.Store(&hook)
	}
	status, res, body := placeThrough(t, c.up["m1"], "slow-", 2)
	for _, m := range c.up {
		m.afterImport.Store(nil)
		m.stepTimeoutOverride.Store(0)
	}
	if status != http.StatusOK || slowed.Load() == 0 {
		t.Fatalf("placement of slow- in group 2, its copies slowed %d times: %d %s", slowed.Load(), status, body)
	}
	t.Logf("placed %+v", res)
	for _, tube := range tubes[:2] {
		for _, id := range ids[tube] {
			if st, err := client.Stats(fmt.Sprintf("stats-job %d", id)); err != nil || st["tube"] != tube {
				t.Fatalf("stats-job %d after the placement: %v %v", id, st, err)
			}
		}
	}
	if !slices.Contains(res.Tubes, tubes[0]) || !slices.Contains(res.Tubes, tubes[1]) {
		t.Fatalf("the placement took %v, want %v among them", res.Tubes, tubes[:2])
	}
	c.settledAll()
}

// TestShardGroupsPlacePrefixStaged: a placement copies each tube it
// takes to the new group while it serves, a part a job here, then hands
// over what changed at its freeze: a job deleted in between is not
// there, one put in between is; and a tube whose jobs all went in
// between (freed at its source) leaves no copy behind, where the
// placement would have made its copies its jobs.
func TestShardGroupsPlacePrefixStaged(t *testing.T) {
	c, tubes, client := formedWithTubes(t, "stg-") // tubes[g] hashes to group g
	ids := putEach(t, client, tubes[:2], 3)
	expectLine(t, client, "use default", "USING default") // the tubes go with their last jobs
	// The hook runs in each source group's take step, maybe at once: it
	// reports, it does not stop the test.
	var mu sync.Mutex
	done := map[string]bool{}
	var fresh uint64
	hook := func() {
		mu.Lock()
		defer mu.Unlock()
		dst := c.leaderOf(2).shards.node(2)
		for _, tube := range tubes[:2] {
			if done[tube] || !isStaged(dst, tube) {
				continue
			}
			done[tube] = true
			gone := ids[tube][:1]
			if tube == tubes[0] {
				gone = ids[tube]
			}
			for _, id := range gone {
				if err := client.ExpectLine(fmt.Sprintf("delete %d", id), "DELETED"); err != nil {
					t.Error(err)
				}
			}
			if tube == tubes[1] {
				var err error
				if err = client.ExpectLine("use "+tube, "USING "+tube); err == nil {
					fresh, err = client.Put(0, 0, 60, []byte("fresh"))
				}
				if err == nil {
					err = client.ExpectLine("use default", "USING default")
				}
				if err != nil {
					t.Error(err)
				}
			}
		}
	}
	for _, m := range c.up {
		m.afterStage.Store(&hook)
		m.stageChunkBytes.Store(1)
	}
	status, res, body := placeThrough(t, c.up["m1"], "stg-", 2)
	for _, m := range c.up {
		m.afterStage.Store(nil)
	}
	if status != http.StatusOK {
		t.Fatalf("placement of stg- in group 2: %d %s", status, body)
	}
	t.Logf("placed %+v", res)
	if !done[tubes[0]] || !done[tubes[1]] {
		t.Fatalf("the tubes staged in group 2 before their freeze: %v (placed %+v)", done, res)
	}
	for _, id := range ids[tubes[0]] {
		expectLine(t, client, fmt.Sprintf("peek %d", id), "NOT_FOUND")
	}
	expectLine(t, client, fmt.Sprintf("peek %d", ids[tubes[1]][0]), "NOT_FOUND")
	for _, id := range append(slices.Clone(ids[tubes[1]][1:]), fresh) {
		if st, err := client.Stats(fmt.Sprintf("stats-job %d", id)); err != nil || st["tube"] != tubes[1] || st["state"] != "ready" {
			t.Fatalf("stats-job %d after the placement: %v %v", id, st, err)
		}
	}
	testproc.WaitFor(t, 10*time.Second, "group 2's book and store", func() bool {
		n := c.leaderOf(2).shards.node(2)
		b := n.Tubes()
		return len(b.Staged) == 0 && len(b.Adopted) == 0 && tubeJobs(n, tubes[0]) == 0 && tubeJobs(n, tubes[1]) == 3
	})
	if parts := strings.Count(c.outs[c.leaderOf(2).node.Name()].String(), fmt.Sprintf(`"what":%d`, adoptStageMore)); parts < 4 {
		t.Fatalf("the new group's leader took %d parts of copies after their first, want 4 (a job each)", parts)
	}
	c.settledAll()
}
