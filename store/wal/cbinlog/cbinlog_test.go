package cbinlog

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sproutmq/sprout/store/wal"
)

const (
	created = int64(1_700_000_000_000_000_000) // a wall-clock time in ns, a multiple of 1000
	second  = int64(1_000_000_000)
)

// put returns the Jobrec beanstalkd writes for a fresh ready job.
func put(id uint64, pri uint32) jobrec {
	return jobrec{id: id, pri: pri, ttr: 60 * second, createdAt: created + int64(id)*second, state: stateReady}
}

// with returns jr changed by f, so table rows read as "put, then this".
func with(jr jobrec, f func(*jobrec)) jobrec {
	f(&jr)
	return jr
}

// record is the wal.Record Read should return for jr.
func record(tube string, jr jobrec, body string) wal.Record {
	r := wal.Record{
		Kind: wal.KindFull, ID: jr.id, Tube: tube, State: jr.state, Pri: jr.pri,
		Delay: jr.delay, TTR: jr.ttr, CreatedAt: jr.createdAt,
		Reserves: jr.reserves, Timeouts: jr.timeouts, Releases: jr.releases,
		Buries: jr.buries, Kicks: jr.kicks, Body: []byte(body),
	}
	if jr.state == stateDelayed {
		r.Deadline = jr.deadlineAt
	}
	return r
}

