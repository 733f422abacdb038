package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sproutmq/sprout/store/wal"
)

// TestHello: a hello reads back as written, whole or split anywhere; a
// truncated or foreign one is refused; another version comes back with
// its version only, for the listener to refuse by name.
func TestHello(t *testing.T) {
	h := hello{Version: helloVersion, Kind: streamSnapshot, Cluster: 0xabc, FromID: 42,
		From: "a", To: "b", Client: "127.0.0.1:11300", Refusal: "no", HTTP: "127.0.0.1:8080",
		Max: maxProtocol, Incarnation: 0x1234, Addr: "127.0.0.1:7000"}
	b := appendHello(nil, &h)
	for split := range len(b) + 1 {
		r := io.MultiReader(bytes.NewReader(b[:split]), bytes.NewReader(b[split:]))
		got, err := readHello(r)
		if err != nil || *got != h {
			t.Fatalf("split at %d: %+v, %v", split, got, err)
		}
	}
	for n := range len(b) {
		if _, err := readHello(bytes.NewReader(b[:n])); err == nil {
			t.Fatalf("a hello cut to %d bytes was read", n)
		}
	}
	if _, err := readHello(bytes.NewReader([]byte("GET / HTTP/1.1\r\n"))); !errors.Is(err, errNotHello) {
		t.Errorf("HTTP read as a hello: %v", err)
	}
	big := append([]byte(helloMagic), 0, 1, 0xff, 0xff)
	if _, err := readHello(bytes.NewReader(big)); !errors.Is(err, errTooLarge) {
		t.Errorf("a hello of 64 KiB: %v", err)
	}
	// A string whose length runs past the payload.
	bad := slicesClone(b)
	binary.BigEndian.PutUint16(bad[8+17:], 500)
	if _, err := readHello(bytes.NewReader(bad)); !errors.Is(err, errNotHello) {
		t.Errorf("a name past the payload: %v", err)
	}
	other := slicesClone(b)
	binary.BigEndian.PutUint16(other[4:], helloVersion+1)
	got, err := readHello(bytes.NewReader(other))
	if err != nil || got.Version != helloVersion+1 || got.From != "" {
		t.Errorf("another version: %+v, %v", got, err)
	}
}

// TestHelloWithoutHTTP: a hello from a member that does not send its
// HTTP address (it ends after the refusal) reads with none, and a hello
// with one reads, as a member that knows only four strings reads it, with
// the same first four.
func TestHelloWithoutHTTP(t *testing.T) {
	h := hello{Version: helloVersion, Kind: streamMessages, Cluster: 7, FromID: 1,
		From: "a", To: "b", Client: "127.0.0.1:11300", HTTP: "127.0.0.1:8080"}
	b := appendHello(nil, &h)
	// Drop the last string (u16 length and bytes) and fix the payload's length.
	old := slicesClone(b[:len(b)-2-len(h.HTTP)])
	binary.BigEndian.PutUint16(old[6:], uint16(len(old)-8))
	got, err := readHello(bytes.NewReader(old))
	want := h
	want.HTTP = ""
	if err != nil || *got != want {
		t.Fatalf("a hello without the HTTP address: %+v, %v", got, err)
	}
	if got, err := readHello(bytes.NewReader(b)); err != nil || *got != h {
		t.Fatalf("a hello with it: %+v, %v", got, err)
	}
}

