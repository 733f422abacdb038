//go:build linux

package clusterfault

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// The namespace is the test's own, so every member takes the same ports
// on its own address.
const (
	clientPort  = 11300
	clusterPort = 7000
	httpPort    = 8000
	// uidBase+i is member i's user: rules tell members apart by it (doc.go).
	uidBase = 64000
	// adminToken guards the members' membership changes.
	adminToken = "clusterfault"
	// outputLimit is how much of a member's output is kept, per start.
	outputLimit = 4 << 20
)

// electionTimeout is the longest election timeout members draw (20 ticks
// of replication.DefaultTick).
const electionTimeout = 20 * replication.DefaultTick

type member struct {
	index int // 1, 2, 3: the address 127.0.0.index and the user uidBase+index
	name  string
	dir   string // -b
	// join is --cluster-join, once the member was added again as a new
	// member; it keeps it for every later start.
	join string
	proc *testproc.Process
	// outputs keeps the output of earlier starts, for a failure's report.
	outputs []string
}

func (m *member) ip() string         { return fmt.Sprintf("127.0.0.%d", m.index) }
func (m *member) uid() int           { return uidBase + m.index }
func (m *member) clientAddr() string { return net.JoinHostPort(m.ip(), strconv.Itoa(clientPort)) }
func (m *member) httpBase() string {
	return "http://" + net.JoinHostPort(m.ip(), strconv.Itoa(httpPort))
}
func (m *member) up() bool { return m.proc != nil && !m.proc.Exited() }

type cluster struct {
	t       *testing.T
	bin     string // the sprout binary, where the members' users can run it
	peers   string // --cluster-peers
	members []*member
	// groups is the members' --cluster-groups, and tubes the workload's
	// tubes: one per group, by group ([tube] with one group).
	groups int
	tubes  []string
}

// newCluster brings the namespace's loopback up and starts three members.
func newCluster(t *testing.T, built string) *cluster {
	t.Helper()
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v\n%s", err, out)
	}
	// The members run as other users: their binary and directories must
	// be theirs to reach, which t.TempDir's are not.
	base, err := os.MkdirTemp("", "sprout-clusterfault-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, bin: filepath.Join(base, "sprout")}
	if err := copyFile(built, c.bin); err != nil {
		t.Fatal(err)
	}
	var peers []string
	for i := 1; i <= 3; i++ {
		m := &member{index: i, name: fmt.Sprintf("m%d", i), dir: filepath.Join(base, fmt.Sprintf("m%d", i))}
		if err := m.emptyDir(); err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, m)
		peers = append(peers, m.name+"="+net.JoinHostPort(m.ip(), strconv.Itoa(clusterPort)))
	}
	c.peers = strings.Join(peers, ",")
	c.groups, c.tubes = max(*groups, 1), []string{tube}
	if c.groups > 1 {
		var ms []meta.Member
		for _, m := range c.members {
			ms = append(ms, meta.Member{Name: m.name, ID: replication.MemberID(m.name)})
		}
		placement, err := meta.Formation(ms, c.groups, len(ms))
		if err != nil {
			t.Fatal(err)
		}
		c.tubes = make([]string, c.groups)
		for i := 0; slices.Contains(c.tubes, ""); i++ {
			name := tube
			if i > 0 {
				name = fmt.Sprintf("%s-%d", tube, i)
			}
			if g := placement.Owner(name); c.tubes[g] == "" {
				c.tubes[g] = name
			}
		}
	}
	for _, m := range c.members {
		// Each connection a member opens is marked with its user, for
		// as long as the connection lasts (doc.go).
		uid := strconv.Itoa(m.uid())
		iptables(t, "-t", "mangle", "-A", "OUTPUT", "-m", "owner", "--uid-owner", uid,
			"-m", "conntrack", "--ctstate", "NEW", "-j", "CONNMARK", "--set-mark", uid)
	}
	for _, m := range c.members {
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			if m.proc == nil {
				continue
			}
			m.proc.Kill()
			m.outputs = append(m.outputs, m.proc.Output())
			for _, out := range m.outputs {
				if i := strings.Index(out, "WARNING: DATA RACE"); i >= 0 {
					t.Errorf("%s reported a data race:\n%s", m.name, out[i:])
					break
				}
			}
			if t.Failed() {
				t.Logf("%s's output (last start):\n%s", m.name, tail(m.proc.Output(), 64<<10))
			}
		}
	})
	return c
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// emptyDir makes m's directory, empty and its user's.
func (m *member) emptyDir() error {
	if err := os.RemoveAll(m.dir); err != nil {
		return err
	}
	if err := os.Mkdir(m.dir, 0o700); err != nil {
		return err
	}
	return os.Chown(m.dir, m.uid(), m.uid())
}

