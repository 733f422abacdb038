package replication

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestSnapshotDiskFull: a member whose disk fills while it receives a
// snapshot refuses it, says so in one line, and serves nothing from it;
// once the disk has room again, the snapshot sent again is installed. The
// disk is a small tmpfs: a full disk as the kernel makes it, for which
// the test must be able to mount one (root, as CI runs).
func TestSnapshotDiskFull(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a small tmpfs for a full disk (%v): this test needs root", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	n, out := startLone(t, func(c *NodeConfig) {
		wcfg := c.WALConfig(dir)
		wcfg.Wal.SegmentSize = 64 << 10
		c.Log = openWAL(t, wcfg)
	})
	data := bigJobs(300, 10<<10) // 3 MiB
	snap := newHandSnapshot(n, 50, 5, 0, data)
	md := snap.msg.GetSnapshot().GetMetadata()
	goAhead, verdict := snap.send(t, n, snap.wire, nil)
	if verdict == int(snapshotTaken) {
		t.Fatalf("a 3 MiB snapshot taken on a 1 MiB disk (go-ahead %d)", goAhead)
	}
	if st := n.Status(); st.Applied != 1 || n.log.Received(md) || len(viewOf(n.Store())) > 0 {
		t.Fatalf("after the refusal: applied %d, received %v, %d jobs in the store", st.Applied, n.log.Received(md), len(viewOf(n.Store())))
	}
	if !strings.Contains(out.String(), ErrLogFull.Error()) {
		t.Errorf("no line says the disk is full:\n%s", out)
	}

	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size=64m"); err != nil {
		t.Fatal(err)
	}
	testproc.WaitFor(t, 10*time.Second, "the log no longer full", func() bool { return !n.log.(*WALLog).Full() })
	if _, verdict := snap.send(t, n, snap.wire, nil); verdict != int(snapshotTaken) {
		t.Fatalf("the snapshot sent again once the disk has room: verdict %d\n%s", verdict, out)
	}
	testproc.WaitFor(t, 10*time.Second, "the store filled from the snapshot", func() bool { return len(viewOf(n.Store())) == 300 })
}
