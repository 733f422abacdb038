package main

import (
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/buildinfo"
	"github.com/sproutmq/sprout/internal/hostinfo"
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store/wal"
)

// version is set at link time (-ldflags "-X main.version=..."); when it is
// empty the module version from the build info is used (buildVersion).
var version string

// goMemoryShare is the part of the cgroup's memory limit the Go runtime's
// soft limit is set to by default, in tenths. The Go limit counts only
// what the runtime maps (heap, stacks, its own structures); the cgroup
// also charges the page cache of the log's segments, the kernel's socket
// buffers for every connection, and the binary itself. A tenth is left
// for them, and for the heap's overshoot while a collection runs: the
// collector then works harder as the heap nears the cgroup's limit,
// instead of the kernel killing the process at it. 90% is also
// automemlimit's default and within the Go GC guide's advice.
const goMemoryShare = 9

// config is the resolved configuration: every default filled in, from the
// options and one probe of the host. resolve builds it; run then completes
// the wiring (the engine's Logger, Metrics and Listener, the
// log's Logger, Observer and Importer) before the log and the engine are
// made, and nothing changes it after.
type config struct {
	version string
	// engine is resolved (engine.Config.Resolve): engine.New uses it as is.
	engine engine.Config
	// walDir is -b: the write-ahead log's directory, "" for in memory.
	walDir string
	// wal has every setting of the log; used when walDir is set.
	wal wal.Options
	// logLevel is --log-level, made more verbose by -V (debug) or -VV
	// and beyond (trace), never less.
	logLevel zerolog.Level
	// logFormat is "json" or "console".
	logFormat       string
	user            string
	cpuProfile      string
	shutdownTimeout time.Duration
	httpAddr        string
	pprof           bool
	metricsTubes    int
	// adminToken is the admin API's token; "" for a read-only API. Never
	// logged.
	adminToken string
	// gcHeadroom is what internal/gctune keeps the heap goal above the
	// live heap; 0 when off, or when GOGC is set (then gogc holds it).
	gcHeadroom int64
	gogc       string
	// memoryLimit is the memory the process may use, which the buffer
	// budget is an eighth of; 0 if unknown. memoryLimitFrom says where it
	// came from.
	memoryLimit     int64
	memoryLimitFrom string
	// goMemoryLimit is the Go runtime's soft memory limit, math.MaxInt64
	// for none; goMemoryLimitFrom says why.
	goMemoryLimit     int64
	goMemoryLimitFrom string
	// host is the probe everything was resolved from.
	host hostinfo.Host
	// cluster is the member to run (--node and the --cluster-* flags,
	// checked by parseArgs); nil for a single node. run fills in the
	// rest: the client address, the log, the hooks.
	cluster *replication.NodeConfig
	// groups and replicas are --cluster-groups and --cluster-replicas, 0
	// where not given (member.Config.Groups).
	groups, replicas int
	// tls names the certificate files (run reads them, loadCerts);
	// engine.TLS, without its Config yet, is set with --tls-listen.
	tls tlsFiles
}

// tlsFiles are the certificate and key files of the TLS client port and
// the side port, "" where not given.
type tlsFiles struct {
	cert, key, clientCA string
	httpCert, httpKey   string
}

// process is what resolve needs of the running process besides the probe
// of its host.
type process struct {
	lookupEnv func(key string) (string, bool) // GOGC, GOMEMLIMIT
	// goMemoryLimit is the runtime's limit before Sprout set one: what
	// GOMEMLIMIT said, else math.MaxInt64.
	goMemoryLimit int64
	terminal      bool   // stderr is a terminal: --log-format's default
	version       string // buildVersion()
}

