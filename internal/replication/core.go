package replication

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/sproutmq/sprout/store/wal"
)

// ErrBadRecords refuses a peer's message whose records do not decode.
var ErrBadRecords = errors.New("replication: a message's records are damaged")

// Defaults for Config.
const (
	// DefaultElectionTick and DefaultHeartbeatTick are in ticks; the shell
	// picks the tick (100 ms makes an election timeout of 1 to 2 s).
	DefaultElectionTick  = 10
	DefaultHeartbeatTick = 1
	// DefaultMaxBatch is the batch size past which the leader proposes
	// without waiting for its last proposal's write, and the largest
	// entry it proposes (but for one record larger).
	DefaultMaxBatch = 1 << 20
	// maxMsgSize bounds the entries of one append message (raft sends at
	// least one entry whatever its size).
	maxMsgSize = 1 << 20
	// maxInflight bounds the append messages in flight to one follower.
	maxInflight = 256
	// maxKeptRecords bounds the records buffer the core keeps between
	// Readies.
	maxKeptRecords = 64 << 10
	// promoteSlack is how far behind the commit index a learner may be
	// and be caught up: under a steady load its match index trails by the
	// entries in flight to it, and the leader's log holds them.
	promoteSlack = maxInflight
	// inboxSize bounds the peers' messages waiting for a node: what is
	// received past it is dropped (Node.deliver). Room for the appends in
	// flight to a follower, or for four followers' answers to them.
	inboxSize = 4 * maxInflight
)

// Config configures a Core.
type Config struct {
	// ID is the member's Raft id, never 0.
	ID uint64
	// Log is the member's log; raft reads it, the shell writes it.
	Log Log
	// Journal is the member's store's journal.
	Journal *Journal
	// ElectionTick and HeartbeatTick are raft's, in ticks; 0 means the
	// defaults.
	ElectionTick, HeartbeatTick int
	// MaxBatch is DefaultMaxBatch when 0.
	MaxBatch int
	// Logger is raft's; nil discards its lines.
	Logger raft.Logger
	// Observer, if set, is told of each proposal, from the core's calls.
	Observer Observer
	// Book is the address book as of the log's membership (its Index:
	// the changes through it are not applied again).
	Book Book
	// MayLead reports whether the member of Raft id id may be given the
	// group's leadership (Book.MayLead over group 0's book, which marks
	// the members cordoned or draining); nil: this core's own book's.
	MayLead func(id uint64) bool
	// Seq is the number of the last write handed out before this core:
	// 0 at start; a core made again on a running member's log (after a
	// lost leadership) numbers its writes after its predecessor's, whose
	// durability reports may still arrive.
	Seq uint64
	// CaughtUp starts the core caught up with its leader (CaughtUp): a
	// core made again on a running member that was asks nothing.
	CaughtUp bool
	// ReadNonce makes this core's ReadIndex requests (CaughtUp) unlike
	// those of the member's cores before it: drawn at random for each.
	ReadNonce uint64
}

// Observer receives figures that cannot be read afterwards, for metrics.
// Its methods run inside the core's calls, on the shell's goroutine: they
// must be cheap and never block.
type Observer interface {
	// ObserveProposal reports one batch proposed: its bytes and records.
	ObserveProposal(bytes, records int)
}

// Core is a member's replication decisions, apart from its I/O (see
// doc.go): it owns the raft.RawNode and decides what to propose, what to
// write, what the store applies, what may be acknowledged, when to serve
// and when to start again. Events go in as method calls, Ready hands out
// the actions that follow. It has no goroutines and no clock (ticks are
// events); its only I/O is raft's reads of the Log. It is not safe for
// concurrent use: the shell steps it from one goroutine, or under a lock.
type Core struct {
	id           uint64 // immutable
	rn           *raft.RawNode
	log          Log                  // immutable: raft reads it, and the core asks where entries are
	journal      *Journal             // immutable
	maxBatch     int                  // immutable
	electionTick int                  // immutable
	observer     Observer             // immutable; may be nil
	mayLead      func(id uint64) bool // immutable; nil: book.MayLead

	// Leadership.
	leading  uint64   // the term this member leads; 0 when it does not
	serving  bool     // the first entry of that term is applied
	proposed []uint64 // end positions of this term's proposals not yet applied, oldest first
	stopped  bool     // ActRebuild was handed out: events are ignored

	// The leader's lease: ticks counts Tick events, heard is the tick at
	// which each other voter was last heard from in the term it leads.
	ticks uint64
	heard map[uint64]uint64
	// confirmed is the newest tick whose heartbeat round a majority has
	// answered (LeaseAgo): raft's ReadIndex asked at each tick, the tick
	// its context (leaseCtx).
	confirmed uint64

	// Writes handed out and not yet durable, oldest first, and the last
	// write's number.
	writes []pendingWrite
	seq    uint64

	// Membership: the address book as of the last change applied, and
	// the tick of the leader's last promotion proposed (one in flight at
	// a time; raft drops a second as an empty entry).
	book      Book
	promoting uint64
	// confPending is the index of the last membership change written to
	// the log: raft takes no other change until it is applied (it would
	// drop it as an empty entry), so the leader promotes none before.
	confPending uint64
	// leaving is the index of an entry in this member's log that removes
	// it from the group, 0 if none: it acknowledges no entry past it
	// (ackUpTo). Both follow the appends (noteChanges).
	leaving uint64
	// timeoutNow is a MsgTimeoutNow stepped in, held until the entries
	// that came before it are applied (Step).
	timeoutNow *pb.Message

	applied uint64 // the last entry handed to the store (or skipped)
	// handed is the last leadership handed over with its sessions'
	// reservations (HandOver), until a member serves: handover.go.
	handed handedOver
	// applyBuf and applyLocs hold the records ActApply hands out, reused
	// from one Ready to the next (a rebuild applies a million records in
	// Readies of a MiB each).
	applyBuf  []wal.Record
	applyLocs []wal.Loc
	// applyBytes are the bytes of the entries applyBuf's records came in
	// (readyBytes).
	applyBytes int
	// readyProposed are the bytes proposed in this Ready: a batch of many
	// parts (Journal.take) is proposed over several (readyBytes).
	readyProposed int
	// locateBuf and locateLocs hold ActLocate's, reused the same way: a
	// leader locates every full record it proposed.
	locateBuf  []wal.Record
	locateLocs []wal.Loc
	scratch    []wal.Record  // for checking peers' records
	out        []Action      // the actions for the next Ready
	outSpare   []Action      // the last Ready's, reused by the one after
	sends      []*pb.Message // messages made sendable since the last Ready
	agesBuf    []uint64      // HeardAgo's
	// creditCap, when not 0, is the latest tick a voter's message stepped
	// now counts as heard at (CreditUpTo).
	creditCap uint64

	// Proposals made, ever, and their bytes.
	proposals, proposedBytes uint64

	// Catching up with the leader (CaughtUp). caughtUp is latched; the
	// rest is the ReadIndex request awaiting its answer (readCtx, nil if
	// none: asked of readLead at tick readAsked, the readSeq-th of this
	// core, readNonce immutable), and the last answer: the leader's
	// commit index when it answered (leaderCommit, once answered).
	caughtUp     bool
	readNonce    uint64
	readSeq      uint64
	readCtx      []byte
	readLead     uint64
	readAsked    uint64
	leaderCommit uint64
	answered     bool
}

