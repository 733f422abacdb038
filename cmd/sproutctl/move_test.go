package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	"github.com/sproutmq/sprout/internal/testproc"
)

// movedJob is a job as the tests put it and read it back.
type movedJob struct {
	pri, ttr uint32
	body     []byte
}

// moveJobs are jobs move must carry byte for byte, with their priority and
// TTR, in order of priority (so the target's order is known).
func moveJobs() []movedJob {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	large := make([]byte, 65535) // beanstalkd's and Sprout's default -z
	for i := range large {
		large[i] = byte(i*31 + i>>8)
	}
	copy(large[1000:], "\r\n")
	copy(large[len(large)-2:], "\r\n")
	return []movedJob{
		{0, 2, all},
		{1, 3600, []byte("line one\r\nput 0 0 1 5\r\nhello\r\n")},
		{1023, 86400, []byte{}},
		{1024, 60, large},
		{65536, 5, []byte("h\u00e9llo w\u00f6rld \u2713")},
		{4294967295, 120, []byte("\r\n")},
	}
}

// drain reserves, reads and deletes every ready job of tube on c, in the
// order the server hands them out.
func drain(t *testing.T, c *testproc.Conn, tube string) []movedJob {
	t.Helper()
	if err := c.ExpectLine("watch "+tube, "WATCHING 2"); err != nil {
		t.Fatal(err)
	}
	if err := c.ExpectLine("ignore default", "WATCHING 1"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.ExpectLine("watch default", "WATCHING 2"); err != nil {
			t.Fatal(err)
		}
		if err := c.ExpectLine("ignore "+tube, "WATCHING 1"); err != nil {
			t.Fatal(err)
		}
	}()
	var jobs []movedJob
	for {
		r, err := c.Do("reserve-with-timeout 0", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == testproc.ReplyTimedOut {
			return jobs
		}
		if r.Kind != testproc.ReplyReserved {
			t.Fatalf("reserve-with-timeout 0: %q", r.Line)
		}
		st, err := c.StatsInt(fmt.Sprintf("stats-job %d", r.N), "pri", "ttr", "delay")
		if err != nil {
			t.Fatal(err)
		}
		if st[2] != 0 {
			t.Errorf("job %d has delay %d, want 0", r.N, st[2])
		}
		jobs = append(jobs, movedJob{uint32(st[0]), uint32(st[1]), r.Body})
		if err := c.ExpectLine(fmt.Sprintf("delete %d", r.N), "DELETED"); err != nil {
			t.Fatal(err)
		}
	}
}

func sameJobs(t *testing.T, what string, got, want []movedJob) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d jobs, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.pri != w.pri || g.ttr != w.ttr || !bytes.Equal(g.body, w.body) {
			t.Errorf("%s: job %d has pri %d, ttr %d, a body of %d bytes (%.20q); want pri %d, ttr %d, %d bytes (%.20q)",
				what, i, g.pri, g.ttr, len(g.body), g.body, w.pri, w.ttr, len(w.body), w.body)
		}
	}
}

