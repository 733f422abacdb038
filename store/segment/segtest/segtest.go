// Package segtest holds what the tests of the segment engine's users
// share, as net/http/httptest does for HTTP: waiting for a log's
// durability, closing one within a bound, and listing its segments on
// disk.
package segtest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/segment"
)

// Durable is a log that tells when a position is durable: a segment.Log,
// or a user's log on one.
type Durable interface {
	OnDurable(lsn uint64, fn func())
	Durable() uint64
}

// WaitDurable waits until lsn is durable, through OnDurable, and fails t
// if it is not within 10 s.
func WaitDurable(t testing.TB, l Durable, lsn uint64) {
	t.Helper()
	done := make(chan struct{})
	l.OnDurable(lsn, func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("LSN %d not durable within 10s (durable %d)", lsn, l.Durable())
	}
}

// CloseUnstarted closes a log that was opened but never started, and fails
// t if Close fails or does not return within 5 s.
func CloseUnstarted(t testing.TB, l io.Closer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close of a log that was never started did not return within 5s")
	}
}

// Segments lists the segment files in dir with their sizes, by sequence.
func Segments(t testing.TB, dir string) (seqs []uint32, sizes map[uint32]int64) {
	t.Helper()
	sizes = make(map[uint32]int64)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var seq uint32
		if _, err := fmt.Sscanf(e.Name(), "sprout.%08d.wal", &seq); err != nil || e.Name() != segment.SegmentName(seq) {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed by compaction meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
		sizes[seq] = info.Size()
	}
	slices.Sort(seqs)
	return seqs, sizes
}

// LeaveOpen makes the segment file at path read as one a crash left open:
// its header's seal (bytes 12-15, store/segment's doc.go, Recovery) back
// to "not sealed yet", as it was while its run wrote it. A test that
// tears the tail of a log it closed cleanly (which sealed it: no tear is
// allowed there) calls it to stand for the crash.
func LeaveOpen(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, 12); err != nil {
		t.Fatal(err)
	}
}
