package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEnvironment: SPROUT_* variables set flags, the command line wins,
// unknown variables are reported and skipped, and the variables of the
// project's test harnesses pass without a word.
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
		"SPROUT_REF_BEANSTALKD=/usr/bin/beanstalkd",
		"SPROUT_SOAK=10m",
		"SPROUT_STORM_GOALS=1",
		"SPROUT_CONFORMANCE_SELFTEST=1",
	}
	var stderr bytes.Buffer
	args := []string{"-p", "11500", "--max-output=2048"}
	got, act, code := parseArgs(args, environ, &stderr)
	if act != actionRun || code != 0 {
		t.Fatalf("parseArgs(%q): action %d, exit %d, %s", args, act, code, stderr.String())
	}
	wantWarn := "sprout: ignoring unknown environment variable SPROUT_LISTN\n" +
		"sprout: ignoring unknown environment variable SPROUT_VERBOSE_X\n"
	if stderr.String() != wantWarn {
		t.Errorf("warnings %q, want %q", stderr.String(), wantWarn)
	}
	want := options{
		host:            "0.0.0.0",
		port:            given("11500"),
		walDir:          "/data",
		maxOutput:       2048,
		shutdownTimeout: given(40 * time.Second),
		noSync:          true,
		verbosity:       1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// Every flag with a long name is also a variable, read as the flag's
// value; the command line's settings apply after, in their order.
func TestEnvironmentSettings(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "one-letter flag", env: []string{"SPROUT_MAX_JOB_SIZE=5"},
			want: func(o *options) { o.maxJobSize = given(5) }},
		{name: "the command line wins", env: []string{"SPROUT_MAX_JOB_SIZE=5"}, args: []string{"-z6"},
			want: func(o *options) { o.maxJobSize = given(6) }},
		{name: "F on the command line after an environment's f", env: []string{"SPROUT_FSYNC_MS=5"},
			args: []string{"-F"}, want: func(o *options) { o.syncEvery, o.noSync = given(5*time.Millisecond), true }},
		{name: "f on the command line after SPROUT_NO_FSYNC", env: []string{"SPROUT_NO_FSYNC=1"},
			args: []string{"-f7"}, want: func(o *options) { o.syncEvery = given(7 * time.Millisecond) }},
		// -V counts up on the command line alone, which wins over
		// SPROUT_VERBOSE (it used to add to it: --verbose 0 logged at trace).
		{name: "-V over SPROUT_VERBOSE", env: []string{"SPROUT_VERBOSE=2"}, args: []string{"-V"},
			want: func(o *options) { o.verbosity = 1 }},
		{name: "--verbose 0 over SPROUT_VERBOSE", env: []string{"SPROUT_VERBOSE=2"}, args: []string{"--verbose", "0"},
			want: func(o *options) { o.verbosity = 0 }},
		{name: "-V and --verbose add up", env: []string{"SPROUT_VERBOSE=1"}, args: []string{"-V", "--verbose=1"},
			want: func(o *options) { o.verbosity = 2 }},
		{name: "SPROUT_VERBOSE without -V", env: []string{"SPROUT_VERBOSE=2"},
			want: func(o *options) { o.verbosity = 2 }},
		{name: "clamp warning names nothing new", env: []string{"SPROUT_MAX_JOB_SIZE=2000000000"},
			want: func(o *options) { o.maxJobSize = given(1 << 30) }, wantStderr: clampWarning},
		{name: "go memory limit off", env: []string{"SPROUT_GO_MEMORY_LIMIT=off"},
			want: func(o *options) { o.goMemoryLimit = 1<<63 - 1 }},
		{name: "empty listen is all interfaces", env: []string{"SPROUT_LISTEN="}, wantListen: "tcp :11300"},
		{name: "empty http is no side port", env: []string{"SPROUT_HTTP="}},
		{name: "empty wal dir is in memory", env: []string{"SPROUT_WAL_DIR="}},
		{name: "version and help are not variables", env: []string{"SPROUT_VERSION=1", "SPROUT_HELP=1"},
			wantStderr: "sprout: ignoring unknown environment variable SPROUT_HELP\n" +
				"sprout: ignoring unknown environment variable SPROUT_VERSION\n"},
	})
}

