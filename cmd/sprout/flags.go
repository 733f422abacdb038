package main

import (
	"fmt"
	"io"
	"math"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/store/wal"
)

// Exit codes parseArgs hands back. beanstalkd exits 5 on every command-line
// error; Sprout uses the same code for the flags it does not support yet.
const (
	exitOK    = 0
	exitUsage = 5
)

const (
	defaultPort = "11300"
	// protocolVersion is the beanstalkd release whose wire behaviour Sprout follows.
	protocolVersion = "1.13"
	// defaultGCHeadroom is --gc-headroom's default: with short queues the
	// collector runs once per 32 MiB allocated instead of once per few
	// MiB (internal/gctune).
	defaultGCHeadroom = 32 << 20
	// maxLoops is gnet's ceiling on event loops; gnet would clamp larger
	// values silently, so the flag rejects them instead.
	maxLoops = 256
	// defaultShutdownTimeout stays under Kubernetes' default 30 s grace
	// period, leaving time to flush the log and close.
	defaultShutdownTimeout = 25 * time.Second
)

// version is set at link time (-ldflags "-X main.version=..."); when it is
// empty the module version from the build info is used.
var version string

// action is what main should do once the command line is parsed.
type action int

const (
	actionRun          action = iota // serve with opts
	actionPrintVersion               // print versionLine() on stdout, exit exitCode (0)
	actionPrintUsage                 // print writeUsage on stderr, as beanstalkd -h does, exit exitCode (0)
	actionFail                       // parseArgs has already explained on stderr; exit exitCode (5)
)

// options is the parsed command line. It is built once by parseArgs and read
// only afterwards.
type options struct {
	// cfg has Network, Address, MaxJobSize, Loops, MaxInputBuffered and
	// MaxOutputBuffered filled. Logger is left for main, which builds it
	// at logLevel.
	cfg engine.Config
	// verbosity counts -V, as beanstalkd's verbose does.
	verbosity int
	// logLevel is the effective level: --log-level (default info), made
	// more verbose by -V (debug) or -VV and beyond (trace), never less.
	logLevel zerolog.Level
	// walDir is -b: the write-ahead log's directory, "" for in memory.
	walDir string
	// wal has -s, -f/-F and --skip-damaged; used when walDir is set.
	wal wal.Options
	// cpuProfile is --cpu-profile: write a pprof CPU profile here until exit.
	cpuProfile string
	// shutdownTimeout is how long a SIGTERM or SIGINT waits for workers
	// to finish the jobs they hold.
	shutdownTimeout time.Duration
	// logFormat is --log-format: "json", "console", or "" for console on a
	// terminal and JSON otherwise.
	logFormat string
	// user is -u: the user to become once the socket is bound; "" stays.
	user string
	// httpAddr is --http: the side port's host:port, "" for none.
	httpAddr string
	// pprof is --pprof: serve /debug/pprof/ on the side port.
	pprof bool
	// metricsTubes is --metrics-tubes: how many tubes get their own metric
	// series (see ops.Config.TubeSeries).
	metricsTubes int
	// gcHeadroom is --gc-headroom: the least the collector's heap goal
	// stays above the live heap (internal/gctune); 0 leaves Go's default.
	gcHeadroom int64
}

