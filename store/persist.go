package store

import (
	"errors"

	"github.com/sproutmq/sprout/internal/atomicmax"
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
	if c != nil {
		c.raisePendingAck(lsn)
	}
	return nil
}

// wall converts the store's monotonic time to wall-clock ns for the log.
func (s *Store) wall(mono int64) int64 { return s.wallBase + mono }

// mono converts a logged wall-clock time back.
func (s *Store) mono(wall int64) int64 { return wall - s.wallBase }

// AckSource publishes the log position up to which changes may be
// acknowledged: written, and fsynced as the log's policy says, for a single
// node (the log itself); committed by a majority in a cluster.
type AckSource interface {
	// Acked is the highest position whose changes may be acknowledged.
	Acked() uint64
	// OnAcked calls fn once pos may be acknowledged: at once, on this
	// goroutine, if it already may; else later, from any goroutine.
	OnAcked(pos uint64, fn func())
}

// Journal is what the store needs of its write-ahead log: *wal.Log on a
// single node; in a cluster, the log as Raft's proposer wraps it
// (internal/replication); a test's recorder. Append is called under the
// job's tube lock and must not block.
type Journal interface {
	Append(r *wal.Record, prev wal.Loc) (lsn uint64, loc wal.Loc, err error)
	NoteMigrated()
	Recovered() []wal.Recovered
	LastID() uint64
	Stats() wal.Stats
	Durable() uint64
	OnDurable(lsn uint64, fn func())
}

// logAcks makes the log's durable position the acknowledged one.
type logAcks struct{ log Journal }

func (a logAcks) Acked() uint64                 { return a.log.Durable() }
func (a logAcks) OnAcked(pos uint64, fn func()) { a.log.OnDurable(pos, fn) }

// Acks is what decides when a reply may be sent; nil when the store keeps
// everything in memory and every reply may go at once.
func (s *Store) Acks() AckSource { return s.acks }

// PendingAck is the position the client's replies so far must wait for
// (Acks): the latest change it made, or the put of the latest job shown to
// it; 0 when nothing waits. The store raises it in every method that
// changes a job or shows one (reserve, reserve-job, the peeks, stats-job),
// so no caller has to remember to; the engine only compares it with
// Acks().Acked(). Read it on the client's goroutine.
func (c *Client) PendingAck() uint64 { return c.pendingAck.Load() }

// raisePendingAck makes the client's replies wait for pos too. The client's
// own changes raise it on its goroutine; a job handed to its blocked
// reserve raises it from the goroutine that freed the job, hence atomic.
func (c *Client) raisePendingAck(pos uint64) { atomicmax.Uint64(&c.pendingAck, pos) }

// showLocked notes that j is about to be shown to c, so c's reply must wait
// until j's put may be acknowledged: otherwise a consumer could work on a
// job that a crash (or a lost leader) then takes back; beanstalkd logs a job
// before any client can see it. j's tube lock must be held: a put fills in
// putLSN under it, after the job is already in the id index.
func (c *Client) showLocked(j *Job) {
	if j.putLSN > 0 {
		c.raisePendingAck(j.putLSN)
	}
}

// recover loads the jobs the log found at start, in id order, and resumes
// the id counter after the highest id ever issued.
func (s *Store) recover() {
	now := s.now()
	recovered := s.log.Recovered()
	for i := range recovered {
		r := &recovered[i]
		s.restore(&r.Record, r.Body, r.Loc.Seg, now)
	}
	s.raiseID(s.log.LastID())
}

// Migrate implements segment.Migrator: each job whose full record is still
// in seg is written again, whole, at the head of the log.
func (s *Store) Migrate(seg uint32, ids []uint64) { s.rewrite(seg, ids) }

// Rewrite writes each job of ids still here again, whole, at the head of
// the log, wherever its full record is, and returns how many it wrote: a
// cluster group's leader does so for another member's compaction, whose
// segments are not its own (internal/replication, migrate.go).
func (s *Store) Rewrite(ids []uint64) int { return s.rewrite(0, ids) }

// rewrite writes each job of ids again whose full record is in seg, or
// anywhere for seg 0, and returns how many it wrote.
func (s *Store) rewrite(seg uint32, ids []uint64) int {
	done := 0
	for _, id := range ids {
		j := s.lookup(id)
		if j == nil {
			continue
		}
		t := j.tube
		t.mu.Lock()
		if j.state != StateInvalid && (seg == 0 || j.seg == seg) {
			r := s.record(wal.KindFull, j)
			if err := s.logLocked(nil, j, &r); err == nil {
				s.log.NoteMigrated()
				done++
			}
		}
		t.mu.Unlock()
	}
	return done
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
