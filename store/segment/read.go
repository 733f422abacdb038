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
	f, err := l.reader(seq)
	if err != nil {
		return nil, err
	}
	if cap(*buf) < size {
		*buf = make([]byte, size)
	}
	b := (*buf)[:size]
	if _, err := f.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("segment: reading %s at %d: %w", l.segPath(seq), off, err)
	}
	payload, n, err := CheckFrame(b, maxFrame)
	if err == nil && n != size {
		err = ErrCorrupt
	}
	if err != nil {
		return nil, &DamageError{Path: l.segPath(seq), Offset: off, Err: err}
	}
	return payload, nil
}

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
