package wal_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
	"github.com/sproutmq/sprout/store/wal"
)

// TestRecoverEveryState logs each kind of change a store makes and checks
// that a reopen finds every job in its last logged state.
func TestRecoverEveryState(t *testing.T) {
	dir := t.TempDir()
	l, m := open(t, dir, wal.Options{})
	m.put(t, "default", "ready", wal.StateReady, 5)
	m.put(t, "other", "delayed", wal.StateDelayed, 6)
	buried, _ := m.put(t, "default", "buried", wal.StateReady, 7)
	m.update(t, buried, func(r *wal.Record) { r.State, r.Pri, r.Buries = wal.StateBuried, 77, 1 })
	reserved, _ := m.put(t, "default", "reserved", wal.StateReady, 8)
	m.update(t, reserved, func(r *wal.Record) { r.State, r.Reserves = wal.StateReserved, 1 })
	deleted, _ := m.put(t, "default", "deleted", wal.StateReady, 9)
	m.del(t, deleted)
	released, _ := m.put(t, "default", "released", wal.StateReady, 10)
	m.update(t, released, func(r *wal.Record) {
		r.State, r.Pri, r.Releases = wal.StateDelayed, 1, 1
		r.Delay = int64(30 * time.Second)
		r.Deadline = time.Now().Add(30 * time.Second).UnixNano()
	})
	kicked, _ := m.put(t, "default", "kicked", wal.StateDelayed, 11)
	m.update(t, kicked, func(r *wal.Record) { r.State, r.Deadline, r.Kicks = wal.StateReady, 0, 1 })
	got, last := closeAndRecover(t, l, m, dir, wal.Options{})
	if last != kicked {
		t.Errorf("LastID = %d, want %d", last, kicked)
	}
	if got[reserved].State != wal.StateReady {
		t.Errorf("a reserved job came back %d, want ready", got[reserved].State)
	}
}

// tornSetup logs three jobs in one segment and closes the log; it returns
// the ids and the offset where the third record starts.
func tornSetup(t *testing.T, dir string) (ids [3]uint64, thirdAt int64) {
	l, m := open(t, dir, wal.Options{SegmentSize: 1 << 16})
	ids[0], _ = m.put(t, "default", "one", wal.StateReady, 1)
	var lsn uint64
	ids[1], lsn = m.put(t, "default", "two", wal.StateReady, 2)
	ids[2], _ = m.put(t, "default", "three, the one torn by the crash", wal.StateReady, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return ids, int64(segment.HeaderSize) + int64(lsn)
}

// TestTornTail: the last record of the log is cut short, as a crash mid
// write leaves it. Open recovers everything before it, warns once and cuts
// the file there; the log then carries on from the cut.
func TestTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(t *testing.T, path string, at int64)
	}{
		{"truncated", func(t *testing.T, path string, at int64) {
			if err := os.Truncate(path, at+11); err != nil {
				t.Fatal(err)
			}
		}},
		{"zeros after a partial record", func(t *testing.T, path string, at int64) {
			// A preallocated file keeps its length: the record's end is zeros.
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, 20), at+30); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ids, at := tornSetup(t, dir)
			segtest.LeaveOpen(t, segPath(dir, 1)) // the crash came before Close sealed it
			tc.tear(t, segPath(dir, 1), at)

			var out testproc.SyncBuffer
			opts := wal.Options{SegmentSize: 1 << 16, Logger: zerolog.New(&out)}
			l, m := open(t, dir, opts)
			if got := m.ids(); fmt.Sprint(got) != fmt.Sprint(ids[:2]) {
				t.Fatalf("recovered %v, want %v", got, ids[:2])
			}
			if w := out.Lines("warn"); len(w) != 1 || !strings.Contains(w[0], segment.SegmentName(1)) {
				t.Errorf("want one warning naming the file, got %q", w)
			}
			switch info, err := os.Stat(segPath(dir, 1)); {
			case errors.Is(err, os.ErrNotExist):
				// Compaction moved its jobs on and removed it (a loaded
				// machine's timing, seen once in CI): nothing of the
				// torn tail is left either.
			case err != nil:
				t.Errorf("segment 1: %v", err)
			case info.Size() != at:
				t.Errorf("segment 1 is %d bytes, want it cut to %d", info.Size(), at)
			}
			if l.LastID() < ids[1] {
				t.Errorf("LastID %d below the last recovered id %d", l.LastID(), ids[1])
			}
			// The log goes on: a new job and the old ones survive the next reopen.
			id4, _ := m.put(t, "default", "four", wal.StateReady, 4)
			want := m.want()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			out = testproc.SyncBuffer{}
			got, _ := recoverDir(t, dir, opts)
			sameJobs(t, got, want)
			if _, ok := got[id4]; !ok {
				t.Errorf("job %d put after the cut is lost", id4)
			}
			if w := out.Lines("warn"); len(w) != 0 {
				t.Errorf("the second reopen warned again: %q", w)
			}
		})
	}
}

