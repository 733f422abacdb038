package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// The kinds of a member's frames in its segments (doc.go, "The log on
// disk"): the first byte of each payload, from 16 on, above every kind of
// a job's record (wal.Kind), so that wal.DecodeFrames, which a peer's
// records go through, never takes one for a record.
const (
	kindCheckpoint wal.Kind = 16 + iota
	kindEntry
	kindHardState
	kindHead
	kindSnapshot
	kindHeadBegin
	kindDropped
)

// DefaultCacheBytes is how many bytes of the newest entries a WALLog
// keeps in memory besides those not yet durable: what raft reads back to
// send to followers and to apply, without a pread.
const DefaultCacheBytes = 8 << 20

// Sizes of frames' fixed fields, payload's kind byte included (and in a
// version 3 segment the group after it: tag.extra).
const (
	headFrameFields      = 1 + 8             // kind, index
	entryFrameFields     = 1 + 8 + 8 + 8 + 1 // kind, index, term, previous term, type
	hardStateFrameFields = 1 + 8 + 8 + 8     // kind, term, vote, commit
)

// errMalformed is a frame whose CRC is right but whose payload is not
// what this version writes.
var errMalformed = errors.New("replication: a malformed frame in the log")

// WALConfig configures a WALLog. The identity is the member's: a
// directory that holds another cluster's, or another member's, log is
// refused.
type WALConfig struct {
	// Dir is the member's -b directory.
	Dir string
	// ClusterID, ID and Name are the member's (ClusterID, MemberID).
	ClusterID, ID uint64
	Name          string
	// Voters are the initial members' ids: a new directory's membership.
	Voters []uint64
	// Join: this member joins a running cluster (--cluster-join), so a
	// new directory's log is empty, with no membership: the leader's
	// first snapshot fills it.
	Join bool
	// Retain is how many entries compaction keeps below the applied
	// index, so a follower a little behind gets entries, not a snapshot.
	Retain int
	// CacheBytes is DefaultCacheBytes when 0.
	CacheBytes int
	// Wal is the member's -b options as a single node's journal takes
	// them: the segment size, SkipDamaged, the Logger and the Observer go
	// to the member's segments; the Importer and MaxJobSize read a
	// single node's directory (or a beanstalkd binlog) the member takes
	// over. The sync policy is ignored: a member's writes are durable when
	// fsynced.
	Wal wal.Options
	// Now is the wall clock compaction reads for the dedup window
	// (GroupLog.dedupHorizonLocked); nil is time.Now.
	Now func() time.Time
}

// WALConfig returns the configuration of this member's log in dir: its
// identity, as StartNode derives it.
func (cfg *NodeConfig) WALConfig(dir string) WALConfig {
	var names []string
	var ids []uint64
	w := WALConfig{Dir: dir, ClusterID: cfg.ClusterID, Name: cfg.Node, Retain: cfg.Retain}
	for _, m := range cfg.Peers {
		names, ids = append(names, m.Name), append(ids, m.ID)
		if m.Name == cfg.Node {
			w.ID = m.ID
		}
	}
	if w.ClusterID == 0 {
		w.ClusterID = ClusterID(names)
	}
	w.Voters = ids
	if cfg.JoinID != 0 {
		w.ID, w.Join, w.Voters = cfg.JoinID, true, nil
	}
	return w
}

// GroupLog is one Raft group's log on its member's SharedLog, in the -b
// directory's segments (doc.go, "The log on disk"; store/segment/doc.go).
// It is a Log with MemoryLog's semantics, durable: what OnDurable
// reported is there after a crash. Raft's reads come from an index of the
// group's entries held, the newest in memory, the others read back from
// their segment. It is safe for concurrent use.
//
// Lock order: mu, then the shared log's, then the segment log's. The
// segment log's goroutines never take mu: its OnDurable callbacks and the
// Migrator run without it.
type GroupLog struct {
	s     *SharedLog // immutable
	group uint16     // immutable

	mu       sync.Mutex
	logState             // guarded by mu
	ents     []entryMeta // guarded by mu: ents[0] is at prevIndex+1

	// membership is the membership half of the group's checkpoint piece
	// (appendPiece), encoded for membershipOf, the conf state it was
	// made from, at book.Index membershipAt; guarded by mu. Every change
	// of the membership replaces cs, so a piece made for a hard state,
	// in every round of every replica, encodes it again only after one.
	membership   []byte
	membershipOf *pb.ConfState
	membershipAt uint64

	// The head, guarded by mu: its frames' places (nil once nothing live
	// is only there), the segment of the first, how many live jobs'
	// latest full records are there, and the highest id its records name.
	// Its records stay on disk (ReadHead).
	head      []frameLoc
	baseSeg   uint32
	baseLive  int
	headMaxID uint64
	// The segment of the last snapshot frame at prevIndex (markIndex)
	// the log wrote or replayed, 0 for none: with no head and no entry
	// held, it is the only frame that says where the group's log begins,
	// and the group holds its segment (holdLocked, markBaseLocked).
	// Guarded by mu.
	markSeg   uint32
	markIndex uint64

	// pins counts, by segment, what needs every segment from that one on
	// besides the log itself: a snapshot's view, a spool. Guarded by mu.
	pins map[uint32]int
	// spool is the snapshot being received, or received and not yet
	// installed. Guarded by mu.
	spool *walSpool

	// What compaction knows, guarded by mu: entries through folded are
	// folded into latest; no entry from prevIndex+1 to below liveFrom
	// (and at most folded) holds a live job's latest full record.
	folded   uint64
	latest   jobIndex
	liveFrom uint64
	// The dedup window, guarded by mu: clock is the latest entry time
	// folded (the head's, or an entry's), headClock the latest in the
	// head's records; no entry from prevIndex+1 to below clockFrom (and at
	// most folded) has one within store.DedupTTL of the window's end
	// (dedupHorizon). Compaction keeps those entries, and the head while
	// its clock is within it, so that a store rebuilt from the log has
	// every request key a resent request may come with.
	clock     int64
	headClock int64
	clockFrom uint64

	// The cache, guarded by mu: the entries from cacheFrom on are in
	// memory (entryMeta.ent), cached bytes of data in all.
	cacheFrom uint64
	cached    int

	// Replay only: the head frames of a snapshot whose metadata frame has
	// not come yet (the stream may have broken), their full records, and
	// its index; the head's full records, until recovered places them;
	// the highest id any frame named.
	pending      []frameLoc
	pendingRecs  []headRec
	pendingIndex uint64
	pendingMaxID uint64
	pendingClock int64
	headRecs     []headRec
	replayedID   uint64
	// sawLog: an entry or a snapshot frame was replayed (replayDefaults).
	sawLog bool
	// cpFloor is the id the first version 3 checkpoint replayed with the
	// group said its frames before it had named (sawCheckpoint: there was
	// one).
	cpFloor       uint64
	sawCheckpoint bool

	lastLSN uint64         // guarded by mu: the LSN of the group's last write
	held    uint32         // guarded by mu: the segment last given to SharedLog.hold
	moves   []segment.Move // guarded by mu: scratch for Compact
	recs    []recSummary   // guarded by mu: scratch for Compact
	piece   []byte         // guarded by mu: scratch for the group's part of a checkpoint
	dropped bool           // guarded by mu: SharedLog.Drop ended the group
	// asks are the group's live jobs the segment log wants out of old
	// segments while this member does not lead the group (migrate.go).
	// Guarded by asksMu, which the segment log's Migrator takes alone and
	// others after mu.
	asksMu sync.Mutex
	asks   map[uint64]ask
	// wtag is the tag of the frames being encoded (SharedLog.append sets
	// it). Guarded by mu.
	wtag tag
	// encodeHS is encodeHardState, made once: SetHardState, the commonest
	// write, allocates no encoder.
	encodeHS func([]byte) []byte // immutable
}

