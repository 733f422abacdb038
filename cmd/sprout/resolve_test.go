package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/hostinfo"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/store/wal"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// testHost is a probe of a machine with 16 GiB and 8 CPUs whose process
// sits in a cgroup limited to 2 GiB.
var testHost = hostinfo.Host{CPUs: 8, OpenFileLimit: 20000, OpenDescriptors: 12, MemTotal: 16 * gib,
	CgroupMemory: 2 * gib, CgroupDir: "/sys/fs/cgroup/memory/process_api/x"}

// testProcess is a process with the given environment and no GOMEMLIMIT
// unless env has one (then the runtime's limit is limit).
func testProcess(limit int64, env ...string) process {
	return process{
		lookupEnv: func(key string) (string, bool) {
			for i := 0; i+1 < len(env); i += 2 {
				if env[i] == key {
					return env[i+1], true
				}
			}
			return "", false
		},
		goMemoryLimit: limit,
		version:       "1.2.3",
	}
}

// mustParse parses args, failing the test on an error.
func mustParse(t *testing.T, args ...string) options {
	t.Helper()
	var stderr bytes.Buffer
	o, act, _ := parseArgs(args, nil, &stderr)
	if act != actionRun {
		t.Fatalf("parseArgs(%q): action %d: %s", args, act, stderr.String())
	}
	return o
}

// With nothing given, every default is filled in, from the host.
func TestResolveDefaults(t *testing.T) {
	c := resolve(mustParse(t), testHost, testProcess(math.MaxInt64))
	e := c.engine
	if e.Network != "tcp" || e.Address != ":11300" || e.MaxJobSize != engine.DefaultMaxJobSize ||
		e.Loops != 7 || e.MaxConnections != 20000-12-64 || e.MaxBufferMemory != 256*mib ||
		e.MaxInputBuffered != engine.DefaultMaxInputBuffered(engine.DefaultMaxJobSize) ||
		e.MaxOutputBuffered != engine.DefaultMaxOutputBuffered || e.Version != "1.13.0+sprout.1.2.3" {
		t.Errorf("engine config %+v", e)
	}
	if c.wal.SegmentSize != wal.DefaultSegmentSize || c.wal.SyncEvery != wal.DefaultSyncEvery ||
		c.wal.NoSync || c.wal.MaxJobSize != engine.DefaultMaxJobSize {
		t.Errorf("log options %+v", c.wal)
	}
	if c.logLevel != zerolog.InfoLevel || c.logFormat != "json" || c.shutdownTimeout != defaultShutdownTimeout ||
		c.metricsTubes != ops.DefaultTubeSeries || c.gcHeadroom != 32*mib || c.version != "1.2.3" {
		t.Errorf("config %+v", c)
	}
	if c.memoryLimit != 2*gib || c.memoryLimitFrom != "cgroup /sys/fs/cgroup/memory/process_api/x" {
		t.Errorf("memory limit %d from %q", c.memoryLimit, c.memoryLimitFrom)
	}
	if c.goMemoryLimit != 2*gib/10*9 || c.goMemoryLimitFrom != "90% of the cgroup's memory limit" {
		t.Errorf("Go memory limit %d from %q", c.goMemoryLimit, c.goMemoryLimitFrom)
	}
}

// What was given is kept; -f 0 is fsync every commit, not the default.
func TestResolveGiven(t *testing.T) {
	c := resolve(mustParse(t, "-l", "unix:/run/s.sock", "-z", "100", "--loops", "3", "-f", "0", "-s", "4096",
		"--max-buffer-memory", "1000", "--max-connections", "9", "--shutdown-timeout", "0s",
		"--gc-headroom", "0", "--metrics-tubes", "5", "--log-format", "console"),
		testHost, testProcess(math.MaxInt64))
	e := c.engine
	if e.Network != "unix" || e.Address != "/run/s.sock" || e.MaxJobSize != 100 || e.Loops != 3 ||
		e.MaxBufferMemory != 1000 || e.MaxConnections != 9 || e.MaxInputBuffered != 64<<10 {
		t.Errorf("engine config %+v", e)
	}
	if c.wal.SyncEvery != 0 || c.wal.SegmentSize != 4096 || c.wal.MaxJobSize != 100 {
		t.Errorf("log options %+v", c.wal)
	}
	if c.shutdownTimeout != 0 || c.gcHeadroom != 0 || c.metricsTubes != 5 || c.logFormat != "console" {
		t.Errorf("config %+v", c)
	}
}

