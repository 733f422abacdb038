package replication

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Transport timing and bounds; see doc.go (Members and their traffic).
const (
	// DefaultSendQueue is each peer's queue of messages to send: twice
	// raft's window of appends in flight (maxInflight), so a full window
	// and the heartbeats beside it fit. The queued messages share their
	// entries with the log; nothing is copied until it is written.
	DefaultSendQueue = 2 * maxInflight

	dialTimeout      = 2 * time.Second
	handshakeTimeout = 5 * time.Second
	// writeTimeout is how long a connection may take to take one
	// message before it is dropped and dialled again: a peer that
	// stopped reading, or a network that drops everything, does not hold
	// its queue for longer.
	writeTimeout = 5 * time.Second
	// snapshotIdle is how long a snapshot's receiver waits for its next
	// chunk, its sender for the go-ahead and the verdict, and a spool for
	// its log's disk.
	snapshotIdle = 10 * time.Second
	keepAlive    = 5 * time.Second
	// removedGrace is how long a removed peer's inbound connection is
	// still read: its last messages follow the commit of its removal.
	removedGrace = 500 * time.Millisecond

	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second

	// refusalInterval is how often the same refusal, or the same peer's
	// loss, is logged: the counters count every one.
	refusalInterval = time.Minute
)

// TransportStats are the transport's counters, ever since it started.
type TransportStats struct {
	// MessagesSent were written to a peer's connection; MessagesDropped
	// were not (a full queue, no connection, too large); raft sends
	// again what matters. MessagesUnrouted were received for a group
	// this member does not hold, and dropped; MessagesShed were received
	// for a group whose node was too busy to take them (its inbox full)
	// or stopping, and dropped rather than waited for.
	MessagesSent, MessagesReceived, MessagesDropped, MessagesUnrouted uint64
	MessagesShed                                                      uint64
	// MessageWrites are the batches of messages written to peers, each
	// in one flush: with MessagesSent, how many went together.
	MessageWrites uint64
	// Heartbeats were sent coalesced (protocol 3), in HeartbeatFrames
	// frames: the groups' heartbeats to a peer that went together.
	Heartbeats, HeartbeatFrames uint64
	// Connects counts connections this member made to peers that
	// answered its hello.
	Connects uint64
	// Refused counts connections refused at the hello: another cluster,
	// a name that is not a member, another protocol, a malformed hello
	// or message.
	Refused uint64
	// TLSRefused counts connections refused in TLS: no certificate from
	// the CA, or one not for the member the hello names.
	TLSRefused uint64
	// Snapshots sent (the peer took them), failed, and received.
	SnapshotsSent, SnapshotsFailed, SnapshotsReceived uint64
	// ItemsFramesSent and ItemsBytesSent count the commands streams'
	// frames written to peers and their payloads' bytes, a frame's
	// payload being those SendItems took merged (commands.go);
	// ItemsFramesReceived and ItemsBytesReceived the payloads read from
	// peers. ItemsDropped are payloads SendItems did not take (no
	// commands stream to the peer, or its queue full); ItemsLost were
	// taken and not yet flushed to their stream when it closed.
	ItemsFramesSent, ItemsBytesSent, ItemsFramesReceived, ItemsBytesReceived uint64
	ItemsDropped, ItemsLost                                                  uint64
}

// transportConfig is what the node gives its transport.
type transportConfig struct {
	self    Member
	members []Member // every member, self included
	cluster uint64
	listen  string
	// listener, if set, is listened on instead of listen: the tests bind
	// their ports before they know every member's address.
	listener net.Listener
	client   string // this member's client address, told to peers
	http     string // this member's --http address, told to peers
	tls      *memberTLS
	queue    int
	log      zerolog.Logger
	// maxProtocol caps the protocols this member speaks (0: maxProtocol);
	// the tests make members of an older release so.
	maxProtocol uint16

	// snapshotRate, if set, replaces snapshotRate: the tests pace slower.
	snapshotRate float64
	// removed says whether id was removed from the cluster (its hello is
	// refused, with refusedRemoved); removedSelf is told when a peer
	// refused this member so. Both must not block.
	removed     func(id uint64) bool
	removedSelf func(by string)
	// hints are a joining member's peers by name (--cluster-peers): their
	// ids it learns from their hellos, until the book says who they are
	// (booked): a hint it does not name is no member then.
	hints map[string]string
	// joining: this member starts with no book but itself (--cluster-join),
	// and takes the hellos of members it has no address for at the
	// address they give, until group 0's book names its peers (booked).
	joining bool
}

// refusedRemoved is the refusal a removed member's hello gets.
const refusedRemoved = "removed from the cluster"

// snapshotStreams is how many snapshots a member sends to one peer at
// once, and receives at once: each of another group.
const snapshotStreams = 2

// groupEnd is a Raft group's side of the transport (transport.attach),
// called from the transport's goroutines. deliver blocks until the group
// takes m (false once it stopped); deliverSnapshot until the core has
// stepped it and carried out what followed, with its verdict.
// openSnapshot opens the records of a snapshot to send
// (Log.OpenSnapshot); receiveSnapshot, before any is read, says whether
// a snapshot is taken, and spools its records (Log.ReceiveSnapshot),
// waiting no longer than ctx. unreachable and snapshotSent must not
// block.
type groupEnd struct {
	deliver         func(m *pb.Message) bool
	deliverSnapshot func(m *pb.Message) error
	openSnapshot    func(m *pb.Message) (SnapshotReader, error)
	receiveSnapshot func(ctx context.Context, m *pb.Message) (SnapshotSink, error)
	unreachable     func(id uint64)
	snapshotSent    func(id uint64, ok bool)
	// migrateAsked takes a peer's migrate request: job ids of the group
	// to rewrite (migrate.go).
	migrateAsked func(ids []uint64)
}

