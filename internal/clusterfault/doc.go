// Package clusterfault holds the fault test of a Sprout cluster against
// the real binary: three or five members, one Raft group or several,
// producers and consumers on every member, and the faults a cluster must
// survive, one per round, with what was acknowledged checked after each,
// and what the clients saw checked against what a queue promises. It has
// no code outside its tests; this comment is the model they follow.
//
// # Where it runs
//
// The test re-executes its own test binary under `unshare --net --pid
// --fork --kill-child --mount-proc`: a network namespace holding only its
// loopback, and a pid namespace whose first process is the test, so that
// everything it started dies with it. Members listen on 127.0.0.1 to .N
// (-members N, 3 or 5; fixed ports: nothing else lives in the
// namespace), clients dial from their own addresses (producers from .100,
// consumers from .160, the probes and fences from .220, the quiet phase's
// puts from .221), and the iptables rules of a partition exist in that
// namespace only. Without root, unshare, ip, iptables or setpriv the
// test skips, saying which. CI runs as root (.ci/test-setup installs
// iptables where it is missing).
//
// Members do not bind their outgoing connections (peers' and the proxy's)
// to their own address, so the kernel gives them all the same source,
// and rules on addresses cannot tell members apart. Each member therefore
// runs as a user of its own (setpriv), and every connection it opens is
// marked with its user (CONNMARK, on the connection's first packet). A
// partition of member L from member O drops, in OUTPUT, every packet of a
// connection marked L whose original destination is O's address, and of
// one marked O to L's: both directions of every connection between them,
// which then time out as across a real network fault, while clients'
// connections to L are untouched. The mark, not the owner match alone:
// a socket its process closed (a member closing its connections after
// losing the leadership) goes on retransmitting what it had queued, and the owner
// match does not see such orphans; the first version of this test let
// them through, and the old leader's last heartbeats, arriving a second
// later, held the next election back by an election timeout.
//
// # A round
//
// A round is a quiet phase, then one fault under load, then the checks:
//
//  0. The quiet phase (see "Order within a group"): with no consumer
//     running, 40 jobs of random priorities (0 to 7) are put into each
//     group's quiet tube (chaos-quiet, or one per group), through the
//     members in turn; then a consumer per member reserves from every
//     quiet tube and deletes each job at once, until all are deleted.
//  1. The workload runs: for every member a producer per group and a
//     consumer, each starting on its own member and reconnecting to any
//     member on error. A producer puts into its group's tube bodies of
//     random bytes (line ends included) that begin with a token it
//     notes, with the body's SHA-256, before it sends the put (one in
//     eight delayed a second); an INSERTED id is an acknowledged put. The
//     producers together put 300 jobs a second, whatever the members and
//     groups: every acknowledged id is peeked each round. A consumer reserves,
//     checks the body byte for byte against what was put, and mostly
//     deletes (DELETED is an acknowledged delete); some jobs it releases
//     or buries, and now and then it kicks, so every kind of record is
//     replicated and the digest's buried and delay are compared. One job
//     in ten it keeps reserved for up to 2 s (at most four at once),
//     reserving others meanwhile, so that some holdings last across a
//     change of their group's leader.
//  2. The fault, on the member leading the most groups (the leader, with
//     one group; among equals group 0's), or on a member leading none.
//     With several groups, a member taken away by kill -9, SIGSTOP or a
//     graceful restart leads several: when it leads one (as when each
//     member leads one), every other member is cordoned until it leads
//     a second, then uncordoned, and the fault follows at once; a kind of
//     these faults whose victims never led several fails the run. The
//     faults:
//     kill -9 of the leader; SIGSTOP of the leader past an election
//     timeout, then SIGCONT; a partition (see below), then healed; kill -9
//     of a member leading no group (when every member leads one, as with
//     as many groups as members, one the round cordons first, sproutctl
//     members cordon: the balancers hand its groups over, and it is
//     uncordoned once restarted); a member restarted on an empty
//     directory, as a new member (a membership change through the admin
//     endpoint; with several groups, a member leading none, cordoned so if
//     need be, whose removal drains it: its replicas move to the others, group 0's leader
//     removes it, and once it is added again the replicas move back
//     until every group has its voters and the members hold about as
//     many, which the round waits for); with several groups, a live move
//     of a group's tube to another group and back under the workload,
//     through a member not leading it, each move's hold of the tube's
//     commands reported (marked over 1 s), or, every other round, with
//     the source group's leader killed within the move's first 20 ms, or
//     every other time the destination group's (the move completes or is
//     aborted by the source group's next leader, and the round then
//     brings the tube back); every other pair of those rounds
//     places a prefix instead (the tube's whole name, when no other tube
//     starts with it and no move placed it by name) in another group and
//     back, the second time with group 0's leader, the placement's
//     driver, killed within its first 20 ms (aborted by group 0's next
//     leader unless it was placed). Bringing the tube back after a kill
//     asks again until the move or placement is done or answered as done
//     already ("lives in group G already", "placed in group G already";
//     not "moving already", a move under way), and after every move and
//     placement a put into the tube through each member must take an id
//     of the group it now lives in (a stale route is sent on, never
//     served by the old group); a graceful restart of the leader
//     (SIGTERM, which it must answer by exiting 0 once its own workers'
//     jobs are done and its groups are handed over, then started again
//     at once, as a rolling restart does: its groups' clients on other
//     members should barely notice, so the clients' gap counts every
//     group, its own too, from the SIGTERM to its exit). A killed member
//     is started again on its directory.
//  3. Failover, per group whose leader the fault took away: from the
//     fault, new connections to the other members put into that group's
//     tube until one is acknowledged; that time is the group's failover,
//     held to 3 s, and the median of each kind of fault's, over the
//     groups of all its rounds, to 1.5 s once it has five failovers or
//     more (docs/design/shards.md section 9), checked at the end of the
//     run. For the groups whose leader stayed, the clients' largest
//     gap: the longest time, from the fault to its end, without a
//     producer's put into the group acknowledged through a member the
//     fault did not hit (for a fault taking no leader, over every group).
//     It is reported, not yet held to the design's 0.5 s: a partition can
//     still hand a group over to a member cut off (its connection looks
//     up until a write times out), which holds the group's puts for an
//     election timeout. For a partition, also how long each cut-off
//     leader kept leading.
//  4. Once every group has a leader its replicas agree on, and the
//     workload has had acknowledgements since, the workload stops (its
//     connections close, so no job stays reserved), and the members must
//     converge: GET /cluster?digest=1's digest of group 0's store
//     (replication.Node.Digest) equal on every member, and each group's
//     digest equal on the replicas GET /cluster lists for it (a member
//     that does not hold a group has no digest of it); and every group
//     whole again: as its leader lists it, all its voters (group 0
//     every member, the others -replicas of them), no learner, the
//     members holding about as many replicas each.
//  5. The checks, against the queue through each group's leader (a
//     member serves its sessions' peeks of another's group one round
//     trip at a time): in each group, a fence put into the group's tube
//     bounds the group's ids (its prefix's, meta.JobID), and the ids
//     below it are peeked: all of them above the last round's fence,
//     and below it every id the clients know of (acknowledged,
//     reserved, sent a delete) or the last round found (ids never
//     issued are most: a new leader goes on above a logged watermark,
//     up to 4096 ids on); the jobs found but a group's newest 2,000 are
//     deleted, so that the stores do not grow round after round (the
//     consumers delete less than is put); then the clients' holdings
//     are checked for double holding.
//
// # The partition
//
// With five members it cuts {m1, m2} from {m3, m4, m5} (docs/design/shards.md
// section 9); with three, the member leading the most groups from the
// other two. Clients reach every member throughout. Which groups fail
// over is read from GET /cluster: each group's replicas as it lists them
// and its leader; a group whose leader is on the side without most of its
// replicas fails over, probed through the members of its majority side,
// and its old leader is watched until it no longer leads it (at most an
// election timeout and a second). Every other group must go on serving on
// its majority side (a put into its tube through that side, at once), and
// the clients' gap is measured there. With the formation's placement of
// five groups of three (group 0 on all five), group 3 keeps its majority
// on {m1, m2} and the others on {m3, m4, m5}. Before it is healed, every
// member must still be connected to the members of its own side, and a
// connection opened as each member's user (bash's /dev/tcp under
// setpriv, as the members run) must reach every member of its side within 300 ms
// and none of the other's: the rules cut what they name, and nothing
// else.
//
// # Several groups
//
// With -groups G above 1 (make chaos CHAOS_GROUPS=G) the members form the
// cluster with G shard groups (--cluster-groups), and with five members
// each group but group 0 on three of them (--cluster-replicas 3, as
// meta.Formation places them; group 0, which holds the membership, is on
// every member). The workload's tubes are one per group (names a
// placement of the members gives each group, "chaos" among them), and so
// are the quiet phase's; each consumer watches all of them, so every
// reserve is one across groups. A member runs only the groups placed on
// it and reports only those: the layout (each group's replicas and
// leader) is read from every member's GET /cluster at the start of each
// round. Leaders are balanced, each member leading about G/M groups: the
// member leading the most (two or more, if any does; the log says how
// many) is the leader faults' victim. With as many groups as members or
// more, every member leads one: the faults on a member leading none (kill
// -9 of a follower, the empty directory) cordon one first, and the
// balancers hand its groups over. The empty directory's member is
// removed by draining it (its replicas move to the others) and added
// again, and the round waits until the replicas have moved back (see
// the fault, above). A fault the leaders are not placed for (the member
// leading the most handed its groups over as the fault began) is not
// run that round, and tried again on its next turn, up to five turns in
// a row; the log and the summary say so, and a fault that never ran
// fails the run (see "What is checked").
//
// # What is checked, and why
//
//   - Lost (must be 0): an acknowledged put not found, whose delete was
//     never acknowledged and is not in doubt. An acknowledgement
//     promises the put is committed by a majority, so no single fault
//     may lose it. A delete is in doubt from its sending until it is
//     answered on the connection it went on: a NOT_FOUND there deleted
//     nothing (the job was another session's, or its holder's
//     reservation lost), nor did a refusal (INTERNAL_ERROR), so neither
//     excuses an absence; only a delete never
//     answered, or answered NOT_FOUND after verify sent it again on a
//     new connection (the first may have deleted the job), does.
//   - Resurrected (must be 0): a job whose delete was acknowledged found
//     or reserved again: a delete is committed like a put.
//   - Byte mismatches (must be 0): a body reserved or peeked that is not
//     byte for byte one that was put (found by its token), or an
//     acknowledged id showing another put's body.
//   - Duplicated (must be 0): a put's job seen under another id than the
//     one its put was acknowledged with, or first seen under: every put
//     is sent once, with a token of its own, so two ids of one token are
//     one put made two jobs (a put the server ran twice, once per
//     leader). Only the fences are exempt: verify puts one again when its
//     connection breaks, and the first may have been done.
//   - Done though refused (must be 0): a job of a put answered
//     OUT_OF_MEMORY or INTERNAL_ERROR (a member's answer when no leader
//     of the group answered in time, which it gives only when the put
//     did not run: a put that may have run closes the connection
//     instead) or DRAINING (a member stopping gracefully) seen.
//   - Wrong replies (must be 0): a reply no command may get. Every
//     reply a workload client reads is judged: the one hoped for; none,
//     the connection broken (the command may have run); a refusal,
//     OUT_OF_MEMORY or INTERNAL_ERROR to any command, DRAINING to a put;
//     TIMED_OUT or DEADLINE_SOON to a reserve; NOT_FOUND to a delete,
//     release, bury or touch (the job's reservation lost). Anything
//     else (BAD_FORMAT, UNKNOWN_COMMAND, another command's reply, bytes
//     that are no reply) is counted and fails the round, the reply said.
//   - Every fault ran (must hold): each fault -faults chose that
//     applies to the cluster (a tube move needs several groups) ran at
//     least once, or the run fails, naming it and why it did not run
//     (skipped, or not run in each of its turns): a run that passes
//     must have tested what it says. A fault whose turn never came,
//     -rounds being fewer than the faults, or that had one turn and did
//     not run in it (make test's short run), is only noted.
//   - Stalls (must not happen): a round whose workload's consumers had
//     no delete acknowledged; a put into a moved tube, through any
//     member, that takes an id of another group than the tube's new one
//     (see the tube move, above), or that none acknowledges.
//   - Not converged (must not happen): members whose stores differ once
//     the cluster is at rest (a follower serves reads after a failover),
//     or a group left short of a voter, or with a learner: replicas that
//     agree prove little when fewer of them than the group should have
//     do.
//   - Double holding (must be 0): a job held by two sessions at once,
//     but across a change of its group's leader (see "No double
//     holding"); those are counted.
//   - Out of order within a group (must be 0): in the quiet phase, a job
//     handed out after a less urgent one of its group (see "Order within
//     a group").
//   - Double deliveries are counted, not failed: a job reserved a second
//     time without its consumer having released or buried it.
//     Reservations live on their group's leader only, so a failover
//     hands the old leader's reserved jobs out again (a handover gives
//     them to the next leader with their holders), as does a member
//     frozen while its session held one once it runs again and sees the
//     connection closed; a job whose
//     delete was acknowledged and is reserved again, by a reserve sent
//     after that acknowledgement, is counted as resurrected (one sent
//     before may have been answered before the delete ran, by a leader
//     on its way out: a double delivery). What was resurrected,
//     mismatched, duplicated or done though refused, and the wrong
//     replies, are listed in the round's failure.
//   - Reservations lost (reported): a delete, release or bury answered
//     NOT_FOUND on the connection that reserved the job. With one group a
//     failover closes the connections whose sessions it ends; with
//     several, sessions stay open across a failover of a group, and the
//     holder of a job of that group is answered NOT_FOUND
//     (docs/design/shards.md 7.3). A handover lists its sessions'
//     reservations to the next leader, so a graceful restart whose member
//     handed every group it led over (its log names none left to an
//     election) loses none: a round of it that does fails.
//   - Replica moves planned by a member alone (must be 0): every member
//     is of this release, so group 0's leader plans every move and asks
//     the group's leader to make it (docs/design/shards.md 1.4); a move
//     a member planned on its own view would run beside that plan. Each
//     round reads every member's sprout_member_replica_moves_total
//     after it converged and counts the moves begun since the round
//     before, by who planned them; a member the round stopped is read
//     once more just before (for a kill timed to a tube move, before the
//     move), so the moves its process began are counted too.
//   - Left behind (must be 0): once the round's clients, probes and
//     checks have closed their connections, every member's
//     sprout_router_remote_sessions, sprout_router_owner_clients and
//     sprout_router_pending_calls must fall to 0 within 15 s (a close
//     lost with a leader goes to the next within 10 s): a session's
//     owner client left on a leader after its member lost, froze or
//     was cut off from it holds its references and memory for good.
//
// Puts and deletes whose reply never came (the connection broke) are
// neither acknowledged nor refused: such a put may exist, its id unknown
// (its token identifies it when it is reserved or peeked); such a delete
// may or may not have been done, and stays in doubt.
//
// # No double holding
//
// Every reservation a consumer receives is a holding, from the RESERVED
// received to the delete, release or bury it is about to send (or the
// job's TTR, 60 s, or the connection's close, whichever is first; a
// connection found broken ends it when the test killed the member it went
// through, if it did while the job was held, since the session ended
// then): the time its session may work on the job. Two holdings of one job by
// different sessions must not overlap, but when the job's group changed
// leader between the two hand-outs: both hand-outs fall between the
// earlier reserve's sending and the later RESERVED's receipt, and a
// change of leader must meet that span. Changes of leader come from a
// watch that polls every member's GET /cluster every 100 ms for the whole
// run: a member's view of a group's leader going from one member to
// another, or to the same one elected again (a later term), the span
// between the two polls (a member that does not answer
// is forgotten until it does, so that its restart is no change), widened
// by half a second on both sides for views that trail. A handover
// counts as a change. Overlaps
// so excused are counted; any other fails the round, described.
//
// # Order within a group
//
// A group hands its ready jobs out in (priority, id) order, as one
// beanstalkd does. The quiet phase checks it from the clients' side,
// where only two times are known of each hand-out: when the reserve was
// sent, and when its answer was received. If a hand-out a of a group was
// received before a reserve b, answered from the same group, was sent,
// then the group handed a out first, and key(a) <= key(b) must hold. Pairs
// whose spans overlap are concurrent reserves, ordered by nothing the
// clients saw, and are not checked. What makes it hold:
//
//   - Every quiet job is ready before the first reserve and is only ever
//     deleted: no release, bury or kick brings one back, no delay makes
//     one ready later, and the quiet tubes hold nothing else.
//   - Only each job's first hand-out is checked: at any hand-out a, every
//     quiet job not yet handed out is ready, so a is the least of them.
//     A job handed out again (its holder's connection broke) is not
//     checked again; a hand-out whose reply was lost would make the
//     next one look first, so a quiet phase in which any connection
//     failed is counted as disturbed and not checked.
//   - The reserves do not wait (reserve-with-timeout 0), so every job is
//     taken (docs/design/shards.md 6.2), never offered: an offer declined
//     by a reserve that ended meanwhile would hide its job for a round
//     trip, and the group would hand out a later one first.
//
// Across groups the order is not exact, and is only reported: a
// reserve across groups takes the most urgent job among those ready when
// it looked, but after four lost takes the fifth takes its group's best
// with no bound (6.2), and a job that becomes ready in another group
// while the reserve is answered may be passed over (6.6: none do in the
// quiet phase, which puts nothing while consumers run). A hand-out
// answered while a more urgent quiet job of another group was certainly
// ready (that job's reserve was sent after this answer came) counts as an
// inversion across groups.
//
// # Running it
//
// `make test` runs TestClusterFaults (three members, one group) and
// TestClusterFaultsGroups (five members, five groups of three replicas:
// every member leads one, so a follower's round cordons its member
// first), a round of each fault, under -race,
// members race-built too; `make chaos` runs CHAOS_ROUNDS rounds (50 by
// default, the -rounds flag of the test) of CHAOS_MEMBERS members (3 or
// 5, -members) and CHAOS_GROUPS groups (-groups) without the race
// detector, and prints the summary table: rounds per fault, acknowledged
// puts and deletes, lost, resurrected, byte mismatches, duplicated,
// double deliveries, overlapping holdings (excused/not), quiet hand-outs
// checked for order (checked/out of order within a group/across
// groups), failover per group, the clients' largest gap, step-down and
// convergence times, and replica moves (begun/planned alone). make chaos
// CHAOS_GROUPS=5 CHAOS_MEMBERS=5 is the design's form
// (docs/design/shards.md section 9). The test's -faults
// flag (a regular expression) picks faults, and -member-log-level=debug
// shows raft's elections in the members' output, which a failed run
// prints.
package clusterfault
