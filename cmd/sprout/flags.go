package main

import (
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/buildinfo"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/store/wal"
)

// Exit codes parseArgs hands back. beanstalkd exits 5 on every command-line
// error.
const (
	exitOK    = 0
	exitUsage = 5
)

const (
	defaultPort = "11300"
	// protocolVersion is the beanstalkd release whose wire behaviour Sprout follows.
	protocolVersion = buildinfo.Protocol
	// defaultGCHeadroom is --gc-headroom's default: with short queues the
	// collector runs once per 32 MiB allocated instead of once per few
	// MiB (internal/gctune).
	defaultGCHeadroom = 32 << 20
	// defaultShutdownTimeout stays under Kubernetes' default 30 s grace
	// period, leaving time to flush the log and close.
	defaultShutdownTimeout = 25 * time.Second
)

// options is what the command line and the environment said, and nothing
// more: a setting not given is left at its zero value, and the settings
// whose zero is a value of its own (-p "" is any free port, -f 0 fsyncs
// every commit) are optional, which says whether they were given.
// parseArgs builds it and nothing writes it afterwards; resolve turns it
// into a config, with every default filled in.
type options struct {
	host            string                  // -l: "" is all interfaces; unix:PATH a unix socket
	port            optional[string]        // -p: "" is any free port
	user            string                  // -u: the user to become once the socket is bound
	maxJobSize      optional[int]           // -z, clamped to engine.MaxMaxJobSize
	verbosity       int                     // -V, counted as beanstalkd does
	walDir          string                  // -b: "" keeps jobs in memory only
	syncEvery       optional[time.Duration] // -f
	noSync          bool                    // -F; -f clears it: the last of the two wins
	segmentSize     int64                   // -s
	skipDamaged     bool                    // --skip-damaged
	loops           int                     // --loops
	logLevel        optional[zerolog.Level] // --log-level, before -V raises it
	logFormat       string                  // --log-format: "json", "console" or "" (by the terminal)
	maxInput        int                     // --max-input
	maxOutput       int                     // --max-output
	maxConnections  int                     // --max-connections
	maxBufferMemory int64                   // --max-buffer-memory
	goMemoryLimit   int64                   // --go-memory-limit: math.MaxInt64 is off
	gcHeadroom      optional[int64]         // --gc-headroom: 0 leaves Go's default
	shutdownTimeout optional[time.Duration] // --shutdown-timeout
	cpuProfile      string                  // --cpu-profile
	httpAddr        string                  // --http: "" is no side port
	pprof           bool                    // --pprof
	metricsTubes    int                     // --metrics-tubes
	// adminToken is --admin-token, or what --admin-token-file holds; the
	// last of the two given wins. "" makes the admin API read-only.
	adminToken string

	// Cluster mode, as written; checkCluster checks them together.
	node           string // --node: "" is a single node
	clusterListen  string // --cluster-listen
	clusterPeers   string // --cluster-peers, as replication.ParsePeers reads it
	clusterJoin    string // --cluster-join CLUSTER:ID or NAME=CLUSTER:ID,..., as replication.SelectJoin reads it
	clusterTLSCert string // --cluster-tls-cert
	clusterTLSKey  string // --cluster-tls-key
	clusterTLSCA   string // --cluster-tls-ca
	// clusterGroups and clusterReplicas are --cluster-groups and
	// --cluster-replicas, 0 where not given: the cluster's.
	clusterGroups, clusterReplicas int

	// TLS, as written; checkTLS checks them together.
	tlsListen           string                  // --tls-listen: "" is no TLS client port
	tlsCert             string                  // --tls-cert
	tlsKey              string                  // --tls-key
	tlsClientCA         string                  // --tls-client-ca: "" is no client certificate asked
	tlsHandshakeTimeout optional[time.Duration] // --tls-handshake-timeout
	httpTLSCert         string                  // --http-tls-cert
	httpTLSKey          string                  // --http-tls-key
}

// optional is a setting whose zero value is a setting of its own, with
// whether it was given.
type optional[T any] struct {
	value T
	set   bool
}

func given[T any](v T) optional[T] { return optional[T]{value: v, set: true} }

// or is the value if it was given, else def.
func (o optional[T]) or(def T) T {
	if o.set {
		return o.value
	}
	return def
}