// A bad value in the environment was once skipped with a warning, or
// exited 5 with the whole usage; an empty SPROUT_PORT listened on a random
// port. Now each is one line naming the variable and its value, exit 5.
func TestEnvironmentRefused(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "size with a suffix", env: []string{"SPROUT_MAX_OUTPUT=1M"}, wantAction: actionFail, wantCode: 5,
			wantStderr: `sprout: invalid SPROUT_MAX_OUTPUT: "1M" (want a number of bytes; 0 means the default)` + "\n"},
		{name: "empty port", env: []string{"SPROUT_PORT="}, wantAction: actionFail, wantCode: 5,
			wantStderr: `sprout: invalid SPROUT_PORT: "" (empty: unset it for the default)` + "\n"},
		{name: "Kubernetes service link", env: []string{"SPROUT_PORT=tcp://10.0.0.1:11300"},
			wantAction: actionFail, wantCode: 5,
			wantStderr: `sprout: invalid SPROUT_PORT: "tcp://10.0.0.1:11300" (want a port number up to 65535 or a service name)` + "\n"},
		{name: "not a bool", env: []string{"SPROUT_NO_FSYNC=maybe"}, wantAction: actionFail, wantCode: 5,
			wantStderr: `sprout: invalid SPROUT_NO_FSYNC: "maybe" (want true or false)` + "\n"},
		{name: "not a count", env: []string{"SPROUT_VERBOSE=-1"}, wantAction: actionFail, wantCode: 5,
			wantStderr: `sprout: invalid SPROUT_VERBOSE: "-1" (want a count)` + "\n"},
		{name: "empty size", env: []string{"SPROUT_MAX_JOB_SIZE="}, wantAction: actionFail, wantCode: 5,
			wantStderr: `sprout: invalid SPROUT_MAX_JOB_SIZE: "" (empty: unset it for the default)` + "\n"},
		{name: "warnings first, then the refusal", env: []string{"SPROUT_A=1", "SPROUT_LOOPS=x"},
			wantAction: actionFail, wantCode: 5,
			wantStderr: "sprout: ignoring unknown environment variable SPROUT_A\n" +
				`sprout: invalid SPROUT_LOOPS: "x" (want 0 to 256; 0 means one per CPU less one)` + "\n"},
		{name: "the command line is checked first", env: []string{"SPROUT_LOOPS=x"}, args: []string{"-z", "k"},
			wantAction: actionFail, wantCode: 5, wantStderr: `sprout: invalid -z: "k" (want a number of bytes)` + "\n"},
	})
}

// projectVariable is a SPROUT_ name as the project's code and Makefile
// spell them.
var projectVariable = regexp.MustCompile(`\bSPROUT_[A-Z][A-Z0-9_]*[A-Z0-9]\b`)

// TestProjectVariablesAreKnown: every SPROUT_ variable the project's
// code reads is either a server's (in flagTable) or in notServerVariables,
// so a server a test starts never warns about its environment.
func TestProjectVariablesAreKnown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		ours := filepath.Dir(rel) == filepath.Join("cmd", "sprout")
		if d.IsDir() || ours || !strings.HasSuffix(path, ".go") && d.Name() != "Makefile" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range projectVariable.FindAllString(string(b), -1) {
			found[name] = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no SPROUT_ variable found in the project: is the walk looking in the right place?")
	}
	for name, file := range found {
		if flagsByEnv[name] == nil && !slices.Contains(notServerVariables, name) {
			t.Errorf("%s (in %s) is neither a server's variable nor in notServerVariables", name, file)
		}
	}
}
