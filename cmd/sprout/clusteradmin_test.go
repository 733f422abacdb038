package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// clusterToken is the admin token of every member of the admin tests.
const clusterToken = "cluster-admin-test-token"

// apiClient calls a member's admin API with a bearer token, or a
// session's cookie and CSRF token, or nothing.
type apiClient struct {
	t      *testing.T
	bearer string
	cookie *http.Cookie
	csrf   string
}

// apiReply is an answer of the API.
type apiReply struct {
	status int
	header http.Header
	body   []byte
}

// object decodes the answer's JSON object.
func (r apiReply) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	return m
}

// do sends method path to m's --http, body (if not nil) as JSON.
func (c apiClient) do(m *testMember, method, path string, body any) apiReply {
	c.t.Helper()
	r := testproc.DoAPI(c.t, testproc.APIRequest{Method: method, URL: "http://" + m.httpAddr + path, Body: body,
		Bearer: c.bearer, Cookie: c.cookie, CSRF: c.csrf, Timeout: 10 * time.Second})
	return apiReply{status: r.Status, header: r.Header, body: r.Body}
}

// ok sends a request that must answer want, and decodes its object.
func (c apiClient) ok(m *testMember, want int, method, path string, body any) map[string]any {
	c.t.Helper()
	r := c.do(m, method, path, body)
	if r.status != want {
		c.t.Fatalf("%s %s on %s: %d %s, want %d", method, path, m.name, r.status, r.body, want)
	}
	return r.object(c.t)
}

// number reads a JSON number of an object as an int.
func number(t *testing.T, m map[string]any, key string) int {
	t.Helper()
	n, ok := m[key].(float64)
	if !ok {
		t.Fatalf("%s: %v, want a number in %v", key, m[key], m)
	}
	return int(n)
}

// agree waits until every member up has want jobs in state in its own
// store (its /metrics): the change reached every replica.
func (c *testCluster) agree(state string, want int) {
	c.t.Helper()
	testproc.WaitFor(c.t, 10*time.Second, fmt.Sprintf("every member's store with %d %s jobs", want, state), func() bool {
		for _, m := range c.up() {
			if n, err := m.currentJobs(state); err != nil || n != want {
				return false
			}
		}
		return true
	})
}

