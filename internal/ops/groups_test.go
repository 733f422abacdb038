package ops_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// fakeGroups stands in for internal/member's groups: the groups led, as
// set.
type fakeGroups struct {
	mu      sync.Mutex
	led     []fakeGroup // guarded by mu
	waiting int64
}

type fakeGroup struct {
	id       uint16
	stats    store.Stats
	tubes    []store.TubeStats
	rebuilds uint64
}

func (g *fakeGroups) set(led ...fakeGroup) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.led = led
}

func (g *fakeGroups) EachLed(fn func(*ops.LedGroup)) {
	g.mu.Lock()
	led := slices.Clone(g.led)
	g.mu.Unlock()
	for _, l := range led {
		fn(&ops.LedGroup{ID: l.id, Stats: l.stats, Rebuilds: l.rebuilds, EachTube: func(fn func(*store.TubeStats)) {
			for i := range l.tubes {
				fn(&l.tubes[i])
			}
		}})
	}
}

func (g *fakeGroups) Waiting() int64 { return g.waiting }

// TestGroupsMetrics: with several groups, the queue's figures are those
// of the groups the member leads, each series labelled with its group,
// and no unlabelled one is left in those families (Prometheus' exposition
// would not have both); the member's own figures (connections, commands,
// current-waiting: its sessions') stay unlabelled.
func TestGroupsMetrics(t *testing.T) {
	e := newFakeEngine()
	e.stats.CurrentJobsReady, e.stats.TotalJobs, e.stats.CurrentConnections = 99, 99, 4 // group 0's store: not shown
	g := &fakeGroups{waiting: 2}
	g.set(
		fakeGroup{id: 1, stats: store.Stats{Ready: 3, Urgent: 1, Buried: 1, TotalJobs: 7, JobTimeouts: 1, Tubes: 2},
			tubes: []store.TubeStats{{Name: "a", Ready: 3, Urgent: 1, TotalJobs: 5}, {Name: "b", Buried: 1, TotalJobs: 2, CmdDelete: 1}}},
		fakeGroup{id: 4, stats: store.Stats{Reserved: 2, TotalJobs: 2, Tubes: 1},
			tubes: []store.TubeStats{{Name: "c", Reserved: 2, TotalJobs: 2}}},
	)
	logged := wal.Stats{OldestIndex: 3, CurrentIndex: 5, DiskBytes: 1 << 20}
	base := startOps(t, ops.Config{Engine: e, Store: &fakeStore{log: &wal.Stats{}}, Cluster: &fakeCluster{}, Groups: g,
		Log: func() wal.Stats { return logged }, TubeSeries: 1})
	f := scrape(t, base, acceptText)
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"sprout_current_jobs", "group=1,state=ready", 3},
		{"sprout_current_jobs", "group=1,state=buried", 1},
		{"sprout_current_jobs", "group=4,state=reserved", 2},
		{"sprout_current_jobs_urgent", "group=1", 1},
		{"sprout_jobs_total", "group=1", 7},
		{"sprout_jobs_total", "group=4", 2},
		{"sprout_job_timeouts_total", "group=1", 1},
		{"sprout_current_tubes", "group=1", 2},
		{"sprout_current_tubes", "group=4", 1},
		{"sprout_tube_current_jobs", "group=1,state=ready,tube=a", 3},
		{"sprout_tube_jobs_total", "group=1,tube=a", 5},
		{"sprout_tube_jobs_total", "group=1,tube=" + ops.OtherTube, 2}, // b, past the cap of 1
		{"sprout_tube_deletes_total", "group=1,tube=" + ops.OtherTube, 1},
		{"sprout_other_tubes", "group=1", 1},
		{"sprout_tube_jobs_total", "group=4,tube=c", 2},
		{"sprout_other_tubes", "group=4", 0},
		{"sprout_current_connections", "", 4},
		{"sprout_current_waiting", "", 2},
		{"sprout_binlog_oldest_index", "", 3},
		{"sprout_binlog_current_index", "", 5},
		{"sprout_binlog_disk_bytes", "", 1 << 20},
	} {
		if v, ok := f.value(c.name, c.labels); !ok || v != c.want {
			t.Errorf("%s{%s} = %v (present %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	for _, name := range []string{"sprout_current_jobs", "sprout_current_jobs_urgent", "sprout_jobs_total", "sprout_job_timeouts_total",
		"sprout_current_tubes", "sprout_other_tubes", "sprout_tube_current_jobs", "sprout_tube_jobs_total", "sprout_tube_deletes_total",
		"sprout_tube_current_watching", "sprout_tube_paused"} {
		mf := f[name]
		if mf == nil {
			t.Errorf("%s: no series", name)
			continue
		}
		for _, m := range mf.GetMetric() {
			if !strings.Contains(labels(m), "group=") {
				t.Errorf("%s{%s}: a series without a group label", name, labels(m))
			}
		}
	}
	if got := f.labelValues("sprout_jobs_total", "group"); !slices.Equal(got, []string{"1", "4"}) {
		t.Errorf("sprout_jobs_total's groups %v, want the groups led, 1 and 4", got)
	}
}

// TestGroupsCountersKept: a group's counters on a member go on from where
// they stopped when the member leads the group again: its series
// vanished meanwhile, the store's figures that come back (rebuilt from
// a thinned log, or gained under another leader, whose series counted
// that) add nothing; a rebuild while leading adds nothing either.
func TestGroupsCountersKept(t *testing.T) {
	g := &fakeGroups{}
	base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Cluster: &fakeCluster{}, Groups: g})
	group := func(jobs, tubeJobs, rebuilds uint64) fakeGroup {
		return fakeGroup{id: 2, stats: store.Stats{TotalJobs: int64(jobs)}, rebuilds: rebuilds,
			tubes: []store.TubeStats{{Name: "t", TotalJobs: tubeJobs}}}
	}
	for _, step := range []struct {
		name string
		led  []fakeGroup
		want [2]float64 // jobs, t's jobs; -1: no series
	}{
		{"first", []fakeGroup{group(10, 6, 0)}, [2]float64{10, 6}},
		{"gained", []fakeGroup{group(13, 8, 0)}, [2]float64{13, 8}},
		{"led elsewhere", nil, [2]float64{-1, -1}},
		{"led again, rebuilt lower", []fakeGroup{group(5, 2, 1)}, [2]float64{13, 8}},
		{"gained again", []fakeGroup{group(7, 3, 1)}, [2]float64{15, 9}},
		{"led elsewhere again", nil, [2]float64{-1, -1}},
		{"led again, higher, same rebuilds", []fakeGroup{group(40, 30, 1)}, [2]float64{15, 9}},
		{"gained", []fakeGroup{group(41, 31, 1)}, [2]float64{16, 10}},
	} {
		g.set(step.led...)
		f := scrape(t, base, acceptText)
		got := [2]float64{-1, -1}
		if v, ok := f.value("sprout_jobs_total", "group=2"); ok {
			got[0] = v
		}
		if v, ok := f.value("sprout_tube_jobs_total", "group=2,tube=t"); ok {
			got[1] = v
		}
		if got != step.want {
			t.Errorf("%s: jobs, t's jobs %v, want %v", step.name, got, step.want)
		}
	}
}

