package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// The membership tests change a running cluster of real sprout processes
// through the endpoint on --http: grow a single node into three, three
// into five, replace a member whose directory was emptied, remove a
// member and the leader.

const testAdminToken = "membership-test-token-0123456789"

// memberReq sends a request to m's membership endpoint with token ("" for
// none) and returns the status and the JSON answer.
func memberReq(t *testing.T, m *testMember, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	r := testproc.DoAPI(t, testproc.APIRequest{Method: method, URL: "http://" + m.httpAddr + path, Body: body,
		Bearer: token, Timeout: 30 * time.Second})
	var out map[string]any
	_ = json.Unmarshal(r.Body, &out)
	return r.Status, out
}

// join adds m through via (as a learner) and starts it with the join
// string the answer gives, every member as --cluster-peers, and extra.
func (c *testCluster) join(via, m *testMember, extra ...string) {
	c.t.Helper()
	if err := c.tryJoin(via, m, extra...); err != nil {
		c.t.Fatal(err)
	}
}

// tryJoin is join, returning the start's error: the process, started,
// may have exited.
func (c *testCluster) tryJoin(via, m *testMember, extra ...string) error {
	c.t.Helper()
	status, out := memberReq(c.t, via, http.MethodPost, "/cluster/members", testAdminToken,
		map[string]string{"name": m.name, "address": m.peerAddr})
	if status != http.StatusCreated || out["role"] != "learner" {
		c.t.Fatalf("adding %s through %s: %d %v", m.name, via.name, status, out)
	}
	var peers []string
	for _, o := range c.up() {
		if o != m {
			peers = append(peers, o.name+"="+o.peerAddr)
		}
	}
	m.peers = strings.Join(append(peers, m.name+"="+m.peerAddr), ",")
	m.args = append([]string{"--cluster-join", out["join"].(string)}, extra...)
	if !slices.Contains(c.members, m) {
		c.members = append(c.members, m)
	}
	return c.start(m)
}

// awaitVoters waits until via's /cluster shows exactly names, each a
// voter.
func (c *testCluster) awaitVoters(timeout time.Duration, via *testMember, names ...string) {
	c.t.Helper()
	var last string
	defer func() {
		if c.t.Failed() {
			c.t.Logf("%s's last view of the members: %s", via.name, last)
		}
	}()
	testproc.WaitFor(c.t, timeout, fmt.Sprintf("%v voters on %s", names, via.name), func() bool {
		st, err := via.status()
		if err != nil {
			return false
		}
		var voters []string
		for _, m := range st.Members {
			if m.Role == "voter" {
				voters = append(voters, m.Name)
			}
		}
		last = fmt.Sprintf("%+v", st.Members)
		return len(st.Members) == len(names) && slices.Equal(slices.Sorted(slices.Values(voters)), slices.Sorted(slices.Values(names)))
	})
}

// awaitJobs waits until every member up holds want ready jobs in its own
// store.
func (c *testCluster) awaitJobs(timeout time.Duration, want int) {
	c.t.Helper()
	for _, m := range c.up() {
		testproc.WaitFor(c.t, timeout, fmt.Sprintf("%d ready jobs in %s's store", want, m.name), func() bool {
			n, err := m.readyJobs()
			return err == nil && n == want
		})
	}
}

// awaitExit waits for m to exit and checks its status.
func awaitExit(t *testing.T, m *testMember, code int, timeout time.Duration) {
	t.Helper()
	if !m.proc.Wait(timeout) {
		t.Fatalf("%s still runs %v after its removal", m.name, timeout)
	}
	if got := m.proc.ExitCode(); got != code {
		t.Errorf("%s exited %d, want %d (removed)", m.name, got, code)
	}
}

