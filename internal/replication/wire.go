package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sproutmq/sprout/store/wal"
)

// The members' wire format. Every connection starts with a hello each
// way, the dialer's first, the listener's answer second:
//
//	"SPRT" | version u16 | length u16 | payload (length bytes, at most maxHello)
//	payload: kind u8 | cluster u64 | sender's id u64 |
//	         sender's name | receiver's name | sender's client address | refusal |
//	         sender's HTTP address
//	(each string: length u16, bytes)
//
// The HTTP address (--http, where a follower forwards the admin API to
// the leader) came last, within version 1: a hello that ends after the
// refusal is read with none, and a reader that knows only four strings
// ignores the fifth. Version 2 streams snapshots and sends large
// messages in parts (below); a member refuses another version's hello.
//
// An answer with a refusal says why the listener closes the connection;
// a hello from another protocol version is answered with the listener's
// version and a refusal. After the hellos a messages connection carries
// frames from the dialer only, each a header u32 (two flag bits, then the
// length of what follows) and the bytes:
//
//	whole message:  length | raftpb.Message (protobuf), length <= maxFrame
//	message header: frameLarge|length | count u32 | count × data length u64 |
//	                raftpb.Message with its entries' data left out, length <= maxFrame
//	part:           framePart|length | data, length <= messagePart
//
// A message whose encoding is larger than messagePart goes as a header,
// then its entries' data, in order, in parts; whole messages may come
// between the parts, and the message is complete with its last part.
//
// A snapshot connection carries one snapshot, then the receiver's
// verdict: the MsgSnap as a whole message (its snapshot's Data empty);
// one byte back, snapshotProceed or snapshotRefused; then its records in
// chunks, each
//
//	length u32 | CRC-32C u32 of the bytes | bytes (whole record frames)
//
// a length of 0 ending them, then a trailer
//
//	cluster u64 | index u64 | term u64 | bytes u64 | records u64 | CRC-32C u32 of every chunk's bytes
//
// and one byte back, snapshotTaken or snapshotRefused.
const (
	helloMagic      = "SPRT"
	protocolVersion = 2
	maxHello        = 4 << 10
	// maxFrame bounds a whole message and a message's header: a larger
	// length is refused before anything is allocated for it. Messages
	// larger than messagePart go in parts.
	maxFrame = 4 << 20
	// messagePart bounds a whole message the sender writes, and each part
	// of a larger one: what a heartbeat may wait behind.
	messagePart = 1 << 20
	// maxEntryData bounds an entry's data in a message received: what one
	// log frame holds.
	maxEntryData = 1<<32 - 1 - entryFrameFields
	// maxChunk bounds a snapshot's chunk received: what one head frame
	// holds (the sender's are up to snapshotChunk, or one larger record).
	maxChunk = 1<<32 - 1 - headFrameFields

	frameLarge  uint32 = 1 << 31
	framePart   uint32 = 1 << 30
	frameLength        = framePart - 1

	snapshotProceed byte = 1
	snapshotTaken   byte = 1
	snapshotRefused byte = 0
)

// streamKind says what a connection carries after its hellos.
type streamKind uint8

const (
	streamMessages streamKind = 1
	streamSnapshot streamKind = 2
)

// hello opens each connection, both ways.
type hello struct {
	Version uint16
	Kind    streamKind
	Cluster uint64
	FromID  uint64
	From    string
	To      string
	Client  string // the sender's client address (-l/-p), for the proxy
	Refusal string // in an answer: why the connection is refused
	HTTP    string // the sender's --http address, for the admin API; "" without one
}

var (
	errNotHello = errors.New("replication: not a member's hello")
	errTooLarge = errors.New("replication: frame too large")
)

