package load

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/internal/testproc/procstat"
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
	// CPUs, if set, confine the server to these CPUs once it has started
	// (sproutbench -pin).
	CPUs []int `json:",omitempty"`
	// NativeTLS: the server serves TLS itself (Sprout's --tls-listen);
	// otherwise TLS scenarios put stunnel in front of it.
	NativeTLS bool `json:",omitempty"`
	// MemberLogs, if set, is where a cluster's members' output goes when
	// the cluster stops, each member's last start up to memberLogLimit
	// (sproutbench -member-logs): what a run that failed says inside.
	MemberLogs string `json:",omitempty"`
}

// Server is a running server process, started fresh for one run.
type Server struct {
	Spec ServerSpec
	Addr string // 127.0.0.1:port
	PID  int

	proc *testproc.Process // nil for a cluster, whose runCluster owns the processes
	// members, for a cluster, are the processes whose CPU and memory are
	// the server's; Addr and PID are then those of the member the clients
	// connect to, or of the leader when they connect to every member.
	members []*member
	// spread, for a cluster whose clients connect to every member
	// (ThroughAll), are the members' client addresses, which a run's
	// connections take in turn (dialTarget); nil otherwise.
	spread []string
	// For a TLS scenario: where the traffic goes (the server's TLS port,
	// or stunnel's), the client configuration, and stunnel, whose CPU and
	// memory count as the server's; nil otherwise.
	tlsAddr   string
	tlsClient *tls.Config
	stunnel   *testproc.Process
}

// trafficAddrs are where a scenario's traffic connects, in turn.
func (s *Server) trafficAddrs() []string {
	switch {
	case s.tlsAddr != "":
		return []string{s.tlsAddr}
	case len(s.spread) > 0:
		return s.spread
	}
	return []string{s.Addr}
}

// StartServer starts spec on a free loopback port with extra arguments after
// its own, and waits until it answers a command. A server that exits with
// status 5 yields ErrFlagsRefused.
func StartServer(spec ServerSpec, extra ...string) (*Server, error) {
	// testproc.Launch retries a server that could not bind its port; a
	// server that failed to start for another reason is tried again here.
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
	args := append(slices.Clone(spec.Args), extra...)
	// The readiness probe asks list-tube-used, quits and waits for the
	// server to close the connection, so that the probe is no longer among
	// the server's current connections when the run counts them.
	p, err := testproc.Launch(testproc.Config{
		Binary:       spec.Path,
		Args:         args,
		Ready:        testproc.Probe,
		StartTimeout: startTimeout,
		OutputLimit:  1 << 20, // a chatty server must not grow the generator without bound
	})
	if err == nil {
		srv := &Server{Spec: spec, Addr: p.Addr(), PID: p.PID(), proc: p}
		if len(spec.CPUs) > 0 {
			if err := PinProcess(srv.PID, spec.CPUs); err != nil {
				srv.Stop()
				return nil, err
			}
		}
		return srv, nil
	}
	var se *testproc.StartError
	switch {
	case !errors.As(err, &se):
		return nil, fmt.Errorf("load: start %s: %w", spec.Name, err)
	case se.Exited && se.Process.ExitCode() == 5:
		return nil, fmt.Errorf("%w: %s %s: %s", ErrFlagsRefused, spec.Name, se.Process, outputTail(se.Process))
	case se.Exited:
		return nil, fmt.Errorf("load: %s exited at start (%v): %s", spec.Name, se.Process.Err(), outputTail(se.Process))
	default:
		return nil, fmt.Errorf("load: %s did not answer on %s within %v: %s", spec.Name, se.Process.Addr(), startTimeout, outputTail(se.Process))
	}
}

// stopGrace is how long Stop lets a server shut down on SIGTERM (time for
// Sprout's --cpu-profile to be written) before it sends SIGKILL.
const stopGrace = 3 * time.Second

// Stop ends the server by its PID, SIGTERM first and SIGKILL if it has not
// exited within stopGrace, and waits for it to exit.
func (s *Server) Stop() {
	if s.stunnel != nil {
		s.stunnel.Stop(stopGrace)
	}
	s.proc.Stop(stopGrace)
}

// Exited reports whether the process has ended, and how.
func (s *Server) Exited() (bool, error) { return s.proc.Exited(), s.proc.Err() }

// Output returns what the server has printed so far, at most its last 2 KiB.
func (s *Server) Output() string { return outputTail(s.proc) }

// RaceReport returns the race detector's reports so far; "" from a server
// built without it.
func (s *Server) RaceReport() string { return s.proc.RaceReport() }

func outputTail(p *testproc.Process) string {
	b := p.Output()
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(b)
}

// Usage reads the server's CPU time and resident memory from /proc; for a
// cluster, their sums over the members.
func (s *Server) Usage() (procstat.Usage, error) {
	if s.stunnel != nil {
		us := make([]procstat.Usage, 2)
		var err0, err1 error
		us[0], err0 = procstat.Read(s.PID)
		us[1], err1 = procstat.Read(s.stunnel.PID())
		return sumUsage(us), errors.Join(err0, err1)
	}
	if len(s.members) == 0 {
		return procstat.Read(s.PID)
	}
	us, err := memberUsage(s.members)
	if err != nil {
		return procstat.Usage{}, err
	}
	return sumUsage(us), nil
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

// statInt sends a stats command on c and returns one numeric field.
func statInt(c *testproc.Conn, line, field string) (int64, error) {
	v, err := c.StatsInt(line, field)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}
