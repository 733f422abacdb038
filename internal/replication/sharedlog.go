package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// itemGroupShift is where a group sits in a segment log item's key:
// above a job id's 53 bits (docs/design/shards.md 2.4, "Compaction").
const itemGroupShift = 53

// Errors of a SharedLog's groups.
var (
	// ErrGroupDropped: a group's log was used after SharedLog.Drop.
	ErrGroupDropped = errors.New("replication: the group was dropped from the member's log")
	// ErrGroupNotHeld: SharedLog.Drop of a group the log does not hold.
	ErrGroupNotHeld = errors.New("replication: the member's log holds no such group")
)

// SharedLog is a member's log in its -b directory, shared by the Raft
// groups it holds (docs/design/shards.md 2.4; doc.go, "The log on
// disk"): one segment log, so one writer, one fsync stream and one spare
// segment for every group, each group's writes going into the batch the
// writer takes next. Each group's index is a GroupLog (Attach), which is
// the Log its replica runs on. It is safe for concurrent use.
//
// The directory stays in version 2 segments (segment.VersionRaftLog, no
// group in the frames) while group 0 is the only group it ever held: G =
// 1 is today's log, byte for byte. Attaching another group moves appends
// to a new segment of version 3 (segment.VersionMultiRaft), whose frames
// name their group, and the log never writes version 2 again; a version 2
// segment reads as group 0's. A release that knows only version 2
// refuses such a directory (segment.VersionError).
//
// Lock order: a GroupLog's mutex, then mu, then the segment log's.
type SharedLog struct {
	files      *segment.Dir     // immutable after OpenSharedLog: the directory, locked until Close
	seg        *segment.Log     // immutable after OpenSharedLog
	dir        string           // immutable
	cluster    uint64           // immutable
	id         uint64           // immutable
	name       string           // immutable
	retain     uint64           // immutable
	cacheBytes int              // immutable
	logger     zerolog.Logger   // immutable
	now        func() time.Time // immutable: WALConfig.Now

	// v3From is the first segment of version 3 (0: none yet): frames in
	// it and after it name their group. Set at replay, and once by the
	// switch (under mu); read by any group's reads without mu.
	v3From atomic.Uint32

	// attachMu serializes Attach and Drop.
	attachMu sync.Mutex

	mu sync.Mutex
	// groups are the groups the log holds, attached or replayed and not
	// dropped; order, their numbers in order. Guarded by mu.
	groups map[uint16]*GroupLog
	order  []uint16
	// v3: appends are encoded for version 3 segments. Guarded by mu.
	v3 bool
	// pieces are each group's part of the checkpoint (appendPiece), as of
	// its last write that changed it. Guarded by mu.
	pieces map[uint16][]byte
	// holds are the first segment each group needs (0: none); held, the
	// smallest, last given to the segment log. Guarded by mu.
	holds map[uint16]uint32
	held  uint32
	// lastSeg is the segment of the last write (or frame replayed).
	// Guarded by mu.
	lastSeg uint32
	// named is the highest job id each group's frames named, for the
	// checkpoints of version 3 (a header's id is every group's highest, and
	// a group's ids are of its own prefix: store.Options.IDPrefix).
	// Guarded by mu.
	named map[uint16]uint64
	// migrators are the groups' serving leaders' stores. Guarded by mu.
	migrators map[uint16]segment.Migrator
	// bulk counts the snapshots being received (segment.Log.SetBulk).
	// Guarded by mu.
	bulk int
	// cp is scratch for the checkpoint. Guarded by mu.
	cp []byte
}

// tag is how a frame names its group: by nothing in a version 2 segment
// (every frame there is group 0's), by a u16 right after the kind in a
// version 3 one.
type tag struct {
	group uint16
	v3    bool
}

// extra is the bytes the tag adds to a frame.
func (t tag) extra() int {
	if t.v3 {
		return 2
	}
	return 0
}

// begin begins a frame of kind.
func (t tag) begin(b []byte, kind wal.Kind) []byte {
	b = segment.BeginFrame(b)
	b = append(b, byte(kind))
	if t.v3 {
		b = binary.LittleEndian.AppendUint16(b, t.group)
	}
	return b
}

// read is a frame's kind and a decoder of its fields, from its payload
// read back; its kind is 0 (no kind of a group's) if it is not group's.
func (t tag) read(payload []byte, group uint16) (wal.Kind, decoder) {
	d := decoder{b: payload}
	kind := wal.Kind(d.u8())
	if t.v3 && d.u16() != group {
		kind = 0
	}
	return kind, d
}

