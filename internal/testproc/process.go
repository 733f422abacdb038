package testproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DefaultStartTimeout is how long Start waits for a server to become ready
// when Config.StartTimeout is zero.
const DefaultStartTimeout = 10 * time.Second

// startAttempts bounds the tries on a new port when a server could not bind
// the free port it was given.
const startAttempts = 3

// Config describes a process for StartConfig and Launch.
type Config struct {
	// Binary is the executable.
	Binary string
	// Args follow `-l 127.0.0.1 -p PORT`.
	Args []string
	// NoListen runs Binary with exactly Args: no -l and -p are added and
	// there is no wait for readiness.
	NoListen bool
	// Ready reports whether the server at addr is ready, within timeout;
	// nil means Accepts.
	Ready func(addr string, timeout time.Duration) error
	// StartTimeout bounds the wait for readiness; zero means
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// OutputLimit caps the output kept, in bytes, so that a chatty server
	// cannot grow its parent without bound; zero keeps everything.
	OutputLimit int
	// Env is added to the parent's environment (KEY=value each).
	Env []string
}

// Process is a started child process.
type Process struct {
	cmd    *exec.Cmd
	addr   string // 127.0.0.1:port; empty with NoListen
	output *buffer
	done   chan struct{} // closed once the process has been waited for
	err    error         // what cmd.Wait returned; written before done is closed
}

// Start runs binary with `-l 127.0.0.1 -p PORT` followed by args, waits
// until it accepts a connection, and kills it by PID when the test ends.
// A server that exits early or is not ready within DefaultStartTimeout fails
// the test with its output, and so does one that printed a data race report
// (a server SproutBinary built under -race) by the time the test ends.
func Start(t testing.TB, binary string, args ...string) *Process {
	t.Helper()
	return StartConfig(t, Config{Binary: binary, Args: args})
}

// StartSprout runs a freshly built Sprout (SproutBinary) with its side
// port on a free loopback port (--http) and args, as Start does, waits
// until the side port answers /healthz, and returns the process and the
// side port's base URL, http://127.0.0.1:PORT.
func StartSprout(t testing.TB, args ...string) (*Process, string) {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := StartConfig(t, Config{
		Binary: SproutBinary(t),
		Args:   append([]string{"--http", strings.TrimPrefix(base, "http://")}, args...),
		Ready:  Probe,
	})
	for deadline := time.Now().Add(DefaultStartTimeout); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			return p, base
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the side port does not answer: %v\n%s", p, err, p.Output())
		}
	}
}

// StartConfig is Start with the settings in cfg.
func StartConfig(t testing.TB, cfg Config) *Process {
	t.Helper()
	p, err := Launch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if report := p.RaceReport(); report != "" {
			t.Errorf("%s reported a data race:\n%s", p, report)
		}
		if t.Failed() {
			// What the server said is the first thing a failure that does
			// not repeat needs (a step's log line, a warning).
			t.Logf("%s printed (its last %d KiB at most):\n%s", p, failureOutput>>10, tail(p.Output(), failureOutput))
		}
	})
	return p
}

// failureOutput bounds what a failed test logs of a server's output.
const failureOutput = 32 << 10

// tail is s's last n bytes at most, from a line's start.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// Launch starts cfg and, unless cfg.NoListen, waits until it is ready: on
// Linux, until the process itself listens on its port, and then until
// cfg.Ready passes. The caller must end the process (Kill or Stop). A
// failure to become ready is a *StartError, and the process has then
// ended. The free port is found by binding and releasing it, so another
// process may take it in between (go test runs packages in parallel); a
// server that exits complaining that its address is in use is tried again
// on a new port.
func Launch(cfg Config) (*Process, error) {
	if cfg.NoListen {
		return launchOnce(cfg, "")
	}
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p, err := launchOnce(cfg, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		var se *StartError
		if err == nil || attempt == startAttempts || !errors.As(err, &se) ||
			!se.Exited || !strings.Contains(se.Process.Output(), "in use") {
			return p, err
		}
	}
}

