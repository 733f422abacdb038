package store

import (
	"errors"

	"github.com/sproutmq/sprout/store/wal"
)

// ErrNoSpace is returned by operations the write-ahead log cannot take
// because the disk is full; deletes are never refused.
var ErrNoSpace = errors.New("store: no space for the write-ahead log")

// record describes j for the log as it will be after the caller's change;
// the caller passes the new state and fields through j before calling, or
// adjusts the returned record.
func (s *Store) record(kind wal.Kind, j *Job) wal.Record {
	r := wal.Record{
		Kind:      kind,
		ID:        j.id,
		State:     uint8(j.state),
		Pri:       j.pri,
		Delay:     j.delayNS(),
		TTR:       j.ttrNS(),
		CreatedAt: s.wall(j.createdAt),
		Reserves:  j.counts.reserves,
		Timeouts:  j.counts.timeouts,
		Releases:  j.counts.releases,
		Buries:    j.counts.buries,
		Kicks:     j.counts.kicks,
	}
	if j.state == StateDelayed {
		r.Deadline = s.wall(j.deadline)
	}
	if kind == wal.KindFull {
		r.Tube = j.tube.name
		r.Body = j.Body()
	}
	return r
}

// logLocked appends r for j (whose tube lock is held) and notes the LSN the
// client's reply must wait for. Without a log it does nothing.
func (s *Store) logLocked(c *Client, j *Job, r *wal.Record) error {
	if s.log == nil {
		return nil
	}
	prev := wal.Loc{}
	if r.Kind != wal.KindUpdate {
		prev = j.logLoc()
	}
	lsn, loc, err := s.log.Append(r, prev)
	if err != nil {
		if errors.Is(err, wal.ErrNoSpace) {
			return ErrNoSpace
		}
		return err
	}
	if r.Kind == wal.KindFull {
		if j.seg == 0 {
			j.putLSN = lsn // the job's first record: the one that creates it
		}
		j.seg = loc.Seg
	}
	if c != nil && lsn > c.lsn {
		c.lsn = lsn
	}
	return nil
}

// wall converts the store's monotonic time to wall-clock ns for the log.
func (s *Store) wall(mono int64) int64 { return s.wallBase + mono }

// mono converts a logged wall-clock time back.
func (s *Store) mono(wall int64) int64 { return wall - s.wallBase }

// PendingLSN is the log position the client's latest change, or the put of
// the latest job shown to it, must reach before its reply may be sent; 0
// without a log. The engine compares it with Log.Durable.
func (c *Client) PendingLSN() uint64 { return c.lsn }

// Reveal notes that the reply being built shows j to the client, so it must
// wait until j's put is durable: otherwise a consumer could work on a job
// that a crash then takes back (beanstalkd logs a job before any client can
// see it). Call on the client's goroutine.
func (c *Client) Reveal(j *Job) {
	if j.putLSN > c.lsn {
		c.lsn = j.putLSN
	}
}

// recover loads the jobs the log found at start, in id order, and resumes
// the id counter after the highest id ever issued.
func (s *Store) recover() {
	now := s.now()
	for _, r := range s.log.Recovered() {
		t := s.acquireTube([]byte(r.Tube))
		j := newJob(r.Body)
		j.id, j.tube, j.createdAt = r.ID, t, s.mono(r.CreatedAt)
		j.pri, j.delay, j.ttr = r.Pri, seconds(r.Delay), seconds(max(r.TTR, int64(MinTTR)))
		j.slot, j.seg = -1, r.Loc.Seg
		j.counts = jobCounts{
			reserves: r.Reserves, timeouts: r.Timeouts, releases: r.Releases,
			buries: r.Buries, kicks: r.Kicks,
		}
		t.mu.Lock()
		s.insertJobLocked(j)
		switch r.State {
		case wal.StateBuried:
			t.buryLocked(j)
			j.counts.buries = r.Buries // beanstalkd bumps it on every restart; Sprout does not
		case wal.StateDelayed:
			// A deadline that passed while the server was down is due now.
			t.enqueueLocked(j, max(s.mono(r.Deadline)-now, 1), now)
		default:
			t.enqueueLocked(j, 0, now)
		}
		t.mu.Unlock()
	}
	if id := s.log.LastID(); id > s.lastID.Load() {
		s.lastID.Store(id)
	}
}

// Migrate implements wal.Migrator: each job whose full record is still in
// seg is written again, whole, at the head of the log.
func (s *Store) Migrate(seg uint32, ids []uint64) {
	for _, id := range ids {
		j := s.lookup(id)
		if j == nil {
			continue
		}
		t := j.tube
		t.mu.Lock()
		if j.state != StateInvalid && j.seg == seg {
			r := s.record(wal.KindFull, j)
			if err := s.logLocked(nil, j, &r); err == nil {
				s.log.NoteMigrated()
			}
		}
		t.mu.Unlock()
	}
}

// LogStats reports the write-ahead log's figures; ok is false without one.
func (s *Store) LogStats() (wal.Stats, bool) {
	if s.log == nil {
		return wal.Stats{}, false
	}
	return s.log.Stats(), true
}

// JobFile is the log segment holding a job's full record (stats-job
// "file"), 0 without a log.
func (j *Job) file() int64 { return int64(j.seg) }

// logLoc is where the job's latest full record is: its segment, and its
// size, which depends only on the tube name and body.
func (j *Job) logLoc() wal.Loc {
	if j.seg == 0 {
		return wal.Loc{}
	}
	return wal.Loc{Seg: j.seg, Size: uint32(wal.FullSize(len(j.tube.name), int(j.bodyLen)))}
}
