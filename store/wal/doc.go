// Package wal is Sprout's write-ahead log: what makes `sprout -b DIR` keep
// every job across restarts and crashes.
//
// # Data flow
//
// The store appends a Record for each change a restart must see (Append),
// from any goroutine and under the job's tube lock, and gets back the
// change's log position (LSN). Appending only encodes the record into an
// in-memory batch. One writer goroutine takes whole batches and writes
// them to the current segment; per the sync policy (Options.SyncEvery,
// NoSync) it hands an fsync of what it has written to a goroutine of its
// own and goes on writing while it runs. It publishes the new durable
// position (written, or with -f 0 fsynced) and runs the OnDurable
// callbacks, so every commit that waited on one fsync is released together
// (group commit) and no caller ever waits on the disk.
//
// # Core and shell
//
// The writer is split in two, as etcd's raft splits Ready from Advance.
//
// The core (core.go, action.go) decides: what to write, when to fsync,
// what is durable, when to make a spare segment, what compaction moves and
// removes, when to retry, when to give up, what to tell the operator. It
// is a plain value with no I/O, no goroutines and no clock of its own:
// events go in as method calls, with the time they happened (a monotonic
// duration since Open), and ready(now) hands out the actions that follow
// from everything it has been told. Its tests (core_test.go) feed it
// events one by one and compare the exact actions; none of them sleeps.
//
// The shell (log.go, writer.go) is the Log the store sees: files, the
// writer goroutine, one timer, the spare-making goroutine, the fsync
// goroutine, the OnDurable callbacks and the log lines. It does what the
// actions say and reports each outcome back as an event. Log.mu guards the
// core: Append and OnDurable step it from any goroutine, the writer
// goroutine between its I/O. Stepping the core is cheap, and nothing slow
// happens under mu.
//
// Events (core methods): start (Start made this run's first segment);
// append and onDurable (a record appended, a callback to hold);
// closeRequested; timerFired; writeDone (bytes written, up to the first
// write that failed); rewriteDone (what a failed fsync left in doubt was
// written again, or not); syncDone (the fsync in flight worked, or not);
// removeDone; spareDone (the spare segment made, or not: the disk is
// full). Close's grace running out is no event of its own: like a retry's
// backoff, it is a deadline the core arms the timer for.
//
// Actions (ready's result, in the order to carry them out): report (a line
// for the operator: each failed write or fsync, one per backoff at most; a
// change of state, such as a full disk, once) and the Observer's figures;
// publish a durable LSN with the callbacks it releases; retire (trim and
// close) segments no write or fsync needs any more; make a spare segment;
// fsync these segments (each of those two on a goroutine of its own: its
// outcome comes back later, as an event); arm the timer; then at most one
// step of the writer's own, whose outcome the shell reports before asking
// again: write these extents (a new segment's header, then batches of
// records, stopping at the first failure), or write again every copy kept
// since the last good fsync, or migrate these ids out of a segment, or
// remove a segment, or turn (ask again once the callbacks just released
// have run, so the commits they release join the next batch), or report
// the result of Close.
//
// The core chooses that step by a fixed priority, so one look at ready
// says what the writer does next: finish (or retry) the batch being
// written; write again what a failed fsync left in doubt, when the next
// fsync may go; while closing, write what is left, wait for the fsync and
// stop; otherwise take one compaction step, alternating with writing new
// batches so neither starves the other. An fsync is handed out beside that
// step when the policy, compaction or Close wants one and none is in
// flight. What is acknowledged is decided in one place, publish: a second
// source of durability (a majority's commit, in a cluster) would be one
// more event and one more term there.
//
// # Writing while an fsync runs
//
// An fdatasync takes from half a millisecond to tens of them. The writer
// does not wait for it: under -f MS, where a commit is acknowledged once
// written, commits never queue behind an fsync, and under -f 0 a large
// batch N+1 (pipelineMin, 64 KiB, or more: a bulk delete, compaction's
// moves) is written while batch N's fsync runs, so that N+1's fsync starts
// the moment N's ends (pipelined group commit). pwrite and fdatasync on
// one descriptor from two threads are safe on Linux; what the core
// guarantees besides is this.
//
//   - At most one fsync is in flight. It covers the LSN written when it was
//     handed out, and the segments written since the fsync that last
//     covered them (marked syncing). A write made while it runs may or may
//     not reach the disk with it, so it counts for nothing: its segment
//     stays dirty, for the next fsync. Under -f 0, publish acknowledges
//     only what a finished fsync covers.
//   - No file is trimmed, closed or removed while the fsync uses it:
//     retiring skips a segment that is syncing, and so does compaction's
//     removal (which waits anyway until an fsync that covers the moves has
//     finished). Every write, trim, close and removal is still the writer
//     goroutine's, one at a time; a segment is retired once an fsync that
//     covers it has finished and the writer has moved on from it, so
//     neither a write nor an fsync needs it again.
//   - A failed fsync proves nothing about what was written before it
//     reported the error, including what was written while it ran: Linux
//     may have dropped those dirty pages. Its segments are dirty again,
//     nothing it covered is acknowledged, and the shell keeps its copy of
//     every byte written since the last good fsync (a good one drops the
//     copies made before it was handed out, and only those). After the
//     retry's backoff the writer first writes all the copies again, as a
//     step of its own, and only then is an fsync handed out; what is
//     written after that rewrite needs no more care than any write. Those
//     bytes count against maxUnsynced (64 MiB) as before, whether or not
//     an fsync is running.
//   - Under -f 0, a smaller batch waits for the fsync in flight, and its
//     appends do not wake the writer: written meanwhile it would be
//     acknowledged no sooner, and each write would cost a wake-up and a
//     system call on the cores the event loops need (measured: a write
//     per record at 16 appenders instead of one per eight). And an fsync
//     waits for the callbacks a publish released and for the batch they
//     append (the turn): that is what group commit gathers, and it costs
//     microseconds against the fsync's milliseconds. Under -f MS every
//     batch is written at once and the fsync goes as soon as it is due.
//   - Close writes what is left while an fsync runs, waits for that fsync,
//     hands out one more covering everything, and reports only once none
//     is in flight, so no fsync outlives the files. Its 10 s grace bounds
//     writes that keep failing, as before; an fsync that hangs holds Close
//     as it always did.
//   - -F never fsyncs but for compaction's removal and Close, and a
//     segment it retires is fsynced first, by the writer itself, as before.
//
// # Errors
//
// A failed write is retried with backoff until it works; nothing after it
// is acknowledged meanwhile. A failed fsync is retried on a backoff timer,
// and because Linux may drop the dirty pages when it reports the error,
// the writer keeps every byte written since the last good fsync and writes
// it all again before the next fsync counts (see above); past maxUnsynced
// such bytes, new jobs are refused as on a full disk. Close gives up on writes that
// keep failing once its grace period has passed (what it abandons was
// never acknowledged) and says so.
//
// # Files
//
// DIR/sprout.NNNNNNNN.wal segments, each a 24-byte header (magic, version,
// highest id issued when it began) followed by frames: u32 length, u32
// CRC-32C, payload (encode.go). Segments are preallocated and zero-filled;
// one spare is always ready, so rotation never waits and a full disk only
// refuses new work, never deletes; while it is full, a new spare is tried
// every 250 ms, and at once when compaction frees a segment. DIR/lock is
// locked with fcntl, as beanstalkd does.
//
// # Recovery and compaction
//
// Open replays every segment in order (replay.go): full records create a
// job, updates change it, deletes drop it, KindIDs raise the id watermark.
// A torn record at the end of the last segment is cut off; other damage
// stops the start unless Options.SkipDamaged. A directory holding only
// beanstalkd binlog files is imported first (Options.Importer). When the
// directory, counting the live jobs of its oldest segment once more (they
// are about to be copied), would be larger than twice the live data plus
// two segments (current and spare included), and the move would reclaim at
// least half of what it copies, the writer asks the Migrator to rewrite
// those jobs at the head and then deletes the segment, once the rewrites
// are durable. An oldest segment without live jobs goes at once.
//
// # Cluster mode
//
// A cluster member's -b directory is its Raft log (internal/replication,
// "The log on disk"), kept in the same segments by the same writer:
// OpenCluster opens it, and everything above about group commit, writing
// while an fsync runs, failed writes and fsyncs, spares and retiring holds
// as it is. What differs:
//
//   - Segments. The header's version is 2 (a single node's is 1), so
//     neither mode opens the other's directory by mistake: Open refuses a
//     cluster's directory and OpenCluster a single node's, each in one line
//     (OpenCluster converts one instead when told how: below). Each frame's
//     payload begins with a kind of 16 or more (a job's record is 1 to 4):
//     a member's identity and Raft state (a checkpoint), a Raft entry, a
//     hard state, a snapshot's records and its metadata. The wal frames
//     and checks them (length, CRC-32C) and hands the payloads to the
//     cluster log, which defines them; job records appear only inside
//     entries and snapshots, so DecodeFrames, which a peer's records go
//     through, never takes a cluster frame for one.
//   - Appends. The cluster log appends whole frames it encoded
//     (AppendGroup): one group (an append of entries, a hard state, a
//     snapshot) always lands in one segment, which reports where it went
//     (segment and offset), so the cluster log can index each entry and
//     read it back later (ReadFrame). A group is never refused: a member
//     that cannot write keeps trying (the writer's retries), and nothing
//     after it becomes durable meanwhile. Durable means written and
//     fsynced, whatever -f says (OnDurable is -f 0's). A group the
//     cluster log may lose in a crash (a hard state that only raises the
//     commit index) is appended unsynced (AppendGroupUnsynced): written
//     with the others, it asks for no fsync, and becomes durable with the
//     next one that a synced group, compaction or Close asks for.
//   - Checkpoints. Every segment begins with the checkpoint frame the
//     cluster log last gave (SetCheckpoint: the member's identity, its
//     hard state and membership), written as the segment's first frame
//     when appends move to it. So any prefix of segments can go without
//     losing the member's state: the oldest segment left says it. A group
//     that changes that state gives its checkpoint with it
//     (AppendGroupCheckpoint), in one step: the writer moves to the spare
//     on its own once the current segment outgrew its size, and a segment
//     begun between the group and a later SetCheckpoint would start with
//     the older state after the group, which replay would take for the
//     last.
//   - Full disk. With no spare segment (the disk is full) or too much
//     waiting for an fsync that keeps failing, a single node refuses every
//     record but deletes. A cluster log cannot refuse Raft's writes, so it
//     takes them all, into the current segment's preallocated room and
//     past it, where a write may fail and is retried; Full reports the
//     condition, and the leader's journal refuses every record but deletes
//     while it holds, as a single node's log does. Deletes are what the
//     room kept in the current segment is for.
//   - Live data. The cluster log says what is live, from the entries it
//     knows committed and applied (Moved: a job's latest full record
//     moved from one segment to another, or was deleted), and which
//     segments hold what it still needs (Hold: every segment from this one
//     on). The single node's bound is unchanged: a segment below the one
//     held, with nothing live in it, is removed once everything appended
//     when that became true is fsynced, among them the hard state whose
//     commit covers the entries that moved its jobs; and when the
//     directory passes twice the live data plus two segments, the oldest
//     segment's live jobs are handed to the Migrator, but only while one
//     is set (SetMigrator: the serving leader's store). Its rewrites go
//     to Raft as records of the next proposal, so every member writes
//     them; a member that only follows never migrates, and removes its
//     segments as the leader's rewrites, applied, leave them with nothing
//     live.
//   - Recovery. OpenCluster replays every frame in order to the cluster
//     log (a torn write at the end of the last segment holding more than
//     its checkpoint is cut off; other damage stops the start unless
//     Options.SkipDamaged), with each frame's segment and offset, and
//     the header id of the first segment (FloorID): every id named by a
//     frame of a segment removed is at most it. For that, a cluster
//     segment's header holds the highest id named before appends moved
//     to it (the wal sees no record, so the cluster log tells it the ids
//     it replayed, RaiseID, and the ids of each group it appends), and a
//     spare an earlier run never wrote to, whose header is older, is
//     removed at open. Recovered is empty: the store is filled from the
//     cluster log.
//   - Conversion. A directory of a single node's segments, or of a
//     beanstalkd binlog (imported first, as above), is read as a single
//     node reads it and handed to Cluster.Convert as its live jobs and
//     highest id; the frames it returns are written to a new version 2
//     segment after the last, made durable and renamed into place before
//     the old segments are removed, so a crash at any point leaves one
//     complete copy (old segments found beside a version 2 one are the
//     leftovers of a conversion, and are removed).
package wal
