package member

import (
	"os"
	"regexp"
	"testing"
	"time"
)

// segmentCloseGrace is store/segment's defaultCloseGrace (unexported):
// how long the log's Close goes on retrying writes that fail, an fsync in
// flight always waited for.
const segmentCloseGrace = 10 * time.Second

// TestStopFitsItsSupervisors: the StatefulSet's grace period and the
// systemd unit's TimeoutStopSec cover every bounded wait of a graceful
// stop (stop and closeParts), so that the supervisor's SIGKILL does not
// land before the log's last fsync on a failing disk. Both were 40 s,
// below the 48 s these add up to (the held replies and the side port's
// requests had been left out of the sum).
func TestStopFitsItsSupervisors(t *testing.T) {
	worst := DefaultShutdownTimeout + heldRepliesGrace + handOversGrace + httpShutdownGrace + segmentCloseGrace
	for file, setting := range map[string]string{
		"../../deploy/k8s/statefulset.yaml":   `terminationGracePeriodSeconds:\s*(\d+)\n`,
		"../../deploy/systemd/sprout.service": `\nTimeoutStopSec=(\d+)s\n`,
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(setting).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no %s", file, setting)
		}
		given, err := time.ParseDuration(string(m[1]) + "s")
		if err != nil {
			t.Fatal(err)
		}
		if given <= worst {
			t.Errorf("%s gives a stop %v, not above its longest, %v: %v shutdown timeout, %v held replies, %v handovers, %v side port, %v the log's close",
				file, given, worst, DefaultShutdownTimeout, heldRepliesGrace, handOversGrace, httpShutdownGrace, segmentCloseGrace)
		}
	}
}
