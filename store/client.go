package store

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// Notifier receives the end of a blocked reserve. Its methods are called
// from any goroutine with no store lock held, at most once per wait, and
// must not block.
type Notifier interface {
	// JobReserved delivers the job a blocked reserve obtained; the job is
	// already reserved by the client.
	JobReserved(j *Job)
	// WaitEnded reports a blocked reserve that ended without a job:
	// TimedOut or DeadlineSoon.
	WaitEnded(r ReserveResult)
}

// ReserveResult says how a reserve ended.
type ReserveResult uint8

const (
	Reserved     ReserveResult = iota // a job was reserved
	Waiting                           // blocked: the Notifier will say how it ends
	TimedOut                          // reply TIMED_OUT
	DeadlineSoon                      // reply DEADLINE_SOON
)

// Client is one connection's view of the store: the tube it uses, the
// tubes it watches, and the jobs it has reserved.
type Client struct {
	s      *Store   // immutable
	notify Notifier // immutable

	// Owned by the connection: only its goroutine (event loop) touches these.
	use   *Tube
	watch []*Tube // beanstalkd's order: append, swap-remove
	wait  *waiter // the latest blocked reserve, if any

	// pendingAck is the position its replies so far wait for (PendingAck):
	// raised on the client's goroutine by its own changes, and on any
	// goroutine, under a tube lock, by a job handed to its blocked reserve.
	pendingAck atomic.Uint64

	mu     sync.Mutex
	closed bool // guarded by mu
	// weight is what its use and watch count in current-using and
	// current-watching: 1, or 0 for an owner client (NewOwnerClient);
	// immutable (beside closed, in what would be padding).
	weight int32
	// res holds the client's reservations; guarded by mu. It is made at
	// the first one, so a connection that never reserves does not carry
	// it (96 bytes of the 184 a client would take).
	res *reservations
}

// reservations are the jobs a client holds.
type reservations struct {
	heap jobHeap // by TTR deadline
	// order holds the same jobs, oldest reservation first. Close requeues
	// in this order, as beanstalkd does.
	order jobList
	ttrAt int64 // when ttr is armed for; 0 if not
	ttr   timer // fires at the earliest deadline in heap
}

// reservationsLocked returns c's reservations, making them at the first
// call. c.mu must be held.
func (c *Client) reservationsLocked() *reservations {
	if c.res == nil {
		c.res = &reservations{
			heap: jobHeap{less: delayLess},
			ttr:  newTimer((*ttrTarget)(c)),
		}
	}
	return c.res
}

// NewClient returns a client using and watching "default".
func (s *Store) NewClient(n Notifier) *Client {
	c := new(Client)
	s.InitClient(c, n)
	return c
}

// InitClient makes *c a new client, using and watching "default", as
// NewClient does, for a Client the caller holds by value (the engine keeps
// one inside each connection's session, one allocation instead of two).
// *c must be the zero Client, and must not be copied afterwards.
func (s *Store) InitClient(c *Client, n Notifier) { s.initClient(c, n, 1) }

// NewOwnerClient returns a client for a session of another member
// (docs/design/shards.md 5.1): it holds the tubes it uses and watches,
// as any client does, but does not count in their current-using and
// current-watching, since that member counts its sessions there itself
// (SetRefs).
func (s *Store) NewOwnerClient(n Notifier) *Client {
	c := new(Client)
	s.initClient(c, n, 0)
	return c
}

func (s *Store) initClient(c *Client, n Notifier, weight int32) {
	*c = Client{s: s, notify: n, weight: weight}
	c.use = s.acquireTube([]byte(DefaultTube))
	c.watch = []*Tube{s.acquireTube([]byte(DefaultTube))}
	c.use.mu.Lock()
	c.use.nUsing += int(weight)
	c.use.nWatching += int(weight)
	c.use.mu.Unlock()
}

// UsedTube is the name of the tube puts go to.
func (c *Client) UsedTube() string { return c.use.name }