// appendHello encodes h; strings longer than a hello can hold are cut.
func appendHello(b []byte, h *hello) []byte {
	b = append(b, helloMagic...)
	b = binary.BigEndian.AppendUint16(b, h.Version)
	at := len(b)
	b = append(b, 0, 0) // the payload's length, below
	b = append(b, byte(h.Kind))
	b = binary.BigEndian.AppendUint64(b, h.Cluster)
	b = binary.BigEndian.AppendUint64(b, h.FromID)
	for _, s := range []string{h.From, h.To, h.Client, h.Refusal, h.HTTP} {
		s = s[:min(len(s), 1000)]
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	binary.BigEndian.PutUint16(b[at:], uint16(len(b)-at-2))
	return b
}

// readHello reads one hello. A hello of another version comes back with
// only its Version set, and no error: the caller refuses it by name.
func readHello(r io.Reader) (*hello, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	if string(head[:4]) != helloMagic {
		return nil, errNotHello
	}
	h := &hello{Version: binary.BigEndian.Uint16(head[4:])}
	n := int(binary.BigEndian.Uint16(head[6:]))
	if n > maxHello {
		return nil, fmt.Errorf("%w: %d bytes", errTooLarge, n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, err
	}
	if h.Version != protocolVersion {
		return h, nil
	}
	if len(payload) < 17 {
		return nil, errNotHello
	}
	h.Kind = streamKind(payload[0])
	h.Cluster = binary.BigEndian.Uint64(payload[1:])
	h.FromID = binary.BigEndian.Uint64(payload[9:])
	rest := payload[17:]
	for i, s := range []*string{&h.From, &h.To, &h.Client, &h.Refusal, &h.HTTP} {
		if i == 4 && len(rest) == 0 {
			break // a hello from before the HTTP address
		}
		if len(rest) < 2 || len(rest) < 2+int(binary.BigEndian.Uint16(rest)) {
			return nil, errNotHello
		}
		l := int(binary.BigEndian.Uint16(rest))
		*s, rest = string(rest[2:2+l]), rest[2+l:]
	}
	return h, nil
}

// appendFrame encodes m as a whole message's frame, refusing one past
// maxFrame.
func appendFrame(b []byte, m *pb.Message) ([]byte, error) {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return b[:at], err
	}
	n := len(b) - at - 4
	if n > maxFrame {
		return b[:at], fmt.Errorf("%w: a %v of %d bytes", errTooLarge, m.GetType(), n)
	}
	binary.BigEndian.PutUint32(b[at:], uint32(n))
	return b, nil
}

// messageWriter writes messages to one connection: a small one at once,
// a large one as a header and then a part at a time (part), so that the
// caller writes other messages between its parts. Appends keep their
// order, as raft's replication wants on one connection: one that comes
// while a message is written in parts waits behind it, whatever its size;
// heartbeats, votes and answers go at once. One goroutine uses it.
type messageWriter struct {
	w   io.Writer
	buf []byte
	// queue is what waits behind a message in parts, in order, the first
	// being that message; data is its entries' data not yet written.
	queue []*pb.Message
	data  [][]byte
	// dropped is told of a message too large to send (a header past
	// maxFrame): raft would send it again and again.
	dropped func(error)
}

// busy reports whether a message has parts left to write.
func (mw *messageWriter) busy() bool { return len(mw.queue) > 0 }

// write writes m, or queues it, and reports how many messages it
// finished: written whole, or dropped as too large.
func (mw *messageWriter) write(m *pb.Message) (int, error) {
	if mw.busy() && (m.GetType() == pb.MsgApp || proto.Size(m) > messagePart) {
		mw.queue = append(mw.queue, m)
		return 0, nil
	}
	if proto.Size(m) <= messagePart {
		return mw.whole(m)
	}
	mw.queue = append(mw.queue, m)
	return mw.advance()
}

// whole writes m as one frame.
func (mw *messageWriter) whole(m *pb.Message) (int, error) {
	var err error
	mw.buf, err = appendFrame(mw.buf[:0], m)
	if errors.Is(err, errTooLarge) {
		mw.dropped(err)
		return 1, nil
	}
	if err == nil {
		_, err = mw.w.Write(mw.buf)
	}
	mw.trim()
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// advance writes the queue from its first message on: small ones whole,
// until one that goes in parts, whose header it writes. It reports how
// many it finished.
func (mw *messageWriter) advance() (int, error) {
	done := 0
	for len(mw.queue) > 0 {
		m := mw.queue[0]
		if proto.Size(m) <= messagePart {
			n, err := mw.whole(m)
			if err != nil {
				return done, err
			}
			done += n
			mw.pop()
			continue
		}
		err := mw.header(m)
		if errors.Is(err, errTooLarge) {
			mw.dropped(err)
			done++
			mw.pop()
			continue
		}
		if err != nil {
			return done, err
		}
		if len(mw.data) > 0 {
			return done, nil
		}
		done++ // nothing but its header
		mw.pop()
	}
	return done, nil
}

func (mw *messageWriter) pop() {
	mw.queue[0] = nil
	mw.queue = mw.queue[1:]
}

// header writes m's header and keeps its entries' data for its parts.
func (mw *messageWriter) header(m *pb.Message) error {
	head := new(pb.Message)
	dst := head.ProtoReflect()
	// Every field but the entries' data, shared and not copied: nobody
	// writes into a message once raft has handed it out.
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	head.Entries = make([]*pb.Entry, len(m.GetEntries()))
	mw.data = mw.data[:0]
	b := binary.BigEndian.AppendUint32(mw.buf[:0], 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.GetEntries())))
	for i, e := range m.GetEntries() {
		head.Entries[i] = &pb.Entry{Term: e.Term, Index: e.Index, Type: e.Type}
		b = binary.BigEndian.AppendUint64(b, uint64(len(e.GetData())))
		if len(e.GetData()) > 0 {
			mw.data = append(mw.data, e.GetData())
		}
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(b, head)
	if err != nil {
		return err
	}
	if len(b)-4 > maxFrame {
		mw.data = mw.data[:0]
		return fmt.Errorf("%w: a %v's header of %d bytes", errTooLarge, m.GetType(), len(b)-4)
	}
	binary.BigEndian.PutUint32(b, frameLarge|uint32(len(b)-4))
	mw.buf = b
	_, err = mw.w.Write(b)
	mw.trim()
	return err
}

// part writes the next part of the first message in the queue, and once
// that one is whole, what waited behind it (advance); it reports how many
// messages it finished.
func (mw *messageWriter) part() (int, error) {
	n := 0
	for _, d := range mw.data {
		n += len(d)
		if n >= messagePart {
			n = messagePart
			break
		}
	}
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], framePart|uint32(n))
	if _, err := mw.w.Write(head[:]); err != nil {
		return 0, err
	}
	for n > 0 {
		k := min(n, len(mw.data[0]))
		if _, err := mw.w.Write(mw.data[0][:k]); err != nil {
			return 0, err
		}
		n -= k
		if mw.data[0] = mw.data[0][k:]; len(mw.data[0]) == 0 {
			mw.data = mw.data[1:]
		}
	}
	if len(mw.data) > 0 {
		return 0, nil
	}
	mw.pop()
	done, err := mw.advance()
	return done + 1, err
}