// TestClusterAdmin: the admin API, the console and sproutctl on three
// real members. Puts, a kick, a listing, a delete and a clear go through
// the leader and through a follower and reach every member's store; what
// a listing shows is the leader's (a job reserved there is reserved,
// where a follower's own store holds it ready); the rules of access are
// each member's, and a console session opened on a follower works
// through it; a console page loads through a follower, naming the
// member and the leader; sproutctl works against a follower's --api.
// Last, with both followers paused, a put through the leader is never
// acknowledged: the leader loses its lease and answers 503.
func TestClusterAdmin(t *testing.T) {
	c := startCluster(t, "--admin-token", clusterToken)
	l := c.awaitServing(20 * time.Second)
	f := c.others(l)
	testproc.WaitFor(t, 10*time.Second, "every member knowing the leader's --http address", func() bool {
		for _, m := range c.up() {
			st, err := m.status()
			if err != nil || !slices.ContainsFunc(st.Members, func(ms replication.MemberStatus) bool {
				return ms.Name == l.name && ms.HTTP == l.httpAddr
			}) {
				return false
			}
		}
		return true
	})
	api := apiClient{t: t, bearer: clusterToken}

	// Each change through the leader, then through a follower, reaches
	// every member's store.
	for _, via := range []*testMember{l, f[0]} {
		id := number(t, api.ok(via, http.StatusCreated, "POST", "/api/v1/tubes/adm/jobs",
			map[string]any{"body": "now via " + via.name}), "id")
		api.ok(via, http.StatusCreated, "POST", "/api/v1/tubes/adm/jobs", map[string]any{"body": "later via " + via.name, "delay": 3600})
		c.agree("ready", 1)
		c.agree("delayed", 1)
		if k := number(t, api.ok(via, http.StatusOK, "POST", "/api/v1/tubes/adm/kick", map[string]any{"bound": 10}), "kicked"); k != 1 {
			t.Fatalf("kick through %s: %d", via.name, k)
		}
		c.agree("ready", 2)
		c.agree("delayed", 0)
		list := api.ok(via, http.StatusOK, "GET", "/api/v1/tubes/adm/jobs?state=ready", nil)
		jobs, _ := list["jobs"].([]any)
		var bodies []string
		for _, j := range jobs {
			bodies = append(bodies, fmt.Sprint(j.(map[string]any)["body"]))
		}
		if got, want := strings.Join(bodies, ","), "now via "+via.name+",later via "+via.name; got != want {
			t.Fatalf("ready jobs listed through %s: %s, want %s", via.name, got, want)
		}
		if d := number(t, api.ok(via, http.StatusOK, "DELETE", fmt.Sprintf("/api/v1/jobs/%d", id), nil), "deleted"); d != 1 {
			t.Fatalf("delete through %s: %d", via.name, d)
		}
		c.agree("ready", 1)
		if d := number(t, api.ok(via, http.StatusOK, "POST", "/api/v1/tubes/adm/clear", map[string]any{"state": "all"}), "deleted"); d != 1 {
			t.Fatalf("clear through %s: %d", via.name, d)
		}
		c.agree("ready", 0)
	}

	// What a listing shows is the leader's: a job reserved there (by a
	// client proxied through a follower) is listed reserved.
	for _, body := range []string{"one", "two", "three"} {
		api.ok(f[1], http.StatusCreated, "POST", "/api/v1/tubes/adm/jobs", map[string]any{"body": body})
	}
	c.agree("ready", 3)
	worker := dialMember(t, f[1])
	if err := worker.ExpectLine("watch adm", "WATCHING 2"); err != nil {
		t.Fatal(err)
	}
	r, err := worker.Do("reserve-with-timeout 5", nil)
	if err != nil || r.Kind != testproc.ReplyReserved {
		t.Fatalf("reserve through %s: %+v %v", f[1].name, r, err)
	}
	reserved := api.ok(f[0], http.StatusOK, "GET", "/api/v1/tubes/adm/jobs?state=reserved", nil)
	if jobs, _ := reserved["jobs"].([]any); len(jobs) != 1 || number(t, jobs[0].(map[string]any), "id") != int(r.N) {
		t.Fatalf("reserved jobs listed through %s: %s; want job %d", f[0].name, reserved, r.N)
	}
	tube := api.ok(f[0], http.StatusOK, "GET", "/api/v1/tubes/adm", nil)
	if number(t, tube, "current-jobs-reserved") != 1 || number(t, tube, "current-jobs-ready") != 2 {
		t.Errorf("the tube's figures through %s: %v", f[0].name, tube)
	}
	if n, err := f[0].currentJobs("reserved"); err != nil || n != 0 {
		t.Errorf("%s's own store holds %d reserved jobs (%v): reservations should live on the leader only", f[0].name, n, err)
	}
	if err := worker.ExpectLine(fmt.Sprint("delete ", r.N), "DELETED"); err != nil {
		t.Fatal(err)
	}
	if d := number(t, api.ok(f[1], http.StatusOK, "POST", "/api/v1/tubes/adm/clear", map[string]any{"state": "all"}), "deleted"); d != 2 {
		t.Fatalf("clear through %s: %d, want the 2 jobs left", f[1].name, d)
	}
	c.agree("ready", 0)

	checkClusterAccess(t, l, f[0])
	checkClusterConsole(t, l, f[0])
	checkSproutctl(t, c, f[1])
	checkNeverAckedUncommitted(t, c, l)
}

