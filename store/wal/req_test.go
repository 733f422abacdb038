package wal_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/sproutmq/sprout/store/wal"
)

// goldenFrames pins the bytes of one record of every kind. Those without
// a key were written by the encoder before keys existed (at a2a571d), so
// old logs and today's cluster entries read as they did; the others fix
// the format of keys, clocks and dedup entries.
var goldenFrames = []struct {
	name string
	rec  wal.Record
	hex  string
}{
	{"full", goldenFull(wal.Req{}),
		"55000000107697f10111000000000000000600656d61696c73040004000000f2052a01000000005847f80d00000000002a36fe9c971700f22f60ff9c971701000000020000000300000004000000050000000700000068656c6c6f0d0a"},
	{"update", goldenUpdate(wal.Req{}),
		"420000005307baef02110000000000000003070000000000000000000000005847f80d00000000002a36fe9c971700000000000000000000000000000000000000000100000000000000"},
	{"delete", wal.Record{Kind: wal.KindDelete, ID: 17},
		"090000001910006f031100000000000000"},
	{"ids", wal.Record{Kind: wal.KindIDs, ID: 4113},
		"09000000a5243b34041110000000000000"},
	{"control", wal.Record{Kind: wal.KindControl, Pri: 3},
		"42000000bc7f99db0f0000000000000000000300000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"},
	{"meta", wal.Record{Kind: wal.KindMeta, Tube: "emails", State: 3, Pri: 2, Deadline: 7},
		"4e0000008b21a0d80e00000000000000000600656d61696c7303020000000000000000000000000000000000000000000000000000000700000000000000000000000000000000000000000000000000000000000000"},
	{"full-keyed", goldenFull(goldenKey),
		"6600000063f31e7107110000000000000008070605040302011d00000000000000010600656d61696c73040004000000f2052a01000000005847f80d00000000002a36fe9c971700f22f60ff9c971701000000020000000300000004000000050000000700000068656c6c6f0d0a"},
	{"update-keyed", goldenUpdate(goldenKey),
		"53000000c233c20107110000000000000008070605040302011d000000000000000203070000000000000000000000005847f80d00000000002a36fe9c971700000000000000000000000000000000000000000100000000000000"},
	{"delete-keyed", wal.Record{Kind: wal.KindDelete, ID: 17, Req: goldenKey},
		"1a0000009bee1b2607110000000000000008070605040302011d0000000000000003"},
	{"clock", wal.Record{Kind: wal.KindClock, Time: 1_700_000_000_000_000_000},
		"1100000053d0561705000000000000000000002a36fe9c9717"},
	{"req", wal.Record{Kind: wal.KindReq, ID: 17, Req: goldenKey, Time: 1_700_000_000_000_000_000, Count: 2},
		"250000006fca891806110000000000000008070605040302011d0000000000000000002a36fe9c971702000000"},
}

var goldenKey = wal.Req{Incarnation: 0x0102030405060708, Number: 29}

func goldenFull(key wal.Req) wal.Record {
	return wal.Record{Kind: wal.KindFull, ID: 17, Req: key, Tube: "emails", State: wal.StateDelayed, Pri: 1024,
		Delay: 5_000_000_000, TTR: 60_000_000_000, CreatedAt: 1_700_000_000_000_000_000, Deadline: 1_700_000_005_000_000_000,
		Reserves: 1, Timeouts: 2, Releases: 3, Buries: 4, Kicks: 5, Body: []byte("hello\r\n")}
}

func goldenUpdate(key wal.Req) wal.Record {
	return wal.Record{Kind: wal.KindUpdate, ID: 17, Req: key, State: wal.StateBuried, Pri: 7, TTR: 60_000_000_000,
		CreatedAt: 1_700_000_000_000_000_000, Buries: 1}
}

