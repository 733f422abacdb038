package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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
// ignores the fifth.
//
// An answer with a refusal says why the listener closes the connection;
// a hello from another protocol version is answered with the listener's
// version and a refusal. After the hellos a messages connection carries
// frames, one raft message each, from the dialer only:
//
//	length u32 | raftpb.Message (protobuf), length <= maxFrame
//
// and a snapshot connection carries one snapshot, then the receiver's
// verdict: the MsgSnap as a frame with its snapshot's Data left out, then
// the data as length u64 | bytes (length <= the receiver's limit), then
// one byte back, snapshotTaken or snapshotRefused.
const (
	helloMagic      = "SPRT"
	protocolVersion = 1
	maxHello        = 4 << 10
	// maxFrame bounds one message: raft's appends are about 1 MiB
	// (maxMsgSize) plus one entry, a batch of about MaxBatch; snapshots
	// travel apart.
	maxFrame = 64 << 20
	// snapshotChunk is how much of a snapshot is written at a time (each
	// within its deadline), and what the receiver reads before it
	// allocates the length announced.
	snapshotChunk = 1 << 20

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

// writeSnapshot writes a MsgSnap as a snapshot connection carries it:
// the message without its data, then the data, which is written from
// the log's own copy rather than copied into a frame.
func writeSnapshot(w io.Writer, m *pb.Message) error {
	data := m.GetSnapshot().GetData()
	// Every field but the snapshot's data, shared and not copied: nobody
	// writes into a message once raft has handed it out.
	head := new(pb.Message)
	dst := head.ProtoReflect()
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	head.Snapshot = &pb.Snapshot{Metadata: m.GetSnapshot().GetMetadata()}
	b, err := appendFrame(nil, head)
	if err != nil {
		return err
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(data)))
	if _, err := w.Write(b); err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// readSnapshot reads what writeSnapshot wrote, refusing data past limit.
// The announced length is allocated only once its first chunk has
// arrived, so a length alone costs nothing, and the data then costs its
// size once, never a copy while it grows.
func readSnapshot(r *bufio.Reader, limit int64) (*pb.Message, error) {
	f := frameReader{r: r}
	m, err := f.read()
	if err != nil {
		return nil, err
	}
	if m.GetType() != pb.MsgSnap || m.GetSnapshot() == nil {
		return nil, fmt.Errorf("replication: a snapshot connection carried a %v", m.GetType())
	}
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint64(head[:])
	if n > uint64(limit) {
		return nil, fmt.Errorf("%w: a snapshot of %d bytes, the limit is %d", errTooLarge, n, limit)
	}
	first := make([]byte, min(n, snapshotChunk))
	if _, err := io.ReadFull(r, first); err != nil {
		return nil, err
	}
	data := first
	if n > uint64(len(first)) {
		data = make([]byte, n)
		copy(data, first)
		if _, err := io.ReadFull(r, data[len(first):]); err != nil {
			return nil, err
		}
	}
	m.Snapshot.Data = data
	return m, nil
}
