package procstat

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// TestSelf reads this test process, whose figures are known or bounded.
func TestSelf(t *testing.T) {
	pid := os.Getpid()
	u, err := Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS <= 0 || u.PeakRSS < u.RSS || u.Threads < 1 || u.CPU < 0 {
		t.Errorf("implausible usage %+v", u)
	}
	before, err := Sockets(pid)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if after, err := Sockets(pid); err != nil || after != before+1 {
		t.Errorf("sockets: %d before a listener, %d (%v) with it", before, after, err)
	}
	if fds, err := FDs(pid); err != nil || fds < 4 {
		t.Errorf("descriptors: %d, %v; want stdin, stdout, stderr and the listener at least", fds, err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if n, err := OpenFileLimit(pid); err != nil || uint64(n) != lim.Cur {
		t.Errorf("open-file limit %d, %v; getrlimit says %d", n, err, lim.Cur)
	}
	if err := ResetPeak(pid); err == nil {
		if u, err := Read(pid); err != nil || u.PeakRSS > u.RSS+u.RSS/2 {
			t.Errorf("after ResetPeak: %+v, %v", u, err)
		}
	}
	b0, err := SystemBusy()
	if err != nil || b0 <= 0 {
		t.Fatalf("machine busy %v, %v", b0, err)
	}
	if b1, err := SystemBusy(); err != nil || b1 < b0 {
		t.Errorf("machine busy went from %v to %v (%v)", b0, b1, err)
	}
}
