package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/store"
)

// fakeGroups are two shard groups: tubes named "one..." and ids of prefix
// 1 are group 1's, everything else group 0's. Each member serves the
// groups whose store it has; the others it forwards to leaders.
type fakeGroups struct {
	mu      sync.Mutex
	stores  map[uint16]*store.Store  // served here
	leaders map[uint16]*admin.Leader // elsewhere: name and --http
	waiting int64
	frozen  map[string]bool // tubes a move has frozen, in any group
}

func (f *fakeGroups) Count() int { return 2 }

func (f *fakeGroups) OfTube(name string) uint16 {
	if strings.HasPrefix(name, "one") {
		return 1
	}
	return 0
}

func (f *fakeGroups) OfJob(id uint64) (uint16, bool) {
	g := id >> store.IDSeqBits
	return uint16(g), g < 2
}

func (f *fakeGroups) Leader(g uint16) (admin.Leader, *store.Store, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, func() { close(changed) })
	if st := f.stores[g]; st != nil {
		return admin.Leader{Serving: true, Name: "here"}, st, changed
	}
	if l := f.leaders[g]; l != nil {
		return *l, nil, changed
	}
	return admin.Leader{}, nil, changed
}

func (f *fakeGroups) Waiting() int64 { return f.waiting }

func (f *fakeGroups) Unfrozen(_ uint16, tube []byte, change func()) bool {
	f.mu.Lock()
	frozen := f.frozen[string(tube)]
	f.mu.Unlock()
	if frozen {
		return false
	}
	change()
	return true
}

