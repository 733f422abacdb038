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
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
)

// tornFrames is how many frames tornSegment writes, and tornFrom the first
// of the last batch a crash may tear: those before it were fsynced.
const (
	tornFrames = 10
	tornFrom   = 6
)

// tornBody is frame i's payload in the segments these tests write.
func tornBody(seq uint32, i int) []byte {
	return []byte(fmt.Sprintf("segment %d job %d %s", seq, i, strings.Repeat("x", 150+i*37)))
}

// tornSegment writes segment seq of dir, as a journal's: a header and ten
// frames of varied sizes (payload's, if not nil). The segment is sealed, as
// Dir.Create leaves it; seal, if not nil, is written in its header instead
// (SealOpen: a crash left it open; 0: an earlier release wrote it). With
// prealloc above its size, zeros follow up to prealloc, as a crash leaves
// the segment it was writing. It returns the payloads and each frame's
// offset, and the offset after the last.
func tornSegment(t *testing.T, dir string, seq uint32, prealloc int64, seal *uint32, payload func(i int) []byte) (bodies []string, offs []int64) {
	t.Helper()
	var frames []byte
	off := int64(segment.HeaderSize)
	for i := range tornFrames {
		p := tornBody(seq, i)
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
	createSegment(t, dir, seq, prealloc, seal, frames)
	return bodies, offs
}

// createSegment writes segment seq of dir holding frames, as tornSegment
// does.
func createSegment(t *testing.T, dir string, seq uint32, prealloc int64, seal *uint32, frames []byte) {
	t.Helper()
	d, err := segment.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Create(seq, segment.VersionJournal, 0, frames); err != nil {
		t.Fatal(err)
	}
	if seal != nil {
		setSeal(t, dir, seq, *seal)
	}
	if size := int64(segment.HeaderSize + len(frames)); prealloc > size {
		if err := os.Truncate(segPath(dir, seq), prealloc); err != nil {
			t.Fatal(err)
		}
	}
}

func sealPtr(v uint32) *uint32 { return &v }

// overwrite writes b at off in segment seq of dir.
func overwrite(t *testing.T, dir string, seq uint32, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(segPath(dir, seq), os.O_RDWR, 0)
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
	overwrite(t, dir, 1, from, make([]byte, to-from))
}

// openTorn opens dir as a journal's log and closes it again, unstarted; it
// returns the payloads replayed and what was logged at warn and error
// levels.
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

// closedLog writes n frames of about 250 bytes through a log, started and
// closed cleanly, holding every segment, and returns their payloads,
// places and offsets.
func closedLog(t *testing.T, dir string, opts segment.Options, n int) (bodies []string, places []segment.Loc, offs []int64) {
	t.Helper()
	d, err := segment.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts.Version = segment.VersionJournal
	l, err := segment.Open(d, opts, func(segment.Frame) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	l.Hold(1) // nothing here is live: keep every segment
	if err := l.Start(nil); err != nil {
		t.Fatal(err)
	}
	// Appends wait for a spare to be ready, so that each segment keeps to
	// its size (appends stay in one that outgrew it while none is).
	spare := func() {
		select {
		case <-l.SpareMade():
		case <-time.After(10 * time.Second):
			t.Fatal("no spare made")
		}
	}
	spare()
	var lsn uint64
	for i := range n {
		p := []byte(fmt.Sprintf("job %d %s", i, strings.Repeat("x", 200+i%7*10)))
		if i == n-1 {
			p = append(p, make([]byte, 64)...) // a body may end in zeros
		}
		f := segment.EndFrame(append(segment.BeginFrame(nil), p...), 0)
		var seg uint32
		var off int64
		if lsn, seg, off, err = l.Append(&segment.Group{Size: len(f), Encode: func(b []byte) []byte { return append(b, f...) }}); err != nil {
			t.Fatal(err)
		}
		if i > 0 && seg != places[i-1].Seg {
			spare()
		}
		bodies = append(bodies, string(p))
		places = append(places, segment.Loc{Seg: seg, Size: uint32(len(f))})
		offs = append(offs, off)
	}
	segtest.WaitDurable(t, l, lsn)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return bodies, places, offs
}

// TestDamagedLengthInClosedLog: in the last segment holding frames of a
// log closed cleanly (sealed: every frame in it was fsynced and may have
// been acknowledged), a frame whose length was damaged (zeroed, or
// pointing past the end of the file) with good frames after it is damage,
// not a torn tail: the start stops, where it used to cut off every frame
// after it with a warning. With SkipDamaged, the frames after it are
// replayed: the damaged one alone is skipped, to where frames resume that
// end at the sealed length.
func TestDamagedLengthInClosedLog(t *testing.T) {
	const n = 42
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string, seq uint32, off, end int64)
		skips  bool // SkipDamaged finds the frames after it
	}{
		{"zeroed", func(t *testing.T, dir string, seq uint32, off, end int64) {
			overwrite(t, dir, seq, off, make([]byte, 4))
		}, true},
		{"zeroed header", func(t *testing.T, dir string, seq uint32, off, end int64) {
			overwrite(t, dir, seq, off, make([]byte, segment.FrameHeader))
		}, true},
		{"past the end of the file", func(t *testing.T, dir string, seq uint32, off, end int64) {
			overwrite(t, dir, seq, off, binary.LittleEndian.AppendUint32(nil, uint32(end-off+100)))
		}, true},
		{"past the end of the file, above the segment size", func(t *testing.T, dir string, seq uint32, off, end int64) {
			overwrite(t, dir, seq, off, binary.LittleEndian.AppendUint32(nil, 1<<20))
		}, true},
		{"pointing into the zeros of the last frame", func(t *testing.T, dir string, seq uint32, off, end int64) {
			// The last frame's payload ends in zeros; the damaged length
			// ends among them, so only zeros follow where it would end.
			overwrite(t, dir, seq, off, binary.LittleEndian.AppendUint32(nil, uint32(end-off-segment.FrameHeader-10)))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := segment.Options{SegmentSize: 4096, MaxPayload: 1 << 20}
			bodies, places, offs := closedLog(t, dir, opts, n)
			last := places[n-1].Seg
			first := slices.IndexFunc(places, func(p segment.Loc) bool { return p.Seg == last })
			if n-first < 4 {
				t.Fatalf("the last segment holds %d frames, want a few", n-first)
			}
			k := first + (n-first)/2 // mid-way in the last segment
			fi, err := os.Stat(segPath(dir, last))
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, dir, last, offs[k], fi.Size())
			got, _, _, err := openTorn(dir, opts)
			var de *segment.DamageError
			if !errors.As(err, &de) || de.Offset != offs[k] {
				t.Fatalf("Open: %v with %d frames, want a DamageError at offset %d", err, len(got), offs[k])
			}
			if after, err := os.Stat(segPath(dir, last)); err != nil || after.Size() != fi.Size() {
				t.Fatalf("the segment was changed: %v, %v", after.Size(), err)
			}
			if !tc.skips {
				return
			}
			opts.SkipDamaged = true
			got, warns, errs, err := openTorn(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Delete(slices.Clone(bodies), k, k+1)
			if !slices.Equal(got, want) {
				t.Errorf("with SkipDamaged: replayed %d frames, want all %d but the damaged one", len(got), len(want))
			}
			if warns != 0 || errs != 1 {
				t.Errorf("with SkipDamaged: %d warnings, %d errors logged, want one error", warns, errs)
			}
		})
	}
}

