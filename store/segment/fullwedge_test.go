package segment_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
)

// TestDiskFullOfOwnGarbageRecovers: a disk the log filled, most of whose
// jobs are then deleted, takes puts again: compaction moves the oldest
// segment's few live items into the current segment's room while the
// disk is full, and its removal frees the room a spare needs. Compaction
// waited for puts to be taken again, which waited for room: puts were
// refused for good (a reviewing helper, on a 2 MiB tmpfs: 186 live jobs
// of 1 KB held the whole disk).
func TestDiskFullOfOwnGarbageRecovers(t *testing.T) {
	synctest.Test(t, testDiskFullOfOwnGarbageRecovers)
}

func testDiskFullOfOwnGarbageRecovers(t *testing.T) {
	const segSize = 16384
	dir := t.TempDir()
	opts := segment.Options{SegmentSize: segSize}
	// The disk holds 8 segments and nothing else: a segment removed
	// gives its room back.
	segment.SetAllocate(&opts, func(next func(*os.File, int64) error, file *os.File, size int64) error {
		if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) > 8 {
			return syscall.ENOSPC
		}
		return next(file, size)
	})
	l, m := open(t, dir, opts)
	ids := fillDisk(t, l, m, 600, 10000)
	for i, id := range ids {
		if i%10 != 0 {
			segtest.WaitDurable(t, l, m.del(t, id))
		}
	}
	synctest.Wait()
	time.Sleep(5 * time.Second) // many of the full disk's 250 ms rechecks
	synctest.Wait()
	st := l.Stats()
	if _, _, err := m.tryPut("after deleting 90% of the jobs"); err != nil {
		t.Fatalf("put refused for good (%v) with %d of %d jobs deleted: live %d B of %d B on disk, segments %d..%d",
			err, len(ids)-len(m.ids()), len(ids), st.LiveBytes, st.DiskBytes, st.OldestIndex, st.CurrentIndex)
	}
	got, _ := closeAndRecover(t, l, m, dir, opts)
	for i, id := range ids {
		if _, ok := got[id]; ok != (i%10 == 0) {
			t.Fatalf("job %d (the %dth) recovered %v", id, i, ok)
		}
	}
}