// TestFrameGolden: every kind encodes to its pinned bytes and decodes
// from them; a keyed record is its unkeyed bytes with kind 7, the id and
// the key in front of its own kind.
func TestFrameGolden(t *testing.T) {
	plain := map[string][]byte{}
	for _, g := range goldenFrames {
		t.Run(g.name, func(t *testing.T) {
			want, err := hex.DecodeString(g.hex)
			if err != nil {
				t.Fatal(err)
			}
			got := wal.EncodeFrame(nil, &g.rec)
			if !bytes.Equal(got, want) {
				t.Fatalf("bytes changed:\n got %x\nwant %x", got, want)
			}
			r, n, err := wal.DecodeFrame(want)
			if err != nil || n != len(want) || fmt.Sprint(r) != fmt.Sprint(g.rec) {
				t.Fatalf("decoded %+v, %d, %v; want %+v", r, n, err, g.rec)
			}
			plain[g.name] = want[8:]
		})
	}
	for _, kind := range []string{"full", "update", "delete"} {
		p, k := plain[kind], plain[kind+"-keyed"]
		want := []byte{7}
		want = append(want, p[1:9]...)
		want = binary.LittleEndian.AppendUint64(want, goldenKey.Incarnation)
		want = binary.LittleEndian.AppendUint64(want, goldenKey.Number)
		want = append(want, p[0])
		want = append(want, p[9:]...)
		if !bytes.Equal(k, want) {
			t.Errorf("%s: the keyed payload is not the documented one:\n got %x\nwant %x", kind, k, want)
		}
	}
}

// frameOf wraps a payload in a frame with the right length and CRC.
func frameOf(p []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(p)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)))
	return append(b, p...)
}

// malformedKeyed are frames whose CRC is right but whose keyed, clock or
// dedup payload the format does not allow, named.
func malformedKeyedCases() []struct {
	name string
	b    []byte
} {
	payload := func(r wal.Record) []byte { return wal.EncodeFrame(nil, &r)[8:] }
	keyedDelete := payload(wal.Record{Kind: wal.KindDelete, ID: 5, Req: goldenKey})
	with := func(p []byte, at int, v byte) []byte { p = bytes.Clone(p); p[at] = v; return frameOf(p) }
	zeroKey := bytes.Clone(keyedDelete)
	clear(zeroKey[9:25])
	req := payload(wal.Record{Kind: wal.KindReq, ID: 17, Req: goldenKey, Time: 1, Count: 1})
	reqZeroKey := bytes.Clone(req)
	clear(reqZeroKey[9:25])
	clock := payload(wal.Record{Kind: wal.KindClock, Time: 7})
	return []struct {
		name string
		b    []byte
	}{
		{"keyed with a zero key", frameOf(zeroKey)},
		{"keyed, cut in its key", frameOf(keyedDelete[:20])},
		{"keyed, without its own kind", frameOf(keyedDelete[:25])},
		{"keyed ids", with(keyedDelete, 25, byte(wal.KindIDs))},
		{"keyed clock", with(keyedDelete, 25, byte(wal.KindClock))},
		{"keyed req", with(keyedDelete, 25, byte(wal.KindReq))},
		{"keyed keyed", with(keyedDelete, 25, 7)},
		{"keyed kind 0", with(keyedDelete, 25, 0)},
		{"keyed delete with trailing bytes", frameOf(append(bytes.Clone(keyedDelete), 0))},
		{"keyed update cut short", frameOf(payload(goldenUpdate(goldenKey))[:40])},
		{"clock with an id", with(clock, 1, 1)},
		{"clock cut short", frameOf(clock[:12])},
		{"clock with trailing bytes", frameOf(append(bytes.Clone(clock), 0))},
		{"req with a zero key", frameOf(reqZeroKey)},
		{"req counting 0", frameOf(append(bytes.Clone(req[:len(req)-4]), 0, 0, 0, 0))},
		{"req cut short", frameOf(req[:len(req)-1])},
		{"req with trailing bytes", frameOf(append(bytes.Clone(req), 0))},
		{"kind 8", with(clock, 0, 8)},
		{"kind 14", with(clock, 0, 14)},
	}
}

func malformedKeyed() [][]byte {
	var out [][]byte
	for _, c := range malformedKeyedCases() {
		out = append(out, c.b)
	}
	return out
}