func TestFound(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{
		"binlog.10", "binlog.9", "binlog.0", "binlog.100",
		"lock", "binlog.", "binlog.007", "binlog.+5", "binlog.-1", "binlog.5x",
		"binlog.99999999999", "xbinlog.3", "binlog.3.tmp",
	} {
		writeFile(t, filepath.Join(dir, name), nil)
	}
	if err := os.Mkdir(filepath.Join(dir, "binlog.4"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := Found(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		if filepath.Dir(p) != dir {
			t.Errorf("Found returned %q, not a path in %s", p, dir)
		}
		names = append(names, filepath.Base(p))
	}
	want := []string{"binlog.0", "binlog.9", "binlog.10", "binlog.100"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("Found = %q, want %q", names, want)
	}

	if _, err := Found(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Found(missing dir) error = %v, want one wrapping os.ErrNotExist", err)
	}
}

// TestReadReplay checks the replay rules on hand-made files.
func TestReadReplay(t *testing.T) {
	delayed := with(put(1, 5), func(r *jobrec) {
		r.state, r.delay, r.deadlineAt = stateDelayed, 30*second, created+31*second
	})
	tests := []struct {
		name       string
		files      [][]byte
		maxJobSize int
		want       []wal.Record
		wantMaxID  uint64
	}{
		{
			name: "no files",
		},
		{
			name:  "header only",
			files: [][]byte{newBinlog(7).bytes(), newBinlog(7).bytes()},
		},
		{
			name: "puts come back ordered by id",
			files: [][]byte{newBinlog(7).
				full("b", put(7, 1), "seven\r\n").
				full("a", put(3, 2), "three\r\n").
				full("default", put(5, 0), "\r\n").bytes()},
			want: []wal.Record{
				record("a", put(3, 2), "three\r\n"),
				record("default", put(5, 0), "\r\n"),
				record("b", put(7, 1), "seven\r\n"),
			},
			wantMaxID: 7,
		},
		{
			name: "binary body with CRLF inside and a 200-byte tube name",
			files: [][]byte{newBinlog(7).
				full(strings.Repeat("t", 200), put(1, 0), "\x00\r\n\xff\r\n\r\n").bytes()},
			want:      []wal.Record{record(strings.Repeat("t", 200), put(1, 0), "\x00\r\n\xff\r\n\r\n")},
			wantMaxID: 1,
		},
		{
			name: "a short record replaces the whole Jobrec",
			files: [][]byte{newBinlog(7).
				full("t", put(1, 5), "x\r\n").
				short(with(put(1, 9), func(r *jobrec) { r.state, r.buries, r.reserves, r.bodySize = stateBuried, 1, 2, 3 })).bytes()},
			want: []wal.Record{record("t", with(put(1, 9), func(r *jobrec) {
				r.state, r.buries, r.reserves, r.bodySize = stateBuried, 1, 2, 3
			}), "x\r\n")},
			wantMaxID: 1,
		},
		{
			name: "reserved becomes ready",
			files: [][]byte{newBinlog(7).
				full("t", with(put(1, 5), func(r *jobrec) { r.state, r.reserves = stateReserved, 1 }), "x\r\n").bytes()},
			want:      []wal.Record{record("t", with(put(1, 5), func(r *jobrec) { r.reserves = 1 }), "x\r\n")},
			wantMaxID: 1,
		},
		{
			name:      "delayed keeps its absolute deadline",
			files:     [][]byte{newBinlog(7).full("t", delayed, "d\r\n").bytes()},
			want:      []wal.Record{record("t", delayed, "d\r\n")},
			wantMaxID: 1,
		},
		{
			name: "a ready job's stale deadline is dropped",
			files: [][]byte{newBinlog(7).
				full("t", delayed, "d\r\n").
				short(with(delayed, func(r *jobrec) { r.state, r.kicks, r.bodySize = stateReady, 1, 3 })).bytes()},
			want:      []wal.Record{record("t", with(delayed, func(r *jobrec) { r.state, r.kicks, r.bodySize = stateReady, 1, 3 }), "d\r\n")},
			wantMaxID: 1,
		},
		{
			name: "state 0 deletes, and the id still counts",
			files: [][]byte{newBinlog(7).
				full("t", put(1, 5), "x\r\n").
				full("t", put(2, 5), "y\r\n").
				short(with(put(2, 5), func(r *jobrec) { r.state, r.bodySize = stateInvalid, 3 })).bytes()},
			want:      []wal.Record{record("t", put(1, 5), "x\r\n")},
			wantMaxID: 2,
		},
		{
			name: "short records for unknown jobs are ignored, whatever their state",
			files: [][]byte{newBinlog(7).
				short(with(put(9, 5), func(r *jobrec) { r.state = stateInvalid })).
				short(with(put(10, 5), func(r *jobrec) { r.state = stateBuried })).
				short(with(put(11, 5), func(r *jobrec) { r.state = 77 })).
				full("t", put(2, 5), "y\r\n").bytes()},
			want:      []wal.Record{record("t", put(2, 5), "y\r\n")},
			wantMaxID: 11,
		},
		{
			name: "a job deleted in a later file",
			files: [][]byte{
				newBinlog(7).full("t", put(1, 5), "x\r\n").full("t", put(2, 5), "y\r\n").bytes(),
				newBinlog(7).short(with(put(1, 5), func(r *jobrec) { r.state, r.bodySize = stateInvalid, 3 })).bytes(),
			},
			want:      []wal.Record{record("t", put(2, 5), "y\r\n")},
			wantMaxID: 2,
		},
		{
			name: "a migrated copy replaces the job",
			files: [][]byte{
				newBinlog(7).full("t", put(1, 5), "x\r\n").bytes(),
				newBinlog(7).full("t", with(put(1, 5), func(r *jobrec) { r.state, r.buries = stateBuried, 1 }), "x\r\n").bytes(),
			},
			want:      []wal.Record{record("t", with(put(1, 5), func(r *jobrec) { r.state, r.buries = stateBuried, 1 }), "x\r\n")},
			wantMaxID: 1,
		},
		{
			name: "reading a file stops at id 0",
			files: [][]byte{
				newBinlog(7).full("t", put(1, 5), "x\r\n").zeros(84).full("t", put(2, 5), "y\r\n").bytes(),
				newBinlog(7).full("t", put(3, 5), "z\r\n").zeros(4000).bytes(),
			},
			want:      []wal.Record{record("t", put(1, 5), "x\r\n"), record("t", put(3, 5), "z\r\n")},
			wantMaxID: 3,
		},
		{
			// A killed beanstalkd leaves its file's preallocated tail,
			// which may be shorter than a record; a restart then adds files.
			name: "zeros shorter than a record end an earlier file",
			files: [][]byte{
				newBinlog(7).full("t", put(1, 5), "x\r\n").zeros(40).bytes(),
				newBinlog(7).full("t", put(2, 5), "y\r\n").zeros(2).bytes(),
				newBinlog(7).full("t", put(3, 5), "z\r\n").bytes(),
				{}, // killed before the header was written
				{0, 0},
				newBinlog(7).bytes(),
			},
			want: []wal.Record{
				record("t", put(1, 5), "x\r\n"), record("t", put(2, 5), "y\r\n"), record("t", put(3, 5), "z\r\n"),
			},
			wantMaxID: 3,
		},
		{
			name:       "a body of exactly max job size",
			files:      [][]byte{newBinlog(7).full("t", put(1, 5), "12345\r\n").bytes()},
			maxJobSize: 5,
			want:       []wal.Record{record("t", put(1, 5), "12345\r\n")},
			wantMaxID:  1,
		},
		{
			name: "version 5 stores microseconds",
			files: [][]byte{newBinlog(5).
				full("old", delayed, "v5\r\n").
				full("old", put(2, 5), "two\r\n").
				short(with(put(2, 5), func(r *jobrec) { r.state, r.bodySize, r.buries = stateBuried, 5, 1 })).bytes()},
			want: []wal.Record{
				record("old", delayed, "v5\r\n"),
				record("old", with(put(2, 5), func(r *jobrec) { r.state, r.bodySize, r.buries = stateBuried, 5, 1 }), "two\r\n"),
			},
			wantMaxID: 2,
		},
		{
			name: "a version 5 file followed by version 7 files",
			files: [][]byte{
				newBinlog(5).full("t", put(1, 5), "x\r\n").full("t", put(2, 5), "y\r\n").zeros(85).bytes(),
				newBinlog(7).short(with(put(1, 5), func(r *jobrec) { r.state, r.bodySize = stateInvalid, 3 })).bytes(),
			},
			want:      []wal.Record{record("t", put(2, 5), "y\r\n")},
			wantMaxID: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeBinlogs(t, tc.files...)
			got, maxID, err := Read(dir, tc.maxJobSize)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			checkRecords(t, got, tc.want)
			if maxID != tc.wantMaxID {
				t.Errorf("maxID = %d, want %d", maxID, tc.wantMaxID)
			}
		})
	}
}

// TestReadTornTail cuts the last file inside each part of a record: the
// record is dropped and everything before it is kept.
func TestReadTornTail(t *testing.T) {
	first := newBinlog(7).full("t", put(1, 5), "one\r\n").bytes()
	migrated := with(put(1, 5), func(r *jobrec) { r.state, r.buries = stateBuried, 1 })

	last := newBinlog(7).full("t", put(2, 5), "two\r\n")
	putAt := last.len()
	last.full("tube", put(3, 5), "three\r\n")
	bumpAt := last.len()
	last.short(with(put(2, 5), func(r *jobrec) { r.state, r.bodySize, r.kicks = stateReady, 5, 9 }))
	migrateAt := last.len()
	last.full("t", migrated, "one\r\n")
	whole := last.bytes()

	kept := []wal.Record{record("t", put(1, 5), "one\r\n"), record("t", put(2, 5), "two\r\n")}
	tests := []struct {
		name      string
		cut       int64
		want      []wal.Record
		wantMaxID uint64
	}{
		{"inside the tube name length", putAt + 2, kept, 2},
		{"inside the tube name", putAt + 4 + 2, kept, 2},
		{"inside the job struct", putAt + 4 + 4 + 40, kept, 2},
		{"inside the body", putAt + 4 + 4 + 80 + 3, kept, 3},
		{"inside a short record", bumpAt + 50, append(kept, record("tube", put(3, 5), "three\r\n")), 3},
		{
			"inside a migrated copy's body", migrateAt + 4 + 1 + 80 + 2,
			[]wal.Record{
				record("t", put(1, 5), "one\r\n"),
				record("t", with(put(2, 5), func(r *jobrec) { r.kicks = 9 }), "two\r\n"),
				record("tube", put(3, 5), "three\r\n"),
			}, 3,
		},
		{
			"nothing cut", int64(len(whole)),
			[]wal.Record{
				record("t", migrated, "one\r\n"),
				record("t", with(put(2, 5), func(r *jobrec) { r.kicks = 9 }), "two\r\n"),
				record("tube", put(3, 5), "three\r\n"),
			}, 3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeBinlogs(t, first, whole[:tc.cut])
			got, maxID, err := Read(dir, 0)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			checkRecords(t, got, tc.want)
			if maxID != tc.wantMaxID {
				t.Errorf("maxID = %d, want %d", maxID, tc.wantMaxID)
			}
		})
	}
}