// Watched lists the watched tube names in beanstalkd's order.
func (c *Client) Watched() []string {
	names := make([]string, len(c.watch))
	for i, t := range c.watch {
		names[i] = t.name
	}
	return names
}

// Use switches the used tube, creating it if needed.
func (c *Client) Use(name []byte) {
	if string(name) == c.use.name {
		return
	}
	t := c.s.acquireTube(name)
	t.mu.Lock()
	t.nUsing += int(c.weight)
	t.mu.Unlock()
	old := c.use
	c.use = t
	old.mu.Lock()
	old.nUsing -= int(c.weight)
	old.mu.Unlock()
	c.s.releaseTube(old)
}

// Settle puts c back as a new client is: using and watching the default
// tube alone, letting go of every other (a router's owner client between
// requests: the session's own references keep the tubes it uses and
// watches, and the owner must keep no other alive).
func (c *Client) Settle() {
	c.Use([]byte(DefaultTube))
	if len(c.watch) == 1 && c.watch[0] == c.s.defaultT {
		return
	}
	c.Watch([]byte(DefaultTube))
	var others []string
	for _, t := range c.watch {
		if t != c.s.defaultT {
			others = append(others, t.name)
		}
	}
	for _, name := range others {
		c.Ignore([]byte(name))
	}
}

// Watch adds a tube to the watch list and returns the list's length.
func (c *Client) Watch(name []byte) int {
	if c.watchIndex(name) >= 0 {
		return len(c.watch)
	}
	t := c.s.acquireTube(name)
	t.mu.Lock()
	t.nWatching += int(c.weight)
	t.mu.Unlock()
	c.watch = append(c.watch, t)
	return len(c.watch)
}

// Ignore drops a tube from the watch list and returns the list's length.
// Ignoring a tube that is not watched succeeds; ignoring the last watched
// tube does not (ok false: NOT_IGNORED).
func (c *Client) Ignore(name []byte) (n int, ok bool) {
	i := c.watchIndex(name)
	if i < 0 {
		return len(c.watch), true
	}
	if len(c.watch) < 2 {
		return len(c.watch), false
	}
	t := c.watch[i]
	last := len(c.watch) - 1
	c.watch[i] = c.watch[last]
	c.watch[last] = nil
	c.watch = c.watch[:last]
	t.mu.Lock()
	t.nWatching -= int(c.weight)
	t.mu.Unlock()
	c.s.releaseTube(t)
	return len(c.watch), true
}

func (c *Client) watchIndex(name []byte) int {
	for i, t := range c.watch {
		if t.name == string(name) {
			return i
		}
	}
	return -1
}

// Put stores a new job with a pre-allocated id (Store.NextID) in the used
// tube. delay and ttr are in seconds; ttr below MinTTR becomes MinTTR. With
// a log whose disk is full it fails with ErrNoSpace and stores nothing.
//
// A body of up to MaxCopiedBody bytes is copied, so the caller may reuse
// its buffer; a longer one is kept, and must not change afterwards.
func (c *Client) Put(id uint64, pri, delay, ttr uint32, body []byte) (*Job, error) {
	now := c.s.now()
	return c.put(wal.Req{}, id, now, now, pri, delay, ttr, body)
}

// PutAt is Put for a job made at created, by the store's clock (Now),
// not now: beanstalkd makes the job when the put's command line arrives,
// so stats-job's age counts from there, however long the body then takes.
// A created later than now (math.MaxInt64: no time noted) is now.
func (c *Client) PutAt(id uint64, created int64, pri, delay, ttr uint32, body []byte) (*Job, error) {
	return c.put(wal.Req{}, id, c.s.now(), created, pri, delay, ttr, body)
}

