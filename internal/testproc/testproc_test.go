package testproc

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestStartProbeKill(t *testing.T) {
	p := StartConfig(t, Config{Binary: Beanstalkd(t), Ready: Probe})
	if err := Probe(p.Addr(), time.Second); err != nil {
		t.Fatalf("probe of a ready server: %v", err)
	}
	if p.Exited() || p.ExitCode() != -1 || p.State() != nil || p.Err() != nil {
		t.Fatalf("running process: exited %v, code %d, state %v, err %v", p.Exited(), p.ExitCode(), p.State(), p.Err())
	}
	p.Kill()
	if !p.Exited() || p.ExitCode() != -1 || p.Err() == nil {
		t.Fatalf("killed process: exited %v, code %d, err %v", p.Exited(), p.ExitCode(), p.Err())
	}
	if err := Accepts(p.Addr(), time.Second); err == nil {
		t.Fatal("a killed server still accepts connections")
	}
}

func TestStop(t *testing.T) {
	p := Start(t, Beanstalkd(t))
	if !p.Stop(10 * time.Second) {
		t.Fatalf("beanstalkd outlived SIGTERM:\n%s", p.Output())
	}
	if !p.Exited() {
		t.Fatal("Stop returned before the process ended")
	}
}

func TestLaunchExitedEarly(t *testing.T) {
	p, err := Launch(Config{Binary: Beanstalkd(t), Args: []string{"-z", "not-a-number"}})
	var se *StartError
	if p != nil || !errors.As(err, &se) || !se.Exited {
		t.Fatalf("Launch of a server refusing its flags: %v, %v; want an exited *StartError", p, err)
	}
	if code := se.Process.ExitCode(); code != 5 {
		t.Errorf("exit code %d, want beanstalkd's usage status 5:\n%s", code, se.Process.Output())
	}
}

func TestNoListen(t *testing.T) {
	p := StartConfig(t, Config{Binary: Beanstalkd(t), Args: []string{"-v"}, NoListen: true})
	if !p.Wait(10 * time.Second) {
		t.Fatal("beanstalkd -v still running")
	}
	if p.Addr() != "" || p.ExitCode() != 0 || !strings.Contains(p.Output(), "beanstalkd") {
		t.Fatalf("beanstalkd -v: addr %q, exit code %d, output %q", p.Addr(), p.ExitCode(), p.Output())
	}
}
