// Package wal is Sprout's write-ahead log: what makes `sprout -b DIR` keep
// every job across restarts and crashes.
//
// # Data flow
//
// The store appends a Record for each change a restart must see (Append),
// from any goroutine and under the job's tube lock, and gets back the
// change's log position (LSN). Appending only encodes the record into an
// in-memory batch. One writer goroutine takes whole batches, writes them to
// the current segment and, per the sync policy (Options.SyncEvery, NoSync),
// fsyncs; then it publishes the new durable position and runs the OnDurable
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
// writer goroutine, one timer, the spare-making goroutine, the OnDurable
// callbacks and the log lines. It does what the actions say and reports
// each outcome back as an event. Log.mu guards the core: Append and
// OnDurable step it from any goroutine, the writer goroutine between its
// I/O. Stepping the core is cheap, and nothing slow happens under mu.
//
// Events (core methods): start (Start made this run's first segment);
// append and onDurable (a record appended, a callback to hold);
// closeRequested; timerFired; writeDone (bytes written, up to the first
// write that failed); syncDone; removeDone; spareDone (the spare segment
// made, or not: the disk is full). Close's grace running out is no event
// of its own: like a retry's backoff, it is a deadline the core arms the
// timer for.
//
// Actions (ready's result, in the order to carry them out): report (a line
// for the operator: each failed write or fsync, one per backoff at most; a
// change of state, such as a full disk, once) and the Observer's figures;
// publish a durable LSN with the callbacks it releases; retire (trim and
// close) segments no fsync needs any more; make a spare segment (on its
// own goroutine: its outcome comes back later); arm the timer; then at
// most one step of the writer's own, whose outcome the shell reports
// before asking again: write these extents (a new segment's header, then
// batches of records, stopping at the first failure), or fsync these
// segments (after writing again what Linux may have dropped), or migrate
// these ids out of a segment, or remove a segment, or turn (ask again once
// the callbacks just released have run, so the commits they release join
// the next batch), or report the result of Close.
//
// The core chooses that step by a fixed priority, so one look at ready
// says what the writer does next: finish (or retry) the batch being
// written; fsync when the policy, compaction or Close wants it; while
// closing, write what is left, fsync and stop; otherwise take one
// compaction step, alternating with writing new batches so neither
// starves the other. What is acknowledged is decided in one place,
// publish: a second source of durability (a majority's commit, in a
// cluster) would be one more event and one more term there.
//
// # Errors
//
// A failed write is retried with backoff until it works; nothing after it
// is acknowledged meanwhile. A failed fsync is retried on a backoff timer,
// and because Linux may drop the dirty pages when it reports the error,
// the writer keeps every byte written since the last good fsync and writes
// it all again before the next fsync counts; past maxUnsynced such bytes,
// new jobs are refused as on a full disk. Close gives up on writes that
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
package wal
