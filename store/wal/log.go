package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Errors a caller maps onto the wire.
var (
	// ErrNoSpace: the disk has no room for a new segment, so only deletes
	// are accepted (their room is kept in reserve). beanstalkd answers
	// OUT_OF_MEMORY to a put in this state.
	ErrNoSpace = errors.New("wal: no space left for new records")
	// ErrLocked: another server holds the directory's lock.
	ErrLocked = errors.New("wal: directory is locked by another server")
)

// Observer receives the writer goroutine's figures, for metrics. Its
// methods run on the writer goroutine, so they must be cheap and never
// block: every commit waits behind them.
type Observer interface {
	// ObserveBatch reports one batch written: its bytes and records.
	ObserveBatch(bytes, records int)
	// ObserveSync reports how long one fsync that worked took: of every
	// segment written since the last, rewrites after a failure excluded.
	ObserveSync(d time.Duration)
}

// Loc is where a job's latest full record lives: its segment and size.
// The zero Loc means none.
type Loc struct {
	Seg  uint32
	Size uint32
}

// Migrator moves live jobs out of an old segment by appending a fresh full
// record for each (Log.Append with the job's current Loc as prev). It is
// called on the log's writer goroutine with no log lock held.
type Migrator interface {
	Migrate(seg uint32, ids []uint64)
}

// Recovered is a job found at start, in its final logged state.
type Recovered struct {
	Record
	Loc Loc
}

// Log is a segmented, checksummed write-ahead log with group commit. Any
// goroutine appends records (Append) and asks to be told when they are
// durable (OnDurable); one writer goroutine writes them in batches, and
// fsyncs them on a goroutine of its own while it writes the next, so every
// commit waiting on one fsync is released together.
//
// Log is the shell around the writer's core (see doc.go): its decisions
// are the core's, its files, goroutines and timer are the Log's.
type Log struct {
	dir    string    // immutable
	opts   Options   // immutable
	origin time.Time // immutable: the core's times count from here
	log    zerolog.Logger
	lock   *os.File // holds the directory lock for the process's life
	// dirFile is the directory, kept open so that syncing it never needs a
	// new descriptor; reserve holds descriptors for new segments.
	dirFile *os.File
	reserve descriptorReserve

	recovered []Recovered // set by Open, handed over once
	// migrator holds a migratorBox: set by Start before the writer runs,
	// and by SetMigrator (cluster mode) at any time.
	migrator atomic.Value

	mu   sync.Mutex
	core *core // guarded by mu

	durable  atomic.Uint64 // what the writer last published as durable
	migrated atomic.Int64

	// writer goroutine only (and Start before it runs, Close after it ends)
	files    map[uint32]*os.File // segments this run made and has not closed
	unsynced []unsyncedSpan      // copies of what was written since the last good fsync
	syncMark unsyncedMark        // the copies the fsync in flight covers
	// syncFiles is the fsync in flight's: the writer fills it when it
	// hands the fsync out and leaves it alone until the outcome comes.
	syncFiles []syncTarget
	// syncC is syncs while an fsync is in flight, else nil.
	syncC <-chan syncResult
	timer *time.Timer
	// timerC is timer.C while the timer is armed, else nil: a select on a
	// timer's channel costs a clock read even while it is stopped.
	timerC   <-chan time.Time
	closeErr error // what Close reports, set before done is closed

	kick    chan struct{}    // an append or Close for the writer
	spares  chan spareResult // the spare maker's outcome; one at a time
	spareWG sync.WaitGroup   // the spare maker
	syncs   chan syncResult  // the fsync goroutine's outcome; one at a time
	syncWG  sync.WaitGroup   // the fsync goroutine
	done    chan struct{}    // closed when the writer goroutine ends

	// Cluster mode: descriptors for reading frames back (ReadFrame), by
	// segment, guarded by readMu; the writer closes a segment's before it
	// removes the file.
	readMu  sync.Mutex
	readers map[uint32]*os.File
}

// migratorBox lets a nil Migrator sit in an atomic.Value.
type migratorBox struct{ m Migrator }

// Open locks dir, replays it and returns the log, not yet writing. Jobs
// found are available from Recovered; call Start to begin appending. A
// directory holding only beanstalkd binlog files is imported first.
func Open(dir string, opts Options) (*Log, error) {
	opts.cluster = false
	return open(dir, opts, (*Log).load)
}