// TestHelloWithoutAddr: a hello whose trailer ends after the incarnation
// (a release before the sender's address) reads with no address, a
// later release's fields after the address are left unread, and an
// address whose length runs past the payload is refused.
func TestHelloWithoutAddr(t *testing.T) {
	h := hello{Version: helloVersion, Kind: streamMessages, Cluster: 7, FromID: 1,
		From: "a", To: "b", Client: "127.0.0.1:11300", HTTP: "127.0.0.1:8080",
		Max: maxProtocol, Incarnation: 9, Addr: "10.0.0.1:7000"}
	b := appendHello(nil, &h)
	resize := func(b []byte) []byte {
		binary.BigEndian.PutUint16(b[6:], uint16(len(b)-8))
		return b
	}
	old := resize(slicesClone(b[:len(b)-2-len(h.Addr)]))
	want := h
	want.Addr = ""
	if got, err := readHello(bytes.NewReader(old)); err != nil || *got != want {
		t.Fatalf("a hello without the address: %+v, %v", got, err)
	}
	later := resize(append(slicesClone(b), 0, 3, 'x', 'y', 'z'))
	if got, err := readHello(bytes.NewReader(later)); err != nil || *got != h {
		t.Fatalf("a hello with a later field: %+v, %v", got, err)
	}
	bad := slicesClone(b)
	binary.BigEndian.PutUint16(bad[len(b)-2-len(h.Addr):], uint16(len(h.Addr)+1))
	if _, err := readHello(bytes.NewReader(bad)); !errors.Is(err, errNotHello) {
		t.Errorf("an address past the payload: %v", err)
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// writeAll writes msgs with a writer of protocol version from member 1
// to member 2, parts and all, and returns the bytes.
func writeAll(t *testing.T, version uint16, msgs []envelope) []byte {
	t.Helper()
	var wire bytes.Buffer
	mw := messageWriter{w: &wire, version: version, from: 1, to: 2,
		dropped: func(err error) { t.Fatalf("a message dropped: %v", err) }}
	for _, e := range msgs {
		if _, err := mw.write(e); err != nil {
			t.Fatal(err)
		}
	}
	for mw.busy() {
		if _, err := mw.part(); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.flush(); err != nil {
		t.Fatal(err)
	}
	return wire.Bytes()
}

// readAll reads every message from b with a reader of protocol version,
// size bytes at a time.
func readAll(t *testing.T, version uint16, b []byte, size int) []envelope {
	t.Helper()
	f := frameReader{r: bufio.NewReader(&iotest{r: bytes.NewReader(b), n: size}), version: version, from: 1, to: 2}
	var got []envelope
	for {
		e, err := f.read()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("reads of %d bytes, message %d: %v", size, len(got), err)
		}
		got = append(got, e)
	}
}

// sameMessages reports whether got holds the messages of want, each
// with its group, in any order.
func sameMessages(got, want []envelope) bool {
	left := slices.Clone(got)
	for _, w := range want {
		i := slices.IndexFunc(left, func(g envelope) bool {
			return g.group == w.group && proto.Equal(g.m, w.m) && slices.Equal(g.migrate, w.migrate)
		})
		if i < 0 {
			return false
		}
		left = slices.Delete(left, i, i+1)
	}
	return len(left) == 0
}

// TestFrames: in both protocols, messages read back as written (protocol
// 3: with their groups); a length past maxFrame is refused before
// anything is allocated for it; garbage is refused, and so is a frame of
// the other protocol.
func TestFrames(t *testing.T) {
	msgs := []envelope{
		{m: &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3))}},
		{m: &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
			Entries: []*pb.Entry{{Index: new(uint64(5)), Term: new(uint64(3)), Data: bytes.Repeat([]byte("x"), 3000)}}}},
		{m: &pb.Message{Type: pb.MsgVote.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(4))}},
	}
	for _, version := range []uint16{2, 3} {
		want := msgs
		if version >= 3 {
			want = append(slices.Clone(msgs), envelope{group: 7, m: msgs[1].m}, envelope{group: 0xffff, m: msgs[0].m})
		}
		b := writeAll(t, version, want)
		if got := readAll(t, version, b, 1<<20); !sameMessages(got, want) {
			t.Errorf("protocol %d: read %v, want %v", version, got, want)
		}
		other := uint16(5 - version)
		f := frameReader{r: bufio.NewReader(bytes.NewReader(b)), version: other}
		if e, err := f.read(); err == nil {
			t.Errorf("protocol %d's frames read in protocol %d: %v", version, other, e.m)
		}

		huge := binary.BigEndian.AppendUint32(nil, maxFrame+1)
		f = frameReader{r: bufio.NewReader(bytes.NewReader(huge)), version: version}
		if version >= 3 {
			huge = binary.BigEndian.AppendUint32(nil, frameTyped|(maxFrame+1))
			f = frameReader{r: bufio.NewReader(bytes.NewReader(huge)), version: version}
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := f.read(); !errors.Is(err, errTooLarge) {
			t.Errorf("protocol %d: a frame past the limit: %v", version, err)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("protocol %d: refusing a huge frame allocated %d bytes", version, n)
		}
	}

	junk := append(binary.BigEndian.AppendUint32(nil, 3), 0xff, 0xff, 0xff)
	f := frameReader{r: bufio.NewReader(bytes.NewReader(junk)), version: 2}
	if _, err := f.read(); err == nil {
		t.Error("garbage read as a message")
	}
	typed := func(payload ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, frameTyped|uint32(len(payload))), payload...)
	}
	for name, b := range map[string][]byte{
		"an empty typed frame":        typed(typedBatch),
		"an unknown type":             typed(9, 0, 0),
		"a batch's length past it":    typed(typedBatch, 0, 0, 0, 0, 0, 9, 1, 2),
		"a batch holding garbage":     typed(typedBatch, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff),
		"a heartbeat cut short":       typed(typedHeartbeats, 0, 0, 0, 1, 2),
		"a heartbeat's context past":  typed(append([]byte{typedHeartbeats, 0, 0, byte(beatContext)}, append(make([]byte, 16), 0, 9, 1)...)...),
		"a heartbeat's unknown flags": typed(append([]byte{typedHeartbeats, 0, 0, 0x80}, make([]byte, 18)...)...),
	} {
		f := frameReader{r: bufio.NewReader(bytes.NewReader(b)), version: 3}
		if e, err := f.read(); err == nil || err == io.EOF {
			t.Errorf("%s: read %v, %v", name, e.m, err)
		}
	}
}

