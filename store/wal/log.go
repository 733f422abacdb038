package wal

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/store/segment"
)

// The segment engine's defaults, which a single node's flags show.
const (
	// DefaultSegmentSize is beanstalkd's -s default.
	DefaultSegmentSize = segment.DefaultSegmentSize
	// DefaultSyncEvery is beanstalkd's -f default.
	DefaultSyncEvery = segment.DefaultSyncEvery
)

// Errors a caller maps onto the wire, or reads to the operator. They name
// no flag: cmd/sprout says what to do.
var (
	// ErrNoSpace: the disk has no room for a new segment (or fsyncs keep
	// failing), so only deletes are accepted (their room is kept in
	// reserve). beanstalkd answers OUT_OF_MEMORY to a put in this state.
	ErrNoSpace = errors.New("wal: no space left for new records")
	// ErrClusterLog: the directory is a cluster member's log, which only
	// that member opens (internal/replication).
	ErrClusterLog = errors.New("wal: the directory holds a cluster member's log")
)

// Loc is where a job's latest full record lives: its item's place in the
// segment engine (its segment and size). The zero Loc means none.
type Loc = segment.Loc

// Stats are the figures stats reports as binlog-*: the segment engine's.
type Stats = segment.Stats

// Options configure a Log.
type Options struct {
	// SegmentSize is the size segments are preallocated to and rotated at
	// (beanstalkd -s). Zero means DefaultSegmentSize.
	SegmentSize int64
	// SyncEvery bounds how long a written record may stay un-fsynced
	// (beanstalkd -f). Zero fsyncs every commit before it is acknowledged.
	SyncEvery time.Duration
	// NoSync never fsyncs (beanstalkd -F).
	NoSync bool
	// SkipDamaged logs and skips damaged records found at start instead of
	// refusing to start.
	SkipDamaged bool
	// MaxJobSize bounds bodies read back, for imports of beanstalkd
	// binlogs: 0 means beanstalkd's default, a negative one (-z 0's
	// engine.NoJobBodies) only empty bodies.
	MaxJobSize int
	// Importer, if set, takes over a directory holding only another
	// server's log files.
	Importer Importer
	Logger   zerolog.Logger
	// Observer, if set, is told of every batch written and every fsync.
	Observer segment.Observer
}

// segment is the engine's configuration for a journal.
func (o Options) segment() segment.Options {
	return segment.Options{
		Version:     segment.VersionJournal,
		SegmentSize: o.SegmentSize,
		SyncEvery:   o.SyncEvery,
		NoSync:      o.NoSync,
		SkipDamaged: o.SkipDamaged,
		MaxPayload:  maxPayload,
		// Each live job's delete has its room kept on disk, as beanstalkd
		// reserves it with the put: deletes are never refused.
		DeleteRoom: FrameSize(&Record{Kind: KindDelete}),
		Logger:     o.Logger,
		Observer:   o.Observer,
	}
}

// Recovered is a job found at start, in its final logged state.
type Recovered struct {
	Record
	Loc Loc
}

// Log is a single node's job journal: a segment.Log whose frames are the
// jobs' records, and whose items are the jobs (doc.go). It is safe for
// concurrent use.
type Log struct {
	dir       *segment.Dir // immutable: locked until Close
	seg       *segment.Log // immutable
	recovered []Recovered  // set by Open, handed over once
	closed    atomic.Bool  // Close was called
}

// Open locks dir, replays it and returns the log, not yet writing. Jobs
// found are available from Recovered; call Start to begin appending. A
// directory holding only beanstalkd binlog files is imported first.
// segment.ErrLocked: another server holds dir; ErrClusterLog: dir is a
// cluster member's.
func Open(dir string, opts Options) (*Log, error) {
	d, err := segment.LockDir(dir)
	if err != nil {
		return nil, err
	}
	seg, jobs, err := open(d, opts)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return &Log{dir: d, seg: seg, recovered: jobs}, nil
}

// Recover reads d as a single node's journal at start (importing a
// beanstalkd binlog first, as Open does): its live jobs, in id order, and
// the highest id it ever issued. The directory stays as it is but for
// what opening it repairs (a torn tail cut off, an unfinished segment
// removed). A cluster takes a single node's directory over so
// (internal/replication).
func Recover(d *segment.Dir, opts Options) (jobs []Recovered, lastID uint64, err error) {
	seg, jobs, err := open(d, opts)
	if err != nil {
		return nil, 0, err
	}
	lastID = seg.LastID()
	return jobs, lastID, seg.Close()
}

// Recovered hands over the jobs found at start, once.
func (l *Log) Recovered() []Recovered {
	r := l.recovered
	l.recovered = nil
	return r
}

// LastID is the highest job id the directory has ever issued.
func (l *Log) LastID() uint64 { return l.seg.LastID() }

// Start opens a new segment and begins writing. m moves jobs during
// compaction.
func (l *Log) Start(m segment.Migrator) error { return l.seg.Start(m) }

// Append adds a record and returns its LSN. A KindFull record's new Loc is
// returned; prev is the job's previous full record (zero for a put), which
// stops counting as live. Only deletes are accepted while the disk is full
// (ErrNoSpace).
func (l *Log) Append(r *Record, prev Loc) (lsn uint64, loc Loc, err error) {
	size := payloadSize(r) + segment.FrameHeader
	g := segment.Group{
		Size:      size,
		Encode:    func(b []byte) []byte { return appendFrame(b, r) },
		ID:        r.ID,
		Live:      r.Kind == KindFull,
		Prev:      prev,
		Refusable: r.Kind != KindDelete,
	}
	lsn, seg, _, err := l.seg.Append(&g)
	if err != nil {
		if errors.Is(err, segment.ErrNoSpace) {
			err = ErrNoSpace
		}
		return 0, Loc{}, err
	}
	if g.Live {
		loc = Loc{Seg: seg, Size: uint32(size)}
	}
	return lsn, loc, nil
}

// Durable is the highest LSN that has been acknowledged as durable.
func (l *Log) Durable() uint64 { return l.seg.Durable() }

// OnDurable calls fn, on the writer goroutine, once lsn is durable (at
// once, on this goroutine, if it already is).
func (l *Log) OnDurable(lsn uint64, fn func()) { l.seg.OnDurable(lsn, fn) }

// Stats reads the log's figures.
func (l *Log) Stats() Stats { return l.seg.Stats() }

// NoteMigrated counts a job moved by the Migrator.
func (l *Log) NoteMigrated() { l.seg.NoteMigrated() }

// Close writes and fsyncs everything appended, stops the writer
// (segment.Log.Close says in what order) and drops the directory's lock.
// Only the first call does; the others return nil at once.
func (l *Log) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	return errors.Join(l.seg.Close(), l.dir.Close())
}