// TestReadDamage checks that damage is reported with the file and the
// offset of the record, and that a torn record outside the last file is
// damage.
func TestReadDamage(t *testing.T) {
	good := newBinlog(7).full("t", put(1, 5), "x\r\n")
	at := good.len() // every damaged record below starts here
	base := func() *binlog { return newBinlog(7).raw(good.bytes()[4:]) }
	tail := newBinlog(7).full("t", put(50, 5), "tail\r\n").bytes()

	tests := []struct {
		name       string
		damaged    []byte
		onlyFile   bool // the damaged file is the only one, so it is the last
		maxJobSize int
		wantOffset int64
		wantErr    error
		wantDetail string
	}{
		{
			name: "unknown version", damaged: newBinlog(8).full("t", put(1, 5), "x\r\n").bytes(),
			wantOffset: 0, wantErr: ErrUnknownVersion, wantDetail: "unknown version 8",
		},
		{
			name: "unknown version in the last file", damaged: newBinlog(6).bytes(), onlyFile: true,
			wantOffset: 0, wantErr: ErrUnknownVersion, wantDetail: "unknown version 6",
		},
		{
			name: "version 0 with data", damaged: append(make([]byte, 4), good.bytes()[4:]...), onlyFile: true,
			wantOffset: 0, wantErr: ErrUnknownVersion, wantDetail: "unknown version 0",
		},
		{
			name: "short header", damaged: []byte{7, 0},
			wantOffset: 0, wantErr: ErrCorrupt, wantDetail: "version header",
		},
		{
			name: "negative tube name length", damaged: base().nameLen(-1).bytes(), onlyFile: true,
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "tube name length -1",
		},
		{
			name: "tube name too long", damaged: base().nameLen(201).raw([]byte(strings.Repeat("n", 201))).bytes(), onlyFile: true,
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "tube name length 201",
		},
		{
			name: "unknown state", damaged: base().full("t", with(put(2, 5), func(r *jobrec) { r.state = 5 }), "y\r\n").bytes(), onlyFile: true,
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "unknown state 5",
		},
		{
			name: "unknown state of a known job", damaged: base().short(with(put(1, 5), func(r *jobrec) { r.state, r.bodySize = 9, 3 })).bytes(), onlyFile: true,
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "unknown state 9",
		},
		{
			name: "full record with state 0", damaged: base().full("t", with(put(2, 5), func(r *jobrec) { r.state = stateInvalid }), "y\r\n").bytes(), onlyFile: true,
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "full record with state 0",
		},
		{
			name: "body larger than max job size + 2", damaged: base().full("t", put(2, 5), "123456\r\n").bytes(), onlyFile: true,
			maxJobSize: 5, wantOffset: at, wantErr: ErrCorrupt, wantDetail: "body size 8 is outside 0..7",
		},
		{
			name: "negative body size", damaged: base().nameLen(1).raw([]byte("t")).raw(newBinlog(7).encode(with(put(2, 5), func(r *jobrec) { r.bodySize = -2 }))).bytes(), onlyFile: true,
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "body size -2",
		},
		{
			name: "short record changes the body size", damaged: base().short(with(put(1, 5), func(r *jobrec) { r.bodySize = 4 })).bytes(), onlyFile: true,
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "body size changed from 3 to 4",
		},
		{
			name: "migrated copy changes the body size", damaged: base().full("t", put(1, 5), "xy\r\n").bytes(), onlyFile: true,
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "body size changed from 3 to 4",
		},
		{
			name: "torn tube name length in an earlier file", damaged: base().raw([]byte{1, 0}).bytes(),
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "inside the tube name length",
		},
		{
			name: "torn tube name in an earlier file", damaged: base().nameLen(5).raw([]byte("tu")).bytes(),
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "inside the tube name",
		},
		{
			name: "torn job struct in an earlier file", damaged: base().short(put(1, 5)).bytes()[:at+30],
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "inside the job struct",
		},
		{
			name: "torn body in an earlier file", damaged: base().full("t", put(2, 5), "body\r\n").bytes()[:at+4+1+80+2],
			wantOffset: at, wantErr: ErrCorrupt, wantDetail: "inside the job body",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := [][]byte{tc.damaged}
			if !tc.onlyFile {
				files = append(files, tail)
			}
			dir := writeBinlogs(t, files...)
			jobs, maxID, err := Read(dir, tc.maxJobSize)
			if err == nil {
				t.Fatalf("Read succeeded with %d jobs, maxID %d; want an error", len(jobs), maxID)
			}
			if jobs != nil || maxID != 0 {
				t.Errorf("Read returned %d jobs and maxID %d with its error; want none", len(jobs), maxID)
			}
			checkFileError(t, err, filepath.Join(dir, "binlog.1"), tc.wantOffset, tc.wantErr, tc.wantDetail)
		})
	}
}