// action is what main should do once the command line is parsed.
type action int

const (
	actionRun          action = iota // serve with the options
	actionPrintVersion               // print versionLine() on stdout, exit 0
	actionPrintUsage                 // print writeUsage on stderr, as beanstalkd -h does, exit 0
	actionFail                       // parseArgs has already explained on stderr; exit 5
)

// group is the part of the usage text a flag is listed in.
type group int

const (
	groupBeanstalkd group = iota
	groupWAL
	groupSprout
	groupTLS
	groupCluster
)

// flag is one row of flagTable, from which the command line's syntax, the
// long aliases, the environment variables and the usage text are all
// derived.
type flag struct {
	// letters are beanstalkd's one-letter names: -l, or -c and -n for
	// the row of both; "" for Sprout's own flags.
	letters string
	// long is the long name: --long on the command line (-long too, for a
	// row without a letter), SPROUT_LONG in the environment (upper case,
	// '_' for '-').
	long string
	// arg names the value in the usage text; "" for a flag that ends the
	// scan (-v, -h), which takes none.
	arg  string
	help string
	// group is where the usage lists the flag.
	group group
	// set applies a value given to the long name, to the environment
	// variable or, unless bare is set, to the letter. It returns a
	// wantError when the value is refused, a warning to print and go on.
	set func(o *options, value string) error
	// bare, when set, is what a letter does on its own: it takes no value
	// (-F, -V, -c, -n).
	bare func(o *options, letter byte) error
	// ends is the action a flag ends the scan with: actionPrintVersion for
	// -v, actionPrintUsage for -h; it is not read from the environment.
	ends action
	// emptyMeans is what an empty value means, where it means something
	// (SPROUT_HTTP= switches the image's side port off). An empty
	// environment variable for any other flag is refused: it is more
	// likely a template's missing value than a choice.
	emptyMeans string
}

// envName is the flag's environment variable, "" for none.
func (f *flag) envName() string {
	if f.long == "" || f.set == nil || f.ends != actionRun {
		return ""
	}
	return envPrefix + strings.ToUpper(strings.ReplaceAll(f.long, "-", "_"))
}

// wantError says what a value should have been; it is reported as
// `invalid NAME: "VALUE" (want ...)`, NAME spelt as the operator wrote it.
type wantError string

func (w wantError) Error() string { return "want " + string(w) }

// warning is an error a setting reports on stderr before going on.
type warning string

func (w warning) Error() string { return string(w) }

