package ops_test

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store"
)

// fakeCluster stands in for *replication.Node.
type fakeCluster struct {
	ready  atomic.Bool
	status replication.Status
	stats  replication.Stats
}

func (c *fakeCluster) Status() replication.Status { return c.status }
func (c *fakeCluster) Ready() bool                { return c.ready.Load() }
func (c *fakeCluster) Stats() replication.Stats   { return c.stats }
func (c *fakeCluster) Digest() (int, string)      { return 2, "d1ge57" }

type fakeProxy struct{ stats replication.ProxyStats }

func (p *fakeProxy) Stats() replication.ProxyStats { return p.stats }

// TestCluster: GET /cluster is the member's Status; /readyz waits for
// the member's Ready; /metrics has the member's and the proxy's figures
// and the sizes of proposals.
func TestCluster(t *testing.T) {
	match := uint64(41)
	c := &fakeCluster{
		status: replication.Status{Node: "a", Leader: "b", Term: 7, State: "follower", Commit: 40, Applied: 39, Jobs: 5,
			Members: []replication.MemberStatus{
				{Name: "a", Address: "10.0.0.1:7000", Connected: true},
				{Name: "b", Address: "10.0.0.2:7000", Connected: true, Match: &match},
				{Name: "c", Address: "10.0.0.3:7000"},
			}},
		stats: replication.Stats{Term: 7, Commit: 40, Applied: 39, LeaderChanges: 3, Proposals: 5, ProposedBytes: 900,
			Rebuilds: 2, LastRebuild: 1500 * time.Millisecond,
			FollowerLag: map[string]uint64{"b": 0, "c": 12},
			Transport: replication.TransportStats{MessagesSent: 100, SnapshotsSent: 1, TLSRefused: 2,
				ItemsFramesSent: 3, ItemsBytesReceived: 700, ItemsDropped: 4, ItemsLost: 5},
			Groups: []replication.GroupStats{
				{Group: 0, Stats: replication.Stats{Term: 7, Commit: 40, Applied: 39, LeaderChanges: 3, Proposals: 5, MigrateAsked: 11}},
				{Group: 1, Stats: replication.Stats{Term: 2, Commit: 9, Applied: 9, Serving: true, LeaderChanges: 1, Proposals: 4,
					MigrateRewritten: 6, Stalls: 2, SlowRounds: 1, FollowerLag: map[string]uint64{"b": 1, "c": 3}}},
			}},
	}
	p := &fakeProxy{stats: replication.ProxyStats{Current: 4, Total: 9, LeaderChanged: 2}}
	m := ops.NewMetrics()
	m.ObserveProposal(300, 3)
	base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Metrics: m, Cluster: c, Proxy: p})

	code, body := get(t, base+"/cluster")
	if code != 200 {
		t.Fatalf("/cluster: %d %s", code, body)
	}
	var got struct {
		Node, Leader    string
		Term            uint64
		Commit, Applied uint64
		Jobs            int
		Digest          string
		Members         []struct {
			Name, Address string
			Match         *uint64
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/cluster: %v\n%s", err, body)
	}
	if got.Node != "a" || got.Leader != "b" || got.Term != 7 || got.Commit != 40 || got.Applied != 39 ||
		len(got.Members) != 3 || got.Members[1].Match == nil || *got.Members[1].Match != 41 || got.Members[0].Match != nil ||
		got.Jobs != 5 || got.Digest != "" {
		t.Errorf("/cluster: %s", body)
	}
	// The digest walks every job: only when asked for.
	if _, body = get(t, base+"/cluster?digest=1"); json.Unmarshal([]byte(body), &got) != nil || got.Jobs != 2 || got.Digest != "d1ge57" {
		t.Errorf("/cluster?digest=1: %s", body)
	}

	if code, body := get(t, base+"/readyz"); code != 503 {
		t.Errorf("/readyz with the member not ready: %d %q", code, body)
	}
	c.ready.Store(true)
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz with the member ready: %d %q", code, body)
	}

	f := scrape(t, base, acceptText)
	for _, want := range []struct {
		name, labels string
		value        float64
	}{
		{"sprout_cluster_term", "", 7},
		{"sprout_cluster_leader_changes_total", "", 3},
		{"sprout_cluster_commit_index", "", 40},
		{"sprout_cluster_applied_index", "", 39},
		{"sprout_cluster_follower_lag_entries", "member=c", 12},
		{"sprout_cluster_member_connected", "member=c", 0},
		{"sprout_cluster_member_connected", "member=b", 1},
		{"sprout_cluster_proposals_total", "", 5},
		{"sprout_cluster_proposal_bytes", "", 1},
		{"sprout_cluster_proposal_records", "", 1},
		{"sprout_cluster_snapshots_sent_total", "", 1},
		{"sprout_cluster_membership_changes_total", "", 0},
		{"sprout_cluster_rebuilds_total", "", 2},
		{"sprout_cluster_last_rebuild_seconds", "", 1.5},
		{"sprout_cluster_messages_sent_total", "", 100},
		{"sprout_cluster_peer_tls_refused_total", "", 2},
		{"sprout_cluster_items_frames_sent_total", "", 3},
		{"sprout_cluster_items_frames_received_total", "", 0},
		{"sprout_cluster_items_bytes_received_total", "", 700},
		{"sprout_cluster_items_dropped_total", "", 4},
		{"sprout_cluster_items_lost_total", "", 5},
		{"sprout_cluster_proxied_connections", "", 4},
		{"sprout_cluster_proxied_connections_total", "", 9},
		{"sprout_cluster_proxy_leader_changed_total", "", 2},
		{"sprout_build_info", "version=" + testVersion, 1},
		{"sprout_cluster_group_term", "group=0", 7},
		{"sprout_cluster_group_commit_index", "group=1", 9},
		{"sprout_cluster_group_applied_index", "group=0", 39},
		{"sprout_cluster_group_leading", "group=0", 0},
		{"sprout_cluster_group_leading", "group=1", 1},
		{"sprout_cluster_group_leader_changes_total", "group=1", 1},
		{"sprout_cluster_group_proposals_total", "group=1", 4},
		{"sprout_cluster_group_migrate_asked_total", "group=0", 11},
		{"sprout_cluster_group_migrate_rewritten_total", "group=1", 6},
		{"sprout_cluster_group_stalls_total", "group=1", 2},
		{"sprout_cluster_group_slow_rounds_total", "group=1", 1},
		{"sprout_cluster_group_stalls_total", "group=0", 0},
		{"sprout_cluster_group_follower_lag_entries", "group=1,member=c", 3},
		{"sprout_member_groups_led", "", 1},
	} {
		if v, ok := f.value(want.name, want.labels); !ok || v != want.value {
			t.Errorf("%s{%s} = %v (present %v), want %v", want.name, want.labels, v, ok, want.value)
		}
	}
}

