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
// # Errors
//
// A failed write is retried until it works; nothing after it is
// acknowledged meanwhile. A failed fsync is retried on a backoff timer, and
// because Linux may drop the dirty pages when it reports the error, the
// writer keeps every byte written since the last good fsync and writes it
// all again before the next fsync counts; past maxUnsynced such bytes, new
// jobs are refused as on a full disk. Close gives up on a disk that keeps
// failing after a grace period (what it abandons was never acknowledged)
// and says so.
//
// # Files
//
// DIR/sprout.NNNNNNNN.wal segments, each a 24-byte header (magic, version,
// highest id issued when it began) followed by frames: u32 length, u32
// CRC-32C, payload (encode.go). Segments are preallocated and zero-filled;
// one spare is always ready, so rotation never waits and a full disk only
// refuses new work, never deletes. DIR/lock is locked with fcntl, as
// beanstalkd does.
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
