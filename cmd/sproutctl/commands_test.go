package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestCommands runs every command that speaks the protocol against Sprout
// and against the reference beanstalkd; each subtest has tubes of its own.
func TestCommands(t *testing.T) {
	t.Parallel()
	for _, srv := range startServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				run  func(t *testing.T, addr string)
			}{
				{"stats", testStats},
				{"tubes", testTubes},
				{"put", testPut},
				{"peek", testPeek},
				{"reserve", testReserve},
				{"delete", testDelete},
				{"kick", testKick},
				{"pause", testPause},
				{"clear", testClear},
				{"long-name", testLongName},
				{"environment", testEnvironment},
			} {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, srv.addr) })
			}
		})
	}
}

func testStats(t *testing.T, addr string) {
	r := must(t, exitOK, "-s", addr, "stats")
	if !strings.HasPrefix(r.stdout, "STAT ") || !regexpLine(r.stdout, `^current-connections +\d+$`) || !regexpLine(r.stdout, `^version +\S+$`) {
		t.Errorf("stats table: want a STAT VALUE header and unquoted values, one line each\n%s", r.stdout)
	}
	r = must(t, exitOK, "-s", addr, "stats", "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["uptime"].(float64); !ok {
		t.Errorf("uptime is %#v, want a number", m["uptime"])
	}
	if _, ok := m["version"].(string); !ok {
		t.Errorf("version is %#v, want a string", m["version"])
	}
	if _, ok := m["id"].(string); !ok {
		t.Errorf("id is %#v, want a string, whatever its digits", m["id"])
	}
	if _, ok := m["draining"].(bool); !ok {
		t.Errorf("draining is %#v, want a boolean", m["draining"])
	}
}

