package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// mainEnv, set in the environment of the test binary, makes it run
// sproutctl's main instead of the tests: TestProcessExitStatus checks the
// statuses a shell sees.
const mainEnv = "SPROUTCTL_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		return
	}
	testproc.Main(m)
}

// result is what one run of sproutctl printed and its exit status.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs sproutctl in-process with args, an empty environment but for
// env (KEY=value each), and stdin.
func ctl(t *testing.T, stdin string, env []string, args ...string) result {
	t.Helper()
	return ctlContext(t, t.Context(), stdin, env, args...)
}

func ctlContext(t *testing.T, ctx context.Context, stdin string, env []string, args ...string) result {
	t.Helper()
	getenv := func(key string) string {
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == key {
				return v
			}
		}
		return ""
	}
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, getenv, strings.NewReader(stdin), &stdout, &stderr)
	r := result{stdout.String(), stderr.String(), code}
	t.Logf("sproutctl %s: %v", strings.Join(args, " "), r)
	return r
}

// must runs sproutctl and fails the test unless it exits with want.
func must(t *testing.T, want int, args ...string) result {
	t.Helper()
	r := ctl(t, "", nil, args...)
	if r.code != want {
		t.Fatalf("sproutctl %s: exit %d, want %d\n%v", strings.Join(args, " "), r.code, want, r)
	}
	return r
}

// server is a running server the tests drive.
type server struct {
	name string // "sprout" or "beanstalkd"
	addr string
}

// startServers starts Sprout and the reference beanstalkd, each with args.
func startServers(t *testing.T, args ...string) []server {
	t.Helper()
	start := func(bin string) string {
		return testproc.StartConfig(t, testproc.Config{Binary: bin, Args: args, Ready: testproc.Probe}).Addr()
	}
	return []server{
		{"sprout", start(testproc.SproutBinary(t))},
		{"beanstalkd", start(testproc.Beanstalkd(t))},
	}
}

// dial connects the test's own client, testproc.Conn, to addr.
func dial(t *testing.T, addr string) *testproc.Conn {
	t.Helper()
	return testproc.DialTest(t, addr, 5*time.Second)
}

// use sends use tube on c.
func use(t *testing.T, c *testproc.Conn, tube string) {
	t.Helper()
	if err := c.ExpectLine("use "+tube, "USING "+tube); err != nil {
		t.Fatal(err)
	}
}