// TestMigrateFrames: protocol 3 carries migrate requests beside the
// messages, between a large message's parts too, each with its group and
// ids; protocol 2 cannot, and drops them; a request of no id, of too
// many, or running past its frame is refused.
func TestMigrateFrames(t *testing.T) {
	big := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Entries: []*pb.Entry{{Index: new(uint64(5)), Term: new(uint64(3)), Data: bytes.Repeat([]byte("x"), 3*messagePart)}}}
	many := make([]uint64, maxMigrateIDs)
	for i := range many {
		many[i] = uint64(i)<<20 | 7
	}
	msgs := []envelope{
		{group: 1, migrate: []uint64{5, 1<<45 | 9}},
		{group: 0, m: big},
		{group: 2, migrate: many}, // written while big's parts are
		{group: 0, m: &pb.Message{Type: pb.MsgVote.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(4))}},
	}
	b := writeAll(t, 3, msgs)
	for _, size := range []int{7, 1 << 20} {
		if got := readAll(t, 3, b, size); !sameMessages(got, msgs) {
			t.Fatalf("reads of %d bytes: %d envelopes, not the %d written", size, len(got), len(msgs))
		}
	}

	var dropped []error
	mw := messageWriter{w: io.Discard, version: 2, dropped: func(err error) { dropped = append(dropped, err) }}
	if n, err := mw.write(msgs[0]); n != 1 || err != nil || len(dropped) != 1 {
		t.Errorf("protocol 2 wrote a migrate request: %d, %v, dropped %v", n, err, dropped)
	}

	typed := func(payload ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, frameTyped|uint32(len(payload))), payload...)
	}
	tooMany := binary.BigEndian.AppendUint32([]byte{typedMigrate, 0, 1}, maxMigrateIDs+1)
	tooMany = append(tooMany, make([]byte, 8*(maxMigrateIDs+1))...)
	for name, b := range map[string][]byte{
		"no id":           typed(typedMigrate, 0, 1, 0, 0, 0, 0),
		"too many ids":    typed(tooMany...),
		"ids past it":     typed(typedMigrate, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1),
		"a count cut off": typed(typedMigrate, 0, 1, 0, 0),
	} {
		f := frameReader{r: bufio.NewReader(bytes.NewReader(b)), version: 3}
		if e, err := f.read(); err == nil || err == io.EOF {
			t.Errorf("%s: read %v, %v", name, e.migrate, err)
		}
	}
}

