package crashtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// importedJob is what a job left in a beanstalkd binlog must look like
// once sprout has taken the directory over.
type importedJob struct {
	id    uint64
	tube  string
	state string
	pri   uint32
	delay int // seconds; a delayed job's time-left must be at most this
	body  []byte
}

// TestImportBeanstalkdBinlog writes a binlog directory with Debian's
// beanstalkd (-f 0, small -s, so it rotates and compacts), leaving jobs in
// every state, and kills it. sprout started on the directory must serve
// every job in its state, tube, priority and body, with delayed jobs'
// remaining time; the binlog files must be gone, and new ids must continue
// above the highest id beanstalkd issued. A restart of sprout then reads
// its own log, not the binlog again.
func TestImportBeanstalkdBinlog(t *testing.T) {
	dir := t.TempDir()
	bs := testproc.Start(t, testproc.Beanstalkd(t), "-b", dir, "-f", "0", "-s", "4096")
	c := dial(t, bs.Addr())
	worker := dial(t, bs.Addr()) // holds a reservation until beanstalkd dies
	var want []importedJob
	keep := func(id uint64, tube, state string, pri uint32, delay int, body []byte) {
		want = append(want, importedJob{id, tube, state, pri, delay, body})
	}

	c.expect("use alpha", "USING alpha")
	id := c.put(5, 0, 60, []byte("ready"))
	keep(id, "alpha", "ready", 5, 0, []byte("ready"))
	var binary []byte
	for i := range 256 {
		binary = append(binary, byte(i))
	}
	id = c.put(4294967295, 0, 60, binary)
	keep(id, "alpha", "ready", 4294967295, 0, binary)
	crlf := []byte("line1\r\nline2\r\n\r\n")
	id = c.put(10, 0, 60, crlf)
	keep(id, "alpha", "ready", 10, 0, crlf)
	big := bytes.Repeat([]byte("0123456789"), 300) // a body near the -s size
	id = c.put(3, 0, 60, big)
	keep(id, "alpha", "ready", 3, 0, big)

	c.expect("use beta", "USING beta")
	id = c.put(100, 3600, 60, []byte("delayed"))
	keep(id, "beta", "delayed", 100, 3600, []byte("delayed"))
	id = c.put(50, 0, 60, []byte("buried"))
	c.reserveJob(id)
	c.expect(fmt.Sprintf("bury %d 77", id), "BURIED")
	keep(id, "beta", "buried", 77, 0, []byte("buried"))
	id = c.put(50, 0, 60, []byte("released with a delay"))
	c.reserveJob(id)
	c.expect(fmt.Sprintf("release %d 20 600", id), "RELEASED")
	keep(id, "beta", "delayed", 20, 600, []byte("released with a delay"))
	id = c.put(50, 0, 60, []byte("reserved when beanstalkd died"))
	worker.reserveJob(id)
	keep(id, "beta", "ready", 50, 0, []byte("reserved when beanstalkd died"))
	gone := c.put(50, 0, 60, []byte("deleted"))
	c.expect(fmt.Sprintf("delete %d", gone), "DELETED")

	c.expect("use gamma", "USING gamma")
	id = c.put(40, 0, 60, []byte("buried, then kicked"))
	c.reserveJob(id)
	c.expect(fmt.Sprintf("bury %d 41", id), "BURIED")
	c.expect("kick 1", "KICKED 1")
	keep(id, "gamma", "ready", 41, 0, []byte("buried, then kicked"))
	id = c.put(60, 3600, 60, []byte("kicked while delayed"))
	c.expect(fmt.Sprintf("kick-job %d", id), "KICKED")
	keep(id, "gamma", "ready", 60, 0, []byte("kicked while delayed"))

	// Churn, so beanstalkd compacts: it copies the oldest file's live jobs
	// forward and deletes the files left empty.
	c.expect("use churn", "USING churn")
	var last uint64
	for range 60 {
		last = c.put(1, 0, 60, bytes.Repeat([]byte("f"), 150))
		c.expect(fmt.Sprintf("delete %d", last), "DELETED")
	}
	// beanstalkd does not log a release without delay: the job comes back
	// with the priority it was put with (unless compaction copies it first,
	// hence after the churn, in the newest file).
	c.expect("use beta", "USING beta")
	id = c.put(50, 0, 60, []byte("released at once"))
	c.reserveJob(id)
	c.expect(fmt.Sprintf("release %d 1 0", id), "RELEASED")
	keep(id, "beta", "ready", 50, 0, []byte("released at once"))
	last = c.put(1, 0, 60, []byte("the highest id, deleted"))
	c.expect(fmt.Sprintf("delete %d", last), "DELETED")
	if m := c.stats("stats")["binlog-records-migrated"]; m == "" || m == "0" {
		t.Errorf("binlog-records-migrated %q: the test means beanstalkd to compact", m)
	}
	written := time.Now()
	bs.Kill()
	binlogs := binlogFiles(t, dir)
	if len(binlogs) < 2 {
		t.Fatalf("beanstalkd left %v; the test wants several binlog files", binlogs)
	}

	bin := testproc.SproutBinary(t)
	ss := testproc.Start(t, bin, "-b", dir, "-f", "0")
	sc := dial(t, ss.Addr())
	checkImported(t, sc, want, gone, time.Since(written))
	if left := binlogFiles(t, dir); len(left) != 0 {
		t.Errorf("binlog files left after the import: %v", left)
	}
	if !strings.Contains(ss.Output(), "imported beanstalkd binlog") {
		t.Errorf("sprout did not log the import:\n%s", ss.Output())
	}
	next := sc.put(0, 0, 60, []byte("after the import"))
	if next <= last {
		t.Errorf("first id after the import is %d; beanstalkd had issued up to %d", next, last)
	}
	sc.expect(fmt.Sprintf("delete %d", next), "DELETED")
	stop(t, ss)

	// A restart reads sprout's own log.
	ss = testproc.Start(t, bin, "-b", dir, "-f", "0")
	sc = dial(t, ss.Addr())
	checkImported(t, sc, want, gone, time.Since(written))
	if id := sc.put(0, 0, 60, []byte("after a restart")); id <= next {
		t.Errorf("first id after the restart is %d; %d was issued before", id, next)
	}
	if strings.Contains(ss.Output(), "imported") {
		t.Errorf("the restart imported again:\n%s", ss.Output())
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !strings.Contains(strings.Join(names, " "), "sprout.") {
		t.Errorf("no sprout segment in %s: %v", filepath.Base(dir), names)
	}
	stop(t, ss)
}

// checkImported checks every job over the protocol; elapsed is how long
// ago beanstalkd stopped, for delayed jobs' time-left.
func checkImported(t *testing.T, c *conn, want []importedJob, gone uint64, elapsed time.Duration) {
	t.Helper()
	for _, w := range want {
		r := c.do(fmt.Sprintf("peek %d", w.id), nil)
		if string(r.Line) != fmt.Sprintf("FOUND %d %d", w.id, len(w.body)) || !bytes.Equal(r.Body, w.body) {
			t.Errorf("job %d: peek %q %.40q; want body %.40q", w.id, r.Line, r.Body, w.body)
			continue
		}
		st := c.stats(fmt.Sprintf("stats-job %d", w.id))
		got := fmt.Sprintf("tube %s state %s pri %s", st["tube"], st["state"], st["pri"])
		if exp := fmt.Sprintf("tube %s state %s pri %d", w.tube, w.state, w.pri); got != exp {
			t.Errorf("job %d (%.20q): %s; want %s", w.id, w.body, got, exp)
		}
		if w.state == "delayed" {
			left, _ := strconv.Atoi(st["time-left"])
			if min := w.delay - int(elapsed.Seconds()) - 2; left > w.delay || left < min {
				t.Errorf("job %d: time-left %d, want between %d and %d", w.id, left, min, w.delay)
			}
		}
	}
	if r := c.do(fmt.Sprintf("peek %d", gone), nil); r.Kind != testproc.ReplyNotFound {
		t.Errorf("deleted job %d: peek %q", gone, r.Line)
	}
	stats := c.stats("stats")
	total := 0
	for _, k := range []string{"current-jobs-ready", "current-jobs-delayed", "current-jobs-buried", "current-jobs-reserved"} {
		n, _ := strconv.Atoi(stats[k])
		total += n
	}
	if total != len(want) {
		t.Errorf("the server holds %d jobs, want the %d imported", total, len(want))
	}
}

// TestDirectoryLock: a second server on a directory sprout holds exits
// with code 10, whether it is sprout or beanstalkd, and sprout refuses a
// directory beanstalkd holds in the same way; the first server keeps
// serving.
func TestDirectoryLock(t *testing.T) {
	bin := testproc.SproutBinary(t)
	beanstalkd := testproc.Beanstalkd(t)

	dir := t.TempDir()
	first := testproc.Start(t, bin, "-b", dir)
	for _, second := range []string{bin, beanstalkd} {
		code, out := runToExit(t, 10*time.Second, second, "-b", dir, "-l", "127.0.0.1", "-p", "0")
		if code != 10 {
			t.Errorf("%s on a directory sprout holds exited %d, want 10:\n%s", filepath.Base(second), code, out)
		}
	}
	c := dial(t, first.Addr())
	c.expect(fmt.Sprintf("delete %d", c.put(0, 0, 60, []byte("still serving"))), "DELETED")
	stop(t, first)

	dir = t.TempDir()
	testproc.Start(t, beanstalkd, "-b", dir)
	code, out := runToExit(t, 10*time.Second, bin, "-b", dir, "-l", "127.0.0.1", "-p", "0")
	if code != 10 || !strings.Contains(out, "locked") {
		t.Errorf("sprout on a directory beanstalkd holds exited %d, want 10 and a word about the lock:\n%s", code, out)
	}
}