// entryMeta is what the log knows of an entry it holds.
type entryMeta struct {
	term      uint64
	seg       uint32
	off       int64
	size      int // the frame's, header included
	protoSize int // the entry's, as raft counts it (Entries' maxSize)
	maxID     uint64
	lsn       uint64 // durable once the segment log's durable LSN reaches it
	live      int32  // live jobs whose latest full record it holds
	conf      bool   // a membership change: no records
	// clock is the time of its leading KindClock (0: none), its keyed
	// records' entry time (docs/design/shards.md 5.6).
	clock int64
	ent   *pb.Entry // the entry, while it is cached
	// recs are its full records' and deletes' kinds, ids and sizes, from
	// replay to the fold that follows it (summarized says they are).
	recs       []recSummary
	summarized bool
}

type recSummary struct {
	kind wal.Kind
	id   uint64
	size uint32
}

// placed is a live job's latest full record: the entry holding it (the
// base's index for the base) and its place on disk.
type placed struct {
	index uint64
	loc   segment.Loc
}

// frameLoc is where a frame is: its segment, offset and size.
type frameLoc struct {
	seg  uint32
	off  int64
	size int
}

// headRec is a full record of a head: its job, segment and size.
type headRec struct {
	id   uint64
	seg  uint32
	size uint32
}

var _ Log = (*GroupLog)(nil)

// replay takes one frame of the group's, found at replay: its kind, and
// its fields after the kind (and the group).
func (l *GroupLog) replay(kind wal.Kind, body []byte, f segment.Frame) error {
	dir := l.s.dir
	d := decoder{b: body}
	switch kind {
	case kindHardState:
		l.hs = d.hardState()
	case kindEntry:
		index, term, prevTerm, typ := d.u64(), d.u64(), d.u64(), d.u8()
		data := d.rest()
		if _, known := pb.EntryType_name[int32(typ)]; d.err != nil || !known {
			return fmt.Errorf("%w: %s: an entry (type %d): %v", errMalformed, dir, typ, d.err)
		}
		m := entryMeta{term: term, seg: f.Seg, off: f.Off, size: f.Size, conf: pb.EntryType(typ) != pb.EntryNormal}
		e := pb.Entry{Index: &index, Term: &term, Type: pb.EntryType(typ).Enum(), Data: data}
		m.protoSize = proto.Size(&e)
		m.recs, _ = summarize(nil, &e)
		m.summarized = true
		m.clock, _ = wal.ClockOf(data)
		m.maxID = maxID(recordsOf(&e))
		l.replayedID = max(l.replayedID, m.maxID)
		l.replayEntry(index, prevTerm, m)
		l.sawLog = true
	case kindHeadBegin:
		l.forgetPending(d.u64())
	case kindHead:
		index := d.u64()
		records := d.rest()
		if d.err != nil {
			return fmt.Errorf("%w: %s: a snapshot's records: %v", errMalformed, dir, d.err)
		}
		if l.pendingIndex != index {
			l.forgetPending(index) // a snapshot's first records
		}
		l.pending = append(l.pending, frameLoc{seg: f.Seg, off: f.Off, size: f.Size})
		err := wal.ScanFrames(records, func(kind wal.Kind, id uint64, size int) {
			l.pendingMaxID = max(l.pendingMaxID, id)
			if kind == wal.KindFull {
				l.pendingRecs = append(l.pendingRecs, headRec{id: id, seg: f.Seg, size: uint32(size)})
			}
		})
		clock, _ := wal.LatestClock(records) // whole frames, as ScanFrames found
		l.pendingClock = max(l.pendingClock, clock)
		if err != nil {
			return fmt.Errorf("%w: %s: a snapshot's records: %v", errMalformed, dir, err)
		}
		l.replayedID = max(l.replayedID, l.pendingMaxID)
	case kindSnapshot:
		index, term, cs := d.u64(), d.u64(), d.confState()
		// Written since snapshots stream: the head frames' count and bytes.
		counted := d.err == nil && len(d.b) > 0
		frames, bytes := 0, 0
		if counted {
			frames, bytes = int(d.u32()), int(d.u64())
		}
		var book *Book
		if d.err == nil && len(d.b) > 0 {
			b := d.book() // the book as of the snapshot, written with it since it came with one
			book = &b
		}
		if d.err != nil {
			return fmt.Errorf("%w: %s: a snapshot: %v", errMalformed, dir, d.err)
		}
		l.head, l.headRecs, l.headMaxID, l.headClock = nil, nil, 0, 0 // a snapshot with no records
		if l.pendingIndex == index && len(l.pending) > 0 {
			l.head, l.headRecs, l.headMaxID, l.headClock = l.pending, l.pendingRecs, l.pendingMaxID, l.pendingClock
		}
		switch {
		case !counted:
		case len(l.head) > frames || len(l.head) == frames && l.s.headBytes(l.head) != bytes:
			return fmt.Errorf("%w: %s: snapshot %d counts %d frames of its records (%d bytes), and %d (%d bytes) are there",
				errMalformed, dir, index, frames, bytes, len(l.head), l.s.headBytes(l.head))
		case len(l.head) < frames:
			// The first were in segments removed: the log had dropped its
			// head (nothing live was only there; the segments' header ids
			// cover what they named), and its snapshot frame was in a
			// segment still held.
			l.head, l.headRecs, l.headMaxID, l.headClock = nil, nil, 0, 0
		}
		l.forgetPending(0)
		l.baseIndex, l.baseSeg, l.idFloor = index, f.Seg, 0
		if len(l.head) > 0 {
			l.baseSeg = l.head[0].seg
		}
		l.prevIndex, l.prevTerm, l.ents = index, term, nil
		l.markSeg, l.markIndex = f.Seg, index
		if book != nil {
			l.book = *book
		}
		l.cs, l.book.Index = cs, index
		l.sawLog = true
	default:
		return fmt.Errorf("%w: %s: kind %d", errMalformed, dir, kind)
	}
	if d.err != nil {
		return fmt.Errorf("%w: %s: %v", errMalformed, dir, d.err)
	}
	return nil
}

// forgetPending forgets the head frames replayed that no snapshot frame
// took; those that follow are index's.
func (l *GroupLog) forgetPending(index uint64) {
	l.pending, l.pendingRecs, l.pendingIndex, l.pendingMaxID, l.pendingClock = nil, nil, index, 0, 0
}

// headBytes is the records' bytes in head frames.
func (s *SharedLog) headBytes(frames []frameLoc) int {
	n := 0
	for _, f := range frames {
		n += f.size - segment.FrameHeader - headFrameFields - s.tagAt(f.seg).extra()
	}
	return n
}

