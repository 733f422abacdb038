package member

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// TestShardGroupsHandOverStays: a handover whose transfer does not happen
// leaves the leadership serving as before (a job its holder's session
// gave back by closing is handed out again), and voids the reservations
// it logged: a leader chosen later by an election, with nothing else
// logged between, does not give the job to the session that held it
// when the handover was tried, which is gone: the job is ready there, as
// after any failover, not held by a closed session until its TTR.
func TestShardGroupsHandOverStays(t *testing.T) {
	c := newShardedCluster(t, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	c.balanced()
	m1 := c.up["m1"]
	g := c.ledBy("m1")
	tube := tubePerGroup(p, "h")[g]
	producer := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, producer, "use "+tube, "USING "+tube)
	id, err := producer.Put(0, 0, 60, []byte("job"))
	if err != nil {
		t.Fatal(err)
	}
	holder := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	expectLine(t, holder, "watch "+tube, "WATCHING 2")
	if r, err := holder.Do("reserve-with-timeout 5", nil); err != nil || r.N != id {
		t.Fatalf("reserve: %+v %v, want job %d", r, err, id)
	}

	if err := m1.handOver(m1.shards.node(g), g, "nobody"); !errors.Is(err, replication.ErrUnknownMember) {
		t.Fatalf("a handover to nobody: %v", err)
	}
	if m1.shards.serving(g) == nil {
		t.Fatal("the leadership went")
	}
	holder.Close() // its reservation ends on m1, which logs nothing of it
	other := testproc.DialTest(t, c.up["m3"].Addr().String(), replyTimeout)
	expectLine(t, other, "watch "+tube, "WATCHING 2")
	if r, err := other.Do("reserve-with-timeout 5", nil); err != nil || r.N != id {
		t.Fatalf("reserve after the handover stayed: %+v %v, want job %d", r, err, id)
	}

	done, cancel := context.WithCancel(context.Background())
	cancel()
	m1.Shutdown(done) // at once: no handover
	delete(c.up, "m1")
	testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("group %d served again", g), func() bool {
		return c.up["m2"].shards.serving(g) != nil || c.up["m3"].shards.serving(g) != nil
	})
	if st, err := producer.Stats(fmt.Sprintf("stats-job %d", id)); err != nil || st["state"] != "ready" {
		t.Fatalf("stats-job %d after the election: %v %v, want it ready", id, st, err)
	}
}
