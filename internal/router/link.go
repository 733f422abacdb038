package router

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/atomicmax"
	"github.com/sproutmq/sprout/store"
)

// Link is a member's side of the commands stream: its sessions' requests
// to groups led by other members go out through it, and the replies and
// events come back to the callbacks they were sent with (docs/design/
// shards.md 5.9). It knows nothing of sessions but their ids and the
// sequences they number their items with, per group.
//
// Each call stays pending until its answer comes. When a group's leader
// changes (LeaderChanged), every pending call of the group goes again,
// in the order it was made, to the new leader: a request whose answer
// was lost with the old leader's connection is answered by the new one
// (exactly once, by its request key: 5.6). A call for a group
// whose leader is unknown waits for one. An answer for a call no longer
// pending (its session ended, or it was answered already) is dropped,
// and an offer in it declined, so no session holds a job it did not get.
type Link struct {
	cfg LinkConfig

	// resending makes resends one at a time (resendLocked), so that each
	// posts its calls in order; LeaderChanged holds it from dropping a
	// group's refs items to resending its calls, so that no Retry sends
	// one before the sync.
	resending sync.Mutex

	mu sync.Mutex
	// sessions are each session's pending calls in a group, in the order
	// made: an answer finds its call there (mostly the oldest: a leader
	// answers a session's requests in order), and a session's close finds
	// its own without looking at every call (a client that connects for
	// each command closes as often as it asks).
	sessions map[sessionKey][]*call // guarded by mu
	number   uint64                 // guarded by mu: the last request number given
	made     uint64                 // guarded by mu: the calls made, for their order
	// requests, resent and expired count calls made (requests only),
	// sent again and given up (Stats).
	requests, resent, expired atomic.Uint64

	// rerouting are, by session, the calls that go again where their
	// tubes moved (rerouteUnlock), and the session's calls naming a tube made
	// meanwhile: one timer sends them all, in the order made, so neither
	// timers racing nor a call made meanwhile reorder them. Guarded by mu.
	rerouting map[uint64]*rerouteQueue
	// lastRouted is, by session and tube, the session's newest pending
	// call routed by that tube (RequestRouted): a call of the tube routed
	// to another group waits behind it (start), or a put routed to the
	// tube's new group would land before one its old group answers
	// StatusWrongGroup later. Guarded by mu.
	lastRouted map[tubeKey]*call

	// unsent holds the groups with a call not taken: Retry looks for
	// such calls only then, not at every tick among every waiting reserve.
	unsent map[uint16]bool // guarded by mu

	// stamp is the latest tube creation stamp a reply brought (5.5): each
	// request and refs item carries it, so a tube it makes in any group
	// is stamped after every tube this member has seen made.
	stamp atomic.Uint64

	// closed are the sessions' closes and declines of the last
	// closeRecall, oldest first, sent again to a group's new leader
	// (LeaderChanged).
	closed []closedSession // guarded by mu
	// unposted holds the groups with a close or a decline not taken (no
	// leader known, a full queue): Retry sends the group's recalled ones
	// again. Without it, a close made while the group's leader was not
	// known for a moment (its reports stale, on a member that has just
	// resumed from a stop) reached it only with the next leader change,
	// and the session's owner client stayed there meanwhile.
	unposted map[uint16]bool // guarded by mu
	// cancels are each session's last cancels in a group, of the last
	// closeRecall, sent again with the recalled closes: one lost (not
	// taken, or with a broken stream) would leave the wait open at the
	// leader, and the session's later requests to the group behind it,
	// or the job a take got with its owner client. A few a session
	// (recentCancels), so a busy reserve's cancels keep little history.
	// Guarded by mu.
	cancels map[sessionKey]*recentCancels
	// declines counts the declines among closed: a job handed out
	// looks for its own only when there are some. Changed with mu held;
	// a hand-out on this member's store (Handed) reads it without.
	declines atomic.Int32
	// offered are the offers its waits took of the last closeRecall. A
	// wait sent again (LeaderChanged) to a leader that kept its answer,
	// or that adopted the job with a handover, brings the same offer
	// again: the session has that job, or declined it already, so it is
	// not declined again (handle). Guarded by mu.
	offered recentKeys[offerKey]
	// expiredReserves are the reserves Expire ended at their timeouts of
	// the last closeRecall: a leader still alive may have taken one, and
	// the job it answers with is declined (handle). Guarded by mu.
	expiredReserves recentKeys[callKey]
}

// offerKey is an offer of job to session's wait in a group.
type offerKey struct {
	key       sessionKey
	wait, job uint64
}

// recentKeys are keys kept for closeRecall, oldest first.
type recentKeys[K comparable] struct {
	keys []recentKey[K]
}

type recentKey[K comparable] struct {
	key K
	at  time.Time
}

// add keeps k from now on, forgetting the keys older than closeRecall.
func (r *recentKeys[K]) add(k K) {
	now := time.Now()
	r.forget(now)
	r.keys = append(r.keys, recentKey[K]{k, now})
}

// has reports whether k was added in the last closeRecall.
func (r *recentKeys[K]) has(k K) bool {
	r.forget(time.Now())
	return slices.ContainsFunc(r.keys, func(e recentKey[K]) bool { return e.key == k })
}

// take reports whether k was added in the last closeRecall, and forgets
// it.
func (r *recentKeys[K]) take(k K) bool {
	r.forget(time.Now())
	i := slices.IndexFunc(r.keys, func(e recentKey[K]) bool { return e.key == k })
	if i < 0 {
		return false
	}
	r.keys = slices.Delete(r.keys, i, i+1)
	return true
}

// forget drops the keys added more than closeRecall before now.
func (r *recentKeys[K]) forget(now time.Time) {
	i := 0
	for i < len(r.keys) && now.Sub(r.keys[i].at) > closeRecall {
		i++
	}
	r.keys = r.keys[i:]
}