// resolve fills every default: the engine's (engine.Config.Resolve), the
// log's, the log level and format, the buffer budget and the Go memory
// limit. It is the one place defaults are decided; logConfig shows the
// result.
func resolve(o options, h hostinfo.Host, p process) config {
	c := config{
		version:         p.version,
		walDir:          o.walDir,
		user:            o.user,
		cpuProfile:      o.cpuProfile,
		shutdownTimeout: o.shutdownTimeout.or(defaultShutdownTimeout),
		httpAddr:        o.httpAddr,
		pprof:           o.pprof,
		metricsTubes:    o.metricsTubes,
		adminToken:      o.adminToken,
		host:            h,
	}
	if c.metricsTubes == 0 {
		c.metricsTubes = ops.DefaultTubeSeries
	}

	c.logLevel = o.logLevel.or(zerolog.InfoLevel)
	switch {
	case o.verbosity >= 2:
		c.logLevel = min(c.logLevel, zerolog.TraceLevel)
	case o.verbosity == 1:
		c.logLevel = min(c.logLevel, zerolog.DebugLevel)
	}
	c.logFormat = o.logFormat
	if c.logFormat == "" {
		c.logFormat = "json"
		if p.terminal {
			c.logFormat = "console"
		}
	}

	c.gcHeadroom = o.gcHeadroom.or(defaultGCHeadroom)
	if gogc, set := p.lookupEnv("GOGC"); set && c.gcHeadroom > 0 {
		c.gcHeadroom, c.gogc = 0, gogc
	}

	c.goMemoryLimit, c.goMemoryLimitFrom = goMemoryLimit(o, h, p)
	c.memoryLimit, c.memoryLimitFrom = h.MemoryLimit()
	if c.goMemoryLimitFrom == fromFlag || c.goMemoryLimitFrom == fromGOMEMLIMIT {
		// A limit set by hand says how much the process may use, even
		// where no cgroup does.
		if c.goMemoryLimit < math.MaxInt64 && (c.memoryLimit == 0 || c.goMemoryLimit < c.memoryLimit) {
			c.memoryLimit, c.memoryLimitFrom = c.goMemoryLimit, c.goMemoryLimitFrom
		}
	}
	if c.memoryLimitFrom == "" {
		c.memoryLimitFrom = "unknown"
	}

	network, address := o.listenAddress()
	maxBufferMemory := o.maxBufferMemory
	if maxBufferMemory == 0 {
		maxBufferMemory = engine.DefaultMaxBufferMemory(c.memoryLimit)
	}
	c.engine = engine.Config{
		Network:           network,
		Address:           address,
		MaxJobSize:        engine.JobSizeLimit(o.maxJobSize.or(engine.DefaultMaxJobSize)),
		Loops:             o.loops,
		MaxInputBuffered:  o.maxInput,
		MaxOutputBuffered: o.maxOutput,
		MaxConnections:    o.maxConnections,
		MaxBufferMemory:   maxBufferMemory,
		Version:           buildinfo.StatsVersion(p.version),
	}.Resolve(h)

	c.wal = wal.Options{
		SegmentSize: o.segmentSize,
		SyncEvery:   o.syncEvery.or(wal.DefaultSyncEvery),
		NoSync:      o.noSync,
		SkipDamaged: o.skipDamaged,
		MaxJobSize:  engine.JobSizeLimit(c.engine.MaxJobSize), // -z 0 is no bodies, not the default
	}
	if c.wal.SegmentSize == 0 {
		c.wal.SegmentSize = wal.DefaultSegmentSize
	}
	if o.node != "" {
		c.cluster, _ = nodeConfig(o) // parseArgs checked it
		c.groups, c.replicas = o.clusterGroups, o.clusterReplicas
	}
	c.tls = tlsFiles{cert: o.tlsCert, key: o.tlsKey, clientCA: o.tlsClientCA,
		httpCert: o.httpTLSCert, httpKey: o.httpTLSKey}
	if o.tlsListen != "" {
		c.engine.TLS = &engine.TLSConfig{Address: o.tlsListen,
			HandshakeTimeout: o.tlsHandshakeTimeout.or(engine.DefaultHandshakeTimeout)}
	}
	return c
}

// Where the Go memory limit comes from, for the log.
const (
	fromFlag       = "--go-memory-limit"
	fromGOMEMLIMIT = "GOMEMLIMIT"
)

// goMemoryLimit decides the Go runtime's soft memory limit and says why:
// --go-memory-limit if given (its environment variable included), else
// GOMEMLIMIT as the runtime read it, else goMemoryShare of the cgroup's
// memory limit, else none (math.MaxInt64). The collector's headroom
// (--gc-headroom, internal/gctune) still sets GOGC under any of them: the
// runtime's heap goal is the lower of GOGC's and the limit's, so the
// headroom rules while the heap is far from the limit and the limit near
// it.
func goMemoryLimit(o options, h hostinfo.Host, p process) (int64, string) {
	if o.goMemoryLimit != 0 {
		return o.goMemoryLimit, fromFlag
	}
	if v, set := p.lookupEnv("GOMEMLIMIT"); set && v != "" {
		return p.goMemoryLimit, fromGOMEMLIMIT
	}
	if h.CgroupMemory > 0 {
		limit := h.CgroupMemory
		if h.MemTotal > 0 {
			limit = min(limit, h.MemTotal)
		}
		return limit / 10 * goMemoryShare, fmt.Sprintf("%d%% of the cgroup's memory limit", goMemoryShare*10)
	}
	return math.MaxInt64, "none: no cgroup memory limit"
}

