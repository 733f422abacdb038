package cbinlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// model tracks what a beanstalkd should have logged for each job it holds,
// following the rules of beanstalkd-behaviour.md §4.
type model struct {
	t     *testing.T
	tube  string // the tube the driving connection uses
	jobs  map[uint64]*modelJob
	maxID uint64
}

type modelJob struct {
	mem wal.Record // the server's in-memory job; State may be Reserved
	// candidates are the records a replay may find: the job as of its last
	// logged change, or as compaction copied it after an unlogged one
	// (a reserve, a release without delay, a restart's re-bury).
	candidates []wal.Record
	// ambiguous says the restart may have revived any of the candidates,
	// so the test must not change the job any more, except to delete it.
	ambiguous bool

	createdLo, createdHi   int64 // window for CreatedAt
	deadlineLo, deadlineHi int64 // window for Deadline, when delayed
}

func newModel(t *testing.T) *model {
	return &model{t: t, tube: "default", jobs: make(map[uint64]*modelJob)}
}

// asReplayed is r as a replay returns it: Reserved comes back Ready, and
// only a delayed job has a deadline (checked against a window instead).
func asReplayed(r wal.Record) wal.Record {
	if r.State == wal.StateReserved {
		r.State = wal.StateReady
	}
	r.Deadline = 0
	return r
}

func (m *model) job(id uint64) *modelJob {
	m.t.Helper()
	j := m.jobs[id]
	if j == nil {
		m.t.Fatalf("model: no job %d", id)
	}
	if j.ambiguous {
		m.t.Fatalf("model: job %d has an ambiguous state since the restart", id)
	}
	return j
}

func (m *model) logged(j *modelJob)   { j.candidates = []wal.Record{asReplayed(j.mem)} }
func (m *model) unlogged(j *modelJob) { j.candidates = append(j.candidates, asReplayed(j.mem)) }

func (m *model) use(c *client, tube string) {
	m.t.Helper()
	c.expect("use "+tube, "USING "+tube)
	m.tube = tube
}

func (m *model) put(c *client, pri uint32, delay, ttr int, body string) uint64 {
	m.t.Helper()
	lo := time.Now().UnixNano()
	id := c.put(pri, delay, ttr, []byte(body))
	hi := time.Now().UnixNano()
	j := &modelJob{
		mem: wal.Record{
			Kind: wal.KindFull, ID: id, Tube: m.tube, State: wal.StateReady, Pri: pri,
			Delay: int64(delay) * second, TTR: int64(max(ttr, 1)) * second,
			Body: []byte(body + "\r\n"),
		},
		createdLo: lo, createdHi: hi,
	}
	if delay > 0 {
		j.mem.State = wal.StateDelayed
		j.deadlineLo, j.deadlineHi = lo+int64(delay)*second, hi+int64(delay)*second
	}
	m.jobs[id] = j
	m.maxID = max(m.maxID, id)
	m.logged(j)
	return id
}

func (m *model) reserve(c *client, id uint64) {
	m.t.Helper()
	j := m.job(id)
	c.expect(fmt.Sprintf("reserve-job %d", id), fmt.Sprintf("RESERVED %d %d", id, len(j.mem.Body)-2))
	j.mem.State = wal.StateReserved
	j.mem.Reserves++
	m.unlogged(j)
}

func (m *model) touch(c *client, id uint64) {
	m.t.Helper()
	c.expect(fmt.Sprintf("touch %d", id), "TOUCHED")
	m.unlogged(m.job(id))
}

func (m *model) bury(c *client, id uint64, pri uint32) {
	m.t.Helper()
	j := m.job(id)
	c.expect(fmt.Sprintf("bury %d %d", id, pri), "BURIED")
	j.mem.State, j.mem.Pri = wal.StateBuried, pri
	j.mem.Buries++
	m.logged(j)
}

