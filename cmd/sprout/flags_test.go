package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// usageText is what writeUsage prints, for tables that expect it after an error.
func usageText() string {
	var b bytes.Buffer
	writeUsage(&b)
	return b.String()
}

// parseArgs leaves what was not given at zero: defaults are resolve's.
func defaultOptions() options { return options{} }

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
	want func(o *options)
	// env is the environment parseArgs reads.
	env        []string
	wantAction action
	wantCode   int
	// wantStderr is the exact diagnostic output; wantUsage appends the usage text.
	wantStderr string
	wantUsage  bool
	// wantListen, if set, is checked instead of want: "NETWORK ADDRESS"
	// as the options' listenAddress gives them.
	wantListen string
}

func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			got, act, code := parseArgs(tc.args, tc.env, &stderr)

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
			if tc.wantListen != "" {
				if network, address := got.listenAddress(); network+" "+address != tc.wantListen {
					t.Errorf("parseArgs(%q) listens on %s %s; want %s", tc.args, network, address, tc.wantListen)
				}
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

// oneLine is a refused value or a missing one: one line, exit 5, no usage.
func oneLine(name string, args []string, msg string) parseCase {
	return parseCase{name: name, args: args, wantAction: actionFail, wantCode: 5, wantStderr: "sprout: " + msg + "\n"}
}

// unknown is an unknown flag or argument: its line, then the usage, exit 5.
func unknown(name string, args []string, msg string) parseCase {
	return parseCase{name: name, args: args, wantAction: actionFail, wantCode: 5, wantUsage: true,
		wantStderr: "sprout: " + msg + "\n"}
}

func TestParseArgsListen(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "defaults", args: nil, wantListen: "tcp :11300"},
		{name: "port separate", args: []string{"-p", "1234"}, wantListen: "tcp :1234"},
		{name: "port attached", args: []string{"-p1234"}, wantListen: "tcp :1234"},
		{name: "port is a service name for the listener to resolve", args: []string{"-p", "http"},
			wantListen: "tcp :http"},
		{name: "empty port means any free port, as beanstalkd", args: []string{"-p", ""}, wantListen: "tcp :"},
		{name: "address separate", args: []string{"-l", "127.0.0.1"}, wantListen: "tcp 127.0.0.1:11300"},
		{name: "address attached", args: []string{"-l127.0.0.1"}, wantListen: "tcp 127.0.0.1:11300"},
		{name: "address and port in either order", args: []string{"-p", "11412", "-l", "127.0.0.1"},
			wantListen: "tcp 127.0.0.1:11412"},
		{name: "ipv6 address", args: []string{"-l", "::1", "-p", "11300"}, wantListen: "tcp [::1]:11300"},
		{name: "empty address is all interfaces", args: []string{"-l", ""}, wantListen: "tcp :11300"},
		{name: "last address wins", args: []string{"-l", "unix:/tmp/a.sock", "-l", "10.0.0.1"},
			wantListen: "tcp 10.0.0.1:11300"},
		{name: "unix socket", args: []string{"-l", "unix:/tmp/sprout.sock"}, wantListen: "unix /tmp/sprout.sock"},
		{name: "unix socket ignores port", args: []string{"-lunix:rel.sock", "-p", "1"}, wantListen: "unix rel.sock"},
		{name: "long names", args: []string{"--listen", "::1", "--port=11301"}, wantListen: "tcp [::1]:11301"},
		{name: "long name with equals", args: []string{"--listen=10.0.0.1", "--port", "7"}, wantListen: "tcp 10.0.0.1:7"},
		oneLine("unix socket without path", []string{"-l", "unix:"},
			`invalid -l: "unix:" (want a socket path after unix:, as in unix:/run/sprout.sock)`),
		oneLine("port out of range", []string{"-p", "65536"},
			`invalid -p: "65536" (want a port number up to 65535 or a service name)`),
		oneLine("port not a name", []string{"--port=tcp://10.0.0.1:11300"},
			`invalid --port: "tcp://10.0.0.1:11300" (want a port number up to 65535 or a service name)`),
		oneLine("port without value", []string{"-p"}, "flag requires an argument: -p"),
		oneLine("address without value", []string{"-V", "-l"}, "flag requires an argument: -l"),
		// These were once "unknown argument: 5" and a missing value
		// reported for "-l".
		oneLine("a long flag is not a value", []string{"-l", "--port=5"},
			"flag requires an argument: -l (the next argument, --port=5, is a flag)"),
		oneLine("long name without value", []string{"--listen"}, "flag requires an argument: --listen"),
		oneLine("long name before a long flag", []string{"--listen", "--port", "5"},
			"flag requires an argument: --listen (the next argument, --port, is a flag)"),
	})
}

