package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// Snapshots stream (doc.go, "Snapshots and a bounded log"): raft's
// pb.Snapshot carries only the metadata, and the records go beside it,
// read from the leader's log (Log.OpenSnapshot) and spooled into the
// receiver's (Log.ReceiveSnapshot) a chunk at a time.

const (
	// snapshotChunk bounds the records of one chunk of a snapshot, and of
	// one head frame: whole records, one larger record alone.
	snapshotChunk = 1 << 20
	// snapshotWindow bounds the bytes a receiver's spool has written to
	// its log and not yet made durable: what it holds, whatever the
	// snapshot's size.
	snapshotWindow = 8 << 20
	// fullCheck is how often a spool waiting for its log asks whether the
	// disk is full: the wal says so, it does not call back.
	fullCheck = 100 * time.Millisecond
	// snapshotRate is the pace of a snapshot's stream, in bytes of
	// records a second: fast enough that a member catches up on 500 MB in
	// under 10 s, slow enough that its sender's, and its receiver's,
	// reads, writes and fsyncs leave the leader's clients their share of
	// the cores and the disk (benchmarks/README.md, "A member catching
	// up").
	snapshotRate = 96e6
	// scanRate is the pace of a stream's first pass over its view, which
	// reads every record back before the first chunk goes.
	scanRate = 4 * snapshotRate
)

var (
	// ErrSnapshotGone is why a snapshot's records cannot be read: the log
	// no longer keeps that snapshot's view (it was compacted past it, or
	// another was made); raft asks for a new one.
	ErrSnapshotGone = errors.New("replication: the snapshot is no longer kept")
	// ErrLogFull refuses a snapshot while the receiver's disk is full (or
	// its fsyncs keep failing): raft sends it again later.
	ErrLogFull = errors.New("replication: the log's disk is full")
	// errSuperseded ends a spool that another snapshot received since
	// replaced.
	errSuperseded = errors.New("replication: another snapshot is being received")
)

// SnapshotReader hands out a snapshot's records, a chunk at a time
// (Log.OpenSnapshot). It is used by one goroutine.
type SnapshotReader interface {
	// Next returns the next chunk: whole wal frames, up to snapshotChunk
	// bytes of them or one larger record; valid until the next call.
	// After the last it returns io.EOF.
	Next() ([]byte, error)
	// Close lets the log drop what it kept for the reader.
	Close()
}

// SnapshotSink takes a snapshot's records as they arrive
// (Log.ReceiveSnapshot). It is used by one goroutine.
type SnapshotSink interface {
	// Write takes the next chunk of whole wal frames, checked by their
	// CRCs here: a damaged one is refused (ErrBadRecords). It may wait
	// while the log makes what it was given durable, never past its
	// context. Any error ends the spool.
	Write(chunk []byte) error
	// Finish says every chunk came, and waits until they are durable:
	// the log has then received the snapshot (Log.Received), which raft
	// may install until Close.
	Finish() error
	// Close ends the spool: one not installed is given up, and what it
	// kept on disk goes in time. Raft installs a snapshot, or does not
	// (it came from an older term), in the round that steps it: the
	// transport closes the sink once that round is carried out.
	Close()
}

// snapView is where a snapshot's records are (doc.go, "The leader's
// view"): its pieces, in order (the head's frames, then the entries
// through its index), and the highest id named by records no longer held.
// The log that made it keeps what read reads until it is released: no
// stream reads it and the log dropped it.
type snapView struct {
	md     *pb.SnapshotMetadata // immutable
	pieces int                  // immutable
	floor  uint64               // immutable
	// read returns piece i's records, as wal frames (nil for a piece that
	// holds none), read into *buf if they must be read. Immutable; safe
	// without the log's mutex.
	read func(i int, buf *[]byte) ([]byte, error)
	// release, if set, lets the log drop what it kept for the view; it
	// runs under the log's mutex. Immutable.
	release func()

	readers int  // guarded by the log's mutex: streams open
	dropped bool // guarded by the log's mutex: the log no longer keeps it
}

