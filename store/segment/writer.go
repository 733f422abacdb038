package segment

import (
	"fmt"
	"os"
	"time"

	"github.com/sproutmq/sprout/internal/atomicmax"
)

// This file is the shell's writer goroutine: it carries out the core's
// actions and reports their outcomes back as events. An fsync runs on a
// goroutine of its own meanwhile (fsync), and its outcome joins the next
// event the writer feeds.

// outcome is the event the writer goroutine feeds the core next: how its
// last I/O went, or what woke it.
type outcome struct {
	kind outcomeKind
	n    int64  // wrote: bytes written
	seq  uint32 // rewrote: the segment that failed
	err  error
}

type outcomeKind uint8

const (
	noOutcome outcomeKind = iota // nothing to report: wait for an event
	wrote
	rewrote
	migrated // nothing to report, but the writer turns again at once
	turn     // the same, right after cheap callbacks
	removed
	timerFired
)

// feed reports o to c.
func (o *outcome) feed(c *core, now time.Duration) {
	switch o.kind {
	case wrote:
		c.writeDone(now, o.n, o.err)
	case rewrote:
		c.rewriteDone(now, o.seq, o.err)
	case removed:
		c.removeDone(now, o.err)
	case timerFired:
		c.timerFired(now)
	}
}

// spareResult is what the spare maker hands the writer.
type spareResult struct {
	seq uint32
	f   *os.File
	err error
}

// syncResult is what the fsync goroutine hands the writer: it worked,
// taking took for segs segments, or it failed on seq.
type syncResult struct {
	seq  uint32
	err  error
	segs int
	took time.Duration
}

// syncTarget is a segment an fsync in flight syncs, and its file.
type syncTarget struct {
	seq uint32
	f   *os.File
}

// run is the writer goroutine: feed the last outcome (and the fsync's, if
// it has come), take the actions that follow under one hold of mu, carry
// them out without it, and wait for an event when none of them was I/O to
// report on.
func (l *Log) run() {
	defer close(l.done)
	l.timer = time.NewTimer(time.Hour)
	l.timer.Stop()
	defer l.timer.Stop()
	var o outcome
	var now time.Duration
	var sr syncResult
	var synced bool // sr is an fsync's outcome to feed
	var made spareResult
	var spared bool // made is the spare maker's outcome to feed
	for {
		if !synced || !spared {
			// A writer with work never waits in the select below, so it
			// looks for the fsync's and the spare maker's outcomes at
			// every turn: a spare taken only once the writer idled left
			// appends past the current segment's size for as long as a
			// load kept it busy, in blocks a full disk may not have.
			// With neither in flight this costs next to nothing.
			syncC, spares := l.syncC, l.spares
			if synced {
				syncC = nil
			}
			if spared {
				spares = nil
			}
			select {
			case sr = <-syncC:
				synced = true
			case made = <-spares:
				spared = true
			default:
			}
		}
		if synced || spared || o.kind != turn && (o.kind != wrote || o.err != nil) {
			// Writes that worked, and callbacks, take microseconds: the
			// time they began serves the core's millisecond deadlines, and
			// saves a clock read per batch.
			now = time.Since(l.origin)
		}
		if synced {
			l.syncDone(&sr)
		}
		l.mu.Lock()
		o.feed(l.core, now)
		if synced {
			l.core.syncDone(now, sr.seq, sr.err)
		}
		if rr := l.roomDone; rr != nil {
			l.roomDone = nil
			l.core.roomDone(now, rr.size, rr.err)
		}
		if spared {
			if made.err == nil {
				l.files[made.seq] = made.f
			}
			l.core.spareDone(now, made.seq, made.err)
		}
		acts := l.core.ready(now)
		l.mu.Unlock()
		if spared && made.err == nil {
			select {
			case l.spareMade <- struct{}{}:
			default:
			}
		}
		synced, spared = false, false
		var stop bool
		if o, stop = l.carryOut(acts); stop {
			return // Close closes the files once the spare maker is done too
		}
		if o.kind != noOutcome || l.roomDone != nil {
			continue
		}
		select {
		case <-l.kick:
		case <-l.timerC:
			l.timerC = nil
			o.kind = timerFired
		case made = <-l.spares:
			spared = true
		case sr = <-l.syncC:
			synced = true
		}
	}
}

