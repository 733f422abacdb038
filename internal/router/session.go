package router

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
)

// errUnexpected is a remote reply whose status the command cannot have.
var errUnexpected = errors.New("router: a reply the command cannot have")

// Session is one client connection's engine.Queue on a cluster member
// (docs/design/shards.md 5.1), called only on its event loop. Opened
// while the member serves the only group (G = 1), it runs on the group's
// store through its own client, exactly as a single node's connection
// does, and its connection closes when the member stops serving
// (Router.Detach). Otherwise it keeps its used tube and watch list
// itself, in beanstalkd's order, tells the owning groups' leaders its
// references through the router, and sends every other command as a
// request to the leader of the group that owns it (5.2): by the used or
// named tube, by the job id's prefix, or to every group for stats and
// list-tubes, whose parts it puts together as one server's (5.5). A
// reserve whose watched tubes live in several groups is a crossReserve
// (6.2, 6.3). Each request is pending until its reply comes, which the
// Link sends again to the next leader if the one asked is lost. Changes
// (Pipelined) may be in flight several at once (engine.Pipeliner), in
// one group or several: each is one group's alone, so changes in
// different groups commute. Their answers reach the engine in the order
// of the commands, whichever goroutine brings each.
type Session struct {
	r       *Router        // immutable
	id      uint64         // immutable: its id on this member, with the group its owner key
	answers engine.Answers // immutable
	// local is its queue on this member's store, client's; nil for a
	// remote session.
	local  engine.Queue
	client *store.Client

	// A remote session's state.
	used    string
	watched []string // beanstalkd's order: append, swap-remove
	// seq is the sequence of its last item, in any group: each group
	// sees a session's sequences rise. Atomic: a reserve across groups
	// numbers its items on the Link's goroutines while the loop waits.
	seq atomic.Uint32
	// touched are the groups its items went to: its close goes to each.
	touched []uint16
	// reached are the groups its items went to from other goroutines
	// than its loop's (a request sent again where its tube moved, a
	// search for a moved job), by bit: its close goes to those too.
	reached [4]atomic.Uint64
	// byTube is rerouteByTube as a func value, made once (NewQueue) and
	// not per request: route's for the requests naming a tube.
	byTube func(req *Request, post func(uint16, uint32))
	// sendMu makes taking a sequence and handing the item to the Link one
	// step (post), so that each group gets the session's items in the
	// order of their sequences, whichever goroutine sends them (its loop,
	// the Link's, a timer's): a leader takes one below the last as sent
	// again.
	sendMu sync.Mutex
	// ids counts the ids puts took (NextID) that the group has not
	// taken yet: a put's own is taken by its request; one refused with its
	// body (PutRefused), or cut short by the connection's close, is taken
	// by a burn (OpBurn), so later ids are beanstalkd's.
	ids int
	// reserving is the sequence of a reserve whose reply is pending (0:
	// none): its reply and CancelWait race for it, the first to take it
	// wins. cross is a reserve across groups; its cancel and its end race
	// the same way. handOff makes a reply that goes on as a crossReserve
	// (goOnAcross) one step for CancelWait and Close: they find the
	// reserve pending, or the crossReserve.
	reserving    atomic.Uint32
	reserveGroup uint16
	cross        atomic.Pointer[crossReserve]
	handOff      sync.Mutex

	// mu orders the answers delivered to the engine: awaited holds the
	// sequences of the commands whose answers it waits for, oldest first,
	// and early the answers that came before an older one's (nil: one
	// that is not delivered, a reserve's after CancelWait).
	mu      sync.Mutex
	awaited []uint32               // guarded by mu
	early   map[uint32]earlyAnswer // guarded by mu; made when first needed
	// burning counts its burns in flight (burnIDs): a put run here must
	// not take its id before them.
	burning atomic.Int32
	// here is what its commands run on this member's stores (runHere)
	// wait for, by group, and lastHere the last of them: AckNeeded. Loop
	// only.
	here     []hereAck
	lastHere hereAck
	// held are the jobs the session reserved: each one's group and the
	// estimate of its TTR's end (6.4), by which, with several groups, a
	// reserve answers DEADLINE_SOON for a job held in a group it does
	// not ask, and a graceful shutdown waits (Router.Holding). Guarded by
	// mu (replies come on the Link's goroutines); made when first needed.
	held map[uint64]heldJob
	// ended: Close began, and no item of the session goes from another
	// goroutine than its loop's (askHeld) after it. Guarded by sendMu.
	ended bool
}

// hereAck is the position a command run on a group's store here waits
// for in the group's AckSource before it may be acknowledged.
type hereAck struct {
	group uint16
	acks  store.AckSource
	pos   uint64
}

// heldJob is a job the session reserved.
type heldJob struct {
	group    uint16
	ttr      time.Duration
	deadline time.Time // the estimate: when its reply came, plus its TTR
}

// holdJob notes that the session reserved job j in group g: the group
// that answered, which is not the one its id names once its tube moved.
func (s *Session) holdJob(j *JobReply, g uint16) {
	ttr := time.Duration(j.TTR) * time.Second
	s.mu.Lock()
	if s.held == nil {
		s.held = make(map[uint64]heldJob)
	}
	s.held[j.ID] = heldJob{group: g, ttr: ttr, deadline: time.Now().Add(ttr)}
	s.mu.Unlock()
}

// heldChanged notes the end of a held job's reservation (delete,
// release, bury: gone), or a touch (renewed), answered by group g: the
// job's, where its tube may have moved since it was reserved.
func (s *Session) heldChanged(id uint64, renewed bool, g uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[id]
	switch {
	case !ok:
	case renewed:
		h.deadline, h.group = time.Now().Add(h.ttr), g
		s.held[id] = h
	default:
		delete(s.held, id)
	}
}

// askHeld asks group g's leader, for each job of g the session counts
// as held, whether its owner client there still holds it (OpHeld): a
// leader elected after a crash has its predecessor's reservations ready
// again (docs/design/shards.md 7.3). A job it does not hold is forgotten,
// unless the session reserved or touched it again meanwhile; with no
// answer (no leader, or one of a release before) the estimate stays.
// Called on any goroutine, when g's leader changed or its stream opened
// again (Router.resync).
func (s *Session) askHeld(g uint16) {
	type asked struct {
		id       uint64
		deadline time.Time
	}
	var ask []asked
	s.mu.Lock()
	for id, h := range s.held {
		if h.group == g {
			ask = append(ask, asked{id, h.deadline})
		}
	}
	s.mu.Unlock()
	for _, q := range ask {
		s.askHeldIn(g, q.id, q.deadline, nil)
	}
}

