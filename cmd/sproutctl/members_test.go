package main

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// members against a cluster of one real member: list, add (with the
// flags to start the new member), one change at a time, remove, and the
// exit statuses of each refusal.
func TestMembers(t *testing.T) {
	_, base, peer := startMember(t, "--admin-token", testToken)
	api := []string{"--api", base, "--token", testToken}
	members := func(want int, args ...string) result {
		t.Helper()
		return must(t, want, append(append([]string{"members"}, args...), api...)...)
	}
	// The member serves once it has elected itself.
	deadline := time.Now().Add(20 * time.Second)
	for r := ctl(t, "", nil, append([]string{"members"}, api...)...); r.code != exitOK || !strings.Contains(r.stdout, "voter"); r = ctl(t, "", nil, append([]string{"members"}, api...)...) {
		if time.Now().After(deadline) {
			t.Fatalf("the member does not list itself as a voter: %v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}

	r := members(exitOK, "add", "b", "127.0.0.1:1")
	for _, want := range []string{"--cluster-join ", "--cluster-peers a=" + peer + ",b=127.0.0.1:1", "--node b"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("add printed %q, without %q", r.stdout, want)
		}
	}
	// The entry for a shared join list is b's join string under its name.
	join := regexp.MustCompile(`--cluster-join (\S+)`).FindStringSubmatch(r.stdout)
	if join == nil || !strings.Contains(r.stdout, "\n  b="+join[1]+"\n") {
		t.Errorf("add printed %q, without the list entry b=%v", r.stdout, join)
	}
	if r := members(exitOK, "list"); !strings.Contains(r.stdout, "learner") {
		t.Errorf("list after add: %q, want b as a learner", r.stdout)
	}
	members(exitFailure, "add", "c", "127.0.0.1:2") // b is a learner: 409
	members(exitNotFound, "remove", "nobody")       // 404
	members(exitUsage, "add", "c")                  // an argument missing
	members(exitUsage, "promote", "b")              // no such verb
	if r := members(exitFailure, "cordon", "a"); !strings.Contains(r.stderr, "several groups") {
		t.Errorf("cordon in a cluster of one group: %q, want the 409", r.stderr)
	}
	if r := members(exitOK, "remove", "b"); !strings.Contains(r.stdout, "removed b") {
		t.Errorf("remove printed %q", r.stdout)
	}
	if r := must(t, exitUsage, "members", "list"); !strings.Contains(r.stderr, "--api") {
		t.Errorf("members without --api: %q", r.stderr)
	}
	if r := must(t, exitFailure, "members", "remove", "a", "--api", base); !strings.Contains(r.stderr, "401") {
		t.Errorf("a change without the token: %q, want the 401", r.stderr)
	}
}

// members cordon and uncordon against a cluster of one real member
// formed with two groups: list shows the mark while it is set (the
// member leads still: no other may); an unknown member is refused.
func TestMembersCordon(t *testing.T) {
	_, base, _ := startMember(t, "--admin-token", testToken, "--cluster-groups", "2")
	api := []string{"--api", base, "--token", testToken}
	awaitTwoGroupsLed(t, api)
	members := func(want int, args ...string) result {
		t.Helper()
		return must(t, want, append(append([]string{"members"}, args...), api...)...)
	}
	if r := members(exitOK, "cordon", "a"); !strings.HasPrefix(r.stdout, "cordoned a: ") {
		t.Errorf("cordon printed %q", r.stdout)
	}
	if r := members(exitOK, "list"); !strings.Contains(r.stdout, "voter, cordoned") {
		t.Errorf("list of a member cordoned: %q", r.stdout)
	}
	if r := members(exitOK, "uncordon", "a"); !strings.HasPrefix(r.stdout, "a may lead again") {
		t.Errorf("uncordon printed %q", r.stdout)
	}
	if r := members(exitOK, "list"); strings.Contains(r.stdout, "cordoned") {
		t.Errorf("list after uncordon: %q", r.stdout)
	}
	members(exitNotFound, "cordon", "nobody")
	members(exitUsage, "cordon")
}

// startMember starts a cluster of one real member, a, with args, and
// returns it, its side port's base URL and its cluster address.
func startMember(t *testing.T, args ...string) (*testproc.Process, string, string) {
	t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	peer := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p, base := testproc.StartSprout(t, append([]string{"-b", t.TempDir(), "--node", "a", "--cluster-listen", peer,
		"--cluster-peers", "a=" + peer}, args...)...)
	return p, base, peer
}
