package segment

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/atomicmax"
)

// Observer receives the writer goroutine's figures, for metrics. Its
// methods run on the writer goroutine, so they must be cheap and never
// block: every commit waits behind them.
type Observer interface {
	// ObserveBatch reports one batch written: its bytes and its groups (a
	// journal's records).
	ObserveBatch(bytes, records int)
	// ObserveSync reports how long one fsync that worked took: of every
	// segment written since the last, rewrites after a failure excluded.
	ObserveSync(d time.Duration)
}

// Loc is where an item's latest full version lives: its segment and
// size. The zero Loc means none.
type Loc struct {
	Seg  uint32
	Size uint32
}

// Move says that an item's latest full version moved: a new item's (From
// zero), a rewrite's, or a deleted item's (To zero).
type Move struct {
	ID       uint64
	From, To Loc
}

// Migrator moves live items out of an old segment by appending a fresh
// full version of each (a Group whose Prev is the item's Loc, or, with
// Options.MovesLater, one its user reports by Moved once it takes
// effect). It is called on the log's writer goroutine with no log lock
// held.
type Migrator interface {
	Migrate(seg uint32, ids []uint64)
}

// Log is a segmented, checksummed write-ahead log with group commit. Any
// goroutine appends groups of frames (Append) and asks to be told when
// they are durable (OnDurable); one writer goroutine writes them in
// batches, and fsyncs them on a goroutine of its own while it writes the
// next, so every commit waiting on one fsync is released together.
//
// Log is the shell around the writer's core (see doc.go): its decisions
// are the core's, its files, goroutines and timer are the Log's.
type Log struct {
	dir    *Dir      // immutable; its user's, which closes it after the Log
	opts   Options   // immutable
	origin time.Time // immutable: the core's times count from here
	log    zerolog.Logger
	// reserve holds descriptors for new segments.
	reserve descriptorReserve

	// migrator holds a migratorBox: set by Start before the writer runs,
	// and by SetMigrator at any time.
	migrator atomic.Value

	mu   sync.Mutex
	core *core // guarded by mu

	durable  atomic.Uint64 // what the writer last published as durable
	migrated atomic.Int64
	bulk     atomic.Bool // SetBulk's

	// writer goroutine only (and Start before it runs, Close after it ends)
	files    map[uint32]*os.File // segments this run made and has not closed
	unsynced []unsyncedSpan      // copies of what was written since the last good fsync
	syncMark unsyncedMark        // the copies the fsync in flight covers
	// syncFiles is the fsync in flight's: the writer fills it when it
	// hands the fsync out and leaves it alone until the outcome comes.
	syncFiles []syncTarget
	// syncC is syncs while an fsync is in flight, else nil.
	syncC <-chan syncResult
	// roomDone is the outcome of a change of the room file, to feed;
	// roomFile, that file once opened, kept so that a change needs no
	// descriptor when connections have taken the process's last.
	roomDone *roomResult
	roomFile *os.File
	timer    *time.Timer
	// timerC is timer.C while the timer is armed, else nil: a select on a
	// timer's channel costs a clock read even while it is stopped.
	timerC   <-chan time.Time
	closeErr error // what Close reports, set before done is closed

	kick      chan struct{}    // an append or Close for the writer
	spareMade chan struct{}    // poked when a spare was made (SpareMade)
	spares    chan spareResult // the spare maker's outcome; one at a time
	spareWG   sync.WaitGroup   // the spare maker
	syncs     chan syncResult  // the fsync goroutine's outcome; one at a time
	syncWG    sync.WaitGroup   // the fsync goroutine
	done      chan struct{}    // closed when the writer goroutine ends

	// Descriptors for reading frames back (ReadFrame), by segment,
	// guarded by readMu: held shared while one is read, whole to open or
	// close one (readAt); the writer closes a segment's before it removes
	// the file.
	readMu  sync.RWMutex
	readers map[uint32]*os.File
}

// migratorBox lets a nil Migrator sit in an atomic.Value.
type migratorBox struct{ m Migrator }

// Open replays the segments of d, calling replay with each frame in order,
// and returns the log, not yet writing: call Start to begin appending.
// replay's error stops the start, unless it is ErrCorrupt: the frame is
// damaged (doc.go, "Recovery"). The log uses d until Close, and d's user
// closes it after.
func Open(d *Dir, opts Options, replay func(Frame) error) (*Log, error) {
	opts = opts.withDefaults()
	l := &Log{
		dir:       d,
		opts:      opts,
		origin:    time.Now(),
		log:       opts.Logger,
		core:      newCore(opts.policy()),
		files:     make(map[uint32]*os.File),
		kick:      make(chan struct{}, 1),
		spareMade: make(chan struct{}, 1),
		spares:    make(chan spareResult, 1),
		syncs:     make(chan syncResult, 1),
		done:      make(chan struct{}),
	}
	l.core.version = opts.Version
	l.migrator.Store(migratorBox{})
	if err := l.load(replay); err != nil {
		return nil, err
	}
	if opts.DeleteRoom == 0 {
		_ = os.Remove(d.RoomPath()) // one a journal kept, in a directory taken over
	} else {
		l.core.room = l.roomSize()
	}
	l.reserve.fill()
	return l, nil
}

