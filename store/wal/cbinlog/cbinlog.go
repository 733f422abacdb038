package cbinlog

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sproutmq/sprout/store/wal"
)

// DefaultMaxJobSize is beanstalkd's default -z: the largest body, without
// its trailing "\r\n", that Read accepts when given a maxJobSize of 0.
const DefaultMaxJobSize = 65535

var (
	// ErrCorrupt is wrapped by a *FileError for a record beanstalkd could
	// not have written: a bad name length, body size or state, or a record
	// cut short before the last file.
	ErrCorrupt = errors.New("cbinlog: corrupt binlog")
	// ErrUnknownVersion is wrapped by a *FileError for a file whose header
	// is neither version 5 nor version 7.
	ErrUnknownVersion = errors.New("cbinlog: unknown binlog version")
)

// FileError says which file and record Read gave up on, and why.
type FileError struct {
	Path   string
	Offset int64  // of the start of the record, or 0 for the header
	Err    error  // ErrCorrupt or ErrUnknownVersion
	Detail string // what was wrong, e.g. "tube name length 512 exceeds 200"
}

func (e *FileError) Error() string {
	return fmt.Sprintf("cbinlog: %s: offset %d: %s", e.Path, e.Offset, e.Detail)
}

func (e *FileError) Unwrap() error { return e.Err }

const (
	filePrefix = "binlog."

	walver5 = 5 // beanstalkd 1.4: size_t name length, µs times
	walver7 = 7 // beanstalkd 1.5 to 1.13

	// maxTubeNameLen is MAX_TUBE_NAME_LEN-1 in beanstalkd's dat.h.
	maxTubeNameLen = 200
	// jobrecSize is sizeof(Jobrec) on LP64.
	jobrecSize = 80
	// jobrec5Size is offsetof(Jobrec5, pad): version 5 records are not
	// padded to the struct's alignment.
	jobrec5Size = 77
)

// beanstalkd's job states as stored in a Jobrec.
const (
	stateInvalid  = 0 // deleted
	stateReady    = 1
	stateReserved = 2
	stateBuried   = 3
	stateDelayed  = 4
)