// transport carries raft's messages between members, for every group
// attached: one connection per peer and direction (this member dials
// each peer and writes only; each peer's connection to it is read only),
// whatever the groups, and a connection of its own for each snapshot.
// Send never blocks.
type transport struct {
	cfg    transportConfig  // immutable
	ln     net.Listener     // immutable after newTransport
	peers  map[uint64]*peer // guarded by mu: every member but self
	byName map[string]*peer // guarded by mu
	ctx    context.Context  // immutable; cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the transport's goroutines
	// groups are the groups attached, each its end: replaced whole when
	// one is attached or detached, read without a lock.
	groups atomic.Pointer[map[groupID]*groupEnd]
	// floor is the lowest protocol a connection may speak (setFloor):
	// 0 until the cluster is finalized.
	floor atomic.Uint32
	// pace is the member's budget for the snapshots it sends, shared by
	// all: several at once cost clients no more than one. Immutable.
	pace *pacer
	// incarnation is drawn when the transport starts; its hellos tell it.
	incarnation uint64
	// strangers: a member that is joining takes the hello of a member it
	// has no address for (transportConfig.joining); cleared by booked.
	strangers atomic.Bool
	// items is the commands streams' side (commands.go). Immutable.
	items *commandsEnds

	mu      sync.Mutex
	started bool                  // guarded by mu: peers added from now on start at once
	closed  bool                  // guarded by mu
	conns   map[net.Conn]struct{} // guarded by mu: every open connection, closed by close
	inbound map[string]net.Conn   // guarded by mu: each peer's messages connection to this member
	// receiving are the groups whose snapshot is being received: one
	// each, snapshotStreams in all.
	receiving map[groupID]bool // guarded by mu

	logged rateLog

	sent, received, dropped        atomic.Uint64
	messageWrites                  atomic.Uint64
	connects, refused, tlsRefused  atomic.Uint64
	unrouted, shed                 atomic.Uint64
	coalesced                      beatCounts
	snapSent, snapFailed, snapRecv atomic.Uint64
}

// peer is another member as the transport sees it.
type peer struct {
	Member                        // immutable
	queue  chan envelope          // messages to send, bounded: Send drops when full
	items  *itemsQueue            // immutable: payloads for its commands stream (commands.go)
	snap   chan envelope          // snapshots to send, one per group (snapping)
	client atomic.Pointer[string] // its client address, from its hellos
	http   atomic.Pointer[string] // its --http address, from its hellos
	up     atomic.Bool            // a messages connection to it is open
	everUp atomic.Bool            // one was, once
	// protocol is what the messages connection to it speaks, 0 while none
	// is open.
	protocol atomic.Uint32
	// incarnation is its incarnation, from its last hello: a new one says
	// it restarted.
	incarnation atomic.Uint64
	// cut drops every message to and from it: the tests' partition.
	cut atomic.Bool
	// fromHello: a joining member added it from its hello alone
	// (addStranger), until the book came (booked). Guarded by the
	// transport's mu.
	fromHello bool
	// heard is when a Raft message from it was last received (unix
	// nanoseconds), 0 before any: a member stopped or cut off keeps its
	// connection up for seconds, but sends nothing.
	heard atomic.Int64
	// snapping are the groups with a snapshot to it queued or being sent.
	snapMu   sync.Mutex
	snapping map[groupID]bool // guarded by snapMu
	// unsent counts its messages queued and not yet written out (or
	// dropped, or lost with a broken connection): what drain waits for.
	unsent atomic.Int64
	// ctx ends its goroutines: cancelled when it is removed, or the
	// transport closes. Immutable.
	ctx    context.Context
	cancel context.CancelFunc
}

// newTransport listens on cfg.listen; start dials the peers.
func newTransport(cfg transportConfig) (*transport, error) {
	ln := cfg.listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.listen); err != nil {
			return nil, fmt.Errorf("replication: --cluster-listen: %w", err)
		}
	}
	t := &transport{
		cfg:         cfg,
		ln:          ln,
		peers:       make(map[uint64]*peer),
		byName:      make(map[string]*peer),
		incarnation: rand.Uint64() | 1, // never 0, which no trailer says
		conns:       make(map[net.Conn]struct{}),
		inbound:     make(map[string]net.Conn),
		receiving:   make(map[groupID]bool),
		items:       newCommandsEnds(),
	}
	pace := cfg.snapshotRate
	if pace == 0 {
		pace = snapshotRate
	}
	t.pace = &pacer{rate: pace}
	t.groups.Store(&map[groupID]*groupEnd{})
	t.strangers.Store(cfg.joining)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for _, m := range cfg.members {
		t.addPeer(m)
	}
	return t, nil
}

// start accepts peers' connections and dials each peer.
func (t *transport) start() {
	t.wg.Add(1)
	go t.accept()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.started = true
	for _, p := range t.peers {
		t.runLocked(p)
	}
}

// runLocked starts p's goroutines. t.mu must be held.
func (t *transport) runLocked(p *peer) {
	t.wg.Add(2 + snapshotStreams)
	go t.runPeer(p)
	go t.runCommands(p)
	for range snapshotStreams {
		go t.runSnapshots(p)
	}
}

// attach makes the transport carry group g's messages, to and from end.
func (t *transport) attach(g groupID, end groupEnd) { t.setGroup(g, &end) }

// detach stops carrying g's messages: those received for it are
// dropped, and so are its snapshots not yet sent.
func (t *transport) detach(g groupID) { t.setGroup(g, nil) }

// setGroup makes end g's, or drops g for nil, in a new copy of the map.
func (t *transport) setGroup(g groupID, end *groupEnd) {
	t.mu.Lock()
	defer t.mu.Unlock()
	groups := maps.Clone(*t.groups.Load())
	if end == nil {
		delete(groups, g)
	} else {
		groups[g] = end
	}
	t.groups.Store(&groups)
}

// group is g's end, or nil if g is not attached.
func (t *transport) group(g groupID) *groupEnd { return (*t.groups.Load())[g] }

// unreachable tells every group that p could not be reached.
func (t *transport) unreachable(p *peer) {
	for _, end := range *t.groups.Load() {
		end.unreachable(p.ID)
	}
}

// addPeer makes m a peer, dialled at once if the transport has started;
// a peer of m's name with another id (removed, and added again) goes. It
// returns the peer.
func (t *transport) addPeer(m Member) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addPeerLocked(m)
}

// addStranger adds m, a member a joining member knows from its hello
// alone, while it takes such (strangers); nil if it no longer does, or
// m's name or id is another member's. booked replaces it with the book's
// member, or drops it.
func (t *transport) addStranger(m Member) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q, r := t.peers[m.ID], t.byName[m.Name]; !t.strangers.Load() || q != r {
		return nil
	}
	p := t.addPeerLocked(m)
	if p != nil {
		p.fromHello = true
	}
	return p
}

