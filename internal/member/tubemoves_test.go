package member

import (
	"context"
	"encoding/json"
	"errors"
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

// moveTubeThrough asks member via's side port to move tube to group g.
func moveTubeThrough(t *testing.T, via *Member, tube string, g int) (int, tubeMoveResult, string) {
	t.Helper()
	return postGroup[tubeMoveResult](t, via, "/cluster/tubes/"+tube+"/move", g)
}

// postGroup posts {"group": g} to path on member via's side port, and
// reads its answer into a T when it is 200.
func postGroup[T any](t *testing.T, via *Member, path string, g int) (int, T, string) {
	t.Helper()
	rep := testproc.DoAPI(t, testproc.APIRequest{Method: http.MethodPost,
		URL:    fmt.Sprintf("http://%s%s", via.HTTPAddr(), path),
		Body:   map[string]int{"group": g},
		Bearer: testToken, Timeout: 2 * tubeMoveTimeout})
	var out T
	if rep.Status == http.StatusOK {
		if err := json.Unmarshal(rep.Body, &out); err != nil {
			t.Fatalf("the answer of %s: %s: %v", path, rep.Body, err)
		}
	}
	return rep.Status, out, string(rep.Body)
}

// TestShardGroupsMoveTube: a tube moves live from one group to another
// and back, asked through a member, while a client pipelines puts into it
// through another and a worker reserves and deletes its jobs through a
// third. Its ready, delayed and buried jobs keep their ids, states,
// priorities and burial order; a job reserved when the move begins stays
// its holder's, who deletes it in the new group; every put acknowledged
// is there once, or was deleted; a command by id finds a moved job; new
// puts take the new group's ids; and list-tubes and stats-tube answer as
// one server's. The move back is asked of the admin API's path
// (/api/v1/tubes/{name}/move) on a member that does not lead the tube's
// group.
func TestShardGroupsMoveTube(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tube := tubePerGroup(p, "moving")[1]
	from, to := 1, 2
	setup := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	expectLine(t, setup, "use "+tube, "USING "+tube)
	var buried []uint64
	for i := range 3 {
		id, err := setup.Put(10, 0, 60, fmt.Appendf(nil, "buried-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		buried = append(buried, id)
	}
	expectLine(t, setup, "watch "+tube, "WATCHING 2")
	expectLine(t, setup, "ignore default", "WATCHING 1")
	for _, id := range buried {
		r, err := setup.Do("reserve-with-timeout 5", nil)
		if err != nil || r.N != id {
			t.Fatalf("reserve: %+v %v, want %d", r, err, id)
		}
		expectLine(t, setup, fmt.Sprintf("bury %d 10", id), "BURIED")
	}
	delayed, err := setup.Put(5, 100, 60, []byte("delayed"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := setup.Put(0, 0, 60, []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := setup.Do("reserve-with-timeout 5", nil); err != nil || r.N != held {
		t.Fatalf("reserve of the held job: %+v %v", r, err)
	}

	// Traffic through the others while the tube moves.
	puts := startPipeliner(t, c.up["m2"], tube, 5)
	var mu sync.Mutex
	var deleted []uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		worker := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
		expectLine(t, worker, "watch "+tube, "WATCHING 2")
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := worker.Do("reserve-with-timeout 1", nil)
			if err != nil {
				t.Errorf("reserve: %v", err)
				return
			}
			if r.Kind != testproc.ReplyReserved {
				continue
			}
			if err := worker.ExpectLine(fmt.Sprintf("delete %d", r.N), "DELETED"); err != nil {
				t.Errorf("delete: %v", err)
				return
			}
			mu.Lock()
			deleted = append(deleted, r.N)
			mu.Unlock()
		}
	})
	time.Sleep(200 * time.Millisecond)
	status, res, body := moveTubeThrough(t, c.up["m3"], tube, to)
	if status != http.StatusOK || res.From != uint16(from) || res.To != uint16(to) {
		t.Fatalf("move of %s to group %d: %d %s", tube, to, status, body)
	}
	t.Logf("moved %+v", res)
	// The reservation moved with its job: its holder still holds it, in
	// the new group, and deletes it there.
	if st, err := setup.Stats(fmt.Sprintf("stats-job %d", held)); err != nil || st["state"] != "reserved" || st["reserves"] != "1" {
		t.Fatalf("the held job after the move: %v %v", st, err)
	}
	expectLine(t, setup, fmt.Sprintf("delete %d", held), "DELETED")
	time.Sleep(300 * time.Millisecond)
	for _, m := range c.up {
		if owner := m.shards.routing.Load().state.Owner(tube); owner != uint16(to) {
			t.Fatalf("%s routes %s to group %d", m.node.Name(), tube, owner)
		}
		var st struct {
			Placed map[string]int `json:"placed"`
		}
		if err := json.Unmarshal(api(t, m, "/cluster").Body, &st); err != nil || st.Placed[tube] != to {
			t.Fatalf("%s's GET /cluster placed: %v (%v), want %s in group %d", m.node.Name(), st.Placed, err, tube, to)
		}
	}
	// New puts take the new group's ids; the moved jobs keep theirs.
	id, err := setup.Put(100, 0, 60, []byte("after"))
	if err != nil || id>>meta.SeqBits != uint64(to) {
		t.Fatalf("a put after the move: id %d (%v), want one of group %d", id, err, to)
	}
	checkMoved := func() {
		t.Helper()
		for i, want := range buried {
			r, err := setup.Do("peek-buried", nil)
			if i == 0 && (err != nil || r.N != want) {
				t.Fatalf("peek-buried: %+v %v, want %d", r, err, want)
			}
			st, err := setup.Stats(fmt.Sprintf("stats-job %d", want))
			if err != nil || st["state"] != "buried" || st["pri"] != "10" || st["tube"] != tube {
				t.Fatalf("stats-job %d: %v %v", want, st, err)
			}
		}
		st, err := setup.Stats(fmt.Sprintf("stats-job %d", delayed))
		if err != nil || st["state"] != "delayed" || st["pri"] != "5" {
			t.Fatalf("stats-job %d (delayed): %v %v", delayed, st, err)
		}
		if r, err := setup.Do(fmt.Sprintf("peek %d", held), nil); err != nil || r.Kind != testproc.ReplyNotFound {
			t.Fatalf("the held job, deleted by its worker: %+v %v", r, err)
		}
		// The admin API finds a moved job too, through any member.
		for _, m := range c.up {
			if rep := api(t, m, fmt.Sprintf("/api/v1/jobs/%d", delayed)); rep.Status != http.StatusOK {
				t.Fatalf("GET /api/v1/jobs/%d through %s: %d %s", delayed, m.node.Name(), rep.Status, rep.Body)
			}
		}
	}
	checkMoved()

	// And back, asked of the admin API's path on a member that does not
	// lead the tube's group now: it forwards the move to the one that does.
	via := c.up["m1"]
	if lead := c.leaderOf(uint16(to)); lead == via {
		via = c.up["m2"]
	}
	status, res, body = postGroup[tubeMoveResult](t, via, "/api/v1/tubes/"+tube+"/move", from)
	if status != http.StatusOK || res.To != uint16(from) {
		t.Fatalf("move of %s back to group %d: %d %s", tube, from, status, body)
	}
	t.Logf("moved back %+v", res)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	acked := puts.stopped()
	checkMoved()

	// Every acknowledged put is there once, or was deleted by the worker.
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 || len(deleted) == 0 {
		t.Fatalf("%d puts acknowledged, %d deleted: no traffic", len(acked), len(deleted))
	}
	gone := map[uint64]int{}
	for _, id := range deleted {
		gone[id]++
		if gone[id] > 1 {
			t.Fatalf("job %d deleted twice", id)
		}
	}
	for _, id := range acked {
		if gone[id] > 0 {
			continue
		}
		r, err := setup.Do(fmt.Sprintf("peek %d", id), nil)
		if err != nil || r.Kind != testproc.ReplyFound {
			t.Fatalf("acknowledged job %d: %+v %v", id, r, err)
		}
	}
	tubes, err := setup.Do("list-tubes", nil)
	if err != nil || countLines(string(tubes.Body), "- "+tube) != 1 {
		t.Fatalf("list-tubes: %q %v", tubes.Body, err)
	}
	st, err := setup.Stats("stats-tube " + tube)
	if err != nil || st["current-jobs-buried"] != "3" || st["current-jobs-delayed"] != "1" {
		t.Fatalf("stats-tube %s: %v %v", tube, st, err)
	}
	// A moved job counts in total-jobs where it was put, not again where
	// it moved (wal.ImportKey): summed over the groups, the puts made
	// (buried, delayed, held, after, and the pipeliner's).
	putsMade := len(buried) + 3 + len(acked)
	if st, err := setup.Stats("stats"); err != nil || st["total-jobs"] != strconv.Itoa(putsMade) {
		t.Fatalf("stats total-jobs after two moves: %q (%v), want the %d puts", st["total-jobs"], err, putsMade)
	}
	// Both moves placed, no group holds an adopt open (TubeBook.Adopted),
	// which would hold back its commands of tubes routed elsewhere.
	testproc.WaitFor(t, 5*time.Second, "every adopt ended", func() bool {
		for _, g := range []uint16{uint16(from), uint16(to)} {
			if l := c.leaderOf(g); len(l.shards.node(g).Tubes().Adopted) > 0 || l.adopting(l.shards.node(g)) {
				return false
			}
		}
		return true
	})
	c.settledAll()
	t.Logf("%d puts acknowledged, %d deleted", len(acked), len(deleted))
}

// settledAll waits until group 0 has every decided move settled: each
// group that took part in it is past it (TubeBook.Unsettled).
func (c *testCluster) settledAll() {
	c.t.Helper()
	if c.leaderOf(0).node.Tubes().Formed.Groups == 0 {
		c.t.Fatal("the cluster's formation is not recorded: no move's groups are known")
	}
	testproc.WaitFor(c.t, 30*time.Second, "every move settled", func() bool {
		return len(c.leaderOf(0).node.Tubes().Unsettled) == 0
	})
}

// formationRecorded waits until group 0's leader has recorded the
// formation, which a prefix's placement waits for (Node.ProposePrefix).
func (c *testCluster) formationRecorded() {
	c.t.Helper()
	testproc.WaitFor(c.t, 10*time.Second, "the formation recorded", func() bool {
		return c.leaderOf(0).node.Tubes().Formed.Groups != 0
	})
}

// TestShardGroupsMoveTubeStaleRoute: a member whose routing has not yet
// heard of a tube's move (it learns of it from group 0's log, which may
// lag the group that dropped the tube's jobs) still finds a moved job by
// its id: the group it asks first answers NOT_FOUND naming where its
// tubes went, and the member asks there. A job that is nowhere is still
// NOT_FOUND.
func TestShardGroupsMoveTubeStaleRoute(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	tubes := tubePerGroup(c.up["m1"].shards.placement, "stale")
	tube := tubes[1]
	stale := c.up["m2"]
	conn := testproc.DialTest(t, stale.Addr().String(), replyTimeout)
	// Answered by group 2's leader: m2 has greeted it (its calls wait for
	// that). A greeting that came after the move's import would close the
	// holder's owner client made there (docs/design/shards.md §10 item
	// 13, "a late greeting"), as under load here it did.
	expectLine(t, conn, "stats-tube "+tubes[2], "NOT_FOUND")
	expectLine(t, conn, "use "+tube, "USING "+tube)
	expectLine(t, conn, "watch "+tube, "WATCHING 2")
	held, err := conn.Put(0, 0, 60, []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	ready, err := conn.Put(5, 0, 60, []byte("ready"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := conn.Do("reserve-with-timeout 5", nil); err != nil || r.N != held {
		t.Fatalf("reserve: %+v %v, want %d", r, err, held)
	}
	expectLine(t, conn, fmt.Sprintf("delete %d", ready), "DELETED") // nowhere now
	before := stale.shards.routing.Load()
	if status, res, body := moveTubeThrough(t, c.up["m1"], tube, 2); status != http.StatusOK || res.To != 2 {
		t.Fatalf("move of %s to group 2: %d %s", tube, status, body)
	}
	// Once both groups have settled the move in m2's replica of group 0
	// (MovesSettled, which comes after the placement), nothing more of it
	// changes m2's routing.
	testproc.WaitFor(t, 30*time.Second, "m2's routing knows the move, settled", func() bool {
		return slices.Contains(stale.movedFrom(1), 2) && len(stale.node.Tubes().Unsettled) == 0
	})
	stale.shards.routing.Store(before) // as if m2 had not applied the placement yet
	if got := stale.movedFrom(1); len(got) != 0 {
		t.Fatalf("the stale routing knows of moves from group 1: %v", got)
	}
	if r, err := conn.Do(fmt.Sprintf("peek %d", ready), nil); err != nil || r.Kind != testproc.ReplyNotFound {
		t.Fatalf("peek of a job deleted before the move: %+v %v", r, err)
	}
	expectLine(t, conn, fmt.Sprintf("touch %d", held), "TOUCHED")
	expectLine(t, conn, fmt.Sprintf("delete %d", held), "DELETED")
	if stale.shards.routing.Load() != before {
		t.Fatal("m2's routing changed meanwhile: the test did not run on a stale one")
	}
}

// pipeliner puts into a tube through a member, pipelining depth puts at
// a time, until stopped, and notes the ids acknowledged; a put answered
// otherwise fails the test.
type pipeliner struct {
	stop  chan struct{}
	done  chan struct{}
	acked []uint64 // the goroutine's until done
}

func startPipeliner(t *testing.T, via *Member, tube string, depth int) *pipeliner {
	p := &pipeliner{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		conn := testproc.DialTest(t, via.Addr().String(), replyTimeout)
		if err := conn.ExpectLine("use "+tube, "USING "+tube); err != nil {
			t.Errorf("use: %v", err)
			return
		}
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			var lines []string
			for k := range depth {
				lines = append(lines, fmt.Sprintf("put 100 0 60 4\r\nj%03d", (i*depth+k)%1000))
			}
			replies, err := conn.Pipeline(lines)
			if err != nil {
				t.Errorf("puts: %v", err)
				return
			}
			for _, r := range replies {
				if r.Kind != testproc.ReplyInserted {
					t.Errorf("a put answered %q", r.Line)
				} else {
					p.acked = append(p.acked, r.N)
				}
			}
		}
	}()
	return p
}

// leaveLostMoves has every member's balancer leave the tube moves whose
// driver was lost as they are (Member.keepLostMoves): a test makes their
// steps by hand, or a move it left undriven stays frozen.
func (c *testCluster) leaveLostMoves() {
	for _, m := range c.up {
		m.keepLostMoves.Store(true)
	}
}

// leaderOf is the member that serves group g, once one does.
func (c *testCluster) leaderOf(g uint16) *Member {
	c.t.Helper()
	var leader *Member
	testproc.WaitFor(c.t, 20*time.Second, fmt.Sprintf("group %d led", g), func() bool {
		for _, m := range c.up {
			if m.shards.serving(g) != nil {
				leader = m
				return true
			}
		}
		return false
	})
	return leader
}

// expectPeekable fails t unless there are ids and conn finds each.
func expectPeekable(t *testing.T, conn *testproc.Conn, ids []uint64) {
	t.Helper()
	if len(ids) == 0 {
		t.Fatal("no put acknowledged")
	}
	for _, id := range ids {
		if r, err := conn.Do(fmt.Sprintf("peek %d", id), nil); err != nil || r.Kind != testproc.ReplyFound {
			t.Fatalf("acknowledged job %d: %+v %v", id, r, err)
		}
	}
}

// stopped stops the puts and returns the ids acknowledged.
func (p *pipeliner) stopped() []uint64 {
	close(p.stop)
	<-p.done
	return p.acked
}

// countLines counts the lines of s that are line.
func countLines(s, line string) int {
	n := 0
	for l := range strings.Lines(s) {
		if strings.TrimRight(l, "\r\n") == line {
			n++
		}
	}
	return n
}

// TestShardGroupsMoveTubeResolved: a move whose driver is lost after it
// froze the tube (here: a freeze proposed with no move driving it) is
// aborted by the group's leader: the tube thaws in its group, and a put
// sent while it was frozen is answered once it has.
func TestShardGroupsMoveTubeResolved(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tube := tubePerGroup(p, "stuck")[1]
	var leader *Member
	testproc.WaitFor(t, 20*time.Second, "group 1 led", func() bool {
		for _, m := range c.up {
			if m.shards.serving(1) != nil {
				leader = m
				return true
			}
		}
		return false
	})
	n := leader.shards.node(1)
	if err := n.ProposeTube(t.Context(), replication.TubeFreeze, tube, 0x5eed, 2, 0); err != nil {
		t.Fatal(err)
	}
	client := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, client, "use "+tube, "USING "+tube)
	begun := time.Now()
	id, err := client.Put(0, 0, 60, []byte("waited"))
	if err != nil || id>>meta.SeqBits != 1 {
		t.Fatalf("a put while the tube was frozen: id %d, %v", id, err)
	}
	t.Logf("the put waited %v", time.Since(begun))
	if f := n.Tubes().Frozen; len(f) != 0 {
		t.Fatalf("still frozen: %+v", f)
	}
	if placed, ok := c.up["m1"].node.Tubes().Decided[0x5eed]; !ok || placed {
		t.Fatalf("the lost move's outcome in group 0: decided %v, placed %v", ok, placed)
	}
	if owner := c.up["m3"].shards.routing.Load().state.Owner(tube); owner != 1 {
		t.Fatalf("the tube routes to group %d", owner)
	}
}

// TestShardGroupsAdminFrozenTube: while a move has frozen a tube in its
// group, the admin API's changes of it, asked through a member that does
// not lead the group, answer 503 and change nothing: the move's export
// would not carry them, and the group drops the tube once it is placed,
// so an acknowledged change would be lost. Once the move is undone they
// are made.
func TestShardGroupsAdminFrozenTube(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tube := tubePerGroup(p, "adminfrozen")[1]
	client := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, client, "use "+tube, "USING "+tube)
	ready, err := client.Put(0, 0, 60, []byte("ready"))
	if err != nil {
		t.Fatal(err)
	}
	delayed, err := client.Put(0, 100, 60, []byte("delayed"))
	if err != nil {
		t.Fatal(err)
	}
	// The move is left undriven: the balancer would abort it at its next
	// tick.
	c.leaveLostMoves()
	src := c.leaderOf(1)
	n := src.shards.node(1)
	if err := n.ProposeTube(t.Context(), replication.TubeFreeze, tube, 0xad, 2, 0); err != nil {
		t.Fatal(err)
	}
	src.sessions.Refreeze(1)
	via := c.up["m1"]
	if via == src {
		via = c.up["m3"]
	}
	do := func(method, path string, body any) testproc.APIReply {
		return testproc.DoAPI(t, testproc.APIRequest{Method: method, URL: "http://" + via.HTTPAddr().String() + path,
			Body: body, Bearer: testToken, Timeout: replyTimeout})
	}
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/api/v1/tubes/" + tube + "/jobs", map[string]any{"body": "lost?"}},
		{http.MethodPost, "/api/v1/tubes/" + tube + "/kick", map[string]any{"bound": 10}},
		{http.MethodPost, "/api/v1/tubes/" + tube + "/pause", map[string]any{"delay": 100}},
		{http.MethodPost, "/api/v1/tubes/" + tube + "/clear", map[string]any{"state": "all"}},
		{http.MethodDelete, fmt.Sprintf("/api/v1/jobs/%d", ready), nil},
		{http.MethodPost, fmt.Sprintf("/api/v1/jobs/%d/kick", delayed), nil},
	} {
		if rep := do(r.method, r.path, r.body); rep.Status != http.StatusServiceUnavailable || rep.Header.Get("Retry-After") == "" {
			t.Fatalf("%s %s through %s while the tube is frozen: %d %s, want 503 with Retry-After",
				r.method, r.path, via.node.Name(), rep.Status, rep.Body)
		}
	}
	ts, ok := n.Store().TubeStats([]byte(tube))
	if !ok || ts.Ready != 1 || ts.Delayed != 1 || ts.TotalJobs != 2 || ts.Pause != 0 {
		t.Fatalf("the frozen tube in group 1: %+v, want as it was", ts)
	}

	for _, m := range c.up {
		m.keepLostMoves.Store(false)
	}
	testproc.WaitFor(t, 20*time.Second, "the undriven move aborted", func() bool { return len(n.Tubes().Frozen) == 0 })
	if rep := do(http.MethodDelete, fmt.Sprintf("/api/v1/jobs/%d", ready), nil); rep.Status != http.StatusOK {
		t.Fatalf("an admin delete once the tube thawed: %d %s", rep.Status, rep.Body)
	}
	if rep := do(http.MethodPost, "/api/v1/tubes/"+tube+"/jobs", map[string]any{"body": "after"}); rep.Status != http.StatusCreated {
		t.Fatalf("an admin put once the tube thawed: %d %s", rep.Status, rep.Body)
	}
}

// TestShardGroupsAdoptAndDrop: the destination's adopt and drop of a
// moving tube's copies (here: the steps made by hand, no driver) keep to
// their move. A drop for another move, while the copies here are of one
// group 0 has not decided (a deposed driver's, late), is refused and the
// copies stay, by the group's next leader too; the move's own drop takes
// them. An adopt for a move group
// 0 aborted is refused: nothing would drop its copies. A drop that comes
// while an adopt of the tube runs waits for it, so it drops every copy.
func TestShardGroupsAdoptAndDrop(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tube := tubePerGroup(p, "adopt")[1]
	client := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, client, "use "+tube, "USING "+tube)
	for i := range 3 {
		if _, err := client.Put(0, 0, 60, fmt.Appendf(nil, "job-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.leaveLostMoves()
	src, dst := c.leaderOf(1), c.leaderOf(2)
	n := src.shards.node(1)
	const moveA, moveB, moveC, moveD = 0xa1, 0xb1, 0xc1, 0xd1
	if err := n.ProposeTube(t.Context(), replication.TubeFreeze, tube, moveA, 2, 0); err != nil {
		t.Fatal(err)
	}
	src.sessions.Refreeze(1)
	copies := func() int {
		ts, _ := dst.shards.node(2).Store().TubeStats([]byte(tube))
		return ts.Ready
	}
	drop := func(move uint64) error {
		return src.callLeader(t.Context(), 2, fmt.Sprintf("/cluster/tubes/%s/drop?to=2&move=%x", tube, move), nil, nil)
	}
	if jobs, err := src.handTube(t.Context(), n, tube, moveA, 1, 2, nil); err != nil || jobs != 3 || copies() != 3 {
		t.Fatalf("move A's adopt: %d jobs, %v; %d copies in group 2", jobs, err, copies())
	}
	// Group 2's next leader knows whose copies it holds: its log says
	// (TubeBook.Adopted), not the member that took them.
	old := dst
	if err := c.handAway(old, 2); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 10*time.Second, "group 2 led by another member", func() bool { return old.shards.serving(2) == nil })
	dst = c.leaderOf(2)
	if err := drop(moveB); err == nil || copies() != 3 {
		t.Fatalf("a late drop for move B while group 2 holds move A's copies: %v; %d copies left, want 3", err, copies())
	}
	if err := drop(moveA); err != nil || copies() != 0 {
		t.Fatalf("move A's own drop: %v; %d copies left", err, copies())
	}

	if err := c.leaderOf(0).node.ProposeTube(t.Context(), replication.TubeAbort, tube, moveC, 2, 1); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 5*time.Second, "group 2's leader knowing move C aborted", func() bool {
		_, ok := dst.node.Tubes().Decided[moveC]
		return ok
	})
	if _, err := src.handTube(t.Context(), n, tube, moveC, 1, 2, nil); err == nil || copies() != 0 {
		t.Fatalf("an adopt for the aborted move C: %v; %d copies", err, copies())
	}

	imported, release := make(chan struct{}), make(chan struct{})
	hook := func(uint16) { close(imported); <-release }
	dst.afterImport.Store(&hook)
	adopted := make(chan error, 1)
	go func() {
		_, err := src.handTube(t.Context(), n, tube, moveD, 1, 2, nil)
		adopted <- err
	}()
	<-imported
	dropped := make(chan error, 1)
	go func() { dropped <- drop(moveD) }()
	select {
	case err := <-dropped:
		t.Fatalf("move D's drop answered (%v) while its adopt ran", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-adopted; err != nil {
		t.Fatalf("move D's adopt: %v", err)
	}
	if err := <-dropped; err != nil || copies() != 0 {
		t.Fatalf("move D's drop after its adopt: %v; %d copies left", err, copies())
	}
}

// TestShardGroupsMoveBackCopies: while a tube moves back to the group
// of its jobs' ids (here: the steps made by hand, no driver), that group
// holds copies of its jobs before group 0 decides, and a command by id
// asks it first. A delete made on a copy would be lost with it if the
// move is aborted: the job would come back. So the delete waits for the
// move's end, and is made on the job where it lives then.
func TestShardGroupsMoveBackCopies(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	tube := tubePerGroup(c.up["m1"].shards.placement, "back")[1]
	client := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, client, "use "+tube, "USING "+tube)
	id, err := client.Put(0, 0, 60, []byte("job"))
	if err != nil {
		t.Fatal(err)
	}
	if status, res, body := moveTubeThrough(t, c.up["m3"], tube, 2); status != http.StatusOK || res.Jobs != 1 {
		t.Fatalf("the move to group 2: %d %s", status, body)
	}
	c.leaveLostMoves()
	testproc.WaitFor(t, 10*time.Second, "every member routing the tube to group 2", func() bool {
		for _, m := range c.up {
			if m.shards.routing.Load().state.Owner(tube) != 2 {
				return false
			}
		}
		return true
	})
	src := c.leaderOf(2)
	n := src.shards.node(2)
	const move = 0xbac
	if err := n.ProposeTube(t.Context(), replication.TubeFreeze, tube, move, 1, 0); err != nil {
		t.Fatal(err)
	}
	src.sessions.Refreeze(2)
	if jobs, err := src.handTube(t.Context(), n, tube, move, 2, 1, nil); err != nil || jobs != 1 {
		t.Fatalf("handing the tube back: %d jobs, %v", jobs, err)
	}
	if !c.leaderOf(1).shards.node(1).Store().Holds(id) {
		t.Fatal("group 1 holds no copy of the job")
	}
	client.WriteCmdID("delete", id)
	if err := client.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the delete asks group 1, which holds the copy
	if err := src.abortTubeMove(t.Context(), n, tube, move, 2, 1, errors.New("aborted by the test")); err == nil ||
		!strings.Contains(err.Error(), "aborted by the test") {
		t.Fatalf("the abort: %v", err)
	}
	if r, err := client.ReadReply(false); err != nil || r.Kind != testproc.ReplyDeleted {
		t.Fatalf("the delete during the move: %+v %v", r, err)
	}
	if r, err := client.Do(fmt.Sprintf("peek %d", id), nil); err != nil || r.Kind != testproc.ReplyNotFound {
		t.Fatalf("peek of the job deleted during the aborted move: %+v %v, want NOT_FOUND", r, err)
	}
}

// TestShardGroupsMoveTubeBackUnfinished: a tube's move out of a group
// that group 0 placed, and whose driver was lost before the group dropped
// its copies (here: the steps made by hand, the last left out), is
// finished by a move of the tube back into that group: the copies go
// before the jobs come back, so every job is there once, and the tube
// serves there again.
func TestShardGroupsMoveTubeBackUnfinished(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tube := tubePerGroup(p, "unfinished")[1]
	client := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, client, "use "+tube, "USING "+tube)
	var ids []uint64
	for i := range 5 {
		id, err := client.Put(0, 0, 60, fmt.Appendf(nil, "job-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	const move = 0xfeed
	// The balancer would resolve the move, undriven here, at its next
	// tick: under load the steps by hand outlast one, and it aborts the
	// move before group 0 places it.
	c.leaveLostMoves()
	src := c.leaderOf(1)
	n := src.shards.node(1)
	if err := n.ProposeTube(t.Context(), replication.TubeFreeze, tube, move, 2, 0); err != nil {
		t.Fatal(err)
	}
	src.sessions.Refreeze(1)
	if jobs, err := src.handTube(t.Context(), n, tube, move, 1, 2, nil); err != nil || jobs != len(ids) {
		t.Fatalf("handing the tube over: %d jobs, %v", jobs, err)
	}
	if err := c.leaderOf(0).node.ProposeTube(t.Context(), replication.TubePlace, tube, move, 2, 1); err != nil {
		t.Fatal(err)
	}
	if placed, ok := c.leaderOf(0).node.Tubes().Decided[move]; !ok || !placed {
		t.Fatalf("group 0 decided the move: %v, placed %v", ok, placed)
	}
	// Its driver lost here: group 1 still holds the copies. The tube
	// moves back at once, once the member asked routes it to group 2.
	testproc.WaitFor(t, 5*time.Second, "m3 routing the tube to group 2", func() bool {
		return c.up["m3"].shards.routing.Load().state.Owner(tube) == 2
	})
	status, res, body := moveTubeThrough(t, c.up["m3"], tube, 1)
	if status != http.StatusOK || res.From != 2 || res.Jobs != len(ids) {
		t.Fatalf("the move back: %d %s", status, body)
	}
	st, err := client.Stats("stats-tube " + tube)
	if err != nil || st["current-jobs-ready"] != fmt.Sprint(len(ids)) {
		t.Fatalf("stats-tube after the move back: %v %v, want %d ready", st, err, len(ids))
	}
	if id, err := client.Put(0, 0, 60, []byte("after")); err != nil || id>>meta.SeqBits != 1 {
		t.Fatalf("a put after the move back: id %d, %v", id, err)
	}
	for _, id := range ids {
		expectLine(t, client, fmt.Sprintf("delete %d", id), "DELETED")
	}
	if st, err := client.Stats("stats-tube " + tube); err != nil || st["current-jobs-ready"] != "1" {
		t.Fatalf("stats-tube at the end: %v %v", st, err)
	}
}

// TestAwaitAckedLeadershipLost: the wait for a change's acknowledgement
// in a move (an import, a drop) ends as soon as its member stops leading
// the group, with ErrNotServing, not at the end of its context: the
// journal drops what waited on it. A change of a past term is refused at
// once, even while the member leads again: a later leadership's
// positions pass it without acknowledging it.
func TestAwaitAckedLeadershipLost(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	l := c.leaderOf(1)
	n := l.shards.node(1)
	term, err := servingTerm(n)
	if err != nil {
		t.Fatal(err)
	}
	never := n.Journal().Appended() + 1<<40 // no leadership reaches it
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- awaitAcked(ctx, n, term, never) }()
	if err := c.handAway(l, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, replication.ErrNotServing) {
			t.Fatalf("the wait ended with %v, want ErrNotServing", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("still waiting 20 s after the leadership was handed over")
	}
	if err := awaitAcked(ctx, n, term, never); !errors.Is(err, replication.ErrNotServing) {
		t.Fatalf("a wait for a change of a past term: %v, want ErrNotServing", err)
	}
}

// TestShardGroupsMoveTubeDestinationLost: the destination group's leader
// loses its leadership as it takes a moving tube's jobs (handed over
// between its import and its log's acknowledgement, as a starved leader
// loses it), and its answer is 503: at the copy ahead of the freeze, or
// at the freeze's changes. The move does not abort: its driver sends the
// jobs again to the group's next leader, which takes those its log does
// not have (or makes the changes again), and the move completes with
// every job once, its id and state kept.
func TestShardGroupsMoveTubeDestinationLost(t *testing.T) {
	for _, at := range []string{"stage", "changes"} {
		t.Run(at, func(t *testing.T) { testMoveTubeDestinationLost(t, at == "changes") })
	}
}

func testMoveTubeDestinationLost(t *testing.T, atChanges bool) {
	c, tube, conn := usingTubeOfGroup1(t, "lost")
	from, to := uint16(1), uint16(2)
	const jobs = 300
	var ids []uint64
	for i := range jobs {
		id, err := conn.Put(uint32(i%5), 0, 60, fmt.Appendf(nil, "job-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	expectLine(t, conn, "watch "+tube, "WATCHING 2")
	expectLine(t, conn, "ignore default", "WATCHING 1")
	r, err := conn.Do("reserve-with-timeout 5", nil)
	if err != nil || r.Kind != testproc.ReplyReserved {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	expectLine(t, conn, fmt.Sprintf("bury %d 7", r.N), "BURIED")
	buried := r.N

	first := c.leaderOf(to)
	handAway, handed := c.handAwayOnce(first, to)
	var staged atomic.Bool
	stagedHook := func() { staged.Store(true) }
	hook := func(g uint16) {
		if !atChanges || staged.Load() {
			handAway(g)
		}
	}
	for _, m := range c.up {
		m.afterStage.Store(&stagedHook)
		m.afterImport.Store(&hook)
	}
	status, res, body := moveTubeThrough(t, c.up["m3"], tube, int(to))
	if status != http.StatusOK || res.From != from || res.To != to || res.Jobs != jobs {
		t.Fatalf("move of %s to group %d: %d %s", tube, to, status, body)
	}
	if !handed.Load() || c.leaderOf(to) == first {
		t.Fatalf("group %d's leadership was not handed over under the move (its leader %s)", to, c.leaderOf(to).node.Name())
	}
	if !strings.Contains(c.outs[c.leaderOf(from).node.Name()].String(), "calling its next") {
		t.Fatal("the move's driver did not call the destination's next leader")
	}
	for _, id := range ids {
		st, err := conn.Stats(fmt.Sprintf("stats-job %d", id))
		want := "ready"
		if id == buried {
			want = "buried"
		}
		if err != nil || st["tube"] != tube || st["state"] != want {
			t.Fatalf("stats-job %d after the move: %v %v, want %s in %s", id, st, err, want, tube)
		}
	}
	st, err := conn.Stats("stats-tube " + tube)
	if err != nil || st["current-jobs-ready"] != strconv.Itoa(jobs-1) || st["current-jobs-buried"] != "1" {
		t.Fatalf("stats-tube %s: %v %v", tube, st, err)
	}
}

// TestHandTubeNeedsLeadership: a member that no longer leads the tube's
// group hands nothing over: its store may be one being rebuilt from the
// log, and an export of it part of the tube.
func TestHandTubeNeedsLeadership(t *testing.T) {
	c, tube, conn := usingTubeOfGroup1(t, "handed")
	from, to := uint16(1), uint16(2)
	for i := range 10 {
		if _, err := conn.Put(0, 0, 60, fmt.Appendf(nil, "job-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	was := c.leaderOf(from)
	n := was.shards.node(from)
	if err := c.handAway(was, from); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 10*time.Second, "the leadership handed over", func() bool { return was.shards.serving(from) == nil })
	_, err := was.handTube(t.Context(), n, tube, 1, from, to, nil)
	if !errors.Is(err, replication.ErrNotServing) {
		t.Fatalf("handTube by a member that no longer leads group %d: %v, want ErrNotServing", from, err)
	}
	if st, ok := c.leaderOf(to).shards.node(to).Store().TubeStats([]byte(tube)); ok && st.Ready > 0 {
		t.Fatalf("group %d took %d of the tube's jobs", to, st.Ready)
	}
}

// usingTubeOfGroup1 starts three members with three groups, and connects
// to m1 using a tube of group 1 named from prefix.
func usingTubeOfGroup1(t *testing.T, prefix string) (*testCluster, string, *testproc.Conn) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	tube := tubePerGroup(c.up["m1"].shards.placement, prefix)[1]
	conn := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	expectLine(t, conn, "use "+tube, "USING "+tube)
	return c, tube, conn
}

// handAwayOnce is a test hook's work: called with group g the first
// time, it has l hand g to another member and returns once l no longer
// leads it; handed says whether it has been called so.
func (c *testCluster) handAwayOnce(l *Member, g uint16) (hook func(uint16), handed *atomic.Bool) {
	handed = new(atomic.Bool)
	return func(called uint16) {
		if called != g || !handed.CompareAndSwap(false, true) {
			return
		}
		if err := c.handAway(l, g); err != nil {
			c.t.Errorf("handing group %d over: %v", g, err)
		}
		for wait := time.Now().Add(10 * time.Second); l.shards.serving(g) != nil && time.Now().Before(wait); {
			time.Sleep(10 * time.Millisecond)
		}
	}, handed
}

// handAway asks l, leading group g, to hand it to another member.
func (c *testCluster) handAway(l *Member, g uint16) error {
	for name := range c.up {
		if name != l.node.Name() {
			return l.shards.node(g).TransferLeadership(name)
		}
	}
	return fmt.Errorf("no member but %s to hand group %d to", l.node.Name(), g)
}

// TestShardGroupsMoveOutcomeKept: group 0 keeps a placed move's outcome
// while its source's freeze waits for it, however many moves are decided
// and settled meanwhile, so that the source's leader, resolving the
// freeze late, finishes the move: asked afresh, the abort would be
// decided, and the tube would live in two groups. Each group settles its
// part once its book is past it; the move is settled once both have.
func TestShardGroupsMoveOutcomeKept(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	c.leaveLostMoves()
	tube := tubePerGroup(c.up["m1"].shards.placement, "kept")[1]
	src := c.leaderOf(1).shards.node(1)
	const move = 0x5eed
	if err := src.ProposeTube(t.Context(), replication.TubeFreeze, tube, move, 2, 0); err != nil {
		t.Fatal(err)
	}
	g0 := c.leaderOf(0).node
	if err := g0.ProposeTube(t.Context(), replication.TubePlace, tube, move, 2, 1); err != nil {
		t.Fatal(err)
	}
	// Group 2 took none of its copies: its part is over at once. Group
	// 1's freeze waits for the outcome.
	testproc.WaitFor(t, 20*time.Second, "group 2 settled the move", func() bool {
		return slices.Equal(g0.Tubes().Unsettled[move], []uint16{1})
	})
	const others = 1100 // more than group 0 keeps settled
	// Proposed through whichever member leads group 0: under the load of
	// packages tested side by side a leadership can be lost meanwhile.
	abortOther := func(i int) error {
		for until := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			for _, m := range c.up {
				if m.shards.serving(0) != nil {
					err := m.shards.node(0).ProposeTube(t.Context(), replication.TubeAbort, "other", uint64(0x10000+i), 2, 1)
					if !errors.Is(err, replication.ErrNotServing) || time.Now().After(until) {
						return err
					}
				}
			}
			if time.Now().After(until) {
				return errors.New("no member led group 0 for 20 s")
			}
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < others; i += 8 {
				if err := abortOther(i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	testproc.WaitFor(t, 30*time.Second, "the other moves settled, some forgotten", func() bool {
		b := g0.Tubes()
		return len(b.Unsettled) == 1 && len(b.Decided) < others // some forgotten
	})
	if placed, ok := g0.Tubes().Decided[move]; !ok || !placed {
		t.Fatalf("the unsettled move's outcome: decided %v, placed %v", ok, placed)
	}
	for _, m := range c.up {
		m.keepLostMoves.Store(false)
	}
	testproc.WaitFor(t, 20*time.Second, "the move finished in group 1, and settled", func() bool {
		_, unsettled := g0.Tubes().Unsettled[move]
		return c.leaderOf(1).shards.node(1).Tubes().Frozen[tube].Moved && !unsettled
	})
	if placed := g0.Tubes().Decided[move]; !placed {
		t.Fatal("the move was aborted afresh")
	}
	if owner := c.up["m3"].shards.routing.Load().state.Owner(tube); owner != 2 {
		t.Fatalf("the tube routes to group %d, want 2", owner)
	}
}

// TestShardGroupsMoveIntoGroupZero: a tube moved into group 0 ends its
// adopt there once placed (TubeBook.Adopted), as in any other group, and
// the move is settled: before, group 0's adopts were never ended, and
// each such move stayed unsettled.
func TestShardGroupsMoveIntoGroupZero(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	tube := tubePerGroup(c.up["m1"].shards.placement, "zero")[1]
	c.formationRecorded()
	setup := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, setup, "use "+tube, "USING "+tube)
	id, err := setup.Put(0, 0, 60, []byte("moved"))
	if err != nil {
		t.Fatal(err)
	}
	if status, _, body := moveTubeThrough(t, c.up["m3"], tube, 0); status != http.StatusOK {
		t.Fatalf("move of %s into group 0: %d %s", tube, status, body)
	}
	testproc.WaitFor(t, 10*time.Second, "group 0's adopt ended", func() bool {
		return len(c.leaderOf(0).node.Tubes().Adopted) == 0
	})
	c.settledAll()
	if r, err := setup.Do(fmt.Sprintf("peek %d", id), nil); err != nil || r.Kind != testproc.ReplyFound {
		t.Fatalf("peek of the moved job: %+v %v", r, err)
	}
}

// TestShardGroupsMoveTubeStaged: a move copies its tube to the new group
// ahead of the freeze (stageTube), and the freeze hands over only what
// changed since. Changed between the two here: a job deleted, a reserved
// one released with another priority, one reserved and buried, one put,
// one reserved and held across the move. Meanwhile the new group's copy
// serves nothing: a peek of a copied job is answered by the old group,
// though its id is the new group's (the tube moves back), which the
// search asks first. After the move every job is in the new group as the
// old one had it, the deleted one nowhere, the held one still its
// holder's.
func TestShardGroupsMoveTubeStaged(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	c.formationRecorded()
	tube := tubePerGroup(c.up["m1"].shards.placement, "staged")[2]
	holder := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, holder, "use "+tube, "USING "+tube)
	expectLine(t, holder, "watch "+tube, "WATCHING 2")
	expectLine(t, holder, "ignore default", "WATCHING 1")
	put := func(pri uint32, delay int, body string) uint64 {
		t.Helper()
		id, err := holder.Put(pri, delay, 60, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	reserve := func(want uint64) {
		t.Helper()
		if r, err := holder.Do("reserve-with-timeout 5", nil); err != nil || r.N != want {
			t.Fatalf("reserve: %+v %v, want job %d", r, err, want)
		}
	}
	released, deleted, buried, same, held := put(1, 0, "released"), put(2, 0, "deleted"), put(3, 0, "buried"), put(9, 0, "same"), put(4, 0, "held")
	delayed := put(5, 100, "delayed")
	if status, _, body := moveTubeThrough(t, c.up["m1"], tube, 1); status != http.StatusOK {
		t.Fatalf("move out of group 2: %d %s", status, body)
	}
	reserve(released)
	before, err := holder.Stats("stats")
	if err != nil {
		t.Fatal(err)
	}
	r, err := holder.Do("list-tubes", nil)
	if err != nil {
		t.Fatal(err)
	}
	tubesBefore := r.Body
	// The hook runs on the move's driver, in its member's handler: it
	// reports, it does not stop the test.
	var fresh, move uint64
	var staged, markKept bool
	hook := func() {
		for _, m := range c.up {
			if n := m.shards.serving(2); n != nil {
				b := m.shards.node(2).Tubes()
				staged, move, markKept = isStaged(m.shards.node(2), tube), b.Staged[tube].Move, b.Frozen[tube].Moved
			}
		}
		reader, err := testproc.Dialer{Timeout: time.Second, ReplyTimeout: replyTimeout}.Dial(c.up["m3"].Addr().String())
		if err != nil {
			t.Error(err)
			return
		}
		defer reader.Close()
		// stats and list-tubes as before the copy: the new group leaves
		// its copies out of its parts.
		if st, err := reader.Stats("stats"); err != nil || !sameStats(st, before) {
			t.Errorf("stats while the copy is staged: %v %v; before the move %v", st, err, before)
		}
		if r, err := reader.Do("list-tubes", nil); err != nil || string(r.Body) != string(tubesBefore) {
			t.Errorf("list-tubes while the copy is staged: %q %v; before the move %q", r.Body, err, tubesBefore)
		}
		if r, err := reader.Do(fmt.Sprintf("peek %d", same), nil); err != nil || r.Kind != testproc.ReplyFound || string(r.Body) != "same" {
			t.Errorf("a peek of a copied job while the copy is staged: %+v %v", r, err)
		}
		for _, step := range [][2]string{
			{fmt.Sprintf("delete %d", deleted), "DELETED"},
			{fmt.Sprintf("release %d 7 0", released), "RELEASED"},
		} {
			if err := holder.ExpectLine(step[0], step[1]); err != nil {
				t.Error(err)
			}
		}
		if r, err := holder.Do("reserve-with-timeout 5", nil); err != nil || r.N != buried {
			t.Errorf("reserve: %+v %v, want job %d", r, err, buried)
		}
		if err := holder.ExpectLine(fmt.Sprintf("bury %d 8", buried), "BURIED"); err != nil {
			t.Error(err)
		}
		if fresh, err = holder.Put(6, 0, 60, []byte("fresh")); err != nil {
			t.Error(err)
		}
		if r, err := holder.Do("reserve-with-timeout 5", nil); err != nil || r.N != held {
			t.Errorf("reserve: %+v %v, want job %d", r, err, held)
		}
	}
	for _, m := range c.up {
		m.afterStage.Store(&hook)
		m.stageChunkBytes.Store(1) // a part a job
	}
	status, res, body := moveTubeThrough(t, c.up["m1"], tube, 2)
	for _, m := range c.up {
		m.afterStage.Store(nil)
	}
	if status != http.StatusOK || res.Jobs != 6 {
		t.Fatalf("move: %d %s", status, body)
	}
	if !staged || !markKept {
		t.Fatalf("before the freeze, the new group's book held a stage of the tube: %v; and its mark of the tube moved out: %v", staged, markKept)
	}
	if parts := strings.Count(c.outs[c.leaderOf(2).node.Name()].String(), fmt.Sprintf(`"what":%d`, adoptStageMore)); parts != 5 {
		t.Fatalf("the new group's leader took %d parts of the copy after its first, want 5 (a job each)", parts)
	}
	for id, want := range map[uint64][2]string{released: {"ready", "7"}, buried: {"buried", "8"}, same: {"ready", "9"},
		held: {"reserved", "4"}, delayed: {"delayed", "5"}, fresh: {"ready", "6"}} {
		st, err := holder.Stats(fmt.Sprintf("stats-job %d", id))
		if err != nil || st["state"] != want[0] || st["pri"] != want[1] {
			t.Fatalf("stats-job %d after the move: %v %v, want %v", id, st, err, want)
		}
	}
	expectLine(t, holder, fmt.Sprintf("peek %d", deleted), "NOT_FOUND")
	for g, n := range map[uint16]int{1: 0, 2: 6} {
		testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("group %d's store", g), func() bool {
			return tubeJobs(c.leaderOf(g).shards.node(g), tube) == n
		})
	}
	// The stage again, come late (a deposed driver's, or sent again):
	// refused, or its copy of the deleted job would come back.
	dst := c.leaderOf(2)
	stale := adoptBodyOf(t, dst.shards.node(2), tube)
	lateStage := func() {
		t.Helper()
		wantRefused(t, dst, 2, fmt.Sprintf("/cluster/tubes/%s/stage?from=1&to=2&move=%x", tube, move), stale, "the move's stage come late")
	}
	lateStage()
	expectLine(t, holder, fmt.Sprintf("delete %d", held), "DELETED") // still its holder's
	testproc.WaitFor(t, 10*time.Second, "the stage ended", func() bool {
		return len(c.leaderOf(2).shards.node(2).Tubes().Adopted) == 0
	})
	// Once the tube has moved on, the late stage finds it living
	// elsewhere: refused all the same (its move was decided).
	if status, _, body := moveTubeThrough(t, c.up["m1"], tube, 0); status != http.StatusOK {
		t.Fatalf("move on to group 0: %d %s", status, body)
	}
	lateStage()
	if n := c.leaderOf(2).shards.node(2); isStaged(n, tube) || tubeJobs(n, tube) != 0 {
		t.Fatalf("after a late stage, group 2 holds %d jobs of the tube (staged: %v)", tubeJobs(n, tube), isStaged(n, tube))
	}
	c.settledAll()
}

// TestShardGroupsMoveTubeDeposedDriver: a part of a tube's copy from a
// driver whose leadership of the source group is over (a later term of
// it is known where the part comes) is refused. Taken, it would abort
// the move of the tube the group's next leader staged there meanwhile
// (clearOtherAdopt), which is live; its own driver is gone.
func TestShardGroupsMoveTubeDeposedDriver(t *testing.T) {
	c, tubes, client := formedWithTubes(t, "deposed")
	tube := tubes[1]
	putEach(t, client, []string{tube}, 3)
	src := c.leaderOf(1)
	n := src.shards.node(1)
	const live = 0x11fe
	if since, err := src.stageTube(t.Context(), n, tube, live, 1, 2); err != nil || since.Len() != 3 {
		t.Fatalf("stage of %s: %d jobs, %v", tube, since.Len(), err)
	}
	term, err := servingTerm(n)
	if err != nil || term < 2 {
		t.Fatalf("group 1's term at its leader: %d %v", term, err)
	}
	dst := c.leaderOf(2)
	body := adoptBodyOf(t, n, tube)
	late := fmt.Sprintf("/cluster/tubes/%s/stage?from=1&to=2&move=%x&term=%d", tube, 0xdead, term-1)
	wantRefused(t, dst, 2, late, body, "a stage from a leadership of group 1 that is over")
	if st := dst.shards.node(2).Tubes().Staged[tube]; st.Move != live {
		t.Fatalf("group 2's stage of %s after the deposed driver's: move %x, want %x", tube, st.Move, live)
	}
	if placed, decided := c.leaderOf(0).node.Tubes().Decided[live]; decided {
		t.Fatalf("the live move was decided (placed: %v) on a deposed driver's stage", placed)
	}
	// The live driver's next part, in the group's term, is taken.
	next := fmt.Sprintf("/cluster/tubes/%s/stage?from=1&to=2&move=%x&part=1&term=%d", tube, live, term)
	if err := src.callLeader(t.Context(), 2, next, body, nil); err != nil {
		t.Fatalf("the live driver's next part: %v", err)
	}
}

// TestShardGroupsMoveTubeStageLost: a tube's copy taken ahead of a
// freeze that never comes (its driver lost) serves nothing, and the tube
// goes on in its group: a delete of one of its jobs there. A move of the
// tube after it drops that copy first (the move is decided aborted):
// taken in again, its copy of the deleted job would have come back. A
// copy nothing takes further is dropped by the new group's leader once
// it has waited (resolveStages), its move aborted.
func TestShardGroupsMoveTubeStageLost(t *testing.T) {
	c, tubes, client := formedWithTubes(t, "lost")
	ids := putEach(t, client, []string{tubes[1], tubes[0]}, 3)
	stages := 0
	stage := func(tube string, from uint16) uint64 {
		t.Helper()
		src := c.leaderOf(from)
		stages++
		move := uint64(0x57a6e<<8 | stages)
		if since, err := src.stageTube(t.Context(), src.shards.node(from), tube, move, from, 2); err != nil || since.Len() != 3 {
			t.Fatalf("stage of %s: %d jobs, %v", tube, since.Len(), err)
		}
		if !isStaged(c.leaderOf(2).shards.node(2), tube) {
			t.Fatalf("group 2 holds no stage of %s", tube)
		}
		return move
	}
	lost := stage(tubes[1], 1)
	gone := ids[tubes[1]][0]
	expectLine(t, client, fmt.Sprintf("delete %d", gone), "DELETED")
	if status, res, body := moveTubeThrough(t, c.up["m2"], tubes[1], 2); status != http.StatusOK || res.Jobs != 2 {
		t.Fatalf("the move after a lost stage: %d %s", status, body)
	}
	if placed, ok := c.leaderOf(0).node.Tubes().Decided[lost]; !ok || placed {
		t.Fatalf("the lost stage's move: decided %v, placed %v; want aborted", ok, placed)
	}
	expectLine(t, client, fmt.Sprintf("peek %d", gone), "NOT_FOUND")
	if n := tubeJobs(c.leaderOf(2).shards.node(2), tubes[1]); n != 2 {
		t.Fatalf("group 2 holds %d jobs of the moved tube, want 2", n)
	}
	// A stage come late, a deposed driver's, where the tube lives now:
	// refused, or its jobs there would count as copies (and go).
	dst := c.leaderOf(2)
	wantRefused(t, dst, 2, "/cluster/tubes/"+tubes[1]+"/stage?from=1&to=2&move=5ea1e", adoptBodyOf(t, dst.shards.node(2), tubes[1]),
		"a late stage where the tube lives")
	if n := dst.shards.node(2); isStaged(n, tubes[1]) || tubeJobs(n, tubes[1]) != 2 {
		t.Fatalf("after a late stage, group 2 holds %d jobs of the tube (staged: %v)", tubeJobs(n, tubes[1]), isStaged(n, tubes[1]))
	}

	// A copy's part after its first, with no first part there (given up,
	// or never sent): refused, or its jobs would be there, no copies
	// the group's book knows of, for nothing to drop.
	body := adoptBodyOf(t, c.leaderOf(0).shards.node(0), tubes[0])
	wantRefused(t, dst, 2, "/cluster/tubes/"+tubes[0]+"/stage?from=0&to=2&move=5ea1f&part=1", body, "a copy's second part with no first")
	if n := dst.shards.node(2); isStaged(n, tubes[0]) || tubeJobs(n, tubes[0]) != 0 {
		t.Fatalf("after a copy's second part alone, group 2 holds %d jobs of the tube (staged: %v)", tubeJobs(n, tubes[0]), isStaged(n, tubes[0]))
	}

	for _, m := range c.up {
		m.stageLostAfter.Store(int64(time.Second))
	}
	left := stage(tubes[0], 0)
	// A copy whose parts keep coming is not left, however long it takes
	// (a large tube's, past stageLost): each part is taken.
	src := c.leaderOf(0)
	for part := 1; part <= 10; part++ {
		time.Sleep(400 * time.Millisecond)
		path := fmt.Sprintf("/cluster/tubes/%s/stage?from=0&to=2&move=%x&part=%d", tubes[0], left, part)
		if err := src.callLeader(t.Context(), 2, path, body, nil); err != nil {
			t.Fatalf("part %d of a copy going on past stageLost: %v", part, err)
		}
	}
	testproc.WaitFor(t, 20*time.Second, "the stage left dropped", func() bool {
		n := c.leaderOf(2).shards.node(2)
		return !isStaged(n, tubes[0]) && tubeJobs(n, tubes[0]) == 0 && len(n.Tubes().Adopted) == 0
	})
	if placed, ok := c.leaderOf(0).node.Tubes().Decided[left]; !ok || placed {
		t.Fatalf("the stage left's move: decided %v, placed %v; want aborted", ok, placed)
	}
	for _, id := range ids[tubes[0]] {
		expectLine(t, client, fmt.Sprintf("delete %d", id), "DELETED") // in group 0, all along
	}

	// A stage waiting for its driver while the tube's jobs end at its
	// source, and a placement routes it to the stage's group, with
	// nothing to hand (the source no longer holds the tube): the copies
	// are no jobs of it there, and go; a reserve finds none of them.
	for _, m := range c.up {
		m.stageLostAfter.Store(int64(time.Hour)) // only its routing ends it
	}
	expectLine(t, client, "use "+tubes[0], "USING "+tubes[0])
	var copied []uint64
	for i := range 3 {
		id, err := client.Put(0, 0, 60, fmt.Appendf(nil, "copied-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		copied = append(copied, id)
	}
	expectLine(t, client, "use default", "USING default") // the tube goes with its last job
	stage(tubes[0], 0)
	for _, id := range copied {
		expectLine(t, client, fmt.Sprintf("delete %d", id), "DELETED")
	}
	// The tube is gone from its group: its copies are no tube of the
	// cluster's.
	if r, err := client.Do("list-tubes", nil); err != nil || strings.Contains(string(r.Body), tubes[0]) {
		t.Fatalf("list-tubes with the tube's copies staged, the tube gone: %q %v", r.Body, err)
	}
	if status, _, body := placeThrough(t, c.up["m1"], tubes[0], 2); status != http.StatusOK {
		t.Fatalf("placing %s in group 2: %d %s", tubes[0], status, body)
	}
	expectLine(t, client, "watch "+tubes[0], "WATCHING 2")
	expectLine(t, client, "ignore default", "WATCHING 1")
	if r, err := client.Do("reserve-with-timeout 0", nil); err != nil || r.Kind != testproc.ReplyTimedOut {
		t.Fatalf("a reserve of the placed tube: %+v %v, want TIMED_OUT (its only jobs were a stage's copies)", r, err)
	}
	testproc.WaitFor(t, 20*time.Second, "the stage's copies dropped", func() bool {
		n := c.leaderOf(2).shards.node(2)
		return !isStaged(n, tubes[0]) && tubeJobs(n, tubes[0]) == 0
	})
	for _, id := range copied {
		expectLine(t, client, fmt.Sprintf("peek %d", id), "NOT_FOUND")
	}
	expectLine(t, client, "use "+tubes[0], "USING "+tubes[0])
	if id, err := client.Put(0, 0, 60, []byte("after")); err != nil || id>>meta.SeqBits != 2 {
		t.Fatalf("a put into the placed tube: id %d, %v; want one of group 2", id, err)
	}
	c.settledAll()
}

// sameStats reports whether two stats answers hold the same jobs and
// tubes: current-jobs-* by state, total-jobs and current-tubes.
func sameStats(a, b map[string]string) bool {
	for _, k := range []string{"current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed",
		"current-jobs-buried", "total-jobs", "current-tubes"} {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// formedWithTubes is a cluster of three members and three groups, its
// formation recorded, a tube of prefix's names for each group (tubes[g]
// hashes to group g) and a client of m3.
func formedWithTubes(t *testing.T, prefix string) (*testCluster, []string, *testproc.Conn) {
	t.Helper()
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	c.formationRecorded()
	return c, tubePerGroup(c.up["m1"].shards.placement, prefix), testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
}

// putEach puts n jobs into each of tubes, in turn, through client (which
// then uses the last), and returns their ids by tube.
func putEach(t *testing.T, client *testproc.Conn, tubes []string, n int) map[string][]uint64 {
	t.Helper()
	ids := map[string][]uint64{}
	for _, tube := range tubes {
		expectLine(t, client, "use "+tube, "USING "+tube)
		for i := range n {
			id, err := client.Put(0, 0, 60, fmt.Appendf(nil, "%s-%d", tube, i))
			if err != nil {
				t.Fatal(err)
			}
			ids[tube] = append(ids[tube], id)
		}
	}
	return ids
}

// adoptBodyOf is an adopt's body (a stage's part) of tube's jobs as n's
// store holds them.
func adoptBodyOf(t *testing.T, n *replication.Node, tube string) []byte {
	t.Helper()
	frames, _, _, _, _ := n.Store().ExportTube([]byte(tube))
	body, err := adoptionBody(adoption{}, frames)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// wantRefused posts body to path at group g's leader, through via, and
// fails t unless that leader refuses it 409.
func wantRefused(t *testing.T, via *Member, g uint16, path string, body []byte, what string) {
	t.Helper()
	err := via.callLeader(t.Context(), g, path, body, nil)
	if le, ok := errors.AsType[*leaderError](err); !ok || le.status != http.StatusConflict {
		t.Fatalf("%s: %v, want 409", what, err)
	}
}

// TestAdminFindsMovedJobOfFive: with five members and three replicas a
// group, a member that holds the group a job's id names but not the one
// its tube moved to still finds the job through the admin API: its
// replica of the id's group does not hold it, so it is where the tube
// went. Before, such a member asked the id's group's leader, which would
// not forward a forwarded request again: 503 for as long as one asked.
// So does a member that holds neither group.
func TestAdminFindsMovedJobOfFive(t *testing.T) {
	c := newClusterOf(t, 5, 5, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	tube := tubePerGroup(p, "moved")[1]
	// To a group that some member holds no replica of, nor of group 1.
	to := uint16(0)
	for g := uint16(2); g < 5 && to == 0; g++ {
		for _, m := range c.up {
			if m.shards.node(1) == nil && m.shards.node(g) == nil {
				to = g
			}
		}
	}
	if to == 0 {
		t.Fatal("every member holds group 1 or each other group: no member holding neither")
	}
	conn := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	expectLine(t, conn, "use "+tube, "USING "+tube)
	id, err := conn.Put(5, 0, 60, []byte("moved"))
	if err != nil {
		t.Fatal(err)
	}
	if st, _, b := moveTubeThrough(t, c.up["m1"], tube, int(to)); st != http.StatusOK {
		t.Fatalf("the move: %d %s", st, b)
	}
	for _, name := range []string{"m1", "m2", "m3", "m4", "m5"} {
		testproc.WaitFor(t, 10*time.Second, "job "+strconv.FormatUint(id, 10)+" through "+name, func() bool {
			return api(t, c.up[name], fmt.Sprintf("/api/v1/jobs/%d", id)).Status == http.StatusOK
		})
	}
}

// clusterWithCountedTube is three members with three groups and a tube
// of group 1 holding three ready jobs (priorities 0 to 2) and one
// delayed, put through m2 by client, which uses the tube.
func clusterWithCountedTube(t *testing.T) (*testCluster, string, *testproc.Conn) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	c.formationRecorded()
	tube := tubePerGroup(c.up["m1"].shards.placement, "counted")[1]
	client := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, client, "use "+tube, "USING "+tube)
	for i := range 3 {
		if _, err := client.Put(uint32(i), 0, 60, []byte("ready")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Put(5, 100, 60, []byte("delayed")); err != nil {
		t.Fatal(err)
	}
	return c, tube, client
}

// moveToGroup2WhileAdopted moves tube to group 2 through m1, calling
// during once while group 2's leader holds the tube's jobs it took at the
// freeze (the adopted copy, not the stage's), before the placement.
func (c *testCluster) moveToGroup2WhileAdopted(tube string, during func()) {
	c.t.Helper()
	var once sync.Once
	hook := func(g uint16) {
		if g != 2 {
			return
		}
		for _, m := range c.up {
			if m.shards.serving(2) == nil {
				continue
			}
			if b := m.shards.node(2).Tubes(); b.Adopted[tube] == 0 || isStaged(m.shards.node(2), tube) {
				return // the stage's copy
			}
		}
		once.Do(during)
	}
	for _, m := range c.up {
		m.afterImport.Store(&hook)
	}
	status, _, body := moveTubeThrough(c.t, c.up["m1"], tube, 2)
	for _, m := range c.up {
		m.afterImport.Store(nil)
	}
	if status != http.StatusOK {
		c.t.Fatalf("move: %d %s", status, body)
	}
}

// TestShardGroupsMoveTubeStatsOnce: stats while a moving tube's jobs are
// in both groups, once the destination has taken them at the freeze and
// until the source drops them after the placement: each job counts once,
// as on one server (a staged copy is left out already: the same holds
// for the adopted one not yet placed, and for the frozen source's once
// placed elsewhere).
func TestShardGroupsMoveTubeStatsOnce(t *testing.T) {
	c, tube, client := clusterWithCountedTube(t)
	fields := []string{"current-jobs-urgent", "current-jobs-ready", "current-jobs-delayed", "current-tubes", "total-jobs"}
	before, err := client.StatsInt("stats", fields...)
	if err != nil {
		t.Fatal(err)
	}
	var during []int64
	var duringErr error
	c.moveToGroup2WhileAdopted(tube, func() {
		reader, err := testproc.Dialer{Timeout: time.Second, ReplyTimeout: replyTimeout}.Dial(c.up["m3"].Addr().String())
		if err != nil {
			duringErr = err
			return
		}
		defer reader.Close()
		during, duringErr = reader.StatsInt("stats", fields...)
	})
	if duringErr != nil || !slices.Equal(during, before) {
		t.Fatalf("stats %v while the new group holds the frozen tube's jobs: %v (%v); before the move %v", fields, during, duringErr, before)
	}
	time.Sleep(300 * time.Millisecond)
	if after, err := client.StatsInt("stats", fields...); err != nil || !slices.Equal(after, before) {
		t.Fatalf("stats %v after the move: %v (%v); before %v", fields, after, err, before)
	}
}

// TestShardGroupsMoveDefaultTube: the default tube, which every group's
// store holds, moves like any other: its jobs go, and stats and
// list-tubes answer as one server's after.
func TestShardGroupsMoveDefaultTube(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	c.formationRecorded()
	from := c.up["m1"].shards.routing.Load().state.Owner("default")
	to := (from + 1) % 3
	client := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	var ids []uint64
	for i := range 3 {
		id, err := client.Put(uint32(i), 0, 60, []byte("ready"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	fields := []string{"current-jobs-ready", "current-tubes", "total-jobs"}
	before, err := client.StatsInt("stats", fields...)
	if err != nil {
		t.Fatal(err)
	}
	lt, err := client.Do("list-tubes", nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, body := moveTubeThrough(t, c.up["m3"], "default", int(to)); status != http.StatusOK {
		t.Fatalf("move of default from group %d to %d: %d %s", from, to, status, body)
	}
	time.Sleep(500 * time.Millisecond)
	other := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	if after, err := other.StatsInt("stats", fields...); err != nil || !slices.Equal(after, before) {
		t.Fatalf("stats %v after the move: %v (%v); before %v", fields, after, err, before)
	}
	if r, err := other.Do("list-tubes", nil); err != nil || string(r.Body) != string(lt.Body) {
		t.Fatalf("list-tubes after the move: %q %v; before %q", r.Body, err, lt.Body)
	}
	for _, id := range ids {
		if r, err := other.Do("reserve-with-timeout 2", nil); err != nil || r.N != id {
			t.Fatalf("reserve: %+v %v, want %d", r, err, id)
		}
	}
	id, err := other.Put(0, 0, 60, []byte("after"))
	if err != nil || id>>meta.SeqBits != uint64(to) {
		t.Fatalf("a put after the move: %d %v, want an id of group %d", id, err, to)
	}
}
