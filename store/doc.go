// Package store holds Sprout's tubes and jobs and moves jobs through
// beanstalkd's states (ready, reserved, delayed, buried). It knows nothing
// of sockets or the wire: the engine calls it with parsed commands and gets
// back jobs, results and, for blocked reserves, calls on a Notifier.
//
// # Data
//
// Each Tube has a ready heap ordered by (priority, id), a delay heap ordered
// by (deadline, id), a buried FIFO, and the set of clients waiting to
// reserve from it. Jobs are also indexed by id, in 64 shards of pages of
// job pointers (index.go). Every operation is O(log n) in the jobs of one
// tube; nothing scans all tubes, so ten thousand tubes cost no more per
// command than one. Server-wide counts are atomics updated alongside the
// per-tube ones.
//
// Waiting clients follow beanstalkd exactly: a blocked reserve joins the
// waiting set of every watched tube; a job that becomes ready in a tube goes
// to a waiter taken from that tube's set in beanstalkd's ms_take order. A
// waiter served by one tube is claimed with a compare-and-swap, so no two
// tubes can serve it. Because a tube is dispatched whenever it gains a ready
// job or a waiter (put, release, kick, TTR expiry, delay expiry, unpause),
// no tube ever holds both an unpaused ready job and a waiter for long, which
// is why serving the changed tube alone matches beanstalkd's global choice.
//
// # Time
//
// One goroutine sleeps until the earliest of all deadlines (a tube's next
// delayed job, a client's earliest TTR, reserve timeouts, pauses) in a
// single heap, so each fires within about a millisecond of when it is due.
// What comes due together is served earliest first, as beanstalkd's
// prottick serves it, since that decides which waiting reserve gets which
// job: delayed jobs in deadline order across tubes (timers.run takes turns
// between the tubes), a client's run-out TTRs soonest first.
// Time is monotonic, unlike beanstalkd's wall clock, so clock steps do not
// fire or stall timers; the log stores wall-clock times.
//
// # Persistence
//
// With Options.Log, every change a restart must see (put, delete, bury,
// kick, release) is appended to the write-ahead log under the job's tube
// lock, before the change is applied, so the log's order is the order of
// changes to each job and a refused append (full disk) changes nothing.
// The store loads what the log recovered in New, and moves live jobs
// forward for the log's compaction (Migrate), which finds each job by the
// segment of its latest full record. A cluster member's store is filled
// by Apply, each record with its place in the member's log, and a
// leader's store is told where its own records landed once they are
// committed (Located), so whichever member leads can move every job. Job
// ids run behind a watermark the log records ahead of them (NextID).
//
// # Acknowledgement
//
// The store owns the rule that no reply promises more than may be
// acknowledged. Appending never waits for the disk: each client carries the
// position its replies so far must wait for (Client.PendingAck), and the
// store raises it in every method that changes a job (to the change's
// record) or shows one: reserve, reserve-job, a job handed to a blocked
// reserve, every peek and stats-job (to the job's put, so no client sees a
// job a crash could take back). Whoever answers the client (the engine)
// only compares it with the AckSource's published position (Store.Acks)
// and holds the reply until it is reached. What "may be acknowledged"
// means belongs to the AckSource: the log's durable position (written, and
// fsynced as its policy says) on a single node; a majority's commit in a
// cluster. ack_test.go lists every way to show a job and fails on a new one
// that is not listed or does not raise the position.
//
// # Operators' tools
//
// admin.go lists a tube's jobs a page at a time (ListJobs: ready by
// priority, delayed and reserved by deadline, buried by burial, paged by a
// cursor on that key) and clears or kicks a tube in batches, for the admin
// API. They are Client methods like the protocol's, so the same rules
// hold: what they show and change waits for acknowledgement, and every
// change is logged and counted. No tube lock is held for more than a copy
// of a heap's pointers or a batch of jobs.
//
// # A reserve across stores
//
// take.go holds the parts of a reserve whose watched tubes live in
// several stores (a cluster's shard groups, docs/design/shards.md 6.2 and
// 6.3): BestReady names a client's best candidate and reserves nothing;
// TakeAtMost reserves the best only if it does not come after a bound
// (another store's best), else answers Lost; Unreserve undoes a
// reservation the client never received (an offer that lost to another),
// every figure back as it was and the job to the tube's next waiter.
// Nothing calls them yet but their tests: the router that will is S6.
//
// # Requests across a failover
//
// With Options.Dedup (a cluster's shard group), a request sent with a
// key (wal.Req: the sending member's incarnation and request number) is
// answered once however often it is resent (dedup.go;
// docs/design/shards.md 5.6). The keyed calls (PutKeyed, DeleteKeyed,
// ReleaseKeyed, BuryKeyed, KickKeyed, KickJobKeyed) look the key up
// first: an outcome kept answers as the first call did (INSERTED with
// the same id, the same verdict, the same count) and changes nothing,
// its reply waiting for the first's. Otherwise the command runs as its
// unkeyed twin, which it shares its code with, its records carrying the
// key, and its outcome is kept (the leader's table). A replica makes the
// same entries from the keyed records it applies (Apply), so the member
// that takes over answers a request the old leader's committed log
// holds, while one that never committed runs again. Entries expire
// DedupTTL after their entry time by the replicated clock: the time of
// the KindClock record that began their batch (the leader stamps each
// batch with Clock: its wall clock, never behind the last one applied),
// so every replica's table is the same function of the log. A
// DedupTable folds a log's records without a store (AddFrames) and gives
// the live table as records (Records), for a snapshot to carry. The
// unkeyed calls pay one comparison of a zero key; without Options.Dedup
// nothing is kept and no key is logged.
//
// # Lock order
//
// Take locks only in this order; never hold two locks of the same kind:
//
//  0. Store.refsMu (other members' references to tubes, refs.go)
//  1. Store.registryMu (tube names, tube list)
//  2. Tube.mu (one tube's heaps, FIFO, waiters and counts, and the mutable
//     fields of its jobs)
//  3. Client.mu (a client's reserved jobs, in TTR and reservation order,
//     its TTR timer and closed flag)
//  4. jobShard.mu, timers.mu, Store.dedupMu, the journal's mutex
//     (segment.Log's, under wal.Log; leaves: nothing is taken under
//     them). Store.idMarkMu is taken with no other store lock held, and
//     only the log's mutex under it.
//
// Consequences:
//   - An operation by job id looks the job up under its shard lock, drops
//     it, then locks the job's tube (immutable) and re-checks the job's
//     state.
//   - A waiter is removed from its other tubes (waiter.leave) only after the
//     tube that served it is unlocked; the same goes for Notifier calls.
//   - Freeing a tube needs registryMu, so references are dropped
//     (Store.releaseTube) with no tube lock held.
//   - A recycler (SetRecycler) is called under a tube lock when a job is
//     forgotten, so it takes no store lock; the engine's pool takes only
//     its own, a leaf.
package store
