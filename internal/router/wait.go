package router

import (
	"sync"
	"time"

	"github.com/sproutmq/sprout/store"
)

// Waiter is one group's half of a session's waiting reserve: the
// session's store client in that group. *store.Client is one.
type Waiter interface {
	Reserve(timeout time.Duration) (*store.Job, store.ReserveResult)
	CancelWait() bool
	Unreserve(id uint64) bool
}

// Arbiter decides which group's offer ends a session's wait across groups
// (docs/design/shards.md 6.3, 6.5): when nothing watched is ready, the
// session waits in every group at once; the first group to reserve a job
// for it wins, the others' waits are cancelled, and an offer that comes
// too late (a second group's, or any after the wait's timer) is declined:
// the job goes back as if never reserved (store.Client.Unreserve). So a
// session never holds a reservation it did not receive.
//
// One per session. Each group's store client is made with Notifier(i) as
// its Notifier; the groups wait without a timeout, since the session's
// own timer (End) owns TIMED_OUT. A group whose client holds a job near
// its TTR ends its wait with DEADLINE_SOON, as a single server would, and
// that ends the session's wait. done, the session's callback, must not
// block: it is called on the goroutine that made the offer (a
// producer's, a timer's) or on Wait's.
//
// A wait cancelled in a group after that group reserved a job for it owes
// the session that offer (Owed): its store's waiter leaves the tubes'
// waiting sets on the offering goroutine, walking the client's watch
// list. So the session must not watch or ignore in that group until the
// offer has come (and been declined).
type Arbiter struct {
	mu       sync.Mutex
	groups   []Waiter                                   // guarded by mu
	waiting  bool                                       // guarded by mu: a wait is on, undecided
	done     func(*store.Job, int, store.ReserveResult) // guarded by mu: the wait's
	owed     map[int]int                                // guarded by mu: by group, the ends of cancelled waits on their way
	declined int                                        // guarded by mu: offers declined, ever
}

// Notifier is group's store.Notifier for the session's client there.
func (a *Arbiter) Notifier(group int) store.Notifier { return offers{a, group} }

// SetGroups gives the arbiter the session's clients, by group, once made.
func (a *Arbiter) SetGroups(groups []Waiter) {
	a.mu.Lock()
	a.groups = groups
	a.mu.Unlock()
}

// Wait waits in every group for a job; done is called once, unless End
// ends the wait first: with the job, its group and Reserved, or with
// DeadlineSoon (group -1). A group that has a job ready by the time it is
// asked offers it at once, and the groups asked before it are cancelled.
func (a *Arbiter) Wait(done func(j *store.Job, group int, r store.ReserveResult)) {
	a.mu.Lock()
	a.waiting, a.done = true, done
	var won *store.Job
	group, result := -1, store.Waiting
	for i, g := range a.groups {
		j, r := g.Reserve(-1)
		if r == store.Waiting {
			continue
		}
		// Reserved, or DeadlineSoon (TimedOut cannot come without a timeout).
		won, result = j, r
		if r == store.Reserved {
			group = i
		}
		a.waiting = false
		for k := range i {
			a.cancelLocked(k)
		}
		break
	}
	a.mu.Unlock()
	if result != store.Waiting {
		done(won, group, result)
	}
}

// End ends the wait without a job (the session's timer, DEADLINE_SOON, a
// close); false if an offer won first, whose done is called or on its way.
// Offers still in flight are declined as they come.
func (a *Arbiter) End() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.waiting {
		return false
	}
	a.waiting = false
	a.cancelOthersLocked(-1)
	return true
}

// Owed is how many ends of cancelled waits group still owes the session:
// until they come, its client there must not watch or ignore.
func (a *Arbiter) Owed(group int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.owed[group]
}

// Declined counts the offers declined.
func (a *Arbiter) Declined() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.declined
}

// end is group's store ending the session's wait there: with j, which
// it reserved for the session (Reserved), or with DeadlineSoon. An end
// owed to a cancelled wait, or one after the wait was decided, is
// dropped, and the job it brought declined.
func (a *Arbiter) end(group int, j *store.Job, r store.ReserveResult) {
	a.mu.Lock()
	owed := a.owed[group] > 0
	if owed {
		a.owed[group]--
	}
	if owed || !a.waiting {
		g := a.groups[group]
		if j != nil {
			a.declined++
		}
		a.mu.Unlock()
		if j != nil {
			// Outside the lock: the job may go straight to another waiter,
			// this session's next wait included.
			g.Unreserve(j.ID())
		}
		return
	}
	a.waiting = false
	done := a.done
	a.cancelOthersLocked(group)
	a.mu.Unlock()
	if r != store.Reserved {
		group = -1
	}
	done(j, group, r)
}

// cancelOthersLocked cancels the wait in every group but group.
func (a *Arbiter) cancelOthersLocked(group int) {
	for i := range a.groups {
		if i != group {
			a.cancelLocked(i)
		}
	}
}

// cancelLocked cancels the wait in group, which registered it: a group
// that cannot (it reserved a job for it, or its DEADLINE_SOON timer
// fired) owes the session that end, declined or dropped when it comes.
func (a *Arbiter) cancelLocked(group int) {
	if !a.groups[group].CancelWait() {
		if a.owed == nil {
			a.owed = make(map[int]int)
		}
		a.owed[group]++
	}
}

// offers is one group's store.Notifier for the session's client there.
type offers struct {
	a     *Arbiter
	group int
}

func (o offers) JobReserved(j *store.Job) { o.a.end(o.group, j, store.Reserved) }

// WaitEnded comes only as DeadlineSoon: the groups wait without a timeout.
func (o offers) WaitEnded(r store.ReserveResult) { o.a.end(o.group, nil, r) }
