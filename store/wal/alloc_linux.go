package wal

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocate reserves the blocks of a segment up front, so a full disk shows
// up when a segment is created, not in the middle of a commit.
func allocate(f *os.File, size int64) error {
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}
