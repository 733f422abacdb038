package router

import (
	"math"
	"sync"
	"time"

	"github.com/sproutmq/sprout/store"
)

// crossReserve is a remote session's reserve whose watched tubes live in
// several groups (docs/design/shards.md 6.2, 6.3), over the Link: rounds
// (peek every group with OpBest, take from the best with OpTake
// bounded by the others' best, again on Lost, unbounded after
// maxBoundedRounds), and when nothing is ready a wait in every group (a
// wait item each), the first offer winning, the others cancelled, an
// offer that comes after the end declined, the timeout on this member's
// timer (the package's doc, "A reserve across groups").
//
// A group with no leader (5.7: its requests answered StatusNoLeader or
// StatusUnknown) counts as empty. DEADLINE_SOON comes from a group whose
// wait sees the session's job there near its TTR, as that group's store
// says it, or from the session's own estimate of its jobs' TTRs in every
// group (soon, 6.4): at once when no watched tube has a ready job, else
// when a wait reaches it.
//
// A group that answers that a watched tube is moving (StatusWrongGroup,
// EventWrongGroup: docs/design/shards.md 3.3) starts it over, after
// moveRetry, across the groups its tubes live in then (again), for what
// is left of its timeout; what the earlier rounds asked is cancelled (a
// take on its way, the open waits), or declined as it comes (gen).
//
// Once the member holds jobs for a graceful shutdown (holding, hold) it
// takes none and waits in no group, only for its timer; a take on its
// way is cancelled, and a job offered meanwhile declined, back as if
// never reserved.
//
// Its callbacks run on the Link's goroutines; mu orders them. Requests go
// in the order their sequences are given (post: the session's, as one
// step with its other items), so each group sees the session's sequences
// rise (a Server takes one not above the last as a resend).
type crossReserve struct {
	link    *Link                                                    // immutable
	session uint64                                                   // immutable
	seq     uint32                                                   // immutable: the session's sequence its answer is awaited by
	post    func(send func(seq uint32))                              // immutable: the session's Session.post
	again   func() []crossPart                                       // immutable: the groups holding watched tubes now
	holding func() bool                                              // immutable: a graceful shutdown's Router.HoldJobs began
	soonest func() (time.Duration, bool)                             // immutable: the session's estimate now (Session.soonest); nil: soon stays as started
	timeout time.Duration                                            // immutable: negative waits for ever
	done    func(j *JobReply, group uint16, res store.ReserveResult) // immutable: called once
	// parts are the groups holding watched tubes, as of the last start.
	// Guarded by mu.
	parts []crossPart
	// gen counts the starts over: an answer to an earlier one's request
	// is not this one's. Guarded by mu.
	gen int
	// soon, if set, is how long after the start a job the session holds
	// comes within DeadlineMargin of its TTR's end (zero or less: now).
	soon    time.Duration
	hasSoon bool

	mu      sync.Mutex
	started time.Time  // guarded by mu: the timeout counts from it
	state   crossState // guarded by mu
	round   int        // guarded by mu
	bests   []Best     // guarded by mu: this round's peeks, by part
	peeked  int        // guarded by mu: the peeks answered this round
	waitID  uint64     // guarded by mu: the wait's id
	waitSeq []uint32   // guarded by mu: each part's wait item's sequence
	// asking: a round's peeks or its take are on their way, which may yet
	// show a watched tube with a ready job; soonDue: the DEADLINE_SOON
	// timer fired meanwhile, and the round answers it if none is
	// (takeLocked), as beanstalkd answers it only then. Guarded by mu.
	asking, soonDue bool
	// late: the timeout came while a round's peeks or take were on their
	// way; the round ends the reserve, taking a job if one is ready,
	// within lateRound. Guarded by mu.
	late  bool
	timer *time.Timer
	// taking is the take on its way (seq 0: none), cancelled if the
	// reserve ends or starts over first: its group gives back what it
	// took at once, before the session's next command, which could name
	// that job (docs/design/shards.md 6.5). Guarded by mu.
	taking struct {
		group uint16
		seq   uint32
	}
}

// lateRound bounds a round under way at the reserve's timeout: a group
// with no leader holds its peek until the router's next look past the
// timeout (Link.Expire, every retryEvery), and a job ready in another
// group is the answer, as one server hands out a ready job whatever the
// timeout. Past it, the reserve times out.
const lateRound = 2 * retryEvery

// crossPart is one group of a cross-group reserve and the session's
// watched tubes that live there.
type crossPart struct {
	group uint16
	tubes [][]byte
}

type crossState uint8

const (
	crossTaking  crossState = iota // peeking or taking
	crossWaiting                   // waits sent, no end yet
	crossDone                      // answered, or ended
)