func launchOnce(cfg Config, addr string) (*Process, error) {
	args := cfg.Args
	if addr != "" {
		host, port, _ := net.SplitHostPort(addr)
		args = append([]string{"-l", host, "-p", port}, cfg.Args...)
	}
	p := &Process{
		cmd:    exec.Command(cfg.Binary, args...),
		addr:   addr,
		output: &buffer{limit: cfg.OutputLimit},
		done:   make(chan struct{}),
	}
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if len(cfg.Env) > 0 {
		p.cmd.Env = append(os.Environ(), cfg.Env...)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %v", cfg.Binary, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if addr == "" {
		return p, nil
	}
	ready := cfg.Ready
	if ready == nil {
		ready = Accepts
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	deadline := time.Now().Add(timeout)
	for {
		if p.Exited() {
			return nil, &StartError{Process: p, Exited: true}
		}
		// The port is checked first: a server started a moment ago has
		// not bound it yet, and another process's server that took it
		// meanwhile would pass the readiness check in its place.
		err := p.listening(port)
		if err == nil {
			err = ready(addr, max(time.Until(deadline), 50*time.Millisecond))
		}
		if err == nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, &StartError{Process: p, Timeout: timeout, Err: err}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listening returns nil once the process itself listens on port, and
// says so otherwise.
func (p *Process) listening(port int) error {
	ok, err := listensOn(p.PID(), port)
	if err == nil && !ok {
		err = fmt.Errorf("process %d does not listen on port %d", p.PID(), port)
	}
	return err
}

// StartError says why a server did not become ready. Its Process has ended.
type StartError struct {
	Process *Process
	// Exited is true when the process exited by itself; otherwise it was not
	// ready within Timeout, the last check failed with Err, and it was killed.
	Exited  bool
	Timeout time.Duration
	Err     error
}

func (e *StartError) Error() string {
	if e.Exited {
		return fmt.Sprintf("%s exited before accepting connections (%v):\n%s",
			e.Process, e.Process.State(), e.Process.Output())
	}
	return fmt.Sprintf("%s did not answer on %s within %v (%v); its output:\n%s",
		e.Process, e.Process.addr, e.Timeout, e.Err, e.Process.Output())
}

// Accepts reports whether a server accepts a TCP connection at addr.
func Accepts(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, min(timeout, time.Second))
	if err != nil {
		return err
	}
	return c.Close()
}

// Probe checks that a server at addr speaks the protocol: list-tube-used is
// answered with USING default, and quit closes the connection. Waiting for
// the close means the probe is counted in total-connections and no longer
// in current-connections by the time Probe returns, on every server.
func Probe(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, min(timeout, time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("list-tube-used\r\nquit\r\n")); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if line != "USING default\r\n" {
		return fmt.Errorf("probe: list-tube-used answered %q", line)
	}
	if b, err := r.ReadByte(); err != io.EOF {
		return fmt.Errorf("probe: after quit got %q, %v; want the connection closed", b, err)
	}
	return nil
}

// FreePort returns an unused TCP port on 127.0.0.1, and never one it
// returned before in this process or in another test process still
// running (claimPort): the port is free only until someone
// binds it, and a server given a port may not have bound it yet (a
// cluster member not started, or restarting). It picks below the
// kernel's ephemeral range (freePorts), where no bind to port 0 lands:
// a port the kernel handed out once was offered again to another
// member's --http, :0, before the member given it had bound it.
func FreePort() (int, error) {
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	low, high := freePorts()
	for range 1000 {
		port := low + rand.IntN(high-low+1)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		_ = l.Close()
		if !claimPort(port) {
			continue // another test process took it
		}
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("finding a free port: none free among 1000 tried in %d-%d", low, high)
}

// freePorts is the range FreePort picks from: the 12,000 ports below
// the kernel's ephemeral range (Linux's ip_local_port_range, 32768 to
// 60999 by default), never below 1024.
func freePorts() (low, high int) {
	first := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				first = n
			}
		}
	}
	high = max(first-1, 2048)
	return max(high-12000, 1024), high
}

// handedOut is the ports FreePort returned.
var handedOut = struct {
	mu    sync.Mutex
	ports map[int]bool
}{ports: make(map[int]bool)}

// String returns the command line, for messages.
func (p *Process) String() string { return strings.Join(p.cmd.Args, " ") }