// tearShapes are what a power loss can leave of the last batch written to
// a segment that still ends in preallocated zeros: its writes reach the
// disk in any order, so each byte of it is written or still zero.
// oldDamage says whether the rule for an earlier release's segments
// (unknown seal) takes it for damage: a length that reads whole, with
// written bytes after its end.
var tearShapes = []struct {
	name      string
	payload   func(i int) []byte
	tear      func(t *testing.T, dir string, offs []int64)
	oldDamage bool
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
		p := tornBody(1, i)
		if i == tornFrom+1 {
			p = segment.EndFrame(append(segment.BeginFrame(nil), "a frame inside a body"...), 0)
		}
		return p
	}, func(t *testing.T, dir string, offs []int64) {
		zero(t, dir, offs[tornFrom], offs[tornFrom]+segment.FrameHeader)
	}, false},
}

// TestTornTails: a crash leaves the segment it was writing open (its seal
// unset), and a power loss may tear the last batch written there in any
// of tearShapes' ways. Open cuts the segment at the first frame that does
// not check, with one warning, and replays every frame before it, whatever
// follows: nothing after a byte the disk lost was acknowledged. Then it
// seals the segment at the cut.
func TestTornTails(t *testing.T) {
	const prealloc = 1 << 16
	for _, tc := range tearShapes {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bodies, offs := tornSegment(t, dir, 1, prealloc, sealPtr(segment.SealOpen), tc.payload)
			tc.tear(t, dir, offs)
			got, warns, errs, err := openTorn(dir, segment.Options{SegmentSize: prealloc})
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
			if s := sealOf(t, dir, 1); int64(s) != offs[tornFrom] {
				t.Errorf("segment 1's seal is %#x, want it sealed at %d", s, offs[tornFrom])
			}
		})
	}
}