// tagAt is the tag of the frames in segment seg, for any group.
func (s *SharedLog) tagAt(seg uint32) tag {
	v := s.v3From.Load()
	return tag{v3: v != 0 && seg >= v}
}

// write is one group of frames a GroupLog appends.
type write struct {
	// size is the frames' bytes in a version 2 segment; each of frames
	// takes tag.extra() more in a version 3 one.
	size, frames int
	// encode appends the frames, under the shared log's mutex, with the
	// group's tag for them (GroupLog.wtag). nil: the frame is the
	// checkpoint (state must be set).
	encode func(b []byte) []byte
	// id is the highest job id the frames name.
	id uint64
	// unsynced: no fsync of its own (segment.Group.Unsynced).
	unsynced bool
	// state: the frames change the group's part of the checkpoint, which
	// it made already (GroupLog.piece): the checkpoint goes with them.
	state bool
}

// append appends w, l's frames, as one group of the segment log's, and
// returns its LSN, segment and offset, and the tag its frames have. l's
// mutex is held.
func (s *SharedLog) append(l *GroupLog, w write) (lsn uint64, seg uint32, off int64, t tag, err error) {
	if l.dropped {
		return 0, 0, 0, t, fmt.Errorf("%w: group %d", ErrGroupDropped, l.group)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t = tag{group: l.group, v3: s.v3}
	l.wtag = t
	g := segment.Group{ID: w.id, Unsynced: w.unsynced, Encode: w.encode}
	raised := w.id > s.named[l.group]
	if raised {
		s.named[l.group] = w.id
	}
	if w.state {
		s.pieces[l.group] = append(s.pieces[l.group][:0], l.piece...)
	}
	if w.state || raised && s.v3 {
		s.cp = s.appendCheckpointLocked(s.cp[:0])
		g.Checkpoint = s.cp
	}
	if w.encode == nil {
		cp := s.cp
		w.size, w.frames = len(cp), 0
		g.Encode = func(b []byte) []byte { return append(b, cp...) }
	}
	g.Size = w.size + w.frames*t.extra()
	lsn, seg, off, err = s.seg.Append(&g)
	if err == nil {
		s.lastSeg = seg
	}
	return lsn, seg, off, t, err
}

// lastSegment is the segment of the last write.
func (s *SharedLog) lastSegment() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeg
}

// hold says that group g needs every segment from seg on (0: none); the
// segment log keeps from the smallest any group needs.
func (s *SharedLog) hold(g uint16, seg uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups[g] == nil {
		return // dropped
	}
	s.holds[g] = seg
	s.holdLocked()
}

func (s *SharedLog) holdLocked() {
	seg := uint32(0)
	for _, h := range s.holds {
		if h != 0 && (seg == 0 || h < seg) {
			seg = h
		}
	}
	if seg != s.held {
		s.held = seg
		s.seg.Hold(seg)
	}
}

// setMigrator sets (nil: clears) group g's migrator: the segment log
// migrates while any group has one.
func (s *SharedLog) setMigrator(g uint16, m segment.Migrator) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m == nil || s.groups[g] == nil {
		delete(s.migrators, g)
	} else {
		s.migrators[g] = m
	}
	if len(s.migrators) == 0 {
		s.seg.SetMigrator(nil)
		return
	}
	s.seg.SetMigrator(groupMigrator{s})
}

// groupMigrator is the segment log's Migrator: it hands each group's live
// jobs of a segment to that group's migrator: its store where this member
// serves it, else its Asker (migrate.go). A group without one (no node
// runs it) keeps its jobs where they are until its leader's rewrites,
// applied here, move them.
type groupMigrator struct{ s *SharedLog }

// Migrate implements segment.Migrator.
func (m groupMigrator) Migrate(seg uint32, keys []uint64) {
	for len(keys) > 0 {
		g := uint16(keys[0] >> itemGroupShift)
		n := 1
		for n < len(keys) && uint16(keys[n]>>itemGroupShift) == g {
			n++
		}
		m.s.mu.Lock()
		mg := m.s.migrators[g]
		m.s.mu.Unlock()
		if mg != nil {
			ids := keys[:n:n]
			if g != 0 {
				ids = make([]uint64, n)
				for i, k := range keys[:n] {
					ids[i] = k &^ (uint64(g) << itemGroupShift)
				}
			}
			mg.Migrate(seg, ids)
		}
		keys = keys[n:]
	}
}

// setBulk counts a snapshot being received, or one no longer: the
// segment log is filled in bulk while any is (segment.Log.SetBulk).
func (s *SharedLog) setBulk(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.bulk++
	} else {
		s.bulk--
	}
	s.seg.SetBulk(s.bulk > 0)
}

