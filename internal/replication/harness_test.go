package replication

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// The harness is the shell the tests play: members, each a core with its
// store and a simulated disk, on a simulated network. Nothing runs unless
// a test says so: a write is durable when the test syncs that member's
// disk, a message arrives when the test delivers it, time passes when it
// ticks. Everything runs on the test's goroutine.

const testElectionTick = 10

// electionRounds is how many election timeouts the tests wait for a
// leader. Members tick in step and every message arrives within the tick,
// so two members whose randomized timeouts end on the same tick split the
// vote (one time in ten); waiting for four timeouts failed about once in
// a thousand runs.
const electionRounds = 12

// simDisk is a Log whose writes are visible at once but durable only when
// the test syncs it; a crash keeps what was durable.
type simDisk struct {
	*MemoryLog // what has been written

	voters  []uint64
	join    bool // a joining member's: empty, no membership
	retain  int
	ops     []func(*MemoryLog) // every write, in order
	durable int                // ops[:durable] survive a crash
	waiting []func()           // OnDurable callbacks
}

func newSimDisk(voters []uint64, retain int) *simDisk {
	return &simDisk{MemoryLog: NewMemoryLog(voters, retain), voters: voters, retain: retain}
}

func (d *simDisk) do(op func(*MemoryLog)) {
	d.ops = append(d.ops, op)
	op(d.MemoryLog)
}

func (d *simDisk) Append(ents []*pb.Entry) { d.do(func(l *MemoryLog) { l.Append(ents) }) }
func (d *simDisk) SetHardState(hs *pb.HardState) {
	d.do(func(l *MemoryLog) { l.SetHardState(hs) })
}
func (d *simDisk) InstallSnapshot(s *pb.Snapshot) {
	d.do(func(l *MemoryLog) { l.InstallSnapshot(s) })
}

// ReceiveSnapshot spools through the disk's writes, so that a crash
// replays them; Finish makes them durable, as a spool's does.
func (d *simDisk) ReceiveSnapshot(_ context.Context, md *pb.SnapshotMetadata) (SnapshotSink, error) {
	md = proto.Clone(md).(*pb.SnapshotMetadata)
	d.do(func(l *MemoryLog) { l.beginSpool(md) })
	return &memSink{
		write: func(chunk []byte) error {
			if _, _, err := checkChunk(nil, chunk); err != nil {
				return err
			}
			chunk = bytes.Clone(chunk)
			d.do(func(l *MemoryLog) { _ = l.spoolWrite(l.spool, chunk) })
			return nil
		},
		finish: func() error {
			d.do(func(l *MemoryLog) { _ = l.spoolFinish(l.spool) })
			d.sync()
			return nil
		},
		abort: func() { d.do(func(l *MemoryLog) { l.spoolAbort(l.spool) }) },
	}, nil
}
func (d *simDisk) Compact(applied uint64) { d.do(func(l *MemoryLog) { l.Compact(applied) }) }
func (d *simDisk) SetMembership(cs *pb.ConfState, b Book) {
	d.do(func(l *MemoryLog) { l.SetMembership(cs, b) })
}

func (d *simDisk) OnDurable(fn func()) {
	if d.durable == len(d.ops) {
		fn()
		return
	}
	d.waiting = append(d.waiting, fn)
}

// unsynced reports whether a write waits for an fsync.
func (d *simDisk) unsynced() bool { return d.durable < len(d.ops) }

// sync makes every write durable and runs the callbacks waiting for it.
func (d *simDisk) sync() {
	d.durable = len(d.ops)
	waiting := d.waiting
	d.waiting = nil
	for _, fn := range waiting {
		fn()
	}
}

// crash loses every write not yet durable: the log is what replaying the
// durable ones makes.
func (d *simDisk) crash() {
	d.ops, d.waiting = d.ops[:d.durable], nil
	d.MemoryLog = NewMemoryLog(d.voters, d.retain)
	if d.join {
		d.MemoryLog = NewJoinMemoryLog(d.retain)
	}
	for _, op := range d.ops {
		op(d.MemoryLog)
	}
}

