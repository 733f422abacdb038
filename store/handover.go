package store

import "time"

// A cluster's group leader that hands its leadership to another member
// (internal/member's handOver) hands its sessions' reservations over
// too, as they are not in the group's log: it stops handing jobs out
// (PauseJobs), lists what each of its sessions' clients holds
// (Client.Reservations), and the next leader's clients of the same
// sessions take those jobs when it begins to serve (Client.Adopt). Then,
// or if the leadership stays, the leader ends its pause (ResumeJobs).

// Reservation is a job a client holds, the end of its TTR, wall clock
// (Unix nanoseconds, as the log records deadlines), and its reserve and
// timeout counts, which the log has only as of the job's last record.
type Reservation struct {
	ID                 uint64
	Deadline           int64
	Reserves, Timeouts uint32
	// NotBefore, when not 0, is a wall-clock time before which the
	// reservation must not have been made or last touched (its deadline
	// less the job's TTR) to be adopted: its session's process had ended
	// by then.
	NotBefore int64
}

// Reservations lists the jobs c holds, the oldest reservation first.
func (c *Client) Reservations() []Reservation {
	c.mu.Lock()
	var jobs []*Job
	if c.res != nil {
		for j := c.res.order.head; j != nil; j = j.next {
			jobs = append(jobs, j)
		}
	}
	c.mu.Unlock()
	out := make([]Reservation, 0, len(jobs))
	for _, j := range jobs {
		t := j.tube // the tube's lock comes before the client's
		t.mu.Lock()
		if j.state == StateReserved && j.owner == c {
			out = append(out, Reservation{ID: j.id, Deadline: c.s.wall(j.deadline),
				Reserves: j.counts.reserves, Timeouts: j.counts.timeouts})
		}
		t.mu.Unlock()
	}
	return out
}

// Adopt makes c hold the ready job r names until its deadline (at least
// a moment from now), with its counts: a reservation c's session held on
// the group's last leader, handed over with the leadership. Its reserve
// is not counted again. It reports false, changing nothing, when the job
// is not here or not ready (deleted, released or buried since), or c is
// closed.
func (c *Client) Adopt(r Reservation) bool {
	s := c.s
	j := s.lookup(r.ID)
	if j == nil {
		return false
	}
	t := j.tube
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.state != StateReady {
		return false
	}
	if r.NotBefore != 0 && r.Deadline-int64(j.ttr)*int64(time.Second) < r.NotBefore {
		return false
	}
	t.adoptLocked(j, c, max(s.mono(r.Deadline), s.now()+1))
	if j.state != StateReserved || j.owner != c {
		return false
	}
	j.counts.reserves = max(j.counts.reserves, r.Reserves)
	j.counts.timeouts = max(j.counts.timeouts, r.Timeouts)
	return true
}

// Holding is the job id if c holds it, else nil: shown to c (its reply
// waits for the job's put).
func (c *Client) Holding(id uint64) *Job {
	j := c.s.lookup(id)
	if j == nil {
		return nil
	}
	t := j.tube
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.state != StateReserved || j.owner != c {
		return nil
	}
	c.showLocked(j)
	return j
}

// Holds reports whether c holds job id reserved, showing it nothing: a
// cluster member's session asks its group's new leader so whether a job
// it counts as held survived the failover (docs/design/shards.md 6.4).
func (c *Client) Holds(id uint64) bool {
	j := c.ownedLocked(id)
	if j == nil {
		return false
	}
	j.tube.mu.Unlock()
	return true
}

// PauseJobs stops handing jobs out as HoldJobs does, until ResumeJobs
// (each PauseJobs is resumed once).
func (s *Store) PauseJobs() { s.pausing.Add(1) }

// ResumeJobs ends a PauseJobs: once none is left (and HoldJobs was not
// called), jobs are handed out again, first to the reserves that waited
// meanwhile.
func (s *Store) ResumeJobs() {
	if s.pausing.Add(-1) > 0 || s.holding.Load() {
		return
	}
	now := s.now()
	for _, name := range s.TubeNames() {
		t := s.findTube([]byte(name))
		if t == nil {
			continue
		}
		t.mu.Lock()
		hs := t.dispatchLocked(now, nil)
		t.mu.Unlock()
		s.complete(hs)
		s.releaseTube(t)
	}
}
