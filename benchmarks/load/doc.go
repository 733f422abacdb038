// Package load is Sprout's load generator: the scenarios that drive
// testproc.Conn (a beanstalkd client on raw sockets, with pipelining, that
// the tests share), and the
// side-by-side runs against C beanstalkd (the tests' reference,
// testproc.FindReference: the 1.13 release built beside the clone, else
// Debian's 1.12) that produce the report under
// benchmarks/results.
//
// A Plan runs every Scenario against every server Reps times, alternating
// the servers within each repetition. Each run starts its server fresh on a
// free loopback port (StartServer), warms up, then measures for a fixed time:
// jobs completed, latency in an HDR histogram, and the server's CPU time and
// resident memory read from /proc/PID (testproc/procstat). Summarize takes the median over the
// repetitions; WriteMarkdown, RatioSVG, LatencySVG and ResourcesSVG turn the
// outcomes into the report, and EvaluateGoals checks the goals (goals.go).
//
// # Cluster scenarios
//
// A scenario with Members > 0 runs against a cluster (cluster.go): that
// many Sprout processes on this machine, each with its own -b directory
// under one temporary directory, --node m1, m2, …, --cluster-listen and
// --http on free loopback ports, and the scenario's flags (-f 0). The run
// waits (StartCluster, then Cluster.awaitSettled) until one member serves
// and every member names it leader, then drives the same traffic as a
// single server's scenario through the leader's client port or, with
// Through set to ThroughFollower, through a follower's, which copies the
// bytes to the leader. ThroughAll spreads the connections over every
// member's client port in turn (dialTarget), producers and consumers
// alike, so a producer and the consumers taking its jobs are on different
// members in general: the traffic the sharded cluster
// (docs/design/shards.md) is measured with, of which today's one group is
// the baseline. CPU is summed over the members (Server.Usage adds their
// /proc figures), so CPU per job is what the whole cluster spent; RSS is
// their sum too, and Result.Members keeps each member's, with whether the
// run's connections went to it. The report reads capacity from them
// (writeCapacity): the busiest member's CPU per job, and one core over
// that, since on two shared cores aggregate throughput cannot show. If
// the leader changed during the run, the run failed: its figures are not
// "through the leader". A server that refuses the members' flags
// (beanstalkd exits with status 5 at --http) is skipped for the scenario,
// so the report's beanstalkd column says it has no cluster mode, and the
// goals set the cluster against beanstalkd's and single-node Sprout's
// durable -f 0 scenarios of the same run (Goal.Against, Goal.AgainstBase).
// Scenario.Groups and Scenario.Replicas, when set, start every member with
// the sharded cluster's --cluster-groups and --cluster-replicas.
//
// KindFailover kills the serving leader with SIGKILL Kills times. Each
// time it measures from the kill to the first put acknowledged through a
// surviving member, putting on a new connection to each survivor in turn
// (as cmd/sprout's cluster tests do), then restarts the killed member
// on its own directory (it rejoins from its log) and waits until the three
// agree on a leader and have applied what it committed before the next
// kill. Result.Failovers holds the times, and the goals take their median
// and maximum as absolute bounds (Goal.Absolute). It runs in the first
// repetition only (Scenario.Reps), since ten kills take some twenty
// seconds.
//
// KindCatchUp puts Jobs jobs of Body bytes into tube "backlog" through the
// leader (pipelined, not timed), times put → reserve → delete round trips
// through it for the run's duration, then adds a member: POST
// /cluster/members on the leader (the members run with an --admin-token
// for it), and the member started with the join string the answer gave.
// Result.CatchUp holds the time from its start to its /metrics showing it
// applied what the leader had committed at the addition, both members' RSS (the
// leader's before, its peak since: VmHWM, reset at the addition; the new
// member's peak), and the round trips' p99 while it caught up; the goals
// hold them to the catch-up bounds, absolutely (at most 10 s, at least
// 50 MB/s, the new member's peak RSS at most 1.3× the leader's before,
// the leader's growth at most 128 MiB, the p99 at most 2× idle). It runs
// in the first repetition only, and only with -with or -full.
//
// KindRebuild puts Jobs jobs of Body bytes through the leader (pipelined,
// not timed), then Kills times stops the serving leader (SIGSTOP) for
// three seconds, past the longest election timeout, and resumes it: it
// has lost its leadership, and rebuilds its store in place. Result.Rebuilds
// holds each time the member reports for it on /metrics
// (sprout_cluster_last_rebuild_seconds, once sprout_cluster_rebuilds_total
// has counted it), and the goal holds the worst to a second. It runs in
// the first repetition only, and only with -with or -full.
//
// KindGrow runs a cluster of Members with Groups shard groups of Replicas
// each (the members run with an --admin-token), and traffic through them
// (growPairs producer/consumer pairs, a tube each, put → reserve →
// delete); after growSettle (the baseline rate) it adds Kills members one
// at a time (each a voter before the next: one membership change at a
// time) and times until the replicas have spread (every group its voters,
// no learner, the members within one replica of each other, as each
// group's leader lists them on GET /cluster), then removes them
// (DELETE /cluster/members: each drained, then removed) and times until
// each has exited, and the replicas are spread again. Result.Grow holds
// both times and the traffic's baseline, meanwhile and lowest rate over a
// second. It runs in the first repetition only.
//
// KindMove runs a cluster of Members with Groups shard groups (with an
// --admin-token) and traffic through every member: movePairs
// producer/consumer pairs on one tube, movePairsElsewhere on tubes of
// their own; after moveSettle it moves that tube to the next group Kills
// times (POST /cluster/tubes/{name}/move), a moveEvery after each answer.
// Result.Move holds each move's jobs and its own held time (from the
// freeze to the placement), the longest the moving tube went without a
// put acknowledged and without a job reserved, and the rate before and
// during the moves. It runs in the first repetition only.
//
// KindGrowGroups runs a cluster of Members with Groups shard groups (with
// an --admin-token) and growGroupsPairs producer/consumer pairs, a tube
// each, through every member; after moveSettle it grows the groups to
// Kills × Groups (POST /cluster/groups/grow) and runs growGroupsAfter
// more. Result.GrowGroups holds the growth's time, the tubes and jobs it
// moved, the longest a placement held its tubes (its answer's), the
// longest a moved tube went without a put acknowledged and without a job
// reserved, and the rate before and during. It runs in the first
// repetition only.
//
// Every member is stopped by its PID at the end of the run (SIGTERM, then
// SIGKILL after stopGrace) and the temporary directory removed.
//
// Traffic goes only to 127.0.0.0/8, and every run is bounded in time (each
// connection has a deadline) and in count (RunConfig.MaxPuts).
package load