// closedSession is a session's close in a group, or its decline of a job
// (not 0), and when.
type closedSession struct {
	key  sessionKey
	job  uint64
	wait uint64
	at   time.Time
	// carried: a decline CloseMoved sent on to where its tube went, once:
	// carried again later, it could take back the job the session was
	// handed there since.
	carried bool
}

// item is the close or the decline, as sent.
func (c closedSession) item() Item {
	if c.job != 0 {
		return Item{Kind: KindDecline, Group: c.key.group, Session: c.key.session, Decline: Decline{Wait: c.wait, Job: c.job}}
	}
	return Item{Kind: KindClose, Group: c.key.group, Session: c.key.session}
}

// rerouteQueue is one session's calls waiting to go again (Link.rerouting),
// and whether a timer is set to send them (one sends at a time: sending).
// behind, if set, is the call they wait for the answer of, pending in
// another group (start); its answer, other than StatusWrongGroup, sends
// them (releaseLocked).
type rerouteQueue struct {
	calls   []*call
	armed   bool
	behind  *call
	sending bool // a rerouteDue sends calls of it, the lock let go
}

// tubeKey is a session and a tube's name's hash (tubeSeed): the key of
// Link.lastRouted.
type tubeKey struct {
	session uint64
	tube    uint64
}

// tubeSeed hashes the tubes routed calls name (tubeKey): a hash, not the
// name, so that a routed call costs no copy of it. Two tubes of one
// hash only have one's call wait for the other's answer.
var tubeSeed = maphash.MakeSeed()

// recentCancels are a session's last cancels in a group, oldest first
// (a zero one: none): a reserve across groups that starts over cancels a
// wait and a take there, and the waits of each start, which a stream
// broken meanwhile may all have lost.
type recentCancels [4]cancelled

// add keeps c as the newest, forgetting the oldest if need be.
func (r *recentCancels) add(c cancelled) {
	copy(r[:], r[1:])
	r[len(r)-1] = c
}

// cancelled is a session's cancel of its wait id (0: a reserve or a
// take) of sequence seq in a group, and when.
type cancelled struct {
	seq  uint32
	wait uint64
	at   time.Time
}

// item is the cancel of key's session in its group, as sent.
func (c cancelled) item(key sessionKey) Item {
	return Item{Kind: KindCancel, Group: key.group, Session: key.session, Seq: c.seq, Wait: Wait{ID: c.wait}}
}

// LinkConfig is what a Link needs of the member.
type LinkConfig struct {
	// Leader is the member leading group g, and whether one is known.
	Leader func(g uint16) (member uint64, ok bool)
	// Send queues a payload of items for member to, without blocking;
	// false if it could not: the call stays pending and goes again when
	// the group's leader changes, or when Resend is called.
	Send func(to uint64, payload []byte) bool
	// AnswersHeld reports whether member answers OpHeld requests (it
	// speaks protocol 6: replication.Host.AnswersHeld). One that does not
	// would refuse the payload, and with it its stream, so such a request
	// for a group it leads is not sent: it ends as StatusUnknown. Nil:
	// every member does.
	AnswersHeld func(member uint64) bool
	// SyncRefs, if set, sends group's leader all of the member's
	// references to its tubes (Refs with Sync), which set what every
	// refs item LeaderChanged drops would have: LeaderChanged calls it
	// after the drop and before the calls it sends again, holding no
	// lock but the one that keeps resends apart (resending), so it may
	// call Refs and take locks of its own around it.
	SyncRefs func(group uint16)
	// Marked, if set, is called by LeaderChanged once the group's pending
	// calls are marked to go again and the sync is made (SyncRefs),
	// before they are sent again. A Leader that names a new leader only
	// from then (the Router's linkLeader) keeps a call made as the change
	// is learned, or while the sync is made, from reaching the new leader
	// ahead of the sync and of the calls sent again: until then it waits,
	// as for a leader not known, and goes after them. The sync itself,
	// made before, waits too, and goes first (postCall).
	Marked func(group uint16)
}

// sessionKey names a session in a group.
type sessionKey struct {
	session uint64
	group   uint16
}

// callKey names an answer: the session, the group and the sequence.
type callKey struct {
	session uint64
	group   uint16
	seq     uint32
}

// call is a request or a wait waiting for its answer.
type call struct {
	key  callKey
	n    uint64 // when it was made: resends go in this order
	kind Kind   // its item's: a request, a wait or refs
	wait uint64 // a wait's id
	// sync: refs of Refs.Sync, which carry all the member's counts, those
	// of the refs items made before the session calls pending too: while
	// it is not taken, no session's call of its group goes, whenever
	// made (postCall).
	sync bool
	// payload is its item, encoded once: it is sent again as it is after
	// a leader change, but for a reserve's bounds (sendPayload). Nil if
	// the item does not encode (it is never sent).
	payload []byte
	// posted: postCall looked at it before, so that a post now is a
	// resend (a leader change, a refusal, a queue that was full, an
	// older call not taken). Guarded by the Link's mu.
	posted bool
	// done takes the answer: a reply to a request, an event to a wait.
	done func(*Item)
	// sent: the leader known when it was last posted took it. One not
	// taken (no leader known, a full queue, a leader that did not serve
	// yet: StatusNotLeader) goes again at Retry.
	sent bool
	// taken counts the leaders that took it and did not refuse it: with
	// none, it never ran (Expire).
	taken int
	// takenAt is when a leader first took it of those that did not
	// refuse it (zero: none): the one that may have run it first, whose
	// run starts its key's keeping (resendWithin). Resends to the same
	// or a next leader keep it.
	takenAt time.Time
	// made is when it was made; op and timeout are a request's, for
	// Expire: a reserve ends at its timeout when no leader answers.
	made    time.Time
	op      Op
	timeout time.Duration
	// soon, with hasSoon, is a reserve's SoonIn: a job its session holds
	// elsewhere comes near its TTR's end then, and the reserve ends with
	// DEADLINE_SOON when no leader answers (Expire), as a leader's would.
	soon    time.Duration
	hasSoon bool
	// route, if set, is where a request answered StatusWrongGroup (its
	// tube moving between groups) goes again, and with which sequence
	// (RequestRouted); movedAt is when the first such answer came.
	route   func(req *Request, post func(group uint16, seq uint32))
	movedAt time.Time
	// tube is a routed call's tube's hash (tubeKey).
	tube uint64
}

