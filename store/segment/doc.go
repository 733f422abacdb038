// Package segment is Sprout's segment engine: checksummed frames in
// preallocated segment files, written by one writer with group commit,
// fsynced per a policy, with live accounting and compaction. It is what
// both logs on disk are made of: a single node's job journal (store/wal)
// and a cluster member's Raft log (internal/replication, WALLog). It
// knows frames, groups of frames and items, never what they mean.
//
// The name: the unit both users share is the segment, a file of frames
// that is preallocated, written, retired and compacted away whole; the
// package's words read so at their call sites (segment.Log,
// segment.Dir, segment.Loc, segment.ErrLocked), where "wal" or "log"
// would say nothing one of its users does not already say.
//
// # Data flow
//
// A user locks its directory (LockDir), replays what it holds (Open, with
// a callback per frame), tells the log what is live there, and starts it
// (Start). It then appends groups of frames it encoded (Append, a Group),
// from any goroutine, and gets back the group's log position (LSN) and
// its place (segment and offset). Appending only encodes the group into an
// in-memory batch, under the log's mutex. One writer goroutine takes whole
// batches and writes them to the current segment; per the sync policy
// (Options.SyncEvery, NoSync) it hands an fsync of what it has written to
// a goroutine of its own and goes on writing while it runs. It publishes
// the new durable position (written, or with SyncEvery 0 fsynced) and runs
// the OnDurable callbacks, so every commit that waited on one fsync is
// released together (group commit) and no caller ever waits on the disk.
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
// The shell (log.go, writer.go) is the Log its users see: files, the
// writer goroutine, one timer, the spare-making goroutine, the fsync
// goroutine, the OnDurable callbacks and the log lines. It does what the
// actions say and reports each outcome back as an event. Log.mu guards the
// core: Append and OnDurable step it from any goroutine, the writer
// goroutine between its I/O. Stepping the core is cheap, and nothing slow
// happens under mu.
//
// Events (core methods): start (Start made this run's first segment);
// append and onDurable (a group appended, a callback to hold); moved (an
// item's latest full version moved); closeRequested; timerFired;
// writeDone (bytes written, up to the first write that failed);
// rewriteDone (what a failed fsync left in doubt was written again, or
// not); syncDone (the fsync in flight worked, or not); removeDone;
// spareDone (the spare segment made, or not: the disk is full). Close's
// grace running out is no event of its own: like a retry's backoff, it is
// a deadline the core arms the timer for.
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
// groups, stopping at the first failure), or write again every copy kept
// since the last good fsync, or migrate these items out of a segment, or
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
// flight. What is durable is decided in one place, publish: a second
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
// # Appends
//
// A Group is one frame or more that its user encodes (Encode, under the
// log's mutex, straight into the batch: no copy) and that always lands in
// one segment, which Append reports with its offset there, so that the
// user can read it back later (ReadFrame, or ReadFrameInto a buffer kept
// for the next). A group larger than what is
// left of the current segment moves appends to the spare first, unless
// the segment holds nothing yet: a group larger than a segment is written
// whole. A group is refused only after Close (ErrClosed), or, if it is
// Refusable, while the log is Full (ErrNoSpace): no spare segment could
// be made (the disk is full), or more than maxUnsynced waits for an fsync
// that keeps failing; or, but for compaction's moves, while the room for
// deletes is short (below). A journal's puts are refusable and its
// deletes are not: they are what that room is kept for. A
// cluster's Raft log cannot refuse Raft's writes, so none of its groups
// is refusable: it takes them into the current segment's preallocated
// room and past it, where a write may fail and is retried; its leader's
// journal refuses new jobs while Full says so. An Unsynced group asks for
// no fsync of its own (a hard state that only raises Raft's commit
// index): it is written with the others, and durable with the next fsync
// that a group, compaction or Close asks for.
//
// # Errors
//
// A failed write is retried with backoff until it works; nothing after it
// is acknowledged meanwhile. A failed fsync is retried on a backoff timer,
// and because Linux may drop the dirty pages when it reports the error,
// the writer keeps every byte written since the last good fsync and writes
// it all again before the next fsync counts (see above); past maxUnsynced
// such bytes, refusable groups are refused as on a full disk. Close gives
// up on writes that keep failing once its grace period has passed (what
// it abandons was never acknowledged) and says so. The errors the package
// returns name no flag or command (ErrLocked, ErrNoSpace, ErrClosed,
// ErrCorrupt, ErrNotSegment, *VersionError, *DamageError): the binary
// (cmd/sprout) says what to do about them.
//
// # Files
//
// DIR/sprout.NNNNNNNN.wal segments, each a 24-byte header (magic, version,
// seal, an id: below) followed by frames: u32 length, u32 CRC-32C, payload
// (frame.go; BeginFrame and EndFrame write one, CheckFrame reads one).
// The seal (bytes 12-15, zero in earlier releases, which never read them)
// says whether the segment is still written to: see Recovery.
// The version says whose segments they are: 1 a single node's journal
// (VersionJournal), 2 a cluster member's Raft log (VersionRaftLog), 3 a
// cluster member's log shared by several Raft groups (VersionMultiRaft);
// Open refuses any other than its user's (a *VersionError), so neither
// opens the other's directory by mistake, and a release that predates a
// version refuses its segments rather than misread them.
//
// # Versions
//
// A user whose format grew reads its older segments too (Options.Reads;
// each Frame says its segment's version) and switches while it runs
// (SetVersion): appends move at once to a segment of the new version,
// which begins with the checkpoint given, so that every frame in a
// segment is of its header's version. The switch waits for a spare of the
// new version: one made before it is retired unwritten (its header says
// the old one), a new one is made (SpareMade), and until then appends
// stay in the current segment whatever its size. Segments written before
// keep their version until compaction removes them. Segments are preallocated and
// zero-filled; one spare is always ready, so rotation never waits and a
// full disk refuses new work, not deletes (below). While it is full, a
// new spare is tried every 250 ms, and at once when compaction frees a
// segment. DIR/lock is locked with fcntl, as beanstalkd does (LockDir).
// Dir.Create writes a whole segment at once (an import, a conversion),
// durably and renamed into place, so a crash leaves it whole or absent.
//
// # Room for deletes
//
// A journal's deletes are never refused, so they must find room on a
// full disk: beanstalkd reserves each put's delete in its binlog files.
// Without it, the deletes fit only in what was left of the current
// segment, and compaction frees nothing while long-lived items pin the
// oldest segment: a delete past that room failed and was retried until
// the disk had room again, its client waiting. The log keeps the room in
// a file of its own, DIR/sprout.room, allocated (fallocate: the blocks,
// never written; a copy that kept holes counts only its blocks) to
// Options.DeleteRoom bytes for each live item, its delete's frame, and a
// refusable group but compaction's moves is refused while the room holds
// less than one more item needs, with half a step to spare (roomShort).
// The core counts the live items and asks for the file to grow two or
// three steps (roomStep) ahead of them once they come within a step of
// it, and for it to shrink when they fall well below; the writer changes
// it between its other steps, quickly, on a descriptor it keeps (actRoom,
// roomDone), and Start makes it what the items found need before the
// first append. A growth goes beside the spare maker; a cut comes first,
// the spare waiting for it (it may free what the spare needs). A change
// that fails is tried again every 250 ms; a growth the disk refuses is
// reported, and puts are then also held to what appends past the current
// segment's size (no spare ready) would take from the room.
//
// When the disk is full, what is allocated ahead goes to the deletes:
// when no spare can be made for want of space, the room is given up (its
// file cut to nothing) and a spare tried at once in what that frees;
// when a write fails for want of space (groups appended past the current
// segment's size while no spare was ready), a spare made meanwhile and
// not yet written to is cut to its header, the room given up, and no
// spare made until the write works. The writer takes the spare maker's
// outcome at every turn, not only when it idles, so that a load keeping
// it busy does not leave appends past a segment's size. Puts stay refused
// until the room has grown back, after space returns. The file outlives a
// restart, so that a start on a full disk gives it up to make its first
// segment. A cluster's Raft log keeps none (DeleteRoom 0) and removes a
// file it finds. Known limits: other writers filling the disk can take
// the blocks given up before the deletes do, as they can beanstalkd's;
// and on a disk a segment or two from full, puts appended past a
// segment's size faster than its spare is made can take blocks the room
// counted on (a 600 KiB tmpfs with 64 KiB segments, puts never waited
// on: some runs in ten), the deletes then waiting for compaction or the
// operator to free space.
//
// # Recovery
//
// Open replays every segment in order, handing each frame that checks
// (length, CRC, Options.MaxPayload) to its user's callback with its
// segment, offset and size. What a frame that does not check, or that the
// callback finds damaged (ErrCorrupt), means depends on its segment's
// seal, which says whether a crash can have torn it:
//
//   - Open (sealOpen): this release made the segment, and no run has
//     sealed it since, so the crashed run had it open. A power loss
//     leaves what was written since the last fsync, in any order, each
//     byte written or still zero, and one fsync covers every open
//     segment, so the last batch may span two. Groups are durable in log
//     order, and nothing after a byte the disk lost was covered by an
//     fsync that finished (what the sync policy acknowledged before its
//     fsync, it lets a power loss take): the first bad frame is a tear,
//     whatever follows it, when every later segment is open too or holds
//     nothing (a header and zeros). The segment is cut off there and
//     every later segment removed, with a warning each (but a spare's). A
//     length above MaxPayload is never a tear (a torn length, each byte
//     written or zero, is at most the frame's). Damage to a frame an
//     fsync covered in such a segment cannot be told from a tear: it is
//     cut off with the tear, the price of starting after a power loss;
//     only the segments of the one crashed run are open, as Open seals
//     them (below).
//   - Sealed (a length): an fsync covered every frame of the segment
//     before its length was written there, so nothing in it is torn: any
//     bad frame is damage. The length is trusted only when it is the
//     file's size (sealing trims the file to it, and a crash while sealing
//     leaves the two apart); nothing lies past it.
//   - Unknown (0: an earlier release's segment; a seal that is not the
//     file's size: a crash while sealing, a seal write torn, a file cut
//     short by an earlier release after a downgrade; or an open segment
//     with a later one neither open nor empty, which an earlier release
//     wrote after it): as before seals, a bad frame at the end of the
//     last segment holding frames (beyond its checkpoint, with
//     Checkpoints) is a tear when nothing but zeros follows where its
//     length says it ends, or its length is unreadable; it is cut off
//     with a warning.
//
// Damage, anything else, stops the start (a *DamageError) unless
// Options.SkipDamaged, which logs and skips the frame: by its length, or
// when that is unreadable and the segment is sealed, to where a run of
// frames that check ends at the sealed length (the first such place: one
// inside the damaged frame's payload, a job's body holding bytes framed
// as frames, would be taken for frames; an operator's choice to recover
// what it can, not a start's). A frame that checks but that the callback
// finds damaged is damage, never a tear, in a segment open or sealed
// (an earlier release's keeps the old rule). Any other error of the
// callback stops the start whatever SkipDamaged says. A segment of zeros
// (its preallocation cut short by a crash) is removed.
//
// A segment is sealed once nothing will write to it again and an fsync has
// covered all it holds: when the writer retires it (a rotation, and Close
// for the segment written and the spare) it trims the file to what it
// holds, writes that length into the header and fsyncs both (trimmed
// first, so a process that dies between leaves it open), on the writer's
// goroutine before the next fsync is handed out (so only the fsync that
// covered the segment's last frames can have acknowledged later ones
// before it is sealed, and a torn tail there means it never finished).
// Dir.Create writes its segment sealed. Open seals the segments it found
// open, once replayed (an fsync of their frames first, then as a
// retirement does; one whose frames end at damage SkipDamaged skipped is
// marked unknown instead), before Start writes anything, so that the next
// crash finds only its own run's segments open. A crash while sealing
// leaves the segment open (its tear rule is safe: an fsync covered it all)
// or its seal unknown. A seal is not a format version: an earlier release
// ignores it and reads the segments as before, and segments it makes read
// 0. A segment longer than a seal can say (4 GiB) is left unknown.
//
// A clean Close trims the segment written and the spare to what they
// hold, as a rotation trims the segment before, so a restart reads its
// frames and not megabytes of preallocated zeros; only a crash leaves
// those, and the checks for an empty segment stop at its first written
// byte.
//
// # Items, and compaction
//
// What is live is counted over items: an id with the segment holding its
// latest full version and that version's size (Loc). A user says so in
// one of two ways. A journal says it as it appends: a Group that is Live
// is item ID's latest full version, and its Prev, the version before,
// stops counting; it says what it found at Open by Moved. A cluster's
// Raft log says it by Moved alone, as it applies the entries it knows
// committed (Options.MovesLater), and which segments it still needs, live
// items or not, by Hold (every segment from this one on; a user that
// holds segments says so before Start). Without a live item, and below
// the segment held, the oldest segment is removed once everything
// appended when that became true is fsynced (for a Raft log, among it the
// hard state whose commit covers the entries that moved its items). When
// the directory, counting the live items of its oldest segment once more
// (they are about to be copied), would be larger than twice the live data
// plus two segments (current and spare included), and the move would
// reclaim at least half of what it copies, the writer hands those items'
// ids to the Migrator (Start, SetMigrator), a batch at a time, which
// rewrites them at the head: a journal by appends whose Prev is the old
// Loc; a cluster's serving leader by records of its next proposal, which
// every member writes and applies, and Moved tells each log once they
// are. Without a Migrator a log never migrates (a member that only
// follows: its segments go as the leader's rewrites, applied, leave them
// with nothing live). With MovesLater, a segment whose live items were
// all handed out waits for their moves; without, it is reported once as
// stuck. While the disk is full the moves go on only if the oldest
// segment's live items fit in what is left of the current segment,
// with an eighth of a segment kept beside them for deletes: a journal's
// groups that move them (Live, their Prev in that segment) are then
// taken though refusable, and the segment's removal gives back the room
// the next spare needs (a disk filled by the log's own garbage frees
// itself). A move refused because the deletes between the batches took
// its room gives its item back, and the segment waits for the disk to
// have room. When they do not fit at all (the deletes and the last puts
// filled the current segment first), nothing is freed: puts stay refused
// until the oldest segment's last live items are deleted (it then goes
// without moves) or the disk gets room (TestDiskFullOfOwnGarbageRecovers
// fails so about once in 200 runs on a loaded machine). While fsyncs keep
// failing, none go.
//
// # Checkpoints
//
// With Options.Checkpoints (a cluster's Raft log), every segment opens
// with what its user needs to start from it and the segments after it
// alone, so any prefix of segments can go without losing the user's
// state: the checkpoint frame the user gave last (SetCheckpoint, before
// Start; then Group.Checkpoint), written first when appends move to the
// segment, and in its header the highest id named before appends moved to
// it (the ids of each group, Group.ID, and those the user replayed,
// RaiseID). The oldest segment's header id is then at least every id a
// removed segment named (FloorID). A group that changes the checkpointed
// state gives its checkpoint with it (Group.Checkpoint), in one step: the
// writer moves to the spare on its own once the current segment outgrew
// its size, and a segment begun between the group and a later
// SetCheckpoint would start with the older state after the group, which
// replay would take for the last. At Open, a spare an earlier run never
// wrote to, whose header id is older than what was written after it was
// made, is removed, and a torn write is looked for in the last segment
// holding more than its checkpoint. Without Checkpoints (a journal), a
// segment's header holds the highest id issued when it is first written.
package segment