// TestReadTornHugeBody checks that a torn record claiming a body near a
// large limit is not allocated before it is found to be torn.
func TestReadTornHugeBody(t *testing.T) {
	const limit = 1 << 30
	b := newBinlog(7).full("t", put(1, 5), "x\r\n").nameLen(1).raw([]byte("t"))
	b.raw(b.encode(with(put(2, 5), func(r *jobrec) { r.bodySize = limit })))
	dir := writeBinlogs(t, b.raw([]byte("only the start of the body")).bytes())

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, maxID, err := Read(dir, limit)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	checkRecords(t, got, []wal.Record{record("t", put(1, 5), "x\r\n")})
	if maxID != 2 {
		t.Errorf("maxID = %d, want 2", maxID)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > limit/4 {
		t.Errorf("Read allocated %d bytes for a torn record", alloc)
	}
}

// TestReadNoBodies: a negative maxJobSize (-z 0's) takes only empty
// bodies, as the engine does then; read as 0, it took beanstalkd's
// default, 65535.
func TestReadNoBodies(t *testing.T) {
	empty := writeBinlogs(t, newBinlog(7).full("t", put(1, 5), "\r\n").bytes())
	got, _, err := Read(empty, -1)
	if err != nil {
		t.Fatalf("an empty body with no bodies allowed: %v", err)
	}
	checkRecords(t, got, []wal.Record{record("t", put(1, 5), "\r\n")})
	dir := writeBinlogs(t, newBinlog(7).full("t", put(1, 5), "x\r\n").bytes())
	if _, _, err := Read(dir, -1); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "outside 0..2") {
		t.Fatalf("a body of one byte with no bodies allowed: %v, want its size refused", err)
	}
}