// appendCheckpointLocked appends the checkpoint frame: the identity, then
// group 0's part in a version 2 segment, or the count of groups and each
// one's number, the highest id its frames named, and its part in a
// version 3 one (whose group field names none: 0).
func (s *SharedLog) appendCheckpointLocked(b []byte) []byte {
	start := len(b)
	b = tag{v3: s.v3}.begin(b, kindCheckpoint)
	b = binary.LittleEndian.AppendUint64(b, s.cluster)
	b = binary.LittleEndian.AppendUint64(b, s.id)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s.name)))
	b = append(b, s.name...)
	if !s.v3 {
		b = append(b, s.pieces[0]...)
		return segment.EndFrame(b, start)
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s.order)))
	for _, g := range s.order {
		b = binary.LittleEndian.AppendUint16(b, g)
		b = binary.LittleEndian.AppendUint64(b, s.named[g])
		b = append(b, s.pieces[g]...)
	}
	return segment.EndFrame(b, start)
}

// OpenSharedLog opens (or creates) the member's log in cfg.Dir, group 0's
// state a new directory's as cfg says (Voters, Join): it replays the
// directory, checks that it is this member's, fills every group's index,
// and starts the segment log's writer. A single node's directory (or a
// beanstalkd binlog) becomes the log of a cluster whose only initial
// member is this one, its jobs the head of group 0's snapshot at index 1
// (doc.go, "Snapshots and a bounded log"). Each refusal is one line, and
// names no flag: segment.ErrLocked, ErrSingleNodeLog, a
// *ForeignLogError, a *segment.DamageError, a *segment.VersionError.
func OpenSharedLog(cfg WALConfig) (*SharedLog, error) {
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &SharedLog{
		dir: cfg.Dir, cluster: cfg.ClusterID, id: cfg.ID, name: cfg.Name,
		retain: uint64(max(cfg.Retain, 0)), cacheBytes: cfg.CacheBytes, logger: cfg.Wal.Logger, now: cfg.Now,
		groups:    make(map[uint16]*GroupLog),
		pieces:    make(map[uint16][]byte),
		holds:     make(map[uint16]uint32),
		named:     make(map[uint16]uint64),
		migrators: make(map[uint16]segment.Migrator),
	}
	g0 := s.newGroup(0, newLogState(cfg.Voters))
	g0.folded = 1
	if cfg.Join {
		g0.logState, g0.folded = joinLogState(), 0
	}
	s.addGroupLocked(g0)
	d, err := segment.LockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	seg, err := s.open(d, cfg)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	s.files, s.seg = d, seg
	s.v3 = s.v3From.Load() != 0
	if s.v3 {
		seg.SetVersion(segment.VersionMultiRaft, nil) // before Start: the segments it makes
	}
	for _, g := range s.order {
		l := s.groups[g]
		if g != 0 && !l.sawLog && l.hs.GetCommit() > 0 {
			// A group attached new whose first entry was never written: its
			// log begins as a new member's (newLogState), at entry 1.
			l.prevIndex, l.prevTerm = 1, 1
		}
		l.recovered()
		l.mu.Lock()
		s.pieces[g] = l.appendPiece(nil)
		s.named[g] = max(s.named[g], l.replayedID)
		l.mu.Unlock()
	}
	s.cp = s.appendCheckpointLocked(s.cp[:0])
	seg.SetCheckpoint(s.cp)
	if err := seg.Start(nil); err != nil {
		return nil, errors.Join(err, seg.Close(), d.Close())
	}
	return s, nil
}

// newGroup is group g's index, with state ls until replay says otherwise.
func (s *SharedLog) newGroup(g uint16, ls logState) *GroupLog {
	l := &GroupLog{
		s: s, group: g,
		logState: ls,
		pins:     make(map[uint32]int),
		held:     ^uint32(0), // no segment: the first holdLocked tells the shared log
	}
	l.encodeHS = l.encodeHardState
	return l
}

// addGroupLocked adds l to the groups held.
func (s *SharedLog) addGroupLocked(l *GroupLog) {
	s.groups[l.group] = l
	if i, found := slices.BinarySearch(s.order, l.group); !found {
		s.order = slices.Insert(s.order, i, l.group)
	}
}

// removeGroupLocked forgets group g.
func (s *SharedLog) removeGroupLocked(g uint16) {
	delete(s.groups, g)
	delete(s.pieces, g)
	delete(s.holds, g)
	delete(s.named, g)
	delete(s.migrators, g)
	if i, found := slices.BinarySearch(s.order, g); found {
		s.order = slices.Delete(s.order, i, i+1)
	}
}