// Found lists dir's beanstalkd binlog files, "binlog.<N>" with N decimal,
// sorted by N. beanstalkd opens the files it found as binlog.%d, so a name
// that is not N's canonical form (binlog.007, binlog.+7) is never read by it
// and is not listed here either. Directories are skipped.
func Found(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cbinlog: %w", err)
	}
	type numbered struct {
		seq  int64
		path string
	}
	var found []numbered
	for _, e := range entries {
		seq, ok := parseSeq(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		found = append(found, numbered{seq, filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(found, func(a, b numbered) int { return int(a.seq - b.seq) })
	paths := make([]string, len(found))
	for i, f := range found {
		paths[i] = f.path
	}
	return paths, nil
}

// parseSeq returns N for a name "binlog.<N>" where N is a non-negative
// decimal int32 written without sign or leading zeros.
func parseSeq(name string) (int64, bool) {
	digits, ok := strings.CutPrefix(name, filePrefix)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseInt(digits, 10, 32)
	if err != nil || seq < 0 || strconv.FormatInt(seq, 10) != digits {
		return 0, false
	}
	return seq, true
}

// Read replays every binlog file in dir in sequence order, as beanstalkd's
// recovery does, and returns the jobs alive at the end as wal.KindFull
// records ordered by id, plus the highest job id seen in any record,
// including records of jobs since deleted. A Sprout that imports the jobs
// should hand out ids above maxID.
//
// maxJobSize is the largest body Read accepts, without its trailing "\r\n"
// (Sprout's -z); 0 means DefaultMaxJobSize, and a negative one (-z 0's
// engine.NoJobBodies) only empty bodies. beanstalkd compares the stored
// size, which includes the "\r\n", against -z, so it drops jobs within two
// bytes of the limit on recovery; Read keeps them.
//
// Each record carries Tube, State (Reserved becomes Ready), Pri, Delay,
// TTR, CreatedAt, the five counters and Body as stored, and for a Delayed
// job the absolute Deadline as stored (wall-clock ns; it may have passed).
// A directory without binlog files gives no jobs and no error.
func Read(dir string, maxJobSize int) (jobs []wal.Record, maxID uint64, err error) {
	switch {
	case maxJobSize < 0:
		maxJobSize = 0
	case maxJobSize == 0:
		maxJobSize = DefaultMaxJobSize
	}
	paths, err := Found(dir)
	if err != nil {
		return nil, 0, err
	}
	rp := newReplay(maxJobSize)
	for i, path := range paths {
		if err := rp.readFile(path, i == len(paths)-1); err != nil {
			return nil, 0, err
		}
	}
	return rp.records(), rp.maxID, nil
}

// jobrec is beanstalkd's Jobrec, decoded, with times in ns.
type jobrec struct {
	id                                          uint64
	pri                                         uint32
	delay, ttr                                  int64
	bodySize                                    int32
	createdAt, deadlineAt                       int64
	reserves, timeouts, releases, buries, kicks uint32
	state                                       uint8
}

// decodeJobrec7 decodes the 80-byte Jobrec of version 7.
func decodeJobrec7(b []byte) jobrec {
	le := binary.LittleEndian
	return jobrec{
		id:         le.Uint64(b[0:]),
		pri:        le.Uint32(b[8:]),
		delay:      int64(le.Uint64(b[16:])),
		ttr:        int64(le.Uint64(b[24:])),
		bodySize:   int32(le.Uint32(b[32:])),
		createdAt:  int64(le.Uint64(b[40:])),
		deadlineAt: int64(le.Uint64(b[48:])),
		reserves:   le.Uint32(b[56:]),
		timeouts:   le.Uint32(b[60:]),
		releases:   le.Uint32(b[64:]),
		buries:     le.Uint32(b[68:]),
		kicks:      le.Uint32(b[72:]),
		state:      b[76],
	}
}

// decodeJobrec5 decodes the 77-byte Jobrec5 of version 5. Its fields sit
// where version 7's do, but durations and times are unsigned µs, which
// beanstalkd multiplies by 1000 on reading.
func decodeJobrec5(b []byte) jobrec {
	r := decodeJobrec7(append(b[:jobrec5Size:jobrec5Size], 0, 0, 0))
	r.delay *= 1000
	r.ttr *= 1000
	r.createdAt *= 1000
	r.deadlineAt *= 1000
	return r
}

// liveJob is a job as the replay has it so far.
type liveJob struct {
	tube string
	rec  jobrec // state is never stateReserved or stateInvalid
	body []byte
}

// replay holds the state of one Read. Not safe for concurrent use.
type replay struct {
	maxBodySize int32 // maxJobSize + len("\r\n")
	jobs        map[uint64]*liveJob
	maxID       uint64
	// onRecord, when set, is called with the start and end offsets of each
	// record read whole; tests use it to find record boundaries.
	onRecord func(path string, start, end int64)
}

func newReplay(maxJobSize int) *replay {
	return &replay{
		maxBodySize: int32(min(int64(maxJobSize)+2, 1<<31-1)),
		jobs:        make(map[uint64]*liveJob),
	}
}

// fileReader reads one binlog file and tracks the offset for messages.
type fileReader struct {
	path string
	last bool  // the newest file: a record cut short here was torn by a crash
	size int64 // of the file when opened
	r    *bufio.Reader
	off  int64
}

// read fills p. It returns io.EOF if nothing was left and
// io.ErrUnexpectedEOF if only part of p was.
func (fr *fileReader) read(p []byte) error {
	n, err := io.ReadFull(fr.r, p)
	fr.off += int64(n)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return fmt.Errorf("cbinlog: reading %s at offset %d: %w", fr.path, fr.off, err)
	}
	return err
}

func (fr *fileReader) corrupt(off int64, format string, args ...any) error {
	return &FileError{Path: fr.path, Offset: off, Err: ErrCorrupt, Detail: fmt.Sprintf(format, args...)}
}

// cut handles a record that the end of the file cut short: the end of the
// file if the record read so far is all zeros (preallocation beanstalkd
// left behind) or the file is the last one (a torn write), damage
// otherwise.
func (fr *fileReader) cut(start int64, zeros bool, what string) error {
	if zeros || fr.last {
		return nil
	}
	return fr.corrupt(start, "file ends inside %s", what)
}

// readFile replays one file into rp. last says whether it is the newest.
func (rp *replay) readFile(path string, last bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cbinlog: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cbinlog: %w", err)
	}
	fr := &fileReader{path: path, last: last, size: info.Size(), r: bufio.NewReaderSize(f, 64<<10)}

	var hdr [4]byte
	switch err := fr.read(hdr[:]); err {
	case nil:
	case io.EOF, io.ErrUnexpectedEOF:
		// Zeros here mean beanstalkd died between creating the file and
		// writing its header: an empty file.
		return fr.cut(0, allZero(hdr[:fr.off]), "the version header")
	default:
		return err
	}
	switch v := int32(binary.LittleEndian.Uint32(hdr[:])); v {
	case walver7:
		return rp.readRecords(fr, 4, jobrecSize, decodeJobrec7)
	case walver5:
		return rp.readRecords(fr, 8, jobrec5Size, decodeJobrec5)
	default:
		return &FileError{Path: path, Offset: 0, Err: ErrUnknownVersion,
			Detail: fmt.Sprintf("unknown version %d (want %d or %d)", v, walver7, walver5)}
	}
}

// readRecords replays the records after the header. lenSize is the size of
// the tube-name length field, recSize that of the Jobrec.
func (rp *replay) readRecords(fr *fileReader, lenSize, recSize int, decode func([]byte) jobrec) error {
	var (
		lenBuf  = make([]byte, lenSize)
		recBuf  = make([]byte, recSize)
		nameBuf [maxTubeNameLen]byte
	)
	for {
		start := fr.off
		switch err := fr.read(lenBuf); err {
		case nil:
		case io.EOF:
			return nil
		case io.ErrUnexpectedEOF:
			return fr.cut(start, allZero(lenBuf[:fr.off-start]), "the tube name length of a record")
		default:
			return err
		}
		var nameLen int64
		if lenSize == 4 {
			nameLen = int64(int32(binary.LittleEndian.Uint32(lenBuf)))
		} else {
			// A size_t; anything above int64 is as wrong as anything above 200.
			nameLen = int64(min(binary.LittleEndian.Uint64(lenBuf), 1<<62))
		}
		if nameLen < 0 || nameLen > maxTubeNameLen {
			return fr.corrupt(start, "tube name length %d is outside 0..%d", nameLen, maxTubeNameLen)
		}
		name := nameBuf[:nameLen]
		switch err := fr.read(name); err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return fr.cut(start, false, "the tube name of a record")
		default:
			return err
		}
		recStart := fr.off
		switch err := fr.read(recBuf); err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return fr.cut(start, nameLen == 0 && allZero(recBuf[:fr.off-recStart]), "the job struct of a record")
		default:
			return err
		}
		jr := decode(recBuf)
		if jr.id == 0 {
			// The preallocated zeros: this file has nothing more.
			return nil
		}
		rp.maxID = max(rp.maxID, jr.id)
		done, err := rp.apply(fr, start, string(name), jr)
		if err != nil || done {
			return err
		}
		if rp.onRecord != nil {
			rp.onRecord(fr.path, start, fr.off)
		}
	}
}

