package admin_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// fakeCluster is a member whose view of the leader the test sets.
type fakeCluster struct {
	name string

	// asked counts the calls of Leader: a request that looks for the
	// leader, the history's sampler at each interval.
	asked atomic.Int64

	mu      sync.Mutex
	leader  admin.Leader  // guarded by mu
	changed chan struct{} // guarded by mu: closed by set
}

func newFakeCluster(name string, l admin.Leader) *fakeCluster {
	return &fakeCluster{name: name, leader: l, changed: make(chan struct{})}
}

func (c *fakeCluster) Name() string { return c.name }

func (c *fakeCluster) Leader() (admin.Leader, <-chan struct{}) {
	c.asked.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader, c.changed
}

func (c *fakeCluster) set(l admin.Leader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leader = l
	close(c.changed)
	c.changed = make(chan struct{})
}

// counting counts the requests h gets.
type counting struct {
	h http.Handler
	n atomic.Int64
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	c.h.ServeHTTP(w, r)
}

// clusterMember is an API in cluster mode, as cluster sees it, on a
// store of its own with a log behind a gate, served by httptest and
// counting its requests.
type clusterMember struct {
	cluster *fakeCluster
	gate    *gate
	store   *store.Store
	url     string // http://HOST:PORT
	hits    *counting
}

func startClusterMember(t *testing.T, c *fakeCluster) *clusterMember {
	t.Helper()
	m := &clusterMember{cluster: c}
	m.gate, m.store, m.url = inProcessWith(t, nil, func(cfg *admin.Config) {
		cfg.Cluster = c
		cfg.LeaderWait = 300 * time.Millisecond
	}, func(h http.Handler) http.Handler {
		m.hits = &counting{h: h}
		return m.hits
	})
	return m
}

// host is m's --http address.
func (m *clusterMember) host() string { return strings.TrimPrefix(m.url, "http://") }

// startPair starts m1, which leads and serves, and m2, which follows it.
func startPair(t *testing.T) (leader, follower *clusterMember) {
	t.Helper()
	leader = startClusterMember(t, newFakeCluster("m1", admin.Leader{Serving: true, Name: "m1"}))
	follower = startClusterMember(t, newFakeCluster("m2", admin.Leader{Name: "m1", HTTP: leader.host()}))
	return leader, follower
}

// TestClusterForwards: a follower forwards what it is asked to the
// leader, once it has checked the credentials itself: a bearer token or
// its own console session (unknown to the leader) with its CSRF token.
// Nothing reaches the follower's own store.
func TestClusterForwards(t *testing.T) {
	leader, follower := startPair(t)
	bearer := &client{t: t, base: follower.url, bearer: testToken}
	id := num(t, bearer.ok(http.StatusCreated, "POST", "/api/v1/tubes/fw/jobs", map[string]any{"body": "through m2"}), "id")
	if ts, ok := leader.store.TubeStats([]byte("fw")); !ok || ts.Ready != 1 {
		t.Fatalf("the leader's store: %+v", ts)
	}
	if _, ok := follower.store.TubeStats([]byte("fw")); ok {
		t.Fatal("the follower's own store was changed")
	}
	job := bearer.ok(http.StatusOK, "GET", "/api/v1/jobs/"+strconv.FormatInt(id, 10), nil)
	if job["body"] != "through m2" {
		t.Fatalf("the job read through the follower: %v", job)
	}

	// A session opened on the follower works through it.
	sess := &client{t: t, base: follower.url}
	login := sess.do("POST", "/api/v1/session", map[string]any{"token": testToken})
	if login.status != http.StatusOK {
		t.Fatalf("login on the follower: %d %s", login.status, login.body)
	}
	for _, c := range (&http.Response{Header: login.header}).Cookies() {
		if c.Name == admin.SessionCookie {
			sess.cookie = c
		}
	}
	csrf, _ := login.object(t)["csrf-token"].(string)
	if sess.cookie == nil || csrf == "" {
		t.Fatalf("login: %s %v", login.body, login.header)
	}
	before := leader.hits.n.Load()
	sess.fails(http.StatusForbidden, "POST", "/api/v1/tubes/fw/kick", map[string]any{"bound": 1}) // no CSRF token
	sess.csrf = csrf
	if got := num(t, sess.ok(http.StatusOK, "POST", "/api/v1/tubes/fw/clear", map[string]any{"state": "all"}), "deleted"); got != 1 {
		t.Fatalf("clear through the follower deleted %d", got)
	}
	if ts, _ := leader.store.TubeStats([]byte("fw")); ts.Ready != 0 {
		t.Fatalf("the leader's store after the clear: %+v", ts)
	}
	// The rules are the follower's, and what they refuse never reaches the leader.
	(&client{t: t, base: follower.url}).fails(http.StatusUnauthorized, "GET", "/api/v1/tubes", nil)
	(&client{t: t, base: follower.url, bearer: "wrong"}).fails(http.StatusUnauthorized, "GET", "/api/v1/tubes", nil)
	if got := leader.hits.n.Load() - before; got != 1 {
		t.Errorf("the leader got %d requests; want 1, the clear", got)
	}
	// The session is the follower's own: the leader does not know it.
	(&client{t: t, base: leader.url, cookie: sess.cookie, csrf: csrf}).fails(http.StatusUnauthorized, "GET", "/api/v1/tubes", nil)
}