// openLocked opens a stream over v; closed is called, under the mutex
// of v's log (which the caller holds now), when it closes.
func (v *snapView) openLocked(closed func()) SnapshotReader {
	v.readers++
	return &snapStream{view: v, close: closed}
}

// dropLocked: the log no longer keeps v as its latest view.
func (v *snapView) dropLocked() {
	if v == nil || v.dropped {
		return
	}
	v.dropped = true
	v.releaseIfDoneLocked()
}

func (v *snapView) releaseIfDoneLocked() {
	if v.dropped && v.readers == 0 && v.release != nil {
		v.release()
		v.release = nil
	}
}

// matches reports whether v is the snapshot md describes.
func (v *snapView) matches(md *pb.SnapshotMetadata) bool {
	return v != nil && v.md.GetIndex() == md.GetIndex() && v.md.GetTerm() == md.GetTerm()
}

// snapStream reads a view twice: first to find each live job's latest
// full record, then to hand out those and the updates after them, in
// chunks (doc.go, "The leader's view").
type snapStream struct {
	view  *snapView
	close func() // once
	buf   []byte // what the view's pieces are read into

	// The first pass: for each job live at the index, the ordinal of its
	// latest full record among the view's records; the highest id named.
	scanned bool
	latest  map[uint64]uint64
	maxID   uint64
	// dedup is the table of request keys the view's records make
	// (docs/design/shards.md 5.6), sent as records after the jobs, so that
	// the receiver's store answers a resent request as the sender's would.
	dedup *store.DedupTable

	// The second pass: the next piece, what is left of the one being
	// read, and the ordinal of the last record taken from it.
	piece   int
	recs    []byte
	ord     uint64
	out     []byte
	idsDone bool
	closed  bool
	// The table's records, pulled one at a time (reqs nil: not begun, or
	// done); held is one pulled that did not fit in the last chunk.
	reqs     func() (wal.Record, bool)
	stopReqs func()
	reqsDone bool
	held     *wal.Record
}

// scan is the first pass.
func (s *snapStream) scan() error {
	s.latest, s.maxID = make(map[uint64]uint64), s.view.floor
	s.dedup = store.NewDedupTable()
	ord := uint64(0)
	pace := &pacer{rate: scanRate}
	pace.begin()
	defer pace.end()
	for i := range s.view.pieces {
		recs, err := s.view.read(i, &s.buf)
		if err != nil {
			return err
		}
		// A burst of reads at the start would take a core from the
		// leader's clients at once.
		_ = pace.wait(context.Background(), len(recs))
		err = wal.ScanFrames(recs, func(kind wal.Kind, id uint64, _ int) {
			ord++
			s.maxID = max(s.maxID, id)
			switch kind {
			case wal.KindFull:
				s.latest[id] = ord
			case wal.KindDelete:
				delete(s.latest, id)
			}
		})
		if err == nil {
			err = s.dedup.AddFrames(recs)
		}
		if err != nil {
			return fmt.Errorf("%w: snapshot %d: %v", errMalformed, s.view.md.GetIndex(), err)
		}
	}
	return nil
}

// Next implements SnapshotReader.
func (s *snapStream) Next() ([]byte, error) {
	if !s.scanned {
		if err := s.scan(); err != nil {
			return nil, err
		}
		s.scanned = true
	}
	s.out = s.out[:0]
	for {
		for len(s.recs) > 0 {
			kind, id, size, err := wal.NextFrame(s.recs)
			if err != nil {
				return nil, fmt.Errorf("%w: snapshot %d: %v", errMalformed, s.view.md.GetIndex(), err)
			}
			latest, live := s.latest[id]
			keep := kind == wal.KindFull && live && latest == s.ord+1 ||
				kind == wal.KindUpdate && live && latest < s.ord+1
			if keep && len(s.out) > 0 && len(s.out)+size > snapshotChunk {
				return s.out, nil
			}
			s.ord++
			if keep {
				s.out = append(s.out, s.recs[:size]...)
			}
			s.recs = s.recs[size:]
		}
		if s.piece == s.view.pieces {
			break
		}
		recs, err := s.view.read(s.piece, &s.buf)
		if err != nil {
			return nil, err
		}
		s.recs = recs
		s.piece++
	}
	if !s.idsDone && s.maxID > 0 {
		ids := wal.Record{Kind: wal.KindIDs, ID: s.maxID}
		if len(s.out) > 0 && len(s.out)+segment.FrameHeader+17 > snapshotChunk {
			return s.out, nil
		}
		s.out = wal.AppendFrame(s.out, &ids)
		s.idsDone = true
	}
	if full := s.nextReqs(); full {
		return s.out, nil
	}
	if len(s.out) == 0 {
		return nil, io.EOF
	}
	return s.out, nil
}