// pendingWrite is an ActWrite not yet durable: raft's messages to deliver
// once it is, and the snapshot it installs.
type pendingWrite struct {
	seq       uint64
	responses []*pb.Message
	snapshot  *pb.Snapshot
}

// NewCore returns the core of a member whose log is cfg.Log. Its first
// Ready restores the store from the log's head (the shell reads it); the
// committed entries after it follow as ActApply.
func NewCore(cfg Config) (*Core, error) {
	if cfg.ElectionTick == 0 {
		cfg.ElectionTick = DefaultElectionTick
	}
	if cfg.HeartbeatTick == 0 {
		cfg.HeartbeatTick = DefaultHeartbeatTick
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}
	}
	// raft panics on a bad configuration: refuse it first.
	if cfg.ID == 0 || raft.IsLocalMsgTarget(cfg.ID) {
		return nil, fmt.Errorf("replication: %d is not a member id", cfg.ID)
	}
	if cfg.ElectionTick <= cfg.HeartbeatTick || cfg.HeartbeatTick <= 0 {
		return nil, fmt.Errorf("replication: election tick %d must be above heartbeat tick %d, above 0",
			cfg.ElectionTick, cfg.HeartbeatTick)
	}
	first, err := cfg.Log.FirstIndex()
	if err != nil {
		return nil, err
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                 cfg.ID,
		ElectionTick:       cfg.ElectionTick,
		HeartbeatTick:      cfg.HeartbeatTick,
		Storage:            cfg.Log,
		AsyncStorageWrites: true,
		CheckQuorum:        true,
		PreVote:            true,
		StepDownOnRemoval:  true,
		MaxSizePerMsg:      maxMsgSize,
		MaxInflightMsgs:    maxInflight,
		Logger:             cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	c := &Core{id: cfg.ID, rn: rn, log: cfg.Log, journal: cfg.Journal, maxBatch: cfg.MaxBatch,
		electionTick: cfg.ElectionTick, observer: cfg.Observer, mayLead: cfg.MayLead, applied: first - 1,
		heard: make(map[uint64]uint64), book: cfg.Book.clone(), seq: cfg.Seq,
		caughtUp: cfg.CaughtUp, readNonce: cfg.ReadNonce}
	c.leaving = leavingIn(cfg.Log, cfg.ID, cfg.Book.Index)
	c.out = append(c.out, Action{Kind: ActRestore, Index: first - 1})
	return c, nil
}

// readyRecords is how many records one Ready gathers before it hands its
// actions out: raft has more committed entries ready as soon as the last
// are counted applied, so a replay of a whole log (a rebuild) would
// otherwise gather it all in one buffer, grown and copied as it goes
// (with a million jobs, most of a rebuild's time). A variable for tests.
var readyRecords = maxKeptRecords / 2

// readyBytes bounds, likewise, the bytes of the entries whose records one
// Ready hands out to apply, and of those it proposes: the shell takes
// what peers sent between parts (Node.process), and a part of 32k large
// jobs would keep it from them for longer than a leader waits for its
// quorum. A variable for tests.
var readyBytes = maxMsgSize

// Events.

// Tick advances raft's clock by one tick. A serving leader that has not
// heard from a majority of the voters (itself included) for an election
// timeout stops serving: it is rebuilt (ActRebuild).
//
// Raft's CheckQuorum alone steps a leader down between one and two
// election timeouts after it was cut off (it checks at the end of each
// timeout for messages heard since the last check), while the majority
// may elect another leader after one: the lease closes that gap, so a
// deposed leader stops handing out jobs by the time another can start.
func (c *Core) Tick() {
	if c.stopped {
		return
	}
	c.ticks++
	c.rn.Tick()
	if c.serving && !c.quorumHeard() {
		c.lose()
		return
	}
	if c.serving {
		c.promote()
		c.rn.ReadIndex(c.leaseCtx(c.ticks))
	}
}

// leaseCtx is the context of the ReadIndex request a serving leader asks
// at tick: three record frames (wal.KindIDs, their ids this member's Raft
// id, 0 and the tick), unlike any follower's (CaughtUp: two frames).
// Raft sends it with a heartbeat round (ReadOnlySafe) and hands it back in
// a ReadState once a majority has answered that round, however late the
// answers come: a follower that answers a heartbeat of tick t heard this
// leader at t or later, so the lease can run from t (LeaseAgo).
func (c *Core) leaseCtx(tick uint64) []byte {
	ctx := wal.AppendFrame(nil, &wal.Record{Kind: wal.KindIDs, ID: c.id})
	ctx = wal.AppendFrame(ctx, &wal.Record{Kind: wal.KindIDs})
	return wal.AppendFrame(ctx, &wal.Record{Kind: wal.KindIDs, ID: tick})
}

// leaseTick is the tick of a ReadState's context if it is one of
// leaseCtx's, of this member.
func (c *Core) leaseTick(ctx []byte) (uint64, bool) {
	rs, err := wal.DecodeFrames(nil, ctx)
	if err != nil || len(rs) != 3 || rs[0].ID != c.id || rs[1].ID != 0 {
		return 0, false
	}
	return rs[2].ID, true
}

// promote proposes a learner that has caught up (its match index within
// promoteSlack of the commit index) as a voter: one at a time, and again
// only after an election timeout if raft dropped it.
func (c *Core) promote() {
	if c.applied < c.confPending || c.promoting != 0 && c.ticks-c.promoting < uint64(c.electionTick) {
		return
	}
	commit := c.rn.BasicStatus().GetCommit()
	var ready uint64
	c.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		// Match is 0 until the learner has taken a snapshot or entries.
		if pr.IsLearner && pr.RecentActive && pr.Match > 0 && pr.Match+promoteSlack >= commit && ready == 0 {
			ready = id
		}
	})
	m, known := c.book.byID(ready)
	if ready == 0 || !known {
		return
	}
	if err := c.ProposeChange(pb.ConfChangeAddNode, m, nil); err == nil {
		c.promoting = c.ticks
	}
}

// handingOver reports whether this leader is handing its leadership
// over (its journal sealed): it takes no membership change meanwhile,
// its own or a follower's (Node.refusedProposal), so that the next
// leader's first entry follows the handover's.
func (c *Core) handingOver() bool { return c.journal != nil && c.journal.Sealed() }

