package replication

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// The commands stream (docs/design/shards.md, 2.1 and 5.9): what a
// member's sessions send to the leaders of the groups that own their
// tubes, and the replies and events that come back, as items payloads
// whose bytes are internal/router's (a count u32, then the items). The
// transport knows only that a payload begins with its count; it never
// decodes an item, so the router may import this package.
//
// One commands stream per ordered pair of members, protocol 3 only: once
// its items handler is set (Host.OnItems), a member dials one to every
// peer whose messages connection speaks 3, with the messages stream's
// hello (kind streamCommands), and writes only on the streams it
// dialled; a listener reads only, and only once its own handler is set.
// So members that run no router open no commands stream. A hello for a
// commands stream that would speak protocol 2 is refused, so a member of
// the release before, or one capped at 2, never gets one. After the
// hellos the dialler writes frames with the Raft stream's header (a u32:
// two flag bits, then the length of what follows):
//
//	items:        frameTyped|length | typedItems u8 | payload, length <= maxFrame
//	items header: frameLarge|5 | typedItems u8 | payload's length u32,
//	              messagePart < payload's length <= maxItemsPayload
//	part:         framePart|length | the payload's next bytes, 0 < length <= messagePart
//	payload:      count u32 | items (internal/router/items.go)
//
// A frame carries one payload, which may be several SendItems took: the
// queue appends a payload's items to the frame being filled while they
// fit its buffer (itemsBuffer, 64 KiB), and adds their count to the
// frame's, so a member's many sessions share each frame and each write
// (a drain of the queue is one flush), and the reader hands the router
// one payload, one Decoder pass, per frame. The payloads' order is kept:
// a frame's items are in the order SendItems took them, and frames go in
// the order they were begun. A payload past the buffer goes in a frame of
// its own; one larger than messagePart goes as an items header and its
// bytes in parts, with nothing between its parts: a session's items
// keep their order, so what is queued behind it waits for its last part.
// The reader refuses (closing the connection, counted in
// TransportStats.Refused) a frame of another kind, a length past its
// bound, a part of no payload or past its payload's length, and any
// frame but a part while a payload in parts is incomplete.
//
// What SendItems took is written in order, once, on the stream open when
// it took it, or lost with that stream: a stream that breaks (or whose
// write takes longer than writeTimeout) loses what was queued or not yet
// flushed, counted in ItemsLost, and is dialled again with backoff; what
// was written and not yet read by the peer's handler is lost too, and
// that no counter can tell. The router learns from OnItemsStream that
// the stream went down and up again, and resends its unanswered requests
// and waits, in order (5.9, "Failure"); the leader side keeps nothing
// per stream, so the replies a broken stream lost are asked for again
// by the member they were for, told that a stream from the leader opened
// (ItemsFrom): the leader's stream to it breaks alone when its writes
// take past writeTimeout (a member paused, its own stream idle). A queue
// that refused a payload for its bound tells the router (ItemsRoom) once
// half of it is written.

const (
	// maxQueuedItems bounds the bytes of payloads queued to one peer and
	// not yet written (5.9): past it SendItems refuses, and the router
	// holds its sessions' input until replies come. A queue holding
	// nothing takes one payload of any size up to maxItemsPayload, so a
	// put of the largest job can always go.
	maxQueuedItems = 4 << 20
	// maxItemsPayload bounds a payload: a put of the largest job -z
	// allows (engine.MaxMaxJobSize, 1 GiB) with its item's fields.
	maxItemsPayload = 1<<30 + messagePart
	// itemsFrame is what a frame holds before its payload: the header
	// u32 and typedItems; itemsHeader is a large payload's header frame
	// after its u32: typedItems and the payload's length.
	itemsFrame  = 4 + 1
	itemsHeader = 1 + 4
	// itemsBuffer is the size of a frame's buffer, made before its first
	// payload and filled by the next ones while they fit: frames of small
	// payloads are at most that large, and never copied to grow. A
	// payload larger goes in a frame of its own, of its size.
	itemsBuffer = 64 << 10
	// spareItemsBuffers is how many buffers of frames written a peer's
	// queue keeps for its next frames.
	spareItemsBuffers = 8
)

