package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// Frame is a frame found at Open.
type Frame struct {
	Seg     uint32 // its segment
	Off     int64  // its offset there
	Size    int    // its bytes, header included
	Payload []byte // valid only during the replay's call
	Version uint32 // its segment's (Options.Version, or one of Reads)
}

// replayStopped is a replay's error that stops Open whatever SkipDamaged
// says: the user's refusal of what it read.
type replayStopped struct{ err error }

func (e replayStopped) Error() string { return e.err.Error() }

// replayCorrupt is replay's ErrCorrupt for a frame whose length and CRC
// check: whatever its segment's seal, damage, never a tear (a torn frame
// does not check).
type replayCorrupt struct{ err error }

func (e replayCorrupt) Error() string { return e.err.Error() }
func (e replayCorrupt) Unwrap() error { return e.err }

// load replays every segment of the directory in order, calling replay
// with each frame, and tells the core what it found: the segments, their
// sizes and header ids. Then it seals the segments the crashed run left
// open (doc.go, Recovery), so that only the next run's are open if it
// crashes in turn.
//
// By an earlier release's rule (unknown seals), a crash tears the end of
// the last segment that holds frames (beyond its checkpoint, with
// Options.Checkpoints): spares made after it hold none, so they do not
// make it an earlier one; with Checkpoints a spare never written to is
// removed first, its header's id being older than what was written after
// it was made. A segment left open may hold a tear when every segment
// after it is open too or empty (tearFrom).
func (l *Log) load(replay func(Frame) error) error {
	seqs, err := l.dir.Segments()
	if err != nil {
		return err
	}
	unused := segmentEmpty
	if l.opts.Checkpoints {
		used := seqs[:0]
		for _, seq := range seqs {
			if segmentEmpty(l.segPath(seq)) {
				if err := l.dir.Remove(seq); err != nil {
					return err
				}
				continue
			}
			used = append(used, seq)
		}
		seqs, unused = used, onlyCheckpoint
	}
	lastUsed := len(seqs) - 1
	for lastUsed > 0 && unused(l.segPath(seqs[lastUsed])) {
		lastUsed--
	}
	tearFrom := len(seqs)
	for tearFrom > 0 && (segmentOpen(l.segPath(seqs[tearFrom-1])) || segmentEmpty(l.segPath(seqs[tearFrom-1]))) {
		tearFrom--
	}
	var (
		buf    []byte // every segment's bytes in turn: frames die with their replay's call
		opened []walked
	)
	for i, seq := range seqs {
		var w walked
		if buf, w, err = l.walkSegment(seq, i >= lastUsed, i >= tearFrom, buf, replay); err != nil {
			return err
		}
		if w.open {
			opened = append(opened, w)
		}
		if w.tornAt > 0 {
			if err := l.cutTear(w, seqs[i+1:]); err != nil {
				return err
			}
			break
		}
	}
	for _, w := range opened {
		if err := l.sealFound(w); err != nil {
			return err
		}
	}
	return nil
}

// walked is what walkSegment found in a segment left open by the run
// that crashed.
type walked struct {
	seq  uint32
	open bool
	// end is where its frames end (the first byte of a tear, or of the
	// zeros after them), or 0 if damage SkipDamaged skipped ends them
	// instead: the file can then be neither trimmed nor sealed.
	end int64
	// tornAt is where a tear begins (the segment is to be cut off there
	// and every later one removed), or 0.
	tornAt int64
}

// cutTear cuts w's segment off where its tear begins and removes the
// segments after it (open, or empty: they hold nothing written before the
// tear), with a warning for each that holds frames. The removals are made
// durable first: a crash between must not leave the tear cut and later
// frames replayed after the gap.
func (l *Log) cutTear(w walked, later []uint32) error {
	for _, seq := range later {
		// The ids its header names were issued: the next ones must not
		// be given again, whatever the frames removed with it held.
		withHeader(l.segPath(seq), func(_ *os.File, header []byte, whole bool) bool {
			if whole {
				l.core.sawID(binary.LittleEndian.Uint64(header[headerIDOffset:]))
			}
			return whole
		})
		if !segmentEmpty(l.segPath(seq)) {
			l.log.Warn().Str("file", l.segPath(seq)).Msg("segment: removing a segment written after a torn frame")
		}
		if err := l.dir.Remove(seq); err != nil {
			return err
		}
	}
	if len(later) > 0 {
		l.dir.Sync()
	}
	return os.Truncate(l.segPath(w.seq), w.tornAt)
}