// addPeerLocked is addPeer, t.mu held.
func (t *transport) addPeerLocked(m Member) *peer {
	if m.ID == t.cfg.self.ID || m.ID == 0 {
		return nil
	}
	if p := t.peers[m.ID]; p != nil {
		return p
	}
	if t.closed {
		return nil
	}
	if old := t.byName[m.Name]; old != nil {
		t.removeLocked(old)
	}
	p := &peer{Member: m, queue: make(chan envelope, t.cfg.queue), snap: make(chan envelope, maxGroups),
		snapping: make(map[groupID]bool), items: newItemsQueue()}
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	t.peers[m.ID], t.byName[m.Name] = p, p
	if t.started {
		t.runLocked(p)
	}
	return p
}

// booked tells the transport that group 0's book, members, named the
// member's peers: it takes hellos from them alone from now on, and a
// peer it took from a hello (addStranger) goes unless the book names it
// so; the book's members are then added (addPeer), at the book's
// addresses, which the others dial.
func (t *transport) booked(members []Member) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.strangers.Store(false)
	for _, p := range t.peers {
		if !p.fromHello {
			continue
		}
		if !slices.Contains(members, p.Member) {
			t.removeLocked(p)
		}
		p.fromHello = false
	}
}

// removePeer stops sending to id and taking its connections.
func (t *transport) removePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[id]; p != nil {
		t.removeLocked(p)
	}
}

// removeLocked drops p: its goroutines end, and its inbound connection
// closes after removedGrace, so what it sent after the removal's commit
// still arrives (a removed leader's handover, Core.handOver). t.mu must
// be held.
func (t *transport) removeLocked(p *peer) {
	delete(t.peers, p.ID)
	if t.byName[p.Name] == p {
		delete(t.byName, p.Name)
	}
	p.cancel()
	if c := t.inbound[p.Name]; c != nil {
		time.AfterFunc(removedGrace, func() { _ = c.Close() })
	}
}

// peer returns the peer whose id is id, or nil.
func (t *transport) peer(id uint64) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[id]
}

// addr is the address the transport listens on.
func (t *transport) addr() net.Addr { return t.ln.Addr() }

// protocolOf is what the messages connection to member id speaks: 0
// while there is none.
func (t *transport) protocolOf(id uint64) uint16 {
	if p := t.peer(id); p != nil {
		return uint16(p.protocol.Load())
	}
	return 0
}

// setFloor makes the transport refuse connections that would speak a
// protocol below v (a finalized cluster's, 3): their hellos are answered
// with a refusal, and so are answers to its own.
func (t *transport) setFloor(v uint16) { t.floor.Store(uint32(v)) }

// below says why a connection that speaks version is refused, "" if it
// is not.
func (t *transport) below(version uint16) string {
	if floor := uint16(t.floor.Load()); version < floor {
		return fmt.Sprintf("protocol version %d; this cluster runs %d", version, floor)
	}
	return ""
}

// maxProtocol is the highest protocol this member speaks.
func (t *transport) maxProtocol() uint16 {
	if t.cfg.maxProtocol != 0 {
		return t.cfg.maxProtocol
	}
	return maxProtocol
}

// ownHello is this member's hello to peer (or answer to it) on a stream
// of kind: the trailer says the protocols it speaks past 2.
func (t *transport) ownHello(kind streamKind, to, refusal string) hello {
	h := hello{Version: helloVersion, Kind: kind, Cluster: t.cfg.cluster, FromID: t.cfg.self.ID,
		From: t.cfg.self.Name, To: to, Client: t.cfg.client, Refusal: refusal, HTTP: t.cfg.http}
	if v := t.maxProtocol(); v > minProtocol {
		h.Max, h.Incarnation, h.Addr = v, t.incarnation, t.cfg.self.Addr
	}
	return h
}

// close stops the transport:
//  1. no connection is accepted or dialled any more;
//  2. every open connection is closed, so reads and writes in progress
//     return;
//  3. its goroutines are waited for. Messages still queued are dropped.
func (t *transport) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	t.cancel()
	_ = t.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	t.wg.Wait()
}