// put is Put for a request with key (zero: none; dedup.go): its record
// carries it, and the outcome is kept. The job is made at created, and
// put (its delay begins) now.
func (c *Client) put(key wal.Req, id uint64, now, created int64, pri, delay, ttr uint32, body []byte) (*Job, error) {
	t := c.use
	j := newJob(body)
	j.id, j.tube, j.createdAt = id, t, min(created, now)
	j.pri, j.delay, j.ttr = pri, delay, max(ttr, uint32(MinTTR/time.Second))
	j.slot = -1
	t.refs.Add(1) // safe without registryMu: c holds a reference to t
	var hs handoffs
	t.mu.Lock()
	// In the index before its record is logged: compaction (Migrate) looks
	// up the ids its segments name as soon as the record is appended, and
	// must find the job (it then waits for t.mu).
	c.s.insertJobLocked(j)
	if c.s.log != nil {
		j.state, j.deadline = StateReady, 0
		if j.delay > 0 {
			j.state, j.deadline = StateDelayed, now+j.delayNS()
		}
		r := c.s.record(wal.KindFull, j)
		r.Req = key
		if err := c.s.logLocked(c, j, &r); err != nil {
			j.state = StateInvalid // for anyone who found it and waits for t.mu
			c.s.forgetJobLocked(j)
			t.mu.Unlock()
			c.s.releaseTube(t)
			return nil, err
		}
	}
	t.totalJobs++
	c.s.counts.totalJobs.Add(1)
	t.enqueueLocked(j, j.delayNS(), now)
	hs = t.dispatchLocked(now, hs)
	t.mu.Unlock()
	if !key.IsZero() {
		c.keep(key, Outcome{ID: id, Count: 1})
	}
	c.s.complete(hs)
	return j, nil
}

// deadlineSoon reports whether a reserved job is within DeadlineMargin of
// its TTR, and when that moment is (or -1 with no reserved job).
func (c *Client) deadlineSoon(now int64) (soon bool, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.res == nil {
		return false, -1
	}
	m := c.res.heap.min()
	if m == nil {
		return false, -1
	}
	at = m.deadline - int64(DeadlineMargin)
	return now >= at, at
}