// TestGroupsFrozenTube: while a move has frozen a tube, the API's changes
// of it (put, kick, pause, clear, and a delete or kick of one of its
// jobs) answer 503 with Retry-After and change nothing, since the move
// would not carry what they made; its reads and other tubes are served;
// once it thaws, its changes are made.
func TestGroupsFrozenTube(t *testing.T) {
	zero := store.New(store.Options{})
	one := store.New(store.Options{IDPrefix: 1})
	t.Cleanup(func() { zero.Close(); one.Close() })
	m := startGroupMember(t, "m1", zero, map[uint16]*store.Store{0: zero, 1: one})
	via := &client{t: t, base: m.url, bearer: testToken}
	ready := num(t, via.ok(http.StatusCreated, "POST", "/api/v1/tubes/one-f/jobs", map[string]any{"body": "r"}), "id")
	delayed := num(t, via.ok(http.StatusCreated, "POST", "/api/v1/tubes/one-f/jobs", map[string]any{"body": "d", "delay": 100}), "id")

	m.groups.mu.Lock()
	m.groups.frozen = map[string]bool{"one-f": true}
	m.groups.mu.Unlock()
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/api/v1/tubes/one-f/jobs", map[string]any{"body": "x"}},
		{"POST", "/api/v1/tubes/one-f/kick", map[string]any{"bound": 10}},
		{"POST", "/api/v1/tubes/one-f/pause", map[string]any{"delay": 100}},
		{"POST", "/api/v1/tubes/one-f/clear", map[string]any{"state": "all"}},
		{"DELETE", fmt.Sprintf("/api/v1/jobs/%d", ready), nil},
		{"POST", fmt.Sprintf("/api/v1/jobs/%d/kick", delayed), nil},
	} {
		r := via.do(c.method, c.path, c.body)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
			!strings.Contains(string(r.body), "moving to another group") {
			t.Fatalf("%s %s of a frozen tube: %d %s %v, want 503 with Retry-After", c.method, c.path, r.status, r.body, r.header)
		}
	}
	if ts, ok := one.TubeStats([]byte("one-f")); !ok || ts.Ready != 1 || ts.Delayed != 1 || ts.Pause != 0 || ts.TotalJobs != 2 {
		t.Fatalf("the frozen tube after its refused changes: %+v, want as it was", ts)
	}
	via.ok(http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d", ready), nil)
	via.ok(http.StatusCreated, "POST", "/api/v1/tubes/one-g/jobs", map[string]any{"body": "other"})

	m.groups.mu.Lock()
	m.groups.frozen = nil
	m.groups.mu.Unlock()
	via.ok(http.StatusOK, "DELETE", fmt.Sprintf("/api/v1/jobs/%d", ready), nil)
	via.ok(http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%d/kick", delayed), nil)
	via.ok(http.StatusCreated, "POST", "/api/v1/tubes/one-f/jobs", map[string]any{"body": "x"})
	if ts, _ := one.TubeStats([]byte("one-f")); ts.Ready != 2 || ts.TotalJobs != 3 {
		t.Fatalf("the tube once thawed: %+v, want 2 ready of 3 put", ts)
	}
}

// groupMember is one member's API with groups, on stores of its own.
type groupMember struct {
	groups *fakeGroups
	url    string
}

// startGroupMember starts a member named name whose group 0 store is
// st0 (Config.Store), serving the groups in served.
func startGroupMember(t *testing.T, name string, st0 *store.Store, served map[uint16]*store.Store) *groupMember {
	t.Helper()
	m := &groupMember{groups: &fakeGroups{stores: served, leaders: map[uint16]*admin.Leader{}}}
	srv := engine.New(engine.Config{Loops: 1, Version: "test"}, st0)
	api := admin.New(admin.Config{Store: st0, Engine: srv, MaxJobSize: 1000, Token: testToken, Logger: zerolog.Nop(),
		Cluster: newFakeCluster(name, admin.Leader{Name: name, Serving: served[0] != nil}),
		Groups:  m.groups, LeaderWait: 300 * time.Millisecond})
	hs := httptest.NewServer(api)
	t.Cleanup(func() { hs.Close(); api.Close() })
	m.url = hs.URL
	return m
}

// TestGroupsRoute: with two groups led by two members, every request
// reaches the group it concerns through either member: a put lands in
// its tube's group, with that group's id; a job is read and deleted
// through the member that does not lead its group; the fleet's stats
// and tubes are every group's, the default tube once; a group without
// a leader fails them with 503.
func TestGroupsRoute(t *testing.T) {
	zero := store.New(store.Options{})           // group 0, served by m1
	one := store.New(store.Options{IDPrefix: 1}) // group 1, served by m2
	m2zero := store.New(store.Options{})         // m2's group 0 replica, not served
	t.Cleanup(func() { zero.Close(); one.Close(); m2zero.Close() })
	m1 := startGroupMember(t, "m1", zero, map[uint16]*store.Store{0: zero})
	m2 := startGroupMember(t, "m2", m2zero, map[uint16]*store.Store{1: one})
	m1.groups.leaders[1] = &admin.Leader{Name: "m2", HTTP: strings.TrimPrefix(m2.url, "http://")}
	m2.groups.leaders[0] = &admin.Leader{Name: "m1", HTTP: strings.TrimPrefix(m1.url, "http://")}
	m1.groups.waiting = 3

	via1 := &client{t: t, base: m1.url, bearer: testToken}
	via2 := &client{t: t, base: m2.url, bearer: testToken}
	id := num(t, via1.ok(http.StatusCreated, "POST", "/api/v1/tubes/one-a/jobs", map[string]any{"body": "in one"}), "id")
	if g := uint64(id) >> store.IDSeqBits; g != 1 {
		t.Fatalf("a put into group 1's tube through m1 took id %d, of group %d", id, g)
	}
	if ts, ok := one.TubeStats([]byte("one-a")); !ok || ts.Ready != 1 {
		t.Fatalf("group 1's store after the put: %+v %v", ts, ok)
	}
	if _, ok := zero.TubeStats([]byte("one-a")); ok {
		t.Fatal("the put landed in group 0's store too")
	}
	num(t, via2.ok(http.StatusCreated, "POST", "/api/v1/tubes/zero-a/jobs", map[string]any{"body": "in zero"}), "id")
	num(t, via2.ok(http.StatusCreated, "POST", "/api/v1/tubes/zero-a/jobs", map[string]any{"body": "in zero", "delay": 100}), "id")
	if ts, ok := zero.TubeStats([]byte("zero-a")); !ok || ts.Ready != 1 || ts.Delayed != 1 {
		t.Fatalf("group 0's store after puts through m2: %+v %v", ts, ok)
	}
	if _, ok := m2zero.TubeStats([]byte("zero-a")); ok {
		t.Fatal("m2 served group 0's put on the replica it does not lead")
	}

	job := via1.ok(http.StatusOK, "GET", "/api/v1/jobs/"+strconv.FormatInt(id, 10), nil)
	if job["body"] != "in one" {
		t.Fatalf("group 1's job through m1: %v", job)
	}
	tube := via1.ok(http.StatusOK, "GET", "/api/v1/tubes/one-a", nil)
	if num(t, tube, "current-jobs-ready") != 1 {
		t.Fatalf("group 1's tube through m1: %v", tube)
	}

	for _, c := range []*client{via1, via2} {
		tubes := c.ok(http.StatusOK, "GET", "/api/v1/tubes", nil)["tubes"].([]any)
		var names []string
		for _, tb := range tubes {
			tb := tb.(map[string]any)
			names = append(names, fmt.Sprintf("%s@%v", tb["name"], tb["group"]))
		}
		if strings.Join(names, " ") != "default@0 zero-a@0 one-a@1" {
			t.Fatalf("the fleet's tubes, each with its group, through %s: %v", c.base, names)
		}
		st := c.ok(http.StatusOK, "GET", "/api/v1/stats", nil)
		if num(t, st, "current-jobs-ready") != 2 || num(t, st, "current-jobs-delayed") != 1 ||
			num(t, st, "total-jobs") != 3 || num(t, st, "current-tubes") != 3 {
			t.Fatalf("the fleet's stats through %s: %v", c.base, st)
		}
	}
	if st := via1.ok(http.StatusOK, "GET", "/api/v1/stats", nil); num(t, st, "current-waiting") != 3 {
		t.Fatalf("current-waiting is the member's own sessions': %v", st)
	}

	via1.ok(http.StatusOK, "DELETE", "/api/v1/jobs/"+strconv.FormatInt(id, 10), nil)
	if ts, _ := one.TubeStats([]byte("one-a")); ts.Ready != 0 {
		t.Fatalf("group 1's tube after a delete through m1: %+v", ts)
	}
	// An id of a prefix no group issues is group 0's to answer: 404.
	via2.ok(http.StatusNotFound, "GET", "/api/v1/jobs/"+strconv.FormatUint(5<<store.IDSeqBits|1, 10), nil)

	// Another member asking for one group's part names it; a group out
	// of range is refused.
	bad, _ := http.NewRequest("GET", m1.url+"/api/v1/stats", nil)
	bad.Header.Set("Authorization", "Bearer "+testToken)
	bad.Header.Set(admin.GroupHeader, "7")
	if resp, err := http.DefaultClient.Do(bad); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a part of group 7: %v %v", resp, err)
	}

	// Group 1 loses its leader: the fleet's figures are refused, not
	// summed without it (a HEAD of them too, as its GET); group 0's tubes
	// are served all the same.
	m1.groups.mu.Lock()
	delete(m1.groups.leaders, 1)
	m1.groups.mu.Unlock()
	via1.ok(http.StatusServiceUnavailable, "GET", "/api/v1/stats", nil)
	via1.ok(http.StatusServiceUnavailable, "GET", "/api/v1/tubes", nil)
	via1.ok(http.StatusServiceUnavailable, "HEAD", "/api/v1/stats", nil)
	via1.ok(http.StatusOK, "GET", "/api/v1/tubes/zero-a", nil)
}

