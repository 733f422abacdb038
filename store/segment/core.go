package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"syscall"
	"time"
)

const (
	// migrateBatch bounds how many items one compaction step moves, so it
	// never holds any tube for long.
	migrateBatch = 256
	// noSpaceRetry is how often a full disk is checked for space again.
	noSpaceRetry = 250 * time.Millisecond
	// removeRetry is how often a segment that could not be removed is
	// tried again.
	removeRetry = time.Second
	// maxReusedBuf bounds the chunk buffers kept for reuse, so that one
	// burst of large bodies does not pin its memory.
	maxReusedBuf = 1 << 20
	// never is a deadline that does not come.
	never = time.Duration(math.MaxInt64)
)

// policy is what the core takes from Options.
type policy struct {
	segmentSize int64
	syncEvery   time.Duration
	noSync      bool
	closeGrace  time.Duration
	maxUnsynced int64
	pipelineMin int64
	// checkpoints and movesLater are Options'.
	checkpoints bool
	movesLater  bool
	// deleteRoom is Options.DeleteRoom; roomStep, how far ahead of the
	// live items the room grows (an eighth of a segment, within 64 KiB and
	// 1 MiB: a step is the puts one turn of the writer may take before
	// the room grows for them, some 3,800 at least).
	deleteRoom, roomStep int64
}

func (o Options) policy() policy {
	return policy{
		segmentSize: o.SegmentSize,
		syncEvery:   o.SyncEvery,
		noSync:      o.NoSync,
		closeGrace:  defaultCloseGrace,
		maxUnsynced: o.maxUnsynced,
		pipelineMin: o.pipelineMin,
		checkpoints: o.Checkpoints,
		movesLater:  o.MovesLater,
		deleteRoom:  int64(o.DeleteRoom),
		roomStep:    min(max(o.SegmentSize/8, 64<<10), 1<<20),
	}
}

// noneHeld is heldFrom when the user holds no segment: only live items
// keep a segment.
const noneHeld = math.MaxUint32

// acknowledgeOnSync reports whether a commit waits for its fsync (-f 0)
// rather than only its write.
func (p policy) acknowledgeOnSync() bool { return p.syncEvery <= 0 && !p.noSync }

// core is the log writer's decisions, apart from its I/O (see doc.go): a
// plain value that events step, as method calls carrying the time they
// happened, and that ready turns into actions. It is not safe for
// concurrent use; Log guards it with mu.
//
// Its times are monotonic durations since an origin the shell picks (Open):
// plain numbers, cheaper to read and compare than wall-clock times, and a
// test picks them at will.
type core struct {
	policy policy // immutable

	// Only the writer's events and ready touch these.

	// The segments on disk, oldest first, and those whose file the shell
	// holds (made by this run, not yet retired), oldest first.
	order []*segState
	open  []*segState
	disk  int64 // bytes the segments take on disk

	// Writing: the batch taken from pending, as the extents still to write.
	batch   []chunk
	writes  []extent
	head    int    // writes before it are done
	headers []byte // the header ids the writes point into
	writing uint32 // the segment last handed out to write to
	written uint64 // LSN written
	// writtenEager is the LSN after the last byte written that asks for
	// an fsync: every group's but the unsynced ones (Group.Unsynced), which
	// become durable with the next fsync something else asks for.
	writtenEager uint64
	writeRetry   backoff

	// Syncing. At most one fsync is in flight, on the shell's goroutine,
	// while the writer goes on writing (see doc.go).
	synced        uint64        // LSN covered by the last fsync that worked
	syncInFlight  bool          // an fsync was handed out and has not reported back
	syncing       uint64        // the LSN written when it was handed out: what it covers
	syncingBytes  int64         // unsyncedBytes then: the copies it covers
	syncSegs      []uint32      // the segments it syncs
	lastSync      time.Duration // when the last fsync that worked ended
	unsyncedBytes int64         // written since that fsync, kept to write again
	resync        bool          // an fsync failed since: write it all again before the next
	syncRetry     backoff
	syncErr       error // why the last fsync failed, until one works
	turned        bool  // the last step handed out was a turn

	due []durableWaiter // the waiters the last publish released

	makingSpare bool
	making      uint32 // the version of the spare being made
	spareRetry  backoff

	// Compaction.
	removeSeq   uint32 // the oldest segment, once nothing in it is live...
	removeAfter uint64 // ...goes once this LSN is durable
	removeRetry backoff
	compacted   bool // the last step was compaction's: a new batch goes next

	finalSync bool  // Close's last fsync was handed out
	closeErr  error // set when writes kept failing past closeAt

	timerAt time.Duration // what the timer is armed for, or never
	wakeAt  time.Duration // the earliest deadline this ready found, or never
	// out is the actions for the next ready: those the writer's events
	// add (reports, figures), then ready's own. The shell is done with
	// the list ready handed out before it feeds an event or asks again,
	// so the first of those starts a new one.
	out      []action
	outTaken bool // ready handed out; the next action starts a new list

	// Append, OnDurable and Close touch these too. The line between keeps
	// appends on other cores from taking the writer's fields' cache lines
	// away from it at every group.
	_ [64]byte

	segs     map[uint32]*segState
	cur      *segState // the segment new groups go to; nil before start
	curSize  int64     // its size, pending groups included
	curBase  int64     // its size before any group: its header and checkpoint
	spare    *segState // a preallocated next segment, or nil
	live     int64     // bytes of live items' latest full versions
	lastID   uint64    // highest id in any header or group
	pending  []chunk   // appended, not yet handed to the writer
	appended uint64    // LSN of the last appended byte
	taken    uint64    // LSN of the last byte handed to the writer (or given up)
	records  int64     // groups appended
	// spareBufs are written chunks' buffers, for append to reuse.
	spareBufs [][]byte

	// Refusable groups are refused while either is set: the last spare
	// could not be made (the disk is full), or unsyncedBytes passed
	// maxUnsynced.
	noSpace bool
	backlog bool
	// Room for deletes (doc.go): the live items, whose deletes it keeps
	// room for; the room file's size; a change of it handed out and not
	// reported yet; and whether its last change failed or it was given
	// up to the deletes of a full disk (it is then short, roomShort,
	// until it grows back).
	items       int64
	room        int64
	roomBusy    bool
	roomTarget  int64 // the size the change in flight asked for
	roomFailing bool
	roomRetry   backoff
	// writeNoSpace: the last write failed for want of space (freeAhead);
	// no spare is made until one works, and the room goes to it.
	writeNoSpace bool
	// fullMove is the segment whose live items compaction moves while
	// the disk is full (noSpace), 0 if none: their groups are taken,
	// though refusable, as they fit in the current segment's room
	// (movesFit), and the segment's removal frees the room the next
	// spare needs. Without, a disk its own garbage filled stayed full.
	fullMove uint32
	// batchesWait: under -f 0 an fsync is in flight, and new groups wait
	// for it until they come to pipelineMin bytes (batchWaits), so until
	// then an append has nothing for the writer to do.
	batchesWait bool

	published uint64 // the durable LSN last published
	waiters   []durableWaiter

	// The user's: the frame it writes first in every segment
	// (SetCheckpoint; nil for none); every segment from heldFrom on holds
	// what it needs (Hold; noneHeld for none); its Migrator is set (Start,
	// SetMigrator).
	checkpoint []byte
	heldFrom   uint32
	migrating  bool
	// version is what the segments made from now on say (Options.Version,
	// then SetVersion's). Appends move on only to a segment of the
	// current one's version but by setVersion: the user encodes its frames
	// for the version it asked for.
	version uint32

	closing bool
	closeAt time.Duration // Close's grace runs out
}