// open locks dir and loads it with load.
func open(dir string, opts Options, load func(*Log) error) (*Log, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	l := &Log{
		dir:    dir,
		opts:   opts,
		origin: time.Now(),
		log:    opts.Logger,
		core:   newCore(opts.policy()),
		files:  make(map[uint32]*os.File),
		kick:   make(chan struct{}, 1),
		spares: make(chan spareResult, 1),
		syncs:  make(chan syncResult, 1),
		done:   make(chan struct{}),
	}
	l.migrator.Store(migratorBox{})
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l.lock = lock
	if l.dirFile, err = os.Open(dir); err != nil {
		_ = lock.Close()
		return nil, err
	}
	if err := load(l); err != nil {
		_ = l.dirFile.Close()
		_ = lock.Close()
		return nil, err
	}
	l.reserve.fill()
	return l, nil
}

// lockDir takes beanstalkd's lock (an fcntl write lock on DIR/lock), so
// neither a second Sprout nor a beanstalkd can share the directory.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(f.Fd(), lockCmd, &lk); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	return f, nil
}

// Recovered hands over the jobs found at start, once.
func (l *Log) Recovered() []Recovered {
	r := l.recovered
	l.recovered = nil
	return r
}

// LastID is the highest job id the directory has ever issued.
func (l *Log) LastID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.lastID
}

// Start opens a new segment and begins writing. m moves jobs during
// compaction. The writer's first turn makes the spare and removes the
// segments earlier runs left with nothing live in them (a server that
// restarts with no traffic would otherwise keep one more each time).
func (l *Log) Start(m Migrator) error {
	l.migrator.Store(migratorBox{m})
	l.mu.Lock()
	seq, last := l.core.nextSeq(), l.core.lastID
	l.mu.Unlock()
	f, err := l.openSegment(seq, last)
	if err != nil {
		return err
	}
	l.files[seq] = f
	l.mu.Lock()
	l.core.start(time.Since(l.origin), seq)
	l.mu.Unlock()
	go l.run()
	return nil
}

// Append adds a record and returns its LSN. A KindFull record's new Loc is
// returned; prev is the job's previous full record (zero for a put), which
// stops counting as live. Only deletes are accepted while the disk is full.
func (l *Log) Append(r *Record, prev Loc) (lsn uint64, loc Loc, err error) {
	l.mu.Lock()
	lsn, loc, err = l.core.append(r, prev)
	kick := err == nil && l.core.kickWanted()
	l.mu.Unlock()
	if kick {
		l.poke()
	}
	return lsn, loc, err
}

// Durable is the highest LSN that has been acknowledged as durable.
func (l *Log) Durable() uint64 { return l.durable.Load() }

// OnDurable calls fn, on the writer goroutine, once lsn is durable (at
// once, on this goroutine, if it already is).
func (l *Log) OnDurable(lsn uint64, fn func()) {
	if l.durable.Load() >= lsn {
		fn()
		return
	}
	l.mu.Lock()
	now := l.core.onDurable(lsn, fn)
	l.mu.Unlock()
	if now {
		fn()
	}
}

// Stats are the figures stats reports as binlog-*.
type Stats struct {
	OldestIndex, CurrentIndex       uint32
	RecordsMigrated, RecordsWritten int64
	MaxSize                         int64
	DiskBytes, LiveBytes            int64
}

// Stats reads the log's figures.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	st := l.core.stats()
	l.mu.Unlock()
	st.RecordsMigrated = l.migrated.Load()
	return st
}

// NoteMigrated counts a job moved by the Migrator.
func (l *Log) NoteMigrated() { l.migrated.Add(1) }

// Close writes and fsyncs everything appended, then stops the writer.
//
// Shutdown order:
//  1. no more appends are accepted;
//  2. the writer writes what is pending (while an fsync in flight
//     finishes), then fsyncs everything, whatever the policy; writes that
//     still fail after a grace of 10 s are given up (nothing they held was
//     acknowledged) and Close says so; an fsync in flight is always waited
//     for;
//  3. what became durable is acknowledged, the writer stops once no fsync
//     is in flight, the spare maker and the fsync goroutine are waited
//     for, files are closed and the directory lock dropped.
//
// A log that was never started just drops its lock.
func (l *Log) Close() error {
	l.mu.Lock()
	first := l.core.closeRequested(time.Since(l.origin))
	started := l.core.started()
	l.mu.Unlock()
	if !first {
		return nil
	}
	var err error
	if started {
		l.poke()
		<-l.done
		err = l.closeErr
	}
	l.spareWG.Wait()
	l.syncWG.Wait() // the writer stops with none in flight; this makes sure
	select {
	case s := <-l.spares: // made after the writer stopped
		if s.f != nil {
			_ = s.f.Close()
		}
	default:
	}
	for _, f := range l.files {
		_ = f.Close()
	}
	l.readMu.Lock()
	for seq, f := range l.readers {
		_ = f.Close()
		delete(l.readers, seq)
	}
	l.readMu.Unlock()
	l.reserve.close()
	_ = l.dirFile.Close()
	return errors.Join(err, l.lock.Close())
}

// poke wakes the writer.
func (l *Log) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}