// anyReady ignores pause, as beanstalkd's conn_ready does.
func (c *Client) anyReady() bool {
	if c.s.withheld() {
		return false
	}
	for _, t := range c.watch {
		t.mu.Lock()
		n := t.ready.Len()
		t.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// Reserve takes the lowest (pri, id) ready job of the watched, unpaused
// tubes. timeout < 0 waits forever; 0 does not wait. When the result is
// Waiting the client's Notifier reports the outcome later, and the
// connection must not issue other commands until then.
func (c *Client) Reserve(timeout time.Duration) (*Job, ReserveResult) {
	now := c.s.now()
	soon, soonAt := c.deadlineSoon(now)
	if soon && !c.anyReady() {
		return nil, DeadlineSoon
	}
	if j := c.takeBest(now, nil); j != nil {
		return j, Reserved
	}
	if timeout == 0 {
		// beanstalkd would wait with its timer already due, and its
		// conn_timeout checks the deadline before the timeout.
		if soon {
			return nil, DeadlineSoon
		}
		return nil, TimedOut
	}

	// The watch list is shared, not copied: the client issues no command
	// while it waits, so it cannot change under the waiter.
	w := &waiter{client: c, tubes: c.watch, slot0: -1}
	// Mark every slot absent before anything can end the wait: a hand-off
	// from a tube joined first, or the timer, may run leave while the
	// loop below has not yet reached the other tubes.
	if len(w.tubes) > 1 {
		w.more = make([]int32, len(w.tubes)-1)
		for k := range w.more {
			w.more[k] = -1
		}
	}
	c.wait = w
	c.s.counts.waiting.Add(1)
	fire, soon := soonAt, soonAt >= 0
	if timeout > 0 {
		timeoutAt := now + int64(timeout)
		if fire < 0 || timeoutAt < fire {
			fire, soon = timeoutAt, false
		}
	}
	// The timer's target says how the wait ends when it fires.
	if soon {
		w.timer = newTimer((*deadlineSoonTarget)(w))
	} else {
		w.timer = newTimer(w)
	}
	if fire >= 0 {
		c.s.timers.schedule(&w.timer, fire)
	}
	for k, t := range w.tubes {
		t.mu.Lock()
		// A waiter claimed meanwhile (by the timer) must not join more sets:
		// its leave may already have passed this tube.
		if w.state.Load() == waiterWaiting {
			t.addWaiterLocked(w, k)
		}
		t.mu.Unlock()
	}
	// A job put between the first look and joining the waiting sets would
	// otherwise be missed.
	if j := c.takeBest(now, w); j != nil {
		w.leave()
		return j, Reserved
	}
	return nil, Waiting
}

// takeBest reserves the lowest (pri, id) ready job across the watched,
// unpaused tubes. With a waiter, the waiter must be claimed in the same
// critical section, so a concurrent put cannot also serve it.
func (c *Client) takeBest(now int64, w *waiter) *Job {
	j, _ := c.takeBounded(now, w, nil)
	return j
}

// takeBounded is takeBest that, given a bound, reserves nothing when the
// best comes after it, and returns the best instead (TakeAtMost).
func (c *Client) takeBounded(now int64, w *waiter, bound *Candidate) (*Job, *Candidate) {
	if c.s.withheld() {
		return nil, nil
	}
	for {
		var best *Tube
		var bestJob *Job
		var bestPri uint32 // copied under best.mu: pri may change once it is unlocked
		for _, t := range c.watch {
			// A job put once the look began may be passed by, as one
			// put after it would be: a waiter joined the tube's set
			// before it looks (Reserve), and such a put hands it over.
			if !t.hasReady.Load() {
				continue
			}
			t.mu.Lock()
			if m := t.ready.min(); m != nil && !t.pausedLocked(now) &&
				(bestJob == nil || m.pri < bestPri || m.pri == bestPri && m.id < bestJob.id) {
				best, bestJob, bestPri = t, m, m.pri
			}
			t.mu.Unlock()
		}
		if best == nil {
			return nil, nil
		}
		best.mu.Lock()
		j := best.ready.min()
		if j == nil || best.pausedLocked(now) {
			best.mu.Unlock()
			continue // taken meanwhile; look again
		}
		if bound != nil {
			// j, not bestJob: the tube's best may have improved meanwhile,
			// and the bound decides on what would be taken.
			if cand := (Candidate{j.pri, j.id}); bound.Before(cand) {
				best.mu.Unlock()
				return nil, &cand
			}
		}
		if w != nil && !w.claim() {
			best.mu.Unlock()
			return nil, nil // served or timed out meanwhile: the Notifier has it
		}
		ok := best.reserveLocked(j, c, now)
		if ok {
			best.noteImmediateTakeLocked(w)
		}
		best.mu.Unlock()
		if !ok {
			return nil, nil
		}
		return j, nil
	}
}

// noteImmediateTakeLocked mirrors a side effect of beanstalkd serving even
// an immediate reserve through the waiting sets: it appends the client to
// them and ms_takes it back from this tube, which leaves the tube's take
// cursor at 1. Later hand-offs to several waiters then pick the same
// waiter beanstalkd would. w is the reserving waiter if it has joined the
// sets, else nil.
func (t *Tube) noteImmediateTakeLocked(w *waiter) {
	others := len(t.waiters)
	if w != nil {
		for k, wt := range w.tubes {
			if wt == t && *w.slot(k) >= 0 {
				others--
			}
		}
	}
	if others == 0 {
		t.waitTake = 1
	}
}

// ReserveJob reserves a specific ready, delayed or buried job from any
// tube, ignoring the watch list and pauses.
func (c *Client) ReserveJob(id uint64) (*Job, bool) {
	j := c.s.lookup(id)
	if j == nil || c.s.withheld() {
		return nil, false
	}
	t := j.tube
	t.mu.Lock()
	defer t.mu.Unlock()
	switch j.state {
	case StateReady, StateDelayed, StateBuried:
		return j, t.reserveLocked(j, c, c.s.now())
	}
	return nil, false
}

// ownedLocked looks up a job reserved by c and locks its tube; the caller
// must unlock j.tube.mu when j is not nil.
func (c *Client) ownedLocked(id uint64) *Job {
	j := c.s.lookup(id)
	if j == nil {
		return nil
	}
	j.tube.mu.Lock()
	if j.state != StateReserved || j.owner != c {
		j.tube.mu.Unlock()
		return nil
	}
	return j
}

// Delete removes a job reserved by c, or any ready, delayed or buried job.
func (c *Client) Delete(id uint64) bool { return c.delete(wal.Req{}, id) }

// delete is Delete for a request with key (zero: none).
func (c *Client) delete(key wal.Req, id uint64) bool {
	j := c.s.lookup(id)
	if j == nil {
		return false
	}
	t := j.tube
	t.mu.Lock()
	switch {
	case j.state == StateReserved && j.owner == c,
		j.state == StateReady, j.state == StateDelayed, j.state == StateBuried:
	default:
		t.mu.Unlock()
		return false
	}
	if c.s.log != nil {
		// Deletes are never refused: the log keeps room for them.
		r := wal.Record{Kind: wal.KindDelete, ID: j.id, Req: key}
		_ = c.s.logLocked(c, j, &r)
	}
	c.s.unlinkLocked(t, j)
	t.cmdDelete++
	t.mu.Unlock()
	c.s.releaseTube(t)
	if !key.IsZero() {
		c.keep(key, Outcome{ID: id, Count: 1})
	}
	return true
}

// Release returns a job reserved by c to its tube with a new priority,
// delayed by delay seconds. It reports ErrNotFound unless c reserved the
// job, and ErrNoSpace when the log cannot take the change.
func (c *Client) Release(id uint64, pri, delay uint32) error {
	return c.release(wal.Req{}, id, pri, delay)
}

// release is Release for a request with key (zero: none).
func (c *Client) release(key wal.Req, id uint64, pri, delay uint32) error {
	j := c.ownedLocked(id)
	if j == nil {
		return ErrNotFound
	}
	t := j.tube
	now := c.s.now()
	d := int64(delay) * int64(time.Second)
	if c.s.log != nil {
		r := c.s.record(wal.KindUpdate, j)
		r.Pri, r.Delay, r.Releases, r.State, r.Deadline = pri, d, j.counts.releases+1, wal.StateReady, 0
		r.Req = key
		if d > 0 {
			r.State, r.Deadline = wal.StateDelayed, c.s.wall(now+d)
		}
		// A release without a delay whose record a full disk refuses
		// goes unlogged, as beanstalkd never logs one: the job was
		// ready in the log all along (the reserve is not logged), and
		// a restart finds it so, its last logged priority kept. The
		// worker can then hand it back rather than wait out its TTR.
		if err := c.s.logLocked(c, j, &r); err != nil && !(d == 0 && errors.Is(err, ErrNoSpace)) {
			t.mu.Unlock()
			return err
		}
	}
	t.detachLocked(j)
	j.pri = pri
	j.delay = delay
	j.counts.releases++
	t.enqueueLocked(j, d, now)
	hs := t.dispatchLocked(now, nil)
	t.mu.Unlock()
	if !key.IsZero() {
		c.keep(key, Outcome{ID: id, Count: 1})
	}
	c.s.complete(hs)
	return nil
}

// Bury moves a job reserved by c to the end of its tube's buried FIFO. It
// reports ErrNotFound unless c reserved the job, and ErrNoSpace when the
// log cannot take the change.
func (c *Client) Bury(id uint64, pri uint32) error { return c.bury(wal.Req{}, id, pri) }

// bury is Bury for a request with key (zero: none).
func (c *Client) bury(key wal.Req, id uint64, pri uint32) error {
	j := c.ownedLocked(id)
	if j == nil {
		return ErrNotFound
	}
	t := j.tube
	if c.s.log != nil {
		r := c.s.record(wal.KindUpdate, j)
		r.Pri, r.State, r.Buries, r.Deadline = pri, wal.StateBuried, j.counts.buries+1, 0
		r.Req = key
		if err := c.s.logLocked(c, j, &r); err != nil {
			t.mu.Unlock()
			return err
		}
	}
	t.detachLocked(j)
	j.pri = pri
	t.buryLocked(j)
	t.mu.Unlock()
	if !key.IsZero() {
		c.keep(key, Outcome{ID: id, Count: 1})
	}
	return nil
}

// Touch restarts the TTR of a job reserved by c.
func (c *Client) Touch(id uint64) bool {
	j := c.ownedLocked(id)
	if j == nil {
		return false
	}
	c.mu.Lock()
	j.deadline = c.s.now() + j.ttrNS()
	c.res.heap.fix(j) // j is c's, so c.res exists
	c.rearmTTRLocked()
	c.mu.Unlock()
	j.tube.mu.Unlock()
	return true
}

// Kick moves up to n jobs of the used tube to ready: buried ones if there
// are any (oldest first), otherwise delayed ones (earliest first). It stops
// early if the log cannot take a change.
func (c *Client) Kick(n uint32) uint32 { return c.kick(wal.Req{}, n) }

// kick is Kick for a request with key (zero: none): each job's record
// carries it, so that a replica counts the jobs the command kicked.
func (c *Client) kick(key wal.Req, n uint32) uint32 {
	t := c.use
	now := c.s.now()
	t.mu.Lock()
	fromBuried := t.nBuried > 0
	var kicked uint32
	var first uint64
	var hs handoffs
	for ; kicked < n; kicked++ {
		j := t.buried.head
		if !fromBuried {
			j = t.delayed.min()
		}
		if j == nil || t.kickLocked(c, j, now, key) != nil {
			break
		}
		if kicked == 0 {
			first = j.id
		}
		// Each job is offered to waiters as it is kicked, as beanstalkd's
		// enqueue_job does: a waiter gets the first job kicked, not the
		// most urgent of the batch.
		hs = t.dispatchLocked(now, hs)
	}
	t.mu.Unlock()
	if !key.IsZero() && kicked > 0 {
		c.keep(key, Outcome{ID: first, Count: kicked})
	}
	c.s.complete(hs)
	return kicked
}

// KickJob moves one buried or delayed job, in any tube, to ready. It
// reports ErrNotFound for a job in any other state.
func (c *Client) KickJob(id uint64) error { return c.kickJob(wal.Req{}, id) }

// kickJob is KickJob for a request with key (zero: none).
func (c *Client) kickJob(key wal.Req, id uint64) error {
	j := c.s.lookup(id)
	if j == nil {
		return ErrNotFound
	}
	t := j.tube
	now := c.s.now()
	t.mu.Lock()
	if j.state != StateBuried && j.state != StateDelayed {
		t.mu.Unlock()
		return ErrNotFound
	}
	if err := t.kickLocked(c, j, now, key); err != nil {
		t.mu.Unlock()
		return err
	}
	hs := t.dispatchLocked(now, nil)
	t.mu.Unlock()
	if !key.IsZero() {
		c.keep(key, Outcome{ID: id, Count: 1})
	}
	c.s.complete(hs)
	return nil
}

// kickLocked moves j, buried or delayed, to ready, its record carrying
// key (zero: none). j's tube lock must be held.
func (t *Tube) kickLocked(c *Client, j *Job, now int64, key wal.Req) error {
	if t.s.log != nil {
		r := t.s.record(wal.KindUpdate, j)
		r.State, r.Kicks, r.Deadline, r.Req = wal.StateReady, j.counts.kicks+1, 0, key
		if err := t.s.logLocked(c, j, &r); err != nil {
			return err
		}
	}
	t.detachLocked(j)
	j.counts.kicks++
	t.enqueueLocked(j, 0, now)
	return nil
}

// PeekReady, PeekDelayed and PeekBuried look at the used tube: its next
// job to reserve, its next delayed job to become ready, its oldest buried job.
func (c *Client) PeekReady() *Job   { return c.peekUsed(func(t *Tube) *Job { return t.ready.min() }) }
func (c *Client) PeekDelayed() *Job { return c.peekUsed(func(t *Tube) *Job { return t.delayed.min() }) }
func (c *Client) PeekBuried() *Job  { return c.peekUsed(func(t *Tube) *Job { return t.buried.head }) }

func (c *Client) peekUsed(pick func(t *Tube) *Job) *Job {
	c.use.mu.Lock()
	j := pick(c.use)
	if j != nil {
		c.showLocked(j)
	}
	c.use.mu.Unlock()
	return j
}

// Peek returns any live job by id, in any state or tube.
func (c *Client) Peek(id uint64) (*Job, bool) { return c.s.peek(id, c) }

// JobStats snapshots one live job by id.
func (c *Client) JobStats(id uint64) (JobStats, bool) { return c.s.jobStats(id, c) }

// CancelWait ends a blocked reserve without a result. It reports false
// when there was none, or it had already ended and its Notifier call is on
// its way.
func (c *Client) CancelWait() bool {
	w := c.wait
	if w == nil || !w.claim() {
		return false
	}
	w.leave()
	return true
}

// Close ends the client: a blocked reserve is cancelled, reserved jobs go
// back to ready (no counter changes, as in beanstalkd), and its tube
// references are dropped.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	var jobs []*Job
	if c.res != nil {
		for j := c.res.order.head; j != nil; j = j.next {
			jobs = append(jobs, j)
		}
	}
	c.mu.Unlock()
	c.CancelWait()
	now := c.s.now()
	for _, j := range jobs {
		t := j.tube
		t.mu.Lock()
		var hs handoffs
		if j.state == StateReserved && j.owner == c {
			t.detachLocked(j)
			t.enqueueLocked(j, 0, now)
			hs = t.dispatchLocked(now, hs)
		}
		t.mu.Unlock()
		c.s.complete(hs)
	}
	// In beanstalkd's order (connclose), which decides list-tubes' once
	// tubes are freed (each is swap-removed from the store's list): the
	// watch list emptied by deleting its first over and over (ms_clear:
	// the first, then the others from the last back), then the used tube.
	for i := range c.watch {
		t := c.watch[(len(c.watch)-i)%len(c.watch)]
		t.mu.Lock()
		t.nWatching -= int(c.weight)
		t.mu.Unlock()
		c.s.releaseTube(t)
	}
	c.use.mu.Lock()
	c.use.nUsing -= int(c.weight)
	c.use.mu.Unlock()
	c.s.releaseTube(c.use)
	c.use, c.watch = nil, nil
}

// ttrTarget is a client's TTR timer: one per client, armed for the
// earliest deadline of its reserved jobs, rather than one per job, which
// keeps every stored job 32 bytes smaller.
type ttrTarget Client

// rearmTTRLocked arms the TTR timer for the earliest reservation, if it
// moved. c.mu must be held, and c.res made.
func (c *Client) rearmTTRLocked() {
	r := c.res
	m := r.heap.min()
	switch {
	case m == nil:
		if r.ttrAt != 0 {
			r.ttrAt = 0
			c.s.timers.cancel(&r.ttr)
		}
	case m.deadline != r.ttrAt:
		r.ttrAt = m.deadline
		c.s.timers.schedule(&r.ttr, m.deadline)
	}
}

// onTimer ends the reservations whose TTR ran out: each job goes back to
// ready with the same priority and a timeout is counted. They go back
// soonest deadline first, as beanstalkd's conn_timeout takes them, each
// offered to the waiters as it goes: the order decides who gets which.
// All that are due go, not only those up to next: beanstalkd's
// conn_timeout ends every one of a connection's that has run out before
// it looks at the next connection's.
func (tt *ttrTarget) onTimer(now, _ int64) (int64, bool) {
	c := (*Client)(tt)
	c.mu.Lock()
	c.res.ttrAt = 0 // the timer has fired; the next rearm must schedule again
	var due []*Job
	for _, j := range c.res.heap.all() {
		if j.deadline <= now {
			due = append(due, j)
		}
	}
	// Sorted under c.mu, which guards their deadlines (Touch).
	slices.SortFunc(due, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(a.deadline, b.deadline), cmp.Compare(a.id, b.id))
	})
	c.rearmTTRLocked()
	c.mu.Unlock()
	for _, j := range due {
		t := j.tube
		var hs handoffs
		t.mu.Lock()
		if j.state == StateReserved && j.owner == c && j.deadline <= now {
			j.counts.timeouts++
			t.s.counts.timeouts.Add(1)
			t.detachLocked(j)
			t.enqueueLocked(j, 0, now)
			hs = t.dispatchLocked(now, hs)
		}
		t.mu.Unlock()
		t.s.complete(hs)
	}
	return 0, false
}

