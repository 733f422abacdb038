package member

import (
	"strconv"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestClusterPauseFailover: a tube's pause outlives its leader: after the
// leadership is handed over, stats-tube shows the same pause with its
// time left, and the paused tube's ready job is not handed out; but a
// tube freed while paused is unpaused when made again, as beanstalkd
// forgets a freed tube's pause.
func TestClusterPauseFailover(t *testing.T) {
	c := newTestCluster(t)
	lname, l := c.serving(20 * time.Second)
	c.finalized()
	f := c.others(lname)[0]
	client := testproc.DialTest(t, f.Addr().String(), replyTimeout)
	expectLine(t, client, "use paused", "USING paused")
	if _, err := client.Put(0, 0, 60, []byte("held by the pause")); err != nil {
		t.Fatal(err)
	}
	expectLine(t, client, "pause-tube paused 60", "PAUSED")
	expectLine(t, client, "use gone", "USING gone")
	expectLine(t, client, "pause-tube gone 60", "PAUSED")
	expectLine(t, client, "use default", "USING default") // gone is freed, its pause with it

	var to *Member
	for _, m := range c.others(lname) {
		if m != f {
			to = m
		}
	}
	testproc.WaitFor(t, 10*time.Second, lname+" handing the leadership to "+to.Node().Name(), func() bool {
		if err := l.Node().TransferLeadership(to.Node().Name()); err != nil {
			t.Fatal(err)
		}
		info, _ := to.Node().Leader()
		return info.Serving && info.Name == to.Node().Name()
	})
	worker := testproc.DialTest(t, to.Addr().String(), replyTimeout)
	st, err := worker.Stats("stats-tube paused")
	if err != nil {
		t.Fatal(err)
	}
	left, _ := strconv.Atoi(st["pause-time-left"])
	if st["pause"] != "60" || left < 50 || left > 60 {
		t.Fatalf("stats-tube paused on the new leader: pause %s, time left %s; want 60 and most of it", st["pause"], st["pause-time-left"])
	}
	expectLine(t, worker, "watch paused", "WATCHING 2")
	expectLine(t, worker, "ignore default", "WATCHING 1")
	expectLine(t, worker, "reserve-with-timeout 0", "TIMED_OUT")
	expectLine(t, worker, "use gone", "USING gone")
	if st, err := worker.Stats("stats-tube gone"); err != nil || st["pause"] != "0" {
		t.Fatalf("stats-tube gone, made again after it was freed while paused: %v %v", st, err)
	}
}