// flagTable is every flag, in the order the usage lists them.
var flagTable = []*flag{
	{letters: "l", long: "listen", arg: "ADDR", group: groupBeanstalkd, emptyMeans: "all interfaces",
		help: "listen on address (default: all interfaces); unix:PATH listens on a unix socket at PATH; " +
			"none serves TLS clients only (--tls-listen)",
		set: stringSetter(func(o *options) *string { return &o.host },
			"a socket path after unix:, as in unix:/run/sprout.sock", func(v string) bool { return v != "unix:" })},
	{letters: "p", long: "port", arg: "PORT", group: groupBeanstalkd,
		help: "listen on port (default " + defaultPort + "); a socket systemd hands over (LISTEN_FDS) " +
			"is served instead of -l and -p",
		set: func(o *options, v string) error {
			// "" is any free port, as with beanstalkd's getaddrinfo; a name
			// is a service the listener looks up (-p http).
			if !validPort(v) {
				return wantError("a port number up to 65535 or a service name")
			}
			o.port = given(v)
			return nil
		}},
	{letters: "u", long: "user", arg: "USER", group: groupBeanstalkd,
		help: "become user and group once the socket is bound",
		// beanstalkd looks "" up and exits 33; it names no one.
		set: stringSetter(func(o *options) *string { return &o.user },
			"a user name", func(v string) bool { return v != "" })},
	{letters: "z", long: "max-job-size", arg: "BYTES", group: groupBeanstalkd,
		help: fmt.Sprintf("set the maximum job size in bytes (default %d); max allowed is %d bytes",
			engine.DefaultMaxJobSize, engine.MaxMaxJobSize),
		set: func(o *options, v string) error {
			size, ok := parseSize(v)
			if !ok {
				return wantError("a number of bytes")
			}
			o.maxJobSize = given(int(min(size, engine.MaxMaxJobSize)))
			if size > engine.MaxMaxJobSize {
				return warning(fmt.Sprintf("maximum job size was set to %d", engine.MaxMaxJobSize))
			}
			return nil
		}},
	{letters: "v", long: "version", group: groupBeanstalkd, ends: actionPrintVersion,
		help: "show version information"},
	{letters: "V", long: "verbose", arg: "N", group: groupBeanstalkd,
		help: "increase verbosity: -V logs at debug, -VV at trace; --verbose N is N times -V",
		bare: func(o *options, _ byte) error { o.verbosity++; return nil },
		set: func(o *options, v string) error {
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil {
				return wantError("a count")
			}
			o.verbosity += int(n)
			return nil
		}},
	{letters: "h", long: "help", group: groupBeanstalkd, ends: actionPrintUsage,
		help: "show this help"},
	{letters: "cn", group: groupBeanstalkd,
		help: "removed from beanstalkd; accepted with a warning",
		bare: func(_ *options, letter byte) error {
			return warning(fmt.Sprintf("-%c flag was removed. binlog is always compacted.", letter))
		}},

	{letters: "b", long: "wal-dir", arg: "DIR", group: groupWAL, emptyMeans: "jobs in memory only",
		help: "keep jobs in a write-ahead log in DIR",
		set:  stringSetter(func(o *options) *string { return &o.walDir }, "", nil)},
	{letters: "f", long: "fsync-ms", arg: "MS", group: groupWAL,
		help: fmt.Sprintf("fsync at most every MS milliseconds (default %d); 0 fsyncs every commit "+
			"before it is acknowledged", wal.DefaultSyncEvery.Milliseconds()),
		set: func(o *options, v string) error {
			// -f and -F are order-dependent, as in beanstalkd: the last wins.
			ms, ok := parseSize(v)
			if !ok || ms > math.MaxInt32 {
				return wantError("a number of milliseconds")
			}
			o.syncEvery = given(time.Duration(ms) * time.Millisecond)
			o.noSync = false
			return nil
		}},
	{letters: "F", long: "no-fsync", arg: "BOOL", group: groupWAL,
		help: "never fsync; --no-fsync true is -F",
		bare: func(o *options, _ byte) error { o.noSync = true; return nil },
		set:  boolSetter(func(o *options) *bool { return &o.noSync })},
	{letters: "s", long: "segment-size", arg: "BYTES", group: groupWAL,
		help: fmt.Sprintf("set the size of each log segment (default %d)", wal.DefaultSegmentSize),
		set: func(o *options, v string) error {
			size, ok := parseSize(v)
			if !ok || size == 0 || size > math.MaxInt32 {
				return wantError(fmt.Sprintf("a number of bytes from 1 to %d", math.MaxInt32))
			}
			o.segmentSize = int64(size)
			return nil
		}},
	{long: "skip-damaged", arg: "BOOL", group: groupWAL,
		help: "with -b, skip (and log) damaged log records at start instead of refusing to start (default false)",
		set:  boolSetter(func(o *options) *bool { return &o.skipDamaged })},

	{long: "loops", arg: "N", group: groupSprout,
		help: fmt.Sprintf("number of event loops (default: one per CPU less one, at least 1; max %d)", engine.MaxLoops),
		set: func(o *options, v string) error {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n > engine.MaxLoops {
				return wantError(fmt.Sprintf("0 to %d; 0 means one per CPU less one", engine.MaxLoops))
			}
			o.loops = int(n)
			return nil
		}},
	{long: "log-level", arg: "LEVEL", group: groupSprout,
		help: "trace, debug, info, warn, error, fatal, panic or disabled (default info; -V and -VV only " +
			"ever make it more verbose)",
		set: func(o *options, v string) error {
			level, ok := parseLevelName(v)
			if !ok {
				return wantError("one of " + strings.Join(levelNames, ", "))
			}
			o.logLevel = given(level)
			return nil
		}},
	{long: "log-format", arg: "FORMAT", group: groupSprout,
		help: "json or console (default: console on a terminal, else json)",
		set: stringSetter(func(o *options) *string { return &o.logFormat },
			"json or console", func(v string) bool { return v == "json" || v == "console" })},
	{long: "max-input", arg: "BYTES", group: groupSprout,
		help: "close a connection whose unparsed input exceeds BYTES while it is read (one that cannot " +
			"take more yet is not read past 48 KiB, or 16 KiB below a smaller BYTES, instead) (default: " +
			"the larger of 64 KiB and 2*(max job size+256))",
		set: byteCountSetter(func(o *options) *int { return &o.maxInput })},
	{long: "max-output", arg: "BYTES", group: groupSprout,
		help: fmt.Sprintf("stop serving a connection whose unread replies exceed BYTES until it reads "+
			"them (default %d KiB)", engine.DefaultMaxOutputBuffered>>10),
		set: byteCountSetter(func(o *options) *int { return &o.maxOutput })},
	{long: "max-connections", arg: "N", group: groupSprout,
		help: "close new connections at once while N are open (default: the open-file limit, less the " +
			"descriptors open at start, less 64)",
		set: uintSetter(31, "a number; 0 means from the open-file limit",
			func(o *options) *int { return &o.maxConnections })},
	{long: "max-buffer-memory", arg: "BYTES", group: groupSprout,
		help: "bound the bytes held for all connections together (unread replies, unparsed input, " +
			"partial put bodies); past it the connections holding the most are closed (default: 1/8 " +
			"of the memory limit, 64 MiB to 1 GiB)",
		set: byteCountSetter(func(o *options) *int64 { return &o.maxBufferMemory })},
	{long: "go-memory-limit", arg: "BYTES", group: groupSprout,
		help: "the Go runtime's soft memory limit (debug.SetMemoryLimit), or off (default: GOMEMLIMIT " +
			"if set, else 90% of the cgroup's memory limit, else none)",
		set: func(o *options, v string) error {
			if v == "off" {
				o.goMemoryLimit = math.MaxInt64
				return nil
			}
			n, err := strconv.ParseUint(v, 10, 63)
			if err != nil {
				return wantError("a number of bytes, 0 for the default, or off")
			}
			o.goMemoryLimit = int64(n)
			return nil
		}},
	{long: "gc-headroom", arg: "BYTES", group: groupSprout,
		help: fmt.Sprintf("keep the garbage collector's heap goal at least BYTES above the live heap "+
			"(default %d MiB; 0: Go's default, twice the live heap); not used when GOGC is set",
			defaultGCHeadroom>>20),
		set: func(o *options, v string) error {
			n, err := strconv.ParseUint(v, 10, 62)
			if err != nil {
				return wantError("a number of bytes; 0 leaves Go's default")
			}
			o.gcHeadroom = given(int64(n))
			return nil
		}},
	{long: "shutdown-timeout", arg: "DURATION", group: groupSprout,
		help: fmt.Sprintf("on SIGTERM or SIGINT, how long to wait for workers to finish the jobs they "+
			"hold (default %s)", defaultShutdownTimeout),
		set: func(o *options, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return wantError("a duration such as 25s")
			}
			o.shutdownTimeout = given(d)
			return nil
		}},
	{long: "cpu-profile", arg: "PATH", group: groupSprout,
		help: "write a pprof CPU profile to PATH until shutdown",
		set:  stringSetter(func(o *options) *string { return &o.cpuProfile }, "", nil)},
	{long: "http", arg: "HOST:PORT", group: groupSprout, emptyMeans: "no side port",
		help: "serve /metrics, /healthz, /readyz, the admin API (/api/v1) and the web console (/) over HTTP on HOST:PORT (default: off)",
		set: stringSetter(func(o *options) *string { return &o.httpAddr }, "HOST:PORT, as in 127.0.0.1:8080",
			func(v string) bool { _, _, err := net.SplitHostPort(v); return err == nil || v == "" })},
	{long: "pprof", arg: "BOOL", group: groupSprout,
		help: "with --http, also serve /debug/pprof/ (default false)",
		set:  boolSetter(func(o *options) *bool { return &o.pprof })},
	{long: "metrics-tubes", arg: "N", group: groupSprout,
		help: fmt.Sprintf("give the first N tubes their own metric series and sum the rest under "+
			"tube=\"<other>\"; with --cluster-groups above 1, N per group the member leads (default %d)", ops.DefaultTubeSeries),
		set: func(o *options, v string) error {
			n, err := strconv.ParseUint(v, 10, 31)
			if err != nil || n == 0 {
				return wantError("a number of tubes, at least 1")
			}
			o.metricsTubes = int(n)
			return nil
		}},
	{long: "admin-token", arg: "TOKEN", group: groupSprout,
		help: "with --http, let requests carrying TOKEN (Authorization: Bearer, or a console login) change " +
			"jobs and tubes and see job bodies through the admin API; without it the API is read-only. " +
			"Prefer --admin-token-file: a command line is visible to every user",
		set: func(o *options, v string) error {
			if v == "" {
				return wantError("a token; leave the flag out for a read-only admin API")
			}
			o.adminToken = v
			return weakToken(v)
		}},
	{long: "admin-token-file", arg: "PATH", group: groupSprout,
		help: "read --admin-token from the file PATH, white space around it stripped",
		set: func(o *options, v string) error {
			b, err := os.ReadFile(v)
			if err != nil {
				return wantError("a readable file holding the admin token: " + err.Error())
			}
			token := strings.TrimSpace(string(b))
			if token == "" {
				return wantError("a file holding the admin token; it holds none")
			}
			o.adminToken = token
			return weakToken(token)
		}},

	{long: "tls-listen", arg: "HOST:PORT", group: groupTLS,
		help: "also serve clients over TLS on HOST:PORT, with --tls-cert and --tls-key (-l none: over TLS only)",
		set: stringSetter(func(o *options) *string { return &o.tlsListen }, "HOST:PORT, as in 0.0.0.0:11301",
			func(v string) bool { _, _, err := net.SplitHostPort(v); return err == nil })},
	{long: "tls-cert", arg: "PATH", group: groupTLS,
		help: "the TLS client port's certificate chain (PEM)",
		set:  stringSetter(func(o *options) *string { return &o.tlsCert }, "a PEM file", nonEmpty)},
	{long: "tls-key", arg: "PATH", group: groupTLS,
		help: "the private key (PEM) of --tls-cert",
		set:  stringSetter(func(o *options) *string { return &o.tlsKey }, "a PEM file", nonEmpty)},
	{long: "tls-client-ca", arg: "PATH", group: groupTLS,
		help: "require clients of the TLS port to present a certificate from these CAs (PEM): mutual TLS",
		set:  stringSetter(func(o *options) *string { return &o.tlsClientCA }, "a PEM file", nonEmpty)},
	{long: "tls-handshake-timeout", arg: "DURATION", group: groupTLS,
		help: fmt.Sprintf("close a TLS client that has not finished its handshake within DURATION (default %s)",
			engine.DefaultHandshakeTimeout),
		set: func(o *options, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return wantError("a duration such as 10s")
			}
			o.tlsHandshakeTimeout = given(d)
			return nil
		}},
	{long: "http-tls-cert", arg: "PATH", group: groupTLS,
		help: "serve --http over TLS with this certificate chain (PEM), and --http-tls-key",
		set:  stringSetter(func(o *options) *string { return &o.httpTLSCert }, "a PEM file", nonEmpty)},
	{long: "http-tls-key", arg: "PATH", group: groupTLS,
		help: "the private key (PEM) of --http-tls-cert",
		set:  stringSetter(func(o *options) *string { return &o.httpTLSKey }, "a PEM file", nonEmpty)},

	{long: "node", arg: "NAME", group: groupCluster,
		help: "run as the cluster member NAME (letters, digits, '-', '_' and '.'), one of --cluster-peers; " +
			"needs -b, --cluster-listen and --cluster-peers. Without it Sprout is a single node",
		set: stringSetter(func(o *options) *string { return &o.node }, "a member's name", nonEmpty)},
	{long: "cluster-listen", arg: "HOST:PORT", group: groupCluster,
		help: "where the other members connect to this one",
		set:  stringSetter(func(o *options) *string { return &o.clusterListen }, "HOST:PORT", nonEmpty)},
	{long: "cluster-peers", arg: "NAME=HOST:PORT,...", group: groupCluster,
		help: "the initial members, this one included: each one's name and the address of its --cluster-listen",
		set:  stringSetter(func(o *options) *string { return &o.clusterPeers }, "NAME=HOST:PORT,...", nonEmpty)},
	{long: "cluster-join", arg: "CLUSTER:ID", group: groupCluster,
		help: "join a running cluster as the member its addition made (sproutctl members add prints CLUSTER:ID); " +
			"--cluster-peers then names the members it can reach first. Or a list NAME=CLUSTER:ID,... shared by " +
			"every member: this one takes its --node's entry, and starts as an initial member without one",
		set: stringSetter(func(o *options) *string { return &o.clusterJoin }, "CLUSTER:ID or NAME=CLUSTER:ID,...", nonEmpty)},
	{long: "cluster-groups", arg: "G", group: groupCluster,
		help: "form the cluster with G shard groups (default 1), its tubes spread over them; later starts " +
			"take the cluster's, and refuse another G",
		set: uintSetter(16, "a number of groups, 1 to 256", func(o *options) *int { return &o.clusterGroups })},
	{long: "cluster-replicas", arg: "R", group: groupCluster,
		help: "form the cluster with R replicas of each shard group (default 3, at most the members): each " +
			"member holds the groups placed on it, and group 0 everywhere",
		set: uintSetter(16, "a number of replicas", func(o *options) *int { return &o.clusterReplicas })},
	{long: "cluster-tls-cert", arg: "PATH", group: groupCluster,
		help: "this member's certificate (PEM), for mutual TLS between members; with --cluster-tls-key and " +
			"--cluster-tls-ca, or none of the three for plaintext",
		set: stringSetter(func(o *options) *string { return &o.clusterTLSCert }, "a PEM file", nonEmpty)},
	{long: "cluster-tls-key", arg: "PATH", group: groupCluster,
		help: "the private key (PEM) of --cluster-tls-cert",
		set:  stringSetter(func(o *options) *string { return &o.clusterTLSKey }, "a PEM file", nonEmpty)},
	{long: "cluster-tls-ca", arg: "PATH", group: groupCluster,
		help: "the certificate authority (PEM) members' certificates must come from",
		set:  stringSetter(func(o *options) *string { return &o.clusterTLSCA }, "a PEM file", nonEmpty)},
}

