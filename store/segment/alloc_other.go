//go:build !linux

package segment

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocate extends the file; without fallocate the blocks are not
// reserved, so a full disk shows up as a write error, which is retried.
// Nothing is written, zero or not.
func allocate(f *os.File, size int64, _ bool) error {
	return f.Truncate(size)
}

// allocated is the file's size: without fallocate, no block is reserved.
func allocated(fi os.FileInfo) int64 { return fi.Size() }

// lockCmd takes a classic fcntl lock, which conflicts with beanstalkd's.
// Such locks belong to the process, so a second Open of the directory in
// the same process is not refused here.
const lockCmd = unix.F_SETLK

func fdatasync(f *os.File) error { return f.Sync() }
