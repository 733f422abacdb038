package router

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/atomicmax"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// Server is a group leader's side of the commands stream (docs/design/
// shards.md 5.1): it executes the requests other members' sessions send
// to the groups this member serves, each session on a store client of
// its own (its owner client, keyed by the member, the session and the
// group), and answers them in each session's order once their changes
// are acknowledged by the group's log, as the engine's held replies wait.
//
// A wait across groups (6.3) is a reserve without a timeout on the
// owner client, which sends its end as an event (an offer, or
// DEADLINE_SOON) rather than a reply; a cancel ends it unless its offer
// is on its way (the member then declines it), and a decline gives the
// job back as if never reserved (store.Client.Unreserve).
//
// Changes are made with their requests' keys (5.6), so one resent after
// a failover is answered from the group's table of outcomes. A close of
// session 0 closes every owner client of its member: a new process of
// that member says so first. Each reply carries the group's latest tube
// creation stamp, and a request's stamp raises the next (5.5).
type Server struct {
	cfg ServerConfig
	out outbox // what it sends, batched per member

	// The loop that sends held replies once acknowledged (ackFlusher).
	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	owners map[ownerKey]*owner // guarded by mu
	// closing are the owner clients taken out of owners and not closed
	// yet (takeOwnersLocked, closeTaken): Detach closes those of its group
	// too, or waits for their closes, so that none holds the store once
	// it returns. Guarded by mu.
	closing  map[*owner]struct{}
	flushers map[uint16]*ackFlusher // guarded by mu: each group's, for its store's AckSource
	closed   bool                   // guarded by mu
	// forgotten is the store each removed member's references in a group
	// were dropped from (Forget): the group's, until it is rebuilt.
	// Guarded by mu.
	forgotten map[forgottenRefs]*store.Store
	// gated are the groups whose leadership is being handed over (Gate):
	// their requests are refused. Replaced, never changed, under mu.
	gated atomic.Pointer[map[uint16]bool]
	// outside orders the changes made outside any session (Unfrozen, the
	// admin API's) with Refreeze: each holds it shared while it checks
	// and runs; Refreeze takes it whole once.
	outside sync.RWMutex
	// closedAt are the sessions whose close came here (session 0: all of
	// a member's), and the jobs sessions declined that their owner client
	// here did not hold, when, for closeRecall: a reservation handed over
	// for one is not taken (Adopt), and an item of a closed session that
	// comes after its close makes no owner client (owner). closedOrder
	// holds them in the order noted, for their expiry. Guarded by mu.
	closedAt    map[closedKey]time.Time
	closedOrder []closedNote
	closedHead  int // closedOrder's first not yet forgotten
	// refused are the requests answered StatusNotLeader as this member
	// did not serve their groups, whose sessions' later requests wait
	// for them.
	refused refusals
}

// closedNote is a key of closedAt, and when it was noted then.
type closedNote struct {
	key closedKey
	at  time.Time
}

// closeRecall is how long a session's close is remembered (Server.Adopt,
// Server.owner), and sent again to a group's new leader
// (Link.LeaderChanged): it may have reached the last leader after that
// one listed what the session held, or the next before it took that.
const closeRecall = 10 * time.Second

// declineRecall is how long a session's decline of a job offered is sent
// again to a group's new leader: a handover's span (it may have reached
// the last leader after that one listed the job as held). Shorter than
// closeRecall: the session may take the job again later.
const declineRecall = 3 * time.Second

// ServerConfig is what a Server serves.
type ServerConfig struct {
	// Group is group g's store while this member serves it, else nil: its
	// requests are answered StatusNotLeader, and the router asks the
	// group's leader. It is called with the Server's lock held.
	Group func(g uint16) *store.Store
	// Send queues a payload of items for member to, without blocking; it
	// reports false when it could not (a full queue, no connection): the
	// member resends what it has no answer for (5.9). It is called with
	// the Server's locks held, so it must not call back into the Server;
	// the payload is the caller's again once it returns.
	Send func(to uint64, payload []byte) bool
	// MaxJobSize bounds a put's body (the server's -z).
	MaxJobSize int
	// Leased, if set, says whether this member's leadership of group g
	// is still confirmed (engine.Config.Leased): a job is handed out, and
	// a request that reads the store answered (leaseFenced), only while
	// it says true. Otherwise the reply or offer goes as StatusNotLeader,
	// so the member asks again: the group's next leader, or this one,
	// which answers with the job the owner client kept, or runs the read
	// again, if its leadership was confirmed meanwhile
	// (owner.refuseLocked).
	Leased func(g uint16) bool
	// Frozen, if set, says which of group g's tubes are moving out or
	// moved out (a tube's move: internal/replication's tubes.go), nil
	// while none is, and whether one is moving (not yet moved out: its
	// jobs may be here still): a request naming one, a reserve or wait
	// watching one, and a command by id of a job of one moving are
	// answered StatusWrongGroup (a wait's end, EventWrongGroup), and the
	// member asks again where the tube, or the job, lives.
	Frozen func(g uint16) (tubes func(tube []byte) bool, moving bool)
	// MovedTo, if set, are the groups tubes of group g moved to or are
	// moving to, as its log says: a command by id of a job the group
	// does not hold is answered NOT_FOUND with them (Reply.Moved), and
	// the member asks those too.
	MovedTo func(g uint16) []uint16
	// Staged, if set, says which of group g's tubes are copies a move
	// took in ahead of its source's freeze, nil while none is: the source
	// serves them still, so a command by id of a job of one is answered
	// as if the job were not here (NOT_FOUND, with MovedTo's groups), and
	// the member's search goes on to the source; and the group's parts
	// of stats and list-tubes leave them out (the source counts them).
	Staged func(g uint16) func(tube []byte) bool
	// Uncounted, if set, says which of group g's tubes another group
	// counts, nil while none: Staged's, and those whose jobs a move has
	// in both groups (from the destination's adopt at the freeze to the
	// source's drop after the placement), here while they live
	// elsewhere. The group's parts of stats and list-tubes leave them
	// out, so each job counts once. Nil: Staged's alone.
	Uncounted func(g uint16) func(tube []byte) bool
}

// NewServer returns a server of cfg.
func NewServer(cfg ServerConfig) *Server {
	s := &Server{cfg: cfg, out: outbox{send: cfg.Send}, owners: make(map[ownerKey]*owner),
		flushers: make(map[uint16]*ackFlusher),
		wake:     make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// run sends the replies the groups' logs acknowledge (ackFlusher), until
// Close.
func (s *Server) run() {
	defer close(s.done)
	var fired, spare []*ackFlusher
	var owners []*owner
	var retry <-chan time.Time // while a member's stream refuses its replies
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-retry:
		}
		retry = nil
		s.mu.Lock()
		fired = spare[:0]
		for _, f := range s.flushers {
			if f.fired.Swap(false) {
				fired = append(fired, f)
			}
		}
		s.mu.Unlock()
		for _, f := range fired {
			owners = f.flush(owners)
		}
		if s.out.flush() {
			retry = time.After(outboxRetry)
		}
		clear(fired)
		spare = fired
	}
}

// outboxRetry is how soon replies a member's stream refused (a full
// queue) are offered again, if nothing else flushes them first.
const outboxRetry = 10 * time.Millisecond

// ownerKey names an owner client: a member's session in a group.
type ownerKey struct {
	member, session uint64
	group           uint16
}

// closedKey names what Server.closedAt remembers: a session's close (job
// 0), or a job it declined.
type closedKey struct {
	ownerKey
	job uint64
}

// owner is one remote session's client in one group. Its client is used
// by one goroutine at a time (mu): Handle's, or the one that serves the
// requests that queued behind a blocked reserve.
type owner struct {
	srv     *Server      // immutable
	key     ownerKey     // immutable
	st      *store.Store // immutable: the group's store it was made on
	flusher *ackFlusher  // immutable: its group's, for st; nil if st acknowledges at once
	client  *store.Client
	adopted bool      // immutable: made by Adopt
	made    time.Time // immutable: for DescribeOwners

	queued bool // guarded by flusher.mu: in flusher's waiting list

	mu sync.Mutex
	// waiting is the sequence of a reserve or a wait the client waits in
	// (0: none), and waitID the wait's id (0: a reserve); backlog, the
	// requests that came behind it, in order, run when it ends (with
	// their bodies copied: the frame is gone by then).
	waiting uint32
	waitID  uint64
	// soonFirst: the reserve waiting was bounded by a job of its session
	// in another group coming near its TTR, not by its timeout: its
	// end by the timer is DEADLINE_SOON.
	soonFirst bool
	backlog   []Item
	// replies wait for their changes to be acknowledged, in order: the
	// first ones whose position is acknowledged go (flushLocked).
	replies []heldReply
	closed  bool
	// seen is the highest sequence of a request or wait taken; kept, the
	// answers sent since the session last had every answer before a
	// request (one that is not Pipelined says so), for requests sent
	// again: a payload of its own each, buffers reused.
	seen uint32
	kept keptAnswers
	// barrier is the sequence of the last request that did not pipeline:
	// the session had every answer before it.
	barrier uint32
	// gave are the last jobs reserved for the session here and the
	// sequences of the reserves or waits that got them (Held lists
	// them); handed, the jobs to answer those sequences with when they
	// come again, not run twice (answerHandedLocked): reservations a
	// handover gave this owner (Adopt), or whose answer the lease
	// refused (refuseLocked).
	gave, handed givenJobs
	// refused is the sequence whose answer the lease refused: it runs
	// when it comes again, though this owner has seen it.
	refused uint32
	// unseen are the jobs a take or an offer handed the session that it
	// may not have taken: a cancel of its wait or take may be on its
	// way through the member's own loop, which a command run at once
	// (local) would overtake. They go when the session says it took one
	// (Received), when that cancel comes, or when a later request of the
	// session does, which was sent after any such cancel.
	unseen []uint64
	// cancelled is the sequence of the reserve or wait a cancel came for
	// while the store had already picked its job (CancelWait too late):
	// endWait gives that job back rather than answer with it.
	cancelled uint32
	// withdrawn are the offers of waits whose jobs cancels gave back
	// (withdrawLocked), for closeRecall (as long as a decline is sent
	// again): the session's decline of one, which follows when the offer
	// reaches the member, is not to take back what the session may hold
	// again.
	withdrawn recentKeys[withdrawnOffer]
}

