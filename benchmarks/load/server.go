package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrFlagsRefused is returned by StartServer when the server exits with
// status 5 at start, beanstalkd's status for a usage error: it does not
// support a flag it was given.
var ErrFlagsRefused = errors.New("load: server refused its flags (exit status 5)")

// startTimeout bounds how long a server may take to answer its first command.
const startTimeout = 10 * time.Second

// ServerSpec says how to start one of the servers under comparison.
type ServerSpec struct {
	// Name labels the server in results: "beanstalkd" or "sprout".
	Name string
	// Path is the executable.
	Path string
	// Args follow "-l 127.0.0.1 -p PORT" and come before a scenario's own.
	Args []string
}

// Server is a running server process, started fresh for one run.
type Server struct {
	Spec ServerSpec
	Addr string // 127.0.0.1:port
	PID  int

	cmd    *exec.Cmd
	output *lockedBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // the process's exit status; written before done is closed
}

// StartServer starts spec on a free loopback port with extra arguments after
// its own, and waits until it answers a command. A server that exits with
// status 5 yields ErrFlagsRefused.
func StartServer(spec ServerSpec, extra ...string) (*Server, error) {
	// The free port is found by binding and releasing it, so another process
	// may take it in between; a server that cannot bind is retried.
	var lastErr error
	for range 3 {
		s, err := startOnce(spec, extra)
		if err == nil || errors.Is(err, ErrFlagsRefused) {
			return s, err
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOnce(spec ServerSpec, extra []string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"-l", "127.0.0.1", "-p", strconv.Itoa(port)}, spec.Args...)
	args = append(args, extra...)
	cmd := exec.Command(spec.Path, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("load: start %s: %w", spec.Name, err)
	}
	s := &Server{
		Spec: spec, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), PID: cmd.Process.Pid,
		cmd: cmd, output: out, done: make(chan struct{}),
	}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.done:
			var ee *exec.ExitError
			if errors.As(s.err, &ee) && ee.ExitCode() == 5 {
				return nil, fmt.Errorf("%w: %s %s: %s", ErrFlagsRefused, spec.Name, strings.Join(args, " "), s.Output())
			}
			return nil, fmt.Errorf("load: %s exited at start (%v): %s", spec.Name, s.err, s.Output())
		default:
		}
		if err := s.probe(); err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("load: %s did not answer on %s within %v: %s", spec.Name, s.Addr, startTimeout, s.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probe connects, asks list-tube-used, quits and waits for the server to
// close the connection, so that the probe is no longer among the server's
// current connections when the run counts them.
func (s *Server) probe() error {
	c, err := Dial(s.Addr, nil, time.Second, 0)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	c.WriteString("list-tube-used\r\nquit\r\n")
	if err := c.Flush(); err != nil {
		return err
	}
	if _, err = c.Expect(ReplyUsing); err != nil {
		return err
	}
	if _, err := c.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("load: %s did not close the connection after quit (%v)", s.Spec.Name, err)
	}
	return nil
}

// stopGrace is how long Stop lets a server shut down on SIGTERM (time for
// Sprout's --cpu-profile to be written) before it sends SIGKILL.
const stopGrace = 3 * time.Second

// Stop ends the server by its PID, SIGTERM first and SIGKILL if it has not
// exited within stopGrace, and waits for it to exit.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return
	case <-time.After(stopGrace):
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
}

// Exited reports whether the process has ended, and how.
func (s *Server) Exited() (bool, error) {
	select {
	case <-s.done:
		return true, s.err
	default:
		return false, nil
	}
}

// Output returns what the server has printed so far, at most its last 2 KiB.
func (s *Server) Output() string {
	b := s.output.Bytes()
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(string(b))
}

// Usage reads the server's CPU time and resident memory from /proc.
func (s *Server) Usage() (ProcUsage, error) { return ReadProcUsage(s.PID) }

// ProcUsage is a process's CPU time (user+system) and resident set size.
type ProcUsage struct {
	CPU time.Duration
	RSS int64 // bytes
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// ReadProcUsage reads utime+stime from /proc/PID/stat and VmRSS from
// /proc/PID/status. It works on Linux only.
func ReadProcUsage(pid int) (ProcUsage, error) {
	var u ProcUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command name in parentheses may hold spaces; fields count from
	// after its closing parenthesis, where field 3 (state) is index 0.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return u, fmt.Errorf("load: unreadable /proc/%d/stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("load: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return u, fmt.Errorf("load: unreadable CPU times in /proc/%d/stat", pid)
	}
	u.CPU = time.Duration(utime+stime) * time.Second / clockTicks

	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return u, fmt.Errorf("load: unreadable VmRSS %q", line)
			}
			u.RSS = kb << 10
			return u, nil
		}
	}
	return u, fmt.Errorf("load: no VmRSS in /proc/%d/status", pid)
}

// ReadSystemBusy returns the CPU time the whole machine has spent busy (all
// of /proc/stat's "cpu" line but idle and iowait), for telling how much
// other work shared the machine with a run.
func ReadSystemBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("load: unreadable /proc/stat")
	}
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("load: unreadable /proc/stat: %w", err)
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// BuildSprout builds cmd/sprout from the module that contains the working
// directory into dir and returns the executable's path.
func BuildSprout(ctx context.Context, dir string) (string, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "sprout")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/sprout")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("load: go build ./cmd/sprout: %v\n%s", err, out)
	}
	return path, nil
}

// ModuleRoot returns the directory of the go.mod that governs the working
// directory.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("load: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("load: not inside a Go module; run from the Sprout repository or pass -sprout")
	}
	return filepath.Dir(mod), nil
}

// Version runs path -v and returns the first line it prints.
func Version(path string) string {
	out, err := exec.Command(path, "-v").CombinedOutput()
	if err != nil && len(out) == 0 {
		return "unknown (" + err.Error() + ")"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // a chatty server must not grow the generator without bound
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
