package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sproutmq/sprout/internal/testproc"
)

// realAPI is a Sprout with its admin API on --http behind a token, seen
// through a proxy that records the requests sproutctl makes, so that the
// tests check both what the tool shows and what it asks for.
type realAPI struct {
	addr string // the protocol's address
	base string // the proxy's URL, for --api

	mu       sync.Mutex
	requests []string // guarded by mu: "METHOD path?query body"
}

const testToken = "s3cret-token-for-tests"

func startAPI(t *testing.T) *realAPI {
	t.Helper()
	p, sidePort := testproc.StartSprout(t, "--admin-token", testToken)
	a := &realAPI{addr: p.Addr()}
	target, _ := url.Parse(sidePort)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		a.mu.Lock()
		a.requests = append(a.requests, strings.TrimSpace(fmt.Sprintf("%s %s %s", r.Method, r.URL.RequestURI(), body)))
		a.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	a.base = srv.URL
	return a
}

func (a *realAPI) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.requests)
}

// fill puts, through the protocol: tube emails with seven ready jobs (the
// third long, the fifth binary) and one buried; tube a/b with one job;
// tube many with 1,005 jobs, more than two of sproutctl's pages. It
// returns the ids of emails' jobs, the buried one last, and a/b's.
func (a *realAPI) fill(t *testing.T) (emails []uint64, slashed uint64) {
	t.Helper()
	c := dial(t, a.addr)
	for i := range 7 {
		body := []byte(fmt.Sprintf("mail %d", i+1))
		switch i {
		case 2:
			body = []byte(strings.Repeat("a long line of text ", 10))
		case 4:
			body = []byte{0, 1, 2, 0xff, '\r', '\n'}
		}
		emails = append(emails, put(t, c, "emails", uint32(100+i), 0, 60, body))
	}
	buried := put(t, c, "emails", 5, 0, 60, []byte("buried"))
	bury(t, c, buried, 5)
	emails = append(emails, buried)
	slashed = put(t, c, "a/b", 0, 0, 60, []byte("slashed"))
	for range 1005 {
		put(t, c, "many", 0, 0, 60, []byte("x"))
	}
	return emails, slashed
}