func TestParseArgsJobSize(t *testing.T) {
	size := func(n int) func(o *options) { return func(o *options) { o.maxJobSize = given(n) } }
	invalid := func(name string, args []string, shown string) parseCase {
		return oneLine(name, args, `invalid -z: "`+shown+`" (want a number of bytes)`)
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
		{name: "long name", args: []string{"--max-job-size", "100"}, want: size(100)},
		invalid("suffix", []string{"-z", "10k"}, "10k"),
		invalid("trailing space", []string{"-z", "12 "}, "12 "),
		invalid("hex", []string{"-z", "0x10"}, "0x10"),
		invalid("letters", []string{"-z", "abc"}, "abc"),
		invalid("empty", []string{"-z", ""}, ""),
		invalid("sign only", []string{"-z", "-"}, "-"),
		invalid("equals is part of the value", []string{"-z=5"}, "=5"),
		invalid("the next argument is taken whatever it is", []string{"-z", "-v"}, "-v"),
		oneLine("long name names itself", []string{"--max-job-size=1M"}, `invalid --max-job-size: "1M" (want a number of bytes)`),
		oneLine("missing", []string{"-z"}, "flag requires an argument: -z"),
	})
}

func TestParseArgsCombined(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "V", args: []string{"-V"}, want: func(o *options) { o.verbosity = 1 }},
		{name: "VV", args: []string{"-VV"}, want: func(o *options) { o.verbosity = 2 }},
		{name: "V V V", args: []string{"-V", "-V", "-V"}, want: func(o *options) { o.verbosity = 3 }},
		{name: "verbose N adds N", args: []string{"-V", "--verbose", "2"}, want: func(o *options) { o.verbosity = 3 }},
		{name: "value takes the rest of the argument", args: []string{"-Vp1234"},
			want: func(o *options) { o.verbosity, o.port = 1, given("1234") }},
		{name: "value takes the next argument", args: []string{"-VVz", "100"},
			want: func(o *options) { o.verbosity, o.maxJobSize = 2, given(100) }},
		{name: "flag letters after a value flag are its value", args: []string{"-pV"},
			wantListen: "tcp :V"},
		oneLine("a value flag swallows the letters after it", []string{"-zp", "7"}, `invalid -z: "p" (want a number of bytes)`),
		{name: "only exact long names beat combined flags", args: []string{"-Vloops"},
			want: func(o *options) { o.verbosity, o.host = 1, "oops" }},
		{name: "a longer word is still -l", args: []string{"-loopsy"}, want: func(o *options) { o.host = "oopsy" }},
		{name: "l oops", args: []string{"-l", "oops"}, want: func(o *options) { o.host = "oops" }},
		// A letter's long name has two dashes: -listen stays -l isten, as
		// in beanstalkd.
		{name: "one-dash long names are Sprout's own only", args: []string{"-listen"},
			want: func(o *options) { o.host = "isten" }},
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
		{name: "long help", args: []string{"--help", "--bogus"}, wantAction: actionPrintUsage},
		{name: "version is not stopped by a bad environment", args: []string{"-v"},
			env: []string{"SPROUT_MAX_OUTPUT=1M"}, wantAction: actionPrintVersion},
		unknown("error before version wins", []string{"-xv"}, "unknown flag: -x"),
		oneLine("long version takes no value", []string{"--version=2"}, "--version=2 takes no value"),
	})
}