// segState is what the core knows of one segment file.
type segState struct {
	seq     uint32
	version uint32 // what its header says, for a segment this run made
	// headerID is the id its header holds: as found at start; with
	// Checkpoints, for a segment made by this run, the highest id named
	// before appends moved to it (without, the header gets the highest id
	// named when the segment is first written).
	headerID  uint64
	liveCount int      // items whose latest full version is here
	liveBytes int64    // their bytes
	ids       []uint64 // items whose full version was written here (some since moved or deleted)
	stuck     bool     // live items but no ids left: reported once
	onDisk    int64    // bytes the file takes on disk
	written   int64    // bytes written, header included: where the next write goes
	open      bool     // made by this run and not yet retired or removed
	// dirty: written since the last fsync handed out that covered it, or
	// that fsync failed. syncing: in the fsync in flight, so its file may
	// be neither trimmed nor closed.
	dirty   bool
	syncing bool
}

// chunk is groups appended to one segment, encoded.
type chunk struct {
	seg     *segState
	b       []byte
	end     uint64 // LSN after this chunk
	eager   uint64 // LSN after its last byte that asks for an fsync; 0: none
	records int    // groups in b
}

// extent is one write handed out: b at off in segment seq. What a failed
// write left undone stays here, shrunk, to be written again.
type extent struct {
	seq   uint32
	off   int64
	b     []byte
	seg   *segState // the core's, for its accounting
	chunk int       // index in batch of the chunk b belongs to; -1 for a header
}

type durableWaiter struct {
	lsn uint64
	fn  func()
}

// backoff spaces the attempts at something that keeps failing.
type backoff struct {
	min, max time.Duration // immutable
	wait     time.Duration // 0 while the last attempt worked
	next     time.Duration // no attempt before this
}

func (b *backoff) failed(now time.Duration) {
	b.wait = min(max(2*b.wait, b.min), b.max)
	b.next = now + b.wait
}

func (b *backoff) reset() { b.wait = 0 }

func (b *backoff) due(now time.Duration) bool { return b.wait == 0 || now >= b.next }

func newCore(p policy) *core {
	return &core{
		policy:      p,
		heldFrom:    noneHeld,
		timerAt:     never,
		segs:        make(map[uint32]*segState),
		writeRetry:  backoff{min: 10 * time.Millisecond, max: time.Second},
		syncRetry:   backoff{min: 10 * time.Millisecond, max: time.Second},
		spareRetry:  backoff{min: noSpaceRetry, max: noSpaceRetry},
		removeRetry: backoff{min: removeRetry, max: removeRetry},
		roomRetry:   backoff{min: noSpaceRetry, max: noSpaceRetry},
	}
}

// Recovery: Open tells the core what the directory holds, before start,
// and its user what is live there (moved).

// recoverSegment adds a segment found on disk, size bytes long, whose
// header held headerID.
func (c *core) recoverSegment(seq uint32, size int64, headerID uint64) {
	c.addSegment(&segState{seq: seq, onDisk: size, written: size, headerID: headerID})
}

// sawID raises the highest id issued to id.
func (c *core) sawID(id uint64) { c.lastID = max(c.lastID, id) }

// addSegment adds s after every segment the core knows: new segments
// always get the next sequence number.
func (c *core) addSegment(s *segState) {
	c.segs[s.seq] = s
	c.order = append(c.order, s)
	c.disk += s.onDisk
	if s.open {
		c.open = append(c.open, s)
	}
}

// nextSeq is the sequence number of the next segment to make.
func (c *core) nextSeq() uint32 {
	if n := len(c.order); n > 0 {
		return c.order[n-1].seq + 1
	}
	return 1
}

// Events.

// start: Start made segment seq, preallocated, for this run's groups.
func (c *core) start(now time.Duration, seq uint32) {
	c.cur = &segState{seq: seq, version: c.version, onDisk: c.policy.segmentSize, written: HeaderSize, open: true}
	c.addSegment(c.cur)
	c.curSize, c.curBase = HeaderSize, HeaderSize
	c.cur.headerID = c.lastID
	c.putCheckpoint()
	c.lastSync = now
}

// started reports whether start was called.
func (c *core) started() bool { return c.cur != nil }

