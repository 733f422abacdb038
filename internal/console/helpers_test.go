package console_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sproutmq/sprout/internal/testproc"
)

// The browser tests drive Debian's chromium, headless, from Go: one
// browser per test binary, and a browser context of its own (cookies,
// cache) for each test, so that tests neither share a login nor a cache.

// requireBrowser is the variable that turns a missing chromium from a skip
// into a failure: make test sets it where .ci/test-setup installs chromium.
const requireBrowser = "SPROUT_REQUIRE_BROWSER"

// stepTimeout bounds one step of a test in the browser (a navigation, a
// wait for the page to show something).
const stepTimeout = 15 * time.Second

var browser struct {
	once   sync.Once
	ctx    context.Context // the browser's; tabs are made from it
	cancel func()          // ends the browser; TestMain calls it
	dir    string          // its user data directory
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	if browser.dir != "" {
		os.RemoveAll(browser.dir)
	}
	testproc.RemoveSproutBinary()
	os.Exit(code)
}

// chromiumPath is the browser to drive; a test without one skips, saying
// how to get it, unless SPROUT_REQUIRE_BROWSER=1 (make test as root with
// apt-get, as in CI), where it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err == nil {
		return path
	}
	msg := "no chromium on PATH: the console's browser tests need Debian's chromium " +
		"(.ci/test-setup installs it when run as root; or sudo apt-get install chromium)"
	if os.Getenv(requireBrowser) == "1" {
		t.Fatal(msg + "; " + requireBrowser + "=1 says it must be there")
	}
	t.Skip(msg)
	return ""
}

// startBrowser starts the shared browser once, with the flags that keep
// it from reaching out of the machine (see shared/reference/browser.md).
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath(t)
	browser.once.Do(func() {
		browser.dir, browser.err = os.MkdirTemp("", "sprout-chromium-")
		if browser.err != nil {
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.NoSandbox, // as root; harmless otherwise
			chromedp.DisableGPU,
			chromedp.UserDataDir(browser.dir),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.WindowSize(1280, 900),
		)
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelBrowser := chromedp.NewContext(alloc)
		browser.ctx = ctx
		browser.cancel = func() { cancelBrowser(); cancelAlloc() }
		// The first run starts the browser; it must not have a timeout.
		browser.err = chromedp.Do(ctx)
	})
	if browser.err != nil {
		t.Fatalf("starting chromium: %v", browser.err)
	}
	return browser.ctx
}

// tab is a browser tab, in a browser context of its own, on one server.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string // http://127.0.0.1:PORT

	mu       sync.Mutex
	problems []string // guarded by mu: script errors and CSP violations seen
}

// newTab opens a tab for base. When the test ends, the tab is closed and
// the test fails if the page threw an error or the browser refused
// something under the CSP.
func newTab(t *testing.T, base string) *tab {
	t.Helper()
	parent := startBrowser(t)
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithNewBrowserContext())
	b := &tab{t: t, ctx: ctx, base: base}
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatalf("opening a tab: %v", err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if b.isProblem(m) {
				b.mu.Lock()
				b.problems = append(b.problems, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Errorf("the browser reported: %s", p)
		}
	})
	return b
}

// isProblem: an uncaught error, or an error the browser logged, such as a
// CSP violation. An API answer that is not 2xx is logged by the browser
// too ("Failed to load resource"); the tests make those on purpose.
func (b *tab) isProblem(m chromedp.ConsoleMessage) bool {
	if m.IsException() {
		return true
	}
	if m.Type != "error" {
		return false
	}
	return !strings.Contains(m.Text, "Failed to load resource")
}

// do runs steps, each test step bounded by stepTimeout.
func (b *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("in the browser: %v", err)
	}
}

// open navigates to path and waits until its script has run its first
// round (the page's main element is there and no element is busy).
func (b *tab) open(path string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.base + path))
	b.waitFor(`document.readyState === "complete"`)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it holds. Errors in between