// floorOf is the highest id group l's frames in the segments removed
// named, at Open: the oldest segment's header id while it is of version 2
// (every frame there is group 0's, and a group other than 0 came after
// it), else what the first checkpoint replayed with the group said.
func (s *SharedLog) floorOf(l *GroupLog) uint64 {
	if v := s.v3From.Load(); v == 0 || s.seg.Stats().OldestIndex < v {
		if l.group == 0 {
			return s.seg.FloorID()
		}
		return 0
	}
	return l.cpFloor
}

// Close writes and fsyncs what was written, stops the segment log and
// drops the directory's lock. Neither the log nor its groups' logs may be
// used afterwards.
func (s *SharedLog) Close() error { return errors.Join(s.seg.Close(), s.files.Close()) }

// Stats are the segment log's figures: its segments, the disk they take
// and the live data, every group's.
func (s *SharedLog) Stats() segment.Stats { return s.seg.Stats() }

// Groups are the groups the log holds, in order: group 0, those attached,
// and those found at replay and not dropped.
func (s *SharedLog) Groups() []uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// Group is group 0's log, or another group's the log held at replay (nil
// if none): what a replica restarted on this directory runs on.
func (s *SharedLog) Group(g uint16) *GroupLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.groups[g]
}

// Attach returns group g's log: the one replayed if the directory holds
// the group, else a new one whose state is a new member's of voters, or
// a joining member's (empty until a snapshot) when join. The first group
// other than 0 the directory holds moves appends to a segment of version 3
// (the type's comment), which waits for the segment log's spare: ctx
// bounds that wait.
func (s *SharedLog) Attach(ctx context.Context, g uint16, voters []uint64, join bool) (*GroupLog, error) {
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	if l := s.Group(g); l != nil {
		return l, nil
	}
	ls := newLogState(voters)
	if join {
		ls = joinLogState()
	}
	l := s.newGroup(g, ls)
	if !join {
		l.folded = 1
	}
	l.liveFrom, l.cacheFrom = l.prevIndex+1, l.prevIndex+1
	l.mu.Lock()
	defer l.mu.Unlock()
	l.piece = l.appendPiece(l.piece[:0])
	if err := s.toV3(ctx, l); err != nil {
		return nil, err
	}
	// Its state in a checkpoint before any frame of its own: replay
	// learns of the group there.
	l.appendStateLocked(write{})
	l.holdLocked()
	return l, nil
}

// toV3 adds l to the groups (nil: none, on finalization), and switches
// appends to version 3 segments if they are not yet: the segment log
// moves on to its spare, of version 3, beginning it with the checkpoint of
// every group, l's included.
func (s *SharedLog) toV3(ctx context.Context, l *GroupLog) error {
	for {
		s.mu.Lock()
		if l != nil {
			s.addGroupLocked(l)
			s.pieces[l.group] = append(s.pieces[l.group][:0], l.piece...)
		}
		if s.v3 {
			s.mu.Unlock()
			return nil
		}
		s.v3 = true
		s.cp = s.appendCheckpointLocked(s.cp[:0])
		seg, ok := s.seg.SetVersion(segment.VersionMultiRaft, s.cp)
		if ok {
			s.v3From.Store(seg)
			s.mu.Unlock()
			if l == nil {
				s.logger.Info().Uint32("segment", seg).
					Msg("replication: the cluster is finalized: the member's segments are of version 3 from now on")
			} else {
				s.logger.Info().Uint32("segment", seg).Uint16("group", l.group).
					Msg("replication: the member's log holds several groups: its segments are of version 3 from now on")
			}
			return nil
		}
		s.v3 = false
		if l != nil {
			s.removeGroupLocked(l.group)
		}
		s.mu.Unlock()
		select {
		case <-s.seg.SpareMade():
		case <-ctx.Done():
			s.mu.Lock()
			s.seg.SetVersion(segment.VersionRaftLog, nil) // still in the version 2 segment: nothing changes
			s.mu.Unlock()
			return ctx.Err()
		}
	}
}