// carryOut does what acts say, in order, and returns the outcome of the
// writer's own I/O among them, if any; stop once Close's work is done.
func (l *Log) carryOut(acts []action) (o outcome, stop bool) {
	for i := range acts {
		a := &acts[i]
		switch a.kind {
		case actReport:
			l.report(a)
		case actObserveBatch:
			if ob := l.opts.Observer; ob != nil {
				ob.ObserveBatch(int(a.n), int(a.records))
			}
		case actPublish:
			atomicmax.Uint64(&l.durable, a.lsn()) // OnDurable may have raised it already
			for _, w := range a.due {
				w.fn()
			}
		case actRetire:
			// Sealed before any later fsync is handed out (doc.go,
			// Recovery): retirements come before fsyncs in the list.
			f := l.files[a.seq]
			if err := seal(f, a.n, a.sync); err != nil {
				l.log.Warn().Err(err).Str("file", l.segPath(a.seq)).Msg("segment: cannot seal a segment; it is read after a crash as one still written to")
			}
			_ = f.Close()
			delete(l.files, a.seq)
		case actMakeSpare:
			l.spareWG.Add(1)
			go l.makeSpare(a.seq, a.lastID(), a.version)
		case actTimer:
			l.timer.Reset(a.at() - time.Since(l.origin))
			l.timerC = l.timer.C
		case actRoom:
			rr := l.changeRoom(a.n)
			l.roomDone = &rr
		case actWrite:
			o = outcome{kind: wrote}
			for _, e := range a.writes {
				n, err := l.writeAt(l.files[e.seq], e.b, e.off)
				if a.keep {
					l.keepUnsynced(e.seq, e.off, e.b[:n])
				}
				if o.n += n; err != nil {
					o.err = err
					break
				}
			}
		case actSync:
			l.handOutSync(a)
		case actRewrite:
			o = l.rewrite()
		case actMigrate:
			if m := l.migrator.Load().(migratorBox).m; m != nil {
				m.Migrate(a.seq, a.ids)
			}
			o = outcome{kind: migrated}
		case actTurn:
			o = outcome{kind: turn}
		case actRemove:
			if f := l.files[a.seq]; f != nil {
				_ = f.Close()
				delete(l.files, a.seq)
			}
			l.closeReader(a.seq)
			o = outcome{kind: removed, err: os.Remove(l.segPath(a.seq))}
		case actClosed:
			l.closeErr = a.err
			return o, true
		}
	}
	return o, false
}

