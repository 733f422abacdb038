package store

import "time"

// Stats are the server-wide job figures of beanstalkd's stats command.
type Stats struct {
	Urgent, Ready, Reserved, Delayed, Buried int64
	TotalJobs, JobTimeouts, Waiting          int64
	Tubes                                    int
}

// Jobs are the jobs the store holds, in every state.
func (s Stats) Jobs() int64 { return s.Ready + s.Reserved + s.Delayed + s.Buried }

// Stats reads the global counters. Each is exact, but they are read one by
// one, so a snapshot taken while jobs move may be off by the moving jobs.
func (s *Store) Stats() Stats {
	c := &s.counts
	s.registryMu.RLock()
	tubes := len(s.tubeList)
	s.registryMu.RUnlock()
	return Stats{
		Urgent:      c.urgent.Load(),
		Ready:       c.ready.Load(),
		Reserved:    c.reserved.Load(),
		Delayed:     c.delayed.Load(),
		Buried:      c.buried.Load(),
		TotalJobs:   c.totalJobs.Load(),
		JobTimeouts: c.timeouts.Load(),
		Waiting:     c.waiting.Load(),
		Tubes:       tubes,
	}
}

// TubeStats are the figures of beanstalkd's stats-tube command.
type TubeStats struct {
	Name                                     string
	Urgent, Ready, Reserved, Delayed, Buried int
	TotalJobs                                uint64
	Using, Watching, Waiting                 int
	CmdDelete, CmdPause                      uint64
	Pause, PauseTimeLeft                     time.Duration
}

// TubeStats snapshots one tube under its lock.
func (s *Store) TubeStats(name []byte) (TubeStats, bool) {
	var st TubeStats
	ok := s.withTube(name, func(t *Tube) { st = s.tubeStatsLocked(t) })
	return st, ok
}

// tubeStatsLocked copies t's figures. t.mu must be held.
func (s *Store) tubeStatsLocked(t *Tube) TubeStats {
	st := TubeStats{
		Name:      t.name,
		Urgent:    t.nUrgent,
		Ready:     t.ready.Len(),
		Reserved:  t.nReserved,
		Delayed:   t.delayed.Len(),
		Buried:    t.nBuried,
		TotalJobs: t.totalJobs,
		Using:     t.nUsing,
		Watching:  t.nWatching,
		Waiting:   len(t.waiters),
		CmdDelete: t.cmdDelete,
		CmdPause:  t.cmdPause,
	}
	// A pause that has run out is over, as beanstalkd's prottick has
	// ended it before any command, whether or not the timer has.
	if now := s.now(); t.pausedLocked(now) {
		st.Pause = time.Duration(t.pauseDur)
		st.PauseTimeLeft = time.Duration(t.pauseUntil - now)
	}
	return st
}

// JobStats are the figures of beanstalkd's stats-job command.
type JobStats struct {
	ID                                          uint64
	Tube                                        string
	State                                       State
	Pri                                         uint32
	Age, Delay, TTR, TimeLeft                   time.Duration
	File                                        int64
	Reserves, Timeouts, Releases, Buries, Kicks uint32
}

// jobStats snapshots one job under its tube's lock, and shows it to c if c
// is not nil.
func (s *Store) jobStats(id uint64, c *Client) (JobStats, bool) {
	j := s.lookup(id)
	if j == nil {
		return JobStats{}, false
	}
	t := j.tube
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.state == StateInvalid {
		return JobStats{}, false
	}
	if c != nil {
		c.showLocked(j)
	}
	return s.jobStatsLocked(j, s.now()), true
}

// jobStatsLocked copies j's figures as of now; j's tube lock must be held.
func (s *Store) jobStatsLocked(j *Job, now int64) JobStats {
	t := j.tube
	st := JobStats{
		ID:       j.id,
		Tube:     t.name,
		State:    j.state,
		Pri:      j.pri,
		Age:      time.Duration(now - j.createdAt),
		Delay:    time.Duration(j.delayNS()),
		TTR:      time.Duration(j.ttrNS()),
		Reserves: j.counts.reserves,
		Timeouts: j.counts.timeouts,
		Releases: j.counts.releases,
		Buries:   j.counts.buries,
		Kicks:    j.counts.kicks,
		File:     j.file(),
	}
	if j.state == StateReserved || j.state == StateDelayed {
		st.TimeLeft = time.Duration(j.deadline - now)
	}
	return st
}
