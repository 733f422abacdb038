package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// buildTimeout bounds make deb (two builds of the binaries and the
// packaging) and lintian.
const buildTimeout = 10 * time.Minute

// TestPackage builds the package as make deb does, then checks it as dpkg
// would install it: its control fields and conffiles, its layout (dpkg-deb
// -x into a scratch root), the unit pointing at the installed binary, the
// maintainer script creating the user, lintian finding no error, and the
// installed binary serving a put and a reserve with the settings
// /etc/default/sprout shows uncommented.
func TestPackage(t *testing.T) {
	for _, tool := range []string{"make", "dpkg-deb", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the package test needs %s (apt-get install make dpkg git): %v", tool, err)
		}
	}
	work := t.TempDir()
	pkg := filepath.Join(work, "sprout.deb")
	run(t, "make", "-C", "../..", "--no-print-directory", "deb", "DEB_WORK="+filepath.Join(work, "build"), "DEB_OUT="+pkg)

	ctrl := filepath.Join(work, "control")
	root := filepath.Join(work, "root")
	run(t, "dpkg-deb", "-e", pkg, ctrl)
	run(t, "dpkg-deb", "-x", pkg, root)

	t.Run("control", func(t *testing.T) {
		fields := controlFields(t, filepath.Join(ctrl, "control"))
		for key, want := range map[string]string{"Package": "sprout", "Depends": "adduser", "Section": "net"} {
			if fields[key] != want {
				t.Errorf("%s: %q, want %q", key, fields[key], want)
			}
		}
		if v := fields["Version"]; !regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`).MatchString(v) {
			t.Errorf("Version %q is not a native Debian version", v)
		}
		if b, err := os.ReadFile(filepath.Join(ctrl, "conffiles")); err != nil || strings.TrimSpace(string(b)) != "/etc/default/sprout" {
			t.Errorf("conffiles: %q, %v; want /etc/default/sprout", b, err)
		}
	})

	t.Run("layout", func(t *testing.T) {
		for path, mode := range map[string]os.FileMode{
			"usr/bin/sprout": 0o755, "usr/bin/sproutctl": 0o755,
			"usr/share/man/man1/sprout.1.gz": 0o644, "usr/share/man/man1/sproutctl.1.gz": 0o644,
			"usr/share/man/man1/sproutctl-put.1.gz": 0o644,
			"usr/lib/systemd/system/sprout.service": 0o644, "usr/lib/systemd/system/sprout.socket": 0o644,
			"usr/lib/sysusers.d/sprout.conf": 0o644, "etc/default/sprout": 0o644,
			"usr/share/bash-completion/completions/sproutctl":    0o644,
			"usr/share/zsh/vendor-completions/_sproutctl":        0o644,
			"usr/share/fish/vendor_completions.d/sproutctl.fish": 0o644,
			"usr/share/doc/sprout/copyright":                     0o644,
			"usr/share/doc/sprout/changelog.gz":                  0o644,
			"usr/share/doc/sprout/README.Debian":                 0o644,
			"usr/share/lintian/overrides/sprout":                 0o644,
		} {
			info, err := os.Stat(filepath.Join(root, path))
			if err != nil {
				t.Errorf("/%s: %v", path, err)
				continue
			}
			if info.Mode().Perm() != mode {
				t.Errorf("/%s: mode %v, want %v", path, info.Mode().Perm(), mode)
			}
		}
		unit, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/sprout.service"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"\nExecStart=/usr/bin/sprout -b /var/lib/sprout\n", "\nEnvironmentFile=-/etc/default/sprout\n"} {
			if !bytes.Contains(unit, []byte(want)) {
				t.Errorf("sprout.service has no line %q", strings.TrimSpace(want))
			}
		}
	})

	t.Run("postinst", func(t *testing.T) {
		// The script runs on this machine with every command it calls
		// replaced by a stub that records its arguments: getent finds no
		// user sprout, so it must be created.
		stubs := t.TempDir()
		calls := filepath.Join(stubs, "calls")
		for _, name := range []string{"getent", "adduser", "mkdir", "chown", "chmod", "systemctl"} {
			status := "0"
			if name == "getent" {
				status = "2"
			}
			script := "#!/bin/sh\necho \"" + name + " $*\" >> " + calls + "\nexit " + status + "\n"
			if err := os.WriteFile(filepath.Join(stubs, name), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("/bin/sh", filepath.Join(ctrl, "postinst"), "configure")
		cmd.Env = []string{"PATH=" + stubs}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("postinst configure: %v\n%s", err, out)
		}
		b, err := os.ReadFile(calls)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^adduser --system --group --home /var/lib/sprout .* sprout$`).Match(b) {
			t.Errorf("postinst did not create the system user sprout; it ran:\n%s", b)
		}
		if _, err := os.Stat("/var/lib/sprout"); err != nil && !bytes.Contains(b, []byte("chown sprout:sprout /var/lib/sprout")) {
			t.Errorf("postinst did not give /var/lib/sprout to sprout; it ran:\n%s", b)
		}
	})

	t.Run("lintian", func(t *testing.T) {
		if _, err := exec.LookPath("lintian"); err != nil {
			t.Skipf("lintian is not installed (apt-get install lintian; .ci/test-setup installs it): %v", err)
		}
		out := run(t, "lintian", "--fail-on", "error", "--tag-display-limit", "0", pkg)
		t.Logf("lintian:\n%s", out)
	})

	t.Run("serves", func(t *testing.T) {
		serveInstalled(t, root)
	})

	t.Run("make install", func(t *testing.T) {
		// The binaries make deb built, installed as a user would, under
		// /usr/local, then removed.
		bin := filepath.Join(work, "build", "bin")
		dest := t.TempDir()
		vars := []string{"BIN=" + filepath.Join(bin, "sprout"), "CTL=" + filepath.Join(bin, "sproutctl"), "DESTDIR=" + dest}
		run(t, "make", append([]string{"-C", "../..", "--no-print-directory", "install"}, vars...)...)
		for _, path := range []string{"usr/local/bin/sprout", "usr/local/bin/sproutctl", "usr/local/share/man/man1/sprout.1",
			"usr/local/share/man/man1/sproutctl.1", "usr/local/lib/systemd/system/sprout.socket",
			"usr/local/lib/sysusers.d/sprout.conf", "usr/local/share/bash-completion/completions/sproutctl",
			"usr/local/share/zsh/site-functions/_sproutctl", "usr/local/share/fish/vendor_completions.d/sproutctl.fish",
			"etc/default/sprout"} {
			if _, err := os.Stat(filepath.Join(dest, path)); err != nil {
				t.Errorf("make install: %v", err)
			}
		}
		unit, err := os.ReadFile(filepath.Join(dest, "usr/local/lib/systemd/system/sprout.service"))
		if err != nil || !bytes.Contains(unit, []byte("\nExecStart=/usr/local/bin/sprout -b /var/lib/sprout\n")) {
			t.Errorf("make install's sprout.service (%v) does not start /usr/local/bin/sprout:\n%s", err, unit)
		}
		run(t, "make", append([]string{"-C", "../..", "--no-print-directory", "uninstall"}, vars...)...)
		var left []string
		err = filepath.WalkDir(dest, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				left = append(left, strings.TrimPrefix(path, dest))
			}
			return err
		})
		if err != nil || len(left) != 1 || left[0] != "/etc/default/sprout" {
			t.Errorf("after make uninstall: %q (%v); want only /etc/default/sprout", left, err)
		}
	})
}

