package replication

import (
	"context"
	"encoding/json"
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
// is the member's, in its -b directory, and the only one production code
// holds; the tests' MemoryLog (memlog_test.go) is its reference, in
// memory. raft.Storage's arithmetic over held entries is logState's, the
// same for both.
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
	// snap's Data, if any, is the book as of the snapshot (JSON: Core.Step
	// puts it there), kept with the install.
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
	// Changes returns the indexes of the membership changes held after
	// index after, oldest first: a core starting on the log looks there
	// for one that removes its member (Core.leaving).
	Changes(after uint64) []uint64
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

// raft.Storage's arithmetic over the entries a log holds, the same for
// every Log: held entries follow prevIndex, entry i is the one at
// i-prevIndex-1, the one at prevIndex is known only by its term.

// lastIndex is the index of the last of held entries.
func (s *logState) lastIndex(held int) uint64 { return s.prevIndex + uint64(held) }

// termOf is raft.Storage's Term for a log holding held entries, term(k)
// the term of the k-th.
func (s *logState) termOf(i uint64, held int, term func(k int) uint64) (uint64, error) {
	switch {
	case i < s.prevIndex:
		return 0, raft.ErrCompacted
	case i == s.prevIndex:
		return s.prevTerm, nil
	case i > s.lastIndex(held):
		return 0, raft.ErrUnavailable
	}
	return term(int(i - s.prevIndex - 1)), nil
}

// entriesSpan is raft.Storage's Entries' arithmetic for a log holding
// held entries, size(k) the k-th's size as raft counts it: the entries
// [lo, hi) it answers with start at the k-th held and number n, cut at
// maxSize but never empty.
func (s *logState) entriesSpan(lo, hi, maxSize uint64, held int, size func(k int) uint64) (k, n int, err error) {
	if lo <= s.prevIndex {
		return 0, 0, raft.ErrCompacted
	}
	if hi > s.lastIndex(held)+1 || lo >= hi {
		return 0, 0, raft.ErrUnavailable
	}
	k = int(lo - s.prevIndex - 1)
	total := uint64(0)
	for n < int(hi-lo) {
		total += size(k + n)
		if n > 0 && total > maxSize {
			break
		}
		n++
	}
	return k, n, nil
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
// ConfState, and the book as of its index: data, the book that came with
// it, if any, else this log's), and forgets the latest view, of a log
// that is no more.
func (s *logState) installedLocked(md *pb.SnapshotMetadata, data []byte) {
	s.cs = proto.Clone(md.GetConfState()).(*pb.ConfState)
	if len(data) > 0 {
		var b Book
		if err := json.Unmarshal(data, &b); err == nil {
			s.book = b
		}
	}
	s.book.Index = md.GetIndex()
	s.view.dropLocked()
	s.view = nil
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
