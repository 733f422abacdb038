// Package wal is a single node's job journal: what makes `sprout -b DIR`
// keep every job across restarts and crashes. It is the segment engine
// (store/segment) written with jobs' records: the engine frames, writes,
// fsyncs and compacts them; this package says what a record is, which
// records are live, and what the jobs are after a restart.
//
// # Data flow
//
// The store appends a Record for each change a restart must see (Append),
// from any goroutine and under the job's tube lock, and gets back the
// change's log position (LSN) and, for a job's full record, its Loc (the
// segment holding it and its size). The record is one frame of one
// segment.Group, encoded straight into the engine's batch: a full record
// is its job's latest full version, live (Group.Live), and the job's
// previous full record (Append's prev) stops counting; every record but a
// delete may be refused while the disk is full (ErrNoSpace). When the
// engine's writer publishes a durable LSN, OnDurable's callbacks run and
// the store's held replies go (store/doc.go, "Acknowledgement").
// Durability, group commit, the sync policy (Options.SyncEvery, NoSync),
// failed writes and fsyncs, spares and a full disk are the engine's
// (store/segment/doc.go).
//
// # Records
//
// A record is a frame whose payload is a kind and a job's id, and then:
// for a full record (KindFull: a put, or compaction's rewrite) the tube,
// the state and fields and the body; for an update (KindUpdate: bury,
// kick, release, a reservation) the state and fields; nothing for a delete
// (KindDelete) or an id watermark (KindIDs, written ahead of the id
// counter, so an id taken before its put was durable is never issued
// again). encode.go has the layout. A cluster carries batches of records
// as their frames, one after another, in its Raft entries and snapshots
// (AppendFrame, DecodeFrames; ScanFrames and NextFrame read a record's
// kind, id and size alone), and its own frames' kinds are 16 and up, so
// DecodeFrames never takes one for a record: every record's first byte is
// below 16.
//
// # Request keys, the clock and the dedup table
//
// A cluster's shard group answers each request exactly once across a
// failover (docs/design/shards.md 5.6), and three things in its records
// serve that; a single node's journal holds none of them. The records a
// keyed command writes (a put's full record, a delete, the update of a
// release, bury or kick-job, each update of a kick) carry its key,
// Record.Req: (incarnation, request number), 16 bytes. Such a record is
// written with a first byte of its own, 7, followed by its id, the key
// and then its kind and fields as without a key, so a record without a
// key is byte for byte what it was before keys, and NextFrame and
// ScanFrames still read "kind, then id" (the kind behind the key). One
// key is no request's: ImportKey, of incarnation 0, marks the full record
// of a job a tube's move brought in, which counts in no total-jobs there.
// KindClock carries the leader's clock at the start of a proposed batch;
// KindReq one entry of the dedup table, which a snapshot carries (the
// table itself is store.DedupTable; ScanReqs picks out the records it
// reads). A release from before keys knows kinds 1 to 4 and 15 only: its
// decoder refuses a frame beginning with 5, 6 or 7 as a damaged record
// ("wal: corrupt record"), so a member of that release refuses a peer's
// message that carries one (internal/replication checks every record it
// is sent) and never misreads one. A keyed frame that no encoder writes (a
// zero key, a key on any kind but those three) is refused too, so that
// whatever decodes encodes again to the same bytes.
//
// # Recovery
//
// Open locks the directory (segment.ErrLocked if another server holds it)
// and replays every segment of a journal's version (segment.VersionJournal;
// a cluster member's directory is refused with ErrClusterLog) in order:
// full records create a job, updates change it, deletes drop it, every
// record raises the id watermark (Fold; a reserved job comes back ready).
// A record that does not decode is a damaged frame to the engine (cut off
// as a torn tail at the end of the log, else refused unless
// Options.SkipDamaged). The jobs found are the engine's live items,
// each in its full record's segment, and the store takes them once
// (Recovered); LastID is the highest id ever issued, kept by the segment
// headers when every record naming it is gone. A directory holding only
// beanstalkd binlog files is imported first (Options.Importer): their
// live jobs are written as a first segment, durably and renamed into
// place, before the binlog files are removed, so a crash at any point
// leaves one complete copy. Recover reads a locked directory the same way
// without starting a journal, for a cluster that takes a single node's
// directory over (internal/replication, "Snapshots and a bounded log").
//
// # Compaction
//
// The engine keeps the directory near twice the live data: when the
// oldest segment's live jobs are worth moving, it hands their ids to the
// Migrator Start was given (the store), which appends a fresh full record
// for each still there, with the old Loc as prev, under the job's tube
// lock; once those are durable the segment is removed. An oldest segment
// without live jobs goes at once. NoteMigrated counts the moves
// (binlog-records-migrated).
package wal
