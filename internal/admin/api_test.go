package admin_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
)

// TestEndpoints walks every endpoint with the token, and checks that what
// the API does the protocol sees, and the other way round.
func TestEndpoints(t *testing.T) {
	s := start(t, "--admin-token", testToken)
	api := s.client(t, testToken)
	bs := s.conn(t)

	// stats: the protocol's keys, typed.
	st := api.ok(http.StatusOK, "GET", "/api/v1/stats", nil)
	for _, key := range []string{"current-jobs-ready", "cmd-put", "cmd-pause-tube", "total-jobs", "max-job-size", "pid", "uptime", "binlog-max-size"} {
		num(t, st, key)
	}
	for _, key := range []string{"version", "id", "hostname", "os", "platform"} {
		if _, ok := st[key].(string); !ok {
			t.Errorf("stats %s: %v, want a string", key, st[key])
		}
	}
	if st["draining"] != false {
		t.Errorf("stats draining: %v, want false", st["draining"])
	}
	if _, err := st["rusage-utime"].(json.Number).Float64(); err != nil {
		t.Errorf("rusage-utime: %v", st["rusage-utime"])
	}
	putsBefore := num(t, st, "cmd-put")

	// A put through the API is a put the protocol reserves.
	put := api.ok(http.StatusCreated, "POST", "/api/v1/tubes/e2e/jobs",
		map[string]any{"body": "héllo <world>", "pri": 7, "ttr": 30})
	id := num(t, put, "id")
	mustDo(t, bs, "watch e2e", nil, "WATCHING")
	r := mustDo(t, bs, "reserve-with-timeout 0", nil, "RESERVED")
	if r.N != uint64(id) || string(r.Body) != "héllo <world>" {
		t.Fatalf("reserved %d %q, want %d", r.N, r.Body, id)
	}
	if got := statsInt(t, bs, "stats", "cmd-put"); got != putsBefore+1 {
		t.Errorf("cmd-put %d, want %d", got, putsBefore+1)
	}
	// A reserved job is listed, and is its worker's to delete.
	list := api.ok(http.StatusOK, "GET", "/api/v1/tubes/e2e/jobs?state=reserved", nil)
	js, next := jobs(t, list)
	if len(js) != 1 || num(t, js[0], "id") != id || js[0]["state"] != "reserved" || next != "" {
		t.Fatalf("reserved listing: %v", list)
	}
	api.fails(http.StatusConflict, "DELETE", fmt.Sprintf("/api/v1/jobs/%d", id), nil)
	api.fails(http.StatusConflict, "POST", fmt.Sprintf("/api/v1/jobs/%d/kick", id), nil)
	mustDo(t, bs, fmt.Sprintf("bury %d 9", id), nil, "BURIED")

	// GET job: the stats-job keys and the body.
	job := api.ok(http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil)
	for _, key := range []string{"id", "pri", "age", "delay", "ttr", "time-left", "file", "reserves", "timeouts", "releases", "buries", "kicks"} {
		num(t, job, key)
	}
	if job["tube"] != "e2e" || job["state"] != "buried" || num(t, job, "pri") != 9 || num(t, job, "buries") != 1 ||
		job["body"] != "héllo <world>" || job["body-encoding"] != "text" {
		t.Fatalf("job: %v", job)
	}
	// The body is escaped for HTML.
	if raw := api.do("GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil).body; bytes.Contains(raw, []byte("<world>")) {
		t.Errorf("body not escaped: %s", raw)
	}

	// A binary body round-trips as base64, through the protocol too.
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\r', '\n', 'x'}
	binID := num(t, api.ok(http.StatusCreated, "POST", "/api/v1/tubes/e2e/jobs",
		map[string]any{"body": base64.StdEncoding.EncodeToString(bin), "body-encoding": "base64", "delay": 3600}), "id")
	bj := api.ok(http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d", binID), nil)
	got, _ := base64.StdEncoding.DecodeString(bj["body"].(string))
	if bj["body-encoding"] != "base64" || !bytes.Equal(got, bin) || bj["state"] != "delayed" || num(t, bj, "delay") != 3600 {
		t.Fatalf("binary job: %v", bj)
	}
	if r := mustDo(t, bs, fmt.Sprintf("peek %d", binID), nil, "FOUND"); !bytes.Equal(r.Body, bin) {
		t.Fatalf("peek: %q, want %q", r.Body, bin)
	}

	// A job put over the protocol is seen by the API.
	mustDo(t, bs, "use e2e", nil, "USING")
	pid := mustDo(t, bs, "put 100 0 60 5", []byte("proto"), "INSERTED").N
	pj := api.ok(http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d", pid), nil)
	if pj["body"] != "proto" || pj["state"] != "ready" {
		t.Fatalf("protocol's job: %v", pj)
	}

	// Tubes.
	tubes := api.ok(http.StatusOK, "GET", "/api/v1/tubes", nil)["tubes"].([]any)
	var names []string
	for _, tb := range tubes {
		names = append(names, tb.(map[string]any)["name"].(string))
	}
	if !slices.Contains(names, "default") || !slices.Contains(names, "e2e") {
		t.Fatalf("tubes: %v", names)
	}
	tube := api.ok(http.StatusOK, "GET", "/api/v1/tubes/e2e", nil)
	if num(t, tube, "current-jobs-buried") != 1 || num(t, tube, "current-jobs-delayed") != 1 ||
		num(t, tube, "current-jobs-ready") != 1 || num(t, tube, "total-jobs") != 3 {
		t.Fatalf("tube: %v", tube)
	}

	// Kick one job by id, then the tube's delayed one by kick (no buried
	// left), counted as one kick.
	api.ok(http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%d/kick", id), nil)
	if got := statsInt(t, bs, fmt.Sprintf("stats-job %d", id), "kicks"); got != 1 {
		t.Errorf("kicks %d, want 1", got)
	}
	api.fails(http.StatusConflict, "POST", fmt.Sprintf("/api/v1/jobs/%d/kick", id), nil) // ready now
	kicksBefore := statsInt(t, bs, "stats", "cmd-kick")
	if k := api.ok(http.StatusOK, "POST", "/api/v1/tubes/e2e/kick", map[string]any{"bound": 10}); num(t, k, "kicked") != 1 {
		t.Fatalf("kick: %v", k)
	}
	if got := statsInt(t, bs, "stats", "cmd-kick"); got != kicksBefore+1 {
		t.Errorf("cmd-kick %d, want %d", got, kicksBefore+1)
	}

	// Pause, as pause-tube.
	if p := api.ok(http.StatusOK, "POST", "/api/v1/tubes/e2e/pause", map[string]any{"delay": 60}); num(t, p, "paused") != 60 {
		t.Fatalf("pause: %v", p)
	}
	if got := statsInt(t, bs, "stats-tube e2e", "pause"); got != 60 {
		t.Errorf("pause %d, want 60", got)
	}
	if got := statsInt(t, bs, "stats", "cmd-pause-tube"); got != 1 {
		t.Errorf("cmd-pause-tube %d, want 1", got)
	}
	api.ok(http.StatusOK, "POST", "/api/v1/tubes/e2e/pause", map[string]any{"delay": 0})

	// Delete one, then clear the rest: each delete counted.
	deletesBefore := statsInt(t, bs, "stats", "cmd-delete")
	if d := api.ok(http.StatusOK, "DELETE", fmt.Sprintf("/api/v1/jobs/%d", pid), nil); num(t, d, "deleted") != 1 {
		t.Fatalf("delete: %v", d)
	}
	api.fails(http.StatusNotFound, "DELETE", fmt.Sprintf("/api/v1/jobs/%d", pid), nil)
	for range 5 {
		mustDo(t, bs, "put 0 0 60 1", []byte("x"), "INSERTED")
	}
	mustDo(t, bs, "put 0 3600 60 1", []byte("d"), "INSERTED")
	res := mustDo(t, bs, "reserve-with-timeout 0", nil, "RESERVED")
	mustDo(t, bs, fmt.Sprintf("bury %d 0", res.N), nil, "BURIED")
	if c := api.ok(http.StatusOK, "POST", "/api/v1/tubes/e2e/clear", map[string]any{"state": "buried"}); num(t, c, "deleted") != 1 {
		t.Fatalf("clear buried: %v", c)
	}
	mustDo(t, bs, "reserve-with-timeout 0", nil, "RESERVED") // held through the clear
	c := api.ok(http.StatusOK, "POST", "/api/v1/tubes/e2e/clear", map[string]any{"state": "all"})
	// Ready: the two the kicks made ready and three of the five new ones
	// (one was buried and cleared, one is held); delayed: one.
	if num(t, c, "deleted") != 6 {
		t.Fatalf("clear all: %v", c)
	}
	if got := statsInt(t, bs, "stats-tube e2e", "current-jobs-reserved"); got != 1 {
		t.Errorf("reserved after the clear: %d, want 1", got)
	}
	// The deletes by id (the one of a job gone too, as the protocol counts
	// it), the clear of one and the clear of six.
	if got := statsInt(t, bs, "stats", "cmd-delete"); got != deletesBefore+1+1+1+6 {
		t.Errorf("cmd-delete %d, want %d", got, deletesBefore+9)
	}
	if got := statsInt(t, bs, "stats-tube e2e", "cmd-delete"); got != 8 {
		t.Errorf("the tube's cmd-delete %d, want 8", got)
	}

	// History: the server's and the tube's, in a chart's shape.
	for _, path := range []string{"/api/v1/history", "/api/v1/tubes/e2e/history"} {
		h := api.ok(http.StatusOK, "GET", path, nil)
		times := h["timestamps"].([]any)
		series := h["series"].(map[string]any)
		for _, name := range []string{"ready", "reserved", "delayed", "buried", "puts", "deletes"} {
			if len(series[name].([]any)) != len(times) {
				t.Errorf("%s %s: %d points, %d timestamps", path, name, len(series[name].([]any)), len(times))
			}
		}
		if num(t, h, "interval") != 5 {
			t.Errorf("%s: interval %v", path, h["interval"])
		}
	}

	// Session: a bearer is authenticated, with no session.
	ss := api.ok(http.StatusOK, "GET", "/api/v1/session", nil)
	if ss["authenticated"] != true || ss["via"] != "bearer" || ss["changes"] != true || ss["bodies"] != true || ss["token-required"] != true {
		t.Fatalf("session: %v", ss)
	}
	if out := s.proc.Output(); strings.Contains(out, testToken) {
		t.Fatalf("the server logged the token:\n%s", out)
	}
}

// TestErrors: every kind of bad request gets its status and a JSON error.
func TestErrors(t *testing.T) {
	s := start(t, "--admin-token", testToken, "-z", "100")
	api := s.client(t, testToken)
	bs := s.conn(t)
	mustDo(t, bs, "use t", nil, "USING")
	ready := mustDo(t, bs, "put 0 0 60 1", []byte("a"), "INSERTED").N
	mustDo(t, bs, "put 0 0 60 1", []byte("b"), "INSERTED")
	next := func(state string) string {
		_, c := jobs(t, api.ok(http.StatusOK, "GET", "/api/v1/tubes/t/jobs?limit=1&state="+state, nil))
		return c
	}
	readyCursor := next("ready")
	if readyCursor == "" {
		t.Fatal("no cursor after a page of one of two")
	}
	long := strings.Repeat("x", 201)
	for _, tc := range []struct {
		status       int
		method, path string
		body         any
	}{
		{400, "GET", "/api/v1/tubes/-bad", nil},
		{400, "GET", "/api/v1/tubes/" + long, nil},
		{400, "GET", "/api/v1/tubes/a%20b/jobs", nil},
		{400, "GET", "/api/v1/tubes/t/jobs?state=gone", nil},
		{400, "GET", "/api/v1/tubes/t/jobs?limit=0", nil},
		{400, "GET", "/api/v1/tubes/t/jobs?limit=10001", nil},
		{400, "GET", "/api/v1/tubes/t/jobs?limit=x", nil},
		{400, "GET", "/api/v1/tubes/t/jobs?cursor=nonsense", nil},
		{400, "GET", "/api/v1/tubes/t/jobs?state=buried&cursor=" + readyCursor, nil},
		{400, "GET", "/api/v1/tubes/t/jobs?bodies=maybe", nil},
		{400, "GET", "/api/v1/jobs/abc", nil},
		{400, "GET", "/api/v1/jobs/0", nil},
		{400, "GET", "/api/v1/jobs/18446744073709551616", nil},
		{400, "GET", "/api/v1/history?since=yesterday", nil},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"body": "x", "pri": -1}`},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"body": "x", "pri": 4294967296}`},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"body": "x", "delay": 1.5}`},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"body": "x", "priority": 1}`},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"pri": 1}`},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"body": "!!", "body-encoding": "base64"}`},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"body": "x", "body-encoding": "hex"}`},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"body": "x"`},
		{400, "POST", "/api/v1/tubes/t/jobs", `{"body": "x"} {}`},
		{400, "POST", "/api/v1/tubes/-t/jobs", `{"body": "x"}`},
		{400, "POST", "/api/v1/tubes/t/kick", `{}`},
		{400, "POST", "/api/v1/tubes/t/kick", `{"bound": -1}`},
		{400, "POST", "/api/v1/tubes/t/kick", `{"bound": 1, "extra": 2}`},
		{400, "POST", "/api/v1/tubes/t/pause", `{"delay": 4294967296}`},
		{400, "POST", "/api/v1/tubes/t/clear", `{}`},
		{400, "POST", "/api/v1/tubes/t/clear", `{"state": "reserved"}`},
		{400, "POST", "/api/v1/tubes/t/clear", `{"state": "everything"}`},
		{404, "GET", "/api/v1/tubes/nope", nil},
		{404, "GET", "/api/v1/tubes/nope/jobs", nil},
		{404, "GET", "/api/v1/tubes/nope/history", nil},
		{404, "POST", "/api/v1/tubes/nope/kick", `{"bound": 1}`},
		{404, "POST", "/api/v1/tubes/nope/pause", `{"delay": 1}`},
		{404, "POST", "/api/v1/tubes/nope/clear", `{"state": "all"}`},
		{404, "GET", "/api/v1/jobs/999999", nil},
		{404, "DELETE", "/api/v1/jobs/999999", nil},
		{404, "POST", "/api/v1/jobs/999999/kick", nil},
		{404, "GET", "/api/v1/nothing", nil},
		{404, "GET", "/api/v2/stats", nil},
		{405, "POST", "/api/v1/stats", nil},
		{405, "PUT", fmt.Sprintf("/api/v1/jobs/%d", ready), nil},
		{409, "POST", fmt.Sprintf("/api/v1/jobs/%d/kick", ready), nil},
		{413, "POST", "/api/v1/tubes/t/jobs", map[string]any{"body": long}},
		{413, "POST", "/api/v1/tubes/t/jobs", map[string]any{"body": base64.StdEncoding.EncodeToString([]byte(long)), "body-encoding": "base64"}},
		{413, "POST", "/api/v1/tubes/t/jobs", map[string]any{"body": strings.Repeat("x", 1<<20)}},
		{413, "POST", "/api/v1/tubes/t/kick", fmt.Sprintf(`{"bound": 1, "pad": %q}`, strings.Repeat("x", 8<<10))},
	} {
		t.Run(fmt.Sprintf("%d %s %s", tc.status, tc.method, tc.path), func(t *testing.T) {
			api.t = t
			api.fails(tc.status, tc.method, tc.path, tc.body)
		})
	}
	api.t = t
	if r := api.do("POST", "/api/v1/stats", nil); r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("405 Allow: %q", r.header.Get("Allow"))
	}
	// A body of exactly -z is taken.
	api.ok(http.StatusCreated, "POST", "/api/v1/tubes/t/jobs", map[string]any{"body": long[:100]})
	// A tube name with '/' travels as %2F; ".." as %2E%2E.
	for _, name := range []string{"a/b", "..", "(x);$+"} {
		mustDo(t, bs, "use "+name, nil, "USING")
		mustDo(t, bs, "put 0 0 60 1", []byte("n"), "INSERTED")
		path := "/api/v1/tubes/" + strings.NewReplacer("/", "%2F", ".", "%2E").Replace(name)
		if tb := api.ok(http.StatusOK, "GET", path, nil); tb["name"] != name {
			t.Errorf("%s: %v", path, tb)
		}
	}
	// While draining, a put is 503.
	if err := s.proc.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st := api.ok(http.StatusOK, "GET", "/api/v1/stats", nil); st["draining"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not draining after SIGUSR1")
		}
	}
	api.fails(http.StatusServiceUnavailable, "POST", "/api/v1/tubes/t/jobs", map[string]any{"body": "x"})
}