// ProposeChange proposes one membership change about m (its ID is the
// Raft id changed), m riding in the change's Context so that every member
// learns its name and address. A change planned on the replicas planned
// (not nil) is applied only while the group has those, and as none once
// another change made them others (changeContext). A follower's proposal
// goes to the leader; with none known, raft refuses it
// (raft.ErrProposalDropped); so does a leader handing its leadership
// over (Journal.Sealed), as raft does under the transfer.
func (c *Core) ProposeChange(typ pb.ConfChangeType, m Member, planned *pb.ConfState) error {
	if c.stopped || c.handingOver() {
		return raft.ErrProposalDropped
	}
	cx := changeContext{Member: m}
	if planned != nil {
		cx.Voters, cx.Learners = sortedIDs(planned.GetVoters()), sortedIDs(planned.GetLearners())
	}
	ctx, err := json.Marshal(cx)
	if err != nil {
		return err
	}
	return c.rn.ProposeConfChange(&pb.ConfChangeV2{
		Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(m.ID)}},
		Context: ctx,
	})
}

// Book is the address book as of the last membership change applied.
func (c *Core) Book() Book { return c.book.clone() }

// quorumHeard reports whether a majority of the voters, this member
// included, was heard from within the last election timeout.
func (c *Core) quorumHeard() bool { return c.HeardAgo() < uint64(c.electionTick) }

// Ticks is how many ticks the core has taken.
func (c *Core) Ticks() uint64 { return c.ticks }

// CreditUpTo makes the messages stepped until it is called again with 0
// count as heard no later than tick: the answers that waited in the
// inbox through a stall answer heartbeats sent before it, and credited
// at the tick after the catch-up they would renew the lease well past
// when the others heard this leader last (Node.tick).
func (c *Core) CreditUpTo(tick uint64) { c.creditCap = tick }

// HeardAgo is how many ticks ago this leader last heard from a majority
// of its voters, itself counted as now: the age of the youngest answers
// that make a majority. Node.Leased's lease runs from then, not from the
// tick that finds them within an election timeout.
func (c *Core) HeardAgo() uint64 {
	need := (len(c.heard) + 1) / 2 // the others a majority needs besides this member
	if need == 0 {
		return 0
	}
	ages := c.agesBuf[:0]
	for _, at := range c.heard {
		ages = append(ages, c.ticks-at)
	}
	slices.Sort(ages)
	c.agesBuf = ages
	if len(ages) < need {
		return math.MaxUint64
	}
	return ages[need-1]
}

// LeaseAgo is how many ticks ago a majority of the voters, this member
// included, last confirmed this leader: the age of the newest heartbeat
// round a majority answered (confirmed), counted from when the round was
// sent, not when its answers came, and never younger than HeardAgo. An
// answer credited when it arrives (HeardAgo) can come long after the
// follower heard the leader, when unequal delays hold it on its way back,
// and would run the lease past the follower's election timeout.
// Node.Leased's lease runs from then.
func (c *Core) LeaseAgo() uint64 {
	return max(c.HeardAgo(), c.ticks-min(c.confirmed, c.ticks))
}

// heardLately reports whether a voter last heard from at tick at was
// heard from within the last election timeout.
func (c *Core) heardLately(at uint64) bool { return c.ticks-at < uint64(c.electionTick) }

// Step takes a message from a peer. A message whose records do not
// decode is refused (ErrBadRecords) and changes nothing.
func (c *Core) Step(m *pb.Message) error {
	if c.stopped {
		return nil
	}
	if m.GetTo() != c.id {
		return fmt.Errorf("replication: a message for %d reached %d", m.GetTo(), c.id)
	}
	if err := c.check(m); err != nil {
		return err
	}
	if m.GetType() == pb.MsgSnap && len(m.GetContext()) > 0 {
		var b Book
		if err := json.Unmarshal(m.GetContext(), &b); err != nil {
			return fmt.Errorf("%w: snapshot %d from %d: its address book: %v", ErrBadRecords, m.GetSnapshot().GetMetadata().GetIndex(), m.GetFrom(), err)
		}
		// The book as of the snapshot, this member's merged with the
		// leader's, goes with the install (raft hands the snapshot on
		// to the log's write with its Data: Log.InstallSnapshot), so
		// that a crash after the install does not find the log's book
		// at the snapshot's index with none of what came with it.
		book := c.book.clone()
		book.merge(b)
		book.Index = m.GetSnapshot().GetMetadata().GetIndex()
		data, err := json.Marshal(book)
		if err != nil {
			return err
		}
		m.Snapshot.Data = data
	}
	if _, voter := c.heard[m.GetFrom()]; voter && c.leading != 0 && m.GetTerm() == c.leading {
		at := c.ticks
		if c.creditCap != 0 {
			at = min(at, c.creditCap)
		}
		c.heard[m.GetFrom()] = at
	}
	if c.olderAck(m) {
		return nil
	}
	if h := c.timeoutNow; h != nil && m.GetType() == pb.MsgApp && len(m.GetEntries()) > 0 &&
		m.GetFrom() == h.GetFrom() && m.GetTerm() == h.GetTerm() {
		// Raft sends it to a receiver holding its whole log and takes no
		// proposal while the transfer lasts: its leader appending after
		// it aborted the transfer (internal/member's handOver, its
		// receiver silent) and serves again, on its lease. Campaigning on
		// it (a transfer's, which voters grant whatever their lease) would
		// make two leaders hand out jobs (TestAbortedTransferTimeoutNowDropped).
		c.timeoutNow = nil
	}
	if m.GetType() == pb.MsgTimeoutNow {
		// A leader handing over as it leaves (handOver) sends this with
		// the commit of its removal, and raft does not campaign while a
		// committed membership change is not applied: Ready steps it once
		// the entries stepped before it are.
		c.timeoutNow = m
		return nil
	}
	if err := c.rn.Step(m); !errors.Is(err, raft.ErrStepPeerNotFound) {
		return err
	}
	return nil // an answer from a member removed, or not yet known here: dropped
}

// check decodes the records a peer's message carries; a snapshot's must
// have come whole (Log.Received).
func (c *Core) check(m *pb.Message) error {
	var err error
	for _, e := range m.GetEntries() {
		if e.GetType() == pb.EntryNormal {
			c.scratch, err = wal.DecodeFrames(c.scratch[:0], e.GetData())
		} else {
			_, _, err = decodeChange(e)
		}
		if err != nil {
			return fmt.Errorf("%w: entry %d from %d: %v", ErrBadRecords, e.GetIndex(), m.GetFrom(), err)
		}
	}
	if md := m.GetSnapshot().GetMetadata(); m.GetSnapshot() != nil && !c.log.Received(md) {
		return fmt.Errorf("%w: snapshot %d from %d: its records did not all come", ErrBadRecords, md.GetIndex(), m.GetFrom())
	}
	clear(c.scratch) // keep no bodies
	return nil
}

