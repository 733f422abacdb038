package main

import (
	"math"
	"testing"

	"github.com/sproutmq/sprout/engine"
)

// TestResolveMaxJobSizeZero: -z 0 allows only empty bodies, as
// beanstalkd 1.13's does ("put 0 0 0 1\r\nx\r\n" is JOB_TOO_BIG, stats
// says max-job-size: 0); it fell back to the default 65535 (found by a
// reviewing helper against the 1.13 binary). No -z is the default.
func TestResolveMaxJobSizeZero(t *testing.T) {
	c := resolve(mustParse(t, "-z", "0"), testHost, testProcess(math.MaxInt64))
	if c.engine.MaxJobSize != 0 || c.wal.MaxJobSize != engine.NoJobBodies {
		t.Errorf("-z 0: engine MaxJobSize %d, log %d, want 0 and NoJobBodies (a binlog's import takes empty bodies alone)",
			c.engine.MaxJobSize, c.wal.MaxJobSize)
	}
	c = resolve(mustParse(t), testHost, testProcess(math.MaxInt64))
	if c.engine.MaxJobSize != 65535 {
		t.Errorf("no -z: engine MaxJobSize %d, want 65535", c.engine.MaxJobSize)
	}
}
