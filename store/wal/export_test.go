package wal

import "os"

// This file exposes internals to the external tests (package wal_test)
// without widening the API.

// HeaderSize is the size of a segment's header; the first record starts
// there.
const HeaderSize = headerSize

// MigrateBatch bounds the jobs one compaction step moves.
const MigrateBatch = migrateBatch

// ErrCorrupt is what a damaged frame decodes to.
var ErrCorrupt = errCorrupt

// SetAllocate replaces the call that reserves a new segment's blocks, so a
// test can make the disk look full. next is the real one.
func SetAllocate(o *Options, f func(next func(*os.File, int64) error, file *os.File, size int64) error) {
	o.allocate = func(file *os.File, size int64) error { return f(allocate, file, size) }
}

// SetWriteAt replaces the call that writes records to a segment, so a test
// can inject I/O errors or count the writes.
func SetWriteAt(o *Options, f func(file *os.File, b []byte, off int64) (int, error)) {
	o.writeAt = f
}

// SegmentName is the file name of segment seq.
func SegmentName(seq uint32) string { return segmentName(seq) }

// EncodeFrame appends r's frame to dst.
func EncodeFrame(dst []byte, r *Record) []byte { return appendFrame(dst, r) }

// DecodeFrame checks and decodes the frame at the start of b and returns
// its size (negative when its length field cannot be trusted).
func DecodeFrame(b []byte) (Record, int, error) {
	var r Record
	n, err := (&Log{}).readFrame(b, 0, &r)
	return r, n, err
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
// refuses new jobs.
func SetMaxUnsynced(o *Options, n int64) { o.maxUnsynced = n }

// SetPipelineMin sets how many bytes of new records the writer writes
// while an fsync runs under SyncEvery 0, rather than after it.
func SetPipelineMin(o *Options, n int64) { o.pipelineMin = n }
