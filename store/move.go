package store

import (
	"bytes"
	"cmp"
	"errors"
	"slices"
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
	// Stamp is the tube's creation stamp where it was made: the move
	// keeps its place in list-tubes. 0: none (an older member's).
	Stamp uint64 `json:"stamp,omitempty"`
}

// movedFigures are an imported tube's counters and creation stamp, kept
// when the import's tube is freed at once (it had no job: it lives on the
// references that reach this store after the import) for when those
// make it again, as its pause is; until movedKeep has passed (its
// monotonic nanoseconds), after which the tube, made again, is a new one:
// no session referenced it meanwhile, and one server would have freed it.
type movedFigures struct {
	totalJobs, cmdDelete, cmdPause, stamp uint64
	until                                 int64
}

// movedKeep bounds how long an imported tube's figures wait for the
// references that make it again: the members sync theirs as they learn
// of the move (router.Router.Replaced), within a second or so.
const movedKeep = 10 * time.Second

// keepMovedLocked keeps t's figures, as it is freed after its import, and
// forgets those kept longer than movedKeep. registryMu is held for
// writing.
func (s *Store) keepMovedLocked(t *Tube) {
	now := s.now()
	for name, f := range s.moved {
		if f.until <= now {
			delete(s.moved, name)
		}
	}
	if s.moved == nil {
		s.moved = make(map[string]movedFigures)
	}
	s.moved[t.name] = movedFigures{totalJobs: t.totalJobs, cmdDelete: t.cmdDelete, cmdPause: t.cmdPause, stamp: t.stamp,
		until: now + int64(movedKeep)}
}

// placeByStampLocked gives t, listed, the creation stamp stamp, older
// than its own, and moves it up the list to its place by stamp.
// registryMu is held for writing.
func (s *Store) placeByStampLocked(t *Tube, stamp uint64) {
	t.stamp = stamp
	i := t.listIndex
	for i > 0 && s.tubeList[i-1].stamp > stamp {
		s.tubeList[i] = s.tubeList[i-1]
		s.tubeList[i].listIndex = i
		i--
	}
	s.tubeList[i] = t
	t.listIndex = i
}

// resumeMovedLocked gives t, just made, the figures an import kept of
// its name. registryMu is held for writing.
func (s *Store) resumeMovedLocked(t *Tube) {
	f, ok := s.moved[t.name]
	if !ok {
		return
	}
	delete(s.moved, t.name)
	if f.until <= s.now() {
		return
	}
	t.totalJobs, t.cmdDelete, t.cmdPause = f.totalJobs, f.cmdDelete, f.cmdPause
	if f.stamp != 0 && f.stamp < t.stamp {
		s.placeByStampLocked(t, f.stamp)
	}
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
	frames, jobs, held, fig, _, ok = s.exportTube(name, nil)
	return frames, jobs, held, fig, ok
}