// sealFound seals a segment Open found open, once replayed: its frames
// fsynced first (a process that crashed left them in the page cache), then
// as a retirement does. One whose frames damage ends is marked unknown.
func (l *Log) sealFound(w walked) error {
	f, err := os.OpenFile(l.segPath(w.seq), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if w.end > 0 {
		err = seal(f, w.end, true)
	} else {
		err = unseal(f)
	}
	return errors.Join(err, f.Close())
}

// walkSegment checks segment seq's header against the log's version and
// calls replay with each frame, in order. What a damaged frame (a bad
// length or CRC, or replay's ErrCorrupt) is depends on the segment's seal
// (doc.go, Recovery). In a segment left open, when tearable (every later
// segment is open or empty), the first is a tear: walked says where, and
// load cuts it. In a sealed one, none is. In one whose seal is unknown, or
// an open one that is not tearable, one at the very end of the last
// segment (last) is a tear, cut off here with a warning. Damage anywhere
// else stops the start, unless SkipDamaged is set. A segment of zeros (its
// preallocation cut short) is removed. The segment is read into buf,
// grown as needed and returned for the next.
func (l *Log) walkSegment(seq uint32, last, tearable bool, buf []byte, replay func(Frame) error) ([]byte, walked, error) {
	path := l.segPath(seq)
	data, err := readInto(path, buf)
	if err != nil {
		return buf, walked{}, err
	}
	buf = data
	if allZero(data) {
		// The server died while making this segment: it is zero-filled
		// before its header is written, and it never held a frame.
		l.log.Warn().Str("file", path).Msg("segment: removing a segment whose preallocation was cut short")
		return buf, walked{}, os.Remove(path)
	}
	if len(data) < HeaderSize || string(data[:8]) != magic {
		return buf, walked{}, fmt.Errorf("%w: %s", ErrNotSegment, path)
	}
	version := binary.LittleEndian.Uint32(data[8:])
	if version != l.opts.Version && !slices.Contains(l.opts.Reads, version) {
		return buf, walked{}, &VersionError{Path: path, Version: version, Want: l.opts.Version}
	}
	headerID := binary.LittleEndian.Uint64(data[headerIDOffset:])
	l.core.sawID(headerID)
	fileSize := len(data)
	state := readSeal(data, int64(fileSize))
	w := walked{seq: seq, open: state == sealUnsealed}
	if w.open && !tearable {
		state = sealUnknown // an earlier release wrote after it: its rule
	}

	off := HeaderSize
	unframed := false // damage skipped left what follows unread
	for off < len(data) {
		if state != sealSealed && allZero(data[off:]) {
			break // preallocated space never written
		}
		size, err := l.replayFrame(seq, version, data, off, replay)
		if err == nil {
			off += size
			continue
		}
		if stop, ok := err.(replayStopped); ok {
			return buf, walked{}, stop.err
		}
		rc, checked := err.(replayCorrupt) // its frame checks: not torn
		if checked {
			err = rc.err
		}
		if state == sealUnsealed && !checked && !lengthAboveLimit(data[off:], l.opts.MaxPayload) {
			l.log.Warn().Str("file", path).Int("offset", off).Msg("segment: cutting off a torn frame at the end of the log")
			w.tornAt, w.end = int64(off), int64(off)
			l.core.recoverSegment(seq, int64(off), headerID)
			return buf, w, nil
		}
		if state == sealUnknown && last && frameTail(data[off:], l.opts.MaxPayload) {
			l.log.Warn().Str("file", path).Int("offset", off).Msg("segment: cutting off a torn frame at the end of the log")
			if err := os.Truncate(path, int64(off)); err != nil {
				return buf, walked{}, err
			}
			fileSize = off
			break
		}
		if !l.opts.SkipDamaged {
			return buf, walked{}, &DamageError{Path: path, Offset: int64(off), Err: err}
		}
		if size <= 0 && state == sealSealed {
			// Its length is unreadable, but the sealed length is where
			// frames end: they resume where a run of them ends there.
			size = resync(data[off:], l.opts.MaxPayload)
		}
		l.log.Error().Str("file", path).Int("offset", off).Int("skipped", size).Msg("segment: skipping a damaged frame")
		if size <= 0 {
			unframed = true
			break // its length is unreadable: nothing after it can be framed
		}
		off += size
	}
	if w.open && !unframed {
		// Trimmed and sealed at off once every segment is replayed (load).
		w.end, fileSize = int64(off), off
	}
	l.core.recoverSegment(seq, int64(fileSize), headerID)
	return buf, w, nil
}

// readInto reads the file at path whole into buf, grown if it is too
// small, and returns its bytes.
func readInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := int(fi.Size())
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	n, err := io.ReadFull(f, buf[:size])
	if err != nil && err != io.ErrUnexpectedEOF {
		return nil, err
	}
	return buf[:n], nil
}