// replayEntry takes an entry found at replay: appended after the last,
// replacing the one of its index and those after, or, when its
// predecessors are not held (compacted, their segments removed),
// starting the log.
func (l *GroupLog) replayEntry(index, prevTerm uint64, m entryMeta) {
	last := l.lastLocked()
	if index > l.prevIndex && index <= last+1 {
		l.ents = append(l.ents[:index-l.prevIndex-1], m)
		return
	}
	l.head = nil // a head only comes before its own entries
	l.prevIndex, l.prevTerm, l.ents = index-1, prevTerm, []entryMeta{m}
}

// recovered makes the replayed group consistent and tells the segment
// log what it holds: the commit index within the entries held, the id
// floor, what is live (folding the head and the committed entries), and
// what it holds. The shared log then gives the segment log the checkpoint
// for the segments to come.
func (l *GroupLog) recovered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetPending(0) // the records of a snapshot whose stream broke
	last := l.lastLocked()
	if c := l.hs.GetCommit(); c > last {
		// A hard state written after entries a crash tore off: neither
		// was durable. The leader tells the commit again.
		l.hs.Commit = new(last)
	}
	if c := l.hs.GetCommit(); c < l.prevIndex {
		// A snapshot installed, and the hard state written after it torn
		// off: a snapshot is of committed entries, and so is every entry
		// compaction dropped.
		l.hs.Commit = new(l.prevIndex)
	}
	l.idFloor = max(l.idFloor, l.s.floorOf(l))
	l.s.seg.RaiseID(l.replayedID)
	l.folded, l.liveFrom, l.cacheFrom = l.prevIndex, l.prevIndex+1, last+1
	l.clock, l.clockFrom = l.headClock, l.prevIndex+1
	if l.head != nil {
		l.placeHeadLocked(l.headRecs)
	}
	l.headRecs = nil
	l.foldLocked(l.hs.GetCommit())
	for i := range l.ents {
		l.ents[i].recs, l.ents[i].summarized = nil, false
	}
	l.holdLocked()
}

// raft.Storage.

// InitialState implements raft.Storage.
func (l *GroupLog) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.initialState()
}

// Entries implements raft.Storage: the cached entries from memory, the
// others read back from their segments.
func (l *GroupLog) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, n, err := l.entriesSpan(lo, hi, maxSize, len(l.ents), func(k int) uint64 { return uint64(l.ents[k].protoSize) })
	if err != nil {
		return nil, err
	}
	ents := make([]*pb.Entry, 0, n)
	for i, last := lo, lo+uint64(n); i < last; {
		j, end, own := l.spanLocked(i, last)
		if j == i+1 {
			e, err := l.entryLocked(i)
			if err != nil {
				return nil, err
			}
			ents = append(ents, e)
			i++
			continue
		}
		// Entries written one after another, not cached (a replay, a
		// follower catching up): one read for them all, where a read
		// each took most of a rebuild's reading.
		if err := l.readSpanLocked(&ents, i, j, end, own); err != nil {
			return nil, err
		}
		i = j
	}
	return ents, nil
}

// readSpanLocked appends held entries i to j, not cached, to *ents, read
// with one read of their segment up to end, own bytes of it theirs
// (spanLocked). An entry kept
// (in a message queued to a peer) keeps what its data aliases: the run's
// buffer when the run is its frames alone, or nearly (a group's log with
// no other group's frames between); else a copy of its frame, as a read
// of its own made it, from a buffer shared for the read.
func (l *GroupLog) readSpanLocked(ents *[]*pb.Entry, i, j uint64, end, own int64) error {
	first := &l.ents[i-l.prevIndex-1]
	dense := end-first.off-own <= own/8
	var buf *[]byte
	if dense {
		buf = new([]byte)
	} else {
		buf = spanBuffers.Get().(*[]byte)
		defer spanBuffers.Put(buf)
	}
	span, err := l.s.seg.ReadSpan(buf, first.seg, first.off, end)
	if err != nil {
		return err
	}
	for ; i < j; i++ {
		m := &l.ents[i-l.prevIndex-1]
		payload, err := span.Frame(m.off, m.size)
		if err != nil {
			return err
		}
		if !dense {
			payload = bytes.Clone(payload)
		}
		e, err := l.readEntry(payload, i, frameLoc{seg: m.seg, off: m.off, size: m.size}, m.term)
		if err != nil {
			return err
		}
		*ents = append(*ents, e)
	}
	return nil
}

// spanBuffers are the buffers the runs with other groups' frames between
// their own are read into (readSpanLocked), up to maxSpan each.
var spanBuffers = sync.Pool{New: func() any { return new([]byte) }}

// spanLocked is the run of held entries from i, below last, that one
// read takes from their segment: none cached, in one segment, each after
// the one before, in at most maxSpan bytes, of which other groups' frames
// between them are no more than the run's own and spanSlack; j is the
// first after it, end where its last frame ends and own the bytes of its
// frames. A run of one (j = i+1) is read alone, cached or not.
func (l *GroupLog) spanLocked(i, last uint64) (j uint64, end, own int64) {
	m := &l.ents[i-l.prevIndex-1]
	if m.ent != nil {
		return i + 1, 0, 0
	}
	end = m.off + int64(m.size)
	own = int64(m.size)
	for j = i + 1; j < last; j++ {
		k := &l.ents[j-l.prevIndex-1]
		next := k.off + int64(k.size)
		if k.ent != nil || k.seg != m.seg || k.off < end || next-m.off > maxSpan ||
			next-m.off-(own+int64(k.size)) > own+int64(k.size)+spanSlack {
			break
		}
		end, own = next, own+int64(k.size)
	}
	return j, end, own
}

// maxSpan bounds a read of many entries' frames (spanLocked): about what
// a round applies or a message carries (maxMsgSize). spanSlack is the
// other groups' bytes a run may read beyond as many as its own.
const (
	maxSpan   = 1 << 20
	spanSlack = 16 << 10
)

// entryLocked returns held entry i, from the cache or its segment.
func (l *GroupLog) entryLocked(i uint64) (*pb.Entry, error) {
	m := &l.ents[i-l.prevIndex-1]
	if m.ent != nil {
		return m.ent, nil
	}
	payload, err := l.s.seg.ReadFrame(m.seg, m.off, m.size)
	if err != nil {
		return nil, err
	}
	return l.readEntry(payload, i, frameLoc{seg: m.seg, off: m.off, size: m.size}, m.term)
}

// readEntry decodes entry i's frame read back from loc, checking that it
// is entry i of term (any term when term is 0). Its data aliases payload.
func (l *GroupLog) readEntry(payload []byte, i uint64, loc frameLoc, term uint64) (*pb.Entry, error) {
	kind, d := l.s.tagAt(loc.seg).read(payload, l.group)
	index, t, _, typ := d.u64(), d.u64(), d.u64(), d.u8()
	e := &pb.Entry{Index: &index, Term: &t, Type: pb.EntryType(typ).Enum(), Data: d.rest()}
	if kind != kindEntry || d.err != nil || index != i || term != 0 && t != term {
		return nil, fmt.Errorf("%w: %s: entry %d at %d in segment %d", errMalformed, l.s.dir, i, loc.off, loc.seg)
	}
	return e, nil
}