// trim lets a rare large buffer go.
func (mw *messageWriter) trim() {
	if cap(mw.buf) > messagePart {
		mw.buf = nil
	}
}

// frameReader reads messages from one connection into one buffer,
// reused: protobuf copies what it decodes, so no message aliases it.
type frameReader struct {
	r   *bufio.Reader
	buf []byte
	// The message in parts being read: its entries' data lengths, and the
	// entry and offset its next part fills.
	large *pb.Message
	lens  []uint64
	entry int
	off   uint64
}

// read returns the next message: a whole one, or one in parts once its
// last part has come. A length past its bound is refused before
// anything is allocated for it.
func (f *frameReader) read() (*pb.Message, error) {
	for {
		var head [4]byte
		if _, err := io.ReadFull(f.r, head[:]); err != nil {
			return nil, err
		}
		h := binary.BigEndian.Uint32(head[:])
		n := h & frameLength
		switch {
		case h&framePart != 0 && h&frameLarge != 0:
			return nil, fmt.Errorf("replication: a malformed frame header %x", h)
		case h&framePart != 0:
			if m, err := f.readPart(n); m != nil || err != nil {
				return m, err
			}
			continue
		}
		if n > maxFrame {
			return nil, fmt.Errorf("%w: %d bytes", errTooLarge, n)
		}
		if cap(f.buf) < int(n) {
			f.buf = make([]byte, n)
		}
		b := f.buf[:n]
		if _, err := io.ReadFull(f.r, b); err != nil {
			return nil, err
		}
		var m *pb.Message
		var err error
		if h&frameLarge == 0 {
			m = new(pb.Message)
			if err = proto.Unmarshal(b, m); err != nil {
				m, err = nil, fmt.Errorf("replication: a malformed message: %w", err)
			}
		} else {
			m, err = f.readHeader(b)
		}
		if n > messagePart {
			f.buf = nil // a rare large frame (protobuf copied it): do not keep its buffer for good
		}
		if m != nil || err != nil {
			return m, err
		}
	}
}

