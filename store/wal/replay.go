package wal

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/sproutmq/sprout/store/segment"
)

// Importer reads a foreign log format in the directory (beanstalkd's
// binlog files: see package cbinlog) so Sprout can take over from it.
type Importer interface {
	// Files lists the paths of the foreign log files in dir.
	Files(dir string) ([]string, error)
	// Read returns the live jobs as KindFull records and the highest id
	// the foreign log ever issued.
	Read(dir string, maxJobSize int) ([]Record, uint64, error)
}

// open replays a locked directory as a journal (importing foreign files
// first if they are all there is) and returns the engine's log, told what
// is live, and the jobs found, in id order.
func open(d *segment.Dir, opts Options) (*segment.Log, []Recovered, error) {
	seqs, err := d.Segments()
	if err != nil {
		return nil, nil, err
	}
	if len(seqs) == 0 && opts.Importer != nil {
		if err := importForeign(d, opts); err != nil {
			return nil, nil, err
		}
	}
	live := make(map[uint64]*Recovered)
	var rec Record
	var lastID uint64
	var tube string // the last full record's, seen again by the next
	seg, err := segment.Open(d, opts.segment(), func(f segment.Frame) error {
		if err := decodePayload(f.Payload, &rec, tube); err != nil {
			return err // errCorrupt: a damaged frame
		}
		if rec.Kind == KindFull {
			tube = rec.Tube
		}
		lastID = max(lastID, rec.ID)
		if rec.Kind == KindFull {
			rec.Body = append([]byte(nil), rec.Body...) // rec.Body is the segment's bytes
		}
		Fold(live, &rec, Loc{Seg: f.Seg, Size: uint32(f.Size)})
		return nil
	})
	var ve *segment.VersionError
	if errors.As(err, &ve) && ve.Version == segment.VersionRaftLog {
		return nil, nil, fmt.Errorf("%w: %s", ErrClusterLog, d.Path())
	}
	if err != nil {
		return nil, nil, err
	}
	seg.RaiseID(lastID)
	jobs := make([]Recovered, 0, len(live))
	for _, r := range live {
		jobs = append(jobs, *r)
	}
	sort.Slice(jobs, func(i, k int) bool { return jobs[i].ID < jobs[k].ID })
	// The jobs are the engine's items, each live in its full record's
	// segment: in id order, so each segment's ids stay sorted.
	moves := make([]segment.Move, 0, min(len(jobs), movesBatch))
	for i := range jobs {
		moves = append(moves, segment.Move{ID: jobs[i].ID, To: jobs[i].Loc})
		if len(moves) == cap(moves) || i == len(jobs)-1 {
			seg.Moved(moves)
			moves = moves[:0]
		}
	}
	return seg, jobs, nil
}

// movesBatch bounds the moves open hands the engine at once, so a large
// directory's need no second copy of its jobs.
const movesBatch = 4096

// Fold makes live, the latest state of each job by id, what it is after
// r, as replay does: a full record sets the job (keeping r's body, not a
// copy), an update changes it, a delete drops it. A reserved job counts
// as ready (reservations do not survive), and an update of a job not in
// live is skipped: its full record was in a segment already removed, so
// it died or was written again later. A cluster's snapshot is this
// fold of the log up to an index (internal/replication).
func Fold(live map[uint64]*Recovered, r *Record, loc Loc) {
	switch r.Kind {
	case KindFull:
		rec := *r
		if rec.State == StateReserved {
			rec.State = StateReady
		}
		live[r.ID] = &Recovered{Record: rec, Loc: loc}
	case KindUpdate:
		j := live[r.ID]
		if j == nil {
			return
		}
		j.State, j.Pri, j.Delay, j.TTR = r.State, r.Pri, r.Delay, r.TTR
		j.CreatedAt, j.Deadline = r.CreatedAt, r.Deadline
		j.Reserves, j.Timeouts, j.Releases, j.Buries, j.Kicks = r.Reserves, r.Timeouts, r.Releases, r.Buries, r.Kicks
		if j.State == StateReserved {
			j.State = StateReady
		}
	case KindDelete:
		delete(live, r.ID)
	}
}

// importForeign writes the foreign log's live jobs into a first Sprout
// segment, made durable and atomically renamed into place before the
// foreign files are removed, so a crash at any point leaves one complete
// copy.
func importForeign(d *segment.Dir, opts Options) error {
	files, err := opts.Importer.Files(d.Path())
	if err != nil || len(files) == 0 {
		return err
	}
	recs, maxID, err := opts.Importer.Read(d.Path(), opts.MaxJobSize)
	if err != nil {
		return fmt.Errorf("wal: importing beanstalkd binlog: %w", err)
	}
	frames := make([]byte, 0, len(recs)*128)
	for i := range recs {
		recs[i].Kind = KindFull
		frames = appendFrame(frames, &recs[i])
	}
	if err := d.Create(1, segment.VersionJournal, maxID, frames); err != nil {
		return err
	}
	for _, path := range files {
		if err := os.Remove(path); err != nil {
			opts.Logger.Warn().Err(err).Str("file", path).Msg("wal: cannot remove imported binlog file")
		}
	}
	opts.Logger.Info().Int("jobs", len(recs)).Int("files", len(files)).Uint64("max_id", maxID).Msg("wal: imported beanstalkd binlog")
	return nil
}