// TestGroupsPartError: an error another member answers for its part of a
// fleet endpoint is relayed with its status, and reads like this
// member's own: "admin: " once, then which group's leader said what.
func TestGroupsPartError(t *testing.T) {
	zero := store.New(store.Options{})
	m2zero := store.New(store.Options{})
	t.Cleanup(func() { zero.Close(); m2zero.Close() })
	m1 := startGroupMember(t, "m1", zero, map[uint16]*store.Store{0: zero})
	// m1 takes m2 for group 1's leader; m2 leads no group and knows no
	// leader of group 1, so it refuses the part, 503.
	m2 := startGroupMember(t, "m2", m2zero, map[uint16]*store.Store{})
	m1.groups.leaders[1] = &admin.Leader{Name: "m2", HTTP: strings.TrimPrefix(m2.url, "http://")}

	via1 := &client{t: t, base: m1.url, bearer: testToken}
	msg := via1.fails(http.StatusServiceUnavailable, "GET", "/api/v1/stats", nil)
	if strings.Count(msg, "admin: ") != 1 || !strings.Contains(msg, "group 1's leader, m2: m2 was forwarded") {
		t.Errorf("the relayed error: %q, want admin: once, naming group 1's leader and what it said", msg)
	}
	// Its Retry-After, too: m2's own answer to the part says when to ask
	// again, and so must the relayed one.
	direct := (&client{t: t, base: m2.url, bearer: testToken, header: http.Header{admin.GroupHeader: {"1"}}}).do("GET", "/api/v1/stats", nil)
	relayed := via1.do("GET", "/api/v1/stats", nil)
	if want := direct.header.Get("Retry-After"); want == "" || relayed.header.Get("Retry-After") != want {
		t.Errorf("Retry-After: %q relayed, %q from the leader itself; want the leader's, and one", relayed.header.Get("Retry-After"), want)
	}
}