// LastID is the highest item id any header, group or RaiseID named.
func (l *Log) LastID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.lastID
}

// Start opens a new segment and begins writing. m, if not nil, moves live
// items during compaction (SetMigrator). The writer's first turn makes the
// spare and removes the segments earlier runs left with nothing live in
// them (a server that restarts with no traffic would otherwise keep one
// more each time).
func (l *Log) Start(m Migrator) error {
	l.migrator.Store(migratorBox{m})
	l.mu.Lock()
	l.core.migrating = m != nil
	seq, last, version := l.core.nextSeq(), l.core.lastID, l.core.version
	l.mu.Unlock()
	f, err := l.openSegment(seq, last, version)
	if outOfSpace(err) && l.opts.DeleteRoom > 0 && l.roomSize() > 0 {
		// A start on a full disk: the room kept for deletes makes way.
		rr := l.changeRoom(0)
		l.mu.Lock()
		l.core.room, l.core.roomFailing = rr.size, true
		l.mu.Unlock()
		l.log.Warn().Err(err).AnErr("room_error", rr.err).Int64("room_bytes", rr.size).
			Msg("segment: disk full at start; the room kept for deletes is given up to them")
		f, err = l.openSegment(seq, last, version)
	}
	if err != nil {
		return err
	}
	l.files[seq] = f
	l.mu.Lock()
	l.core.start(time.Since(l.origin), seq)
	target, grow := l.core.roomWanted()
	grow = grow && !l.core.roomFailing
	if grow {
		l.core.roomBusy, l.core.roomTarget = true, target
	}
	l.mu.Unlock()
	if grow {
		// Before the first append: the room grows with the items from
		// here on, and a put is refused while it holds too little.
		rr := l.changeRoom(target)
		l.mu.Lock()
		l.core.roomDone(time.Since(l.origin), rr.size, rr.err)
		l.mu.Unlock()
	}
	go l.run()
	return nil
}

// Group is what one Append writes: one frame or more, encoded by their
// user, always in one segment.
type Group struct {
	// Size is how many bytes Encode appends: the frames, headers included.
	Size int
	// Encode appends the frames to its argument and returns it. It runs
	// under the log's mutex: it must be quick and must not call the log.
	Encode func(dst []byte) []byte
	// ID is the highest item id the frames name (0: none): the log keeps
	// the highest, for the segment headers (LastID, FloorID).
	ID uint64
	// Live: the group is item ID's latest full version, counted live in
	// its segment (with Size bytes) until a later group's Prev or Moved
	// says otherwise.
	Live bool
	// Prev is the item's previous full version, no longer live; zero for
	// none.
	Prev Loc
	// Refusable groups are refused (ErrNoSpace) while the log is Full;
	// the others are only ever refused after Close.
	Refusable bool
	// Unsynced asks for no fsync of its own: the group is written with the
	// others, and durable once an fsync something else asks for covers it
	// (a later group's, compaction's, Close's).
	Unsynced bool
	// Checkpoint, if not nil, is SetCheckpoint in the same step as the
	// group (doc.go, "Checkpoints").
	Checkpoint []byte
}

// Append adds g and returns its LSN (durable once OnDurable says so), its
// segment and its offset there. A group that fails to write is retried,
// and nothing after it becomes durable meanwhile.
func (l *Log) Append(g *Group) (lsn uint64, seg uint32, off int64, err error) {
	l.mu.Lock()
	lsn, seg, off, err = l.core.append(g)
	kick := err == nil && l.core.kickWanted()
	l.mu.Unlock()
	if kick {
		l.poke()
	}
	return lsn, seg, off, err
}

// Durable is the highest LSN that has been acknowledged as durable.
func (l *Log) Durable() uint64 { return l.durable.Load() }

// OnDurable calls fn, on the writer goroutine, once lsn is durable (at
// once, on this goroutine, if it already is). Durable is at least lsn
// when fn runs.
func (l *Log) OnDurable(lsn uint64, fn func()) {
	if l.durable.Load() >= lsn {
		fn()
		return
	}
	l.mu.Lock()
	now := l.core.onDurable(lsn, fn)
	published := l.core.published
	l.mu.Unlock()
	if now {
		// The core published lsn and the writer has yet to store it: a
		// caller that reads Durable in fn (an AckSource's Acked) must not
		// find it short (the engine's held replies then armed again at
		// once, and spun until the writer stored it).
		atomicmax.Uint64(&l.durable, published)
		fn()
	}
}

// Stats are the figures stats reports as binlog-*.
type Stats struct {
	OldestIndex, CurrentIndex       uint32
	RecordsMigrated, RecordsWritten int64
	MaxSize                         int64
	DiskBytes, LiveBytes            int64
	// RoomBytes is what the room for deletes holds (doc.go).
	RoomBytes int64
}