// startClusterWithJobs starts three members that take membership
// changes, and puts jobs through the leader, which it returns.
func startClusterWithJobs(t *testing.T, jobs int) (*testCluster, *testMember) {
	t.Helper()
	c := startCluster(t, "--admin-token", testAdminToken)
	l := c.awaitServing(20 * time.Second)
	conn := dialMember(t, l)
	defer conn.Close()
	for i := range jobs {
		if _, err := conn.Put(0, 0, 60, fmt.Appendf(nil, "job-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	return c, l
}

// TestClusterGrowFromSingleNode: a single node's -b directory holding jobs
// becomes the first member of a cluster, which grows to three while it
// serves; every job is on all three, and a new member serves them.
func TestClusterGrowFromSingleNode(t *testing.T) {
	dir := t.TempDir()
	single, err := testproc.Launch(testproc.Config{Binary: testproc.SproutBinary(t), Args: []string{"-b", dir}})
	if err != nil {
		t.Fatal(err)
	}
	conn := testproc.DialTest(t, single.Addr(), 5*time.Second)
	const jobs = 20
	for i := range jobs {
		if _, err := conn.Put(0, 0, 60, fmt.Appendf(nil, "job-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	if !single.Stop(10 * time.Second) {
		t.Fatalf("the single node did not stop:\n%s", single.Output())
	}

	c := &testCluster{t: t, args: []string{"--admin-token", testAdminToken}}
	a := c.newMember("a")
	a.dir = dir
	c.members, c.peers = []*testMember{a}, "a="+a.peerAddr
	if err := c.start(a); err != nil {
		t.Fatal(err)
	}
	c.awaitServing(20 * time.Second)
	c.awaitJobs(10*time.Second, jobs)

	// Guarded as the admin API's changes are.
	if status, out := memberReq(t, a, http.MethodPost, "/cluster/members", "", map[string]string{"name": "b", "address": "127.0.0.1:1"}); status != http.StatusUnauthorized {
		t.Errorf("an addition without the token: %d %v, want 401", status, out)
	}
	if status, out := memberReq(t, a, http.MethodPost, "/cluster/members", testAdminToken, map[string]string{"name": "b c", "address": "x"}); status != http.StatusBadRequest {
		t.Errorf("an addition of a bad name: %d %v, want 400", status, out)
	}

	b := c.newMember("b")
	c.join(a, b)
	c.awaitVoters(30*time.Second, a, "a", "b")
	// b answers from its own view of the membership: until it applies b's
	// promotion, it says a change is in progress (409).
	c.awaitVoters(30*time.Second, b, "a", "b")
	d := c.newMember("c")
	c.join(b, d) // through a follower
	c.awaitVoters(30*time.Second, a, "a", "b", "c")
	c.awaitJobs(20*time.Second, jobs)
	// Two additions and two promotions, as a applied them.
	if n, err := a.metric("sprout_cluster_membership_changes_total", "sprout_cluster_membership_changes_total"); err != nil || n != 4 {
		t.Errorf("a counted %v membership changes (%v), want 4", n, err)
	}

	// Served through the newest member: the oldest job first.
	through := dialMember(t, d)
	reply, err := through.Do("reserve-with-timeout 5", nil)
	if err != nil || reply.Kind != testproc.ReplyReserved || !bytes.Equal(reply.Body, []byte("job-0")) {
		t.Errorf("reserve through c: %v %q %v, want job-0", reply.Kind, reply.Body, err)
	}
	if st, err := d.status(); err != nil || len(st.Members) != 3 {
		t.Errorf("c's view: %+v %v", st, err)
	}
}

// TestClusterJoinWithOtherGroups: a member that joins a cluster of two
// groups with --cluster-groups 3 stops with one line and status 5, as a
// member refused at start does, once group 0's book tells it the
// cluster's; its -b records the cluster's then, and started again
// without the flag it serves as a member of two groups.
func TestClusterJoinWithOtherGroups(t *testing.T) {
	c := startCluster(t, "--admin-token", testAdminToken, "--cluster-groups", "2")
	c.awaitServing(20 * time.Second)
	m4 := c.newMember("m4")
	_ = c.tryJoin(c.members[0], m4, "--cluster-groups", "3") // it may stop before it listens
	if !m4.proc.Wait(20 * time.Second) {
		t.Fatalf("m4, joined with --cluster-groups 3 to a cluster of 2, still runs")
	}
	const want = "--cluster-groups 3 disagrees with this cluster's 2, set when it was formed"
	if code, n := m4.proc.ExitCode(), strings.Count(m4.proc.Output(), want); code != exitUsage || n != 1 {
		t.Fatalf("m4 exited %d, its output naming the disagreement on %d lines; want %d and one line:\n%s", code, n, exitUsage, m4.proc.Output())
	}
	// Without --cluster-groups: the other members keep the flags they
	// started with, m4 takes the cluster's from its -b.
	c.args = []string{"--admin-token", testAdminToken}
	m4.args = m4.args[:2] // --cluster-join only
	if err := c.start(m4); err != nil {
		t.Fatal(err)
	}
	c.awaitVoters(30*time.Second, c.members[0], "m1", "m2", "m3", "m4")
	conn := dialMember(t, m4)
	defer conn.Close()
	for _, tube := range []string{"a", "b", "c", "d"} {
		if r, err := conn.Do("use "+tube, nil); err != nil || r.Kind != testproc.ReplyUsing {
			t.Fatalf("use %s through m4: %+v %v", tube, r, err)
		}
		if id, err := conn.Put(0, 0, 60, []byte(tube)); err != nil || id>>45 > 1 {
			t.Fatalf("put into %s through m4: id %d (group %d) %v, want one of group 0 or 1", tube, id, id>>45, err)
		}
	}
	if m4.proc.Wait(time.Second) {
		t.Fatalf("m4, started again without --cluster-groups, stopped:\n%s", m4.proc.Output())
	}
}

// TestClusterMembershipChanges: three members grow to five; one change
// at a time; a follower whose directory was emptied is replaced under its
// name and caught up by a snapshot; a removed member, and a removed
// leader, stop serving and exit 12 while the others serve on.
func TestClusterMembershipChanges(t *testing.T) {
	const jobs = 10
	c, l := startClusterWithJobs(t, jobs)

	m4, m5 := c.newMember("m4"), c.newMember("m5")
	c.join(l, m4)
	via := c.others(l)[0]
	c.awaitVoters(30*time.Second, via, "m1", "m2", "m3", "m4") // as for b above
	c.join(via, m5)
	c.awaitVoters(30*time.Second, l, "m1", "m2", "m3", "m4", "m5")
	c.awaitJobs(20*time.Second, jobs)

	// One change at a time: a learner not started holds the next change.
	if status, out := memberReq(t, l, http.MethodPost, "/cluster/members", testAdminToken, map[string]string{"name": "m6", "address": "127.0.0.1:1"}); status != http.StatusCreated {
		t.Fatalf("adding m6: %d %v", status, out)
	}
	if status, out := memberReq(t, l, http.MethodPost, "/cluster/members", testAdminToken, map[string]string{"name": "m7", "address": "127.0.0.1:2"}); status != http.StatusConflict {
		t.Errorf("adding m7 while m6 is a learner: %d %v, want 409", status, out)
	}
	if status, out := memberReq(t, l, http.MethodDelete, "/cluster/members/m6", testAdminToken, nil); status != http.StatusOK {
		t.Fatalf("removing the learner m6: %d %v", status, out)
	}
	if status, out := memberReq(t, l, http.MethodDelete, "/cluster/members/nobody", testAdminToken, nil); status != http.StatusNotFound {
		t.Errorf("removing no member: %d %v, want 404", status, out)
	}

	// Replace a follower whose directory was emptied: removed, added
	// again under its name (a new Raft id), filled by a snapshot.
	f := c.others(l)[0]
	f.proc.Kill()
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if status, out := memberReq(t, l, http.MethodDelete, "/cluster/members/"+f.name, testAdminToken, nil); status != http.StatusOK {
		t.Fatalf("removing %s: %d %v", f.name, status, out)
	}
	c.join(l, f)
	c.awaitVoters(30*time.Second, l, "m1", "m2", "m3", "m4", "m5")
	c.awaitJobs(20*time.Second, jobs)
	if !strings.Contains(f.proc.Output(), "installed a snapshot") {
		t.Errorf("%s caught up without a snapshot", f.name)
	}

	// A removed follower stops serving and exits.
	var gone *testMember
	for _, m := range c.others(l) {
		if m != f {
			gone = m
		}
	}
	if status, out := memberReq(t, f, http.MethodDelete, "/cluster/members/"+gone.name, testAdminToken, nil); status != http.StatusOK {
		t.Fatalf("removing %s through %s: %d %v", gone.name, f.name, status, out)
	}
	awaitExit(t, gone, exitRemoved, 10*time.Second)

	// The leader removes itself: it hands the leadership over to a member
	// with its whole log as it leaves, and exits.
	if status, out := memberReq(t, l, http.MethodDelete, "/cluster/members/"+l.name, testAdminToken, nil); status != http.StatusOK {
		t.Fatalf("the leader %s removing itself: %d %v", l.name, status, out)
	}
	awaitExit(t, l, exitRemoved, 10*time.Second)
	next := c.awaitServing(20 * time.Second)
	handed := regexp.MustCompile(`"to":"([^"]+)".*handed the leadership over`).FindStringSubmatch(l.proc.Output())
	if handed == nil || handed[1] != next.name {
		t.Errorf("the removed leader did not hand the leadership to %s, which serves (%q):\n%s", next.name, handed, l.proc.Output())
	}
	putThrough(t, 10*time.Second, "after the leader left", c.up()...)
	c.awaitJobs(20*time.Second, jobs+1)
	var left []string
	for _, m := range c.up() {
		left = append(left, m.name)
	}
	c.awaitVoters(10*time.Second, next, left...)

	// An initial member restarted with --cluster-peers rewritten (every
	// member listed) is refused, with the flag that starts it; with it, it
	// comes back.
	var initial *testMember
	for _, m := range c.up() {
		if m != f && !slices.Contains([]string{"m4", "m5"}, m.name) {
			initial = m // m1, m2 or m3 as it first started (l and f are not)
		}
	}
	if initial == nil {
		t.Fatalf("no initial member left among %v", c.up())
	}
	initial.proc.Kill()
	var all []string
	for _, m := range c.members {
		all = append(all, m.name+"="+m.peerAddr)
	}
	initial.peers = strings.Join(all, ",")
	_ = c.start(initial)
	if !initial.proc.Wait(10*time.Second) || initial.proc.ExitCode() != exitReplay {
		t.Fatalf("%s with --cluster-peers rewritten: not refused (exit %d)", initial.name, initial.proc.ExitCode())
	}
	flag := regexp.MustCompile(`--cluster-join ([0-9a-f]+:[0-9a-f]+)`).FindStringSubmatch(initial.proc.Output())
	if flag == nil {
		t.Fatalf("the refusal does not name --cluster-join:\n%s", initial.proc.Output())
	}
	t.Logf("%s refused with --cluster-peers rewritten; starting it with --cluster-join %s", initial.name, flag[1])
	initial.args = []string{"--cluster-join", flag[1]}
	if err := c.start(initial); err != nil {
		t.Fatal(err)
	}
	c.awaitServing(20 * time.Second)
	c.awaitVoters(10*time.Second, initial, left...)
}

// TestClusterGrowWithJoinList: the StatefulSet's way to grow.
// A fourth member is added and started with the list form of
// --cluster-join that every member shares, a --cluster-peers naming only
// the three initial members, and wildcard addresses: it is promoted, its
// peers reach its client and --http ports at the host its addition
// recorded, and it serves. An initial member and the new one restarted
// with the same list in their environment come back and serve.
func TestClusterGrowWithJoinList(t *testing.T) {
	const jobs = 5
	c, l := startClusterWithJobs(t, jobs)

	m4 := c.newMember("m4")
	status, out := memberReq(t, l, http.MethodPost, "/cluster/members", testAdminToken,
		map[string]string{"name": m4.name, "address": m4.peerAddr})
	if status != http.StatusCreated {
		t.Fatalf("adding m4: %d %v", status, out)
	}
	list := "m9=" + out["join"].(string) + "," + m4.name + "=" + out["join"].(string)
	_, peerPort, _ := strings.Cut(m4.peerAddr, ":")
	_, httpPort, _ := strings.Cut(m4.httpAddr, ":")
	m4.peers = c.peers // without m4
	m4.args = []string{"-l", "0.0.0.0", "--cluster-listen", "0.0.0.0:" + peerPort, "--http", "0.0.0.0:" + httpPort}
	m4.env = []string{"SPROUT_CLUSTER_JOIN=" + list}
	c.members = append(c.members, m4)
	if err := c.start(m4); err != nil {
		t.Fatal(err)
	}
	c.awaitVoters(30*time.Second, l, "m1", "m2", "m3", "m4")
	c.awaitJobs(20*time.Second, jobs)

	// Its peers dial it where its addition said, not at 0.0.0.0.
	_, clientPort, _ := strings.Cut(m4.proc.Addr(), ":")
	testproc.WaitFor(t, 10*time.Second, "m4's client and --http addresses on the others, at its recorded host", func() bool {
		for _, o := range c.others(m4) {
			st, err := o.status()
			if err != nil {
				return false
			}
			i := slices.IndexFunc(st.Members, func(m replication.MemberStatus) bool { return m.Name == "m4" })
			if i < 0 || st.Members[i].Client != "127.0.0.1:"+clientPort || st.Members[i].HTTP != "127.0.0.1:"+httpPort {
				return false
			}
		}
		return true
	})
	putThrough(t, 10*time.Second, "through m4", m4)
	c.awaitJobs(20*time.Second, jobs+1)

	// Restarted with the shared list: an initial member (no entry for it)
	// and m4 (its entry, on its log) come back as they were.
	var initial *testMember
	for _, m := range c.others(l) {
		if m != m4 {
			initial = m
		}
	}
	for _, m := range []*testMember{initial, m4} {
		if !m.proc.Stop(10 * time.Second) {
			t.Fatalf("%s did not stop:\n%s", m.name, m.proc.Output())
		}
		m.env = []string{"SPROUT_CLUSTER_JOIN=" + list}
		if err := c.start(m); err != nil {
			t.Fatal(err)
		}
		c.awaitServing(20 * time.Second)
		c.awaitVoters(20*time.Second, m, "m1", "m2", "m3", "m4")
	}
	putThrough(t, 10*time.Second, "after the restarts", initial, m4)
	c.awaitJobs(20*time.Second, jobs+2)
}