// Durable says that every write through seq (ActWrite) is durable.
func (c *Core) Durable(seq uint64) {
	n := 0
	for n < len(c.writes) && c.writes[n].seq <= seq {
		n++
	}
	done := c.writes[:n]
	c.writes = c.writes[n:]
	for _, w := range done {
		if c.stopped {
			return
		}
		if w.snapshot != nil {
			index := w.snapshot.GetMetadata().GetIndex()
			c.out = append(c.out, Action{Kind: ActRestore, Index: index})
			c.applied = index
			// The membership as of the snapshot, and who its members
			// are: the book the log wrote with it (Step).
			if data := w.snapshot.GetData(); len(data) > 0 {
				var b Book
				if err := json.Unmarshal(data, &b); err == nil {
					c.book = b
				}
			}
			c.book.Index = index
			c.out = append(c.out, Action{Kind: ActMembership, ConfState: w.snapshot.GetMetadata().GetConfState(),
				Book: c.book.clone(), Index: index})
		}
		for _, m := range w.responses {
			if m.GetTo() == c.id {
				_ = c.rn.Step(m) // raft's own answers: errors only for stale ones
			} else {
				c.sends = append(c.sends, m)
			}
		}
	}
}

// SnapshotSent reports whether a snapshot (a MsgSnap handed out in
// ActSend) reached peer to.
func (c *Core) SnapshotSent(to uint64, ok bool) {
	if c.stopped {
		return
	}
	status := raft.SnapshotFinish
	if !ok {
		status = raft.SnapshotFailure
	}
	c.rn.ReportSnapshot(to, status)
}

// Unreachable reports that a message to peer id could not be sent.
func (c *Core) Unreachable(id uint64) {
	if !c.stopped {
		c.rn.ReportUnreachable(id)
	}
}

// Campaign starts an election now rather than at the election timeout:
// for a member the operator wants to lead, and for tests.
func (c *Core) Campaign() error {
	if c.stopped {
		return nil
	}
	return c.rn.Campaign()
}

// TransferLeadership asks the leader to hand leadership to member to,
// once to has caught up; the leader is then rebuilt as any leader that
// loses leadership is. On a member that does not lead it does nothing.
func (c *Core) TransferLeadership(to uint64) {
	// Only the leader: raft forwards a follower's request to the leader
	// with the new leader's id as its sender, which the leader's
	// transport refuses as forged (closing the link it came on).
	if !c.stopped && c.rn.BasicStatus().RaftState == raft.StateLeader {
		c.rn.TransferLeader(to)
	}
}

// Status is what the core knows of raft's state.
func (c *Core) Status() raft.BasicStatus { return c.rn.BasicStatus() }

// Serving reports whether this member leads and takes commands.
func (c *Core) Serving() bool { return c.serving && !c.stopped }

// Applied is the last entry handed to the store (or skipped, the
// leader's own).
func (c *Core) Applied() uint64 { return c.applied }

// Proposed counts the proposals this member made and their bytes.
func (c *Core) Proposed() (proposals, bytes uint64) { return c.proposals, c.proposedBytes }

// PeerProgress is what a leader knows of another member's replica.
type PeerProgress struct {
	// Match is the last entry it is known to hold.
	Match uint64
	// Streamed: raft streams the log to it (its progress is
	// StateReplicate: not probed, not sent a snapshot).
	Streamed bool
	// Active: a voter heard from within the last election timeout (the
	// lease's count, not raft's RecentActive, which CheckQuorum clears
	// for every peer each timeout). A member up whose replica of the
	// group is not (restarting, its groups not all started yet) is not.
	Active bool
}

// Progress calls fn with each other member's progress, if this member
// leads; else not at all.
func (c *Core) Progress(fn func(id uint64, p PeerProgress)) {
	if c.leading == 0 || c.stopped {
		return
	}
	c.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != c.id {
			at, voter := c.heard[id]
			fn(id, PeerProgress{Match: pr.Match, Streamed: pr.State == tracker.StateReplicate,
				Active: voter && c.heardLately(at)})
		}
	})
}

// CaughtUp reports whether this member has caught up with its group's
// leader: it has applied every entry the leader had committed when this
// member asked it, once it knew a leader (raft's ReadIndex), or it has
// served as the leader itself (a serving leader has applied everything
// committed). Latched: once caught up, it stays so as the leader's commit
// index moves on, and a core made again on the member takes it along
// (Config.CaughtUp). As of the last Ready's actions.
//
// A follower's own commit index does not tell: at start it is what its
// log held, and a heartbeat raises it only to what the follower already
// holds (raft sends min(its match, the leader's commit)), so a member
// restarted far behind would pass at once. So the core asks: once a
// leader is known, and again whenever the leader changes or an election
// timeout passes with no answer (the leader may have lost its leadership
// meanwhile, or the request its way), with a request of its own. The
// leader answers once it has committed an entry of its term and a
// majority has confirmed it still leads (a heartbeat round), with its
// commit index then. One answer is enough: what it names was committed,
// whoever leads next.
//
// A request's context is two record frames (wal.KindIDs, their ids this
// member's Raft id, then this core's nonce plus the request's number): the
// leader keys its pending requests by their contexts, which must be
// unlike any other member's and core's; and every release's leader checks
// the entries of a message it takes as records (check) and refuses one
// that does not decode, and these decode, so that a member of this
// release is answered by a leader of a release before, through a rolling
// upgrade. Nothing applies them: a ReadIndex's entries are never
// appended.
func (c *Core) CaughtUp() bool { return c.caughtUp }

// askLeaderCommit asks the leader for its commit index (CaughtUp), if
// this member has not caught up, has no answer yet, knows a leader that
// is not itself, and has no request to it younger than an election
// timeout. An answer stays good after a leader change: what it names was
// committed, and the next leader's commit index is at least as far.
func (c *Core) askLeaderCommit() {
	if c.caughtUp || c.answered || c.stopped {
		return
	}
	lead := c.rn.BasicStatus().Lead
	if lead == 0 || lead == c.id || c.readCtx != nil && c.readLead == lead && c.ticks-c.readAsked < uint64(c.electionTick) {
		return
	}
	c.readSeq++
	c.readCtx = wal.AppendFrame(nil, &wal.Record{Kind: wal.KindIDs, ID: c.id})
	c.readCtx = wal.AppendFrame(c.readCtx, &wal.Record{Kind: wal.KindIDs, ID: c.readNonce + c.readSeq})
	c.readLead, c.readAsked = lead, c.ticks
	c.rn.ReadIndex(c.readCtx)
}

