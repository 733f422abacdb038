package replication

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/store/wal"
)

// Log is a member's Raft log: what raft reads (raft.Storage), and what
// the shell writes when the core says so (ActWrite, ActCompact). WALLog
// is the member's, in its -b directory; MemoryLog is its reference, in
// memory.
//
// Writes are taken in order and never block: each is visible to the
// reads at once, and durable once a later OnDurable callback runs. A
// write is never refused: a log that cannot write (a full disk) keeps
// trying, and nothing after it becomes durable meanwhile, so nothing
// after it is acknowledged.
//
// The log holds, in order: the head (the records of an installed
// snapshot, while some job is live only there, and the highest id named
// by anything no longer held) and the entries from FirstIndex on.
// Replaying the head and then every committed entry, folding the records
// (wal.Fold), gives the live jobs as of the commit index: that is how a
// fresh store is filled (ActRestore, then ActApply) and how a snapshot
// is built.
//
// A snapshot's records never ride in raft's pb.Snapshot (its Data is
// empty): the leader's log hands them out (OpenSnapshot) and the
// receiver's takes them (ReceiveSnapshot) as a stream beside raft's
// message (doc.go, "Snapshots and a bounded log").
type Log interface {
	// raft.Storage: Snapshot returns the metadata of the live jobs as of
	// the commit index, their records kept for OpenSnapshot.
	raft.Storage

	// Append writes ents (consecutive indexes), superseding every entry
	// held at or after ents[0]'s index: a deposed leader's uncommitted
	// tail is replaced by the new leader's entries.
	Append(ents []*pb.Entry)
	// SetHardState writes raft's term, vote and commit index.
	SetHardState(hs *pb.HardState)
	// InstallSnapshot makes the log what snap says: the records received
	// for it (ReceiveSnapshot; Received must say so) become the head, and
	// no entry is held; FirstIndex is then the snapshot's index plus one.
	InstallSnapshot(snap *pb.Snapshot)
	// Compact says that entries through applied were applied: the log
	// may drop every entry that holds no live job's latest full record,
	// and the head once no live job's record is only there (as the wal
	// deletes a segment once compaction moved its live jobs), keeping the
	// id watermark of what it drops. Raft reads no entry at or below
	// applied again, but for a snapshot, which the log builds itself.
	Compact(applied uint64)
	// OnDurable calls fn once every write made before it is durable:
	// from any goroutine, or at once when it already is.
	OnDurable(fn func())
	// ReadHead calls fn with the head's records, in order, a frame at a
	// time (up to snapshotChunk bytes, or one larger record), each with
	// its place in this log (a full record's segment and size, as
	// ActApply's Locs), then with the id watermark: what a fresh store
	// applies before the entries from FirstIndex. The records are valid
	// only during the call. It returns fn's first error, or the log's.
	ReadHead(fn func(records []wal.Record, locs []wal.Loc) error) error
	// SetMembership writes the membership raft applied through b.Index:
	// its ConfState (what InitialState returns from now on) and the
	// address book. Snapshots built from then on carry cs.
	SetMembership(cs *pb.ConfState, b Book)
	// Membership is the book last written, or installed with a snapshot
	// (its index then the snapshot's).
	Membership() Book
	// Locate returns the segment that holds entry index's records: where
	// the store finds a job's latest full record for compaction
	// (Store.Migrate). 0 when index is not held.
	Locate(index uint64) uint32

	// OpenSnapshot opens the records of the snapshot md describes, the
	// one Snapshot returned last (ErrSnapshotGone when the log no longer
	// keeps it), from any goroutine: the live jobs' latest full records
	// and the updates after them, then the id watermark.
	OpenSnapshot(md *pb.SnapshotMetadata) (SnapshotReader, error)
	// ReceiveSnapshot opens a spool for the records of the snapshot md
	// describes, which a peer sends, from any goroutine; it gives up any
	// other not yet installed. ErrLogFull refuses it on a full disk. The
	// sink waits for the log no longer than ctx.
	ReceiveSnapshot(ctx context.Context, md *pb.SnapshotMetadata) (SnapshotSink, error)
	// Received reports whether the records of the snapshot md describes
	// came whole and are durable (a sink finished), so that it may be
	// installed.
	Received(md *pb.SnapshotMetadata) bool
}

