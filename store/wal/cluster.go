package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// This file is the log's cluster mode (doc.go, "Cluster mode"): a
// cluster member's Raft log (internal/replication) in the same segments,
// written by the same writer.

// ClusterKinds is the first kind of a cluster log's frames: a payload
// whose first byte is below it is a job's record, never found at the top
// of a cluster's segment.
const ClusterKinds Kind = 16

// FrameHeader is the size of a frame's header: u32 payload length, u32
// CRC-32C of the payload.
const FrameHeader = frameHeader

// maxClusterPayload bounds a cluster frame's payload: an entry carries a
// batch of records, so it may pass a record's bound.
const maxClusterPayload = 1<<32 - 1

// Cluster is what a cluster member's log gives OpenCluster.
type Cluster struct {
	// Replay is called with each frame found, in order. Its payload is
	// valid only during the call. An error stops the start, whatever
	// SkipDamaged says.
	Replay func(f Frame) error
	// Convert, if set, takes a single node's directory over (or a
	// beanstalkd binlog's, with Options.Importer): given the jobs it holds
	// and the highest id it issued, it returns the frames the cluster's
	// first segment holds after its header. Nil refuses such a directory.
	Convert func(jobs []Recovered, lastID uint64) ([]byte, error)
}

// Frame is a cluster frame found at start.
type Frame struct {
	Seg     uint32 // its segment
	Off     int64  // its offset there
	Size    int    // its bytes, header included
	Payload []byte
}

// Move says that a job's latest full record moved: a new job's (From
// zero), a rewrite's, or a deleted job's (To zero).
type Move struct {
	ID       uint64
	From, To Loc
}

// OpenCluster locks dir, replays its frames to cl.Replay and returns the
// log, not yet writing: a cluster member's Raft log (doc.go, "Cluster
// mode"). Durable always means written and fsynced: opts.SyncEvery and
// NoSync are ignored. Set the checkpoint and what is held, then Start.
func OpenCluster(dir string, opts Options, cl Cluster) (*Log, error) {
	opts.cluster = true
	opts.SyncEvery, opts.NoSync = 0, false
	return open(dir, opts, func(l *Log) error { return l.loadCluster(cl) })
}

