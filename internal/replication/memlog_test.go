package replication

// MemoryLog, the reference Log the tests run members on: in memory, so
// production code never holds it (a member reports writes durable only
// once its WALLog has fsynced them).

import (
	"context"
	"fmt"
	"slices"
	"sync"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/store/wal"
)

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
	k, n, err := l.entriesSpan(lo, hi, maxSize, len(l.ents), func(k int) uint64 { return uint64(proto.Size(l.ents[k])) })
	if err != nil {
		return nil, err
	}
	return l.ents[k : k+n : k+n], nil // the caller may append: it must not write into ents
}

// Term implements raft.Storage.
func (l *MemoryLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.termOf(i, len(l.ents), func(k int) uint64 { return l.ents[k].GetTerm() })
}

// LastIndex implements raft.Storage.
func (l *MemoryLog) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastLocked(), nil
}

func (l *MemoryLog) lastLocked() uint64 { return l.lastIndex(len(l.ents)) }

// Changes implements Log.
func (l *MemoryLog) Changes(after uint64) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for _, e := range l.ents {
		if e.GetIndex() > after && e.GetType() != pb.EntryNormal {
			out = append(out, e.GetIndex())
		}
	}
	return out
}

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
	l.installedLocked(md, snap.GetData())
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