// heldSearch is the asking of the groups where tubes moved from a held
// job's group, which said the session does not hold it: a job whose
// tube moved while held moved with its reservation. left counts the
// answers to come; found, that one held it (or did not answer: the
// estimate stays).
type heldSearch struct {
	left  atomic.Int32
	found atomic.Bool
}

// askHeldIn asks group g whether the session holds job id there, counted
// held with the estimate deadline: of its group (search nil), or of one
// where tubes moved from it. Not held in its group but tubes moved from
// it (Reply.Moved), those groups are asked, and the job is filed under
// the one that holds it; forgotten if none does.
func (s *Session) askHeldIn(g uint16, id uint64, deadline time.Time, search *heldSearch) {
	s.post(func(seq uint32) {
		s.reach(g)
		s.r.link.Request(s.id, g, seq, Request{Op: OpHeld, ID: id}, func(it *Item) {
			switch st := it.Reply.Status; {
			case search == nil && st == StatusNotFound && len(it.Reply.Moved) > 0:
				search = &heldSearch{}
				search.left.Store(int32(len(it.Reply.Moved)))
				for _, to := range it.Reply.Moved {
					s.askHeldIn(to, id, deadline, search)
				}
				return
			case search == nil:
				if st == StatusNotFound {
					s.heldLost(id, deadline)
				}
				return
			case st == StatusOK:
				search.found.Store(true)
				s.heldIn(id, deadline, g)
			case st != StatusNotFound:
				search.found.Store(true)
			}
			if search.left.Add(-1) == 0 && !search.found.Load() {
				s.heldLost(id, deadline)
			}
		})
	})
}

// heldIn files job id, held, under group g, where its tube moved, if its
// estimate is still deadline.
func (s *Session) heldIn(id uint64, deadline time.Time, g uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[id]; ok && h.deadline.Equal(deadline) {
		h.group = g
		s.held[id] = h
	}
}

// heldLost forgets job id, which its group's leader said the session
// does not hold, if its estimate is still deadline: the one asked about.
func (s *Session) heldLost(id uint64, deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[id]; ok && h.deadline.Equal(deadline) {
		delete(s.held, id)
	}
}