// ExportTubeCopy is ExportTube's frames, handed to send in chunks of at
// most chunk bytes each (or one frame, when that is larger; a chunk of 0
// is one chunk; no jobs, no chunk), as they are made, and their count, with what they say
// of each job (the TubeCopy ExportTubeChanges compares with later); ok is
// false when the tube does not exist, and err is send's, which stops it.
// Imported one after another, in their order, the chunks make what one
// import of them all would. A chunk is send's only until it returns.
//
// Unlike ExportTube's, its records are taken copyBatch at a time, the
// tube's lock let go between (and while send runs): a copy is taken while
// the tube serves (a move's ahead of its freeze), and one hold for a tube
// of 250,000 jobs stalled its group's node goroutine (it takes the lock
// for each job of its committed entries) past an election timeout; and
// only a chunk's frames are held at a time. Each job's record is its
// state when its batch was taken, which is what the TubeCopy says. The
// buried jobs are the exception: their order is their records', so they
// are all taken in the first hold, and a job buried after it is left out
// (it goes with the changes, which come after them, in the order of their
// burials).
//
// From its first hold the tube notes each job that changes, so the
// export of the changes (ExportTubeChanges) looks at those alone, until
// that export, EndTubeCopy, a later copy of the tube, or more changes
// than twice the copy's jobs (then that export compares every job); when
// it returns no jobs or an error, it has ended that already.
func (s *Store) ExportTubeCopy(name []byte, chunk int, send func(frames []byte) error) (jobs int, cp *TubeCopy, ok bool, err error) {
	t := s.findTube(name)
	if t == nil {
		return 0, nil, false, nil
	}
	defer s.releaseTube(t)
	// Records are taken under the lock, encoded and sent after it, a
	// chunk at a time (cut).
	var recs []wal.Record
	var buf []byte
	add := func(j *Job) {
		r := s.exportRecord(j)
		cp.jobs[r.ID] = copiedOf(&r)
		if j.state == StateReserved {
			cp.reserved = append(cp.reserved, j.id)
		}
		recs = append(recs, r)
		jobs++
	}
	cut := func(last bool) error {
		for len(recs) > 0 {
			size, n := wal.FrameSize(&recs[0]), 1
			for ; n < len(recs) && (chunk <= 0 || size+wal.FrameSize(&recs[n]) <= chunk); n++ {
				size += wal.FrameSize(&recs[n])
			}
			if n == len(recs) && !last && (chunk <= 0 || size < chunk) {
				return nil // not a chunk's worth yet
			}
			buf = buf[:0]
			for i := range recs[:n] {
				buf = wal.AppendFrame(buf, &recs[i])
			}
			recs = append(recs[:0], recs[n:]...)
			if err := send(buf); err != nil {
				return err
			}
		}
		return nil
	}
	// The note begins before the reserved jobs are looked up: that scan
	// walks the group's whole id index, unlocked, and a job reserved while
	// it runs would otherwise be neither found nor noted, and missing from
	// the move at its freeze (found by a reviewing helper). Its limit is
	// set again from the copy's jobs in the first hold.
	changes := &tubeChanges{}
	t.mu.Lock()
	changes.limit = 2*(t.ready.Len()+t.delayed.Len()+t.nBuried+t.nReserved) + minChangesNoted
	t.changes = changes
	t.mu.Unlock()
	reserved := s.reservedIn(t)
	if s.beforeCopyHold != nil {
		s.beforeCopyHold()
	}
	t.mu.Lock()
	// The other jobs' pointers are taken in this hold, eight bytes a job,
	// none touched, each job once.
	others := make([]*Job, 0, t.ready.Len()+t.delayed.Len()+len(reserved))
	for _, j := range t.ready.all() {
		others = append(others, j)
	}
	for _, j := range t.delayed.all() {
		others = append(others, j)
	}
	for _, l := range reserved {
		if j := l.j; j.state == StateReserved { // still, under the tube's lock
			others = append(others, j)
		}
	}
	n := len(others) + t.nBuried
	if t.changes == changes {
		changes.limit = max(changes.limit, len(changes.ids)+2*n+minChangesNoted)
	} // else past its limit already: the export compares every job
	cp = &TubeCopy{jobs: make(map[uint64]copiedJob, n), resets: s.resets.Load(), changes: changes}
	for j := t.buried.head; j != nil; j = j.next {
		add(j)
	}
	t.mu.Unlock()
	defer func() {
		if jobs == 0 || err != nil {
			s.endTubeCopy(t, cp)
		}
	}()
	for from := 0; from < len(others); from += copyBatch {
		if err := cut(false); err != nil {
			return jobs, cp, true, err
		}
		if s.betweenCopyBatches != nil {
			s.betweenCopyBatches()
		}
		t.mu.Lock()
		for _, j := range others[from:min(from+copyBatch, len(others))] {
			if j.tube == t && j.state != StateInvalid && j.state != StateBuried {
				add(j) // not deleted, nor buried, since
			}
		}
		t.mu.Unlock()
	}
	return jobs, cp, true, cut(true)
}

// copyBatch is how many jobs ExportTubeCopy records per hold of the
// tube's lock.
const copyBatch = keyBatch

// minChangesNoted is how many changes a tube notes for a copy of a few
// jobs before it lets ExportTubeChanges compare them all instead.
const minChangesNoted = 1 << 16

