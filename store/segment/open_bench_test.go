package segment_test

import (
	"strings"
	"testing"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
)

// BenchmarkOpenCluster is a member's restart as its log sees it: the
// replay of a cluster's directory of full default-sized segments, their
// preallocated spare and the last one's unwritten tail. Its time is what
// a restarted member takes before it can rejoin.
func BenchmarkOpenCluster(b *testing.B) {
	dir := b.TempDir()
	l, _ := openFrames(b, dir, segment.Options{})
	startCluster(b, l, "cp")
	body := strings.Repeat("e", 1000)
	const segments = 6
	var last written
	for range segments * segment.DefaultSegmentSize / 1024 {
		last = appendGroup(b, l, body)
	}
	segtest.WaitDurable(b, l, last.lsn)
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(segments * segment.DefaultSegmentSize)
	for b.Loop() {
		d, err := segment.LockDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		entries := 0
		l, err := segment.Open(d, checkpointed(segment.Options{}), func(f segment.Frame) error {
			if f.Payload[0] == kindEntry {
				entries++
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if entries < segments*segment.DefaultSegmentSize/1024 {
			b.Fatalf("%d entries replayed", entries)
		}
		segtest.CloseUnstarted(b, l)
		_ = d.Close()
	}
}