// crossWaits numbers the waits of every cross-group reserve of this
// process: unique per session is what a group needs.
var crossWaits struct {
	sync.Mutex
	last uint64
}

// start begins the reserve: done is called once with its end, on the
// Link's goroutine or the timer's (or never, if cancel ends it first).
func (r *crossReserve) start() { r.startWith(r.beginLocked) }

// startAgain begins the reserve as againLocked starts it over: a routed
// reserve whose group answered that a watched tube is moving goes on so.
func (r *crossReserve) startAgain() { r.startWith(r.againLocked) }

// startWith begins the reserve by begin, its timeout counted from now,
// unless it was cancelled before it began.
func (r *crossReserve) startWith(begin func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == crossDone {
		return
	}
	r.started = time.Now()
	begin()
	if r.state == crossTaking && r.timeout != 0 {
		// The timer bounds the peeks and takes too: a group with no
		// leader holds its peek for the Link's wait for a leader, and
		// the timer started only with the waits, that much late. A
		// timeout of 0 is the rounds' own (takeLocked).
		r.armLocked(r.soonAt())
	}
}

// beginLocked begins a round over the parts.
func (r *crossReserve) beginLocked() {
	r.bests = make([]Best, len(r.parts))
	if len(r.parts) == 0 {
		r.takeLocked() // nothing to ask: as if every tube were empty
		return
	}
	r.peekLocked()
}

// hold makes the reserve, if begun and not ended, give up its groups for
// its timer alone (Router.HoldJobs): its waits and a take in flight are
// cancelled, and what the waits bring is declined. One not begun yet (its
// session stores it first) sees holding as it begins.
func (r *crossReserve) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == crossDone || r.started.IsZero() {
		return
	}
	r.cancelWaitsLocked()
	r.state = crossTaking
	r.gen++
	r.takeLocked()
}

// peekLocked asks every group for its best ready job: a round.
func (r *crossReserve) peekLocked() {
	r.asking = true
	r.round++
	r.peeked = 0
	clear(r.bests)
	gen := r.gen
	for i, p := range r.parts {
		r.post(func(seq uint32) {
			r.link.Request(r.session, p.group, seq, r.peekRequest(p.tubes), func(it *Item) {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.bestLocked(gen, i, it)
			})
		})
	}
}

// peekRequest is the peek of tubes, with the reserve's timeout and
// DEADLINE_SOON bound from now, for the Link alone (Expire: a group
// without a leader counts as empty once either passed, as a reserve in
// one group does); they do not go on the wire. r.mu is held.
func (r *crossReserve) peekRequest(tubes [][]byte) Request {
	req := Request{Op: OpBest, Tubes: tubes, Timeout: r.timeout, SoonElsewhere: r.hasSoon}
	if r.timeout > 0 {
		req.Timeout = max(r.timeout-time.Since(r.started), 0)
	}
	if r.hasSoon {
		req.SoonIn = r.soon - time.Since(r.started)
	}
	return req
}

// bestLocked takes part i's peek of start gen.
func (r *crossReserve) bestLocked(gen, i int, it *Item) {
	switch {
	case r.state != crossTaking || r.gen != gen:
		return
	case it.Reply.Status == StatusWrongGroup:
		r.againLocked()
		return
	}
	if it.Reply.Status == StatusOK {
		r.bests[i] = it.Reply.Best
	} // else no leader: the group counts as empty
	if r.peeked++; r.peeked == len(r.parts) {
		r.takeLocked()
	}
}

// againLocked starts the reserve over once moveRetry has passed, across
// the groups its watched tubes live in then: one of its groups answered
// that a watched tube is moving. Its waits still open are cancelled; its
// timer goes on meanwhile (a tube may stay frozen for a move's whole
// span), and its rounds count afresh.
func (r *crossReserve) againLocked() {
	r.cancelWaitsLocked()
	r.state = crossTaking
	r.gen++
	r.round = 0
	r.asking = false
	r.armLocked(r.soonAt())
	gen := r.gen
	time.AfterFunc(moveRetry, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.state != crossTaking || r.gen != gen {
			return
		}
		r.parts = r.again()
		r.beginLocked()
	})
}

