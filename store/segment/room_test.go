package segment_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
)

// smallDisk mounts a tmpfs of size at a temporary directory for the test,
// or skips it where that cannot be done (not root, no mount namespace).
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestDeletesFitOnAFullDisk: a log filled with items until the disk
// refuses them, one large item pinning its oldest segment (compaction
// frees nothing until it can move it), restarted on the full disk, then
// every item but that one deleted: each delete becomes durable. Without
// room kept for them, the deletes fit only in what was left of the
// current segment; past it a delete's write failed and was retried every
// second (a reviewing helper found it with the binary on a 600 KiB tmpfs:
// the 5,295th delete of 5,436 hung, and it hangs here with DeleteRoom 0).
// Once they are written, compaction gets the disk back and items are
// taken again, the room regrown.
func TestDeletesFitOnAFullDisk(t *testing.T) {
	dir := smallDisk(t, "600k")
	opts := segment.Options{SegmentSize: 64 << 10, DeleteRoom: segment.FrameHeader + 9}
	l, m := open(t, dir, opts)
	big, lsn := m.put(t, strings.Repeat("B", 40000))
	segtest.WaitDurable(t, l, lsn)
	waitRoom(t, l)
	ids := fillDisk(t, l, m, 0, 1<<20)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, m = open(t, dir, opts) // a start on the full disk
	for _, id := range ids {
		lsn = m.del(t, id)
	}
	segtest.WaitDurable(t, l, lsn)

	deadline := time.Now().Add(10 * time.Second)
	for {
		_, lsn, err := m.tryPut("after the deletes")
		if err == nil {
			segtest.WaitDurable(t, l, lsn)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("puts still refused 10 s after %d deletes (%v): %+v", len(ids), err, l.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitRoom(t, l)
	got, _ := closeAndRecover(t, l, m, dir, opts)
	if _, ok := got[big]; !ok || len(got) != 2 {
		t.Fatalf("recovered %d items, the large one %v: want it and the put after the deletes", len(got), ok)
	}
}

// waitRoom waits until l keeps room for deletes (a spare comes first).
func waitRoom(t *testing.T, l *testLog) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().RoomBytes == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no room kept for deletes: %+v", l.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