// put puts a job into tube on c.
func put(t *testing.T, c *testproc.Conn, tube string, pri uint32, delay, ttr int, body []byte) uint64 {
	t.Helper()
	use(t, c, tube)
	id, err := c.Put(pri, delay, ttr, body)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// bury reserves the job id on c and buries it with priority pri.
func bury(t *testing.T, c *testproc.Conn, id uint64, pri uint32) {
	t.Helper()
	if r, err := c.Do(fmt.Sprintf("reserve-job %d", id), nil); err != nil || r.Kind != testproc.ReplyReserved {
		t.Fatalf("reserve-job %d: %v %q", id, err, r.Line)
	}
	if err := c.ExpectLine(fmt.Sprintf("bury %d %d", id, pri), "BURIED"); err != nil {
		t.Fatal(err)
	}
}

// tubeCounts returns the jobs of tube by state: ready, reserved, delayed,
// buried; all zero for a tube that does not exist.
func tubeCounts(t *testing.T, c *testproc.Conn, tube string) [4]int64 {
	t.Helper()
	st, err := c.StatsInt("stats-tube "+tube, "current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried")
	if errors.Is(err, testproc.ErrNotFound) {
		return [4]int64{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return [4]int64(st)
}

// TestProcessExitStatus runs the binary (the test binary, as main) and
// checks the statuses a shell sees, one of each.
func TestProcessExitStatus(t *testing.T) {
	t.Parallel()
	addr := testproc.StartConfig(t, testproc.Config{Binary: testproc.Beanstalkd(t), Ready: testproc.Probe}).Addr()
	closed := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-s", addr, "stats"}, exitOK},
		{[]string{"-s", addr, "delete", "99"}, exitNotFound},
		{[]string{"-s", addr, "delete", "x"}, exitUsage},
		{[]string{"-s", addr, "no-such-command"}, exitUsage},
		{[]string{"-s", closed, "stats"}, exitUnreachable},
		{[]string{"-s", addr, "put", "t", "/nonexistent/file"}, exitFailure},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = append(os.Environ(), mainEnv+"=1")
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.want {
			t.Errorf("sproutctl %s: exit %d, want %d\n%s", strings.Join(tc.args, " "), code, tc.want, out)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestUsage checks what is refused before any server is asked: exit 2, a
// line on stderr that says why, and nothing on stdout.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"no-such-command"},
		{"stats", "extra"},
		{"stats", "--no-such-flag"},
		{"peek"},
		{"peek", "t", "reserved"},
		{"peek", "t", "--raw", "--json"},
		{"delete", "-1"},
		{"kick", "t"},
		{"kick", "t", "0"},
		{"kick", "t", "many"},
		{"pause", "t", "soon"},
		{"pause", "t", "-5s"},
		{"put", "t", "--ttr", "forever"},
		{"clear", "t"},
		{"clear", "t", "--state", "reserved"},
		{"jobs", "t"},
		{"move", "t"},
		{"move", "--from", "127.0.0.1:1", "--to", "127.0.0.1:1", "t"},
		{"move", "--from", "127.0.0.1:1", "--to", "127.0.0.1:2"},
		{"top", "--batch", "-1"},
	} {
		r := ctl(t, "", nil, append([]string{"-s", "127.0.0.1:1"}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "sproutctl: ") || r.stdout != "" {
			t.Errorf("sproutctl %s: want exit 2, a message on stderr, nothing on stdout; got %v", strings.Join(args, " "), r)
		}
	}
	r := ctl(t, "", nil, "--help")
	if r.code != exitOK || !strings.Contains(r.stdout, "Exit statuses:") || !strings.Contains(r.stdout, "move") {
		t.Errorf("--help: want exit 0 and the usage with the exit statuses; got %v", r)
	}
}

// TestTubeNames checks that sproutctl takes the tube names beanstalkd takes,
// as the reference server answers use, and that every command that names a
// tube refuses the others with exit 2 before it contacts a server: the one
// given is not there, so contacting it would exit 4.
func TestTubeNames(t *testing.T) {
	t.Parallel()
	ref := testproc.StartConfig(t, testproc.Config{Binary: testproc.Beanstalkd(t), Ready: testproc.Probe}).Addr()
	c := dial(t, ref)
	closed := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	api := []string{"--api", "http://" + closed, "--token", "x"}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"t", true},
		{"Az09-+/;.$_()", true},
		{longName("names", 200), true},
		{longName("names", 201), false},
		{"", false},
		{"-t", false},
		{"a b", false},
		{"t*", false},
		{`t\`, false}, // in go-beanstalk's NameChars, not in beanstalkd's
		{"t\u00fc", false},
	} {
		r, err := c.Do("use "+tc.name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if took := r.Kind == testproc.ReplyUsing; took != tc.ok {
			t.Fatalf("beanstalkd answers use %q with %q: the table is wrong", tc.name, r.Line)
		}
		if tc.ok {
			must(t, exitOK, "-s", ref, "put", "--", tc.name)
			must(t, exitOK, "-s", ref, "reserve", "--", tc.name)
			continue
		}
		// "--": a name starting with - is not a flag.
		for _, args := range [][]string{
			{"peek", "--", tc.name},
			{"put", "--", tc.name},
			{"reserve", "--", tc.name},
			{"kick", "--", tc.name, "1"},
			{"pause", "--", tc.name, "5"},
			{"clear", "--state", "all", "--", tc.name},
			{"move", "--from", closed, "--to", "127.0.0.1:1", "--", tc.name},
			append(api, "clear", "--state", "all", "--", tc.name),
			append(api, "jobs", "--", tc.name),
			append(api, "tubes", "move", "--group", "1", "--", tc.name),
		} {
			r := ctl(t, "body", nil, append([]string{"-s", closed}, args...)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "invalid tube name") || r.stdout != "" {
				t.Errorf("sproutctl %q: want exit 2 and invalid tube name on stderr; got %v", args, r)
			}
		}
	}
}

// TestUnreachable checks exit 4 for a server that is not there, one that
// accepts and never answers (--timeout), and an admin API that is not
// there.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	closed := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	silent := silentServer(t)
	for _, args := range [][]string{
		{"-s", closed, "stats"},
		{"-s", closed, "tubes"},
		{"-s", closed, "top", "--once"},
		{"-s", silent, "--timeout", "200ms", "stats"},
		{"-s", silent, "--timeout", "200ms", "put", "t", "-"},
		{"move", "--from", closed, "--to", silent, "t"},
		{"--api", "http://" + closed, "--token", "x", "jobs", "t"},
		{"--api", "http://" + closed, "--token", "x", "clear", "t", "--state", "all"},
	} {
		if r := ctl(t, "body", nil, args...); r.code != exitUnreachable {
			t.Errorf("sproutctl %s: want exit 4; got %v", strings.Join(args, " "), r)
		}
	}
}

// silentServer returns the address of a listener that accepts connections
// and never writes.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn // guarded by mu
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return l.Addr().String()
}
