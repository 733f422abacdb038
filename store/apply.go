package store

import (
	"bytes"

	"github.com/sproutmq/sprout/internal/atomicmax"
	"github.com/sproutmq/sprout/store/wal"
)

// Apply makes the records' changes, in order, as a replica does: records
// that a cluster's leader logged and a majority committed
// (internal/replication). Records carry whole states, so applying one is
// what recovery does with it, not a command run again: a full record
// makes the job as it says (replacing the job of that id, if any), an
// update moves it and sets its fields, a delete drops it, and an id
// watermark raises the id counter. Apply logs nothing and raises no
// client's PendingAck: the records are already in this member's log, and
// no client is shown anything.
//
// Jobs are placed as recovery places them: a job recorded as reserved is
// ready (reservations live on the leader only), a delayed one becomes
// ready at its logged deadline, which is the leader's wall clock. An
// update or delete of a job this store does not hold is skipped.
//
// A KindClock raises the store's clock (Clock), and with Options.Dedup
// the records' keys make the dedup table as DedupTable.Add makes it: a
// keyed record makes its key's entry at the clock's time (or counts one
// more record of a kick), a KindReq sets its entry, and a KindClock
// drops the entries it expires. So every replica's table is the same
// function of the log, whatever its own clock says.
//
// locs, if not nil, says where each record is in this member's log (a
// full record's segment; zero: nowhere known), as recovery's Loc does:
// the job's latest full record is there, which is what Migrate moves.
func (s *Store) Apply(records []wal.Record, locs []wal.Loc) {
	now := s.now()
	for i := range records {
		r := &records[i]
		var seg uint32
		if locs != nil {
			seg = locs[i].Seg
		}
		switch r.Kind {
		case wal.KindFull:
			if s.lookup(r.ID) != nil {
				// Compaction's rewrite of a live job: the job (its tube
				// and body never change) takes the recorded state.
				s.applyUpdate(r, seg, now)
				continue
			}
			body := r.Body
			if len(body) > MaxCopiedBody {
				body = bytes.Clone(body) // r.Body is the entry's: do not keep it
			}
			j := s.restore(r, body, seg, now)
			j.tube.mu.Lock()
			j.tube.totalJobs++
			j.tube.mu.Unlock()
			if r.Req != wal.ImportKey { // a moved job counted where it was put
				s.counts.totalJobs.Add(1)
			}
			s.raiseID(r.ID)
		case wal.KindUpdate:
			s.applyUpdate(r, 0, now)
		case wal.KindDelete:
			s.applyDelete(r.ID)
		case wal.KindIDs:
			// As after a restart, ids go on above the logged watermark:
			// of this store's prefix only (a snapshot names the highest
			// id of its records, which may be of a tube moved in).
			if s.ownID(r.ID) {
				s.raiseID(r.ID)
				atomicmax.Uint64(&s.idMark, r.ID)
			}
		}
		s.applyDedup(r)
	}
}

// restore makes the job r records, with body, in the state r says, as
// recovery and Apply make jobs: reserved counts as ready, a delayed job's
// deadline is r's wall-clock deadline (one that has passed is due now).
// seg is where r is logged (0: nowhere known).
func (s *Store) restore(r *wal.Record, body []byte, seg uint32, now int64) *Job {
	t := s.acquireTube([]byte(r.Tube))
	j := newJob(body)
	j.id, j.tube, j.createdAt = r.ID, t, s.mono(r.CreatedAt)
	j.slot, j.seg = -1, seg
	t.mu.Lock()
	s.insertJobLocked(j)
	s.placeLocked(j, r, now)
	t.mu.Unlock()
	return j
}

// placeLocked sets j's fields from r and puts it where r's state says;
// j is in no heap or FIFO. j's tube lock must be held.
func (s *Store) placeLocked(j *Job, r *wal.Record, now int64) {
	t := j.tube
	j.pri, j.delay, j.ttr = r.Pri, seconds(r.Delay), seconds(max(r.TTR, int64(MinTTR)))
	j.counts = jobCounts{
		reserves: r.Reserves, timeouts: r.Timeouts, releases: r.Releases,
		buries: r.Buries, kicks: r.Kicks,
	}
	switch r.State {
	case wal.StateBuried:
		t.buryLocked(j)
		j.counts.buries = r.Buries // buryLocked counts a burial; this one is logged already
	case wal.StateDelayed:
		t.enqueueLocked(j, max(s.mono(r.Deadline)-now, 1), now)
	default:
		t.enqueueLocked(j, 0, now)
	}
}

// Located says where records this store logged itself (a cluster's
// leader's, which it does not Apply) are in this member's log, once they
// are committed: a full record's job, if it is still live, has its latest
// full record in locs[i]'s segment, and Migrate finds it there.
func (s *Store) Located(records []wal.Record, locs []wal.Loc) {
	for i := range records {
		if records[i].Kind != wal.KindFull || locs[i].Seg == 0 {
			continue
		}
		s.withLiveJob(records[i].ID, func(t *Tube, j *Job) {
			j.seg = locs[i].Seg
			t.mu.Unlock()
		})
	}
}

// applyUpdate moves a job to the state an update record gives it, and
// for a full record logged in segment seg (non-zero) notes it there.
func (s *Store) applyUpdate(r *wal.Record, seg uint32, now int64) {
	s.withLiveJob(r.ID, func(t *Tube, j *Job) {
		if seg != 0 {
			j.seg = seg
		}
		t.detachLocked(j)
		s.placeLocked(j, r, now)
		hs := t.dispatchLocked(now, nil)
		t.mu.Unlock()
		s.complete(hs)
	})
}

// applyDelete drops a job and counts a delete.
func (s *Store) applyDelete(id uint64) {
	s.withLiveJob(id, func(t *Tube, j *Job) {
		s.unlinkLocked(t, j)
		t.cmdDelete++
		t.mu.Unlock()
		s.releaseTube(t)
	})
}

// withLiveJob calls f with the job of id and its tube, locked, if the job
// is live; f unlocks the tube.
func (s *Store) withLiveJob(id uint64, f func(t *Tube, j *Job)) {
	j := s.lookup(id)
	if j == nil {
		return
	}
	t := j.tube
	t.mu.Lock()
	if j.state == StateInvalid {
		t.mu.Unlock()
		return
	}
	f(t, j)
}

// raiseID makes sure ids up to id are never issued again here, if id is
// of the store's prefix.
func (s *Store) raiseID(id uint64) {
	if s.ownID(id) {
		atomicmax.Uint64(&s.lastID, id)
	}
}

// ownID reports whether id is of the prefix this store issues ids of:
// one of another is a job moved in from another group.
func (s *Store) ownID(id uint64) bool { return id>>IDSeqBits == s.idBase>>IDSeqBits }
