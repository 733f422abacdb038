package replication

import (
	"errors"
	"fmt"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/wal"
)

// This file is what OpenWALLog does with a member's directory before its
// log replays it (doc.go, "The log on disk"): a single node's journal, or
// a beanstalkd binlog, taken over; what a conversion left behind removed;
// the member's own log told from another's. Its refusals name no flag:
// cmd/sprout says what to do.

// ErrSingleNodeLog: the directory holds a single node's jobs (its
// journal, or a beanstalkd binlog), which a cluster takes over only as its
// first member, alone: a WALConfig whose Voters are this member only, not
// joining.
var ErrSingleNodeLog = errors.New("replication: the directory holds a single node's jobs, which a cluster takes over only as its first member, alone")

// ForeignLogError: the directory is the log of another member, or of a
// member of another cluster.
type ForeignLogError struct {
	Dir string
	// The log's member: its cluster's id, its Raft id and name.
	Cluster, ID uint64
	Name        string
	// This member's.
	WantCluster, WantID uint64
	WantName            string
}

// SameName reports whether the log is a member of another cluster by this
// member's name: most likely this member, started since with other
// initial members (their names make the cluster's id), which starts it
// again with the initial members it had, or by joining its cluster
// (Cluster, ID) again.
func (e *ForeignLogError) SameName() bool { return e.Cluster != e.WantCluster && e.Name == e.WantName }

func (e *ForeignLogError) Error() string {
	switch {
	case e.SameName():
		return fmt.Sprintf("replication: %s is the log of member %s of cluster %x, not of this one (%x)", e.Dir, e.Name, e.Cluster, e.WantCluster)
	case e.Cluster != e.WantCluster:
		return fmt.Sprintf("replication: %s is the log of a member of cluster %x, not of this one (%x)", e.Dir, e.Cluster, e.WantCluster)
	}
	return fmt.Sprintf("replication: %s is the log of member %s (%x), not of %s (%x)", e.Dir, e.Name, e.ID, e.WantName, e.WantID)
}

// segmentOptions is the segment engine's configuration for a member's log:
// its own versions (2 until it holds a second group, then 3; it reads
// both), checkpoints in every segment, moves that take effect as their
// entries are applied, and every write durable once fsynced.
func segmentOptions(o wal.Options) segment.Options {
	return segment.Options{
		Version:     segment.VersionRaftLog,
		Reads:       []uint32{segment.VersionMultiRaft},
		SegmentSize: o.SegmentSize,
		SkipDamaged: o.SkipDamaged,
		Checkpoints: true,
		MovesLater:  true,
		Logger:      o.Logger,
		Observer:    o.Observer,
	}
}

// open prepares d, the member's locked directory, and replays it: a
// single node's directory is taken over when cfg may (takesOver), the
// single node's segments a conversion left are removed, and the segment
// log is opened, its frames replayed to s.
func (s *SharedLog) open(d *segment.Dir, cfg WALConfig) (*segment.Log, error) {
	single, member, err := classify(d)
	if err != nil {
		return nil, err
	}
	if len(member) == 0 && (len(single) > 0 || foreignFiles(d, cfg.Wal.Importer)) {
		if !takesOver(cfg) {
			return nil, fmt.Errorf("%w: %s", ErrSingleNodeLog, d.Path())
		}
		if err := s.convert(d, cfg.Wal); err != nil {
			return nil, err
		}
		if single, member, err = classify(d); err != nil {
			return nil, err
		}
	}
	if len(single) > 0 {
		if len(member) > 0 && single[len(single)-1] > member[0] {
			return nil, fmt.Errorf("replication: %s holds a single node's segments after a cluster member's", d.Path())
		}
		// Left by a conversion that stopped after its segment was in place.
		for _, seq := range single {
			s.logger.Warn().Str("file", d.SegmentPath(seq)).Msg("replication: removing a single node's segment a conversion left")
			if err := d.Remove(seq); err != nil {
				return nil, err
			}
		}
		d.Sync()
	}
	return segment.Open(d, segmentOptions(cfg.Wal), s.replay)
}

// takesOver reports whether a member takes a single node's directory over:
// only a cluster's only initial member does (others would start from an
// empty index 1 and never ask for the jobs); members join it later.
func takesOver(cfg WALConfig) bool {
	return !cfg.Join && len(cfg.Voters) == 1 && cfg.Voters[0] == cfg.ID
}

// classify lists d's segments by their headers' versions: a single node's
// journal's, and the rest (a member's, and any the replay judges).
func classify(d *segment.Dir) (single, member []uint32, err error) {
	seqs, err := d.Segments()
	if err != nil {
		return nil, nil, err
	}
	for _, seq := range seqs {
		v, ok, err := d.Version(seq)
		if err != nil {
			return nil, nil, err
		}
		if ok && v == segment.VersionJournal {
			single = append(single, seq)
		} else {
			member = append(member, seq)
		}
	}
	return single, member, nil
}

// foreignFiles reports whether d holds files imp takes over (a beanstalkd
// binlog).
func foreignFiles(d *segment.Dir, imp wal.Importer) bool {
	if imp == nil {
		return false
	}
	files, err := imp.Files(d.Path())
	return err == nil && len(files) > 0
}

// convert reads d as a single node reads it at start (a beanstalkd binlog
// imported first) and writes a member's first segment after the last: the
// initial state, and a snapshot at index 1 whose head is the jobs and the
// highest id issued, group 0's in a version 2 segment. The segment is
// durable and renamed into place before the single node's segments are
// removed, so a crash at any point leaves one complete copy (and open
// removes the other's leftovers).
func (s *SharedLog) convert(d *segment.Dir, opts wal.Options) error {
	jobs, lastID, err := wal.Recover(d, opts)
	if err != nil {
		return err
	}
	var data []byte
	for i := range jobs {
		data = wal.AppendFrame(data, &jobs[i].Record)
	}
	if lastID > 0 {
		data = wal.AppendFrame(data, &wal.Record{Kind: wal.KindIDs, ID: lastID})
	}
	g0 := s.groups[0]
	s.pieces[0] = g0.appendPiece(nil)
	frames := s.appendCheckpointLocked(nil)
	frames = appendSnapshot(frames, tag{}, 1, 1, g0.cs, data, headChunks(data))
	seqs, err := d.Segments()
	if err != nil {
		return err
	}
	next := uint32(1)
	if len(seqs) > 0 {
		next = seqs[len(seqs)-1] + 1
	}
	if err := d.Create(next, segment.VersionRaftLog, lastID, frames); err != nil {
		return err
	}
	for _, seq := range seqs {
		if err := d.Remove(seq); err != nil {
			return err
		}
	}
	d.Sync()
	s.logger.Info().Int("jobs", len(jobs)).Uint64("max_id", lastID).Str("file", d.SegmentPath(next)).
		Msg("a single node's jobs become the head of the cluster's log")
	return nil
}
