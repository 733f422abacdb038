package ops

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/router"
)

// Cluster is what the side port reads of a cluster member;
// *replication.Node has it.
type Cluster interface {
	// Status is GET /cluster's body.
	Status() replication.Status
	// Ready is what /readyz adds in cluster mode: a leader is known and
	// this member has caught up with it once (replication.Node.Ready).
	Ready() bool
	Stats() replication.Stats
}

// Proxy is what the side port reads of the member's proxy to the leader;
// *replication.Proxy has it.
type Proxy interface {
	Stats() replication.ProxyStats
}

// Router is what the side port reads of the member's router (its
// sessions where their clients connect); *router.Router has it.
type Router interface {
	Stats() router.Stats
}

// ReplicaMoves counts the replica moves a member of several groups
// began making, by who planned them (docs/design/shards.md 1.4).
type ReplicaMoves struct {
	// Planned: this member, leading group 0, planned them; Asked: group
	// 0's leader asked them of it; Alone: it planned them on its own
	// view, as a release before does, its group 0 leader taking none.
	Planned, Asked, Alone uint64
}

// mover is a Cluster whose groups' replicas move (internal/member's, of
// several groups): /metrics counts the moves it makes.
type mover interface {
	ReplicaMoves() ReplicaMoves
}

// digester is a Cluster that sums its own store (replication.Node.Digest).
type digester interface {
	Digest() (jobs int, sum string)
}

// hoster is a Cluster whose host runs several groups
// (replication.Node.Host): their digests go with ?digest=1 too.
type hoster interface {
	Host() *replication.Host
}

