package member

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// TestClusterGroupFiguresAddUpToStats: with several groups, GET /cluster's
// groups' tubes and jobs (sproutctl groups' TUBES and JOBS columns) add
// up to what stats says of the queue: current-tubes counts the default
// tube once (router.SumStats), as the admin API lists it in its owner
// group only; /cluster counted it once per group. Found by a reviewing
// helper.
func TestClusterGroupFiguresAddUpToStats(t *testing.T) {
	c := newClusterOf(t, 3, 3, 3)
	c.finalized()
	p := c.up["m1"].shards.placement
	producer := testproc.DialTest(t, c.up["m2"].Addr().String(), replyTimeout)
	for _, tube := range tubePerGroup(p, "fig") {
		expectLine(t, producer, "use "+tube, "USING "+tube)
		if _, err := producer.Put(0, 0, 60, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	var last string
	ok := func() bool {
		st, err := producer.Stats("stats")
		if err != nil {
			t.Fatal(err)
		}
		tubes, _ := strconv.Atoi(st["current-tubes"])
		jobs, _ := strconv.Atoi(st["current-jobs-ready"])
		var cs replication.Status
		if err := json.Unmarshal(api(t, c.up["m1"], "/cluster").Body, &cs); err != nil {
			t.Fatal(err)
		}
		sumTubes, sumJobs := 0, int64(0)
		for _, g := range cs.Groups {
			sumTubes += g.Tubes
			sumJobs += g.Jobs
		}
		last = fmt.Sprintf("stats: current-tubes %d, jobs %d; /cluster's groups: tubes %d, jobs %d (%+v)",
			tubes, jobs, sumTubes, sumJobs, cs.Groups)
		return tubes == 4 && jobs == 3 && sumTubes == tubes && sumJobs == int64(jobs)
	}
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/cluster's groups do not add up to stats: %s", last)
		}
	}
}
