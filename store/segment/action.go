package segment

import "time"

// action is one thing the core asks the shell to do (see doc.go). Which
// fields count depends on kind. It is kept small: a few are built for
// every batch.
type action struct {
	kind   actionKind
	report report // actReport
	keep   bool   // actWrite: keep a copy, to write again after a failed fsync
	sync   bool   // actRetire: fsync first
	seq    uint32 // the segment
	// version is actMakeSpare's: what the new header says.
	version uint32
	// n is the action's one figure: actRetire and actRoom: the size to
	// trim (or make) the file to;
	// actObserveBatch: bytes; actReport: a figure; and, read through the
	// methods below, actPublish's LSN, actMakeSpare's header id and
	// actTimer's time.
	n       int64
	records int32           // actObserveBatch
	writes  []extent        // actWrite
	due     []durableWaiter // actPublish: the callbacks it releases
	segs    []uint32        // actSync: the segments to fsync
	ids     []uint64        // actMigrate: the items to move out of seq
	err     error           // actReport: what failed; actClosed: Close's result
}

// lsn is actPublish's durable LSN.
func (a *action) lsn() uint64 { return uint64(a.n) }

// lastID is actMakeSpare's highest id issued, for the new header.
func (a *action) lastID() uint64 { return uint64(a.n) }

// at is when actTimer wants the timer, since the shell's origin.
func (a *action) at() time.Duration { return time.Duration(a.n) }

type actionKind uint8

const (
	// actReport: tell the operator (log) what report says.
	actReport actionKind = iota + 1
	// actObserveBatch: tell the Observer a batch was written.
	actObserveBatch
	// actPublish: everything up to lsn is durable; run the callbacks.
	actPublish
	// actRetire: trim segment seq to off bytes and close it.
	actRetire
	// actMakeSpare: make and preallocate segment seq on another goroutine,
	// then report spareDone.
	actMakeSpare
	// actSync: fdatasync segs on another goroutine, then report syncDone.
	// The copies kept since the last good fsync that are there now are
	// what it covers: it drops them if it works. At most one is in flight,
	// and until it reports back none of its segments is retired or
	// removed.
	actSync
	// actTimer: call timerFired at `at` (re-arming the one timer).
	actTimer
	// actRoom: make the room file n bytes (allocated, or cut), between the
	// writer's steps, then roomDone with its size.
	actRoom

	// The writer's own I/O: carried out in order, its outcome reported
	// before ready is called again.

	// actWrite: write each extent's b at its off in its segment, in order,
	// up to the first that fails; then writeDone with the bytes written in
	// all.
	actWrite
	// actRewrite: write again every copy kept since the last fsync that
	// worked, up to the first that fails; then rewriteDone.
	actRewrite
	// actMigrate: Migrator.Migrate(seq, ids); its appends are its outcome.
	actMigrate
	// actRemove: close segment seq if open and delete it, then removeDone.
	actRemove
	// actTurn: call ready again at once (once the callbacks published
	// before it have run).
	actTurn
	// actClosed: Close's work is done and err is its result; the writer
	// stops.
	actClosed
)

// report is a line for the operator, with the segment and error it
// concerns: each failed write or fsync (one per backoff at most), and
// each change of state (a full disk, space back, a backlog) once, by the
// event that makes it true.
type report uint8

const (
	// reportWriteFailed: a write to seq failed (err); it is retried.
	reportWriteFailed report = iota + 1
	// reportGaveUp: closing, writes to seq kept failing past the grace.
	reportGaveUp
	// reportSyncFailed: an fsync failed on seq (err), or writing again
	// before it; everything written since the last good one is written
	// again and the fsync retried.
	reportSyncFailed
	// reportBacklog: n bytes written wait for an fsync, past the bound
	// (fsyncs fail, or are slower than the writes); puts are refused
	// until one brings them back under it.
	reportBacklog
	// reportBacklogOver: an fsync brought them back under the bound;
	// puts are taken.
	reportBacklogOver
	// reportDiskFull: no spare segment could be made (err); puts are
	// refused until one can.
	reportDiskFull
	// reportSpaceBack: a spare was made again; puts are taken.
	reportSpaceBack
	// reportStuck: seq holds n live records but no jobs to move.
	reportStuck
	// reportRemoveFailed: seq could not be removed (err); it is tried
	// again every removeRetry.
	reportRemoveFailed
	// reportRoomShort: the room for deletes could not grow (err), holding
	// n bytes; puts are refused once the live items need more.
	reportRoomShort
	// reportRoomBack: the room for deletes grew again, to n bytes.
	reportRoomBack
	// reportRoomSpent: no spare could be made; the room's n bytes are
	// given up to the deletes.
	reportRoomSpent
)
