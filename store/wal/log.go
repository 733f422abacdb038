package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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

const (
	// migrateBatch bounds how many jobs one compaction step moves, so it
	// never holds any tube for long.
	migrateBatch = 256
	// noSpaceRetry is how often a full disk is checked for space again.
	noSpaceRetry = 250 * time.Millisecond
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

type segment struct {
	seq  uint32
	path string

	// guarded by Log.mu
	liveCount int
	liveBytes int64
	ids       []uint64 // jobs whose full record was written here (some since moved or deleted)
	stuck     bool     // live records but no ids left: reported once
	onDisk    int64    // bytes the file takes on disk

	// writer goroutine only
	f       *os.File
	written int64
}

type chunk struct {
	seq     uint32
	b       []byte
	end     uint64 // LSN after this chunk
	records int    // records in b
}

// unsyncedSpan is a copy of bytes written to a segment from off on and not
// yet fsynced. Writes since a sync are contiguous within each segment, so
// there is one span per segment written to.
type unsyncedSpan struct {
	s   *segment
	off int64
	b   []byte
}

type durableWaiter struct {
	lsn uint64
	fn  func()
}

// Log is a segmented, checksummed write-ahead log with group commit. Any
// goroutine appends records (Append) and asks to be told when they are
// durable (OnDurable); one writer goroutine writes and fsyncs them in
// batches, so every commit waiting on one fsync is released together.
type Log struct {
	dir  string  // immutable
	opts Options // immutable
	log  zerolog.Logger
	lock *os.File // holds the directory lock for the process's life
	// dirFile is the directory, kept open so that syncing it never needs a
	// new descriptor; reserve holds descriptors for new segments.
	dirFile *os.File
	reserve descriptorReserve

	recovered []Recovered // set by Open, handed over once

	mu        sync.Mutex
	pending   []chunk             // guarded by mu
	spareBufs [][]byte            // guarded by mu: written chunks' buffers, for reuse
	appended  uint64              // guarded by mu: LSN of the last appended byte
	curSeq    uint32              // guarded by mu: the segment new records go to
	curSize   int64               // guarded by mu: its size including pending records
	spare     uint32              // guarded by mu: a preallocated next segment, or 0
	segs      map[uint32]*segment // guarded by mu
	order     []uint32            // guarded by mu: segments on disk, oldest first
	noSpace   bool                // guarded by mu
	backlog   bool                // guarded by mu: maxUnsynced bytes wait for an fsync that works
	live      int64               // guarded by mu: bytes of live full records
	waiters   []durableWaiter     // guarded by mu
	closing   bool                // guarded by mu
	started   bool                // guarded by mu: Start has launched the writer
	preparing bool                // guarded by mu: a spare is being made
	lastID    uint64              // guarded by mu: highest id in any header or record

	durable  atomic.Uint64 // highest LSN acknowledged (written, and synced if SyncEvery is 0)
	synced   atomic.Uint64 // highest LSN fsynced
	written  atomic.Uint64 // highest LSN written
	migrated atomic.Int64
	records  atomic.Int64
	cycles   atomic.Int64 // writer loop turns, for tests

	spareWG  sync.WaitGroup // the spare-making goroutine
	migrator Migrator
	// writing is the segment the writer last wrote to; writer goroutine only.
	writing *segment
	// writer goroutine only: the last batch's chunk list and released
	// waiters, kept so that each batch does not allocate them again
	batch []chunk
	due   []durableWaiter
	// writer goroutine only: what was written since the last fsync that
	// worked, and whether an fsync has failed since (see sync)
	unsynced      []unsyncedSpan
	unsyncedBytes int64
	resync        bool
	needSync      bool  // compaction waits for a sync before removing a segment
	gaveUp        bool  // Close's grace ran out: nothing more is written
	closeErr      error // what Close reports, set before done is closed
	// abandon makes the writer give up on writes that keep failing; Close
	// sets it once its grace has passed.
	abandon atomic.Bool
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// Open locks dir, replays it and returns the log, not yet writing. Jobs
// found are available from Recovered; call Start to begin appending. A
// directory holding only beanstalkd binlog files is imported first.
func Open(dir string, opts Options) (*Log, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	l := &Log{
		dir:  dir,
		opts: opts,
		log:  opts.Logger,
		segs: make(map[uint32]*segment),
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l.lock = lock
	if l.dirFile, err = os.Open(dir); err != nil {
		_ = lock.Close()
		return nil, err
	}
	if err := l.load(); err != nil {
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
	return l.lastID
}

// Start opens a new segment and begins writing. m moves jobs during
// compaction.
func (l *Log) Start(m Migrator) error {
	l.migrator = m
	l.mu.Lock()
	next := uint32(1)
	if n := len(l.order); n > 0 {
		next = l.order[n-1] + 1
	}
	l.mu.Unlock()
	if err := l.openSegment(next); err != nil {
		return err
	}
	l.mu.Lock()
	l.curSeq = next
	l.curSize = headerSize
	l.started = true
	l.mu.Unlock()
	l.prepareSpare()
	go l.run()
	// One turn of the writer: segments left by earlier runs with nothing
	// live in them are removed now, not at the next append (a server that
	// restarts with no traffic would otherwise keep one more each time).
	l.poke()
	return nil
}

// Append adds a record and returns its LSN. A KindFull record's new Loc is
// returned; prev is the job's previous full record (zero for a put), which
// stops counting as live. Only deletes are accepted while the disk is full.
func (l *Log) Append(r *Record, prev Loc) (lsn uint64, loc Loc, err error) {
	size := int64(payloadSize(r) + frameHeader)
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return 0, Loc{}, errors.New("wal: closed")
	}
	if l.onlyDeletesLocked() && r.Kind != KindDelete {
		l.mu.Unlock()
		return 0, Loc{}, ErrNoSpace
	}
	if l.curSize+size > l.opts.SegmentSize && l.curSize > headerSize && l.spare != 0 {
		l.curSeq = l.spare
		l.curSize = headerSize
		l.spare = 0
	}
	n := len(l.pending)
	if n == 0 || l.pending[n-1].seq != l.curSeq {
		var b []byte
		if k := len(l.spareBufs); k > 0 {
			b = l.spareBufs[k-1]
			l.spareBufs = l.spareBufs[:k-1]
		}
		l.pending = append(l.pending, chunk{seq: l.curSeq, b: b})
		n++
	}
	c := &l.pending[n-1]
	c.b = appendFrame(c.b, r)
	c.records++
	l.curSize += size
	l.appended += uint64(size)
	c.end = l.appended
	lsn = l.appended
	l.records.Add(1)
	if r.ID > l.lastID {
		l.lastID = r.ID
	}
	if r.Kind == KindFull {
		s := l.segs[l.curSeq]
		s.liveCount++
		s.liveBytes += size
		s.ids = append(s.ids, r.ID)
		l.live += size
		loc = Loc{Seg: l.curSeq, Size: uint32(size)}
	}
	if prev.Seg != 0 {
		if s := l.segs[prev.Seg]; s != nil {
			s.liveCount--
			s.liveBytes -= int64(prev.Size)
		}
		l.live -= int64(prev.Size)
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return lsn, loc, nil
}

// onlyDeletesLocked reports whether the log takes deletes alone: the disk is
// full, or too much waits for an fsync that keeps failing.
func (l *Log) onlyDeletesLocked() bool { return l.noSpace || l.backlog }

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
	if l.durable.Load() >= lsn {
		l.mu.Unlock()
		fn()
		return
	}
	l.waiters = append(l.waiters, durableWaiter{lsn: lsn, fn: fn})
	l.mu.Unlock()
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
	defer l.mu.Unlock()
	st := Stats{
		CurrentIndex:    l.curSeq,
		RecordsMigrated: l.migrated.Load(),
		RecordsWritten:  l.records.Load(),
		MaxSize:         l.opts.SegmentSize,
		LiveBytes:       l.live,
	}
	if len(l.order) > 0 {
		st.OldestIndex = l.order[0]
	}
	for _, seq := range l.order {
		st.DiskBytes += l.segs[seq].onDisk
	}
	return st
}

// Close writes and fsyncs everything appended, then stops the writer.
//
// Shutdown order:
//  1. no more appends are accepted;
//  2. the writer writes what is pending and fsyncs, whatever the policy;
//  3. waiters are released, files closed, the directory lock dropped.
//
// A log that was never started just drops its lock.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return nil
	}
	l.closing = true
	started := l.started
	l.mu.Unlock()
	var err error
	if started {
		close(l.stop)
		select {
		case <-l.done:
		case <-time.After(l.opts.closeGrace):
			// Nothing still unwritten was acknowledged; stop retrying.
			l.abandon.Store(true)
			<-l.done
		}
		err = l.closeErr
	}
	l.spareWG.Wait()
	l.closeFiles()
	l.reserve.close()
	_ = l.dirFile.Close()
	return errors.Join(err, l.lock.Close())
}

// run is the writer goroutine.
func (l *Log) run() {
	defer close(l.done)
	var syncTimer *time.Timer
	var syncC <-chan time.Time
	arm := func(wait time.Duration) {
		if syncTimer == nil {
			syncTimer = time.NewTimer(wait)
		} else {
			syncTimer.Reset(wait)
		}
		syncC = syncTimer.C
	}
	lastSync := time.Now()
	var retry time.Duration // backoff after a failed fsync; 0 after one that worked
	for {
		stopping := false
		select {
		case <-l.kick:
		case <-syncC:
			syncC = nil
		case <-l.stop:
			stopping = true
		}
		l.cycles.Add(1)
		l.writePending()
		dirty := l.synced.Load() < l.written.Load()
		switch {
		case stopping:
			switch {
			case l.gaveUp:
				l.closeErr = errors.New("wal: closed with records the disk would not take")
			case dirty:
				// One more try; under -f 0 what fails was never acknowledged.
				if err := l.sync(); err != nil {
					l.closeErr = fmt.Errorf("wal: closed without a final fsync: %w", err)
				}
			}
		case !dirty || l.opts.NoSync && !l.needSync:
		case retry > 0 && syncC != nil:
			// A failed fsync is tried again on its timer, not on every append.
		case l.opts.SyncEvery <= 0 || time.Since(lastSync) >= l.opts.SyncEvery || l.needSync:
			if l.sync() != nil {
				// Tried again without waiting for another append, so held
				// replies are released as soon as the disk works again.
				retry = min(max(2*retry, 10*time.Millisecond), time.Second)
				arm(retry)
				break
			}
			retry = 0
			l.needSync = false
			lastSync = time.Now()
		case syncC == nil:
			// Unlike beanstalkd, an idle tail is fsynced too.
			arm(l.opts.SyncEvery - time.Since(lastSync))
		}
		if l.opts.SyncEvery <= 0 && !l.opts.NoSync {
			l.publish(l.synced.Load())
		} else {
			l.publish(l.written.Load())
		}
		if stopping {
			return // Close closes the files once the spare maker is done too
		}
		l.maintain()
	}
}

// writePending writes every pending chunk, opening segments as needed.
// Write errors are retried until they succeed: the log never silently
// stops logging, and commits wait meanwhile.
func (l *Log) writePending() {
	l.mu.Lock()
	chunks := l.pending
	l.pending = l.batch[:0]
	l.mu.Unlock()
	defer l.recycle(chunks)
	if l.gaveUp {
		return // after a gap, nothing later may be written or acknowledged
	}
	for i := range chunks {
		c := &chunks[i]
		s := l.segment(c.seq)
		if s != l.writing {
			l.startWriting(s)
		}
		off := s.written
		for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			err := l.writeAt(s, c.b[s.written-off:], s.written)
			if err == nil {
				break
			}
			if l.abandon.Load() {
				l.log.Error().Err(err).Str("file", s.path).Msg("wal: write failed; giving up at close")
				l.gaveUp = true
				return
			}
			l.log.Error().Err(err).Str("file", s.path).Msg("wal: write failed; retrying")
			time.Sleep(backoff)
		}
		l.written.Store(c.end)
		l.keepUnsynced(s, off, c.b)
	}
	if o := l.opts.Observer; o != nil && len(chunks) > 0 {
		bytes, records := 0, 0
		for i := range chunks {
			bytes += len(chunks[i].b)
			records += chunks[i].records
		}
		o.ObserveBatch(bytes, records)
	}
}

