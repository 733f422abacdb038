package member

import (
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
	}
}
