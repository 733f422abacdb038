package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/store/wal"
)

// usageText is what writeUsage prints, for tables that expect it after an error.
func usageText() string {
	var b bytes.Buffer
	writeUsage(&b)
	return b.String()
}

// defaultOptions is what parseArgs returns for an empty command line.
func defaultOptions() options {
	return options{
		cfg: engine.Config{
			Network:    "tcp",
			Address:    ":11300",
			MaxJobSize: engine.DefaultMaxJobSize,
		},
		logLevel:        zerolog.InfoLevel,
		wal:             wal.Options{SegmentSize: wal.DefaultSegmentSize, SyncEvery: wal.DefaultSyncEvery},
		shutdownTimeout: defaultShutdownTimeout,
		metricsTubes:    ops.DefaultTubeSeries,
		gcHeadroom:      defaultGCHeadroom,
	}
}

const (
	clampWarning = "sprout: maximum job size was set to 1073741824\n"
	cWarning     = "sprout: -c flag was removed. binlog is always compacted.\n"
	nWarning     = "sprout: -n flag was removed. binlog is always compacted.\n"
)

type parseCase struct {
	name string
	args []string
	// want edits defaultOptions into the expected options; nil means the
	// defaults. It is only checked when the action is actionRun.
	want       func(o *options)
	wantAction action
	wantCode   int
	// wantStderr is the exact diagnostic output; wantUsage appends the usage text.
	wantStderr string
	wantUsage  bool
}

func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			got, act, code := parseArgs(tc.args, &stderr)

			if act != tc.wantAction || code != tc.wantCode {
				t.Errorf("parseArgs(%q) = action %d, exit %d; want action %d, exit %d",
					tc.args, act, code, tc.wantAction, tc.wantCode)
			}
			wantStderr := tc.wantStderr
			if tc.wantUsage {
				wantStderr += usageText()
			}
			if stderr.String() != wantStderr {
				t.Errorf("parseArgs(%q) stderr:\n%s\nwant:\n%s", tc.args, stderr.String(), wantStderr)
			}
			if tc.wantAction != actionRun {
				return
			}
			want := defaultOptions()
			if tc.want != nil {
				tc.want(&want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("parseArgs(%q) options:\n%+v\nwant:\n%+v", tc.args, got, want)
			}
		})
	}
}

func TestParseArgsListen(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "defaults", args: nil},
		{name: "port separate", args: []string{"-p", "1234"},
			want: func(o *options) { o.cfg.Address = ":1234" }},
		{name: "port attached", args: []string{"-p1234"},
			want: func(o *options) { o.cfg.Address = ":1234" }},
		{name: "port is a service name for the listener to resolve", args: []string{"-p", "http"},
			want: func(o *options) { o.cfg.Address = ":http" }},
		{name: "empty port means any free port, as beanstalkd", args: []string{"-p", ""},
			want: func(o *options) { o.cfg.Address = ":" }},
		{name: "address separate", args: []string{"-l", "127.0.0.1"},
			want: func(o *options) { o.cfg.Address = "127.0.0.1:11300" }},
		{name: "address attached", args: []string{"-l127.0.0.1"},
			want: func(o *options) { o.cfg.Address = "127.0.0.1:11300" }},
		{name: "address and port in either order", args: []string{"-p", "11412", "-l", "127.0.0.1"},
			want: func(o *options) { o.cfg.Address = "127.0.0.1:11412" }},
		{name: "ipv6 address", args: []string{"-l", "::1", "-p", "11300"},
			want: func(o *options) { o.cfg.Address = "[::1]:11300" }},
		{name: "empty address is all interfaces", args: []string{"-l", ""},
			want: func(o *options) { o.cfg.Address = ":11300" }},
		{name: "last address wins", args: []string{"-l", "unix:/tmp/a.sock", "-l", "10.0.0.1"},
			want: func(o *options) { o.cfg.Address = "10.0.0.1:11300" }},
		{name: "unix socket", args: []string{"-l", "unix:/tmp/sprout.sock"},
			want: func(o *options) { o.cfg.Network, o.cfg.Address = "unix", "/tmp/sprout.sock" }},
		{name: "unix socket ignores port", args: []string{"-lunix:rel.sock", "-p", "1"},
			want: func(o *options) { o.cfg.Network, o.cfg.Address = "unix", "rel.sock" }},
		{name: "unix socket without path", args: []string{"-l", "unix:"},
			wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: -l unix: needs a socket path, as in -l unix:/run/sprout.sock\n"},
		{name: "port without value", args: []string{"-p"},
			wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: flag requires an argument: -p\n"},
		{name: "address without value", args: []string{"-V", "-l"},
			wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: flag requires an argument: -l\n"},
	})
}

