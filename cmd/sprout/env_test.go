package main

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestExpandAliases: beanstalkd's flags have long names on the command
// line, with the value after a space or an equals sign.
func TestExpandAliases(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
	}{
		{[]string{"--listen", "::1", "--port=11301"}, []string{"-l", "::1", "-p", "11301"}},
		{[]string{"--wal-dir=/data", "-f", "0", "--max-job-size", "100"}, []string{"-b", "/data", "-f", "0", "-z", "100"}},
		{[]string{"--loops", "2", "--segment-size=4096", "--user", "nobody"}, []string{"--loops", "2", "-s", "4096", "-u", "nobody"}},
		{[]string{"--fsync-ms"}, []string{"-f"}}, // parseArgs reports the missing value
		{[]string{"-l", "--listen"}, []string{"-l", "-l"}},
	} {
		if got := expandAliases(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("expandAliases(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestEnvironment: SPROUT_* variables set flags, the command line wins,
// and unknown or unreadable variables are reported and skipped.
func TestEnvironment(t *testing.T) {
	environ := []string{
		"HOME=/root",
		"SPROUT_LISTEN=0.0.0.0",
		"SPROUT_PORT=11400",
		"SPROUT_WAL_DIR=/data",
		"SPROUT_MAX_OUTPUT=1048576",
		"SPROUT_SHUTDOWN_TIMEOUT=40s",
		"SPROUT_NO_FSYNC=true",
		"SPROUT_VERBOSE=1",
		"SPROUT_LISTN=typo",
		"SPROUT_VERBOSE_X=1",
	}
	var stderr bytes.Buffer
	env := envArgs(environ, &stderr)
	wantWarn := "sprout: ignoring unknown environment variable SPROUT_LISTN\n" +
		"sprout: ignoring unknown environment variable SPROUT_VERBOSE_X\n"
	if stderr.String() != wantWarn {
		t.Errorf("warnings %q, want %q", stderr.String(), wantWarn)
	}
	args := expandAliases(append(env, "-p", "11500", "--max-output=2048"))
	stderr.Reset()
	got, act, code := parseArgs(args, &stderr)
	if act != actionRun || code != 0 || stderr.Len() > 0 {
		t.Fatalf("parseArgs(%q): action %d, exit %d, %s", args, act, code, stderr.String())
	}
	want := defaultOptions()
	want.cfg.Address = "0.0.0.0:11500"
	want.walDir = "/data"
	want.cfg.MaxOutputBuffered = 2048
	want.shutdownTimeout = 40 * time.Second
	want.wal.NoSync = true
	want.verbosity = 1
	want.logLevel = zerolog.DebugLevel // from -V
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}

	stderr.Reset()
	if args := envArgs([]string{"SPROUT_NO_FSYNC=maybe", "SPROUT_VERBOSE=-1"}, &stderr); len(args) != 0 ||
		stderr.String() != "sprout: ignoring SPROUT_NO_FSYNC=\"maybe\": want true or false\n"+
			"sprout: ignoring SPROUT_VERBOSE=\"-1\": want a count\n" {
		t.Fatalf("bad values gave %q and %q", args, stderr.String())
	}
}