type member struct {
	id      uint64
	disk    *simDisk
	core    *Core
	journal *Journal
	store   *store.Store
	up      bool

	served   []uint64           // the terms it served (ActServe)
	atServe  map[uint64]jobView // its store's jobs when it last began to serve
	handed   []byte             // the reservations it took when it last began to serve
	passed   uint64             // the term of a handover it passed by then (Action.Passed)
	rebuilds []uint64           // the terms it lost (ActRebuild)
	restores int                // ActRestore: starts and snapshots installed
	controls int                // ActControl: control records applied
	applied  int                // records it applied from entries
	// mostInReady is the most records one Core.Ready handed it to apply.
	mostInReady int
	// memberships are the ActMemberships it carried out.
	memberships []Action
}

func (m *member) serving() bool { return m.up && m.core.Serving() }

type cluster struct {
	t       testing.TB
	ids     []uint64
	members map[uint64]*member
	retain  int
	clock   atomic.Int64 // the stores' monotonic time; the timer goroutines read it

	net       []*pb.Message          // sent, not yet delivered
	cut       map[[2]uint64]bool     // links that drop everything, from→to
	sent      map[pb.MessageType]int // messages sent, by type
	snapshots int                    // snapshots delivered
	// stopRemoved stops a member as it applies its removal, as its node
	// does; without it, a test stops the member when it sees fit.
	stopRemoved bool
	// mayLead is the cores' Config.MayLead: nil, their books'.
	mayLead func(id uint64) bool
	// cutStream, when not negative, cuts the next snapshot's stream after
	// that many chunks (then it is -1 again): the sender hears it failed.
	cutStream int
}

// newCluster starts n members whose logs keep retain entries below the
// applied index.
func newCluster(t testing.TB, n, retain int) *cluster {
	c := &cluster{t: t, members: map[uint64]*member{}, retain: retain,
		cut: map[[2]uint64]bool{}, sent: map[pb.MessageType]int{}, cutStream: -1}
	c.clock.Store(int64(time.Hour))
	for i := 1; i <= n; i++ {
		c.ids = append(c.ids, uint64(i))
	}
	for _, id := range c.ids {
		m := &member{id: id, disk: newSimDisk(c.ids, retain)}
		c.members[id] = m
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			if m.store != nil {
				m.store.Close()
			}
		}
	})
	return c
}

func (c *cluster) now() int64 { return c.clock.Load() }

// start makes a member's core from its disk and runs it: its store is
// made by the first action, from the log's head.
func (c *cluster) start(m *member) {
	m.journal = NewJournal(nil)
	book := m.disk.Membership()
	if len(book.Members) == 0 {
		for _, id := range c.ids {
			if !m.disk.join || id == m.id {
				book.Members = append(book.Members, testMember(id))
			}
		}
	}
	core, err := NewCore(Config{ID: m.id, Log: m.disk, Journal: m.journal, ElectionTick: testElectionTick, Book: book,
		MayLead: c.mayLead})
	if err != nil {
		c.t.Fatal(err)
	}
	m.core, m.up = core, true
	c.run(m)
}

// run carries out a member's actions until it has none.
func (c *cluster) run(m *member) {
	for m.up {
		acts := m.core.Ready()
		if len(acts) == 0 {
			return
		}
		n := 0
		for _, a := range acts {
			if a.Kind == ActApply {
				n += len(a.Records)
			}
		}
		m.mostInReady = max(m.mostInReady, n)
		for _, a := range acts {
			if c.do(m, a) {
				break // restarted: the new core's actions follow
			}
		}
	}
}

