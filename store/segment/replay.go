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

// load replays every segment of the directory in order, calling replay
// with each frame, and tells the core what it found: the segments, their
// sizes and header ids.
//
// A crash tears the end of the last segment that holds frames (beyond its
// checkpoint, with Options.Checkpoints): spares made after it hold none,
// so they do not make it an earlier one; with Checkpoints a spare never
// written to is removed first, its header's id being older than what was
// written after it was made.
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
	var buf []byte // every segment's bytes in turn: frames die with their replay's call
	for i, seq := range seqs {
		if buf, err = l.walkSegment(seq, i >= lastUsed, buf, replay); err != nil {
			return err
		}
	}
	return nil
}

// walkSegment checks segment seq's header against the log's version and
// calls replay with each frame, in order. A damaged frame (a bad length
// or CRC, or replay's ErrCorrupt) at the very end of the last segment
// (last) is a write torn by a crash: it is cut off with a warning. Damage
// anywhere else stops the start, unless SkipDamaged is set. A segment of
// zeros (its preallocation cut short) is removed. The segment is read
// into buf, grown as needed and returned for the next.
func (l *Log) walkSegment(seq uint32, last bool, buf []byte, replay func(Frame) error) ([]byte, error) {
	path := l.segPath(seq)
	data, err := readInto(path, buf)
	if err != nil {
		return buf, err
	}
	buf = data
	if allZero(data) {
		// The server died while making this segment: it is zero-filled
		// before its header is written, and it never held a frame.
		l.log.Warn().Str("file", path).Msg("segment: removing a segment whose preallocation was cut short")
		return buf, os.Remove(path)
	}
	if len(data) < HeaderSize || string(data[:8]) != magic {
		return buf, fmt.Errorf("%w: %s", ErrNotSegment, path)
	}
	version := binary.LittleEndian.Uint32(data[8:])
	if version != l.opts.Version && !slices.Contains(l.opts.Reads, version) {
		return buf, &VersionError{Path: path, Version: version, Want: l.opts.Version}
	}
	headerID := binary.LittleEndian.Uint64(data[headerIDOffset:])
	l.core.sawID(headerID)
	fileSize := len(data)

	off := HeaderSize
	for off < len(data) {
		if allZero(data[off:]) {
			break // preallocated space never written
		}
		size, err := l.replayFrame(seq, version, data, off, replay)
		if err == nil {
			off += size
			continue
		}
		if stop, ok := err.(replayStopped); ok {
			return buf, stop.err
		}
		if last && frameTail(data[off:], l.opts.MaxPayload) {
			l.log.Warn().Str("file", path).Int("offset", off).Msg("segment: cutting off a torn frame at the end of the log")
			if err := os.Truncate(path, int64(off)); err != nil {
				return buf, err
			}
			fileSize = off
			break
		}
		if !l.opts.SkipDamaged {
			return buf, &DamageError{Path: path, Offset: int64(off), Err: err}
		}
		l.log.Error().Str("file", path).Int("offset", off).Msg("segment: skipping a damaged frame")
		if size <= 0 {
			break // its length is unreadable: nothing after it can be framed
		}
		off += size
	}
	l.core.recoverSegment(seq, int64(fileSize), headerID)
	return buf, nil
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
			return size, err
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
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	header := make([]byte, HeaderSize)
	n, _ := io.ReadFull(f, header)
	if n == HeaderSize && string(header[:8]) == magic {
		return zerosFrom(f, HeaderSize)
	}
	return allZero(header[:n]) && zerosFrom(f, int64(n))
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