// withdrawnOffer is a wait's offer of a job that a cancel gave back.
type withdrawnOffer struct{ wait, job uint64 }

// givenJobs are the last maxGiven jobs reserved for a session, each with
// the sequence of the reserve or wait that got it.
type givenJobs struct {
	jobs  [maxGiven]givenJob
	next  int
	count uint64 // the hand-outs so far: each one's n
}

// maxGiven bounds givenJobs: a session has at most one reserve or wait
// in flight in a group, whose answer may still be on its way when the
// group's leadership is handed over; a few more cover a pipeline.
const maxGiven = 8

type givenJob struct {
	seq  uint32
	id   uint64
	wait uint64 // the wait's id, if a wait got it
	n    uint64 // which hand-out it was
}

func (g *givenJobs) add(seq uint32, id uint64) { g.addWait(seq, id, 0) }

func (g *givenJobs) addWait(seq uint32, id, wait uint64) {
	g.count++
	g.jobs[g.next] = givenJob{seq: seq, id: id, wait: wait, n: g.count}
	g.next = (g.next + 1) % maxGiven
}

// seqOf is the sequence that got job id, or 0.
func (g *givenJobs) seqOf(id uint64) uint32 {
	var last givenJob // the latest: an earlier one may be a take the session cancelled
	for _, j := range g.jobs {
		if j.id == id && j.seq != 0 && j.n > last.n {
			last = j
		}
	}
	return last.seq
}

// givenAfter reports whether job id was given again after hand-out n,
// whatever got it.
func (g *givenJobs) givenAfter(id, n uint64) bool {
	for _, j := range g.jobs {
		if j.id == id && j.n > n {
			return true
		}
	}
	return false
}

// has reports whether a job is kept for sequence seq.
func (g *givenJobs) has(seq uint32) bool { return g.jobOf(seq) != 0 }

// jobOf is the job sequence seq got, or 0.
func (g *givenJobs) jobOf(seq uint32) uint64 {
	for _, j := range g.jobs {
		if j.seq == seq && seq != 0 {
			return j.id
		}
	}
	return 0
}

// take forgets the job seq got, and returns it (0: none).
func (g *givenJobs) take(seq uint32) uint64 {
	j := g.takeWhere(func(j givenJob) bool { return j.seq == seq && seq != 0 })
	return j.id
}

// takeWait forgets the job wait got, and returns it (0: none).
func (g *givenJobs) takeWait(wait uint64) uint64 {
	j := g.takeWhere(func(j givenJob) bool { return j.wait == wait && wait != 0 })
	return j.id
}

// takeWhere forgets the first hand-out match takes, and returns it (id
// 0: none).
func (g *givenJobs) takeWhere(match func(givenJob) bool) givenJob {
	for i, j := range g.jobs {
		if match(j) {
			g.jobs[i] = givenJob{}
			return j
		}
	}
	return givenJob{}
}

// keptAnswers are an owner's last answers, in the order sent, at most
// maxKept: a session has fewer in flight (engine.MaxPipelined).
type keptAnswers struct {
	answers []keptAnswer
	next    int // where the next goes once answers is full
}

// keptAnswer is an answer as sent, a payload of its own.
type keptAnswer struct {
	seq     uint32
	payload []byte
}

const maxKept = 2 * engine.MaxPipelined // burns come beside a session's own

// slot is the buffer for the answer to seq, the oldest one's once full.
func (k *keptAnswers) slot(seq uint32) *keptAnswer {
	var e *keptAnswer
	if n := len(k.answers); n < maxKept {
		if n < cap(k.answers) {
			k.answers = k.answers[:n+1] // its buffer kept by reset, if any
		} else {
			k.answers = append(k.answers, keptAnswer{})
		}
		e = &k.answers[n]
	} else {
		e = &k.answers[k.next]
		k.next = (k.next + 1) % maxKept
	}
	e.seq = seq
	return e
}

// find is the answer kept for seq, nil if none.
func (k *keptAnswers) find(seq uint32) []byte {
	for i := range k.answers {
		if k.answers[i].seq == seq {
			return k.answers[i].payload
		}
	}
	return nil
}

// reset forgets every answer: the session has them all. A small buffer
// is kept for the next.
func (k *keptAnswers) reset() {
	if len(k.answers) == 0 {
		return
	}
	first := k.answers[0].payload[:0]
	if cap(first) > 1<<10 {
		first = nil // a job's body: not kept
	}
	clear(k.answers)
	k.answers[0].payload = first
	k.answers, k.next = k.answers[:0], 0
}

// heldReply is a reply waiting for the log to acknowledge pos.
type heldReply struct {
	item Item
	pos  uint64
	// fenced: the reply reports the store (leaseFenced), and goes only
	// while the leadership is leased.
	fenced bool
}

// Handle executes a payload of items from member from, in order, and
// sends what they answered at once. The payload is the caller's again
// once it returns.
func (s *Server) Handle(from uint64, payload []byte) error {
	defer s.Flush()
	return Each(payload, s.cfg.MaxJobSize, func(it *Item) { s.handle(from, it) })
}

// Flush sends what handle answered, one payload per member. What a
// member's stream refuses goes again from the Server's loop.
func (s *Server) Flush() {
	if s.out.flush() {
		wakeUp(s.wake)
	}
}

// handle executes one item from member from; those not for a leader
// (replies, events) are ignored. What it answers waits for Flush.
func (s *Server) handle(from uint64, it *Item) {
	key := ownerKey{member: from, session: it.Session, group: it.Group}
	switch it.Kind {
	case KindRequest, KindWait:
		s.request(key, it)
	case KindCancel:
		s.cancel(key, it.Wait.ID, it.Seq)
	case KindDecline:
		gave := false
		if o := s.existing(key); o != nil {
			o.mu.Lock()
			o.dropUnseenLocked(it.Decline.Job)
			switch {
			case o.withdrawn.take(withdrawnOffer{it.Decline.Wait, it.Decline.Job}):
				// Its cancel gave it back already; the session may hold
				// it again since.
				o.mu.Unlock()
				return
			case !o.closed: // a closed client gave its jobs back already
				gave = o.client.Unreserve(it.Decline.Job)
			}
			o.mu.Unlock()
		}
		if !gave {
			// Before this member serves, or the job not yet taken:
			// not to be taken from a handover (Adopt).
			s.mu.Lock()
			s.noteClosedLocked(closedKey{key, it.Decline.Job})
			s.mu.Unlock()
		}
	case KindClose:
		s.closeOwner(key, it.Seq)
	case KindSessions:
		s.syncSessions(key, &it.Sessions)
	case KindRefs:
		s.refs(from, it)
	}
}

// Close closes every owner client: their reservations go back. Its loop
// ends: nothing more is sent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
	})
	s.mu.Lock()
	s.closed = true
	owners := s.takeOwnersLocked(func(ownerKey) bool { return true })
	s.mu.Unlock()
	s.closeTaken(owners)
}

// DescribeOwners names the owner clients the server holds, for a test
// that finds one left behind to say whose it is.
func (s *Server) DescribeOwners() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, o := range s.owners {
		out = append(out, fmt.Sprintf("member %x session %d group %d adopted %v made %s", k.member, k.session, k.group, o.adopted, o.made.Format("15:04:05.000")))
	}
	slices.Sort(out)
	return out
}

// Owners counts the owner clients the server holds: its groups' remote
// sessions (this member's own, once it leads, among them).
func (s *Server) Owners() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.owners)
}

// Detach closes every owner client of group g: this member no longer
// serves it (its store is about to be rebuilt, which no client may hold;
// the node's CloseClients), and their sessions' next requests find
// StatusNotLeader.
func (s *Server) Detach(g uint16) {
	s.mu.Lock()
	s.takeOwnersLocked(func(k ownerKey) bool { return k.group == g })
	// Those taken out here and those another goroutine is closing: a
	// close waits for one under way (owner.close).
	var detached []*owner
	for o := range s.closing {
		if o.key.group == g {
			detached = append(detached, o)
		}
	}
	delete(s.flushers, g) // its journal may never call back
	for k := range s.forgotten {
		if k.group == g {
			delete(s.forgotten, k) // the next store has its own references
		}
	}
	s.mu.Unlock()
	s.refused.forgetGroup(g)
	s.closeTaken(detached)
}

