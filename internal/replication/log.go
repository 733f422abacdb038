package replication

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/store/wal"
)

// Log is a member's Raft log: what raft reads (raft.Storage), and what
// the shell writes when the core says so (ActWrite, ActCompact). The
// wal-backed log implements it next; MemoryLog is its reference, in
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
type Log interface {
	raft.Storage

	// Append writes ents (consecutive indexes), superseding every entry
	// held at or after ents[0]'s index: a deposed leader's uncommitted
	// tail is replaced by the new leader's entries.
	Append(ents []*pb.Entry)
	// SetHardState writes raft's term, vote and commit index.
	SetHardState(hs *pb.HardState)
	// InstallSnapshot makes the log what snap says: its records (in
	// snap.Data, as wal frames) become the head, and no entry is held;
	// FirstIndex is then the snapshot's index plus one.
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
	// Head returns the head's records as wal frames: what a fresh store
	// applies before the entries from FirstIndex.
	Head() []byte
	// SetMembership writes the membership raft applied through b.Index:
	// its ConfState (what InitialState returns from now on) and the
	// address book. Snapshots built from then on carry cs.
	SetMembership(cs *pb.ConfState, b Book)
	// Membership is the book last written, or installed with a snapshot
	// (its index then the snapshot's).
	Membership() Book
	// Locate returns the segment that holds entry index's records, or
	// the head's when index is the head's snapshot: where the store finds
	// a job's latest full record for compaction (Store.Migrate). 0 when
	// index is not held.
	Locate(index uint64) uint32
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

	// What compaction knows, guarded by mu: entries through folded are
	// folded into latestFull, each live job's latest full record's index
	// (baseIndex for the base).
	folded     uint64
	latestFull map[uint64]uint64
}

// logState is what every Log keeps alike, guarded by its mutex: raft's
// state, the head, where the entries begin, and the last snapshot built.
type logState struct {
	hs *pb.HardState
	cs *pb.ConfState
	// book is the address book as of the membership cs (book.Index): a
	// snapshot is built no further than the first membership change
	// after it, so that cs is its membership.
	book Book

	// The head: the installed snapshot's records (nil once nothing live
	// is only there) at baseIndex, and the highest id named by records
	// dropped.
	base      []byte
	baseIndex uint64
	idFloor   uint64

	// The entries begin at prevIndex+1; the entry before them
	// (compacted, or the snapshot's) had prevTerm.
	prevIndex, prevTerm uint64

	snap *pb.Snapshot // the last snapshot built
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

// headLocked is Log's Head.
func (s *logState) headLocked() []byte {
	head := slices.Clip(s.base)
	if s.idFloor > 0 {
		head = wal.AppendFrame(head, &wal.Record{Kind: wal.KindIDs, ID: s.idFloor})
	}
	return head
}

// snapshotLocked is raft.Storage's Snapshot: the live jobs as of the
// commit index, built by folding the head and the entries up to it, and
// kept until the log is compacted past it. last is the log's last index;
// term and entries (those from prevIndex+1 through index) read it.
func (s *logState) snapshotLocked(last uint64, term func(i uint64) uint64,
	entries func(index uint64) ([]*pb.Entry, error)) (*pb.Snapshot, error) {
	// Built again once the log is compacted past it, or the membership
	// changed since: a member added later must find itself in it.
	if s.snap == nil || s.snap.GetMetadata().GetIndex() < max(s.prevIndex, s.book.Index) {
		index := min(s.hs.GetCommit(), last)
		if index < s.prevIndex {
			// Never so: nothing past the commit index is compacted.
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		ents, err := entries(index)
		if err != nil {
			return nil, err
		}
		for i, e := range ents {
			if e.GetType() != pb.EntryNormal && e.GetIndex() > s.book.Index {
				// A change cs does not hold yet: the snapshot stops before it.
				index, ents = e.GetIndex()-1, ents[:i]
				break
			}
		}
		data, err := buildSnapshot(s.headLocked(), ents)
		if err != nil {
			return nil, err
		}
		s.snap = &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
			Index: new(index), Term: new(term(index)), ConfState: proto.Clone(s.cs).(*pb.ConfState),
		}}
	}
	// A copy of the message, not of the records: nobody writes into them.
	return &pb.Snapshot{Data: s.snap.Data, Metadata: proto.Clone(s.snap.GetMetadata()).(*pb.SnapshotMetadata)}, nil
}