func (m *model) release(c *client, id uint64, pri uint32, delay int) {
	m.t.Helper()
	j := m.job(id)
	lo := time.Now().UnixNano()
	c.expect(fmt.Sprintf("release %d %d %d", id, pri, delay), "RELEASED")
	hi := time.Now().UnixNano()
	j.mem.Pri, j.mem.Delay = pri, int64(delay)*second
	j.mem.Releases++
	if delay == 0 {
		j.mem.State = wal.StateReady
		m.unlogged(j) // beanstalkd does not log a release without delay
		return
	}
	j.mem.State = wal.StateDelayed
	j.deadlineLo, j.deadlineHi = lo+int64(delay)*second, hi+int64(delay)*second
	m.logged(j)
}

// kick kicks the used tube, which must hold just the given buried jobs.
func (m *model) kick(c *client, ids ...uint64) {
	m.t.Helper()
	c.expect(fmt.Sprintf("kick %d", len(ids)), fmt.Sprintf("KICKED %d", len(ids)))
	for _, id := range ids {
		j := m.job(id)
		j.mem.State = wal.StateReady
		j.mem.Kicks++
		m.logged(j)
	}
}

func (m *model) kickJob(c *client, id uint64) {
	m.t.Helper()
	j := m.job(id)
	c.expect(fmt.Sprintf("kick-job %d", id), "KICKED")
	j.mem.State = wal.StateReady
	j.mem.Kicks++
	m.logged(j)
}

func (m *model) delete(c *client, id uint64) {
	m.t.Helper()
	if m.jobs[id] == nil {
		m.t.Fatalf("model: no job %d", id)
	}
	c.expect(fmt.Sprintf("delete %d", id), "DELETED")
	delete(m.jobs, id)
}

// restart is what a beanstalkd restart does to the jobs: each comes back
// as one of its candidates, Reserved as Ready, and a buried one is buried
// again, which in 1.12 counts one more bury in memory (not in the log).
func (m *model) restart() {
	for _, j := range m.jobs {
		j.ambiguous = len(j.candidates) > 1
		j.mem = j.candidates[len(j.candidates)-1]
		if !j.ambiguous && j.mem.State == wal.StateBuried {
			again := j.mem
			again.Buries++
			j.candidates = append(j.candidates, again)
			j.ambiguous = true
		}
	}
}

// check compares the jobs Read returned with the model.
func (m *model) check(got []wal.Record, maxID uint64) {
	m.t.Helper()
	var gotIDs, wantIDs []uint64
	for _, r := range got {
		gotIDs = append(gotIDs, r.ID)
	}
	for id := range m.jobs {
		wantIDs = append(wantIDs, id)
	}
	slices.Sort(wantIDs)
	if !slices.Equal(gotIDs, wantIDs) {
		m.t.Errorf("Read returned jobs %v, want %v", gotIDs, wantIDs)
	}
	if maxID != m.maxID {
		m.t.Errorf("maxID = %d, want %d", maxID, m.maxID)
	}
	for _, r := range got {
		j := m.jobs[r.ID]
		if j == nil {
			continue
		}
		cmp := r
		cmp.CreatedAt, cmp.Deadline = 0, 0
		if !slices.ContainsFunc(j.candidates, func(c wal.Record) bool { return reflect.DeepEqual(cmp, c) }) {
			m.t.Errorf("job %d:\n got %s\nwant one of:", r.ID, describe(r))
			for _, c := range j.candidates {
				m.t.Errorf("     %s", describe(c))
			}
		}
		if r.CreatedAt < j.createdLo || r.CreatedAt > j.createdHi {
			m.t.Errorf("job %d: CreatedAt %d outside [%d, %d]", r.ID, r.CreatedAt, j.createdLo, j.createdHi)
		}
		if r.State == wal.StateDelayed {
			if r.Deadline < j.deadlineLo || r.Deadline > j.deadlineHi {
				m.t.Errorf("job %d: Deadline %d outside [%d, %d]", r.ID, r.Deadline, j.deadlineLo, j.deadlineHi)
			}
		} else if r.Deadline != 0 {
			m.t.Errorf("job %d in state %d has Deadline %d, want 0", r.ID, r.State, r.Deadline)
		}
	}
}