func nonEmpty(v string) bool { return v != "" }

// minTokenLength is the shortest admin token taken without a warning.
const minTokenLength = 16

// weakToken warns of a short admin token, never showing it.
func weakToken(token string) error {
	if len(token) < minTokenLength {
		return warning(fmt.Sprintf("the admin token is shorter than %d characters; failed attempts are "+
			"rate-limited, but a long random one (openssl rand -hex 32) is far safer", minTokenLength))
	}
	return nil
}

// stringSetter sets *field to the value if valid (nil: any) accepts it;
// want says what is expected when it does not.
func stringSetter(field func(o *options) *string, want string, valid func(v string) bool) func(o *options, value string) error {
	return func(o *options, value string) error {
		if valid != nil && !valid(value) {
			return wantError(want)
		}
		*field(o) = value
		return nil
	}
}

// boolSetter sets *field from true or false (or 1, 0, t, f, as
// strconv.ParseBool reads them).
func boolSetter(field func(o *options) *bool) func(o *options, value string) error {
	return func(o *options, value string) error {
		v, err := strconv.ParseBool(value)
		if err != nil {
			return wantError("true or false")
		}
		*field(o) = v
		return nil
	}
}

// byteCountSetter sets an engine cap from a plain decimal byte count; 0
// leaves the default.
func byteCountSetter[T int | int64](field func(o *options) *T) func(o *options, value string) error {
	return uintSetter(strconv.IntSize-1, "a number of bytes; 0 means the default", field)
}

// uintSetter sets *field from a plain decimal number of at most bits bits;
// want says what is expected when the value is refused.
func uintSetter[T int | int64](bits int, want string, field func(o *options) *T) func(o *options, value string) error {
	return func(o *options, value string) error {
		n, err := strconv.ParseUint(value, 10, bits)
		if err != nil {
			return wantError(want)
		}
		*field(o) = T(n)
		return nil
	}
}

// validPort reports whether s can name a port: empty (any free port), a
// number up to 65535, or a service name (letters, digits and '-', with at
// least one letter, as RFC 6335 has them). It refuses what a Kubernetes
// service link puts in SPROUT_PORT (tcp://10.0.0.1:11300).
func validPort(s string) bool {
	if _, err := strconv.ParseUint(s, 10, 16); err == nil || s == "" {
		return true
	}
	letter := false
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			letter = true
		case c >= '0' && c <= '9' || c == '-':
		default:
			return false
		}
	}
	return letter
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