// replayFrame checks the frame at off and hands it to replay. It returns
// the frame's size (negative when its length cannot be trusted) and, if
// it is damaged, why; an error of replay's that is not ErrCorrupt stops
// the start (replayStopped).
func (l *Log) replayFrame(seq, version uint32, data []byte, off int, replay func(Frame) error) (int, error) {
	payload, size, err := CheckFrame(data[off:], l.opts.MaxPayload)
	if err != nil {
		return size, err
	}
	if err := replay(Frame{Seg: seq, Off: int64(off), Size: size, Payload: payload, Version: version}); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return size, replayCorrupt{err}
		}
		return size, replayStopped{err}
	}
	return size, nil
}

// segmentEmpty reports whether the segment at path holds no frame: a
// spare, preallocated and never written, or one whose preallocation a
// crash cut short (all zeros). It reads only up to the first written
// byte past the header: all of a spare, a block of any other.
func segmentEmpty(path string) bool {
	return withHeader(path, func(f *os.File, header []byte, whole bool) bool {
		if whole {
			return zerosFrom(f, HeaderSize)
		}
		return allZero(header) && zerosFrom(f, int64(len(header)))
	})
}

// segmentOpen reports whether the segment at path says it was left open
// (its seal): the crashed run was writing it.
func segmentOpen(path string) bool {
	return withHeader(path, func(_ *os.File, header []byte, whole bool) bool {
		return whole && readSeal(header, 0) == sealUnsealed
	})
}

// withHeader opens the file at path, reads up to a segment header's size
// of it and reports what fn says of it: the file, read that far, the
// bytes read, and whether they are a segment's header. False if the file
// cannot be opened.
func withHeader(path string, fn func(f *os.File, header []byte, whole bool) bool) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	header := make([]byte, HeaderSize)
	n, _ := io.ReadFull(f, header)
	return fn(f, header[:n], n == HeaderSize && string(header[:8]) == magic)
}

// onlyCheckpoint reports whether the segment at path holds no frame but
// its first, its checkpoint: a spare never written, or the segment appends
// had just moved to.
func onlyCheckpoint(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() < HeaderSize {
		return false
	}
	head := make([]byte, HeaderSize+FrameHeader)
	n, _ := io.ReadFull(f, head)
	if string(head[:8]) != magic {
		return false
	}
	rest := int64(HeaderSize)
	if n == len(head) {
		if size := int64(binary.LittleEndian.Uint32(head[HeaderSize:])); size > 0 && FrameHeader+size <= fi.Size()-HeaderSize {
			rest += FrameHeader + size
		}
	}
	return zerosFrom(f, rest)
}

// zerosFrom reports whether f holds only zeros from off to its end,
// reading a block at a time and stopping at the first byte that is not.
func zerosFrom(f *os.File, off int64) bool {
	block := make([]byte, 64<<10)
	for {
		n, err := f.ReadAt(block, off)
		if !allZero(block[:n]) {
			return false
		}
		off += int64(n)
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
}