// listenAddress is where -l and -p say to listen.
func (o options) listenAddress() (network, address string) {
	if path, ok := strings.CutPrefix(o.host, "unix:"); ok {
		return "unix", path
	}
	if o.host == listenNone {
		return engine.NetworkNone, ""
	}
	// The port is not checked further here: like beanstalkd's getaddrinfo,
	// the listener accepts service names (-p http) and "" means any free
	// port.
	return "tcp", net.JoinHostPort(o.host, o.port.or(defaultPort))
}

// logConfig logs the resolved configuration once, at start: every figure
// as it will be used, where it came from when that is not a flag.
func logConfig(log zerolog.Logger, c config) {
	e := log.Info().Str("version", c.version).Str("protocol", protocolVersion).
		Str("network", c.engine.Network).Str("address", c.engine.Address).
		Int("max_job_size", c.engine.MaxJobSize).Int("loops", c.engine.Loops).Int("cpus", c.host.CPUs).
		Int("max_input", c.engine.MaxInputBuffered).Int("max_output", c.engine.MaxOutputBuffered).
		Int("max_connections", c.engine.MaxConnections).Uint64("open_file_limit", c.host.OpenFileLimit).
		Int("open_descriptors", c.host.OpenDescriptors).
		Int64("max_buffer_memory", c.engine.MaxBufferMemory)
	if c.memoryLimit > 0 {
		e = e.Int64("memory_limit", c.memoryLimit)
	}
	e = e.Str("memory_limit_from", c.memoryLimitFrom)
	if c.goMemoryLimit < math.MaxInt64 {
		e = e.Int64("go_memory_limit", c.goMemoryLimit)
	}
	e = e.Str("go_memory_limit_from", c.goMemoryLimitFrom)
	if c.gogc != "" {
		e = e.Str("gogc", c.gogc) // --gc-headroom is not used
	} else {
		e = e.Int64("gc_headroom", c.gcHeadroom)
	}
	e = e.Str("shutdown_timeout", c.shutdownTimeout.String()).
		Str("log_level", c.logLevel.String()).Str("log_format", c.logFormat)
	if c.httpAddr != "" {
		// Whether a token is set, never the token.
		e = e.Str("http", c.httpAddr).Bool("pprof", c.pprof).Int("metrics_tubes", c.metricsTubes).
			Bool("admin_token", c.adminToken != "").Bool("http_tls", c.tls.httpCert != "")
	}
	if t := c.engine.TLS; t != nil {
		e = e.Str("tls_listen", t.Address).Str("tls_handshake_timeout", t.HandshakeTimeout.String()).
			Bool("tls_client_certificates", c.tls.clientCA != "")
	}
	if c.user != "" {
		e = e.Str("user", c.user)
	}
	if c.walDir != "" {
		e = e.Str("wal_dir", c.walDir).Str("fsync_every", c.wal.SyncEvery.String()).
			Bool("no_fsync", c.wal.NoSync).Int64("segment_size", c.wal.SegmentSize).
			Bool("skip_damaged", c.wal.SkipDamaged)
	}
	if n := c.cluster; n != nil {
		var peers []string
		for _, p := range n.Peers {
			peers = append(peers, p.Name+"="+p.Addr)
		}
		e = e.Str("node", n.Node).Str("cluster_listen", n.Listen).Strs("cluster_peers", peers).
			Bool("cluster_tls", n.TLSCert != "")
	}
	e.Int("pid", os.Getpid()).Msg("configuration")
}

// buildVersion is the version Sprout reports in -v and its start-up log
// (buildinfo.Version of the link-time main.version); stats and
// sprout_build_info report it as buildinfo.StatsVersion, which clients
// parse as a semantic version.
func buildVersion() string { return buildinfo.Version(version) }

// versionLine is what -v prints.
func versionLine() string {
	return fmt.Sprintf("sprout %s (beanstalkd protocol %s)", buildVersion(), protocolVersion)
}
