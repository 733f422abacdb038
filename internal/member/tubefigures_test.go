package member

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestTubeKeptAcrossMoveElsewhere: a tube that a worker watches,
// with no job, lives on as one server's: a move of another tube between
// groups (invisible to the protocol) must not reset it. Through the
// member's references sync (Router.Replaced) it was freed and made again:
// its pause, total-jobs and cmd-delete were lost and its place in
// list-tubes changed.
func TestTubeKeptAcrossMoveElsewhere(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tubes := tubePerGroup(p, "keep")
	a, b := tubes[1], tubes[2]
	other := tubePerGroup(p, "mover")[1]
	worker := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	expectLine(t, worker, "watch "+b, "WATCHING 2")
	expectLine(t, worker, "watch "+a, "WATCHING 3")
	producer := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, producer, "use "+other, "USING "+other)
	if _, err := producer.Put(0, 0, 60, []byte("x")); err != nil {
		t.Fatal(err)
	}
	expectLine(t, producer, "use "+b, "USING "+b)
	id, err := producer.Put(0, 0, 60, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	expectLine(t, producer, fmt.Sprintf("delete %d", id), "DELETED")
	expectLine(t, producer, "use default", "USING default")
	expectLine(t, producer, "pause-tube "+b+" 100", "PAUSED")
	want := "---\n- default\n- " + b + "\n- " + a + "\n- " + other + "\n"
	if r, err := producer.Do("list-tubes", nil); err != nil || string(r.Body) != want {
		t.Fatalf("list-tubes before the move: %q %v, want %q", r.Body, err, want)
	}

	status, _, body := moveTubeThrough(t, c.up["m2"], other, 0)
	if status != http.StatusOK {
		t.Fatalf("move of %s to group 0: %d %s", other, status, body)
	}
	time.Sleep(500 * time.Millisecond)
	st, err := producer.Stats("stats-tube " + b)
	if err != nil || st["pause"] != "100" || st["total-jobs"] != "1" || st["cmd-delete"] != "1" || st["cmd-pause-tube"] != "1" {
		t.Fatalf("stats-tube %s after %s moved: %v %v, want pause 100, total-jobs 1, cmd-delete 1, cmd-pause-tube 1", b, other, st, err)
	}
	if r, err := producer.Do("list-tubes", nil); err != nil || string(r.Body) != want {
		t.Fatalf("list-tubes after %s moved: %q %v, want %q", other, r.Body, err, want)
	}
}

// TestTubeCountsAcrossHandover: stats-tube's current-using,
// current-watching and current-waiting of a tube whose group's leadership
// is handed over, while a worker of another member waits on it.
func TestTubeCountsAcrossHandover(t *testing.T) {
	c := newBalancedCluster(t)
	p := c.up["m1"].shards.placement
	g := c.ledBy("m2")
	tube := tubePerGroup(p, "hand")[g]
	worker := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	producer := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	expectLine(t, worker, "watch "+tube, "WATCHING 2")
	expectLine(t, worker, "ignore default", "WATCHING 1")
	expectLine(t, producer, "use "+tube, "USING "+tube)
	expectLine(t, producer, "pause-tube "+tube+" 100", "PAUSED")
	worker.WriteString("reserve-with-timeout 20\r\n")
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	counts := func() []int64 {
		got, err := producer.StatsInt("stats-tube "+tube, "current-using", "current-watching", "current-waiting", "pause")
		if err != nil {
			return nil
		}
		return got
	}
	want := []int64{1, 1, 1, 100}
	testproc.WaitFor(t, 5*time.Second, "the worker waiting", func() bool { return slices.Equal(counts(), want) })
	if err := c.handAway(c.up["m2"], g); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 10*time.Second, "m2 no longer serving", func() bool { return c.up["m2"].shards.serving(g) == nil })
	testproc.WaitFor(t, 10*time.Second, "another member serving", func() bool {
		return c.up["m1"].shards.serving(g) != nil || c.up["m3"].shards.serving(g) != nil
	})
	time.Sleep(time.Second)
	if got := counts(); !slices.Equal(got, want) {
		t.Fatalf("stats-tube %s after the handover: using, watching, waiting, pause %v, want %v", tube, got, want)
	}
	expectLine(t, producer, "pause-tube "+tube+" 0", "PAUSED")
	id, err := producer.Put(0, 0, 60, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := worker.ReadReply(true)
	if err != nil || r.N != id {
		t.Fatalf("the waiting worker: %+v %v, want job %d", r, err, id)
	}
	if got, err := producer.StatsInt("stats-tube "+tube, "current-waiting"); err != nil || got[0] != 0 {
		t.Fatalf("current-waiting after the reserve: %v %v", got, err)
	}
}