// TestTornTailsInOldSegments: a segment an earlier release wrote (its seal
// 0: unknown) keeps that release's rule exactly. A bad frame in the last
// segment is a tear when nothing but zeros follows where its length says
// it ends, or its length is unreadable; a length that reads whole with
// written bytes after its end stops the start. It is not sealed at Open.
func TestTornTailsInOldSegments(t *testing.T) {
	const prealloc = 1 << 16
	for _, tc := range tearShapes {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bodies, offs := tornSegment(t, dir, 1, prealloc, sealPtr(0), tc.payload)
			tc.tear(t, dir, offs)
			got, warns, errs, err := openTorn(dir, segment.Options{SegmentSize: prealloc})
			if tc.oldDamage {
				var de *segment.DamageError
				if !errors.As(err, &de) || de.Offset != offs[tornFrom] {
					t.Fatalf("Open: %v with %d frames, want a DamageError at offset %d", err, len(got), offs[tornFrom])
				}
				return
			}
			if err != nil {
				t.Fatalf("Open after a crash: %v", err)
			}
			if !slices.Equal(got, bodies[:tornFrom]) || warns != 1 || errs != 0 {
				t.Errorf("replayed %d frames, %d warnings, %d errors; want the %d before the tear and one warning", len(got), warns, errs, tornFrom)
			}
			if s := sealOf(t, dir, 1); s != 0 {
				t.Errorf("segment 1's seal is %#x, want it left 0", s)
			}
		})
	}

	// A damaged length mid-way in a trimmed segment is still taken for
	// a tear there, as before seals: nothing says it was trimmed.
	dir := t.TempDir()
	bodies, offs := tornSegment(t, dir, 1, 0, sealPtr(0), nil)
	zero(t, dir, offs[4], offs[4]+4)
	got, warns, _, err := openTorn(dir, segment.Options{SegmentSize: prealloc})
	if err != nil || !slices.Equal(got, bodies[:4]) || warns != 1 {
		t.Errorf("a zeroed length in a trimmed old segment: %v, %d frames, %d warnings; want it cut there as before", err, len(got), warns)
	}
}

// TestTornAcrossSegments: one fsync covers every open segment, so the
// last batch a crash tears may span segments 1 and 2, both left open by
// the crashed run: a tear at the end of 1 with frames in 2 (and a spare,
// 3). Nothing in 2 was acknowledged (it comes after a byte the disk lost),
// so the start goes on: 1 is cut at the tear, 2 and 3 are removed. When
// 2 is not open (sealed, or an earlier release's), 1 is not the crashed
// run's tail and its bad frame is damage.
func TestTornAcrossSegments(t *testing.T) {
	const prealloc = 1 << 16
	for _, tc := range []struct {
		name   string
		seal2  *uint32 // segment 2's seal; nil: sealed
		damage bool
	}{
		{"both open", sealPtr(segment.SealOpen), false},
		{"the next sealed", nil, true},
		{"the next an earlier release's", sealPtr(0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bodies, offs := tornSegment(t, dir, 1, prealloc, sealPtr(segment.SealOpen), nil)
			zero(t, dir, offs[tornFrames-1]+segment.FrameHeader+40, prealloc) // the last frame torn
			tornSegment(t, dir, 2, prealloc, tc.seal2, nil)
			createSegment(t, dir, 3, prealloc, sealPtr(segment.SealOpen), nil)
			got, warns, errs, err := openTorn(dir, segment.Options{SegmentSize: prealloc})
			if tc.damage {
				var de *segment.DamageError
				if !errors.As(err, &de) || de.Offset != offs[tornFrames-1] {
					t.Fatalf("Open: %v with %d frames, want a DamageError at offset %d", err, len(got), offs[tornFrames-1])
				}
				return
			}
			if err != nil {
				t.Fatalf("Open after a crash: %v", err)
			}
			if !slices.Equal(got, bodies[:tornFrames-1]) {
				t.Errorf("replayed %d frames, want the %d of segment 1 before the tear", len(got), tornFrames-1)
			}
			if warns != 2 || errs != 0 {
				t.Errorf("%d warnings, %d errors logged, want two (the cut, segment 2 removed; the spare goes unsaid)", warns, errs)
			}
			if seqs, _ := segtest.Segments(t, dir); !slices.Equal(seqs, []uint32{1}) {
				t.Errorf("segments %v left, want 1 alone", seqs)
			}
			if fi, err := os.Stat(segPath(dir, 1)); err != nil || fi.Size() != offs[tornFrames-1] || int64(sealOf(t, dir, 1)) != fi.Size() {
				t.Errorf("segment 1 is not cut and sealed at %d: %v", offs[tornFrames-1], err)
			}
		})
	}
}