func TestParseArgsJobSize(t *testing.T) {
	size := func(n int) func(o *options) { return func(o *options) { o.cfg.MaxJobSize = n } }
	invalid := func(name string, args []string, shown string) parseCase {
		return parseCase{name: name, args: args, wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: invalid size: " + shown + "\n"}
	}
	runParseCases(t, []parseCase{
		{name: "separate", args: []string{"-z", "100"}, want: size(100)},
		{name: "attached", args: []string{"-z100"}, want: size(100)},
		{name: "zero", args: []string{"-z", "0"}, want: size(0)},
		{name: "leading white space", args: []string{"-z", " \t12"}, want: size(12)},
		{name: "plus sign", args: []string{"-z+12"}, want: size(12)},
		{name: "minus zero", args: []string{"-z", "-0"}, want: size(0)},
		{name: "at the limit, no warning", args: []string{"-z", "1073741824"}, want: size(1 << 30)},
		{name: "over the limit is clamped", args: []string{"-z", "1073741825"},
			want: size(1 << 30), wantStderr: clampWarning},
		{name: "minus one wraps to 2^64-1 and is clamped", args: []string{"-z", "-1"},
			want: size(1 << 30), wantStderr: clampWarning},
		{name: "overflow saturates and is clamped", args: []string{"-z", "99999999999999999999999"},
			want: size(1 << 30), wantStderr: clampWarning},
		{name: "negative overflow saturates too", args: []string{"-z", "-18446744073709551616"},
			want: size(1 << 30), wantStderr: clampWarning},
		{name: "negating 2^64-1 gives 1", args: []string{"-z", "-18446744073709551615"}, want: size(1)},
		{name: "last one wins", args: []string{"-z", "5", "-z6"}, want: size(6)},
		invalid("suffix", []string{"-z", "10k"}, "10k"),
		invalid("trailing space", []string{"-z", "12 "}, "12 "),
		invalid("hex", []string{"-z", "0x10"}, "0x10"),
		invalid("letters", []string{"-z", "abc"}, "abc"),
		invalid("empty", []string{"-z", ""}, ""),
		invalid("sign only", []string{"-z", "-"}, "-"),
		invalid("equals is part of the value", []string{"-z=5"}, "=5"),
		invalid("the next argument is taken whatever it is", []string{"-z", "-v"}, "-v"),
		{name: "missing", args: []string{"-z"}, wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: flag requires an argument: -z\n"},
	})
}

func TestParseArgsCombined(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "V", args: []string{"-V"},
			want: func(o *options) { o.verbosity, o.logLevel = 1, zerolog.DebugLevel }},
		{name: "VV", args: []string{"-VV"},
			want: func(o *options) { o.verbosity, o.logLevel = 2, zerolog.TraceLevel }},
		{name: "V V V", args: []string{"-V", "-V", "-V"},
			want: func(o *options) { o.verbosity, o.logLevel = 3, zerolog.TraceLevel }},
		{name: "value takes the rest of the argument", args: []string{"-Vp1234"},
			want: func(o *options) { o.verbosity, o.logLevel, o.cfg.Address = 1, zerolog.DebugLevel, ":1234" }},
		{name: "value takes the next argument", args: []string{"-VVz", "100"},
			want: func(o *options) { o.verbosity, o.logLevel, o.cfg.MaxJobSize = 2, zerolog.TraceLevel, 100 }},
		{name: "flag letters after a value flag are its value", args: []string{"-pV"},
			want: func(o *options) { o.cfg.Address = ":V" }},
		{name: "a value flag swallows the letters after it", args: []string{"-zp", "7"},
			wantAction: actionFail, wantCode: 5, wantUsage: true, wantStderr: "sprout: invalid size: p\n"},
		{name: "only exact long names beat combined flags", args: []string{"-Vloops"},
			want: func(o *options) { o.verbosity, o.logLevel, o.cfg.Address = 1, zerolog.DebugLevel, "oops:11300" }},
		{name: "a longer word is still -l", args: []string{"-loopsy"},
			want: func(o *options) { o.cfg.Address = "oopsy:11300" }},
		{name: "l oops", args: []string{"-l", "oops"},
			want: func(o *options) { o.cfg.Address = "oops:11300" }},
	})
}