// drain waits, up to timeout, for every message queued to a peer to have
// been written to its connection: a member about to stop lets its last
// messages go (a removed leader's handover).
func (t *transport) drain(timeout time.Duration) {
	t.mu.Lock()
	peers := slices.Collect(maps.Values(t.peers))
	t.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for _, p := range peers {
		for p.unsent.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// track notes an open connection so close can close it; false (and the
// connection closed) if the transport is closed already.
func (t *transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = c.Close()
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

// drop closes a tracked connection.
func (t *transport) drop(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	_ = c.Close()
}

func (t *transport) isClosed() bool {
	select {
	case <-t.ctx.Done():
		return true
	default:
		return false
	}
}

// send queues group g's msgs for their peers and returns at once: a
// message that finds its peer's queue full is dropped and counted, and
// the peer is reported unreachable to g (raft then probes it rather than
// streaming). A MsgSnap goes to the peer's snapshot senders; if one of
// g's is still queued or being sent to that peer, it fails at once.
func (t *transport) send(g groupID, msgs []*pb.Message) {
	end := t.group(g)
	if end == nil {
		t.dropped.Add(uint64(len(msgs)))
		return
	}
	for _, m := range msgs {
		p := t.peer(m.GetTo())
		switch {
		case p == nil:
			t.dropped.Add(1) // a member this transport does not know yet
		case m.GetType() == pb.MsgSnap:
			if !p.queueSnapshot(envelope{group: g, m: m}) {
				t.snapFailed.Add(1)
				end.snapshotSent(p.ID, false)
			}
		default:
			if !t.enqueue(p, envelope{group: g, m: m}) {
				end.unreachable(p.ID)
			}
		}
	}
}

// sendMigrate queues a migrate request of group g to member to: ids, at
// most maxMigrateIDs, for its leader to rewrite. Like a message, it is
// dropped when the peer's queue is full or the peer speaks protocol 2;
// the log asks again later.
func (t *transport) sendMigrate(g groupID, to uint64, ids []uint64) {
	p := t.peer(to)
	if p == nil {
		t.dropped.Add(1)
		return
	}
	t.enqueue(p, envelope{group: g, migrate: ids})
}

// enqueue queues e for p's writer, or drops and counts it when p's queue
// is full, and reports which.
func (t *transport) enqueue(p *peer, e envelope) bool {
	select {
	case p.queue <- e:
		p.unsent.Add(1)
		return true
	default:
		t.dropped.Add(1)
		return false
	}
}

// queueSnapshot queues e for the snapshot senders, unless one of its
// group's is queued or being sent already.
func (p *peer) queueSnapshot(e envelope) bool {
	p.snapMu.Lock()
	defer p.snapMu.Unlock()
	if p.snapping[e.group] {
		return false
	}
	select {
	case p.snap <- e:
		p.snapping[e.group] = true
		return true
	default:
		return false
	}
}

// snapshotDone lets g send p another snapshot.
func (p *peer) snapshotDone(g groupID) {
	p.snapMu.Lock()
	delete(p.snapping, g)
	p.snapMu.Unlock()
}

// stats reads the counters.
func (t *transport) stats() TransportStats {
	s := TransportStats{
		MessagesSent: t.sent.Load(), MessagesReceived: t.received.Load(),
		MessagesDropped: t.dropped.Load(), MessagesUnrouted: t.unrouted.Load(), MessagesShed: t.shed.Load(),
		MessageWrites: t.messageWrites.Load(), Heartbeats: t.coalesced.beats.Load(), HeartbeatFrames: t.coalesced.frames.Load(),
		Connects: t.connects.Load(), Refused: t.refused.Load(), TLSRefused: t.tlsRefused.Load(),
		SnapshotsSent: t.snapSent.Load(), SnapshotsFailed: t.snapFailed.Load(), SnapshotsReceived: t.snapRecv.Load(),
	}
	t.items.addStats(&s)
	return s
}

// The dialling side.

// runPeer keeps a messages connection to p open and writes p's queue to
// it, dialling again with backoff when it breaks; while there is none,
// what is queued is dropped (and counted).
func (t *transport) runPeer(p *peer) {
	defer t.wg.Done()
	wait := time.Duration(0)
	for {
		if wait > 0 && !t.idle(p, wait) {
			return
		}
		raw, conn, version, err := t.dial(p, streamMessages)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			t.unreachable(p)
			t.noteDown(p, err)
			wait = backoff(wait)
			continue
		}
		p.protocol.Store(uint32(version))
		signal(p.items.messages) // the commands stream waits for the peer's protocol
		p.up.Store(true)
		p.everUp.Store(true)
		t.noteUp(p)
		err = t.writeMessages(p, raw, conn, version)
		p.up.Store(false)
		p.protocol.Store(0)
		t.drop(raw)
		if p.ctx.Err() != nil {
			return
		}
		t.unreachable(p)
		t.noteDown(p, err)
		wait = minBackoff
	}
}

// backoff is the wait after wait before dialling again, doubled up to
// maxBackoff, give or take a fifth so that members do not dial in step.
func backoff(wait time.Duration) time.Duration {
	wait = min(max(2*wait, minBackoff), maxBackoff)
	return wait - wait/10 + rand.N(wait/5+1)
}

// idle waits for d, dropping what is queued for p meanwhile; false if the
// transport closed.
func (t *transport) idle(p *peer, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-p.queue:
			t.dropped.Add(1)
			p.unsent.Add(-1) // dropped: drain no longer waits for it
		case <-timer.C:
			return true
		case <-p.ctx.Done():
			return false
		}
	}
}

// writeMessages writes p's queue to conn (over raw) until a write fails
// or the connection breaks; it returns with raw closed. Each write must
// be taken within writeTimeout, and a batch (what is queued, taken at
// once) is flushed when the queue is empty. A large message goes a part
// at a time, with what is queued written between its parts.
func (t *transport) writeMessages(p *peer, raw, conn net.Conn, version uint16) error {
	broken := watchClose(conn)
	defer func() {
		_ = raw.Close()
		<-broken
	}()
	w := bufio.NewWriterSize(conn, 64<<10)
	// taken counts the messages taken from the queue and not yet written
	// whole and flushed: unsent until then, and lost if the connection
	// breaks; done counts those of them finished since the last flush,
	// lost those of them dropped.
	taken, done, lost := int64(0), 0, 0
	defer func() { p.unsent.Add(-taken) }()
	mw := messageWriter{w: w, version: version, from: t.cfg.self.ID, to: p.ID, coalesced: &t.coalesced, dropped: func(err error) {
		lost++
		t.dropped.Add(1)
		t.logOnce("too large "+p.Name, func(e *zerolog.Event) *zerolog.Event {
			return e.Str("peer", p.Name).Err(err)
		}, zerolog.ErrorLevel, "a message to a member cannot be sent")
	}}
	// Closed: with parts left to write, the writer waits for no message.
	noWait := make(chan struct{})
	close(noWait)
	for {
		var e envelope
		var next <-chan struct{}
		if mw.busy() {
			next = noWait
		}
		select {
		case e = <-p.queue:
		case <-broken:
			return errors.New("replication: the peer closed the connection")
		case <-p.ctx.Done():
			return nil
		case <-next:
		}
		if e.m != nil && coalescible(e.m, mw.from, mw.to) {
			// A heartbeat rarely comes alone: the host ticks every group
			// at once (and a peer's heartbeats arrive together), so let
			// the other groups' land and go in its frame.
			runtime.Gosched()
		}
		for e.m != nil || e.migrate != nil {
			taken++
			if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
				return err
			}
			if p.cut.Load() {
				t.dropped.Add(1)
				done, lost = done+1, lost+1
			} else {
				n, err := mw.write(e)
				if err != nil {
					return err
				}
				done += n
			}
			select {
			case e = <-p.queue:
			default:
				e = envelope{}
			}
		}
		if mw.busy() {
			if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
				return err
			}
			n, err := mw.part()
			if err != nil {
				return err
			}
			done += n
		}
		if err := mw.flush(); err != nil {
			return err
		}
		if w.Buffered() > 0 {
			t.messageWrites.Add(1)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		t.sent.Add(uint64(done - lost))
		p.unsent.Add(-int64(done))
		taken -= int64(done)
		done, lost = 0, 0
	}
}

