//go:build linux

package clusterfault

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// innerEnv marks the test binary re-executed inside the namespaces; its
// value is the sprout binary the outer test built (the namespace has no
// network for go build to fetch with).
const innerEnv = "SPROUT_CLUSTERFAULT_BINARY"

// rounds defaults to one of each fault: the short run of make test.
var (
	rounds         = flag.Int("rounds", len(faults), "fault rounds to run (make chaos sets CHAOS_ROUNDS)")
	faultFilter    = flag.String("faults", "", "run only the faults whose names match this regular expression")
	memberLogLevel = flag.String("member-log-level", "info", "the members' --log-level (debug shows raft's elections)")
	groups         = flag.Int("groups", 1, "the members' --cluster-groups: with more than 1, the workload's tubes are one per group (make chaos sets CHAOS_GROUPS)")
	members        = flag.Int("members", 3, "the members, 3 or 5 (127.0.0.1 to .N); with 5, each group but 0 lives on 3 of them (make chaos sets CHAOS_MEMBERS)")
	memberLogs     = flag.String("member-logs", "", "a directory to write each member's whole output into (every start) when the test fails, and every member's goroutines when a move takes over 8 s or the clients gone leave something on a member (make chaos sets CHAOS_LOGS)")
)

// checkFlags refuses what the test cannot run.
func checkFlags(t *testing.T) {
	switch {
	case *members != 3 && *members != 5:
		t.Fatalf("-members %d: 3 or 5", *members)
	case *groups < 1 || *groups > 10:
		// A producer per member and group, their sources .100 to .149.
		t.Fatalf("-groups %d: 1 to 10", *groups)
	}
}

func TestMain(m *testing.M) { testproc.Main(m) }

// TestClusterFaults runs the rounds (doc.go) in a network and pid
// namespace of their own.
func TestClusterFaults(t *testing.T) {
	checkFlags(t)
	if bin := os.Getenv(innerEnv); bin != "" {
		runRounds(t, bin, *rounds)
		return
	}
	runIsolated(t, *rounds, *groups, *members)
}

// TestClusterFaultsGroups runs a round of each fault a cluster of shard
// groups takes (doc.go, "Several groups"), make test's short run of
// them, in the design's form: five members and five groups of three
// replicas. Every member leads a group, so the follower's and the empty
// directory's rounds cordon their member first. make chaos
// CHAOS_GROUPS=5 CHAOS_MEMBERS=5 runs it for longer.
func TestClusterFaultsGroups(t *testing.T) {
	if os.Getenv(innerEnv) != "" {
		t.Skip("the namespace runs TestClusterFaults")
	}
	runIsolated(t, len(faults), 5, 5)
}

// runIsolated runs n rounds of a cluster of m members and g groups in a
// network and pid namespace of their own, the test binary again inside
// it.
func runIsolated(t *testing.T, n, g, m int) {
	if reason := cannotIsolate(); reason != "" {
		t.Skip(reason)
	}
	bin := testproc.SproutBinary(t)
	args := []string{"--net", "--pid", "--fork", "--kill-child", "--mount-proc", os.Args[0],
		"-test.run=^TestClusterFaults$", "-test.count=1", fmt.Sprintf("-rounds=%d", n), "-faults=" + *faultFilter, "-member-log-level=" + *memberLogLevel,
		"-member-logs=" + *memberLogs,
		fmt.Sprintf("-groups=%d", g), fmt.Sprintf("-members=%d", m)}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	if deadline, ok := t.Deadline(); ok {
		// Leave the outer test time to report what the inner one said.
		args = append(args, fmt.Sprintf("-test.timeout=%v", time.Until(deadline)-10*time.Second))
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), innerEnv+"="+bin)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// If this test binary dies (a timeout's panic), unshare dies, its
	// child (the inner test, the pid namespace's first process) with it,
	// and with that every member.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		t.Fatalf("the rounds inside the namespace failed (%v): see their output above", err)
	}
}

// cannotIsolate says why the namespace cannot be made here, or "".
func cannotIsolate() string {
	if os.Geteuid() != 0 {
		return "the cluster fault test makes a network namespace and iptables rules: it needs root"
	}
	var missing []string
	for _, tool := range []string{"unshare", "ip", "iptables", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return "the cluster fault test needs " + strings.Join(missing, ", ") +
			" (Debian: apt-get install util-linux iproute2 iptables)"
	}
	// Root in a container may still be refused namespaces, and a kernel
	// may lack the matches a partition needs: try both, in a namespace
	// thrown away at once.
	probe := "iptables -t mangle -A OUTPUT -m owner --uid-owner 1 -m conntrack --ctstate NEW -j CONNMARK --set-mark 1 && " +
		"iptables -A OUTPUT -m connmark --mark 1 -m conntrack --ctorigdst 127.0.0.1 -j DROP"
	if out, err := exec.Command("unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c", probe).CombinedOutput(); err != nil {
		return fmt.Sprintf("the cluster fault test cannot make a namespace with its iptables rules here: %v: %s",
			err, strings.TrimSpace(string(out)))
	}
	return ""
}
