package main

import (
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// TestClusterRemovalKeepsMajority: three members, one of them down. The
// removal of one of the two that run would leave the voters the leader
// and the member that is down, no majority, and none to be had again
// without that member (an addition needs a majority too): it is refused
// with 409 and a reason, and the queue still takes puts. The removal of
// the member that is down is taken, and the two left go on.
func TestClusterRemovalKeepsMajority(t *testing.T) {
	c, l := startClusterWithJobs(t, 3)
	others := c.others(l)
	down, healthy := others[0], others[1]
	down.proc.Kill()
	down.proc.Wait(5 * time.Second)
	putThrough(t, 10*time.Second, "with one member down", l, healthy)
	testproc.WaitFor(t, 5*time.Second, l.name+" seeing "+down.name+" down", func() bool {
		st, err := l.status()
		return err == nil && slices.ContainsFunc(st.Members, func(m replication.MemberStatus) bool {
			return m.Name == down.name && !m.Connected
		})
	})

	status, out := memberReq(t, l, http.MethodDelete, "/cluster/members/"+healthy.name, testAdminToken, nil)
	if msg, _ := out["error"].(string); status != http.StatusConflict || !strings.Contains(msg, "majority") {
		t.Fatalf("removing %s (up) while %s is down: %d %v, want 409 naming the majority", healthy.name, down.name, status, out)
	}
	putThrough(t, 10*time.Second, "after the refused removal", l, healthy)

	if status, out := memberReq(t, l, http.MethodDelete, "/cluster/members/"+down.name, testAdminToken, nil); status != http.StatusOK {
		t.Fatalf("removing %s, which is down: %d %v, want 200", down.name, status, out)
	}
	c.awaitVoters(10*time.Second, l, l.name, healthy.name)
	putThrough(t, 10*time.Second, "after the down member's removal", l, healthy)
}

// TestClusterRemovalThroughFollowerRefused: three members, one stopped
// (SIGSTOP: its connections stay open, so a follower, which hears only
// its leader, counts it up). A follower asked to remove itself would
// leave the leader and the stopped member, no majority up: the leader,
// which has not heard from the stopped member, decides, and the follower
// answers its 409, where its own proposal, which the leader drops, only
// timed out (503).
func TestClusterRemovalThroughFollowerRefused(t *testing.T) {
	c, l := startClusterWithJobs(t, 3)
	others := c.others(l)
	stopped, follower := others[0], others[1]
	if err := stopped.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stopped.proc.Signal(syscall.SIGCONT) }()
	time.Sleep(3 * time.Second) // past the leader's election timeout: not heard from
	putThrough(t, 10*time.Second, "with one member stopped", l, follower)

	status, out := memberReq(t, follower, http.MethodDelete, "/cluster/members/"+follower.name, testAdminToken, nil)
	if msg, _ := out["error"].(string); status != http.StatusConflict || !strings.Contains(msg, "majority") {
		t.Fatalf("removing %s through itself while %s is stopped: %d %v, want 409 naming the majority", follower.name, stopped.name, status, out)
	}
	putThrough(t, 10*time.Second, "after the refused removal", l, follower)
}