// TestHeartbeatsCoalesced: in protocol 3 the heartbeats and their
// responses between the connection's ends, of any groups, go in one
// frame ahead of the batch, and each reads back as the message raft made:
// the same fields set, a context absent, empty or not. A heartbeat with
// anything else set, or not between the connection's ends, goes whole.
func TestHeartbeatsCoalesced(t *testing.T) {
	beat := func(typ pb.MessageType, term, commit *uint64, ctx []byte) *pb.Message {
		return &pb.Message{Type: typ.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: term, Commit: commit, Context: ctx}
	}
	coalesced := []envelope{
		{group: 0, m: beat(pb.MsgHeartbeat, new(uint64(3)), new(uint64(0)), nil)},
		{group: 1, m: beat(pb.MsgHeartbeat, new(uint64(3)), new(uint64(1<<40)), []byte("read-index"))},
		{group: 2, m: beat(pb.MsgHeartbeatResp, new(uint64(5)), nil, []byte{})},
		{group: 300, m: beat(pb.MsgHeartbeatResp, nil, nil, nil)},
	}
	withIndex := beat(pb.MsgHeartbeat, new(uint64(3)), new(uint64(1)), nil)
	withIndex.Index = new(uint64(9))
	fromElsewhere := beat(pb.MsgHeartbeat, new(uint64(3)), new(uint64(1)), nil)
	fromElsewhere.From = new(uint64(7))
	whole := []envelope{
		{group: 0, m: &pb.Message{Type: pb.MsgAppResp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Index: new(uint64(4))}},
		{group: 1, m: withIndex},
		{group: 1, m: fromElsewhere},
	}
	for i, e := range coalesced {
		if !coalescible(e.m, 1, 2) {
			t.Fatalf("heartbeat %d not coalescible", i)
		}
	}
	msgs := []envelope{whole[0], coalesced[0], coalesced[1], whole[1], coalesced[2], whole[2], coalesced[3]}
	b := writeAll(t, 3, msgs)
	var frames []byte
	for rest := b; len(rest) > 0; {
		h := binary.BigEndian.Uint32(rest)
		if h&frameTyped != frameTyped {
			t.Fatalf("a frame %x", h)
		}
		frames = append(frames, rest[4])
		rest = rest[4+h&frameLength:]
	}
	if !slices.Equal(frames, []byte{typedHeartbeats, typedBatch}) {
		t.Errorf("frames of types %v, want the heartbeats, then the batch", frames)
	}
	for _, size := range []int{1, 5, 1 << 20} {
		got := readAll(t, 3, b, size)
		if !sameMessages(got, msgs) {
			t.Fatalf("reads of %d bytes: %v, want %v", size, got, msgs)
		}
		for i, e := range got[:len(coalesced)] {
			if e.group != coalesced[i].group || !proto.Equal(e.m, coalesced[i].m) ||
				(e.m.Context == nil) != (coalesced[i].m.Context == nil) {
				t.Errorf("reads of %d bytes: heartbeat %d is %v of group %d, want %v of group %d",
					size, i, e.m, e.group, coalesced[i].m, coalesced[i].group)
			}
		}
	}
}

// TestNegotiate: a connection speaks the highest protocol both ends
// speak; a hello without a trailer speaks 2; none in common is 0.
func TestNegotiate(t *testing.T) {
	for _, tc := range []struct{ own, theirs, want uint16 }{
		{3, 0, 2}, {3, 2, 2}, {3, 3, 3}, {3, 9, 3}, {2, 3, 2}, {2, 0, 2}, {3, 1, 0},
	} {
		if got := negotiate(tc.own, tc.theirs); got != tc.want {
			t.Errorf("negotiate(%d, %d) = %d, want %d", tc.own, tc.theirs, got, tc.want)
		}
	}
}

