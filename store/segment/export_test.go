package segment

import "os"

// This file exposes internals to the external tests (package
// segment_test) without widening the API.

// MigrateBatch bounds the items one compaction step moves.
const MigrateBatch = migrateBatch

// SetAllocate replaces the call that reserves a new segment's blocks, so a
// test can make the disk look full. next is the real one.
func SetAllocate(o *Options, f func(next func(*os.File, int64) error, file *os.File, size int64) error) {
	o.allocate = func(file *os.File, size int64, zero bool) error {
		return f(func(file *os.File, size int64) error { return allocate(file, size, zero) }, file, size)
	}
}

// SetAllocateSeen tells seen, for each segment allocated, whether it was
// zero-filled (Log.SetBulk).
func SetAllocateSeen(o *Options, seen func(zero bool)) {
	o.allocate = func(file *os.File, size int64, zero bool) error {
		seen(zero)
		return allocate(file, size, zero)
	}
}

// SetWriteAt replaces the call that writes frames to a segment, so a test
// can inject I/O errors or count the writes.
func SetWriteAt(o *Options, f func(file *os.File, b []byte, off int64) (int, error)) {
	o.writeAt = f
}

// Synced is the highest LSN fsynced.
func (l *Log) Synced() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.synced
}

// Written is the highest LSN written.
func (l *Log) Written() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.written
}

// SetFdatasync replaces the call that syncs a segment, so a test can
// inject fsync errors. next is the real one.
func SetFdatasync(o *Options, f func(next func(*os.File) error, file *os.File) error) {
	o.fdatasync = func(file *os.File) error { return f(fdatasync, file) }
}

// SetMaxUnsynced lowers how many unsynced bytes the log keeps before it
// refuses refusable groups.
func SetMaxUnsynced(o *Options, n int64) { o.maxUnsynced = n }

// SetPipelineMin sets how many bytes of new groups the writer writes
// while an fsync runs under SyncEvery 0, rather than after it.
func SetPipelineMin(o *Options, n int64) { o.pipelineMin = n }

// SealOpen is the seal of a segment not sealed yet: what a crash leaves
// in the segments its run was writing.
const SealOpen = sealOpen

// SealOffset is where a segment's header holds its seal.
const SealOffset = sealOffset