// damagedLog writes jobs over at least three small segments, the last with
// at least three records, and returns the model and each job's (segment,
// offset). The spare a rotation needs is made in the background, so a
// segment may take more records than fit; hence the loop.
func damagedLog(t *testing.T, dir string) (*model, map[uint64][2]int64) {
	l, m := open(t, dir, wal.Options{SegmentSize: 512})
	at := make(map[uint64][2]int64)
	var seg uint32
	var off int64
	inSeg := 0
	for i := 0; seg < 3 || inSeg < 3; i++ {
		if i == 300 {
			t.Fatalf("300 records and only %d segments", seg)
		}
		id, lsn := m.put(t, "default", fmt.Sprintf("job %03d with a body of some length", i), wal.StateReady, uint32(i))
		segtest.WaitDurable(t, l, lsn)
		m.mu.Lock()
		loc := m.jobs[id].loc
		m.mu.Unlock()
		if loc.Seg != seg {
			seg, off, inSeg = loc.Seg, int64(segment.HeaderSize), 0
		}
		at[id] = [2]int64{int64(loc.Seg), off}
		off += int64(loc.Size)
		inSeg++
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return m, at
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedRecord: a checksum failure anywhere but the torn tail stops
// Open with an error naming the file and offset; SkipDamaged skips (and
// logs) the record instead.
func TestDamagedRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		pick func(at map[uint64][2]int64, last uint32) uint64 // the job whose record to damage
	}{
		{"first segment", func(at map[uint64][2]int64, last uint32) uint64 {
			for id, a := range at {
				if a[0] == 1 && a[1] == segment.HeaderSize {
					return id
				}
			}
			return 0
		}},
		{"middle of the last segment", func(at map[uint64][2]int64, last uint32) uint64 {
			first := uint64(0)
			n := 0
			for id, a := range at {
				if a[0] == int64(last) {
					n++
					if first == 0 || id < first {
						first = id
					}
				}
			}
			if n < 2 {
				return 0 // the record would be the tail
			}
			return first
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m, at := damagedLog(t, dir)
			var last uint32
			for _, a := range at {
				last = max(last, uint32(a[0]))
			}
			if last < 3 {
				t.Fatalf("jobs span %d segments; the test needs at least 3", last)
			}
			victim := tc.pick(at, last)
			if victim == 0 {
				t.Fatal("no record to damage")
			}
			seg, off := uint32(at[victim][0]), at[victim][1]
			flipByte(t, segPath(dir, seg), off+20) // inside the payload
			want := m.want()
			delete(want, victim)

			_, err := wal.Open(dir, wal.Options{SegmentSize: 512})
			if err == nil {
				t.Fatal("Open succeeded on a damaged log")
			}
			var de *segment.DamageError
			if !errors.As(err, &de) || de.Offset != off || strings.Contains(err.Error(), "--") {
				t.Errorf("error %v: want a segment.DamageError at offset %d, naming no flag", err, off)
			}
			if msg := err.Error(); !strings.Contains(msg, segPath(dir, seg)) || !strings.Contains(msg, fmt.Sprintf("offset %d", off)) {
				t.Errorf("error %q does not name %s and offset %d", msg, segment.SegmentName(seg), off)
			}

			var out testproc.SyncBuffer
			opts := wal.Options{SegmentSize: 512, SkipDamaged: true, Logger: zerolog.New(&out)}
			got, _ := recoverDir(t, dir, opts)
			sameJobs(t, got, want)
			if e := out.Lines("error"); len(e) != 1 || !strings.Contains(e[0], segment.SegmentName(seg)) || !strings.Contains(e[0], fmt.Sprintf(`"offset":%d`, off)) {
				t.Errorf("want one error naming %s at offset %d, got %q", segment.SegmentName(seg), off, e)
			}
		})
	}
}

// TestOpenRejectsForeignFile: a segment with a wrong header is refused.
func TestOpenRejectsForeignFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(segPath(dir, 1), []byte("definitely not a Sprout segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := wal.Open(dir, wal.Options{}); err == nil || !strings.Contains(err.Error(), segment.SegmentName(1)) {
		t.Fatalf("Open = %v, want an error naming the file", err)
	}
}

// TestOpenRefusesAMembersLog: a cluster member's directory is refused
// with ErrClusterLog, in one line that names no flag, and left as it is.
func TestOpenRefusesAMembersLog(t *testing.T) {
	dir := t.TempDir()
	hdr := make([]byte, segment.HeaderSize)
	copy(hdr, "SPROUTWL")
	hdr[8] = byte(segment.VersionRaftLog)
	if err := os.WriteFile(segPath(dir, 1), hdr, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := wal.Open(dir, wal.Options{})
	if !errors.Is(err, wal.ErrClusterLog) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "--") {
		t.Fatalf("Open of a member's directory: %v, want ErrClusterLog in one line naming no flag", err)
	}
	if b, err := os.ReadFile(segPath(dir, 1)); err != nil || !bytes.Equal(b, hdr) {
		t.Errorf("the member's segment changed: %q, %v", b, err)
	}
}

// TestUnfinishedSegment: a crash while a segment is being preallocated
// leaves a file of zeros (or an empty one) without a header. It never held
// a record: Open removes it with a warning and starts, even when the last
// real segment also ends in a torn record.
func TestUnfinishedSegment(t *testing.T) {
	for _, size := range []int{0, 10, 4096} {
		t.Run(fmt.Sprintf("%d bytes", size), func(t *testing.T) {
			dir := t.TempDir()
			ids, at := tornSetup(t, dir)
			if err := os.Truncate(segPath(dir, 1), at+11); err != nil {
				t.Fatal(err)
			}
			seqs, _ := segtest.Segments(t, dir)
			next := seqs[len(seqs)-1] + 1
			if err := os.WriteFile(segPath(dir, next), make([]byte, size), 0o600); err != nil {
				t.Fatal(err)
			}
			var out testproc.SyncBuffer
			got, _ := recoverDir(t, dir, wal.Options{SegmentSize: 1 << 16, Logger: zerolog.New(&out)})
			if len(got) != 2 || got[ids[0]].ID == 0 || got[ids[1]].ID == 0 {
				t.Errorf("recovered %v, want jobs %v", got, ids[:2])
			}
			if _, err := os.Stat(segPath(dir, next)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the unfinished segment is still there: %v", err)
			}
			if w := out.Lines("warn"); len(w) != 2 {
				t.Errorf("want two warnings (unfinished segment, torn tail), got %q", w)
			}
		})
	}
}