// TestClusterNoLeader: with no leader known, a request waits for one: it
// is served once one is, or answered 503 after LeaderWait. A request
// forwarded to a member that does not serve is never forwarded again.
func TestClusterNoLeader(t *testing.T) {
	leader, follower := startPair(t)
	follower.cluster.set(admin.Leader{})
	c := &client{t: t, base: follower.url, bearer: testToken}
	msg := c.fails(http.StatusServiceUnavailable, "GET", "/api/v1/stats", nil)
	if !strings.Contains(msg, "no leader") {
		t.Errorf("503 says %q", msg)
	}

	done := make(chan reply, 1)
	asked := follower.cluster.asked.Load()
	go func() { done <- c.do("GET", "/api/v1/tubes", nil) }()
	// A leader becomes known once the request has looked for one and
	// waits on the change.
	testproc.WaitFor(t, 5*time.Second, "the request looking for a leader", func() bool {
		return follower.cluster.asked.Load() > asked
	})
	follower.cluster.set(admin.Leader{Name: "m1", HTTP: leader.host()})
	if r := <-done; r.status != http.StatusOK {
		t.Errorf("a request that waited for the leader: %d %s", r.status, r.body)
	}

	// m1 thinks m2 leads, and m2 that m1 does: a forwarded request stops at m1.
	leader.cluster.set(admin.Leader{Name: "m2", HTTP: follower.host()})
	before := follower.hits.n.Load()
	msg = c.fails(http.StatusServiceUnavailable, "GET", "/api/v1/stats", nil)
	if !strings.Contains(msg, "forwarded") || follower.hits.n.Load()-before != 1 {
		t.Errorf("a request between two stale views: %q, %d requests to m2", msg, follower.hits.n.Load()-before)
	}
}

// TestClusterLeadershipLost: a change waiting to be committed when its
// member stops serving is answered 503, never a success, whether it was
// asked of the leader or through a follower.
func TestClusterLeadershipLost(t *testing.T) {
	for _, through := range []string{"leader", "follower"} {
		t.Run(through, func(t *testing.T) {
			leader, follower := startPair(t)
			base := leader.url
			if through == "follower" {
				base = follower.url
			}
			leader.gate.shut()
			answer := make(chan reply, 1)
			go func() {
				answer <- (&client{t: t, base: base, bearer: testToken}).do("POST", "/api/v1/tubes/lost/jobs", map[string]any{"body": "x"})
			}()
			testproc.WaitFor(t, 5*time.Second, "the put made on the leader", func() bool {
				ts, ok := leader.store.TubeStats([]byte("lost"))
				return ok && ts.Ready == 1
			})
			select {
			case r := <-answer:
				t.Fatalf("answered before committed: %d %s", r.status, r.body)
			default:
			}
			leader.cluster.set(admin.Leader{Name: "m2"})
			select {
			case r := <-answer:
				if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "lost the leadership") {
					t.Fatalf("after the leadership was lost: %d %s", r.status, r.body)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no answer after the leadership was lost")
			}
		})
	}
}

