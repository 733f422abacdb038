package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// changeRequests are one of each request that changes something.
var changeRequests = []struct {
	method, path string
	body         any
}{
	{"POST", "/api/v1/tubes/default/jobs", map[string]any{"body": "x"}},
	{"POST", "/api/v1/tubes/default/kick", map[string]any{"bound": 1}},
	{"POST", "/api/v1/tubes/default/pause", map[string]any{"delay": 0}},
	{"POST", "/api/v1/tubes/default/clear", map[string]any{"state": "all"}},
	{"DELETE", "/api/v1/jobs/1", nil},
	{"POST", "/api/v1/jobs/1/kick", nil},
}

// TestReadOnly: with no token, figures and job metadata are shown, bodies
// are not, and every change (and a login) is 403, whatever credential the
// request carries; the probes and metrics stay open.
func TestReadOnly(t *testing.T) {
	s := start(t)
	bs := s.conn(t)
	id := mustDo(t, bs, "put 5 0 60 6", []byte("secret"), "INSERTED").N
	for _, bearer := range []string{"", "anything"} {
		api := s.client(t, bearer)
		api.ok(http.StatusOK, "GET", "/api/v1/stats", nil)
		api.ok(http.StatusOK, "GET", "/api/v1/tubes", nil)
		api.ok(http.StatusOK, "GET", "/api/v1/history", nil)
		job := api.ok(http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil)
		if _, shown := job["body"]; shown || num(t, job, "pri") != 5 || job["state"] != "ready" {
			t.Fatalf("job: %v", job)
		}
		list, _ := jobs(t, api.ok(http.StatusOK, "GET", "/api/v1/tubes/default/jobs?bodies=true", nil))
		if len(list) != 1 || list[0]["body"] != nil {
			t.Fatalf("listing: %v", list)
		}
		for _, r := range changeRequests {
			api.fails(http.StatusForbidden, r.method, r.path, r.body)
		}
		api.fails(http.StatusForbidden, "POST", "/api/v1/session", map[string]any{"token": "x"})
		ss := api.ok(http.StatusOK, "GET", "/api/v1/session", nil)
		if ss["token-required"] != false || ss["authenticated"] != false || ss["changes"] != false || ss["bodies"] != false {
			t.Fatalf("session: %v", ss)
		}
	}
	if got := statsInt(t, bs, "stats", "current-jobs-ready"); got != 1 {
		t.Fatalf("%d ready jobs after refused changes", got)
	}
	probesOpen(t, s)
}