// append encodes g into the pending batch and returns its LSN, segment
// and offset there (doc.go, "Appends").
func (c *core) append(g *Group) (lsn uint64, seg uint32, off int64, err error) {
	if c.closing {
		return 0, 0, 0, ErrClosed
	}
	if g.Refusable && c.onlyDeletes() && !c.fullMoveOf(g) {
		c.moveRefused(g)
		return 0, 0, 0, ErrNoSpace
	}
	if g.Refusable && c.roomShort(int64(g.Size)) && (!g.Live || g.Prev.Seg == 0) {
		// The room for deletes holds less than this group would leave it
		// to cover: what the group took, the deletes could lack.
		// Compaction's moves (an item's new version) go on: the segment
		// they empty frees more.
		return 0, 0, 0, ErrNoSpace
	}
	size := int64(g.Size)
	c.rotateFor(size)
	off = c.curSize
	ch := c.chunk()
	n := len(ch.b)
	ch.b = slices.Grow(ch.b, int(size)) // at once: a large group grown by its appends was copied over and over
	ch.b = g.Encode(ch.b)
	if int64(len(ch.b)-n) != size {
		panic(fmt.Sprintf("segment: a group of %d bytes encoded as %d", size, len(ch.b)-n))
	}
	ch.records++
	c.curSize += size
	c.appended += uint64(size)
	ch.end = c.appended
	if !g.Unsynced {
		ch.eager = c.appended
	}
	c.records++
	c.sawID(g.ID)
	if g.Live {
		s := c.cur
		s.liveCount++
		s.liveBytes += size
		s.ids = append(s.ids, g.ID)
		c.live += size
		c.items++
	}
	if g.Prev.Seg != 0 {
		if s := c.segs[g.Prev.Seg]; s != nil {
			s.liveCount--
			s.liveBytes -= int64(g.Prev.Size)
		}
		c.live -= int64(g.Prev.Size)
		c.items--
	}
	if g.Checkpoint != nil {
		c.checkpoint = append(c.checkpoint[:0], g.Checkpoint...)
	}
	return c.appended, c.cur.seq, off, nil
}

// rotateFor moves appends to the spare if a frame of size bytes would
// take the current segment past its size, and it holds a group already:
// a single frame, or a group, larger than a segment is written whole.
func (c *core) rotateFor(size int64) {
	if c.curSize+size > c.policy.segmentSize && c.curSize > c.curBase && c.spareFits() {
		c.useSpare()
	}
}

// chunk is the pending chunk of the current segment, begun if need be.
func (c *core) chunk() *chunk {
	n := len(c.pending)
	if n == 0 || c.pending[n-1].seg != c.cur {
		var b []byte
		if k := len(c.spareBufs); k > 0 {
			b = c.spareBufs[k-1]
			c.spareBufs = c.spareBufs[:k-1]
		}
		c.pending = append(c.pending, chunk{seg: c.cur, b: b})
		n++
	}
	return &c.pending[n-1]
}

// putCheckpoint writes the user's checkpoint as the first frame of the
// segment appends just moved to.
func (c *core) putCheckpoint() {
	if len(c.checkpoint) == 0 {
		return
	}
	ch := c.chunk()
	ch.b = append(ch.b, c.checkpoint...)
	size := int64(len(c.checkpoint))
	c.curSize += size
	c.curBase = c.curSize
	c.appended += uint64(size)
	ch.end = c.appended
}

// moved: an item's latest full version moved from one segment to another
// (From zero: a new item, or one found at Open; To zero: deleted).
func (c *core) moved(m Move) {
	if m.From.Seg != 0 {
		if s := c.segs[m.From.Seg]; s != nil {
			s.liveCount--
			s.liveBytes -= int64(m.From.Size)
		}
		c.live -= int64(m.From.Size)
		c.items--
	}
	if m.To.Seg != 0 {
		if s := c.segs[m.To.Seg]; s != nil {
			s.liveCount++
			s.liveBytes += int64(m.To.Size)
			s.ids = append(s.ids, m.ID)
		}
		c.live += int64(m.To.Size)
		c.items++
	}
}

// resetLive: the user replaced its items; nothing live before is.
func (c *core) resetLive() {
	for _, s := range c.order {
		s.liveCount, s.liveBytes, s.ids, s.stuck = 0, 0, nil, false
	}
	c.live, c.items = 0, 0
}

// free reports whether nothing in s is needed: no live item, and nothing
// the user still holds.
func (c *core) free(s *segState) bool { return s.liveCount == 0 && s.seq < c.heldFrom }

// onlyDeletes reports whether the log takes deletes alone: the disk is
// full, or too much waits for an fsync that keeps failing.
func (c *core) onlyDeletes() bool { return c.noSpace || c.backlog }

// roomShort reports whether the room for deletes holds less than what
// one more item's delete would leave it to cover, with half a step to
// spare for what a filesystem rounds up and the headers of segments to
// come; and, while the room cannot grow (the disk is full), what a group
// of size bytes would add past the current segment's size (roomNeed):
// refusable groups but moves are refused then. The room grows once the
// need comes within a step of it (tendRoom), so on a disk with room a put
// is refused only if more comes in one turn of the writer than half a
// step holds (some 1,900 puts' deletes at the smallest step).
func (c *core) roomShort(size int64) bool {
	if c.policy.deleteRoom == 0 {
		return false
	}
	need := c.roomNeed(0, false)
	if c.roomFailing {
		need = c.roomNeed(size, true)
	}
	return need+c.policy.deleteRoom+c.policy.roomStep/2 > c.room
}

// roomNeed is what the room for deletes must cover once a group of size
// bytes is appended (0: none): the live items' deletes and, with overrun,
// what appends put past the current segment's size while no spare was
// ready, which take blocks only when written, on a disk that may have
// none by then: a burst of puts past it, the disk filling meanwhile, took
// blocks of the room a full disk gave up, and the deletes lacked them
// (found by a test that filled a small disk). The room grows for both;
// puts are held to the overrun's only once it cannot (roomShort): on a
// disk with room, tiny segments (a test's 2 KiB) are passed by more than
// a step while their spares are made.
func (c *core) roomNeed(size int64, overrun bool) int64 {
	need := max(c.items, 0) * c.policy.deleteRoom
	if overrun && c.cur != nil && !c.spareFits() {
		need += max(0, c.curSize+size-c.policy.segmentSize)
	}
	return need
}

// outOfSpace reports whether err says the disk (or the user's quota) is
// full: another failure to make a spare (descriptors, I/O) gives up no
// room.
func outOfSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// fullMoveOf reports whether g moves a live item out of the segment that
// compaction empties while the disk is full (fullMove): a full version
// whose previous one is there.
func (c *core) fullMoveOf(g *Group) bool {
	return c.fullMove != 0 && !c.backlog && g.Live && g.Prev.Seg == c.fullMove &&
		c.curSize+int64(g.Size)+c.deleteReserve() <= c.policy.segmentSize
}