func TestReadArguments(t *testing.T) {
	dir := writeBinlogs(t, newBinlog(7).bytes())
	if _, _, err := Read(filepath.Join(dir, "missing"), 0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read(missing dir) error = %v, want one wrapping os.ErrNotExist", err)
	}
}

// checkFileError checks that err is a *FileError naming path and offset in
// its message as well as its fields.
func checkFileError(t *testing.T, err error, path string, offset int64, sentinel error, detail string) {
	t.Helper()
	var fe *FileError
	if !errors.As(err, &fe) {
		t.Fatalf("error %q (%T) is not a *FileError", err, err)
	}
	if fe.Path != path || fe.Offset != offset {
		t.Errorf("error at %s offset %d, want %s offset %d (%v)", fe.Path, fe.Offset, path, offset, err)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("error %q does not wrap %v", err, sentinel)
	}
	msg := err.Error()
	for _, s := range []string{path, "offset " + strconv.FormatInt(offset, 10), detail} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not mention %q", msg, s)
		}
	}
}

// checkRecords compares jobs field by field, so a failure says which.
func checkRecords(t *testing.T, got, want []wal.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d jobs, want %d", len(got), len(want))
		for _, r := range got {
			t.Logf("  got job %d in %q state %d body %q", r.ID, r.Tube, r.State, r.Body)
		}
	}
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("job %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}