// writeAt writes all of b at off in s, advancing s.written past what it
// wrote; it stops at the first error.
func (l *Log) writeAt(s *segment, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := l.opts.writeAt(s.f, b, off)
		if end := off + int64(n); end > s.written {
			s.written = end
		}
		b, off = b[n:], off+int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// keepUnsynced copies bytes just written at off in s until they are
// fsynced, to write them again if the fsync fails.
func (l *Log) keepUnsynced(s *segment, off int64, b []byte) {
	if l.opts.NoSync {
		return
	}
	n := len(l.unsynced)
	if n == 0 || l.unsynced[n-1].s != s || l.unsynced[n-1].off+int64(len(l.unsynced[n-1].b)) != off {
		// A new span, in the buffer an earlier one left behind if any.
		if n < cap(l.unsynced) {
			l.unsynced = l.unsynced[:n+1]
		} else {
			l.unsynced = append(l.unsynced, unsyncedSpan{})
		}
		sp := &l.unsynced[n]
		sp.s, sp.off, sp.b = s, off, sp.b[:0]
		n++
	}
	sp := &l.unsynced[n-1]
	sp.b = append(sp.b, b...)
	l.unsyncedBytes += int64(len(b))
	if l.unsyncedBytes > l.opts.maxUnsynced {
		// fsync keeps failing: stop taking new jobs, as on a full disk,
		// rather than grow this copy without bound.
		l.mu.Lock()
		l.backlog = true
		l.mu.Unlock()
	}
}

// maxReusedBuf bounds the chunk buffers kept for reuse, so that one burst of
// large bodies does not pin its memory.
const maxReusedBuf = 1 << 20

// recycle keeps the buffers of written chunks for Append to fill again.
func (l *Log) recycle(chunks []chunk) {
	l.mu.Lock()
	for i := range chunks {
		if b := chunks[i].b; cap(b) <= maxReusedBuf && len(l.spareBufs) < 4 {
			l.spareBufs = append(l.spareBufs, b[:0])
		}
		chunks[i] = chunk{}
	}
	l.mu.Unlock()
	l.batch = chunks[:0]
}

// startWriting switches the writer to segment s: its header is rewritten
// with the highest id issued so far (it may have been preallocated long
// before). Older segments are trimmed and closed once they are synced: at
// once with -F, else by the next sync that works.
func (l *Log) startWriting(s *segment) {
	l.mu.Lock()
	last := l.lastID
	l.mu.Unlock()
	var b [8]byte
	putU64(b[:], last)
	if err := l.writeAt(s, b[:], 16); err != nil {
		l.log.Error().Err(err).Str("file", s.path).Msg("wal: cannot update segment header")
	} else {
		l.keepUnsynced(s, 16, b[:])
	}
	l.writing = s
	if l.opts.NoSync {
		l.retireOld(func(o *segment) { _ = o.f.Sync() })
	}
}

// retireOld trims and closes the segments before the one being written,
// after calling before on each.
func (l *Log) retireOld(before func(*segment)) {
	if l.writing == nil {
		return
	}
	l.mu.Lock()
	var old []*segment
	for _, q := range l.order {
		if o := l.segs[q]; q < l.writing.seq && o.f != nil {
			old = append(old, o)
		}
	}
	l.mu.Unlock()
	for _, o := range old {
		if before != nil {
			before(o)
		}
		_ = o.f.Truncate(o.written)
		_ = o.f.Close()
		o.f = nil
		l.mu.Lock()
		o.onDisk = o.written
		l.mu.Unlock()
	}
}

// sync fsyncs every segment written since the last sync that worked. After
// a failed fdatasync the kernel may have dropped the dirty pages while
// reporting the error once, so a later fdatasync that succeeds would prove
// nothing about them: everything written since the last good sync is
// written again before the next one counts.
func (l *Log) sync() error {
	w := l.written.Load()
	if l.resync {
		for _, u := range l.unsynced {
			if err := l.writeAt(u.s, u.b, u.off); err != nil {
				l.log.Error().Err(err).Str("file", u.s.path).Msg("wal: rewrite after a failed fsync failed")
				return err
			}
		}
	}
	// Every segment written since the last sync has a span; the one being
	// written is synced in any case (with -F no spans are kept).
	start := time.Now()
	for _, u := range l.unsynced {
		if err := l.fsync(u.s); err != nil {
			return err
		}
	}
	if n := len(l.unsynced); n == 0 || l.unsynced[n-1].s != l.writing {
		if err := l.fsync(l.writing); err != nil {
			return err
		}
	}
	if o := l.opts.Observer; o != nil {
		o.ObserveSync(time.Since(start))
	}
	l.resync = false
	for i := range l.unsynced {
		sp := &l.unsynced[i]
		sp.s, sp.b = nil, sp.b[:0] // the buffer is kept for the next span
		if cap(sp.b) > maxReusedBuf {
			sp.b = nil
		}
	}
	l.unsynced, l.unsyncedBytes = l.unsynced[:0], 0
	l.mu.Lock()
	l.backlog = false
	l.mu.Unlock()
	l.synced.Store(w)
	l.retireOld(nil)
	return nil
}

// fsync syncs s, if open; a failure makes the next sync write everything
// unsynced again first.
func (l *Log) fsync(s *segment) error {
	if s == nil || s.f == nil {
		return nil
	}
	if err := l.opts.fdatasync(s.f); err != nil {
		l.resync = true
		l.log.Error().Err(err).Str("file", s.path).Msg("wal: fsync failed; will write again and retry")
		return err
	}
	return nil
}

// publish acknowledges everything up to lsn.
func (l *Log) publish(lsn uint64) {
	if lsn <= l.durable.Load() {
		return
	}
	l.mu.Lock()
	l.durable.Store(lsn)
	due := l.due[:0]
	keep := l.waiters[:0]
	for _, w := range l.waiters {
		if w.lsn <= lsn {
			due = append(due, w)
		} else {
			keep = append(keep, w)
		}
	}
	for i := len(keep); i < len(l.waiters); i++ {
		l.waiters[i] = durableWaiter{}
	}
	l.waiters = keep
	l.mu.Unlock()
	for _, w := range due {
		w.fn()
	}
	clear(due)
	l.due = due[:0]
}

func (l *Log) closeFiles() {
	l.mu.Lock()
	segs := make([]*segment, 0, len(l.segs))
	for _, s := range l.segs {
		segs = append(segs, s)
	}
	l.mu.Unlock()
	for _, s := range segs {
		if s.f != nil {
			_ = s.f.Close()
			s.f = nil
		}
	}
}

// maintain keeps the directory near twice the live data: while it is
// larger than that plus two segments, live jobs are moved out of the
// oldest segment, which is deleted once nothing in it is live and the
// moves are on disk.
func (l *Log) maintain() {
	l.prepareSpare()
	l.mu.Lock()
	if l.curSize > l.opts.SegmentSize && l.spare != 0 {
		// The current segment outgrew its size while the spare was being
		// made. Rotate now rather than at the next append, so an idle log
		// can still compact it away.
		l.curSeq, l.curSize, l.spare = l.spare, headerSize, 0
	}
	if len(l.order) < 3 {
		l.mu.Unlock()
		return
	}
	var disk int64
	for _, q := range l.order {
		disk += l.segs[q].onDisk
	}
	oldest := l.segs[l.order[0]]
	// Any segment before the current one may go: appends only ever go to
	// the current one. (beanstalkd also spares the one before it.) One
	// holding live jobs goes once the directory, with those jobs moved to
	// the head, would pass twice the live data plus two segments (current
	// and spare included): counting the move keeps the peak near that
	// bound, not just the rest. It must also reclaim at least half of what
	// it copies, or a large live set alone in the oldest segment would be
	// copied forward at every rotation.
	garbage := disk - 2*l.opts.SegmentSize - l.live
	if oldest.seq >= l.curSeq || oldest.liveCount > 0 &&
		(disk+oldest.liveBytes <= 2*l.live+2*l.opts.SegmentSize || 2*garbage < oldest.liveBytes) {
		l.mu.Unlock()
		return
	}
	if oldest.liveCount > 0 {
		if l.onlyDeletesLocked() {
			// The moves would be refused, and their ids lost with them;
			// compaction resumes once space returns.
			l.mu.Unlock()
			return
		}
		if len(oldest.ids) == 0 {
			// Live records the store cannot name: moving nothing would
			// only spin. Never expected; said once.
			if !oldest.stuck {
				oldest.stuck = true
				l.log.Error().Str("file", oldest.path).Int("live", oldest.liveCount).
					Msg("wal: segment has live records but no jobs to move; compaction stopped")
			}
			l.mu.Unlock()
			return
		}
		ids := append([]uint64(nil), oldest.ids[:min(len(oldest.ids), migrateBatch)]...)
		oldest.ids = oldest.ids[len(ids):]
		l.mu.Unlock()
		l.migrator.Migrate(oldest.seq, ids)
		l.mu.Lock()
		if l.onlyDeletesLocked() {
			// The disk filled up meanwhile and some moves may have been
			// refused: keep the batch for later (jobs it did move are no
			// longer in this segment, and are skipped then).
			oldest.ids = append(ids, oldest.ids...)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l.poke()
		return
	}
	needed := l.appended
	l.mu.Unlock()
	if l.written.Load() < needed {
		l.poke() // the moves are still pending: come back
		return
	}
	if l.synced.Load() < needed {
		// The moved jobs are not durable yet: keep their old records until
		// run has synced them. After a failed fsync, run's retry timer
		// comes back; a poke then would only spin the writer.
		l.needSync = true
		if !l.resync {
			l.poke()
		}
		return
	}
	if oldest == l.writing {
		// Nothing more goes there (appends moved on); close it first.
		_ = oldest.f.Close()
		oldest.f, l.writing = nil, nil
	}
	if err := os.Remove(oldest.path); err != nil {
		l.log.Warn().Err(err).Str("file", oldest.path).Msg("wal: cannot remove segment")
		return
	}
	l.mu.Lock()
	delete(l.segs, oldest.seq)
	l.order = l.order[1:]
	l.mu.Unlock()
	l.poke()
}

// NoteMigrated counts a job moved by the Migrator.
func (l *Log) NoteMigrated() { l.migrated.Add(1) }

func (l *Log) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// prepareSpare keeps one preallocated segment ready, so rotation never
// waits for the disk and deletes have room when the disk fills up. The
// preallocation (writing a segment's worth of zeros) runs on its own
// goroutine so commits never wait for it.
func (l *Log) prepareSpare() {
	l.mu.Lock()
	if l.spare != 0 || l.closing || l.preparing {
		l.mu.Unlock()
		return
	}
	l.preparing = true
	l.mu.Unlock()
	l.spareWG.Add(1)
	go func() {
		defer l.spareWG.Done()
		l.makeSpare()
	}()
}

func (l *Log) makeSpare() {
	l.mu.Lock()
	next := l.curSeq + 1
	if n := len(l.order); n > 0 && l.order[n-1] >= next {
		next = l.order[n-1] + 1
	}
	wasFull := l.noSpace
	l.mu.Unlock()
	err := l.openSegment(next)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.preparing = false
	if err != nil {
		if !wasFull {
			l.log.Warn().Err(err).Msg("wal: disk full; refusing puts until space returns")
		}
		l.noSpace = true
		// Refused puts do not wake the writer, so nothing else would try
		// again once space returns.
		time.AfterFunc(noSpaceRetry, l.poke)
		return
	}
	if wasFull {
		l.log.Info().Msg("wal: space available again; accepting puts")
	}
	l.noSpace = false
	l.spare = next
}

const (
	headerSize = 24
	magic      = "SPROUTWL"
	version    = 1
)

func segmentName(seq uint32) string { return fmt.Sprintf("sprout.%08d.wal", seq) }

// openSegment creates and preallocates segment seq with its header.
func (l *Log) openSegment(seq uint32) error {
	path := filepath.Join(l.dir, segmentName(seq))
	l.reserve.fill()
	f, err := l.reserve.open(func() (*os.File, error) {
		return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	})
	if err != nil {
		return err
	}
	if err := l.opts.allocate(f, l.opts.SegmentSize); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	l.mu.Lock()
	last := l.lastID
	l.mu.Unlock()
	hdr := make([]byte, headerSize)
	copy(hdr, magic)
	putU32(hdr[8:], version)
	putU64(hdr[16:], last)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	l.syncDir()
	s := &segment{seq: seq, path: path, f: f, written: headerSize, onDisk: l.opts.SegmentSize}
	l.mu.Lock()
	l.segs[seq] = s
	l.order = append(l.order, seq)
	sort.Slice(l.order, func(i, k int) bool { return l.order[i] < l.order[k] })
	l.mu.Unlock()
	return nil
}

// syncDir makes the directory's entries (a new, renamed or removed file)
// durable.
func (l *Log) syncDir() { _ = l.dirFile.Sync() }

func (l *Log) segment(seq uint32) *segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segs[seq]
}