// holding is how many jobs the session holds reserved: its client's,
// for a local session; for a remote one, those whose TTR has not ended
// by its estimate (a job past it is no longer held: its group released
// it).
func (s *Session) holding() int {
	if s.client != nil {
		return len(s.client.Reservations())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for id, h := range s.held {
		if !h.deadline.After(now) {
			delete(s.held, id)
		}
	}
	return len(s.held)
}

// soonest is how long until the first job the session holds outside
// group skip (every group for a negative skip) comes within
// store.DeadlineMargin of its TTR's end, and false if it holds none. A
// job past its TTR is no longer held: its group released it.
func (s *Session) soonest(skip int) (time.Duration, bool) {
	if s.r.groups() == 1 && skip == 0 {
		return 0, false // every job held is group 0's
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var first time.Time
	for id, h := range s.held {
		switch {
		case !h.deadline.After(now):
			delete(s.held, id)
		case int(h.group) == skip:
		case first.IsZero() || h.deadline.Before(first):
			first = h.deadline
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return first.Sub(now) - store.DeadlineMargin, true
}

// owesSoon reports whether a DEADLINE_SOON may be owed: the session
// holds a job whose TTR's end, by its estimate, is within
// store.DeadlineMargin and soonSlack. The estimate runs from when the
// reply came, so a leader sees the end that much earlier.
func (s *Session) owesSoon() bool {
	in, ok := s.soonest(-1)
	return ok && in <= soonSlack
}

// soonSlack is how much earlier than the session's estimate a leader may
// see a job's TTR end: the way of the reply that handed the job out.
const soonSlack = time.Second

// earlyAnswer is an answer that came before an older one's.
type earlyAnswer struct {
	a    engine.Answer
	none bool // nothing to deliver
}

// Pipelines implements engine.Pipeliner: a remote session's changes by
// job id and its puts may be in flight behind one another (docs/design/
// shards.md 5.3); the leader runs them in order. Everything else waits
// for them: a reserve, so that it sees them; use, watch and ignore, whose
// answers come by another way; and what reads, whose replies are large.
func (s *Session) Pipelines(op codec.Op) bool {
	if s.local != nil {
		return false
	}
	switch op {
	case codec.OpPut, codec.OpPutBody, codec.OpDelete, codec.OpRelease, codec.OpBury, codec.OpTouch,
		codec.OpKick, codec.OpKickJob, codec.OpPauseTube:
		return true
	}
	return false
}

// Pipelined reports whether requests of op may be in flight behind
// others (Session.Pipelines); a leader keeps the answers of such requests
// for a resend, and any other request says that its session has every
// answer before it.
func Pipelined(op Op) bool {
	switch op {
	case OpPut, OpBurn, OpDelete, OpRelease, OpBury, OpTouch, OpKick, OpKickJob, OpPauseTube:
		return true
	}
	return false
}

// deliver hands the engine a, the answer to the command of sequence seq
// (nil: none, the command ended otherwise), and any answers that waited
// for it, in their commands' order. A sequence not awaited is dropped.
func (s *Session) deliver(seq uint32, a *engine.Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.awaited) == 0 || s.awaited[0] != seq {
		if slices.Contains(s.awaited, seq) {
			if s.early == nil {
				s.early = make(map[uint32]earlyAnswer)
			}
			e := earlyAnswer{none: a == nil}
			if a != nil {
				e.a = *a
			}
			s.early[seq] = e
		}
		return
	}
	if a != nil {
		s.answers.Answered(*a)
	}
	for s.awaited = s.awaited[1:]; len(s.awaited) > 0; s.awaited = s.awaited[1:] {
		e, ok := s.early[s.awaited[0]]
		if !ok {
			return
		}
		delete(s.early, s.awaited[0])
		if !e.none {
			s.answers.Answered(e.a)
		}
	}
	s.awaited = s.awaited[:0:0] // not the tail of a long-grown array
}

// forget drops the awaited command of sequence seq: its answer is given
// otherwise (CancelWait).
func (s *Session) forget(seq uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.awaited, seq); i >= 0 {
		s.awaited = slices.Delete(s.awaited, i, i+1)
		delete(s.early, seq)
	}
}

// next is the session's next sequence.
func (s *Session) next() uint32 {
	for {
		if seq := s.seq.Add(1); seq != 0 { // 0 means none: skipped as the sequence wraps
			return seq
		}
	}
}

// touch notes that the session's items go to group g.
func (s *Session) touch(g uint16) {
	if !slices.Contains(s.touched, g) {
		s.touched = append(s.touched, g)
	}
}

// reach notes that the session's items go to group g, from any
// goroutine.
func (s *Session) reach(g uint16) { s.reached[g/64].Or(1 << (g % 64)) }

// post takes the session's next sequence and hands send the item of it,
// as one step (sendMu); once Close began, nothing: a request sent again
// where its tube moved, or a search by id, whose timer fires after the
// close would make an owner client there that no close ends.
func (s *Session) post(send func(seq uint32)) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.ended {
		return
	}
	send(s.next())
}

// route is where a request of op answered StatusWrongGroup (its tube is
// moving between groups: docs/design/shards.md 3.3) goes again: one
// naming a tube to the tube's group as this member then knows it; nil for
// the others, which read that answer themselves (a reserve, the commands
// by id: sendSearching), and with one group, where nothing moves.
func (s *Session) route(op Op) func(req *Request, post func(g uint16, seq uint32)) {
	if s.r.groups() == 1 {
		return nil
	}
	switch op {
	case OpPut, OpKick, OpPeekReady, OpPeekDelayed, OpPeekBuried, OpStatsTube, OpPauseTube:
		return s.byTube
	}
	return nil
}

// rerouteByTube is route's for a request naming a tube: to the tube's
// group as this member knows it now.
func (s *Session) rerouteByTube(req *Request, post func(uint16, uint32)) {
	to := s.r.ownerOf(string(req.Tube))
	s.reach(to)
	s.post(func(seq uint32) { post(to, seq) })
}

// await makes the next sequence the one an answer is awaited by.
func (s *Session) await() uint32 {
	seq := s.next()
	s.mu.Lock()
	s.awaited = append(s.awaited, seq)
	s.mu.Unlock()
	return seq
}

// call runs req in group g here if it may (runHere), answering a now;
// else it sends req to the group's leader, burning an id first if one is
// owed. finish reads the reply into the answer, unless it leaves
// a.Reserve store.Waiting: a reserve's reply that came after CancelWait,
// dropped.
func (s *Session) call(g uint16, req Request, a *engine.Answer, finish func(it *Item, a *engine.Answer)) bool {
	if s.runHere(g, req, a, finish) {
		return true
	}
	return s.send(g, req, finish)
}

// runHere runs req at once on this member's store of group g, the local
// fast path (docs/design/shards.md 5.1), and answers a by finish: when
// this member serves the group, and nothing of the session is on its way
// anywhere (an answer awaited, or come and not yet given by the engine:
// a.Behind; a burn), so nothing can overtake it or be overtaken and its
// reply is held for the log by its own position, and the Server finds
// the session's owner client there idle (Server.local). The reply waits for the group's log (AckNeeded) in the
// engine, as a single server's does. If the member loses the group
// before the log has acknowledged it, the session closes (ClosesWith).
func (s *Session) runHere(g uint16, req Request, a *engine.Answer, finish func(it *Item, a *engine.Answer)) bool {
	r := s.r
	if a.Behind || s.ids != 0 || !s.quietHere(g) {
		return false
	}
	// Counted, then the hold looked at again: a handover that set it
	// before sees this run and waits for it (Router.LocalDone); one that
	// sets it after is seen here.
	r.runningLocal[g].Add(1)
	if r.heldLocal(g) {
		r.runningLocal[g].Add(-1)
		return false
	}
	reply, acks, pos, ran := r.server.local(ownerKey{member: r.cfg.Self, session: s.id, group: g}, req, &r.link.stamp)
	r.runningLocal[g].Add(-1)
	if !ran {
		return false
	}
	r.local.Add(1)
	s.touch(g)
	it := &Item{Kind: KindReply, Group: g, Reply: reply}
	if reserves(req.Op) && handsOut(it) {
		// As the Link notes a job handed to it: a decline of it
		// recalled must not take it back.
		r.link.Handed(s.id, g, jobOf(it))
	}
	finish(it, a)
	s.lastHere = hereAck{group: g, acks: acks, pos: pos}
	if i := slices.IndexFunc(s.here, func(h hereAck) bool { return h.group == g }); i >= 0 {
		s.here[i] = s.lastHere
	} else {
		s.here = append(s.here, s.lastHere)
	}
	return true
}

// ClosesWith reports whether q is a session that must close when this
// member stops serving group g: one running on its store (a single
// group's session opened while the member served it), or
// one with a reply of a command run there (runHere) that the group's
// log has not acknowledged, which would never be. Called on q's loop.
func ClosesWith(q engine.Queue, g uint16) bool {
	s, ok := q.(*Session)
	if !ok {
		return false
	}
	if s.local != nil {
		return true
	}
	for _, h := range s.here {
		if h.group == g && h.pos > h.acks.Acked() {
			return true
		}
	}
	return false
}

// send sends req to group g's leader, burning an id first if one is
// owed; finish reads the reply, as call's.
func (s *Session) send(g uint16, req Request, finish func(it *Item, a *engine.Answer)) bool {
	return s.sendWith(g, req, nil, finish)
}

// sendWith is send, calling before, if set, with the sequence the answer
// is awaited by before the request goes.
func (s *Session) sendWith(g uint16, req Request, before func(seq uint32), finish func(it *Item, a *engine.Answer)) bool {
	s.burnIDs()
	op := req.Op // not req: its body aliases the connection's input
	s.touch(g)
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	seq := s.await()
	if before != nil {
		before(seq)
	}
	s.r.link.RequestRouted(s.id, g, seq, req, s.route(op), func(it *Item) {
		a := answerPool.Get().(*engine.Answer)
		defer answerPool.Put(a)
		*a = engine.Answer{}
		switch it.Reply.Status {
		case StatusNoLeader, StatusUnknown:
			failed(op, it.Reply.Status, a)
		default:
			finish(it, a)
		}
		if a.Reserve == reserveElsewhere {
			return
		}
		if a.Reserve == store.Waiting {
			s.deliver(seq, nil)
		} else {
			s.deliver(seq, a) // copied
		}
	})
	return false
}

// fenceHere answers a, which a session on the store of the one group
// (s.local) answered now from it without handing out a job, FailedFenced
// if this member's leadership of the group is not leased then
// (RouterConfig.Leased): the connection closes, as the engine closes it
// rather than hand out a job (engine.Config.Leased), instead of
// answering from a store that a leader elected meanwhile may have
// changed. The lease is asked once the store has answered, so an answer
// that goes was true while no other leader could have been elected. It
// costs the lease's atomic loads, and no lock, per command. It returns
// now.
func (s *Session) fenceHere(now bool, a *engine.Answer) bool {
	if leased := s.r.cfg.Leased; now && leased != nil && !leased(0) {
		a.Failed = engine.FailedFenced
	}
	return now
}

// answerPool holds the answers replies are read into before they are
// delivered (copied): one each would be an allocation a routed command,
// its reply's finish being a function value the answer escapes to.
var answerPool = sync.Pool{New: func() any { return new(engine.Answer) }}

// failed answers a request no leader answered in time (docs/design/
// shards.md 5.7) as one server whose log cannot take a change would: put
// and release OUT_OF_MEMORY, bury INTERNAL_ERROR, kick-job NOT_FOUND (the
// engine's replies to a refusal), anything else INTERNAL_ERROR; but a
// change that a lost leader may have made closes the connection, which
// no reply could answer truly.
func failed(op Op, status Status, a *engine.Answer) {
	switch {
	case op == OpListTubes || op == OpStats || op == OpStatsJob || op == OpStatsTube ||
		op == OpPeek || op == OpPeekReady || op == OpPeekDelayed || op == OpPeekBuried:
		a.Failed = engine.FailedInternal // nothing changed either way
	case status == StatusUnknown:
		a.Failed = engine.FailedLost
	case op == OpPut || op == OpRelease || op == OpBury || op == OpKickJob:
		a.Err = store.ErrNoSpace
	default:
		a.Failed = engine.FailedInternal
	}
}

// burnIDs has the group of the used tube, where the put that owed each
// was to go, take the ids owed.
func (s *Session) burnIDs() {
	if s.ids == 0 {
		return
	}
	g := s.r.ownerOf(s.used)
	s.touch(g)
	for ; s.ids > 0; s.ids-- {
		s.burning.Add(1)
		s.post(func(seq uint32) {
			s.r.link.Request(s.id, g, seq, Request{Op: OpBurn}, func(*Item) { s.burning.Add(-1) })
		})
	}
}

// afterRefs delivers a once the member's references sent so far are the
// leader's.
func (s *Session) afterRefs(a engine.Answer) func() {
	return func() { s.answers.Answered(a) }
}

func (s *Session) Use(tube []byte, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Use(tube, a)
	}
	if string(tube) == s.used {
		return true
	}
	old := s.used
	s.used = string(tube)
	s.r.moveRefs(old, s.used, s.afterRefs(engine.Answer{}))
	return false
}