// TestMessagesInParts: in both protocols, a message larger than a part
// goes as a header and parts, with whole messages between them, and reads back as written,
// whatever the reads' sizes; no frame the writer makes is larger than a
// part (or, for a header, maxFrame); bad headers and parts are refused,
// and a header alone allocates nothing for the data it announces.
func TestMessagesInParts(t *testing.T) {
	app := func(index uint64, sizes ...int) *pb.Message {
		m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)), Index: new(index)}
		for i, n := range sizes {
			e := &pb.Entry{Index: new(index + 1 + uint64(i)), Term: new(uint64(3))}
			if n > 0 { // an empty entry's data is absent, as raft's empty entries' is
				e.Data = bytes.Repeat([]byte{byte('a' + i)}, n)
			}
			m.Entries = append(m.Entries, e)
		}
		return m
	}
	beat := func(commit uint64) *pb.Message {
		return &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(2)), From: new(uint64(1)), Commit: new(commit)}
	}
	for _, version := range []uint16{2, 3} {
		group := groupID(0)
		if version >= 3 {
			group = 5
		}
		large1, large2 := app(10, 3<<20+17, 0, 5), app(20, messagePart+1)
		var wire bytes.Buffer
		var dropped []error
		mw := messageWriter{w: &wire, version: version, from: 1, to: 2, dropped: func(err error) { dropped = append(dropped, err) }}
		written := []*pb.Message{beat(1), large1, app(14, 100), large2, app(21, 7)}
		finished := 0
		for _, m := range written {
			n, err := mw.write(envelope{group: group, m: m})
			if err != nil {
				t.Fatal(err)
			}
			finished += n
		}
		for k := 0; mw.busy(); k++ {
			n, err := mw.part()
			if err != nil {
				t.Fatal(err)
			}
			finished += n
			m := beat(uint64(2 + k))
			written = append(written, m)
			if n, err = mw.write(envelope{group: group, m: m}); err != nil {
				t.Fatal(err)
			}
			finished += n
		}
		if finished != len(written) || len(dropped) > 0 {
			t.Fatalf("%d of %d messages finished, %d dropped", finished, len(written), len(dropped))
		}
		if err := mw.flush(); err != nil {
			t.Fatal(err)
		}
		// Every frame within its bound: a part, a whole message and a batch
		// of small ones within a part, a header within maxFrame.
		bound := map[uint32]int{framePart: messagePart, 0: messagePart, frameTyped: messagePart, frameLarge: maxFrame}
		for b := wire.Bytes(); len(b) > 0; {
			h := binary.BigEndian.Uint32(b)
			n := int(h & frameLength)
			if n > bound[h&frameTyped] {
				t.Fatalf("a frame %x of %d bytes", h, n)
			}
			b = b[4+n:]
		}
		for _, size := range []int{1, 7, 4096, 1 << 20} {
			var got []*pb.Message
			for _, e := range readAll(t, version, wire.Bytes(), size) {
				if e.group != group {
					t.Fatalf("reads of %d bytes: a message of group %d", size, e.group)
				}
				got = append(got, e.m)
			}
			// Every message, the appends in the order written, and heartbeats
			// written between large1's parts ahead of it.
			var apps, wantApps []uint64
			for _, m := range got {
				if m.GetType() == pb.MsgApp {
					apps = append(apps, m.GetIndex())
				}
			}
			for _, m := range written {
				if m.GetType() == pb.MsgApp {
					wantApps = append(wantApps, m.GetIndex())
				}
				if !slices.ContainsFunc(got, func(g *pb.Message) bool { return proto.Equal(g, m) }) {
					t.Fatalf("reads of %d bytes: a %v (index %d, commit %d) written is not read", size, m.GetType(), m.GetIndex(), m.GetCommit())
				}
			}
			if len(got) != len(written) || !slices.Equal(apps, wantApps) {
				t.Fatalf("reads of %d bytes: %d messages, appends %v; want %d, appends %v", size, len(got), apps, len(written), wantApps)
			}
			if i := slices.IndexFunc(got, func(g *pb.Message) bool { return proto.Equal(g, large1) }); i < 4 {
				t.Fatalf("the first large message came %dth: the heartbeats written between its four parts should come first", i+1)
			}
		}

	}

	// Bad headers and parts, in protocol 2's frames.
	bad := map[string][]byte{
		"a part of no message":  append(binary.BigEndian.AppendUint32(nil, framePart|3), 1, 2, 3),
		"a part past its bound": binary.BigEndian.AppendUint32(nil, framePart|(messagePart+1)),
		"both flags":            binary.BigEndian.AppendUint32(nil, framePart|frameLarge|3),
		"an entry past a log frame": func() []byte {
			b := binary.BigEndian.AppendUint32(nil, 1)
			b = binary.BigEndian.AppendUint64(b, maxEntryData+1)
			return append(binary.BigEndian.AppendUint32(nil, frameLarge|uint32(len(b))), b...)
		}(),
		"more entries counted than held": func() []byte {
			b := binary.BigEndian.AppendUint32(nil, 2)
			b = binary.BigEndian.AppendUint64(b, 5)
			b = binary.BigEndian.AppendUint64(b, 5)
			b, _ = proto.MarshalOptions{}.MarshalAppend(b, app(1, 0))
			return append(binary.BigEndian.AppendUint32(nil, frameLarge|uint32(len(b))), b...)
		}(),
	}
	for name, b := range bad {
		f := frameReader{r: bufio.NewReader(bytes.NewReader(b))}
		if m, err := f.read(); err == nil || err == io.EOF {
			t.Errorf("%s: read %v, %v", name, m, err)
		}
	}

	// A header announcing 4 GiB, and nothing after it.
	hm := app(1, 0)
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint64(b, maxEntryData)
	b, _ = proto.MarshalOptions{}.MarshalAppend(b, hm)
	b = append(binary.BigEndian.AppendUint32(nil, frameLarge|uint32(len(b))), b...)
	f := frameReader{r: bufio.NewReader(bytes.NewReader(b))}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := f.read(); err != io.EOF {
		t.Errorf("a header alone: %v", err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("a header alone allocated %d bytes", n)
	}
}