var (
	errItemsClosed = errors.New("replication: the member closed the commands stream")
	errItemsCut    = errors.New("replication: cut off")
)

// ItemsHandler takes one payload of the commands stream from member
// from: a count u32 and its items (internal/router's Decoder). It is
// called on the stream's reader goroutine, one payload at a time and in
// the order they were sent; payloads of different members come on
// different goroutines. payload is valid only during the call: whatever
// outlives it must be copied. An error (a payload that does not decode)
// closes the stream, counted in TransportStats.Refused and logged once
// per peer and minute; the sender dials again and its router resends.
// While it runs, the stream reads nothing more: a slow handler holds
// back the sender, whose queue then fills.
type ItemsHandler func(from uint64, payload []byte) error

// SendItems queues payload, an items payload (a count u32 and its items,
// as internal/router's AppendItem makes it), for member to's commands
// stream, and returns at once: false if it was not taken, because no
// commands stream to the member is open (none yet, a broken one not
// dialled again yet, a member that speaks protocol 2, or not a member),
// because the member's queue holds maxQueuedItems (4 MiB) and payload
// would pass it, or because payload is malformed (shorter than 4 bytes,
// past maxItemsPayload, or holding bytes after a count of 0). Those not
// taken are counted in TransportStats.ItemsDropped. payload is copied:
// the caller may reuse it at once. A payload of no item is taken and
// sends nothing.
func (h *Host) SendItems(to uint64, payload []byte) bool {
	return h.transport.sendItems(to, payload)
}

// Routes reports whether member id runs a router that reads the
// commands streams dialled to it: this member, or one whose connection
// speaks protocol 4. A member of the release before speaks 3 and reads
// none: its clients' bytes go to the leader by the proxy, and a session
// must not send it commands.
func (h *Host) Routes(id uint64) bool {
	return id == h.self.ID || h.transport.protocolOf(id) >= protocolRouter
}

// TakesMoves reports whether member id makes the replica moves group
// 0's leader plans and sends it (docs/design/shards.md 1.4): this member,
// or one whose connection speaks protocol 5. A member of a release before
// plans its groups' moves itself, and refuses a move item with the
// commands stream that carried it.
func (h *Host) TakesMoves(id uint64) bool {
	return id == h.self.ID || h.transport.protocolOf(id) >= protocolMoves
}

// PlansOwnMoves reports whether member id is known to be of a release
// that plans its groups' replica moves itself: its connection is open
// and speaks a protocol below 5. Not TakesMoves negated: a member whose
// connection is closed, or just dropped, is of no release known, and a
// member that plans alone on that (planReplicas) would plan beside
// group 0's leader.
func (h *Host) PlansOwnMoves(id uint64) bool {
	p := h.transport.protocolOf(id)
	return id != h.self.ID && p != 0 && p < protocolMoves
}

// AnswersHeld reports whether member id answers a session's question
// whether its owner client still holds a job (internal/router's OpHeld,
// docs/design/shards.md 6.4): this member, or one whose connection
// speaks protocol 6. A member of a release before refuses the request
// with the commands stream that carried it.
func (h *Host) AnswersHeld(id uint64) bool {
	return id == h.self.ID || h.transport.protocolOf(id) >= protocolHeld
}

// SyncsSessions reports whether member id reads the list of another
// member's open sessions (internal/router's KindSessions): it speaks
// protocol 7.
func (h *Host) SyncsSessions(id uint64) bool {
	return id == h.self.ID || h.transport.protocolOf(id) >= protocolSessions
}

// ReadsBehind reports whether member id reads a leader's report that
// names the replicas behind (internal/router's KindLeadersBehind): it
// speaks protocol 8. A member of a release before refuses the item, and
// with it the stream.
func (h *Host) ReadsBehind(id uint64) bool {
	return id == h.self.ID || h.transport.protocolOf(id) >= protocolBehind
}

