// Package ops is Sprout's HTTP side port for operators: Prometheus metrics
// (/metrics), liveness and readiness probes (/healthz, /readyz) and, when
// asked for, the Go profiler (/debug/pprof/). It runs its own small
// net/http server on its own goroutines and never on the event loops.
//
// Register adds those routes to the side port's one router, which
// internal/member builds with the admin API (internal/admin) at /api/,
// the membership endpoint at /cluster/members and the web console at /
// beside them; Serve serves it on its listener. Those apply their own
// rules of access; the paths above stay open.
//
// # How figures get here
//
// Most figures are read at scrape time by a custom prometheus.Collector
// (collector): the stats command's figures from engine.Server.Stats, the
// connection limits and byte counts from Limits, the log's from
// store.Store.LogStats and every tube's from store.Store.EachTube, which
// holds each tube's lock only while it copies that tube's figures. Nothing
// is counted twice in parallel with the engine.
//
// Latencies cannot be read afterwards, so they are observed as they happen
// into histograms held by Metrics: the event loops report each command's
// execution time (Metrics implements engine.Metrics with one pre-resolved
// observer per command, no lock and no label lookup per call), and the
// write-ahead log's writer goroutine reports each batch and fsync
// (Metrics implements segment.Observer).
//
// # TLS
//
// With the side port over TLS (ServeTLS, --http-tls-cert) its handshakes
// are counted as they happen: those that fail from the lines net/http
// logs (it hands the error out no other way), those that succeed as their
// connection is verified. The client port's handshakes and connections
// by listener are read from engine.Server.TLSStats at scrape time, and
// the certificates' expiry, staleness and reloads from Config.Certs
// (internal/certs), by tlsCollector (tls.go).
//
// # Probes
//
// /healthz is 200 while every event loop runs a no-op task within the
// ping timeout (engine.Server.Ping) and 503 otherwise. /readyz is 200 once
// the engine listens with the log recovered (Ready) and 503 before that
// and while it drains or shuts down (Draining).
//
// # Cluster mode
//
// With Config.Cluster (a replication.Node), GET /cluster is the member's
// Status as JSON, /readyz is also 503 until the member knows a leader and
// has caught up with it once (Node.Ready: applied what the leader had
// committed when it asked), and /metrics adds the sprout_cluster_*
// figures: the term, leader changes, commit and applied indexes, follower
// lag, proposals, snapshots, membership changes and the transport's
// counters, read from Node.Stats at
// scrape time (clusterCollector, cluster.go), the proxy's connections from
// Proxy.Stats, and the sizes of proposals, observed as the leader makes
// them (Metrics implements replication.Observer). A member's queue
// counters are kept from going down when its store is rebuilt
// (keptCounters, kept.go), and its sprout_binlog_* figures are its log's
// (Config.Log: the log its groups share), not its store's journal's.
//
// With several groups (Config.Groups, groups.go) the queue's figures,
// and the per-tube series, are those of the groups the member leads,
// read at scrape time from each group's store and labelled with the
// group; every series of those families carries the label, since an
// exposition may not have a family with and without it. A group's
// series are on its leader alone, so that their sum over the members is
// what stats shows; they move with the leadership, and each group's
// counters are kept per member across the scrapes that find the group
// led elsewhere (groupCounters). The member's own figures (connections,
// commands, current-waiting: its sessions') stay unlabelled.
package ops