const (
	waiterWaiting int32 = iota
	waiterDone
)

// waiter is one blocked reserve. Whoever flips state from waiting to done
// (a hand-off, the timer, or Close) owns its completion. Every connection
// blocked in reserve has one, so it is kept small: a single watched tube,
// the common case, needs nothing beside it.
type waiter struct {
	client *Client // immutable
	// tubes is the client's watch list when the wait began, shared with
	// the client: it issues no command while it waits, and leave has
	// returned before the Notifier is called, so the list cannot change
	// while a waiter reads it. Immutable.
	tubes []*Tube
	// slot0 and more are the waiter's slots in the waiting sets of tubes[0]
	// and of tubes[1:] (more is nil with one tube); see slot.
	more  []int32
	state atomic.Int32
	slot0 int32
	// timer fires at the waiter's deadline: TIMED_OUT with the waiter as
	// its target, DEADLINE_SOON with its deadlineSoonTarget.
	timer timer
}

// slot is where w's position in the waiting set of tubes[k] is kept;
// guarded by tubes[k].mu; -1 when absent.
func (w *waiter) slot(k int) *int32 {
	if k == 0 {
		return &w.slot0
	}
	return &w.more[k-1]
}

func (w *waiter) claim() bool {
	return w.state.CompareAndSwap(waiterWaiting, waiterDone)
}