func (s *Session) Watch(tube []byte, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Watch(tube, a)
	}
	for _, w := range s.watched {
		if w == string(tube) {
			a.N = uint64(len(s.watched))
			return true
		}
	}
	s.watched = append(s.watched, string(tube))
	s.r.changeRefs(string(tube), 0, 1, s.afterRefs(engine.Answer{N: uint64(len(s.watched))}))
	return false
}

func (s *Session) Ignore(tube []byte, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Ignore(tube, a)
	}
	i := -1
	for k, w := range s.watched {
		if w == string(tube) {
			i = k
		}
	}
	switch {
	case i < 0:
		a.N, a.OK = uint64(len(s.watched)), true
		return true
	case len(s.watched) < 2:
		a.N, a.OK = uint64(len(s.watched)), false
		return true
	}
	last := len(s.watched) - 1
	s.watched[i] = s.watched[last]
	s.watched = s.watched[:last]
	s.r.changeRefs(string(tube), 0, -1, s.afterRefs(engine.Answer{N: uint64(last), OK: true}))
	return false
}

func (s *Session) UsedTube() string {
	if s.local != nil {
		return s.local.UsedTube()
	}
	return s.used
}

func (s *Session) Watched() []string {
	if s.local != nil {
		return s.local.Watched()
	}
	return append([]string(nil), s.watched...)
}

func (s *Session) ListTubes(a *engine.Answer) bool {
	if s.local != nil {
		return s.fenceHere(s.local.ListTubes(a), a)
	}
	if s.r.groups() == 1 {
		return s.call(0, Request{Op: OpListTubes}, a, func(it *Item, a *engine.Answer) {
			for _, t := range it.Reply.Tubes {
				a.Tubes = append(a.Tubes, string(t.Name))
			}
		})
	}
	return s.fanOut(OpListTubes, func(parts []fanPart, a *engine.Answer) {
		lists := make([][]TubeStamp, len(parts))
		for i, p := range parts {
			lists[i] = p.tubes
		}
		a.Tubes = MergeTubes(lists...)
	})
}

func (s *Session) NextID() uint64 {
	if s.local != nil {
		return s.local.NextID()
	}
	s.ids++ // the group takes it when the put, or the next request, reaches it
	return 0
}

func (s *Session) Clock() int64 {
	if s.local != nil {
		return s.local.Clock()
	}
	return int64(time.Since(s.r.epoch))
}

func (s *Session) Put(id uint64, at int64, pri, delay, ttr uint32, body []byte, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Put(id, at, pri, delay, ttr, body, a)
	}
	s.ids-- // this put's own, taken by its request
	req := Request{Op: OpPut, Tube: []byte(s.used), Pri: pri, Delay: delay, TTR: ttr, Body: body}
	if at != codec.Unstamped {
		req.Age = time.Since(s.r.epoch) - time.Duration(at)
	}
	return s.call(s.r.ownerOf(s.used), req, a, func(it *Item, a *engine.Answer) {
		switch it.Reply.Status {
		case StatusOK:
			a.N = it.Reply.ID
		case StatusNoSpace:
			a.Err = store.ErrNoSpace
		default:
			a.Err = errUnexpected
		}
	})
}

// PutRefused has the group take the refused put's id now, before any
// later put of another session, as one server takes it at the header.
func (s *Session) PutRefused() {
	if s.local != nil {
		s.local.PutRefused()
		return
	}
	s.burnIDs()
}