// serveCluster answers GET /cluster: the member's view, as JSON; with
// ?digest=1, the digest of its store when it has one, and of each of its
// groups' replicas (a walk of every job: tests and operators comparing
// members ask for it, pages that poll do not).
func serveCluster(c Cluster) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := c.Status()
		if want, _ := strconv.ParseBool(r.URL.Query().Get("digest")); want {
			if d, ok := c.(digester); ok {
				st.Jobs, st.Digest = d.Digest()
			}
			if h, ok := c.(hoster); ok {
				digests := h.Host().GroupDigests()
				for i := range st.Groups {
					st.Groups[i].Digest = digests[st.Groups[i].ID]
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	}
}

// clusterCollector reads a member's figures at scrape time (Node.Stats,
// Proxy.Stats); the sizes of proposals, which cannot be read afterwards,
// are Metrics' histograms. Immutable after newClusterCollector.
type clusterCollector struct {
	cluster Cluster
	proxy   Proxy  // may be nil
	router  Router // may be nil

	stats                 []scalar[replication.Stats]
	proxies               []scalar[replication.ProxyStats]
	routers               []scalar[router.Stats]
	followerLag, memberUp *prometheus.Desc
	// The figures of each Raft group the member runs, labelled by group.
	groups              []scalar[replication.Stats]
	groupLag, groupsLed *prometheus.Desc
	replicaMoves        *prometheus.Desc
}

func newClusterCollector(c Cluster, p Proxy, r Router) *clusterCollector {
	const (
		counter = prometheus.CounterValue
		gauge   = prometheus.GaugeValue
	)
	type stats = replication.Stats
	type proxy = replication.ProxyStats
	type routes = router.Stats
	cc := &clusterCollector{
		cluster: c,
		proxy:   p,
		router:  r,
		followerLag: prometheus.NewDesc("sprout_cluster_follower_lag_entries",
			"On the leader, how many entries each other member is behind its log (as of the last tick).", []string{"member"}, nil),
		memberUp: prometheus.NewDesc("sprout_cluster_member_connected",
			"1 while this member's connection to the member is open (always 1 for itself).", []string{"member"}, nil),
	}
	cc.stats = []scalar[stats]{
		newScalar("sprout_cluster_term", "The Raft term this member is in.",
			gauge, func(s *stats) float64 { return float64(s.Term) }),
		newScalar("sprout_cluster_serving", "1 on the leader while it takes commands.",
			gauge, func(s *stats) float64 { return bit(s.Serving) }),
		newScalar("sprout_cluster_leader_changes_total", "Times this member learned of a new leader.",
			counter, func(s *stats) float64 { return float64(s.LeaderChanges) }),
		newScalar("sprout_cluster_commit_index", "The last entry this member knows committed by a majority.",
			gauge, func(s *stats) float64 { return float64(s.Commit) }),
		newScalar("sprout_cluster_applied_index", "The last entry this member's store has applied.",
			gauge, func(s *stats) float64 { return float64(s.Applied) }),
		newScalar("sprout_cluster_proposals_total", "Batches of records this member proposed as leader, one Raft entry each.",
			counter, func(s *stats) float64 { return float64(s.Proposals) }),
		newScalar("sprout_cluster_proposed_bytes_total", "Bytes of records this member proposed as leader.",
			counter, func(s *stats) float64 { return float64(s.ProposedBytes) }),
		newScalar("sprout_cluster_membership_changes_total", "Membership changes applied.",
			counter, func(s *stats) float64 { return float64(s.MembershipChanges) }),
		newScalar("sprout_cluster_rebuilds_total", "Leaderships this member lost while serving, each followed by its store rebuilt in place from its log.",
			counter, func(s *stats) float64 { return float64(s.Rebuilds) }),
		newScalar("sprout_cluster_last_rebuild_seconds", "How long the last rebuild took, from the lost leadership to following again; 0 before the first.",
			gauge, func(s *stats) float64 { return s.LastRebuild.Seconds() }),
		newScalar("sprout_cluster_messages_refused_total", "Members' messages whose records did not decode.",
			counter, func(s *stats) float64 { return float64(s.MessagesRefused) }),
		newScalar("sprout_cluster_messages_sent_total", "Raft messages written to members' connections.",
			counter, func(s *stats) float64 { return float64(s.Transport.MessagesSent) }),
		newScalar("sprout_cluster_messages_received_total", "Raft messages read from members' connections.",
			counter, func(s *stats) float64 { return float64(s.Transport.MessagesReceived) }),
		newScalar("sprout_cluster_messages_dropped_total", "Raft messages not sent: a full queue, no connection, too large (Raft sends again what matters).",
			counter, func(s *stats) float64 { return float64(s.Transport.MessagesDropped) }),
		newScalar("sprout_cluster_messages_unrouted_total", "Raft messages received for a group this member does not hold, and dropped.",
			counter, func(s *stats) float64 { return float64(s.Transport.MessagesUnrouted) }),
		newScalar("sprout_cluster_messages_shed_total", "Raft messages received for a group too busy to take them (its inbox full), and dropped rather than let one group stall the others' messages (Raft sends again what matters).",
			counter, func(s *stats) float64 { return float64(s.Transport.MessagesShed) }),
		newScalar("sprout_cluster_message_writes_total", "Batches of Raft messages written to members' connections, each in one flush: with the messages sent, how many went together.",
			counter, func(s *stats) float64 { return float64(s.Transport.MessageWrites) }),
		newScalar("sprout_cluster_heartbeats_coalesced_total", "Heartbeats (and their responses) sent coalesced, several groups' in one frame.",
			counter, func(s *stats) float64 { return float64(s.Transport.Heartbeats) }),
		newScalar("sprout_cluster_heartbeat_frames_total", "Frames the coalesced heartbeats went in: with the heartbeats, how often the groups' heartbeats to a member met.",
			counter, func(s *stats) float64 { return float64(s.Transport.HeartbeatFrames) }),
		newScalar("sprout_cluster_items_frames_sent_total", "Frames of the commands streams written to members, each the items of payloads merged.",
			counter, func(s *stats) float64 { return float64(s.Transport.ItemsFramesSent) }),
		newScalar("sprout_cluster_items_frames_received_total", "Frames of the commands streams read from members.",
			counter, func(s *stats) float64 { return float64(s.Transport.ItemsFramesReceived) }),
		newScalar("sprout_cluster_items_bytes_sent_total", "Bytes of the payloads of the commands streams' frames written to members.",
			counter, func(s *stats) float64 { return float64(s.Transport.ItemsBytesSent) }),
		newScalar("sprout_cluster_items_bytes_received_total", "Bytes of the payloads of the commands streams' frames read from members.",
			counter, func(s *stats) float64 { return float64(s.Transport.ItemsBytesReceived) }),
		newScalar("sprout_cluster_items_dropped_total", "Payloads for a member's commands stream not taken: no stream open to it, or its queue full.",
			counter, func(s *stats) float64 { return float64(s.Transport.ItemsDropped) }),
		newScalar("sprout_cluster_items_lost_total", "Payloads taken for a member's commands stream and not flushed to it when the stream closed.",
			counter, func(s *stats) float64 { return float64(s.Transport.ItemsLost) }),
		newScalar("sprout_cluster_peer_connects_total", "Connections this member made to members that answered its hello.",
			counter, func(s *stats) float64 { return float64(s.Transport.Connects) }),
		newScalar("sprout_cluster_peer_refused_total", "Members' connections refused at the hello: another cluster, a name not a member, a malformed hello or message.",
			counter, func(s *stats) float64 { return float64(s.Transport.Refused) }),
		newScalar("sprout_cluster_peer_tls_refused_total", "Members' connections refused in TLS: no certificate from the CA, or one not for the member named.",
			counter, func(s *stats) float64 { return float64(s.Transport.TLSRefused) }),
		newScalar("sprout_cluster_snapshots_sent_total", "Snapshots a member took from this one.",
			counter, func(s *stats) float64 { return float64(s.Transport.SnapshotsSent) }),
		newScalar("sprout_cluster_snapshots_failed_total", "Snapshots this member failed to send.",
			counter, func(s *stats) float64 { return float64(s.Transport.SnapshotsFailed) }),
		newScalar("sprout_cluster_snapshots_received_total", "Snapshots this member received.",
			counter, func(s *stats) float64 { return float64(s.Transport.SnapshotsReceived) }),
	}
	perGroup := func(name, help string, kind prometheus.ValueType, v func(*stats) float64) scalar[stats] {
		return newScalar(name, help, kind, v, "group")
	}
	cc.groups = []scalar[stats]{
		perGroup("sprout_cluster_group_leading", "1 while this member leads the group and takes its commands.",
			gauge, func(s *stats) float64 { return bit(s.Serving) }),
		perGroup("sprout_cluster_group_term", "The Raft term of this member's replica of the group.",
			gauge, func(s *stats) float64 { return float64(s.Term) }),
		perGroup("sprout_cluster_group_commit_index", "The group's last entry this member knows committed.",
			gauge, func(s *stats) float64 { return float64(s.Commit) }),
		perGroup("sprout_cluster_group_applied_index", "The group's last entry this member's replica applied.",
			gauge, func(s *stats) float64 { return float64(s.Applied) }),
		perGroup("sprout_cluster_group_leader_changes_total", "Times this member learned of a new leader of the group.",
			counter, func(s *stats) float64 { return float64(s.LeaderChanges) }),
		perGroup("sprout_cluster_group_proposals_total", "Raft entries this member proposed as the group's leader.",
			counter, func(s *stats) float64 { return float64(s.Proposals) }),
		perGroup("sprout_cluster_group_migrate_asked_total", "The group's jobs this member asked its leader to rewrite, out of segments its log would remove.",
			counter, func(s *stats) float64 { return float64(s.MigrateAsked) }),
		perGroup("sprout_cluster_group_migrate_rewritten_total", "The group's jobs this member rewrote as its leader on other members' asks.",
			counter, func(s *stats) float64 { return float64(s.MigrateRewritten) }),
		perGroup("sprout_cluster_group_stalls_total", "Ticks of the group on this member that found over half an election timeout missed: its goroutine starved of CPU, which can cost a leader its leadership.",
			counter, func(s *stats) float64 { return float64(s.Stalls) }),
		perGroup("sprout_cluster_group_slow_rounds_total", "Rounds of the group's actions on this member that took over half an election timeout, answering no peer meanwhile.",
			counter, func(s *stats) float64 { return float64(s.SlowRounds) }),
	}
	cc.groupLag = prometheus.NewDesc("sprout_cluster_group_follower_lag_entries",
		"On the group's leader, how many entries each other replica is behind its log.", []string{"group", "member"}, nil)
	cc.groupsLed = prometheus.NewDesc("sprout_member_groups_led", "The Raft groups this member leads and serves.", nil, nil)
	cc.replicaMoves = prometheus.NewDesc("sprout_member_replica_moves_total",
		"Replica moves this member began making as the leader of their group, by who planned them: self_leading_group_0, group_0_leader (asked), or self_alone (its group 0 leader, of a release before, plans none).",
		[]string{"planned_by"}, nil)
	cc.proxies = []scalar[proxy]{
		newScalar("sprout_cluster_proxied_connections", "Client connections copied to the leader now.",
			gauge, func(s *proxy) float64 { return float64(s.Current) }),
		newScalar("sprout_cluster_proxied_connections_total", "Client connections copied to the leader.",
			counter, func(s *proxy) float64 { return float64(s.Total) }),
		newScalar("sprout_cluster_proxy_dial_failures_total", "Dials of the leader's client address that failed.",
			counter, func(s *proxy) float64 { return float64(s.DialFailures) }),
		newScalar("sprout_cluster_proxy_no_leader_total", "Client connections closed for want of a leader within an election timeout.",
			counter, func(s *proxy) float64 { return float64(s.NoLeader) }),
		newScalar("sprout_cluster_proxy_leader_changed_total", "Proxied client connections closed because the leader they reached is no longer the leader.",
			counter, func(s *proxy) float64 { return float64(s.LeaderChanged) }),
	}
	cc.routers = []scalar[routes]{
		newScalar("sprout_router_remote_sessions", "Client sessions on this member that reach their group's leader over the commands stream, open now.",
			gauge, func(s *routes) float64 { return float64(s.RemoteSessions) }),
		newScalar("sprout_router_requests_total", "Requests this member's sessions sent to a group's leader.",
			counter, func(s *routes) float64 { return float64(s.Requests) }),
		newScalar("sprout_router_local_total", "Commands this member's sessions ran at once on the store of a group it leads (the local fast path), instead of sending them.",
			counter, func(s *routes) float64 { return float64(s.Local) }),
		newScalar("sprout_router_resent_total", "Requests, waits and references sent again: to a new leader, on a stream opened again, after a refusal or a full queue.",
			counter, func(s *routes) float64 { return float64(s.Resent) }),
		newScalar("sprout_router_expired_total", "Requests given up for want of a leader within an election timeout.",
			counter, func(s *routes) float64 { return float64(s.Expired) }),
		newScalar("sprout_router_owner_clients", "Other sessions' clients this member holds as the leader of their group.",
			gauge, func(s *routes) float64 { return float64(s.Owners) }),
		newScalar("sprout_router_pending_calls", "Requests, waits and references this member's sessions sent to a group's leader and have no answer for yet.",
			gauge, func(s *routes) float64 { return float64(s.Pending) }),
		newScalar("sprout_cluster_dedup_entries", "Outcomes of keyed requests this member's replicas keep, not yet expired, to answer one sent again after a failover.",
			gauge, func(s *routes) float64 { return float64(s.DedupEntries) }),
	}
	return cc
}

// Describe implements prometheus.Collector.
func (cc *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cc.followerLag
	ch <- cc.memberUp
	ch <- cc.groupLag
	ch <- cc.groupsLed
	if _, ok := cc.cluster.(mover); ok {
		ch <- cc.replicaMoves
	}
	for _, s := range slices.Concat(cc.stats, cc.groups) {
		ch <- s.desc
	}
	if cc.proxy != nil {
		for _, s := range cc.proxies {
			ch <- s.desc
		}
	}
	if cc.router != nil {
		for _, s := range cc.routers {
			ch <- s.desc
		}
	}
}

// Collect implements prometheus.Collector.
func (cc *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	st := cc.cluster.Stats()
	collectScalars(ch, cc.stats, &st)
	for _, name := range slices.Sorted(maps.Keys(st.FollowerLag)) {
		ch <- prometheus.MustNewConstMetric(cc.followerLag, prometheus.GaugeValue, float64(st.FollowerLag[name]), name)
	}
	for _, m := range cc.cluster.Status().Members {
		ch <- prometheus.MustNewConstMetric(cc.memberUp, prometheus.GaugeValue, bit(m.Connected), m.Name)
	}
	led := 0
	for _, g := range st.Groups {
		group := strconv.Itoa(g.Group)
		for _, s := range cc.groups {
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(&g.Stats), group)
		}
		for _, name := range slices.Sorted(maps.Keys(g.FollowerLag)) {
			ch <- prometheus.MustNewConstMetric(cc.groupLag, prometheus.GaugeValue, float64(g.FollowerLag[name]), group, name)
		}
		if g.Serving {
			led++
		}
	}
	ch <- prometheus.MustNewConstMetric(cc.groupsLed, prometheus.GaugeValue, float64(led))
	if mv, ok := cc.cluster.(mover); ok {
		moves := mv.ReplicaMoves()
		for _, by := range []struct {
			label string
			n     uint64
		}{{"self_leading_group_0", moves.Planned}, {"group_0_leader", moves.Asked}, {"self_alone", moves.Alone}} {
			ch <- prometheus.MustNewConstMetric(cc.replicaMoves, prometheus.CounterValue, float64(by.n), by.label)
		}
	}
	if cc.proxy != nil {
		ps := cc.proxy.Stats()
		collectScalars(ch, cc.proxies, &ps)
	}
	if cc.router != nil {
		rs := cc.router.Stats()
		collectScalars(ch, cc.routers, &rs)
	}
}
