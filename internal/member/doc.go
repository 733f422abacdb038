// Package member runs one Sprout: a single node, in memory or on its
// write-ahead log, or a member of a replicated cluster. It owns what a
// running server is made of (the log, the store, the cluster node and its
// proxy to the leader, the engine and the HTTP side port) and the order
// in which they start and stop; cmd/sprout only parses flags into a
// Config, builds the member, and turns signals into Drain and Shutdown.
// Tests run several members in one process.
//
// # Starting
//
// Start brings the parts up in this order, and undoes what it did if a
// step fails:
//  1. the side port's listener (--http), so that a cluster member tells
//     the others the port it really has (a :0 included);
//  2. a cluster member's client listener, for the same reason;
//  3. the log: a single node's wal.Log, opened and recovered, or a
//     member's replication.WALLog;
//  4. the store on it: a single node's store.New, or the node
//     (replication.StartNode), whose store is the member's for its life,
//     and the proxy to the leader, which becomes the engine's Route; then
//     the router (internal/router) and, in a cluster formed with
//     --cluster-groups G > 1, shard groups 1 to G-1 on the same host and
//     log (shards.go: placed by meta.Formation, each member holding R of
//     them and group 0, and campaigning first in those the formation
//     prefers it to lead; G and R recorded in -b at the first start,
//     formation.go, and a --cluster-groups that disagrees with the record
//     or the log is refused, a FormationError; group 0 records the
//     cluster's too, and a member that runs another stops with one); a
//     group's replica moves
//     between members (moves.go: group 0's leader plans each move on
//     the groups' replicas as their leaders report them and asks the
//     group's leader to make it, which checks it against its own and
//     removes a giver only once it no longer leads), each member
//     following its groups' leaders' reports;
//  5. the engine on the store, serving once it listens;
//  6. the side port's one router (router.go): probes, metrics, pprof,
//     /cluster and /cluster/members, the admin API and the web console,
//     over TLS with HTTPConfig.TLS.
//
// TLS configurations come made (cmd/sprout builds them from files it
// reads and reloads through internal/certs): Engine.TLS for the clients,
// HTTPConfig.TLS for the side port, Cluster.TLSSource for the members;
// Config.Certs gives their figures to /metrics.
//
// Each failure is an error that wraps what failed (segment.ErrLocked,
// replication.ErrRemoved, a listener's *net.OpError) inside a *StartError
// that names the step, so the binary maps it to its exit status.
//
// # Stopping
//
// Shutdown stops a member in the order its doc comment lists; a member
// that cannot go on (its cluster log lost, or removed from the cluster)
// stops itself the same way, and Err says why. Done is closed once every
// part has stopped. A graceful Shutdown of a cluster member hands the
// groups it leads to other members before its node stops
// (handOverLeaderships), so that none waits for an election.
//
// # One store
//
// Group 0's store is the one the admin API, the history and the metrics
// are given. With several groups the admin API reaches every group
// (adminGroups: a tube's and a job's endpoints go to their group's
// leader, and its stats and tubes are the fleet's), and the metrics' queue
// figures are each group's on its leader (ledGroups, metrics.go),
// while the history shows group 0's part alone (not yet the fleet's).
// The store a member serves is the same for its life: the engine, the
// admin API, the history and the metrics are given it once. A cluster
// member that installs a snapshot, or rebuilds after losing a leadership
// it served, empties it and fills it again in place (store.Store.Reset;
// internal/replication/doc.go, "Losing leadership"), once the engine has
// closed its clients (the node's CloseClients is the engine's).
package member