func (s *Session) Reserve(timeout time.Duration, a *engine.Answer) bool {
	if s.local != nil {
		now := s.local.Reserve(timeout, a)
		if a.Reserve == store.Reserved {
			return now // the engine fences a job handed out itself (engine.Config.Leased)
		}
		return s.fenceHere(now, a)
	}
	s.cross.Store(nil)
	if s.r.holdingJobs.Load() {
		// A graceful shutdown's (Router.HoldJobs): as if every watched
		// tube were empty, DEADLINE_SOON still due for a job held.
		return s.reserveAcross(nil, timeout)
	}
	parts := s.reserveParts()
	if len(parts) > 1 {
		return s.reserveAcross(parts, timeout)
	}
	g := parts[0].group
	req := Request{Op: OpReserve, Tubes: parts[0].tubes, Timeout: timeout}
	req.SoonIn, req.SoonElsewhere = s.soonest(int(g))
	// A job held in another group bounds the wait, which runHere does not
	// take: it runs only reserves that do not wait.
	if !req.SoonElsewhere && s.runHere(g, req, a, s.reserveAnswer) {
		return true
	}
	started := time.Now()
	s.reserveGroup = g
	s.r.waiting.Add(1)
	soonElsewhere := req.SoonElsewhere
	var seq uint32
	return s.sendWith(g, req, func(awaited uint32) {
		seq = awaited
		s.reserving.Store(seq)
	}, func(it *Item, a *engine.Answer) {
		// A watched tube moving between groups: the reserve goes again,
		// where its tubes live once the move is over; so does one that
		// the bound from the session's estimate ended with DEADLINE_SOON
		// for a job it has since been told it lost (askHeld), no job it
		// holds being near its TTR's end. A wait sent before the member
		// began to hold jobs for its shutdown (Router.HoldJobs): the job
		// goes back as if never reserved, and the reserve waits out its
		// timeout here.
		again := it.Reply.Status == StatusWrongGroup ||
			it.Reply.Status == StatusDeadlineSoon && soonElsewhere && !s.owesSoon()
		held := it.Reply.Status == StatusOK && s.r.holdingJobs.Load()
		if again || held {
			remaining := timeout
			if timeout >= 0 {
				remaining = max(timeout-time.Since(started), 0)
			}
			cr := s.goOnAcross(seq, remaining)
			if cr == nil {
				a.Reserve = store.Waiting // cancelled: dropped
				return
			}
			if held {
				s.r.link.Decline(s.id, g, 0, it.Reply.Job.ID)
				cr.start()
			} else {
				cr.startAgain()
			}
			a.Reserve = reserveElsewhere
			return
		}
		if !s.reserving.CompareAndSwap(seq, 0) {
			a.Reserve = store.Waiting // cancelled: dropped
			return
		}
		s.r.waiting.Add(-1)
		s.reserveAnswer(it, a)
	})
}

// reserveElsewhere is a reserve's answer that another sends later
// (goOnAcross): none is delivered now.
const reserveElsewhere store.ReserveResult = 0xff

// goOnAcross makes the crossReserve that answers the reserve awaited by
// seq, for timeout (what is left of its own): across the groups its
// watched tubes live in once a move is over (crossReserve.startAgain),
// or over none while the member holds jobs (crossReserve.start). On the
// Link's goroutine, while the session's loop waits for the reserve's
// answer: its watch list does not change meanwhile. The reserve is taken
// off reserving and the crossReserve stored in one step (handOff), so a
// CancelWait or Close finds the one or the other; one that finds the
// crossReserve before it starts cancels it, and it does not start. Nil if
// the reserve was cancelled.
func (s *Session) goOnAcross(seq uint32, timeout time.Duration) *crossReserve {
	s.handOff.Lock()
	defer s.handOff.Unlock()
	if !s.reserving.CompareAndSwap(seq, 0) {
		return nil
	}
	cr := s.newCross(nil, timeout, seq)
	s.cross.Store(cr)
	return cr
}

// reserveAnswer reads a reserve's reply.
func (s *Session) reserveAnswer(it *Item, a *engine.Answer) {
	switch it.Reply.Status {
	case StatusOK:
		a.Reserve = store.Reserved
		jobAnswer(it, a)
		s.holdJob(&it.Reply.Job, it.Group)
	case StatusDeadlineSoon:
		a.Reserve = store.DeadlineSoon
	default:
		a.Reserve = store.TimedOut
	}
}

// reserveParts are the groups that own the watched tubes, each with its
// tubes in the watch list's order, the groups in the order of their
// first tube.
func (s *Session) reserveParts() []crossPart {
	var parts []crossPart
	for _, w := range s.watched {
		g := s.r.ownerOf(w)
		i := slices.IndexFunc(parts, func(p crossPart) bool { return p.group == g })
		if i < 0 {
			i = len(parts)
			parts = append(parts, crossPart{group: g})
		}
		parts[i].tubes = append(parts[i].tubes, []byte(w))
	}
	return parts
}

// reserveAcross is a reserve whose watched tubes live in several groups
// (docs/design/shards.md 6.2, 6.3): a crossReserve, its answer awaited by
// a sequence of its own.
func (s *Session) reserveAcross(parts []crossPart, timeout time.Duration) bool {
	s.burnIDs()
	seq := s.await()
	for _, p := range parts {
		s.touch(p.group)
	}
	s.r.waiting.Add(1)
	cr := s.newCross(parts, timeout, seq)
	s.cross.Store(cr)
	cr.start()
	return false
}

// newCross is a crossReserve of the session over parts, whose answer is
// awaited by seq.
func (s *Session) newCross(parts []crossPart, timeout time.Duration, seq uint32) *crossReserve {
	cr := &crossReserve{link: s.r.link, session: s.id, seq: seq, post: s.post, parts: parts, timeout: timeout,
		holding: s.r.holdingJobs.Load,
		soonest: func() (time.Duration, bool) { return s.soonest(-1) },
		again: func() []crossPart {
			if s.r.holdingJobs.Load() {
				return nil
			}
			parts := s.reserveParts()
			for _, p := range parts {
				s.reach(p.group)
			}
			return parts
		}}
	cr.soon, cr.hasSoon = s.soonest(-1)
	cr.done = func(j *JobReply, group uint16, res store.ReserveResult) {
		s.r.waiting.Add(-1)
		a := engine.Answer{Reserve: res}
		if j != nil {
			a.JobID, a.JobBody = j.ID, j.Body // the crossReserve's copy
			s.holdJob(j, group)
			// Taken: where this member leads the group, the session's
			// next commands may run there at once again.
			s.r.server.Received(ownerKey{member: s.r.cfg.Self, session: s.id, group: group}, j.ID)
		}
		s.deliver(seq, &a)
	}
	return cr
}

