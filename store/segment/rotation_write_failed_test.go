package segment_test

import (
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/segment"
)

// TestWriteFailedAtRotation: a write to segment 1 that fails (EIO, or
// ENOSPC past a Raft log's preallocation) in a batch that spans the
// rotation to segment 2 is made again, and what follows becomes durable.
// Before, segment 1 was retired (closed) at once, as the batch moved
// writing on to 2 when it was taken, and the write was made again to a
// closed file for ever: nothing appended became durable again.
func TestWriteFailedAtRotation(t *testing.T) {
	dir := t.TempDir()
	opts := segment.Options{Version: segment.VersionJournal, SegmentSize: 4096}
	var block atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	segment.SetFdatasync(&opts, func(next func(*os.File) error, f *os.File) error {
		if block.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
		return next(f)
	})
	var failSeg1 atomic.Bool
	var closedWrites atomic.Int64
	segment.SetWriteAt(&opts, func(f *os.File, b []byte, off int64) (int, error) {
		if f == nil {
			closedWrites.Add(1)
		}
		if f != nil && strings.HasSuffix(f.Name(), segment.SegmentName(1)) && failSeg1.CompareAndSwap(true, false) {
			return 0, syscall.EIO
		}
		return f.WriteAt(b, off)
	})
	d, err := segment.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := segment.Open(d, opts, func(segment.Frame) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	l.Hold(1)
	if err := l.Start(nil); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	select {
	case <-l.SpareMade():
	case <-time.After(10 * time.Second):
		t.Fatal("no spare")
	}
	frame := segment.EndFrame(append(segment.BeginFrame(nil), make([]byte, 292)...), 0) // 300 bytes
	frame[len(frame)-1] = 1
	frame = segment.EndFrame(frame, 0)
	app := func() (uint64, uint32) {
		lsn, seg, _, err := l.Append(&segment.Group{Size: len(frame), Encode: func(b []byte) []byte { return append(b, frame...) }})
		if err != nil {
			t.Fatal(err)
		}
		return lsn, seg
	}
	var lsn uint64
	for range 11 { // 24+3300
		lsn, _ = app()
	}
	waitDurable(t, l, lsn, 10*time.Second)
	block.Store(true)
	app() // 3624: its fsync blocks
	<-entered
	app() // 3924: fits in segment 1
	lsnB, segB := app()
	if segB != 2 {
		t.Fatalf("B went to segment %d", segB)
	}
	failSeg1.Store(true) // the batch's first write, to segment 1, fails
	close(release)
	if !waitDurable(t, l, lsnB, 5*time.Second) {
		t.Errorf("LSN %d never durable after one failed write (durable %d); %d writes to a closed segment", lsnB, l.Durable(), closedWrites.Load())
	}
}

func waitDurable(t *testing.T, l *segment.Log, lsn uint64, d time.Duration) bool {
	done := make(chan struct{})
	l.OnDurable(lsn, func() { close(done) })
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
