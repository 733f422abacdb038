package segment

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// allocate reserves the blocks of a segment up front, so a full disk shows
// up when a segment is created, not in the middle of a commit. With zero
// it writes zeros, as beanstalkd does, rather than only fallocating:
// fdatasync of a write into an fallocated (unwritten) extent must also
// commit the extent's conversion to the journal, which made every group
// commit several times slower. A bulk writer (Log.SetBulk) goes without:
// it fills a segment whole between fsyncs, and the zeros would double
// what it writes.
func allocate(f *os.File, size int64, zero bool) error {
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		return err
	}
	if !zero {
		return nil
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		n := min(int64(len(zeros)), size-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
	}
	return nil
}

// allocated is what a file holds on disk: its size, or less where it has
// holes (a room file copied by a tool that keeps them, whose blocks were
// never allocated: cp --sparse=always, rsync -S).
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return min(fi.Size(), st.Blocks*512)
	}
	return fi.Size()
}

// lockCmd takes an open file description lock. It conflicts with the
// classic fcntl lock beanstalkd takes on the same file, and, unlike a
// classic lock, also with a second lock taken in this process: classic
// locks belong to the process, so a second Open would succeed and its
// closing would drop the first Open's lock.
const lockCmd = unix.F_OFD_SETLK

func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