// checkClusterAccess: the rules of access are a follower's own, as a
// single node's: no credential or a wrong one is 401, a change by
// session without its CSRF token 403; a session opened on the follower
// changes jobs through it, and the leader does not know that session.
func checkClusterAccess(t *testing.T, l, f *testMember) {
	anon := apiClient{t: t}
	for _, c := range []apiClient{anon, {t: t, bearer: "wrong"}} {
		if r := c.do(f, "GET", "/api/v1/tubes", nil); r.status != http.StatusUnauthorized {
			t.Errorf("GET /api/v1/tubes on %s with %q: %d %s, want 401", f.name, c.bearer, r.status, r.body)
		}
	}
	login := anon.do(f, "POST", "/api/v1/session", map[string]any{"token": clusterToken})
	if login.status != http.StatusOK {
		t.Fatalf("login on %s: %d %s", f.name, login.status, login.body)
	}
	sess := apiClient{t: t}
	for _, ck := range (&http.Response{Header: login.header}).Cookies() {
		if ck.Name == admin.SessionCookie {
			sess.cookie = ck
		}
	}
	csrf, _ := login.object(t)["csrf-token"].(string)
	if sess.cookie == nil || csrf == "" {
		t.Fatalf("login on %s: %s", f.name, login.body)
	}
	if r := sess.do(f, "POST", "/api/v1/tubes/acc/jobs", map[string]any{"body": "x"}); r.status != http.StatusForbidden {
		t.Errorf("a change by session without its CSRF token on %s: %d %s, want 403", f.name, r.status, r.body)
	}
	sess.csrf = csrf
	sess.ok(f, http.StatusCreated, "POST", "/api/v1/tubes/acc/jobs", map[string]any{"body": "by session"})
	sess.ok(f, http.StatusOK, "POST", "/api/v1/tubes/acc/clear", map[string]any{"state": "all"})
	if r := sess.do(l, "GET", "/api/v1/tubes", nil); r.status != http.StatusUnauthorized {
		t.Errorf("%s's session on the leader %s: %d, want 401 (sessions are each member's)", f.name, l.name, r.status)
	}
}

// checkClusterConsole: a console page loads through a follower, marked
// as a cluster member's; without a session it is the login form.
func checkClusterConsole(t *testing.T, l, f *testMember) {
	get := func(path string, bearer bool) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+f.httpAddr+path, nil)
		if bearer {
			req.Header.Set("Authorization", "Bearer "+clusterToken)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s on %s: %v", path, f.name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, page := get("/tubes/adm", true); code != http.StatusOK || !strings.Contains(page, `data-cluster="1"`) ||
		!strings.Contains(page, `id="member"`) {
		t.Errorf("a tube's page through %s: %d\n%s", f.name, code, page)
	}
	if code, page := get("/", false); code != http.StatusUnauthorized || !strings.Contains(page, "login") {
		t.Errorf("the overview through %s without a session: %d, want the login form", f.name, code)
	}
	if code, script := get("/static/console.js", false); code != http.StatusOK || !strings.Contains(script, "/cluster") {
		t.Errorf("the console's script through %s: %d", f.name, code)
	}
	st, err := f.status()
	if err != nil || st.Leader != l.name || st.Node != f.name {
		t.Errorf("%s's /cluster, which the console shows: %+v %v", f.name, st, err)
	}
}

// checkSproutctl: sproutctl lists and clears a tube through a
// follower's --api.
func checkSproutctl(t *testing.T, c *testCluster, f *testMember) {
	bin := filepath.Join(t.TempDir(), "sproutctl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/sproutmq/sprout/cmd/sproutctl").CombinedOutput(); err != nil {
		t.Fatalf("building sproutctl: %v\n%s", err, out)
	}
	api := apiClient{t: t, bearer: clusterToken}
	api.ok(f, http.StatusCreated, "POST", "/api/v1/tubes/ctl/jobs", map[string]any{"body": "listed by sproutctl"})
	run := func(args ...string) string {
		cmd := exec.CommandContext(ctx, bin, append([]string{"-s", f.proc.Addr(), "--api", "http://" + f.httpAddr}, args...)...)
		cmd.Env = append(cmd.Environ(), "SPROUT_ADMIN_TOKEN="+clusterToken)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sproutctl %s against %s: %v\n%s", strings.Join(args, " "), f.name, err, out)
		}
		return string(out)
	}
	if out := run("jobs", "ctl"); !strings.Contains(out, "listed by sproutctl") {
		t.Errorf("sproutctl jobs through %s:\n%s", f.name, out)
	}
	run("clear", "ctl", "--state", "all")
	c.agree("ready", 0)
}