// Term implements raft.Storage.
func (l *GroupLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.termOf(i, len(l.ents), func(k int) uint64 { return l.ents[k].term })
}

// termLocked is the term of entry i, held or the one before the first.
func (l *GroupLog) termLocked(i uint64) uint64 {
	if i == l.prevIndex {
		return l.prevTerm
	}
	return l.ents[i-l.prevIndex-1].term
}

// LastIndex implements raft.Storage.
func (l *GroupLog) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastLocked(), nil
}

func (l *GroupLog) lastLocked() uint64 { return l.lastIndex(len(l.ents)) }

// Changes implements Log.
func (l *GroupLog) Changes(after uint64) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for k := range l.ents {
		if i := l.prevIndex + 1 + uint64(k); i > after && l.ents[k].conf {
			out = append(out, i)
		}
	}
	return out
}

// FirstIndex implements raft.Storage.
func (l *GroupLog) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.prevIndex + 1, nil
}

// Snapshot implements raft.Storage: it reads nothing, and keeps the view
// that OpenSnapshot reads (doc.go, "The leader's view").
func (l *GroupLog) Snapshot() (*pb.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked(l.lastLocked(), l.termLocked,
		func(i uint64) bool { return l.ents[i-l.prevIndex-1].conf }, l.viewLocked)
}

// viewLocked makes the view of the snapshot md describes: the head's
// frames, and the entries' through its index, their segments pinned
// until the view is released.
func (l *GroupLog) viewLocked(md *pb.SnapshotMetadata) *snapView {
	head := slices.Clone(l.head)
	type piece struct {
		frameLoc
		index uint64
		ent   *pb.Entry // the entry, if it was cached: nobody writes into it
	}
	ents := make([]piece, md.GetIndex()-l.prevIndex)
	for k := range ents {
		m := &l.ents[k]
		ents[k] = piece{frameLoc{m.seg, m.off, m.size}, l.prevIndex + 1 + uint64(k), m.ent}
		if m.conf {
			ents[k].ent = &pb.Entry{Type: pb.EntryConfChangeV2.Enum()} // no records to read
		}
	}
	v := &snapView{md: md, pieces: len(head) + len(ents), floor: l.idFloor}
	v.read = func(i int, buf *[]byte) ([]byte, error) {
		if i < len(head) {
			return l.readHeadFrame(buf, head[i])
		}
		p := ents[i-len(head)]
		if p.ent != nil {
			return recordsOf(p.ent), nil
		}
		payload, err := l.s.seg.ReadFrameInto(buf, p.seg, p.off, p.size)
		if err != nil {
			return nil, err
		}
		e, err := l.readEntry(payload, p.index, p.frameLoc, 0)
		return e.GetData(), err
	}
	pin := uint32(0)
	switch {
	case len(head) > 0:
		pin = head[0].seg
	case len(ents) > 0:
		pin = ents[0].seg
	}
	if pin != 0 {
		l.pinLocked(pin)
		v.release = func() { l.unpinLocked(pin) }
	}
	return v
}

// readHeadFrame reads a head frame back into *buf and returns its
// records.
func (l *GroupLog) readHeadFrame(buf *[]byte, f frameLoc) ([]byte, error) {
	payload, err := l.s.seg.ReadFrameInto(buf, f.seg, f.off, f.size)
	if err != nil {
		return nil, err
	}
	kind, d := l.s.tagAt(f.seg).read(payload, l.group)
	d.u64() // the snapshot's index
	if kind != kindHead || d.err != nil {
		return nil, fmt.Errorf("%w: %s: a snapshot's records at %d in segment %d", errMalformed, l.s.dir, f.off, f.seg)
	}
	return d.b, nil
}

// OpenSnapshot implements Log: the view's frames are read back on the
// caller's goroutine, never under the log's mutex.
func (l *GroupLog) OpenSnapshot(md *pb.SnapshotMetadata) (SnapshotReader, error) {
	return l.openSnapshot(&l.mu, md)
}

// pinLocked keeps every segment from seg on until unpinLocked(seg).
func (l *GroupLog) pinLocked(seg uint32) {
	l.pins[seg]++
	l.holdLocked()
}

func (l *GroupLog) unpinLocked(seg uint32) {
	if l.pins[seg]--; l.pins[seg] <= 0 {
		delete(l.pins, seg)
	}
	l.holdLocked()
}

// ReadHead implements Log: the head's frames are read back one at a
// time, each checked.
func (l *GroupLog) ReadHead(fn func(records []wal.Record, locs []wal.Loc) error) error {
	l.mu.Lock()
	frames, floor := slices.Clone(l.head), l.idFloor
	l.mu.Unlock()
	var buf []byte
	var records []wal.Record
	var locs []wal.Loc
	defer func() { clear(records) }() // keep no bodies
	for _, f := range frames {
		recs, err := l.readHeadFrame(&buf, f)
		if err != nil {
			return err
		}
		if records, err = wal.DecodeFrames(records[:0], recs); err != nil {
			return fmt.Errorf("%w: %s: a snapshot's records at %d in segment %d: %v", errMalformed, l.s.dir, f.off, f.seg, err)
		}
		locs = appendLocs(locs[:0], records, f.seg)
		if err := fn(records, locs); err != nil {
			return err
		}
	}
	if floor == 0 {
		return nil
	}
	return fn([]wal.Record{{Kind: wal.KindIDs, ID: floor}}, []wal.Loc{{}})
}

// Writes.

// Append implements Log: the entries are one group of frames, in one
// segment, superseding the entries held from the first one's index on.
func (l *GroupLog) Append(ents []*pb.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(ents) > 0 && ents[0].GetIndex() <= l.prevIndex {
		ents = ents[min(l.prevIndex+1-ents[0].GetIndex(), uint64(len(ents))):]
	}
	if len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	if first > l.lastLocked()+1 {
		panic(fmt.Sprintf("replication: appending entry %d after %d", first, l.lastLocked()))
	}
	if first <= l.folded {
		panic(fmt.Sprintf("replication: entry %d, applied already, superseded", first))
	}
	l.truncateLocked(first)
	prevTerm := l.termLocked(first - 1)
	metas := make([]entryMeta, len(ents))
	size, top := 0, uint64(0)
	for i, e := range ents {
		m := &metas[i]
		m.term, m.ent, m.protoSize = e.GetTerm(), e, proto.Size(e)
		m.size = entryFrameSize(e)
		m.conf = e.GetType() != pb.EntryNormal
		if e.GetType() == pb.EntryNormal {
			m.maxID = maxID(e.GetData())
			m.clock, _ = wal.ClockOf(e.GetData())
		}
		size += m.size
		top = max(top, m.maxID)
	}
	lsn, seg, off, t, err := l.s.append(l, write{size: size, frames: len(ents), id: top, encode: func(b []byte) []byte {
		for _, e := range ents {
			b = appendEntry(b, l.wtag, e, prevTerm)
			prevTerm = e.GetTerm()
		}
		return b
	}})
	if err != nil {
		panic(fmt.Sprintf("replication: appending entries %d to %d: %v", first, first+uint64(len(ents))-1, err))
	}
	for i := range metas {
		m := &metas[i]
		m.size += t.extra()
		m.seg, m.off, m.lsn = seg, off, lsn
		off += int64(m.size)
		l.cached += len(ents[i].GetData())
	}
	l.ents = append(l.ents, metas...)
	l.lastLSN = lsn
	l.evictLocked()
	l.holdLocked()
}