// The statuses of the replies Expire makes for the calls it gives up on
// (docs/design/shards.md 5.7). They never go on the wire.
const (
	// StatusNoLeader: no leader took the request, or each refused it: it
	// did not run.
	StatusNoLeader Status = 0x80 + iota
	// StatusUnknown: a leader took the request and was lost before it
	// answered: it may have run.
	StatusUnknown
)

// NewLink returns a link of cfg.
func NewLink(cfg LinkConfig) *Link {
	// Request numbers start anywhere: with the member, a number keys its
	// request in a group's table of outcomes (5.6), which outlives this
	// process.
	return &Link{cfg: cfg, sessions: make(map[sessionKey][]*call),
		unsent: make(map[uint16]bool), unposted: make(map[uint16]bool), cancels: make(map[sessionKey]*recentCancels),
		rerouting: make(map[uint64]*rerouteQueue), lastRouted: make(map[tubeKey]*call),
		number: rand.Uint64() >> 1}
}

// Request sends req for session's group, as its item of sequence seq;
// done is called once with the reply, on the goroutine Handle is called
// on. The request's Number is the link's next.
func (l *Link) Request(session uint64, group uint16, seq uint32, req Request, done func(*Item)) {
	l.RequestRouted(session, group, seq, req, nil, done)
}

// RequestRouted is Request for a request that route sends again when its
// group answers StatusWrongGroup (its tube is moving between groups:
// docs/design/shards.md 3.3): after moveRetry, route calls post with the
// group and the sequence it goes with then (as one step with the
// session's other items: see Session.post), in the order made with the
// session's others going again and those made meanwhile (rerouting),
// until moveWait has passed
// since the first such answer, after which done gets StatusNoLeader (the
// request did not run). route is called on a goroutine of the Link's;
// nil hands the answer to done, as Request does.
func (l *Link) RequestRouted(session uint64, group uint16, seq uint32, req Request, route func(req *Request, post func(uint16, uint32)), done func(*Item)) {
	l.mu.Lock()
	l.number++
	req.Number = l.number
	l.mu.Unlock()
	req.Stamp = l.stamp.Load()
	l.start(Item{Kind: KindRequest, Group: group, Session: session, Seq: seq, Request: req}, route, done)
}

// How a request whose tube is moving is sent again (RequestRouted): every
// moveRetry, for at most moveWait (a move freezes its tube while its jobs
// are copied, milliseconds for thousands: internal/member's tubemoves.go).
const (
	moveRetry = 10 * time.Millisecond
	moveWait  = 5 * time.Second
)

// Wait sends a wait across groups for session's group; done is called
// with the event that ends it, unless Cancel ends it first.
func (l *Link) Wait(session uint64, group uint16, seq uint32, w Wait, done func(*Item)) {
	l.start(Item{Kind: KindWait, Group: group, Session: session, Seq: seq, Wait: w}, nil, done)
}

// Refs sends the member's references to group's tubes as its item of
// sequence seq (the member's own, session 0); done is called once with
// the reply. Unlike a request, refs are not sent again to a new leader
// (LeaderChanged drops them): the router sends the new leader all of
// them at once (Refs.Sync, LinkConfig.SyncRefs), which sets what every
// dropped one would have.
func (l *Link) Refs(group uint16, seq uint32, r Refs, done func(*Item)) {
	r.Stamp = l.stamp.Load()
	l.start(Item{Kind: KindRefs, Group: group, Seq: seq, Refs: r}, nil, done)
}

// Cancel ends session's wait id in group (sequence seq): its done is not
// called; an offer already on its way is declined when it comes. The
// cancel is recalled, as a close is (cancels), and names the wait's
// sequence, so one sent again ends that wait alone.
func (l *Link) Cancel(session uint64, group uint16, seq uint32, id uint64) {
	sk, c := sessionKey{session, group}, cancelled{seq: seq, wait: id, at: time.Now()}
	l.mu.Lock()
	l.dropLocked(l.findLocked(callKey{session, group, seq}))
	rc := l.cancels[sk]
	if rc == nil {
		rc = new(recentCancels)
		l.cancels[sk] = rc
	}
	rc.add(c)
	l.mu.Unlock()
	l.postRecalled(group, c.item(sk))
}

// Decline gives back job, which group offered session's wait id after
// the session stopped waiting (docs/design/shards.md 6.3): the group puts
// it back as if never reserved.
func (l *Link) Decline(session uint64, group uint16, wait, job uint64) {
	l.postRecalled(group, l.declined(session, group, wait, job))
}

// declined is the decline of job, offered to session's wait id in group,
// remembered for closeRecall: sent again to the group's next leader.
func (l *Link) declined(session uint64, group uint16, wait, job uint64) Item {
	c := closedSession{key: sessionKey{session, group}, job: job, wait: wait, at: time.Now()}
	l.mu.Lock()
	l.recallLocked(c)
	l.mu.Unlock()
	return c.item()
}

// recallLocked keeps c for closeRecall, forgetting what is older. l.mu
// must be held.
func (l *Link) recallLocked(c closedSession) {
	i := 0
	for i < len(l.closed) && c.at.Sub(l.closed[i].at) > closeRecall {
		if l.closed[i].job != 0 {
			l.declines.Add(-1)
		}
		i++
	}
	l.closed = append(l.closed[i:], c)
	if c.job != 0 {
		l.declines.Add(1)
	}
}