// HeardFrom reports whether a Raft message from member name reached this
// one within d: a member stopped (SIGSTOP) or cut off keeps its
// connection up for seconds, but sends nothing, where a live replica of a
// group this member leads answers its heartbeats every tick. False for
// a member not known, or never heard from.
func (h *Host) HeardFrom(name string, d time.Duration) bool {
	t := h.transport
	t.mu.Lock()
	p := t.byName[name]
	t.mu.Unlock()
	if p == nil {
		return false
	}
	at := p.heard.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < d
}

// OnItems sets what takes the payloads members send to this one, and
// opens this member's commands streams: until it is first set, none is
// dialled, and those members dial here are open but not read (their
// payloads wait; none is lost). Set OnItemsStream first, so that no
// stream opens untold. It replaces the handler set before, if any; fn
// must not be nil.
func (h *Host) OnItems(fn ItemsHandler) { h.transport.items.setHandler(fn) }

// ItemsEvent is what OnItemsStream is told of the commands stream to a
// member.
type ItemsEvent uint8

const (
	// ItemsUp: the stream opened; SendItems to the member takes payloads
	// from now on.
	ItemsUp ItemsEvent = 1 + iota
	// ItemsDown: the stream closed; SendItems refuses until it opens
	// again, and what was queued, or written and not yet read there, may
	// be lost.
	ItemsDown
	// ItemsRoom: the queue, which refused a payload for being full since
	// it last said so, has written down to half its bound.
	ItemsRoom
	// ItemsFrom: a commands stream from the member opened. What it
	// wrote on the one before and this member had not read, replies to
	// this member's requests among them, may be lost: only this member
	// can ask again.
	ItemsFrom
)

// OnItemsStream sets what is told of the commands streams (ItemsEvent):
// of the stream to each member, on its writer goroutine (ItemsUp before
// the writer takes anything from its queue, so payloads the call sends
// go first; ItemsDown once the queue is emptied), and of the stream from
// each, on its reader goroutine (ItemsFrom before the first payload is
// read). It may call SendItems, and must not block for long.
func (h *Host) OnItemsStream(fn func(to uint64, ev ItemsEvent)) { h.transport.items.stream.Store(&fn) }

// commandsEnds is the transport's side of the commands streams: the
// user's callbacks, the streams read, the counters.
type commandsEnds struct {
	handler atomic.Pointer[ItemsHandler]
	stream  atomic.Pointer[func(to uint64, ev ItemsEvent)]
	// handled is closed once a handler is set: readers wait for it.
	handled     chan struct{} // immutable
	handledOnce sync.Once

	mu      sync.Mutex
	inbound map[string]net.Conn // guarded by mu: each peer's commands connection to this member

	framesSent, bytesSent, framesReceived, bytesReceived atomic.Uint64
	dropped, lost                                        atomic.Uint64
}

func newCommandsEnds() *commandsEnds {
	return &commandsEnds{handled: make(chan struct{}), inbound: make(map[string]net.Conn)}
}

func (c *commandsEnds) setHandler(fn ItemsHandler) {
	c.handler.Store(&fn)
	c.handledOnce.Do(func() { close(c.handled) })
}

// tell tells the user ev of the commands stream to or from id.
func (c *commandsEnds) tell(id uint64, ev ItemsEvent) {
	if fn := c.stream.Load(); fn != nil {
		(*fn)(id, ev)
	}
}

// addStats adds the counters to s.
func (c *commandsEnds) addStats(s *TransportStats) {
	s.ItemsFramesSent, s.ItemsBytesSent = c.framesSent.Load(), c.bytesSent.Load()
	s.ItemsFramesReceived, s.ItemsBytesReceived = c.framesReceived.Load(), c.bytesReceived.Load()
	s.ItemsDropped, s.ItemsLost = c.dropped.Load(), c.lost.Load()
}