// Addr returns the server's 127.0.0.1:port address (empty with NoListen).
func (p *Process) Addr() string { return p.addr }

// PID returns the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Output returns what the process has written to stdout and stderr so far
// (up to Config.OutputLimit).
func (p *Process) Output() string { return p.output.String() }

// RaceReport returns the race detector's output, from its first "WARNING:
// DATA RACE" on (at most raceKeep bytes, kept whatever Config.OutputLimit),
// or "" if the process has reported no data race so far.
func (p *Process) RaceReport() string { return p.output.raceReport() }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// State returns how the process ended, or nil while it runs.
func (p *Process) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Err returns what waiting for the process returned: nil while it runs and
// after a zero exit status, an *exec.ExitError otherwise.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// ExitCode returns the exit code, or -1 while the process runs or when a
// signal ended it.
func (p *Process) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig to the process by its PID, unless it has ended.
func (p *Process) Signal(sig os.Signal) error {
	if p.Exited() {
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

// Wait waits for the process to end, at most timeout (zero or less: without
// limit), and reports whether it has.
func (p *Process) Wait(timeout time.Duration) bool {
	if timeout <= 0 {
		<-p.done
		return true
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Process) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits for the process to end. If grace is positive
// and the process outlives it, Stop kills it with SIGKILL. It reports
// whether the process ended by itself (or had already ended).
func (p *Process) Stop(grace time.Duration) bool {
	if p.Exited() {
		return true
	}
	_ = p.Signal(syscall.SIGTERM)
	if p.Wait(grace) {
		return true
	}
	p.Kill()
	return false
}

// raceMarker begins each report of the race detector.
const raceMarker = "WARNING: DATA RACE"

// raceKeep bounds the race detector's output a buffer keeps: the first
// report, with its stacks, and usually a few more.
const raceKeep = 64 << 10

// buffer collects a child's output; exec writes it from its own goroutine
// while the caller may read it. The race detector's reports are kept apart,
// so that a chatty child past its limit cannot hide them.
type buffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer // guarded by mu
	limit int          // bytes kept at most; zero: no limit
	seam  []byte       // guarded by mu: the last bytes written, for a marker split across writes
	races bytes.Buffer // guarded by mu: output from the first raceMarker on, at most raceKeep bytes
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.scanRacesLocked(p)
	if b.limit > 0 && b.buf.Len() > b.limit {
		return len(p), nil
	}
	return b.buf.Write(p)
}

// scanRacesLocked keeps p in b.races once a race report has begun.
func (b *buffer) scanRacesLocked(p []byte) {
	if b.races.Len() == 0 {
		joined := append(b.seam, p...)
		i := bytes.Index(joined, []byte(raceMarker))
		if i < 0 {
			b.seam = append(b.seam[:0], joined[max(0, len(joined)-len(raceMarker)+1):]...)
			return
		}
		p = joined[i:]
	}
	b.races.Write(p[:min(len(p), raceKeep-b.races.Len())])
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *buffer) raceReport() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.races.String()
}

// claimPort claims port for this process against the other test
// processes that run at once (go test runs packages in parallel, and two
// cluster tests once drew the same port): an exclusive lock on a file
// named by the port, held until the process exits. It reports false if
// another process holds it; where locks cannot be taken, true.
func claimPort(port int) bool {
	// Not os.TempDir: tests point TMPDIR at directories of their own
	// (and check what is left there), and every process must see one.
	held, err := HoldLock(filepath.Join("/tmp", "sprout-testports", strconv.Itoa(port)))
	return held || err != nil
}

// HoldLock takes an exclusive lock on the file at path (made, with its
// directory, where missing) for this process, held until it exits,
// whichever way: other processes find it taken while this one lives.
// held is false if the lock was not taken (another process holds it);
// err says why the file could not be made or opened.
func HoldLock(path string) (held bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return false, nil
	}
	heldLocks.mu.Lock()
	heldLocks.files = append(heldLocks.files, f) // held open (and from the finalizer): the lock lasts
	heldLocks.mu.Unlock()
	return true, nil
}

// heldLocks are the files whose locks HoldLock took.
var heldLocks struct {
	mu    sync.Mutex
	files []*os.File
}
