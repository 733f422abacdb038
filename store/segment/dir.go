package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	// HeaderSize is the size of a segment's header: magic, version, seal,
	// and the highest id issued (or named) when the segment began. The
	// first frame starts there.
	HeaderSize = 24
	magic      = "SPROUTWL"
	// sealOffset is where a segment's header holds its seal (doc.go,
	// Recovery): 0 unknown (an earlier release's), sealOpen, or the length
	// the segment was sealed at.
	sealOffset = 12
	// sealOpen is the seal of a segment this release made and has not
	// sealed yet: no length is that large (a longer segment is left
	// unknown), and each byte of it differs from a length's high byte.
	sealOpen = math.MaxUint32
	// headerIDOffset is where a segment's header holds its id.
	headerIDOffset = 16
)

// sealState is what a segment's seal says of it at Open.
type sealState uint8

const (
	sealUnknown  sealState = iota // an earlier release's, or a seal not to be trusted
	sealUnsealed                  // still open when its run ended
	sealSealed                    // every frame fsynced, the file trimmed to them
)

// readSeal reads the seal in hdr, a segment's header, against the file's
// size: a length is trusted only when it is the size, as sealing leaves
// it (a crash while sealing, or a torn seal, leaves the two apart).
func readSeal(hdr []byte, fileSize int64) sealState {
	switch v := binary.LittleEndian.Uint32(hdr[sealOffset:]); {
	case v == sealOpen:
		return sealUnsealed
	case v >= HeaderSize && int64(v) == fileSize:
		return sealSealed
	}
	return sealUnknown
}

// sealValue is the seal that says a segment of size bytes is sealed: the
// size, or 0 (unknown) if a seal cannot say it.
func sealValue(size int64) uint32 {
	if size < HeaderSize || size >= sealOpen {
		return 0
	}
	return uint32(size)
}

// seal seals f, a segment whose every frame an fsync has covered (or, with
// syncFirst, is fsynced first), at size bytes: it trims the file to size,
// writes size as the seal and fsyncs both (doc.go, Recovery). Trimmed
// first, so that a process dying between (or a reader copying the file)
// finds it open, not sealed at a size it does not have yet; a power loss
// may keep either without the other, which reads as open or unknown. A
// failure leaves the segment so too: either is safe.
func seal(f *os.File, size int64, syncFirst bool) error {
	if syncFirst {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, sealValue(size)), sealOffset); err != nil {
		return err
	}
	return f.Sync()
}

// unseal marks f's seal unknown, for a segment Open found open but cannot
// trim (damage it skipped ends its frames): what follows reads it by the
// rule for an earlier release's segments.
func unseal(f *os.File) error {
	if _, err := f.WriteAt(make([]byte, 4), sealOffset); err != nil {
		return err
	}
	return f.Sync()
}

// Dir is a directory of segments, locked for this process: what a Log is
// opened on, and what its users prepare before (a beanstalkd binlog
// imported, a single node's journal converted). It is safe for concurrent
// use.
type Dir struct {
	path string   // immutable
	lock *os.File // holds the directory lock until Close
	// file is the directory, kept open so that syncing it never needs a
	// new descriptor.
	file *os.File
}

// LockDir makes path if need be and takes beanstalkd's lock on it (an fcntl
// write lock on path/lock), so neither a second Sprout nor a beanstalkd
// can share the directory: ErrLocked if another holds it.
func LockDir(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(path, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(lock.Fd(), lockCmd, &lk); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	file, err := os.Open(path)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	return &Dir{path: path, lock: lock, file: file}, nil
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// Close drops the lock. A Log opened on d must be closed first.
func (d *Dir) Close() error {
	return errors.Join(d.file.Close(), d.lock.Close())
}

// SegmentName is the file name of segment seq.
func SegmentName(seq uint32) string { return fmt.Sprintf("sprout.%08d.wal", seq) }

// SegmentPath is the path of segment seq.
func (d *Dir) SegmentPath(seq uint32) string { return filepath.Join(d.path, SegmentName(seq)) }

// RoomName is the file that keeps room for deletes (doc.go, "Room for
// deletes").
const RoomName = "sprout.room"

// RoomPath is the path of the room file.
func (d *Dir) RoomPath() string { return filepath.Join(d.path, RoomName) }

// Segments lists the sequence numbers of the segment files, in order.
func (d *Dir) Segments() ([]uint32, error) {
	entries, err := os.ReadDir(d.path)
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

// Version is the version segment seq's header says; ok is false when it
// has no Sprout header (a segment whose preallocation a crash cut short,
// or not a segment).
func (d *Dir) Version(seq uint32) (version uint32, ok bool, err error) {
	return FileVersion(d.SegmentPath(seq))
}

// FileVersion is Dir.Version of the segment file at path, for readers
// that do not hold the directory (a spare being made has no header yet).
func FileVersion(path string) (version uint32, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	hdr := make([]byte, 12)
	n, _ := f.ReadAt(hdr, 0)
	_ = f.Close()
	if n != len(hdr) || string(hdr[:8]) != magic {
		return 0, false, nil
	}
	return binary.LittleEndian.Uint32(hdr[8:]), true, nil
}

// Create writes segment seq whole: a header of version and id, then
// frames. It is written to a temporary file, fsynced and renamed into
// place, so a crash leaves either no segment seq or all of it; it is
// sealed, as nothing writes to it again.
func (d *Dir) Create(seq, version uint32, id uint64, frames []byte) error {
	hdr := make([]byte, HeaderSize)
	putHeader(hdr, version, sealValue(int64(HeaderSize+len(frames))), id)
	final := d.SegmentPath(seq)
	tmp := final + ".new"
	if err := writeDurably(tmp, hdr, frames); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	d.Sync()
	return nil
}

// Remove removes segment seq; Sync makes it durable.
func (d *Dir) Remove(seq uint32) error { return os.Remove(d.SegmentPath(seq)) }

// Sync makes the directory's entries (a new, renamed or removed file)
// durable.
func (d *Dir) Sync() { _ = d.file.Sync() }

// putHeader fills in a segment's header.
func putHeader(hdr []byte, version, seal uint32, id uint64) {
	copy(hdr, magic)
	binary.LittleEndian.PutUint32(hdr[8:], version)
	binary.LittleEndian.PutUint32(hdr[sealOffset:], seal)
	binary.LittleEndian.PutUint64(hdr[headerIDOffset:], id)
}

// writeDurably writes parts, one after another, to a new file at path
// and fsyncs it.
func writeDurably(path string, parts ...[]byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	for _, b := range parts {
		if _, err = f.Write(b); err != nil {
			break
		}
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