// moveRefused gives back the item of g, refused while the disk is full,
// if g may be a move out of the segment that compaction empties meanwhile
// (fullMove): the deletes that came between its batches took the room
// its moves counted on. Compaction handed out its id already, and would
// never name it again: the segment could then not be emptied, and
// compaction would stop for good. It waits instead until the disk has
// room, then begins that segment afresh. An id given back that was no
// move is harmless: one whose item is elsewhere is skipped (Migrator).
func (c *core) moveRefused(g *Group) {
	if c.fullMove == 0 || !g.Live || g.Prev.Seg != c.fullMove {
		return
	}
	if s := c.segs[c.fullMove]; s != nil {
		s.ids = append(s.ids, g.ID)
	}
	c.fullMove = 0
}

// movesFit reports whether s's live items fit in the current segment's
// room, with room kept beside them for the deletes that come meanwhile:
// while the disk is full, nothing can be written past it.
func (c *core) movesFit(s *segState) bool {
	return c.curSize+s.liveBytes+c.deleteReserve() <= c.policy.segmentSize
}

// deleteReserve is the room of the current segment a full disk's moves
// leave to deletes: an eighth of a segment. Each move is held to it too,
// as deletes come between the batches.
func (c *core) deleteReserve() int64 { return c.policy.segmentSize / 8 }

// onDurable holds fn until lsn is published; true means it already is,
// and the caller runs fn itself.
func (c *core) onDurable(lsn uint64, fn func()) bool {
	if lsn <= c.published {
		return true
	}
	c.waiters = append(c.waiters, durableWaiter{lsn: lsn, fn: fn})
	return false
}

// closeRequested: Close was called. Appends are refused from now on; true
// the first time.
func (c *core) closeRequested(now time.Duration) bool {
	if c.closing {
		return false
	}
	c.closing = true
	c.closeAt = now + c.policy.closeGrace
	return true
}

// timerFired: the timer went off, and is no longer armed.
func (c *core) timerFired(time.Duration) { c.timerAt = never }

// writeDone: the extents handed out wrote n bytes in all, in order, and
// then, if err is set, one failed.
func (c *core) writeDone(now time.Duration, n int64, err error) {
	for ; c.head < len(c.writes); c.head++ {
		e := &c.writes[c.head]
		k := min(n, int64(len(e.b)))
		n -= k
		if k > 0 {
			s := e.seg
			s.written = max(s.written, e.off+k)
			s.dirty = true
			if !c.policy.noSync {
				c.unsyncedBytes += k
			}
			e.off, e.b = e.off+k, e.b[k:]
		}
		if len(e.b) > 0 {
			break
		}
		if e.chunk >= 0 {
			ch := &c.batch[e.chunk]
			c.written, c.writtenEager = ch.end, max(c.writtenEager, ch.eager)
		}
	}
	if c.unsyncedBytes > c.policy.maxUnsynced && !c.backlog {
		// The fsyncs fail, or fall behind the writes: stop taking
		// refusable groups, as on a full disk, rather than keep ever more
		// to write again.
		c.backlog = true
		c.emit(action{kind: actReport, report: reportBacklog, n: c.unsyncedBytes})
	}
	if err != nil && c.head < len(c.writes) {
		seq := c.writes[c.head].seq
		if c.closing && now >= c.closeAt {
			c.giveUp(seq, err)
			return
		}
		c.writeRetry.failed(now)
		c.emit(action{kind: actReport, report: reportWriteFailed, seq: seq, err: err})
		if outOfSpace(err) {
			c.freeAhead(now, seq, err)
		}
		return
	}
	c.writeRetry.reset()
	c.writeNoSpace = false
	var bytes, records int
	for i := range c.batch {
		bytes += len(c.batch[i].b)
		records += c.batch[i].records
	}
	c.emit(action{kind: actObserveBatch, n: int64(bytes), records: int32(records)})
	c.batch = c.recycle(c.batch)
	c.writes, c.head = c.writes[:0], 0
}

// giveUp drops every group not yet written: Close's grace has run out on
// a disk that keeps failing. None of them was acknowledged.
func (c *core) giveUp(seq uint32, err error) {
	c.closeErr = errors.New("segment: closed with groups the disk would not take")
	c.emit(action{kind: actReport, report: reportGaveUp, seq: seq, err: err})
	// What is left of the batch may be written in part, mid-frame: its
	// segment stays open, unsealed (retire), so that the next start cuts
	// it off as a tear rather than refuse a sealed segment's bad frame.
	// Nothing is written after a give-up: no batch moves writing on again.
	c.writing = min(c.writing, seq)
	c.batch = c.recycle(c.batch)
	c.pending = c.recycle(c.pending)
	c.taken = c.appended
	c.writes, c.head = c.writes[:0], 0
}

// recycle keeps the buffers of chunks for Append to fill again, and
// returns chunks emptied.
func (c *core) recycle(chunks []chunk) []chunk {
	for i := range chunks {
		if b := chunks[i].b; cap(b) <= maxReusedBuf && len(c.spareBufs) < 4 {
			c.spareBufs = append(c.spareBufs, b[:0])
		}
		chunks[i] = chunk{}
	}
	return chunks[:0]
}

// syncDone: the fsync in flight worked, or failed on segment seq. After a
// failed fdatasync the kernel may have dropped the dirty pages of any write
// made before it reported the error, those made while it ran included,
// while reporting the error once, so a later one that works would prove
// nothing about them: everything written since the last good fsync is
// written again (rewriteDone) before the next one is handed out.
func (c *core) syncDone(now time.Duration, seq uint32, err error) {
	c.syncInFlight, c.batchesWait = false, false
	for _, s := range c.open {
		if s.syncing {
			s.syncing = false
			s.dirty = s.dirty || err != nil
		}
	}
	if err != nil {
		c.syncFailed(now, seq, err)
		return
	}
	// Writes made while it ran stay dirty and unsynced, for the next.
	c.synced = c.syncing
	c.lastSync = now
	c.syncRetry.reset()
	c.syncErr = nil
	c.unsyncedBytes -= c.syncingBytes
	if c.backlog && c.unsyncedBytes <= c.policy.maxUnsynced {
		c.backlog = false
		c.emit(action{kind: actReport, report: reportBacklogOver, n: c.unsyncedBytes})
	}
}