// --log-level, then -V and -VV, which only ever make it more verbose.
func TestResolveLogLevel(t *testing.T) {
	for _, c := range []struct {
		args []string
		want zerolog.Level
	}{
		{nil, zerolog.InfoLevel},
		{[]string{"-V"}, zerolog.DebugLevel},
		{[]string{"-VV"}, zerolog.TraceLevel},
		{[]string{"-V", "-V", "-V"}, zerolog.TraceLevel},
		{[]string{"--log-level", "warn", "-V"}, zerolog.DebugLevel},
		{[]string{"-VV", "--log-level", "warn"}, zerolog.TraceLevel},
		{[]string{"--log-level", "trace", "-V"}, zerolog.TraceLevel},
		{[]string{"--log-level", "disabled", "-V"}, zerolog.DebugLevel},
		{[]string{"--log-level", "error"}, zerolog.ErrorLevel},
		{[]string{"--verbose", "1"}, zerolog.DebugLevel},
	} {
		if got := resolve(mustParse(t, c.args...), testHost, testProcess(math.MaxInt64)).logLevel; got != c.want {
			t.Errorf("%q: log level %v, want %v", c.args, got, c.want)
		}
	}
	p := testProcess(math.MaxInt64)
	p.terminal = true
	if got := resolve(mustParse(t), testHost, p).logFormat; got != "console" {
		t.Errorf("on a terminal the format is %q, want console", got)
	}
}

// The Go memory limit: --go-memory-limit, else GOMEMLIMIT, else 90% of
// the cgroup's limit, else none. A limit set by hand also bounds the
// memory the buffer budget is an eighth of.
func TestResolveGoMemoryLimit(t *testing.T) {
	noCgroup := testHost
	noCgroup.CgroupMemory, noCgroup.CgroupDir = 0, ""
	cases := []struct {
		name            string
		args            []string
		host            hostinfo.Host
		proc            process
		wantLimit       int64
		wantFrom        string
		wantBudget      int64
		wantMemoryFrom  string
		wantMemoryLimit int64
	}{
		{name: "90% of the cgroup's", host: testHost, proc: testProcess(math.MaxInt64),
			wantLimit: 1932735276, wantFrom: "90% of the cgroup's memory limit",
			wantBudget: 256 * mib, wantMemoryLimit: 2 * gib, wantMemoryFrom: "cgroup " + testHost.CgroupDir},
		{name: "no cgroup limit: none", host: noCgroup, proc: testProcess(math.MaxInt64),
			wantLimit: math.MaxInt64, wantFrom: "none: no cgroup memory limit",
			wantBudget: gib, wantMemoryLimit: 16 * gib, wantMemoryFrom: "machine"},
		{name: "GOMEMLIMIT wins over the cgroup", host: testHost, proc: testProcess(512*mib, "GOMEMLIMIT", "512MiB"),
			wantLimit: 512 * mib, wantFrom: "GOMEMLIMIT",
			wantBudget: 64 * mib, wantMemoryLimit: 512 * mib, wantMemoryFrom: "GOMEMLIMIT"},
		{name: "GOMEMLIMIT above the cgroup's", host: testHost, proc: testProcess(8*gib, "GOMEMLIMIT", "8GiB"),
			wantLimit: 8 * gib, wantFrom: "GOMEMLIMIT",
			wantBudget: 256 * mib, wantMemoryLimit: 2 * gib, wantMemoryFrom: "cgroup " + testHost.CgroupDir},
		{name: "GOMEMLIMIT=off", host: testHost, proc: testProcess(math.MaxInt64, "GOMEMLIMIT", "off"),
			wantLimit: math.MaxInt64, wantFrom: "GOMEMLIMIT",
			wantBudget: 256 * mib, wantMemoryLimit: 2 * gib, wantMemoryFrom: "cgroup " + testHost.CgroupDir},
		{name: "the flag wins over GOMEMLIMIT", args: []string{"--go-memory-limit", "1073741824"}, host: noCgroup,
			proc: testProcess(512*mib, "GOMEMLIMIT", "512MiB"), wantLimit: gib, wantFrom: "--go-memory-limit",
			wantBudget: 128 * mib, wantMemoryLimit: gib, wantMemoryFrom: "--go-memory-limit"},
		{name: "the flag turns it off", args: []string{"--go-memory-limit", "off"}, host: testHost,
			proc: testProcess(math.MaxInt64), wantLimit: math.MaxInt64, wantFrom: "--go-memory-limit",
			wantBudget: 256 * mib, wantMemoryLimit: 2 * gib, wantMemoryFrom: "cgroup " + testHost.CgroupDir},
		{name: "nothing known", host: hostinfo.Host{}, proc: testProcess(math.MaxInt64),
			wantLimit: math.MaxInt64, wantFrom: "none: no cgroup memory limit",
			wantBudget: 256 * mib, wantMemoryFrom: "unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := resolve(mustParse(t, tc.args...), tc.host, tc.proc)
			if c.goMemoryLimit != tc.wantLimit || c.goMemoryLimitFrom != tc.wantFrom {
				t.Errorf("Go memory limit %d from %q; want %d from %q", c.goMemoryLimit, c.goMemoryLimitFrom,
					tc.wantLimit, tc.wantFrom)
			}
			if c.engine.MaxBufferMemory != tc.wantBudget || c.memoryLimit != tc.wantMemoryLimit ||
				c.memoryLimitFrom != tc.wantMemoryFrom {
				t.Errorf("budget %d of %d from %q; want %d of %d from %q", c.engine.MaxBufferMemory,
					c.memoryLimit, c.memoryLimitFrom, tc.wantBudget, tc.wantMemoryLimit, tc.wantMemoryFrom)
			}
		})
	}
}