// TestPagingIsStable: paging through the API while jobs are put and
// deleted between pages lists every job that stayed exactly once, in
// (priority, id) order, and never one twice.
func TestPagingIsStable(t *testing.T) {
	s := start(t, "--admin-token", testToken)
	api := s.client(t, testToken)
	bs := s.conn(t)
	mustDo(t, bs, "use page", nil, "USING")
	type key struct{ pri, id int64 }
	var all []key
	put := func(pri int) int64 {
		id := int64(mustDo(t, bs, fmt.Sprintf("put %d 0 60 1", pri), []byte("p"), "INSERTED").N)
		all = append(all, key{int64(pri), id})
		return id
	}
	for i := range 250 {
		put((i * 7919) % 50)
	}
	stayed := map[int64]bool{}
	for _, k := range all {
		stayed[k.id] = true
	}
	seen := map[int64]int{}
	var listed []key
	cursor := ""
	for page := 0; ; page++ {
		path := "/api/v1/tubes/page/jobs?limit=40&bodies=false"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		js, next := jobs(t, api.ok(http.StatusOK, "GET", path, nil))
		for _, j := range js {
			k := key{num(t, j, "pri"), num(t, j, "id")}
			seen[k.id]++
			listed = append(listed, k)
		}
		if next == "" {
			break
		}
		cursor = next
		// Between pages: delete one job already listed and one not yet,
		// and put two, one at each end of the order.
		for _, victim := range []int64{listed[len(listed)/2].id, all[(page*37+11)%len(all)].id} {
			if stayed[victim] {
				mustDo(t, bs, fmt.Sprintf("delete %d", victim), nil, "DELETED")
				delete(stayed, victim)
			}
		}
		put(0)
		put(49)
	}
	for id := range stayed {
		if seen[id] != 1 {
			t.Errorf("job %d, there throughout, listed %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("job %d listed %d times", id, n)
		}
	}
	for i := 1; i < len(listed); i++ {
		a, b := listed[i-1], listed[i]
		if a.pri > b.pri || a.pri == b.pri && a.id > b.id {
			t.Fatalf("out of order: %v before %v", a, b)
		}
	}
}

// TestTooBigPutCounted: a put whose body is over -z (413) counts in
// cmd-put, as the protocol counts a put it answers JOB_TOO_BIG
// (beanstalkd 1.13 counts any put whose header parses); one refused for
// a bad field, as BAD_FORMAT is, does not, nor one too long to read, whose
// fields were never read.
func TestTooBigPutCounted(t *testing.T) {
	s := start(t, "--admin-token", testToken, "-z", "100")
	api := s.client(t, testToken)
	bs := s.conn(t)
	before := statsInt(t, bs, "stats", "cmd-put")
	mustDo(t, bs, "put 0 0 60 101", bytes.Repeat([]byte("x"), 101), "JOB_TOO_BIG")
	if got := statsInt(t, bs, "stats", "cmd-put"); got != before+1 {
		t.Fatalf("the protocol's too-big put: cmd-put %d, want %d", got, before+1)
	}
	long := strings.Repeat("x", 101)
	api.fails(http.StatusRequestEntityTooLarge, "POST", "/api/v1/tubes/t/jobs", map[string]any{"body": long})
	api.fails(http.StatusRequestEntityTooLarge, "POST", "/api/v1/tubes/t/jobs", map[string]any{"body": strings.Repeat("x", 1<<20)})
	api.fails(http.StatusBadRequest, "POST", "/api/v1/tubes/t/jobs", map[string]any{"body": long, "pri": -1})
	api.fails(http.StatusBadRequest, "POST", "/api/v1/tubes/t/jobs", `{"body": "x"`)
	if got := statsInt(t, bs, "stats", "cmd-put"); got != before+2 {
		t.Errorf("after a put whose body is over -z, one too long to read (413 both) and two 400: cmd-put %d, want %d (the first counted)", got, before+2)
	}
}

// TestHead: every endpoint that answers GET answers HEAD as net/http's
// convention has it: the same status and headers, and no body; with no
// credential, the same 401. (TestErrors: a 405 lists HEAD beside GET.)
func TestHead(t *testing.T) {
	s := start(t, "--admin-token", testToken)
	api := s.client(t, testToken)
	anon := s.client(t, "")
	id := num(t, api.ok(http.StatusCreated, "POST", "/api/v1/tubes/default/jobs", map[string]any{"body": "x"}), "id")
	for path, methods := range admin.Endpoints() {
		if !slices.Contains(methods, http.MethodGet) {
			continue
		}
		path = strings.NewReplacer("{name}", "default", "{id}", strconv.FormatInt(id, 10)).Replace(path)
		for _, c := range []*client{api, anon} {
			get, head := c.do("GET", path, nil), c.do("HEAD", path, nil)
			if head.status != get.status || len(head.body) != 0 ||
				head.header.Get("Content-Type") != get.header.Get("Content-Type") {
				t.Errorf("HEAD %s (bearer %q): %d %q %s, want GET's %d %q and no body",
					path, c.bearer, head.status, head.header.Get("Content-Type"), head.body, get.status, get.header.Get("Content-Type"))
			}
		}
	}
}