// do carries out one action; it reports whether the member restarted.
func (c *cluster) do(m *member, a Action) bool {
	switch a.Kind {
	case ActRestore:
		if m.store != nil {
			m.store.Close()
		}
		m.store = store.New(store.Options{Now: c.now, Journal: m.journal, Acks: m.journal})
		err := m.disk.ReadHead(func(records []wal.Record, locs []wal.Loc) error {
			m.store.Apply(records, locs)
			return nil
		})
		if err != nil {
			c.t.Fatalf("member %d: the log's head: %v", m.id, err)
		}
		m.restores++
	case ActSend:
		for _, got := range c.wire(m.id, a.Messages) {
			c.net = append(c.net, got)
			c.sent[got.GetType()]++
		}
	case ActWrite:
		a.write(m.disk)
		core, seq := m.core, a.Seq
		m.disk.OnDurable(func() {
			if m.core == core {
				core.Durable(seq)
			}
		})
	case ActApply:
		m.store.Apply(a.Records, a.Locs)
		m.applied += len(a.Records)
	case ActLocate:
		m.store.Located(a.Records, a.Locs)
	case ActCompact:
		m.disk.Compact(a.Index)
	case ActPublish:
		m.journal.Publish(a.Pos)
	case ActServe:
		m.served = append(m.served, a.Term)
		m.atServe = viewOf(m.store)
		m.handed, m.passed = a.Handed, a.Passed
	case ActMembership:
		m.disk.SetMembership(a.ConfState, a.Book)
		m.memberships = append(m.memberships, a)
		if c.stopRemoved && !inConf(a.ConfState, m.id) {
			m.up = false // as its node stops (Node.membership)
		}
	case ActControl:
		m.controls++ // the book is the core's (Core.Book)
	case ActRebuild:
		m.rebuilds = append(m.rebuilds, a.Term)
		c.restart(m)
		c.do(m, Action{Kind: ActSend, Messages: a.Messages}) // once durable
		return true
	default:
		c.t.Fatalf("member %d: unknown action %v", m.id, a.Kind)
	}
	return false
}

// wire carries msgs from member from through protocol 3's frames, as a
// transport sends them: one connection per receiver, its heartbeats
// coalesced and written ahead of its batch, so a receiver may see them
// first. Each message read must be one written, field for field; they
// come back in the order of the receivers as msgs named them.
func (c *cluster) wire(from uint64, msgs []*pb.Message) []*pb.Message {
	byPeer := map[uint64][]*pb.Message{}
	for _, m := range msgs {
		byPeer[m.GetTo()] = append(byPeer[m.GetTo()], m)
	}
	read := map[uint64][]*pb.Message{}
	for to, sent := range byPeer {
		var b bytes.Buffer
		mw := messageWriter{w: &b, version: maxProtocol, from: from, to: to,
			dropped: func(err error) { c.t.Fatalf("member %d: a message to %d dropped: %v", from, to, err) }}
		for _, m := range sent {
			if _, err := mw.write(envelope{group: group0, m: m}); err != nil {
				c.t.Fatal(err)
			}
		}
		for mw.busy() {
			if _, err := mw.part(); err != nil {
				c.t.Fatal(err)
			}
		}
		if err := mw.flush(); err != nil {
			c.t.Fatal(err)
		}
		f := frameReader{r: bufio.NewReader(&b), version: maxProtocol, from: from, to: to}
		left := slices.Clone(sent)
		for {
			e, err := f.read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil || e.group != group0 {
				c.t.Fatalf("member %d: reading its messages to %d: group %d, %v", from, to, e.group, err)
			}
			i := slices.IndexFunc(left, func(m *pb.Message) bool { return proto.Equal(m, e.m) })
			if i < 0 {
				c.t.Fatalf("member %d: a %v read that was not sent to %d: %v", from, e.m.GetType(), to, e.m)
			}
			left = slices.Delete(left, i, i+1)
			read[to] = append(read[to], e.m)
		}
		if len(left) > 0 {
			c.t.Fatalf("member %d: %d messages to %d not read back, the first a %v", from, len(left), to, left[0].GetType())
		}
	}
	out := make([]*pb.Message, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, read[m.GetTo()][0])
		read[m.GetTo()] = read[m.GetTo()][1:]
	}
	return out
}