func TestParseArgsRemoved(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "c warns and continues", args: []string{"-c", "-p", "11412"},
			want: func(o *options) { o.port = given("11412") }, wantStderr: cWarning},
		{name: "n warns and continues", args: []string{"-n"}, wantStderr: nWarning},
		{name: "cn combined", args: []string{"-cnV"}, wantStderr: cWarning + nWarning,
			want: func(o *options) { o.verbosity = 1 }},
		{name: "warning then error", args: []string{"-c", "-x"},
			wantAction: actionFail, wantCode: 5, wantUsage: true,
			wantStderr: cWarning + "sprout: unknown flag: -x\n"},
	})
}

func TestParseArgsUser(t *testing.T) {
	user := func(name string) func(o *options) { return func(o *options) { o.user = name } }
	runParseCases(t, []parseCase{
		{name: "separate", args: []string{"-u", "nobody"}, want: user("nobody")},
		{name: "attached", args: []string{"-unobody"}, want: user("nobody")},
		{name: "combined after V", args: []string{"-Vu", "sprout"},
			want: func(o *options) { o.verbosity, o.user = 1, "sprout" }},
		{name: "letters after u are its value", args: []string{"-uV"}, want: user("V")},
		{name: "the next argument is taken whatever it is", args: []string{"-u", "-p"}, want: user("-p")},
		{name: "last one wins", args: []string{"-u", "a", "-ub"}, want: user("b")},
		{name: "long name", args: []string{"--user", "nobody"}, want: user("nobody")},
		{name: "among other flags", args: []string{"-p", "1", "-z", "5", "-u", "x", "-b", "/var/lib/sprout"},
			want: func(o *options) {
				o.port, o.maxJobSize, o.user, o.walDir = given("1"), given(5), "x", "/var/lib/sprout"
			}},
		oneLine("missing", []string{"-u"}, "flag requires an argument: -u"),
		oneLine("missing after V", []string{"-Vu"}, "flag requires an argument: -u"),
		oneLine("empty", []string{"-u", ""}, `invalid -u: "" (want a user name)`),
	})
}

func TestParseArgsWriteAheadLog(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "b separate", args: []string{"-b", "/var/lib/sprout"},
			want: func(o *options) { o.walDir = "/var/lib/sprout" }},
		{name: "b attached", args: []string{"-b/var/lib/sprout"},
			want: func(o *options) { o.walDir = "/var/lib/sprout" }},
		{name: "b long", args: []string{"--wal-dir=/data"}, want: func(o *options) { o.walDir = "/data" }},
		oneLine("b without value", []string{"-b"}, "flag requires an argument: -b"),
		{name: "f", args: []string{"-f", "200"},
			want: func(o *options) { o.syncEvery = given(200 * time.Millisecond) }},
		{name: "f0 combined", args: []string{"-Vf0"},
			want: func(o *options) { o.verbosity, o.syncEvery = 1, given(time.Duration(0)) }},
		{name: "F", args: []string{"-F"}, want: func(o *options) { o.noSync = true }},
		{name: "f then F: F wins", args: []string{"-f1234", "-F"},
			want: func(o *options) { o.syncEvery, o.noSync = given(1234*time.Millisecond), true }},
		{name: "F then f: f wins", args: []string{"-F", "-f", "7"},
			want: func(o *options) { o.syncEvery = given(7 * time.Millisecond) }},
		{name: "no-fsync true is F", args: []string{"--no-fsync", "true"}, want: func(o *options) { o.noSync = true }},
		{name: "F then no-fsync false", args: []string{"-F", "--no-fsync=false"}},
		{name: "fsync-ms long", args: []string{"--fsync-ms", "0"},
			want: func(o *options) { o.syncEvery = given(time.Duration(0)) }},
		oneLine("fsync-ms without value", []string{"--fsync-ms"}, "flag requires an argument: --fsync-ms"),
		oneLine("f not a number", []string{"-f", "10ms"}, `invalid -f: "10ms" (want a number of milliseconds)`),
		oneLine("no-fsync not a bool", []string{"--no-fsync", "yes"}, `invalid --no-fsync: "yes" (want true or false)`),
		{name: "s", args: []string{"-s", "4096"}, want: func(o *options) { o.segmentSize = 4096 }},
		{name: "s long", args: []string{"--segment-size=4096"}, want: func(o *options) { o.segmentSize = 4096 }},
		oneLine("s zero", []string{"-s", "0"}, `invalid -s: "0" (want a number of bytes from 1 to 2147483647)`),
		oneLine("s suffix", []string{"-s", "10k"}, `invalid -s: "10k" (want a number of bytes from 1 to 2147483647)`),
		{name: "skip-damaged", args: []string{"--skip-damaged", "true"},
			want: func(o *options) { o.skipDamaged = true }},
		oneLine("skip-damaged not a bool", []string{"--skip-damaged=maybe"},
			`invalid --skip-damaged: "maybe" (want true or false)`),
	})
}