func testTubes(t *testing.T, addr string) {
	c := dial(t, addr)
	put(t, c, "tubes-a", 1, 0, 60, []byte("ready urgent"))
	put(t, c, "tubes-a", 5000, 0, 60, []byte("ready"))
	put(t, c, "tubes-a", 5000, 3600, 60, []byte("delayed"))
	bury(t, c, put(t, c, "tubes-b", 5000, 0, 60, []byte("buried")), 5000)
	r := must(t, exitOK, "-s", addr, "tubes")
	for _, want := range []string{
		`^TUBE +READY +RESERVED +DELAYED +BURIED +URGENT +WAITING +TOTAL +PAUSED$`,
		`^tubes-a +2 +0 +1 +0 +1 +0 +3$`,
		`^tubes-b +0 +0 +0 +1 +0 +0 +1$`,
		`^default +0 +0 +0 +0 +0 +0 +0$`,
	} {
		if !regexpLine(r.stdout, want) {
			t.Errorf("tubes: no line matches %s", want)
		}
	}
	r = must(t, exitOK, "-s", addr, "tubes", "--json")
	var doc struct {
		Tubes []map[string]any `json:"tubes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tube := range doc.Tubes {
		if tube["name"] == "tubes-a" {
			found = true
			if tube["current-jobs-ready"] != 2.0 || tube["current-jobs-delayed"] != 1.0 {
				t.Errorf("tubes --json: tubes-a is %v", tube)
			}
		}
	}
	if !found {
		t.Errorf("tubes --json: no tubes-a in %s", r.stdout)
	}
}

func testPut(t *testing.T, addr string) {
	c := dial(t, addr)
	file := filepath.Join(t.TempDir(), "body")
	body := []byte("from a file\x00\xff\r\n")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args                 []string
		stdin                string
		want                 []byte
		pri, delay, ttr, max int64
	}{
		{args: []string{"put-a", file}, want: body, pri: 65536, ttr: 60},
		{args: []string{"put-a", "-", "--pri", "7", "--ttr", "2m", "--delay", "1500ms"}, stdin: "from stdin", want: []byte("from stdin"), pri: 7, delay: 2, ttr: 120},
		{args: []string{"put-a", "--ttr", "30", "--delay", "3600"}, stdin: "", want: []byte{}, pri: 65536, delay: 3600, ttr: 30},
	} {
		r := ctl(t, tc.stdin, nil, append([]string{"-s", addr, "put"}, tc.args...)...)
		id, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64)
		if r.code != exitOK || err != nil {
			t.Fatalf("put %v: want exit 0 and an id; got %v", tc.args, r)
		}
		got, err := c.Do(fmt.Sprintf("peek %d", id), nil)
		if err != nil || string(got.Body) != string(tc.want) {
			t.Errorf("put %v: peek %d gives %q, %v; want %q", tc.args, id, got.Body, err, tc.want)
		}
		st, err := c.StatsInt(fmt.Sprintf("stats-job %d", id), "pri", "delay", "ttr")
		if err != nil || st[0] != tc.pri || st[1] != tc.delay || st[2] != tc.ttr {
			t.Errorf("put %v: pri, delay, ttr are %v, %v; want %d %d %d", tc.args, st, err, tc.pri, tc.delay, tc.ttr)
		}
	}
	if r := ctl(t, "x", nil, "-s", addr, "put", "no spaces"); r.code != exitUsage || !strings.Contains(r.stderr, "invalid tube name") {
		t.Errorf("a tube name the protocol cannot carry: want exit 2; got %v", r)
	}
	r := ctl(t, strings.Repeat("x", 70000), nil, "-s", addr, "put", "put-a")
	if r.code != exitFailure || !strings.Contains(r.stderr, "job too big") {
		t.Errorf("a body over the server's limit: want exit 1 and job too big; got %v", r)
	}
}

func testPeek(t *testing.T, addr string) {
	c := dial(t, addr)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	ready := put(t, c, "peek-a", 3, 0, 45, []byte("hello\nworld"))
	put(t, c, "peek-a", 9, 0, 45, []byte("not first"))
	delayed := put(t, c, "peek-a", 3, 3600, 45, all)
	buried := put(t, c, "peek-b", 3, 0, 45, []byte{})
	bury(t, c, buried, 3)

	r := must(t, exitOK, "-s", addr, "peek", "peek-a")
	for _, want := range []string{fmt.Sprintf(`^id +%d$`, ready), `^tube +peek-a$`, `^state +ready$`, `^pri +3$`, `^ttr +45$`, `^body \(11 bytes\):$`, `^hello$`, `^world$`} {
		if !regexpLine(r.stdout, want) {
			t.Errorf("peek ready: no line matches %s", want)
		}
	}
	r = must(t, exitOK, "-s", addr, "peek", "peek-a", "delayed")
	if !regexpLine(r.stdout, fmt.Sprintf(`^id +%d$`, delayed)) || !regexpLine(r.stdout, `^00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  \|\.{16}\|$`) {
		t.Errorf("peek delayed: want the job and its body as a hex dump")
	}
	r = must(t, exitOK, "-s", addr, "peek", "peek-a", "delayed", "--raw")
	if r.stdout != string(all) {
		t.Errorf("peek --raw: got %q, want the 256 bytes", r.stdout)
	}
	r = must(t, exitOK, "-s", addr, "peek", "peek-a", "delayed", "--json")
	var job map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &job); err != nil {
		t.Fatal(err)
	}
	got, err := base64.StdEncoding.DecodeString(fmt.Sprint(job["body"]))
	if err != nil || string(got) != string(all) || job["body-encoding"] != "base64" || job["id"] != float64(delayed) || job["tube"] != "peek-a" || job["state"] != "delayed" {
		t.Errorf("peek --json: %v", job)
	}
	r = must(t, exitOK, "-s", addr, "peek", "peek-b", "buried")
	if !regexpLine(r.stdout, fmt.Sprintf(`^id +%d$`, buried)) || !regexpLine(r.stdout, `^body \(0 bytes\):$`) {
		t.Errorf("peek buried: want the buried job with its empty body")
	}
	for _, args := range [][]string{{"peek-b"}, {"peek-b", "delayed"}, {"peek-a", "buried"}, {"no-such-tube"}} {
		r := ctl(t, "", nil, append([]string{"-s", addr, "peek"}, args...)...)
		if r.code != exitNotFound || !strings.Contains(r.stderr, "no ") {
			t.Errorf("peek %v: want exit 3 and a message; got %v", args, r)
		}
	}
}

func testReserve(t *testing.T, addr string) {
	c := dial(t, addr)
	first := put(t, c, "reserve-a", 5, 0, 60, []byte("first"))
	second := put(t, c, "reserve-a", 9, 0, 60, []byte("second"))

	r := must(t, exitOK, "-s", addr, "reserve", "reserve-a")
	for _, want := range []string{fmt.Sprintf(`^id +%d$`, first), `^state +reserved$`, `^reserves +1$`, `^first$`, fmt.Sprintf(`^deleted job %d$`, first)} {
		if !regexpLine(r.stdout, want) {
			t.Errorf("reserve: no line matches %s in\n%s", want, r.stdout)
		}
	}
	if n := tubeCounts(t, c, "reserve-a"); n != [4]int64{1, 0, 0, 0} {
		t.Errorf("after reserve the tube holds %v, want the second job ready", n)
	}
	r = must(t, exitOK, "-s", addr, "reserve", "reserve-a", "--release", "--raw")
	if r.stdout != "second" {
		t.Errorf("reserve --release --raw printed %q, want the body alone", r.stdout)
	}
	st, err := c.Stats(fmt.Sprintf("stats-job %d", second))
	if err != nil || st["state"] != "ready" || st["pri"] != "9" || st["releases"] != "1" {
		t.Errorf("after reserve --release: %v, %v; want the job ready, pri 9, released once", st, err)
	}
	r = must(t, exitOK, "-s", addr, "reserve", "reserve-a", "--bury", "--json")
	var job map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &job); err != nil || job["id"] != float64(second) || job["body"] != "second" {
		t.Errorf("reserve --bury --json printed %q (%v)", r.stdout, err)
	}
	if n := tubeCounts(t, c, "reserve-a"); n != [4]int64{0, 0, 0, 1} {
		t.Errorf("after reserve --bury the tube holds %v, want one buried job", n)
	}
	r = must(t, exitNotFound, "-s", addr, "reserve", "reserve-a", "--wait", "1")
	if !strings.Contains(r.stderr, "no ready job in tube reserve-a") {
		t.Errorf("reserve of a tube with no ready job: %v", r)
	}
	must(t, exitUsage, "-s", addr, "reserve", "reserve-a", "--release", "--bury")
}

func testDelete(t *testing.T, addr string) {
	c := dial(t, addr)
	id := put(t, c, "delete-a", 1, 0, 60, []byte("x"))
	must(t, exitOK, "-s", addr, "delete", strconv.FormatUint(id, 10))
	if n := tubeCounts(t, c, "delete-a"); n != [4]int64{} {
		t.Errorf("after delete the tube holds %v", n)
	}
	r := must(t, exitNotFound, "-s", addr, "delete", strconv.FormatUint(id, 10))
	if !strings.Contains(r.stderr, "not found") {
		t.Errorf("delete of a deleted job: %v", r)
	}
}

func testKick(t *testing.T, addr string) {
	c := dial(t, addr)
	for range 3 {
		bury(t, c, put(t, c, "kick-a", 1, 0, 60, []byte("x")), 1)
	}
	put(t, c, "kick-a", 1, 3600, 60, []byte("delayed"))
	r := must(t, exitOK, "-s", addr, "kick", "kick-a", "2")
	if r.stdout != "kicked 2 jobs in tube kick-a\n" {
		t.Errorf("kick 2: %q", r.stdout)
	}
	if n := tubeCounts(t, c, "kick-a"); n != [4]int64{2, 0, 1, 1} {
		t.Errorf("after kick 2: ready, reserved, delayed, buried are %v", n)
	}
	must(t, exitOK, "-s", addr, "kick", "kick-a", "10") // the last buried one
	must(t, exitOK, "-s", addr, "kick", "kick-a", "10") // then the delayed one
	if n := tubeCounts(t, c, "kick-a"); n != [4]int64{4, 0, 0, 0} {
		t.Errorf("after kicking all: %v", n)
	}
	must(t, exitNotFound, "-s", addr, "kick", "kick-a", "10")
}

func testPause(t *testing.T, addr string) {
	c := dial(t, addr)
	put(t, c, "pause-a", 1, 0, 60, []byte("x"))
	for _, tc := range []struct {
		arg  string
		want int64
	}{{"30s", 30}, {"1500ms", 2}, {"2m", 120}, {"45", 45}} {
		must(t, exitOK, "-s", addr, "pause", "pause-a", tc.arg)
		if st, err := c.StatsInt("stats-tube pause-a", "pause"); err != nil || st[0] != tc.want {
			t.Errorf("pause %s: the tube's pause is %v, %v; want %d", tc.arg, st, err, tc.want)
		}
	}
	r := must(t, exitOK, "-s", addr, "tubes")
	if !regexpLine(r.stdout, `^pause-a( +\d+){7} +4\ds$`) {
		t.Errorf("tubes: want the pause's time left in PAUSED")
	}
	must(t, exitOK, "-s", addr, "pause", "pause-a", "0")
	must(t, exitNotFound, "-s", addr, "pause", "no-such-tube", "5")
}

func testClear(t *testing.T, addr string) {
	c := dial(t, addr)
	fill := func(tube string) {
		for i := range 5 {
			put(t, c, tube, uint32(i), 0, 60, []byte("ready"))
		}
		for range 3 {
			put(t, c, tube, 1, 3600, 60, []byte("delayed"))
		}
		for range 2 {
			bury(t, c, put(t, c, tube, 1, 0, 60, []byte("buried")), 1)
		}
	}
	fill("clear-a")
	worker := dial(t, addr)
	use(t, worker, "clear-a")
	if err := worker.ExpectLine("watch clear-a", "WATCHING 2"); err != nil {
		t.Fatal(err)
	}
	if r, err := worker.Do("reserve-with-timeout 0", nil); err != nil || r.Kind != testproc.ReplyReserved {
		t.Fatalf("reserve: %v %q", err, r.Line)
	}
	for _, tc := range []struct {
		state string
		left  [4]int64
		out   string
	}{
		{"delayed", [4]int64{4, 1, 0, 2}, "deleted 3 jobs (delayed) from tube clear-a\n"},
		{"ready", [4]int64{0, 1, 0, 2}, "deleted 4 jobs (ready) from tube clear-a\n"},
		{"buried", [4]int64{0, 1, 0, 0}, "deleted 2 jobs (buried) from tube clear-a\n"},
	} {
		r := must(t, exitOK, "-s", addr, "clear", "clear-a", "--state", tc.state)
		if r.stdout != tc.out {
			t.Errorf("clear --state %s: %q, want %q", tc.state, r.stdout, tc.out)
		}
		if n := tubeCounts(t, c, "clear-a"); n != tc.left {
			t.Errorf("after clear --state %s: ready, reserved, delayed, buried are %v, want %v", tc.state, n, tc.left)
		}
	}
	must(t, exitNotFound, "-s", addr, "clear", "clear-a", "--state", "ready")
	fill("clear-b")
	r := must(t, exitOK, "-s", addr, "clear", "clear-b", "--state", "all")
	if r.stdout != "deleted 10 jobs (all) from tube clear-b\n" {
		t.Errorf("clear --state all: %q", r.stdout)
	}
	must(t, exitNotFound, "-s", addr, "clear", "no-such-tube", "--state", "all")
}

// longName returns a tube name of n bytes: prefix, every punctuation mark
// the protocol allows, then x's.
func longName(prefix string, n int) string {
	name := prefix + "-+/;.$_()"
	return name + strings.Repeat("x", n-len(name))
}

// testLongName runs every command that names a tube on one whose name is
// 200 bytes, the protocol's longest, one after the other on one job.
func testLongName(t *testing.T, addr string) {
	c := dial(t, addr)
	tube := longName("long-name", 200)
	idLine := fmt.Sprintf(`^id +%d$`, put(t, c, tube, 1, 0, 60, []byte("long")))
	quoted := regexp.QuoteMeta(tube)
	for _, step := range []struct {
		args []string
		want string // a line of stdout, as a regular expression
	}{
		{[]string{"peek", tube}, idLine},
		{[]string{"reserve", tube, "--bury"}, idLine},
		{[]string{"peek", tube, "buried"}, idLine},
		{[]string{"kick", tube, "1"}, `^kicked 1 job in tube ` + quoted + `$`},
		{[]string{"pause", tube, "0"}, `^tube ` + quoted + ` is not paused$`},
		{[]string{"clear", tube, "--state", "all"}, `^deleted 1 job \(all\) from tube ` + quoted + `$`},
		{[]string{"put", tube}, `^\d+$`},
	} {
		r := ctl(t, "", nil, append([]string{"-s", addr}, step.args...)...)
		if r.code != exitOK || !regexpLine(r.stdout, step.want) {
			t.Errorf("sproutctl %s on a tube of 200 bytes: want exit 0 and a line %s; got %v", step.args[0], step.want, r)
		}
	}
	if n := tubeCounts(t, c, tube); n != [4]int64{1, 0, 0, 0} {
		t.Errorf("at the end the tube holds %v, want the one job put", n)
	}
}

// testEnvironment checks SPROUT_SERVER, and that -s wins over it.
func testEnvironment(t *testing.T, addr string) {
	if r := ctl(t, "", []string{"SPROUT_SERVER=" + addr}, "stats"); r.code != exitOK {
		t.Errorf("stats with SPROUT_SERVER: %v", r)
	}
	closed := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	if r := ctl(t, "", []string{"SPROUT_SERVER=" + closed}, "-s", addr, "stats"); r.code != exitOK {
		t.Errorf("stats with -s over SPROUT_SERVER: %v", r)
	}
}

// regexpLine reports whether a line of s matches pattern.
func regexpLine(s, pattern string) bool {
	return regexp.MustCompile("(?m)" + pattern).MatchString(s)
}