// leave removes a claimed waiter from every waiting set. It takes each tube
// lock in turn, so it must be called with none held.
func (w *waiter) leave() {
	for k, t := range w.tubes {
		t.mu.Lock()
		if i := *w.slot(k); i >= 0 {
			t.removeWaiterLocked(int(i))
		}
		t.mu.Unlock()
	}
	w.client.s.timers.cancel(&w.timer)
	w.client.s.counts.waiting.Add(-1)
}

// onTimer ends a wait whose timeout came first: TIMED_OUT.
func (w *waiter) onTimer(_, _ int64) (int64, bool) {
	w.expire(TimedOut)
	return 0, false
}

// deadlineSoonTarget is a waiter's timer when a reserved job's TTR comes
// within DeadlineMargin before the wait's timeout: DEADLINE_SOON.
type deadlineSoonTarget waiter

func (d *deadlineSoonTarget) onTimer(_, _ int64) (int64, bool) {
	(*waiter)(d).expire(DeadlineSoon)
	return 0, false
}

func (w *waiter) expire(r ReserveResult) {
	if !w.claim() {
		return
	}
	w.leave()
	w.client.notify.WaitEnded(r)
}

// handoff is a job given to a waiter under a tube lock, to be announced
// once the lock is released. j is nil when the waiter's client had closed.
type handoff struct {
	w *waiter
	j *Job
}

type handoffs []handoff

// complete finishes hand-offs; call with no lock held.
func (s *Store) complete(hs handoffs) {
	for _, h := range hs {
		h.w.leave()
		if h.j != nil {
			h.w.client.notify.JobReserved(h.j)
		}
	}
}