func TestParseArgsUnknown(t *testing.T) {
	runParseCases(t, []parseCase{
		unknown("unknown flag", []string{"-x"}, "unknown flag: -x"),
		unknown("unknown flag after known ones", []string{"-VVx"}, "unknown flag: -x"),
		unknown("unknown long flag", []string{"--foo"}, "unknown flag: --foo"),
		unknown("unknown long flag with value", []string{"--foo=1"}, "unknown flag: --foo=1"),
		unknown("double dash", []string{"--"}, "unknown flag: --"),
		unknown("lone dash", []string{"-"}, "unknown argument: -"),
		unknown("empty argument", []string{""}, "unknown argument: "),
		unknown("non-flag argument", []string{"foo"}, "unknown argument: foo"),
		unknown("non-flag after flags", []string{"-V", "-p", "1", "foo", "-v"}, "unknown argument: foo"),
	})
}

func TestParseArgsLongFlags(t *testing.T) {
	loops := func(n int) func(o *options) { return func(o *options) { o.loops = n } }
	level := func(l zerolog.Level) func(o *options) { return func(o *options) { o.logLevel = given(l) } }
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
			want: func(o *options) { o.verbosity, o.loops, o.port = 1, 2, given("1") }},
		oneLine("loops too many", []string{"--loops", "257"}, `invalid --loops: "257"`+loopsWant),
		oneLine("loops negative", []string{"--loops", "-1"}, `invalid --loops: "-1"`+loopsWant),
		oneLine("loops not a number", []string{"--loops", "all"}, `invalid --loops: "all"`+loopsWant),
		oneLine("loops empty", []string{"--loops="}, `invalid --loops: ""`+loopsWant),
		oneLine("loops missing", []string{"--loops"}, "flag requires an argument: --loops"),
		oneLine("loops one dash missing", []string{"-loops"}, "flag requires an argument: --loops"),

		{name: "log level", args: []string{"--log-level", "debug"}, want: level(zerolog.DebugLevel)},
		{name: "log level any case", args: []string{"--log-level=WARN"}, want: level(zerolog.WarnLevel)},
		{name: "log level one dash", args: []string{"-log-level", "error"}, want: level(zerolog.ErrorLevel)},
		{name: "log level disabled", args: []string{"--log-level", "disabled"}, want: level(zerolog.Disabled)},
		{name: "log level trace", args: []string{"--log-level", "trace"}, want: level(zerolog.TraceLevel)},
		oneLine("log level unknown", []string{"--log-level", "loud"}, `invalid --log-level: "loud"`+levelWant),
		oneLine("log level number", []string{"--log-level", "1"}, `invalid --log-level: "1"`+levelWant),
		oneLine("log level empty", []string{"--log-level", ""}, `invalid --log-level: ""`+levelWant),

		{name: "max input", args: []string{"--max-input", "1048576"},
			want: func(o *options) { o.maxInput = 1 << 20 }},
		{name: "max input one dash", args: []string{"-max-input=5"},
			want: func(o *options) { o.maxInput = 5 }},
		{name: "max output", args: []string{"--max-output", "8388608"},
			want: func(o *options) { o.maxOutput = 8 << 20 }},
		{name: "max output zero keeps the default", args: []string{"--max-output=0"}},
		oneLine("max input suffix", []string{"--max-input", "4k"}, `invalid --max-input: "4k"`+bytesWant),
		oneLine("max input negative", []string{"--max-input", "-1"}, `invalid --max-input: "-1"`+bytesWant),
		oneLine("max output too large", []string{"--max-output", "9223372036854775808"},
			`invalid --max-output: "9223372036854775808"`+bytesWant),
		oneLine("max output missing", []string{"--max-output"}, "flag requires an argument: --max-output"),

		{name: "max connections", args: []string{"--max-connections", "19000"},
			want: func(o *options) { o.maxConnections = 19000 }},
		{name: "max connections zero keeps the default", args: []string{"--max-connections=0"}},
		oneLine("max connections negative", []string{"--max-connections", "-1"},
			`invalid --max-connections: "-1" (want a number; 0 means from the open-file limit)`),
		oneLine("max connections too large", []string{"--max-connections", "2147483648"},
			`invalid --max-connections: "2147483648" (want a number; 0 means from the open-file limit)`),
		{name: "max buffer memory", args: []string{"-max-buffer-memory", "67108864"},
			want: func(o *options) { o.maxBufferMemory = 64 << 20 }},
		oneLine("max buffer memory suffix", []string{"--max-buffer-memory", "64m"},
			`invalid --max-buffer-memory: "64m"`+bytesWant),

		{name: "go memory limit", args: []string{"--go-memory-limit", "1073741824"},
			want: func(o *options) { o.goMemoryLimit = 1 << 30 }},
		{name: "go memory limit off", args: []string{"--go-memory-limit=off"},
			want: func(o *options) { o.goMemoryLimit = math.MaxInt64 }},
		{name: "go memory limit zero derives it", args: []string{"--go-memory-limit=0"}},
		oneLine("go memory limit with a suffix", []string{"--go-memory-limit", "1GiB"},
			`invalid --go-memory-limit: "1GiB" (want a number of bytes, 0 for the default, or off)`),

		{name: "shutdown timeout", args: []string{"--shutdown-timeout", "90s"},
			want: func(o *options) { o.shutdownTimeout = given(90 * time.Second) }},
		{name: "shutdown timeout zero", args: []string{"--shutdown-timeout=0s"},
			want: func(o *options) { o.shutdownTimeout = given(time.Duration(0)) }},
		oneLine("shutdown timeout without unit", []string{"--shutdown-timeout", "25"},
			`invalid --shutdown-timeout: "25" (want a duration such as 25s)`),
		{name: "log format", args: []string{"--log-format", "console"},
			want: func(o *options) { o.logFormat = "console" }},
		oneLine("log format unknown", []string{"--log-format", "xml"},
			`invalid --log-format: "xml" (want json or console)`),
		{name: "version", args: []string{"--version", "--bogus"}, wantAction: actionPrintVersion},
	})
}

