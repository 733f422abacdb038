package container

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// commandTimeout bounds each engine command; stopGrace is the stop
// timeout the tests give a container, as the StatefulSet's grace period.
const (
	commandTimeout = 3 * time.Minute
	stopGrace      = 60
)

// engine is the container command; empty when none works (skipReason says
// why). image is the image make built for this run. Set by TestMain.
var (
	engine     string
	engineEnv  []string
	skipReason string
	image      string
	imageErr   error
	suffix     string
)

func TestMain(m *testing.M) {
	b := make([]byte, 4)
	rand.Read(b)
	suffix = hex.EncodeToString(b)
	// Held until the process exits, before anything is named: while it
	// is, clean-test-leftovers.sh leaves this run's resources alone.
	if err := lockRun(suffix); err != nil {
		fmt.Fprintln(os.Stderr, "deploy/container:", err)
		os.Exit(1)
	}
	engine, engineEnv, skipReason = findEngine()
	if engine == "" {
		// go test without -v hides t.Skip's message; say it once anyway.
		fmt.Fprintln(os.Stderr, "deploy/container: container tests skipped: "+skipReason)
	}
	if engine != "" {
		cleanLeftovers()
		image = "localhost/sprout-test-" + suffix + ":test"
		imageErr = buildImage()
	}
	code := m.Run()
	if engine != "" {
		run(nil, "rmi", "-f", image)
	}
	os.Exit(code)
}

// lockRun takes this run's lock, on a file named after it in
// /tmp/sprout-testruns, held until the process exits, whichever way.
func lockRun(run string) error {
	held, err := testproc.HoldLock(filepath.Join("/tmp", "sprout-testruns", run))
	if err == nil && !held {
		err = errors.New("another process holds it")
	}
	if err != nil {
		return fmt.Errorf("locking this run's file: %w", err)
	}
	return nil
}

// cleanLeftovers removes what killed runs left (clean-test-leftovers.sh):
// their pods' published ports would take this run's connections.
func cleanLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "clean-test-leftovers.sh")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), engineEnv...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "deploy/container: clean-test-leftovers.sh:", err)
	}
}

// findEngine makes deploy/engine.sh's choice, and checks the engine runs.
func findEngine() (string, []string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if exec.CommandContext(ctx, "docker", "info").Run() == nil {
		return "docker", nil, ""
	}
	if _, err := exec.LookPath("podman"); err != nil {
		return "", nil, "no container engine: `docker info` fails and podman is not installed (on Debian: apt-get install podman runc)"
	}
	var env []string
	if os.Getenv("CONTAINERS_CONF") == "" {
		if _, err := exec.LookPath("runc"); err == nil {
			conf, _ := filepath.Abs("../containers.conf")
			env = append(env, "CONTAINERS_CONF="+conf)
		}
	}
	cmd := exec.CommandContext(ctx, "podman", "info")
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", nil, fmt.Sprintf("podman is installed but `podman info` fails: %v\n%s", err, out)
	}
	return "podman", env, ""
}

func buildImage() error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "image", "IMAGE="+image)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), engineEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make image: %v\n%s", err, out)
	}
	return nil
}

// needEngine skips a test where no engine works and fails it where the
// image did not build.
func needEngine(t *testing.T) {
	t.Helper()
	if engine == "" {
		t.Skip("container tests skipped: " + skipReason)
	}
	if imageErr != nil {
		t.Fatal(imageErr)
	}
}

// needPodman skips a test that uses `podman kube play`.
func needPodman(t *testing.T) {
	t.Helper()
	needEngine(t)
	if engine != "podman" {
		t.Skip("kube play needs Podman; the engine here is " + engine)
	}
	// kube play builds its pause image around catatonit.
	if _, err := exec.LookPath("catatonit"); err != nil {
		if _, err := os.Stat("/usr/libexec/podman/catatonit"); err != nil {
			t.Skip("kube play needs catatonit for its pause image (on Debian: apt-get install catatonit)")
		}
	}
}

// run runs the engine with args and returns its trimmed stdout; a failure
// fails t (when t is not nil) with the output.
func run(t *testing.T, args ...string) (string, error) {
	if t != nil {
		t.Helper()
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, engine, args...)
	cmd.Env = append(os.Environ(), engineEnv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%s %s: %v\n%s%s", engine, strings.Join(args, " "), err, out, stderr.String())
		if t != nil {
			t.Fatal(err)
		}
	}
	return strings.TrimSpace(string(out)), err
}

// must is run for a command that must work.
func must(t *testing.T, args ...string) string {
	t.Helper()
	out, _ := run(t, args...)
	return out
}

// name is a resource name unique to this run.
func name(what string) string { return "sprout-test-" + suffix + "-" + what }

// freePort is a port free on 127.0.0.1 now, released at once for podman
// to publish a container's port on: testproc.FreePort's, taken below the
// kernel's ephemeral range (CI once saw another package's connection
// take a port there between its release and podman's bind) and claimed
// against the other test processes running at once, which matters more
// here than for a server's port: a published port is a DNAT rule, not a
// bound socket, so another process's check that it can bind the port
// would pass.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hostPort is where the engine published a container's port.
func hostPort(t *testing.T, container string, port int) string {
	t.Helper()
	out := must(t, "port", container, strconv.Itoa(port)+"/tcp")
	addr := strings.Fields(out)[0]
	return strings.Replace(addr, "0.0.0.0", "127.0.0.1", 1)
}

// waitReady polls http://addr/readyz until 200 and returns how long it took.
func waitReady(t *testing.T, addr string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	client := &http.Client{Timeout: time.Second}
	var last error
	for time.Since(start) < timeout {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("GET http://%s/readyz: not 200 within %v: %v", addr, timeout, last)
	return 0
}

// status is the status code of GET http://addr/path, or 0.
func status(addr, path string) int {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// uidOf reads the uid and gid of a container's process from the host's
// /proc; ok is false where that process is not visible (a remote engine).
func uidOf(t *testing.T, container string) (uid, gid string, ok bool) {
	t.Helper()
	pid := must(t, "inspect", "-f", "{{.State.Pid}}", container)
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "", "", false
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "Uid:":
			uid = f[1]
		case len(f) > 1 && f[0] == "Gid:":
			gid = f[1]
		}
	}
	return uid, gid, uid != ""
}