// MemoryLog is a Log in memory: everything written is durable at once
// (tests wrap it to decide when a write is durable), and Compact keeps at
// least Retain entries past what it may drop, so a follower a little
// behind gets entries rather than a snapshot. It is safe for concurrent
// use.
type MemoryLog struct {
	retain uint64 // immutable: entries kept below the applied index

	mu       sync.Mutex
	logState             // guarded by mu
	ents     []*pb.Entry // guarded by mu: ents[0] is at prevIndex+1
	// base is the head's records, guarded by mu: nil once nothing live is
	// only there.
	base []byte
	// spool is the snapshot being received, or received and not yet
	// installed, guarded by mu.
	spool *memSpool

	// What compaction knows, guarded by mu: entries through folded are
	// folded into latestFull, each live job's latest full record's index
	// (baseIndex for the base).
	folded     uint64
	latestFull map[uint64]uint64
}

// memSpool is a snapshot a MemoryLog receives.
type memSpool struct {
	md   *pb.SnapshotMetadata
	data []byte
	done bool // every chunk came
}

// logState is what every Log keeps alike, guarded by its mutex: raft's
// state, where the head and the entries begin, and the latest snapshot.
type logState struct {
	hs *pb.HardState
	cs *pb.ConfState
	// book is the address book as of the membership cs (book.Index): a
	// snapshot is built no further than the first membership change
	// after it, so that cs is its membership.
	book Book

	// The head is the installed snapshot's records (each log keeps them
	// its own way) at baseIndex; idFloor is the highest id named by
	// records dropped.
	baseIndex uint64
	idFloor   uint64

	// The entries begin at prevIndex+1; the entry before them
	// (compacted, or the snapshot's) had prevTerm.
	prevIndex, prevTerm uint64

	view *snapView // the latest snapshot's view
}

// newLogState is a new member's: entry 1 at term 1, committed, and the
// initial members as voters.
func newLogState(voters []uint64) logState {
	return logState{
		hs:        &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(0)), Commit: new(uint64(1))},
		cs:        &pb.ConfState{Voters: slices.Clone(voters)},
		prevIndex: 1,
		prevTerm:  1,
	}
}

// joinLogState is a joining member's: nothing, not even a membership,
// until the leader's snapshot.
func joinLogState() logState {
	return logState{hs: &pb.HardState{}, cs: &pb.ConfState{}}
}

// initialState is raft.Storage's InitialState, copied.
func (s *logState) initialState() (*pb.HardState, *pb.ConfState, error) {
	return proto.Clone(s.hs).(*pb.HardState), proto.Clone(s.cs).(*pb.ConfState), nil
}