// Handed is handedLocked for a job handed out on this member's own store,
// not through the Link (Session.runHere).
func (l *Link) Handed(session uint64, group uint16, job uint64) {
	if l.declines.Load() == 0 {
		// None to forget: the decline of a job this member hands out
		// again was counted before the job went back to its store.
		return
	}
	l.mu.Lock()
	l.handedLocked(sessionKey{session, group}, job)
	l.mu.Unlock()
}

// handedLocked forgets session's declines of job in group: it has the
// job now (handed out again), and a decline sent again to a new leader
// would take it back. Only those of the last declineRecall are sent
// again, so only they are looked at, newest first: this runs for every
// job handed out. l.mu must be held.
func (l *Link) handedLocked(key sessionKey, job uint64) {
	if l.declines.Load() == 0 {
		return
	}
	now := time.Now()
	for i := len(l.closed) - 1; i >= 0 && now.Sub(l.closed[i].at) <= declineRecall; i-- {
		if c := l.closed[i]; c.key == key && c.job == job {
			l.closed = slices.Delete(l.closed, i, i+1)
			l.declines.Add(-1)
		}
	}
}

// Close tells group that session ended: its owner client there closes and
// its jobs go back. Its pending calls of the group are dropped.
func (l *Link) Close(session uint64, group uint16) {
	l.Closed(session, group)
	l.postRecalled(group, Item{Kind: KindClose, Group: group, Session: session})
}

// postRecalled posts it, a close or a decline the Link recalls, and has
// the group's next Retry send the recalled ones again if it was not
// taken.
func (l *Link) postRecalled(group uint16, it Item) {
	if !l.post(group, it) {
		l.markUnposted(group)
	}
}

// markUnposted has the group's next Retry post its recalled closes and
// declines again.
func (l *Link) markUnposted(group uint16) {
	l.mu.Lock()
	l.unposted[group] = true
	l.mu.Unlock()
}

// Closed is Close but for the item: the session's owner client in group
// was closed on this member, which leads the group (Session.Close). The
// close is still recalled, to go to the group's next leader.
func (l *Link) Closed(session uint64, group uint16) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sk := sessionKey{session, group}
	calls := l.sessions[sk]
	delete(l.sessions, sk)
	for _, c := range calls {
		l.unroutedLocked(c)
		l.releaseLocked(c) // to end as the session's closed: StatusNoLeader
	}
	delete(l.cancels, sk) // the close ends its waits too
	l.recallLocked(closedSession{key: sk, at: time.Now()})
}

// CloseMoved recalls the closes and declines of group from's sessions
// under each group in to, where tubes of from moved, and sends them
// there: a tube's move gives the reservations of its jobs to their
// sessions' owner clients in the group it moves to
// (Server.HolderClients), and a session that closed, or declined a job
// offered, while its member did not know of the move yet did so only
// where it had been: a decline that reached the source after its export
// left the job reserved in the destination for a session that never had
// it. Called as the member learns of a move (Router.Replaced); a close or
// decline that comes before the import has the job go over ready (the
// Server notes it for Adopt).
func (l *Link) CloseMoved(from uint16, to []uint16) {
	l.mu.Lock()
	now := time.Now()
	recalled := make(map[sessionKey]bool)
	var sessions []uint64
	var declines []closedSession
	for i, c := range l.closed {
		switch {
		case now.Sub(c.at) > closeRecall:
		case c.job != 0:
			if c.key.group == from && !c.carried {
				declines = append(declines, c)
				l.closed[i].carried = true
			}
		default:
			if c.key.group == from {
				sessions = append(sessions, c.key.session)
			}
			recalled[c.key] = true
		}
	}
	for _, g := range to {
		for _, session := range sessions {
			if k := (sessionKey{session, g}); !recalled[k] {
				recalled[k] = true
				l.recallLocked(closedSession{key: k, at: now})
			}
		}
		for _, d := range declines {
			d.key.group, d.at, d.carried = g, now, true
			l.recallLocked(d)
		}
	}
	l.mu.Unlock()
	if len(sessions) == 0 && len(declines) == 0 {
		return
	}
	for _, g := range to {
		l.postClosed(g)
	}
}

// start makes it pending and sends it if the group's leader is known.
func (l *Link) start(it Item, route func(req *Request, post func(uint16, uint32)), done func(*Item)) {
	c := &call{key: callKey{it.Session, it.Group, it.Seq}, kind: it.Kind, wait: it.Wait.ID, done: done,
		made: time.Now(), op: it.Request.Op, timeout: it.Request.Timeout, route: route,
		soon: it.Request.SoonIn, hasSoon: it.Request.SoonElsewhere, sync: it.Kind == KindRefs && it.Refs.Sync}
	// Sized for the request's fixed fields, tube and body: growing from
	// nil took most of the encoding's time.
	c.payload, _ = AppendItem(make([]byte, 0, 96+len(it.Request.Tube)+len(it.Request.Body)), &it)
	if it.Kind == KindRequest {
		l.requests.Add(1)
	}
	if route != nil {
		c.tube = maphash.Bytes(tubeSeed, it.Request.Tube)
	}
	l.mu.Lock()
	l.made++
	c.n = l.made
	if q := l.rerouting[it.Session]; q != nil && route != nil {
		// Behind the session's calls going again where their tubes
		// moved: it goes with them, after them.
		c.movedAt = c.made
		q.calls = append(q.calls, c)
		l.mu.Unlock()
		return
	}
	if prev := l.lastRouted[tubeKey{it.Session, c.tube}]; route != nil && prev != nil && prev.key.group != it.Group {
		// The member learned of the tube's move after the session's
		// last call of it went: that one may yet be answered
		// StatusWrongGroup and go again, and this one goes after it.
		c.movedAt = c.made
		l.rerouting[it.Session] = &rerouteQueue{calls: []*call{c}, behind: prev}
		l.mu.Unlock()
		return
	}
	l.addLocked(c)
	l.mu.Unlock()
	l.postCall(c)
}