// Ready hands out the actions that follow from everything the core has
// been told, in the order to carry them out. The shell carries them out
// before it feeds the next event, and calls Ready until it hands out
// none: a long run of committed entries comes in parts (readyRecords).
// The slice is the core's, valid until the next Ready.
func (c *Core) Ready() []Action {
	// The shell has carried out the last Ready's actions: their records
	// may be written over. A buffer grown past a Ready's usual size (one
	// MiB of entries) is let go rather than kept, with the bodies it
	// points into.
	if cap(c.applyBuf) > maxKeptRecords {
		c.applyBuf, c.applyLocs = nil, nil
	}
	c.applyBuf, c.applyLocs, c.applyBytes, c.readyProposed = c.applyBuf[:0], c.applyLocs[:0], 0, 0
	if cap(c.locateBuf) > maxKeptRecords {
		c.locateBuf, c.locateLocs = nil, nil
	}
	c.locateBuf, c.locateLocs = c.locateBuf[:0], c.locateLocs[:0]
	c.askLeaderCommit()
	for !c.stopped {
		if len(c.sends) > 0 {
			c.out = append(c.out, Action{Kind: ActSend, Messages: c.sends})
			c.sends = nil
		}
		if c.rn.HasReady() {
			c.handle(c.rn.Ready())
			if len(c.applyBuf) >= readyRecords || c.applyBytes >= readyBytes {
				break // the shell comes back for the rest (Node.process)
			}
			continue
		}
		if m := c.timeoutNow; m != nil {
			c.timeoutNow = nil
			_ = c.rn.Step(m)
			continue
		}
		if c.readyProposed >= readyBytes || !c.propose() {
			break // a large batch's next parts go in the next Ready
		}
	}
	if !c.caughtUp && (c.serving || c.answered && c.applied >= c.leaderCommit) {
		// As of the actions handed out: the shell carries them out before
		// it publishes what CaughtUp says.
		c.caughtUp, c.readCtx = true, nil
	}
	// Two buffers in turn: the shell carries out this Ready's actions
	// while Durable may add to the next one's, and is done with them
	// when it asks for the next Ready.
	out := c.out
	clear(c.outSpare) // what the actions pointed to may go
	c.out, c.outSpare = c.outSpare[:0], out
	return out
}

// handle turns one raft.Ready into actions. With AsyncStorageWrites all
// of it is in its messages: to peers, to the log (MsgStorageAppend) and
// to the store (MsgStorageApply).
func (c *Core) handle(rd raft.Ready) {
	start := len(c.out)
	if rd.SoftState != nil {
		c.leadership(rd.SoftState.RaftState)
		if c.stopped {
			c.handleStopped(rd)
			return
		}
	}
	for _, rs := range rd.ReadStates {
		if c.readCtx != nil && bytes.Equal(rs.RequestCtx, c.readCtx) {
			c.leaderCommit, c.answered, c.readCtx = rs.Index, true, nil
		} else if tick, ok := c.leaseTick(rs.RequestCtx); ok && c.leading != 0 {
			c.confirmed = max(c.confirmed, tick)
		}
	}
	var sends []*pb.Message
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			c.write(m)
		case raft.LocalApplyThread:
			c.apply(m)
		default:
			if m := c.outgoing(m); m != nil {
				sends = append(sends, m)
			}
		}
	}
	if len(sends) > 0 {
		// Ahead of this Ready's write: an append to followers need not
		// wait for the leader's own disk.
		c.out = slices.Insert(c.out, start, Action{Kind: ActSend, Messages: sends})
	}
}

// outgoing readies m, raft's, for a peer: a snapshot carries who its
// members are (doc.go, "Membership changes"), since raft's ConfState
// holds only their ids. The core's book is the book as of the snapshot's
// index only if that index is between the book's and the applied one's:
// the log makes a snapshot at the commit index, ahead of what this
// leader applied while its own disk lags a majority's, and the book,
// applied, ahead of the log's view (ActMembership comes after). Else the
// snapshot is not sent (nil), and raft asks for one again: with the
// core's book, a control record between the two was lost to the
// follower for good, or applied there twice.
func (c *Core) outgoing(m *pb.Message) *pb.Message {
	if m.GetType() == pb.MsgSnap {
		if i := m.GetSnapshot().GetMetadata().GetIndex(); i > c.applied || i < c.book.Index {
			c.rn.ReportSnapshot(m.GetTo(), raft.SnapshotFailure)
			return nil
		}
		m.Context, _ = json.Marshal(c.book)
	}
	return m
}

// handleStopped takes the Ready in which this member stopped leading:
// nothing more is applied, but raft's messages to peers still go, before
// the rebuild (among them a removed leader's handover, handOver), and so
// does its write, with the responses to peers it holds until the write
// is durable: the rebuild sends them then (ActRebuild's Messages). A
// leader steps down on a campaign's vote request, as a transfer it asked
// for begins, and grants its vote in this Ready; dropped, the receiver
// could not win without it, and the group would wait out an election
// timeout.
func (c *Core) handleStopped(rd raft.Ready) {
	var sends, afterWrite []*pb.Message
	var acts []Action
	for _, m := range rd.Messages {
		switch {
		case m.GetTo() == raft.LocalAppendThread && m.GetSnapshot() == nil:
			acts = append(acts, c.writeAction(m))
			for _, r := range c.ackUpTo(m.GetResponses()) {
				if !raft.IsLocalMsgTarget(r.GetTo()) && r.GetTo() != c.id {
					afterWrite = append(afterWrite, r)
				}
			}
		case !raft.IsLocalMsgTarget(m.GetTo()):
			if m := c.outgoing(m); m != nil {
				sends = append(sends, m)
			}
		}
	}
	if len(sends) > 0 {
		acts = slices.Insert(acts, 0, Action{Kind: ActSend, Messages: sends})
	}
	rebuild := len(c.out) - 1 // lose's ActRebuild, the last action
	c.out[rebuild].Messages = append(c.out[rebuild].Messages, afterWrite...)
	c.out = slices.Insert(c.out, rebuild, acts...)
}

// leadership follows raft's state: a member that becomes leader serves
// once its term's first entry is applied; one that stops leading after it
// served is rebuilt.
func (c *Core) leadership(state raft.StateType) {
	switch {
	case state == raft.StateLeader && c.leading == 0:
		st := c.rn.Status()
		c.leading = st.GetTerm()
		c.serving = false
		c.proposed = c.proposed[:0]
		clear(c.heard)
		// The first entry of the term is committed (serving) once a
		// majority has it: each heard this leader after this tick.
		c.confirmed = c.ticks
		for id, pr := range st.Progress {
			if id != c.id && !pr.IsLearner {
				c.heard[id] = c.ticks // a lease starts with the leadership
			}
		}
	case state != raft.StateLeader && c.leading != 0:
		if c.serving {
			c.lose()
			return
		}
		c.leading = 0
	}
}

