package console_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/console"
	"github.com/sproutmq/sprout/store"
)

// idleEngine is the admin API's engine, for the tests that need no
// protocol: nothing is counted and nothing drains.
type idleEngine struct{}

func (idleEngine) Stats() codec.ServerStats           { return codec.ServerStats{} }
func (idleEngine) Draining() bool                     { return false }
func (idleEngine) CountCommand(codec.Counter, uint64) {}

// handler is the console with the admin API beside it, as the side port
// mounts them, on a store in memory; token "" is read-only.
func handler(t *testing.T, token string) http.Handler {
	t.Helper()
	st := store.New(store.Options{})
	api := admin.New(admin.Config{Store: st, Engine: idleEngine{}, MaxJobSize: 1 << 16, Token: token})
	t.Cleanup(func() { api.Close(); st.Close() })
	return mount(t, api)
}

// mount serves api under /api/ and its console at /, as the side port
// does.
func mount(t *testing.T, api *admin.API) http.Handler {
	t.Helper()
	c, err := console.New(console.Config{Auth: api.Auth(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", api)
	mux.Handle("/", c)
	return mux
}

func get(h http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestSecurityHeaders: every answer of the console, page, static file or
// error, carries the headers doc.go lists.
func TestSecurityHeaders(t *testing.T) {
	h := handler(t, "")
	want := map[string]string{
		"Content-Security-Policy":    "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'",
		"X-Content-Type-Options":     "nosniff",
		"Referrer-Policy":            "no-referrer",
		"X-Frame-Options":            "DENY",
		"Cross-Origin-Opener-Policy": "same-origin",
	}
	for _, path := range []string{"/", "/tubes/x", "/jobs/1", "/jobs/x", "/nowhere", "/static/console.js", "/static/nothing.js"} {
		w := get(h, path)
		for k, v := range want {
			if got := w.Header().Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", path, k, got, v)
			}
		}
	}
}

// TestPages: each page renders in read-only mode with its data
// attributes and no inline script; unknown paths and bad ids are HTML
// 404s; changes are 405.
func TestPages(t *testing.T) {
	h := handler(t, "")
	inline := regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]|\son[a-z]+=|style=`)
	for _, c := range []struct {
		path, want string
		status     int
	}{
		{"/", `data-page="overview" data-mode="read-only"`, 200},
		{"/tubes/a%2Fb%2Bc", `data-page="tube" data-mode="read-only" data-tube="a/b&#43;c"`, 200},
		{"/jobs/42", `data-page="job" data-mode="read-only" data-job="42"`, 200},
		{"/jobs/0", "A job&#39;s id is a whole number from 1", 404},
		{"/tubes/x/y", "There is no page at /tubes/x/y.", 404},
	} {
		w := get(h, c.path)
		body := w.Body.String()
		if w.Code != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d, want %d with %s:\n%s", c.path, w.Code, c.status, c.want, body)
		}
		if got := w.Header().Get("Content-Type"); got != "text/html; charset=utf-8" {
			t.Errorf("%s: Content-Type %q", c.path, got)
		}
		if m := inline.FindString(body); m != "" {
			t.Errorf("%s: inline script or style %q", c.path, m)
		}
		if w.Code == 200 && !strings.Contains(body, "Read-only.") {
			t.Errorf("%s does not say it is read-only", c.path)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q", w.Code, w.Header().Get("Allow"))
	}
}

// TestLoginForm: with a token, a page without a session is the login form
// (401), and with the bearer token it is the page.
func TestLoginForm(t *testing.T) {
	h := handler(t, "tok")
	w := get(h, "/tubes/x")
	// Posted, even without the script: a token must never end up in an
	// address (history, logs).
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), `<form id="login-form" method="post" action="/api/v1/session">`) ||
		strings.Contains(w.Body.String(), `data-tube`) {
		t.Errorf("without a session: %d\n%s", w.Code, w.Body)
	}
	w = get(h, "/tubes/x", "Authorization", "Bearer tok")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `data-page="tube" data-mode="bearer"`) {
		t.Errorf("with the token: %d\n%s", w.Code, w.Body)
	}
}

// TestRetryAfter: a page refused 429 (too many failed attempts) says when
// to try again in the API's words: the same Retry-After as the API's
// answer to the same refusal, whole seconds rounded up, so a wait of
// exactly failEvery (6 s, on a clock that stands still) is 6, not 7.
func TestRetryAfter(t *testing.T) {
	st := store.New(store.Options{})
	now := time.Unix(1_800_000_000, 0)
	api := admin.New(admin.Config{Store: st, Engine: idleEngine{}, MaxJobSize: 1 << 16, Token: "tok",
		Now: func() time.Time { return now }})
	t.Cleanup(func() { api.Close(); st.Close() })
	h := mount(t, api)
	for range 10 {
		if w := get(h, "/api/v1/stats", "Authorization", "Bearer wrong"); w.Code != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d, want 401", w.Code)
		}
	}
	fromAPI := get(h, "/api/v1/stats", "Authorization", "Bearer wrong")
	page := get(h, "/", "Authorization", "Bearer wrong")
	if fromAPI.Code != http.StatusTooManyRequests || page.Code != http.StatusTooManyRequests {
		t.Fatalf("after 10 failures: the API %d, the page %d, want 429", fromAPI.Code, page.Code)
	}
	if a, p := fromAPI.Header().Get("Retry-After"), page.Header().Get("Retry-After"); a != "6" || p != a {
		t.Errorf("Retry-After: the API %q, the page %q, want 6 from both", a, p)
	}
}

// TestStatic: a static file asked for with its hash may be cached for a
// year, gzipped for a client that takes it; otherwise it is revalidated
// with its ETag.
func TestStatic(t *testing.T) {
	h := handler(t, "")
	page := get(h, "/").Body.String()
	src := regexp.MustCompile(`src="(/static/console\.js\?v=[0-9a-f]+)"`).FindStringSubmatch(page)
	if src == nil {
		t.Fatalf("no script in the page:\n%s", page)
	}
	plain := get(h, src[1])
	if plain.Code != 200 || plain.Header().Get("Cache-Control") != "public, max-age=31536000, immutable" ||
		plain.Header().Get("Content-Type") != "text/javascript; charset=utf-8" || plain.Header().Get("Content-Encoding") != "" {
		t.Fatalf("%s: %d %v", src[1], plain.Code, plain.Header())
	}
	zipped := get(h, src[1], "Accept-Encoding", "br, gzip")
	if zipped.Header().Get("Content-Encoding") != "gzip" || zipped.Body.Len() >= plain.Body.Len() {
		t.Fatalf("gzip: %v, %d bytes of %d", zipped.Header(), zipped.Body.Len(), plain.Body.Len())
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(unzipped, plain.Body.Bytes()) {
		t.Fatalf("the gzipped file is not the file: %v", err)
	}
	if w := get(h, src[1], "Accept-Encoding", "gzip;q=0"); w.Header().Get("Content-Encoding") != "" {
		t.Error("gzip sent to a client that refuses it")
	}
	stale := get(h, "/static/console.js?v=old")
	if stale.Header().Get("Cache-Control") != "no-cache" {
		t.Errorf("another version: Cache-Control %q", stale.Header().Get("Cache-Control"))
	}
	if w := get(h, "/static/console.js", "If-None-Match", stale.Header().Get("ETag")); w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("revalidation: %d, %d bytes", w.Code, w.Body.Len())
	}
	if w := get(h, "/static/vendor/uplot/LICENSE"); w.Code != 200 || !strings.Contains(w.Body.String(), "MIT") {
		t.Errorf("uPlot's licence: %d", w.Code)
	}
	if w := get(h, "/static/vendor/uplot/README.md"); w.Code != 404 {
		t.Errorf("uPlot's README is served: %d", w.Code)
	}
}