// runSnapshots sends p's snapshots, one at a time, each on a connection
// of its own, and reports each one's fate to its group. snapshotStreams
// of them run per peer.
func (t *transport) runSnapshots(p *peer) {
	defer t.wg.Done()
	for {
		select {
		case e := <-p.snap:
			m, end := e.m, t.group(e.group)
			err := errors.New("replication: the group is no longer held")
			if end != nil {
				err = t.sendSnapshot(p, e, end)
			}
			p.snapshotDone(e.group)
			if err != nil {
				t.snapFailed.Add(1)
				if !t.isClosed() {
					t.logOnce("snapshot to "+p.Name, func(e *zerolog.Event) *zerolog.Event {
						return e.Str("peer", p.Name).Uint64("index", m.GetSnapshot().GetMetadata().GetIndex()).Err(err)
					}, zerolog.WarnLevel, "a snapshot did not reach a member; raft will send another")
				}
			} else {
				t.snapSent.Add(1)
			}
			if end != nil {
				end.snapshotSent(p.ID, err == nil)
			}
		case <-p.ctx.Done():
			return
		}
	}
}

// sendSnapshot dials p, writes m, and once p goes ahead streams the
// snapshot's records (doc.go, "Members and their traffic"), then waits
// for p's verdict.
func (t *transport) sendSnapshot(p *peer, e envelope, end *groupEnd) error {
	m := e.m
	if p.cut.Load() {
		return errors.New("replication: cut off")
	}
	raw, conn, version, err := t.dial(p, streamSnapshot)
	if err != nil {
		return err
	}
	defer t.drop(raw)
	dc := idleConn{Conn: conn, idle: snapshotIdle}
	w := bufio.NewWriterSize(dc, 64<<10)
	frame, err := appendWhole(nil, version, e)
	if err != nil {
		return err
	}
	if _, err := w.Write(frame); err != nil {
		return err
	}
	if err := answered(w, dc, snapshotProceed, "go-ahead"); err != nil {
		return err
	}
	r, err := end.openSnapshot(m)
	if err != nil {
		return err
	}
	defer r.Close()
	md := m.GetSnapshot().GetMetadata()
	sum := snapshotTrailer{cluster: t.cfg.cluster, index: md.GetIndex(), term: md.GetTerm()}
	t.pace.begin()
	defer t.pace.end()
	for {
		chunk, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if p.cut.Load() {
			return errors.New("replication: cut off")
		}
		sum.add(chunk)
		if err := writeChunk(w, chunk); err != nil {
			return err
		}
		if err := t.pace.wait(p.ctx, len(chunk)); err != nil {
			return err
		}
	}
	if err := writeChunk(w, nil); err != nil {
		return err
	}
	if _, err := w.Write(sum.append(nil)); err != nil {
		return err
	}
	return answered(w, dc, snapshotTaken, "verdict")
}

// answered flushes w and reads the receiver's one-byte answer from r: an
// error unless it is want.
func answered(w *bufio.Writer, r io.Reader, want byte, what string) error {
	if err := w.Flush(); err != nil {
		return err
	}
	var answer [1]byte
	if _, err := io.ReadFull(r, answer[:]); err != nil {
		return fmt.Errorf("replication: no %s: %w", what, err)
	}
	if answer[0] != want {
		return errors.New("replication: the member refused the snapshot")
	}
	return nil
}

// dial opens a connection of kind to p and exchanges hellos. It returns
// the TCP connection, which closes it (at once, with no TLS alert that
// could wait on a peer that does not read), the connection to read and
// write (the same, or TLS over it), and the protocol it speaks.
func (t *transport) dial(p *peer, kind streamKind) (raw, conn net.Conn, version uint16, err error) {
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	defer cancel()
	d := net.Dialer{KeepAlive: keepAlive}
	raw, err = d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return nil, nil, 0, err
	}
	if !t.track(raw) {
		return nil, nil, 0, net.ErrClosed
	}
	conn, version, err = t.handshake(p, kind, raw)
	if err != nil {
		t.drop(raw)
		return nil, nil, 0, err
	}
	return raw, conn, version, nil
}

// handshake makes conn TLS if members use it and exchanges hellos: the
// answer must come from p, in this cluster, and accept. It returns the
// protocol the connection speaks.
func (t *transport) handshake(p *peer, kind streamKind, conn net.Conn) (net.Conn, uint16, error) {
	if err := conn.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return nil, 0, err
	}
	if t.cfg.tls != nil {
		tc := tls.Client(conn, t.cfg.tls.clientFor(p.Addr))
		if err := tc.HandshakeContext(t.ctx); err != nil {
			return nil, 0, fmt.Errorf("replication: TLS with %s: %w", p.Addr, err)
		}
		conn = tc
	}
	out := t.ownHello(kind, p.Name, "")
	if _, err := conn.Write(appendHello(nil, &out)); err != nil {
		return nil, 0, err
	}
	in, err := readHello(conn)
	if err != nil {
		return nil, 0, fmt.Errorf("replication: the answer from %s: %w", p.Addr, err)
	}
	version := negotiate(t.maxProtocol(), in.Max)
	switch {
	case in.Refusal != "":
		if in.Refusal == refusedRemoved && t.cfg.removedSelf != nil {
			t.cfg.removedSelf(p.Name)
		}
		return nil, 0, fmt.Errorf("replication: %s refused this member: %s", p.Addr, in.Refusal)
	case in.Version != helloVersion || version == 0 || in.Cluster != t.cfg.cluster || in.From != p.Name || in.FromID != p.ID:
		t.refused.Add(1)
		return nil, 0, fmt.Errorf("replication: %s answered as %s (id %x) of cluster %x, hello %d, protocols to %d; want %s (id %x) of %x, hello %d, protocols %d to %d",
			p.Addr, in.From, in.FromID, in.Cluster, in.Version, max(in.Max, minProtocol), p.Name, p.ID, t.cfg.cluster,
			helloVersion, minProtocol, t.maxProtocol())
	}
	if why := t.below(version); why != "" {
		t.refused.Add(1)
		return nil, 0, fmt.Errorf("replication: %s answered in %s", p.Addr, why)
	}
	t.notePeer(p, in)
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, 0, err
	}
	if kind == streamMessages {
		t.connects.Add(1)
	}
	return conn, version, nil
}

