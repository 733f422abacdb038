package console_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

var shots = flag.String("shots", "", "write the layout test's screenshots into this directory, to look at them")

// TestOverviewListsTubes: tubes made through the protocol are listed with
// their counts, a name that needs escaping links to its page, the list
// follows new tubes without a reload, and it filters and sorts.
func TestOverviewListsTubes(t *testing.T) {
	s := startServer(t, "--admin-token", testToken)
	c := s.conn()
	odd := "odd/name+x;$(y)"
	s.put(c, "alpha", 3, 1024, 0, text("alpha %d"))
	s.put(c, odd, 1, 1024, 0, text("odd %d"))
	s.put(c, "gamma", 2, 1024, 300, text("later %d"))

	b := newTab(t, s.base)
	b.login(testToken)
	cell := func(tube, col string) string {
		return `(() => { const a = [...document.querySelectorAll("#tubes tbody a")].find(a => a.textContent === ` + js(tube) + `);
			if (!a) return null; const i = [...document.querySelectorAll("#tubes thead th")].findIndex(th => th.dataset.sort === ` + js(col) + `);
			return a.closest("tr").cells[i].textContent; })()`
	}
	b.waitFor(cell("alpha", "current-jobs-ready") + ` === "3"`)
	b.waitFor(cell("gamma", "current-jobs-delayed") + ` === "2"`)
	b.waitFor(cell(odd, "current-jobs-ready") + ` === "1"`)
	href := eval[string](b, `[...document.querySelectorAll("#tubes tbody a")].find(a => a.textContent === `+js(odd)+`).getAttribute("href")`)
	if want := "/tubes/odd%2Fname%2Bx%3B%24(y)"; href != want {
		t.Errorf("link to %q: %q, want %q", odd, href, want)
	}

	// Live: a tube made now shows up without a reload.
	s.put(c, "epsilon", 4, 1024, 0, text("e %d"))
	b.waitFor(cell("epsilon", "current-jobs-ready") + ` === "4"`)

	names := `[...document.querySelectorAll("#tubes tbody tr")].map(r => r.cells[0].textContent).join(",")`
	b.typeInto("#filter", "ALP")
	b.waitFor(names + ` === "alpha"`)
	if q := eval[string](b, `location.search`); q != "?q=ALP" {
		t.Errorf("the filter is not kept in the address: %q", q)
	}
	b.typeInto("#filter", "")
	b.waitFor(names + ` === "alpha,default,epsilon,gamma,` + odd + `"`)
	b.click(`#tubes th[data-sort="current-jobs-ready"] button`) // numbers sort biggest first
	b.waitFor(names + `.startsWith("epsilon,alpha,` + odd + `")`)
	if sort := eval[string](b, `document.querySelector('#tubes th[data-sort="current-jobs-ready"]').getAttribute("aria-sort")`); sort != "descending" {
		t.Errorf("aria-sort = %q", sort)
	}

	// The escaped link reaches the tube's page.
	b.click(`#tubes a[href="` + href + `"]`)
	b.waitFor(`document.body.dataset.page === "tube" && document.getElementById("tube-name").textContent === ` + js(odd))
	b.waitFor(`document.querySelector("#figures .ready dd")?.textContent === "1"`)
	b.waitFor(`document.querySelectorAll("#jobs tbody tr").length === 1`)
}

// jobIDs is the ids of the listed jobs, in order.
const jobIDs = `[...document.querySelectorAll("#jobs tbody tr td:first-child a")].map(a => a.textContent.slice(1)).join(",")`

func joinIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}