// loadCluster replays a cluster's directory, converting a single node's
// first if cl says how.
func (l *Log) loadCluster(cl Cluster) error {
	single, cluster, err := l.classify()
	if err != nil {
		return err
	}
	if len(cluster) == 0 && (len(single) > 0 || l.foreignFiles()) {
		if cl.Convert == nil {
			return fmt.Errorf("wal: %s holds a single node's jobs: a cluster takes them over only as its first member alone (--cluster-peers naming --node only)", l.dir)
		}
		if err := l.convert(cl.Convert); err != nil {
			return err
		}
		if single, cluster, err = l.classify(); err != nil {
			return err
		}
	}
	if len(single) > 0 {
		if len(cluster) > 0 && single[len(single)-1] > cluster[0] {
			return fmt.Errorf("wal: %s holds a single node's segments after a cluster's: start it on another directory", l.dir)
		}
		// Left by a conversion that stopped after its segment was in place.
		for _, seq := range single {
			l.log.Warn().Str("file", l.segPath(seq)).Msg("wal: removing a single node's segment a conversion left")
			if err := os.Remove(l.segPath(seq)); err != nil {
				return err
			}
		}
		l.syncDir()
	}
	// A spare an earlier run made and never wrote to holds nothing, and
	// its header's id is older than what was written after it was made:
	// it goes, so that the oldest segment's header always covers the ids
	// named before it (FloorID).
	used := cluster[:0]
	for _, seq := range cluster {
		if segmentEmpty(l.segPath(seq)) {
			if err := os.Remove(l.segPath(seq)); err != nil {
				return err
			}
			continue
		}
		used = append(used, seq)
	}
	cluster = used
	// A torn write is cut off at the end of the last segment holding more
	// than its checkpoint: one that holds no more was begun after the
	// write, as appends moved on, and neither was durable.
	lastUsed := len(cluster) - 1
	for lastUsed > 0 && onlyCheckpoint(l.segPath(cluster[lastUsed])) {
		lastUsed--
	}
	for i, seq := range cluster {
		err := l.walkSegment(seq, i >= lastUsed, func(data []byte, off int) (int, error) {
			payload, size, err := checkFrame(data, off, maxClusterPayload)
			if err == nil && Kind(payload[0]) < ClusterKinds {
				err = errCorrupt
			}
			if err != nil {
				return size, err
			}
			if err := cl.Replay(Frame{Seg: seq, Off: int64(off), Size: size, Payload: payload}); err != nil {
				return size, replayStopped{err}
			}
			return size, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// onlyCheckpoint reports whether the cluster segment at path holds no
// frame but its first, its checkpoint: a spare never written, or the
// segment appends had just moved to.
func onlyCheckpoint(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil || len(data) < headerSize || string(data[:8]) != magic {
		return false
	}
	rest := data[headerSize:]
	if len(rest) >= frameHeader {
		if n := int(binary.LittleEndian.Uint32(rest)); n > 0 && frameHeader+n <= len(rest) {
			rest = rest[frameHeader+n:]
		}
	}
	return allZero(rest)
}

// classify lists the segments by their headers' versions: a single
// node's, and the rest (a cluster's, and any that replay judges).
func (l *Log) classify() (single, cluster []uint32, err error) {
	seqs, err := listSegments(l.dir)
	if err != nil {
		return nil, nil, err
	}
	for _, seq := range seqs {
		hdr := make([]byte, 12)
		f, err := os.Open(l.segPath(seq))
		if err != nil {
			return nil, nil, err
		}
		n, _ := f.ReadAt(hdr, 0)
		_ = f.Close()
		if n == len(hdr) && string(hdr[:8]) == magic && binary.LittleEndian.Uint32(hdr[8:]) == version {
			single = append(single, seq)
		} else {
			cluster = append(cluster, seq)
		}
	}
	return single, cluster, nil
}

// foreignFiles reports whether the directory holds files the Importer
// takes over.
func (l *Log) foreignFiles() bool {
	if l.opts.Importer == nil {
		return false
	}
	files, err := l.opts.Importer.Files(l.dir)
	return err == nil && len(files) > 0
}

// convert reads the directory as a single node would (importing a
// beanstalkd binlog first), writes what convert makes of its jobs as a
// cluster segment after the last, durable and renamed into place, and
// then removes the single node's segments.
func (l *Log) convert(convert func([]Recovered, uint64) ([]byte, error)) error {
	opts := l.opts
	opts.cluster = false
	single := &Log{dir: l.dir, opts: opts, log: l.log, core: newCore(opts.policy()), dirFile: l.dirFile}
	if err := single.load(); err != nil {
		return err
	}
	jobs, lastID := single.Recovered(), single.core.lastID
	frames, err := convert(jobs, lastID)
	if err != nil {
		return err
	}
	seqs, err := listSegments(l.dir)
	if err != nil {
		return err
	}
	next := uint32(1)
	if len(seqs) > 0 {
		next = seqs[len(seqs)-1] + 1
	}
	buf := make([]byte, headerSize, headerSize+len(frames))
	copy(buf, magic)
	putU32(buf[8:], clusterVersion)
	putU64(buf[headerIDOffset:], lastID)
	buf = append(buf, frames...)
	final := l.segPath(next)
	tmp := final + ".convert"
	if err := writeDurably(tmp, buf); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	l.syncDir()
	for _, seq := range seqs {
		if err := os.Remove(l.segPath(seq)); err != nil {
			return err
		}
	}
	l.syncDir()
	l.log.Info().Int("jobs", len(jobs)).Uint64("max_id", lastID).Str("file", final).
		Msg("wal: a single node's log became a cluster member's")
	return nil
}

// writeDurably writes b to a new file at path and fsyncs it.
func writeDurably(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}

// AppendGroup appends a cluster log's frames, the size bytes encode
// appends to its argument, to one segment, and returns their LSN (durable
// once OnDurable says so), their segment and their offset there; maxID is
// the highest job id their records name. It is never refused but after
// Close: a write that fails is retried, and nothing after it becomes
// durable meanwhile (doc.go, "Cluster mode"). encode runs under the log's
// mutex.
func (l *Log) AppendGroup(size int, encode func([]byte) []byte, maxID uint64) (lsn uint64, seg uint32, off int64, err error) {
	return l.AppendGroupCheckpoint(size, encode, maxID, nil)
}

// AppendGroupCheckpoint is AppendGroup, and when checkpoint is not nil it
// is SetCheckpoint too, in one step: every segment begun after the group
// begins with checkpoint, every one begun before it (the group's own, if
// appends move on for it) with the one before. A group that changes the
// state the checkpoint holds (a hard state, a membership, a snapshot)
// must come this way: the writer moves to the spare on its own once the
// current segment outgrew its size (core.ready), so between AppendGroup
// and SetCheckpoint it may begin a segment with the older checkpoint,
// after the group, and a replay of that segment would end with the older
// state.
func (l *Log) AppendGroupCheckpoint(size int, encode func([]byte) []byte, maxID uint64, checkpoint []byte) (lsn uint64, seg uint32, off int64, err error) {
	return l.appendGroup(size, encode, maxID, checkpoint, false)
}

// AppendGroupUnsynced is AppendGroupCheckpoint for a group that asks for
// no fsync of its own: it is written with the others, and durable once an
// fsync something else asks for covers it (a later group's, compaction's,
// Close's). For what a crash may lose without harm, such as a hard state
// that only raises the commit index; an idle log may hold it unsynced
// until Close.
func (l *Log) AppendGroupUnsynced(size int, encode func([]byte) []byte, maxID uint64, checkpoint []byte) (lsn uint64, seg uint32, off int64, err error) {
	return l.appendGroup(size, encode, maxID, checkpoint, true)
}

func (l *Log) appendGroup(size int, encode func([]byte) []byte, maxID uint64, checkpoint []byte, lazy bool) (lsn uint64, seg uint32, off int64, err error) {
	l.mu.Lock()
	lsn, seg, off, err = l.core.appendGroup(int64(size), encode, maxID, lazy)
	if err == nil && checkpoint != nil {
		l.core.checkpoint = append(l.core.checkpoint[:0], checkpoint...)
	}
	kick := err == nil && l.core.kickWanted()
	l.mu.Unlock()
	if kick {
		l.poke()
	}
	return lsn, seg, off, err
}

// SetCheckpoint sets the frame written first in every segment from the
// next one on: what a cluster log needs to start from the segments left
// after older ones are removed. Before Start it is the first segment's;
// after, a checkpoint that a group changes goes with the group
// (AppendGroupCheckpoint).
func (l *Log) SetCheckpoint(frame []byte) {
	l.mu.Lock()
	l.core.checkpoint = append(l.core.checkpoint[:0], frame...)
	l.mu.Unlock()
}

// Moved tells the log where jobs' latest full records are now, as the
// cluster log applies its entries: what compaction counts as live.
func (l *Log) Moved(moves []Move) {
	l.mu.Lock()
	for _, m := range moves {
		l.core.moved(m)
	}
	l.mu.Unlock()
}

// ResetLive says that nothing counted live before is: a snapshot was
// installed, and its records are what is live now (Moved).
func (l *Log) ResetLive() {
	l.mu.Lock()
	l.core.resetLive()
	l.mu.Unlock()
}

// Hold says that the cluster log needs every segment from seq on; 0:
// none. A segment before it, with nothing live, is removed once what was
// appended meanwhile is durable.
func (l *Log) Hold(seq uint32) {
	if seq == 0 {
		seq = noneHeld
	}
	l.mu.Lock()
	l.core.heldFrom = seq
	l.mu.Unlock()
	l.poke()
}

// SetMigrator sets (or, nil, clears) what moves live jobs out of the
// oldest segment: a cluster's serving leader's store. Without one a
// cluster log never migrates.
func (l *Log) SetMigrator(m Migrator) {
	l.migrator.Store(migratorBox{m})
	l.mu.Lock()
	l.core.migrating = m != nil
	l.mu.Unlock()
	l.poke()
}

// Full reports whether a single node would take deletes alone: no spare
// segment could be made (the disk is full), or too much waits for an
// fsync that keeps failing. A cluster log still takes every write; its
// leader's journal refuses new work meanwhile.
func (l *Log) Full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.onlyDeletes()
}

// RaiseID says that frames replayed named ids up to id: the wal sees no
// record of a cluster's, and the header of each segment it begins holds
// the highest id named before it (FloorID, after a restart).
func (l *Log) RaiseID(id uint64) {
	l.mu.Lock()
	l.core.sawID(id)
	l.mu.Unlock()
}

// FloorID is the id in the oldest segment's header when the log was
// opened: at least every id named by segments removed before.
func (l *Log) FloorID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.core.order) == 0 {
		return 0
	}
	return l.core.order[0].headerID
}

// ReadFrame reads back the frame of size bytes at off in segment seq,
// checks it, and returns its payload. The frame must be written (durable,
// say) and its segment not removed: the cluster log keeps what it may
// read (Hold).
func (l *Log) ReadFrame(seq uint32, off int64, size int) ([]byte, error) {
	var b []byte
	return l.ReadFrameInto(&b, seq, off, size)
}

// ReadFrameInto is ReadFrame into *buf, grown if it is too small and
// kept for the next read: the payload it returns is valid until then.
// What streams many frames back (a snapshot's records) reads them so,
// rather than leave a buffer per frame to the collector.
func (l *Log) ReadFrameInto(buf *[]byte, seq uint32, off int64, size int) ([]byte, error) {
	f, err := l.reader(seq)
	if err != nil {
		return nil, err
	}
	if cap(*buf) < size {
		*buf = make([]byte, size)
	}
	b := (*buf)[:size]
	if _, err := f.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("wal: reading %s at %d: %w", l.segPath(seq), off, err)
	}
	payload, n, err := checkFrame(b, 0, maxClusterPayload)
	if err == nil && n != size {
		err = errCorrupt
	}
	if err != nil {
		return nil, fmt.Errorf("wal: %s: damaged frame at offset %d: %w", l.segPath(seq), off, err)
	}
	return payload, nil
}

