package segment_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/store/segment"
)

// tornFrames is how many frames tornSegment writes, and tornFrom the first
// of the last batch a crash may tear: those before it were fsynced.
const (
	tornFrames = 10
	tornFrom   = 6
)

// tornSegment writes segment 1 of dir, as a journal's: a header and ten
// frames of varied sizes. With prealloc above its size, zeros follow up
// to prealloc, as a crash leaves the segment it was writing; without, it
// ends with its last frame, as a clean Close or a rotation trims it. It
// returns the payloads, each frame's offset and the offset after the last.
func tornSegment(t *testing.T, dir string, prealloc int64, payload func(i int) []byte) (bodies []string, offs []int64) {
	t.Helper()
	var frames []byte
	off := int64(segment.HeaderSize)
	for i := range tornFrames {
		p := []byte(fmt.Sprintf("job %d %s", i, strings.Repeat("x", 150+i*37)))
		if payload != nil {
			p = payload(i)
		}
		start := len(frames)
		frames = segment.BeginFrame(frames)
		frames = append(frames, p...)
		frames = segment.EndFrame(frames, start)
		bodies = append(bodies, string(p))
		offs = append(offs, off)
		off += int64(len(frames) - start)
	}
	offs = append(offs, off)
	d, err := segment.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Create(1, segment.VersionJournal, 0, frames); err != nil {
		t.Fatal(err)
	}
	if prealloc > off {
		if err := os.Truncate(segPath(dir, 1), prealloc); err != nil {
			t.Fatal(err)
		}
	}
	return bodies, offs
}

// overwrite writes b at off in segment 1 of dir.
func overwrite(t *testing.T, dir string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(segPath(dir, 1), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// zero zeroes segment 1 of dir from from to to, as writes that never
// reached the disk leave it.
func zero(t *testing.T, dir string, from, to int64) {
	t.Helper()
	overwrite(t, dir, from, make([]byte, to-from))
}

// openTorn opens dir as a journal's log and closes it again; it returns
// the payloads replayed and what was logged at warn and error levels.
func openTorn(dir string, opts segment.Options) (bodies []string, warns, errs int, err error) {
	d, err := segment.LockDir(dir)
	if err != nil {
		return nil, 0, 0, err
	}
	defer d.Close()
	var out bytes.Buffer
	opts.Version, opts.Logger = segment.VersionJournal, zerolog.New(&out)
	l, err := segment.Open(d, opts, func(f segment.Frame) error {
		bodies = append(bodies, string(f.Payload))
		return nil
	})
	if err == nil {
		err = l.Close()
	}
	return bodies, strings.Count(out.String(), `"level":"warn"`), strings.Count(out.String(), `"level":"error"`), err
}

// TestDamagedLengthInTrimmedSegment: in the last segment, trimmed to its
// frames (the log was closed cleanly), a frame whose length was damaged
// (zeroed, or pointing past the end of the file) and is followed by good
// frames is damage, not a torn tail: cutting it off would drop the
// acknowledged frames after it. With SkipDamaged, those frames are
// replayed and the damaged one alone is skipped, when its length cannot
// be read (zero, or past the end): one that reads as another length is
// skipped by it, as before.
func TestDamagedLengthInTrimmedSegment(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string, offs []int64)
		skips  bool // SkipDamaged finds the frames after it
	}{
		{"zeroed", func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[4], offs[4]+4)
		}, true},
		{"zeroed header", func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[4], offs[4]+segment.FrameHeader)
		}, true},
		{"past the end of the file", func(t *testing.T, dir string, offs []int64) {
			overwrite(t, dir, offs[4], binary.LittleEndian.AppendUint32(nil, uint32(offs[tornFrames]-offs[4]+100)))
		}, true},
		{"past the end of the file, above the segment size", func(t *testing.T, dir string, offs []int64) {
			overwrite(t, dir, offs[4], binary.LittleEndian.AppendUint32(nil, 1<<20))
		}, true},
		{"pointing into the zeros of the last frame", func(t *testing.T, dir string, offs []int64) {
			// The last frame's payload ends in zeros; the damaged length
			// ends among them, so only zeros follow where it would end.
			overwrite(t, dir, offs[4], binary.LittleEndian.AppendUint32(nil, uint32(offs[tornFrames]-offs[4]-segment.FrameHeader-10)))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bodies, offs := tornSegment(t, dir, 0, func(i int) []byte {
				p := []byte(fmt.Sprintf("job %d %s", i, strings.Repeat("x", 150+i*37)))
				if i == tornFrames-1 {
					p = append(p, make([]byte, 64)...) // a body may end in zeros
				}
				return p
			})
			tc.damage(t, dir, offs)
			opts := segment.Options{SegmentSize: 1 << 16, MaxPayload: 1 << 20}
			got, _, _, err := openTorn(dir, opts)
			var de *segment.DamageError
			if !errors.As(err, &de) || de.Offset != offs[4] {
				t.Fatalf("Open: %v with %d frames, want a DamageError at offset %d", err, len(got), offs[4])
			}
			if fi, err := os.Stat(segPath(dir, 1)); err != nil || fi.Size() != offs[tornFrames] {
				t.Fatalf("the segment was changed: %v, %v", fi.Size(), err)
			}

			if !tc.skips {
				return
			}
			opts.SkipDamaged = true
			got, warns, errs, err := openTorn(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Delete(slices.Clone(bodies), 4, 5)
			if !slices.Equal(got, want) {
				t.Errorf("with SkipDamaged: replayed %d frames, want all %d but the damaged one", len(got), len(want))
			}
			if warns != 0 || errs != 1 {
				t.Errorf("with SkipDamaged: %d warnings, %d errors logged, want one error", warns, errs)
			}
		})
	}
}

