package wal

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
	// again after a failed fsync; past it, new jobs are refused as on a
	// full disk until an fsync works again.
	maxUnsynced = 64 << 20
	// pipelineMin is how many bytes of new records, under -f 0, the writer
	// writes while an fsync runs rather than after it (core.batchWaits).
	pipelineMin = 64 << 10
)

// Options configure a Log.
type Options struct {
	// SegmentSize is the size segments are preallocated to and rotated at
	// (beanstalkd -s). A batch of records is never split, so a segment may
	// end a little past it. Zero means DefaultSegmentSize.
	SegmentSize int64
	// SyncEvery bounds how long a written record may stay un-fsynced
	// (beanstalkd -f). Zero fsyncs every commit before it is acknowledged.
	SyncEvery time.Duration
	// NoSync never fsyncs (beanstalkd -F).
	NoSync bool
	// SkipDamaged logs and skips damaged records found at start instead of
	// refusing to start.
	SkipDamaged bool
	// MaxJobSize bounds bodies read back, for imports of beanstalkd binlogs.
	MaxJobSize int
	// Importer, if set, takes over a directory holding only another
	// server's log files.
	Importer Importer
	Logger   zerolog.Logger
	// Observer, if set, is told of every batch written and every fsync.
	Observer Observer

	// allocate reserves disk space for a segment; tests inject ENOSPC.
	allocate func(f *os.File, size int64) error
	// writeAt writes to a segment; tests inject I/O errors.
	writeAt func(f *os.File, b []byte, off int64) (int, error)
	// fdatasync syncs a segment; tests inject I/O errors.
	fdatasync func(f *os.File) error
	// maxUnsynced overrides the const of that name in tests; 0 means it.
	maxUnsynced int64
	// pipelineMin overrides the const of that name in tests; 0 means it.
	pipelineMin int64
	// cluster is set by OpenCluster.
	cluster bool
}

// withDefaults fills in what o leaves unset. It is the one place a
// default is chosen, so whoever resolves configuration elsewhere finds
// them all here.
func (o Options) withDefaults() Options {
	if o.SegmentSize <= 0 {
		o.SegmentSize = DefaultSegmentSize
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
