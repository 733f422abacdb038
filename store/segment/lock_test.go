package segment_test

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/segment"
)

// TestLockSameProcess: a second LockDir of a directory in the same process
// is refused, and the refusal does not release the first one's lock.
func TestLockSameProcess(t *testing.T) {
	dir := t.TempDir()
	first, _ := open(t, dir, segment.Options{})
	for i := range 2 {
		if d, err := segment.LockDir(dir); !errors.Is(err, segment.ErrLocked) {
			if d != nil {
				_ = d.Close()
			}
			t.Fatalf("LockDir #%d of a locked directory: %v, want ErrLocked", i+2, err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := segment.LockDir(dir)
	if err != nil {
		t.Fatalf("LockDir after Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// startBeanstalkd runs Debian's beanstalkd on dir and a free loopback port
// and waits until it accepts connections; it is killed by PID at the end.
func startBeanstalkd(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	path := testproc.Beanstalkd(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var out bytes.Buffer
	cmd := exec.Command(path, "-b", dir, "-l", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("beanstalkd exited early: %s", out.String())
		default:
		}
		// beanstalkd binds before it locks the directory; its first binlog
		// file appears only once the lock is held.
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			if files, _ := filepath.Glob(filepath.Join(dir, "binlog.*")); len(files) > 0 {
				return cmd
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("beanstalkd did not accept connections within 5s")
		}
	}
}

// TestLockBeanstalkd: Sprout and beanstalkd take the same lock (an fcntl
// write lock on DIR/lock), so neither starts on a directory the other holds.
// beanstalkd then exits with code 10.
func TestLockBeanstalkd(t *testing.T) {
	t.Run("beanstalkd first", func(t *testing.T) {
		dir := t.TempDir()
		startBeanstalkd(t, dir)
		if d, err := segment.LockDir(dir); !errors.Is(err, segment.ErrLocked) {
			if d != nil {
				_ = d.Close()
			}
			t.Fatalf("LockDir of a directory beanstalkd holds: %v, want ErrLocked", err)
		}
	})
	t.Run("sprout first", func(t *testing.T) {
		dir := t.TempDir()
		open(t, dir, segment.Options{})
		path := testproc.Beanstalkd(t)
		cmd := exec.Command(path, "-b", dir, "-l", "127.0.0.1", "-p", "0")
		done := make(chan struct{})
		var out []byte
		go func() { out, _ = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("beanstalkd started on a directory Sprout holds: %s", out)
		}
		if code := cmd.ProcessState.ExitCode(); code != 10 {
			t.Errorf("beanstalkd exited with %v, want code 10", cmd.ProcessState)
		}
		if !strings.Contains(string(out), "failed to lock wal dir") {
			t.Errorf("beanstalkd said %q, want it to report the lock", out)
		}
	})
}
