package testproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartProbeKill(t *testing.T) {
	p := StartConfig(t, Config{Binary: Beanstalkd(t), Ready: Probe})
	if err := Probe(p.Addr(), time.Second); err != nil {
		t.Fatalf("probe of a ready server: %v", err)
	}
	if p.Exited() || p.ExitCode() != -1 || p.State() != nil || p.Err() != nil {
		t.Fatalf("running process: exited %v, code %d, state %v, err %v", p.Exited(), p.ExitCode(), p.State(), p.Err())
	}
	p.Kill()
	if !p.Exited() || p.ExitCode() != -1 || p.Err() == nil {
		t.Fatalf("killed process: exited %v, code %d, err %v", p.Exited(), p.ExitCode(), p.Err())
	}
	if err := Accepts(p.Addr(), time.Second); err == nil {
		t.Fatal("a killed server still accepts connections")
	}
}

func TestStop(t *testing.T) {
	p := Start(t, Beanstalkd(t))
	if !p.Stop(10 * time.Second) {
		t.Fatalf("beanstalkd outlived SIGTERM:\n%s", p.Output())
	}
	if !p.Exited() {
		t.Fatal("Stop returned before the process ended")
	}
}

func TestLaunchExitedEarly(t *testing.T) {
	p, err := Launch(Config{Binary: Beanstalkd(t), Args: []string{"-z", "not-a-number"}})
	var se *StartError
	if p != nil || !errors.As(err, &se) || !se.Exited {
		t.Fatalf("Launch of a server refusing its flags: %v, %v; want an exited *StartError", p, err)
	}
	if code := se.Process.ExitCode(); code != 5 {
		t.Errorf("exit code %d, want beanstalkd's usage status 5:\n%s", code, se.Process.Output())
	}
}

func TestNoListen(t *testing.T) {
	p := StartConfig(t, Config{Binary: Beanstalkd(t), Args: []string{"-v"}, NoListen: true})
	if !p.Wait(10 * time.Second) {
		t.Fatal("beanstalkd -v still running")
	}
	if p.Addr() != "" || p.ExitCode() != 0 || !strings.Contains(p.Output(), "beanstalkd") {
		t.Fatalf("beanstalkd -v: addr %q, exit code %d, output %q", p.Addr(), p.ExitCode(), p.Output())
	}
}

func TestRefIs112(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"1.12", true},
		{"1.12.1", true},
		{"1.12+2-gabcdef", true},
		{"1.13", false},
		{"1.13+25-g25085c5", false},
		{"1.120", false},
		{"1.1", false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			if got := (Ref{Version: tc.version}).Is112(); got != tc.want {
				t.Errorf("Ref{Version: %q}.Is112() = %v, want %v", tc.version, got, tc.want)
			}
		})
	}
}

// TestReferenceFromEnv points the search at Debian's 1.12 through the
// environment; findReference is what Reference runs once per process.
func TestReferenceFromEnv(t *testing.T) {
	path, err := exec.LookPath("beanstalkd")
	if err != nil {
		t.Skip("no beanstalkd on PATH to point at")
	}
	t.Setenv(RefEnv, path)
	ref, notes, err := FindReference()
	if err != nil || len(notes) != 0 || ref.Path != path || ref.Version == "" {
		t.Fatalf("FindReference() = %+v, %q, %v; want %s with its version", ref, notes, err, path)
	}
	t.Setenv(RefEnv, "/bin/true")
	if _, _, err := FindReference(); err == nil {
		t.Fatal("FindReference() accepted /bin/true, which prints no version")
	}
}

// recordingTB is a test that keeps what StartConfig reports, and its
// cleanups, to be run by hand.
type recordingTB struct {
	testing.TB
	failed   bool // failed by the test itself, before its cleanups
	errors   []string
	logs     []string
	cleanups []func()
}