// restart is what a member's rebuild (or restart) does: the log finishes the
// writes it was given, and the member starts again from it.
func (c *cluster) restart(m *member) {
	m.disk.sync()
	c.start(m)
}

// crash stops a member at once: what its disk had not made durable is
// lost, and so are its store and the messages to it.
func (c *cluster) crash(m *member) {
	m.up = false
	m.core = nil
	m.store.Close()
	m.store = nil
	m.disk.crash()
}

// fsync makes a member's writes durable and runs it.
func (c *cluster) fsync(m *member) {
	if m.up {
		m.disk.sync()
		c.run(m)
	}
}

// partition cuts every link between the two groups, both ways.
func (c *cluster) partition(a, b []uint64) {
	for _, x := range a {
		for _, y := range b {
			c.cut[[2]uint64{x, y}], c.cut[[2]uint64{y, x}] = true, true
		}
	}
}

func (c *cluster) heal() { clear(c.cut) }

// deliver hands every message in flight to its member, dropping those on
// a cut link or to a member that is down, and reports how many arrived.
func (c *cluster) deliver() int { return c.deliverLossy(nil, 0) }

// deliverLossy is deliver that also drops each message with probability
// loss, and delivers them in an order shuffled by rng (nil: in order).
func (c *cluster) deliverLossy(rng *rand.Rand, loss float64) int {
	msgs := c.net
	c.net = nil
	if rng != nil {
		rng.Shuffle(len(msgs), func(i, k int) { msgs[i], msgs[k] = msgs[k], msgs[i] })
	}
	n := 0
	for _, msg := range msgs {
		from, to := c.members[msg.GetFrom()], c.members[msg.GetTo()]
		arrives := to != nil && to.up && !c.cut[[2]uint64{from.id, to.id}] && (rng == nil || rng.Float64() >= loss)
		var sink SnapshotSink
		if arrives && msg.GetType() == pb.MsgSnap {
			sink, arrives = c.stream(from, to, msg)
		}
		if arrives {
			if err := to.core.Step(msg); err != nil {
				c.t.Fatalf("member %d: step %v: %v", to.id, msg.GetType(), err)
			}
			n++
			c.run(to)
		}
		if sink != nil {
			sink.Close() // once raft installed it, or did not
		}
		if msg.GetType() == pb.MsgSnap {
			if arrives {
				c.snapshots++
			}
			if from.up {
				from.core.SnapshotSent(msg.GetTo(), arrives)
				c.run(from)
			}
		}
	}
	return n
}

// stream sends a snapshot's records from one member's log to another's
// spool, as the transport does, and reports whether they all came
// (cutStream; the sender's log may no longer keep them), with the spool,
// to be closed once the message is stepped (nil when given up already).
func (c *cluster) stream(from, to *member, msg *pb.Message) (SnapshotSink, bool) {
	md := msg.GetSnapshot().GetMetadata()
	r, err := from.disk.OpenSnapshot(md)
	if errors.Is(err, ErrSnapshotGone) {
		return nil, false
	}
	if err != nil {
		c.t.Fatalf("member %d: opening snapshot %d: %v", from.id, md.GetIndex(), err)
	}
	defer r.Close()
	sink, err := to.disk.ReceiveSnapshot(c.t.Context(), md)
	if err != nil {
		c.t.Fatalf("member %d: receiving snapshot %d: %v", to.id, md.GetIndex(), err)
	}
	cut := c.cutStream
	c.cutStream = -1
	for chunks := 0; ; chunks++ {
		chunk, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			c.t.Fatalf("member %d: reading snapshot %d: %v", from.id, md.GetIndex(), err)
		}
		if chunks == cut {
			sink.Close()
			return nil, false
		}
		if err := sink.Write(chunk); err != nil {
			c.t.Fatalf("member %d: spooling snapshot %d: %v", to.id, md.GetIndex(), err)
		}
	}
	if cut >= 0 {
		sink.Close() // cut before the trailer
		return nil, false
	}
	if err := sink.Finish(); err != nil {
		c.t.Fatalf("member %d: spooling snapshot %d: %v", to.id, md.GetIndex(), err)
	}
	return sink, true
}