// TestTornTails: a crash tears the last batch written to the segment it
// was writing, which still ends in preallocated zeros. Its writes reach
// the disk in any order, so each byte of it is either written or still
// zero. Open cuts the segment at the first frame that does not check,
// with one warning, and replays every frame before it, when nothing but
// zeros follows where the frame's length says it ends, or its length is
// unreadable (a zeroed header). A frame whose length reads whole, with
// written bytes after its end (damage), stops the start: so can damage
// to an acknowledged frame with acknowledged frames after it, which are
// not cut off.
func TestTornTails(t *testing.T) {
	const prealloc = 1 << 16
	for _, tc := range []struct {
		name    string
		payload func(i int) []byte
		tear    func(t *testing.T, dir string, offs []int64)
		damage  bool // the start stops
	}{
		{"partial header", nil, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom]+3, offs[tornFrames])
		}, false},
		{"partial payload", nil, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom]+segment.FrameHeader+20, offs[tornFrames])
		}, false},
		{"length written, CRC not", nil, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom]+4, offs[tornFrames])
		}, false},
		{"zeroed header, the rest of its frame written", nil, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom], offs[tornFrom]+segment.FrameHeader+10)
			zero(t, dir, offs[tornFrom+1], offs[tornFrames])
		}, false},
		{"zeroed header, later frames written", nil, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom], offs[tornFrom]+segment.FrameHeader)
		}, false},
		{"a block of the payload missing, later frames written", nil, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom]+segment.FrameHeader+16, offs[tornFrom]+segment.FrameHeader+80)
		}, true},
		{"the length's low byte missing, later frames written", nil, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom], offs[tornFrom]+1)
		}, true},
		{"the last frames written, those between not", nil, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom]+segment.FrameHeader+30, offs[tornFrames-1])
		}, true},
		{"a body holding a frame", func(i int) []byte {
			// A client's body may be a whole frame: written after the
			// tear, it is cut off with the rest.
			p := []byte(fmt.Sprintf("job %d %s", i, strings.Repeat("x", 150+i*37)))
			if i == tornFrom+1 {
				p = segment.BeginFrame(nil)
				p = append(p, "a frame inside a body"...)
				p = segment.EndFrame(p, 0)
			}
			return p
		}, func(t *testing.T, dir string, offs []int64) {
			zero(t, dir, offs[tornFrom], offs[tornFrom]+segment.FrameHeader)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bodies, offs := tornSegment(t, dir, prealloc, tc.payload)
			tc.tear(t, dir, offs)
			got, warns, errs, err := openTorn(dir, segment.Options{SegmentSize: prealloc})
			if tc.damage {
				var de *segment.DamageError
				if !errors.As(err, &de) || de.Offset != offs[tornFrom] {
					t.Fatalf("Open: %v with %d frames, want a DamageError at offset %d", err, len(got), offs[tornFrom])
				}
				return
			}
			if err != nil {
				t.Fatalf("Open after a crash: %v", err)
			}
			if !slices.Equal(got, bodies[:tornFrom]) {
				t.Errorf("replayed %d frames, want the %d before the tear", len(got), tornFrom)
			}
			if warns != 1 || errs != 0 {
				t.Errorf("%d warnings, %d errors logged, want one warning", warns, errs)
			}
			if fi, err := os.Stat(segPath(dir, 1)); err != nil || fi.Size() != offs[tornFrom] {
				t.Errorf("segment 1 is %d bytes (%v), want it cut to %d", fi.Size(), err, offs[tornFrom])
			}
		})
	}
}
