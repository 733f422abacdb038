package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"

	"github.com/sproutmq/sprout/internal/buildinfo"
	"github.com/sproutmq/sprout/internal/testproc"
)

// TestStatsVersion runs the binary a plain go build makes (no -ldflags:
// the version comes from the build information) and checks that stats
// reports a semantic version of at least 1.13.0 carrying the version -v
// prints, so that clients that feature-test the server's release (the
// fivebeans suite, through node's semver) find every command.
func TestStatsVersion(t *testing.T) {
	bin := testproc.SproutBinary(t)
	out, err := exec.Command(bin, "-v").Output()
	if err != nil {
		t.Fatal(err)
	}
	// sprout VERSION (beanstalkd protocol 1.13)
	fields := strings.Fields(string(out))
	if len(fields) < 2 || fields[0] != "sprout" {
		t.Fatalf("sprout -v printed %q", out)
	}
	p := testproc.Start(t, bin)
	c := testproc.DialTest(t, p.Addr(), replyTimeout)
	stats, err := c.Stats("stats")
	if err != nil {
		t.Fatal(err)
	}
	got := stats["version"]
	v, err := semver.StrictNewVersion(got)
	if err != nil {
		t.Fatalf("stats version %q is not a semantic version: %v", got, err)
	}
	if v.LessThan(semver.MustParse("1.13.0")) {
		t.Errorf("stats version %q compares below 1.13.0", got)
	}
	if want := buildinfo.StatsVersion(fields[1]); got != want {
		t.Errorf("stats version %q, want %q (from -v %q)", got, want, strings.TrimSpace(string(out)))
	}
}
