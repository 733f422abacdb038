package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestAPIDotTubes: the tubes named "." and ".." are valid, and the admin
// API reaches them as %2E and %2E%2E (docs/admin-api.md; the console
// sends its users to sproutctl for them). sproutctl must list and clear
// their jobs, not those of another path the server's path cleaning makes
// of /api/v1/tubes/./jobs (/api/v1/tubes/jobs: tube "jobs") or
// /api/v1/tubes/../clear (/api/v1/clear).
func TestAPIDotTubes(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	c := dial(t, a.addr)
	dot := put(t, c, ".", 10, 0, 60, []byte("in dot"))
	dotdot := put(t, c, "..", 10, 0, 60, []byte("in dotdot"))
	put(t, c, "jobs", 10, 0, 60, []byte("in the tube named jobs"))
	api := []string{"--api", a.base, "--token", testToken, "-s", "127.0.0.1:1"}

	for _, tc := range []struct {
		tube string
		id   uint64
	}{{".", dot}, {"..", dotdot}} {
		r := ctl(t, "", nil, append(api, "jobs", tc.tube, "--json")...)
		var doc struct{ Jobs []apiJob }
		_ = json.Unmarshal([]byte(r.stdout), &doc)
		if r.code != exitOK || len(doc.Jobs) != 1 || doc.Jobs[0].ID != tc.id || doc.Jobs[0].Tube != tc.tube {
			t.Errorf("jobs %q: want its one job %d\n%v", tc.tube, tc.id, r)
		}
		r = ctl(t, "", nil, append(api, "clear", tc.tube, "--state", "ready")...)
		if r.code != exitOK || r.stdout != "deleted 1 job (ready) from tube "+tc.tube+"\n" {
			t.Errorf("clear %q --state ready: want its one job deleted\n%v", tc.tube, r)
		}
	}
	if got := tubeCounts(t, c, "jobs"); got != [4]int64{1, 0, 0, 0} {
		t.Errorf("tube jobs: %v, want its ready job untouched", got)
	}
}

// TestAPIReadsAreBounded: --timeout "bounds connecting and each reply"
// (docs/sproutctl.md). An --api that takes the connection and never
// answers must end a read (groups list, members list) after --timeout
// with exit 4, as jobs does; not hang.
func TestAPIReadsAreBounded(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	for _, args := range [][]string{{"jobs", "emails"}, {"groups"}, {"groups", "list", "--json"}, {"members"}} {
		ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
		start := time.Now()
		r := ctlContext(t, ctx, "", nil, append([]string{"--api", srv.URL, "--token", "x", "--timeout", "500ms"}, args...)...)
		took := time.Since(start)
		cancel()
		if took > 4*time.Second || r.code != exitUnreachable {
			t.Errorf("sproutctl %s against an API that never answers: exit %d after %v, want exit 4 within about --timeout (500ms)",
				strings.Join(args, " "), r.code, took.Round(time.Millisecond))
		}
	}
}

// TestAPIHiddenBodies: a Sprout without an admin token shows no bodies
// (its API leaves "body" out). jobs must not show such a job as an empty
// body of 0 bytes, and --json, "as the admin API has them", must not
// invent "body": "" and "body-encoding": "".
func TestAPIHiddenBodies(t *testing.T) {
	t.Parallel()
	p, base := testproc.StartSprout(t) // read-only: no --admin-token
	c := dial(t, p.Addr())
	put(t, c, "ro", 10, 0, 60, []byte("a body of 24 bytes, here"))

	r := must(t, exitOK, "--api", base, "jobs", "ro", "--json")
	var doc struct{ Jobs []map[string]any }
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Jobs) != 1 {
		t.Fatalf("jobs ro --json: %v\n%v", err, r)
	}
	for _, key := range []string{"body", "body-encoding"} {
		if v, ok := doc.Jobs[0][key]; ok {
			t.Errorf("jobs --json of a read-only API: %q is %q; the API sent none (the body is hidden, not empty)", key, v)
		}
	}

	r = must(t, exitOK, "--api", base, "jobs", "ro")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("jobs ro: want a header and one job\n%v", r)
	}
	head, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	for i, h := range head {
		if h == "SIZE" && i < len(row) && row[i] == "0" {
			t.Errorf("jobs ro: the job's SIZE shows 0 and its BODY nothing, but its body is 24 bytes, hidden by the API:\n%s", r.stdout)
		}
	}
}

// TestTimeoutZero: --timeout 0 is no bound a connection can keep (every
// read's deadline is now), so it must be refused as a usage error (exit
// 2), not reported as a server that cannot be reached (exit 4).
func TestTimeoutZero(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	r := ctl(t, "", nil, "-s", ln.Addr().String(), "--timeout", "0", "stats")
	if r.code != exitUsage {
		t.Errorf("--timeout 0: exit %d, want 2 (usage)\n%v", r.code, r)
	}
}

// TestBadTubeName: a tube name the protocol refuses is a bad argument,
// exit 2 ("usage: ... a bad argument"), as peek, kick, put and reserve
// answer it; clear (over the protocol or --api), pause and jobs answer
// exit 1 with the server's "bad command format" or the API's 400.
func TestBadTubeName(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	api := []string{"--api", a.base, "--token", testToken, "-s", "127.0.0.1:1"}
	must(t, exitUsage, "-s", a.addr, "peek", "bad name!") // as it should be
	must(t, exitUsage, "-s", a.addr, "clear", "bad name!", "--state", "ready")
	must(t, exitUsage, "-s", a.addr, "pause", "bad name!", "10")
	must(t, exitUsage, append(api, "jobs", "bad name!")...)
	must(t, exitUsage, append(api, "clear", "bad name!", "--state", "ready")...)
}

// TestTopCountsEveryReserve: top's "reserve" a second is the workers'
// reserves. go-beanstalk (which sproutctl itself uses) and most clients
// reserve with reserve-with-timeout, which stats counts apart as
// cmd-reserve-with-timeout; top shows 0.0 for a server busy with them.
func TestTopCountsEveryReserve(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	server := func(reserves, withTimeout string) stats {
		return topStats("version", `"1.13"`, "uptime", "10", "cmd-put", "0", "cmd-delete", "0",
			"cmd-reserve", reserves, "cmd-reserve-with-timeout", withTimeout, "job-timeouts", "0", "total-connections", "1")
	}
	m := topModel{addr: "x", interval: time.Second}
	m = m.observe(snapshotMsg{snap: snapshot{at: t0, server: server("0", "0")}})
	m = m.observe(snapshotMsg{snap: snapshot{at: t0.Add(time.Second), server: server("5", "20")}})
	if v := m.View(); !strings.Contains(v, "reserve 25.0") {
		t.Errorf("5 reserves and 20 reserve-with-timeouts in a second: want reserve 25.0 a second in\n%s", v)
	}
}