// snapshotLocked is raft.Storage's Snapshot: the metadata of the live
// jobs as of the commit index, whose records makeView finds (the head's
// and the entries' through the index), kept until the log is compacted
// past it. last is the log's last index; term and conf (is entry i a
// membership change) read the entries from prevIndex+1 on.
func (s *logState) snapshotLocked(last uint64, term func(i uint64) uint64, conf func(i uint64) bool,
	makeView func(md *pb.SnapshotMetadata) *snapView) (*pb.Snapshot, error) {
	// Made again once the log is compacted past it, or the membership
	// changed since: a member added later must find itself in it.
	if s.view == nil || s.view.md.GetIndex() < max(s.prevIndex, s.book.Index) {
		index := min(s.hs.GetCommit(), last)
		if index < s.prevIndex {
			// Never so: nothing past the commit index is compacted.
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		for i := s.prevIndex + 1; i <= index; i++ {
			if conf(i) && i > s.book.Index {
				// A change cs does not hold yet: the snapshot stops before it.
				index = i - 1
				break
			}
		}
		s.view.dropLocked()
		s.view = makeView(&pb.SnapshotMetadata{
			Index: new(index), Term: new(term(index)), ConfState: proto.Clone(s.cs).(*pb.ConfState),
		})
	}
	return &pb.Snapshot{Metadata: proto.Clone(s.view.md).(*pb.SnapshotMetadata)}, nil
}

// openSnapshot is Log's OpenSnapshot; mu is the log's mutex, which
// guards s. Once its last stream closes, the view goes: making another is
// cheap (it reads nothing), and what it keeps on disk should not stay for
// a snapshot that may never be asked for again.
func (s *logState) openSnapshot(mu *sync.Mutex, md *pb.SnapshotMetadata) (SnapshotReader, error) {
	mu.Lock()
	defer mu.Unlock()
	v := s.view
	if !v.matches(md) {
		return nil, fmt.Errorf("%w: snapshot %d at term %d", ErrSnapshotGone, md.GetIndex(), md.GetTerm())
	}
	return v.openLocked(func() {
		mu.Lock()
		defer mu.Unlock()
		if v.readers--; v.readers > 0 {
			return
		}
		if s.view == v {
			s.view = nil
		}
		v.dropped = true
		v.releaseIfDoneLocked()
	}), nil
}

// compactedLocked drops the latest view once the log is compacted past
// it: its records stay only while a stream reads them.
func (s *logState) compactedLocked() {
	if s.view != nil && s.view.md.GetIndex() < s.prevIndex {
		s.view.dropLocked()
		s.view = nil
	}
}

// setMembershipLocked is Log's SetMembership.
func (s *logState) setMembershipLocked(cs *pb.ConfState, b Book) {
	s.cs = proto.Clone(cs).(*pb.ConfState)
	s.book = b.clone()
}

// installedLocked keeps an installed snapshot's membership (its
// ConfState, and the book as of its index), and forgets the latest view,
// of a log that is no more.
func (s *logState) installedLocked(md *pb.SnapshotMetadata) {
	s.cs = proto.Clone(md.GetConfState()).(*pb.ConfState)
	s.book.Index = md.GetIndex()
	s.view.dropLocked()
	s.view = nil
}

// NewJoinMemoryLog returns the log of a member that joins a running
// cluster: empty, with no membership, until the leader's snapshot.
func NewJoinMemoryLog(retain int) *MemoryLog {
	return &MemoryLog{retain: uint64(max(retain, 0)), logState: joinLogState(), latestFull: make(map[uint64]uint64)}
}

// NewMemoryLog returns the log a new member starts with: no entries, the
// first index 2, and the initial members as voters. Every member of a new
// cluster starts from the same state, index 1 at term 1, so none needs a
// snapshot to join it (raft's Bootstrap would log the members as conf
// changes instead; the library recommends this).
func NewMemoryLog(voters []uint64, retain int) *MemoryLog {
	return &MemoryLog{
		retain:     uint64(max(retain, 0)),
		logState:   newLogState(voters),
		folded:     1,
		latestFull: make(map[uint64]uint64),
	}
}

// InitialState implements raft.Storage.
func (l *MemoryLog) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.initialState()
}

// Entries implements raft.Storage.
func (l *MemoryLog) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lo <= l.prevIndex {
		return nil, raft.ErrCompacted
	}
	if hi > l.lastLocked()+1 || lo >= hi {
		return nil, raft.ErrUnavailable
	}
	ents := l.ents[lo-l.prevIndex-1 : hi-l.prevIndex-1]
	size, n := uint64(0), 0
	for n < len(ents) {
		size += uint64(proto.Size(ents[n]))
		if n > 0 && size > maxSize {
			break
		}
		n++
	}
	return ents[:n:n], nil // the caller may append: it must not write into ents
}

// Term implements raft.Storage.
func (l *MemoryLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case i < l.prevIndex:
		return 0, raft.ErrCompacted
	case i == l.prevIndex:
		return l.prevTerm, nil
	case i > l.lastLocked():
		return 0, raft.ErrUnavailable
	}
	return l.ents[i-l.prevIndex-1].GetTerm(), nil
}

// LastIndex implements raft.Storage.
func (l *MemoryLog) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastLocked(), nil
}