// itemsQueue is one peer's commands stream queue: what SendItems took
// and the writer has not written yet, as frames ready to write.
type itemsQueue struct {
	mu sync.Mutex
	// open says a commands connection to the peer is open, its writer
	// taking what is queued: SendItems takes nothing while it is not.
	open bool // guarded by mu
	// chunks wait in order: every one but a large payload's is a whole
	// items frame being filled, the last taking the next payloads.
	chunks []itemsChunk // guarded by mu
	// queued counts the bytes of payloads taken and not yet written (or
	// lost): those in chunks and those the writer holds.
	queued int // guarded by mu
	// full says a payload was refused for the bound since the queue last
	// told it had room (ItemsRoom).
	full bool // guarded by mu
	// spare are buffers of frames written, for the next chunks.
	spare [][]byte // guarded by mu
	// ready is signalled (never blocking: its capacity is 1) when a chunk
	// is queued; messages when the peer's messages connection opens, which
	// the commands stream waits for to learn the peer's protocol.
	ready, messages chan struct{} // immutable
}

// itemsChunk is what one frame carries: payloads merged into a whole
// items frame, b its bytes from the frame's header on; or, large, one
// payload alone, b its bytes, which go in parts. bytes are its payloads'
// bytes as SendItems was given them, payloads their number.
type itemsChunk struct {
	b               []byte
	large           bool
	bytes, payloads int
}

func newItemsQueue() *itemsQueue {
	return &itemsQueue{ready: make(chan struct{}, 1), messages: make(chan struct{}, 1)}
}

// signal wakes whoever waits on ch, never blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// put takes a copy of payload, merging it into the last frame being
// filled if it fits there; false if the queue does not take it (SendItems
// says when).
func (q *itemsQueue) put(payload []byte) bool {
	if len(payload) < 4 || len(payload) > maxItemsPayload {
		return false
	}
	count := binary.BigEndian.Uint32(payload)
	if count == 0 {
		return len(payload) == 4
	}
	q.mu.Lock()
	if !q.open || q.queued > 0 && q.queued+len(payload) > maxQueuedItems {
		q.full = q.full || q.open
		q.mu.Unlock()
		return false
	}
	q.queued += len(payload)
	var last *itemsChunk
	if n := len(q.chunks); n > 0 && !q.chunks[n-1].large {
		last = &q.chunks[n-1]
	}
	switch {
	case len(payload) > messagePart:
		q.chunks = append(q.chunks, itemsChunk{b: append([]byte(nil), payload...), large: true, bytes: len(payload), payloads: 1})
	case last != nil && len(last.b)+len(payload)-4 <= cap(last.b) &&
		uint64(binary.BigEndian.Uint32(last.b[itemsFrame:]))+uint64(count) <= math.MaxUint32:
		// The frame's payload takes payload's items, and counts them.
		last.b = append(last.b, payload[4:]...)
		at := last.b[itemsFrame:]
		binary.BigEndian.PutUint32(at, binary.BigEndian.Uint32(at)+count)
		last.bytes += len(payload)
		last.payloads++
	default:
		var b []byte
		switch n := len(q.spare); {
		case itemsFrame+len(payload) > itemsBuffer:
			b = make([]byte, 0, itemsFrame+len(payload))
		case n > 0:
			b, q.spare[n-1] = q.spare[n-1], nil
			q.spare = q.spare[:n-1]
		default:
			b = make([]byte, 0, itemsBuffer)
		}
		b = append(b, 0, 0, 0, 0, typedItems)
		q.chunks = append(q.chunks, itemsChunk{b: append(b, payload...), bytes: len(payload), payloads: 1})
	}
	q.mu.Unlock()
	signal(q.ready)
	return true
}

// take moves what is queued into dst (emptied first) and returns it.
func (q *itemsQueue) take(dst []itemsChunk) []itemsChunk {
	q.mu.Lock()
	dst, q.chunks = q.chunks, dst[:0]
	q.mu.Unlock()
	return dst
}

// written releases chunks, written: their bytes leave the queue's count
// and their buffers are kept for reuse. It empties chunks' entries, and
// reports whether the queue has room again after refusing a payload for
// the bound: what it holds is half the bound or less.
func (q *itemsQueue) written(chunks []itemsChunk) (room bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range chunks {
		c := &chunks[i]
		q.queued -= c.bytes
		if cap(c.b) == itemsBuffer && len(q.spare) < spareItemsBuffers {
			q.spare = append(q.spare, c.b[:0])
		}
		*c = itemsChunk{}
	}
	if q.full && q.queued <= maxQueuedItems/2 {
		q.full = false
		return true
	}
	return false
}