// takeLocked takes from the group whose best is the most urgent, bounded
// by the best of the others; with nothing ready, the reserve ends or
// waits.
func (r *crossReserve) takeLocked() {
	at, bound := takeFrom(r.bests, r.round)
	held := r.holding()
	if at < 0 || held {
		r.asking = false
		anyReady := false
		for _, b := range r.bests {
			anyReady = anyReady || b.AnyReady && !held
		}
		// Late, a DEADLINE_SOON due by the timeout fired first (soonDue):
		// one due after it is not owed.
		soonNow := r.soonDue || !r.late && r.soonNowLocked()
		if soonNow && !anyReady {
			r.endLocked(nil, 0, store.DeadlineSoon)
			return
		}
		if r.timeout == 0 || r.late {
			// As one server's timer already due: the deadline first.
			res := store.TimedOut
			if soonNow {
				res = store.DeadlineSoon
			}
			r.endLocked(nil, 0, res)
			return
		}
		r.waitLocked()
		return
	}
	p, gen := r.parts[at], r.gen
	r.post(func(seq uint32) {
		r.taking.group, r.taking.seq = p.group, seq
		r.link.Request(r.session, p.group, seq, Request{Op: OpTake, Tubes: p.tubes, Bound: bound}, func(it *Item) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.taking.seq == seq {
				r.taking.seq = 0
			}
			took := it.Reply.Status == StatusOK && it.Reply.Result == ResultJob
			switch {
			case r.state != crossTaking || r.gen != gen:
				// Ended or started over as it came: cancelled
				// (cancelWaitsLocked), which gives the job back
				// there. A decline too might come after the session's
				// next reserve took the job again, and take it back.
			case took && r.holding():
				r.link.Decline(r.session, p.group, 0, it.Reply.Job.ID)
				r.takeLocked()
			case took:
				j := it.Reply.Job
				j.Body = append([]byte(nil), j.Body...) // the payload is gone once this returns
				r.endLocked(&j, p.group, store.Reserved)
			case it.Reply.Status == StatusWrongGroup:
				r.againLocked()
			case r.late:
				// Past the timeout: what was ready when asked is gone, and
				// the reserve ends as its timer would have ended it.
				r.endLocked(nil, 0, r.timedOutLocked())
			default:
				r.peekLocked() // Lost, emptied meanwhile, or no leader: look again
			}
		})
	})
}

// waitLocked waits in every group, and starts the timer.
func (r *crossReserve) waitLocked() {
	r.state = crossWaiting
	crossWaits.Lock()
	crossWaits.last++
	r.waitID = crossWaits.last
	crossWaits.Unlock()
	r.waitSeq = make([]uint32, len(r.parts))
	gen, waitID := r.gen, r.waitID
	for i, p := range r.parts {
		if r.holding() {
			break // the timer alone ends it
		}
		r.post(func(seq uint32) {
			r.waitSeq[i] = seq
			r.link.Wait(r.session, p.group, seq, Wait{ID: waitID, Tubes: p.tubes}, func(it *Item) {
				r.mu.Lock()
				defer r.mu.Unlock()
				if r.gen != gen {
					// A wait of a start before: cancelled, its offer declined.
					if it.Kind == KindEvent && it.Event.Type == EventOffer {
						r.link.Decline(r.session, p.group, waitID, it.Event.Job.ID)
					}
					return
				}
				r.eventLocked(i, it)
			})
		})
	}
	r.armLocked(r.soonAt())
}

// soonNowLocked reports whether a DEADLINE_SOON is owed now: by the
// session's estimate now if it has one (a job a group's new leader said
// it no longer holds owes none: Session.askHeld), else by the one made
// when the reserve began. r.mu is held (the timer asks soonest so too).
func (r *crossReserve) soonNowLocked() bool {
	if !r.hasSoon {
		return false
	}
	if r.soonest == nil {
		return time.Since(r.started) >= r.soon
	}
	in, ok := r.soonest()
	return ok && in <= 0
}

// soonAt is when a job the session holds in another group first comes
// near its TTR's end, as estimated when the reserve began; zero: never.
func (r *crossReserve) soonAt() time.Time {
	if !r.hasSoon {
		return time.Time{}
	}
	return r.started.Add(r.soon)
}

// armLocked starts the timer that ends the wait, or a start over's
// rounds (againLocked): at its timeout, or at soonAt (zero: never), when
// a job the session holds comes near its TTR's end, whichever is first.
// At soonAt the session's estimate is asked again: a job its group's new
// leader said the session no longer holds (Session.askHeld) owes no
// DEADLINE_SOON, and the timer goes on to what is due then. A take on
// its way as it fires brings a job declined when it comes (takeLocked).
func (r *crossReserve) armLocked(soonAt time.Time) {
	if r.timer != nil {
		r.timer.Stop()
	}
	end, res, timed := r.started.Add(r.timeout), store.TimedOut, r.timeout >= 0
	if !soonAt.IsZero() && (!timed || !soonAt.After(end)) {
		end, res, timed = soonAt, store.DeadlineSoon, true
	}
	if !timed {
		return
	}
	gen := r.gen
	r.timer = time.AfterFunc(time.Until(end), func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.state == crossDone || r.gen != gen {
			return
		}
		if res == store.DeadlineSoon && r.soonest != nil {
			if in, ok := r.soonest(); !ok || in > 0 {
				var at time.Time
				if ok {
					at = time.Now().Add(in)
				}
				r.armLocked(at)
				return
			}
		}
		if res == store.DeadlineSoon && r.state == crossTaking && r.asking {
			// A watched tube may have a ready job: the round under way
			// tells, and answers DEADLINE_SOON if none has (takeLocked).
			// The timer goes on to the timeout.
			r.soonDue = true
			r.armLocked(time.Time{})
			return
		}
		if res == store.TimedOut && r.state == crossTaking && r.asking && !r.late {
			// The round under way may yet show a ready job, which one
			// server would hand out: it ends the reserve (takeLocked),
			// or the timer, lateRound on.
			r.late = true
			r.timer = time.AfterFunc(lateRound, func() {
				r.mu.Lock()
				defer r.mu.Unlock()
				if r.state != crossDone && r.gen == gen {
					r.endLocked(nil, 0, r.timedOutLocked())
				}
			})
			return
		}
		if res == store.TimedOut {
			res = r.timedOutLocked()
		}
		r.endLocked(nil, 0, res)
	})
}