// truncateLocked drops the entries from index first on.
func (l *GroupLog) truncateLocked(first uint64) {
	keep := first - l.prevIndex - 1
	for i := keep; i < uint64(len(l.ents)); i++ {
		if e := l.ents[i].ent; e != nil {
			l.cached -= len(e.GetData())
		}
	}
	// Entries handed out by Entries are their own pointers: the metas
	// may be written over.
	clear(l.ents[keep:])
	l.ents = l.ents[:keep]
	l.cacheFrom = min(l.cacheFrom, first)
	l.liveFrom = min(l.liveFrom, first)
	l.clockFrom = min(l.clockFrom, first)
}

// evictLocked drops the oldest cached entries that are durable while the
// cache holds more than its bytes.
func (l *GroupLog) evictLocked() {
	if l.cached <= l.s.cacheBytes {
		return
	}
	durable := l.s.seg.Durable()
	l.cacheFrom = max(l.cacheFrom, l.prevIndex+1)
	for l.cached > l.s.cacheBytes && l.cacheFrom <= l.lastLocked() {
		m := &l.ents[l.cacheFrom-l.prevIndex-1]
		if m.lsn > durable {
			return
		}
		if m.ent != nil {
			l.cached -= len(m.ent.GetData())
			m.ent = nil
		}
		l.cacheFrom++
	}
}

// SetHardState implements Log. A hard state that keeps the term and vote
// and only raises the commit index asks for no fsync of its own (raft's
// MustSync): a crash may lose it, and the member then learns the commit
// index again from the leader. OnDurable does not wait for it, so a
// member's commit updates do not queue another fsync between two of its
// appends.
func (l *GroupLog) SetHardState(hs *pb.HardState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lazy := !raft.MustSync(hs, l.hs, 0)
	l.hs = &pb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(hs.GetCommit())}
	l.appendStateLocked(write{size: segment.FrameHeader + hardStateFrameFields, frames: 1, unsynced: lazy, encode: l.encodeHS})
}

// encodeHardState encodes the group's hard state as a frame, under mu.
func (l *GroupLog) encodeHardState(b []byte) []byte { return appendHardState(b, l.wtag, l.hs) }

// InstallSnapshot implements Log: the snapshot frame, after the head
// frames its spool wrote; its records are the head, and no entry is held.
func (l *GroupLog) InstallSnapshot(snap *pb.Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	md := snap.GetMetadata()
	index := md.GetIndex()
	sp := l.spool
	if sp == nil || !sp.done || sp.index != index || sp.term != md.GetTerm() {
		panic(fmt.Sprintf("replication: installing snapshot %d at term %d, not received", index, md.GetTerm()))
	}
	l.installedLocked(md, snap.GetData())
	cs := l.cs
	var book []byte
	if len(snap.GetData()) > 0 {
		book = appendBook(nil, l.book)
	}
	seg := l.appendStateLocked(write{size: snapshotFrameSize(cs) + len(book), frames: 1, encode: func(b []byte) []byte {
		return appendSnapshotFrame(b, l.wtag, index, md.GetTerm(), cs, len(sp.frames), sp.bytes, book...)
	}})
	l.truncateLocked(l.prevIndex + 1)
	l.head, l.baseIndex, l.baseSeg, l.idFloor, l.headMaxID = sp.frames, index, seg, 0, sp.maxID
	if len(sp.frames) > 0 {
		l.baseSeg = sp.frames[0].seg
	} else {
		l.head = nil
	}
	l.prevIndex, l.prevTerm, l.ents = index, md.GetTerm(), nil
	l.markSeg, l.markIndex = seg, index
	l.folded, l.liveFrom, l.cacheFrom = index, index+1, index+1
	l.headClock = sp.clock
	l.clock, l.clockFrom = sp.clock, index+1
	l.forgetLiveLocked()
	l.placeHeadLocked(sp.recs)
	l.releaseSpoolLocked(sp)
}

// ReceiveSnapshot implements Log: a head begin frame now, each chunk a
// head frame as it comes (walSpool).
func (l *GroupLog) ReceiveSnapshot(ctx context.Context, md *pb.SnapshotMetadata) (SnapshotSink, error) {
	if l.s.seg.Full() {
		return nil, ErrLogFull
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spool != nil {
		l.releaseSpoolLocked(l.spool)
	}
	sp := &walSpool{l: l, ctx: ctx, index: md.GetIndex(), term: md.GetTerm()}
	l.s.setBulk(true) // until the spool is released
	lsn, seg, _, _, err := l.s.append(l, write{size: segment.FrameHeader + headFrameFields, frames: 1,
		encode: func(b []byte) []byte { return appendHeadBegin(b, l.wtag, sp.index) }})
	if err != nil {
		return nil, err // the log is closing
	}
	sp.pin, sp.last = seg, lsn
	l.pinLocked(seg)
	l.spool = sp
	return sp, nil
}

// Received implements Log.
func (l *GroupLog) Received(md *pb.SnapshotMetadata) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	sp := l.spool
	return sp != nil && sp.done && sp.index == md.GetIndex() && sp.term == md.GetTerm()
}

// releaseSpoolLocked forgets sp, installed or given up, and what it
// pinned.
func (l *GroupLog) releaseSpoolLocked(sp *walSpool) {
	if l.spool == sp {
		l.spool = nil
		l.s.setBulk(false)
	}
	if sp.pin != 0 {
		l.unpinLocked(sp.pin)
		sp.pin = 0
	}
}

// walSpool is a GroupLog's SnapshotSink: each chunk is a head frame, its
// own group, with at most snapshotWindow bytes written and not yet
// durable (doc.go, "The receiver's spool").
type walSpool struct {
	l           *GroupLog       // immutable
	ctx         context.Context // immutable
	index, term uint64          // immutable

	// The spool's goroutine only.
	inflight []spooled    // written, not known durable, oldest first
	unsynced int          // their bytes
	last     uint64       // the LSN of the last frame written
	scratch  []wal.Record // for checking chunks
	err      error        // the spool ended

	// Guarded by l.mu.
	pin    uint32     // the segment pinned (its first), 0 once released
	done   bool       // finished: every frame durable
	frames []frameLoc // the head frames written
	recs   []headRec  // their full records
	maxID  uint64
	bytes  int   // the records' bytes
	clock  int64 // the latest time of their KindClock records
}

// spooled is a head frame written: its LSN and size.
type spooled struct {
	lsn  uint64
	size int
}