func TestParseArgsOps(t *testing.T) {
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
		oneLine("http without port", []string{"--http", "127.0.0.1"}, `invalid --http: "127.0.0.1"`+httpWant),
		oneLine("http missing", []string{"--http"}, "flag requires an argument: --http"),
		{name: "pprof", args: []string{"--http", ":1", "--pprof", "true"},
			want: func(o *options) { o.httpAddr, o.pprof = ":1", true }},
		{name: "pprof equals", args: []string{"--pprof=1"}, want: func(o *options) { o.pprof = true }},
		{name: "pprof false", args: []string{"--pprof", "false"}},
		oneLine("pprof not a bool", []string{"--pprof", "yes"}, `invalid --pprof: "yes" (want true or false)`),
		{name: "metrics tubes", args: []string{"--metrics-tubes", "50"},
			want: func(o *options) { o.metricsTubes = 50 }},
		{name: "metrics tubes one", args: []string{"-metrics-tubes=1"},
			want: func(o *options) { o.metricsTubes = 1 }},
		oneLine("metrics tubes zero", []string{"--metrics-tubes", "0"}, `invalid --metrics-tubes: "0"`+tubesWant),
		{name: "gc headroom", args: []string{"--gc-headroom", "67108864"},
			want: func(o *options) { o.gcHeadroom = given(int64(64 << 20)) }},
		{name: "gc headroom off", args: []string{"--gc-headroom=0"},
			want: func(o *options) { o.gcHeadroom = given(int64(0)) }},
		oneLine("gc headroom not a number", []string{"--gc-headroom", "32MiB"},
			`invalid --gc-headroom: "32MiB" (want a number of bytes; 0 leaves Go's default)`),
		oneLine("metrics tubes negative", []string{"--metrics-tubes", "-5"}, `invalid --metrics-tubes: "-5"`+tubesWant),
		oneLine("metrics tubes too large", []string{"--metrics-tubes", "2147483648"},
			`invalid --metrics-tubes: "2147483648"`+tubesWant),
	})
}