// longFlags are Sprout's own flags. They are written --name VALUE or
// --name=VALUE; the one-dash spelling -name is accepted too and wins over
// beanstalkd's combined reading (-loops would otherwise be -l oops).
var longFlags = map[string]func(o *options, value string) error{
	"loops": func(o *options, value string) error {
		n, err := strconv.ParseUint(value, 10, 16)
		if err != nil || n > maxLoops {
			return fmt.Errorf("invalid --loops: %q (want 0 to %d; 0 means one per CPU less one)", value, maxLoops)
		}
		o.cfg.Loops = int(n)
		return nil
	},
	"log-level": func(o *options, value string) error {
		level, ok := parseLevelName(value)
		if !ok {
			return fmt.Errorf("invalid --log-level: %q (want one of %s)", value, strings.Join(levelNames, ", "))
		}
		o.logLevel = level
		return nil
	},
	"shutdown-timeout": func(o *options, value string) error {
		d, err := time.ParseDuration(value)
		if err != nil || d < 0 {
			return fmt.Errorf("invalid --shutdown-timeout: %q (want a duration such as 25s)", value)
		}
		o.shutdownTimeout = d
		return nil
	},
	"log-format": func(o *options, value string) error {
		if value != "json" && value != "console" {
			return fmt.Errorf("invalid --log-format: %q (want json or console)", value)
		}
		o.logFormat = value
		return nil
	},
	"cpu-profile": func(o *options, value string) error {
		o.cpuProfile = value
		return nil
	},
	"skip-damaged":      boolFlag("skip-damaged", func(o *options) *bool { return &o.wal.SkipDamaged }),
	"max-input":         byteCountFlag("max-input", func(o *options) *int { return &o.cfg.MaxInputBuffered }),
	"max-output":        byteCountFlag("max-output", func(o *options) *int { return &o.cfg.MaxOutputBuffered }),
	"max-buffer-memory": byteCountFlag("max-buffer-memory", func(o *options) *int64 { return &o.cfg.MaxBufferMemory }),
	"gc-headroom": uintFlag("gc-headroom", 62, "a number of bytes; 0 leaves Go's default",
		func(o *options) *int64 { return &o.gcHeadroom }),
	"max-connections": uintFlag("max-connections", 31, "a number; 0 means from the open-file limit",
		func(o *options) *int { return &o.cfg.MaxConnections }),
	"http": func(o *options, value string) error {
		if _, _, err := net.SplitHostPort(value); err != nil && value != "" {
			return fmt.Errorf("invalid --http: %q (want HOST:PORT, as in 127.0.0.1:8080)", value)
		}
		o.httpAddr = value
		return nil
	},
	"pprof": boolFlag("pprof", func(o *options) *bool { return &o.pprof }),
	"metrics-tubes": func(o *options, value string) error {
		n, err := strconv.ParseUint(value, 10, 31)
		if err != nil || n == 0 {
			return fmt.Errorf("invalid --metrics-tubes: %q (want a number of tubes, at least 1)", value)
		}
		o.metricsTubes = int(n)
		return nil
	},
}

// boolFlag sets *field from true or false (or 1, 0, t, f, as
// strconv.ParseBool reads them).
func boolFlag(name string, field func(o *options) *bool) func(o *options, value string) error {
	return func(o *options, value string) error {
		v, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("invalid --%s: %q (want true or false)", name, value)
		}
		*field(o) = v
		return nil
	}
}

// byteCountFlag sets the engine cap that field points at from a plain decimal
// byte count; 0 leaves the engine's default.
func byteCountFlag[T int | int64](name string, field func(o *options) *T) func(o *options, value string) error {
	return uintFlag(name, strconv.IntSize-1, "a number of bytes; 0 means the default", field)
}

// uintFlag sets *field from a plain decimal number of at most bits bits;
// want says what is expected when the value is refused.
func uintFlag[T int | int64](name string, bits int, want string, field func(o *options) *T) func(o *options, value string) error {
	return func(o *options, value string) error {
		n, err := strconv.ParseUint(value, 10, bits)
		if err != nil {
			return fmt.Errorf("invalid --%s: %q (want %s)", name, value, want)
		}
		*field(o) = T(n)
		return nil
	}
}

// notImplemented are beanstalkd flags Sprout recognises but cannot honour
// yet. Ignoring them would silently drop durability or privilege dropping the
// operator asked for, so they are refused.
var notImplemented = map[byte]string{}