// serveInstalled starts the installed sprout with the settings its
// /etc/default/sprout shows, uncommented (the side port on a free port,
// the admin token in a file made here), puts and reserves a job, and asks
// the installed sproutctl for the stats.
func serveInstalled(t *testing.T, root string) {
	b, err := os.ReadFile(filepath.Join(root, "etc/default/sprout"))
	if err != nil {
		t.Fatal(err)
	}
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := "127.0.0.1:" + strconv.Itoa(port)
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, m := range regexp.MustCompile(`(?m)^#(SPROUT_[A-Z_]+=.*)$`).FindAllStringSubmatch(string(b), -1) {
		env = append(env, strings.NewReplacer("127.0.0.1:8080", httpAddr, "/etc/sprout/admin-token", tokenFile).Replace(m[1]))
	}
	if len(env) < 3 {
		t.Fatalf("/etc/default/sprout shows %d settings: %q", len(env), env)
	}
	p := testproc.StartConfig(t, testproc.Config{
		Binary: filepath.Join(root, "usr/bin/sprout"), Args: []string{"-b", t.TempDir()}, Env: env, Ready: testproc.Probe})

	c := testproc.DialTest(t, p.Addr(), 10*time.Second)
	id, err := c.Put(0, 0, 60, []byte("from the package"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Do("reserve-with-timeout 0", nil)
	if err != nil || r.Kind != testproc.ReplyReserved || r.N != id || string(r.Body) != "from the package" {
		t.Fatalf("reserve: %q %q, %v; want job %d", r.Line, r.Body, err, id)
	}
	testproc.WaitFor(t, 10*time.Second, "the side port SPROUT_HTTP asks for", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if out := p.Output(); strings.Contains(out, "unknown environment variable") {
		t.Errorf("with %q Sprout warned:\n%s", env, out)
	}
	out := run(t, filepath.Join(root, "usr/bin/sproutctl"), "-s", p.Addr(), "stats")
	if !strings.Contains(out, "current-jobs-reserved") {
		t.Errorf("sproutctl stats printed:\n%s", out)
	}
}

// run runs a command to its end and returns its output; a failure fails
// the test with it.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// controlFields reads a control file's single-line fields.
func controlFields(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fields := make(map[string]string)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if key, value, ok := strings.Cut(sc.Text(), ": "); ok && !strings.HasPrefix(key, " ") {
			fields[key] = value
		}
	}
	return fields
}
