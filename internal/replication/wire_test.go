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

	"github.com/sproutmq/sprout/store/wal"
)

// TestHello: a hello reads back as written, whole or split anywhere; a
// truncated or foreign one is refused; another version comes back with
// its version only, for the listener to refuse by name.
func TestHello(t *testing.T) {
	h := hello{Version: protocolVersion, Kind: streamSnapshot, Cluster: 0xabc, FromID: 42,
		From: "a", To: "b", Client: "127.0.0.1:11300", Refusal: "no", HTTP: "127.0.0.1:8080"}
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
	binary.BigEndian.PutUint16(other[4:], protocolVersion+1)
	got, err := readHello(bytes.NewReader(other))
	if err != nil || got.Version != protocolVersion+1 || got.From != "" {
		t.Errorf("another version: %+v, %v", got, err)
	}
}

// TestHelloWithoutHTTP: a hello from a member that does not send its
// HTTP address (it ends after the refusal) reads with none, and a hello
// with one reads, as a member that knows only four strings reads it, with
// the same first four.
func TestHelloWithoutHTTP(t *testing.T) {
	h := hello{Version: protocolVersion, Kind: streamMessages, Cluster: 7, FromID: 1,
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

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// TestFrames: messages read back as written; a length past maxFrame is
// refused before anything is allocated for it; garbage is refused.
func TestFrames(t *testing.T) {
	msgs := []*pb.Message{
		{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3))},
		{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
			Entries: []*pb.Entry{{Index: new(uint64(5)), Term: new(uint64(3)), Data: bytes.Repeat([]byte("x"), 3000)}}},
	}
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = appendFrame(b, m); err != nil {
			t.Fatal(err)
		}
	}
	f := frameReader{r: bufio.NewReader(bytes.NewReader(b))}
	for i, want := range msgs {
		got, err := f.read()
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("message %d: %v, %v", i, got, err)
		}
	}
	if _, err := f.read(); err != io.EOF {
		t.Errorf("after the last frame: %v", err)
	}

	huge := binary.BigEndian.AppendUint32(nil, maxFrame+1)
	f = frameReader{r: bufio.NewReader(bytes.NewReader(huge))}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := f.read(); !errors.Is(err, errTooLarge) {
		t.Errorf("a frame past the limit: %v", err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("refusing a huge frame allocated %d bytes", n)
	}

	junk := append(binary.BigEndian.AppendUint32(nil, 3), 0xff, 0xff, 0xff)
	f = frameReader{r: bufio.NewReader(bytes.NewReader(junk))}
	if _, err := f.read(); err == nil {
		t.Error("garbage read as a message")
	}
}

// TestMessagesInParts: a message larger than a part goes as a header and
// parts, with whole messages between them, and reads back as written,
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
	large1, large2 := app(10, 3<<20+17, 0, 5), app(20, messagePart+1)
	var wire bytes.Buffer
	var dropped []error
	mw := messageWriter{w: &wire, dropped: func(err error) { dropped = append(dropped, err) }}
	written := []*pb.Message{beat(1), large1, app(14, 100), large2, app(21, 7)}
	finished := 0
	for _, m := range written {
		n, err := mw.write(m)
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
		if n, err = mw.write(m); err != nil {
			t.Fatal(err)
		}
		finished += n
	}
	if finished != len(written) || len(dropped) > 0 {
		t.Fatalf("%d of %d messages finished, %d dropped", finished, len(written), len(dropped))
	}
	// Every frame within its bound.
	for b := wire.Bytes(); len(b) > 0; {
		h := binary.BigEndian.Uint32(b)
		n := int(h & frameLength)
		if h&framePart != 0 && n > messagePart || h&framePart == 0 && n > maxFrame || h&frameLarge == 0 && h&framePart == 0 && n > messagePart {
			t.Fatalf("a frame %x of %d bytes", h, n)
		}
		b = b[4+n:]
	}
	for _, size := range []int{1, 7, 4096, 1 << 20} {
		f := frameReader{r: bufio.NewReader(&iotest{r: bytes.NewReader(wire.Bytes()), n: size})}
		var got []*pb.Message
		for {
			m, err := f.read()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("reads of %d bytes, message %d: %v", size, len(got), err)
			}
			got = append(got, m)
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