// Drop ends group g on this member (docs/design/shards.md 2.4, "Group
// dropped"): a frame says so, after which replay forgets the group's
// index, head, items and hold, and its space returns as compaction frees
// segments. The group's replica must have stopped: its log refuses every
// write from now on (ErrGroupDropped). Group 0 is the member's own and is
// never dropped.
func (s *SharedLog) Drop(g uint16) error {
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	l := s.Group(g)
	if l == nil || g == 0 {
		return fmt.Errorf("%w: group %d", ErrGroupNotHeld, g)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLiveLocked()
	if l.spool != nil {
		l.releaseSpoolLocked(l.spool)
	}
	clear(l.pins)
	last := l.lastLocked()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeGroupLocked(g)
	s.cp = s.appendCheckpointLocked(s.cp[:0])
	_, seg, _, err := s.seg.Append(&segment.Group{Size: segment.FrameHeader + 1 + 2 + 8, Checkpoint: s.cp,
		Encode: func(b []byte) []byte {
			start := len(b)
			b = tag{group: g, v3: true}.begin(b, kindDropped)
			b = binary.LittleEndian.AppendUint64(b, last)
			return segment.EndFrame(b, start)
		}})
	// The group's hold goes only now: released before the frame that
	// ends the group, an idle log could remove its oldest segments at
	// once, and a crash before that frame was written would replay the
	// group from what was left of it.
	s.holdLocked()
	if err != nil {
		return err
	}
	s.lastSeg = seg
	l.dropped = true
	return nil
}

// replay takes one frame of the directory, on OpenSharedLog's goroutine:
// the checkpoint and a group's end are the shared log's, the other frames
// their group's.
func (s *SharedLog) replay(f segment.Frame) error {
	if wal.Kind(f.Payload[0]) < kindCheckpoint {
		return segment.ErrCorrupt // never written here: a damaged frame
	}
	kind, g, body := wal.Kind(f.Payload[0]), uint16(0), f.Payload[1:]
	v3 := f.Version == segment.VersionMultiRaft
	if v3 {
		if len(body) < 2 {
			return segment.ErrCorrupt
		}
		g, body = binary.LittleEndian.Uint16(body), body[2:]
		if s.v3From.Load() == 0 {
			s.v3From.Store(f.Seg)
		}
	}
	s.lastSeg = f.Seg
	switch kind {
	case kindCheckpoint:
		return s.replayCheckpoint(body, v3)
	case kindDropped:
		// The group's other frames may be in segments removed already.
		if !v3 || g == 0 {
			return fmt.Errorf("%w: %s: group %d dropped", errMalformed, s.dir, g)
		}
		s.removeGroupLocked(g)
		return nil
	}
	l := s.groups[g]
	if l == nil {
		return fmt.Errorf("%w: %s: a frame of group %d, which the log does not hold", errMalformed, s.dir, g)
	}
	return l.replay(kind, body, f)
}

// replayCheckpoint takes a checkpoint: the member's identity, checked,
// and the state of the groups it names.
func (s *SharedLog) replayCheckpoint(body []byte, v3 bool) error {
	d := decoder{b: body}
	cluster, id, name := d.u64(), d.u64(), d.str()
	if d.err == nil && (cluster != s.cluster || id != s.id || name != s.name) {
		return &ForeignLogError{Dir: s.dir, Cluster: cluster, ID: id, Name: name,
			WantCluster: s.cluster, WantID: s.id, WantName: s.name}
	}
	n := 1
	if v3 {
		n = int(d.u16())
	}
	for range n {
		g, named := uint16(0), uint64(0)
		if v3 {
			g, named = d.u16(), d.u64()
		}
		hs, cs := d.hardState(), d.confState()
		book := d.book()
		if d.err != nil {
			break
		}
		l := s.groups[g]
		if l == nil {
			l = s.newGroup(g, logState{})
			s.addGroupLocked(l)
		}
		l.hs, l.cs, l.book = hs, cs, book
		if v3 && !l.sawCheckpoint {
			l.cpFloor, l.sawCheckpoint = named, true
		}
		s.named[g] = max(s.named[g], named)
	}
	if d.err != nil {
		return fmt.Errorf("%w: %s: a checkpoint: %v", errMalformed, s.dir, d.err)
	}
	return nil
}

// WALLog is the log of a member of one group: group 0's GroupLog on a
// SharedLog of its own, which Close closes.
type WALLog struct {
	*GroupLog
}

// OpenWALLog opens the member's log in cfg.Dir as OpenSharedLog does, for
// group 0.
func OpenWALLog(cfg WALConfig) (*WALLog, error) {
	s, err := OpenSharedLog(cfg)
	if err != nil {
		return nil, err
	}
	return &WALLog{GroupLog: s.Group(0)}, nil
}

// Close closes the shared log.
func (l *WALLog) Close() error { return l.s.Close() }

// Shared is the shared log group 0's log is on.
func (l *WALLog) Shared() *SharedLog { return l.s }

var _ Log = (*WALLog)(nil)