func (r *recordingTB) Helper()          {}
func (r *recordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Failed() bool     { return r.failed || len(r.errors) > 0 }
func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

// TestFailedTestShowsOutput: a test that failed logs what its servers
// printed, the end of it when it is long; one that passed logs nothing.
func TestFailedTestShowsOutput(t *testing.T) {
	script := "seq -f 'line %g, ten words of output to make the whole longer than kept' 2000" // 140 KB
	for _, failed := range []bool{false, true} {
		rec := &recordingTB{TB: t, failed: failed}
		p := StartConfig(rec, Config{Binary: "/bin/sh", Args: []string{"-c", script}, NoListen: true})
		if !p.Wait(10 * time.Second) {
			t.Fatal("sh still running")
		}
		for _, f := range rec.cleanups {
			f()
		}
		logged := strings.Join(rec.logs, "\n")
		switch {
		case !failed && logged != "":
			t.Errorf("a test that passed logged %d bytes of output", len(logged))
		case failed && (!strings.Contains(logged, "\nline 2000,") || strings.Contains(logged, "\nline 1,") || len(logged) > failureOutput+200):
			t.Errorf("a failed test logged %d bytes: %.200q", len(logged), logged)
		}
	}
}

// TestRaceReportFailsTest: a process that printed a race report fails the
// test that started it, when the test ends.
func TestRaceReportFailsTest(t *testing.T) {
	report := "echo starting; echo '==================' >&2; echo 'WARNING: DATA RACE' >&2; echo 'Write at 0x01 by goroutine 9:' >&2"
	if errs := runScript(t, report); len(errs) != 1 || !strings.Contains(errs[0], "by goroutine 9") {
		t.Errorf("a script printing a race report: the test reported %q; want the report", errs)
	}
	if errs := runScript(t, "echo 'WARNING: nothing of the kind'"); len(errs) != 0 {
		t.Errorf("a script printing no race report: the test reported %q", errs)
	}
}

// runScript runs a shell script under StartConfig, to its end and the end
// of its test, and returns the errors the test got.
func runScript(t *testing.T, script string) []string {
	rec := &recordingTB{TB: t}
	p := StartConfig(rec, Config{Binary: "/bin/sh", Args: []string{"-c", script}, NoListen: true})
	if !p.Wait(10 * time.Second) {
		t.Fatal("sh still running")
	}
	for _, f := range rec.cleanups {
		f()
	}
	return rec.errors
}

// TestSproutBinaryRace: the server has the race detector exactly when the
// test does.
func TestSproutBinaryRace(t *testing.T) {
	out, err := exec.Command(goTool(), "version", "-m", SproutBinary(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	if got := strings.Contains(string(out), "-race=true"); got != RaceEnabled {
		t.Errorf("server built with -race: %v, test: %v\n%s", got, RaceEnabled, out)
	}
}

func TestMain(m *testing.M) { Main(m) }

// TestFreePortNeverRepeats: FreePort never hands out a port twice in one
// process, and none a bind to port 0 could be given (the kernel's
// ephemeral range), however many of those there are meanwhile.
func TestFreePortNeverRepeats(t *testing.T) {
	low, high := freePorts()
	seen := make(map[int]bool)
	for range 2000 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		if port < low || port > high {
			t.Fatalf("port %d, outside %d-%d", port, low, high)
		}
		seen[port] = true
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if eph := l.Addr().(*net.TCPAddr).Port; eph >= low && eph <= high {
			t.Fatalf("the kernel gave port %d to a bind to port 0: FreePort's range %d-%d is not apart from it", eph, low, high)
		}
		_ = l.Close()
	}
}

// TestLaunchIgnoresAnotherServer: a server that has not bound its port
// yet, and then finds it taken by another process (go test runs packages in
// parallel, each picking free ports), is not ready because that other
// process answers on the port: Launch waits for its own process, which here
// exits saying the address is in use. Before, the other server passed the
// readiness check and the test went on to talk to it.
func TestLaunchIgnoresAnotherServer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("whose socket listens on a port is read from Linux's /proc")
	}
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close() // its backlog takes the readiness check's connection
	// A server slow to start, which then cannot bind the port.
	slow := filepath.Join(t.TempDir(), "slow-server")
	script := "#!/bin/sh\nsleep 1\necho 'listen: address already in use' >&2\nexit 1\n"
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := launchOnce(Config{Binary: slow}, other.Addr().String())
	var se *StartError
	if p != nil || !errors.As(err, &se) || !se.Exited || !strings.Contains(se.Process.Output(), "in use") {
		if p != nil {
			p.Kill()
		}
		t.Fatalf("Launch of a server whose port another process holds: %v, %v; want an exited *StartError", p, err)
	}
}

// TestListensOn: a socket listening on a port is told apart by its owner,
// whether it listens on loopback (tcp) or, as Go listens on 0.0.0.0, on
// both stacks (tcp6); a port nobody listens on is nobody's.
func TestListensOn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("whose socket listens on a port is read from Linux's /proc")
	}
	p := StartConfig(t, Config{Binary: Beanstalkd(t)})
	for _, addr := range []string{p.Addr(), "127.0.0.1:0", "0.0.0.0:0"} {
		if addr != p.Addr() {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			addr = ln.Addr().String()
		}
		_, portText, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(portText)
		own, other := os.Getpid(), p.PID()
		if addr == p.Addr() {
			own, other = other, own
		}
		if ok, err := listensOn(own, port); !ok || err != nil {
			t.Errorf("%s: listensOn(owner) = %v, %v; want true", addr, ok, err)
		}
		if ok, err := listensOn(other, port); ok || err != nil {
			t.Errorf("%s: listensOn(another process) = %v, %v; want false", addr, ok, err)
		}
	}
	free, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := listensOn(os.Getpid(), free); ok || err != nil {
		t.Errorf("a free port: listensOn = %v, %v; want false", ok, err)
	}
}

// TestHoldLock: a lock HoldLock took is found taken by anyone else who
// tries it, here another open of the same file (a flock belongs to the
// open file, not the process), and a file that cannot be made is an
// error.
func TestHoldLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks", "run")
	if held, err := HoldLock(path); !held || err != nil {
		t.Fatalf("the first HoldLock: %v %v, want held", held, err)
	}
	if held, err := HoldLock(path); held || err != nil {
		t.Fatalf("a second HoldLock of the held file: %v %v, want not held, no error", held, err)
	}
	if held, err := HoldLock(filepath.Join(path, "under-a-file")); held || err == nil {
		t.Fatalf("HoldLock under a regular file: %v %v, want an error", held, err)
	}
}