// parseArgs reads the command line (without the program name) the way
// beanstalkd's optparse does: arguments are scanned left to right; each starts
// with '-' and holds one or more one-letter flags (-VV); a flag that takes a
// value uses the rest of its argument when that is non-empty (-p1234, -Vp1234)
// and otherwise the next argument, whatever it looks like (-z -1). -v and -h
// end the scan at once, so anything after them is not checked. The first
// argument that is not a flag, including a lone "-", is an error.
//
// Warnings and errors go to stderr, prefixed "sprout: "; syntax errors are
// followed by the usage text, as in beanstalkd. parseArgs never exits: it
// returns what main should do and with which exit code.
func parseArgs(args []string, stderr io.Writer) (opts options, act action, exitCode int) {
	opts.cfg.Network = "tcp"
	opts.cfg.MaxJobSize = engine.DefaultMaxJobSize
	opts.logLevel = zerolog.InfoLevel
	opts.wal.SegmentSize = wal.DefaultSegmentSize
	opts.wal.SyncEvery = wal.DefaultSyncEvery
	opts.shutdownTimeout = defaultShutdownTimeout
	opts.metricsTubes = ops.DefaultTubeSeries
	opts.gcHeadroom = defaultGCHeadroom
	host, port := "", defaultPort

	warnf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "sprout: "+format+"\n", a...)
	}
	usageError := func(format string, a ...any) (options, action, int) {
		warnf(format, a...)
		writeUsage(stderr)
		return options{}, actionFail, exitUsage
	}

	for i := 0; i < len(args); i++ {
		arg := args[i]
		if len(arg) < 2 || arg[0] != '-' {
			return usageError("unknown argument: %s", arg)
		}
		if arg == "--version" {
			return options{}, actionPrintVersion, exitOK
		}

		if name, value, hasValue, ok := longFlag(arg); ok {
			if !hasValue {
				if i+1 == len(args) {
					return usageError("flag requires an argument: --%s", name)
				}
				i++
				value = args[i]
			}
			if err := longFlags[name](&opts, value); err != nil {
				return usageError("%v", err)
			}
			continue
		}

		if strings.HasPrefix(arg, "--") {
			// Never a beanstalkd flag; name it whole rather than as "-".
			return usageError("unknown flag: %s", arg)
		}

		for j := 1; j < len(arg); j++ {
			flag := arg[j]
			// value returns flag's argument: the rest of arg when that is
			// non-empty, else the next argument, and moves j or i past it.
			value := func() (string, bool) {
				if rest := arg[j+1:]; rest != "" {
					j = len(arg)
					return rest, true
				}
				if i+1 < len(args) {
					i++
					return args[i], true
				}
				return "", false
			}

			switch flag {
			case 'p', 'l', 'z', 'b', 'f', 's', 'u':
				v, ok := value()
				if !ok {
					return usageError("flag requires an argument: -%c", flag)
				}
				switch flag {
				case 'p':
					port = v
				case 'l':
					host = v
				case 'b':
					opts.walDir = v
				case 'u':
					// beanstalkd looks "" up and exits 33; it names no
					// one, so it is a usage error here.
					if v == "" {
						return usageError("-u needs a user name")
					}
					opts.user = v
				case 'f':
					// -f and -F are order-dependent, as in beanstalkd: the
					// last one wins.
					ms, ok := parseSize(v)
					if !ok || ms > math.MaxInt32 {
						return usageError("invalid fsync interval: %s", v)
					}
					opts.wal.SyncEvery = time.Duration(ms) * time.Millisecond
					opts.wal.NoSync = false
				case 's':
					size, ok := parseSize(v)
					if !ok || size == 0 || size > math.MaxInt32 {
						return usageError("invalid size: %s", v)
					}
					opts.wal.SegmentSize = int64(size)
				case 'z':
					size, ok := parseSize(v)
					if !ok {
						return usageError("invalid size: %s", v)
					}
					if size > engine.MaxMaxJobSize {
						warnf("maximum job size was set to %d", engine.MaxMaxJobSize)
						size = engine.MaxMaxJobSize
					}
					opts.cfg.MaxJobSize = int(size)
				}
			case 'F':
				opts.wal.NoSync = true
			case 'c', 'n':
				warnf("-%c flag was removed. binlog is always compacted.", flag)
			case 'V':
				opts.verbosity++
			case 'v':
				return options{}, actionPrintVersion, exitOK
			case 'h':
				return options{}, actionPrintUsage, exitOK
			default:
				if reason, ok := notImplemented[flag]; ok {
					warnf("-%c: %s", flag, reason)
					return options{}, actionFail, exitUsage
				}
				return usageError("unknown flag: -%c", flag)
			}
		}
	}

	if path, ok := strings.CutPrefix(host, "unix:"); ok {
		if path == "" {
			return usageError("-l unix: needs a socket path, as in -l unix:/run/sprout.sock")
		}
		opts.cfg.Network = "unix"
		opts.cfg.Address = path
	} else {
		// The port is not checked here: like beanstalkd's getaddrinfo, the
		// listener accepts service names (-p http) and "" means any free port.
		opts.cfg.Address = net.JoinHostPort(host, port)
	}

	switch {
	case opts.verbosity >= 2 && opts.logLevel > zerolog.TraceLevel:
		opts.logLevel = zerolog.TraceLevel
	case opts.verbosity == 1 && opts.logLevel > zerolog.DebugLevel:
		opts.logLevel = zerolog.DebugLevel
	}
	return opts, actionRun, exitOK
}

// longFlag reports whether arg is one of Sprout's own flags: --name,
// --name=value, -name or -name=value, for a name in longFlags exactly.
func longFlag(arg string) (name, value string, hasValue, ok bool) {
	rest := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, value, hasValue = strings.Cut(rest, "=")
	_, ok = longFlags[name]
	return name, value, hasValue, ok
}

// parseSize reads a size as beanstalkd's parse_size_t does with
// sscanf("%zu%c"): optional leading white space, an optional sign, decimal
// digits, and nothing after them, so "10k" and "12 " are rejected. As with
// strtoull, a '-' negates modulo 2^64 ("-1" is 2^64-1) and an overflow
// saturates at 2^64-1; either way the -z clamp then applies.
func parseSize(s string) (uint64, bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	negative := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		negative = s[0] == '-'
		s = s[1:]
	}
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// Only a range error is left: the digits were checked above.
		return ^uint64(0), true
	}
	if negative {
		n = -n
	}
	return n, true
}

