package wal

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Importer reads a foreign log format in the directory (beanstalkd's
// binlog files: see package cbinlog) so Sprout can take over from it.
type Importer interface {
	// Files lists the paths of the foreign log files in dir.
	Files(dir string) ([]string, error)
	// Read returns the live jobs as KindFull records and the highest id
	// the foreign log ever issued.
	Read(dir string, maxJobSize int) ([]Record, uint64, error)
}

// load replays the directory (importing foreign files first if they are
// all there is) and fills l.recovered, the segment table and lastID.
func (l *Log) load() error {
	seqs, err := listSegments(l.dir)
	if err != nil {
		return err
	}
	if len(seqs) == 0 && l.opts.Importer != nil {
		if seqs, err = l.importForeign(); err != nil {
			return err
		}
	}
	// A crash tears the end of the last segment holding records; spares
	// preallocated after it hold none, so they do not make it an earlier one.
	lastUsed := len(seqs) - 1
	for lastUsed > 0 && segmentEmpty(filepath.Join(l.dir, segmentName(seqs[lastUsed]))) {
		lastUsed--
	}
	live := make(map[uint64]*Recovered)
	for i, seq := range seqs {
		if err := l.replaySegment(seq, i >= lastUsed, live); err != nil {
			return err
		}
	}
	l.recovered = make([]Recovered, 0, len(live))
	for _, r := range live {
		l.recovered = append(l.recovered, *r)
	}
	sort.Slice(l.recovered, func(i, k int) bool { return l.recovered[i].ID < l.recovered[k].ID })
	for _, r := range l.recovered {
		l.core.recoverJob(r.ID, r.Loc)
	}
	return nil
}

func listSegments(dir string) ([]uint32, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint32
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "sprout.") || !strings.HasSuffix(name, ".wal") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "sprout."), ".wal"), 10, 32)
		if err != nil || n == 0 {
			continue
		}
		seqs = append(seqs, uint32(n))
	}
	sort.Slice(seqs, func(i, k int) bool { return seqs[i] < seqs[k] })
	return seqs, nil
}

// replaySegment applies one segment's records to live. A damaged record
// at the very end of the last segment is a write torn by a crash: it is cut
// off with a warning. Damage anywhere else stops the start, unless
// SkipDamaged is set.
func (l *Log) replaySegment(seq uint32, last bool, live map[uint64]*Recovered) error {
	var rec Record
	return l.walkSegment(seq, last, func(data []byte, off int) (int, error) {
		size, err := l.readFrame(data, off, &rec)
		if err == nil {
			l.apply(&rec, Loc{Seg: seq, Size: uint32(size)}, live)
		}
		return size, err
	})
}

// replayStopped is a frame's error that stops the start whatever
// SkipDamaged says: a cluster log's refusal of what it read.
type replayStopped struct{ err error }

func (e replayStopped) Error() string { return e.err.Error() }

// walkSegment checks segment seq's header against the log's mode and
// calls frame with the offset of each frame, in order; frame returns the
// frame's size (negative when its length cannot be trusted) and an error
// if the frame is damaged. A damaged frame at the very end of the last
// segment (last) is a write torn by a crash: it is cut off with a
// warning. Damage anywhere else stops the start, unless SkipDamaged is
// set. A segment of zeros (its preallocation cut short) is removed.
func (l *Log) walkSegment(seq uint32, last bool, frame func(data []byte, off int) (int, error)) error {
	path := filepath.Join(l.dir, segmentName(seq))
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if allZero(data) {
		// The server died while making this segment: it is zero-filled
		// before its header is written, and it never held a record.
		l.log.Warn().Str("file", path).Msg("wal: removing a segment whose preallocation was cut short")
		return os.Remove(path)
	}
	if len(data) < headerSize || string(data[:8]) != magic {
		return fmt.Errorf("wal: %s: not a Sprout segment", path)
	}
	switch v := binary.LittleEndian.Uint32(data[8:]); {
	case v == l.version():
	case v == clusterVersion:
		return fmt.Errorf("wal: %s is a cluster member's log: start it as that member (--node), or on another directory", l.dir)
	case v == version:
		return fmt.Errorf("wal: %s is a single node's log: it becomes a cluster's first member only if that member is the cluster's only one (--cluster-peers)", l.dir)
	default:
		return fmt.Errorf("wal: %s: unknown version %d", path, v)
	}
	headerID := binary.LittleEndian.Uint64(data[headerIDOffset:])
	l.core.sawID(headerID)
	fileSize := len(data)

	off := headerSize
	for off < len(data) {
		if allZero(data[off:]) {
			break // preallocated space never written
		}
		size, err := frame(data, off)
		if err == nil {
			off += size
			continue
		}
		if stop, ok := err.(replayStopped); ok {
			return stop.err
		}
		if last && frameTail(data, off) {
			l.log.Warn().Str("file", path).Int("offset", off).Msg("wal: cutting off a torn record at the end of the log")
			if err := os.Truncate(path, int64(off)); err != nil {
				return err
			}
			fileSize = off
			break
		}
		if !l.opts.SkipDamaged {
			return fmt.Errorf("wal: %s: damaged record at offset %d: %w (start with the skip-damaged flag to skip it)", path, off, err)
		}
		l.log.Error().Str("file", path).Int("offset", off).Msg("wal: skipping damaged record")
		if size <= 0 {
			break // its length is unreadable: nothing after it can be framed
		}
		off += size
	}
	l.core.recoverSegment(seq, int64(fileSize), headerID)
	return nil
}

