package testproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SproutPackage is the import path SproutBinary builds.
const SproutPackage = "github.com/sproutmq/sprout/cmd/sprout"

// buildTimeout bounds the one-off `go build` of Sprout, and the build of the
// reference beanstalkd.
const buildTimeout = 5 * time.Minute

// RefEnv names the environment variable that points the tests at a
// reference beanstalkd binary, overriding the search described at Reference.
const RefEnv = "SPROUT_REF_BEANSTALKD"

// refBuildScript is where the script that builds the beanstalkd 1.13 release
// sits, relative to the repository root: in the shared folder beside the
// clone.
const refBuildScript = "../shared/tools/build-beanstalkd-1.13.sh"

// versionTimeout bounds `beanstalkd -v`.
const versionTimeout = 10 * time.Second

// Ref is the reference server the tests compare Sprout with.
type Ref struct {
	Path    string // the executable
	Version string // what `Path -v` prints after "beanstalkd ", such as "1.13"
	From    string // how it was found, for the test log
}

// Is112 reports whether the reference is beanstalkd 1.12, which differs from
// 1.13 (and Sprout) in known ways that the comparison must allow for.
func (r Ref) Is112() bool {
	return r.Version == "1.12" || strings.HasPrefix(r.Version, "1.12.") || strings.HasPrefix(r.Version, "1.12+")
}

// reference is the once-per-process search for the reference server.
var reference struct {
	once  sync.Once
	ref   Ref      // immutable after once
	notes []string // candidates passed over and why; immutable after once
	err   error    // no usable reference; immutable after once
}

// Reference returns the reference server, searched for once per test
// process in this order, the first usable one winning:
//
//  1. the binary named by $SPROUT_REF_BEANSTALKD, which must work: the test
//     fails if it does not;
//  2. the beanstalkd 1.13 that shared/tools/build-beanstalkd-1.13.sh left in
//     its cache, ${XDG_CACHE_HOME:-$HOME/.cache}/sprout-ref/beanstalkd-1.13;
//  3. that script run now, when it exists beside the repository and gcc and
//     make are installed (a failed build is logged and passed over);
//  4. beanstalkd on PATH, Debian's 1.12.
//
// The version comes from `beanstalkd -v`. Every test that asks logs which
// reference it got and the candidates passed over. With none at all the test
// fails (it does not skip): the comparison is the point.
func Reference(t testing.TB) Ref {
	t.Helper()
	reference.once.Do(func() {
		reference.ref, reference.notes, reference.err = FindReference()
	})
	for _, note := range reference.notes {
		t.Logf("reference beanstalkd: passed over %s", note)
	}
	if reference.err != nil {
		t.Fatalf("no reference beanstalkd: %v", reference.err)
	}
	r := reference.ref
	t.Logf("reference beanstalkd: %s, version %s, from %s", r.Path, r.Version, r.From)
	return r
}

// Beanstalkd returns the path of the reference server (see Reference).
func Beanstalkd(t testing.TB) string {
	t.Helper()
	return Reference(t).Path
}

// FindReference is Reference's search, for callers outside tests (the
// benchmarks compare with the same server). notes says what was passed over.
func FindReference() (ref Ref, notes []string, err error) {
	if path := os.Getenv(RefEnv); path != "" {
		ref, err := probeRef(path, "$"+RefEnv)
		if err != nil {
			return Ref{}, nil, fmt.Errorf("$%s names an unusable binary: %v", RefEnv, err)
		}
		return ref, nil, nil
	}
	cached := filepath.Join(refCacheDir(), "beanstalkd-1.13", "beanstalkd")
	if _, err := os.Stat(cached); err == nil {
		ref, err := probeRef(cached, "the build script's cache")
		if err == nil {
			return ref, nil, nil
		}
		notes = append(notes, fmt.Sprintf("the cached build %s: %v", cached, err))
	}
	if path, err := buildRef(); err != nil {
		notes = append(notes, fmt.Sprintf("building beanstalkd 1.13: %v", err))
	} else if ref, err := probeRef(path, "a build by "+refBuildScript); err != nil {
		notes = append(notes, fmt.Sprintf("the new build %s: %v", path, err))
	} else {
		return ref, notes, nil
	}
	path, err := exec.LookPath("beanstalkd")
	if err != nil {
		return Ref{}, notes, fmt.Errorf("beanstalkd is not on PATH (%v); install it with: apt-get install -y beanstalkd", err)
	}
	ref, err = probeRef(path, "PATH")
	return ref, notes, err
}