// apply replays one record whose tube name and Jobrec have been read,
// reading the body of a full record. done says the file ended inside the
// body and reading it is over.
func (rp *replay) apply(fr *fileReader, start int64, tube string, jr jobrec) (done bool, err error) {
	full := tube != ""
	j := rp.jobs[jr.id]
	if j == nil && !full {
		// The full record was in a file beanstalkd has deleted, so the job
		// was deleted or migrated since; beanstalkd skips such records.
		return false, nil
	}
	switch jr.state {
	case stateInvalid:
		if full {
			// beanstalkd never writes this, and would not skip the body.
			return false, fr.corrupt(start, "job %d: full record with state 0 (deleted)", jr.id)
		}
		delete(rp.jobs, jr.id)
		return false, nil
	case stateReserved, stateReady, stateBuried, stateDelayed:
	default:
		return false, fr.corrupt(start, "job %d: unknown state %d", jr.id, jr.state)
	}
	if jr.state == stateReserved {
		jr.state = stateReady
	}
	if j == nil {
		if jr.bodySize < 0 || jr.bodySize > rp.maxBodySize {
			return false, fr.corrupt(start, "job %d: body size %d is outside 0..%d (max job size + 2)",
				jr.id, jr.bodySize, rp.maxBodySize)
		}
	} else if jr.bodySize != j.rec.bodySize {
		// beanstalkd means to refuse this for full records (its check is
		// dead code) and would overrun the job's body for either kind.
		return false, fr.corrupt(start, "job %d: body size changed from %d to %d",
			jr.id, j.rec.bodySize, jr.bodySize)
	}
	if !full {
		j.rec = jr
		return false, nil
	}
	if int64(jr.bodySize) > fr.size-fr.off {
		// Torn, and not worth allocating for when the limit is large.
		return true, fr.cut(start, false, "the job body of a record")
	}
	body := make([]byte, jr.bodySize)
	switch err := fr.read(body); err {
	case nil:
	case io.EOF, io.ErrUnexpectedEOF:
		// A torn body leaves the job as it was: absent for a put, the
		// older copy for a migration. (beanstalkd drops the job in both
		// cases, and reports an error.)
		return true, fr.cut(start, false, "the job body of a record")
	default:
		return true, err
	}
	if j == nil {
		// A migrated job keeps the tube of its first record, as in
		// beanstalkd; compaction copies the same name anyway.
		j = &liveJob{tube: tube}
		rp.jobs[jr.id] = j
	}
	j.rec = jr
	j.body = body
	return false, nil
}

// records returns the live jobs as wal records, ordered by id.
func (rp *replay) records() []wal.Record {
	out := make([]wal.Record, 0, len(rp.jobs))
	for _, j := range rp.jobs {
		r := j.rec
		rec := wal.Record{
			Kind:      wal.KindFull,
			ID:        r.id,
			Tube:      j.tube,
			State:     walState(r.state),
			Pri:       r.pri,
			Delay:     r.delay,
			TTR:       r.ttr,
			CreatedAt: r.createdAt,
			Reserves:  r.reserves,
			Timeouts:  r.timeouts,
			Releases:  r.releases,
			Buries:    r.buries,
			Kicks:     r.kicks,
			Body:      j.body,
		}
		if r.state == stateDelayed {
			// For other states deadline_at is stale (a past TTR deadline,
			// say) and means nothing.
			rec.Deadline = r.deadlineAt
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b wal.Record) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// walState maps a state a live job can have after replay to Sprout's. The
// numbering is the same today; the mapping keeps the two independent.
func walState(s uint8) uint8 {
	switch s {
	case stateBuried:
		return wal.StateBuried
	case stateDelayed:
		return wal.StateDelayed
	}
	return wal.StateReady
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