// CancelWait ends a remote reserve at once: its reply, if it comes all
// the same (a job was on its way), is dropped, and the leader gives that
// job back when the cancel comes (Server.cancel). A reserve across
// groups cancels its waits and its take the same way.
func (s *Session) CancelWait() bool {
	if s.local != nil {
		return s.local.CancelWait()
	}
	s.handOff.Lock()
	defer s.handOff.Unlock()
	if cr := s.cross.Swap(nil); cr != nil {
		if !cr.cancel() {
			return false // its answer is on its way to the loop
		}
		s.r.waiting.Add(-1)
		s.forget(cr.seq)
		return true
	}
	seq := s.reserving.Load()
	if seq == 0 || !s.reserving.CompareAndSwap(seq, 0) {
		return false // its reply is on its way to the loop
	}
	s.r.waiting.Add(-1)
	s.forget(seq)
	s.r.link.Cancel(s.id, s.reserveGroup, seq, 0)
	return true
}

// callByID sends req to the group req.ID's prefix names. An id no group
// issues is answered at once, by finish, as a group answers an id it
// does not hold: NOT_FOUND.
func (s *Session) callByID(req Request, a *engine.Answer, finish func(it *Item, a *engine.Answer)) bool {
	g, ok := s.r.groupOfID(req.ID)
	if !ok {
		finish(&Item{Kind: KindReply, Reply: Reply{Status: StatusNotFound, Result: ResultNone}}, a)
		return true
	}
	if s.r.groups() == 1 {
		return s.call(g, req, a, finish)
	}
	// Run here only what the store here holds, once tubes moved out of
	// g: a job not found here may be where one went.
	if st := s.r.group(g); (len(s.r.movedFrom(g)) == 0 || st != nil && st.Holds(req.ID)) && s.runHere(g, req, a, finish) {
		return true
	}
	return s.sendSearching(g, req, finish)
}

// sendSearching sends req, a command by id, to the group of the id's
// prefix, g, and, if it answers NOT_FOUND, at once to every group tubes
// moved to from g, and on from those (a job keeps its id when its tube
// moves: docs/design/shards.md 4), as this member's routing knows them
// and as each group that answers NOT_FOUND names them (Reply.Moved: the
// routing learns of a move from group 0's log, which may lag the group
// that dropped the tube's jobs). At most one group serves a job: where
// its tube is moving or has moved from, it is frozen there (a group
// holding copies not yet placed counts their tubes moving too), so the
// others answer NOT_FOUND or StatusWrongGroup, and the first other answer
// is the command's. Only when every group asked has answered does the
// search end otherwise: a group that answered that the job's tube is
// moving has it begin again after moveRetry, where the job may be then,
// for up to moveWait; one without a leader fails it; else NOT_FOUND. req
// carries no slice of the connection's input: it is sent from the Link's
// goroutines too.
func (s *Session) sendSearching(g uint16, req Request, finish func(it *Item, a *engine.Answer)) bool {
	s.burnIDs()
	s.touch(g)
	s.sendMu.Lock()
	seq := s.await()
	s.sendMu.Unlock()
	var movedAt time.Time
	var begin func()
	begin = func() {
		sr := &idSearch{s: s, req: req, groups: s.searched(g)}
		sr.found = func(it *Item) {
			var a engine.Answer
			finish(it, &a)
			s.deliver(seq, &a)
		}
		sr.over = func(moving bool, failure Status) {
			// A group whose lost leader took the command (StatusUnknown)
			// may have run it: asked again it could answer otherwise.
			if moving && failure != StatusUnknown {
				if movedAt.IsZero() {
					movedAt = time.Now()
				}
				if time.Since(movedAt) <= moveWait {
					time.AfterFunc(moveRetry, begin)
					return
				}
				failure = StatusNoLeader
			}
			var a engine.Answer
			if failure != 0 {
				failed(req.Op, failure, &a)
			} else {
				finish(&Item{Kind: KindReply, Reply: Reply{Status: StatusNotFound, Result: ResultNone}}, &a)
			}
			s.deliver(seq, &a)
		}
		sr.askNext()
	}
	begin()
	return false
}

// idSearch is one round of sendSearching's search.
type idSearch struct {
	s   *Session
	req Request
	// found gets the command's answer, a group's, while its callback
	// runs; over, once every group asked answered without it, whether
	// one said the job's tube is moving, and the status of one without
	// a leader (0 if none).
	found func(it *Item)
	over  func(moving bool, failure Status)

	mu       sync.Mutex
	groups   []uint16 // the groups known to search, in order
	asked    int      // groups[:asked] are asked
	pending  int      // asked, not yet answered
	answered bool     // found was called
	moving   bool
	failure  Status
}

// askNext asks the first group.
func (sr *idSearch) askNext() {
	sr.mu.Lock()
	next := sr.nextLocked()
	sr.mu.Unlock()
	sr.ask(next)
}

// nextLocked counts as asked, and returns, the first group, or else
// every known group not yet asked.
func (sr *idSearch) nextLocked() []uint16 {
	next := sr.groups[sr.asked:]
	if sr.asked == 0 {
		next = next[:1]
	}
	next = slices.Clone(next)
	sr.asked += len(next)
	sr.pending += len(next)
	return next
}

// ask sends the request to groups, all at once.
func (sr *idSearch) ask(groups []uint16) {
	s := sr.s
	for _, to := range groups {
		s.reach(to)
		s.post(func(linkSeq uint32) {
			s.r.link.Request(s.id, to, linkSeq, sr.req, sr.answer)
		})
	}
}

// answer takes a group's reply.
func (sr *idSearch) answer(it *Item) {
	sr.mu.Lock()
	sr.pending--
	if sr.answered {
		sr.mu.Unlock()
		return
	}
	var next []uint16
	switch it.Reply.Status {
	case StatusNotFound:
		sr.groups = addGroups(sr.groups, it.Reply.Moved)
		next = sr.nextLocked()
	case StatusWrongGroup:
		sr.moving = true
	case StatusNoLeader, StatusUnknown:
		// One whose lost leader took the command (StatusUnknown) may
		// have run it: that rules. The job may be where the group's
		// tubes moved, which are asked still.
		if sr.failure == 0 || it.Reply.Status == StatusUnknown {
			sr.failure = it.Reply.Status
		}
		next = sr.nextLocked()
	default:
		sr.answered = true
		sr.mu.Unlock()
		sr.found(it)
		return
	}
	over := sr.pending == 0
	moving, failure := sr.moving, sr.failure
	sr.mu.Unlock()
	if over {
		sr.over(moving, failure)
		return
	}
	sr.ask(next)
}

