package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeAPI is a fake of the admin API's contract (issue 17), for the calls
// sproutctl makes: GET /api/v1/tubes/{name}/jobs and POST
// /api/v1/tubes/{name}/clear, behind a bearer token. It is no model of
// Sprout: these tests say that the client keeps to the contract, and must
// run again against the real API (internal/admin) once it is merged.
type fakeAPI struct {
	token string
	page  int // at most this many jobs a page, whatever limit asks

	mu       sync.Mutex
	tubes    map[string][]apiJob // guarded by mu
	requests []string            // guarded by mu: "METHOD path?query body"
}

func (f *fakeAPI) start(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/tubes/{name}/jobs", f.jobs)
	mux.HandleFunc("POST /api/v1/tubes/{name}/clear", f.clear)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			fail(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func fail(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": message})
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeAPI) record(r *http.Request, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, strings.TrimSpace(fmt.Sprintf("%s %s %s", r.Method, r.URL.RequestURI(), body)))
}

func (f *fakeAPI) jobs(w http.ResponseWriter, r *http.Request) {
	f.record(r, "")
	f.mu.Lock()
	defer f.mu.Unlock()
	all, ok := f.tubes[r.PathValue("name")]
	if !ok {
		fail(w, http.StatusNotFound, "no such tube")
		return
	}
	state := r.URL.Query().Get("state")
	if !slices.Contains([]string{"ready", "delayed", "reserved", "buried"}, state) {
		fail(w, http.StatusBadRequest, "bad state")
		return
	}
	limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if err != nil || limit < 1 {
		fail(w, http.StatusBadRequest, "bad limit")
		return
	}
	from := 0
	if c := r.URL.Query().Get("cursor"); c != "" {
		from, _ = strconv.Atoi(strings.TrimPrefix(c, "after-"))
	}
	var jobs []apiJob
	for _, j := range all {
		if j.State == state {
			jobs = append(jobs, j)
		}
	}
	jobs = jobs[min(from, len(jobs)):]
	var next any // an opaque string cursor, or null after the last page
	if n := min(limit, f.page); len(jobs) > n {
		jobs = jobs[:n]
		next = fmt.Sprintf("after-%d", from+n)
	}
	answer(w, map[string]any{"jobs": jobs, "next": next})
}

func (f *fakeAPI) clear(w http.ResponseWriter, r *http.Request) {
	var req struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	f.record(r, req.State)
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("name")
	all, ok := f.tubes[name]
	if !ok {
		fail(w, http.StatusNotFound, "no such tube")
		return
	}
	kept := slices.DeleteFunc(all, func(j apiJob) bool { return req.State == "all" || j.State == req.State })
	answer(w, map[string]int{"deleted": len(all) - len(kept)})
	f.tubes[name] = kept
}

func (f *fakeAPI) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func newFake() *fakeAPI {
	binary := []byte{0, 1, 2, 0xff, '\r', '\n'}
	f := &fakeAPI{token: "s3cret", page: 3, tubes: map[string][]apiJob{"a/b": {{ID: 99, Tube: "a/b", State: "ready", Body: "slashed", BodyEncoding: "text"}}}}
	var jobs []apiJob
	for i := range 7 {
		jobs = append(jobs, apiJob{ID: uint64(i + 1), Tube: "emails", State: "ready", Pri: uint32(100 + i), TTR: 60, Body: fmt.Sprintf("mail %d", i+1), BodyEncoding: "text"})
	}
	jobs[2].Body = strings.Repeat("a long line of text ", 10)
	jobs[4].Body, jobs[4].BodyEncoding = base64.StdEncoding.EncodeToString(binary), "base64"
	jobs = append(jobs, apiJob{ID: 8, Tube: "emails", State: "buried", Pri: 5, Body: "buried", BodyEncoding: "text"})
	f.tubes["emails"] = jobs
	f.tubes["empty"] = nil
	return f
}

// TestAPIJobs lists jobs through the fake admin API: pages, bodies, the
// token's sources, and the errors' exit statuses.
func TestAPIJobs(t *testing.T) {
	t.Parallel()
	f := newFake()
	base := f.start(t)
	api := []string{"--api", base, "--token", "s3cret"}

	r := must(t, exitOK, append(api, "jobs", "emails", "--limit", "0")...)
	for _, want := range []string{
		`^ID +STATE +PRI +AGE +DELAY +TTR +TIME-LEFT +RESERVES +SIZE +BODY$`,
		`^ *1 +ready +100 +0 +0 +60 +0 +0 +6 +mail 1$`,
		`^ *3 +ready .* 200 +a long line of text a long line of text…$`,
		`^ *5 +ready .* 6 +\(binary\)$`,
		`^ *7 +ready .* mail 7$`,
	} {
		if !regexpLine(r.stdout, want) {
			t.Errorf("jobs: no line matches %s", want)
		}
	}
	if n := strings.Count(r.stdout, "\n"); n != 8 {
		t.Errorf("jobs: %d lines, want a header and the 7 ready jobs", n)
	}
	want := []string{
		"GET /api/v1/tubes/emails/jobs?limit=500&state=ready",
		"GET /api/v1/tubes/emails/jobs?cursor=after-3&limit=500&state=ready",
		"GET /api/v1/tubes/emails/jobs?cursor=after-6&limit=500&state=ready",
	}
	if got := f.seen(); !slices.Equal(got, want) {
		t.Errorf("jobs asked for\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	r = must(t, exitOK, append(api, "jobs", "emails", "--limit", "4", "--json")...)
	var doc struct {
		Jobs []apiJob `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Jobs) != 4 || doc.Jobs[3].ID != 4 {
		t.Errorf("jobs --limit 4 --json: %+v", doc.Jobs)
	}
	if got := f.seen()[len(f.seen())-1]; got != "GET /api/v1/tubes/emails/jobs?cursor=after-3&limit=1&state=ready" {
		t.Errorf("the last page of --limit 4 asked %q, want a limit of 1", got)
	}

	r = must(t, exitOK, append(api, "jobs", "emails", "--state", "buried")...)
	if !regexpLine(r.stdout, `^ *8 +buried +5 .* buried$`) || strings.Contains(r.stdout, "ready") {
		t.Errorf("jobs --state buried: want only the buried job")
	}
	// A tube name with a slash is one path segment.
	r = must(t, exitOK, append(api, "jobs", "a/b")...)
	if !regexpLine(r.stdout, `^ *99 .* slashed$`) || !slices.Contains(f.seen(), "GET /api/v1/tubes/a%2Fb/jobs?limit=50&state=ready") {
		t.Errorf("jobs a/b: want the job, asked for with the slash escaped")
	}

	// The token from a file, from the environment, and none.
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, exitOK, "--api", base, "--token-file", file, "jobs", "emails")
	if r := ctl(t, "", []string{"SPROUT_API=" + base, "SPROUT_ADMIN_TOKEN=s3cret"}, "jobs", "emails"); r.code != exitOK {
		t.Errorf("the API and the token from the environment: %v", r)
	}
	r = must(t, exitFailure, "--api", base, "--token", "wrong", "jobs", "emails")
	if !strings.Contains(r.stderr, "401 Unauthorized: missing or wrong bearer token (check the token") {
		t.Errorf("a wrong token: want the API's message and a hint")
	}
	// http:// is assumed; a tube that does not exist is exit 3.
	must(t, exitNotFound, "--api", strings.TrimPrefix(base, "http://"), "--token", "s3cret", "jobs", "nope")
	r = must(t, exitUsage, "jobs", "emails")
	if !strings.Contains(r.stderr, "needs Sprout's admin API") {
		t.Errorf("jobs without --api: want it to say it needs the admin API")
	}
}

// TestAPINotThere points --api at a server without the admin API: its 404
// is no "not found" of the API's, and the message says what to check.
func TestAPINotThere(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	r := must(t, exitFailure, "--api", srv.URL, "clear", "emails", "--state", "all")
	if !strings.Contains(r.stderr, "404 Not Found: 404 page not found (is --api the --http address of a Sprout with the admin API?)") {
		t.Errorf("want the 404 and a hint")
	}
}

// TestAPIClear clears tubes through the fake admin API.
func TestAPIClear(t *testing.T) {
	t.Parallel()
	f := newFake()
	base := f.start(t)
	api := []string{"--api", base, "--token", "s3cret", "-s", "127.0.0.1:1"} // no server: the API does it all

	r := must(t, exitOK, append(api, "clear", "emails", "--state", "buried")...)
	if r.stdout != "deleted 1 job (buried) from tube emails\n" {
		t.Errorf("clear --state buried: %q", r.stdout)
	}
	r = must(t, exitOK, append(api, "clear", "emails", "--state", "all")...)
	if r.stdout != "deleted 7 jobs (all) from tube emails\n" {
		t.Errorf("clear --state all: %q", r.stdout)
	}
	must(t, exitNotFound, append(api, "clear", "emails", "--state", "all")...)
	must(t, exitNotFound, append(api, "clear", "nope", "--state", "ready")...)
	want := []string{
		"POST /api/v1/tubes/emails/clear buried",
		"POST /api/v1/tubes/emails/clear all",
		"POST /api/v1/tubes/emails/clear all",
		"POST /api/v1/tubes/nope/clear ready",
	}
	if got := f.seen(); !slices.Equal(got, want) {
		t.Errorf("clear asked for\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCursorOf(t *testing.T) {
	for raw, want := range map[string]string{`"abc"`: "abc", `42`: "42", `null`: "", ``: ""} {
		if got := cursorOf(json.RawMessage(raw)); got != want {
			t.Errorf("cursorOf(%s) = %q, want %q", raw, got, want)
		}
	}
}