// checkNeverAckedUncommitted: with both followers paused, nothing the
// leader does can commit: a put through its API is never answered 201.
// The leader loses its lease within an election timeout and answers 503
// as it rebuilds its store (the leadership's loss ends the wait); the cluster then
// elects again once the followers resume, and serves the API.
func checkNeverAckedUncommitted(t *testing.T, c *testCluster, l *testMember) {
	f := c.others(l)
	for _, m := range f {
		pause(t, m)
	}
	resumed := false
	resume := func() {
		if resumed {
			return
		}
		resumed = true
		for _, m := range f {
			_ = m.proc.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	req, _ := http.NewRequest("POST", "http://"+l.httpAddr+"/api/v1/tubes/uncommitted/jobs", strings.NewReader(`{"body": "x"}`))
	req.Header.Set("Authorization", "Bearer "+clusterToken)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	took := time.Since(start)
	switch {
	case err != nil:
		t.Errorf("a put on the leader with its followers paused: the connection ended after %v (%v), want 503",
			took.Round(time.Millisecond), err)
	default:
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("a put on the leader with its followers paused: %d after %v: %s", resp.StatusCode, took.Round(time.Millisecond), b)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("a put that cannot commit was answered %d %s, want 503", resp.StatusCode, b)
			st, err := l.status() // the followers are still paused
			t.Logf("the leader %s's view then: %+v %v", l.name, st, err)
		}
	}
	resume()
	nl := c.awaitServing(30 * time.Second)
	api := apiClient{t: t, bearer: clusterToken}
	testproc.WaitFor(t, 20*time.Second, "every member serving the API again", func() bool {
		for _, m := range c.up() {
			if r := api.do(m, "GET", "/api/v1/stats", nil); r.status != http.StatusOK {
				return false
			}
		}
		return true
	})
	for _, m := range c.others(nl) {
		api.ok(m, http.StatusCreated, "POST", "/api/v1/tubes/after/jobs", map[string]any{"body": "after " + m.name})
	}
	// The put that could not commit may or may not be kept by the new
	// leader; every member agrees either way.
	testproc.WaitFor(t, 10*time.Second, "every member's store agreeing with the new leader's", func() bool {
		want, err := nl.readyJobs()
		if err != nil || want < 2 {
			return false
		}
		for _, m := range c.up() {
			if n, err := m.readyJobs(); err != nil || n != want {
				return false
			}
		}
		return true
	})
}

// TestHTTPAddress: the --http address a member tells the others is its
// own, or, on every interface, its --cluster-peers host with that port.
func TestHTTPAddress(t *testing.T) {
	self := replication.Member{Name: "a", Addr: "sprout-0.sprout:7000"}
	for _, tc := range []struct{ flag, want string }{
		{"", ""},
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"sprout-0.sprout:8080", "sprout-0.sprout:8080"},
		{":8080", "sprout-0.sprout:8080"},
		{"0.0.0.0:8080", "sprout-0.sprout:8080"},
		{"[::]:8080", "sprout-0.sprout:8080"},
	} {
		if got := replication.WithHost(tc.flag, self.Addr); got != tc.want {
			t.Errorf("--http %q: %q, want %q", tc.flag, got, tc.want)
		}
	}
}

// pause stops m with SIGSTOP and waits until every one of its threads is
// stopped (/proc/PID/task/*/stat): kill returns before they are, and a
// stop that arrives while a process executes itself again can be lost,
// so it is sent again until it holds.
func pause(t *testing.T, m *testMember) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := m.proc.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for settle := time.Now().Add(200 * time.Millisecond); time.Now().Before(settle); time.Sleep(5 * time.Millisecond) {
			if allStopped(m.proc.PID()) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) does not stop", m.name, m.proc.PID())
		}
	}
}

// allStopped reports whether every thread of pid is stopped.
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			return false
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
