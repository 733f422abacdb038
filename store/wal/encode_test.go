package wal_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"slices"
	"testing"

	"github.com/sproutmq/sprout/store/wal"
)

// sampleRecords has one record of every kind, every field set to a value
// whose bytes are distinct, so a field read from the wrong offset shows.
func sampleRecords() []wal.Record {
	full := wal.Record{
		Kind:      wal.KindFull,
		ID:        0x0102030405060708,
		Tube:      "tube-α",
		State:     wal.StateDelayed,
		Pri:       0x11223344,
		Delay:     5_000_000_000,
		TTR:       -7, // signed fields keep their sign
		CreatedAt: 1_700_000_000_123_456_789,
		Deadline:  1_700_000_005_123_456_789,
		Reserves:  1, Timeouts: 2, Releases: 3, Buries: 4, Kicks: 5,
		Body: []byte("hello\x00world\r\n"),
	}
	update := full
	update.Kind, update.Tube, update.Body = wal.KindUpdate, "", nil
	update.State = wal.StateBuried
	return []wal.Record{
		full,
		update,
		{Kind: wal.KindDelete, ID: 42},
		{Kind: wal.KindIDs, ID: 1 << 40},
		{Kind: wal.KindControl, Pri: 3},
		{Kind: wal.KindMeta, Tube: "emails", State: 3, Pri: 2, Deadline: 1 << 62},
		{Kind: wal.KindMeta, Tube: "e", State: 1, Body: []byte("{}")},
		{Kind: wal.KindFull, ID: 1, Tube: "t", State: wal.StateReady, Body: []byte("\r\n")},
		{Kind: wal.KindFull, ID: ^uint64(0), Tube: string(bytes.Repeat([]byte{'x'}, 200)),
			State: wal.StateReserved, Pri: ^uint32(0), Body: bytes.Repeat([]byte{0xff}, 70000)},
	}
}

// keyedRecords has one record of every kind a key or a time is for: the
// three kinds a command writes, with keys, and the dedup table's kinds.
func keyedRecords() []wal.Record {
	key := wal.Req{Incarnation: 0xa1a2a3a4a5a6a7a8, Number: 0xb1b2b3b4b5b6b7b8}
	recs := sampleRecords()[:3]
	for i := range recs {
		recs[i].Req = key
	}
	return append(recs,
		wal.Record{Kind: wal.KindClock, Time: 1_700_000_000_123_456_789},
		wal.Record{Kind: wal.KindReq, ID: 17, Req: key, Time: -5, Count: 3},
		// Either half of a key is a key.
		wal.Record{Kind: wal.KindDelete, ID: 9, Req: wal.Req{Number: 1}},
		wal.Record{Kind: wal.KindReq, Req: wal.Req{Incarnation: 1}, Count: 1},
	)
}

func kindName(r wal.Record) string {
	name := map[wal.Kind]string{wal.KindFull: "full", wal.KindUpdate: "update", wal.KindDelete: "delete",
		wal.KindIDs: "ids", wal.KindControl: "control", wal.KindMeta: "meta", wal.KindClock: "clock", wal.KindReq: "req"}[r.Kind]
	if r.Kind == wal.KindMeta && len(r.Body) > 0 {
		name += "-body"
	}
	if r.Kind != wal.KindReq && !r.Req.IsZero() {
		name += "-keyed"
	}
	return name
}

func TestFrameRoundTrip(t *testing.T) {
	for _, r := range append(sampleRecords(), keyedRecords()...) {
		t.Run(kindName(r), func(t *testing.T) {
			frame := wal.EncodeFrame(nil, &r)
			if r.Kind == wal.KindFull && r.Req.IsZero() {
				if want := wal.FullSize(len(r.Tube), len(r.Body)); len(frame) != want {
					t.Errorf("frame is %d bytes, FullSize says %d", len(frame), want)
				}
			}
			if want := wal.FrameSize(&r); len(frame) != want {
				t.Errorf("frame is %d bytes, FrameSize says %d", len(frame), want)
			}
			// Frames follow one another: decode from the middle of a buffer.
			buf := append([]byte("prefix"), frame...)
			buf = append(buf, "next frame"...)
			got, n, err := wal.DecodeFrame(buf[6:])
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if n != len(frame) {
				t.Errorf("decoded size %d, want %d", n, len(frame))
			}
			if !reflect.DeepEqual(got, r) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
			}
		})
	}
}

// TestDecodeFrames: a batch of frames, as a cluster's Raft entry carries
// it, decodes to its records in order; a batch cut anywhere inside a frame,
// or with a flipped bit, is refused.
func TestDecodeFrames(t *testing.T) {
	want := append(sampleRecords(), keyedRecords()...)
	var batch []byte
	for i := range want {
		batch = wal.AppendFrame(batch, &want[i])
	}
	got, err := wal.DecodeFrames(nil, batch)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if got, err := wal.DecodeFrames(nil, nil); err != nil || len(got) != 0 {
		t.Errorf("an empty batch: %v, %d records", err, len(got))
	}
	for _, cut := range []int{1, 7, 9, len(batch) - 1} {
		if _, err := wal.DecodeFrames(nil, batch[:cut]); err == nil {
			t.Errorf("a batch cut at %d of %d decoded", cut, len(batch))
		}
	}
	flipped := bytes.Clone(batch)
	flipped[len(flipped)/2] ^= 0x10
	if _, err := wal.DecodeFrames(nil, flipped); err == nil {
		t.Error("a batch with a flipped bit decoded")
	}
}