// TubeCopy is what an export of a tube (ExportTubeCopy) said of each of
// its jobs, by id: what a job's changes touch (its tube, body
// and creation never change). A move that copies a tube ahead of its
// freeze keeps it, and at the freeze sends only what changed since
// (ExportTubeChanges).
type TubeCopy struct {
	jobs map[uint64]copiedJob
	// changes is the tube's note of its jobs changed since the copy
	// began, while the tube's changes field is this one.
	changes  *tubeChanges
	reserved []uint64 // the ids of the jobs copied reserved
	resets   uint64   // the store's resets when the copy began
}

// Len is how many jobs the copy holds (none: nil).
func (cp *TubeCopy) Len() int {
	if cp == nil {
		return 0
	}
	return len(cp.jobs)
}

// tubeChanges are the ids of a tube's jobs changed while a copy of it is
// out (Tube.changes), each as often as it changed: made, taken out of
// where it was (detachLocked), or made ready by its delay's end. What
// changes a job's fields or state does one of these.
type tubeChanges struct {
	ids   []uint64
	limit int // ids noted at most; then the tube notes no more
}

// noteChangeLocked notes j's change while a copy of t is out. t.mu must
// be held. Past its limit the note ends (t.changes nil): the export then
// compares every job, as it does without one.
func (t *Tube) noteChangeLocked(j *Job) {
	ch := t.changes
	if ch == nil {
		return
	}
	if len(ch.ids) == ch.limit {
		t.changes = nil
		return
	}
	ch.ids = append(ch.ids, j.id)
}

// EndTubeCopy ends the named tube's note of changes for cp (a move
// that will not export them: ExportTubeCopy's doc), if it still keeps
// one.
func (s *Store) EndTubeCopy(name []byte, cp *TubeCopy) {
	if t := s.findTube(name); t != nil {
		s.endTubeCopy(t, cp)
		s.releaseTube(t)
	}
}

func (s *Store) endTubeCopy(t *Tube, cp *TubeCopy) {
	t.mu.Lock()
	if t.changes == cp.changes {
		t.changes = nil
	}
	t.mu.Unlock()
}

// copiedJob is a job's fields in a TubeCopy.
type copiedJob struct {
	state                                       uint8
	pri                                         uint32
	delay, ttr, deadline                        int64
	reserves, timeouts, releases, buries, kicks uint32
}

// copiedOfJob is copiedOf(&r) for r, j's full record (Store.record),
// without making the record.
func (s *Store) copiedOfJob(j *Job) copiedJob {
	c := copiedJob{state: uint8(j.state), pri: j.pri, delay: j.delayNS(), ttr: j.ttrNS(),
		reserves: j.counts.reserves, timeouts: j.counts.timeouts, releases: j.counts.releases, buries: j.counts.buries, kicks: j.counts.kicks}
	if j.state == StateDelayed {
		c.deadline = s.wall(j.deadline)
	}
	return c
}

func copiedOf(r *wal.Record) copiedJob {
	return copiedJob{state: r.State, pri: r.Pri, delay: r.Delay, ttr: r.TTR, deadline: r.Deadline,
		reserves: r.Reserves, timeouts: r.Timeouts, releases: r.Releases, buries: r.Buries, kicks: r.Kicks}
}

// ExportTubeChanges is ExportTube of what changed in the tube since the
// export that made since: the jobs whose fields differ from since's or
// that since does not hold, every reserved job (its holder goes with
// it), and in gone the ids of since's jobs the store no longer holds.
// jobs counts the tube's jobs, not those of frames. It looks at the jobs
// the tube noted changed since the copy began, and ends that note; at
// every job when there is none (ExportTubeCopy's doc): a move's freeze
// waits for it, and a walk of 250,000 jobs held the tube's lock for
// 80 ms on a quiet machine, a second under a load.
func (s *Store) ExportTubeChanges(name []byte, since *TubeCopy) (frames []byte, jobs int, held []Held, fig TubeFigures, gone []uint64, ok bool) {
	if since == nil {
		since = &TubeCopy{}
	}
	return s.exportTube(name, since)
}

