package testproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// SproutPackage is the import path SproutBinary builds.
const SproutPackage = "github.com/sproutmq/sprout/cmd/sprout"

// buildTimeout bounds the one-off `go build` of Sprout.
const buildTimeout = 5 * time.Minute

// Beanstalkd returns the path of the reference server, Debian's beanstalkd,
// and fails the test (it does not skip it) when it is not on PATH.
func Beanstalkd(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("beanstalkd")
	if err != nil {
		t.Fatalf("the reference server beanstalkd is not on PATH (%v); install it with: apt-get install -y beanstalkd", err)
	}
	return path
}

// sproutBuild is the once-per-process build of cmd/sprout.
var sproutBuild struct {
	once sync.Once
	dir  string // temporary directory holding the binary; removed by RemoveSproutBinary
	path string // the binary; immutable after once
	err  error  // the build failure, with go build's output; immutable after once
}

// SproutBinary builds cmd/sprout into a temporary directory on first use in
// the test process and returns the binary's path. A failed build is
// remembered, so every test that needs Sprout fails fast with the same
// message instead of rebuilding.
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
		out, err := exec.CommandContext(ctx, goTool(), "build", "-o", path, SproutPackage).CombinedOutput()
		if err != nil {
			sproutBuild.err = fmt.Errorf("go build %s: %v\n%s", SproutPackage, err, out)
			return
		}
		sproutBuild.path = path
	})
	if sproutBuild.err != nil {
		t.Fatalf("cannot build Sprout: %v", sproutBuild.err)
	}
	return sproutBuild.path
}

// RemoveSproutBinary deletes what SproutBinary built. Call it from TestMain
// after m.Run.
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