// Stats reads the log's figures.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	st := l.core.stats()
	l.mu.Unlock()
	st.RecordsMigrated = l.migrated.Load()
	return st
}

// NoteMigrated counts an item moved by the Migrator (Stats).
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
//     for, and files are closed.
//
// A log that was never started just closes. The directory stays locked
// until its user closes it.
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
			if err == nil {
				_ = seal(s.f, HeaderSize, false) // as the writer seals its spare (core.trimOpen)
			}
			_ = s.f.Close()
		}
	default:
	}
	for _, f := range l.files {
		_ = f.Close()
	}
	if l.roomFile != nil {
		_ = l.roomFile.Close()
	}
	l.readMu.Lock()
	for seq, f := range l.readers {
		_ = f.Close()
		delete(l.readers, seq)
	}
	l.readMu.Unlock()
	l.reserve.close()
	return err
}

// poke wakes the writer.
func (l *Log) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// SetCheckpoint sets the frame written first in every segment from the
// next one on (doc.go, "Checkpoints"). Before Start it is the first
// segment's; after, a checkpoint that a group changes goes with the group
// (Group.Checkpoint).
func (l *Log) SetCheckpoint(frame []byte) {
	l.mu.Lock()
	l.core.checkpoint = append(l.core.checkpoint[:0], frame...)
	l.mu.Unlock()
}

// SetVersion says that the segments made from now on say version v, and
// moves appends on to one at once, beginning with checkpoint (doc.go,
// "Versions"); it returns that segment. Before Start it only sets the
// version of the segments to come. False when no spare of version v is
// ready yet: the log makes one (SpareMade says when), and appends stay in
// the current segment meanwhile, whatever its size, so that the user
// encodes every frame for its segment's version; call SetVersion again
// (with the current version, to give up).
func (l *Log) SetVersion(v uint32, checkpoint []byte) (seg uint32, ok bool) {
	l.mu.Lock()
	seg, ok = l.core.setVersion(v, checkpoint)
	l.mu.Unlock()
	l.poke()
	return seg, ok
}

// SpareMade is poked each time a spare segment was made.
func (l *Log) SpareMade() <-chan struct{} { return l.spareMade }

// Moved tells the log where items' latest full versions are now: what
// compaction counts as live (doc.go, "Items"). A user that counts its
// items by Group.Live and Prev tells it so what it found at Open.
func (l *Log) Moved(moves []Move) {
	l.mu.Lock()
	for _, m := range moves {
		l.core.moved(m)
	}
	l.mu.Unlock()
}

// ResetLive says that nothing counted live before is: the user replaced
// its items (a snapshot installed), and tells the log where the new ones
// are (Moved).
func (l *Log) ResetLive() {
	l.mu.Lock()
	l.core.resetLive()
	l.mu.Unlock()
}

// Hold says that the user needs every segment from seq on; 0: none (the
// default). A segment before it, with nothing live, is removed once what
// was appended meanwhile is durable. A user that holds segments says so
// before Start.
func (l *Log) Hold(seq uint32) {
	if seq == 0 {
		seq = noneHeld
	}
	l.mu.Lock()
	l.core.heldFrom = seq
	l.mu.Unlock()
	l.poke()
}

// SetBulk says whether the log is being filled in bulk (a snapshot
// received a window of megabytes at a time, synced per window): while it
// is, segments are made with their blocks reserved but not zero-filled,
// which would write every byte twice and fill the disk's queue in front
// of other writers' fsyncs. A segment made meanwhile keeps the slower
// fsyncs of unwritten extents for as long as it is written (allocate).
func (l *Log) SetBulk(on bool) { l.bulk.Store(on) }

// SetMigrator sets (or, nil, clears) what moves live items out of the
// oldest segment (a cluster's serving leader's store). Without one the
// log never migrates.
func (l *Log) SetMigrator(m Migrator) {
	l.migrator.Store(migratorBox{m})
	l.mu.Lock()
	l.core.migrating = m != nil
	l.mu.Unlock()
	l.poke()
}

// Full reports whether refusable groups are refused: no spare segment
// could be made (the disk is full), or too much waits for an fsync that
// keeps failing.
func (l *Log) Full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.onlyDeletes()
}

// RaiseID says that ids up to id were named: by frames replayed, which
// the log does not read, or otherwise. Each segment's header holds the
// highest id named before it (LastID; FloorID after a restart).
func (l *Log) RaiseID(id uint64) {
	l.mu.Lock()
	l.core.sawID(id)
	l.mu.Unlock()
}

// FloorID is the id in the oldest segment's header when the log was
// opened: with Options.Checkpoints, at least every id named by segments
// removed before.
func (l *Log) FloorID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.core.order) == 0 {
		return 0
	}
	return l.core.order[0].headerID
}
