//go:build linux

package clusterfault

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	index int // 1 to -members: the address 127.0.0.index and the user uidBase+index
	name  string
	dir   string // -b
	// join is --cluster-join, once the member was added again as a new
	// member; it keeps it for every later start.
	join string
	proc *testproc.Process
	// outputs keeps the output of earlier starts, for a failure's report.
	outputs []string
	// killed is when the test last killed it (kill), in Unix
	// nanoseconds: its clients' sessions ended then.
	killed atomic.Int64
	// lastMoves is its process's replica moves read just before the
	// test stopped it (noteMoves): movesSince counts what that process
	// began after the round's look before.
	lastMoves moveLook
}

// kill notes m's replica moves, then kills its process, noting when.
func (m *member) kill() {
	m.noteMoves()
	m.killNow()
}

// killNow kills m's process at once, noting when: for a kill timed to
// something else, with noteMoves called before.
func (m *member) killNow() {
	m.killed.Store(time.Now().UnixNano())
	m.proc.Kill()
}

// killedWithin is when m was last killed, if that was after from and
// before to.
func (m *member) killedWithin(from, to time.Time) (time.Time, bool) {
	k := time.Unix(0, m.killed.Load())
	return k, k.After(from) && k.Before(to)
}

func (m *member) ip() string         { return fmt.Sprintf("127.0.0.%d", m.index) }
func (m *member) uid() int           { return uidBase + m.index }
func (m *member) clientAddr() string { return net.JoinHostPort(m.ip(), strconv.Itoa(clientPort)) }
func (m *member) httpBase() string {
	return "http://" + net.JoinHostPort(m.ip(), strconv.Itoa(httpPort))
}
func (m *member) up() bool { return m.proc != nil && !m.proc.Exited() }

type cluster struct {
	t       *failing
	bin     string    // the sprout binary, where the members' users can run it
	peers   string    // --cluster-peers
	members []*member // immutable after newCluster; each member's proc is the test goroutine's
	// groups is the members' --cluster-groups, and replicas their
	// --cluster-replicas (3, or fewer members): each group but 0 lives
	// on that many members, group 0 on all of them.
	groups, replicas int
	// tubes are the workload's tubes and quietTubes the quiet phase's:
	// one per group, by group ([tube] and [quietTube] with one group).
	tubes, quietTubes []string
}

// newCluster brings the namespace's loopback up and starts the members
// (-members of them).
func newCluster(t *failing, built string) *cluster {
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
	for i := 1; i <= *members; i++ {
		m := &member{index: i, name: fmt.Sprintf("m%d", i), dir: filepath.Join(base, fmt.Sprintf("m%d", i))}
		if err := m.emptyDir(); err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, m)
		peers = append(peers, m.name+"="+net.JoinHostPort(m.ip(), strconv.Itoa(clusterPort)))
	}
	c.peers = strings.Join(peers, ",")
	c.groups, c.replicas = max(*groups, 1), min(3, len(c.members))
	c.tubes, c.quietTubes = []string{tube}, []string{quietTube}
	if c.groups > 1 {
		var ms []meta.Member
		for _, m := range c.members {
			ms = append(ms, meta.Member{Name: m.name, ID: replication.MemberID(m.name)})
		}
		placement, err := meta.Formation(ms, c.groups, c.replicas)
		if err != nil {
			t.Fatal(err)
		}
		c.tubes, c.quietTubes = tubePerGroup(placement, c.groups, tube), tubePerGroup(placement, c.groups, quietTube)
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
				keepLog(t, m.name, m.outputs)
			}
		}
	})
	return c
}

// keepLog writes a member's outputs, every start's, into -member-logs.
func keepLog(t testing.TB, name string, outputs []string) {
	if *memberLogs == "" {
		return
	}
	path := filepath.Join(*memberLogs, name+".log")
	if err := os.MkdirAll(*memberLogs, 0o755); err != nil {
		t.Logf("keeping %s's log: %v", name, err)
		return
	}
	if err := os.WriteFile(path, []byte(strings.Join(outputs, "\n--- restarted ---\n")), 0o644); err != nil {
		t.Logf("keeping %s's log: %v", name, err)
		return
	}
	t.Logf("%s's whole output: %s", name, path)
}

