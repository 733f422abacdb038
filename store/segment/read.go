package segment

import (
	"fmt"
	"os"
)

// maxReaders bounds the descriptors kept open for reading back.
const maxReaders = 16

// ReadFrame reads back the frame of size bytes at off in segment seq,
// checks it, and returns its payload. The frame must be written (durable,
// say) and its segment not removed: its user keeps what it may read
// (Hold).
func (l *Log) ReadFrame(seq uint32, off int64, size int) ([]byte, error) {
	var b []byte
	return l.ReadFrameInto(&b, seq, off, size)
}

// ReadFrameInto is ReadFrame into *buf, grown if it is too small and kept
// for the next read: the payload it returns is valid until then. What
// streams many frames back (a snapshot's records) reads them so, rather
// than leave a buffer per frame to the collector.
func (l *Log) ReadFrameInto(buf *[]byte, seq uint32, off int64, size int) ([]byte, error) {
	span, err := l.ReadSpan(buf, seq, off, off+int64(size))
	if err != nil {
		return nil, err
	}
	return span.Frame(off, size)
}

// checkFrame checks b, the frame read back from off in segment seq, and
// returns its payload.
func (l *Log) checkFrame(seq uint32, off int64, b []byte) ([]byte, error) {
	payload, n, err := CheckFrame(b, maxFrame)
	if err == nil && n != len(b) {
		err = ErrCorrupt
	}
	if err != nil {
		return nil, &DamageError{Path: l.segPath(seq), Offset: off, Err: err}
	}
	return payload, nil
}

// Span is a run of a segment's bytes read back at once (ReadSpan), for
// the frames in it: one read for many frames written one after another,
// where ReadFrame makes one each.
type Span struct {
	l   *Log
	seq uint32
	off int64
	b   []byte
}

// ReadSpan reads back the bytes of segment seq from off to end into
// *buf, grown if it is too small and kept for the next read, as
// ReadFrameInto does: the span is valid until then. They must be
// written, as ReadFrame's frame must.
func (l *Log) ReadSpan(buf *[]byte, seq uint32, off, end int64) (Span, error) {
	if int64(cap(*buf)) < end-off {
		*buf = make([]byte, end-off)
	}
	b := (*buf)[:end-off]
	if err := l.readAt(seq, b, off); err != nil {
		return Span{}, err
	}
	return Span{l: l, seq: seq, off: off, b: b}, nil
}

// Frame checks the frame of size bytes at off, within the span, as
// ReadFrame does, and returns its payload, which aliases the span: a
// caller that keeps it past the next read into the span's buffer copies
// it.
func (s Span) Frame(off int64, size int) ([]byte, error) {
	at := off - s.off
	if at < 0 || at+int64(size) > int64(len(s.b)) {
		return nil, fmt.Errorf("segment: the frame at %d (%d bytes) is outside the span read from %d (%d bytes)", off, size, s.off, len(s.b))
	}
	return s.l.checkFrame(s.seq, off, s.b[at:at+int64(size)])
}

// readAt reads b from off in segment seq, with the segment's read
// descriptor, opened if need be. The descriptor stays open while it reads
// (readMu, shared): another read closed it for one of its own
// (maxReaders) at times, between its look-up and its read, and the read
// failed on a closed file. readMu is held whole only to open or close a
// descriptor, not across a read (the writer closes one before a removal):
// a descriptor opened here and closed by another before this read takes
// it is opened again, and the third time read under the whole lock.
func (l *Log) readAt(seq uint32, b []byte, off int64) error {
	for try := 0; ; try++ {
		l.readMu.RLock()
		f := l.readers[seq]
		if f != nil {
			_, err := f.ReadAt(b, off)
			l.readMu.RUnlock()
			return l.readError(seq, off, err)
		}
		l.readMu.RUnlock()
		l.readMu.Lock()
		f, err := l.readerLocked(seq)
		if err == nil && try == 2 {
			_, err = f.ReadAt(b, off)
			err = l.readError(seq, off, err)
		}
		l.readMu.Unlock()
		if err != nil || try == 2 {
			return err
		}
	}
}

// readError is a read's error, naming the segment, or nil.
func (l *Log) readError(seq uint32, off int64, err error) error {
	if err != nil {
		return fmt.Errorf("segment: reading %s at %d: %w", l.segPath(seq), off, err)
	}
	return nil
}

// readerLocked returns a descriptor to read segment seq, opened if need
// be. readMu must be held whole.
func (l *Log) readerLocked(seq uint32) (*os.File, error) {
	if f := l.readers[seq]; f != nil {
		return f, nil
	}
	if l.readers == nil {
		l.readers = make(map[uint32]*os.File)
	}
	if len(l.readers) >= maxReaders {
		for s, f := range l.readers { // any one: reads of old frames are rare
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
