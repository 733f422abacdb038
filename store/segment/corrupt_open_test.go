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
// kind it does not know, say) is not torn: the start stops. Mid-way in
// a segment left open it was cut off with every frame after it and every
// later segment, a warning alone saying so; as the last frame there, cut
// off as a torn tail. In an earlier release's segment (seal 0) one with
// frames after it stops the start, as it always did.
func TestCallbackCorruptIsDamage(t *testing.T) {
	for _, tc := range []struct {
		seal     uint32
		rejected int // the frame the replay rejects
	}{
		{segment.SealOpen, 3},
		{0, 3},
		{segment.SealOpen, tornFrames - 1},
	} {
		t.Run(fmt.Sprintf("seal %#x, frame %d", tc.seal, tc.rejected), func(t *testing.T) {
			dir := t.TempDir()
			bodies, offs := tornSegment(t, dir, 1, 1<<16, sealPtr(tc.seal), nil)
			d, err := segment.LockDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			n := 0
			l, err := segment.Open(d, segment.Options{Version: segment.VersionJournal, SegmentSize: 1 << 16}, func(f segment.Frame) error {
				if string(f.Payload) == bodies[tc.rejected] {
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
			if !errors.As(err, &de) || de.Offset != offs[tc.rejected] {
				t.Errorf("Open: %v; replayed %d of %d good frames, segment cut to %d (frames ended at %d): want a DamageError at %d",
					err, n, len(bodies)-1, fi.Size(), offs[tornFrames], offs[tc.rejected])
			}
		})
	}
}
