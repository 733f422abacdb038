package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/testproc"
)

// replyTimeout bounds every exchange with a server and every wait for one
// to start or exit.
const replyTimeout = 10 * time.Second

// listenEnv are the variables sd_listen_fds(1) unsets.
var listenEnv = []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}

// TestInheritedListenerEnvironment covers the cases that never reach a
// descriptor, in this process: whatever the variables say, they are gone
// afterwards, as sd_listen_fds(1) leaves them.
func TestInheritedListenerEnvironment(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	cases := []struct {
		name    string
		env     map[string]string // unset when absent
		wantErr string            // "" means no error and no listener
	}{
		{name: "no LISTEN_PID", env: map[string]string{"LISTEN_FDS": "1"}},
		{name: "another process's", env: map[string]string{"LISTEN_PID": "1", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "x"}},
		{name: "ours without LISTEN_FDS", env: map[string]string{"LISTEN_PID": self}},
		{name: "LISTEN_PID not a number", env: map[string]string{"LISTEN_PID": "x", "LISTEN_FDS": "1"},
			wantErr: `invalid LISTEN_PID "x"`},
		{name: "LISTEN_PID zero", env: map[string]string{"LISTEN_PID": "0", "LISTEN_FDS": "1"},
			wantErr: `invalid LISTEN_PID "0"`},
		{name: "LISTEN_FDS zero", env: map[string]string{"LISTEN_PID": self, "LISTEN_FDS": "0"},
			wantErr: `invalid LISTEN_FDS "0"`},
		{name: "LISTEN_FDS negative", env: map[string]string{"LISTEN_PID": self, "LISTEN_FDS": "-1"},
			wantErr: `invalid LISTEN_FDS "-1"`},
		{name: "LISTEN_FDS not a number", env: map[string]string{"LISTEN_PID": self, "LISTEN_FDS": "one"},
			wantErr: `invalid LISTEN_FDS "one"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range listenEnv {
				t.Setenv(name, "") // restored when the test ends
				if v, ok := tc.env[name]; ok {
					os.Setenv(name, v)
				} else {
					os.Unsetenv(name)
				}
			}
			ln, err := inheritedListener(zerolog.Nop())
			if ln != nil {
				ln.Close()
				t.Fatalf("inheritedListener returned a listener on %v", ln.Addr())
			}
			if got := errorText(err); got != tc.wantErr {
				t.Errorf("inheritedListener error = %q; want %q", got, tc.wantErr)
			}
			for _, name := range listenEnv {
				if v, ok := os.LookupEnv(name); ok {
					t.Errorf("%s=%q is still set", name, v)
				}
			}
		})
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestSocketActivation runs the real server the way systemd does: the
// sockets are descriptors 3, 4, … and LISTEN_PID is the server's own pid.
func TestSocketActivation(t *testing.T) {
	cases := []struct {
		name string
		// sockets returns the descriptors to pass and the address a client
		// dials for each (network "" for one that cannot be dialled).
		sockets func(t *testing.T) ([]*os.File, []net.Addr)
		args    []string
		// wantLog is in the output of a server that serves the first socket.
		wantLog string
	}{
		{name: "tcp", sockets: tcpListeners(1), wantLog: `"serving the socket systemd handed over"`},
		{name: "tcp, -l and -p ignored", sockets: tcpListeners(1), args: []string{"-l", "192.0.2.1", "-p", "1"},
			wantLog: `"ignored":"192.0.2.1:1"`},
		{name: "unix", sockets: unixListener, args: []string{"-l", "unix:/nonexistent/sprout.sock"},
			wantLog: `"ignored":"/nonexistent/sprout.sock"`},
		{name: "the first of two", sockets: tcpListeners(2),
			wantLog: `"sockets":2,`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, addrs := tc.sockets(t)
			srv := startActivated(t, files, tc.args...)
			c := dial(t, addrs[0])
			checkServes(t, c)
			for _, addr := range addrs[1:] {
				checkNotServed(t, addr)
			}
			if out := srv.stop(t); !strings.Contains(out, tc.wantLog) {
				t.Errorf("output does not have %s:\n%s", tc.wantLog, out)
			}
		})
	}
}

// TestSocketActivationRefused: like beanstalkd, a first descriptor that is
// not a TCP or unix listening stream socket stops the start with status 111.
func TestSocketActivationRefused(t *testing.T) {
	cases := []struct {
		name  string
		files func(t *testing.T) []*os.File
	}{
		{name: "udp", files: func(t *testing.T) []*os.File {
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			return []*os.File{fileOf(t, c.(*net.UDPConn))}
		}},
		{name: "tcp not listening", files: func(t *testing.T) []*os.File {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
			if err != nil {
				t.Fatal(err)
			}
			f := os.NewFile(uintptr(fd), "tcp socket")
			t.Cleanup(func() { f.Close() })
			return []*os.File{f}
		}},
		{name: "regular file", files: func(t *testing.T) []*os.File {
			f, err := os.Create(filepath.Join(t.TempDir(), "file"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return []*os.File{f}
		}},
		{name: "only the first counts", files: func(t *testing.T) []*os.File {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			tcp, _ := tcpListeners(1)(t)
			return []*os.File{f, tcp[0]}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startActivated(t, tc.files(t))
			code, out := srv.wait(t)
			if code != exitSocket || !strings.Contains(out, "descriptor 3 is not a TCP or unix listening socket") {
				t.Errorf("exit status %d; want %d, with descriptor 3 refused:\n%s", code, exitSocket, out)
			}
		})
	}
}

// tcpListeners returns sockets for n listeners on 127.0.0.1.
func tcpListeners(n int) func(t *testing.T) ([]*os.File, []net.Addr) {
	return func(t *testing.T) ([]*os.File, []net.Addr) {
		var files []*os.File
		var addrs []net.Addr
		for range n {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, fileOf(t, ln.(*net.TCPListener)))
			addrs = append(addrs, ln.Addr())
			ln.Close() // the file is a duplicate: the socket stays open
		}
		return files, addrs
	}
}

// unixListener returns the socket of a unix listener in a temporary directory.
func unixListener(t *testing.T) ([]*os.File, []net.Addr) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // the server serves the file after this close
	f := fileOf(t, ul)
	ln.Close()
	return []*os.File{f}, []net.Addr{ln.Addr()}
}

// fileOf duplicates a socket's descriptor, closed when the test ends.
func fileOf(t *testing.T, s interface{ File() (*os.File, error) }) *os.File {
	t.Helper()
	f, err := s.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// activated is a server started as systemd starts one.
type activated struct {
	cmd  *exec.Cmd
	out  bytes.Buffer  // written by exec's copying goroutine: read only after done
	done chan struct{} // closed once cmd.Wait returns
}

// startActivated runs Sprout with files as descriptors 3, 4, …,
// LISTEN_FDS=len(files) and LISTEN_PID set to its pid by the shell that
// then execs it. The server is killed when the test ends.
func startActivated(t *testing.T, files []*os.File, args ...string) *activated {
	t.Helper()
	bin := testproc.SproutBinary(t)
	a := &activated{
		cmd:  exec.Command("sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, bin}, args...)...),
		done: make(chan struct{}),
	}
	a.cmd.Env = append(os.Environ(), "LISTEN_FDS="+strconv.Itoa(len(files)))
	a.cmd.ExtraFiles = files
	a.cmd.Stdout, a.cmd.Stderr = &a.out, &a.out
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = a.cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		<-a.done
	})
	return a
}

// wait waits for the server to exit by itself and returns its exit status
// and output.
func (a *activated) wait(t *testing.T) (int, string) {
	t.Helper()
	select {
	case <-a.done:
		return a.cmd.ProcessState.ExitCode(), a.out.String()
	case <-time.After(replyTimeout):
		_ = a.cmd.Process.Kill()
		<-a.done
		t.Fatalf("server still running after %v:\n%s", replyTimeout, a.out.String())
		return 0, ""
	}
}

// stop stops the server with SIGTERM, checks that it exits 0 and returns
// its output.
func (a *activated) stop(t *testing.T) string {
	t.Helper()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	code, out := a.wait(t)
	if code != 0 {
		t.Errorf("exit status %d after SIGTERM; want 0:\n%s", code, out)
	}
	return out
}

// client is one protocol connection; a failure fails the test.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr net.Addr) *client {
	t.Helper()
	c, err := net.DialTimeout(addr.Network(), addr.String(), replyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// call sends request and returns the reply's first line, without "\r\n".
func (c *client) call(request string) string {
	c.t.Helper()
	if err := c.c.SetDeadline(time.Now().Add(replyTimeout)); err != nil {
		c.t.Fatal(err)
	}
	if _, err := io.WriteString(c.c, request); err != nil {
		c.t.Fatalf("sending %q: %v", request, err)
	}
	return c.line()
}

// line reads the next line of a reply, without "\r\n".
func (c *client) line() string {
	c.t.Helper()
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("reading a reply: %v (so far %q)", err, line)
	}
	return strings.TrimSuffix(line, "\r\n")
}

// checkServes puts, reserves and deletes a job, and returns its id.
func checkServes(t *testing.T, c *client) string {
	t.Helper()
	id, ok := strings.CutPrefix(c.call("put 0 0 60 5\r\nhello\r\n"), "INSERTED ")
	if !ok {
		t.Fatal("put was not answered INSERTED")
	}
	if got, want := c.call("reserve-with-timeout 0\r\n"), "RESERVED "+id+" 5"; got != want {
		t.Fatalf("reserve: %q; want %q", got, want)
	}
	if got := c.line(); got != "hello" {
		t.Fatalf("reserved body %q; want hello", got)
	}
	if got := c.call("release " + id + " 0 0\r\n"); got != "RELEASED" {
		t.Fatalf("release: %q; want RELEASED", got)
	}
	return id
}

// checkNotServed: a connection to addr is queued, but nobody answers it.
func checkNotServed(t *testing.T, addr net.Addr) {
	t.Helper()
	c, err := net.DialTimeout(addr.Network(), addr.String(), replyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	_, _ = io.WriteString(c, "list-tube-used\r\n")
	if b, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Errorf("%v answered %q; want it unserved", addr, b)
	}
}

// TestUserUnknown: like beanstalkd, an unknown -u user exits 33.
func TestUserUnknown(t *testing.T) {
	p := testproc.StartConfig(t, testproc.Config{
		Binary:   testproc.SproutBinary(t),
		Args:     []string{"-l", "127.0.0.1", "-p", "0", "-u", "sprout-test-no-such-user"},
		NoListen: true,
	})
	if !p.Wait(replyTimeout) {
		t.Fatalf("still running after %v:\n%s", replyTimeout, p.Output())
	}
	if code := p.ExitCode(); code != exitNoSuchUser || !strings.Contains(p.Output(), "no such user") {
		t.Errorf("exit status %d; want %d, no such user:\n%s", code, exitNoSuchUser, p.Output())
	}
}

// TestUserNobody starts Sprout as root with -u nobody: it binds, becomes
// nobody (uid, gid and supplementary groups), then opens its log, which
// therefore lives in a directory nobody can write, as with beanstalkd.
func TestUserNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("-u needs root to switch users: run the tests as root to check it")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody to switch to: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	groups, err := nobody.GroupIds()
	if err != nil {
		t.Fatal(err)
	}
	bin := testproc.SproutBinary(t)

	// Not t.TempDir: its parent is root's, mode 0700, so nobody could not
	// reach the log inside.
	dir, err := os.MkdirTemp("", "sprout-u-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}

	start := func() *testproc.Process {
		// Probe, not a bare connect: the socket accepts into its backlog
		// before the switch; a protocol answer comes only after it.
		return testproc.StartConfig(t, testproc.Config{
			Binary: bin, Args: []string{"-u", "nobody", "-b", dir}, Ready: testproc.Probe,
			StartTimeout: replyTimeout,
		})
	}
	p := start()
	checkIDs(t, p.PID(), nobody.Uid, nobody.Gid, groups)
	id := checkServes(t, dial(t, addrOf(t, p.Addr())))
	if !p.Stop(replyTimeout) || p.ExitCode() != 0 {
		t.Fatalf("did not exit 0 after SIGTERM: %v\n%s", p.State(), p.Output())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if owner := fi.Sys().(*syscall.Stat_t).Uid; int(owner) != uid {
			t.Errorf("%s is owned by uid %d; want nobody's, %d", e.Name(), owner, uid)
		}
	}

	p = start()
	if got, want := dial(t, addrOf(t, p.Addr())).call("peek-ready\r\n"), "FOUND "+id+" 5"; got != want {
		t.Errorf("after a restart, peek-ready: %q; want %q", got, want)
	}

	t.Run("log directory nobody cannot write", func(t *testing.T) {
		p := testproc.StartConfig(t, testproc.Config{
			Binary:   bin,
			Args:     []string{"-l", "127.0.0.1", "-p", "0", "-u", "nobody", "-b", filepath.Join(t.TempDir(), "wal")},
			NoListen: true,
		})
		if !p.Wait(replyTimeout) {
			t.Fatalf("still running after %v:\n%s", replyTimeout, p.Output())
		}
		if p.ExitCode() == 0 || !strings.Contains(p.Output(), "permission denied") {
			t.Errorf("exit status %d; want a failure, permission denied:\n%s", p.ExitCode(), p.Output())
		}
	})

	t.Run("socket activation", func(t *testing.T) {
		files, addrs := tcpListeners(1)(t)
		srv := startActivated(t, files, "-u", "nobody")
		c := dial(t, addrs[0])
		checkServes(t, c) // answered: the switch is done
		checkIDs(t, srv.cmd.Process.Pid, nobody.Uid, nobody.Gid, groups)
		srv.stop(t)
	})
}

func addrOf(t *testing.T, hostPort string) net.Addr {
	t.Helper()
	addr, err := net.ResolveTCPAddr("tcp", hostPort)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// checkIDs reads /proc/PID/status: the real, effective, saved and
// filesystem uids and gids must all be uid and gid, and the supplementary
// groups exactly groups.
func checkIDs(t *testing.T, pid int, uid, gid string, groups []string) {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"Uid:":    {uid, uid, uid, uid},
		"Gid:":    {gid, gid, gid, gid},
		"Groups:": slices.Sorted(slices.Values(groups)),
	}
	for line := range strings.Lines(string(status)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		w, ok := want[fields[0]]
		if !ok {
			continue
		}
		got := fields[1:]
		if fields[0] == "Groups:" {
			got = slices.Sorted(slices.Values(got))
		}
		if !slices.Equal(got, w) {
			t.Errorf("/proc/%d/status %s %q; want %q", pid, fields[0], got, w)
		}
		delete(want, fields[0])
	}
	if len(want) != 0 {
		t.Errorf("/proc/%d/status has no %v", pid, want)
	}
}