// iotest reads at most n bytes at a time.
type iotest struct {
	r io.Reader
	n int
}

func (r *iotest) Read(p []byte) (int, error) { return r.r.Read(p[:min(len(p), r.n)]) }

// TestSnapshotChunks: a chunk reads back as written; one whose bytes
// changed fails its CRC; a length past a head frame's is refused before
// anything is allocated; the trailer reads back as written.
func TestSnapshotChunks(t *testing.T) {
	var wire bytes.Buffer
	chunk := wal.AppendFrame(nil, &wal.Record{Kind: wal.KindFull, ID: 3, Tube: "t", Body: []byte("body\r\n")})
	if err := writeChunk(&wire, chunk); err != nil {
		t.Fatal(err)
	}
	if err := writeChunk(&wire, nil); err != nil {
		t.Fatal(err)
	}
	sum := snapshotTrailer{cluster: 1, index: 9, term: 2}
	sum.add(chunk)
	wire.Write(sum.append(nil))
	r := bufio.NewReader(bytes.NewReader(wire.Bytes()))
	var buf []byte
	if got, err := readChunk(r, &buf); err != nil || !bytes.Equal(got, chunk) {
		t.Fatalf("chunk: %q, %v", got, err)
	}
	if got, err := readChunk(r, &buf); err != nil || len(got) != 0 {
		t.Fatalf("the end: %q, %v", got, err)
	}
	if got, err := readTrailer(r); err != nil || got != sum || sum.records != 1 || sum.bytes != uint64(len(chunk)) {
		t.Fatalf("trailer %+v, %v; want %+v", got, err, sum)
	}

	damaged := slicesClone(wire.Bytes())
	damaged[10] ^= 1
	if _, err := readChunk(bufio.NewReader(bytes.NewReader(damaged)), &buf); !errors.Is(err, ErrBadRecords) {
		t.Errorf("a changed byte: %v", err)
	}
	huge := binary.BigEndian.AppendUint32(nil, maxChunk+1)
	huge = binary.BigEndian.AppendUint32(huge, 0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	buf = nil
	if _, err := readChunk(bufio.NewReader(bytes.NewReader(huge)), &buf); !errors.Is(err, errTooLarge) {
		t.Errorf("a chunk past the limit: %v", err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("refusing a huge chunk allocated %d bytes", n)
	}
}

// TestCoalescibleFields: a heartbeat with any field of raft's Message set
// but those a coalesced heartbeat carries is not coalesced, so a field a
// newer raft adds is never lost on the way.
func TestCoalescibleFields(t *testing.T) {
	carried := map[protoreflect.Name]bool{"type": true, "to": true, "from": true, "term": true, "commit": true, "context": true}
	fields := (&pb.Message{}).ProtoReflect().Descriptor().Fields()
	beat := func() *pb.Message {
		return &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(3))}
	}
	if !coalescible(beat(), 1, 2) {
		t.Fatal("a heartbeat is not coalescible")
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		if carried[fd.Name()] {
			continue
		}
		m := beat()
		r := m.ProtoReflect()
		switch {
		case fd.IsList():
			l := r.Mutable(fd).List()
			l.Append(l.NewElement())
		case fd.Message() != nil:
			r.Mutable(fd)
		case fd.Kind() == protoreflect.BoolKind:
			r.Set(fd, protoreflect.ValueOfBool(true))
		case fd.Kind() == protoreflect.BytesKind:
			r.Set(fd, protoreflect.ValueOfBytes([]byte{1}))
		case fd.Kind() == protoreflect.EnumKind:
			r.Set(fd, protoreflect.ValueOfEnum(pb.MsgHeartbeatResp.Number()))
		default:
			r.Set(fd, protoreflect.ValueOfUint64(7))
		}
		if coalescible(m, 1, 2) {
			t.Errorf("a heartbeat with %s set is coalescible", fd.Name())
		}
	}
}