// nextReqs appends the dedup table's records after the jobs (its clock
// first: the keys of the jobs' own records were folded at a zero clock,
// and it expires them), and reports whether the chunk is full.
func (s *snapStream) nextReqs() (full bool) {
	if s.reqsDone || s.dedup.Len() == 0 && s.dedup.Clock() == 0 {
		return false
	}
	if s.reqs == nil {
		s.reqs, s.stopReqs = iter.Pull(s.dedup.Records())
	}
	for {
		if s.held == nil {
			r, ok := s.reqs()
			if !ok {
				s.stopReqs()
				s.reqsDone = true
				return false
			}
			s.held = &r
		}
		if len(s.out) > 0 && len(s.out)+wal.FrameSize(s.held) > snapshotChunk {
			return true
		}
		s.out = wal.AppendFrame(s.out, s.held)
		s.held = nil
	}
}

// Close implements SnapshotReader.
func (s *snapStream) Close() {
	if !s.closed {
		s.closed = true
		if s.stopReqs != nil {
			s.stopReqs()
		}
		s.close()
	}
}

// checkChunk decodes a chunk's records into scratch, checking each, and
// returns them (their bodies alias chunk) and the highest id they name.
func checkChunk(scratch []wal.Record, chunk []byte) ([]wal.Record, uint64, error) {
	records, err := wal.DecodeFrames(scratch[:0], chunk)
	if err != nil {
		return records, 0, fmt.Errorf("%w: a snapshot's chunk: %v", ErrBadRecords, err)
	}
	top := uint64(0)
	for i := range records {
		top = max(top, records[i].ID)
	}
	return records, top, nil
}

// waitDurable waits until lsn is durable in w (OnDurable), ctx ends, the
// log says its disk is full (ErrLogFull), or snapshotIdle passes: a disk
// that fills or keeps failing does not hold a spool, and the transport's
// goroutine, for good.
func waitDurable(ctx context.Context, w *segment.Log, lsn uint64) error {
	done := make(chan struct{})
	w.OnDurable(lsn, func() { close(done) })
	deadline := time.NewTimer(snapshotIdle)
	defer deadline.Stop()
	check := time.NewTicker(fullCheck)
	defer check.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-check.C:
			if w.Full() {
				return ErrLogFull
			}
		case <-deadline.C:
			return fmt.Errorf("replication: a snapshot's records were not durable within %v", snapshotIdle)
		}
	}
}

// pacer keeps what goes through it at rate bytes a second on average,
// counted from when its first stream began (begin) after none ran: a
// stream that stalls (its receiver's disk) catches up afterwards, while
// several at once share the rate. The transport's is every snapshot the
// member sends; a stream's first pass over its view has its own.
type pacer struct {
	rate float64 // immutable

	mu      sync.Mutex
	streams int       // guarded by mu
	start   time.Time // guarded by mu
	sent    float64   // guarded by mu: bytes since start
}

// begin counts a stream in, starting the count afresh if none ran; end
// counts it out.
func (p *pacer) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.streams == 0 {
		p.start, p.sent = time.Now(), 0
	}
	p.streams++
}

func (p *pacer) end() {
	p.mu.Lock()
	p.streams--
	p.mu.Unlock()
}

// wait counts n bytes sent and waits until they are due, or ctx ends.
func (p *pacer) wait(ctx context.Context, n int) error {
	p.mu.Lock()
	p.sent += float64(n)
	ahead := time.Duration(p.sent/p.rate*float64(time.Second)) - time.Since(p.start)
	p.mu.Unlock()
	if ahead <= 0 {
		return nil
	}
	t := time.NewTimer(ahead)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