// Write implements SnapshotSink.
func (sp *walSpool) Write(chunk []byte) error {
	if sp.err != nil {
		return sp.err
	}
	records, top, err := checkChunk(sp.scratch, chunk)
	defer clear(records) // keep no bodies
	sp.scratch = records[:0]
	if err != nil {
		return sp.fail(err)
	}
	if sp.l.s.seg.Full() {
		return sp.fail(ErrLogFull)
	}
	size := segment.FrameHeader + headFrameFields + len(chunk)
	for sp.unsynced > 0 && sp.unsynced+size > snapshotWindow {
		if err := waitDurable(sp.ctx, sp.l.s.seg, sp.inflight[0].lsn); err != nil {
			return sp.fail(err)
		}
		sp.unsynced -= sp.inflight[0].size
		sp.inflight = sp.inflight[1:]
	}
	l := sp.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spool != sp {
		return sp.fail(errSuperseded)
	}
	lsn, seg, off, t, err := l.s.append(l, write{size: size, frames: 1, id: top,
		encode: func(b []byte) []byte { return appendHeadFrame(b, l.wtag, sp.index, chunk) }})
	if err != nil {
		return sp.fail(err) // the log is closing
	}
	size += t.extra()
	sp.last = lsn
	sp.inflight = append(sp.inflight, spooled{lsn, size})
	sp.unsynced += size
	sp.frames = append(sp.frames, frameLoc{seg: seg, off: off, size: size})
	for i := range records {
		if r := &records[i]; r.Kind == wal.KindFull {
			sp.recs = append(sp.recs, headRec{id: r.ID, seg: seg, size: uint32(wal.FrameSize(r))})
		} else if r.Kind == wal.KindClock {
			sp.clock = max(sp.clock, r.Time)
		}
	}
	sp.maxID, sp.bytes = max(sp.maxID, top), sp.bytes+len(chunk)
	return nil
}

// fail ends the spool with err.
func (sp *walSpool) fail(err error) error {
	sp.err = err
	return err
}

// Finish implements SnapshotSink.
func (sp *walSpool) Finish() error {
	if sp.err != nil {
		return sp.err
	}
	if err := waitDurable(sp.ctx, sp.l.s.seg, sp.last); err != nil {
		return sp.fail(err)
	}
	sp.l.mu.Lock()
	defer sp.l.mu.Unlock()
	if sp.l.spool != sp {
		return sp.fail(errSuperseded)
	}
	sp.done = true
	return nil
}

// Close implements SnapshotSink.
func (sp *walSpool) Close() {
	sp.l.mu.Lock()
	defer sp.l.mu.Unlock()
	sp.l.releaseSpoolLocked(sp)
}

// placeHeadLocked counts the head's full records live, where they are.
func (l *GroupLog) placeHeadLocked(recs []headRec) {
	l.moves = l.moves[:0]
	l.baseLive = 0
	for _, r := range recs {
		to := segment.Loc{Seg: r.seg, Size: r.size}
		if old, ok := l.latest.get(r.id); ok {
			l.moves = append(l.moves, segment.Move{ID: l.key(r.id), From: old.loc})
		} else {
			l.baseLive++
		}
		l.latest.set(r.id, placed{index: l.baseIndex, loc: to})
		l.moves = append(l.moves, segment.Move{ID: l.key(r.id), To: to})
	}
	l.s.seg.Moved(l.moves)
}

// forgetLiveLocked forgets every live job of the group's, in the segment
// log's accounting too: the other groups' stay.
func (l *GroupLog) forgetLiveLocked() {
	l.moves = l.moves[:0]
	for id, p := range l.latest.all() {
		l.moves = append(l.moves, segment.Move{ID: l.key(id), From: p.loc})
	}
	l.s.seg.Moved(l.moves)
	l.latest.clear()
}

// key is job id's item in the segment log: the group above the id's 53
// bits (docs/design/shards.md 2.4), so each group's jobs are its own
// items and group 0's keys are its ids.
func (l *GroupLog) key(id uint64) uint64 { return uint64(l.group)<<itemGroupShift | id }

// appendStateLocked appends frames that change the state a checkpoint
// holds (hard state, membership, a snapshot installed; l's, changed
// already) as one group, with the checkpoint of that state for the
// segments begun after it, and returns its segment. The two go in one
// call: the segment log's writer may move to a new segment at any time
// (segment.Group.Checkpoint), and one begun after the group with the
// checkpoint before it would end a replay with the older state: a term or
// vote gone back. A lazy (unsynced) group asks for no fsync, and
// OnDurable does not wait for it. w.encode nil: the frame is the
// checkpoint itself.
func (l *GroupLog) appendStateLocked(w write) uint32 {
	l.piece = l.appendPiece(l.piece[:0])
	w.state = true
	lsn, seg, _, _, err := l.s.append(l, w)
	if err != nil {
		panic(fmt.Sprintf("replication: writing to the log: %v", err))
	}
	if !w.unsynced {
		l.lastLSN = lsn
	}
	return seg
}

// Compact implements Log, as MemoryLog does: entries are dropped from the
// index at once, and their segments go once nothing in them is held or
// live (segment.Log.Hold, Moved).
func (l *GroupLog) Compact(applied uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	applied = min(applied, l.lastLocked(), l.hs.GetCommit())
	if !l.foldLocked(applied) {
		return // the core refused this entry already (ActApply): keep everything
	}
	keep := uint64(0) // entries from keep on stay
	if applied+1 > l.s.retain {
		keep = applied + 1 - l.s.retain
	}
	retained := l.retainedFromLocked(applied)
	keep = max(keep, retained)
	l.liveFrom = max(l.liveFrom, l.prevIndex+1)
	for l.liveFrom <= l.folded && l.ents[l.liveFrom-l.prevIndex-1].live == 0 {
		l.liveFrom++
	}
	keep = min(keep, l.liveFrom)
	horizon := l.dedupHorizonLocked()
	l.clockFrom = max(l.clockFrom, l.prevIndex+1)
	for l.clockFrom <= l.folded && l.ents[l.clockFrom-l.prevIndex-1].clock <= horizon {
		l.clockFrom++
	}
	// The dedup window, within the segments kept for followers: a member
	// does not keep more than those for it (10 s of a busy group's
	// writes take about one segment of the default 10 MiB).
	keep = min(keep, max(l.clockFrom, retained))
	if l.baseLive > 0 || l.head != nil && l.headClock > horizon && l.baseSeg >= l.s.retainFloor() {
		keep = min(keep, l.baseIndex)
	}
	if l.head != nil && keep > l.baseIndex {
		l.idFloor = max(l.idFloor, l.headMaxID)
		l.head = nil
	}
	if l.head == nil && keep > l.prevIndex+1 {
		n := keep - l.prevIndex - 1
		for i := range n {
			m := &l.ents[i]
			l.idFloor = max(l.idFloor, m.maxID)
			if m.ent != nil {
				l.cached -= len(m.ent.GetData())
			}
		}
		l.prevIndex, l.prevTerm = keep-1, l.ents[n-1].term
		clear(l.ents[:n]) // appends reallocate the rest in time
		l.ents = l.ents[n:]
		l.compactedLocked()
	}
	l.markBaseLocked()
	l.holdLocked()
}