// movingCluster is a fakeCluster of several groups whose replicas move.
type movingCluster struct {
	*fakeCluster
	moves ops.ReplicaMoves
}

func (c movingCluster) ReplicaMoves() ops.ReplicaMoves { return c.moves }

// TestReplicaMovesMetric: a member whose groups' replicas move counts the
// moves it made by who planned them; a cluster that moves none (one
// group) has no such metric.
func TestReplicaMovesMetric(t *testing.T) {
	c := movingCluster{&fakeCluster{}, ops.ReplicaMoves{Planned: 2, Asked: 5, Alone: 1}}
	base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Metrics: ops.NewMetrics(), Cluster: c})
	f := scrape(t, base, acceptText)
	for by, want := range map[string]float64{"self_leading_group_0": 2, "group_0_leader": 5, "self_alone": 1} {
		if v, ok := f.value("sprout_member_replica_moves_total", "planned_by="+by); !ok || v != want {
			t.Errorf("sprout_member_replica_moves_total{planned_by=%s} = %v (present %v), want %v", by, v, ok, want)
		}
	}
	base = startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Metrics: ops.NewMetrics(), Cluster: &fakeCluster{}})
	if _, ok := scrape(t, base, acceptText)["sprout_member_replica_moves_total"]; ok {
		t.Error("sprout_member_replica_moves_total from a cluster whose replicas do not move")
	}
}

// Without a cluster there is no /cluster and no cluster metric.
func TestNoCluster(t *testing.T) {
	base := startOps(t, ops.Config{Engine: newFakeEngine(), Store: &fakeStore{}, Metrics: ops.NewMetrics()})
	if code, _ := get(t, base+"/cluster"); code != 404 {
		t.Errorf("/cluster without a cluster: %d", code)
	}
	for name := range scrape(t, base, acceptText) {
		if strings.HasPrefix(name, "sprout_cluster") {
			t.Errorf("%s without a cluster", name)
		}
	}
}

