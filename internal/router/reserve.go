package router

import (
	"sync"
	"time"

	"github.com/sproutmq/sprout/store"
)

// Part is a session's store client in one group, as its reserve across
// groups uses it: take (Group), wait (Waiter), and the deadline of the
// jobs the session holds there. *store.Client is one.
type Part interface {
	Group
	Waiter
	DeadlineSoonIn() (time.Duration, bool)
}

// Reserver is a session's reserve across the groups its watched tubes
// live in, with beanstalkd's semantics for the parts a session owns
// (docs/design/shards.md 6.2-6.4): DEADLINE_SOON from the soonest TTR of
// the jobs it holds in any group, the timeout, and which of them ends a
// wait. One per session, used by one goroutine at a time (the session's);
// done may be called on another (an offer's, a timer's).
type Reserver struct {
	parts  []Part
	groups []Group // parts, as Take takes them
	arb    *Arbiter
}

// NewReserver is the reserve of a session whose client in group i is
// made by client(i, notifier), the notifier being the session's for that
// group.
func NewReserver(groups int, client func(group int, n store.Notifier) Part) *Reserver {
	r := &Reserver{arb: &Arbiter{}}
	waiters := make([]Waiter, groups)
	for i := range groups {
		p := client(i, r.arb.Notifier(i))
		r.parts = append(r.parts, p)
		r.groups = append(r.groups, p)
		waiters[i] = p
	}
	r.arb.SetGroups(waiters)
	return r
}

// Reserve answers a reserve with timeout (negative: none; zero: do not
// wait), as one server would: done gets the job and its group with
// Reserved, or TimedOut or DeadlineSoon (group -1). It is called before
// Reserve returns when the answer needs no wait.
func (r *Reserver) Reserve(timeout time.Duration, done func(j *store.Job, group int, res store.ReserveResult)) {
	soonIn, holds := r.soonest()
	soon := holds && soonIn <= 0
	out := Take(r.groups)
	switch {
	case out.Job != nil:
		done(out.Job, out.Group, store.Reserved)
		return
	case soon:
		// beanstalkd answers DEADLINE_SOON before a reserve with nothing
		// ready (a paused tube's job counts as ready there, and then its
		// timeout 0 still meets the deadline first).
		done(nil, -1, store.DeadlineSoon)
		return
	case timeout == 0:
		done(nil, -1, store.TimedOut)
		return
	}
	// Wait: the timer owns the timeout, and DEADLINE_SOON if it comes
	// first; an offer, or a group's own DEADLINE_SOON, ends it otherwise.
	fire, onTimer := timeout, store.TimedOut
	if holds && (timeout < 0 || soonIn < timeout) {
		fire, onTimer = soonIn, store.DeadlineSoon
	}
	var mu sync.Mutex
	var timer *time.Timer
	answered := false
	r.arb.Wait(func(j *store.Job, group int, res store.ReserveResult) {
		mu.Lock()
		answered = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		done(j, group, res)
	})
	mu.Lock()
	defer mu.Unlock()
	if !answered && fire >= 0 {
		timer = time.AfterFunc(fire, func() {
			if r.arb.End() {
				done(nil, -1, onTimer)
			}
		})
	}
}

// End ends a waiting reserve without an answer (the session closes):
// false if an answer came first.
func (r *Reserver) End() bool { return r.arb.End() }

// soonest is the time until the soonest DEADLINE_SOON of the jobs the
// session holds, over every group; holds false if it holds none.
func (r *Reserver) soonest() (in time.Duration, holds bool) {
	for _, p := range r.parts {
		if d, ok := p.DeadlineSoonIn(); ok && (!holds || d < in) {
			in, holds = d, true
		}
	}
	return in, holds
}
