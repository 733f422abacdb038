package store

import (
	"bytes"
	"errors"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// A tube moves between a cluster's shard groups (internal/replication's
// tubes.go, internal/member's moves of tubes) as its jobs' full records:
// the source's leader exports them once no job of the tube is reserved
// (ExportTube), the destination's leader takes them as its own, logged
// (ImportTube), and the source drops them once the move is decided
// (Client.ClearTube). A job keeps its id, state, priority, remaining
// delay, TTR, counts and body, and buried jobs their order; an id of
// another group's prefix never moves this store's id counter (ownID).

// TubeFigures are the figures of a tube that move with it, beside its
// jobs: its stats-tube counters and its pause.
type TubeFigures struct {
	TotalJobs uint64        `json:"total_jobs"`
	CmdDelete uint64        `json:"cmd_delete"`
	CmdPause  uint64        `json:"cmd_pause"`
	Pause     time.Duration `json:"pause,omitempty"`      // the last pause-tube's, while paused
	PauseLeft time.Duration `json:"pause_left,omitempty"` // what is left of it
}

// ErrTubeHeld refuses to export a tube while a job of it is reserved: its
// holder may yet delete, release or bury it here.
var ErrTubeHeld = errors.New("store: a job of the tube is reserved")

// ExportTube is the named tube's jobs as wal frames of full records (as
// the log writes them; buried jobs in the order of their burial), how
// many, and the tube's figures; ok is false when the tube does not
// exist. A tube with a reserved job is refused (ErrTubeHeld).
func (s *Store) ExportTube(name []byte) (frames []byte, jobs int, fig TubeFigures, ok bool, err error) {
	t := s.findTube(name)
	if t == nil {
		return nil, 0, fig, false, nil
	}
	defer s.releaseTube(t)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.nReserved > 0 {
		return nil, 0, fig, true, ErrTubeHeld
	}
	add := func(j *Job) {
		r := s.record(wal.KindFull, j)
		frames = wal.AppendFrame(frames, &r)
		jobs++
	}
	for _, j := range t.ready.all() {
		add(j)
	}
	for _, j := range t.delayed.all() {
		add(j)
	}
	for j := t.buried.head; j != nil; j = j.next {
		add(j)
	}
	fig = TubeFigures{TotalJobs: t.totalJobs, CmdDelete: t.cmdDelete, CmdPause: t.cmdPause}
	if now := s.now(); t.pausedLocked(now) {
		fig.Pause, fig.PauseLeft = time.Duration(t.pauseDur), time.Duration(t.pauseUntil-now)
	}
	return frames, jobs, fig, true, nil
}

// ImportTube makes the jobs of frames (ExportTube's) in this store, each
// logged as its full record, so that the group's replicas make them too
// (their Apply); a job of an id the store holds already is skipped (an
// import sent again). The client's PendingAck is then the position the
// log must acknowledge. The tube takes fig's counters and pause here,
// where its replicas count only the jobs (as a failover loses a pause).
// It returns how many jobs it made.
func (c *Client) ImportTube(name []byte, frames []byte, fig TubeFigures) (int, error) {
	s := c.s
	recs, err := wal.DecodeFrames(nil, frames)
	if err != nil {
		return 0, err
	}
	t := s.acquireTube(name) // held while the jobs are made
	defer s.releaseTube(t)
	now := s.now()
	made := 0
	for i := range recs {
		r := &recs[i]
		if r.Kind != wal.KindFull || r.Tube != t.name {
			return made, errors.New("store: an import holds a record that is not a full one of its tube")
		}
		if s.lookup(r.ID) != nil {
			continue
		}
		j := newJob(bytes.Clone(r.Body))
		j.id, j.createdAt, j.slot = r.ID, s.mono(r.CreatedAt), -1
		t.refs.Add(1) // the job's
		j.tube = t
		t.mu.Lock()
		s.insertJobLocked(j)
		s.placeLocked(j, r, now)
		t.totalJobs++
		rec := s.record(wal.KindFull, j)
		err := s.logLocked(c, j, &rec)
		t.mu.Unlock()
		s.counts.totalJobs.Add(1)
		s.raiseID(r.ID)
		if err != nil {
			return made, err
		}
		made++
	}
	t.mu.Lock()
	t.totalJobs = max(t.totalJobs, fig.TotalJobs)
	t.cmdDelete, t.cmdPause = max(t.cmdDelete, fig.CmdDelete), max(t.cmdPause, fig.CmdPause)
	if fig.PauseLeft > 0 {
		t.pauseDur, t.pauseUntil = int64(fig.Pause), now+int64(fig.PauseLeft)
		s.timers.schedule(&t.pauseTimer, t.pauseUntil)
	}
	t.mu.Unlock()
	return made, nil
}

// JobIn reports which tube the job of id is in, and whether c holds it
// reserved; ok is false when there is no such job.
func (c *Client) JobIn(id uint64) (tube string, held, ok bool) {
	j := c.s.lookup(id)
	if j == nil {
		return "", false, false
	}
	t := j.tube
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.state == StateInvalid {
		return "", false, false
	}
	return t.name, j.state == StateReserved && j.owner == c, true
}