// TestMove moves tubes from Sprout to beanstalkd and back: binary bodies,
// priorities and TTRs kept, the source emptied, the target holding exactly
// the jobs; delayed and buried jobs stay unless --kick.
func TestMove(t *testing.T) {
	t.Parallel()
	servers := startServers(t)
	for _, dir := range []struct{ from, to server }{{servers[0], servers[1]}, {servers[1], servers[0]}} {
		t.Run(dir.from.name+"-to-"+dir.to.name, func(t *testing.T) {
			src, dst := dial(t, dir.from.addr), dial(t, dir.to.addr)
			// The second tube's name is 200 bytes, the protocol's longest.
			tube1, tube2 := "move-"+dir.from.name, longName("move-"+dir.from.name+"-2", 200)
			jobs := moveJobs()
			for _, j := range jobs {
				put(t, src, tube1, j.pri, 0, int(j.ttr), j.body)
			}
			second := []movedJob{{5, 10, []byte("second tube, first job")}, {6, 11, []byte("second tube, second job")}}
			for _, j := range second {
				put(t, src, tube2, j.pri, 0, int(j.ttr), j.body)
			}
			delayed := movedJob{7, 70, []byte("delayed")}
			put(t, src, tube1, delayed.pri, 3600, int(delayed.ttr), delayed.body)
			buried := movedJob{8, 80, []byte("buried")}
			bury(t, src, put(t, src, tube1, buried.pri, 0, int(buried.ttr), buried.body), buried.pri)

			r := must(t, exitOK, "move", "--from", dir.from.addr, "--to", dir.to.addr, tube1, tube2)
			want := fmt.Sprintf("moved 6 jobs of tube %s from %s to %s\nmoved 2 jobs of tube %s from %s to %s\n",
				tube1, dir.from.addr, dir.to.addr, tube2, dir.from.addr, dir.to.addr)
			if r.stdout != want || r.stderr != "" {
				t.Errorf("move printed %q and %q on stderr, want %q and no progress bar without a terminal", r.stdout, r.stderr, want)
			}
			if n := tubeCounts(t, src, tube1); n != [4]int64{0, 0, 1, 1} {
				t.Errorf("source %s: ready, reserved, delayed, buried are %v; want only the delayed and the buried job", tube1, n)
			}
			if n := tubeCounts(t, src, tube2); n != [4]int64{} {
				t.Errorf("source %s: %v, want empty", tube2, n)
			}
			if n := tubeCounts(t, dst, tube1); n != [4]int64{6, 0, 0, 0} {
				t.Errorf("target %s: %v, want 6 ready jobs", tube1, n)
			}
			sameJobs(t, "target "+tube1, drain(t, dst, tube1), jobs)
			sameJobs(t, "target "+tube2, drain(t, dst, tube2), second)

			// Without --kick there is nothing more to move; with it, the
			// delayed and the buried job move too.
			must(t, exitNotFound, "move", "--from", dir.from.addr, "--to", dir.to.addr, tube1, tube2)
			must(t, exitOK, "move", "--kick", "--from", dir.from.addr, "--to", dir.to.addr, tube1)
			if n := tubeCounts(t, src, tube1); n != [4]int64{} {
				t.Errorf("source %s after --kick: %v, want empty", tube1, n)
			}
			sameJobs(t, "target "+tube1+" after --kick", drain(t, dst, tube1), []movedJob{delayed, buried})
		})
	}
}

// TestMoveRefused checks that what move cannot do leaves every job on the
// source: a job the target refuses (too big for its -z), a paused tube, an
// interrupted move, and a move onto the server itself.
func TestMoveRefused(t *testing.T) {
	t.Parallel()
	sources, targets := startServers(t), startServers(t, "-z", "100")
	for _, dir := range []struct{ from, to server }{{sources[0], targets[1]}, {sources[1], targets[0]}} {
		t.Run(dir.from.name+"-to-"+dir.to.name, func(t *testing.T) {
			src, dst := dial(t, dir.from.addr), dial(t, dir.to.addr)
			put(t, src, "refused", 1, 0, 60, []byte("small"))
			big := put(t, src, "refused", 2, 0, 60, bytes.Repeat([]byte("x"), 200))
			put(t, src, "refused", 3, 0, 60, []byte("small too"))
			r := must(t, exitFailure, "move", "--from", dir.from.addr, "--to", dir.to.addr, "refused")
			if !strings.HasPrefix(r.stdout, "moved 1 job of tube refused") || !strings.Contains(r.stderr, "job too big") || !strings.Contains(r.stderr, "released") {
				t.Errorf("a job the target refuses: want one moved, then the refusal and the release")
			}
			if n := tubeCounts(t, src, "refused"); n != [4]int64{2, 0, 0, 0} {
				t.Errorf("source after the refusal: %v, want 2 ready jobs", n)
			}
			if st, err := src.StatsInt(fmt.Sprintf("stats-job %d", big), "pri", "reserves"); err != nil || st[0] != 2 || st[1] != 1 {
				t.Errorf("the refused job: pri, reserves %v, %v; want its priority 2 kept and one reserve", st, err)
			}
			if n := tubeCounts(t, dst, "refused"); n != [4]int64{1, 0, 0, 0} {
				t.Errorf("target after the refusal: %v, want the one job moved", n)
			}

			put(t, src, "paused", 1, 0, 60, []byte("x"))
			if err := src.ExpectLine("pause-tube paused 60", "PAUSED"); err != nil {
				t.Fatal(err)
			}
			r = must(t, exitFailure, "move", "--from", dir.from.addr, "--to", dir.to.addr, "paused")
			if !strings.Contains(r.stderr, "paused") {
				t.Errorf("a paused tube: want the pause named")
			}

			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if r := ctlContext(t, ctx, "", nil, "move", "--from", dir.from.addr, "--to", dir.to.addr, "refused"); r.code != exitFailure || !strings.Contains(r.stderr, "interrupted") {
				t.Errorf("an interrupted move: want exit 1; got %v", r)
			}
			if n := tubeCounts(t, src, "refused"); n != [4]int64{2, 0, 0, 0} {
				t.Errorf("source after the interruption: %v, want 2 ready jobs", n)
			}

			// The same server under another name: the stats ids match.
			_, port, _ := strings.Cut(dir.from.addr, ":")
			r = must(t, exitUsage, "move", "--from", dir.from.addr, "--to", "localhost:"+port, "refused")
			if !strings.Contains(r.stderr, "same server") {
				t.Errorf("a move onto the server itself: want it refused as the same server")
			}
		})
	}
}