// TestClusterHistory: a member samples its history only while it serves:
// a new leader's history starts at its election.
func TestClusterHistory(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	c := newFakeCluster("m1", admin.Leader{Name: "m2", HTTP: "127.0.0.1:1"})
	m := &clusterMember{cluster: c}
	_, _, m.url = inProcessWith(t, nil, func(cfg *admin.Config) {
		cfg.Cluster = c
		cfg.History = admin.HistoryConfig{Interval: 5 * time.Millisecond, Window: time.Second}
		cfg.Now = func() time.Time { return time.Unix(clock.Load(), 0) }
	}, nil)
	// Some intervals pass while it follows (the sampler asks who leads at
	// each); none is sampled.
	asked := c.asked.Load()
	testproc.WaitFor(t, 5*time.Second, "three intervals while following", func() bool {
		return c.asked.Load() >= asked+3
	})
	elected := clock.Add(3600)
	c.set(admin.Leader{Serving: true, Name: "m1"})
	api := &client{t: t, base: m.url, bearer: testToken}
	var stamps []any
	testproc.WaitFor(t, 5*time.Second, "a sample once serving", func() bool {
		stamps, _ = api.ok(http.StatusOK, "GET", "/api/v1/history", nil)["timestamps"].([]any)
		return len(stamps) > 0
	})
	for _, s := range stamps {
		if at, err := s.(json.Number).Int64(); err != nil || at < elected {
			t.Fatalf("a sample at %v, before the member served at %d: %v", s, elected, stamps)
		}
	}
}

// TestClusterLeaderChangesWhileForwarded: a request forwarded to a
// leader that does not answer (paused, cut off) is given up with 503 as
// soon as the follower sees another leader, or none.
func TestClusterLeaderChangesWhileForwarded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() { // accepts, reads, never answers
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = nc.Close() })
			go func() { _, _ = io.Copy(io.Discard, nc) }()
		}
	}()
	follower := startClusterMember(t, newFakeCluster("m2", admin.Leader{Name: "m1", HTTP: ln.Addr().String()}))
	answer := make(chan reply, 1)
	go func() {
		answer <- (&client{t: t, base: follower.url, bearer: testToken}).do("POST", "/api/v1/tubes/x/jobs", map[string]any{"body": "x"})
	}()
	select {
	case r := <-answer:
		t.Fatalf("answered while the leader is silent: %d %s", r.status, r.body)
	case <-time.After(100 * time.Millisecond):
	}
	follower.cluster.set(admin.Leader{})
	select {
	case r := <-answer:
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "changed before it answered") {
			t.Fatalf("once the leader changed: %d %s", r.status, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting for a leader that changed")
	}
}

// TestClusterLeaderUnreachable: a leader whose --http refuses the
// connection is 503, saying nothing was sent.
func TestClusterLeaderUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	follower := startClusterMember(t, newFakeCluster("m2", admin.Leader{Name: "m1", HTTP: addr}))
	c := &client{t: t, base: follower.url, bearer: testToken}
	if msg := c.fails(http.StatusServiceUnavailable, "POST", "/api/v1/tubes/x/jobs", map[string]any{"body": "x"}); !strings.Contains(msg, "nothing was sent") {
		t.Errorf("503 says %q", msg)
	}
}