// TestFrameLayout pins the documented on-disk layout of a full record, so
// the format cannot change by accident (old logs must stay readable).
func TestFrameLayout(t *testing.T) {
	r := sampleRecords()[0]
	le := binary.LittleEndian
	var p []byte
	p = append(p, byte(wal.KindFull))
	p = le.AppendUint64(p, r.ID)
	p = le.AppendUint16(p, uint16(len(r.Tube)))
	p = append(p, r.Tube...)
	p = append(p, r.State)
	p = le.AppendUint32(p, r.Pri)
	for _, v := range []int64{r.Delay, r.TTR, r.CreatedAt, r.Deadline} {
		p = le.AppendUint64(p, uint64(v))
	}
	for _, v := range []uint32{r.Reserves, r.Timeouts, r.Releases, r.Buries, r.Kicks} {
		p = le.AppendUint32(p, v)
	}
	p = le.AppendUint32(p, uint32(len(r.Body)))
	p = append(p, r.Body...)
	want := le.AppendUint32(nil, uint32(len(p)))
	want = le.AppendUint32(want, crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)))
	want = append(want, p...)
	if got := wal.EncodeFrame(nil, &r); !bytes.Equal(got, want) {
		t.Fatalf("frame bytes differ from the documented layout:\n got %x\nwant %x", got, want)
	}
}

// TestFrameDetectsFlippedBit flips every bit of a frame of every kind, one
// at a time; each damaged frame must be refused.
func TestFrameDetectsFlippedBit(t *testing.T) {
	for _, r := range append(sampleRecords()[:4], keyedRecords()...) {
		t.Run(kindName(r), func(t *testing.T) {
			frame := wal.EncodeFrame(nil, &r)
			for bit := 0; bit < 8*len(frame); bit++ {
				bad := bytes.Clone(frame)
				bad[bit/8] ^= 1 << (bit % 8)
				if got, _, err := wal.DecodeFrame(bad); err == nil {
					t.Fatalf("bit %d flipped: decoded %+v without error", bit, got)
				}
			}
		})
	}
}

// TestFrameRejectsMalformed: frames with a valid checksum but a payload
// the format does not allow.
func TestFrameRejectsMalformed(t *testing.T) {
	valid := wal.EncodeFrame(nil, &sampleRecords()[0])
	payload := func() []byte { return bytes.Clone(valid[8:]) }
	frame := func(p []byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(len(p)))
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)))
		return append(b, p...)
	}
	tubeLen := len(sampleRecords()[0].Tube)
	stateAt := 1 + 8 + 2 + tubeLen
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"header only", valid[:8]},
		{"length past the end", valid[:len(valid)-1]},
		{"zero length", frame(nil)},
		{"unknown kind", func() []byte { p := payload(); p[0] = 9; return frame(p) }()},
		{"state 0", func() []byte { p := payload(); p[stateAt] = 0; return frame(p) }()},
		{"state 5", func() []byte { p := payload(); p[stateAt] = 5; return frame(p) }()},
		{"empty tube name", func() []byte { p := payload(); p[9], p[10] = 0, 0; return frame(p) }()},
		{"body shorter than CRLF", frame(wal.EncodeFrame(nil, &wal.Record{Kind: wal.KindFull, ID: 1, Tube: "t", State: 1, Body: []byte("x")})[8:])},
		{"body length wrong", func() []byte { p := payload(); p[len(p)-len(sampleRecords()[0].Body)-4]++; return frame(p) }()},
		{"delete with trailing bytes", frame(append(wal.EncodeFrame(nil, &wal.Record{Kind: wal.KindDelete, ID: 1})[8:], 0))},
		{"update cut short", frame(wal.EncodeFrame(nil, &sampleRecords()[1])[8 : 8+20])},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, _, err := wal.DecodeFrame(tc.b); !errors.Is(err, wal.ErrCorrupt) {
				t.Fatalf("decoded %+v, err %v; want ErrCorrupt", got, err)
			}
		})
	}
}

// FuzzDecodeFrame: no input panics the decoder, and whatever it accepts
// encodes back to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	for _, r := range append(sampleRecords()[:4], keyedRecords()...) {
		f.Add(wal.EncodeFrame(nil, &r))
	}
	for _, b := range malformedKeyed() {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := wal.DecodeFrame(b)
		if err != nil {
			return
		}
		if again := wal.EncodeFrame(nil, &r); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoded %x, read %x", again, b[:n])
		}
	})
}

// TestScanFrames reads kinds, ids and sizes without decoding.
func TestScanFrames(t *testing.T) {
	recs := []wal.Record{
		{Kind: wal.KindFull, ID: 3, Tube: "t", State: wal.StateReady, Body: []byte("ab\r\n")},
		{Kind: wal.KindDelete, ID: 9},
	}
	var b []byte
	var sizes []int
	for i := range recs {
		n := len(b)
		b = wal.AppendFrame(b, &recs[i])
		sizes = append(sizes, len(b)-n)
	}
	var got []string
	err := wal.ScanFrames(b, func(kind wal.Kind, id uint64, size int) {
		got = append(got, fmt.Sprint(kind, id, size))
	})
	want := []string{fmt.Sprint(wal.KindFull, 3, sizes[0]), fmt.Sprint(wal.KindDelete, 9, sizes[1])}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("scanned %v, %v; want %v", got, err, want)
	}
	if err := wal.ScanFrames(b[:len(b)-1], func(wal.Kind, uint64, int) {}); err == nil {
		t.Error("a cut frame scanned")
	}
}