func TestVersionLine(t *testing.T) {
	got := versionLine()
	if !strings.HasPrefix(got, "sprout "+buildVersion()+" ") || !strings.HasSuffix(got, " (beanstalkd protocol 1.13)") {
		t.Errorf("versionLine() = %q; want \"sprout <version> (beanstalkd protocol 1.13)\"", got)
	}
}

func TestUsageMentionsEveryFlag(t *testing.T) {
	usage := usageText()
	for _, flag := range []string{"-l ADDR", "-p PORT", "-z BYTES", "-v ", "-V ", "-h ", "-c, -n",
		"-b DIR", "-f MS", "-F", "-s BYTES", "-u USER",
		"--loops N", "--log-level LEVEL", "--max-input BYTES", "--max-output BYTES", "-loops 4",
		"--max-connections N", "--max-buffer-memory BYTES", "--shutdown-timeout DURATION",
		"--log-format FORMAT", "--version", "--listen", "--wal-dir", "SPROUT_<NAME>", "SPROUT_NO_FSYNC",
		"--go-memory-limit BYTES", "--verbose N", "--no-fsync BOOL", "--help"} {
		if !strings.Contains(usage, flag) {
			t.Errorf("usage does not mention %q", flag)
		}
	}
	// Every row, by each of its names and its variable.
	for _, f := range flagTable {
		for _, letter := range f.letters {
			if !strings.Contains(usage, " -"+string(letter)) {
				t.Errorf("usage does not mention -%c", letter)
			}
		}
		if f.long != "" && !strings.Contains(usage, "--"+f.long) {
			t.Errorf("usage does not mention --%s", f.long)
		}
		if env := f.envName(); env != "" && !strings.Contains(usage, "$"+env) {
			t.Errorf("usage does not mention $%s", env)
		}
	}
	for line := range strings.Lines(usage) {
		if len(line) > usageWidth+1 {
			t.Errorf("usage line wider than %d columns: %q", usageWidth, line)
		}
	}
}