// addGroups is groups with those of more it does not hold appended.
func addGroups(groups, more []uint16) []uint16 {
	for _, g := range more {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return groups
}

// searched are the groups a job of group g's prefix may be in, in the
// order sendSearching asks them.
func (s *Session) searched(g uint16) []uint16 {
	return append([]uint16{g}, s.r.movedFrom(g)...)
}

// jobAnswer reads a reply's job into a, its body copied: the reply's
// payload is gone once the callback returns.
func jobAnswer(it *Item, a *engine.Answer) {
	if it.Reply.Status == StatusOK && it.Reply.Result == ResultJob {
		a.JobID, a.JobBody = it.Reply.Job.ID, bytes.Clone(it.Reply.Job.Body)
	}
}

func (s *Session) ReserveJob(id uint64, a *engine.Answer) bool {
	if s.local != nil {
		now := s.local.ReserveJob(id, a)
		if a.Job != nil {
			return now // the engine fences a job handed out itself (engine.Config.Leased)
		}
		return s.fenceHere(now, a)
	}
	if s.r.holdingJobs.Load() {
		return true // a graceful shutdown's: found nowhere (Router.HoldJobs)
	}
	return s.callByID(Request{Op: OpReserveJob, ID: id}, a, func(it *Item, a *engine.Answer) {
		jobAnswer(it, a)
		if a.JobID != 0 {
			s.holdJob(&it.Reply.Job, it.Group)
		}
	})
}

func (s *Session) Delete(id uint64, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Delete(id, a)
	}
	return s.callByID(Request{Op: OpDelete, ID: id}, a, s.endsHold(id, false, okAnswer))
}

func (s *Session) Touch(id uint64, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Touch(id, a)
	}
	return s.callByID(Request{Op: OpTouch, ID: id}, a, s.endsHold(id, true, okAnswer))
}

// endsHold is read, for a change by id of a job the session may hold:
// done, it ends the session's reservation of the job, or renews it (a
// touch); not found, the session does not hold the job (its reservation
// was lost with its group's leader, or ended at its TTR), whatever it
// noted when it reserved it. Kept as held, the job would be counted
// until its TTR's end: by a graceful shutdown, which waits for the jobs
// its workers hold (25 s at most), and by DEADLINE_SOON, which a reserve
// would answer for a job the session no longer has.
func (s *Session) endsHold(id uint64, renews bool, read func(*Item, *engine.Answer)) func(*Item, *engine.Answer) {
	return func(it *Item, a *engine.Answer) {
		read(it, a)
		switch it.Reply.Status {
		case StatusOK:
			s.heldChanged(id, renews, it.Group)
		case StatusNotFound:
			s.heldChanged(id, false, it.Group)
		}
	}
}

// okAnswer reads a found-or-not reply.
func okAnswer(it *Item, a *engine.Answer) { a.OK = it.Reply.Status == StatusOK }

// errAnswer reads a verdict: done, not found, or the log's refusal.
func errAnswer(it *Item, a *engine.Answer) {
	switch it.Reply.Status {
	case StatusOK:
	case StatusNoSpace:
		a.Err = store.ErrNoSpace
	default:
		a.Err = store.ErrNotFound
	}
}

func (s *Session) Release(id uint64, pri, delay uint32, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Release(id, pri, delay, a)
	}
	return s.callByID(Request{Op: OpRelease, ID: id, Pri: pri, Delay: delay}, a, s.endsHold(id, false, errAnswer))
}

func (s *Session) Bury(id uint64, pri uint32, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Bury(id, pri, a)
	}
	return s.callByID(Request{Op: OpBury, ID: id, Pri: pri}, a, s.endsHold(id, false, errAnswer))
}

func (s *Session) KickJob(id uint64, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.KickJob(id, a)
	}
	return s.callByID(Request{Op: OpKickJob, ID: id}, a, errAnswer)
}

func (s *Session) Kick(n uint32, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.Kick(n, a)
	}
	return s.call(s.r.ownerOf(s.used), Request{Op: OpKick, Tube: []byte(s.used), Count: n}, a, func(it *Item, a *engine.Answer) {
		a.N = uint64(it.Reply.Count)
	})
}

func (s *Session) Peek(id uint64, a *engine.Answer) bool {
	if s.local != nil {
		return s.fenceHere(s.local.Peek(id, a), a)
	}
	return s.callByID(Request{Op: OpPeek, ID: id}, a, jobAnswer)
}

func (s *Session) PeekReady(a *engine.Answer) bool {
	if s.local != nil {
		return s.fenceHere(s.local.PeekReady(a), a)
	}
	return s.call(s.r.ownerOf(s.used), Request{Op: OpPeekReady, Tube: []byte(s.used)}, a, jobAnswer)
}

func (s *Session) PeekDelayed(a *engine.Answer) bool {
	if s.local != nil {
		return s.fenceHere(s.local.PeekDelayed(a), a)
	}
	return s.call(s.r.ownerOf(s.used), Request{Op: OpPeekDelayed, Tube: []byte(s.used)}, a, jobAnswer)
}

func (s *Session) PeekBuried(a *engine.Answer) bool {
	if s.local != nil {
		return s.fenceHere(s.local.PeekBuried(a), a)
	}
	return s.call(s.r.ownerOf(s.used), Request{Op: OpPeekBuried, Tube: []byte(s.used)}, a, jobAnswer)
}

func (s *Session) JobStats(id uint64, a *engine.Answer) bool {
	if s.local != nil {
		return s.fenceHere(s.local.JobStats(id, a), a)
	}
	return s.callByID(Request{Op: OpStatsJob, ID: id}, a, func(it *Item, a *engine.Answer) {
		a.OK, a.JobStats = it.Reply.Status == StatusOK, it.Reply.JobStats
	})
}

func (s *Session) TubeStats(tube []byte, a *engine.Answer) bool {
	if s.local != nil {
		return s.fenceHere(s.local.TubeStats(tube, a), a)
	}
	return s.call(s.r.ownerOf(string(tube)), Request{Op: OpStatsTube, Tube: tube}, a, func(it *Item, a *engine.Answer) {
		a.OK, a.TubeStats = it.Reply.Status == StatusOK, it.Reply.TubeStats
	})
}