// TestTubePaging: a tube's page lists its ready jobs in the protocol's
// order (priority, then id), a page at a time, forwards and back.
func TestTubePaging(t *testing.T) {
	s := startServer(t, "--admin-token", testToken)
	c := s.conn()
	type job struct {
		id  uint64
		pri uint32
	}
	var jobs []job
	for i := range 60 {
		pri := uint32(10 + i%3)
		ids := s.put(c, "pages", 1, pri, 0, text("page job %d"))
		jobs = append(jobs, job{ids[0], pri})
		_ = i
	}
	slices.SortFunc(jobs, func(a, b job) int {
		if a.pri != b.pri {
			return int(a.pri) - int(b.pri)
		}
		return int(a.id) - int(b.id)
	})
	want := make([]uint64, len(jobs))
	for i, j := range jobs {
		want[i] = j.id
	}

	b := newTab(t, s.base)
	b.login(testToken)
	b.open("/tubes/pages")
	b.waitFor(jobIDs + ` === "` + joinIDs(want[:25]) + `"`)
	b.waitFor(`document.getElementById("page-info").textContent === "Jobs 1–25 of 60"`)
	b.click("#page-next")
	b.waitFor(jobIDs + ` === "` + joinIDs(want[25:50]) + `"`)
	b.click("#page-next")
	b.waitFor(jobIDs + ` === "` + joinIDs(want[50:]) + `"`)
	b.waitFor(`document.getElementById("page-info").textContent === "Jobs 51–60 of 60" && document.getElementById("page-next").disabled`)
	b.click("#page-prev")
	b.waitFor(jobIDs + ` === "` + joinIDs(want[25:50]) + `"`)
	b.setValue("#page-limit", "50")
	b.waitFor(jobIDs + ` === "` + joinIDs(want[:50]) + `"`)
	if body := eval[string](b, `document.querySelector("#jobs tbody td.body").textContent`); !strings.HasPrefix(body, "page job ") {
		t.Errorf("body preview %q", body)
	}
}