// The table is consistent: every name is someone's only once, and a flag
// takes a value exactly where its row says how to read one.
func TestFlagTable(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range flagTable {
		names := []string{"--" + f.long, f.envName()}
		for _, letter := range f.letters {
			names = append(names, "-"+string(letter))
		}
		for _, n := range names {
			if n != "--" && n != "" && seen[n] {
				t.Errorf("%s names two flags", n)
			}
			seen[n] = true
		}
		switch {
		case f.ends != actionRun && (f.set != nil || f.bare != nil || f.arg != ""):
			t.Errorf("%q ends the scan but takes a value", f.letters+f.long)
		case f.ends == actionRun && f.long != "" && (f.set == nil || f.arg == ""):
			t.Errorf("--%s has no setter or no value name", f.long)
		case f.ends == actionRun && f.bare == nil && f.set == nil:
			t.Errorf("-%s does nothing", f.letters)
		case f.help == "":
			t.Errorf("%q has no help", f.letters+f.long)
		}
	}
}

// TestParseArgsAdminToken: the token comes from the flag, its file (white
// space stripped) or their variables; the last given wins; a file that
// cannot be read, or holds nothing, stops the start in one line; a short
// token is warned about. No message shows a token.
func TestParseArgsAdminToken(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := file("token", "  0123456789abcdef-file\n\n")
	blank := file("blank", " \n\t\n")
	short := file("short", "abc\n")
	missing := filepath.Join(dir, "missing")
	const shortWarning = "sprout: the admin token is shorter than 16 characters; failed attempts are " +
		"rate-limited, but a long random one (openssl rand -hex 32) is far safer\n"
	runParseCases(t, []parseCase{
		{name: "flag", args: []string{"--admin-token", "0123456789abcdef-flag"},
			want: func(o *options) { o.adminToken = "0123456789abcdef-flag" }},
		{name: "file, white space stripped", args: []string{"--admin-token-file", good},
			want: func(o *options) { o.adminToken = "0123456789abcdef-file" }},
		{name: "variable", env: []string{"SPROUT_ADMIN_TOKEN=0123456789abcdef-env"},
			want: func(o *options) { o.adminToken = "0123456789abcdef-env" }},
		{name: "file variable", env: []string{"SPROUT_ADMIN_TOKEN_FILE=" + good},
			want: func(o *options) { o.adminToken = "0123456789abcdef-file" }},
		{name: "the command line wins", env: []string{"SPROUT_ADMIN_TOKEN=0123456789abcdef-env"},
			args: []string{"--admin-token-file", good},
			want: func(o *options) { o.adminToken = "0123456789abcdef-file" }},
		{name: "the last flag wins", args: []string{"--admin-token-file", good, "--admin-token", "0123456789abcdef-flag"},
			want: func(o *options) { o.adminToken = "0123456789abcdef-flag" }},
		{name: "short", args: []string{"--admin-token", "abc"}, wantStderr: shortWarning,
			want: func(o *options) { o.adminToken = "abc" }},
		{name: "short in a file", args: []string{"--admin-token-file", short}, wantStderr: shortWarning,
			want: func(o *options) { o.adminToken = "abc" }},
		oneLine("empty", []string{"--admin-token", ""},
			`invalid --admin-token: "" (want a token; leave the flag out for a read-only admin API)`),
		oneLine("unreadable file", []string{"--admin-token-file", missing},
			fmt.Sprintf(`invalid --admin-token-file: %q (want a readable file holding the admin token: open %s: no such file or directory)`, missing, missing)),
		oneLine("blank file", []string{"--admin-token-file", blank},
			fmt.Sprintf(`invalid --admin-token-file: %q (want a file holding the admin token; it holds none)`, blank)),
		{name: "unreadable file variable", env: []string{"SPROUT_ADMIN_TOKEN_FILE=" + missing},
			wantAction: actionFail, wantCode: 5,
			wantStderr: fmt.Sprintf(`sprout: invalid SPROUT_ADMIN_TOKEN_FILE: %q (want a readable file holding the admin token: open %s: no such file or directory)`, missing, missing) + "\n"},
	})
}
