package segment

import (
	"os"
	"time"

	"github.com/rs/zerolog"
)

const (
	// DefaultSegmentSize is beanstalkd's -s default.
	DefaultSegmentSize = 10 << 20
	// DefaultSyncEvery is beanstalkd's -f default.
	DefaultSyncEvery = 50 * time.Millisecond
	// defaultCloseGrace bounds how long Close keeps retrying failed writes.
	defaultCloseGrace = 10 * time.Second
	// maxUnsynced bounds the written but unsynced bytes kept to be written
	// again after a failed fsync; past it, refusable groups are refused as
	// on a full disk until an fsync works again.
	maxUnsynced = 64 << 20
	// pipelineMin is how many bytes of new frames, under SyncEvery 0, the
	// writer writes while an fsync runs rather than after it
	// (core.batchWaits).
	pipelineMin = 64 << 10
	// maxFrame is the largest payload a frame's length field can say.
	maxFrame = 1<<32 - 1
)

// The versions of segment headers in use: each user writes its own, so
// neither opens the other's directory by mistake (Open refuses a segment
// of another version with a *VersionError).
const (
	// VersionJournal is a single node's job journal's (store/wal).
	VersionJournal uint32 = 1
	// VersionRaftLog is a cluster member's Raft log's
	// (internal/replication).
	VersionRaftLog uint32 = 2
	// VersionMultiRaft is a cluster member's log shared by the Raft groups
	// it holds (internal/replication, SharedLog): each frame names its
	// group. Its user reads version 2 segments too (Options.Reads), and
	// switches to it while it runs (Log.SetVersion).
	VersionMultiRaft uint32 = 3
)

// Options configure a Log.
type Options struct {
	// Version is the version the user's segment headers say (VersionJournal,
	// VersionRaftLog, VersionMultiRaft), until SetVersion says another: Open
	// refuses a segment of any other but Reads.
	Version uint32
	// Reads are the other versions Open replays (each Frame says its
	// segment's): a user whose format grew reads its older segments.
	Reads []uint32
	// SegmentSize is the size segments are preallocated to and rotated at
	// (beanstalkd -s). A group of frames is never split, so a segment may
	// end a little past it. Zero means DefaultSegmentSize.
	SegmentSize int64
	// SyncEvery bounds how long a written frame may stay un-fsynced
	// (beanstalkd -f). Zero fsyncs every group before it is durable.
	SyncEvery time.Duration
	// NoSync never fsyncs (beanstalkd -F).
	NoSync bool
	// SkipDamaged logs and skips damaged frames found at Open instead of
	// refusing to open.
	SkipDamaged bool
	// MaxPayload bounds the payload of a frame found at Open: a longer one
	// is damaged. Zero means what a frame's length can say.
	MaxPayload int
	// Checkpoints: every segment opens with what its user needs to start
	// from it and the segments after it alone, so that any prefix of
	// segments may go (doc.go, "Checkpoints"): the checkpoint frame
	// SetCheckpoint gives, set before Start, and in its header the highest
	// id named before appends moved to it (FloorID).
	Checkpoints bool
	// MovesLater: the Migrator's moves take effect when the user reports
	// them (Moved), after Migrate returns, rather than by the appends
	// Migrate makes (doc.go, "Items").
	MovesLater bool
	// DeleteRoom is the bytes kept on disk for each live item's delete, a
	// group that is never refused: a journal's delete frame. Zero keeps
	// none (doc.go, "Room for deletes").
	DeleteRoom int
	Logger     zerolog.Logger
	// Observer, if set, is told of every batch written and every fsync.
	Observer Observer

	// allocate reserves disk space for a segment, writing zeros into it
	// with zero; tests inject ENOSPC.
	allocate func(f *os.File, size int64, zero bool) error
	// writeAt writes to a segment; tests inject I/O errors.
	writeAt func(f *os.File, b []byte, off int64) (int, error)
	// fdatasync syncs a segment; tests inject I/O errors.
	fdatasync func(f *os.File) error
	// maxUnsynced overrides the const of that name in tests; 0 means it.
	maxUnsynced int64
	// pipelineMin overrides the const of that name in tests; 0 means it.
	pipelineMin int64
}

// withDefaults fills in what o leaves unset. It is the one place a
// default is chosen, so whoever resolves configuration elsewhere finds
// them all here.
func (o Options) withDefaults() Options {
	if o.SegmentSize <= 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.MaxPayload <= 0 || o.MaxPayload > maxFrame {
		o.MaxPayload = maxFrame
	}
	if o.allocate == nil {
		o.allocate = allocate
	}
	if o.writeAt == nil {
		o.writeAt = func(f *os.File, b []byte, off int64) (int, error) { return f.WriteAt(b, off) }
	}
	if o.fdatasync == nil {
		o.fdatasync = fdatasync
	}
	if o.maxUnsynced <= 0 {
		o.maxUnsynced = maxUnsynced
	}
	if o.pipelineMin <= 0 {
		o.pipelineMin = pipelineMin
	}
	return o
}
