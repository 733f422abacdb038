// Package systemd holds no code: its tests check the unit files beside them,
// with systemd's own tools when they are installed.
package systemd

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// toolTimeout bounds each run of a systemd tool.
const toolTimeout = time.Minute

// Sprout's stop takes at most its shutdown timeout, then up to
// heldRepliesLimit for the replies held for the log, sidePortLimit for the
// side port's requests and walCloseLimit for the log's last fsync on a
// failing disk (docs/operations.md, "Signals and shutdown").
const (
	shutdownTimeout  = 25 * time.Second
	heldRepliesLimit = 5 * time.Second
	sidePortLimit    = 5 * time.Second
	walCloseLimit    = 10 * time.Second
)

// unitFiles are what the tests read and what README.md here installs.
var unitFiles = []string{"sprout.socket", "sprout.service", "sprout.sysusers"}

// settings reads a unit file as key=value lines, keeping every value of
// a key in order; sections, comments and blank lines are skipped.
func settings(t *testing.T, name string) map[string][]string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kv := make(map[string][]string)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not a key=value line: %q", name, line)
		}
		kv[key] = append(kv[key], value)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestUnitSettings pins what the units promise to Sprout and to README.md.
func TestUnitSettings(t *testing.T) {
	sock := settings(t, "sprout.socket")
	if got := sock["ListenStream"]; len(got) != 1 || got[0] != "11300" {
		t.Errorf("sprout.socket ListenStream = %q; want one, 11300 (Sprout serves only the first socket)", got)
	}

	svc := settings(t, "sprout.service")
	one := func(key string) string {
		t.Helper()
		if v := svc[key]; len(v) == 1 {
			return v[0]
		}
		t.Errorf("sprout.service has %s = %q; want exactly one", key, svc[key])
		return ""
	}
	execStart := strings.Fields(one("ExecStart"))
	for _, arg := range execStart {
		for _, flag := range []string{"-l", "-p", "-u"} {
			if strings.HasPrefix(arg, flag) {
				t.Errorf("ExecStart %q has %s: ignored with the socket unit (-l, -p) or denied by the filter (-u)", execStart, arg)
			}
		}
	}
	if !strings.Contains(one("ExecStart"), " -b /var/lib/sprout") {
		t.Errorf("ExecStart = %q; want -b /var/lib/sprout", one("ExecStart"))
	}
	for key, want := range map[string]string{
		"User": "sprout", "StateDirectory": "sprout", "ReadWritePaths": "/var/lib/sprout",
		"ProtectSystem": "strict", "NoNewPrivileges": "yes", "PrivateTmp": "yes", "KillSignal": "SIGTERM",
		"EnvironmentFile": "-/etc/default/sprout",
	} {
		if got := one(key); got != want {
			t.Errorf("sprout.service %s = %q; want %q", key, got, want)
		}
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil || stop <= shutdownTimeout+heldRepliesLimit+sidePortLimit+walCloseLimit {
		t.Errorf("TimeoutStopSec = %q; want a duration above %v (shutdown) + %v (held replies) + %v (side port) + %v (last fsync)",
			one("TimeoutStopSec"), shutdownTimeout, heldRepliesLimit, sidePortLimit, walCloseLimit)
	}

	sysusers, err := os.ReadFile("sprout.sysusers")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sysusers), "\nu sprout ") {
		t.Errorf("sprout.sysusers does not create the user sprout:\n%s", sysusers)
	}
}

// tool returns the path of a systemd tool, or skips the test without it.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (apt-get install systemd): %v", name, err)
	}
	return path
}

// stagedUnits copies the unit files into a temporary directory, with
// ExecStart pointing at an executable that exists (verify checks it).
func stagedUnits(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range unitFiles {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "ExecStart=/usr/local/bin/sprout ", "ExecStart="+self+" ")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runTool runs a tool in dir and returns its output and error.
func runTool(t *testing.T, dir, path string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestUnitsVerify: systemd-analyze verify reports unknown keys and bad
// values on stderr with a zero exit status, so any output fails.
func TestUnitsVerify(t *testing.T) {
	analyze := tool(t, "systemd-analyze")
	dir := stagedUnits(t)
	out, err := runTool(t, dir, analyze, "verify", "--man=no", "sprout.socket", "sprout.service")
	if err != nil || out != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestServiceExposure keeps the hardening from eroding: systemd's own
// exposure score (0 best, 10 worst) must stay at or below 2.0.
func TestServiceExposure(t *testing.T) {
	analyze := tool(t, "systemd-analyze")
	dir := stagedUnits(t)
	out, err := runTool(t, dir, analyze, "security", "--offline=yes", "--threshold=20", "--no-pager", "sprout.service")
	if err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 or error: %v\n%s", err, out)
	}
}

// TestSysusers creates the user in an empty root, as systemd-sysusers would
// on the host.
func TestSysusers(t *testing.T) {
	sysusers := tool(t, "systemd-sysusers")
	dir := stagedUnits(t)
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := runTool(t, dir, sysusers, "--root="+root, filepath.Join(dir, "sprout.sysusers")); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(passwd), "sprout:x:") || !strings.Contains(string(passwd), ":/var/lib/sprout:") {
		t.Errorf("systemd-sysusers wrote /etc/passwd:\n%s\nwant the user sprout with home /var/lib/sprout", passwd)
	}
}