// TestFrameRejectsMalformedKeyed: what no encoder writes is refused, so
// that whatever decodes encodes back to the same bytes.
func TestFrameRejectsMalformedKeyed(t *testing.T) {
	for _, tc := range malformedKeyedCases() {
		t.Run(tc.name, func(t *testing.T) {
			if got, _, err := wal.DecodeFrame(tc.b); !errors.Is(err, wal.ErrCorrupt) {
				t.Fatalf("decoded %+v, err %v; want ErrCorrupt", got, err)
			}
			if _, err := wal.DecodeFrames(nil, tc.b); err == nil {
				t.Fatal("DecodeFrames took it")
			}
		})
	}
}

// TestScanKeyed: ScanFrames and NextFrame give a keyed record's own kind
// and its id, so a cluster's scans (live jobs, id floors, snapshots) take
// a keyed put for a put; ScanReqs hands out exactly the records a dedup
// table reads.
func TestScanKeyed(t *testing.T) {
	recs := append(sampleRecords(), keyedRecords()...)
	var b []byte
	var want []string
	var wantReqs []wal.Record
	for i := range recs {
		n := len(b)
		b = wal.AppendFrame(b, &recs[i])
		want = append(want, fmt.Sprint(recs[i].Kind, recs[i].ID, len(b)-n))
		if recs[i].Kind == wal.KindClock || recs[i].Kind == wal.KindReq || !recs[i].Req.IsZero() {
			wantReqs = append(wantReqs, recs[i])
		}
	}
	var got []string
	if err := wal.ScanFrames(b, func(kind wal.Kind, id uint64, size int) {
		got = append(got, fmt.Sprint(kind, id, size))
	}); err != nil || !slices.Equal(got, want) {
		t.Fatalf("scanned %v, %v;\nwant %v", got, err, want)
	}
	var gotReqs []string
	if err := wal.ScanReqs(b, func(r *wal.Record) { gotReqs = append(gotReqs, fmt.Sprint(*r)) }); err != nil {
		t.Fatal(err)
	}
	var wantStr []string
	for _, r := range wantReqs {
		wantStr = append(wantStr, fmt.Sprint(r))
	}
	if !slices.Equal(gotReqs, wantStr) {
		t.Errorf("ScanReqs gave\n%v\nwant\n%v", gotReqs, wantStr)
	}
	for _, tc := range malformedKeyedCases() {
		if tc.b[8] == 7 || tc.b[8] == byte(wal.KindReq) || tc.b[8] == byte(wal.KindClock) {
			if err := wal.ScanReqs(tc.b, func(*wal.Record) {}); err == nil {
				t.Errorf("%s: ScanReqs took it", tc.name)
			}
		}
	}
	keyed := wal.EncodeFrame(nil, &wal.Record{Kind: wal.KindDelete, ID: 5, Req: goldenKey})
	if _, _, _, err := wal.NextFrame(frameOf(keyed[8 : 8+20])); err == nil {
		t.Error("NextFrame read the kind of a keyed frame too short to hold it")
	}
}

// TestClockOf: a batch's leading KindClock gives its time, anything else
// none; LatestClock finds the latest anywhere among whole frames.
func TestClockOf(t *testing.T) {
	var b []byte
	b = wal.AppendFrame(b, &wal.Record{Kind: wal.KindClock, Time: 7_000})
	b = wal.AppendFrame(b, &wal.Record{Kind: wal.KindDelete, ID: 3, Req: goldenKey})
	if got, ok := wal.ClockOf(b); !ok || got != 7_000 {
		t.Fatalf("ClockOf a batch = %d, %v; want 7000", got, ok)
	}
	rest := b[len(wal.AppendFrame(nil, &wal.Record{Kind: wal.KindClock, Time: 7_000})):]
	if got, ok := wal.ClockOf(rest); ok {
		t.Fatalf("ClockOf a batch without one = %d", got)
	}
	b = wal.AppendFrame(b, &wal.Record{Kind: wal.KindClock, Time: 9_000})
	b = wal.AppendFrame(b, &wal.Record{Kind: wal.KindClock, Time: 8_000})
	if got, err := wal.LatestClock(b); err != nil || got != 9_000 {
		t.Fatalf("LatestClock = %d, %v; want 9000", got, err)
	}
	if got, err := wal.LatestClock(rest[:len(rest)-1]); err == nil {
		t.Fatalf("LatestClock of a cut frame = %d, no error", got)
	}
}