// rewriteDone: every copy kept since the last good fsync was written
// again, or writing one to seq failed. The next fsync may count once they
// all are.
func (c *core) rewriteDone(now time.Duration, seq uint32, err error) {
	if err != nil {
		c.syncFailed(now, seq, err)
		return
	}
	c.resync = false
}

func (c *core) syncFailed(now time.Duration, seq uint32, err error) {
	c.resync = true
	c.syncErr = err
	c.syncRetry.failed(now)
	c.emit(action{kind: actReport, report: reportSyncFailed, seq: seq, err: err})
}

// removeDone: the oldest segment was removed, or could not be.
func (c *core) removeDone(now time.Duration, err error) {
	seq := c.removeSeq
	if err != nil {
		if c.removeRetry.wait == 0 {
			c.emit(action{kind: actReport, report: reportRemoveFailed, seq: seq, err: err})
		}
		c.removeRetry.failed(now)
		return
	}
	c.removeRetry.reset()
	if c.fullMove == seq {
		c.fullMove = 0 // the next oldest may go too, if it fits
	}
	c.disk -= c.order[0].onDisk
	delete(c.segs, seq)
	c.order[0] = nil
	c.order = c.order[1:]
	c.removeSeq = 0
	// Space freed: a spare the full disk refused may fit now.
	c.spareRetry.reset()
}

// spareDone: segment seq was made and preallocated, or could not be: the
// disk is full.
func (c *core) spareDone(now time.Duration, seq uint32, err error) {
	c.makingSpare = false
	if err != nil {
		if !c.noSpace {
			c.emit(action{kind: actReport, report: reportDiskFull, err: err})
		}
		c.noSpace = true
		c.spareRetry.failed(now)
		if outOfSpace(err) && c.giveRoomUp() {
			c.spareRetry.reset() // tried at once in what the room frees
		}
		return
	}
	if c.noSpace && !c.roomFailing {
		// (With the room given up, puts wait for it: reportRoomBack.)
		c.emit(action{kind: actReport, report: reportSpaceBack})
	}
	c.noSpace, c.fullMove = false, 0
	c.spareRetry.reset()
	c.spare = &segState{seq: seq, version: c.making, onDisk: c.policy.segmentSize, written: HeaderSize, open: true}
	c.addSegment(c.spare)
}

// Actions.

// ready returns the actions that follow from the events so far, in the
// order to carry them out (see doc.go). At most one, the last, is a step
// of the writer's own (its I/O, or a turn); the writer reports its outcome
// before calling ready again. The slice is the core's, valid until the
// writer feeds the next event or calls ready again.
func (c *core) ready(now time.Duration) []action {
	c.startOut()
	c.wakeAt = never
	released := c.publish()
	c.retire()
	c.dropStaleSpare()
	if c.curSize > c.policy.segmentSize && c.spareFits() {
		// The current segment outgrew its size while the spare was being
		// made. Rotate now rather than at the next append, so an idle log
		// can still compact it away.
		c.useSpare()
	}
	c.tendRoom(now) // before the spare: a cut of the room may free what it needs
	c.makeSpare(now)
	target := c.compactionTarget()
	if target != nil && c.free(target) && c.removeSeq != target.seq {
		// Every group that moved an item out of it, or deleted one, is
		// appended by now: once they are durable it may go.
		c.removeSeq, c.removeAfter = target.seq, c.appended
	}
	turned := c.turned
	syncNow := c.syncNow(now)
	at := len(c.out)
	c.step(now, syncNow, released, turned, target)
	c.turned = len(c.out) > at && c.out[len(c.out)-1].kind == actTurn
	if c.wakeAt < c.timerAt {
		c.timerAt = c.wakeAt
		c.out = slices.Insert(c.out, at, action{kind: actTimer, n: int64(c.wakeAt)})
	}
	if syncNow && !c.resync && !c.holdSync(turned, at) {
		// Before the step, so the fsync runs while the writer writes.
		c.out = slices.Insert(c.out, at, c.handOutSync())
	}
	c.outTaken = true
	return c.out
}

// step hands out the writer's own next step, if any, by priority (see
// doc.go). syncNow says an fsync may go now: the rewrite a failed one
// left, or the fsync itself, which ready hands out beside the step unless
// it waits for the batch a turn found (turned; holdSync).
func (c *core) step(now time.Duration, syncNow, released, turned bool, target *segState) {
	switch {
	case c.writeBatch(now):
	case syncNow && c.resync:
		c.emit(action{kind: actRewrite})
	case c.closing:
		_ = c.takeBatch() || c.finish(syncNow)
	case c.compact(now, target):
	case c.turn(released):
	case !turned && c.batchWaits(syncNow):
	default:
		c.takeBatch()
	}
}

// batchWaits: under -f 0 new records wait for the fsync in flight, or the
// one ready is about to hand out, until they come to pipelineMin bytes.
// Written while it runs they would be acknowledged no sooner: they gain
// the few microseconds a small write takes off the path between two
// fsyncs, and cost a wake-up and a system call each, taken from the event
// loops, many times per fsync. A large batch (a bulk delete, compaction's
// moves) is worth writing ahead. The callbacks a publish released are
// still run first (a turn), and what they append is written at once: the
// fsync waits for it.
func (c *core) batchWaits(syncNow bool) bool {
	return c.policy.acknowledgeOnSync() && (c.syncInFlight || syncNow && !c.resync) &&
		int64(c.appended-c.taken) < c.policy.pipelineMin
}

// kickWanted reports whether an append gives the writer something to do,
// so it is worth waking: not while new records wait for an fsync
// (batchWaits). The writer looks again when the fsync reports back.
func (c *core) kickWanted() bool {
	return !c.batchesWait || int64(c.appended-c.taken) >= c.policy.pipelineMin
}

func (c *core) startOut() {
	if c.outTaken {
		c.out, c.outTaken = c.out[:0], false
	}
}

func (c *core) emit(a action) {
	c.startOut()
	c.out = append(c.out, a)
}

// wake asks for the timer at `at`, if nothing asks for it earlier.
func (c *core) wake(at time.Duration) { c.wakeAt = min(c.wakeAt, at) }