func (l *MemoryLog) lastLocked() uint64 { return l.prevIndex + uint64(len(l.ents)) }

// FirstIndex implements raft.Storage.
func (l *MemoryLog) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.prevIndex + 1, nil
}

// Snapshot implements raft.Storage.
func (l *MemoryLog) Snapshot() (*pb.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked(l.lastLocked(), func(i uint64) uint64 {
		if i == l.prevIndex {
			return l.prevTerm
		}
		return l.ents[i-l.prevIndex-1].GetTerm()
	}, func(i uint64) bool {
		return l.ents[i-l.prevIndex-1].GetType() != pb.EntryNormal
	}, func(md *pb.SnapshotMetadata) *snapView {
		// The slices are never written into: appends and compaction make
		// new ones.
		pieces := [][]byte{l.base}
		for _, e := range l.ents[:md.GetIndex()-l.prevIndex] {
			pieces = append(pieces, recordsOf(e))
		}
		return &snapView{md: md, pieces: len(pieces), floor: l.idFloor,
			read: func(i int, _ *[]byte) ([]byte, error) { return pieces[i], nil }}
	})
}

// OpenSnapshot implements Log.
func (l *MemoryLog) OpenSnapshot(md *pb.SnapshotMetadata) (SnapshotReader, error) {
	return l.openSnapshot(&l.mu, md)
}

// ReceiveSnapshot implements Log: the records are kept in memory.
func (l *MemoryLog) ReceiveSnapshot(_ context.Context, md *pb.SnapshotMetadata) (SnapshotSink, error) {
	sp := l.beginSpool(md)
	return &memSink{write: func(chunk []byte) error { return l.spoolWrite(sp, chunk) },
		finish: func() error { return l.spoolFinish(sp) }, abort: func() { l.spoolAbort(sp) }}, nil
}

// beginSpool starts receiving the snapshot md describes, giving up any
// other not yet installed.
func (l *MemoryLog) beginSpool(md *pb.SnapshotMetadata) *memSpool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spool = &memSpool{md: proto.Clone(md).(*pb.SnapshotMetadata)}
	return l.spool
}

// spoolWrite adds a chunk, checked, to sp.
func (l *MemoryLog) spoolWrite(sp *memSpool, chunk []byte) error {
	if _, _, err := checkChunk(nil, chunk); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if sp == nil || l.spool != sp || sp.done {
		return errSuperseded
	}
	sp.data = append(sp.data, chunk...)
	return nil
}

// spoolFinish makes sp received.
func (l *MemoryLog) spoolFinish(sp *memSpool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sp == nil || l.spool != sp {
		return errSuperseded
	}
	sp.done = true
	return nil
}

// spoolAbort gives sp up, if it is not installed yet.
func (l *MemoryLog) spoolAbort(sp *memSpool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spool == sp {
		l.spool = nil
	}
}

// Received implements Log.
func (l *MemoryLog) Received(md *pb.SnapshotMetadata) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	sp := l.spool
	return sp != nil && sp.done && sp.md.GetIndex() == md.GetIndex() && sp.md.GetTerm() == md.GetTerm()
}

// memSink is a MemoryLog's SnapshotSink.
type memSink struct {
	write  func([]byte) error
	finish func() error
	abort  func()
}

func (s *memSink) Write(chunk []byte) error { return s.write(chunk) }
func (s *memSink) Finish() error            { return s.finish() }
func (s *memSink) Close()                   { s.abort() }

// Append implements Log.
func (l *MemoryLog) Append(ents []*pb.Entry) {
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
	keep := first - l.prevIndex - 1
	// A new array where entries are superseded: slices handed out by
	// Entries still point into the old one.
	l.ents = append(l.ents[:keep:keep], ents...)
}

// SetHardState implements Log.
func (l *MemoryLog) SetHardState(hs *pb.HardState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hs = proto.Clone(hs).(*pb.HardState)
}