// (the page reloading after a login) count as not yet.
func (b *tab) waitFor(cond string) {
	b.t.Helper()
	deadline := time.Now().Add(stepTimeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			b.t.Fatalf("waited %v for %s (last error: %v); the page shows:\n%s", stepTimeout, cond, last, b.text())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// text is what the page shows, for failure messages.
func (b *tab) text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	return s
}

// click clicks the element that matches a CSS selector once it is shown
// and enabled. (Elements are found by script, not through chromedp's DOM
// cache, which can lag behind a page that has just been replaced.)
func (b *tab) click(css string) {
	b.t.Helper()
	el := `document.querySelector(` + js(css) + `)`
	b.waitFor(el + ` && ` + el + `.getClientRects().length > 0 && !` + el + `.disabled`)
	b.do(chromedp.Evaluate[chromedp.Void](el + `.click()`))
}

// typeInto focuses an input, empties it and types text into it with key
// events, as a person would.
func (b *tab) typeInto(css, text string) {
	b.t.Helper()
	el := `document.querySelector(` + js(css) + `)`
	b.waitFor(el)
	b.do(chromedp.Evaluate[chromedp.Void](`(e => { e.focus(); e.value = ""; e.dispatchEvent(new Event("input", {bubbles: true})); })(` + el + `)`))
	if text != "" {
		b.do(chromedp.KeyEvent(text))
	}
}

// setValue sets a select's (or an input's) value and says so to the page.
func (b *tab) setValue(css, value string) {
	b.t.Helper()
	el := `document.querySelector(` + js(css) + `)`
	b.waitFor(el)
	b.do(chromedp.Evaluate[chromedp.Void](`(e => { e.value = ` + js(value) + `; e.dispatchEvent(new Event("change", {bubbles: true})); })(` + el + `)`))
}

// login logs in with the form, at the overview, and waits for the overview.
func (b *tab) login(token string) {
	b.t.Helper()
	b.open("/")
	b.waitFor(`document.body.dataset.page === "login"`)
	b.typeInto("#login-token", token)
	b.click(`#login-form button[type="submit"]`)
	b.waitFor(`document.body.dataset.page === "overview" && document.body.dataset.mode === "session"`)
}

// js quotes s as a JavaScript string.
func js(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r < 0x20 || r == 0x2028 || r == 0x2029:
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// ---- The server ----

// testToken is the admin token of the servers that have one.
const testToken = "console-test-token-0123456789"

// server is a real sprout with its side port.
type server struct {
	t    *testing.T
	proc *testproc.Process
	base string // the side port: http://127.0.0.1:PORT
}

// startServer runs the sprout binary with --http on a free port, and args,
// for a browser test: without a browser to drive, the test skips (or
// fails) here, before anything is built or started.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	chromiumPath(t)
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := testproc.StartConfig(t, testproc.Config{
		Binary: testproc.SproutBinary(t),
		Args:   append([]string{"--http", addr, "--loops", "2"}, args...),
	})
	s := &server{t: t, proc: p, base: "http://" + addr}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if resp, err := http.Get(s.base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the side port does not answer")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

// conn is a protocol connection, closed when the test ends.
func (s *server) conn() *testproc.Conn {
	s.t.Helper()
	return testproc.DialTest(s.t, s.proc.Addr(), 5*time.Second)
}

// put puts n jobs with body into tube (pri and delay as given) and returns
// their ids.
func (s *server) put(c *testproc.Conn, tube string, n int, pri uint32, delay int, body func(i int) []byte) []uint64 {
	s.t.Helper()
	if err := c.ExpectLine("use "+tube, "USING "+tube); err != nil {
		s.t.Fatal(err)
	}
	ids := make([]uint64, n)
	for i := range ids {
		id, err := c.Put(pri, delay, 60, body(i))
		if err != nil {
			s.t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// tubeStats is stats-tube's figures.
func (s *server) tubeStats(c *testproc.Conn, tube string) map[string]string {
	s.t.Helper()
	st, err := c.Stats("stats-tube " + tube)
	if err != nil || st == nil {
		s.t.Fatalf("stats-tube %s: %v %v", tube, st, err)
	}
	return st
}

// jobState is stats-job's state of id, or "" when it does not exist.
func (s *server) jobState(c *testproc.Conn, id uint64) string {
	s.t.Helper()
	st, err := c.Stats(fmt.Sprintf("stats-job %d", id))
	if err != nil {
		s.t.Fatalf("stats-job %d: %v", id, err)
	}
	return st["state"] // "" for NOT_FOUND: st is nil
}

// text is a body of its index.
func text(format string) func(int) []byte {
	return func(i int) []byte { return fmt.Appendf(nil, format, i) }
}
