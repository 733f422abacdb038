package container

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"
)

// TestImage runs the image as the README says: read-only, every
// capability dropped, a named volume on /data, ports on loopback. It puts
// jobs, stops the container with a job reserved (the job is deleted during
// the drain, and the exit status must be 0), starts it again on the same
// volume and finds every acknowledged job.
func TestImage(t *testing.T) {
	needEngine(t)
	if got := must(t, "image", "inspect", "-f", "{{.Config.User}}", image); got != "65532:65532" {
		t.Errorf("image user = %q; want 65532:65532", got)
	}
	size := must(t, "image", "inspect", "-f", "{{.Size}}", image)
	t.Logf("image size: %s bytes", size)

	vol := name("data")
	must(t, "volume", "create", vol)
	t.Cleanup(func() { run(nil, "volume", "rm", "-f", vol) })

	start := func(c string) (queue, ops string, ready time.Duration) {
		t.Helper()
		t0 := time.Now()
		t.Cleanup(func() { run(nil, "rm", "-f", "-t", "0", c) })
		must(t, "run", "-d", "--name", c, "--read-only", "--cap-drop", "ALL",
			"--security-opt", "no-new-privileges",
			"-v", vol+":/data", "-p", "127.0.0.1::11300", "-p", "127.0.0.1::11380", image)
		queue, ops = hostPort(t, c, 11300), hostPort(t, c, 11380)
		waitReady(t, ops, 30*time.Second)
		return queue, ops, time.Since(t0)
	}

	c1 := name("first")
	queue, ops, ready := start(c1)
	t.Logf("start to ready (run to /readyz 200): %v", ready.Round(time.Millisecond))
	if uid, gid, ok := uidOf(t, c1); ok && (uid != "65532" || gid != "65532") {
		t.Errorf("container process runs as %s:%s; want 65532:65532", uid, gid)
	} else if !ok {
		t.Log("the container's process is not visible in /proc here; checked the image's user only")
	}

	producer, err := beanstalk.Dial("tcp", queue)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	tube := beanstalk.NewTube(producer, "work")
	const jobs = 20
	ids := make(map[uint64]string)
	for i := range jobs {
		body := fmt.Sprintf("job %d", i)
		id, err := tube.Put([]byte(body), 100, 0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = body
	}

	worker, err := beanstalk.Dial("tcp", queue)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	ts := beanstalk.NewTubeSet(worker, "work")
	held, _, err := ts.Reserve(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// Stop with the job reserved: the drain waits for the worker.
	stopped := make(chan error, 1)
	stopStart := time.Now()
	go func() {
		_, err := run(nil, "stop", "-t", strconv.Itoa(stopGrace), c1)
		stopped <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for status(ops, "/readyz") != 503 {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not turn 503 after the stop signal")
		}
		time.Sleep(10 * time.Millisecond)
	}
	drainSeen := time.Since(stopStart)
	// Work finishing during the drain.
	time.Sleep(200 * time.Millisecond)
	if err := worker.Delete(held); err != nil {
		t.Fatalf("delete during the drain: %v", err)
	}
	deleted := time.Since(stopStart)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	stopTime := time.Since(stopStart)
	t.Logf("stop with a job in flight: %v (drain seen at %v, job deleted at %v; exit %v after the delete)",
		stopTime.Round(time.Millisecond), drainSeen.Round(time.Millisecond), deleted.Round(time.Millisecond),
		(stopTime - deleted).Round(time.Millisecond))
	if code := must(t, "inspect", "-f", "{{.State.ExitCode}}", c1); code != "0" {
		logs, _ := run(nil, "logs", c1)
		t.Fatalf("exit status %s; want 0\n%s", code, logs)
	}
	if stopTime > 20*time.Second {
		t.Errorf("stop took %v; it should end soon after the last reserved job is deleted", stopTime)
	}
	delete(ids, held)
	producer.Close()
	worker.Close()

	// The same volume in a new container: every acknowledged job is there.
	queue, _, _ = start(name("second"))
	conn, err := beanstalk.Dial("tcp", queue)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for id, want := range ids {
		body, err := conn.Peek(id)
		if err != nil || string(body) != want {
			t.Errorf("job %d after the restart: %q, %v; want %q", id, body, err, want)
		}
	}
	if _, err := conn.Peek(held); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("job %d was deleted during the drain but peek says %v", held, err)
	}
	stats, err := beanstalk.NewTube(conn, "work").Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats["current-jobs-ready"] != strconv.Itoa(len(ids)) {
		t.Errorf("current-jobs-ready = %s; want %d", stats["current-jobs-ready"], len(ids))
	}
}