// noteUp logs a peer's connection when it follows an outage.
func (t *transport) noteUp(p *peer) {
	if t.logged.forget("down " + p.Name) {
		t.cfg.log.Info().Str("peer", p.Name).Str("address", p.Addr).Msg("connected to a member")
	}
}

// noteDown logs a peer's loss or a failed dial, once per outage and
// interval: at info while it was never reached (members start in any
// order), at warn once it was.
func (t *transport) noteDown(p *peer, err error) {
	level := zerolog.InfoLevel
	if p.everUp.Load() {
		level = zerolog.WarnLevel
	}
	t.logOnce("down "+p.Name, func(e *zerolog.Event) *zerolog.Event {
		return e.Str("peer", p.Name).Str("address", p.Addr).Err(err)
	}, level, "cannot reach a member; dialling again")
}

// logOnce logs at most once per refusalInterval under key, with how
// many were not logged since.
func (t *transport) logOnce(key string, fields func(*zerolog.Event) *zerolog.Event, level zerolog.Level, msg string) {
	ok, suppressed := t.logged.allow(key, time.Now())
	if !ok {
		return
	}
	e := t.cfg.log.WithLevel(level)
	if e == nil {
		return
	}
	if suppressed > 0 {
		e = e.Int("not_logged", suppressed)
	}
	fields(e).Msg(msg)
}

// The listening side.

// accept takes peers' connections until the transport closes.
func (t *transport) accept() {
	defer t.wg.Done()
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			if t.isClosed() {
				return
			}
			// Out of descriptors, most likely: say so and breathe.
			t.logOnce("accept", func(e *zerolog.Event) *zerolog.Event { return e.Err(err) },
				zerolog.ErrorLevel, "cannot accept a member's connection")
			select {
			case <-time.After(minBackoff):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		if !t.track(conn) {
			return
		}
		t.wg.Add(1)
		go t.serve(conn)
	}
}

// serve takes one peer's connection: TLS, the hellos, then its messages
// or its snapshot.
func (t *transport) serve(raw net.Conn) {
	defer t.wg.Done()
	defer t.drop(raw)
	conn := raw
	remote := conn.RemoteAddr().String()
	host, _, _ := net.SplitHostPort(remote)
	if err := conn.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return
	}
	var state *tls.ConnectionState
	if t.cfg.tls != nil {
		tc := tls.Server(conn, t.cfg.tls.server)
		if err := tc.HandshakeContext(t.ctx); err != nil {
			if !t.isClosed() {
				t.tlsRefused.Add(1)
				t.logRefusal(host, remote, "", fmt.Sprintf("TLS: %v", err))
			}
			return
		}
		st := tc.ConnectionState()
		state = &st
		conn = tc
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	in, err := readHello(r)
	if err != nil {
		if !t.isClosed() {
			t.refused.Add(1)
			t.logRefusal(host, remote, "", fmt.Sprintf("not a member's hello: %v", err))
		}
		return
	}
	p, refusal, tlsRefusal := t.check(in, state, remote)
	answer := t.ownHello(in.Kind, in.From, refusal)
	_, werr := conn.Write(appendHello(nil, &answer))
	if refusal != "" {
		if tlsRefusal {
			t.tlsRefused.Add(1)
		} else {
			t.refused.Add(1)
		}
		t.logRefusal(in.From+" "+host, remote, in.From, refusal)
		return
	}
	if werr != nil || conn.SetDeadline(time.Time{}) != nil {
		return
	}
	t.notePeer(p, in)
	f := frameReader{r: r, version: negotiate(t.maxProtocol(), in.Max), from: p.ID, to: t.cfg.self.ID}
	switch in.Kind {
	case streamSnapshot:
		t.receiveSnapshot(p, conn, &f)
	case streamCommands:
		t.receiveItems(p, raw, r)
	default:
		t.receiveMessages(p, raw, &f)
	}
}

// check says why a hello from remote is refused ("" if it is not), and
// whether the reason is the peer's certificate.
func (t *transport) check(in *hello, state *tls.ConnectionState, remote string) (p *peer, refusal string, tlsRefusal bool) {
	if in.Version != helloVersion {
		return nil, fmt.Sprintf("protocol version %d; this member speaks %d to %d", in.Version, minProtocol, t.maxProtocol()), false
	}
	if negotiate(t.maxProtocol(), in.Max) == 0 {
		return nil, fmt.Sprintf("protocols up to %d; this member speaks %d to %d", in.Max, minProtocol, t.maxProtocol()), false
	}
	if in.Cluster != t.cfg.cluster {
		return nil, fmt.Sprintf("cluster %x; this member is in cluster %x", in.Cluster, t.cfg.cluster), false
	}
	if in.To != t.cfg.self.Name {
		return nil, fmt.Sprintf("this member is %s, not %s", t.cfg.self.Name, in.To), false
	}
	if t.cfg.removed != nil && t.cfg.removed(in.FromID) {
		return nil, refusedRemoved, false
	}
	t.mu.Lock()
	p = t.byName[in.From]
	t.mu.Unlock()
	// A joining member learns who its peers are from their hellos, at the
	// address its --cluster-peers gives, or, for a member added after that
	// list was written (group 0's leader, maybe), at the one the hello
	// gives (a wildcard host: the connection's): that one is added only
	// once every check below has passed.
	var stranger *Member
	if p == nil && in.FromID != 0 && t.strangers.Load() {
		if addr, ok := t.cfg.hints[in.From]; ok {
			p = t.addPeer(Member{Name: in.From, Addr: addr, ID: in.FromID})
		} else if in.Addr != "" {
			stranger = &Member{Name: in.From, Addr: WithHost(in.Addr, remote), ID: in.FromID}
		}
	}
	known := stranger
	if p != nil {
		known = &p.Member
	}
	if known == nil {
		return nil, fmt.Sprintf("%q is not a member", in.From), false
	}
	if in.FromID != known.ID {
		return nil, fmt.Sprintf("member %s has Raft id %x, not %x", known.Name, known.ID, in.FromID), false
	}
	if in.Kind != streamMessages && in.Kind != streamSnapshot && in.Kind != streamCommands {
		return nil, fmt.Sprintf("unknown stream kind %d", in.Kind), false
	}
	if state != nil {
		if err := t.cfg.tls.verifyMember(state, known.Addr); err != nil {
			return nil, err.Error(), true
		}
	}
	// Last: who the peer is comes first (a finalized member still tells a
	// stranger, or a peer without its certificate, why it is refused).
	v := negotiate(t.maxProtocol(), in.Max)
	if why := t.below(v); why != "" {
		return nil, why, false
	}
	if in.Kind == streamCommands && v < 3 {
		return nil, fmt.Sprintf("a commands stream in protocol %d; it needs 3", v), false
	}
	if stranger != nil {
		if p = t.addStranger(*stranger); p == nil {
			return nil, fmt.Sprintf("%q is not a member", in.From), false
		}
	}
	return p, "", false
}

