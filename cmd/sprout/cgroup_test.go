package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestStartupLogUnderCgroupLimit runs the real server in a cgroup v1
// memory group made for it below the test's own group, with a memory
// limit on that group or on its parent, as a systemd unit's MemoryMax= or
// a nested sandbox sets one: the startup log must show the buffer budget,
// an eighth of the limit, and the Go memory limit, 90% of it. It needs
// root and the v1 memory controller (as on the machines Sprout is built
// on); elsewhere it skips, saying why. The groups are removed at the end.
func TestStartupLogUnderCgroupLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a cgroup needs root: run the tests as root to check the memory limit's probe")
	}
	own := ownV1MemoryGroup(t)
	bin := testproc.SproutBinary(t)
	cases := []struct {
		name string
		// limitOn is the group the limit is written to: "" for the one
		// the server runs in, ".." for its parent.
		limitOn string
		limit   int64
	}{
		{name: "own group", limitOn: "", limit: 1 << 30},
		{name: "parent group", limitOn: "..", limit: 768 << 20},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := path.Join(own, "sprout-test-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(i))
			group := path.Join(parent, "server")
			makeGroup(t, parent)
			makeGroup(t, group)
			limited := path.Join(group, tc.limitOn)
			writeFile(t, path.Join(limited, "memory.limit_in_bytes"), strconv.FormatInt(tc.limit, 10))

			cfg, line, goLimit := startInGroup(t, group, bin)
			t.Logf("in %s, limited to %d bytes on %s:\n%s", group, tc.limit, limited, line)
			want := map[string]any{
				"max_buffer_memory":    float64(tc.limit / 8),
				"memory_limit":         float64(tc.limit),
				"memory_limit_from":    "cgroup " + limited,
				"go_memory_limit":      float64(tc.limit / 10 * 9),
				"go_memory_limit_from": "90% of the cgroup's memory limit",
			}
			for k, v := range want {
				if cfg[k] != v {
					t.Errorf("%s is %v; want %v", k, cfg[k], v)
				}
			}
			if goLimit != tc.limit/10*9 {
				t.Errorf("the runtime's memory limit (go_gc_gomemlimit_bytes) is %d; want %d", goLimit, tc.limit/10*9)
			}
		})
	}
}

// ownV1MemoryGroup is the directory of the test's own group in the v1
// memory hierarchy; the test skips where there is none.
func ownV1MemoryGroup(t *testing.T) string {
	t.Helper()
	self, err := procfs.Self()
	if err != nil {
		t.Skipf("no /proc to find the test's cgroup in: %v", err)
	}
	groups, err := self.Cgroups()
	if err != nil {
		t.Skipf("cannot read /proc/self/cgroup: %v", err)
	}
	mounts, err := procfs.GetMounts()
	if err != nil {
		t.Skipf("cannot read /proc/self/mountinfo: %v", err)
	}
	for _, g := range groups {
		if !slices.Contains(g.Controllers, "memory") {
			continue
		}
		for _, m := range mounts {
			if _, memory := m.SuperOptions["memory"]; m.FSType != "cgroup" || !memory {
				continue
			}
			if below, ok := strings.CutPrefix(g.Path, strings.TrimSuffix(m.Root, "/")); ok {
				return path.Join(m.MountPoint, below)
			}
		}
	}
	t.Skip("no cgroup v1 memory controller here (a v2-only host): the probe's v2 layout is covered by internal/hostinfo")
	return ""
}

// makeGroup makes a cgroup directory, removed when the test ends; the test
// skips if the hierarchy does not let it.
func makeGroup(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The group empties once its last process has been reaped.
		deadline := time.Now().Add(replyTimeout)
		for {
			err := os.Remove(dir)
			if err == nil || os.IsNotExist(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("removing the cgroup %s: %v", dir, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startInGroup starts the server in group and returns its
// "configuration" log line, parsed and as written, and the Go runtime's
// memory limit as its metrics report it; it stops the server.
func startInGroup(t *testing.T, group, bin string) (fields map[string]any, line string, goLimit int64) {
	t.Helper()
	// The shell joins the group, then becomes the server: the server runs
	// in the group from its first instruction.
	cmd := exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$1" -l 127.0.0.1 -p 0 --http 127.0.0.1:0`,
		group, bin)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt) // a graceful shutdown, as SIGTERM
		_ = cmd.Wait()
	}()

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	defer func() {
		go func() {
			for range lines { // drain until the server exits
			}
		}()
	}()
	var seen []string
	timeout := time.After(replyTimeout)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the server exited:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			var f map[string]any
			if json.Unmarshal([]byte(l), &f) != nil {
				continue
			}
			switch f["message"] {
			case "configuration":
				fields, line = f, l
			case "operations endpoint listening":
				if fields == nil {
					t.Fatalf("the side port listens before the configuration is logged:\n%s", strings.Join(seen, "\n"))
				}
				addr, _ := f["address"].(string)
				return fields, line, scrapeGoMemoryLimit(t, addr)
			}
		case <-timeout:
			t.Fatalf("no configuration and side port within %v:\n%s", replyTimeout, strings.Join(seen, "\n"))
		}
	}
}

// scrapeGoMemoryLimit reads go_gc_gomemlimit_bytes from the side port at addr.
func scrapeGoMemoryLimit(t *testing.T, addr string) int64 {
	t.Helper()
	c := http.Client{Timeout: replyTimeout}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_gc_gomemlimit_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("go_gc_gomemlimit_bytes %q: %v", v, err)
			}
			return int64(f)
		}
	}
	t.Fatalf("no go_gc_gomemlimit_bytes in the metrics (%v)", sc.Err())
	return 0
}