// writeAt writes all of b at off in f; it stops at the first error and
// returns what it wrote.
func (l *Log) writeAt(f *os.File, b []byte, off int64) (int64, error) {
	var done int64
	for len(b) > 0 {
		n, err := l.opts.writeAt(f, b, off)
		done += int64(n)
		b, off = b[n:], off+int64(n)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// unsyncedSpan is a copy of bytes written to a segment from off on and not
// yet fsynced. Writes since a sync are contiguous within each segment (a
// new segment's header ends where its records begin), so there is one
// span per segment written to.
type unsyncedSpan struct {
	seq uint32
	off int64
	b   []byte
}

// keepUnsynced copies bytes just written at off in seq until they are
// fsynced, to write them again if the fsync fails.
func (l *Log) keepUnsynced(seq uint32, off int64, b []byte) {
	n := len(l.unsynced)
	if n == 0 || l.unsynced[n-1].seq != seq || l.unsynced[n-1].off+int64(len(l.unsynced[n-1].b)) != off {
		// A new span, in the buffer an earlier one left behind if any.
		if n < cap(l.unsynced) {
			l.unsynced = l.unsynced[:n+1]
		} else {
			l.unsynced = append(l.unsynced, unsyncedSpan{})
		}
		sp := &l.unsynced[n]
		sp.seq, sp.off, sp.b = seq, off, sp.b[:0]
		n++
	}
	sp := &l.unsynced[n-1]
	sp.b = append(sp.b, b...)
}

// unsyncedMark is how much of the copies an fsync covers: those made
// before it was handed out, the first spans, the last of them up to n
// bytes (a write made since may have grown it).
type unsyncedMark struct{ spans, n int }

// handOutSync carries out an actSync: it notes which copies the fsync
// covers and starts it on a goroutine of its own. The writer does not
// touch syncFiles again until the outcome comes back.
func (l *Log) handOutSync(a *action) {
	l.syncFiles = l.syncFiles[:0]
	for _, q := range a.segs {
		l.syncFiles = append(l.syncFiles, syncTarget{seq: q, f: l.files[q]})
	}
	l.syncMark = unsyncedMark{spans: len(l.unsynced)}
	if k := len(l.unsynced); k > 0 {
		l.syncMark.n = len(l.unsynced[k-1].b)
	}
	l.syncC = l.syncs
	l.syncWG.Add(1)
	go l.fsync(l.syncFiles)
}

// fsync is the fsync goroutine: it syncs the segments an actSync named,
// while the writer goes on writing, and hands the outcome to the writer.
func (l *Log) fsync(targets []syncTarget) {
	defer l.syncWG.Done()
	start := time.Now()
	for _, t := range targets {
		if err := l.opts.fdatasync(t.f); err != nil {
			l.syncs <- syncResult{seq: t.seq, err: err}
			return
		}
	}
	l.syncs <- syncResult{segs: len(targets), took: time.Since(start)}
}

// syncDone takes in the fsync's outcome, before the core does: if it
// worked, the copies it covers are dropped (and its figure observed); if
// not, every copy is kept, to be written again.
func (l *Log) syncDone(r *syncResult) {
	l.syncC = nil
	if r.err != nil {
		return
	}
	if ob := l.opts.Observer; ob != nil && r.segs > 0 {
		ob.ObserveSync(r.took)
	}
	l.dropUnsynced(l.syncMark)
}

// dropUnsynced drops the copies up to m. Those made after it move to the
// front; the buffers of those dropped are kept behind them for new spans.
func (l *Log) dropUnsynced(m unsyncedMark) {
	k := m.spans
	if k == 0 {
		return
	}
	if last := &l.unsynced[k-1]; m.n < len(last.b) {
		// Grown since the mark: keep what was written after it.
		n := copy(last.b, last.b[m.n:])
		last.off += int64(m.n)
		last.b = last.b[:n]
		k--
	}
	kept := len(l.unsynced) - k
	for i := range kept {
		l.unsynced[i], l.unsynced[k+i] = l.unsynced[k+i], l.unsynced[i]
	}
	for i := kept; i < len(l.unsynced); i++ {
		sp := &l.unsynced[i]
		sp.b = sp.b[:0] // the buffer is kept for the next span
		if cap(sp.b) > maxReusedBuf {
			sp.b = nil
		}
	}
	l.unsynced = l.unsynced[:kept]
}

// rewrite carries out an actRewrite: after a failed fsync, it writes every
// copy kept since the last good one again, so that the next fsync proves
// them durable.
func (l *Log) rewrite() outcome {
	for _, u := range l.unsynced {
		if _, err := l.writeAt(l.files[u.seq], u.b, u.off); err != nil {
			return outcome{kind: rewrote, seq: u.seq, err: fmt.Errorf("writing again before the fsync: %w", err)}
		}
	}
	return outcome{kind: rewrote}
}

// report logs what a report action says, with the segment's file. "Puts"
// are the refusable groups: a journal's, or a cluster leader's.
func (l *Log) report(a *action) {
	file := l.segPath(a.seq)
	switch a.report {
	case reportWriteFailed:
		l.log.Error().Err(a.err).Str("file", file).Msg("segment: write failed; retrying")
	case reportGaveUp:
		l.log.Error().Err(a.err).Str("file", file).Msg("segment: write failed; giving up at close")
	case reportSyncFailed:
		l.log.Error().Err(a.err).Str("file", file).Msg("segment: fsync failed; will write again and retry")
	case reportBacklog:
		l.log.Warn().Int64("unsynced_bytes", a.n).Msg("segment: the writes are too far ahead of their fsyncs (failing, or slower than the writes); refusing puts until one catches up")
	case reportBacklogOver:
		l.log.Info().Int64("unsynced_bytes", a.n).Msg("segment: an fsync caught up with the writes; accepting puts")
	case reportDiskFull:
		l.log.Warn().Err(a.err).Msg("segment: disk full; refusing puts until space returns")
	case reportSpaceBack:
		l.log.Info().Msg("segment: space available again; accepting puts")
	case reportStuck:
		l.log.Error().Str("file", file).Int64("live", a.n).
			Msg("segment: live items but none left to move; compaction stopped")
	case reportRoomShort:
		l.log.Warn().Err(a.err).Int64("room_bytes", a.n).Msg("segment: cannot keep room for the live jobs' deletes; refusing puts beyond it until space returns")
	case reportRoomBack:
		l.log.Info().Int64("room_bytes", a.n).Msg("segment: room for the live jobs' deletes kept again; accepting puts")
	case reportRoomSpent:
		l.log.Warn().Int64("room_bytes", a.n).Msg("segment: disk full; the room kept for deletes is given up to them")
	case reportRemoveFailed:
		l.log.Warn().Err(a.err).Str("file", file).Msg("segment: cannot remove segment; will retry")
	}
}

// roomResult is the outcome of a change of the room file: its size
// after it, and why it failed.
type roomResult struct {
	size int64
	err  error
}

// changeRoom makes the room file size bytes: allocated when it grows
// (fallocate, the blocks only: nothing reads them), cut when it shrinks.
// A growth the disk refuses leaves it as it was. It takes a moment, on
// the writer goroutine, between its steps.
func (l *Log) changeRoom(size int64) roomResult {
	if l.roomFile == nil {
		l.reserve.fill()
		f, err := l.reserve.open(func() (*os.File, error) {
			return os.OpenFile(l.dir.RoomPath(), os.O_RDWR|os.O_CREATE, 0o600)
		})
		if err != nil {
			return roomResult{size: l.roomSize(), err: err}
		}
		l.roomFile = f
	}
	f := l.roomFile
	st, err := f.Stat()
	if err != nil {
		return roomResult{size: l.roomSize(), err: err}
	}
	had := allocated(st)
	if size > had {
		if err := l.opts.allocate(f, size, false); err != nil {
			_ = f.Truncate(had) // what it took of the growth, back
			return roomResult{size: had, err: err}
		}
	} else if err := f.Truncate(size); err != nil {
		return roomResult{size: had, err: err}
	}
	return roomResult{size: size}
}

// roomSize is what the room file holds, 0 if there is none.
func (l *Log) roomSize() int64 {
	st, err := os.Stat(l.dir.RoomPath())
	if err != nil {
		return 0
	}
	return allocated(st)
}

// makeSpare is the spare maker: it makes segment seq on its own goroutine
// (preallocating writes a segment's worth of zeros), so commits never wait
// for it, and hands the outcome to the writer.
func (l *Log) makeSpare(seq uint32, lastID uint64, version uint32) {
	defer l.spareWG.Done()
	f, err := l.openSegment(seq, lastID, version)
	l.spares <- spareResult{seq: seq, f: f, err: err}
}

func (l *Log) segPath(seq uint32) string { return l.dir.SegmentPath(seq) }

// openSegment creates and preallocates segment seq, its header saying
// version and naming lastID as the highest id issued.
func (l *Log) openSegment(seq uint32, lastID uint64, version uint32) (*os.File, error) {
	path := l.segPath(seq)
	l.reserve.fill()
	f, err := l.reserve.open(func() (*os.File, error) {
		return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	if err := l.opts.allocate(f, l.opts.SegmentSize, !l.bulk.Load()); err != nil {
		return fail(err)
	}
	hdr := make([]byte, HeaderSize)
	putHeader(hdr, version, sealOpen, lastID)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	l.dir.Sync()
	return f, nil
}
