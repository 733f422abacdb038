package main

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// fivebeans 1.5.0 (npm), the release whose own test suite
// TestFivebeansSuite runs, and the registry's integrity of its tarball.
const (
	fivebeansRelease   = "fivebeans@1.5.0"
	fivebeansIntegrity = "sha512-Q1evvgONorYmdp1BCUvB9Qy7cbs+YdOawgudN8qhDFstt2SFefbca8lHXPwtaA3TpQ7FrLEns2gvsXn/vnbI1Q=="
)

// fivebeansExcluded is the one test of the suite left out, and why: it
// fails against beanstalkd 1.13 as against Sprout, on any Node since 13.
// It connects to a closed port and asserts err.errno == "ECONNREFUSED",
// which Node now reports as err.code (errno became the number -111).
const fivebeansExcluded = "emits the error event on failure"

// fivebeansTimeout bounds preparing the suite (npm) and one run of it.
const fivebeansTimeout = 3 * time.Minute

// TestFivebeansSuite runs the fivebeans client's own mocha suite (55
// tests of its client, worker and runner, 53 of them against a live
// server; one is a pending stub, one is excluded: fivebeansExcluded) against
// Sprout alone, through a cluster member that does not lead, and through
// one of a cluster of three shard groups (--cluster-groups 3). The suite's stats test hands
// stats' version to node's semver before testing kick-job; with the commit
// hash Sprout once reported for a version it threw "Invalid Version".
//
// The suite connects to 127.0.0.1:11300, written in its tests, its
// fixtures and the client's default port; the copy run here has that port
// replaced by the server's free one. The release comes from the npm
// registry (npm pack, its integrity checked) with the dependencies pinned
// by testdata/fivebeans/package-lock.json (npm ci), once, into the user's
// cache; each run copies its sources. Without node and npm the test skips
// (.ci/test-setup installs them).
func TestFivebeansSuite(t *testing.T) {
	suite := fivebeansSuite(t)

	t.Run("single", func(t *testing.T) {
		t.Parallel()
		p := testproc.Start(t, testproc.SproutBinary(t))
		runFivebeans(t, suite, p.Addr())
	})
	t.Run("cluster-follower", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t)
		leader := c.awaitServing(20 * time.Second)
		runFivebeans(t, suite, c.others(leader)[0].proc.Addr())
	})
	// Three shard groups: the suite's tubes land in different groups,
	// and every command goes to its tube's or its job's group.
	t.Run("cluster-groups", func(t *testing.T) {
		t.Parallel()
		c := startCluster(t, "--cluster-groups", "3")
		leader := c.awaitServing(20 * time.Second)
		// A handover in the middle of the suite would drop a pause
		// and reservations, which live on a group's leader only.
		c.awaitBalanced(30 * time.Second)
		runFivebeans(t, suite, c.others(leader)[0].proc.Addr())
	})
}

// fivebeansSuite returns the directory of the suite, prepared once into
// ${XDG_CACHE_HOME:-~/.cache}/sprout-test: the release's files and its
// node_modules. It is built beside the cache's entry and renamed into
// place, so a directory under that name is complete, and test processes
// preparing it at once leave one of theirs.
func fivebeansSuite(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("fivebeans' suite needs node and npm (apt-get install nodejs npm; .ci/test-setup installs them): %v", err)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "sprout-test", strings.ReplaceAll(fivebeansRelease, "@", "-"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err == nil {
		return dir
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "fivebeans-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp) // left over only if the rename below did not happen
	ctx, cancel := context.WithTimeout(context.Background(), fivebeansTimeout)
	defer cancel()
	npm := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "npm", append(args, "--no-audit", "--no-fund", "--loglevel=error")...)
		cmd.Dir = tmp
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	tarball := filepath.Join(tmp, npm("pack", fivebeansRelease))
	b, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512(b)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != fivebeansIntegrity {
		t.Fatalf("%s from the registry has integrity %s, want %s", fivebeansRelease, got, fivebeansIntegrity)
	}
	// The tarball's files are under package/.
	if out, err := exec.CommandContext(ctx, "tar", "-xzf", tarball, "-C", tmp, "--strip-components=1").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	if err := os.Remove(tarball); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "fivebeans", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	npm("ci", "--ignore-scripts")
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "node_modules")); statErr != nil {
			t.Fatal(err)
		}
		// Another test process got there first.
	}
	return dir
}

// fivebeansPort is how the suite names its server's port.
var fivebeansPort = regexp.MustCompile(`\b11300\b`)

// runFivebeans runs the suite in suite against the server at addr
// (127.0.0.1:PORT), from a copy with the port replaced.
func runFivebeans(t *testing.T, suite, addr string) {
	t.Helper()
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	dir := t.TempDir()
	for _, sub := range []string{"index.js", "package.json", "lib", "test"} {
		if err := copyTree(filepath.Join(suite, sub), filepath.Join(dir, sub), func(b []byte) []byte {
			return fivebeansPort.ReplaceAll(b, []byte(port))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(suite, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fivebeansTimeout)
	defer cancel()

	// What the suite's stats test does with the version, with its own
	// semver, on the version this server reports.
	c := testproc.DialTest(t, addr, replyTimeout)
	stats, err := c.Stats("stats")
	if err != nil {
		t.Fatal(err)
	}
	check := exec.CommandContext(ctx, "node", "-e",
		`const v = process.argv[1] + ".0"; if (!require("semver").satisfies(v, ">= 1.8.0")) { console.log(v + " does not satisfy >= 1.8.0"); process.exit(1) }`,
		stats["version"])
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("stats version %q, as the suite reads it: %v\n%s", stats["version"], err, out)
	}

	cmd := exec.CommandContext(ctx, "node", "node_modules/mocha/bin/_mocha",
		"-t", "8000", "-R", "spec", "--grep", fivebeansExcluded, "--invert", "test/")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fivebeans' suite against %s failed: %v\n%s", addr, err, out)
	}
	passing := regexp.MustCompile(`(?m)^\s+(\d+) passing`).FindSubmatch(out)
	if passing == nil || string(passing[1]) != "53" || bytes.Contains(out, []byte(" failing")) {
		t.Errorf("fivebeans' suite against %s: want 53 passing and none failing (55 tests: one excluded, "+
			"one pending in the suite):\n%s", addr, out)
	}
}

// copyTree copies the file or directory src to dst, passing each file's
// bytes through edit.
func copyTree(src, dst string, edit func([]byte) []byte) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: not a regular file", path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, edit(b), 0o644)
	})
}