// stabilize syncs every disk and delivers every message, over and over,
// until nothing is left to do.
func (c *cluster) stabilize() {
	c.t.Helper()
	for range 1000 {
		for _, id := range c.ids {
			c.fsync(c.members[id])
		}
		if c.deliver() == 0 && !c.unsynced() {
			return
		}
	}
	c.t.Fatal("the cluster did not settle")
}

func (c *cluster) unsynced() bool {
	for _, m := range c.members {
		if m.up && m.disk.unsynced() {
			return true
		}
	}
	return false
}

// tick moves every member's clock on by one tick (only those of ids,
// if any are named: the others are paused) and settles the cluster.
func (c *cluster) tick(ids ...uint64) {
	c.t.Helper()
	if len(ids) == 0 {
		ids = c.ids
	}
	for _, id := range ids {
		if m := c.members[id]; m.up {
			m.core.Tick()
			c.run(m)
		}
	}
	c.stabilize()
}

// awaitLeader ticks the members of ids until one of them serves, for at
// most electionRounds election timeouts, and returns it.
func (c *cluster) awaitLeader(ids ...uint64) *member {
	c.t.Helper()
	for range electionRounds * testElectionTick {
		c.tick(ids...)
		for _, id := range ids {
			if m := c.members[id]; m.serving() {
				return m
			}
		}
	}
	var st []string
	for _, id := range ids {
		m := c.members[id]
		st = append(st, fmt.Sprintf("%d: %+v serving %v", id, m.core.Status(), m.core.Serving()))
	}
	c.t.Fatalf("none of %v leads after %d election timeouts:\n%s", ids, electionRounds, strings.Join(st, "\n"))
	return nil
}

// elect makes id campaign, settles the cluster and checks that id serves.
func (c *cluster) elect(id uint64) *member {
	c.t.Helper()
	m := c.members[id]
	if err := m.core.Campaign(); err != nil {
		c.t.Fatal(err)
	}
	c.run(m)
	c.stabilize()
	if !m.serving() {
		c.t.Fatalf("member %d campaigned but does not serve: %+v", id, m.core.Status())
	}
	return m
}

// leader returns the member that serves, with the highest term; nil if
// none does.
func (c *cluster) leader() *member {
	var best *member
	for _, id := range c.ids {
		m := c.members[id]
		if m.serving() && (best == nil || m.core.Status().GetTerm() > best.core.Status().GetTerm()) {
			best = m
		}
	}
	return best
}

// leaders lists the members raft says lead, served or not.
func (c *cluster) leaders() []uint64 {
	var ids []uint64
	for _, id := range c.ids {
		if m := c.members[id]; m.up && m.core.Status().RaftState == raft.StateLeader {
			ids = append(ids, id)
		}
	}
	return ids
}

// up lists the members that are up.
func (c *cluster) up() []*member {
	var ms []*member
	for _, id := range c.ids {
		if m := c.members[id]; m.up {
			ms = append(ms, m)
		}
	}
	return ms
}

// jobView is what members must agree on about a job. A job the leader
// has reserved is ready everywhere else, and reserve and timeout counts
// are not logged when they change: both are left out.
type jobView struct {
	tube                    string
	state                   store.State
	pri                     uint32
	delay, ttr              time.Duration
	releases, buries, kicks uint32
	body                    string
}

// viewOf lists a store's jobs through its admin listing.
func viewOf(s *store.Store) map[uint64]jobView {
	cl := s.NewClient(nil)
	defer cl.Close()
	out := map[uint64]jobView{}
	for _, tube := range s.TubeNames() {
		for _, st := range []store.State{store.StateReady, store.StateReserved, store.StateDelayed, store.StateBuried} {
			var after *store.ListCursor
			for {
				page, next, ok := cl.ListJobs([]byte(tube), st, after, store.MaxListPage)
				if !ok {
					break
				}
				for _, j := range page {
					state := j.State
					if state == store.StateReserved {
						state = store.StateReady
					}
					out[j.ID] = jobView{tube: j.Tube, state: state, pri: j.Pri, delay: j.Delay, ttr: j.TTR,
						releases: j.Releases, buries: j.Buries, kicks: j.Kicks, body: string(j.Body)}
				}
				if next == nil {
					break
				}
				after = next
			}
		}
	}
	return out
}