// TestTornPastPreallocationAtInnerFrame: a cluster's Raft log takes every
// write, past the current segment's preallocated room if need be (a full
// disk, or a group larger than a segment: doc.go, Appends), so the file
// ends where its last write reached. Its entries carry wal frames, framed
// as segment frames are. A crash tearing that last write leaves the file's
// size wherever the disk got to (a page boundary), which can be the end
// of an inner frame: that frame checks and ends exactly at the end of the
// file, yet nothing was trimmed there. The unacknowledged tail is cut off;
// it must not stop the start as damage.
func TestTornPastPreallocationAtInnerFrame(t *testing.T) {
	for _, seal := range []uint32{segment.SealOpen, 0} {
		t.Run(fmt.Sprintf("seal %#x", seal), func(t *testing.T) {
			dir := t.TempDir()
			const inner = 20
			_, offs := tornSegment(t, dir, 1, 0, sealPtr(seal), func(i int) []byte {
				p := tornBody(1, i)
				if i != tornFrames-1 {
					return p
				}
				// A Raft entry's data: wal frames, back to back.
				var b []byte
				for k := range inner {
					start := len(b)
					b = segment.BeginFrame(b)
					b = append(b, fmt.Sprintf("record %d %s", k, strings.Repeat("y", 90))...)
					b = segment.EndFrame(b, start)
				}
				return b
			})
			// The last frame was written past the segment's size (the file
			// was never trimmed: the crash came first), and the disk kept
			// the file's size up to the end of its 7th inner frame.
			innerSize := (offs[tornFrames] - offs[tornFrames-1] - segment.FrameHeader) / inner
			cut := offs[tornFrames-1] + segment.FrameHeader + 7*innerSize
			if err := os.Truncate(segPath(dir, 1), cut); err != nil {
				t.Fatal(err)
			}
			bodies, warns, _, err := openTorn(dir, segment.Options{SegmentSize: offs[tornFrom]})
			if err != nil {
				t.Fatalf("a write torn past the segment's preallocation stopped the start: %v", err)
			}
			if len(bodies) != tornFrames-1 || warns == 0 {
				t.Fatalf("replayed %d frames (%d warnings), want the %d before the torn one and a warning", len(bodies), warns, tornFrames-1)
			}
		})
	}
}

// TestSeals: a log seals every segment it retires (a rotation) and, at a
// clean Close, the one written and the spare: each seal is its file's
// size. Open seals the segments a crash left open, trimmed to their
// frames. A seal that is not its file's size (a crash while sealing, a
// torn seal, a file cut short) is read as unknown: the rule for an
// earlier release's segments. segtest.LeaveOpen writes the open seal.
func TestSeals(t *testing.T) {
	dir := t.TempDir()
	closedLog(t, dir, segment.Options{SegmentSize: 4096}, 40)
	seqs, sizes := segtest.Segments(t, dir)
	if len(seqs) < 3 {
		t.Fatalf("segments %v: want a few rotations", seqs)
	}
	for _, seq := range seqs {
		if s := sealOf(t, dir, seq); int64(s) != sizes[seq] {
			t.Errorf("segment %d of %d bytes: seal %#x", seq, sizes[seq], s)
		}
	}

	segtest.LeaveOpen(t, segPath(dir, seqs[len(seqs)-1]))
	if s := sealOf(t, dir, seqs[len(seqs)-1]); s != segment.SealOpen {
		t.Fatalf("segtest.LeaveOpen wrote %#x, want SealOpen", s)
	}

	t.Run("open segments are sealed at Open", func(t *testing.T) {
		dir := t.TempDir()
		bodies, offs := tornSegment(t, dir, 1, 1<<16, sealPtr(segment.SealOpen), nil)
		createSegment(t, dir, 2, 1<<16, sealPtr(segment.SealOpen), nil) // the spare
		got, warns, _, err := openTorn(dir, segment.Options{SegmentSize: 1 << 16})
		if err != nil || !slices.Equal(got, bodies) || warns != 0 {
			t.Fatalf("Open: %v, %d frames, %d warnings; want all %d and none", err, len(got), warns, len(bodies))
		}
		_, sizes := segtest.Segments(t, dir)
		for seq, want := range map[uint32]int64{1: offs[tornFrames], 2: segment.HeaderSize} {
			if sizes[seq] != want || int64(sealOf(t, dir, seq)) != want {
				t.Errorf("segment %d: %d bytes, seal %#x; want it trimmed and sealed at %d", seq, sizes[seq], sealOf(t, dir, seq), want)
			}
		}
	})

	for _, tc := range []struct {
		name string
		seal func(size int64) uint32
	}{
		{"below the file's size", func(size int64) uint32 { return uint32(size - 40) }},
		{"past the file's end", func(size int64) uint32 { return uint32(size + 40) }},
		{"torn", func(size int64) uint32 { return uint32(size) | 0xffff0000 }},
	} {
		t.Run("a seal "+tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bodies, offs := tornSegment(t, dir, 1, 0, nil, nil)
			zero(t, dir, offs[tornFrames-1]+segment.FrameHeader+20, offs[tornFrames]) // a tear in the unknown rule's eyes
			setSeal(t, dir, 1, tc.seal(offs[tornFrames]))
			got, warns, _, err := openTorn(dir, segment.Options{SegmentSize: 1 << 16})
			if err != nil || !slices.Equal(got, bodies[:tornFrames-1]) || warns != 1 {
				t.Errorf("Open: %v, %d frames, %d warnings; want it read as an earlier release's segment: cut at its last frame", err, len(got), warns)
			}
		})
	}
}