// spareFits reports whether appends may move on to the spare: there is
// one, of the current segment's version.
func (c *core) spareFits() bool { return c.spare != nil && c.spare.version == c.cur.version }

// setVersion: the segments made from now on say v, and appends move on
// to one at once, with checkpoint first; false when there is no spare of
// v yet (ready drops a spare of another and makes one). Until appends
// move on, they stay in the current segment, whatever its size.
func (c *core) setVersion(v uint32, checkpoint []byte) (seg uint32, ok bool) {
	c.version = v
	if c.cur == nil || c.cur.version == v {
		return 0, true
	}
	if c.spare == nil || c.spare.version != v {
		return 0, false
	}
	c.checkpoint = append(c.checkpoint[:0], checkpoint...)
	c.useSpare()
	return c.cur.seq, true
}

// dropStaleSpare retires a spare made before the version changed, never
// written to: its header says another. It stays on disk, empty, until
// compaction (or the next Open) removes it.
func (c *core) dropStaleSpare() {
	if s := c.spare; s != nil && s.version != c.version {
		c.dropSpare()
	}
}

// dropSpare retires the spare, never written to: cut to its header, its
// blocks go back to the disk.
func (c *core) dropSpare() {
	s := c.spare
	c.spare = nil
	c.open = slices.DeleteFunc(c.open, func(o *segState) bool { return o == s })
	c.retireSegment(s)
}

func (c *core) useSpare() {
	c.cur, c.curSize, c.curBase, c.spare = c.spare, HeaderSize, HeaderSize, nil
	c.cur.headerID = c.lastID
	c.putCheckpoint()
}

// publish acknowledges what the policy lets it: what is written, or with
// -f 0 what is fsynced. It reports whether that releases callbacks.
func (c *core) publish() bool {
	lsn := c.written
	if c.policy.acknowledgeOnSync() {
		lsn = c.synced
	}
	if lsn <= c.published {
		return false
	}
	c.published = lsn
	clear(c.due) // the shell is done with them
	due, keep := c.due[:0], c.waiters[:0]
	for _, w := range c.waiters {
		if w.lsn <= lsn {
			due = append(due, w)
		} else {
			keep = append(keep, w)
		}
	}
	clear(c.waiters[len(keep):])
	c.waiters, c.due = keep, due
	c.emit(action{kind: actPublish, n: int64(lsn), due: due})
	return len(due) > 0
}

// retire trims and closes the segments before the one being written once
// no fsync needs them: after an fsync that covers them has finished, or at
// once with -F (fsynced first, as beanstalkd does), but never while the
// fsync in flight uses the file. Nothing writes to them again: appends
// went on to a later segment, and only a dirty segment has copies to
// write again.
func (c *core) retire() {
	// A batch spanning a rotation moved writing on when it was taken:
	// what is left of it (a write that failed, to be made again) still
	// goes to its segment, which must stay open, and unsealed.
	writing := c.writing
	if c.head < len(c.writes) {
		writing = min(writing, c.writes[c.head].seq)
	}
	if len(c.open) == 0 || c.open[0].seq >= writing {
		return // the usual case: only the current segment and the spare
	}
	keep := c.open[:0]
	for _, s := range c.open {
		if s.seq >= writing || s.syncing || s.dirty && !c.policy.noSync {
			keep = append(keep, s)
			continue
		}
		c.retireSegment(s)
	}
	clear(c.open[len(keep):])
	c.open = keep
}

// retireSegment trims s to what was written and closes it (fsynced first
// if dirty), and counts its disk as that; the caller takes it out of
// c.open.
func (c *core) retireSegment(s *segState) {
	c.emit(action{kind: actRetire, seq: s.seq, n: s.written, sync: s.dirty})
	s.open, s.dirty = false, false
	c.disk += s.written - s.onDisk
	s.onDisk = s.written
}

// makeSpare keeps one preallocated segment ready, so rotation never waits
// for the disk and deletes have room when the disk fills up. While the
// disk is full it is tried again every noSpaceRetry, and at once when
// compaction frees a segment.
func (c *core) makeSpare(now time.Duration) {
	if c.spare != nil || c.makingSpare || c.closing || c.roomBusy && c.roomTarget < c.room || c.writeNoSpace {
		// A cut of the room first: it may free what a spare needs; and a
		// write that failed for want of space, which needs it too. (A
		// growth goes beside: waiting for one starved the spare under a
		// burst of puts that grew the room at every turn.)
		return
	}
	if !c.spareRetry.due(now) {
		c.wake(c.spareRetry.next)
		return
	}
	c.makingSpare, c.making = true, c.version
	c.emit(action{kind: actMakeSpare, seq: c.nextSeq(), n: int64(c.lastID), version: c.version})
}

// giveRoomUp gives the room kept for deletes (doc.go) to them, the disk
// full: its file is cut to nothing, its blocks the disk's again. It
// reports whether it did (there was room, and no change of it in flight).
func (c *core) giveRoomUp() bool {
	if c.room == 0 || c.roomBusy || c.closing {
		return false
	}
	if !c.roomFailing {
		c.emit(action{kind: actReport, report: reportRoomSpent, n: c.room})
	}
	c.roomFailing = true
	c.askRoom(0)
	return true
}

// askRoom hands out a change of the room file to target bytes; roomDone
// reports it.
func (c *core) askRoom(target int64) {
	c.roomBusy, c.roomTarget = true, target
	c.emit(action{kind: actRoom, n: target})
}

// freeAhead gives what is allocated ahead to a write to segment seq the
// full disk refused: a spare not yet written to, and the room for
// deletes (tendRoom). Groups appended while no spare was ready go past
// the current segment's size, into blocks the disk may no longer have; a
// spare made meanwhile holds blocks only later groups would use, and the
// room was given up only when a spare could not be made: the write was
// retried for good (found by a test that filled a small disk). Until the
// write works no spare is made, which would take what it needs, and
// until a spare is made again the disk counts as full.
func (c *core) freeAhead(now time.Duration, seq uint32, err error) {
	if s := c.spare; s != nil && s.seq != seq && s.written == HeaderSize {
		c.dropSpare()
	}
	if !c.noSpace {
		c.emit(action{kind: actReport, report: reportDiskFull, err: err})
	}
	c.noSpace, c.writeNoSpace = true, true
	c.spareRetry.failed(now)
}

