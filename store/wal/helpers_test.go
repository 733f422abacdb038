package wal_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
	"github.com/sproutmq/sprout/store/wal"
)

// model is the jobs a test has logged, kept the way a store keeps them:
// each with its latest record and the Loc of its latest full record. It is
// also the Log's Migrator. mu is held around each Append, as a store holds
// a tube lock, so a migration never races a change to the same job.
type model struct {
	mu   sync.Mutex
	l    *wal.Log
	jobs map[uint64]*modelJob // guarded by mu: live jobs
	next uint64               // guarded by mu: the last id issued
}

type modelJob struct {
	rec wal.Record // KindFull, the job as it is now
	loc wal.Loc
}

// open opens dir, loads what it recovers into a model and starts the log.
func open(t testing.TB, dir string, opts wal.Options) (*wal.Log, *model) {
	t.Helper()
	l, err := wal.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	m := &model{l: l, jobs: make(map[uint64]*modelJob), next: l.LastID()}
	for _, r := range l.Recovered() {
		m.jobs[r.ID] = &modelJob{rec: r.Record, loc: r.Loc}
	}
	if err := l.Start(m); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, m
}

func (m *model) Migrate(seg uint32, ids []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		j := m.jobs[id]
		if j == nil || j.loc.Seg != seg {
			continue
		}
		r := j.rec
		if _, loc, err := m.l.Append(&r, j.loc); err == nil {
			j.loc = loc
			m.l.NoteMigrated()
		}
	}
}

// put logs a new job in tube with the next id; body gets "\r\n" appended.
func (m *model) put(t testing.TB, tube, body string, state uint8, pri uint32) (id, lsn uint64) {
	t.Helper()
	id, lsn, err := m.tryPut(tube, body, state, pri)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	return id, lsn
}

func (m *model) tryPut(tube, body string, state uint8, pri uint32) (id, lsn uint64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id = m.next + 1
	r := wal.Record{
		Kind: wal.KindFull, ID: id, Tube: tube, State: state, Pri: pri,
		TTR: int64(time.Minute), CreatedAt: time.Now().UnixNano(),
		Body: []byte(body + "\r\n"),
	}
	if state == wal.StateDelayed {
		r.Delay = int64(time.Hour)
		r.Deadline = r.CreatedAt + r.Delay
	}
	lsn, loc, err := m.l.Append(&r, wal.Loc{})
	if err != nil {
		return 0, 0, err
	}
	m.next = id
	m.jobs[id] = &modelJob{rec: r, loc: loc}
	return id, lsn, nil
}

// update changes a live job's fields with f and logs the change.
func (m *model) update(t testing.TB, id uint64, f func(r *wal.Record)) uint64 {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[id]
	if j == nil {
		t.Fatalf("update: job %d is not live", id)
	}
	f(&j.rec)
	u := j.rec
	u.Kind, u.Tube, u.Body = wal.KindUpdate, "", nil
	lsn, _, err := m.l.Append(&u, wal.Loc{})
	if err != nil {
		t.Fatalf("update %d: %v", id, err)
	}
	return lsn
}

// del logs a job's deletion.
func (m *model) del(t testing.TB, id uint64) uint64 {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[id]
	if j == nil {
		t.Fatalf("delete: job %d is not live", id)
	}
	lsn, _, err := m.l.Append(&wal.Record{Kind: wal.KindDelete, ID: id}, j.loc)
	if err != nil {
		t.Fatalf("delete %d: %v", id, err)
	}
	delete(m.jobs, id)
	return lsn
}

func (m *model) ids() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.jobs))
}

// want is what a reopen must recover: the live jobs, reserved ones ready.
func (m *model) want() map[uint64]wal.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[uint64]wal.Record, len(m.jobs))
	for id, j := range m.jobs {
		r := j.rec
		if r.State == wal.StateReserved {
			r.State = wal.StateReady
		}
		out[id] = r
	}
	return out
}

// recoverDir opens dir, returns what it recovers keyed by id, and closes it.
func recoverDir(t testing.TB, dir string, opts wal.Options) (map[uint64]wal.Recovered, uint64) {
	t.Helper()
	l, err := wal.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer segtest.CloseUnstarted(t, l)
	got := make(map[uint64]wal.Recovered)
	for _, r := range l.Recovered() {
		got[r.ID] = r
	}
	return got, l.LastID()
}

// closeAndRecover closes l, reopens dir and checks that it recovers the
// jobs m holds, exactly; it returns what it recovered and the last id.
func closeAndRecover(t testing.TB, l *wal.Log, m *model, dir string, opts wal.Options) (map[uint64]wal.Recovered, uint64) {
	t.Helper()
	want := m.want()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, last := recoverDir(t, dir, opts)
	sameJobs(t, got, want)
	return got, last
}

// sameJobs compares recovered jobs with the model's.
func sameJobs(t testing.TB, got map[uint64]wal.Recovered, want map[uint64]wal.Record) {
	t.Helper()
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("job %d (%s) was not recovered", id, w.Body)
			continue
		}
		r := g.Record
		if r.Body == nil {
			r.Body = []byte{}
		}
		if fmt.Sprintf("%+v", r) != fmt.Sprintf("%+v", w) {
			t.Errorf("job %d recovered as\n %+v\nwant\n %+v", id, r, w)
		}
		if g.Loc.Seg == 0 || g.Loc.Size == 0 {
			t.Errorf("job %d recovered without a location: %+v", id, g.Loc)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("job %d recovered but should be gone", id)
		}
	}
}

func segPath(dir string, seq uint32) string { return filepath.Join(dir, segment.SegmentName(seq)) }