func TestParseArgsTerminal(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "version", args: []string{"-v"}, wantAction: actionPrintVersion},
		{name: "version ends the scan", args: []string{"-vx", "foo", "-b", "x"}, wantAction: actionPrintVersion},
		{name: "version after other flags", args: []string{"-Vp1", "-v"}, wantAction: actionPrintVersion},
		{name: "help", args: []string{"-h"}, wantAction: actionPrintUsage},
		{name: "help ends the scan", args: []string{"-hx", "-b"}, wantAction: actionPrintUsage},
		{name: "help after a warning", args: []string{"-c", "-h"}, wantAction: actionPrintUsage,
			wantStderr: cWarning},
		{name: "error before version wins", args: []string{"-xv"},
			wantAction: actionFail, wantCode: 5, wantUsage: true, wantStderr: "sprout: unknown flag: -x\n"},
	})
}

func TestParseArgsRemoved(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "c warns and continues", args: []string{"-c", "-p", "11412"},
			want: func(o *options) { o.cfg.Address = ":11412" }, wantStderr: cWarning},
		{name: "n warns and continues", args: []string{"-n"}, wantStderr: nWarning},
		{name: "cn combined", args: []string{"-cnV"}, wantStderr: cWarning + nWarning,
			want: func(o *options) { o.verbosity, o.logLevel = 1, zerolog.DebugLevel }},
		{name: "warning then error", args: []string{"-c", "-x"},
			wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: cWarning + "sprout: unknown flag: -x\n"},
	})
}