// markBaseLocked writes a snapshot frame of no records at prevIndex when
// the group holds neither a head nor an entry (an idle group whose last
// entries are older than the newest retainSegments segments, while other
// groups write): it is then the one frame left that says where the
// group's log begins, and without it a restart would replay the group
// as a new member's log, its acknowledged entries forgotten. Written
// again, in the segment being written, once the last one is older than
// those segments, so that an idle group holds no more of them than an
// active one. Not while a snapshot is being received: at replay the
// mark's head begin would end the head frames its spool wrote so far.
func (l *GroupLog) markBaseLocked() {
	if l.head != nil || len(l.ents) > 0 || l.spool != nil || l.dropped || l.prevIndex == 0 {
		return
	}
	if l.markSeg != 0 && l.markIndex == l.prevIndex {
		if floor := l.s.retainFloor(); floor == 0 || l.markSeg >= floor {
			return
		}
	}
	index, term, cs := l.prevIndex, l.prevTerm, l.cs
	// Its own head begin first: head frames of a snapshot of the same
	// index whose stream broke, still in an older segment, would
	// otherwise be taken at replay as the mark's, which counts none.
	l.markSeg = l.appendStateLocked(write{size: segment.FrameHeader + headFrameFields + snapshotFrameSize(cs), frames: 2,
		encode: func(b []byte) []byte {
			return appendSnapshotFrame(appendHeadBegin(b, l.wtag, index), l.wtag, index, term, cs, 0, 0)
		}})
	l.markIndex = index
}

// dedupHorizonLocked is the latest entry time whose keys a store no
// longer needs: store.DedupTTL before the later of the latest entry time
// folded and this member's wall clock, less clockSkew. A resent request's
// key is looked up by this member's store against the same two clocks
// (store.Store.Clock), so a key past the horizon would be expired there
// too; the wall clock ends the window of a group that went idle, whose
// entry times stand still.
func (l *GroupLog) dedupHorizonLocked() int64 {
	return max(l.clock, l.s.now().UnixNano()-int64(clockSkew)) - int64(store.DedupTTL)
}

// clockSkew is how far this member's wall clock may step back, between
// compacting an entry by it and a lookup of the entry's keys by it.
const clockSkew = time.Second

// retainSegments bounds the segments the entries kept for a follower a
// little behind (WALConfig.Retain) may be in: the newest ones. The
// member's groups share its segments, and an idle group's last entries
// would otherwise hold every segment written since; a follower further
// behind gets a snapshot.
const retainSegments = 4

// retainedFromLocked is the first entry through applied that is in one
// of the newest retainSegments segments, or applied+1 if none is: the
// entries before it are not kept for followers.
func (l *GroupLog) retainedFromLocked(applied uint64) uint64 {
	floor := l.s.retainFloor()
	if floor == 0 {
		return 0
	}
	n := min(applied-min(applied, l.prevIndex), uint64(len(l.ents)))
	// Entries are in the order of their segments.
	i := sort.Search(int(n), func(i int) bool { return l.ents[i].seg >= floor })
	return l.prevIndex + 1 + uint64(i)
}

// retainFloor is the oldest of the newest retainSegments segments, 0
// while there are no more than those.
func (s *SharedLog) retainFloor() uint32 {
	last := s.lastSegment()
	if last <= retainSegments {
		return 0
	}
	return last - retainSegments + 1
}

// foldLocked folds the entries after folded through applied into latest,
// and tells the segment log where live records moved; false if an entry's
// records cannot be read.
func (l *GroupLog) foldLocked(applied uint64) bool {
	l.moves = l.moves[:0]
	defer func() { l.s.seg.Moved(l.moves) }()
	for i := max(l.folded, l.prevIndex) + 1; i <= applied; i++ {
		m := &l.ents[i-l.prevIndex-1]
		place := func(kind wal.Kind, id uint64, size uint32) {
			switch kind {
			case wal.KindFull:
				old, had := l.latest.get(id)
				if had {
					l.unliveLocked(old)
				}
				to := segment.Loc{Seg: m.seg, Size: size}
				l.latest.set(id, placed{index: i, loc: to})
				m.live++
				l.moves = append(l.moves, segment.Move{ID: l.key(id), From: old.loc, To: to})
			case wal.KindDelete:
				if old, had := l.latest.remove(id); had {
					l.unliveLocked(old)
					l.moves = append(l.moves, segment.Move{ID: l.key(id), From: old.loc})
				}
			}
		}
		recs := m.recs
		if !m.summarized {
			e, err := l.entryLocked(i)
			if err != nil {
				return false
			}
			if recs, err = summarize(l.recs[:0], e); err != nil {
				return false // before any is placed: the next Compact starts here again
			}
			l.recs = recs
		}
		for _, r := range recs {
			place(r.kind, r.id, r.size)
		}
		l.clock = max(l.clock, m.clock)
		l.folded = i
	}
	return true
}

// summarize appends to recs the full records and deletes of e.
func summarize(recs []recSummary, e *pb.Entry) ([]recSummary, error) {
	if e.GetType() != pb.EntryNormal {
		return recs, nil
	}
	err := wal.ScanFrames(e.GetData(), func(kind wal.Kind, id uint64, size int) {
		if kind == wal.KindFull || kind == wal.KindDelete {
			recs = append(recs, recSummary{kind, id, uint32(size)})
		}
	})
	return recs, err
}

// unliveLocked: the record at p is no longer a live job's latest.
func (l *GroupLog) unliveLocked(p placed) {
	if l.head != nil && p.index == l.baseIndex {
		l.baseLive--
		return
	}
	if p.index > l.prevIndex && p.index <= l.lastLocked() {
		l.ents[p.index-l.prevIndex-1].live--
	}
}

// holdLocked tells the shared log the first segment the group needs: its
// head's, or its first entry's (each entry is in a segment no older than
// the one before it), or when it holds neither its base's mark
// (markBaseLocked), or without one the one the log last wrote to, so that
// its next write lands in a segment held already; or an older one a view
// or a spool pinned. The segment log keeps from the smallest of the
// groups'.
func (l *GroupLog) holdLocked() {
	seg := l.s.lastSegment()
	switch {
	case l.head != nil:
		seg = l.baseSeg
	case len(l.ents) > 0:
		seg = l.ents[0].seg
	case l.markSeg != 0 && l.markIndex == l.prevIndex:
		seg = l.markSeg
	}
	for pinned := range l.pins {
		seg = min(seg, pinned)
	}
	if seg != l.held {
		l.held = seg
		l.s.hold(l.group, seg)
	}
}

// OnDurable implements Log.
func (l *GroupLog) OnDurable(fn func()) {
	l.mu.Lock()
	lsn := l.lastLSN
	l.mu.Unlock()
	l.s.seg.OnDurable(lsn, fn)
}

// Locate implements Log.
func (l *GroupLog) Locate(index uint64) uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if index > l.prevIndex && index <= l.lastLocked() {
		return l.ents[index-l.prevIndex-1].seg
	}
	return 0
}

// SetMembership implements Log: a checkpoint frame says it, and starts
// every segment after it.
func (l *GroupLog) SetMembership(cs *pb.ConfState, b Book) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setMembershipLocked(cs, b)
	l.appendStateLocked(write{})
}

// Membership implements Log.
func (l *GroupLog) Membership() Book {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.book.clone()
}

// SetMigrator gives the log the group's serving leader's store, which
// moves the group's live jobs of the oldest segment when the directory
// passes its bound (node.go, ActServe); the log's Asker while the member
// does not serve (migrate.go); nil for none.
func (l *GroupLog) SetMigrator(m segment.Migrator) { l.s.setMigrator(l.group, m) }

// Full reports that the disk is full, or fsyncs keep failing: the
// leader's journal refuses every record but deletes meanwhile.
func (l *GroupLog) Full() bool { return l.s.seg.Full() }

