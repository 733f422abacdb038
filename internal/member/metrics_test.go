package member

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// metric is the value of the series (a name with its labels, as the
// text format writes them) in m's /metrics; false if it has none.
func metric(t *testing.T, m *Member, series string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(string(api(t, m, "/metrics").Body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestClusterMetricsCountersMonotonic: a member's /metrics counters of the
// queue never go down when it loses the leadership and its store is
// rebuilt from the log (emptied, every count cleared, and filled again
// from what the log still holds): Prometheus would read each drop as a
// counter reset and count the whole figure again. Found by a reviewing
// helper: job-timeouts, counted only where the reservation ran out, went
// back to 0.
func TestClusterMetricsCountersMonotonic(t *testing.T) {
	c := newTestCluster(t)
	lname, l := c.serving(20 * time.Second)
	client := testproc.DialTest(t, l.Addr().String(), replyTimeout)
	if err := client.ExpectLine("use t", "USING t"); err != nil {
		t.Fatal(err)
	}
	if err := client.ExpectLine("watch t", "WATCHING 2"); err != nil {
		t.Fatal(err)
	}
	// Jobs put and deleted over a few of the log's 1 MiB segments, which
	// its compaction then removes.
	body := []byte(strings.Repeat("b", 32<<10))
	for range 100 {
		id, err := client.Put(0, 0, 60, body)
		if err != nil {
			t.Fatal(err)
		}
		if err := client.ExpectLine("delete "+strconv.FormatUint(id, 10), "DELETED"); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := client.Put(0, 0, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := client.Do("reserve-with-timeout 5", nil); err != nil || r.N == 0 {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	// Its ttr of 1 s runs out: a timeout, counted on the leader alone.
	testproc.WaitFor(t, 10*time.Second, "the reservation timing out", func() bool {
		return l.Store().Stats().JobTimeouts == 1
	})
	series := []string{
		"sprout_jobs_total", "sprout_job_timeouts_total", `sprout_commands_total{command="put"}`,
		`sprout_tube_jobs_total{tube="t"}`, `sprout_tube_deletes_total{tube="t"}`,
	}
	if r, err := client.Do("reserve-with-timeout 5", nil); err != nil || r.N == 0 {
		t.Fatalf("reserve: %+v %v", r, err)
	} else if err := client.ExpectLine("delete "+strconv.FormatUint(r.N, 10), "DELETED"); err != nil {
		t.Fatal(err)
	}
	before := map[string]float64{}
	for _, s := range series {
		v, ok := metric(t, l, s)
		if !ok || v == 0 {
			t.Fatalf("the leader's /metrics: %s %v (present %v), want above 0", s, v, ok)
		}
		before[s] = v
	}
	rebuilds := l.Node().Stats().Rebuilds
	to := c.others(lname)[0]
	testproc.WaitFor(t, 10*time.Second, "the leadership moving to "+to.Node().Name(), func() bool {
		if err := l.Node().TransferLeadership(to.Node().Name()); err != nil {
			t.Fatal(err)
		}
		info, _ := to.Node().Leader()
		return info.Serving && info.Name == to.Node().Name()
	})
	testproc.WaitFor(t, 10*time.Second, "the old leader rebuilt", func() bool {
		st := l.Node().Stats()
		return st.Rebuilds > rebuilds && st.LastRebuild > 0 && l.Store().Stats().Ready == 2
	})
	for _, s := range series {
		if v, _ := metric(t, l, s); v < before[s] {
			t.Errorf("the old leader's %s went from %v to %v when its store was rebuilt", s, before[s], v)
		}
	}
}

// metrics are the series of m's /metrics (a name with its labels, as the
// text format writes them) and their values.
func metrics(t *testing.T, m *Member) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(string(api(t, m, "/metrics").Body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		f, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out[line[:i]] = f
	}
	return out
}

// TestShardGroupsMetricsByGroup: with several groups, each member's
// /metrics has the queue's figures of the groups it leads, labelled with
// the group, and none of the others': summed over the members they are
// what stats shows. Each group's jobs were in no member's series but
// group 0's leader's (every member exported its replica of group 0).
func TestShardGroupsMetricsByGroup(t *testing.T) {
	c := newBalancedCluster(t)
	p := c.up["m1"].shards.placement
	tubes := tubePerGroup(p, "mg")
	producer := testproc.DialTest(t, c.up["m1"].Addr().String(), replyTimeout)
	// Group g's tube gets g+1 jobs; one of group 2's is buried.
	for g, tube := range tubes {
		expectLine(t, producer, "use "+tube, "USING "+tube)
		for range g + 1 {
			if _, err := producer.Put(5, 0, 60, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	expectLine(t, producer, "watch "+tubes[2], "WATCHING 2")
	expectLine(t, producer, "ignore default", "WATCHING 1")
	r, err := producer.Do("reserve-with-timeout 0", nil)
	if err != nil || r.Kind != testproc.ReplyReserved {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	expectLine(t, producer, fmt.Sprintf("bury %d 0", r.N), "BURIED")

	var last string
	ok := func() bool {
		want, err := producer.StatsInt("stats", "current-jobs-ready", "current-jobs-buried", "current-jobs-urgent", "total-jobs", "current-tubes")
		if err != nil {
			t.Fatal(err)
		}
		var sum [5]float64
		lines := []string{}
		for g, tube := range tubes {
			group := strconv.Itoa(g)
			leaders := 0
			for _, name := range []string{"m1", "m2", "m3"} {
				m := c.up[name]
				series := metrics(t, m)
				v, has := series[`sprout_jobs_total{group="`+group+`"}`]
				leads := m.shards.serving(uint16(g)) != nil
				if has != leads {
					last = fmt.Sprintf("%s: leads group %d %v, has its series %v", name, g, leads, has)
					return false
				}
				if !has {
					continue
				}
				leaders++
				sum[0] += series[`sprout_current_jobs{group="`+group+`",state="ready"}`]
				sum[1] += series[`sprout_current_jobs{group="`+group+`",state="buried"}`]
				sum[2] += series[`sprout_current_jobs_urgent{group="`+group+`"}`]
				sum[3] += v
				sum[4] += series[`sprout_current_tubes{group="`+group+`"}`]
				ready := series[`sprout_tube_current_jobs{group="`+group+`",state="ready",tube="`+tube+`"}`]
				lines = append(lines, fmt.Sprintf("%s: group %d, tube %s ready %v", name, g, tube, ready))
				if wantReady := float64(g + 1 - g/2); ready != wantReady {
					last = fmt.Sprintf("%s: tube %s of group %d has %v ready, want %v", name, tube, g, ready, wantReady)
					return false
				}
				for s := range series {
					if strings.HasPrefix(s, "sprout_current_jobs{state=") || s == "sprout_jobs_total" {
						t.Fatalf("%s: %s, a queue series without a group label", name, s)
					}
				}
			}
			if leaders != 1 {
				last = fmt.Sprintf("group %d: %d members export its series", g, leaders)
				return false
			}
		}
		got := []int64{int64(sum[0]), int64(sum[1]), int64(sum[2]), int64(sum[3]), int64(sum[4])}
		last = fmt.Sprintf("the leaders' series summed: ready, buried, urgent, total-jobs, current-tubes %v; stats %v (%v)", got, want, lines)
		return slices.Equal(got, want) && slices.Equal(want, []int64{5, 1, 5, 6, 4})
	}
	for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the groups' series do not add up to stats: %s", last)
		}
	}
}

// TestClusterMetricsOneGroup: with one group (the default) every member
// exports its replica's queue figures, unlabelled, as before several
// groups had series of their own; and the sprout_binlog_* series are the
// member's log's, which they were not: a cluster member's store has a
// journal, whose figures had no segments and no bytes (all 0).
func TestClusterMetricsOneGroup(t *testing.T) {
	c := newTestCluster(t)
	_, l := c.serving(20 * time.Second)
	client := testproc.DialTest(t, l.Addr().String(), replyTimeout)
	for range 2 {
		if _, err := client.Put(0, 0, 60, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range c.up {
		var last map[string]float64
		testproc.WaitFor(t, 10*time.Second, m.Node().Name()+"'s unlabelled figures of its replica", func() bool {
			last = metrics(t, m)
			return last[`sprout_current_jobs{state="ready"}`] == 2 && last["sprout_jobs_total"] == 2 &&
				last[`sprout_tube_current_jobs{state="ready",tube="default"}`] == 2 && last["sprout_current_tubes"] == 1
		})
		for s := range last {
			if strings.Contains(s, "group=") && !strings.HasPrefix(s, "sprout_cluster_group_") {
				t.Errorf("%s: %s, a group label with one group", m.Node().Name(), s)
			}
		}
		for _, s := range []string{"sprout_binlog_current_index", "sprout_binlog_oldest_index", "sprout_binlog_disk_bytes",
			"sprout_binlog_live_bytes", "sprout_binlog_max_size_bytes", "sprout_binlog_records_written_total"} {
			if last[s] <= 0 {
				t.Errorf("%s: %s %v, want the log's figure, above 0", m.Node().Name(), s, last[s])
			}
		}
		// stats' binlog lines are the same log's.
		conn := testproc.DialTest(t, m.Addr().String(), replyTimeout)
		got, err := conn.StatsInt("stats", "binlog-current-index", "binlog-oldest-index")
		if err != nil || got[0] <= 0 || got[1] <= 0 {
			t.Errorf("%s: stats binlog-current-index, binlog-oldest-index %v (%v), want the log's, above 0", m.Node().Name(), got, err)
		}
	}
}

// queueSums scrapes every member's /metrics, without t (it runs on a
// handler's goroutine), and sums the groups' series of the queue: jobs
// by state and tubes, and the series of tube by group.
func queueSums(members map[string]*Member, tube string) (jobs map[string]float64, tubes float64, tubeGroups []string, err error) {
	jobs = map[string]float64{}
	for _, m := range members {
		resp, err := http.Get("http://" + m.HTTPAddr().String() + "/metrics")
		if err != nil {
			return nil, 0, nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, 0, nil, err
		}
		for _, line := range strings.Split(string(body), "\n") {
			i := strings.LastIndexByte(line, ' ')
			if line == "" || line[0] == '#' || i < 0 {
				continue
			}
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				return nil, 0, nil, fmt.Errorf("%s: %v", line, err)
			}
			series := line[:i]
			switch {
			case strings.HasPrefix(series, "sprout_current_jobs{"):
				jobs[series[strings.Index(series, "state="):]] += v
			case strings.HasPrefix(series, "sprout_current_tubes{"):
				tubes += v
			case strings.HasPrefix(series, "sprout_tube_jobs_total{") && strings.HasSuffix(series, `tube="`+tube+`"}`):
				tubeGroups = append(tubeGroups, series)
			}
		}
	}
	return jobs, tubes, tubeGroups, nil
}

// TestShardGroupsMetricsMoveCountedOnce: while a tube moves between
// groups its jobs are in both, and the groups' series count them once,
// as stats does: in the group the tube routes to, the other's copy having
// no series.
func TestShardGroupsMetricsMoveCountedOnce(t *testing.T) {
	c, tube, _ := clusterWithCountedTube(t)
	var (
		duringJobs          map[string]float64
		duringTubes         float64
		duringSeries        []string
		duringErr           error
		adoptedAtTheScrapes bool
	)
	c.moveToGroup2WhileAdopted(tube, func() {
		duringJobs, duringTubes, duringSeries, duringErr = queueSums(c.up, tube)
		for _, m := range c.up {
			if m.shards.serving(2) != nil {
				adoptedAtTheScrapes = m.shards.node(2).Tubes().Adopted[tube] != 0
			}
		}
	})
	if duringErr != nil || duringJobs == nil || !adoptedAtTheScrapes {
		t.Fatalf("the scrapes while group 2 held the tube's copy: %v (scraped %v, still adopted %v)", duringErr, duringJobs != nil, adoptedAtTheScrapes)
	}
	if duringJobs[`state="ready"}`] != 3 || duringJobs[`state="delayed"}`] != 1 || duringTubes != 2 || len(duringSeries) != 1 {
		t.Fatalf("the members' series while both groups held the tube's jobs: jobs %v, tubes %v, the tube's %v; want 3 ready, 1 delayed, 2 tubes, one group's series",
			duringJobs, duringTubes, duringSeries)
	}
	testproc.WaitFor(t, 10*time.Second, "the tube's series in group 2", func() bool {
		jobs, tubes, series, err := queueSums(c.up, tube)
		if err != nil {
			t.Fatal(err)
		}
		return jobs[`state="ready"}`] == 3 && tubes == 2 && len(series) == 1 && strings.Contains(series[0], `group="2"`)
	})
}