func describe(r wal.Record) string {
	body := r.Body
	if len(body) > 40 {
		body = append(body[:40:40], "..."...)
	}
	return fmt.Sprintf("{tube %q state %d pri %d delay %v ttr %v reserves %d timeouts %d releases %d buries %d kicks %d body %q}",
		r.Tube, r.State, r.Pri, time.Duration(r.Delay), time.Duration(r.TTR),
		r.Reserves, r.Timeouts, r.Releases, r.Buries, r.Kicks, body)
}

// TestReadBeanstalkd drives the installed beanstalkd through two runs on
// one binlog directory with small files, then checks Read against what the
// commands should have logged, and against beanstalkd's own recovery of a
// copy of the directory.
func TestReadBeanstalkd(t *testing.T) {
	dir := t.TempDir()
	m := newModel(t)
	args := []string{"-f", "0", "-s", "4096"}

	// First run, stopped by SIGTERM.
	srv := startBeanstalkd(t, dir, args...)
	c := dial(t, srv)
	worker := dial(t, srv) // holds a reservation until the server dies

	m.use(c, "alpha")
	hello := m.put(c, 0, 0, 1, "hello")
	var all256 []byte
	for i := range 256 {
		all256 = append(all256, byte(i))
	}
	m.put(c, 4294967295, 0, 60, string(all256))
	crlf := m.put(c, 10, 0, 5, "line1\r\nline2\r\n\r\n")
	m.put(c, 10, 0, 0, "") // ttr 0 is stored as 1s
	var big strings.Builder
	for i := 0; big.Len() < 3000; i++ {
		fmt.Fprintf(&big, "%d,", i)
	}
	m.put(c, 3, 0, 60, big.String())

	m.use(c, "beta")
	later := m.put(c, 100, 3600, 30, "later")
	buried := m.put(c, 50, 0, 10, "to bury")
	m.reserve(c, buried)
	m.bury(c, buried, 77)
	releasedLater := m.put(c, 50, 0, 10, "released with a delay")
	m.reserve(c, releasedLater)
	m.release(c, releasedLater, 20, 600)
	releasedNow := m.put(c, 50, 0, 10, "released at once")
	m.reserve(c, releasedNow)
	m.release(c, releasedNow, 1, 0)
	held := m.put(c, 50, 0, 120, "held by a worker")
	m.reserve(worker, held)
	m.touch(worker, held)
	gone := m.put(c, 50, 0, 10, "deleted")
	m.delete(c, gone)
	kickedDelayed := m.put(c, 60, 3600, 10, "kicked while delayed")
	m.kickJob(c, kickedDelayed)

	m.use(c, "gamma")
	kicked := m.put(c, 40, 0, 10, "buried, then kicked")
	m.reserve(c, kicked)
	m.bury(c, kicked, 41)
	m.kick(c, kicked)

	m.use(c, strings.Repeat("x", 200))
	m.put(c, 7, 0, 10, "in the longest tube name")
	m.use(c, "a-b+c/d;e.f$g_h(i)")
	m.put(c, 8, 1800, 10, "odd tube name")

	// Churn: many files holding few live jobs make beanstalkd compact,
	// copying the oldest file's jobs into the current one, and then delete
	// the files left empty. Short records for jobs whose full record went
	// with them stay behind.
	m.use(c, "churn")
	for range 60 {
		m.delete(c, m.put(c, 1, 0, 60, strings.Repeat("f", 150)))
	}
	if migrated := c.serverStats()["binlog-records-migrated"]; migrated == "0" || migrated == "" {
		t.Errorf("binlog-records-migrated: %q; the test means to have beanstalkd compact", migrated)
	}
	srv.Stop(0) // SIGTERM, then wait for the exit without a limit

	// Second run on the same directory, killed with SIGKILL.
	m.restart()
	srv = startBeanstalkd(t, dir, args...)
	c = dial(t, srv)
	m.delete(c, hello)
	m.delete(c, releasedNow)
	m.use(c, "alpha")
	m.reserve(c, crlf)
	m.bury(c, crlf, 5)
	m.kickJob(c, later)
	m.use(c, "delta")
	m.put(c, 9, 0, 10, "after the restart")
	last := m.put(c, 9, 0, 10, "the highest id, deleted")
	m.delete(c, last)
	srv.Kill()

	paths, err := Found(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("binlog files: %v", baseNames(paths))
	if len(paths) < 3 {
		t.Errorf("beanstalkd left %d binlog files, want several", len(paths))
	}
	if exists(filepath.Join(dir, "binlog.1")) {
		t.Errorf("binlog.1 is still there; the test means to have beanstalkd delete its oldest files")
	}

	got, maxID, err := Read(dir, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	m.check(got, maxID)
	compareWithBeanstalkd(t, dir, got, maxID)

	t.Run("torn tail", func(t *testing.T) { checkEveryCut(t, dir) })
	t.Run("damage in the oldest file", func(t *testing.T) { checkDamage(t, dir) })
}

func baseNames(paths []string) []string {
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	return names
}

// compareWithBeanstalkd starts beanstalkd on a copy of dir and checks that
// it recovered the jobs Read returned, and no others.
func compareWithBeanstalkd(t *testing.T, dir string, got []wal.Record, maxID uint64) {
	t.Helper()
	srv := startBeanstalkd(t, copyBinlogs(t, dir))
	c := dial(t, srv)
	now := time.Now().UnixNano()
	byID := make(map[uint64]wal.Record)
	for _, r := range got {
		byID[r.ID] = r
	}
	stateNames := map[uint8]string{wal.StateReady: "ready", wal.StateBuried: "buried", wal.StateDelayed: "delayed"}
	for id := uint64(1); id <= maxID+1; id++ {
		st := c.stats(id)
		r, ok := byID[id]
		if !ok {
			if st != nil {
				t.Errorf("beanstalkd recovered job %d, which Read did not return: %v", id, st)
			}
			continue
		}
		if st == nil {
			t.Errorf("beanstalkd did not recover job %d, which Read returned", id)
			continue
		}
		want := map[string]string{
			"tube":     r.Tube,
			"state":    stateNames[r.State],
			"pri":      strconv.FormatUint(uint64(r.Pri), 10),
			"delay":    strconv.FormatInt(r.Delay/second, 10),
			"ttr":      strconv.FormatInt(r.TTR/second, 10),
			"reserves": strconv.FormatUint(uint64(r.Reserves), 10),
			"timeouts": strconv.FormatUint(uint64(r.Timeouts), 10),
			"releases": strconv.FormatUint(uint64(r.Releases), 10),
			"buries":   strconv.FormatUint(uint64(r.Buries), 10),
			"kicks":    strconv.FormatUint(uint64(r.Kicks), 10),
		}
		if r.State == wal.StateBuried {
			// beanstalkd (1.12 and 1.13) counts the re-bury on recovery.
			want["buries"] = strconv.FormatUint(uint64(r.Buries)+1, 10)
		}
		for k, v := range want {
			if st[k] != v {
				t.Errorf("job %d: beanstalkd says %s: %s, Read says %s", id, k, st[k], v)
			}
		}
		if age, _ := strconv.ParseInt(st["age"], 10, 64); abs(age-(now-r.CreatedAt)/second) > 2 {
			t.Errorf("job %d: beanstalkd says age %d s, Read's CreatedAt says %d s", id, age, (now-r.CreatedAt)/second)
		}
		if r.State == wal.StateDelayed {
			if left, _ := strconv.ParseInt(st["time-left"], 10, 64); abs(left-(r.Deadline-now)/second) > 2 {
				t.Errorf("job %d: beanstalkd says time-left %d s, Read's Deadline says %d s", id, left, (r.Deadline-now)/second)
			}
		}
		reply, body := c.do(fmt.Sprintf("peek %d", id), nil)
		if !strings.HasPrefix(reply, "FOUND ") || !bytes.Equal(append(body, "\r\n"...), r.Body) {
			t.Errorf("job %d: peek gives %q %q, Read's body is %q", id, reply, body, r.Body)
		}
	}
}

func abs(n int64) int64 { return max(n, -n) }

// checkEveryCut truncates the last file of dir at every offset up to a
// little past its last record: Read never fails, and returns what it
// returns for the file cut after its last whole record.
func checkEveryCut(t *testing.T, dir string) {
	paths, err := Found(dir)
	if err != nil {
		t.Fatal(err)
	}
	lastName := filepath.Base(paths[len(paths)-1])
	ends := recordEnds(t, dir)[lastName]
	if len(ends) < 4 {
		t.Fatalf("the last file %s has %d records; want a few to cut", lastName, len(ends)-2)
	}
	whole, err := os.ReadFile(paths[len(paths)-1])
	if err != nil {
		t.Fatal(err)
	}
	work := copyBinlogs(t, dir)
	readCut := func(n int64) ([]wal.Record, uint64) {
		t.Helper()
		writeFile(t, filepath.Join(work, lastName), whole[:n])
		jobs, maxID, err := Read(work, 0)
		if err != nil {
			t.Fatalf("last file cut at %d: %v", n, err)
		}
		return jobs, maxID
	}
	type result struct {
		jobs  []wal.Record
		maxID uint64
	}
	atEnd := make(map[int64]result)
	for _, e := range ends {
		jobs, maxID := readCut(e)
		atEnd[e] = result{jobs, maxID}
	}
	limit := min(int64(len(whole)), ends[len(ends)-1]+2*(4+jobrecSize))
	for n := int64(0); n <= limit && !t.Failed(); n++ {
		i, _ := slices.BinarySearch(ends, n+1)
		want := atEnd[ends[i-1]]
		jobs, maxID := readCut(n)
		if !reflect.DeepEqual(jobs, want.jobs) {
			t.Errorf("last file cut at %d: got %d jobs, want the %d of a cut at %d", n, len(jobs), len(want.jobs), ends[i-1])
		}
		// A cut body still shows its record's id.
		if maxID < want.maxID {
			t.Errorf("last file cut at %d: maxID %d, want at least %d", n, maxID, want.maxID)
		}
	}
}

// checkDamage damages the oldest file of a copy of dir in several ways and
// checks that Read names the file and the record.
func checkDamage(t *testing.T, dir string) {
	paths, err := Found(dir)
	if err != nil {
		t.Fatal(err)
	}
	oldest := filepath.Base(paths[0])
	ends := recordEnds(t, dir)[oldest]
	if len(ends) < 4 {
		t.Fatalf("the oldest file %s has %d records; want a few to damage", oldest, len(ends)-2)
	}
	second := ends[2] // the start of the second record
	tests := []struct {
		name       string
		damage     func([]byte) []byte
		wantOffset int64
		wantErr    error
		wantDetail string
	}{
		{
			name:       "unknown version",
			damage:     func(b []byte) []byte { b[0] = 9; return b },
			wantOffset: 0, wantErr: ErrUnknownVersion, wantDetail: "unknown version 9",
		},
		{
			name:       "tube name length out of range",
			damage:     func(b []byte) []byte { copy(b[second:], []byte{0xff, 0xff, 0, 0}); return b },
			wantOffset: second, wantErr: ErrCorrupt, wantDetail: "tube name length 65535",
		},
		{
			name:       "cut inside a record",
			damage:     func(b []byte) []byte { return b[:second+4+10] },
			wantOffset: second, wantErr: ErrCorrupt, wantDetail: "file ends inside",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			work := copyBinlogs(t, dir)
			path := filepath.Join(work, oldest)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, tc.damage(data))
			_, _, err = Read(work, 0)
			if err == nil {
				t.Fatal("Read succeeded")
			}
			checkFileError(t, err, path, tc.wantOffset, tc.wantErr, tc.wantDetail)
		})
	}
}