// exportTube is ExportTube, or with since ExportTubeChanges.
func (s *Store) exportTube(name []byte, since *TubeCopy) (frames []byte, jobs int, held []Held, fig TubeFigures, gone []uint64, ok bool) {
	t := s.findTube(name)
	if t == nil {
		if since != nil {
			for id := range since.jobs {
				gone = append(gone, id)
			}
		}
		return nil, 0, nil, fig, gone, since != nil
	}
	defer s.releaseTube(t)
	// The records are taken under the tube's lock and encoded after it:
	// the node goroutine of a group's leader takes that lock for each job
	// of its committed entries (Located), and encoding a tube of 20,000
	// jobs, a second on a loaded machine, stalled it past an election
	// timeout.
	var recs []wal.Record
	var copied map[uint64]copiedJob
	if since != nil {
		copied = since.jobs
	}
	unchanged := func(j *Job) bool {
		c, ok := copied[j.id]
		return ok && j.state != StateReserved && c == s.copiedOfJob(j)
	}
	t.mu.Lock()
	noted := since != nil && since.changes != nil && t.changes == since.changes
	if noted {
		t.changes = nil // the note ends with this export
	}
	if noted && !s.resetSince(since.resets) {
		// Only the jobs noted changed, and those reserved when copied: in
		// id order, each once, the buried ones in the order of their
		// burials.
		ids := append(since.changes.ids, since.reserved...)
		slices.Sort(ids)
		var buried []*Job
		for _, id := range slices.Compact(ids) {
			j := s.lookup(id)
			switch {
			case j == nil || j.tube != t || j.state == StateInvalid:
				if _, ok := copied[id]; ok {
					gone = append(gone, id)
				}
			case j.state == StateReserved:
				recs = append(recs, s.exportRecord(j))
				held = append(held, Held{ID: j.id, Holder: j.owner})
			case unchanged(j):
			case j.state == StateBuried:
				buried = append(buried, j)
			default:
				recs = append(recs, s.exportRecord(j))
			}
		}
		slices.SortFunc(buried, func(a, b *Job) int { return cmp.Compare(a.deadline, b.deadline) })
		for _, j := range buried {
			recs = append(recs, s.exportRecord(j))
		}
		jobs = t.ready.Len() + t.delayed.Len() + t.nBuried + t.nReserved
	} else {
		// Every job: the reserved ones found in the id index, without
		// the tube's lock (reservedIn takes it).
		t.mu.Unlock()
		reserved := s.reservedIn(t)
		t.mu.Lock()
		kept := 0 // since's jobs the tube holds
		add := func(j *Job) {
			jobs++
			if _, ok := copied[j.id]; ok {
				kept++
			}
			if !unchanged(j) {
				recs = append(recs, s.exportRecord(j))
			}
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
		for id := range copied {
			if kept == len(copied) {
				break // each is here
			}
			if j := s.lookup(id); j == nil || j.tube != t || j.state == StateInvalid {
				gone = append(gone, id)
			}
		}
	}
	fig = TubeFigures{TotalJobs: t.totalJobs, CmdDelete: t.cmdDelete, CmdPause: t.cmdPause, Stamp: t.stamp}
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
	return frames, jobs, held, fig, gone, true
}

// exportRecord is j's full record as an export sends it: a reserved job
// with the end of its TTR as its Deadline. j's tube lock must be held.
func (s *Store) exportRecord(j *Job) wal.Record {
	r := s.record(wal.KindFull, j)
	if j.state == StateReserved {
		r.Deadline = s.wall(j.deadline)
	}
	return r
}

// ImportTube makes the jobs of frames (ExportTube's) in this store, each
// logged as its full record with wal.ImportKey, so that the group's
// replicas make them too (their Apply), counted in the tube's total-jobs
// but not in the store's: they were counted where they were put. A job
// of an id the store holds already is skipped (an import sent again). A
// reserved job whose holder's client here is in holders is reserved by
// it until the end of its TTR as recorded, its reserve not counted
// again; one without is ready, as after a failover.
// The client's PendingAck is then the position the log must acknowledge.
// The tube takes fig's counters and pause here (the pause logged, with
// Options.LogPauses), where its replicas count only the jobs; an empty
// tube, freed as the import ends, keeps its pause for when it is made.
// It returns how many jobs it made.
func (c *Client) ImportTube(name []byte, frames []byte, fig TubeFigures, holders map[uint64]*Client) (int, error) {
	return c.importTube(name, frames, nil, fig, holders, false)
}

// ImportTubeChanges is ImportTube of what changed in a tube since an
// import of it (a move's copy taken ahead of its freeze): a job of an id
// the store holds takes its frame's state, logged as its full record,
// and the jobs of gone, the tube's ended since, are dropped, each logged
// as a delete and counted as none. Made again with the same frames, it
// changes nothing more. It returns how many jobs it made or changed.
func (c *Client) ImportTubeChanges(name []byte, frames []byte, gone []uint64, fig TubeFigures, holders map[uint64]*Client) (int, error) {
	return c.importTube(name, frames, gone, fig, holders, true)
}

func (c *Client) importTube(name []byte, frames []byte, gone []uint64, fig TubeFigures, holders map[uint64]*Client, replace bool) (int, error) {
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
		j := s.lookup(r.ID)
		if j != nil && !replace {
			continue
		}
		fresh := j == nil
		if fresh {
			j = newJob(bytes.Clone(r.Body))
			j.id, j.createdAt, j.slot = r.ID, s.mono(r.CreatedAt), -1
			j.tube = t
		}
		t.mu.Lock()
		if s.resetSince(gen) {
			t.mu.Unlock()
			return made, ErrReset
		}
		switch {
		case fresh:
			t.refs.Add(1) // the job's
			s.insertJobLocked(j)
			t.totalJobs++
		case j.tube != t || j.state == StateInvalid:
			t.mu.Unlock() // another tube's (ids never are), or ended meanwhile
			continue
		default:
			t.detachLocked(j)
		}
		s.placeLocked(j, r, now)
		if holder := holders[r.ID]; r.State == wal.StateReserved && holder != nil {
			t.adoptLocked(j, holder, max(s.mono(r.Deadline), now+1))
		}
		rec := s.record(wal.KindFull, j)
		rec.Req = wal.ImportKey
		err := s.logLocked(c, j, &rec)
		t.mu.Unlock()
		if fresh {
			s.raiseID(r.ID)
		}
		if err != nil {
			return made, err
		}
		made++
	}
	// Dropped bulkBatch at a time, the tube's lock let go between, as
	// DropTube does.
	for from := 0; from < len(gone); from += bulkBatch {
		dropped := 0
		t.mu.Lock()
		if s.resetSince(gen) {
			t.mu.Unlock()
			return made, ErrReset
		}
		for _, id := range gone[from:min(from+bulkBatch, len(gone))] {
			if j := s.lookup(id); j != nil && j.tube == t && j.state != StateInvalid {
				s.dropLocked(c, t, j)
				dropped++
			}
		}
		t.mu.Unlock()
		t.refs.Add(int64(-dropped)) // the jobs' references; ours keeps t alive
	}
	t.mu.Lock()
	if s.resetSince(gen) {
		t.mu.Unlock()
		return made, ErrReset
	}
	t.totalJobs = max(t.totalJobs, fig.TotalJobs)
	t.cmdDelete, t.cmdPause = max(t.cmdDelete, fig.CmdDelete), max(t.cmdPause, fig.CmdPause)
	var hs handoffs
	switch {
	case fig.PauseLeft > 0:
		t.pauseDur, t.pauseUntil = int64(fig.Pause), now+int64(fig.PauseLeft)
		s.timers.schedule(&t.pauseTimer, t.pauseUntil)
		s.logPause(c, t.name, t.pauseDur, s.wall(t.pauseUntil), wal.Req{})
	case t.pausedLocked(now):
		// Not paused where it comes from: a pause here was kept from an
		// earlier move in, aborted after its import of an empty paused
		// tube (releaseTubeKeeping), and would come back with this one
		// (found by a reviewing helper). It ends, as pause-tube 0 ends it.
		hs = s.endPauseLocked(c, t, now, wal.Req{}, hs)
	}
	t.mu.Unlock()
	s.complete(hs)
	if fig.Stamp != 0 {
		s.registryMu.Lock()
		if s.tubes[t.name] == t && fig.Stamp < t.stamp {
			s.placeByStampLocked(t, fig.Stamp)
		}
		s.registryMu.Unlock()
	}
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
	_, ok := s.TubeOfJob(id)
	return ok
}

// TubeOfJob is the name of the tube of the job of id, and false if the
// store holds none.
func (s *Store) TubeOfJob(id uint64) (string, bool) {
	j := s.lookup(id)
	if j == nil {
		return "", false
	}
	t := j.tube
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name, j.state != StateInvalid
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