// lose ends the leadership of a member that served: its store may hold
// changes that never commit, so it is rebuilt, and the core stops.
func (c *Core) lose() {
	c.out = append(c.out, Action{Kind: ActRebuild, Term: c.leading})
	c.stopped, c.serving = true, false
}

// write hands out a MsgStorageAppend as an ActWrite and keeps its
// responses until it is durable.
func (c *Core) write(m *pb.Message) {
	a := c.writeAction(m)
	c.out = append(c.out, a)
	c.writes = append(c.writes, pendingWrite{seq: c.seq, responses: c.ackUpTo(m.GetResponses()), snapshot: m.GetSnapshot()})
}

// writeAction is the ActWrite of MsgStorageAppend m, numbered next.
func (c *Core) writeAction(m *pb.Message) Action {
	c.noteChanges(m)
	c.seq++
	a := Action{Kind: ActWrite, Seq: c.seq, Snapshot: m.GetSnapshot(), Entries: m.GetEntries()}
	if m.Vote != nil {
		a.HardState = &pb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())}
	}
	return a
}

// apply takes a MsgStorageApply: committed entries, durable here. A
// follower applies their records; the leader applies those of earlier
// terms (they are not in its store yet), skips its own (they are) but for
// where their full records are (ActLocate), and publishes their end; its
// term's first entry makes it serve.
func (c *Core) apply(m *pb.Message) {
	// Appended to the Ready's buffers, never written below what an
	// earlier action of the same Ready holds.
	from, mineFrom := len(c.applyBuf), len(c.locateBuf)
	records, locs := c.applyBuf, c.applyLocs
	mine, mineLocs := c.locateBuf, c.locateLocs
	var ack uint64
	serve := false
	var handed []byte // the reservations this member takes as it serves
	var passed uint64 // the term of a handover whose reservations it does not take
	var confs []Action
	for _, e := range m.GetEntries() {
		own := c.leading != 0 && e.GetTerm() == c.leading
		if c.handed.body != nil && e.GetTerm() > c.handed.term && (!own || c.serving) {
			c.handed = handedOver{} // another leader's term began: taken or passed there
		}
		if e.GetType() != pb.EntryNormal {
			if a, ok := c.applyChange(e); ok {
				confs = append(confs, a)
			}
			c.applied = e.GetIndex()
			continue
		}
		switch {
		case own && !c.serving:
			// The empty entry a leader appends first: everything before it
			// is committed and applied now.
			c.serving, serve = true, true
			c.rn.ReadIndex(c.leaseCtx(c.ticks)) // the lease's first round
			if c.journal != nil {
				c.journal.reset() // a change that ran on past the last loss
			}
			if handed = c.handed.takenBy(c.leading, e.GetIndex()); handed == nil && c.handed.body != nil {
				passed = c.handed.term
			}
			c.handed = handedOver{}
		case own && len(e.GetData()) > 0:
			ack = c.proposed[0]
			c.proposed = c.proposed[1:]
			seg := c.log.Locate(e.GetIndex())
			// Written by this member: scanned, not checked again.
			control := false
			_ = wal.ScanFrames(e.GetData(), func(kind wal.Kind, id uint64, size int) {
				switch kind {
				case wal.KindFull:
					mine = append(mine, wal.Record{Kind: kind, ID: id})
					mineLocs = append(mineLocs, wal.Loc{Seg: seg, Size: uint32(size)})
				case wal.KindControl, wal.KindMeta:
					control = true
				}
			})
			if control {
				recs, _ := wal.DecodeFrames(nil, e.GetData())
				confs = c.applyControl(confs, recs, e.GetIndex())
			}
		case !own && len(e.GetData()) > 0:
			c.applyBytes += len(e.GetData())
			n := len(records)
			var err error
			if records, err = wal.DecodeFrames(records, e.GetData()); err != nil {
				// Checked when it came in, or written by this member: the
				// log is damaged, and the store must not go on without it.
				panic(fmt.Sprintf("replication: committed entry %d: %v", e.GetIndex(), err))
			}
			locs = appendLocs(locs, records[n:], c.log.Locate(e.GetIndex()))
			confs = c.applyControl(confs, records[n:], e.GetIndex())
		}
		c.applied = e.GetIndex()
	}
	c.applyBuf, c.applyLocs = records, locs
	if len(records) > from {
		c.out = append(c.out, Action{Kind: ActApply, Records: records[from:len(records):len(records)],
			Locs: locs[from:len(locs):len(locs)], Index: c.applied})
	}
	c.locateBuf, c.locateLocs = mine, mineLocs
	if len(mine) > mineFrom {
		c.out = append(c.out, Action{Kind: ActLocate, Records: mine[mineFrom:len(mine):len(mine)],
			Locs: mineLocs[mineFrom:len(mineLocs):len(mineLocs)], Index: c.applied})
	}
	if ack > 0 {
		c.out = append(c.out, Action{Kind: ActPublish, Pos: ack})
	}
	c.out = append(c.out, confs...)
	if serve {
		c.out = append(c.out, Action{Kind: ActServe, Term: c.leading, Handed: handed, Passed: passed})
	}
	c.out = append(c.out, Action{Kind: ActCompact, Index: c.applied})
	// The store applies in the order of the actions, before any later
	// event: raft may count these entries applied now.
	for _, r := range m.GetResponses() {
		_ = c.rn.Step(r)
	}
}

// applyChange applies a committed membership change to raft and to the
// book, and returns the ActMembership that says so; none for a change the
// log's membership holds already (at or before the book's index, at
// start). A change that does not decode means a damaged log: the store
// must not go on without it.
func (c *Core) applyChange(e *pb.Entry) (Action, bool) {
	if e.GetIndex() <= c.book.Index {
		return Action{}, false
	}
	cc, who, err := decodeChange(e)
	if err != nil {
		// Checked when it came in, or proposed by a member: the log is
		// damaged, and the store must not go on without it.
		panic(fmt.Sprintf("replication: committed entry %d: %v", e.GetIndex(), err))
	}
	if who.Voters != nil && !who.plannedOn(c.rn.Status().Config) {
		return c.refuseChange(e), true
	}
	v2 := cc.AsV2()
	c.handOver(v2)
	had := c.replicas()
	cs := c.rn.ApplyConfChange(cc)
	for _, ch := range v2.GetChanges() {
		id := ch.GetNodeId()
		switch ch.GetType() {
		case pb.ConfChangeRemoveNode:
			c.book.remove(id)
		default:
			who.ID = id
			c.book.add(who.Member)
			if _, ok := had[id]; !ok {
				c.book.join(id, e.GetIndex())
			}
		}
	}
	c.book.Index = e.GetIndex()
	c.promoting = 0
	// The lease counts the voters there are now.
	voters := make(map[uint64]bool)
	for _, id := range cs.GetVoters() {
		voters[id] = true
	}
	maps.DeleteFunc(c.heard, func(id, _ uint64) bool { return !voters[id] })
	if c.leading != 0 {
		for id := range voters {
			if _, ok := c.heard[id]; !ok && id != c.id {
				c.heard[id] = c.ticks
			}
		}
	}
	return Action{Kind: ActMembership, ConfState: cs, Book: c.book.clone(), Index: e.GetIndex()}, true
}

