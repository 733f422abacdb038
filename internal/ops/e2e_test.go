package ops_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestMain removes the sprout binary testproc.SproutBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	testproc.RemoveSproutBinary()
	os.Exit(code)
}

// startBinary runs the real sprout with --http on a free loopback port,
// and args, and returns the process and the side port's base URL.
func startBinary(t testing.TB, args ...string) (*testproc.Process, string) {
	t.Helper()
	return testproc.StartSprout(t, append([]string{"--loops", "2"}, args...)...)
}

// waitStatus polls url until it answers want, for up to 5 s.
func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get(t, url)
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q, want %d", url, code, body, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBinary: the real binary serves metrics that follow the queue, the
// probes, drain mode on SIGUSR1, and pprof only with --pprof.
func TestBinary(t *testing.T) {
	p, base := startBinary(t)
	if _, ok := scrape(t, base, acceptText).value("sprout_tube_jobs_total", "tube=e2e"); ok {
		t.Fatal("tube e2e shown before it exists")
	}
	c := dial(t, p.Addr())
	for _, step := range []struct {
		cmd, reply string
		want       []series // min is the value wanted
	}{
		{"use e2e\r\n", "USING e2e\r\n", []series{
			{name: "sprout_tube_current_using", labels: "tube=e2e", min: 1},
			{name: "sprout_tube_jobs_total", labels: "tube=e2e", min: 0},
		}},
		{"put 0 0 60 3\r\nabc\r\n", "INSERTED 1\r\n", []series{
			{name: "sprout_tube_current_jobs", labels: "state=ready,tube=e2e", min: 1},
			{name: "sprout_tube_jobs_total", labels: "tube=e2e", min: 1},
			{name: "sprout_tube_deletes_total", labels: "tube=e2e", min: 0},
		}},
		{"delete 1\r\n", "DELETED\r\n", []series{
			{name: "sprout_tube_current_jobs", labels: "state=ready,tube=e2e", min: 0},
			{name: "sprout_tube_deletes_total", labels: "tube=e2e", min: 1},
			{name: "sprout_command_duration_seconds", labels: "command=delete", min: 1},
		}},
	} {
		if got := c.do(step.cmd); got != step.reply {
			t.Fatalf("%q: %q, want %q", step.cmd, got, step.reply)
		}
		fams := scrape(t, base, acceptText)
		for _, w := range step.want {
			if v, ok := fams.value(w.name, w.labels); !ok || v != w.min {
				t.Errorf("after %q: %s{%s} = %v (shown: %v), want %v", step.cmd, w.name, w.labels, v, ok, w.min)
			}
		}
	}

	waitStatus(t, base+"/healthz", 200)
	waitStatus(t, base+"/readyz", 200)
	if code, _ := get(t, base+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ without --pprof: %d", code)
	}
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, base+"/readyz", 503)
	if v, _ := scrape(t, base, acceptText).value("sprout_draining", ""); v != 1 {
		t.Errorf("draining: sprout_draining = %v", v)
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz while draining: %d", code)
	}
}

func TestBinaryPprof(t *testing.T) {
	_, base := startBinary(t, "--pprof", "true")
	if code, _ := get(t, base+"/debug/pprof/"); code != 200 {
		t.Errorf("/debug/pprof/ with --pprof: %d", code)
	}
}