// TestMoveTakesBackCopy covers the job whose TTR ran out while it moved
// and that another worker then reserved: the source's delete finds it gone,
// so the copy is deleted from the target and the job stays the worker's.
func TestMoveTakesBackCopy(t *testing.T) {
	t.Parallel()
	servers := startServers(t)
	setup := dial(t, servers[0].addr)
	id := put(t, setup, "ttr", 1, 0, 1, []byte("slow"))

	src, err := beanstalk.Dial("tcp", servers[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := beanstalk.Dial("tcp", servers[1].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got, body, err := beanstalk.NewTubeSet(src, "ttr").Reserve(0)
	if err != nil || got != id {
		t.Fatalf("reserve: %d, %v", got, err)
	}
	// The TTR of 1 s runs out; the job is ready again and a worker takes it.
	worker := dial(t, servers[0].addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := worker.Do(fmt.Sprintf("reserve-job %d", id), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == testproc.ReplyReserved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job is still reserved 10 s after its TTR of 1 s: %q", r.Line)
		}
		time.Sleep(50 * time.Millisecond)
	}
	moved, err := moveJob(src, beanstalk.NewTube(dst, "ttr"), id, body)
	if moved || err != nil {
		t.Fatalf("moveJob of a job another worker holds: moved %v, %v; want false, nil", moved, err)
	}
	if n := tubeCounts(t, dial(t, servers[1].addr), "ttr"); n != [4]int64{} {
		t.Errorf("target: %v, want the copy deleted", n)
	}
	if n := tubeCounts(t, setup, "ttr"); n != [4]int64{0, 1, 0, 0} {
		t.Errorf("source: %v, want the job reserved by the worker", n)
	}
}

// TestProgress checks that move and clear draw their progress bars when
// stderr is a terminal.
func TestProgress(t *testing.T) {
	t.Parallel()
	servers := startServers(t)
	c := dial(t, servers[0].addr)
	for range 20 {
		put(t, c, "progress", 1, 0, 60, []byte("x"))
	}
	var stderr bytes.Buffer
	o := &options{server: servers[1].addr, timeout: 5 * time.Second, stdout: io.Discard, stderr: &stderr, progress: true, ctx: t.Context()}
	src, err := o.dial(servers[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := o.dial(servers[1].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if n, err := o.moveTube(src, dst, "progress", false); n != 20 || err != nil {
		t.Fatalf("moveTube: %d, %v", n, err)
	}
	if !strings.Contains(stderr.String(), "moving progress") || !strings.Contains(stderr.String(), "(1/20, ") {
		t.Errorf("move's progress bar: %q", stderr.String())
	}
	stderr.Reset()
	if n, err := o.clearByProtocol("progress", "all"); n != 20 || err != nil {
		t.Fatalf("clearByProtocol: %d, %v", n, err)
	}
	if !strings.Contains(stderr.String(), "clearing progress") || !strings.Contains(stderr.String(), "(1/20, ") {
		t.Errorf("clear's progress bar: %q", stderr.String())
	}
}