// refuseChange applies change e, planned on replicas that an earlier
// change has made others since, as none, the same on every member:
// whether it applies depends on the log alone (raft's configuration, a
// snapshot's included). Two removals planned on the same replicas (a
// deposed mover's, and its successor's of a voter too many) would
// otherwise both apply, leaving the group a voter short. Raft is told
// of a change of no member (its changer skips node 0), as etcd does for
// one it rejects. A removal of this member so refused no longer holds
// back its acknowledgements (Core.leaving): the next one in the log does.
func (c *Core) refuseChange(e *pb.Entry) Action {
	cs := c.rn.ApplyConfChange(&pb.ConfChangeV2{
		Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(0))}},
	})
	if c.leaving == e.GetIndex() {
		c.leaving = leavingIn(c.log, c.id, e.GetIndex())
	}
	return Action{Kind: ActMembership, Refused: true, ConfState: cs, Book: c.book.clone(), Index: e.GetIndex()}
}

// A control record's State says what it does; its ID is 0, as every
// reader of ids (a log's id floors) must not take it for a job's.
const (
	// controlVersion raises the cluster version to Pri (finalize.go).
	controlVersion uint8 = 0
	// controlDrain marks a member, its Raft id in Deadline, draining (Pri
	// 1) or no longer (Pri 0): Node.SetDraining.
	controlDrain uint8 = 1
	// controlCordon marks a member, its Raft id in Deadline, cordoned
	// (Pri 1) or no longer (Pri 0): Node.SetCordoned. A member built
	// before it skips it, as any State it does not know.
	controlCordon uint8 = 2
)

// applyControl applies the control records among recs, of the entry at
// index, to the book: one that raises the cluster version, that marks a
// member draining or cordoned or no longer, or that records a tube's move (KindMeta,
// tubes.go) adds its ActControl to acts. An entry the book holds already
// (restored from a checkpoint or snapshot at or past it) is skipped
// whole; within an entry every record applies, though the first sets
// the book's index to the entry's (the journal batches records, so a
// tube's placement may share an entry with finalization).
func (c *Core) applyControl(acts []Action, recs []wal.Record, index uint64) []Action {
	if index <= c.book.Index {
		return acts
	}
	for i := range recs {
		r := &recs[i]
		if r.Kind != wal.KindControl && r.Kind != wal.KindMeta {
			continue
		}
		if r.Kind == wal.KindMeta && (r.State == HandOver || r.State == HandOverAborted) {
			c.handed = handedOf(r, index)
			continue
		}
		if r.Kind == wal.KindMeta {
			if c.book.Tubes.apply(r) {
				c.book.Index = index
				acts = append(acts, Action{Kind: ActControl, Book: c.book.clone(), Index: index})
			}
			continue
		}
		if marked := c.book.marked(r.State); marked != nil {
			if mark(marked, uint64(r.Deadline), r.Pri != 0) {
				c.book.Index = index
				acts = append(acts, Action{Kind: ActControl, Book: c.book.clone(), Index: index})
			}
			continue
		}
		if r.State != controlVersion || uint16(r.Pri) <= c.book.Version {
			continue
		}
		c.book.Version, c.book.Index = uint16(r.Pri), index
		acts = append(acts, Action{Kind: ActControl, Book: c.book.clone(), Index: index})
	}
	return acts
}

// handOver: a leader about to apply its own removal hands leadership to
// the voter with the most of its log, so the others need not wait an
// election timeout to find it gone; to one that may lead (neither
// cordoned nor draining: it would hand the group on at once) if any.
// Raft sends that voter a MsgTimeoutNow at once if it has the whole log
// (else nothing: the election is the fallback), and the message survives
// the step down that applying the removal makes (StepDownOnRemoval); the
// voter campaigns on it.
func (c *Core) handOver(cc *pb.ConfChangeV2) {
	if c.leading == 0 {
		return
	}
	removed := false
	for _, ch := range cc.GetChanges() {
		removed = removed || ch.GetType() == pb.ConfChangeRemoveNode && ch.GetNodeId() == c.id
	}
	if !removed {
		return
	}
	mayLead := c.mayLead
	if mayLead == nil {
		mayLead = c.book.MayLead
	}
	var to uint64
	var best struct {
		mayLead bool
		match   uint64
	}
	for id, pr := range c.rn.Status().Progress {
		if id == c.id || pr.IsLearner {
			continue
		}
		if may := mayLead(id); to == 0 || may && !best.mayLead || may == best.mayLead && pr.Match > best.match {
			to, best.mayLead, best.match = id, may, pr.Match
		}
	}
	if to != 0 {
		c.rn.TransferLeader(to)
	}
}

// A replica of a group but 0 that is removed and added again has its
// member's Raft id again (Node.AddReplica). Its member drops the older
// replica's log when that replica applies its removal, and starts the new
// one empty, for a snapshot to fill: raft would count what the older one
// acknowledged as held by the new one, a match it takes for good (an
// answer to an append below it is stale to raft), so the leader would
// never send the snapshot, and would count the empty replica towards its
// commits. The older one, cut off while the group removed and added it
// again, acknowledges on coming back the entries that do both (the
// chaos test saw a replica so promoted and never filled). So
//   - a replica acknowledges no entry past one that removes it (ackUpTo),
//     and each of its acknowledgements is then below the index at which
//     the group added its member's replica last (Book.Joined);
//   - the leader counts no acknowledgement below that index (olderAck):
//     it answers for the new replica as an empty one would, and raft sends
//     a snapshot, whichever of the two receives it.

// replicas are the group's replicas, voters and learners, by Raft id.
func (c *Core) replicas() map[uint64]struct{} {
	cfg := c.rn.Status().Config
	ids := cfg.Voters.IDs()
	for id := range cfg.Learners {
		ids[id] = struct{}{}
	}
	return ids
}

// noteChanges follows the membership changes in the log's appends
// (MsgStorageAppend m): the last written (Core.confPending), and the one
// that removes this member (Core.leaving; at start, leavingIn), which a
// snapshot, or entries written over it, end.
func (c *Core) noteChanges(m *pb.Message) {
	ents := m.GetEntries()
	if m.GetSnapshot() != nil || len(ents) > 0 && ents[0].GetIndex() <= c.leaving {
		c.leaving = 0
	}
	for _, e := range ents {
		if e.GetType() == pb.EntryNormal {
			continue
		}
		c.confPending = max(c.confPending, e.GetIndex())
		if c.leaving == 0 && removes(e, c.id) {
			c.leaving = e.GetIndex()
		}
	}
}