// logRefusal logs a refused connection, once per key and interval.
func (t *transport) logRefusal(key, remote, claimed, reason string) {
	t.logOnce("refused "+key, func(e *zerolog.Event) *zerolog.Event {
		e = e.Str("remote", remote).Str("reason", reason)
		if claimed != "" {
			e = e.Str("peer", claimed)
		}
		return e
	}, zerolog.WarnLevel, "refused a member connection")
}

// receiveMessages hands p's messages, read by f, to their groups until
// the connection (raw, under f) ends, dropping (and counting) those of a
// group not attached and those whose group's node has no room for them
// or has stopped (it never waits for one group: the connection carries
// them all). A newer connection from p replaces this one. A message that
// is not from p to this member, or a snapshot (they have connections of
// their own), ends it.
func (t *transport) receiveMessages(p *peer, conn net.Conn, f *frameReader) {
	defer claimInbound(&t.mu, t.inbound, p.Name, conn)()
	for {
		e, err := f.read()
		m := e.m
		if err != nil {
			t.refuseStream(p, conn, err)
			return
		}
		if m == nil {
			// A migrate request: from its connection's peer, as the
			// connection says.
			if end := t.group(e.group); end != nil && end.migrateAsked != nil && !p.cut.Load() {
				t.received.Add(1)
				end.migrateAsked(e.migrate)
			} else {
				t.unrouted.Add(1)
			}
			continue
		}
		if m.GetFrom() != p.ID || m.GetTo() != t.cfg.self.ID || m.GetType() == pb.MsgSnap {
			t.refused.Add(1)
			t.logRefusal(p.Name, conn.RemoteAddr().String(), p.Name,
				fmt.Sprintf("a %v from %x to %x on %s's connection", m.GetType(), m.GetFrom(), m.GetTo(), p.Name))
			return
		}
		if p.cut.Load() {
			continue
		}
		p.heard.Store(time.Now().UnixNano())
		end := t.group(e.group)
		if end == nil {
			// A group that left this member, or that it does not hold
			// yet: raft sends again what matters.
			t.unrouted.Add(1)
			continue
		}
		t.received.Add(1)
		if !end.deliver(m) {
			t.shed.Add(1)
		}
	}
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// receiveSnapshot reads p's snapshot: its message, then, if this member
// takes it, its records into the log's spool; once they are whole and
// durable, it hands the message to the core and answers with the verdict.
// One is received per group at a time, and snapshotStreams in all:
// another is refused meanwhile.
func (t *transport) receiveSnapshot(p *peer, conn net.Conn, f *frameReader) {
	dc := idleConn{Conn: conn, idle: snapshotIdle}
	r := f.r
	r.Reset(dc)
	refuse := func(err error) {
		if !t.isClosed() {
			t.logOnce("snapshot "+p.Name, func(e *zerolog.Event) *zerolog.Event {
				return e.Str("peer", p.Name).Str("remote", conn.RemoteAddr().String()).Err(err)
			}, zerolog.WarnLevel, "refused a member's snapshot; it sends it again later")
		}
	}
	e, err := f.read()
	m, end := e.m, t.group(e.group)
	switch {
	case err != nil:
		refuse(err)
		return
	case end == nil:
		refuse(fmt.Errorf("replication: a snapshot of group %d, which this member does not hold", e.group))
		return
	case m.GetType() != pb.MsgSnap || m.GetSnapshot() == nil:
		refuse(fmt.Errorf("replication: a snapshot connection carried a %v", m.GetType()))
		return
	case m.GetFrom() != p.ID || m.GetTo() != t.cfg.self.ID:
		refuse(fmt.Errorf("replication: a snapshot from %x to %x", m.GetFrom(), m.GetTo()))
		return
	}
	if !t.startReceiving(e.group) {
		refuse(fmt.Errorf("replication: %d snapshots, or one of group %d, are being received", snapshotStreams, e.group))
		_, _ = dc.Write([]byte{snapshotRefused})
		return
	}
	defer t.stopReceiving(e.group)
	sink, err := end.receiveSnapshot(t.ctx, m)
	if err == nil && p.cut.Load() {
		sink.Close()
		err = errors.New("replication: cut off")
	}
	if err != nil {
		refuse(err)
		_, _ = dc.Write([]byte{snapshotRefused})
		return
	}
	defer sink.Close()
	if _, err := dc.Write([]byte{snapshotProceed}); err != nil {
		return
	}
	err = t.spool(p, r, m, sink)
	if err == nil {
		err = end.deliverSnapshot(m)
	}
	verdict := snapshotTaken
	if err != nil {
		verdict = snapshotRefused
		refuse(err)
	} else {
		t.snapRecv.Add(1)
	}
	_, _ = dc.Write([]byte{verdict})
}

// startReceiving takes g's turn to receive a snapshot: false while one
// of g's, or snapshotStreams of any, are received.
func (t *transport) startReceiving(g groupID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.receiving[g] || len(t.receiving) >= snapshotStreams {
		return false
	}
	t.receiving[g] = true
	return true
}

func (t *transport) stopReceiving(g groupID) {
	t.mu.Lock()
	delete(t.receiving, g)
	t.mu.Unlock()
}

// spool reads a snapshot's chunks and trailer into sink, checking each
// chunk and then the whole against m, and finishes it.
func (t *transport) spool(p *peer, r *bufio.Reader, m *pb.Message, sink SnapshotSink) error {
	md := m.GetSnapshot().GetMetadata()
	sum := snapshotTrailer{cluster: t.cfg.cluster, index: md.GetIndex(), term: md.GetTerm()}
	var buf []byte
	for {
		chunk, err := readChunk(r, &buf)
		if err != nil {
			return err
		}
		if len(chunk) == 0 {
			break
		}
		if p.cut.Load() {
			return errors.New("replication: cut off")
		}
		sum.add(chunk)
		if err := sink.Write(chunk); err != nil {
			return err
		}
		if cap(buf) > snapshotChunk {
			buf = nil // a rare large record: do not keep its buffer for the whole stream
		}
	}
	got, err := readTrailer(r)
	if err != nil {
		return err
	}
	if got != sum {
		return fmt.Errorf("%w: snapshot %d ends with cluster %x, index %d, term %d, %d bytes in %d records, CRC %08x; "+
			"what came was cluster %x, index %d, term %d, %d bytes in %d records, CRC %08x", ErrBadRecords, md.GetIndex(),
			got.cluster, got.index, got.term, got.bytes, got.records, got.crc,
			sum.cluster, sum.index, sum.term, sum.bytes, sum.records, sum.crc)
	}
	return sink.Finish()
}

// idleConn refreshes its deadline before each read and write, so a
// snapshot may take as long as it needs while its bytes keep coming.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c idleConn) Read(b []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c idleConn) Write(b []byte) (int, error) {
	written := 0
	for written < len(b) {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
			return written, err
		}
		n, err := c.Conn.Write(b[written:min(len(b), written+messagePart)])
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// TLS between members.

// memberTLS is mutual TLS 1.3 from one certificate, key and CA. Each side
// checks that the other's certificate is from the CA and is valid for the
// host of the other member's address in --cluster-peers: the dialer as
// any TLS client checks its server (the server name is the host of the
// address it dials), the listener once the hello names the member. So a
// member's certificate carries its address's host (a DNS name, a
// wildcard for the headless Service, or an IP), for both server and
// client authentication, and one certificate for all members works.
//
// The certificate and the CA are the source's at each handshake.
type memberTLS struct {
	src    TLSSource   // immutable
	server *tls.Config // immutable; the source's at each handshake
}

// TLSSource gives a member's certificate and the CA members' certificates
// must come from, as they are now.
type TLSSource interface {
	Certificate() *tls.Certificate
	Pool() *x509.CertPool
}

// staticTLS is a TLSSource read once.
type staticTLS struct {
	cert tls.Certificate
	pool *x509.CertPool
}

func (s *staticTLS) Certificate() *tls.Certificate { return &s.cert }
func (s *staticTLS) Pool() *x509.CertPool          { return s.pool }

// loadTLS reads the three files; each error names the flag.
func loadTLS(certFile, keyFile, caFile string) (*memberTLS, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("replication: --cluster-tls-cert and --cluster-tls-key: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("replication: --cluster-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("replication: --cluster-tls-ca: %s holds no PEM certificate", caFile)
	}
	return newMemberTLS(&staticTLS{cert: cert, pool: pool}), nil
}

func newMemberTLS(src TLSSource) *memberTLS {
	m := &memberTLS{src: src}
	m.server = &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*src.Certificate()},
				ClientCAs:    src.Pool(),
				ClientAuth:   tls.RequireAndVerifyClientCert,
			}, nil
		},
	}
	return m
}