// TestDamageInOpenSegment: a length above MaxPayload is never a tear, in
// an open segment too (a torn length is at most the frame's): the start
// stops. SkipDamaged replays the frames before it, and as nothing after
// it can be framed, Open marks the segment unknown rather than trim and
// seal it there.
func TestDamageInOpenSegment(t *testing.T) {
	const prealloc = 1 << 16
	dir := t.TempDir()
	bodies, offs := tornSegment(t, dir, 1, prealloc, sealPtr(segment.SealOpen), nil)
	overwrite(t, dir, 1, offs[tornFrom], binary.LittleEndian.AppendUint32(nil, 1<<20))
	opts := segment.Options{SegmentSize: prealloc, MaxPayload: 1 << 16}
	got, _, _, err := openTorn(dir, opts)
	var de *segment.DamageError
	if !errors.As(err, &de) || de.Offset != offs[tornFrom] {
		t.Fatalf("Open: %v with %d frames, want a DamageError at offset %d", err, len(got), offs[tornFrom])
	}
	opts.SkipDamaged = true
	got, warns, errs, err := openTorn(dir, opts)
	if err != nil || !slices.Equal(got, bodies[:tornFrom]) || warns != 0 || errs != 1 {
		t.Fatalf("with SkipDamaged: %v, %d frames, %d warnings, %d errors; want the %d before it and one error", err, len(got), warns, errs, tornFrom)
	}
	if fi, err := os.Stat(segPath(dir, 1)); err != nil || fi.Size() != prealloc || sealOf(t, dir, 1) != 0 {
		t.Errorf("segment 1: %v bytes, seal %#x, %v; want it whole and unknown", fi.Size(), sealOf(t, dir, 1), err)
	}
}

// TestTornKeepsRemovedIDs: the segments removed after a tear named in
// their headers the ids issued when they began; the log issues none of
// them again (they may have reached clients), as when it replays them.
func TestTornKeepsRemovedIDs(t *testing.T) {
	const prealloc = 1 << 16
	dir := t.TempDir()
	_, offs := tornSegment(t, dir, 1, prealloc, sealPtr(segment.SealOpen), nil)
	zero(t, dir, offs[tornFrames-1]+segment.FrameHeader+40, prealloc) // the last frame torn
	tornSegment(t, dir, 2, prealloc, sealPtr(segment.SealOpen), nil)
	f, err := os.OpenFile(segPath(dir, 2), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	const issued = 1000
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint64(nil, issued), 16); err != nil { // the header's id
		t.Fatal(err)
	}
	f.Close()
	d, err := segment.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := segment.Open(d, segment.Options{Version: segment.VersionJournal, SegmentSize: prealloc}, func(segment.Frame) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if seqs, _ := segtest.Segments(t, dir); !slices.Equal(seqs, []uint32{1}) {
		t.Fatalf("segments %v left, want 1 alone", seqs)
	}
	if got := l.LastID(); got < issued {
		t.Errorf("LastID %d after segment 2 was removed, want at least the %d its header named", got, issued)
	}
}