// TestListTubesOrderAfterMove: a tube's move between groups is
// invisible to the protocol, so list-tubes must list the tubes in the
// order one server would: the order they were made in (no tube was
// freed). A watches tube A (group 1), then tube B (group 2); A moves to
// group 2. beanstalkd: default, A, B.
func TestListTubesOrderAfterMove(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	tubes := tubePerGroup(p, "ord")
	a, b := tubes[1], tubes[2]
	client := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	expectLine(t, client, "watch "+a, "WATCHING 2")
	expectLine(t, client, "watch "+b, "WATCHING 3")
	want := "---\n- default\n- " + a + "\n- " + b + "\n"
	if r, err := client.Do("list-tubes", nil); err != nil || string(r.Body) != want {
		t.Fatalf("list-tubes before the move: %q %v, want %q", r.Body, err, want)
	}
	status, _, body := moveTubeThrough(t, c.up["m2"], a, 2)
	if status != http.StatusOK {
		t.Fatalf("move of %s to group 2: %d %s", a, status, body)
	}
	time.Sleep(300 * time.Millisecond)
	other := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	if r, err := other.Do("list-tubes", nil); err != nil || string(r.Body) != want {
		t.Fatalf("list-tubes after %s moved to group 2: %q %v, want %q (the order they were made in)", a, r.Body, err, want)
	}
	if got, err := other.StatsInt("stats-tube "+a, "current-watching"); err != nil || got[0] != 1 {
		t.Fatalf("stats-tube %s after the move: current-watching %v %v, want 1", a, got, err)
	}
	if got, err := other.StatsInt("stats", "current-tubes"); err != nil || got[0] != 3 {
		t.Fatalf("stats current-tubes after the move: %v %v, want 3", got, err)
	}
}

// TestEmptyTubeMoveKeepsFigures: a tube with no job, kept by a
// worker's watch, moves to another group: stats-tube answers as one
// server would, its total-jobs, cmd-delete, cmd-pause-tube and pause
// kept.
func TestEmptyTubeMoveKeepsFigures(t *testing.T) {
	c := newClusterOf(t, 3, 3, 0)
	c.finalized()
	p := c.up["m1"].shards.placement
	a := tubePerGroup(p, "fig")[1]
	worker := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	expectLine(t, worker, "watch "+a, "WATCHING 2")
	expectLine(t, worker, "use "+a, "USING "+a)
	id, err := worker.Put(0, 0, 60, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	expectLine(t, worker, fmt.Sprintf("delete %d", id), "DELETED")
	expectLine(t, worker, "pause-tube "+a+" 100", "PAUSED")
	fields := []string{"total-jobs", "cmd-delete", "cmd-pause-tube", "pause", "current-watching", "current-using"}
	want := []int64{1, 1, 1, 100, 1, 1}
	if got, err := worker.StatsInt("stats-tube "+a, fields...); err != nil || !slices.Equal(got, want) {
		t.Fatalf("stats-tube %s before the move: %v %v, want %v", a, got, err, want)
	}
	status, _, body := moveTubeThrough(t, c.up["m2"], a, 2)
	if status != http.StatusOK {
		t.Fatalf("move of %s to group 2: %d %s", a, status, body)
	}
	time.Sleep(500 * time.Millisecond)
	other := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	if got, err := other.StatsInt("stats-tube "+a, fields...); err != nil || !slices.Equal(got, want) {
		t.Fatalf("stats-tube %s after the move: %v %v, want %v (%v)", a, got, err, want, fields)
	}
}