// readFrame checks and decodes the frame at off. It returns the frame's
// size, or a negative size when its length field cannot be trusted.
func (l *Log) readFrame(data []byte, off int, r *Record) (int, error) {
	payload, size, err := checkFrame(data, off, maxPayload)
	if err != nil {
		return size, err
	}
	return size, decodePayload(payload, r)
}

// checkFrame checks the frame at off, of at most limit bytes of payload,
// against its length and CRC, and returns its payload and size; a
// negative size when its length field cannot be trusted.
func checkFrame(data []byte, off, limit int) (payload []byte, size int, err error) {
	if len(data)-off < frameHeader {
		return nil, -1, errCorrupt
	}
	n := int(binary.LittleEndian.Uint32(data[off:]))
	if n == 0 || n > limit || off+frameHeader+n > len(data) {
		return nil, -1, errCorrupt
	}
	payload = data[off+frameHeader : off+frameHeader+n]
	if binary.LittleEndian.Uint32(data[off+4:]) != crc32Update(payload) {
		return nil, frameHeader + n, errCorrupt
	}
	return payload, frameHeader + n, nil
}

// frameTail reports whether a bad frame at off is the last thing written:
// nothing but zeros (preallocated space) follows where it would end.
func frameTail(data []byte, off int) bool {
	end := len(data)
	if len(data)-off >= frameHeader {
		if n := int(binary.LittleEndian.Uint32(data[off:])); n > 0 && off+frameHeader+n < end {
			end = off + frameHeader + n
		}
	}
	return allZero(data[end:])
}

func (l *Log) apply(r *Record, loc Loc, live map[uint64]*Recovered) {
	l.core.sawID(r.ID)
	if r.Kind == KindFull {
		r.Body = append([]byte(nil), r.Body...) // r.Body is the segment's bytes
	}
	Fold(live, r, loc)
}

// Fold makes live, the latest state of each job by id, what it is after
// r, as replay does: a full record sets the job (keeping r's body, not a
// copy), an update changes it, a delete drops it. A reserved job counts
// as ready (reservations do not survive), and an update of a job not in
// live is skipped: its full record was in a segment already removed, so
// it died or was written again later. A cluster's snapshot is this
// fold of the log up to an index (internal/replication).
func Fold(live map[uint64]*Recovered, r *Record, loc Loc) {
	switch r.Kind {
	case KindFull:
		rec := *r
		if rec.State == StateReserved {
			rec.State = StateReady
		}
		live[r.ID] = &Recovered{Record: rec, Loc: loc}
	case KindUpdate:
		j := live[r.ID]
		if j == nil {
			return
		}
		j.State, j.Pri, j.Delay, j.TTR = r.State, r.Pri, r.Delay, r.TTR
		j.CreatedAt, j.Deadline = r.CreatedAt, r.Deadline
		j.Reserves, j.Timeouts, j.Releases, j.Buries, j.Kicks = r.Reserves, r.Timeouts, r.Releases, r.Buries, r.Kicks
		if j.State == StateReserved {
			j.State = StateReady
		}
	case KindDelete:
		delete(live, r.ID)
	}
}

// importForeign writes the foreign log's live jobs into a first Sprout
// segment, made durable and atomically renamed into place before the
// foreign files are removed, so a crash at any point leaves one complete
// copy.
func (l *Log) importForeign() ([]uint32, error) {
	files, err := l.opts.Importer.Files(l.dir)
	if err != nil || len(files) == 0 {
		return nil, err
	}
	recs, maxID, err := l.opts.Importer.Read(l.dir, l.opts.MaxJobSize)
	if err != nil {
		return nil, fmt.Errorf("wal: importing beanstalkd binlog: %w", err)
	}
	buf := make([]byte, headerSize, headerSize+len(recs)*128)
	copy(buf, magic)
	putU32(buf[8:], version)
	putU64(buf[16:], maxID)
	for i := range recs {
		recs[i].Kind = KindFull
		buf = appendFrame(buf, &recs[i])
	}
	final := filepath.Join(l.dir, segmentName(1))
	tmp := final + ".import"
	if err := writeDurably(tmp, buf); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	l.syncDir()
	for _, path := range files {
		if err := os.Remove(path); err != nil {
			l.log.Warn().Err(err).Str("file", path).Msg("wal: cannot remove imported binlog file")
		}
	}
	l.log.Info().Int("jobs", len(recs)).Int("files", len(files)).Uint64("max_id", maxID).Msg("wal: imported beanstalkd binlog")
	return []uint32{1}, nil
}

// segmentEmpty reports whether the segment at path holds no record: a
// spare, preallocated and never written, or one whose preallocation a
// crash cut short (all zeros).
func segmentEmpty(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	return allZero(data) || len(data) >= headerSize && string(data[:8]) == magic && allZero(data[headerSize:])
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func putU32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }
func putU64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }
