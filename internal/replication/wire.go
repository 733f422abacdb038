package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strconv"
	"sync/atomic"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sproutmq/sprout/store/wal"
)

// The members' wire format. Every connection starts with a hello each
// way, the dialer's first, the listener's answer second:
//
//	"SPRT" | version u16 (2) | length u16 | payload (length bytes, at most maxHello)
//	payload: kind u8 | cluster u64 | sender's id u64 |
//	         sender's name | receiver's name | sender's client address | refusal |
//	         sender's HTTP address | trailer
//	(each string: length u16, bytes)
//	trailer: highest protocol u16 | incarnation u64 | [sender's cluster address] (and later fields)
//
// Every hello says version 2, and the protocols after it hide in the
// trailer, which a member of protocol 2 does not read: it reads five
// strings and ignores what follows. A member that speaks protocol 3 sends
// the trailer; the connection then speaks the highest protocol both ends
// speak (negotiate): 3 between two such members, 2 when either end sent
// no trailer. So members of two releases talk during a rolling upgrade.
// A hello that ends after the refusal (the first releases') is read with
// no HTTP address and no trailer. The incarnation is drawn at random when
// a member starts: a new one tells its peers it restarted. The sender's
// cluster address (its own entry's in --cluster-peers, else its
// --cluster-listen) follows, where the sender's release writes it: a
// member that is joining takes a hello from a member its --cluster-peers
// did not name at that address, and answers it there (transport.check).
//
// An answer with a refusal says why the listener closes the connection;
// a hello of another version than 2 is answered with a refusal. After the
// hellos a messages connection carries frames from the dialer only, each a
// header u32 (two flag bits, then the length of what follows) and the
// bytes. Protocol 2 carries group 0's messages only:
//
//	whole message:  length | raftpb.Message (protobuf), length <= maxFrame
//	message header: frameLarge|length | count u32 | count × data length u64 |
//	                raftpb.Message with its entries' data left out, length <= maxFrame
//	part:           framePart|length | data, length <= messagePart
//
// Protocol 3 names each message's Raft group (u16). Its small messages
// go in batches, its heartbeats coalesced (the shape of CockroachDB's
// MultiRaft: one exchange per pair of members per tick, whatever the
// groups they share), and a typed frame carries either:
//
//	batch:          frameTyped|length | typedBatch u8 |
//	                (group u16 | length u32 | raftpb.Message)...
//	heartbeats:     frameTyped|length | typedHeartbeats u8 |
//	                (group u16 | flags u8 | term u64 | commit u64 | context length u16 | context)...
//	migrate:        frameTyped|length | typedMigrate u8 |
//	                group u16 | count u32 | count × job id u64
//	message header: frameLarge|length | group u16 | then as protocol 2's
//	part:           as protocol 2's
//
// A migrate frame is no raft message: it asks the group's leader to
// rewrite live jobs this member's log wants out of an old segment
// (migrate.go).
//
// A heartbeat's sender and receiver are the connection's ends; its flags
// say whether it is a response and which of term, commit and context
// raft set, so that the message read is the message written.
//
// A message whose encoding is larger than messagePart goes as a header,
// then its entries' data, in order, in parts; whole messages may come
// between the parts, and the message is complete with its last part.
//
// A commands connection (protocol 3) carries items frames, whose layout
// commands.go gives.
//
// A snapshot connection carries one snapshot, then the receiver's
// verdict: the MsgSnap as a whole message (protocol 3: a batch of one;
// its snapshot's Data empty); one byte back, snapshotProceed or
// snapshotRefused; then its records in chunks, each
//
//	length u32 | CRC-32C u32 of the bytes | bytes (whole record frames)
//
// a length of 0 ending them, then a trailer
//
//	cluster u64 | index u64 | term u64 | bytes u64 | records u64 | CRC-32C u32 of every chunk's bytes
//
// and one byte back, snapshotTaken or snapshotRefused.
const (
	helloMagic = "SPRT"
	// helloVersion is the version every hello says; the protocols after
	// it are named in the trailer.
	helloVersion = 2
	// minProtocol and maxProtocol are the protocols this member speaks.
	// 4 is 3's frames from a member that runs a router: it reads the
	// commands streams others dial to it, so sessions on other members
	// may send it their commands when it leads (protocolRouter). 5 is
	// 4's from a member whose router reads a replica move that group 0's
	// leader planned (internal/router's KindMove; protocolMoves). 6 is
	// 5's from a member whose router answers a session's question whether
	// it still holds a job (internal/router's OpHeld; protocolHeld). 7 is
	// 6's from a member whose router reads the list of another member's
	// open sessions, and closes the owner clients of those not in it
	// (internal/router's KindSessions; protocolSessions). 8 is 7's from a
	// member whose router reads a leader's report naming the replicas
	// behind (internal/router's KindLeadersBehind; protocolBehind).
	minProtocol = 2
	maxProtocol = 8
	// protocolRouter is the protocol of a member whose router serves the
	// commands stream (Host.Routes).
	protocolRouter = 4
	// protocolMoves is the protocol of a member that makes the replica
	// moves group 0's leader sends it (Host.TakesMoves).
	protocolMoves = 5
	// protocolHeld is the protocol of a member that answers OpHeld
	// (Host.AnswersHeld).
	protocolHeld = 6
	// protocolSessions is the protocol of a member that reads KindSessions
	// (Host.SyncsSessions).
	protocolSessions = 7
	// protocolBehind is the protocol of a member that reads
	// KindLeadersBehind (Host.ReadsBehind).
	protocolBehind = 8
	// helloTrailer is the trailer's length as this release writes it.
	helloTrailer = 2 + 8
	maxHello     = 4 << 10
	// maxFrame bounds a whole message, a batch and a message's header: a
	// larger length is refused before anything is allocated for it.
	// Messages larger than messagePart go in parts.
	maxFrame = 4 << 20
	// messagePart bounds a whole message the sender writes, a batch it
	// starts another message in, and each part of a larger one: what a
	// heartbeat may wait behind.
	messagePart = 1 << 20
	// maxEntryData bounds an entry's data in a message received: what one
	// log frame holds.
	maxEntryData = 1<<32 - 1 - entryFrameFields
	// maxChunk bounds a snapshot's chunk received: what one head frame
	// holds (the sender's are up to snapshotChunk, or one larger record).
	maxChunk = 1<<32 - 1 - headFrameFields

	frameLarge  uint32 = 1 << 31
	framePart   uint32 = 1 << 30
	frameTyped         = frameLarge | framePart // protocol 3; protocol 2 refuses both flags
	frameLength        = framePart - 1

	typedBatch      byte = 1
	typedHeartbeats byte = 2
	typedMigrate    byte = 3
	typedItems      byte = 4 // the commands stream's (commands.go)

	snapshotProceed byte = 1
	snapshotTaken   byte = 1
	snapshotRefused byte = 0
)

// A coalesced heartbeat's flags.
const (
	beatResponse byte = 1 << iota
	beatTerm
	beatCommit
	beatContext
	beatFlags = beatResponse | beatTerm | beatCommit | beatContext
)

// streamKind says what a connection carries after its hellos.
type streamKind uint8

const (
	streamMessages streamKind = 1
	streamSnapshot streamKind = 2
	streamCommands streamKind = 3 // protocol 3 only (commands.go)
)

// groupID names a Raft group. The cluster's one group today is group0.
type groupID uint16

// String names g in logs and errors: its number.
func (g groupID) String() string { return strconv.Itoa(int(g)) }

const (
	group0 groupID = 0
	// maxGroups bounds the groups of a cluster (docs/design/shards.md).
	maxGroups = 256
)

// envelope is a message with the group it belongs to, or (m nil) a
// migrate request's job ids.
type envelope struct {
	group   groupID
	m       *pb.Message
	migrate []uint64
}

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
	// Max is the highest protocol the sender speaks, from the trailer: 0
	// without one (the sender speaks 2); Incarnation is its incarnation.
	Max         uint16
	Incarnation uint64
	// Addr is the sender's cluster address, after the trailer: "" in a
	// hello without it.
	Addr string
}

var (
	errNotHello = errors.New("replication: not a member's hello")
	errTooLarge = errors.New("replication: frame too large")
)

// appendHello encodes h, with the trailer if h.Max is set; strings
// longer than a hello can hold are cut.
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
	if h.Max != 0 {
		b = binary.BigEndian.AppendUint16(b, h.Max)
		b = binary.BigEndian.AppendUint64(b, h.Incarnation)
		if h.Addr != "" {
			a := h.Addr[:min(len(h.Addr), 1000)]
			b = binary.BigEndian.AppendUint16(b, uint16(len(a)))
			b = append(b, a...)
		}
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
	if h.Version != helloVersion {
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
	switch {
	case len(rest) == 0: // a member of protocol 2
	case len(rest) < helloTrailer:
		return nil, errNotHello
	default: // what follows the fields this release knows is a later one's
		h.Max = binary.BigEndian.Uint16(rest)
		h.Incarnation = binary.BigEndian.Uint64(rest[2:])
		if rest = rest[helloTrailer:]; len(rest) > 0 {
			if len(rest) < 2 || len(rest) < 2+int(binary.BigEndian.Uint16(rest)) {
				return nil, errNotHello
			}
			h.Addr = string(rest[2 : 2+binary.BigEndian.Uint16(rest)])
		}
	}
	return h, nil
}

// negotiate is the protocol a connection speaks: the highest both ends
// speak, given the highest this end speaks and the trailer's from the
// other end (0 without one); 0 if they share none.
func negotiate(own, theirs uint16) uint16 {
	if theirs == 0 {
		theirs = minProtocol
	}
	if v := min(own, theirs); v >= minProtocol {
		return v
	}
	return 0
}

// appendFrame encodes m as a whole message's frame of protocol 2,
// refusing one past maxFrame.
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

// appendBatched adds e to the batch frame b (begun if b is empty),
// refusing a batch past maxFrame.
func appendBatched(b []byte, e envelope) ([]byte, error) {
	if len(b) == 0 {
		b = append(b, 0, 0, 0, 0, typedBatch)
	}
	at := len(b)
	b = binary.BigEndian.AppendUint16(b, uint16(e.group))
	b = append(b, 0, 0, 0, 0)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, e.m)
	if err != nil {
		return b[:at], err
	}
	if len(b)-4 > maxFrame {
		return b[:at], fmt.Errorf("%w: a %v of %d bytes", errTooLarge, e.m.GetType(), len(b)-at-6)
	}
	binary.BigEndian.PutUint32(b[at+2:], uint32(len(b)-at-6))
	binary.BigEndian.PutUint32(b, frameTyped|uint32(len(b)-4))
	return b, nil
}

// carries says why protocol version cannot carry group g's messages,
// or nil if it can: protocol 2 carries group 0's only.
func carries(version uint16, g groupID) error {
	if version < 3 && g != group0 {
		return fmt.Errorf("replication: a message of group %d in protocol %d", g, version)
	}
	return nil
}

// appendWhole encodes e as one frame of protocol version: a whole
// message, or a batch of one.
func appendWhole(b []byte, version uint16, e envelope) ([]byte, error) {
	if err := carries(version, e.group); err != nil {
		return b, err
	}
	if version < 3 {
		return appendFrame(b, e.m)
	}
	frame, err := appendBatched(nil, e)
	return append(b, frame...), err
}

// coalescible reports whether m is a heartbeat (or its response) from
// one end of a connection to the other with nothing but what a coalesced
// heartbeat carries: type, from, to, term, commit and context.
// TestCoalescibleFields fails when raft's Message gains a field this does
// not look at.
func coalescible(m *pb.Message, from, to uint64) bool {
	if t := m.GetType(); t != pb.MsgHeartbeat && t != pb.MsgHeartbeatResp ||
		m.From == nil || m.To == nil || m.GetFrom() != from || m.GetTo() != to ||
		len(m.GetContext()) > math.MaxUint16 {
		return false
	}
	return m.LogTerm == nil && m.Index == nil && m.Entries == nil && m.Vote == nil && m.Snapshot == nil &&
		m.Reject == nil && m.RejectHint == nil && m.Responses == nil && len(m.ProtoReflect().GetUnknown()) == 0
}

// appendBeat adds the coalescible heartbeat e to the heartbeats frame b
// (begun if b is empty).
func appendBeat(b []byte, e envelope) []byte {
	if len(b) == 0 {
		b = append(b, 0, 0, 0, 0, typedHeartbeats)
	}
	m := e.m
	var flags byte
	if m.GetType() == pb.MsgHeartbeatResp {
		flags |= beatResponse
	}
	if m.Term != nil {
		flags |= beatTerm
	}
	if m.Commit != nil {
		flags |= beatCommit
	}
	if m.Context != nil {
		flags |= beatContext
	}
	b = binary.BigEndian.AppendUint16(b, uint16(e.group))
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, m.GetTerm())
	b = binary.BigEndian.AppendUint64(b, m.GetCommit())
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.GetContext())))
	b = append(b, m.GetContext()...)
	binary.BigEndian.PutUint32(b, frameTyped|uint32(len(b)-4))
	return b
}

// messageWriter writes messages to one connection: a small one at once
// (protocol 3: into the batch or the heartbeats, written by flush), a
// large one as a header and then a part at a time (part), so that the
// caller writes other messages between its parts. Appends keep their
// order, as raft's replication wants on one connection: one that comes
// while a message is written in parts waits behind it, whatever its size;
// heartbeats, votes and answers go at once. One goroutine uses it.
type messageWriter struct {
	w       io.Writer
	version uint16 // the connection's protocol
	// from and to are the connection's ends: the heartbeats between them
	// are coalesced (protocol 3).
	from, to uint64
	buf      []byte
	// batch and beats are the frames being filled (protocol 3), empty
	// when none is; inBeats counts the heartbeats in beats.
	batch, beats []byte
	inBeats      int
	// coalesced, if set, counts the heartbeats written and their frames.
	coalesced *beatCounts
	// queue is what waits behind a message in parts, in order, the first
	// being that message; data is its entries' data not yet written.
	queue []envelope
	data  [][]byte
	// dropped is told of a message too large to send (a header past
	// maxFrame): raft would send it again and again; or of one the
	// connection's protocol cannot carry.
	dropped func(error)
}

// busy reports whether a message has parts left to write.
func (mw *messageWriter) busy() bool { return len(mw.queue) > 0 }

// write writes e, or queues it, and reports how many messages it
// finished: written whole (or batched), or dropped.
func (mw *messageWriter) write(e envelope) (int, error) {
	if err := carries(mw.version, e.group); err != nil {
		mw.dropped(err)
		return 1, nil
	}
	if e.m == nil {
		return mw.migrate(e)
	}
	size := proto.Size(e.m)
	if mw.busy() && (e.m.GetType() == pb.MsgApp || size > messagePart) {
		mw.queue = append(mw.queue, e)
		return 0, nil
	}
	if size <= messagePart {
		return mw.whole(e, size)
	}
	mw.queue = append(mw.queue, e)
	return mw.advance()
}

// whole writes e as one frame, or adds it to a frame being filled.
func (mw *messageWriter) whole(e envelope, size int) (int, error) {
	var err error
	switch {
	case mw.version < 3:
		mw.buf, err = appendFrame(mw.buf[:0], e.m)
		if err == nil {
			_, err = mw.w.Write(mw.buf)
		}
		mw.trim()
	case coalescible(e.m, mw.from, mw.to):
		mw.beats = appendBeat(mw.beats, e)
		mw.inBeats++
	default:
		if len(mw.batch)+size > messagePart {
			if err := mw.flush(); err != nil {
				return 0, err
			}
		}
		mw.batch, err = appendBatched(mw.batch, e)
	}
	if errors.Is(err, errTooLarge) {
		mw.dropped(err)
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// migrate writes a migrate request as a frame of its own, between the
// parts of a large message if one is being written: what it asks is no
// raft message, and its order among them does not matter. Protocol 2
// cannot carry it; it is dropped, and asked again later.
func (mw *messageWriter) migrate(e envelope) (int, error) {
	if mw.version < 3 {
		mw.dropped(fmt.Errorf("replication: a migrate request in protocol %d", mw.version))
		return 1, nil
	}
	mw.buf = appendMigrate(mw.buf[:0], e.group, e.migrate)
	_, err := mw.w.Write(mw.buf)
	mw.trim()
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// appendMigrate encodes a migrate request of group g for ids, at most
// maxMigrateIDs of them.
func appendMigrate(b []byte, g groupID, ids []uint64) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0, typedMigrate)
	b = binary.BigEndian.AppendUint16(b, uint16(g))
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint64(b, id)
	}
	binary.BigEndian.PutUint32(b[at:], frameTyped|uint32(len(b)-at-4))
	return b
}

// beatCounts count the coalesced heartbeats a transport wrote, and the
// frames they went in: how often groups' heartbeats to a peer met.
type beatCounts struct{ beats, frames atomic.Uint64 }

// flush writes the frames being filled: the heartbeats, then the batch.
func (mw *messageWriter) flush() error {
	if mw.inBeats > 0 && mw.coalesced != nil {
		mw.coalesced.beats.Add(uint64(mw.inBeats))
		mw.coalesced.frames.Add(1)
	}
	mw.inBeats = 0
	for _, f := range []*[]byte{&mw.beats, &mw.batch} {
		if len(*f) == 0 {
			continue
		}
		_, err := mw.w.Write(*f)
		if cap(*f) > 2*messagePart {
			*f = nil // a rare large batch: do not keep its buffer for good
		} else {
			*f = (*f)[:0]
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// advance writes the queue from its first message on: small ones whole,
// until one that goes in parts, whose header it writes. It reports how
// many it finished.
func (mw *messageWriter) advance() (int, error) {
	done := 0
	for len(mw.queue) > 0 {
		e := mw.queue[0]
		if size := proto.Size(e.m); size <= messagePart {
			n, err := mw.whole(e, size)
			if err != nil {
				return done, err
			}
			done += n
			mw.pop()
			continue
		}
		err := mw.header(e)
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
	mw.queue[0] = envelope{}
	mw.queue = mw.queue[1:]
}

// header writes what was batched, then e's header, and keeps its
// entries' data for its parts.
func (mw *messageWriter) header(e envelope) error {
	if err := mw.flush(); err != nil {
		return err
	}
	m := e.m
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
	if mw.version >= 3 {
		b = binary.BigEndian.AppendUint16(b, uint16(e.group))
	}
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

// part writes what was batched, then the next part of the first message
// in the queue, and once that one is whole, what waited behind it
// (advance); it reports how many messages it finished.
func (mw *messageWriter) part() (int, error) {
	if err := mw.flush(); err != nil {
		return 0, err
	}
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
	r       *bufio.Reader
	version uint16 // the connection's protocol
	// from and to are the connection's ends, which a coalesced heartbeat
	// leaves out (protocol 3).
	from, to uint64
	buf      []byte
	// pending are the messages of a batch or heartbeats frame, returned
	// up to next.
	pending []envelope
	next    int
	// The message in parts being read: its group, its entries' data
	// lengths, and the entry and offset its next part fills.
	large      *pb.Message
	largeGroup groupID
	lens       []uint64
	entry      int
	off        uint64
}

// read returns the next message: a whole one, one of a batch or of
// coalesced heartbeats, or one in parts once its last part has come. A
// length past its bound is refused before anything is allocated for it.
func (f *frameReader) read() (envelope, error) {
	for {
		if f.next < len(f.pending) {
			e := f.pending[f.next]
			f.pending[f.next] = envelope{}
			f.next++
			return e, nil
		}
		f.pending, f.next = f.pending[:0], 0
		var head [4]byte
		if _, err := io.ReadFull(f.r, head[:]); err != nil {
			return envelope{}, err
		}
		h := binary.BigEndian.Uint32(head[:])
		n := h & frameLength
		switch {
		case h&frameTyped == frameTyped && f.version < 3:
			return envelope{}, fmt.Errorf("replication: a malformed frame header %x", h)
		case h&frameTyped == framePart:
			if m, err := f.readPart(n); m != nil || err != nil {
				return envelope{group: f.largeGroup, m: m}, err
			}
			continue
		case h&frameTyped == 0 && f.version >= 3:
			return envelope{}, fmt.Errorf("replication: a protocol-2 frame in protocol %d", f.version)
		}
		if n > maxFrame {
			return envelope{}, fmt.Errorf("%w: %d bytes", errTooLarge, n)
		}
		if cap(f.buf) < int(n) {
			f.buf = make([]byte, n)
		}
		b := f.buf[:n]
		if _, err := io.ReadFull(f.r, b); err != nil {
			return envelope{}, err
		}
		var m *pb.Message
		var err error
		switch h & frameTyped {
		case 0:
			m = new(pb.Message)
			if err = proto.Unmarshal(b, m); err != nil {
				m, err = nil, fmt.Errorf("replication: a malformed message: %w", err)
			}
		case frameLarge:
			m, err = f.readHeader(b)
		default:
			err = f.readTyped(b)
		}
		if n > messagePart {
			f.buf = nil // a rare large frame (protobuf copied it): do not keep its buffer for good
		}
		if err != nil {
			return envelope{}, err
		}
		if m != nil {
			return envelope{group: f.largeGroup, m: m}, nil
		}
	}
}

// readTyped takes a batch or a heartbeats frame's messages into pending.
func (f *frameReader) readTyped(b []byte) error {
	if len(b) < 2 {
		return errors.New("replication: an empty typed frame")
	}
	typ, b := b[0], b[1:]
	for len(b) > 0 {
		if len(b) < 2 {
			return errors.New("replication: a malformed typed frame")
		}
		g := groupID(binary.BigEndian.Uint16(b))
		var m *pb.Message
		var ids []uint64
		var err error
		switch typ {
		case typedBatch:
			m, b, err = readBatched(b[2:])
		case typedHeartbeats:
			m, b, err = f.readBeat(b[2:])
		case typedMigrate:
			ids, b, err = readMigrate(b[2:])
		default:
			err = fmt.Errorf("replication: a typed frame of unknown type %d", typ)
		}
		if err != nil {
			return err
		}
		f.pending = append(f.pending, envelope{group: g, m: m, migrate: ids})
	}
	return nil
}

// readMigrate reads a migrate request's ids from b, returning what
// follows; a request of no id, or of more than maxMigrateIDs, is refused.
func readMigrate(b []byte) ([]uint64, []byte, error) {
	if len(b) < 4 {
		return nil, nil, errors.New("replication: a migrate request runs past its frame")
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if n == 0 || n > maxMigrateIDs || uint64(len(b)) < 8*uint64(n) {
		return nil, nil, fmt.Errorf("replication: a migrate request of %d ids in %d bytes", n, len(b))
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	return ids, b[8*n:], nil
}

// readBatched reads one message of a batch from b, returning what follows.
func readBatched(b []byte) (*pb.Message, []byte, error) {
	if len(b) < 4 || uint64(len(b)-4) < uint64(binary.BigEndian.Uint32(b)) {
		return nil, nil, errors.New("replication: a batch's message runs past its frame")
	}
	n := 4 + int(binary.BigEndian.Uint32(b))
	m := new(pb.Message)
	if err := proto.Unmarshal(b[4:n], m); err != nil {
		return nil, nil, fmt.Errorf("replication: a malformed message: %w", err)
	}
	return m, b[n:], nil
}

// readBeat reads one coalesced heartbeat from b, returning what follows.
func (f *frameReader) readBeat(b []byte) (*pb.Message, []byte, error) {
	const fixed = 1 + 8 + 8 + 2
	if len(b) < fixed || len(b) < fixed+int(binary.BigEndian.Uint16(b[17:])) {
		return nil, nil, errors.New("replication: a heartbeat runs past its frame")
	}
	flags := b[0]
	if flags&^beatFlags != 0 {
		return nil, nil, fmt.Errorf("replication: a heartbeat's flags %x", flags)
	}
	// The message's fields, in one allocation: heartbeats come G times a
	// tick.
	v := &struct {
		typ                    pb.MessageType
		from, to, term, commit uint64
	}{pb.MsgHeartbeat, f.from, f.to, binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])}
	if flags&beatResponse != 0 {
		v.typ = pb.MsgHeartbeatResp
	}
	m := &pb.Message{Type: &v.typ, From: &v.from, To: &v.to}
	if flags&beatTerm != 0 {
		m.Term = &v.term
	}
	if flags&beatCommit != 0 {
		m.Commit = &v.commit
	}
	n := fixed + int(binary.BigEndian.Uint16(b[17:]))
	if flags&beatContext != 0 {
		m.Context = append([]byte{}, b[fixed:n]...)
	}
	return m, b[n:], nil
}

// readHeader takes a large message's header; it returns the message if
// it has no data to wait for.
func (f *frameReader) readHeader(b []byte) (*pb.Message, error) {
	if f.large != nil {
		return nil, errors.New("replication: a message in parts began before the last one ended")
	}
	f.largeGroup = group0
	if f.version >= 3 {
		if len(b) < 2 {
			return nil, errors.New("replication: a malformed message header")
		}
		f.largeGroup, b = groupID(binary.BigEndian.Uint16(b)), b[2:]
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