// readHeader takes a large message's header; it returns the message if
// it has no data to wait for.
func (f *frameReader) readHeader(b []byte) (*pb.Message, error) {
	if f.large != nil {
		return nil, errors.New("replication: a message in parts began before the last one ended")
	}
	if len(b) < 4 {
		return nil, errors.New("replication: a malformed message header")
	}
	count := int(binary.BigEndian.Uint32(b))
	b = b[4:]
	if count > len(b)/8 {
		return nil, fmt.Errorf("replication: a message header counts %d entries in %d bytes", count, len(b))
	}
	f.lens = f.lens[:0]
	for range count {
		n := binary.BigEndian.Uint64(b)
		if n > maxEntryData {
			return nil, fmt.Errorf("%w: an entry of %d bytes", errTooLarge, n)
		}
		f.lens = append(f.lens, n)
		b = b[8:]
	}
	m := new(pb.Message)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("replication: a malformed message header: %w", err)
	}
	if len(m.GetEntries()) != count {
		return nil, fmt.Errorf("replication: a message header counts %d entries and holds %d", count, len(m.GetEntries()))
	}
	for _, e := range m.GetEntries() {
		e.Data = nil // the parts fill it, at the length counted
	}
	f.large, f.entry, f.off = m, 0, 0
	return f.complete(), nil
}

// readPart reads n bytes of the large message's data; it returns the
// message once it is complete.
func (f *frameReader) readPart(n uint32) (*pb.Message, error) {
	if f.large == nil {
		return nil, errors.New("replication: a part of no message")
	}
	if n > messagePart {
		return nil, fmt.Errorf("%w: a part of %d bytes", errTooLarge, n)
	}
	left := uint64(n)
	for left > 0 {
		f.skipFilled()
		if f.entry == len(f.lens) {
			return nil, errors.New("replication: a part past its message's data")
		}
		e := f.large.Entries[f.entry]
		if e.Data == nil {
			// Allocated as its first part comes: a header alone costs nothing.
			e.Data = make([]byte, f.lens[f.entry])
		}
		k := min(left, f.lens[f.entry]-f.off)
		if _, err := io.ReadFull(f.r, e.Data[f.off:f.off+k]); err != nil {
			return nil, err
		}
		f.off += k
		left -= k
	}
	return f.complete(), nil
}

// skipFilled moves past the entries whose data is all there.
func (f *frameReader) skipFilled() {
	for f.entry < len(f.lens) && f.off == f.lens[f.entry] {
		f.entry, f.off = f.entry+1, 0
	}
}

// complete returns the large message if its data is all there.
func (f *frameReader) complete() *pb.Message {
	f.skipFilled()
	if f.entry < len(f.lens) {
		return nil
	}
	m := f.large
	f.large = nil
	return m
}

// writeChunk writes one chunk of a snapshot's records; an empty one ends
// them.
func writeChunk(w io.Writer, chunk []byte) error {
	var head [8]byte
	binary.BigEndian.PutUint32(head[:], uint32(len(chunk)))
	binary.BigEndian.PutUint32(head[4:], crc32.Checksum(chunk, castagnoli))
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	_, err := w.Write(chunk)
	return err
}

// readChunk reads one chunk into *buf (grown if need be) and checks its
// CRC; an empty chunk ends the records.
func readChunk(r io.Reader, buf *[]byte) ([]byte, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > maxChunk {
		return nil, fmt.Errorf("%w: a snapshot's chunk of %d bytes", errTooLarge, n)
	}
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	if crc32.Checksum(b, castagnoli) != binary.BigEndian.Uint32(head[4:]) {
		return nil, fmt.Errorf("%w: a snapshot's chunk of %d bytes fails its CRC", ErrBadRecords, n)
	}
	return b, nil
}

// snapshotTrailer ends a snapshot's records: what the whole must be.
type snapshotTrailer struct {
	cluster, index, term, bytes, records uint64
	crc                                  uint32
}

// add counts a chunk into the trailer.
func (s *snapshotTrailer) add(chunk []byte) {
	s.bytes += uint64(len(chunk))
	s.crc = crc32.Update(s.crc, castagnoli, chunk)
	_ = wal.ScanFrames(chunk, func(wal.Kind, uint64, int) { s.records++ })
}

const trailerSize = 5*8 + 4

func (s *snapshotTrailer) append(b []byte) []byte {
	for _, v := range []uint64{s.cluster, s.index, s.term, s.bytes, s.records} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return binary.BigEndian.AppendUint32(b, s.crc)
}

func readTrailer(r io.Reader) (snapshotTrailer, error) {
	var b [trailerSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return snapshotTrailer{}, err
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(b[8*i:]) }
	return snapshotTrailer{cluster: u(0), index: u(1), term: u(2), bytes: u(3), records: u(4),
		crc: binary.BigEndian.Uint32(b[40:])}, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