// rebuildingCluster is a fakeCluster whose rebuild figures change
// between scrapes.
type rebuildingCluster struct {
	fakeCluster
	mu         sync.Mutex
	rebuilds   uint64
	rebuilding bool
}

func (c *rebuildingCluster) set(rebuilds uint64, rebuilding bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rebuilds, c.rebuilding = rebuilds, rebuilding
}

func (c *rebuildingCluster) Stats() replication.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return replication.Stats{Rebuilds: c.rebuilds, Rebuilding: c.rebuilding}
}

// lockedEngine is a fakeEngine whose stats change between scrapes.
type lockedEngine struct {
	*fakeEngine
	mu sync.Mutex
}

func (e *lockedEngine) set(jobs, timeouts uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.TotalJobs, e.stats.JobTimeouts = jobs, timeouts
}

func (e *lockedEngine) Stats() codec.ServerStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fakeEngine.Stats()
}

// TestClusterCountersKeptAcrossRebuild: a cluster member's counters of
// the queue never go down when its store is emptied and filled again from
// its log (a lost leadership's rebuild), nor count again what the rebuild
// replays, even read part way through it; between rebuilds they gain what
// the store's figures gain. Found by a reviewing helper: they were the
// store's figures, which a rebuild restarts.
func TestClusterCountersKeptAcrossRebuild(t *testing.T) {
	c := &rebuildingCluster{}
	e := &lockedEngine{fakeEngine: newFakeEngine()}
	st := &fakeStore{}
	base := startOps(t, ops.Config{Engine: e, Store: st, Cluster: c, TubeSeries: 1})
	tube := func(name string, jobs, deletes uint64) store.TubeStats {
		return store.TubeStats{Name: name, TotalJobs: jobs, CmdDelete: deletes}
	}
	for _, step := range []struct {
		name           string
		rebuilds       uint64
		rebuilding     bool
		jobs, timeouts uint64
		tubes          []store.TubeStats
		want           [6]float64 // jobs, timeouts, default's jobs and deletes, <other>'s jobs and deletes
	}{
		{"first", 0, false, 10, 2, []store.TubeStats{tube("default", 10, 4), tube("a", 5, 1)}, [6]float64{10, 2, 10, 4, 5, 1}},
		{"gained", 0, false, 12, 3, []store.TubeStats{tube("default", 12, 5), tube("a", 6, 1)}, [6]float64{12, 3, 12, 5, 6, 1}},
		{"emptied for a rebuild", 1, true, 0, 0, []store.TubeStats{tube("default", 0, 0)}, [6]float64{12, 3, 12, 5, 6, 1}},
		{"part replayed", 1, true, 4, 0, []store.TubeStats{tube("default", 4, 1), tube("a", 2, 0)}, [6]float64{12, 3, 12, 5, 6, 1}},
		{"rebuilt", 1, false, 9, 0, []store.TubeStats{tube("default", 9, 3), tube("a", 5, 1)}, [6]float64{12, 3, 12, 5, 6, 1}},
		{"gained again", 1, false, 11, 1, []store.TubeStats{tube("default", 11, 4), tube("a", 6, 2)}, [6]float64{14, 4, 14, 6, 7, 2}},
		{"rebuilt between scrapes, a freed", 2, false, 3, 0, []store.TubeStats{tube("default", 3, 0)}, [6]float64{14, 4, 14, 6, 7, 2}},
		{"a made again", 2, false, 4, 0, []store.TubeStats{tube("default", 4, 0), tube("a", 1, 0)}, [6]float64{15, 4, 15, 6, 8, 2}},
	} {
		c.set(step.rebuilds, step.rebuilding)
		e.set(step.jobs, step.timeouts)
		st.setTubes(step.tubes...)
		fams := scrape(t, base, acceptText)
		var got [6]float64
		got[0], _ = fams.value("sprout_jobs_total", "")
		got[1], _ = fams.value("sprout_job_timeouts_total", "")
		got[2], _ = fams.value("sprout_tube_jobs_total", "tube=default")
		got[3], _ = fams.value("sprout_tube_deletes_total", "tube=default")
		got[4], _ = fams.value("sprout_tube_jobs_total", "tube="+ops.OtherTube)
		got[5], _ = fams.value("sprout_tube_deletes_total", "tube="+ops.OtherTube)
		if got != step.want {
			t.Errorf("%s: jobs, timeouts, default's, <other>'s: %v, want %v", step.name, got, step.want)
		}
	}
}

