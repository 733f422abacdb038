package store

import (
	"bytes"
	"errors"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// A tube moves between a cluster's shard groups (internal/replication's
// tubes.go, internal/member's moves of tubes) as its jobs' full records:
// the source's leader exports them (ExportTube), the destination's leader
// takes them as its own, logged (ImportTube), and the source drops them
// once the move is decided (DropTube). A job keeps its id, state,
// priority, remaining delay, TTR, counts and body, buried jobs their
// order, and a reserved job its reservation: the destination's client of
// its holder takes it, with what was left of its TTR. An id of another
// group's prefix never moves this store's id counter (ownID).

// TubeFigures are the figures of a tube that move with it, beside its
// jobs: its stats-tube counters and its pause.
type TubeFigures struct {
	TotalJobs uint64        `json:"total_jobs"`
	CmdDelete uint64        `json:"cmd_delete"`
	CmdPause  uint64        `json:"cmd_pause"`
	Pause     time.Duration `json:"pause,omitempty"`      // the last pause-tube's, while paused
	PauseLeft time.Duration `json:"pause_left,omitempty"` // what is left of it
}

// Held is a reserved job of an exported tube and the client holding it.
type Held struct {
	ID     uint64
	Holder *Client
}

// ExportTube is the named tube's jobs as wal frames of full records (as
// the log writes them; buried jobs in the order of their burial; a
// reserved job with the end of its TTR as its Deadline), how many, the
// reserved ones with their holders, and the tube's figures; ok is false
// when the tube does not exist.
func (s *Store) ExportTube(name []byte) (frames []byte, jobs int, held []Held, fig TubeFigures, ok bool) {
	t := s.findTube(name)
	if t == nil {
		return nil, 0, nil, fig, false
	}
	defer s.releaseTube(t)
	reserved := s.reservedIn(t)
	// The records are taken under the tube's lock and encoded after it:
	// the node goroutine of a group's leader takes that lock for each job
	// of its committed entries (Located), and encoding a tube of 20,000
	// jobs, a second on a loaded machine, stalled it past an election
	// timeout.
	t.mu.Lock()
	var recs []wal.Record
	add := func(j *Job) {
		r := s.record(wal.KindFull, j)
		if j.state == StateReserved {
			r.Deadline = s.wall(j.deadline)
		}
		recs = append(recs, r)
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
	for _, l := range reserved {
		if j := l.j; j.state == StateReserved { // still, under the tube's lock
			add(j)
			held = append(held, Held{ID: j.id, Holder: j.owner})
		}
	}
	fig = TubeFigures{TotalJobs: t.totalJobs, CmdDelete: t.cmdDelete, CmdPause: t.cmdPause}
	if now := s.now(); t.pausedLocked(now) {
		fig.Pause, fig.PauseLeft = time.Duration(t.pauseDur), time.Duration(t.pauseUntil-now)
	}
	t.mu.Unlock()
	size := 0
	for i := range recs {
		size += wal.FrameSize(&recs[i])
	}
	frames = make([]byte, 0, size) // grown by appends, a tube of 20 MB was copied 80 MB over
	for i := range recs {
		frames = wal.AppendFrame(frames, &recs[i])
	}
	return frames, len(recs), held, fig, true
}

// ImportTube makes the jobs of frames (ExportTube's) in this store, each
// logged as its full record, so that the group's replicas make them too
// (their Apply); a job of an id the store holds already is skipped (an
// import sent again). A reserved job whose holder's client here is in
// holders is reserved by it until the end of its TTR as recorded, its
// reserve not counted again; one without is ready, as after a failover.
// The client's PendingAck is then the position the log must acknowledge.
// The tube takes fig's counters and pause here (the pause logged, with
// Options.LogPauses), where its replicas count only the jobs; an empty
// tube, freed as the import ends, keeps its pause for when it is made.
// It returns how many jobs it made.
func (c *Client) ImportTube(name []byte, frames []byte, fig TubeFigures, holders map[uint64]*Client) (int, error) {
	s := c.s
	recs, err := wal.DecodeFrames(nil, frames)
	if err != nil {
		return 0, err
	}
	gen := s.resets.Load()
	t := s.acquireTube(name) // held while the jobs are made
	// An empty tube lives on its users' and watchers' references, which
	// reach this store after the import (the routers' refs follow the
	// move): its pause waits for them.
	defer s.releaseTubeKeeping(t, true)
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
		j.tube = t
		t.mu.Lock()
		if s.resetSince(gen) {
			t.mu.Unlock()
			return made, ErrReset
		}
		t.refs.Add(1) // the job's
		s.insertJobLocked(j)
		s.placeLocked(j, r, now)
		if holder := holders[r.ID]; r.State == wal.StateReserved && holder != nil {
			t.adoptLocked(j, holder, max(s.mono(r.Deadline), now+1))
		}
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
	if s.resetSince(gen) {
		t.mu.Unlock()
		return made, ErrReset
	}
	t.totalJobs = max(t.totalJobs, fig.TotalJobs)
	t.cmdDelete, t.cmdPause = max(t.cmdDelete, fig.CmdDelete), max(t.cmdPause, fig.CmdPause)
	if fig.PauseLeft > 0 {
		t.pauseDur, t.pauseUntil = int64(fig.Pause), now+int64(fig.PauseLeft)
		s.timers.schedule(&t.pauseTimer, t.pauseUntil)
		s.logPause(c, t.name, t.pauseDur, s.wall(t.pauseUntil), wal.Req{})
	}
	t.mu.Unlock()
	return made, nil
}

// adoptLocked makes c hold j, a ready job of t, until deadline: a
// reservation moved in with its tube, whose reserve was counted where it
// was made. t.mu must be held.
func (t *Tube) adoptLocked(j *Job, c *Client, deadline int64) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	t.detachLocked(j)
	j.state = StateReserved
	j.owner = c
	j.deadline = deadline
	r := c.reservationsLocked()
	r.heap.push(j)
	r.order.pushBack(j)
	c.rearmTTRLocked()
	c.mu.Unlock()
	t.nReserved++
	t.s.counts.reserved.Add(1)
}

// DropTube deletes every job of the named tube, reserved ones too (their
// holders' reservations end), each logged as a delete, and returns how
// many: the tube moved away, or a move into this store was aborted. c's
// PendingAck is then the position the log must acknowledge. A Reset
// meanwhile stops it.
func (c *Client) DropTube(name []byte) int {
	s := c.s
	gen := s.resets.Load()
	t := s.findTube(name)
	if t == nil {
		return 0
	}
	defer s.releaseTube(t)
	reserved := s.reservedIn(t)
	t.mu.Lock()
	if s.resetSince(gen) {
		t.mu.Unlock()
		return 0
	}
	var jobs []*Job
	for _, j := range t.ready.all() {
		jobs = append(jobs, j)
	}
	for _, j := range t.delayed.all() {
		jobs = append(jobs, j)
	}
	for j := t.buried.head; j != nil; j = j.next {
		jobs = append(jobs, j)
	}
	for _, l := range reserved {
		if l.j.state == StateReserved {
			jobs = append(jobs, l.j)
		}
	}
	// Dropped bulkBatch at a time, the tube's lock let go between: the
	// node goroutine of the group's leader takes it for each job it
	// locates (Located), and a move's 20,000 deletes at once would hold
	// it as long as its export did. A job that ended meanwhile is passed
	// over.
	dropped := 0
	for i, j := range jobs {
		if i > 0 && i%bulkBatch == 0 {
			t.mu.Unlock()
			t.mu.Lock()
			if s.resetSince(gen) {
				break
			}
		}
		if j.state == StateInvalid {
			continue
		}
		s.dropLocked(c, t, j)
		dropped++
	}
	t.mu.Unlock()
	t.refs.Add(int64(-dropped)) // the jobs' references; ours keeps t alive
	return dropped
}

// Holds reports whether the store holds a job of id.
func (s *Store) Holds(id uint64) bool {
	j := s.lookup(id)
	if j == nil {
		return false
	}
	t := j.tube
	t.mu.Lock()
	defer t.mu.Unlock()
	return j.state != StateInvalid
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