// GOGC set by the operator takes the collector over from --gc-headroom.
func TestResolveGOGC(t *testing.T) {
	c := resolve(mustParse(t), testHost, testProcess(math.MaxInt64, "GOGC", "50"))
	if c.gcHeadroom != 0 || c.gogc != "50" {
		t.Errorf("with GOGC=50: headroom %d, gogc %q", c.gcHeadroom, c.gogc)
	}
	c = resolve(mustParse(t, "--gc-headroom", "0"), testHost, testProcess(math.MaxInt64, "GOGC", "50"))
	if c.gcHeadroom != 0 || c.gogc != "" {
		t.Errorf("with GOGC=50 and no headroom: headroom %d, gogc %q", c.gcHeadroom, c.gogc)
	}
}

// The startup log shows every figure as it will be used: no zero stands
// for a default.
func TestLogConfig(t *testing.T) {
	c := resolve(mustParse(t, "-b", "/data"), testHost, testProcess(math.MaxInt64))
	var b bytes.Buffer
	logConfig(zerolog.New(&b), c)
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	want := map[string]any{
		"message": "configuration", "version": "1.2.3", "address": ":11300",
		"max_job_size": 65535.0, "loops": 7.0, "cpus": 8.0,
		"max_input": float64(engine.DefaultMaxInputBuffered(65535)), "max_output": 524288.0,
		"max_connections": 19924.0, "open_file_limit": 20000.0,
		"max_buffer_memory": float64(256 * mib), "memory_limit": float64(2 * gib),
		"memory_limit_from": "cgroup /sys/fs/cgroup/memory/process_api/x",
		"go_memory_limit":   1932735276.0, "go_memory_limit_from": "90% of the cgroup's memory limit",
		"gc_headroom": float64(32 * mib), "shutdown_timeout": "25s", "log_level": "info",
		"fsync_every": "50ms", "segment_size": float64(wal.DefaultSegmentSize),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	for k, v := range got {
		if v == 0.0 || v == "" {
			t.Errorf("%s is logged as %v", k, v)
		}
	}
	logConfig(zerolog.New(io.Discard), resolve(mustParse(t), hostinfo.Host{}, testProcess(math.MaxInt64)))
}

// TestLogConfigHidesToken: the configuration says whether an admin token
// is set, and never what it is.
func TestLogConfigHidesToken(t *testing.T) {
	const token = "0123456789abcdef-secret"
	for _, args := range [][]string{{"--http", ":8080", "--admin-token", token}, {"--http", ":8080"}} {
		var b bytes.Buffer
		logConfig(zerolog.New(&b), resolve(mustParse(t, args...), testHost, testProcess(math.MaxInt64)))
		if strings.Contains(b.String(), token) {
			t.Fatalf("the configuration shows the token: %s", b.String())
		}
		var got map[string]any
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if want := len(args) > 2; got["admin_token"] != want {
			t.Errorf("%q: admin_token %v, want %v", args, got["admin_token"], want)
		}
	}
}