// setOpen opens the queue for SendItems, or closes it: then what it
// holds, and held (taken by the writer and not written whole), is
// dropped, and the number of payloads lost returned.
func (q *itemsQueue) setOpen(open bool, held []itemsChunk) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.open, q.full = open, false
	if open {
		return 0
	}
	lost := 0
	for _, chunks := range [][]itemsChunk{held, q.chunks} {
		for i := range chunks {
			lost += chunks[i].payloads
			chunks[i] = itemsChunk{}
		}
	}
	q.chunks, q.queued = q.chunks[:0], 0
	return lost
}

// sendItems is SendItems.
func (t *transport) sendItems(to uint64, payload []byte) bool {
	if p := t.peer(to); p != nil && p.items.put(payload) {
		return true
	}
	t.items.dropped.Add(1)
	return false
}

// The dialling side.

// runCommands keeps a commands connection to p open while p's messages
// connection speaks protocol 3, and writes p's items queue to it,
// dialling again with backoff when it breaks. While none is open,
// SendItems to p refuses.
func (t *transport) runCommands(p *peer) {
	defer t.wg.Done()
	wait := time.Duration(0)
	for {
		if !t.awaitCommands(p, wait) {
			return
		}
		if p.cut.Load() {
			wait = backoff(wait)
			continue
		}
		raw, conn, _, err := t.dial(p, streamCommands)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			t.noteItemsDown(p, err)
			wait = backoff(wait)
			continue
		}
		err = t.writeItems(p, raw, conn)
		t.drop(raw)
		if p.ctx.Err() != nil {
			return
		}
		t.noteItemsDown(p, err)
		wait = minBackoff
	}
}

// awaitCommands waits for d, then until the items handler is set and
// p's messages connection speaks protocol 3 (a peer that speaks 2 gets
// no commands stream); false once p is gone.
func (t *transport) awaitCommands(p *peer, d time.Duration) bool {
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-p.ctx.Done():
			return false
		}
	}
	select {
	case <-t.items.handled:
	case <-p.ctx.Done():
		return false
	}
	for p.protocol.Load() < 3 {
		select {
		case <-p.items.messages:
		case <-p.ctx.Done():
			return false
		}
	}
	return true
}

// noteItemsDown logs a commands stream's loss or a failed dial, once per
// peer and interval, while p's messages connection is up: otherwise that
// connection's outage is what is logged.
func (t *transport) noteItemsDown(p *peer, err error) {
	if !p.up.Load() || t.isClosed() {
		return
	}
	t.logOnce("commands "+p.Name, func(e *zerolog.Event) *zerolog.Event {
		return e.Str("peer", p.Name).Str("address", p.Addr).Err(err)
	}, zerolog.WarnLevel, "the commands stream to a member broke; dialling again")
}