// start starts m on its directory, as its own user, and waits until its
// side port answers.
func (c *cluster) start(m *member) {
	c.t.Helper()
	if m.proc != nil {
		m.outputs = append(m.outputs, m.proc.Output())
	}
	uid := strconv.Itoa(m.uid())
	args := []string{"--reuid=" + uid, "--regid=" + uid, "--clear-groups", c.bin,
		"-l", m.ip(), "-p", strconv.Itoa(clientPort), "-b", m.dir,
		"--http", strings.TrimPrefix(m.httpBase(), "http://"), "--admin-token", adminToken,
		"--node", m.name, "--cluster-listen", net.JoinHostPort(m.ip(), strconv.Itoa(clusterPort)),
		"--cluster-peers", c.peers, "--log-format", "json", "--log-level", *memberLogLevel}
	if m.join != "" {
		args = append(args, "--cluster-join", m.join)
	}
	if c.groups > 1 {
		args = append(args, "--cluster-groups", strconv.Itoa(c.groups))
	}
	p, err := testproc.Launch(testproc.Config{Binary: "setpriv", NoListen: true, Args: args, OutputLimit: outputLimit})
	if err != nil {
		c.t.Fatalf("starting %s: %v", m.name, err)
	}
	m.proc = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := m.status(); err == nil {
			return
		} else if p.Exited() || time.Now().After(deadline) {
			c.t.Fatalf("%s does not answer on its side port (%v, exited %v):\n%s", m.name, err, p.Exited(), tail(p.Output(), 16<<10))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// status is m's GET /cluster, with the digest of its own store.
func (m *member) status() (replication.Status, error) {
	var st replication.Status
	resp, err := httpClient.Get(m.httpBase() + "/cluster?digest=1")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s /cluster: %s", m.name, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// others are the members but m.
func (c *cluster) others(m *member) []*member {
	var out []*member
	for _, o := range c.members {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

// checkAlive fails the test if a member the test did not stop has exited
// (a member stops on its own only when something is badly wrong).
func (c *cluster) checkAlive(stopped ...*member) {
	c.t.Helper()
	for _, m := range c.members {
		if m.proc != nil && m.proc.Exited() && !contains(stopped, m) {
			c.t.Fatalf("%s exited by itself (%v):\n%s", m.name, m.proc.State(), tail(m.proc.Output(), 32<<10))
		}
	}
}

func contains(ms []*member, m *member) bool {
	for _, o := range ms {
		if o == m {
			return true
		}
	}
	return false
}

// awaitLeader waits until every member up serves or follows one leader,
// and returns it.
func (c *cluster) awaitLeader(timeout time.Duration) *member {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var views []string
		var leader *member
		agreed := true
		for _, m := range c.members {
			if !m.up() {
				continue
			}
			st, err := m.status()
			views = append(views, fmt.Sprintf("%s: leader %q serving %v term %d (%v)", m.name, st.Leader, st.Serving, st.Term, err))
			if err != nil || st.Leader == "" || leader != nil && st.Leader != leader.name {
				agreed = false
				continue
			}
			leader = c.byName(st.Leader)
		}
		if agreed && leader != nil && leader.up() {
			if st, err := leader.status(); err == nil && st.Serving {
				return leader
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no leader every member agrees on within %v:\n%s", timeout, strings.Join(views, "\n"))
		}
		c.checkAlive()
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) byName(name string) *member {
	for _, m := range c.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// awaitConverged waits until every member's store has one digest, and
// with several groups every group's replicas too, and returns the number
// of jobs group 0 holds.
func (c *cluster) awaitConverged(timeout time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var views []string
		jobs, digest, same := -1, "", true
		groupDigests := map[int]string{} // with several groups, each one's
		for _, m := range c.members {
			st, err := m.status()
			views = append(views, fmt.Sprintf("%s: %d jobs, digest %s, applied %d, commit %d, groups %+v (%v)", m.name, st.Jobs, st.Digest, st.Applied, st.Commit, st.Groups, err))
			switch {
			case err != nil || st.Digest == "":
				same = false
			case jobs < 0:
				jobs, digest = st.Jobs, st.Digest
			case st.Digest != digest || st.Jobs != jobs:
				same = false
			}
			if c.groups > 1 && len(st.Groups) != c.groups {
				same = false
			}
			for _, g := range st.Groups {
				if d, ok := groupDigests[g.ID]; g.Digest == "" || ok && d != g.Digest {
					same = false
				}
				groupDigests[g.ID] = g.Digest
			}
		}
		if same {
			return jobs
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("members did not converge within %v:\n%s", timeout, strings.Join(views, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// partition cuts l off from every other member, both ways (doc.go):
// every packet of a connection l opened to another member, or another
// member opened to l, is dropped.
func (c *cluster) partition(l *member) {
	c.t.Helper()
	for _, o := range c.others(l) {
		for _, way := range [][2]*member{{l, o}, {o, l}} {
			iptables(c.t, "-A", "OUTPUT", "-m", "connmark", "--mark", strconv.Itoa(way[0].uid()),
				"-m", "conntrack", "--ctorigdst", way[1].ip(), "-j", "DROP")
		}
	}
}

// heal removes every partition: the filter table holds no other rule.
func (c *cluster) heal() { iptables(c.t, "-F", "OUTPUT") }

func iptables(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (m *member) signal(sig syscall.Signal) error { return m.proc.Signal(sig) }

func tail(s string, n int) string {
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}