// TestAPIJobs lists jobs through the admin API: pages, bodies, the
// token's sources, and the errors' exit statuses.
func TestAPIJobs(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	emails, slashed := a.fill(t)
	api := []string{"--api", a.base, "--token", testToken}

	r := must(t, exitOK, append(api, "jobs", "emails", "--limit", "0")...)
	for _, want := range []string{
		`^ID +STATE +PRI +AGE +DELAY +TTR +TIME-LEFT +RESERVES +SIZE +BODY$`,
		fmt.Sprintf(`^ *%d +ready +100 +\d+ +0 +60 +0 +0 +6 +mail 1$`, emails[0]),
		fmt.Sprintf(`^ *%d +ready .* 200 +a long line of text a long line of text…$`, emails[2]),
		fmt.Sprintf(`^ *%d +ready .* 6 +\(binary\)$`, emails[4]),
		fmt.Sprintf(`^ *%d +ready .* mail 7$`, emails[6]),
	} {
		if !regexpLine(r.stdout, want) {
			t.Errorf("jobs: no line matches %s", want)
		}
	}
	if n := strings.Count(r.stdout, "\n"); n != 8 {
		t.Errorf("jobs: %d lines, want a header and the 7 ready jobs", n)
	}

	r = must(t, exitOK, append(api, "jobs", "emails", "--limit", "4", "--json")...)
	var doc struct {
		Jobs []apiJob `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Jobs) != 4 || doc.Jobs[3].ID != emails[3] {
		t.Errorf("jobs --limit 4 --json: %+v", doc.Jobs)
	}
	if got := a.seen()[len(a.seen())-1]; got != "GET /api/v1/tubes/emails/jobs?limit=4&state=ready" {
		t.Errorf("jobs --limit 4 asked %q, want one page of 4", got)
	}
	if j := doc.Jobs[3]; j.Body != "mail 4" || j.BodyEncoding != "text" {
		t.Errorf("the fourth job's body: %q (%s), want mail 4 as text", j.Body, j.BodyEncoding)
	}

	// More jobs than a page: the tool follows the server's cursor.
	before := len(a.seen())
	r = must(t, exitOK, append(api, "jobs", "many", "--limit", "0")...)
	if n := strings.Count(r.stdout, "\n"); n != 1006 {
		t.Errorf("jobs many: %d lines, want a header and 1,005 jobs", n)
	}
	pages := a.seen()[before:]
	if len(pages) != 3 || pages[0] != "GET /api/v1/tubes/many/jobs?limit=500&state=ready" ||
		!strings.Contains(pages[1], "cursor=") || !strings.Contains(pages[2], "cursor=") {
		t.Errorf("jobs many asked for\n%s\nwant three pages, the last two by cursor", strings.Join(pages, "\n"))
	}

	r = must(t, exitOK, append(api, "jobs", "emails", "--state", "buried")...)
	if !regexpLine(r.stdout, fmt.Sprintf(`^ *%d +buried +5 .* buried$`, emails[7])) || strings.Contains(r.stdout, "ready") {
		t.Errorf("jobs --state buried: want only the buried job")
	}
	// A tube name with a slash is one path segment.
	r = must(t, exitOK, append(api, "jobs", "a/b")...)
	if !regexpLine(r.stdout, fmt.Sprintf(`^ *%d .* slashed$`, slashed)) || !slices.Contains(a.seen(), "GET /api/v1/tubes/a%2Fb/jobs?limit=50&state=ready") {
		t.Errorf("jobs a/b: want the job, asked for with the slash escaped")
	}

	// The token from a file, from the environment, and none.
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, exitOK, "--api", a.base, "--token-file", file, "jobs", "emails")
	if r := ctl(t, "", []string{"SPROUT_API=" + a.base, "SPROUT_ADMIN_TOKEN=" + testToken}, "jobs", "emails"); r.code != exitOK {
		t.Errorf("the API and the token from the environment: %v", r)
	}
	r = must(t, exitFailure, "--api", a.base, "--token", "wrong", "jobs", "emails")
	if !strings.Contains(r.stderr, "401 Unauthorized") || !strings.Contains(r.stderr, "(check the token") {
		t.Errorf("a wrong token: want the API's 401 and a hint")
	}
	// http:// is assumed; a tube that does not exist is exit 3.
	must(t, exitNotFound, "--api", strings.TrimPrefix(a.base, "http://"), "--token", testToken, "jobs", "nope")
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

// TestAPIClear clears tubes through the admin API; the protocol then
// sees the jobs gone, reserved ones kept.
func TestAPIClear(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	a.fill(t)
	c := dial(t, a.addr)
	if err := c.ExpectLine("watch emails", "WATCHING 2"); err != nil {
		t.Fatalf("watch: %v", err)
	}
	if r, err := c.Do("reserve-with-timeout 0", nil); err != nil || r.Kind != testproc.ReplyReserved {
		t.Fatalf("reserve: %v %q", err, r.Line)
	}
	api := []string{"--api", a.base, "--token", testToken, "-s", "127.0.0.1:1"} // no server: the API does it all

	r := must(t, exitOK, append(api, "clear", "emails", "--state", "buried")...)
	if r.stdout != "deleted 1 job (buried) from tube emails\n" {
		t.Errorf("clear --state buried: %q", r.stdout)
	}
	r = must(t, exitOK, append(api, "clear", "emails", "--state", "all")...)
	if r.stdout != "deleted 6 jobs (all) from tube emails\n" {
		t.Errorf("clear --state all: %q, want the 6 ready jobs not reserved", r.stdout)
	}
	if got := tubeCounts(t, c, "emails"); got != [4]int64{0, 1, 0, 0} {
		t.Errorf("after the clears the protocol sees %v, want only the reserved job", got)
	}
	must(t, exitNotFound, append(api, "clear", "emails", "--state", "all")...)
	must(t, exitNotFound, append(api, "clear", "nope", "--state", "ready")...)
	want := []string{
		`POST /api/v1/tubes/emails/clear {"state":"buried"}`,
		`POST /api/v1/tubes/emails/clear {"state":"all"}`,
		`POST /api/v1/tubes/emails/clear {"state":"all"}`,
		`POST /api/v1/tubes/nope/clear {"state":"ready"}`,
	}
	if got := a.seen(); !slices.Equal(got, want) {
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
