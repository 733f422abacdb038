package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestartWithOtherGroupsRefused: a member of a running cluster of one
// group, restarted on its directory with --cluster-groups 5
// --cluster-replicas 2, is refused in one line. Once its log holds the
// formation group 0 records, it is refused at start, before it serves
// (it used to start, serve for about a second with routes of its own,
// then stop), and its directory is left so that, started again without
// the flags, it serves.
func TestRestartWithOtherGroupsRefused(t *testing.T) {
	c := startCluster(t)
	c.awaitServing(20 * time.Second)
	putThrough(t, 10*time.Second, "before", c.members...)
	m3 := c.members[2]
	// The first restart may come before the cluster's first leader
	// recorded the formation (within a second of it): m3 then learns it
	// once it runs, and stops. The second finds it in its own log.
	for try := range 2 {
		if !m3.proc.Stop(10 * time.Second) {
			t.Fatal("m3 did not stop")
		}
		m3.args = []string{"--cluster-groups", "5", "--cluster-replicas", "2"}
		_ = c.start(m3)
		if !m3.proc.Wait(30 * time.Second) {
			t.Fatalf("m3 with --cluster-groups 5 on a cluster of 1 group still runs after 30 s")
		}
		out := m3.proc.Output()
		if code := m3.proc.ExitCode(); code != exitUsage || !strings.Contains(out, "--cluster-groups 5 disagrees with this cluster's 1") {
			t.Fatalf("m3 exited %d, want %d with the refusal: %s", code, exitUsage, out)
		}
		if served := strings.Contains(out, "operations endpoint listening"); served && try > 0 {
			t.Fatalf("m3, its log holding the formation, served before it was refused:\n%s", out)
		} else if !served {
			break
		}
		m3.args = nil
		_ = c.start(m3)
	}
	if b, err := os.ReadFile(filepath.Join(m3.dir, "cluster-groups.json")); err == nil {
		t.Errorf("m3's -b now records a formation the cluster never had: %s", b)
	}

	// Started again as it first was, it serves.
	m3.args = nil
	_ = c.start(m3)
	if m3.proc.Wait(15 * time.Second) {
		t.Fatalf("m3 started again without the flags exited %d:\n%s", m3.proc.ExitCode(), m3.proc.Output())
	}
	putThrough(t, 20*time.Second, "after", m3)
}
