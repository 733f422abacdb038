package main

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
)

// TestClusterReadyOnceCaughtUp: a follower stopped while the leader
// commits 3,000 puts of 32 KiB, then started again, passes /readyz only
// once it has applied what the leader had committed: deploy/README.md
// ("Rolling out one pod at a time") has the next pod taken only once the
// one before is ready, and the PodDisruptionBudget counts ready pods. A
// member far behind can acknowledge nothing new until it has caught up,
// so taking the next one would leave the leader no majority that can.
// Once ready, the member stays so while the leader commits on.
func TestClusterReadyOnceCaughtUp(t *testing.T) {
	c, l := startClusterWithJobs(t, 1)
	f := c.others(l)[0]
	if !f.proc.Stop(10 * time.Second) {
		t.Fatal("the follower did not stop")
	}
	conn := dialMember(t, l)
	body := bytes.Repeat([]byte("x"), 32<<10)
	const jobs = 3000
	for i := range jobs {
		if _, err := conn.Put(0, 0, 600, body); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	lst, err := l.status()
	if err != nil {
		t.Fatal(err)
	}

	start := startUntilReady(t, c, f)
	st, err := f.status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Applied < lst.Commit {
		t.Fatalf("%s passed /readyz %v after its start with %d entries applied, behind the %d the leader had committed",
			f.name, time.Since(start).Round(time.Millisecond), st.Applied, lst.Commit)
	}
	t.Logf("%s ready %v after its start, %d entries applied of the leader's %d", f.name, time.Since(start).Round(time.Millisecond), st.Applied, lst.Commit)

	for i := range 200 {
		if _, err := conn.Put(0, 0, 600, body); err != nil {
			t.Fatalf("put %d after the catch-up: %v", i, err)
		}
		if code := f.ready(); code != http.StatusOK {
			t.Fatalf("%s's /readyz %d as the leader commits on, after it was ready", f.name, code)
		}
	}
	conn.Close()
}

// TestClusterGroupsReadyOnceCaughtUp: with several groups, group 0 holds
// the metadata and the jobs are in the others: a follower restarted
// behind passes /readyz only once its replica of the jobs' group has
// caught up too (a replica behind weakens its group as a member behind
// weakens group 0).
func TestClusterGroupsReadyOnceCaughtUp(t *testing.T) {
	c := startCluster(t, "--cluster-groups", "2")
	l := c.awaitServing(20 * time.Second)
	putThrough(t, 20*time.Second, "group 1 has a leader", l)
	f := c.others(l)[0]
	if !f.proc.Stop(10 * time.Second) {
		t.Fatal("the follower did not stop")
	}
	conn := dialMember(t, l)
	defer conn.Close()
	body := bytes.Repeat([]byte("x"), 32<<10)
	const jobs = 3000
	for i := range jobs {
		if _, err := conn.Put(0, 0, 600, body); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	const want = jobs + 1

	start := startUntilReady(t, c, f)
	st, err := f.status()
	if err != nil {
		t.Fatal(err)
	}
	var held *replication.GroupStatus
	for i := range st.Groups {
		if st.Groups[i].ID == 1 && st.Groups[i].Held {
			held = &st.Groups[i]
		}
	}
	if held == nil {
		t.Fatalf("%s holds no replica of group 1: %+v", f.name, st.Groups)
	}
	if held.Jobs < want {
		t.Fatalf("%s passed /readyz %v after its start with %d jobs in its replica of group 1, of %d",
			f.name, time.Since(start).Round(time.Millisecond), held.Jobs, want)
	}
	t.Logf("%s ready %v after its start, its replica of group 1 holding %d jobs", f.name, time.Since(start).Round(time.Millisecond), held.Jobs)
}

// startUntilReady starts f and waits, up to a minute, until its /readyz
// answers 200; it returns when f was started.
func startUntilReady(t *testing.T, c *testCluster, f *testMember) time.Time {
	t.Helper()
	if err := c.start(f); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for f.ready() != http.StatusOK {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("%s not ready 60 s after its start", f.name)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return start
}