// TestGroupFigureNeverBelowZero: the member's figures of a group are its
// store's less a moving tube's (read after) and the default tube's; one
// that comes out below 0 for an instant (a batch imported into a staged
// tube between the two reads, a staged tube made between them) is
// exported as 0. It was 2^64 less.
func TestGroupFigureNeverBelowZero(t *testing.T) {
	g := &fakeGroups{}
	g.set(fakeGroup{id: 3, stats: store.Stats{Ready: -2, Tubes: -1}})
	base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Cluster: &fakeCluster{}, Groups: g})
	f := scrape(t, base, acceptText)
	for _, c := range []struct{ name, labels string }{
		{"sprout_current_jobs", "group=3,state=ready"},
		{"sprout_current_tubes", "group=3"},
	} {
		if v, _ := f.value(c.name, c.labels); v > 1e18 {
			t.Errorf("%s{%s} = %g", c.name, c.labels, v)
		}
	}
}

// racyGroup is a group whose store is emptied by a rebuild after EachLed
// read its rebuilds (0) and before collectTubes walks its tubes.
type racyGroup struct {
	mu       sync.Mutex
	led      bool
	rebuilds uint64
	tubes    []store.TubeStats // what EachLed's Stats see
	walk     []store.TubeStats // what EachTube walks
	lost     bool              // the leadership was lost during the walk
}

func (r *racyGroup) EachLed(fn func(*ops.LedGroup)) {
	r.mu.Lock()
	led, rebuilds, walk, lost := r.led, r.rebuilds, r.walk, r.lost
	r.mu.Unlock()
	if !led {
		return
	}
	fn(&ops.LedGroup{ID: 1, Rebuilds: rebuilds, EachTube: func(fn func(*store.TubeStats)) {
		for i := range walk {
			fn(&walk[i])
		}
	}, Served: func() bool { return !lost }})
}

// TestTubeCounterKeptThroughRebuildRace: a scrape that walks the tubes
// of a store a rebuild has just emptied (the rebuilds read before,
// unchanged) takes nothing of the group: before, it forgot the tubes
// missing, and when the member led the group again each was "seen for
// the first time" and its counter reported at its rebuilt (thinned)
// figure, lower.
func TestTubeCounterKeptThroughRebuildRace(t *testing.T) {
	r := &racyGroup{}
	base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Cluster: &fakeCluster{}, Groups: r})
	read := func() float64 {
		v, ok := scrape(t, base, acceptText).value("sprout_tube_jobs_total", "group=1,tube=t")
		if !ok {
			return -1
		}
		return v
	}
	set := func(led bool, rebuilds, jobs uint64, walkEmpty bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.led, r.rebuilds, r.lost = led, rebuilds, walkEmpty
		r.walk = []store.TubeStats{{Name: "t", TotalJobs: jobs}}
		if walkEmpty {
			r.walk = nil
		}
	}
	set(true, 0, 10, false)
	read()
	set(true, 0, 12, false)
	before := read()
	set(true, 0, 0, true) // the rebuild began after Rebuilds was read
	read()
	set(false, 1, 0, false) // led elsewhere
	read()
	set(true, 1, 3, false) // led again: the log was thinned
	if after := read(); after < before {
		t.Errorf("sprout_tube_jobs_total{group=1,tube=t} went from %v to %v", before, after)
	}
}