// slowDumps writes every member's goroutines into -member-logs
// if the request it watches (what) has not ended within slowRequest:
// where a move that stalls is stuck, which its logs do not say. It
// returns the function that ends the watch. Without -member-logs it does
// nothing.
func (c *cluster) slowDumps(what string) (done func()) {
	if *memberLogs == "" {
		return func() {}
	}
	ended := make(chan struct{})
	members := slices.Clone(c.members) // their names and addresses do not change
	go func() {
		select {
		case <-ended:
			return
		case <-time.After(slowRequest):
		}
		dumpDebug(members, what, "slow")
	}()
	return func() { close(ended) }
}

// dumpDebug writes each member's goroutines, and what its router
// holds for sessions (its calls waiting, its owner clients), into
// -member-logs, in NAME-LABEL-TIME.txt and NAME-LABEL-TIME-router.txt
// headed by what; without -member-logs (the members serve no pprof) it
// does nothing.
func dumpDebug(members []*member, what, label string) {
	if *memberLogs == "" {
		return
	}
	at := time.Now().Format("150405.000")
	_ = os.MkdirAll(*memberLogs, 0o755)
	for _, m := range members { // a member down answers with an error
		for path, suffix := range map[string]string{"/debug/pprof/goroutine?debug=2": "", "/debug/sprout/router": "-router"} {
			body := append([]byte(what+"\n\n"), fetchDebug(m, path)...)
			_ = os.WriteFile(filepath.Join(*memberLogs, fmt.Sprintf("%s-%s-%s%s.txt", m.name, label, at, suffix)), body, 0o644)
		}
	}
}