// postCall sends c to its group's leader, noting whether it was taken:
// sent first, so that a refusal answered before post returns is kept.
// While an older call of its session in the group is not taken, c waits
// too, and goes after it: a leader runs a session's requests in the
// order they come, and takes one below the last it ran for a resend. A
// call no longer pending (answered, or cancelled, since a resend listed
// it) is not sent: a reserve run again would hold a job for a session
// that no longer waits for it (docs/design/shards.md 6.5).
func (l *Link) postCall(c *call) {
	l.mu.Lock()
	if l.findLocked(c.key) != c {
		l.mu.Unlock()
		return
	}
	again := c.posted
	c.posted = true
	if c.kind == KindRequest && c.taken > 0 && keyed(c.op) && !c.takenAt.IsZero() && time.Since(c.takenAt) >= resendWithin {
		// A leader that took it may have run it, and the group's next
		// leader answers it from the table of outcomes only while its
		// key is kept (5.6): sent later, it could run again. Its
		// outcome is unknown, as when no leader comes (Expire).
		l.dropLocked(c)
		l.releaseLocked(c)
		l.mu.Unlock()
		l.expired.Add(1)
		k := c.key
		c.done(statusReply(k, StatusUnknown))
		return
	}
	for _, older := range l.sessions[sessionKey{c.key.session, c.key.group}] {
		if older == c {
			break
		}
		if !older.sent {
			c.sent = false // for Retry, after it
			l.unsent[c.key.group] = true
			l.mu.Unlock()
			return
		}
	}
	if c.key.session != 0 {
		// The member's references (session 0's refs items) made before
		// c go before it too: a session's first stats-tube must count
		// the use and watch its connection made (docs/design/shards.md
		// 5.4), as one server's does. So does a sync made after c (a
		// new leader's, LeaderChanged): it stands for the refs items
		// it replaced, and c, sent again, must find the tubes they keep.
		for _, older := range l.sessions[sessionKey{0, c.key.group}] {
			if (older.n < c.n || older.sync) && !older.sent {
				c.sent = false
				l.unsent[c.key.group] = true
				l.mu.Unlock()
				return
			}
		}
	}
	c.sent = true
	c.taken++
	lastTaken := c.takenAt
	if c.takenAt.IsZero() {
		c.takenAt = time.Now()
	}
	l.mu.Unlock()
	to, known := l.cfg.Leader(c.key.group)
	if known && c.op == OpHeld && l.cfg.AnswersHeld != nil && !l.cfg.AnswersHeld(to) {
		l.mu.Lock()
		pending := l.findLocked(c.key) == c // not answered meanwhile, by a leader before
		if pending {
			l.dropLocked(c)
		}
		l.mu.Unlock()
		if !pending {
			return
		}
		k := c.key
		c.done(statusReply(k, StatusUnknown))
		return
	}
	if !known || c.payload == nil || !l.cfg.Send(to, c.sendPayload(again, time.Now())) {
		l.mu.Lock()
		c.sent = false
		c.taken--
		c.takenAt = lastTaken
		l.unsent[c.key.group] = true
		l.mu.Unlock()
	}
}

// sendPayload is c's item as it goes at now, posted before if again. A
// reserve's timeout and DEADLINE_SOON bound (SoonIn) are durations the
// leader counts from when it takes the reserve, and the session from
// when it made it: posted again (to a group's next leader, after a
// refusal, or later than made for any other reason), a reserve carries
// what is left of them. Else the next leader waits them out anew: its
// TIMED_OUT comes late by the failover's length, and its DEADLINE_SOON
// after the job it warns of ran out its TTR in its own group. A reserve
// without a timeout stays so. Only those bytes change: a leader matches a
// request it took before by its session and sequence (Server.request),
// so one sent again to the leader it waits at still joins that wait,
// which keeps its own bounds; and a reserve has no key in the group's
// table of outcomes (keyed).
func (c *call) sendPayload(again bool, now time.Time) []byte {
	if !again || c.kind != KindRequest || c.op != OpReserve || c.timeout < 0 && !c.hasSoon {
		return c.payload
	}
	elapsed := now.Sub(c.made)
	payload := c.payload
	_ = Each(c.payload, 0, func(it *Item) { // a reserve has no body
		if c.timeout >= 0 {
			it.Request.Timeout = max(c.timeout-elapsed, 0)
		}
		if c.hasSoon {
			it.Request.SoonIn = max(c.soon-elapsed, 0)
		}
		if p, err := AppendItem(make([]byte, 0, len(c.payload)), it); err == nil {
			payload = p
		}
	})
	return payload
}

// resendWithin bounds how long after a leader took a change (keyed) it
// may be sent to a leader again: the group keeps its key for
// store.DedupTTL from its batch's clock, which may come before the take
// (a batch begun earlier) and runs ahead of it on a next leader whose
// clock is ahead. Half leaves 5 s for those; a failover's resend comes
// within an election timeout and LeaderWait (2 s each) of the loss.
const resendWithin = store.DedupTTL / 2

// keyed reports whether op is a change a leader makes with the request's
// key (5.6), which a leader that took it may have made.
func keyed(op Op) bool {
	switch op {
	case OpPut, OpDelete, OpRelease, OpBury, OpKick, OpKickJob, OpPauseTube:
		return true
	}
	return false
}

// post sends it to its group's leader, if one is known, and reports
// whether it was taken: a call stays pending when it was not (Retry and
// LeaderChanged send it again); an item that waits for no answer is lost
// (the leader to come has no wait or client of the session to end).
func (l *Link) post(group uint16, it Item) bool {
	payload, err := AppendItem(nil, &it)
	if err != nil {
		return false
	}
	to, ok := l.cfg.Leader(group)
	return ok && l.cfg.Send(to, payload)
}

