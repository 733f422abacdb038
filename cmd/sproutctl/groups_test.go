package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// groups against a cluster of one real member: group 0, led by it, with
// the job put into it, as a table and as JSON; without --api it is a
// usage error.
func TestGroups(t *testing.T) {
	p, base, _ := startMember(t)
	deadline := time.Now().Add(20 * time.Second)
	for r := ctl(t, "", nil, "groups", "--api", base); !strings.Contains(r.stdout, " a "); r = ctl(t, "", nil, "groups", "--api", base) {
		if time.Now().After(deadline) {
			t.Fatalf("group 0 has no leader: %v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(t, exitOK, "put", "work", "-s", p.Addr(), "--", "-")
	r := must(t, exitOK, "groups", "--api", base)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "GROUP LEADER REPLICAS TUBES JOBS" ||
		strings.Join(strings.Fields(lines[1]), " ") != "0 a a 2 1" {
		t.Errorf("groups printed %q", r.stdout)
	}
	var out struct {
		Groups []apiGroup `json:"groups"`
	}
	r = must(t, exitOK, "groups", "--json", "--api", base)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Groups) != 1 || out.Groups[0].Leader != "a" ||
		out.Groups[0].Jobs != 1 || strings.Join(out.Groups[0].Replicas, ",") != "a" {
		t.Errorf("groups --json printed %q (%v)", r.stdout, err)
	}
	if r := must(t, exitUsage, "groups"); !strings.Contains(r.stderr, "--api") {
		t.Errorf("groups without --api: %q", r.stderr)
	}
}

// groups move against a cluster of one real member formed with two
// groups: the refusals and their exit statuses (a move that goes through
// needs two members: internal/member's TestShardGroupsMoveReplica).
func TestGroupsMove(t *testing.T) {
	_, base, _ := startMember(t, "--admin-token", testToken, "--cluster-groups", "2")
	api := []string{"--api", base, "--token", testToken}
	groups := func(want int, args ...string) result {
		t.Helper()
		return must(t, want, append(append([]string{"groups"}, args...), api...)...)
	}
	awaitTwoGroupsLed(t, api)
	if r := groups(exitNotFound, "move", "1", "a", "b"); !strings.Contains(r.stderr, "not a member") {
		t.Errorf("a move to no member: %q", r.stderr)
	}
	if r := groups(exitNotFound, "move", "0", "a", "b"); !strings.Contains(r.stderr, "groups 1 to 1 move") {
		t.Errorf("a move of group 0: %q", r.stderr)
	}
	groups(exitNotFound, "move", "7", "a", "b")
	// A member added learns the groups and replicas to start with.
	if r := must(t, exitOK, append([]string{"members", "add", "b", "127.0.0.1:1"}, api...)...); !strings.Contains(r.stdout, " --cluster-groups 2 --cluster-replicas 3\n") {
		t.Errorf("members add printed %q, without the groups to start with", r.stdout)
	}
	groups(exitUsage, "move", "one", "a", "b")
	groups(exitUsage, "move", "1", "a")
	groups(exitUsage, "split", "1")
	if r := must(t, exitFailure, "groups", "move", "1", "a", "b", "--api", base); !strings.Contains(r.stderr, "401") {
		t.Errorf("a move without the token: %q, want the 401", r.stderr)
	}
}

// tubes move against a cluster of one real member formed with two groups
// (both on it): a tube with a job moves to the other group and back, the
// job still there; the refusals and their exit statuses.
func TestTubesMove(t *testing.T) {
	p, base, _ := startMember(t, "--admin-token", testToken, "--cluster-groups", "2")
	api := []string{"--api", base, "--token", testToken}
	awaitTwoGroupsLed(t, api)
	must(t, exitOK, "put", "work", "-s", p.Addr(), "--", "-")
	move := func(want int, g string) result {
		t.Helper()
		return must(t, want, append([]string{"tubes", "move", "work", "--group", g}, api...)...)
	}
	// The tube lives in one of the two groups: the move to it is refused.
	to, back := "1", "0"
	if r := ctl(t, "", nil, append([]string{"tubes", "move", "work", "--group", "1"}, api...)...); strings.Contains(r.stderr, "already") {
		to, back = "0", "1"
	} else if !strings.HasPrefix(r.stdout, "moved tube work from group 0 to group 1: 1 jobs") {
		t.Fatalf("tubes move printed %q %q", r.stdout, r.stderr)
	} else {
		move(exitOK, "0")
	}
	if r := move(exitOK, to); !strings.HasPrefix(r.stdout, fmt.Sprintf("moved tube work from group %s to group %s: 1 jobs", back, to)) {
		t.Errorf("tubes move printed %q", r.stdout)
	}
	if r := move(exitFailure, to); !strings.Contains(r.stderr, "already") {
		t.Errorf("a move to the tube's own group: %q", r.stderr)
	}
	move(exitOK, back)
	var tubes struct {
		Tubes []map[string]any `json:"tubes"`
	}
	r := must(t, exitOK, "tubes", "--json", "-s", p.Addr())
	if err := json.Unmarshal([]byte(r.stdout), &tubes); err != nil {
		t.Fatal(err)
	}
	ready := -1.0
	for _, tb := range tubes.Tubes {
		if tb["name"] == "work" {
			ready, _ = tb["current-jobs-ready"].(float64)
		}
	}
	if ready != 1 {
		t.Errorf("the tube after its moves: %s", r.stdout)
	}
	move(exitNotFound, "7")
	must(t, exitUsage, append([]string{"tubes", "move", "work"}, api...)...)
	must(t, exitUsage, append([]string{"tubes", "move"}, api...)...)
}

// tubes place against a cluster of one real member formed with two
// groups: a prefix placed in each group in turn takes the tube starting
// with it there, its job with it; the refusals and their exit statuses.
func TestTubesPlace(t *testing.T) {
	p, base, _ := startMember(t, "--admin-token", testToken, "--cluster-groups", "2")
	api := []string{"--api", base, "--token", testToken}
	awaitTwoGroupsLed(t, api)
	must(t, exitOK, "put", "img-a", "-s", p.Addr(), "--", "-")
	place := func(want int, g string) result {
		t.Helper()
		return must(t, want, append([]string{"tubes", "place", "img-", "--group", g}, api...)...)
	}
	// The tube lives in one of the groups: placed there, nothing moves;
	// placed in the other, it moves.
	moved := 0
	for _, g := range []string{"0", "1", "0"} {
		r := place(exitOK, g)
		if !strings.HasPrefix(r.stdout, "placed prefix img- in group "+g+": ") {
			t.Fatalf("tubes place printed %q", r.stdout)
		}
		if strings.Contains(r.stdout, "1 tubes moved (img-a), 1 jobs") {
			moved++
		}
	}
	if moved != 2 {
		t.Errorf("the tube moved %d times over three placements, want 2", moved)
	}
	if r := place(exitFailure, "0"); !strings.Contains(r.stderr, "already") {
		t.Errorf("a placement where the prefix is: %q", r.stderr)
	}
	r := must(t, exitOK, append([]string{"groups"}, api...)...)
	if !regexp.MustCompile(`\nPLACED +GROUP\nimg-\* +0\n`).MatchString(r.stdout) {
		t.Errorf("groups: %q", r.stdout)
	}
	var tubes struct {
		Tubes []map[string]any `json:"tubes"`
	}
	r = must(t, exitOK, "tubes", "--json", "-s", p.Addr())
	if err := json.Unmarshal([]byte(r.stdout), &tubes); err != nil {
		t.Fatal(err)
	}
	ready := -1.0
	for _, tb := range tubes.Tubes {
		if tb["name"] == "img-a" {
			ready, _ = tb["current-jobs-ready"].(float64)
		}
	}
	if ready != 1 {
		t.Errorf("the tube after its moves: %s", r.stdout)
	}
	place(exitNotFound, "7")
	must(t, exitUsage, append([]string{"tubes", "place", "img-"}, api...)...)
	must(t, exitUsage, append([]string{"tubes", "place", "img-", "--group", "1", "--unset"}, api...)...)
	// Undone: the tube goes back to its name's group (moved if that is 1).
	if r := must(t, exitOK, append([]string{"tubes", "place", "img-", "--unset"}, api...)...); !strings.HasPrefix(r.stdout, "unset prefix img-: ") {
		t.Errorf("tubes place --unset printed %q", r.stdout)
	}
	if r := must(t, exitFailure, append([]string{"tubes", "place", "img-", "--unset"}, api...)...); !strings.Contains(r.stderr, "not placed") {
		t.Errorf("undoing a placement that is not: %q", r.stderr)
	}
	if r := must(t, exitOK, append([]string{"groups"}, api...)...); strings.Contains(r.stdout, "img-*") {
		t.Errorf("groups after the undoing: %q", r.stdout)
	}
	r = must(t, exitOK, "tubes", "--json", "-s", p.Addr())
	if !strings.Contains(r.stdout, `"current-jobs-ready": 1`) {
		t.Errorf("the tube after the undoing: %s", r.stdout)
	}
}

// awaitTwoGroupsLed waits until sproutctl groups through api lists both
// groups of a one-member cluster (member a) led.
func awaitTwoGroupsLed(t *testing.T, api []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for r := ctl(t, "", nil, append([]string{"groups"}, api...)...); strings.Count(r.stdout, " a ") < 2; r = ctl(t, "", nil, append([]string{"groups"}, api...)...) {
		if time.Now().After(deadline) {
			t.Fatalf("the groups have no leader: %v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// groups grow against a cluster of one real member formed with two
// groups: it grows to four, the tubes' jobs all there after, and groups
// lists four; the refusals and their exit statuses.
func TestGroupsGrow(t *testing.T) {
	p, base, _ := startMember(t, "--admin-token", testToken, "--cluster-groups", "2")
	api := []string{"--api", base, "--token", testToken}
	awaitTwoGroupsLed(t, api)
	for i := range 8 {
		must(t, exitOK, "put", fmt.Sprintf("t%d", i), "-s", p.Addr(), "--", "-")
	}
	r := must(t, exitOK, append([]string{"groups", "grow", "4"}, api...)...)
	if !strings.HasPrefix(r.stdout, "grew the groups from 2 to 4: ") {
		t.Fatalf("groups grow printed %q", r.stdout)
	}
	r = must(t, exitOK, append([]string{"groups"}, api...)...)
	if led := regexp.MustCompile(`(?m)^ +[0-3]  a `).FindAllString(r.stdout, -1); len(led) != 4 {
		t.Errorf("groups after the growth: %q", r.stdout)
	}
	var tubes struct {
		Tubes []map[string]any `json:"tubes"`
	}
	r = must(t, exitOK, "tubes", "--json", "-s", p.Addr())
	if err := json.Unmarshal([]byte(r.stdout), &tubes); err != nil {
		t.Fatal(err)
	}
	ready := 0.0
	for _, tb := range tubes.Tubes {
		n, _ := tb["current-jobs-ready"].(float64)
		ready += n
	}
	if ready != 8 {
		t.Errorf("ready jobs after the growth: %v (%s)", ready, r.stdout)
	}
	if r := must(t, exitFailure, append([]string{"groups", "grow", "6"}, api...)...); !strings.Contains(r.stderr, "multiple") {
		t.Errorf("a growth of 4 to 6: %q", r.stderr)
	}
	must(t, exitUsage, append([]string{"groups", "grow", "x"}, api...)...)
}

// TestGroupsGrowHugeCount: a count past the groups a cluster may have
// reaches the member, which says why not. Its wait overflowed and had
// ended before the request went: "context deadline exceeded".
func TestGroupsGrowHugeCount(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"tube move: 4 groups grow to a multiple of 4, at most 256, not to 20000000"}` + "\n"))
	}))
	defer srv.Close()
	if d := growWait(20_000_000); d <= 0 {
		t.Errorf("growWait(20000000) = %v, want a positive bound", d)
	}
	r := ctl(t, "", nil, "groups", "grow", "20000000", "--api", srv.URL)
	if asked.Load() == 0 || !strings.Contains(r.stderr, "at most 256") {
		t.Errorf("groups grow 20000000: the member was asked %d times; stderr %q", asked.Load(), r.stderr)
	}
}