// probeRef asks the binary at path for its version.
func probeRef(path, from string) (Ref, error) {
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-v").Output()
	if err != nil {
		return Ref{}, fmt.Errorf("%s -v: %v", path, err)
	}
	version, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "beanstalkd ")
	if !ok || version == "" {
		return Ref{}, fmt.Errorf("%s -v printed %q, not \"beanstalkd <version>\"", path, out)
	}
	return Ref{Path: path, Version: version, From: from}, nil
}

// refCacheDir is the build script's cache root.
func refCacheDir() string {
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "sprout-ref")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "sprout-ref")
}

// buildRef runs the build script, if it and its tools are there, and returns
// the path it prints. Test processes of several packages may get here at
// once; a lock file in the cache keeps their builds from sharing the
// script's temporary folder, and the later ones find the build done.
func buildRef() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, refBuildScript)
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("no build script: %v", err)
	}
	for _, tool := range []string{"gcc", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s is not installed", tool)
		}
	}
	if err := os.MkdirAll(refCacheDir(), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(refCacheDir(), "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %v", lock.Name(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %v\n%s", script, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}

// repoRoot is the nearest directory at or above the working directory (a
// test's package directory) that holds go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// sproutBuild is the once-per-process build of cmd/sprout.
var sproutBuild struct {
	once sync.Once
	dir  string // temporary directory holding the binary; removed by RemoveSproutBinary
	path string // the binary; immutable after once
	err  error  // the build failure, with go build's output; immutable after once
}

// SproutBinary builds cmd/sprout into a temporary directory on first use in
// the test process and returns the binary's path. The server is built with
// the race detector when the test is (RaceEnabled), so that the tests that
// run it under load are race tests of the server too; StartConfig fails a
// test whose server reported a race. A failed build is remembered, so every
// test that needs Sprout fails fast with the same message instead of
// rebuilding.
func SproutBinary(t testing.TB) string {
	t.Helper()
	sproutBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "sprout-testproc-")
		if err != nil {
			sproutBuild.err = err
			return
		}
		sproutBuild.dir = dir
		path := filepath.Join(dir, "sprout")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		if sproutBuild.err = BuildSprout(ctx, path, RaceEnabled); sproutBuild.err == nil {
			sproutBuild.path = path
		}
	})
	if sproutBuild.err != nil {
		t.Fatalf("cannot build Sprout: %v", sproutBuild.err)
	}
	return sproutBuild.path
}

// BuildSprout builds cmd/sprout, of the module that holds the working
// directory, into path, with the race detector if race is set. The
// benchmarks build without it: they measure the server.
func BuildSprout(ctx context.Context, path string, race bool) error {
	args := []string{"build", "-o", path}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.CommandContext(ctx, goTool(), append(args, SproutPackage)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s %s: %v\n%s", strings.Join(args, " "), SproutPackage, err, out)
	}
	return nil
}

// Main runs a package's tests and removes what SproutBinary built: the
// TestMain of a package whose tests run the server is
// `func TestMain(m *testing.M) { testproc.Main(m) }`.
func Main(m *testing.M) {
	code := m.Run()
	RemoveSproutBinary()
	os.Exit(code)
}

// RemoveSproutBinary deletes what SproutBinary built. Call it from TestMain
// after m.Run, or use Main.
func RemoveSproutBinary() {
	if sproutBuild.dir != "" {
		os.RemoveAll(sproutBuild.dir)
	}
}

// goTool prefers the go command of the toolchain running the test, so the
// server is built with the same Go version as the test. (go test also puts
// that toolchain first on PATH; GOROOT covers a test binary run directly.)
func goTool() string {
	//lint:ignore SA1019 the running toolchain's GOROOT is exactly what is wanted.
	if root := runtime.GOROOT(); root != "" {
		path := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	return "go"
}