// LeaderChanged sends group's pending calls again, in order, to its
// leader now (if one is known); and the closes of the group's sessions,
// and their declines of jobs offered, of the last closeRecall, which its
// last leader may have listed as holding jobs after they came
// (Server.Adopt). In this order:
//
//  1. It drops the group's pending refs items (see Refs).
//  2. LinkConfig.SyncRefs, if set, sends the leader all of the member's
//     references to the group's tubes, which set what they would have.
//  3. It sends the closes, declines and cancels the Link recalls.
//  4. It sends the calls again, in the order made; not the sync, unless
//     it was not taken, and then a call waits behind it (postCall). If
//     a recalled item was not taken, the calls wait for the next Retry,
//     which sends those first.
//
// So the member's references reach the leader before its sessions'
// requests sent again (docs/design/shards.md 5.4), as before those made
// later: a stats-tube or pause-tube resent for an empty tube its session
// watches finds the tube, which a new leader knows of from the sync
// alone. And a session's cancel comes before its requests made after it:
// a wait's or a take's job given back at the cancel is not held when the
// session's release of it comes (6.5); the cancelled call itself is
// never sent again. No Retry sends a call between 1 and 4 (resending),
// and a call the session makes meanwhile waits behind those step 1
// marks unsent; one made before step 4, the new leader already known,
// waits if the Leader names it only from LinkConfig.Marked on, which
// comes between 2 and 3.
func (l *Link) LeaderChanged(group uint16) {
	l.resending.Lock()
	l.mu.Lock()
	var refs []*call
	l.eachLocked(group, func(c *call) {
		if c.kind == KindRefs {
			refs = append(refs, c)
		} else {
			// Not taken from now, all of them sent again below (taken
			// stays: a leader that took it may have run it); a call made
			// meanwhile, the leader already known, waits behind them
			// (postCall).
			c.sent = false
			l.unsent[group] = true
		}
	})
	for _, c := range refs {
		l.dropLocked(c)
	}
	l.mu.Unlock()
	if l.cfg.SyncRefs != nil {
		l.cfg.SyncRefs(group)
	}
	if l.cfg.Marked != nil {
		l.cfg.Marked(group)
	}
	if l.postClosed(group) {
		l.resendLocked(group)
	}
	l.resending.Unlock()
}

// postClosed sends group's leader the closes, declines and cancels of
// the group's sessions the Link recalls, and has the next Retry send them
// again if one was not taken; it reports whether all were.
func (l *Link) postClosed(group uint16) bool {
	l.mu.Lock()
	delete(l.unposted, group)
	var again []Item
	now := time.Now()
	for _, c := range l.closed {
		if c.key.group == group && now.Sub(c.at) <= closeRecall && (c.job == 0 || now.Sub(c.at) <= declineRecall) {
			again = append(again, c.item())
		}
	}
	for sk, rc := range l.cancels {
		recalled := false
		for _, c := range rc { // oldest first
			if c.at.IsZero() || now.Sub(c.at) > closeRecall {
				continue
			}
			recalled = true
			if sk.group == group {
				again = append(again, c.item(sk))
			}
		}
		if !recalled {
			delete(l.cancels, sk)
		}
	}
	l.mu.Unlock()
	for i := range again {
		if !l.post(group, again[i]) {
			l.markUnposted(group)
			return false
		}
	}
	return true
}

// Retry sends group's pending calls that were not taken again, in order:
// after a full queue drained, a stream opened, or a leader that did not
// serve yet refused them (StatusNotLeader); and before them its recalled
// closes, declines and cancels, if one was not taken: a session's cancel
// comes before its requests made after it (LeaderChanged).
func (l *Link) Retry(group uint16) {
	l.resending.Lock()
	defer l.resending.Unlock()
	l.mu.Lock()
	again := l.unposted[group]
	l.mu.Unlock()
	if again && !l.postClosed(group) {
		return // the calls wait behind them
	}
	l.resendLocked(group)
}

// resendLocked sends group's pending calls not taken again, in order
// (LeaderChanged marks all but the refs items so first). Those it sends
// count as not taken until each goes, so that a call made meanwhile waits
// behind them (postCall) and goes at the end, not before the older ones
// the group's leader has not seen. l.resending must be held.
func (l *Link) resendLocked(group uint16) {
	// A second pass sends the calls made while the first's went, held
	// behind them, rather than at the next Retry.
	for pass := 0; pass < 2; pass++ {
		l.mu.Lock()
		if !l.unsent[group] {
			l.mu.Unlock()
			return
		}
		delete(l.unsent, group)
		var calls []*call
		l.eachLocked(group, func(c *call) {
			if !c.sent {
				calls = append(calls, c)
			}
		})
		l.mu.Unlock()
		slices.SortFunc(calls, byMade)
		l.resent.Add(uint64(len(calls)))
		for _, c := range calls {
			l.postCall(c)
		}
	}
}

// byMade orders calls as they were made.
func byMade(a, b *call) int { return cmp.Compare(a.n, b.n) }

// Pending counts the calls waiting for their answers.
func (l *Link) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, calls := range l.sessions {
		n += len(calls)
	}
	return n
}

// DescribePending names the calls waiting for their answers, oldest
// first, then the calls waiting to go again where their tubes moved:
// for an operator, or a test, looking at one that never ends.
func (l *Link) DescribePending(now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var calls []*call
	for _, cs := range l.sessions {
		calls = append(calls, cs...)
	}
	slices.SortFunc(calls, byMade)
	out := make([]string, 0, len(calls))
	for _, c := range calls {
		out = append(out, describeCall("pending", c, now))
	}
	for session, q := range l.rerouting {
		for _, c := range q.calls {
			out = append(out, describeCall("rerouting", c, now)+fmt.Sprintf(" (queue of session %d: armed %v, sending %v, behind a call %v)",
				session, q.armed, q.sending, q.behind != nil))
		}
	}
	return out
}