func TestParseArgsUser(t *testing.T) {
	user := func(name string) func(o *options) { return func(o *options) { o.user = name } }
	usageFail := func(name string, args []string, msg string) parseCase {
		return parseCase{name: name, args: args, wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: " + msg + "\n"}
	}
	runParseCases(t, []parseCase{
		{name: "separate", args: []string{"-u", "nobody"}, want: user("nobody")},
		{name: "attached", args: []string{"-unobody"}, want: user("nobody")},
		{name: "combined after V", args: []string{"-Vu", "sprout"},
			want: func(o *options) { o.verbosity, o.logLevel, o.user = 1, zerolog.DebugLevel, "sprout" }},
		{name: "letters after u are its value", args: []string{"-uV"}, want: user("V")},
		{name: "the next argument is taken whatever it is", args: []string{"-u", "-p"}, want: user("-p")},
		{name: "last one wins", args: []string{"-u", "a", "-ub"}, want: user("b")},
		{name: "among other flags", args: []string{"-p", "1", "-z", "5", "-u", "x", "-b", "/var/lib/sprout"},
			want: func(o *options) {
				o.cfg.Address, o.cfg.MaxJobSize, o.user, o.walDir = ":1", 5, "x", "/var/lib/sprout"
			}},
		usageFail("missing", []string{"-u"}, "flag requires an argument: -u"),
		usageFail("missing after V", []string{"-Vu"}, "flag requires an argument: -u"),
		usageFail("empty", []string{"-u", ""}, "-u needs a user name"),
	})
}

func TestParseArgsWriteAheadLog(t *testing.T) {
	usageFail := func(name string, args []string, msg string) parseCase {
		return parseCase{name: name, args: args, wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: " + msg + "\n"}
	}
	runParseCases(t, []parseCase{
		{name: "b separate", args: []string{"-b", "/var/lib/sprout"},
			want: func(o *options) { o.walDir = "/var/lib/sprout" }},
		{name: "b attached", args: []string{"-b/var/lib/sprout"},
			want: func(o *options) { o.walDir = "/var/lib/sprout" }},
		usageFail("b without value", []string{"-b"}, "flag requires an argument: -b"),
		{name: "f", args: []string{"-f", "200"},
			want: func(o *options) { o.wal.SyncEvery = 200 * time.Millisecond }},
		{name: "f0 combined", args: []string{"-Vf0"},
			want: func(o *options) { o.verbosity, o.logLevel, o.wal.SyncEvery = 1, zerolog.DebugLevel, 0 }},
		{name: "F", args: []string{"-F"}, want: func(o *options) { o.wal.NoSync = true }},
		{name: "f then F: F wins", args: []string{"-f1234", "-F"},
			want: func(o *options) { o.wal.SyncEvery, o.wal.NoSync = 1234*time.Millisecond, true }},
		{name: "F then f: f wins", args: []string{"-F", "-f", "7"},
			want: func(o *options) { o.wal.SyncEvery = 7 * time.Millisecond }},
		usageFail("f not a number", []string{"-f", "10ms"}, "invalid fsync interval: 10ms"),
		{name: "s", args: []string{"-s", "4096"}, want: func(o *options) { o.wal.SegmentSize = 4096 }},
		usageFail("s zero", []string{"-s", "0"}, "invalid size: 0"),
		usageFail("s suffix", []string{"-s", "10k"}, "invalid size: 10k"),
		{name: "skip-damaged", args: []string{"--skip-damaged", "true"},
			want: func(o *options) { o.wal.SkipDamaged = true }},
		usageFail("skip-damaged not a bool", []string{"--skip-damaged=maybe"},
			`invalid --skip-damaged: "maybe" (want true or false)`),
	})
}

func TestParseArgsUnknown(t *testing.T) {
	usageFail := func(name string, args []string, msg string) parseCase {
		return parseCase{name: name, args: args, wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: " + msg + "\n"}
	}
	runParseCases(t, []parseCase{
		usageFail("unknown flag", []string{"-x"}, "unknown flag: -x"),
		usageFail("unknown flag after known ones", []string{"-VVx"}, "unknown flag: -x"),
		usageFail("unknown long flag", []string{"--foo"}, "unknown flag: --foo"),
		usageFail("unknown long flag with value", []string{"--foo=1"}, "unknown flag: --foo=1"),
		usageFail("double dash", []string{"--"}, "unknown flag: --"),
		usageFail("lone dash", []string{"-"}, "unknown argument: -"),
		usageFail("empty argument", []string{""}, "unknown argument: "),
		usageFail("non-flag argument", []string{"foo"}, "unknown argument: foo"),
		usageFail("non-flag after flags", []string{"-V", "-p", "1", "foo", "-v"}, "unknown argument: foo"),
	})
}

func TestParseArgsLongFlags(t *testing.T) {
	loops := func(n int) func(o *options) { return func(o *options) { o.cfg.Loops = n } }
	level := func(l zerolog.Level) func(o *options) { return func(o *options) { o.logLevel = l } }
	usageFail := func(name string, args []string, msg string) parseCase {
		return parseCase{name: name, args: args, wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: " + msg + "\n"}
	}
	const loopsWant = " (want 0 to 256; 0 means one per CPU less one)"
	const levelWant = " (want one of trace, debug, info, warn, error, fatal, panic, disabled)"
	const bytesWant = " (want a number of bytes; 0 means the default)"
	runParseCases(t, []parseCase{
		{name: "loops separate", args: []string{"--loops", "4"}, want: loops(4)},
		{name: "loops equals", args: []string{"--loops=4"}, want: loops(4)},
		{name: "loops one dash beats -l oops", args: []string{"-loops", "4"}, want: loops(4)},
		{name: "loops one dash equals", args: []string{"-loops=4"}, want: loops(4)},
		{name: "loops zero", args: []string{"--loops", "0"}, want: loops(0)},
		{name: "loops max", args: []string{"--loops", "256"}, want: loops(256)},
		{name: "loops among short flags", args: []string{"-V", "--loops", "2", "-p1"},
			want: func(o *options) {
				o.verbosity, o.logLevel, o.cfg.Loops, o.cfg.Address = 1, zerolog.DebugLevel, 2, ":1"
			}},
		usageFail("loops too many", []string{"--loops", "257"}, `invalid --loops: "257"`+loopsWant),
		usageFail("loops negative", []string{"--loops", "-1"}, `invalid --loops: "-1"`+loopsWant),
		usageFail("loops not a number", []string{"--loops", "all"}, `invalid --loops: "all"`+loopsWant),
		usageFail("loops empty", []string{"--loops="}, `invalid --loops: ""`+loopsWant),
		usageFail("loops missing", []string{"--loops"}, "flag requires an argument: --loops"),
		usageFail("loops one dash missing", []string{"-loops"}, "flag requires an argument: --loops"),

		{name: "log level", args: []string{"--log-level", "debug"}, want: level(zerolog.DebugLevel)},
		{name: "log level any case", args: []string{"--log-level=WARN"}, want: level(zerolog.WarnLevel)},
		{name: "log level one dash", args: []string{"-log-level", "error"}, want: level(zerolog.ErrorLevel)},
		{name: "log level disabled", args: []string{"--log-level", "disabled"}, want: level(zerolog.Disabled)},
		{name: "log level trace", args: []string{"--log-level", "trace"}, want: level(zerolog.TraceLevel)},
		{name: "V raises warn to debug", args: []string{"--log-level", "warn", "-V"},
			want: func(o *options) { o.verbosity, o.logLevel = 1, zerolog.DebugLevel }},
		{name: "VV raises warn to trace", args: []string{"-VV", "--log-level", "warn"},
			want: func(o *options) { o.verbosity, o.logLevel = 2, zerolog.TraceLevel }},
		{name: "V never lowers trace", args: []string{"--log-level", "trace", "-V"},
			want: func(o *options) { o.verbosity, o.logLevel = 1, zerolog.TraceLevel }},
		{name: "V raises disabled", args: []string{"--log-level", "disabled", "-V"},
			want: func(o *options) { o.verbosity, o.logLevel = 1, zerolog.DebugLevel }},
		usageFail("log level unknown", []string{"--log-level", "loud"}, `invalid --log-level: "loud"`+levelWant),
		usageFail("log level number", []string{"--log-level", "1"}, `invalid --log-level: "1"`+levelWant),
		usageFail("log level empty", []string{"--log-level", ""}, `invalid --log-level: ""`+levelWant),

		{name: "max input", args: []string{"--max-input", "1048576"},
			want: func(o *options) { o.cfg.MaxInputBuffered = 1 << 20 }},
		{name: "max input one dash", args: []string{"-max-input=5"},
			want: func(o *options) { o.cfg.MaxInputBuffered = 5 }},
		{name: "max output", args: []string{"--max-output", "8388608"},
			want: func(o *options) { o.cfg.MaxOutputBuffered = 8 << 20 }},
		{name: "max output zero keeps the default", args: []string{"--max-output=0"}},
		usageFail("max input suffix", []string{"--max-input", "4k"}, `invalid --max-input: "4k"`+bytesWant),
		usageFail("max input negative", []string{"--max-input", "-1"}, `invalid --max-input: "-1"`+bytesWant),
		usageFail("max output too large", []string{"--max-output", "9223372036854775808"},
			`invalid --max-output: "9223372036854775808"`+bytesWant),
		usageFail("max output missing", []string{"--max-output"}, "flag requires an argument: --max-output"),

		{name: "max connections", args: []string{"--max-connections", "19000"},
			want: func(o *options) { o.cfg.MaxConnections = 19000 }},
		{name: "max connections zero keeps the default", args: []string{"--max-connections=0"}},
		usageFail("max connections negative", []string{"--max-connections", "-1"},
			`invalid --max-connections: "-1" (want a number; 0 means from the open-file limit)`),
		usageFail("max connections too large", []string{"--max-connections", "2147483648"},
			`invalid --max-connections: "2147483648" (want a number; 0 means from the open-file limit)`),
		{name: "max buffer memory", args: []string{"-max-buffer-memory", "67108864"},
			want: func(o *options) { o.cfg.MaxBufferMemory = 64 << 20 }},
		usageFail("max buffer memory suffix", []string{"--max-buffer-memory", "64m"},
			`invalid --max-buffer-memory: "64m"`+bytesWant),

		{name: "shutdown timeout", args: []string{"--shutdown-timeout", "90s"},
			want: func(o *options) { o.shutdownTimeout = 90 * time.Second }},
		{name: "shutdown timeout zero", args: []string{"--shutdown-timeout=0s"},
			want: func(o *options) { o.shutdownTimeout = 0 }},
		usageFail("shutdown timeout without unit", []string{"--shutdown-timeout", "25"},
			`invalid --shutdown-timeout: "25" (want a duration such as 25s)`),
		{name: "log format", args: []string{"--log-format", "console"},
			want: func(o *options) { o.logFormat = "console" }},
		usageFail("log format unknown", []string{"--log-format", "xml"},
			`invalid --log-format: "xml" (want json or console)`),
		{name: "version", args: []string{"--version", "--bogus"}, wantAction: actionPrintVersion},
	})
}

func TestParseArgsOps(t *testing.T) {
	usageFail := func(name string, args []string, msg string) parseCase {
		return parseCase{name: name, args: args, wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: "sprout: " + msg + "\n"}
	}
	const httpWant = " (want HOST:PORT, as in 127.0.0.1:8080)"
	const tubesWant = " (want a number of tubes, at least 1)"
	runParseCases(t, []parseCase{
		{name: "http", args: []string{"--http", "127.0.0.1:8080"},
			want: func(o *options) { o.httpAddr = "127.0.0.1:8080" }},
		{name: "http all interfaces", args: []string{"--http=:8080"},
			want: func(o *options) { o.httpAddr = ":8080" }},
		{name: "http one dash beats -h", args: []string{"-http", "[::1]:0"},
			want: func(o *options) { o.httpAddr = "[::1]:0" }},
		{name: "http empty is off", args: []string{"--http", ""}},
		usageFail("http without port", []string{"--http", "127.0.0.1"}, `invalid --http: "127.0.0.1"`+httpWant),
		usageFail("http missing", []string{"--http"}, "flag requires an argument: --http"),
		{name: "pprof", args: []string{"--http", ":1", "--pprof", "true"},
			want: func(o *options) { o.httpAddr, o.pprof = ":1", true }},
		{name: "pprof equals", args: []string{"--pprof=1"}, want: func(o *options) { o.pprof = true }},
		{name: "pprof false", args: []string{"--pprof", "false"}},
		usageFail("pprof not a bool", []string{"--pprof", "yes"}, `invalid --pprof: "yes" (want true or false)`),
		{name: "metrics tubes", args: []string{"--metrics-tubes", "50"},
			want: func(o *options) { o.metricsTubes = 50 }},
		{name: "metrics tubes one", args: []string{"-metrics-tubes=1"},
			want: func(o *options) { o.metricsTubes = 1 }},
		usageFail("metrics tubes zero", []string{"--metrics-tubes", "0"}, `invalid --metrics-tubes: "0"`+tubesWant),
		{name: "gc headroom", args: []string{"--gc-headroom", "67108864"},
			want: func(o *options) { o.gcHeadroom = 64 << 20 }},
		{name: "gc headroom off", args: []string{"--gc-headroom=0"},
			want: func(o *options) { o.gcHeadroom = 0 }},
		usageFail("gc headroom not a number", []string{"--gc-headroom", "32MiB"},
			`invalid --gc-headroom: "32MiB" (want a number of bytes; 0 leaves Go's default)`),
		usageFail("metrics tubes negative", []string{"--metrics-tubes", "-5"}, `invalid --metrics-tubes: "-5"`+tubesWant),
		usageFail("metrics tubes too large", []string{"--metrics-tubes", "2147483648"},
			`invalid --metrics-tubes: "2147483648"`+tubesWant),
	})
}

func TestVersionLine(t *testing.T) {
	got := versionLine()
	if !strings.HasPrefix(got, "sprout ") || !strings.HasSuffix(got, " (beanstalkd protocol 1.13)") {
		t.Errorf("versionLine() = %q; want \"sprout <version> (beanstalkd protocol 1.13)\"", got)
	}
}

func TestUsageMentionsEveryFlag(t *testing.T) {
	usage := usageText()
	for _, flag := range []string{"-l ADDR", "-p PORT", "-z BYTES", "-v ", "-V ", "-h ", "-c, -n",
		"-b DIR", "-f MS", "-F", "-s BYTES", "-u USER",
		"--loops N", "--log-level LEVEL", "--max-input BYTES", "--max-output BYTES", "-loops 4",
		"--max-connections N", "--max-buffer-memory BYTES", "--shutdown-timeout DURATION",
		"--log-format FORMAT", "--version", "--listen", "--wal-dir", "SPROUT_<NAME>", "SPROUT_NO_FSYNC"} {
		if !strings.Contains(usage, flag) {
			t.Errorf("usage does not mention %q", flag)
		}
	}
}