// converged checks that every member that is up holds the jobs want.
func (c *cluster) converged(want map[uint64]jobView) {
	c.t.Helper()
	for _, m := range c.up() {
		got := viewOf(m.store)
		if diff := diffViews(want, got); diff != "" {
			c.t.Errorf("member %d:\n%s", m.id, diff)
		}
	}
}

// diffViews says how got differs from want, in id order; "" if not.
func diffViews(want, got map[uint64]jobView) string {
	var ids []uint64
	for id := range want {
		ids = append(ids, id)
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := ""
	for _, id := range ids {
		w, inWant := want[id]
		g, inGot := got[id]
		switch {
		case !inGot:
			out += fmt.Sprintf("  job %d missing (want %+v)\n", id, w)
		case !inWant:
			out += fmt.Sprintf("  job %d should not be there (%+v)\n", id, g)
		case w != g:
			out += fmt.Sprintf("  job %d:\n    want %+v\n    got  %+v\n", id, w, g)
		}
	}
	return out
}

// producer puts jobs on a member's store, as a client connection would.
type producer struct {
	m      *member
	store  *store.Store // the member's when the producer was made
	client *store.Client
}

func (c *cluster) producer(m *member, tube string) *producer {
	cl := m.store.NewClient(nil)
	cl.Use([]byte(tube))
	cl.Watch([]byte(tube))
	return &producer{m: m, store: m.store, client: cl}
}

// put stores a job and returns its id.
func (p *producer) put(delay uint32, body string) uint64 {
	id := p.m.store.NextID()
	if _, err := p.client.Put(id, 100, delay, 60, []byte(body+"\r\n")); err != nil {
		panic(err)
	}
	return id
}

// putAcked puts a job of body into tube t on m, the leader, and runs the
// cluster until it is acknowledged; it fails the test if it is not.
func (c *cluster) putAcked(m *member, body string) uint64 {
	c.t.Helper()
	p := c.producer(m, "t")
	id := p.put(0, body)
	c.run(m)
	c.stabilize()
	if !p.acked() {
		c.t.Fatalf("member %d's put of %q was not acknowledged", m.id, body)
	}
	return id
}

// acked reports whether every reply the client was given may be sent.
func (p *producer) acked() bool { return p.client.PendingAck() <= p.m.journal.Acked() }

// workload runs n random commands on the producer's store, the kinds a
// store logs (put, delete, release, bury, kick, kick-job) and reserves
// to make releases and burials possible; ids is the jobs put so far.
func (p *producer) workload(rng *rand.Rand, ids *[]uint64, n int) {
	pick := func() uint64 {
		if len(*ids) == 0 {
			return 0
		}
		return (*ids)[rng.IntN(len(*ids))]
	}
	cl := p.client
	for range n {
		switch op := rng.IntN(10); {
		case op < 4:
			id := p.m.store.NextID()
			body := strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(3000))
			if _, err := cl.Put(id, rng.Uint32N(2000), rng.Uint32N(2)*300, 1+rng.Uint32N(100), []byte(body+"\r\n")); err != nil {
				panic(err)
			}
			*ids = append(*ids, id)
		case op == 4:
			cl.Reserve(0)
		case op == 5:
			_ = cl.Release(pick(), rng.Uint32N(2000), rng.Uint32N(2)*500)
		case op == 6:
			_ = cl.Bury(pick(), rng.Uint32N(2000))
		case op == 7:
			if rng.IntN(2) == 0 {
				cl.Kick(uint32(rng.IntN(5)))
			} else {
				_ = cl.KickJob(pick())
			}
		default:
			cl.Delete(pick())
		}
	}
}