// timedOutLocked is the reserve's answer at its timeout: DEADLINE_SOON if
// that came due meanwhile (as one server's timer: the deadline first),
// else TIMED_OUT.
func (r *crossReserve) timedOutLocked() store.ReserveResult {
	if r.soonDue {
		return store.DeadlineSoon
	}
	return store.TimedOut
}

// eventLocked takes the event that ends part i's wait: an offer wins if
// the reserve still waits, and is declined if not; DEADLINE_SOON ends it.
func (r *crossReserve) eventLocked(i int, it *Item) {
	p := r.parts[i]
	r.waitSeq[i] = 0 // ended there: nothing to cancel
	offer := it.Kind == KindEvent && it.Event.Type == EventOffer
	switch {
	case r.state != crossWaiting && offer, offer && r.holding():
		r.link.Decline(r.session, p.group, r.waitID, it.Event.Job.ID)
	case r.state != crossWaiting:
	case offer:
		j := it.Event.Job
		j.Body = append([]byte(nil), j.Body...)
		r.endLocked(&j, p.group, store.Reserved)
	case it.Kind == KindEvent && it.Event.Type == EventDeadlineSoon:
		r.endLocked(nil, 0, store.DeadlineSoon)
	case it.Kind == KindEvent && it.Event.Type == EventWrongGroup:
		r.againLocked()
	}
	// A reply instead of an event: the wait could not be made there (no
	// leader); the other groups and the timer end the reserve.
}

// endLocked ends the reserve with its answer: the waits still open are
// cancelled (an offer already on its way is declined when it comes).
func (r *crossReserve) endLocked(j *JobReply, group uint16, res store.ReserveResult) {
	r.cancelLocked()
	r.done(j, group, res)
}

// cancel ends the reserve without an answer, if it has not ended: the
// session's half-close or close. It reports whether it did.
func (r *crossReserve) cancel() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == crossDone {
		return false
	}
	r.cancelLocked()
	return true
}

// cancelLocked marks the reserve done and cancels its open waits.
func (r *crossReserve) cancelLocked() {
	r.cancelWaitsLocked()
	r.state = crossDone
}

// cancelWaitsLocked stops the timer and cancels the take on its way and
// the open waits, if the reserve waits.
func (r *crossReserve) cancelWaitsLocked() {
	if r.timer != nil {
		r.timer.Stop()
	}
	if t := r.taking; t.seq != 0 {
		r.taking.seq = 0
		r.link.Cancel(r.session, t.group, t.seq, 0)
	}
	if r.state != crossWaiting {
		return
	}
	for i, p := range r.parts {
		if seq := r.waitSeq[i]; seq != 0 {
			r.link.Cancel(r.session, p.group, seq, r.waitID)
			r.waitSeq[i] = 0
		}
	}
}

// maxBoundedRounds is how many takes may be Lost before the next goes
// without a bound.
const maxBoundedRounds = 4

// noBound comes after every job.
var noBound = store.Candidate{Pri: math.MaxUint32, ID: math.MaxUint64}

// takeFrom picks, from the groups' peeks of a round (counted from 1), the
// group to take from (-1: none has a ready job) and the take's bound: the
// best of the other groups' candidates, or none once maxBoundedRounds
// takes were lost, so that a reserve never spins.
func takeFrom(bests []Best, round int) (at int, bound store.Candidate) {
	at = -1
	var best, others store.Candidate
	othersOK := false
	for i, b := range bests {
		switch {
		case !b.OK:
		case at < 0:
			at, best = i, b.Candidate
		case b.Candidate.Before(best):
			others, othersOK = best, true
			at, best = i, b.Candidate
		case !othersOK || b.Candidate.Before(others):
			others, othersOK = b.Candidate, true
		}
	}
	if othersOK && round <= maxBoundedRounds {
		return at, others
	}
	return at, noBound
}