// InstallSnapshot implements Log.
func (l *MemoryLog) InstallSnapshot(snap *pb.Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	md := snap.GetMetadata()
	sp := l.spool
	if sp == nil || !sp.done || sp.md.GetIndex() != md.GetIndex() || sp.md.GetTerm() != md.GetTerm() {
		panic(fmt.Sprintf("replication: installing snapshot %d at term %d, not received", md.GetIndex(), md.GetTerm()))
	}
	l.spool = nil
	l.base, l.baseIndex, l.idFloor = sp.data, md.GetIndex(), 0
	l.prevIndex, l.prevTerm, l.ents = md.GetIndex(), md.GetTerm(), nil
	l.installedLocked(md)
	l.folded = md.GetIndex()
	clear(l.latestFull)
	// The spool checked the records as they came.
	_ = wal.ScanFrames(l.base, func(kind wal.Kind, id uint64, _ int) {
		if kind == wal.KindFull {
			l.latestFull[id] = l.baseIndex
		}
	})
}

// Compact implements Log.
func (l *MemoryLog) Compact(applied uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	applied = min(applied, l.lastLocked(), l.hs.GetCommit())
	for i := max(l.folded, l.prevIndex) + 1; i <= applied; i++ {
		records, err := wal.DecodeFrames(nil, recordsOf(l.ents[i-l.prevIndex-1]))
		if err != nil {
			return // the core refused this entry already (ActApply): keep everything
		}
		for _, r := range records {
			switch r.Kind {
			case wal.KindFull:
				l.latestFull[r.ID] = i
			case wal.KindDelete:
				delete(l.latestFull, r.ID)
			}
		}
	}
	l.folded = max(l.folded, applied)

	keep := uint64(0) // entries from keep on stay
	if applied+1 > l.retain {
		keep = applied + 1 - l.retain
	}
	for _, i := range l.latestFull {
		keep = min(keep, i)
	}
	if l.base != nil && keep > l.baseIndex {
		l.idFloor = max(l.idFloor, maxID(l.base))
		l.base = nil
	}
	if l.base != nil || keep <= l.prevIndex+1 {
		return
	}
	n := keep - l.prevIndex - 1
	for _, e := range l.ents[:n] {
		l.idFloor = max(l.idFloor, maxID(recordsOf(e)))
	}
	l.prevIndex, l.prevTerm = keep-1, l.ents[n-1].GetTerm()
	l.ents = slices.Clone(l.ents[n:])
	l.compactedLocked()
}

// Locate implements Log: a MemoryLog is one segment, 1.
func (l *MemoryLog) Locate(uint64) uint32 { return 1 }

// OnDurable implements Log: everything in memory is as durable as it gets.
func (l *MemoryLog) OnDurable(fn func()) { fn() }

// SetMembership implements Log.
func (l *MemoryLog) SetMembership(cs *pb.ConfState, b Book) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setMembershipLocked(cs, b)
}

// Membership implements Log.
func (l *MemoryLog) Membership() Book {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.book.clone()
}

// ReadHead implements Log: the head is one frame, in segment 1.
func (l *MemoryLog) ReadHead(fn func(records []wal.Record, locs []wal.Loc) error) error {
	l.mu.Lock()
	head, floor := l.base, l.idFloor
	l.mu.Unlock()
	records, err := wal.DecodeFrames(nil, head)
	if err != nil {
		return fmt.Errorf("replication: the log's head: %w", err)
	}
	if floor > 0 {
		records = append(records, wal.Record{Kind: wal.KindIDs, ID: floor})
	}
	if len(records) == 0 {
		return nil
	}
	return fn(records, appendLocs(nil, records, 1))
}

// recordsOf is e's records, as wal frames: its data for a normal entry,
// none for a membership change.
func recordsOf(e *pb.Entry) []byte {
	if e.GetType() != pb.EntryNormal {
		return nil
	}
	return e.GetData()
}

// maxID is the highest id the frames in b name, checked already: up to
// the first that cannot be read.
func maxID(b []byte) uint64 {
	id := uint64(0)
	_ = wal.ScanFrames(b, func(_ wal.Kind, i uint64, _ int) { id = max(id, i) })
	return id
}