// setMembershipLocked is Log's SetMembership.
func (s *logState) setMembershipLocked(cs *pb.ConfState, b Book) {
	s.cs = proto.Clone(cs).(*pb.ConfState)
	s.book = b.clone()
}

// installedLocked keeps an installed snapshot's membership: its
// ConfState, and the book as of its index.
func (s *logState) installedLocked(md *pb.SnapshotMetadata) {
	s.cs = proto.Clone(md.GetConfState()).(*pb.ConfState)
	s.book.Index = md.GetIndex()
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
	}, func(index uint64) ([]*pb.Entry, error) { return l.ents[:index-l.prevIndex], nil })
}

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
	l.base, l.baseIndex, l.idFloor = snap.GetData(), md.GetIndex(), 0
	l.prevIndex, l.prevTerm, l.ents = md.GetIndex(), md.GetTerm(), nil
	l.installedLocked(md)
	l.folded = md.GetIndex()
	clear(l.latestFull)
	// The core checked the records when the snapshot came in (Step).
	records, _ := wal.DecodeFrames(nil, l.base)
	for i := range records {
		if records[i].Kind == wal.KindFull {
			l.latestFull[records[i].ID] = l.baseIndex
		}
	}
	l.snap = &pb.Snapshot{Data: snap.GetData(), Metadata: proto.Clone(md).(*pb.SnapshotMetadata)}
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

// Head implements Log.
func (l *MemoryLog) Head() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.headLocked()
}

// maxID is the highest id the frames in b name, checked already: up to
// the first that cannot be read.
// recordsOf is e's records, as wal frames: its data for a normal entry,
// none for a membership change.
func recordsOf(e *pb.Entry) []byte {
	if e.GetType() != pb.EntryNormal {
		return nil
	}
	return e.GetData()
}

func maxID(b []byte) uint64 {
	id := uint64(0)
	_ = wal.ScanFrames(b, func(_ wal.Kind, i uint64, _ int) { id = max(id, i) })
	return id
}

// buildSnapshot folds the head's records and then the entries' into the
// live jobs (wal.Fold) and returns them as frames: each live job's full
// record, in id order, then the highest id any record named, so a store
// that applies the snapshot never issues an id again.
func buildSnapshot(head []byte, ents []*pb.Entry) ([]byte, error) {
	live := make(map[uint64]*wal.Recovered)
	lastID := uint64(0)
	fold := func(b []byte) error {
		records, err := wal.DecodeFrames(nil, b)
		for i := range records {
			wal.Fold(live, &records[i], wal.Loc{})
			lastID = max(lastID, records[i].ID)
		}
		return err
	}
	if err := fold(head); err != nil {
		return nil, fmt.Errorf("replication: the log's head: %w", err)
	}
	for _, e := range ents {
		if err := fold(recordsOf(e)); err != nil {
			return nil, fmt.Errorf("replication: entry %d: %w", e.GetIndex(), err)
		}
	}
	jobs := make([]*wal.Recovered, 0, len(live))
	for _, j := range live {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b *wal.Recovered) int { return cmp.Compare(a.ID, b.ID) })
	var data []byte
	for _, j := range jobs {
		data = wal.AppendFrame(data, &j.Record)
	}
	if lastID > 0 {
		data = wal.AppendFrame(data, &wal.Record{Kind: wal.KindIDs, ID: lastID})
	}
	return data, nil
}