// Forget ends what members, removed from the cluster, left in the given
// groups this member serves: their sessions' owner clients close (their
// reservations go back) and their references go. A removed member never
// comes back under its id, so nothing of it is missed. Each member's
// references are dropped once per store.
func (s *Server) Forget(members []uint64, groups ...uint16) {
	if len(members) == 0 {
		return
	}
	s.mu.Lock()
	closing := s.takeOwnersLocked(func(k ownerKey) bool { return slices.Contains(members, k.member) })
	if s.forgotten == nil {
		s.forgotten = make(map[forgottenRefs]*store.Store)
	}
	type drop struct {
		member uint64
		st     *store.Store
	}
	var drops []drop
	for _, g := range groups {
		st := s.cfg.Group(g)
		if st == nil {
			continue
		}
		for _, m := range members {
			if k := (forgottenRefs{m, g}); s.forgotten[k] != st {
				s.forgotten[k] = st
				drops = append(drops, drop{m, st})
			}
		}
	}
	s.mu.Unlock()
	s.closeTaken(closing)
	for _, d := range drops {
		d.st.DropRefs(d.member)
	}
}

// forgottenRefs names a removed member's references in a group.
type forgottenRefs struct {
	member uint64
	group  uint16
}

// request runs a request on its owner's client, made on first use; one
// for a group this member does not serve is answered StatusNotLeader.
func (s *Server) request(key ownerKey, it *Item) {
	// An OpHeld takes no part in the session's order: its refusal holds
	// nothing back.
	ordered := it.Kind != KindRequest || it.Request.Op != OpHeld
	o := s.owner(key)
	if o == nil {
		if ordered {
			s.refused.note(key, it.Seq)
		}
		s.send(key.member, reply(key, it.Seq, Reply{Status: StatusNotLeader}))
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || s.isGated(key.group) {
		// Closed since it was found (Detach, Forget, the session's
		// close, Close): its client is gone. Or the group's leadership
		// is being handed over (Gate). The member asks again, of the
		// group's leader then.
		if !o.closed && ordered {
			s.refused.note(key, it.Seq)
		}
		s.send(key.member, reply(key, it.Seq, Reply{Status: StatusNotLeader}))
		return
	}
	if it.Kind == KindRequest && it.Request.Op == OpHeld {
		o.answerHeldLocked(it)
		return
	}
	if s.refused.holds(key, it) {
		// In flight behind one refused, which the member sends again
		// first: run now, it would run before that one. Refused too,
		// it goes again after it.
		s.send(key.member, reply(key, it.Seq, Reply{Status: StatusNotLeader}))
		return
	}
	var kept []byte
	newer := seqAfter(it.Seq, o.seen)
	if !newer {
		kept = o.kept.find(it.Seq)
	}
	switch {
	case newer:
		o.seen = it.Seq
		// Sent after any cancel of what the session was handed unseen.
		o.unseen = o.unseen[:0]
	case it.Seq == o.refused:
		o.refused = 0 // asked again: answered now, if leased
	case kept != nil:
		// Sent again (the member's stream to here was broken and opened
		// again): never run twice. Its answer goes again, in case it was
		// lost.
		o.srv.out.add(o.key.member, kept)
		return
	case o.takenLocked(it.Seq):
		// Sent again while it waits to run (backlog) or its answer waits
		// for the log (replies): that answer goes when it may. Run again,
		// a change that changed nothing (NOT_FOUND), which keeps no
		// request key, would change something now.
		return
	case o.handed.has(it.Seq):
		// A hand-out the lease refused before a later one took
		// o.refused (a take of a reserve across groups whose timer
		// ended, then the next reserve's), or one a handover gave:
		// answered with the job kept for it, which it would otherwise
		// hold unseen until its TTR, its call pending for ever.
	case !seqAfter(it.Seq, o.barrier) && it.Kind == KindRequest && reads(it.Request.Op):
		// A read sent again after a later request: refused for the
		// lease, it was not answered (a reserve across groups' peek
		// whose reserve ended meanwhile, the next one's refused too). It
		// changes nothing, so it runs again; dropped, its call stayed
		// pending at the member for ever.
	case !seqAfter(it.Seq, o.barrier):
		// Sent again, its answer read: the member sent the request
		// after it only once it had every answer before. But a burn,
		// whose answer nothing waits for, is answered; and so is a
		// reserve before the last request that does not pipeline (a
		// take of a reserve across groups that its timer ended, its
		// answer lost), which nothing waits for either.
		switch {
		case it.Kind == KindRequest && it.Request.Op == OpBurn:
			o.srv.send(o.key.member, reply(o.key, it.Seq, Reply{Status: StatusOK, Result: ResultNone}))
		case it.Kind == KindRequest && reserves(it.Request.Op) && seqAfter(o.barrier, it.Seq) && it.Seq != o.waiting:
			o.answerGivenAgainLocked(it.Seq)
		}
		return
	default:
		// A pipelined request that comes after one sent later (it was
		// refused while this member was not serving, and the later one
		// came after refusalRecall): run now. Had it run, its answer
		// would be kept, and a change runs once by its key whatever
		// comes (5.6).
	}
	if newer && (it.Kind != KindRequest || !Pipelined(it.Request.Op)) {
		// The session had every answer before this. One asked again
		// (refused, or handed) set it when it came first: the barrier
		// only rises, or a later request, resent, would run again.
		o.kept.reset()
		o.barrier = it.Seq
	}
	o.st.RaiseStamp(it.Request.Stamp) // a tube it makes is stamped above what its member saw
	if o.waiting != 0 {
		o.backlog = append(o.backlog, copyItem(it))
		return
	}
	o.runLocked(it)
}

// takenLocked reports whether the request or wait of sequence seq is
// taken and not answered yet: queued behind a reserve (backlog), or its
// answer held for the log (replies).
func (o *owner) takenLocked(seq uint32) bool {
	for i := range o.replies {
		if o.replies[i].item.Seq == seq {
			return true
		}
	}
	for i := range o.backlog {
		if o.backlog[i].Seq == seq {
			return true
		}
	}
	return false
}

// seqAfter reports whether sequence a comes after b, b 0 meaning none
// yet: in serial-number order (RFC 1982), as a session's uint32
// sequences wrap after 2^32 commands (skipping 0) on a long-lived
// connection, and within 2^31 of each other, which a session's requests
// in flight always are.
func seqAfter(a, b uint32) bool { return b == 0 || int32(a-b) > 0 }

// answerHeldLocked answers an OpHeld request (docs/design/shards.md 6.4)
// at once, whatever the owner waits for or ran: it changes nothing, so
// it takes no part in the session's order (seen, kept, barrier), and one
// sent again is answered again. A reserve waiting here must not hold it
// back: the question is what lets the session's wait elsewhere forget a
// DEADLINE_SOON it no longer owes.
func (o *owner) answerHeldLocked(it *Item) {
	r := Reply{Status: StatusOK, Result: ResultNone}
	if !o.client.Holds(it.Request.ID) {
		// With where the group's tubes moved, if any: the job may have
		// moved with its tube, reservation and all (Session.askHeldIn).
		r = o.notFound(Reply{Status: StatusNotFound, Result: ResultNone})
	}
	if leased := o.srv.cfg.Leased; leased != nil && !leased(o.key.group) {
		// A read of the store, fenced as the others are (leaseFenced),
		// but refused without o.refused: it has no place in the order.
		r = Reply{Status: StatusNotLeader}
	}
	o.srv.send(o.key.member, reply(o.key, it.Seq, r))
}

// local runs req at once for a session of this member (the local fast
// path: docs/design/shards.md 5.1), on the owner client its remote
// requests use in this group, so both ways see one client: its
// reservations, its watch list. It is not run (ran false) when this
// member does not serve the group, when the owner is busy with what the
// session sent the other way (a reserve waiting, requests behind it,
// replies held for the log, the cancel of a job handed out unseen: ours
// would overtake them), when a reserve
// would wait (tried with no timeout: the session then sends it the
// other way, which takes it again with its own), and when it would hand
// out a job (the job goes back) or answer a leaseFenced request while the
// leadership is not leased.
// Otherwise the reply is answered now, the caller holding it until acks
// has acknowledged pos (engine.Queue AckNeeded). stamp is the member's latest tube creation stamp, raised
// as a reply's raises it.
func (s *Server) local(key ownerKey, req Request, stamp *atomic.Uint64) (r Reply, acks store.AckSource, pos uint64, ran bool) {
	o := s.owner(key)
	if o == nil {
		return Reply{}, nil, 0, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.waiting != 0 || len(o.backlog) > 0 || len(o.replies) > 0 || len(o.unseen) > 0 ||
		s.isGated(key.group) || o.requestMovingLocked(&req) || s.refused.pending(key) {
		// What a tube's move forbids goes the other way, which refuses
		// it (movingLocked); so does a request behind one refused, which
		// the session sends again first, and one that may have come
		// after a cancel still on its way through the member's own loop
		// (unseen).
		return Reply{}, nil, 0, false
	}
	if req.Op == OpReserveJob || s.cfg.Leased != nil && leaseFenced(req.Op) && !s.cfg.Leased(key.group) {
		// Not run here to be undone: a job reserve-job took, buried or
		// delayed, would go back ready (Unreserve), on the leader alone,
		// were the lease found lapsed once the store answered. Sent the
		// other way, a refused one stays the owner's (refuseLocked).
		return Reply{}, nil, 0, false
	}
	timeout := req.Timeout
	if req.Op == OpReserve {
		req.Timeout = 0
	}
	o.st.RaiseStamp(stamp.Load())
	r, _ = o.execute(&req) // never blocked: no reserve waits
	o.client.Settle()
	atomicmax.Uint64(stamp, o.st.LatestStamp())
	switch {
	case r.Result == ResultMoved:
		// Not found here, and tubes moved away: the session sends it the
		// other way, which asks where they went (Session.sendSearching).
		return Reply{}, nil, 0, false
	case req.Op == OpReserve && r.Status == StatusTimedOut && timeout != 0:
		return Reply{}, nil, 0, false
	case s.cfg.Leased != nil && leaseFenced(req.Op) && !s.cfg.Leased(key.group):
		// The session sends it the other way, which runs it again (and
		// refuses it while the lease is not confirmed): the job it got
		// here goes back, or the owner would hold it unseen.
		if reserves(req.Op) && r.Status == StatusOK && r.Result == ResultJob {
			o.client.Unreserve(r.Job.ID)
		}
		return Reply{}, nil, 0, false
	}
	if reserves(req.Op) && r.Status == StatusOK && r.Result == ResultJob {
		o.gave.add(0, r.Job.ID) // no sequence: for a cancel's look (givenAfter) alone
	}
	return r, o.st.Acks(), o.client.PendingAck(), true
}

// owner is key's owner client, made if need be on the group's store; nil
// if this member does not serve the group, or it no longer serves it on
// the store the owner was made on (the client is closed: its group
// rebuilt the store).
func (s *Server) owner(key ownerKey) *owner {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Asked under mu: once Group says nil, Detach finds every owner made
	// before, and none is made after.
	st := s.cfg.Group(key.group)
	o := s.owners[key]
	if o != nil && o.st != st && (st != nil || !o.adopted) {
		// Made on a store the group no longer serves from. One Adopt
		// made as this member begins to serve, before Group says so,
		// stays.
		go s.closeTaken(s.takeOwnerLocked(key, o))
		o = nil
	}
	if st == nil || s.closed {
		return nil
	}
	if o == nil && key.session != 0 && s.closedLocked(closedKey{ownerKey: key}, time.Now()) {
		// An item of a session that closed, come after its close: a
		// wait of its reserve across groups sent to this member's own
		// loop before a close made at once (Session.closeIn), a request
		// sent again where its tube moved. Its session is gone: an
		// owner made now would never close.
		return nil
	}
	if o == nil {
		o = s.newOwnerLocked(key, st, false)
	}
	return o
}

// newOwnerLocked makes key's owner client on store st, adopted if made
// for a handover (Adopt). s.mu must be held.
func (s *Server) newOwnerLocked(key ownerKey, st *store.Store, adopted bool) *owner {
	o := &owner{srv: s, key: key, st: st, flusher: s.flusherLocked(key.group, st), adopted: adopted, made: time.Now()}
	o.client = st.NewOwnerClient(o)
	s.owners[key] = o
	return o
}

// flusherLocked is group g's ackFlusher for store st's acknowledgements,
// made anew once the group's store is another; nil if st has none.
func (s *Server) flusherLocked(g uint16, st *store.Store) *ackFlusher {
	acks := st.Acks()
	if acks == nil {
		return nil
	}
	f := s.flushers[g]
	if f == nil || f.acks != acks {
		f = newAckFlusher(acks, s.wake)
		s.flushers[g] = f
	}
	return f
}

// existing is key's owner client, nil if there is none.
func (s *Server) existing(key ownerKey) *owner {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owners[key]
}

// cancel ends key's wait id, unless its offer is on its way: the offer
// then comes, and the member declines it.
func (s *Server) cancel(key ownerKey, id uint64, seq uint32) {
	s.refused.cancelled(key, seq) // refused, it will not come again
	o := s.existing(key)
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	// seq 0: a member before the cancel named its wait's sequence.
	if o.waitID == id && o.waiting != 0 && (seq == 0 || o.waiting == seq) {
		if !o.client.CancelWait() {
			o.cancelled = o.waiting // its job is on its way to endWait
			return
		}
		o.waiting, o.waitID, o.soonFirst = 0, 0, false
		o.client.Settle()
		o.runBacklogLocked()
	}
	o.dropBackloggedLocked(id, seq)
	job := o.handed.takeWait(id)
	if job == 0 {
		// A reserve's or a take's; or a wait's adopted with a handover,
		// which keeps its sequence alone.
		job = o.handed.take(seq)
	}
	if job != 0 {
		// Its offer was refused (refuseLocked), or handed over, the job
		// kept for it to come again: it will not.
		o.dropUnseenLocked(job)
		o.client.Unreserve(job)
		return
	}
	given := o.gave.takeWhere(func(j givenJob) bool {
		if id != 0 {
			return j.wait == id
		}
		return j.seq == seq && seq != 0
	})
	if given.id != 0 && !o.gave.givenAfter(given.id, given.n) {
		// Unless the session got the job again since (its decline, or
		// its TTR, gave it back first, and a later reserve took it): a
		// cancel not taken at once goes again after later requests.
		o.withdrawLocked(id, given.id)
	}
}

// withdrawLocked gives back job, which a take or an offer of wait (0: a
// reserve or a take) handed the session, whose cancel came: the session
// never takes it (an offer is declined when it comes; a reserve's or a
// take's answer is dropped, its call gone). Given back now, not at that
// decline, so that a command of the session that came after the cancel
// finds it not held, as on one server (docs/design/shards.md 6.5); the
// offer's decline is then not to take it back (withdrawn).
func (o *owner) withdrawLocked(wait, job uint64) {
	o.dropUnseenLocked(job)
	if o.client.Unreserve(job) && wait != 0 {
		o.withdrawn.add(withdrawnOffer{wait, job})
	}
}

// dropBackloggedLocked forgets the wait id (0: the request of sequence
// seq) queued behind a reserve: cancelled, it is not to run.
func (o *owner) dropBackloggedLocked(id uint64, seq uint32) {
	o.backlog = slices.DeleteFunc(o.backlog, func(it Item) bool {
		if id != 0 {
			return it.Kind == KindWait && it.Wait.ID == id
		}
		return it.Kind == KindRequest && it.Seq == seq && seq != 0
	})
}

// handOutLocked notes job, which the request or wait of sequence seq
// (wait: its id; 0 for a request) hands the session. One a take or a
// wait hands out is unseen until the session says it took it: a reserve
// across groups that ends otherwise cancels it.
func (o *owner) handOutLocked(seq uint32, job, wait uint64, unseen bool) {
	o.gave.addWait(seq, job, wait)
	if unseen {
		o.unseen = append(o.unseen, job)
	}
}

// dropUnseenLocked forgets job among the unseen.
func (o *owner) dropUnseenLocked(job uint64) {
	o.unseen = slices.DeleteFunc(o.unseen, func(id uint64) bool { return id == job })
}

// Received tells the group's owner client of session key that the
// session took job, which a take or an offer handed it: commands of the
// session may run at once again (local).
func (s *Server) Received(key ownerKey, job uint64) {
	if o := s.existing(key); o != nil {
		o.mu.Lock()
		o.dropUnseenLocked(job)
		o.mu.Unlock()
	}
}

// closeOwner ends key's session in its group: its client closes. Session
// 0 names every session of the member but those of tag's process (0:
// none): a member's router sends it, its greeting, before anything else
// when it starts (Router.greet), so the owner clients its last process
// left here (their reservations, blocked reserves, last sequences) go,
// and one made for a session of the new process before the greeting came
// stays.
func (s *Server) closeOwner(key ownerKey, tag uint32) {
	s.mu.Lock()
	closing := s.takeOwnersLocked(func(k ownerKey) bool {
		return k == key || key.session == 0 && k.member == key.member && k.group == key.group && (tag == 0 || sessionTag(k.session) != tag)
	})
	s.noteClosedLocked(closedKey{ownerKey: key})
	s.mu.Unlock()
	s.closeTaken(closing)
}

// syncSessions closes the owner clients in key's group of key's member
// whose sessions ss does not list, at or below its Upto: those sessions
// ended, and their closes were lost (a stream down longer than
// closeRecall: docs/design/shards.md, question 12).
func (s *Server) syncSessions(key ownerKey, ss *Sessions) {
	s.mu.Lock()
	closing := s.takeOwnersLocked(func(k ownerKey) bool {
		if k.member != key.member || k.group != key.group || k.session == 0 || k.session > ss.Upto {
			return false
		}
		_, open := slices.BinarySearch(ss.IDs, k.session)
		return !open
	})
	for _, o := range closing {
		s.noteClosedLocked(closedKey{ownerKey: o.key})
	}
	s.mu.Unlock()
	s.closeTaken(closing)
}

// takeOwnersLocked takes the owner clients whose keys match out of the
// server and returns them, for the caller to close once s.mu is
// released (closeTaken); Detach finds them until then. s.mu must be
// held.
func (s *Server) takeOwnersLocked(match func(ownerKey) bool) []*owner {
	var taken []*owner
	for k, o := range s.owners {
		if match(k) {
			taken = append(taken, s.takeOwnerLocked(k, o)...)
		}
	}
	return taken
}

// takeOwnerLocked takes o, key's owner client, out of the server as
// takeOwnersLocked does, if it is still key's. s.mu must be held.
func (s *Server) takeOwnerLocked(key ownerKey, o *owner) []*owner {
	if s.owners[key] != o {
		return nil
	}
	delete(s.owners, key)
	if s.closing == nil {
		s.closing = make(map[*owner]struct{})
	}
	s.closing[o] = struct{}{}
	return []*owner{o}
}

// closeTaken closes the owner clients takeOwnersLocked took. s.mu must
// not be held: a close takes the owner's lock, which is taken before
// s.mu elsewhere.
func (s *Server) closeTaken(owners []*owner) {
	for _, o := range owners {
		o.close()
	}
	if len(owners) == 0 {
		return
	}
	s.mu.Lock()
	for _, o := range owners {
		delete(s.closing, o)
	}
	s.mu.Unlock()
}

// refs sets member from's references to the group's tubes (5.4).
func (s *Server) refs(from uint64, it *Item) {
	key := ownerKey{member: from, session: it.Session, group: it.Group}
	st := s.cfg.Group(it.Group)
	if st == nil {
		s.send(from, reply(key, it.Seq, Reply{Status: StatusNotLeader}))
		return
	}
	st.RaiseStamp(it.Refs.Stamp)
	for _, c := range it.Refs.Counts {
		st.SetRefs(from, c.Tube, c.Using, c.Watching)
	}
	if it.Refs.Sync {
		// The tubes not listed drop to zero; those listed were set first,
		// so none that the member still references is freed and made
		// again (its pause, counts and place in list-tubes kept).
		listed := make(map[string]struct{}, len(it.Refs.Counts))
		for _, c := range it.Refs.Counts {
			listed[string(c.Tube)] = struct{}{}
		}
		st.DropRefsExcept(from, func(tube string) bool { _, ok := listed[tube]; return ok })
	}
	s.send(from, reply(key, it.Seq, Reply{Status: StatusOK, Result: ResultNone, Stamp: st.LatestStamp()}))
}

// send queues one item for member to, for Flush.
func (s *Server) send(to uint64, it Item) { s.out.addItem(to, &it) }

// reply is the reply item to key's request seq.
func reply(key ownerKey, seq uint32, r Reply) Item {
	return Item{Kind: KindReply, Group: key.group, Session: key.session, Seq: seq, Reply: r}
}

// runLocked executes one request or wait; a reserve or a wait that
// blocks leaves o waiting.
func (o *owner) runLocked(it *Item) {
	if o.answerHandedLocked(it) {
		return
	}
	if o.stagedLocked(it) {
		o.holdLocked(reply(o.key, it.Seq, o.notFound(Reply{Status: StatusNotFound, Result: ResultNone})), o.client.PendingAck())
		return
	}
	if o.movingLocked(it) {
		o.holdLocked(wrongGroup(o.key, it), o.client.PendingAck())
		return
	}
	if it.Kind == KindWait {
		o.watchOnly(it.Wait.Tubes)
		j, res := o.client.Reserve(-1)
		if res == store.Waiting {
			o.waiting, o.waitID = it.Seq, it.Wait.ID
			return
		}
		if j != nil {
			o.handOutLocked(it.Seq, j.ID(), it.Wait.ID, true)
		}
		o.holdLocked(event(o.key, it.Seq, it.Wait.ID, j, res), o.client.PendingAck())
		o.client.Settle()
		return
	}
	r, blocked := o.execute(&it.Request)
	if blocked {
		o.waiting = it.Seq
		return
	}
	if reserves(it.Request.Op) && r.Status == StatusOK && r.Result == ResultJob {
		o.handOutLocked(it.Seq, r.Job.ID, 0, it.Request.Op == OpTake)
	}
	r.Stamp = o.st.LatestStamp()
	o.holdReplyLocked(heldReply{item: reply(o.key, it.Seq, r), pos: o.client.PendingAck(), fenced: leaseFenced(it.Request.Op)})
	// The tubes the request used and watched stay while the session's
	// references say so, not longer: beanstalkd frees a tube no client
	// uses or watches (a pause-tube of it is then NOT_FOUND).
	o.client.Settle()
}

// seqOf is the sequence of the session's reserve or wait that got job
// id here, if it is one of its last, or that a handover or a refusal
// kept it for; else 0.
func (o *owner) seqOf(id uint64) uint32 {
	if seq := o.gave.seqOf(id); seq != 0 {
		return seq
	}
	return o.handed.seqOf(id)
}

// reserveEnd is how long a reserve of timeout (negative: none) waits,
// and whether its end is DEADLINE_SOON (soonFirst), when its session
// holds a job in another group (soon) that comes within a second of its
// TTR's end in soonIn: then, if that is first.
func reserveEnd(timeout, soonIn time.Duration, soon bool) (end time.Duration, soonFirst bool) {
	if soon && (timeout < 0 || soonIn <= timeout) {
		return max(soonIn, 0), true
	}
	return timeout, false
}

// reserves reports whether op reserves the job it answers with.
func reserves(op Op) bool { return op == OpReserve || op == OpTake || op == OpReserveJob }

// leaseFenced reports whether a reply to op is sent only while this
// member's leadership of the group is leased (ServerConfig.Leased),
// whatever it answers: op changes nothing, and its answer reports the
// store, which a leader cut off from its group's majority may serve
// after another was elected and changed it (a peek of a job the new
// leader deleted, a reserve's TIMED_OUT while the new leader has a job
// ready). Refused, it goes again to the group's next leader, or to this
// one once the lease is confirmed, and runs again there. So is a
// reserve's or a wait's end after a wait (endWait): sent again, it
// carries what is left of its timeout (call.sendPayload).
func leaseFenced(op Op) bool { return reads(op) || reserves(op) }

// reads reports whether op only reads the store: run again, it changes
// nothing.
func reads(op Op) bool {
	switch op {
	case OpPeek, OpPeekReady, OpPeekDelayed, OpPeekBuried, OpStatsJob, OpStatsTube, OpStats, OpListTubes, OpBest:
		return true
	}
	return false
}

// answerHandedLocked answers a reserve or a wait that got a job on the
// group's last leader, sent here again as its answer had not come when
// the session's member learned of this leader: with that job, which a
// handover gave this owner (Adopt), as the last leader answered, if it
// holds it still. It reports whether it did.
func (o *owner) answerHandedLocked(it *Item) bool {
	id := o.handed.take(it.Seq)
	if id == 0 {
		return false
	}
	j := o.client.Holding(id)
	if j == nil {
		return false
	}
	o.handOutLocked(it.Seq, id, it.Wait.ID, it.Kind == KindWait || it.Request.Op == OpTake)
	if it.Kind == KindWait {
		o.holdLocked(event(o.key, it.Seq, it.Wait.ID, j, store.Reserved), o.client.PendingAck())
		return true
	}
	r := jobResult(j)
	r.Stamp = o.st.LatestStamp()
	o.holdLocked(reply(o.key, it.Seq, r), o.client.PendingAck())
	return true
}

// movingLocked reports whether it touches a tube of the group that is
// moving out or moved out (ServerConfig.Frozen): a request naming one, a
// reserve, a cross-group reserve's peek or take, or a wait watching one,
// or a command by id of a job of one not yet moved out (its reservation
// moves with it, and its holder's delete, release, bury or touch then
// goes where it went; a read here could be of a copy the tube's new
// group has changed since). The group drops a tube's jobs before it marks
// it moved out, so none is left here once the by-id check stops.
func (o *owner) movingLocked(it *Item) bool {
	if it.Kind == KindWait {
		frozen, _ := o.srv.frozen(o.key.group)
		return frozen != nil && slices.ContainsFunc(it.Wait.Tubes, frozen)
	}
	return o.requestMovingLocked(&it.Request)
}

// requestMovingLocked is movingLocked of a request.
func (o *owner) requestMovingLocked(req *Request) bool {
	frozen, moving := o.srv.frozen(o.key.group)
	if frozen == nil {
		return false
	}
	if req.Number != 0 && o.st.Answered(wal.Req{Incarnation: o.key.member, Number: req.Number}) {
		return false // ran here before the freeze: answered from its outcome
	}
	switch req.Op {
	case OpPut, OpKick, OpPeekReady, OpPeekDelayed, OpPeekBuried, OpStatsTube, OpPauseTube:
		return frozen(req.Tube)
	case OpReserve, OpBest, OpTake:
		return slices.ContainsFunc(req.Tubes, frozen)
	}
	if !byID(req.Op) {
		return false
	}
	if !moving {
		return false // a tube moved out left no job here
	}
	tube, _, ok := o.client.JobIn(req.ID)
	return ok && frozen([]byte(tube))
}

// stagedLocked reports whether it is a command by id of a job here that
// is a staged copy (ServerConfig.Staged).
func (o *owner) stagedLocked(it *Item) bool {
	if it.Kind != KindRequest || !byID(it.Request.Op) {
		return false
	}
	staged := o.staged()
	if staged == nil {
		return false
	}
	tube, _, ok := o.client.JobIn(it.Request.ID)
	return ok && staged([]byte(tube))
}

// staged is ServerConfig.Staged for o's group: nil while it holds no
// staged copies.
func (o *owner) staged() func(tube []byte) bool {
	if o.srv.cfg.Staged == nil {
		return nil
	}
	return o.srv.cfg.Staged(o.key.group)
}

// uncounted is ServerConfig.Uncounted for o's group, or Staged's
// without it: nil while the group holds no tube another counts.
func (o *owner) uncounted() func(tube []byte) bool {
	if o.srv.cfg.Uncounted == nil {
		return o.staged()
	}
	return o.srv.cfg.Uncounted(o.key.group)
}

// CountedStats are st's figures as its group's part of stats counts them
// (SumStats): without the tubes uncounted says another group counts (a
// move's copies, or its source's once placed elsewhere). Nil uncounted
// leaves none out.
func CountedStats(st *store.Store, uncounted func(tube []byte) bool) store.Stats {
	figures := st.Stats()
	if uncounted == nil {
		return figures
	}
	for _, t := range st.StampedTubes() {
		if !uncounted([]byte(t.Name)) {
			continue
		}
		if ts, ok := st.TubeStats([]byte(t.Name)); ok {
			figures = withoutTube(figures, ts)
		}
	}
	return figures
}

// withoutTube is st without ts, a tube whose jobs another group counts:
// its jobs by state, and itself, but for the default tube, which every
// group holds (SumStats counts it once). Its imports counted in no
// total-jobs here (wal.ImportKey).
func withoutTube(st store.Stats, ts store.TubeStats) store.Stats {
	// ts is read after st, while an import may add jobs and tubes: a
	// figure may come out below 0 for an instant, which is 0 here.
	less := func(n *int64, by int) { *n = max(*n-int64(by), 0) }
	less(&st.Urgent, ts.Urgent)
	less(&st.Ready, ts.Ready)
	less(&st.Reserved, ts.Reserved)
	less(&st.Delayed, ts.Delayed)
	less(&st.Buried, ts.Buried)
	if ts.Name != "default" {
		st.Tubes = max(st.Tubes-1, 0)
	}
	return st
}

// Holder is a reserved job and the session holding it, of a tube moving
// between groups (docs/design/shards.md 3.3) or of a group whose
// leadership is handed over: the owner client of that session there, or
// on the next leader, takes the reservation.
type Holder struct {
	Member  uint64 `json:"member"`
	Session uint64 `json:"session"`
	ID      uint64 `json:"id"`
	// Deadline is the end of its TTR, wall clock (Unix nanoseconds), and
	// Reserves and Timeouts its counts, of a handover; a tube's move has
	// them in the job's record.
	Deadline int64  `json:"deadline,omitempty"`
	Reserves uint32 `json:"reserves,omitempty"`
	Timeouts uint32 `json:"timeouts,omitempty"`
	// Seq is the sequence of the session's reserve or wait that got the
	// job, of a handover, if it was one of the session's last: the next
	// leader answers it with the job if it comes again.
	Seq uint32 `json:"seq,omitempty"`
}

// Holders names the sessions holding held, reserved jobs of a tube of
// group g (store.Store.ExportTube's): by their owner clients here. A job
// held by no owner client (a client of this process's own) is left out:
// it moves ready.
func (s *Server) Holders(g uint16, held []store.Held) []Holder {
	byClient := make(map[*store.Client]ownerKey)
	for _, o := range s.ownersOf(g) {
		byClient[o.client] = o.key
	}
	var out []Holder
	for _, h := range held {
		if key, ok := byClient[h.Holder]; ok {
			out = append(out, Holder{Member: key.member, Session: key.session, ID: h.ID})
		}
	}
	return out
}

// HolderClients are the owner clients in group g, which this member
// serves, of the sessions holding jobs of a tube moving in, by job
// (made if need be): store.Client.ImportTube gives each its job.
func (s *Server) HolderClients(g uint16, holders []Holder) map[uint64]*store.Client {
	out := make(map[uint64]*store.Client, len(holders))
	for _, h := range holders {
		if o := s.owner(ownerKey{member: h.Member, session: h.Session, group: g}); o != nil {
			out[h.ID] = o.client
		}
	}
	return out
}

// A group's leadership handed over on purpose (internal/member's
// handOver, store/handover.go): Gate stops its requests here, Held lists
// the reservations its sessions' owner clients hold, for the next leader
// to Adopt as it begins to serve.

// Gate has group g's requests answered StatusNotLeader from now on (their
// members ask again, of the group's next leader, or here after Ungate),
// and the local fast path refuse them; it returns once those that
// passed before are done.
func (s *Server) Gate(g uint16) {
	s.setGated(g, true)
	for _, o := range s.ownersOf(g) {
		o.mu.Lock() // waits out what runs on its client
		o.mu.Unlock()
	}
}

// Ungate undoes Gate.
func (s *Server) Ungate(g uint16) { s.setGated(g, false) }

func (s *Server) setGated(g uint16, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[uint16]bool{}
	if cur := s.gated.Load(); cur != nil {
		maps.Copy(next, *cur)
	}
	if on {
		next[g] = true
	} else {
		delete(next, g)
	}
	s.gated.Store(&next)
}

// isGated reports whether Gate holds group g.
func (s *Server) isGated(g uint16) bool {
	cur := s.gated.Load()
	return cur != nil && (*cur)[g]
}

// ownersOf lists group g's owner clients.
func (s *Server) ownersOf(g uint16) []*owner {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*owner
	for key, o := range s.owners {
		if key.group == g {
			out = append(out, o)
		}
	}
	return out
}

// Held lists the jobs group g's sessions hold here through their owner
// clients, each session's oldest reservation first, with the ends of
// their TTRs. A job held by a client of this process's own is left out.
func (s *Server) Held(g uint16) []Holder {
	var out []Holder
	for _, o := range s.ownersOf(g) {
		o.mu.Lock()
		for _, r := range o.client.Reservations() {
			out = append(out, Holder{Member: o.key.member, Session: o.key.session, ID: r.ID,
				Deadline: r.Deadline, Reserves: r.Reserves, Timeouts: r.Timeouts, Seq: o.seqOf(r.ID)})
		}
		o.mu.Unlock()
	}
	return out
}

// Adopt gives the jobs held, handed over with group g's leadership, to
// their sessions' owner clients on st, the group's store this member
// begins to serve from: each holds its job until its deadline, if the
// job is still ready here, its session's close has not come here
// (closeRecall), and, if its member's first contact since it started
// came here, it was reserved after that. It returns how many it gave.
func (s *Server) Adopt(g uint16, st *store.Store, held []Holder) int {
	owners := make([]*owner, len(held))
	made := map[*owner]bool{} // owners made here: whether each took a job
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0
	}
	now := time.Now()
	notBefore := make([]int64, len(held))
	for i, h := range held {
		key := ownerKey{member: h.Member, session: h.Session, group: g}
		if s.closedLocked(closedKey{ownerKey: key}, now) || s.closedLocked(closedKey{key, h.ID}, now) {
			continue
		}
		// The member's first contact since it started closed its last
		// process's sessions (Router.greet): what they held was reserved
		// before it, what its sessions since hold after.
		if at, ok := s.closedAt[closedKey{ownerKey: ownerKey{member: h.Member, group: g}}]; ok && now.Sub(at) <= closeRecall {
			notBefore[i] = at.UnixNano()
		}
		o := s.owners[key]
		if o == nil || o.st != st {
			if o != nil {
				go s.closeTaken(s.takeOwnerLocked(key, o))
			}
			o = s.newOwnerLocked(key, st, true)
			made[o] = false
		}
		owners[i] = o
	}
	s.mu.Unlock()
	n := 0
	for i, o := range owners {
		if o == nil {
			continue
		}
		o.mu.Lock()
		h := held[i]
		if !o.closed && o.client.Adopt(store.Reservation{ID: h.ID, Deadline: h.Deadline, Reserves: h.Reserves, Timeouts: h.Timeouts, NotBefore: notBefore[i]}) {
			n++
			if _, ok := made[o]; ok {
				made[o] = true
			}
			if h.Seq != 0 {
				o.handed.add(h.Seq, h.ID)
			}
		}
		o.mu.Unlock()
	}
	// An owner made for jobs it did not take (a session of a member's last
	// process, whose close will never come) goes: no command came yet.
	for o, took := range made {
		if took {
			continue
		}
		s.mu.Lock()
		taken := s.takeOwnerLocked(o.key, o)
		s.mu.Unlock()
		s.closeTaken(taken)
		o.close() // taken by another (Detach) first: closed, or its close under way
	}
	return n
}

// noteClosedLocked remembers key's close for closeRecall, forgetting
// those older, and the oldest past maxClosedAt. s.mu must be held.
func (s *Server) noteClosedLocked(key closedKey) {
	now := time.Now()
	if s.closedAt == nil {
		s.closedAt = make(map[closedKey]time.Time)
	}
	for ; s.closedHead < len(s.closedOrder); s.closedHead++ {
		n := s.closedOrder[s.closedHead]
		if now.Sub(n.at) <= closeRecall && len(s.closedOrder)-s.closedHead < maxClosedAt {
			break
		}
		if s.closedAt[n.key].Equal(n.at) { // not noted again since
			delete(s.closedAt, n.key)
		}
	}
	if s.closedHead > len(s.closedOrder)/2 { // shifted once per half: O(1) a note
		s.closedOrder = append(s.closedOrder[:0], s.closedOrder[s.closedHead:]...)
		s.closedHead = 0
	}
	s.closedAt[key] = now
	s.closedOrder = append(s.closedOrder, closedNote{key, now})
}

// maxClosedAt is how many closes Server.closedAt holds at most: a
// client's connection per command, at thousands a second, each closing
// in a group or several, is what it takes to reach it in closeRecall.
const maxClosedAt = 1 << 16

// closedLocked reports whether key's close came within closeRecall of
// now. s.mu must be held.
func (s *Server) closedLocked(key closedKey, now time.Time) bool {
	at, ok := s.closedAt[key]
	return ok && now.Sub(at) <= closeRecall
}

// notFound is r, a command by id's NOT_FOUND, naming where the group's
// tubes went (ServerConfig.MovedTo), if they did.
func (o *owner) notFound(r Reply) Reply {
	if o.srv.cfg.MovedTo == nil {
		return r
	}
	if to := o.srv.cfg.MovedTo(o.key.group); len(to) > 0 {
		r.Result, r.Moved = ResultMoved, to
	}
	return r
}

// frozen is ServerConfig.Frozen for group g, nil when it says none.
func (s *Server) frozen(g uint16) (func(tube []byte) bool, bool) {
	if s.cfg.Frozen == nil {
		return nil, false
	}
	return s.cfg.Frozen(g)
}

// wrongGroup is the answer to it in a group that does not serve its tube
// now: a request's StatusWrongGroup, a wait's EventWrongGroup.
func wrongGroup(key ownerKey, it *Item) Item {
	if it.Kind == KindWait {
		return Item{Kind: KindEvent, Group: key.group, Session: key.session, Seq: it.Seq,
			Event: Event{Wait: it.Wait.ID, Type: EventWrongGroup}}
	}
	return reply(key, it.Seq, Reply{Status: StatusWrongGroup})
}

// Refreeze ends the reserves and waits of group g's sessions that watch a
// tube now moving out (ServerConfig.Frozen): they are answered as a
// request for it would be (wrongGroup), and their members ask again where
// their tubes live.
func (s *Server) Refreeze(g uint16) {
	frozen, _ := s.frozen(g)
	if frozen == nil {
		return
	}
	// A change made outside any session that passed the check has run
	// once this is taken: the move exports what it made.
	s.outside.Lock()
	//lint:ignore SA2001 taken to wait out the changes under way
	s.outside.Unlock()
	for _, o := range s.ownersOf(g) {
		o.mu.Lock()
		if !o.closed && o.waiting != 0 && slices.ContainsFunc(o.client.Watched(), func(t string) bool { return frozen([]byte(t)) }) &&
			o.client.CancelWait() {
			it := Item{Kind: KindRequest, Seq: o.waiting}
			if o.waitID != 0 {
				it = Item{Kind: KindWait, Seq: o.waiting, Wait: Wait{ID: o.waitID}}
			}
			o.holdLocked(wrongGroup(o.key, &it), o.client.PendingAck())
			o.waiting, o.waitID, o.soonFirst = 0, 0, false
			o.client.Settle()
			o.runBacklogLocked()
		}
		o.mu.Unlock()
	}
	s.Flush()
}

// Unfrozen runs change, a change of the named tube in group g's store
// made outside any session (the admin API's), unless a move has frozen
// the tube there (ServerConfig.Frozen): then it reports false and does not
// run it. A move's Refreeze waits for a change that passed the check, as
// for a session's command, so the tube's export has what it made.
func (s *Server) Unfrozen(g uint16, tube []byte, change func()) bool {
	s.outside.RLock()
	defer s.outside.RUnlock()
	if frozen, _ := s.frozen(g); frozen != nil && frozen(tube) {
		return false
	}
	change()
	return true
}

// event is the event that ends wait id (sequence seq): j offered, or
// DEADLINE_SOON.
func event(key ownerKey, seq uint32, id uint64, j *store.Job, res store.ReserveResult) Item {
	ev := Event{Wait: id, Type: EventDeadlineSoon}
	if res == store.Reserved {
		ev = Event{Wait: id, Type: EventOffer, Job: jobReply(j)}
	}
	return Item{Kind: KindEvent, Group: key.group, Session: key.session, Seq: seq, Event: ev}
}

// execute runs req on the owner's client and returns its reply; blocked
// is a reserve that waits, whose reply the Notifier gives. A command by
// id of a job not here says where the group's tubes went (Reply.Moved).
func (o *owner) execute(req *Request) (r Reply, blocked bool) {
	r, blocked = o.run(req)
	if r.Status == StatusNotFound && byID(req.Op) {
		r = o.notFound(r)
	}
	return r, blocked
}

// run is execute but for Reply.Moved.
func (o *owner) run(req *Request) (r Reply, blocked bool) {
	// The request's key (5.6): a change resent to this leader after
	// another one may have made it is answered from the group's table of
	// outcomes, which every replica keeps from the log. Numbers start
	// anywhere in each process of a member (Link), so member and number
	// name one request. A request without a number has no key.
	var key wal.Req
	if req.Number != 0 {
		key = wal.Req{Incarnation: o.key.member, Number: req.Number}
	}
	cl := o.client
	ok := func(done bool) Reply {
		if done {
			return Reply{Status: StatusOK, Result: ResultNone}
		}
		return Reply{Status: StatusNotFound, Result: ResultNone}
	}
	verdict := func(err error) Reply {
		switch {
		case err == nil:
			return Reply{Status: StatusOK, Result: ResultNone}
		case errors.Is(err, store.ErrNoSpace):
			return Reply{Status: StatusNoSpace, Result: ResultNone}
		}
		return Reply{Status: StatusNotFound, Result: ResultNone}
	}
	job := func(j *store.Job, found bool) Reply {
		if !found {
			j = nil
		}
		return jobResult(j)
	}
	switch req.Op {
	case OpPut:
		cl.Use(req.Tube)
		body := req.Body // aliases the stream's buffer: the store copies a small one itself
		if len(body) > store.MaxCopiedBody {
			body = bytes.Clone(body)
		}
		id, _, err := cl.PutKeyedAged(key, req.Age, req.Pri, req.Delay, req.TTR, body)
		if err != nil {
			return verdict(err), false
		}
		return Reply{Status: StatusOK, Result: ResultID, ID: id}, false
	case OpReserve:
		o.watchOnly(req.Tubes)
		// A job the session holds in another group near its TTR ends the
		// reserve as one of this group's would (6.1): at once when none
		// of the watched tubes has a ready job, else when the wait
		// reaches it.
		if req.SoonElsewhere {
			if _, _, anyReady := cl.BestReady(); req.SoonIn <= 0 && !anyReady {
				return emptyReply(store.DeadlineSoon), false
			}
		}
		// Already soon, with ready jobs only in paused tubes: a take
		// that finds nothing answers DEADLINE_SOON at once.
		timeout, soonFirst := reserveEnd(req.Timeout, req.SoonIn, req.SoonElsewhere)
		j, res := cl.Reserve(timeout)
		switch {
		case res == store.Reserved:
			return job(j, true), false
		case res == store.Waiting:
			o.soonFirst = soonFirst
			return Reply{}, true
		case res == store.TimedOut && soonFirst:
			res = store.DeadlineSoon
		}
		return emptyReply(res), false
	case OpReserveJob:
		return job(cl.ReserveJob(req.ID)), false
	case OpDelete:
		return ok(cl.DeleteKeyed(key, req.ID)), false
	case OpRelease:
		return verdict(cl.ReleaseKeyed(key, req.ID, req.Pri, req.Delay)), false
	case OpBury:
		return verdict(cl.BuryKeyed(key, req.ID, req.Pri)), false
	case OpTouch:
		return ok(cl.Touch(req.ID)), false
	case OpKickJob:
		return verdict(cl.KickJobKeyed(key, req.ID)), false
	case OpBurn:
		return Reply{Status: StatusOK, Result: ResultID, ID: o.st.NextID()}, false
	case OpKick:
		cl.Use(req.Tube)
		return Reply{Status: StatusOK, Result: ResultCount, Count: cl.KickKeyed(key, req.Count)}, false
	case OpPeek:
		return job(cl.Peek(req.ID)), false
	case OpPeekReady, OpPeekDelayed, OpPeekBuried:
		cl.Use(req.Tube)
		var j *store.Job
		switch req.Op {
		case OpPeekReady:
			j = cl.PeekReady()
		case OpPeekDelayed:
			j = cl.PeekDelayed()
		default:
			j = cl.PeekBuried()
		}
		return job(j, j != nil), false
	case OpStatsJob:
		js, found := cl.JobStats(req.ID)
		if !found {
			return ok(false), false
		}
		return Reply{Status: StatusOK, Result: ResultJobStats, JobStats: js}, false
	case OpStatsTube:
		ts, found := o.st.TubeStats(req.Tube)
		if !found {
			return ok(false), false
		}
		return Reply{Status: StatusOK, Result: ResultTubeStats, TubeStats: ts}, false
	case OpPauseTube:
		return ok(cl.PauseTubeKeyed(key, req.Tube, time.Duration(req.Delay)*time.Second)), false
	case OpStats:
		return Reply{Status: StatusOK, Result: ResultStats, Stats: CountedStats(o.st, o.uncounted())}, false
	case OpListTubes:
		staged := o.uncounted()
		stamped := o.st.StampedTubes()
		tubes := make([]TubeStamp, 0, len(stamped))
		for _, t := range stamped {
			if staged == nil || !staged([]byte(t.Name)) {
				tubes = append(tubes, TubeStamp{Name: []byte(t.Name), Stamp: t.Stamp})
			}
		}
		return Reply{Status: StatusOK, Result: ResultTubes, Tubes: tubes}, false
	case OpBest:
		o.watchOnly(req.Tubes)
		best, found, anyReady := cl.BestReady()
		return Reply{Status: StatusOK, Result: ResultBest, Best: Best{Candidate: best, OK: found, AnyReady: anyReady}}, false
	case OpTake:
		o.watchOnly(req.Tubes)
		j, best, res := cl.TakeAtMost(req.Bound)
		switch res {
		case store.Taken:
			return job(j, true), false
		case store.Lost:
			return Reply{Status: StatusLost, Result: ResultBest, Best: Best{Candidate: best, OK: true}}, false
		}
		return Reply{Status: StatusEmpty, Result: ResultNone}, false
	}
	return ok(false), false // what this server does not run
}

// jobReply is j as a reply or an offer carries it.
// Its TTR is the session's to estimate the deadline by (6.4).
func jobReply(j *store.Job) JobReply { return JobReply{ID: j.ID(), TTR: j.TTR(), Body: j.Body()} }

// jobResult is the reply carrying j, or NOT_FOUND for nil.
func jobResult(j *store.Job) Reply {
	if j == nil {
		return Reply{Status: StatusNotFound, Result: ResultNone}
	}
	return Reply{Status: StatusOK, Result: ResultJob, Job: jobReply(j)}
}

// emptyReply is the reply to a reserve that ended without a job.
func emptyReply(res store.ReserveResult) Reply {
	if res == store.DeadlineSoon {
		return Reply{Status: StatusDeadlineSoon, Result: ResultNone}
	}
	return Reply{Status: StatusTimedOut, Result: ResultNone}
}

// watchOnly makes the client watch exactly tubes, as the session does
// the group's part of its watch list.
func (o *owner) watchOnly(tubes [][]byte) {
	cl := o.client
	for _, t := range tubes {
		cl.Watch(t)
	}
	for _, w := range cl.Watched() {
		if !containsTube(tubes, w) {
			cl.Ignore([]byte(w))
		}
	}
}

func containsTube(tubes [][]byte, name string) bool {
	for _, t := range tubes {
		if string(t) == name {
			return true
		}
	}
	return false
}

// holdLocked queues r until the log acknowledges pos, behind the replies
// before it, and sends what may go.
func (o *owner) holdLocked(r Item, pos uint64) { o.holdReplyLocked(heldReply{item: r, pos: pos}) }

// holdReplyLocked is holdLocked of h's reply, fenced by the lease as h
// says.
func (o *owner) holdReplyLocked(h heldReply) {
	f := o.flusher
	if f == nil || len(o.replies) == 0 && h.pos <= f.acks.Acked() {
		o.sendLocked(&h.item, h.fenced)
		return
	}
	// The job's body is the store's, which may reuse it once the job is
	// gone: the reply keeps its own.
	h.item.Reply.Job.Body = bytes.Clone(h.item.Reply.Job.Body)
	h.item.Event.Job.Body = bytes.Clone(h.item.Event.Job.Body)
	o.replies = append(o.replies, h)
	if len(o.replies) == 1 {
		f.add(o, h.pos) // else queued already, for an older position
	}
}

// sendLocked sends a reply or an event to the session's member (into the
// outbox), and keeps it as the last one sent. One that hands out a job,
// or is fenced (a reply to a leaseFenced request), goes only while the
// leadership is leased; else it is refused (refuseLocked). The lease is
// asked after the store answered, so a reply that goes was true while
// no other leader could have been elected.
func (o *owner) sendLocked(it *Item, fenced bool) {
	if leased := o.srv.cfg.Leased; leased != nil && (fenced || handsOut(it)) && !leased(o.key.group) {
		o.refuseLocked(it)
		return
	}
	e := o.kept.slot(it.Seq)
	payload, err := AppendItem(e.payload[:0], it)
	if err != nil {
		e.payload = e.payload[:0]
		return
	}
	e.payload = payload
	o.srv.out.add(o.key.member, payload)
}

// refuseLocked answers it, which hands out a job or reports the store
// while this member's leadership is not confirmed, StatusNotLeader, and
// keeps no answer: the member asks again, of the group's next leader, or
// of this one, which runs it then (refused). A reserve's or wait's job
// stays with the owner client meanwhile, to answer it with (handed), so
// that a lease found again, as after a stall that cost no leadership,
// answers as it would have; a leadership lost takes it with the store.
func (o *owner) refuseLocked(it *Item) {
	if id := jobOf(it); handsOut(it) && o.gave.take(it.Seq) == id {
		o.handed.addWait(it.Seq, id, it.Event.Wait) // 0 for a reply
	}
	o.refused = it.Seq
	o.srv.send(o.key.member, reply(o.key, it.Seq, Reply{Status: StatusNotLeader}))
}

// answerGivenAgainLocked answers a reserve or a take of sequence seq sent
// again after the session's later requests, its answer lost: with the
// job it got, if the session's client still holds it (the session, whose
// reserve ended, gives it back), else as timed out. Unanswered, its call
// stayed pending at the member, and the job was held unseen until its
// TTR.
func (o *owner) answerGivenAgainLocked(seq uint32) {
	r := emptyReply(store.TimedOut)
	if j := o.client.Holding(o.gave.jobOf(seq)); j != nil {
		r = jobResult(j)
		r.Stamp = o.st.LatestStamp()
	}
	o.holdLocked(reply(o.key, seq, r), o.client.PendingAck())
}

// handsOut reports whether it gives the session a job: a reply with one,
// or an offer.
func handsOut(it *Item) bool {
	return it.Kind == KindReply && it.Reply.Status == StatusOK && it.Reply.Result == ResultJob ||
		it.Kind == KindEvent && it.Event.Type == EventOffer
}

// jobOf is the id of the job a reply or an offer carries.
func jobOf(it *Item) uint64 {
	if it.Kind == KindEvent {
		return it.Event.Job.ID
	}
	return it.Reply.Job.ID
}

// sendAckedLocked sends, in order, the replies whose changes the log
// has acknowledged up to acked (a session's positions only grow, so the
// first that is not ends what may go), and reports the position the
// first one left waits for, if any.
func (o *owner) sendAckedLocked(acked uint64) (pos uint64, held bool) {
	if o.closed {
		return 0, false
	}
	n := 0
	for n < len(o.replies) && o.replies[n].pos <= acked {
		o.sendLocked(&o.replies[n].item, o.replies[n].fenced)
		n++
	}
	clear(o.replies[:n])
	o.replies = append(o.replies[:0], o.replies[n:]...)
	if len(o.replies) == 0 {
		return 0, false
	}
	return o.replies[0].pos, true
}

// JobReserved implements store.Notifier: the blocked reserve or wait got
// j.
func (o *owner) JobReserved(j *store.Job) { go o.endWait(j, store.Reserved) }

// WaitEnded implements store.Notifier: the blocked reserve or wait ended
// empty.
func (o *owner) WaitEnded(res store.ReserveResult) { go o.endWait(nil, res) }

// endWait answers the blocked reserve, or ends the wait with its event,
// then runs the requests that came behind it, until one blocks again. A
// job reserved for a wait that was cancelled meanwhile (its offer was on
// its way) is offered all the same: the member declines it.
func (o *owner) endWait(j *store.Job, res store.ReserveResult) {
	defer o.srv.Flush()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	cancelled := o.waiting != 0 && o.waiting == o.cancelled
	o.cancelled = 0
	if j != nil && o.waiting != 0 {
		if cancelled {
			// Picked as its cancel came: the session never takes it.
			o.client.Unreserve(j.ID())
		} else {
			o.handOutLocked(o.waiting, j.ID(), o.waitID, o.waitID != 0)
		}
	}
	switch {
	case o.waiting == 0:
		return
	case cancelled:
		// Nothing waits for an answer: the cancel dropped its call.
	case o.waitID != 0:
		// DEADLINE_SOON fenced as a hand-out is: the new leader of a
		// group cut off has the job ready, not reserved.
		o.holdReplyLocked(heldReply{item: event(o.key, o.waiting, o.waitID, j, res), pos: o.client.PendingAck(), fenced: true})
	case j != nil:
		o.holdLocked(reply(o.key, o.waiting, jobResult(j)), o.client.PendingAck())
	default:
		if res == store.TimedOut && o.soonFirst {
			res = store.DeadlineSoon
		}
		// Fenced as a reserve that does not wait is: a new leader may
		// have had a job ready meanwhile. Refused, the reserve goes
		// again with what is left of its timeout (none, or the time to
		// a DEADLINE_SOON that was the old leader's alone).
		o.holdReplyLocked(heldReply{item: reply(o.key, o.waiting, emptyReply(res)), pos: o.client.PendingAck(), fenced: true})
	}
	o.waiting, o.waitID, o.soonFirst = 0, 0, false
	o.client.Settle()
	o.runBacklogLocked()
}

// runBacklogLocked runs the requests that waited behind a reserve or a
// wait, until one blocks again.
func (o *owner) runBacklogLocked() {
	for len(o.backlog) > 0 && o.waiting == 0 {
		it := o.backlog[0]
		o.backlog = o.backlog[1:]
		o.runLocked(&it)
	}
}

// String names the owner client, for the store's refusal to reset under
// a holder (store.Store.Reset): its immutable fields only, so that it
// takes no lock.
func (o *owner) String() string {
	return fmt.Sprintf("the owner client of member %x's session %d in group %d (adopted %v, made %s ago)",
		o.key.member, o.key.session, o.key.group, o.adopted, time.Since(o.made).Round(time.Millisecond))
}

// close closes the client: its reservations go back, its wait ends
// unanswered, and replies not yet sent are dropped.
func (o *owner) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.closed = true
	o.client.CancelWait()
	o.client.Close()
	o.replies, o.backlog = nil, nil
}

// copyItem is it with everything it aliases copied: it outlives its
// frame.
func copyItem(it *Item) Item {
	c := *it
	c.Wait.Tubes = make([][]byte, len(it.Wait.Tubes))
	for i, t := range it.Wait.Tubes {
		c.Wait.Tubes[i] = bytes.Clone(t)
	}
	c.Request.Tube = bytes.Clone(it.Request.Tube)
	c.Request.Body = bytes.Clone(it.Request.Body)
	c.Request.Tubes = make([][]byte, len(it.Request.Tubes))
	for i, t := range it.Request.Tubes {
		c.Request.Tubes[i] = bytes.Clone(t)
	}
	return c
}