// maxReaders bounds the descriptors kept open for reading back.
const maxReaders = 16

// reader returns a descriptor to read segment seq, opened if need be.
func (l *Log) reader(seq uint32) (*os.File, error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	if f := l.readers[seq]; f != nil {
		return f, nil
	}
	if l.readers == nil {
		l.readers = make(map[uint32]*os.File)
	}
	if len(l.readers) >= maxReaders {
		for s, f := range l.readers { // any one: reads of old entries are rare
			_ = f.Close()
			delete(l.readers, s)
			break
		}
	}
	f, err := l.reserve.open(func() (*os.File, error) { return os.Open(l.segPath(seq)) })
	if err != nil {
		return nil, err
	}
	l.readers[seq] = f
	return f, nil
}

// closeReader closes segment seq's read descriptor before the file goes.
func (l *Log) closeReader(seq uint32) {
	l.readMu.Lock()
	if f := l.readers[seq]; f != nil {
		_ = f.Close()
		delete(l.readers, seq)
	}
	l.readMu.Unlock()
}

// BeginFrame appends a frame's header to dst, to be filled in by
// EndFrame once its payload follows.
func BeginFrame(dst []byte) []byte { return append(dst, make([]byte, frameHeader)...) }

// EndFrame fills in the header of the frame begun at start in dst: the
// payload's length and CRC.
func EndFrame(dst []byte, start int) []byte {
	payload := dst[start+frameHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32Update(payload))
	return dst
}

// ScanFrames calls fn with the kind, id and frame size of each record in
// b, whole frames written by this process or checked already
// (DecodeFrames): their CRCs are not checked again and nothing is
// decoded past the id.
func ScanFrames(b []byte, fn func(kind Kind, id uint64, size int)) error {
	for len(b) > 0 {
		kind, id, size, err := NextFrame(b)
		if err != nil {
			return err
		}
		fn(kind, id, size)
		b = b[size:]
	}
	return nil
}

// NextFrame reads the kind, id and size of the record frame at the start
// of b, as ScanFrames does: its CRC is not checked.
func NextFrame(b []byte) (kind Kind, id uint64, size int, err error) {
	if len(b) < frameHeader+9 {
		return 0, 0, 0, errCorrupt
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 9 || frameHeader+n > len(b) {
		return 0, 0, 0, errCorrupt
	}
	return Kind(b[frameHeader]), binary.LittleEndian.Uint64(b[frameHeader+1:]), frameHeader + n, nil
}
