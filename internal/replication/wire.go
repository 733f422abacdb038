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
// ignores the fifth. Version 2 streams snapshots (below); a member
// refuses another version's hello.
//
// An answer with a refusal says why the listener closes the connection;
// a hello from another protocol version is answered with the listener's
// version and a refusal. After the hellos a messages connection carries
// frames, one raft message each, from the dialer only:
//
//	length u32 | raftpb.Message (protobuf), length <= maxFrame
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
	// maxFrame bounds one message: raft's appends are about 1 MiB
	// (maxMsgSize) plus one entry, a batch of about MaxBatch; snapshots
	// travel apart.
	maxFrame = 64 << 20
	// maxChunk bounds a snapshot's chunk received: what one head frame
	// holds (the sender's are up to snapshotChunk, or one larger record).
	maxChunk = 1<<32 - 1 - headFrameFields

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

// appendFrame encodes m as a frame, refusing one past maxFrame.
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

// frameReader reads frames from one connection into one buffer, reused:
// protobuf copies what it decodes, so no message aliases it.
type frameReader struct {
	r   *bufio.Reader
	buf []byte
}

// read decodes the next frame. A length past maxFrame is refused before
// anything is allocated for it.
func (f *frameReader) read() (*pb.Message, error) {
	var head [4]byte
	if _, err := io.ReadFull(f.r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
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
	m := new(pb.Message)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("replication: a malformed message: %w", err)
	}
	if n > 1<<20 {
		f.buf = nil // a rare large frame: do not keep its buffer for good
	}
	return m, nil
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
