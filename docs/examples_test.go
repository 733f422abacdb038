// Package docs holds the guides. Its tests run their runnable examples
// (TestExamples) and check their links (TestLinks).
//
// A fenced block whose info string is "sh runnable" is run against a
// fresh in-memory Sprout listening on 127.0.0.1:11300, its side port on
// 127.0.0.1:8080; "sh runnable standalone" is run with no server, and
// starts what it needs. Each block runs on its own in bash (set -euo
// pipefail), in an empty directory, with sprout and sproutctl (built from
// this tree) first on PATH and nothing else of the environment but HOME;
// the ports the guides use (11300 to 11303, 8080 to 8083, 7001 to 7004)
// are replaced by free ones, consistently within a block, and so is
// sproutctl's default server, 127.0.0.1:11300 (SPROUT_SERVER). It must exit 0
// within blockTimeout, and print every line written after "#> " in it
// (runs of white space compared as one space).
// Whatever it left running, in its process group, is killed when it ends.
package docs

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

func TestMain(m *testing.M) { testproc.Main(m) }

// blockTimeout bounds one block's run.
const blockTimeout = time.Minute

// example is one runnable block.
type example struct {
	where      string // file:line of its opening fence
	script     string
	standalone bool // no server is started for it
}

// guides are the files whose blocks run.
func guides(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(files, "../README.md")
}

// examples reads the runnable blocks of path.
func examples(t *testing.T, path string) []example {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []example
	var cur *example
	var body strings.Builder
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(text, "```"):
			info := strings.Fields(strings.TrimPrefix(text, "```"))
			if len(info) >= 2 && info[0] == "sh" && info[1] == "runnable" {
				cur = &example{where: fmt.Sprintf("%s:%d", filepath.Base(path), line),
					standalone: len(info) > 2 && info[2] == "standalone"}
				body.Reset()
			}
		case cur != nil && strings.HasPrefix(text, "```"):
			cur.script = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(text + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s: the block never ends", cur.where)
	}
	return out
}

// guidePorts are the ports the guides write, each replaced by a free one.
var guidePorts = regexp.MustCompile(`\b(1130[0-3]|808[0-3]|700[1-4])\b`)

// TestExamples runs every runnable block of the guides and the README.
func TestExamples(t *testing.T) {
	bin := t.TempDir()
	if err := os.Symlink(testproc.SproutBinary(t), filepath.Join(bin, "sprout")); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "sproutctl"), "github.com/sproutmq/sprout/cmd/sproutctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sproutctl: %v\n%s", err, out)
	}
	n := 0
	for _, path := range guides(t) {
		for _, ex := range examples(t, path) {
			n++
			t.Run(ex.where, func(t *testing.T) {
				t.Parallel()
				runExample(t, bin, ex)
			})
		}
	}
	if n == 0 {
		t.Fatal("no runnable example in the guides")
	}
}

// runExample runs ex with bin first on PATH.
func runExample(t *testing.T, bin string, ex example) {
	ports := make(map[string]string)
	if !ex.standalone {
		httpPort, err := testproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p := testproc.StartConfig(t, testproc.Config{Binary: testproc.SproutBinary(t), Ready: testproc.Probe,
			Args: []string{"--http", "127.0.0.1:" + strconv.Itoa(httpPort)}})
		_, port, _ := net.SplitHostPort(p.Addr())
		ports["11300"], ports["8080"] = port, strconv.Itoa(httpPort)
		testproc.WaitFor(t, 10*time.Second, "the side port", func() bool {
			resp, err := http.Get("http://127.0.0.1:" + ports["8080"] + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		})
	}
	port := func(p string) string {
		if _, ok := ports[p]; !ok {
			free, err := testproc.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			ports[p] = strconv.Itoa(free)
		}
		return ports[p]
	}
	script := guidePorts.ReplaceAllStringFunc(ex.script, port)

	dir := t.TempDir()
	out, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\n"+script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8",
		"SPROUT_SERVER=127.0.0.1:" + port("11300")}
	// A file, not a pipe: servers the block leaves running keep it open.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The block's process group: what it started in the background too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Start()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	printed, readErr := os.ReadFile(out.Name())
	if readErr != nil {
		t.Fatal(readErr)
	}
	if err != nil {
		t.Fatalf("%s failed: %v\n--- the block, as run:\n%s--- its output:\n%s", ex.where, err, script, printed)
	}
	// Compared with runs of white space as one space: tables align
	// their columns to the widest value.
	spaced := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	var lines []string
	for _, line := range strings.Split(string(printed), "\n") {
		lines = append(lines, spaced(line))
	}
	all := "\n" + strings.Join(lines, "\n") + "\n"
	for _, line := range strings.Split(script, "\n") {
		want, ok := strings.CutPrefix(line, "#> ")
		if ok && !strings.Contains(all, spaced(want)) {
			t.Errorf("%s did not print %q\n--- its output:\n%s", ex.where, want, printed)
		}
	}
}
