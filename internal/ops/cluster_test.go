package ops_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/replication"
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