// tendRoom keeps the room for deletes (doc.go) ahead of what it must
// cover (roomWanted), growing it beside the spare maker while the disk is
// not full, and shrinking it when that falls well below it; after a write
// failed for want of space, it gives the room up to it.
func (c *core) tendRoom(now time.Duration) {
	if c.roomBusy || c.closing || c.cur == nil {
		return
	}
	if c.writeNoSpace {
		c.giveRoomUp() // to the write that failed for want of space
		return
	}
	if c.noSpace {
		return // a full disk's room was given up to its deletes (spareDone)
	}
	target, change := c.roomWanted()
	if !change {
		return
	}
	if !c.roomRetry.due(now) {
		c.wake(c.roomRetry.next)
		return
	}
	c.askRoom(target)
}

// roomWanted is the size the room for deletes should be changed to, and
// whether it should: grown to two or three steps above what the live
// items need once they come within a step of it, shrunk when it holds
// two steps more than that.
func (c *core) roomWanted() (target int64, change bool) {
	if c.policy.deleteRoom == 0 {
		return 0, false
	}
	need := c.roomNeed(0, true)
	step := c.policy.roomStep
	target = (need/step + 3) * step
	return target, c.room < need+step || c.room > target+2*step
}

// roomDone: the room file holds size bytes now, after a change that
// worked, or failed (err): a growth, for want of space; a cut (a shrink,
// or the room given up), for any other reason (descriptors, I/O).
func (c *core) roomDone(now time.Duration, size int64, err error) {
	c.roomBusy, c.room = false, size
	if err != nil {
		c.roomRetry.failed(now)
		if c.roomTarget < size {
			// A cut that failed changes nothing refused; one that gave
			// the room up to a full disk must not bring the spare back
			// at once (spareDone), to fail and give it up again.
			if c.roomTarget == 0 {
				c.spareRetry.failed(now)
			}
			return
		}
		if !c.roomFailing {
			c.emit(action{kind: actReport, report: reportRoomShort, n: size, err: err})
		}
		c.roomFailing = true
		return
	}
	c.roomRetry.reset()
	if c.roomFailing && size > 0 {
		c.roomFailing = false
		c.emit(action{kind: actReport, report: reportRoomBack, n: size})
	}
}

// writeBatch hands out what is left of the batch being written, once a
// failed write's backoff has passed (or Close's grace, whichever comes
// first). Nothing else is written meanwhile; what is already written may
// still be fsynced.
func (c *core) writeBatch(now time.Duration) bool {
	if c.head == len(c.writes) {
		return false
	}
	at := c.writeRetry.next
	if c.closing {
		at = min(at, c.closeAt)
	}
	if c.writeRetry.wait > 0 && now < at {
		c.wake(at)
		return true
	}
	c.emitWrites()
	return true
}

// turn: when a publish has just released callbacks, the writer runs them
// before it takes the next batch, so the commits they release can join it
// (group commit). With -f 0 it turns even with nothing pending: the next
// fsync waits for what the callbacks append (holdSync).
func (c *core) turn(released bool) bool {
	if !released || len(c.pending) == 0 && !c.policy.acknowledgeOnSync() {
		return false
	}
	c.emit(action{kind: actTurn})
	return true
}

// takeBatch hands out everything pending as the next batch. A segment's
// header is rewritten with the highest id issued so far when the writer
// first writes to it: it may have been preallocated long before.
func (c *core) takeBatch() bool {
	if len(c.pending) == 0 {
		return false
	}
	c.batch, c.pending = c.pending, c.batch
	c.taken = c.appended
	c.compacted = false
	// Room for a header per chunk, so the ids appended below never move.
	c.headers = slices.Grow(c.headers[:0], 8*len(c.batch))
	for i := range c.batch {
		ch := &c.batch[i]
		if s := ch.seg; s.seq != c.writing {
			n := len(c.headers)
			id := c.lastID
			if c.policy.checkpoints {
				id = s.headerID
			}
			c.headers = binary.LittleEndian.AppendUint64(c.headers, id)
			c.writes = append(c.writes, extent{seq: s.seq, off: headerIDOffset, b: c.headers[n : n+8 : n+8], seg: s, chunk: -1})
			c.writing = s.seq
		}
		c.writes = append(c.writes, extent{seq: ch.seg.seq, off: ch.seg.written, b: ch.b, seg: ch.seg, chunk: i})
	}
	c.emitWrites()
	return true
}

func (c *core) emitWrites() {
	c.emit(action{kind: actWrite, writes: c.writes[c.head:], keep: !c.policy.noSync})
}

// syncNow reports whether an fsync may go now (after the rewrite a failed
// one requires, if any): none is in flight, something written is not yet
// fsynced, and the policy wants it (every commit with -f 0, after
// SyncEvery otherwise, never with -F), or compaction or Close waits for
// it. A failed fsync is tried again on its backoff timer, not on every
// append; but once everything is written, Close tries once more without
// waiting for it (under -f 0 what fails was never acknowledged).
func (c *core) syncNow(now time.Duration) bool {
	if c.syncInFlight || c.synced >= c.written || !c.syncWanted(now) {
		return false
	}
	if c.syncRetry.due(now) {
		return true
	}
	if !c.closing {
		c.wake(c.syncRetry.next)
		return false
	}
	if c.finalSync || c.head < len(c.writes) || len(c.pending) > 0 {
		return false
	}
	c.finalSync = true
	c.syncRetry.next = now
	return true
}

// holdSync: with -f 0 an fsync waits while the step handed out at out[at]
// is a turn that runs the callbacks a publish released, or the batch the
// turn found, so the commits they append join it (group commit). It waits
// microseconds, once per fsync: under -f 0 only an fsync releases
// anything. Under -f MS every write publishes, and the fsync does not
// wait.
func (c *core) holdSync(turned bool, at int) bool {
	if !c.policy.acknowledgeOnSync() || c.closing || len(c.out) <= at {
		return false
	}
	switch c.out[len(c.out)-1].kind {
	case actTurn:
		return true
	case actWrite:
		return turned
	}
	return false
}