// fetchDebug is m's answer to GET path on its side port, or the error.
func fetchDebug(m *member, path string) []byte {
	req, err := http.NewRequest(http.MethodGet, m.httpBase()+path, nil)
	if err != nil {
		return []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// slowRequest is how long a move or placement may take before slowDumps
// writes the members' goroutines (one takes tens of ms; seconds under
// the race detector for tens of thousands of jobs).
const slowRequest = 8 * time.Second

// tubePerGroup names a tube in each group, by group: base among them,
// the others base-1, base-2, ..., whichever the placement puts first
// into each group.
func tubePerGroup(placement *meta.State, groups int, base string) []string {
	tubes := make([]string, groups)
	for i := 0; slices.Contains(tubes, ""); i++ {
		name := base
		if i > 0 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		if g := placement.Owner(name); tubes[g] == "" {
			tubes[g] = name
		}
	}
	return tubes
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
	if *memberLogs != "" {
		args = append(args, "--pprof", "true") // for slowDumps
	}
	if m.join != "" {
		args = append(args, "--cluster-join", m.join)
	}
	if c.groups > 1 {
		args = append(args, "--cluster-groups", strconv.Itoa(c.groups), "--cluster-replicas", strconv.Itoa(c.replicas))
	}
	p, err := testproc.Launch(testproc.Config{Binary: "setpriv", NoListen: true, Args: args, OutputLimit: outputLimit})
	if err != nil {
		c.t.Fatalf("starting %s: %v", m.name, err)
	}
	m.proc = p
	began := time.Now()
	deadline := began.Add(startWait)
	for {
		if _, err := m.status(false); err == nil {
			if took := time.Since(began); took > 10*time.Second {
				c.t.Logf("%s answered on its side port %v after its start", m.name, took.Round(time.Millisecond))
			}
			return
		} else if p.Exited() || time.Now().After(deadline) {
			c.t.Fatalf("%s does not answer on its side port (%v, exited %v):\n%s", m.name, err, p.Exited(), tail(p.Output(), 16<<10))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startWait bounds a member's start, to its side port's first answer. A
// restart replays the member's log (under -race, beside other packages'
// tests on two cores, a log of some 40,000 jobs has taken 30 s): a start
// is reported when slow, and fails the test only when it never ends.
const startWait = 2 * time.Minute

var httpClient = &http.Client{Timeout: 2 * time.Second}

// status is m's GET /cluster; with digest, the digests of its own
// stores too (a walk of every job). It touches only m's address, so any
// goroutine may call it.
func (m *member) status(digest bool) (replication.Status, error) {
	var st replication.Status
	url := m.httpBase() + "/cluster"
	if digest {
		url += "?digest=1"
	}
	resp, err := httpClient.Get(url)
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

// layout is the groups as one GET /cluster of every member up shows
// them: each group's replicas, as its replicas list them (a member runs
// only the groups placed on it, and reports only those), and its leader
// once agreed.
type layout struct {
	status map[*member]replication.Status // the members up that answered
	// replicas are each group's voters, by group, as its replicas say.
	replicas map[int][]string
	// leaders are the groups' leaders, by group: a group is there once
	// every replica up names one member, up, that leads it (group 0's
	// serving too).
	leaders map[int]*member
	views   []string // what each member said, for a report
}

// look polls every member up once.
func (c *cluster) look() layout {
	l := layout{status: map[*member]replication.Status{}, replicas: map[int][]string{}, leaders: map[int]*member{}}
	for _, m := range c.members {
		if !m.up() {
			continue
		}
		st, err := m.status(false)
		if err != nil {
			l.views = append(l.views, fmt.Sprintf("%s: %v", m.name, err))
			continue
		}
		l.status[m] = st
		var gs []string
		for _, g := range st.Groups {
			gs = append(gs, fmt.Sprintf("g%d led by %q of %v", g.ID, g.Leader, g.Replicas))
			for _, r := range g.Replicas {
				if !slices.Contains(l.replicas[g.ID], r) {
					l.replicas[g.ID] = append(l.replicas[g.ID], r)
				}
			}
		}
		l.views = append(l.views, fmt.Sprintf("%s: serving %v term %d; %s", m.name, st.Serving, st.Term, strings.Join(gs, ", ")))
	}
	for g := range c.groups {
		slices.Sort(l.replicas[g])
		leader, agreed := "", len(l.replicas[g]) > 0
		for _, name := range l.replicas[g] {
			m := c.byName(name)
			if m == nil || !m.up() {
				continue
			}
			st, ok := l.status[m]
			gs, held := groupIn(st, g)
			if !ok || !held || gs.Leader == "" || leader != "" && gs.Leader != leader {
				agreed = false
				break
			}
			leader = gs.Leader
		}
		// The leader is one of the replicas checked: it names itself.
		lm := c.byName(leader)
		if !agreed || lm == nil || !lm.up() || g == 0 && !l.status[lm].Serving {
			continue
		}
		l.leaders[g] = lm
	}
	return l
}

// groupIn is group g in st, if st's member runs it (st lists the groups
// it does not run too, as their leaders reported them).
func groupIn(st replication.Status, g int) (replication.GroupStatus, bool) {
	for _, gs := range st.Groups {
		if gs.ID == g && gs.Held {
			return gs, true
		}
	}
	return replication.GroupStatus{}, false
}

// ledBy are the groups m leads.
func (l layout) ledBy(m *member) []int {
	var gs []int
	for g, lm := range l.leaders {
		if lm == m {
			gs = append(gs, g)
		}
	}
	slices.Sort(gs)
	return gs
}

// leadingNone is the first of ms that leads no group, nil if each leads
// one.
func (l layout) leadingNone(ms []*member) *member {
	for _, m := range ms {
		if len(l.ledBy(m)) == 0 {
			return m
		}
	}
	return nil
}

// busiest is the member leading the most groups; among equals, group
// 0's leader (with one group, the leader), else the first.
func (c *cluster) busiest(l layout) *member {
	best := l.leaders[0]
	for _, m := range c.members {
		if len(l.ledBy(m)) > len(l.ledBy(best)) {
			best = m
		}
	}
	return best
}

// describe is l's leaders, for the log: "g0 m1, g1 m4, ...".
func (l layout) describe() string {
	var parts []string
	for _, g := range slices.Sorted(maps.Keys(l.leaders)) {
		parts = append(parts, fmt.Sprintf("g%d %s", g, l.leaders[g].name))
	}
	return strings.Join(parts, ", ")
}

// awaitLeaders waits until every member up answers and every group has
// a leader its replicas agree on, and returns the layout.
func (c *cluster) awaitLeaders(timeout time.Duration) layout {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l := c.look()
		up := 0
		for _, m := range c.members {
			if m.up() {
				up++
			}
		}
		if len(l.leaders) == c.groups && len(l.status) == up {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no leader of every group its replicas agree on within %v:\n%s", timeout, strings.Join(l.views, "\n"))
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

// awaitConverged waits until every member's store of group 0 (GET
// /cluster's digest) has one digest, and each group's replicas, as they
// list them, one digest of the group; and until the groups are whole
// (cluster.whole: each with all its voters, no learner): replicas that
// agree prove little if a group converged on fewer of them than it
// should have, a replica lost by a fault and never given back.
func (c *cluster) awaitConverged(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var views []string
		status := map[string]replication.Status{}
		replicas := map[int][]string{}
		same := true
		if lacking := c.lacking(c.look()); lacking != "" {
			same = false
			views = append(views, "not whole: "+lacking)
		}
		for _, m := range c.members {
			st, err := m.status(true)
			views = append(views, fmt.Sprintf("%s: %d jobs, digest %s, applied %d, commit %d, groups %+v (%v)", m.name, st.Jobs, st.Digest, st.Applied, st.Commit, st.Groups, err))
			if err != nil || st.Digest == "" {
				same = false
				continue
			}
			status[m.name] = st
			for _, g := range st.Groups {
				for _, r := range g.Replicas {
					if !slices.Contains(replicas[g.ID], r) {
						replicas[g.ID] = append(replicas[g.ID], r)
					}
				}
			}
		}
		var first *replication.Status
		for _, st := range status {
			if first == nil {
				first = &st
			} else if st.Digest != first.Digest || st.Jobs != first.Jobs {
				same = false
			}
		}
		for g := range c.groups {
			// Members that do not hold g have no digest of it.
			digest := ""
			if len(replicas[g]) == 0 {
				same = false
			}
			for _, name := range replicas[g] {
				gs, held := groupIn(status[name], g)
				if !held || gs.Digest == "" || digest != "" && gs.Digest != digest {
					same = false
				}
				digest = gs.Digest
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("members did not converge within %v:\n%s", timeout, strings.Join(views, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cut partitions the members of a from those of b, both ways (doc.go):
// every packet of a connection one side opened to the other is dropped.
// Members on one side keep theirs.
func (c *cluster) cut(a, b []*member) {
	c.t.Helper()
	for _, x := range a {
		for _, y := range b {
			for _, way := range [][2]*member{{x, y}, {y, x}} {
				iptables(c.t, "-A", "OUTPUT", "-m", "connmark", "--mark", strconv.Itoa(way[0].uid()),
					"-m", "conntrack", "--ctorigdst", way[1].ip(), "-j", "DROP")
			}
		}
	}
}

// checkCut checks that the partition cut(a, b) made separates exactly
// the members it names: a connection opened as each member's user (the
// rules tell members apart by it) reaches every member up on its side,
// and none on the other, within probeWait. Each pair is probed at once.
func (c *cluster) checkCut(a, b []*member) error {
	sideOf := func(m *member) int {
		if contains(a, m) {
			return 0
		}
		return 1
	}
	type probe struct {
		from, to *member
		reached  bool
		err      error
	}
	var probes []*probe
	for _, x := range append(slices.Clone(a), b...) {
		for _, y := range append(slices.Clone(a), b...) {
			if x != y && x.up() && y.up() {
				probes = append(probes, &probe{from: x, to: y})
			}
		}
	}
	var wg sync.WaitGroup
	for _, p := range probes {
		wg.Go(func() { p.reached, p.err = reaches(p.from, p.to) })
	}
	wg.Wait()
	for _, p := range probes {
		switch same := sideOf(p.from) == sideOf(p.to); {
		case p.err != nil:
			return fmt.Errorf("probing %s from %s: %w", p.to.name, p.from.name, p.err)
		case same && !p.reached:
			return fmt.Errorf("%s cannot reach %s, on its side of the partition: the rules cut more than they name", p.from.name, p.to.name)
		case !same && p.reached:
			return fmt.Errorf("%s reaches %s, across the partition: the rules cut less than they name", p.from.name, p.to.name)
		}
	}
	return nil
}

// probeWait is how long a probe's connection may take to be set up: on
// loopback, far longer than one that is not dropped takes.
const probeWait = 300 * time.Millisecond

// reaches reports whether a connection opened as member from's user to
// member to's client port is set up within probeWait (bash's /dev/tcp,
// run as the members are, by setpriv).
func reaches(from, to *member) (bool, error) {
	uid := strconv.Itoa(from.uid())
	cmd := exec.Command("setpriv", "--reuid="+uid, "--regid="+uid, "--clear-groups",
		"timeout", strconv.FormatFloat(probeWait.Seconds(), 'f', -1, 64),
		"bash", "-c", `exec 3<>"/dev/tcp/$0/$1"`, to.ip(), strconv.Itoa(clientPort))
	out, err := cmd.CombinedOutput()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() == 124 {
		return false, nil // timed out: dropped
	}
	if err != nil {
		return false, fmt.Errorf("%v: %s", err, out)
	}
	return true, nil
}

// heal removes every partition: the filter table holds no other rule.
func (c *cluster) heal() { iptables(c.t, "-F", "OUTPUT") }

func iptables(t testing.TB, args ...string) {
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

// leftMetrics are what a member holds for its clients' sessions and for
// other members' (docs/cluster.md, "Metrics"): once every client is
// gone, each is 0 on every member.
var leftMetrics = []string{"sprout_router_remote_sessions", "sprout_router_owner_clients", "sprout_router_pending_calls"}

// leftBehind waits up to timeout for every member up to hold nothing of
// the clients gone (leftMetrics), and returns what each still held.
func (c *cluster) leftBehind(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, m := range c.members {
			if !m.up() {
				continue
			}
			for _, family := range leftMetrics {
				series, err := testproc.MetricSeries(httpClient, m.httpBase(), family)
				if err != nil {
					left = append(left, fmt.Sprintf("%s: %v", m.name, err))
				}
				for s, v := range series {
					if v != 0 {
						left = append(left, fmt.Sprintf("%s: %s %g", m.name, s, v))
					}
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			slices.Sort(left)
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// movesMetric counts the replica moves a member began, by who planned
// them (internal/member's makeMove).
const movesMetric = "sprout_member_replica_moves_total"

// replicaMoves is m's movesMetric by its planned_by label, since m's
// process started.
func (m *member) replicaMoves() (map[string]uint64, error) {
	series, err := testproc.MetricSeries(httpClient, m.httpBase(), movesMetric)
	if err != nil {
		return nil, err
	}
	by := map[string]uint64{}
	for s, n := range series {
		rest, prefixed := strings.CutPrefix(s, movesMetric+`{planned_by="`)
		label, ok := strings.CutSuffix(rest, `"}`)
		if !prefixed || !ok {
			return nil, fmt.Errorf("%s /metrics: a series %q", m.name, s)
		}
		by[label] = uint64(n)
	}
	return by, nil
}

// noteMoves reads m's replica moves into lastMoves, before the test stops
// its process; a member that does not answer is noted as unread.
func (m *member) noteMoves() {
	m.lastMoves = moveLook{}
	if !m.up() {
		return
	}
	if by, err := m.replicaMoves(); err == nil {
		m.lastMoves = moveLook{proc: m.proc, by: by}
	}
}

// moveTally keeps each member's replicaMoves as last read, to count the
// moves begun since.
type moveTally map[*member]moveLook

type moveLook struct {
	proc *testproc.Process // the process read
	by   map[string]uint64
}

// movesSince is the replica moves the members began since the last
// look (all of them at the first), by who planned them. A member
// restarted since counts from its start, and what the process before it
// began after that look as read just before the test stopped it
// (noteMoves); a process that started and stopped between two looks is
// not seen. A member that does not answer is looked at next time.
func (c *cluster) movesSince(tally moveTally) map[string]uint64 {
	moves := map[string]uint64{}
	for _, m := range c.members {
		if !m.up() {
			continue
		}
		by, err := m.replicaMoves()
		if err != nil {
			c.t.Logf("reading %s's replica moves: %v", m.name, err)
			continue
		}
		now := moveLook{proc: m.proc, by: by}
		for label, n := range movesBetween(tally[m], m.lastMoves, now) {
			moves[label] += n
		}
		tally[m] = now
	}
	return moves
}

// movesBetween is the moves a member began from the look last to the
// look now: now's counts less last's for the same process; for a process
// started since, all of now's, and what the one before began after last
// as read just before it was stopped (stopped, if of last's process).
func movesBetween(last, stopped, now moveLook) map[string]uint64 {
	moves := map[string]uint64{}
	since := func(from, to map[string]uint64) {
		for label, n := range to {
			if n >= from[label] {
				moves[label] += n - from[label]
			}
		}
	}
	if last.proc == now.proc {
		since(last.by, now.by)
		return moves
	}
	if last.proc != nil && stopped.proc == last.proc {
		since(last.by, stopped.by)
	}
	since(nil, now.by)
	return moves
}