func (s *Session) PauseTube(tube []byte, d time.Duration, a *engine.Answer) bool {
	if s.local != nil {
		return s.local.PauseTube(tube, d, a)
	}
	return s.call(s.r.ownerOf(string(tube)), Request{Op: OpPauseTube, Tube: tube, Delay: uint32(d / time.Second)}, a, okAnswer)
}

func (s *Session) Stats(a *engine.Answer) bool {
	if s.local != nil {
		return s.fenceHere(s.local.Stats(a), a)
	}
	if s.r.groups() == 1 {
		return s.call(0, Request{Op: OpStats}, a, func(it *Item, a *engine.Answer) { a.Stats = it.Reply.Stats })
	}
	return s.fanOut(OpStats, func(parts []fanPart, a *engine.Answer) {
		stats := make([]store.Stats, len(parts))
		for i, p := range parts {
			stats[i] = p.stats
		}
		a.Stats = SumStats(stats...)
		a.Stats.Waiting = s.r.waiting.Load() // this member's sessions in a reserve (5.5)
	})
}

// fanPart is one group's part of a command asked of every group, copied
// from its reply.
type fanPart struct {
	status Status
	stats  store.Stats
	tubes  []TubeStamp
}

// fanOut asks every group for its part of op (stats, list-tubes: 5.5)
// and answers with what merge makes of the parts, in the groups' order,
// once all have come; a group whose leader did not answer in time fails
// the command (INTERNAL_ERROR: a partial sum would be a wrong reply).
func (s *Session) fanOut(op Op, merge func(parts []fanPart, a *engine.Answer)) bool {
	s.burnIDs()
	n := s.r.groups()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	seq := s.await()
	parts := make([]fanPart, n)
	var mu sync.Mutex
	left := n
	for g := range n {
		s.touch(uint16(g))
		partSeq := seq
		if g > 0 {
			partSeq = s.next()
		}
		s.r.link.Request(s.id, uint16(g), partSeq, Request{Op: op}, func(it *Item) {
			p := fanPart{status: it.Reply.Status, stats: it.Reply.Stats}
			for _, t := range it.Reply.Tubes {
				p.tubes = append(p.tubes, TubeStamp{Name: bytes.Clone(t.Name), Stamp: t.Stamp})
			}
			mu.Lock()
			parts[g] = p
			left--
			last := left == 0
			mu.Unlock()
			if !last {
				return
			}
			var a engine.Answer
			if i := slices.IndexFunc(parts, func(p fanPart) bool { return p.status != StatusOK }); i >= 0 {
				failed(op, parts[i].status, &a)
			} else {
				merge(parts, &a)
			}
			s.deliver(seq, &a)
		})
	}
	return false
}

// AckNeeded: a remote session's replies come acknowledged, but those of
// commands run here (runHere) wait for their group's log.
func (s *Session) AckNeeded() (store.AckSource, uint64) {
	if s.local != nil {
		return s.local.AckNeeded()
	}
	return s.lastHere.acks, s.lastHere.pos
}

// Close ends the session: its client here closes, or its owner client at
// the leader does (its reservations go back) and its references go.
func (s *Session) Close() {
	s.r.mu.Lock()
	delete(s.r.open, s)
	s.r.mu.Unlock()
	if s.local != nil {
		s.local.Close()
		return
	}
	s.burnIDs()
	s.sendMu.Lock()
	s.ended = true // nothing more sent after the closes below
	s.sendMu.Unlock()
	s.r.remote.Add(-1)
	s.handOff.Lock()
	if s.reserving.Swap(0) != 0 {
		s.r.waiting.Add(-1)
	}
	if cr := s.cross.Swap(nil); cr != nil && cr.cancel() {
		s.r.waiting.Add(-1)
	}
	s.handOff.Unlock()
	for _, g := range s.closesIn() {
		s.closeIn(g)
	}
	s.r.changeRefs(s.used, -1, 0, nil)
	for _, w := range s.watched {
		s.r.changeRefs(w, 0, -1, nil)
	}
}

// closesIn are the groups the session's close goes to: those its items
// went to, and those tubes moved to from them, where a move may have
// given it a reservation of a job it held (Server.HolderClients).
func (s *Session) closesIn() []uint16 {
	in := slices.Clone(s.touched)
	for g := range s.r.groups() {
		if s.reached[g/64].Load()&(1<<(g%64)) != 0 && !slices.Contains(in, uint16(g)) {
			in = append(in, uint16(g))
		}
	}
	for _, g := range in { // the groups it adds need no look: movedFrom goes on from them
		in = addGroups(in, s.r.movedFrom(g))
	}
	return in
}

// quietHere reports whether the session's next step in group g may be
// taken on this member's store at once: the member serves g, does not
// hold its fast path (a handover), and nothing of the session is on its
// way anywhere (a burn, an answer awaited), so nothing can overtake it.
func (s *Session) quietHere(g uint16) bool {
	r := s.r
	if s.burning.Load() != 0 || r.heldLocal(g) {
		return false
	}
	// This member only while it serves, and once its resync has taken
	// the calls pending (linkLeader): a command run here before would
	// overtake the member's references and the calls made before it.
	if lead, ok := r.linkLeader(g); !ok || lead != r.cfg.Self {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.awaited) == 0
}

// closeIn ends the session in group g: its owner client there closes and
// its jobs go back. When it may (quietHere), at once, as runHere runs a
// command: the item would go through the member's own loop, and a
// command of another session run here meanwhile (a stats-job after this
// one's quit, beanstalkd's jobs back at once) would overtake it.
func (s *Session) closeIn(g uint16) {
	r := s.r
	if s.quietHere(g) {
		r.link.Closed(s.id, g)
		r.server.closeOwner(ownerKey{member: r.cfg.Self, session: s.id, group: g}, 0)
		return
	}
	r.link.Close(s.id, g)
}

// JobReserved implements store.Notifier for a local session: its blocked
// reserve got j.
func (s *Session) JobReserved(j *store.Job) {
	s.answers.Answered(engine.Answer{Job: j, Reserve: store.Reserved})
}

// WaitEnded implements store.Notifier for a local session: its blocked
// reserve ended empty.
func (s *Session) WaitEnded(res store.ReserveResult) {
	s.answers.Answered(engine.Answer{Reserve: res})
}

// String names a local session, for the store's refusal to reset under
// a holder (store.Store.Reset).
func (s *Session) String() string { return fmt.Sprintf("this member's session %d (one group)", s.id) }
