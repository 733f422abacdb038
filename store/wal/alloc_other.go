//go:build !linux

package wal

import "os"

// allocate extends the file; without fallocate the blocks are not
// reserved, so a full disk shows up as a write error, which is retried.
func allocate(f *os.File, size int64) error {
	return f.Truncate(size)
}