// TestToken: with a token, a request needs it (bearer) or a session's
// cookie; a change by cookie also needs the session's CSRF token (403
// without it: the session is valid, the request is not allowed). The
// probes and metrics stay open.
func TestToken(t *testing.T) {
	s := start(t, "--admin-token", testToken)
	anon := s.client(t, "")
	anon.fails(http.StatusUnauthorized, "GET", "/api/v1/stats", nil)
	anon.fails(http.StatusUnauthorized, "GET", "/api/v1/tubes/default/jobs", nil)
	for _, r := range changeRequests {
		anon.fails(http.StatusUnauthorized, r.method, r.path, r.body)
	}
	if r := anon.do("GET", "/api/v1/stats", nil); r.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	wrong := s.client(t, testToken+"x")
	wrong.fails(http.StatusUnauthorized, "GET", "/api/v1/stats", nil)
	basic := s.client(t, "")
	basic.header = http.Header{"Authorization": {"Basic " + testToken}}
	basic.fails(http.StatusUnauthorized, "GET", "/api/v1/stats", nil)
	ss := anon.ok(http.StatusOK, "GET", "/api/v1/session", nil)
	if ss["token-required"] != true || ss["authenticated"] != false {
		t.Fatalf("session: %v", ss)
	}
	probesOpen(t, s)

	// Log in: a wrong token is 401; the right one sets the cookie.
	anon.fails(http.StatusUnauthorized, "POST", "/api/v1/session", map[string]any{"token": "nope"})
	anon.fails(http.StatusBadRequest, "POST", "/api/v1/session", map[string]any{})
	r := anon.do("POST", "/api/v1/session", map[string]any{"token": testToken})
	if r.status != http.StatusOK {
		t.Fatalf("login: %d %s", r.status, r.body)
	}
	login := r.object(t)
	csrf, _ := login["csrf-token"].(string)
	cookie := sessionCookie(t, r)
	if csrf == "" || login["authenticated"] != true || login["via"] != "session" || login["expires"] == nil {
		t.Fatalf("login: %v", login)
	}
	set := r.header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"} {
		if !strings.Contains(set, attr) {
			t.Errorf("cookie %q lacks %s", set, attr)
		}
	}

	// The cookie reads; a change needs the CSRF token too.
	sess := &client{t: t, base: s.base, cookie: cookie}
	sess.ok(http.StatusOK, "GET", "/api/v1/stats", nil)
	if got := sess.ok(http.StatusOK, "GET", "/api/v1/session", nil); got["csrf-token"] != csrf {
		t.Fatalf("session: %v", got)
	}
	sess.fails(http.StatusForbidden, "POST", "/api/v1/tubes/default/jobs", map[string]any{"body": "x"})
	sess.csrf = "wrong"
	sess.fails(http.StatusForbidden, "POST", "/api/v1/tubes/default/jobs", map[string]any{"body": "x"})
	sess.csrf = csrf
	id := num(t, sess.ok(http.StatusCreated, "POST", "/api/v1/tubes/default/jobs", map[string]any{"body": "x"}), "id")
	sess.ok(http.StatusOK, "DELETE", fmt.Sprintf("/api/v1/jobs/%d", id), nil)

	// A bearer needs no CSRF token.
	api := s.client(t, testToken)
	api.ok(http.StatusCreated, "POST", "/api/v1/tubes/default/jobs", map[string]any{"body": "y"})

	// A login form works too.
	form := url.Values{"token": {testToken}}
	resp, err := http.Post(s.base+"/api/v1/session", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("form login: %d", resp.StatusCode)
	}
	// A form over the login's limit is 413, as a JSON login's is.
	big := &client{t: t, base: s.base, header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}}
	big.fails(http.StatusRequestEntityTooLarge, "POST", "/api/v1/session", url.Values{"token": {strings.Repeat("x", 8<<10)}}.Encode())
	anon.fails(http.StatusRequestEntityTooLarge, "POST", "/api/v1/session", map[string]any{"token": strings.Repeat("x", 8<<10)})

	// Log out: the cookie is cleared and no longer works.
	r = sess.do("DELETE", "/api/v1/session", nil)
	if r.status != http.StatusNoContent || !strings.Contains(r.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("logout: %d %v", r.status, r.header)
	}
	sess.fails(http.StatusUnauthorized, "GET", "/api/v1/stats", nil)
	if got := sess.ok(http.StatusOK, "GET", "/api/v1/session", nil); got["authenticated"] != false {
		t.Fatalf("session after logout: %v", got)
	}

	out := s.proc.Output()
	if strings.Contains(out, testToken) {
		t.Fatalf("the server logged the token:\n%s", out)
	}
	if !strings.Contains(out, "authentication failed") {
		t.Errorf("failed attempts not logged:\n%s", out)
	}
}

// probesOpen checks that the metrics and probes answer without a token.
func probesOpen(t *testing.T, s *server) {
	t.Helper()
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		resp, err := http.Get(s.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
}

func sessionCookie(t *testing.T, r reply) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "sprout_session" {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", r.header)
	return nil
}

// TestRateLimit: after a burst of failed attempts from an address, every
// credential from it is 429 with Retry-After, the right token too, so
// that a right guess does not show; the failures are logged, sampled.
func TestRateLimit(t *testing.T) {
	s := start(t, "--admin-token", testToken)
	wrong := s.client(t, "guess")
	limited := false
	for i := range 30 {
		r := wrong.do("GET", "/api/v1/stats", nil)
		if r.status == http.StatusTooManyRequests {
			if i < 10 {
				t.Fatalf("limited after %d failures", i)
			}
			if r.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			limited = true
			break
		}
		if r.status != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d %s", i, r.status, r.body)
		}
	}
	if !limited {
		t.Fatal("30 failed attempts and no 429")
	}
	s.client(t, testToken).fails(http.StatusTooManyRequests, "GET", "/api/v1/stats", nil)
	s.client(t, "").fails(http.StatusTooManyRequests, "POST", "/api/v1/session", map[string]any{"token": testToken})
	// A request with no credential is not a guess: it is told it needs one.
	s.client(t, "").fails(http.StatusUnauthorized, "GET", "/api/v1/stats", nil)
	if n := strings.Count(s.proc.Output(), "authentication failed"); n < 1 || n > 2 {
		t.Errorf("%d failure lines logged, want 1 or 2 (sampled)", n)
	}
}