// notePeer keeps what p's hello told: its addresses (noteAddrs) and its
// incarnation, logging a new one (p restarted).
func (t *transport) notePeer(p *peer, in *hello) {
	p.noteAddrs(in)
	if in.Incarnation == 0 {
		return
	}
	if old := p.incarnation.Swap(in.Incarnation); old != 0 && old != in.Incarnation {
		t.cfg.log.Info().Str("peer", p.Name).Msg("a member restarted")
	}
}

// noteAddrs keeps the client and --http addresses p's hello told; a
// wildcard host in them (a member listening on every interface, whose
// --cluster-peers does not name it) is taken from p's address in the
// book, the one its addition recorded.
func (p *peer) noteAddrs(in *hello) {
	httpAddr, client := WithHost(in.HTTP, p.Addr), WithHost(in.Client, p.Addr)
	p.http.Store(&httpAddr) // before the client address, which the node watches for
	p.client.Store(&client)
}

// WithHost is addr with the host of via when addr's host is empty or
// unspecified (0.0.0.0, ::); addr unchanged otherwise, or if either does
// not parse. cmd/sprout gives its own client and --http addresses so.
func WithHost(addr, via string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return addr
	}
	viaHost, _, err := net.SplitHostPort(via)
	if err != nil || viaHost == "" {
		return addr
	}
	return net.JoinHostPort(viaHost, port)
}

// clientFor is the client's configuration for dialling addr.
func (m *memberTLS) clientFor(addr string) *tls.Config {
	host, _, _ := net.SplitHostPort(addr)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*m.src.Certificate()},
		RootCAs:      m.src.Pool(),
		ServerName:   host,
	}
}

// verifyMember checks that the peer's certificate (verified against the
// CA already) is valid for the host of addr, the member it claims to be.
func (m *memberTLS) verifyMember(state *tls.ConnectionState, addr string) error {
	host, _, _ := net.SplitHostPort(addr)
	if len(state.PeerCertificates) == 0 {
		return errors.New("no certificate")
	}
	if err := state.PeerCertificates[0].VerifyHostname(host); err != nil {
		return fmt.Errorf("the certificate is not for member address %s: %v", host, err)
	}
	return nil
}

// maxRateKeys is how many keys a rateLog holds before it forgets those
// past their interval.
const maxRateKeys = 1024

// rateLog remembers when each key was last logged.
type rateLog struct {
	mu   sync.Mutex
	last map[string]*rateEntry // guarded by mu
}

type rateEntry struct {
	at         time.Time
	suppressed int
}

// allow reports whether key may be logged now, and how many times it was
// not since it last was.
func (r *rateLog) allow(key string, now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = make(map[string]*rateEntry)
	}
	if len(r.last) > maxRateKeys {
		// Keys name remote hosts: a scan from many hosts must not grow
		// the map for good.
		for k, e := range r.last {
			if now.Sub(e.at) >= refusalInterval {
				delete(r.last, k)
			}
		}
	}
	e := r.last[key]
	if e == nil {
		r.last[key] = &rateEntry{at: now}
		return true, 0
	}
	if now.Sub(e.at) < refusalInterval {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	*e = rateEntry{at: now}
	return true, n
}

// forget drops key, reporting whether it was there.
func (r *rateLog) forget(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.last[key]
	delete(r.last, key)
	return ok
}