// writeItems opens p's items queue and writes it to conn (over raw)
// until a write fails, the connection breaks or p is cut off; it returns
// with raw closed and the queue closed, what it held lost. Each drain of
// the queue is written in one flush; each frame, and each part, must be
// taken within writeTimeout.
func (t *transport) writeItems(p *peer, raw, conn net.Conn) error {
	broken := watchClose(conn)
	q := p.items
	var held []itemsChunk // taken from the queue and not yet written whole
	q.setOpen(true, nil)
	t.items.tell(p.ID, ItemsUp)
	defer func() {
		_ = raw.Close()
		<-broken
		t.items.lost.Add(uint64(q.setOpen(false, held)))
		t.items.tell(p.ID, ItemsDown)
	}()
	w := bufio.NewWriterSize(conn, 64<<10)
	for {
		select {
		case <-q.ready:
		case <-broken:
			return errItemsClosed
		case <-p.ctx.Done():
			return nil
		}
		held = q.take(held)
		frames, bytes := 0, 0
		for i := range held {
			if p.cut.Load() {
				return errItemsCut
			}
			if err := writeItemsChunk(w, conn, &held[i]); err != nil {
				return err
			}
			frames++
			bytes += len(held[i].b)
			if !held[i].large {
				bytes -= itemsFrame
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		t.items.framesSent.Add(uint64(frames))
		t.items.bytesSent.Add(uint64(bytes))
		if q.written(held) {
			t.items.tell(p.ID, ItemsRoom)
		}
		held = held[:0]
	}
}

// writeDeadline is what a write's deadline is set on: a net.Conn.
type writeDeadline interface{ SetWriteDeadline(time.Time) error }

// writeItemsChunk writes c to w: a whole frame, or a large payload's
// header and parts, each within writeTimeout on conn.
func writeItemsChunk(w io.Writer, conn writeDeadline, c *itemsChunk) error {
	if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	if !c.large {
		binary.BigEndian.PutUint32(c.b, frameTyped|uint32(len(c.b)-4))
		_, err := w.Write(c.b)
		return err
	}
	var head [4 + itemsHeader]byte
	binary.BigEndian.PutUint32(head[:], frameLarge|itemsHeader)
	head[4] = typedItems
	binary.BigEndian.PutUint32(head[5:], uint32(len(c.b)))
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	for b := c.b; len(b) > 0; {
		n := min(len(b), messagePart)
		if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
			return err
		}
		binary.BigEndian.PutUint32(head[:], framePart|uint32(n))
		if _, err := w.Write(head[:4]); err != nil {
			return err
		}
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// watchClose reads conn, on which the peer sends nothing after its
// hello, in a goroutine of its own: a read returns only when the
// connection ends, and the channel returned is closed then, so that its
// writer learns it at once rather than at its next write.
func watchClose(conn net.Conn) <-chan struct{} {
	broken := make(chan struct{})
	go func() {
		var b [1]byte
		_, _ = conn.Read(b[:])
		close(broken)
	}()
	return broken
}

// The listening side.

// receiveItems hands p's payloads, read from r, to the items handler
// until the connection (raw, under r) ends; a newer commands connection
// from p replaces this one, and p's removal closes it. Nothing is read
// before a handler is set.
func (t *transport) receiveItems(p *peer, raw net.Conn, r *bufio.Reader) {
	c := t.items
	defer claimInbound(&c.mu, c.inbound, p.Name, raw)()
	stop := context.AfterFunc(p.ctx, func() { _ = raw.Close() })
	defer stop()
	select {
	case <-c.handled:
	case <-p.ctx.Done():
		return
	}
	c.tell(p.ID, ItemsFrom)
	ir := itemsReader{r: r}
	for {
		payload, err := ir.read()
		if err == nil && p.cut.Load() {
			return
		}
		if err == nil {
			c.framesReceived.Add(1)
			c.bytesReceived.Add(uint64(len(payload)))
			err = (*c.handler.Load())(p.ID, payload)
			if err == nil {
				continue
			}
			err = fmt.Errorf("replication: the commands stream's payload: %w", err)
		}
		t.refuseStream(p, raw, err)
		return
	}
}

// claimInbound makes conn the connection from peer name in inbound
// (guarded by mu), closing the one it replaces; the function returned
// gives it up, unless a newer one replaced it.
func claimInbound(mu *sync.Mutex, inbound map[string]net.Conn, name string, conn net.Conn) (release func()) {
	mu.Lock()
	old := inbound[name]
	inbound[name] = conn
	mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return func() {
		mu.Lock()
		if inbound[name] == conn {
			delete(inbound, name)
		}
		mu.Unlock()
	}
}

// refuseStream counts and logs err, which ended p's stream on conn,
// unless it is the connection's end or the transport's.
func (t *transport) refuseStream(p *peer, conn net.Conn, err error) {
	if errors.Is(err, errTooLarge) || !isEOF(err) && !t.isClosed() && !errors.Is(err, net.ErrClosed) {
		t.refused.Add(1)
		t.logRefusal(p.Name, conn.RemoteAddr().String(), p.Name, err.Error())
	}
}

// itemsReader reads a commands stream's payloads into one buffer,
// reused; a payload in parts gets a buffer of its own, let go once it
// has been handed on.
type itemsReader struct {
	r   *bufio.Reader
	buf []byte
	// head is where a frame's header is read: a local array would escape
	// to the heap through io.ReadFull, once a frame.
	head [4 + itemsHeader]byte
	// large is the payload in parts being read, what of it has come: made
	// as its first part comes, at its length up to maxFrame, and grown by
	// the parts past that, so a header costs nothing and a payload no
	// more than twice what came. Its length is size; inParts says one is
	// being read.
	large   []byte
	size    uint32
	inParts bool
}

// read returns the next payload, valid until the next read. A length
// past its bound is refused before anything is allocated for it.
func (ir *itemsReader) read() ([]byte, error) {
	ir.large = nil // handed on: let it go
	for {
		if _, err := io.ReadFull(ir.r, ir.head[:4]); err != nil {
			return nil, err
		}
		h := binary.BigEndian.Uint32(ir.head[:])
		n := h & frameLength
		kind := h & frameTyped
		switch {
		case kind == framePart:
			if payload, err := ir.part(n); payload != nil || err != nil {
				return payload, err
			}
			continue
		case ir.inParts:
			return nil, errors.New("replication: an items frame between the parts of a payload")
		case kind == frameLarge:
			if err := ir.header(n); err != nil {
				return nil, err
			}
			continue
		case kind != frameTyped:
			return nil, fmt.Errorf("replication: a frame header %x on the commands stream", h)
		case n > maxFrame:
			return nil, fmt.Errorf("%w: an items frame of %d bytes", errTooLarge, n)
		case n < 1+4:
			return nil, fmt.Errorf("replication: an items frame of %d bytes", n)
		}
		if cap(ir.buf) < int(n) {
			ir.buf = make([]byte, n)
		}
		b := ir.buf[:n]
		if _, err := io.ReadFull(ir.r, b); err != nil {
			return nil, err
		}
		if cap(ir.buf) > 2*messagePart {
			ir.buf = nil // a rare large frame: do not keep its buffer for good
		}
		if b[0] != typedItems {
			return nil, fmt.Errorf("replication: a typed frame of type %d on the commands stream", b[0])
		}
		return b[1:], nil
	}
}

// header reads a large payload's header, n bytes.
func (ir *itemsReader) header(n uint32) error {
	if n != itemsHeader {
		return fmt.Errorf("replication: an items header of %d bytes", n)
	}
	b := ir.head[4:]
	if _, err := io.ReadFull(ir.r, b); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(b[1:])
	switch {
	case b[0] != typedItems:
		return fmt.Errorf("replication: a large frame of type %d on the commands stream", b[0])
	case size > maxItemsPayload:
		return fmt.Errorf("%w: an items payload of %d bytes", errTooLarge, size)
	case size <= messagePart:
		return fmt.Errorf("replication: an items payload of %d bytes in parts", size)
	}
	ir.size, ir.inParts = size, true
	return nil
}

// part reads a part of n bytes; it returns the payload once it is
// complete.
func (ir *itemsReader) part(n uint32) ([]byte, error) {
	left := ir.size - uint32(len(ir.large))
	switch {
	case !ir.inParts:
		return nil, errors.New("replication: a part of no payload")
	case n > messagePart:
		return nil, fmt.Errorf("%w: a part of %d bytes", errTooLarge, n)
	case n == 0 || n > left:
		return nil, fmt.Errorf("replication: a part of %d bytes, %d of its payload's left", n, left)
	}
	if ir.large == nil {
		ir.large = make([]byte, 0, min(ir.size, maxFrame))
	}
	at := len(ir.large)
	ir.large = slices.Grow(ir.large, int(n))[:at+int(n)]
	if _, err := io.ReadFull(ir.r, ir.large[at:]); err != nil {
		return nil, err
	}
	if n < left {
		return nil, nil
	}
	ir.inParts = false
	return ir.large, nil
}
