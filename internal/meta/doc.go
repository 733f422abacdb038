// Package meta is the cluster's placement (docs/design/shards.md,
// sections 1, 3 and 4): the formation every member computes alike, with
// group 0's log's placements and growth laid over it (internal/member's
// routing), and the planners of replicas and leaderships: which shard
// group owns each tube, which members replicate each group and which of
// them should lead it, and which group each job id belongs to. It is
// pure: no I/O, no goroutines, no clock, so every member that lays the
// same placements over the same formation routes the same way, and its
// tests are tables.
//
// # Formation
//
// Formation computes a new cluster's state on every initial member from
// its members' sorted names, G (groups) and R (replicas per group), with
// nothing exchanged: group g's replicas are the members at (g·R+k) mod M
// for k < R (R at most M), so the R·G replicas go round the members and
// each holds floor or ceil of R·G/M; its preferred first leader is the
// one of them that the groups before it chose least (the first on a tie);
// slot s belongs to group s mod G, and group g takes id prefix g.
//
// # Which group owns a tube
//
// State.Owner answers, in order: the exact placement of the name; the
// longest active prefix placement it starts with; else the group of its
// slot, the top 12 bits of the name's XXH64 (seed 0) among Slots (4096).
// XXH64 and the slot count are part of the format forever: the tests pin
// the hash's vectors, so no library upgrade can move a tube. A prefix
// placement is pending (routing does not follow it yet: the groups
// first stop creating matching tubes) until activated.
//
// # Job ids
//
// An id is prefix (8 bits) << 45 | sequence (45 bits), below 2^53 so that
// JavaScript clients parse it exactly. The state maps each prefix to a
// group (GroupOfID): O(1), and ids stay dense within a group. With one
// group, prefix 0 gives today's ids, 1, 2, 3, ...
//
// # Planning
//
// PlanLeaders balances leaderships (section 1.5): each member that may
// lead ends up leading floor(G/M) or ceil(G/M) groups, a draining member
// none; each transfer goes to a voter its caller reports caught up.
// PlanMove plans the next replica move (section 1.4): R voters kept in
// every group on members that are live and not draining, a draining
// member's replicas handed over first, each member holding about as
// many; Move.Progress tells how far a move planned has come. They are deterministic functions of their
// inputs; group 0's leader plans the moves and has each made before it
// plans the next (internal/member), and each member hands over the
// leaderships its plan moves from it.
package meta