func (c *core) syncWanted(now time.Duration) bool {
	switch {
	case c.closing: // Close fsyncs whatever the policy
		return true
	case c.removeSeq != 0 && c.synced < c.removeAfter && c.written >= c.removeAfter:
		return true
	case c.policy.noSync:
		return false
	case c.synced >= c.writtenEager:
		return false // only unsynced groups written since the last fsync
	case c.policy.syncEvery <= 0:
		return true
	}
	// Unlike beanstalkd, an idle tail is fsynced too, by the timer.
	due := c.lastSync + c.policy.syncEvery
	if now < due {
		c.wake(due)
		return false
	}
	return true
}

// handOutSync marks the fsync in flight: it covers what is written now,
// in every dirty segment.
func (c *core) handOutSync() action {
	segs := c.syncSegs[:0]
	for _, s := range c.open {
		if s.dirty {
			s.dirty, s.syncing = false, true
			segs = append(segs, s.seq)
		}
	}
	c.syncSegs = segs
	c.syncInFlight = true
	c.batchesWait = c.policy.acknowledgeOnSync()
	c.syncing, c.syncingBytes = c.written, c.unsyncedBytes
	return action{kind: actSync, segs: segs}
}

// finish ends Close once everything is written and no fsync is in flight
// or about to be (syncNow): the result, with the last fsync's failure if
// even Close's extra try failed.
func (c *core) finish(syncNow bool) bool {
	if c.syncInFlight || syncNow {
		return false // its outcome first: no fsync may outlive the files
	}
	err := c.closeErr
	if c.synced < c.written {
		err = errors.Join(err, fmt.Errorf("segment: closed without a final fsync: %w", c.syncErr))
	}
	if err == nil {
		c.trimOpen()
	}
	c.emit(action{kind: actClosed, err: err})
	return true
}

// trimOpen retires every segment still open at a clean Close, the current
// one and the spare too, trimmed to what was written: the next Open reads
// no preallocated zeros, which were most of a restart's reading. Nothing
// writes to them again (Start opens a new segment), and a spare trimmed
// to its header is still found empty.
func (c *core) trimOpen() {
	for _, s := range c.open {
		c.retireSegment(s) // none dirty: Close fsynced them
	}
	clear(c.open)
	c.open = c.open[:0]
}

// compactionTarget is the oldest segment, if compaction wants it gone.
//
// Any segment before the current one may go: appends only ever go to the
// current one. (beanstalkd also spares the one before it.) One holding
// live items goes once the directory, with those items moved to the head,
// would pass twice the live data plus two segments (current and spare
// included): counting the move keeps the peak near that bound, not just
// the rest. It must also reclaim at least half of what it copies, or a
// large live set alone in the oldest segment would be copied forward at
// every rotation.
func (c *core) compactionTarget() *segState {
	if c.closing || len(c.order) < 3 {
		return nil
	}
	oldest := c.order[0]
	if oldest.seq >= c.cur.seq {
		return nil
	}
	size := c.policy.segmentSize
	garbage := c.disk - 2*size - c.live
	if oldest.liveCount > 0 &&
		(c.disk+oldest.liveBytes <= 2*c.live+2*size || 2*garbage < oldest.liveBytes) {
		return nil
	}
	return oldest
}

// compact takes one step of keeping the directory near twice the live
// data: it hands out a batch of s's live items to move, or, once nothing in
// s is live and the moves are durable, its removal. After a compaction
// step a pending batch goes first, so neither starves the other.
func (c *core) compact(now time.Duration, s *segState) bool {
	if s == nil || c.compacted && len(c.pending) > 0 {
		return false
	}
	if s.liveCount == 0 {
		if !c.free(s) {
			return false // the user still holds it
		}
		if c.synced < c.removeAfter || s.syncing {
			return false // syncWanted asks for an fsync once the moves are written
		}
		if !c.removeRetry.due(now) {
			c.wake(c.removeRetry.next)
			return false
		}
		if s.open {
			// Nothing more goes there (appends moved on); the shell closes it.
			s.open = false
			c.open = slices.DeleteFunc(c.open, func(o *segState) bool { return o == s })
		}
		if c.writing == s.seq {
			c.writing = 0
		}
		c.compacted = true
		c.emit(action{kind: actRemove, seq: s.seq})
		return true
	}
	if c.backlog || !c.migrating {
		// The moves would be refused, and their ids lost with them;
		// compaction resumes once fsyncs work again. Without a
		// Migrator (a cluster member that does not lead) the moves are
		// someone else's.
		return false
	}
	if c.noSpace && c.fullMove != s.seq {
		// The disk is full: a journal's moves go only if they fit in
		// what is left of the current segment, which removing s then
		// gives back (a disk filled by the log's own garbage frees
		// itself). A cluster's Raft log (MovesLater) moves by its
		// leaders' proposals, which its journals refuse while Full,
		// and the ids handed out would be lost with them.
		if c.policy.movesLater || !c.movesFit(s) {
			return false
		}
		c.fullMove = s.seq
	}
	if len(s.ids) == 0 && c.policy.movesLater {
		// Every live item here was handed out: the moves take effect as
		// the user reports them (moved).
		return false
	}
	if len(s.ids) == 0 {
		// Live items the user cannot name: moving nothing would only
		// spin. Never expected; said once.
		if !s.stuck {
			s.stuck = true
			c.emit(action{kind: actReport, report: reportStuck, seq: s.seq, n: int64(s.liveCount)})
		}
		return false
	}
	// A move refused for want of space (the deletes between the batches
	// took its room on a full disk) gives its id back (moveRefused).
	n := min(len(s.ids), migrateBatch)
	ids := s.ids[:n:n]
	s.ids = s.ids[n:]
	c.compacted = true
	c.emit(action{kind: actMigrate, seq: s.seq, ids: ids})
	return true
}

// stats reads the figures Stats reports, but for RecordsMigrated.
func (c *core) stats() Stats {
	st := Stats{
		RecordsWritten: c.records,
		MaxSize:        c.policy.segmentSize,
		DiskBytes:      c.disk,
		LiveBytes:      c.live,
		RoomBytes:      c.room,
	}
	if c.cur != nil {
		st.CurrentIndex = c.cur.seq
	}
	if len(c.order) > 0 {
		st.OldestIndex = c.order[0].seq
	}
	return st
}