// describeCall is one line of DescribePending.
func describeCall(state string, c *call, now time.Time) string {
	what := c.kind.String()
	if c.kind == KindRequest {
		what = c.op.String()
	}
	line := fmt.Sprintf("%s: session %d group %d seq %d %s, sent %v, taken %d, made %v ago", state, c.key.session, c.key.group, c.key.seq,
		what, c.sent, c.taken, now.Sub(c.made).Round(time.Millisecond))
	if !c.movedAt.IsZero() {
		line += fmt.Sprintf(", moved %v ago", now.Sub(c.movedAt).Round(time.Millisecond))
	}
	return line
}

// Handle takes a payload of replies and events from member from, and
// hands each to its call's done. An offer for no pending wait is
// declined.
func (l *Link) Handle(from uint64, payload []byte) error {
	return Each(payload, 0, func(it *Item) { l.handle(from, it) })
}

// handle takes one item from member from; those not for a member
// (requests and the like) are ignored.
func (l *Link) handle(from uint64, it *Item) {
	if it.Kind != KindReply && it.Kind != KindEvent {
		return
	}
	if it.Kind == KindReply {
		atomicmax.Uint64(&l.stamp, it.Reply.Stamp)
	}
	key := callKey{it.Session, it.Group, it.Seq}
	l.mu.Lock()
	c := l.findLocked(key)
	refused := it.Kind == KindReply && it.Reply.Status == StatusNotLeader
	if c != nil && c.kind == KindWait && !refused && (it.Kind != KindEvent || it.Event.Wait != c.wait) {
		c = nil // not this wait's end
	}
	if c != nil && it.Kind == KindReply && it.Reply.Status == StatusWrongGroup && c.route != nil {
		l.dropLocked(c)
		l.rerouteUnlock(c)
		return
	}
	if c != nil && refused {
		// Asked of a member that does not serve the group (yet, or
		// any more), or gated by a handover, or whose lease lapsed: a
		// request or a wait pending still, for Retry or the next
		// leader.
		c.sent = false
		c.taken--
		if c.taken <= 0 {
			c.takenAt = time.Time{} // none ran it
		}
		l.unsent[c.key.group] = true
		l.mu.Unlock()
		return
	}
	if c != nil && handsOut(it) && (c.kind == KindWait || reserves(c.op)) {
		l.handedLocked(sessionKey{it.Session, it.Group}, jobOf(it))
	}
	offer := it.Kind == KindEvent && it.Event.Type == EventOffer
	// An offer no wait takes is declined unless a wait took it before;
	// so is a job answered to a reserve Expire ended.
	decline := false
	switch o := (offerKey{sessionKey{it.Session, it.Group}, it.Event.Wait, it.Event.Job.ID}); {
	case offer && c != nil:
		l.offered.add(o)
	case offer:
		decline = !l.offered.has(o)
	case c == nil && it.Kind == KindReply && handsOut(it):
		decline = l.expiredReserves.has(key)
	}
	l.dropLocked(c)
	l.releaseLocked(c)
	l.mu.Unlock()
	switch {
	case c != nil:
		c.done(it)
	case decline:
		d := l.declined(it.Session, it.Group, it.Event.Wait, jobOf(it)) // a reply's Event.Wait is 0
		if !sendItem(l.cfg.Send, from, &d) {
			l.markUnposted(it.Group)
		}
	}
}

// rerouteUnlock sends c, answered StatusWrongGroup, again after
// moveRetry, where its route says then; past moveWait it ends as
// StatusNoLeader. l.mu is held, and unlocked before it returns: c is
// queued under the lock its drop was made under, so that a call of its
// session made meanwhile finds it queued (start), not gone.
func (l *Link) rerouteUnlock(c *call) {
	now := time.Now()
	if c.movedAt.IsZero() {
		c.movedAt = now
	}
	k := c.key
	if now.Sub(c.movedAt) > moveWait {
		l.releaseLocked(c)
		l.mu.Unlock()
		c.done(statusReply(k, StatusNoLeader))
		return
	}
	l.resent.Add(1)
	q := l.rerouting[k.session]
	if q == nil {
		q = &rerouteQueue{}
		l.rerouting[k.session] = q
	}
	q.calls = append(q.calls, c)
	arm := !q.armed
	q.armed = true
	l.mu.Unlock()
	if arm {
		time.AfterFunc(moveRetry, func() { l.rerouteDue(k.session) })
	}
}

// rerouteDue sends session's queued calls again (rerouting), in the order
// made, and those queued while they go; those queued after a new
// StatusWrongGroup wait for its timer.
func (l *Link) rerouteDue(session uint64) {
	l.mu.Lock()
	q := l.rerouting[session]
	q.armed = false
	if b := q.behind; b != nil && l.findLocked(b.key) == b {
		// Still pending in its group (another call's StatusWrongGroup
		// armed this): its answer sends them all.
		l.mu.Unlock()
		return
	}
	if q.sending {
		// A run under way (its lock let go to send) sends them after
		// its own: two at once could send a session's calls out of
		// order, and the first ended the queue the second made.
		l.mu.Unlock()
		return
	}
	q.sending = true
	for !q.armed && len(q.calls) > 0 {
		calls := q.calls
		q.calls = nil
		l.mu.Unlock()
		slices.SortFunc(calls, byMade)
		for _, c := range calls {
			l.routeAgain(c)
		}
		l.mu.Lock()
	}
	q.sending = false
	if !q.armed {
		delete(l.rerouting, session)
	}
	l.mu.Unlock()
}

// routeAgain sends c where its route says now, with the sequence it
// gives; one it gives none (the session closed) ends as StatusNoLeader.
func (l *Link) routeAgain(c *call) {
	k := c.key
	posted := false
	_ = Each(c.payload, math.MaxInt, func(it *Item) { // a put's body was bounded when it was made
		c.route(&it.Request, func(g uint16, seq uint32) {
			it.Group, it.Seq = g, seq
			payload, err := AppendItem(nil, it)
			if err != nil {
				return
			}
			key := callKey{it.Session, g, seq}
			l.mu.Lock()
			c.key, c.payload, c.sent, c.taken, c.takenAt = key, payload, false, 0, time.Time{}
			l.addLocked(c)
			l.mu.Unlock()
			posted = true
			l.postCall(c)
		})
	})
	if !posted {
		c.done(statusReply(k, StatusNoLeader))
	}
}

