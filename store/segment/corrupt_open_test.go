package segment_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/sproutmq/sprout/store/segment"
)

// TestCallbackCorruptIsDamage: a frame whose length and CRC check but
// which the replay finds damaged (ErrCorrupt: wal's decodePayload on a
// kind it does not know, say) cannot be a tear, in a segment left open
// as in an earlier release's: frames follow it, and the start stops.
// Before, in a segment left open it was cut off with every frame after
// it and every later segment, a warning alone saying so.
func TestCallbackCorruptIsDamage(t *testing.T) {
	for _, seal := range []uint32{segment.SealOpen, 0} {
		t.Run(fmt.Sprintf("seal %#x", seal), func(t *testing.T) {
			dir := t.TempDir()
			bodies, offs := tornSegment(t, dir, 1, 1<<16, sealPtr(seal), nil)
			d, err := segment.LockDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			n := 0
			l, err := segment.Open(d, segment.Options{Version: segment.VersionJournal, SegmentSize: 1 << 16}, func(f segment.Frame) error {
				if string(f.Payload) == bodies[3] {
					return segment.ErrCorrupt
				}
				n++
				return nil
			})
			if err == nil {
				_ = l.Close()
			}
			fi, _ := os.Stat(segPath(dir, 1))
			var de *segment.DamageError
			if !errors.As(err, &de) {
				t.Errorf("Open: %v; replayed %d of %d good frames, segment cut to %d (frames ended at %d): want a DamageError at %d",
					err, n, len(bodies)-1, fi.Size(), offs[tornFrames], offs[3])
			}
		})
	}
}