// pausingEngine is a lockedEngine whose next Stats, once armed, reads the
// figures and then waits for resume before returning them.
type pausingEngine struct {
	lockedEngine
	armed          atomic.Bool
	paused, resume chan struct{}
}

func (e *pausingEngine) Stats() codec.ServerStats {
	st := e.lockedEngine.Stats()
	if e.armed.CompareAndSwap(true, false) {
		e.paused <- struct{}{}
		<-e.resume
	}
	return st
}

// TestClusterCountersTwoScrapesAtOnce: two scrapes at once of a
// single-group member count what the queue's counters gained once. The
// figures were read before the scrape took its turn, so a scrape that
// read them first and took its turn last set the counters' last figure
// back, and the next scrape counted the difference again.
func TestClusterCountersTwoScrapesAtOnce(t *testing.T) {
	e := &pausingEngine{lockedEngine: lockedEngine{fakeEngine: newFakeEngine()},
		paused: make(chan struct{}), resume: make(chan struct{})}
	base := startOps(t, ops.Config{Engine: e, Store: &fakeStore{}, Cluster: &rebuildingCluster{}})
	jobs := func() float64 {
		v, _ := scrape(t, base, acceptText).value("sprout_jobs_total", "")
		return v
	}
	e.set(10, 0)
	jobs()
	e.set(20, 0)
	e.armed.Store(true)
	first := make(chan struct{})
	go func() {
		defer close(first)
		jobs() // reads 20, then waits
	}()
	<-e.paused
	e.set(30, 0)
	second := make(chan struct{})
	go func() {
		defer close(second)
		jobs() // reads 30
	}()
	time.Sleep(100 * time.Millisecond) // the second scrape done, or waiting for the first
	close(e.resume)
	<-first
	<-second
	if got := jobs(); got != 30 {
		t.Fatalf("sprout_jobs_total %v after two scrapes at once, want 30", got)
	}
}

// walkingStore is a fakeStore that calls during as it walks its tubes,
// after the first.
type walkingStore struct {
	*fakeStore
	during func()
}

func (s *walkingStore) EachTube(fn func(st *store.TubeStats)) {
	n := 0
	s.fakeStore.EachTube(func(st *store.TubeStats) {
		if n++; n == 2 && s.during != nil {
			s.during()
		}
		fn(st)
	})
}

// TestTubeCounterKeptWhenRebuiltDuringWalk: a rebuild that begins while a
// scrape walks the tubes, after it read the member's rebuilds, empties
// the store under the walk: the tubes the walk then misses are not
// forgotten, and once rebuilt their counters go on from what they were.
// Before, each was "seen for the first time" afterwards and reported at
// its rebuilt (thinned) figure, lower.
func TestTubeCounterKeptWhenRebuiltDuringWalk(t *testing.T) {
	c := &rebuildingCluster{}
	st := &walkingStore{fakeStore: &fakeStore{}}
	base := startOps(t, ops.Config{Engine: &lockedEngine{fakeEngine: newFakeEngine()}, Store: st, Cluster: c})
	read := func() float64 {
		v, _ := scrape(t, base, acceptText).value("sprout_tube_jobs_total", "tube=b")
		return v
	}
	st.setTubes(store.TubeStats{Name: "a", TotalJobs: 1}, store.TubeStats{Name: "b", TotalJobs: 12})
	if got := read(); got != 12 {
		t.Fatalf("b's jobs %v, want 12", got)
	}
	// The rebuild begins as the walk reaches its second tube, which is
	// gone from the walk by then.
	st.during = func() {
		c.set(1, true)
		st.setTubes(store.TubeStats{Name: "a", TotalJobs: 1})
	}
	st.setTubes(store.TubeStats{Name: "a", TotalJobs: 1}, store.TubeStats{Name: "c", TotalJobs: 1})
	read()
	st.during = nil
	c.set(1, false)
	st.setTubes(store.TubeStats{Name: "a", TotalJobs: 1}, store.TubeStats{Name: "b", TotalJobs: 3}) // rebuilt, thinned
	read()
	if got := read(); got < 12 {
		t.Errorf("b's jobs %v after a rebuild during a scrape's walk, want at least the 12 it had", got)
	}
}