// statusReply is the reply to call k that no leader answered: status
// alone.
func statusReply(k callKey, status Status) *Item {
	return &Item{Kind: KindReply, Group: k.group, Session: k.session, Seq: k.seq,
		Reply: Reply{Status: status, Result: ResultNone}}
}

// sendItem sends it to member to as a payload of its own.
func sendItem(send func(to uint64, payload []byte) bool, to uint64, it *Item) bool {
	payload, err := AppendItem(nil, it)
	return err == nil && send(to, payload)
}

// addLocked makes c pending, its session's newest in its group.
func (l *Link) addLocked(c *call) {
	sk := sessionKey{c.key.session, c.key.group}
	l.sessions[sk] = append(l.sessions[sk], c)
	if c.route != nil {
		tk := tubeKey{c.key.session, c.tube}
		if last := l.lastRouted[tk]; last == nil || last.n < c.n {
			l.lastRouted[tk] = c
		}
	}
}

// unroutedLocked forgets c, no longer pending, as its session's newest
// call of its tube.
func (l *Link) unroutedLocked(c *call) {
	if tk := (tubeKey{c.key.session, c.tube}); c.route != nil && l.lastRouted[tk] == c {
		delete(l.lastRouted, tk)
	}
}

// releaseLocked sends the calls of c's session that wait for c's answer
// (start), c answered otherwise than StatusWrongGroup, or given up: they
// go where their routes say now, after moveRetry's nothing.
func (l *Link) releaseLocked(c *call) {
	if c == nil {
		return
	}
	session := c.key.session
	if q := l.rerouting[session]; q != nil && q.behind == c && !q.armed {
		q.armed = true
		time.AfterFunc(0, func() { l.rerouteDue(session) })
	}
}

// findLocked is the pending call of key, or nil.
func (l *Link) findLocked(key callKey) *call {
	for _, c := range l.sessions[sessionKey{key.session, key.group}] {
		if c.key.seq == key.seq {
			return c
		}
	}
	return nil
}

// eachLocked calls fn with each of group's pending calls; fn must not
// drop any.
func (l *Link) eachLocked(group uint16, fn func(*call)) {
	for sk, calls := range l.sessions {
		if sk.group == group {
			for _, c := range calls {
				fn(c)
			}
		}
	}
}

// dropLocked ends c (nil: nothing): no longer pending.
func (l *Link) dropLocked(c *call) {
	if c == nil {
		return
	}
	sk := sessionKey{c.key.session, c.key.group}
	calls := l.sessions[sk]
	if i := slices.Index(calls, c); i >= 0 {
		calls = slices.Delete(calls, i, i+1)
	}
	l.unroutedLocked(c)
	if len(calls) == 0 {
		delete(l.sessions, sk)
	} else {
		l.sessions[sk] = calls
	}
}

// Expire gives up on group's calls that waited for a leader longer than
// bound, called while the group has had none since lost (docs/design/
// shards.md 5.7): a request made, or pending when the leader was lost,
// bound or more before now is answered StatusNoLeader if no leader took
// it, else StatusUnknown, and refs as acknowledged (the next leader gets
// every count at once); a reserve ends once its own timeout has passed
// (StatusTimedOut: the group counts as empty), or, sooner, once a job
// its session holds elsewhere comes near its TTR's end (its SoonIn:
// StatusDeadlineSoon, as the group's leader would answer), and one
// without either waits on; a reserve across groups' peek so ends as
// StatusNoLeader or StatusUnknown, the group counting as empty. Waits
// are left to their sessions' timers.
func (l *Link) Expire(group uint16, lost, now time.Time, bound time.Duration) {
	type expired struct {
		c      *call
		status Status
	}
	var done []expired
	l.mu.Lock()
	l.eachLocked(group, func(c *call) {
		if c.kind == KindWait {
			return
		}
		status := StatusUnknown
		switch {
		case c.op == OpReserve && c.kind == KindRequest:
			end, soonFirst := reserveEnd(c.timeout, c.soon, c.hasSoon) // as a leader bounds it
			if end < 0 || now.Sub(c.made) < end {
				return
			}
			status = StatusTimedOut
			if soonFirst {
				status = StatusDeadlineSoon
			}
		case c.op == OpBest && c.kind == KindRequest && peekDue(c, now):
			// A reserve across groups' peek (crossReserve): the group
			// counts as empty once the reserve's own timeout, or its
			// DEADLINE_SOON, is due, as a reserve's group does. A peek
			// reserves nothing.
			if c.taken == 0 {
				status = StatusNoLeader
			}
		case now.Sub(later(c.made, lost)) < bound:
			return
		case c.kind == KindRefs:
			status = StatusOK
		case c.taken == 0:
			status = StatusNoLeader
		}
		done = append(done, expired{c, status})
	})
	l.expiredReserves.forget(time.Now()) // as it runs, whether it adds or not
	for _, e := range done {
		l.dropLocked(e.c)
		l.releaseLocked(e.c)
		if e.status == StatusTimedOut || e.status == StatusDeadlineSoon {
			l.expiredReserves.add(e.c.key)
		}
	}
	l.mu.Unlock()
	l.expired.Add(uint64(len(done)))
	slices.SortFunc(done, func(a, b expired) int { return cmp.Compare(a.c.n, b.c.n) })
	for _, e := range done {
		k := e.c.key
		e.c.done(statusReply(k, e.status))
	}
}

// peekDue reports whether c, a peek, is due to end by the timeout or the
// DEADLINE_SOON bound of its reserve across groups (crossReserve.peekRequest).
func peekDue(c *call, now time.Time) bool {
	end, _ := reserveEnd(c.timeout, c.soon, c.hasSoon)
	return end >= 0 && now.Sub(c.made) >= end
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
