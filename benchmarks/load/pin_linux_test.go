package load

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Every thread of a pinned process is confined to the CPUs asked for.
func TestPinProcess(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := PinProcess(cmd.Process.Pid, []int{0}); err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			if got := strings.TrimSpace(v); got != "0" {
				t.Fatalf("Cpus_allowed_list %q after pinning to CPU 0, want \"0\"", got)
			}
			return
		}
	}
	t.Fatal("no Cpus_allowed_list in /proc/PID/status")
}