// levelNames are the zerolog levels --log-level accepts, most verbose first.
var levelNames = []string{"trace", "debug", "info", "warn", "error", "fatal", "panic", "disabled"}

// parseLevelName accepts only the named zerolog levels; zerolog.ParseLevel
// would also take "" and bare numbers.
func parseLevelName(s string) (zerolog.Level, bool) {
	for _, name := range levelNames {
		if strings.EqualFold(s, name) {
			level, err := zerolog.ParseLevel(name)
			return level, err == nil
		}
	}
	return zerolog.NoLevel, false
}

// versionLine is what -v prints.
func versionLine() string {
	v := version
	if v == "" {
		v = "dev"
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
	}
	return fmt.Sprintf("sprout %s (beanstalkd protocol %s)", v, protocolVersion)
}

// writeUsage prints the help text, laid out like beanstalkd's.
func writeUsage(w io.Writer) {
	fmt.Fprintf(w, `Use: sprout [OPTIONS]

Options, as in beanstalkd:
 -l ADDR  listen on address (default is all interfaces);
          unix:PATH listens on a unix socket at PATH
 -p PORT  listen on port (default is %s); a socket systemd hands
          over (LISTEN_FDS) is served instead of -l and -p
 -u USER  become user and group once the socket is bound
 -z BYTES set the maximum job size in bytes (default is %d);
          max allowed is %d bytes
 -v       show version information
 -V       increase verbosity (-V logs at debug, -VV at trace)
 -h       show this help
 -c, -n   removed from beanstalkd; accepted with a warning


Write-ahead log, as in beanstalkd (in Sprout's own format; a directory of
beanstalkd binlog files is imported on first start):
 -b DIR   keep jobs in a write-ahead log in DIR
 -f MS    fsync at most every MS milliseconds (default is 50);
          0 fsyncs every commit before it is acknowledged
 -F       never fsync
 -s BYTES set the size of each log segment (default is %d)

Sprout's own options, written --name VALUE or --name=VALUE. The one-dash
spelling (-loops 4) is accepted too and wins over beanstalkd's combined
reading (-l oops):
 --loops N           number of event loops (default 0: one per CPU less one, at least 1; max %d)
 --log-level LEVEL   trace, debug, info, warn, error, fatal, panic or disabled
                     (default info; -V and -VV only ever make it more verbose)
 --max-input BYTES   close a connection whose unparsed input exceeds BYTES
                     (default 0: the larger of 64 KiB and 2*(max job size+256))
 --max-output BYTES  stop serving a connection whose unread replies exceed
                     BYTES until it reads them (default 0: %d KiB)
 --max-connections N close new connections at once while N are open
                     (default 0: the open-file limit, less the descriptors
                     open at start, less 64)
 --max-buffer-memory BYTES
                     bound the bytes held for all connections together
                     (unread replies, unparsed input, partial put bodies);
                     past it the connections holding the most are closed
                     (default 0: 1/8 of the memory limit, 64 MiB to 1 GiB)
 --gc-headroom BYTES keep the garbage collector's heap goal at least BYTES
                     above the live heap (default %d MiB; 0: Go's default,
                     twice the live heap); not used when GOGC is set
 --skip-damaged BOOL with -b, skip (and log) damaged log records at start
                     instead of refusing to start (default false)
 --shutdown-timeout DURATION
                     on SIGTERM or SIGINT, how long to wait for workers to
                     finish the jobs they hold (default 25s)
 --log-format FORMAT json or console (default: console on a terminal,
                     else json)
 --cpu-profile PATH  write a pprof CPU profile to PATH until shutdown
 --http HOST:PORT    serve /metrics, /healthz and /readyz over HTTP on
                     HOST:PORT (default: off)
 --pprof BOOL        with --http, also serve /debug/pprof/ (default false)
 --metrics-tubes N   give the first N tubes their own metric series and sum
                     the rest under tube="<other>" (default %d)
 --version           show version information, as -v

beanstalkd's options have long names too: --listen (-l), --port (-p),
--max-job-size (-z), --wal-dir (-b), --fsync-ms (-f), --segment-size (-s),
--user (-u).

Every option can be set in the environment as SPROUT_<NAME>, NAME being its
long name in capitals with _ for - (SPROUT_LISTEN=0.0.0.0,
SPROUT_MAX_OUTPUT=1048576); SPROUT_NO_FSYNC=true is -F and SPROUT_VERBOSE=N
is N times -V. The command line wins over the environment.
`, defaultPort, engine.DefaultMaxJobSize, engine.MaxMaxJobSize, wal.DefaultSegmentSize, maxLoops,
		engine.DefaultMaxOutputBuffered>>10, defaultGCHeadroom>>20, ops.DefaultTubeSeries)
}
