package store

import "time"

// The parts of a reserve whose watched tubes live in several stores (a
// cluster's shard groups, docs/design/shards.md 6.2 and 6.3): each store
// is asked for its best candidate (BestReady), the one with the best is
// asked to take it unless another store's is better by then (TakeAtMost),
// and a job reserved for a wait that another store ended first goes back
// as if it had never been reserved (Unreserve). Within one store these
// are the order and the locks Reserve uses.

// Candidate is a ready job's place in reserve's order: lowest priority
// first, then lowest id.
type Candidate struct {
	Pri uint32
	ID  uint64
}

// Before reports whether a comes before b in reserve's order.
func (a Candidate) Before(b Candidate) bool {
	return a.Pri < b.Pri || a.Pri == b.Pri && a.ID < b.ID
}

// TakeResult says how TakeAtMost ended.
type TakeResult uint8

const (
	Taken TakeResult = iota // the job was reserved for the client
	Lost                    // the store's best comes after the bound: nothing reserved
	Empty                   // no watched, unpaused tube has a ready job
)

// BestReady is the lowest (pri, id) ready job of the client's watched,
// unpaused tubes (ok false if there is none), reserving nothing; and
// whether any watched tube has a ready job, pause ignored, as
// DEADLINE_SOON's rule wants (beanstalkd's conn_ready).
func (c *Client) BestReady() (best Candidate, ok, anyReady bool) {
	if c.s.withheld() {
		return Candidate{}, false, false
	}
	now := c.s.now()
	for _, t := range c.watch {
		t.mu.Lock()
		if m := t.ready.min(); m != nil {
			anyReady = true
			if cand := (Candidate{m.pri, m.id}); !t.pausedLocked(now) && (!ok || cand.Before(best)) {
				best, ok = cand, true
			}
		}
		t.mu.Unlock()
	}
	return best, ok, anyReady
}

// TakeAtMost reserves for the client the lowest (pri, id) ready job of its
// watched, unpaused tubes if it does not come after bound: Taken, with
// the job. Otherwise it reserves nothing and answers Lost with its best
// candidate (another store's is better), or Empty. Its best may be better
// than what BestReady said before: a job that beats bound beats every
// candidate bound was chosen among.
func (c *Client) TakeAtMost(bound Candidate) (*Job, Candidate, TakeResult) {
	j, lost := c.takeBounded(c.s.now(), nil, &bound)
	switch {
	case j != nil:
		return j, Candidate{j.pri, j.id}, Taken
	case lost != nil:
		return nil, *lost, Lost
	}
	return nil, Candidate{}, Empty
}

// Unreserve returns a job the client reserved to ready, at its priority
// and id, as if the reservation had not been made: its reserve count goes
// back down, nothing is logged (a reservation is not), and the job goes
// to the tube's next waiter. For a job an offer reserved for a wait that
// had ended (another store's offer won, or the wait's timer): the client
// never received it. It reports false when the client does not hold the
// job.
func (c *Client) Unreserve(id uint64) bool {
	j := c.ownedLocked(id)
	if j == nil {
		return false
	}
	t := j.tube
	now := c.s.now()
	t.detachLocked(j)
	j.counts.reserves--
	t.enqueueLocked(j, 0, now)
	hs := t.dispatchLocked(now, nil)
	t.mu.Unlock()
	c.s.complete(hs)
	return true
}

// DeadlineSoonIn is how long until the client's soonest reserved job is
// within DeadlineMargin of its TTR (zero or less: it is now); ok false
// when the client holds no job. A session whose reserve spans stores
// times its own DEADLINE_SOON from the soonest over them.
func (c *Client) DeadlineSoonIn() (d time.Duration, ok bool) {
	now := c.s.now()
	_, at := c.deadlineSoon(now)
	if at < 0 {
		return 0, false
	}
	return time.Duration(at - now), true
}