// Stats are the segment log's figures, every group's: its segments, the
// disk they take and the live data.
func (l *GroupLog) Stats() segment.Stats { return l.s.seg.Stats() }

// Group is the group whose log this is.
func (l *GroupLog) Group() uint16 { return l.group }

// Frames (doc.go, "The log on disk"). Integers are little-endian.

// appendPiece appends the group's part of a checkpoint: hard state,
// membership, book.
func (l *GroupLog) appendPiece(b []byte) []byte {
	b = appendHardStateFields(b, l.hs)
	if l.membership == nil || l.membershipOf != l.cs || l.membershipAt != l.book.Index {
		l.membership = appendBook(appendConfState(l.membership[:0], l.cs), l.book)
		l.membershipOf, l.membershipAt = l.cs, l.book.Index
	}
	return append(b, l.membership...)
}

// appendBook appends the address book as u32 length and JSON (a
// checkpoint written before membership changes has none).
func appendBook(b []byte, book Book) []byte {
	data, err := json.Marshal(book)
	if err != nil {
		panic(fmt.Sprintf("replication: encoding the address book: %v", err)) // never: plain fields
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

func appendHardState(b []byte, t tag, hs *pb.HardState) []byte {
	start := len(b)
	b = t.begin(b, kindHardState)
	b = appendHardStateFields(b, hs)
	return segment.EndFrame(b, start)
}

func appendHardStateFields(b []byte, hs *pb.HardState) []byte {
	b = binary.LittleEndian.AppendUint64(b, hs.GetTerm())
	b = binary.LittleEndian.AppendUint64(b, hs.GetVote())
	return binary.LittleEndian.AppendUint64(b, hs.GetCommit())
}

// appendConfState appends the membership as u32 length and protobuf.
func appendConfState(b []byte, cs *pb.ConfState) []byte {
	n := len(b)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, cs)
	if err != nil {
		panic(fmt.Sprintf("replication: encoding a membership: %v", err)) // never: a ConfState always encodes
	}
	binary.LittleEndian.PutUint32(b[n:], uint32(len(b)-n-4))
	return b
}

// entryFrameSize is the size of e's frame in a version 2 segment.
func entryFrameSize(e *pb.Entry) int {
	return segment.FrameHeader + entryFrameFields + len(e.GetData())
}

func appendEntry(b []byte, t tag, e *pb.Entry, prevTerm uint64) []byte {
	start := len(b)
	b = t.begin(b, kindEntry)
	b = binary.LittleEndian.AppendUint64(b, e.GetIndex())
	b = binary.LittleEndian.AppendUint64(b, e.GetTerm())
	b = binary.LittleEndian.AppendUint64(b, prevTerm)
	b = append(b, byte(e.GetType()))
	b = append(b, e.GetData()...)
	return segment.EndFrame(b, start)
}

// headChunks cuts records (whole wal frames, checked) into the chunks of
// a snapshot: up to snapshotChunk bytes each, cut between records, one
// larger record alone.
func headChunks(records []byte) [][]byte {
	var chunks [][]byte
	for len(records) > 0 {
		n := 0
		for n < len(records) {
			_, _, size, err := wal.NextFrame(records[n:])
			if err != nil {
				size = len(records) - n // not frames: never so, they were checked
			}
			if n > 0 && n+size > snapshotChunk {
				break
			}
			n += size
		}
		chunks = append(chunks, records[:n])
		records = records[n:]
	}
	return chunks
}

// appendSnapshot appends a snapshot's frames, as one group: a head begin,
// each chunk of its records as a head frame, then the snapshot frame that
// counts them.
func appendSnapshot(b []byte, t tag, index, term uint64, cs *pb.ConfState, data []byte, chunks [][]byte) []byte {
	b = appendHeadBegin(b, t, index)
	for _, c := range chunks {
		b = appendHeadFrame(b, t, index, c)
	}
	return appendSnapshotFrame(b, t, index, term, cs, len(chunks), len(data))
}

// appendHeadBegin appends the frame that begins a snapshot's head frames.
func appendHeadBegin(b []byte, t tag, index uint64) []byte {
	start := len(b)
	b = t.begin(b, kindHeadBegin)
	b = binary.LittleEndian.AppendUint64(b, index)
	return segment.EndFrame(b, start)
}

// appendHeadFrame appends one head frame of snapshot index's records.
func appendHeadFrame(b []byte, t tag, index uint64, records []byte) []byte {
	start := len(b)
	b = t.begin(b, kindHead)
	b = binary.LittleEndian.AppendUint64(b, index)
	b = append(b, records...)
	return segment.EndFrame(b, start)
}

// appendSnapshotFrame appends a snapshot's metadata, the count and bytes
// of the head frames before it, and the book as of it (appendBook), when
// one came with it.
func appendSnapshotFrame(b []byte, t tag, index, term uint64, cs *pb.ConfState, frames, bytes int, book ...byte) []byte {
	start := len(b)
	b = t.begin(b, kindSnapshot)
	b = binary.LittleEndian.AppendUint64(b, index)
	b = binary.LittleEndian.AppendUint64(b, term)
	b = appendConfState(b, cs)
	b = binary.LittleEndian.AppendUint32(b, uint32(frames))
	b = binary.LittleEndian.AppendUint64(b, uint64(bytes))
	b = append(b, book...)
	return segment.EndFrame(b, start)
}

// snapshotFrameSize is the size of a snapshot frame of membership cs in a
// version 2 segment.
func snapshotFrameSize(cs *pb.ConfState) int {
	return segment.FrameHeader + 1 + 8 + 8 + 4 + proto.MarshalOptions{Deterministic: true}.Size(cs) + 4 + 8
}

// decoder reads a frame's fields; the first that does not fit sets err,
// and every read after it returns zero.
type decoder struct {
	b   []byte
	err error
}

// errCutShort is a frame that ends before its fields do.
var errCutShort = errors.New("cut short")

func (d *decoder) take(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		if d.err == nil {
			d.err = errCutShort
		}
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) u8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) str() string {
	n := 0
	if b := d.take(2); b != nil {
		n = int(binary.LittleEndian.Uint16(b))
	}
	return string(d.take(n))
}

func (d *decoder) rest() []byte {
	if len(d.b) == 0 {
		return nil
	}
	return d.take(len(d.b))
}

func (d *decoder) hardState() *pb.HardState {
	term, vote, commit := d.u64(), d.u64(), d.u64()
	return &pb.HardState{Term: &term, Vote: &vote, Commit: &commit}
}

// book reads the address book, if the frame has one.
func (d *decoder) book() Book {
	var book Book
	if d.err != nil || len(d.b) == 0 {
		return book
	}
	n := 0
	if b := d.take(4); b != nil {
		n = int(binary.LittleEndian.Uint32(b))
	}
	if b := d.take(n); b != nil {
		if err := json.Unmarshal(b, &book); err != nil {
			d.err = err
		}
	}
	return book
}

func (d *decoder) confState() *pb.ConfState {
	n := 0
	if b := d.take(4); b != nil {
		n = int(binary.LittleEndian.Uint32(b))
	}
	b := d.take(n)
	cs := &pb.ConfState{}
	if d.err == nil {
		if err := proto.Unmarshal(b, cs); err != nil {
			d.err = err
		}
	}
	return cs
}