// leavingIn is the index of the first membership change in log after
// index after (the book's: those through it are in effect) that removes
// member id, 0 if none: a core starting again (a restart, a rebuild) on a
// log that holds one acknowledges no entry past it either.
func leavingIn(log Log, id, after uint64) uint64 {
	for _, i := range log.Changes(after) {
		ents, err := log.Entries(i, i+1, math.MaxUint64)
		if err != nil || len(ents) == 0 {
			continue
		}
		if removes(ents[0], id) {
			return i
		}
	}
	return 0
}

// removes reports whether membership change e removes member id.
func removes(e *pb.Entry, id uint64) bool {
	cc, _, err := decodeChange(e)
	if err != nil {
		return false
	}
	for _, ch := range cc.AsV2().GetChanges() {
		if ch.GetType() == pb.ConfChangeRemoveNode && ch.GetNodeId() == id {
			return true
		}
	}
	return false
}

// ackUpTo returns msgs, a write's responses, with each acknowledgement of
// entries to a peer past the entry that removes this member made one of
// entries through it.
func (c *Core) ackUpTo(msgs []*pb.Message) []*pb.Message {
	if c.leaving == 0 {
		return msgs
	}
	out := slices.Clone(msgs)
	for i, m := range out {
		if m.GetType() == pb.MsgAppResp && !m.GetReject() && m.GetIndex() > c.leaving && !raft.IsLocalMsgTarget(m.GetTo()) && m.GetTo() != c.id {
			m = proto.Clone(m).(*pb.Message)
			m.Index = new(c.leaving)
			out[i] = m
		}
	}
	return out
}

// olderAck reports whether m, stepped in on the leader, acknowledges
// entries below the index at which the group added its sender's replica
// last: an older replica's, or a late answer of this one's snapshot; it
// is dropped. While the leader probes the sender with no match since
// then, it steps in what an empty replica answers: raft sends it a
// snapshot next.
func (c *Core) olderAck(m *pb.Message) bool {
	if c.leading == 0 || m.GetType() != pb.MsgAppResp || m.GetReject() || m.GetTerm() != c.leading {
		return false
	}
	joined := c.book.Joined[m.GetFrom()]
	if m.GetIndex() >= joined {
		return false
	}
	probe := uint64(0)
	c.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == m.GetFrom() && pr.State == tracker.StateProbe && pr.Match < joined {
			probe = pr.Next
		}
	})
	if probe > 0 {
		_ = c.rn.Step(&pb.Message{Type: pb.MsgAppResp.Enum(), From: new(m.GetFrom()), To: new(c.id), Term: new(c.leading),
			Index: new(probe - 1), Reject: new(true), RejectHint: new(uint64(0))})
	}
	return true
}

// changeContext is what a membership change's Context carries: the
// member it changes (its fields at the top level, as a change written
// before the others were) and, for a change planned on a view of the
// group (a replica's removal: Node.RemoveReplica), the replicas it was
// planned on, sorted, which it applies on alone (Core.refuseChange); no
// voters: on any. Raft's configuration, not an index, is what every
// member agrees on at each entry: a replica filled by a snapshot has the
// snapshot's index for its book's.
type changeContext struct {
	Member
	Voters   []uint64 `json:"planned_voters,omitempty"`
	Learners []uint64 `json:"planned_learners,omitempty"`
}

// plannedOn reports whether the group's configuration cfg has the
// replicas the change was planned on.
func (cx changeContext) plannedOn(cfg tracker.Config) bool {
	return slices.Equal(cx.Voters, sortedIDs(slices.Collect(maps.Keys(cfg.Voters.IDs())))) &&
		slices.Equal(cx.Learners, sortedIDs(slices.Collect(maps.Keys(cfg.Learners))))
}

// sortedIDs is ids sorted, nil when empty.
func sortedIDs(ids []uint64) []uint64 {
	if len(ids) == 0 {
		return nil
	}
	return slices.Sorted(slices.Values(ids))
}

// decodeChange reads a membership change's entry: the change, and what
// its Context says.
func decodeChange(e *pb.Entry) (pb.ConfChangeI, changeContext, error) {
	var cc pb.ConfChangeI
	switch e.GetType() {
	case pb.EntryConfChangeV2:
		v2 := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), v2); err != nil {
			return nil, changeContext{}, fmt.Errorf("a membership change: %v", err)
		}
		cc = v2
	case pb.EntryConfChange:
		v1 := &pb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), v1); err != nil {
			return nil, changeContext{}, fmt.Errorf("a membership change: %v", err)
		}
		cc = v1
	default:
		return nil, changeContext{}, fmt.Errorf("%v entries are not supported", e.GetType())
	}
	var who changeContext
	if ctx := cc.AsV2().GetContext(); len(ctx) > 0 {
		if err := json.Unmarshal(ctx, &who); err != nil {
			return nil, changeContext{}, fmt.Errorf("a membership change's member: %v", err)
		}
	}
	return cc, who, nil
}

// propose hands the journal's batch, at most maxBatch of it, to raft as
// one entry, if this member serves and either its last writes are
// durable (so batches grow while the disk is busy, as a group commit
// does) or the batch is large. It reports whether it proposed.
func (c *Core) propose() bool {
	if !c.serving || c.journal == nil {
		return false
	}
	n := c.journal.pending()
	if n == 0 || len(c.writes) > 0 && n < c.maxBatch {
		return false
	}
	data, end, records := c.journal.take(c.maxBatch)
	// A leader's raft copies what it appends (raft.appendEntry); one that
	// is no longer leader may keep data in a message to forward.
	copied := c.rn.BasicStatus().RaftState == raft.StateLeader
	if err := c.rn.Propose(data); err != nil {
		// Raft drops proposals only while leadership moves: keep the batch.
		c.journal.untake(data, records)
		return false
	}
	c.proposed = append(c.proposed, end)
	c.readyProposed += len(data)
	c.proposals++
	c.proposedBytes += uint64(len(data))
	if c.observer != nil {
		c.observer.ObserveProposal(len(data), records)
	}
	if copied {
		c.journal.recycle(data)
	}
	return true
}

// appendLocs appends to locs where each of records is, written in segment
// seg: a full record's segment and size, nothing for the others.
func appendLocs(locs []wal.Loc, records []wal.Record, seg uint32) []wal.Loc {
	for i := range records {
		loc := wal.Loc{}
		if r := &records[i]; r.Kind == wal.KindFull {
			loc = wal.Loc{Seg: seg, Size: uint32(wal.FrameSize(r))} // a keyed record's is larger
		}
		locs = append(locs, loc)
	}
	return locs
}