// TestTubeActions: kick, delete, pause, clear and put from a tube's page
// change what the protocol then sees; destructive ones ask first, and a
// cancelled one changes nothing.
func TestTubeActions(t *testing.T) {
	s := startServer(t, "--admin-token", testToken)
	c := s.conn()
	ids := s.put(c, "acts", 5, 1024, 0, text("act %d"))
	if err := c.ExpectLine("watch acts", "WATCHING 2"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r, err := c.Do("reserve-with-timeout 0", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ExpectLine(fmt.Sprintf("bury %d 1024", r.N), "BURIED"); err != nil {
			t.Fatal(err)
		}
	}
	stat := func(key string) string { return s.tubeStats(c, "acts")[key] }
	if stat("current-jobs-buried") != "3" {
		t.Fatalf("set-up: %v", s.tubeStats(c, "acts"))
	}

	b := newTab(t, s.base)
	b.login(testToken)
	b.open("/tubes/acts")
	b.click(`#state-tabs button[data-state="buried"]`)
	b.waitFor(jobIDs + ` === "` + joinIDs(ids[:3]) + `"`)

	// Kick one, with a bound.
	b.typeInto("#kick-bound", "1")
	b.click(`#kick-form button[type="submit"]`)
	b.waitFor(`document.getElementById("status").textContent === "Kicked 1 job."`)
	if got := stat("current-jobs-buried") + "/" + stat("current-jobs-ready"); got != "2/3" {
		t.Errorf("after a kick of 1: buried/ready = %s, want 2/3", got)
	}
	b.waitFor(jobIDs + ` === "` + joinIDs(ids[1:3]) + `"`)

	// Delete a listed job: the dialog asks, Cancel has the focus, Escape
	// cancels; then confirmed, it is deleted.
	b.click(`#jobs tbody tr:first-child button[aria-label="Delete job ` + strconv.FormatUint(ids[1], 10) + `"]`)
	b.waitFor(`document.getElementById("confirm").open && document.activeElement.id === "confirm-cancel"`)
	b.do(chromedp.KeyEvent(kb.Escape))
	b.waitFor(`!document.getElementById("confirm").open`)
	if st := s.jobState(c, ids[1]); st != "buried" {
		t.Fatalf("job %d after a cancelled delete: %q", ids[1], st)
	}
	b.click(`#jobs tbody tr:first-child button[aria-label="Delete job ` + strconv.FormatUint(ids[1], 10) + `"]`)
	b.click("#confirm-ok")
	b.waitFor(`document.getElementById("status").textContent === "Deleted job ` + strconv.FormatUint(ids[1], 10) + `."`)
	if st := s.jobState(c, ids[1]); st != "" {
		t.Errorf("job %d after a delete: %q", ids[1], st)
	}

	// Pause.
	b.typeInto("#pause-delay", "120")
	b.click(`#pause-form button[type="submit"]`)
	b.waitFor(`document.getElementById("status").textContent === "Paused acts for 2 min."`)
	if st := s.tubeStats(c, "acts"); st["pause"] != "120" || st["pause-time-left"] == "0" {
		t.Errorf("after a pause: pause %s, left %s", st["pause"], st["pause-time-left"])
	}
	b.waitFor(`!document.getElementById("paused").hidden`)

	// Clear the buried jobs: cancelled by the button, then confirmed.
	b.setValue("#clear-state", "buried")
	b.click(`#clear-form button[type="submit"]`)
	b.waitFor(`document.getElementById("confirm").open`)
	if msg := eval[string](b, `document.getElementById("confirm-text").textContent`); !strings.Contains(msg, "1 buried job of tube “acts”") {
		t.Errorf("the confirmation says %q", msg)
	}
	b.click("#confirm-cancel")
	b.waitFor(`!document.getElementById("confirm").open`)
	if stat("current-jobs-buried") != "1" {
		t.Fatal("a cancelled clear cleared")
	}
	b.click(`#clear-form button[type="submit"]`)
	b.click("#confirm-ok")
	b.waitFor(`document.getElementById("status").textContent === "Deleted 1 job."`)
	if got := stat("current-jobs-buried"); got != "0" {
		t.Errorf("buried after a clear: %s", got)
	}
	b.waitFor(`document.getElementById("jobs-empty").textContent === "No buried jobs."`)

	// Put.
	b.typeInto("#put-body", `{"hello": "console"}`)
	b.typeInto("#put-pri", "7")
	b.click(`#put-form button[type="submit"]`)
	b.waitFor(`/^Put job \d+ into acts\.$/.test(document.getElementById("status").textContent)`)
	r, err := c.Do("peek-ready", nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Body) != `{"hello": "console"}` {
		t.Errorf("peek-ready after a put at priority 7: %q %q", r.Line, r.Body)
	}
	if st, err := c.Stats(fmt.Sprintf("stats-job %d", r.N)); err != nil || st["pri"] != "7" {
		t.Errorf("the put job: %v %v", st, err)
	}
}

// TestJobPage: a job's figures and body: JSON pretty-printed, a binary
// body as a hex dump and base64; delete from the page.
func TestJobPage(t *testing.T) {
	s := startServer(t, "--admin-token", testToken)
	c := s.conn()
	jsonID := s.put(c, "bodies", 1, 5, 0, func(int) []byte { return []byte(`{"user":42,"tags":["a","b"]}`) })[0]
	binID := s.put(c, "bodies", 1, 5, 0, func(int) []byte { return []byte{0, 0xff, 0x10, 'A', 0x80} })[0]

	b := newTab(t, s.base)
	b.login(testToken)
	b.open(fmt.Sprintf("/jobs/%d", jsonID))
	b.waitFor(`document.querySelector("#body-view pre")`)
	if got := eval[string](b, `document.querySelector("#body-view pre").textContent`); got != "{\n  \"user\": 42,\n  \"tags\": [\n    \"a\",\n    \"b\"\n  ]\n}" {
		t.Errorf("pretty JSON:\n%s", got)
	}
	b.click(`#body-tabs button:nth-child(2)`) // the text as it is
	b.waitFor(`document.querySelector("#body-view pre").textContent === ` + js(`{"user":42,"tags":["a","b"]}`))
	if got := eval[string](b, `document.getElementById("job-state").textContent + " " + document.getElementById("job-tube-link").getAttribute("href")`); got != "ready /tubes/bodies" {
		t.Errorf("state and tube link: %q", got)
	}

	b.open(fmt.Sprintf("/jobs/%d", binID))
	b.waitFor(`document.querySelector("#body-view pre.hex")`)
	if got := eval[string](b, `document.querySelector("#body-view pre").textContent`); got != "00000000  00 ff 10 41 80                                    |...A.|" {
		t.Errorf("hex dump: %q", got)
	}
	b.click(`#body-tabs button:nth-child(2)`)
	b.waitFor(`document.querySelector("#body-view pre").textContent === "AP8QQYA="`)
	if got := eval[string](b, `document.getElementById("body-size").textContent`); got != "(5 bytes, binary)" {
		t.Errorf("size: %q", got)
	}

	b.click("#job-delete")
	b.click("#confirm-ok")
	b.waitFor(`document.getElementById("job-missing").textContent === "Job ` + strconv.FormatUint(binID, 10) + ` was deleted."`)
	if st := s.jobState(c, binID); st != "" {
		t.Errorf("job %d after a delete from its page: %q", binID, st)
	}
	b.open(fmt.Sprintf("/jobs/%d", binID))
	b.waitFor(`document.getElementById("job-missing").textContent.startsWith("There is no job ` + strconv.FormatUint(binID, 10) + `")`)
}

// TestLogin: with a token, every page is the login form until the token
// is given; a wrong one is refused; logging out ends the session.
func TestLogin(t *testing.T) {
	s := startServer(t, "--admin-token", testToken)
	c := s.conn()
	id := s.put(c, "private", 1, 1024, 0, func(int) []byte { return []byte("the secret body") })[0]

	b := newTab(t, s.base)
	for _, path := range []string{"/", "/tubes/private", fmt.Sprintf("/jobs/%d", id)} {
		b.open(path)
		b.waitFor(`document.body.dataset.page === "login"`)
		if got := b.text(); strings.Contains(got, "private") || strings.Contains(got, "secret") {
			t.Errorf("%s before login shows:\n%s", path, got)
		}
	}
	b.typeInto("#login-token", "not the token")
	b.click(`#login-form button[type="submit"]`)
	b.waitFor(`document.getElementById("login-error").textContent === "That is not the admin token."`)
	if focused := eval[string](b, `document.activeElement.id`); focused != "login-token" {
		t.Errorf("after a wrong token the focus is on %q", focused)
	}

	b.typeInto("#login-token", testToken)
	b.do(chromedp.KeyEvent(kb.Enter)) // the form submits from the keyboard
	b.waitFor(`document.body.dataset.page === "job" && document.body.dataset.mode === "session"`)
	b.waitFor(`document.querySelector("#body-view pre")?.textContent === "the secret body"`)
	if cookie := eval[string](b, `document.cookie`); cookie != "" {
		t.Errorf("the script can read a cookie: %q", cookie)
	}

	b.click("#logout")
	b.waitFor(`document.body.dataset.page === "login"`)
	b.open("/tubes/private")
	b.waitFor(`document.body.dataset.page === "login"`)
}

// TestReadOnly: with no token, the console says it is read-only, shows no
// body and offers no action.
func TestReadOnly(t *testing.T) {
	s := startServer(t)
	c := s.conn()
	id := s.put(c, "open", 2, 1024, 0, func(int) []byte { return []byte("never shown") })[0]

	b := newTab(t, s.base)
	b.open("/")
	b.waitFor(`document.body.dataset.mode === "read-only" && document.getElementById("read-only-note")`)
	b.waitFor(`[...document.querySelectorAll("#tubes tbody a")].some(a => a.textContent === "open")`)

	b.open("/tubes/open")
	b.waitFor(`document.querySelectorAll("#jobs tbody tr").length === 2`)
	disabled := `[...document.querySelectorAll(".actions button, .actions textarea, #jobs tbody button")].every(b => b.disabled)`
	if !eval[bool](b, disabled) {
		t.Error("an action is enabled in read-only mode")
	}
	if got := eval[string](b, `document.querySelector("#jobs tbody td.body").textContent`); got != "hidden" {
		t.Errorf("body preview in read-only mode: %q", got)
	}

	b.open(fmt.Sprintf("/jobs/%d", id))
	b.waitFor(`document.querySelector("#body-view .body-note")`)
	if got := eval[string](b, `document.documentElement.outerHTML`); strings.Contains(got, "never shown") {
		t.Error("the job page has the body in read-only mode")
	}
	if !eval[bool](b, `document.getElementById("job-delete").disabled && document.getElementById("job-kick").disabled`) {
		t.Error("the job's actions are enabled in read-only mode")
	}
}

// TestLayout: at 390 px and at 1280 px the pages fit the width (tables
// scroll in their own box), and every control is reachable with Tab.
func TestLayout(t *testing.T) {
	s := startServer(t, "--admin-token", testToken)
	c := s.conn()
	for i, name := range []string{"emails", "thumbnails", "reports.monthly", "webhooks/outbound"} {
		s.put(c, name, 5*(i+1), 1024, 0, text(`{"n": %d, "payload": "some text to make a long preview of a job body"}`))
	}
	b := newTab(t, s.base)
	b.login(testToken)
	for _, width := range []int64{390, 1280} {
		b.do(chromedp.EmulateViewport(width, 900))
		for _, path := range []string{"/", "/tubes/emails"} {
			b.open(path)
			b.waitFor(`document.querySelectorAll("tbody tr").length > 0 && !document.querySelector("[aria-busy]")`)
			if over := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); over > 0 {
				t.Errorf("%s at %d px is %d px too wide", path, width, over)
			}
			if *shots != "" {
				png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("%s-%d.png", map[string]string{"/": "overview", "/tubes/emails": "tube"}[path], width)
				if err := os.WriteFile(filepath.Join(*shots, name), png, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Tab from the top reaches the filter, the sort buttons and a tube's
	// link, each showing where the focus is.
	b.do(chromedp.EmulateViewport(1280, 900))
	b.open("/")
	b.waitFor(`document.querySelectorAll("#tubes tbody a").length === 5`)
	var reached []string
	for range 30 {
		b.do(chromedp.KeyEvent(kb.Tab))
		var f struct {
			ID, Tag, Text, Outline string
		}
		raw := eval[string](b, `JSON.stringify({ID: document.activeElement.id, Tag: document.activeElement.tagName,
			Text: document.activeElement.textContent.trim(), Outline: getComputedStyle(document.activeElement).outlineStyle})`)
		if err := json.Unmarshal([]byte(raw), &f); err != nil {
			t.Fatal(err)
		}
		if f.Tag == "BODY" { // past the last control, before the first
			continue
		}
		if f.Outline == "none" {
			t.Errorf("no visible focus on %s %q", f.Tag, f.Text)
		}
		reached = append(reached, f.Tag+":"+f.ID+f.Text)
	}
	joined := strings.Join(reached, " ")
	for _, want := range []string{"INPUT:filter", "BUTTON:Ready", "A:emails"} {
		if !strings.Contains(joined, want) {
			t.Errorf("Tab never reached %s: %s", want, joined)
		}
	}
}

// TestPageWeight measures what a first visit to the overview costs, with
// an empty cache (a browser context of its own): the bytes sent, the page's
// own and the API's, and how long until the page shows the figures. It
// fails over a budget, so that the console does not grow unseen.
func TestPageWeight(t *testing.T) {
	s := startServer(t) // read-only: no login page in between
	c := s.conn()
	for _, name := range []string{"emails", "thumbnails", "reports", "webhooks"} {
		s.put(c, name, 10, 1024, 0, text("job %d"))
	}
	b := newTab(t, s.base)
	b.open("/")
	b.waitFor(`performance.getEntriesByName("console:shown").length > 0 && document.querySelectorAll(".plot canvas").length === 2`)
	var m struct {
		Page      resource
		Resources []resource
		DOMReady  float64 // ms from the start of the navigation
		Load      float64
		Shown     float64 // the first figures from the API are on the page
	}
	raw := eval[string](b, `JSON.stringify({
		Page: (e => ({Name: e.name, Transfer: e.transferSize, Body: e.decodedBodySize}))(performance.getEntriesByType("navigation")[0]),
		Resources: performance.getEntriesByType("resource").map(e => ({Name: e.name, Transfer: e.transferSize, Body: e.decodedBodySize})),
		DOMReady: performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd,
		Load: performance.getEntriesByType("navigation")[0].loadEventEnd,
		Shown: performance.getEntriesByName("console:shown")[0].startTime})`)
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	static, api := m.Page, resource{}
	for _, r := range m.Resources {
		t.Logf("%6d bytes sent, %6d bytes unpacked: %s", r.Transfer, r.Body, strings.TrimPrefix(r.Name, s.base))
		if strings.Contains(r.Name, "/api/") {
			api.Transfer += r.Transfer
			api.Body += r.Body
		} else {
			static.Transfer += r.Transfer
			static.Body += r.Body
		}
	}
	t.Logf("the page and its files: %d bytes sent (%d unpacked); the API's first answers: %d bytes", static.Transfer, static.Body, api.Transfer)
	t.Logf("DOMContentLoaded %.0f ms, load %.0f ms, figures shown %.0f ms after the navigation began", m.DOMReady, m.Load, m.Shown)
	if static.Transfer > 64<<10 {
		t.Errorf("the overview's files weigh %d bytes sent, over the 64 KiB budget", static.Transfer)
	}
	// A second visit sends no static file: they are cached by hash.
	b.open("/")
	b.waitFor(`performance.getEntriesByName("console:shown").length > 0`)
	again := eval[int](b, `performance.getEntriesByType("resource").filter(e => !e.name.includes("/api/") && e.transferSize > 0).length`)
	if again != 0 {
		t.Errorf("a second visit fetched %d static files again", again)
	}
	t.Logf("again, cached: DOMContentLoaded %.0f ms, figures shown %.0f ms",
		eval[float64](b, `performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd`),
		eval[float64](b, `performance.getEntriesByName("console:shown")[0].startTime`))
}

type resource struct {
	Name           string
	Transfer, Body int
}
