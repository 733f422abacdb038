package engine

import (
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/internal/hostinfo"
	"github.com/sproutmq/sprout/store/wal"
)

// Config is everything the engine needs to serve. A zero limit means its
// default, which Resolve fills in from one probe of the host: cmd/sprout
// resolves its Config once and logs the result; New resolves whatever
// Config it is given that Resolve has not (tests fill a few fields and
// leave the rest).
type Config struct {
	// Network is "tcp" or "unix", or NetworkNone for no plaintext
	// listener (TLS must then be set).
	Network string
	// Address is "host:port" for tcp ("" host means all interfaces) or a
	// filesystem path for unix. A stale unix socket file is replaced.
	Address string
	// Listener, if set, is served instead of opening Network and Address
	// (a socket handed over by systemd, say). Stop closes it.
	Listener net.Listener
	// MaxJobSize is the largest body a put may carry (beanstalkd -z); 0
	// means DefaultMaxJobSize, and NoJobBodies that only empty bodies
	// are taken (-z 0: beanstalkd answers any other JOB_TOO_BIG).
	MaxJobSize int
	// Loops is the number of gnet event loops, at most MaxLoops; 0 means
	// DefaultLoops.
	Loops int
	// MaxInputBuffered closes a connection whose unparsed input exceeds it
	// while it is read (a session that cannot consume its input pauses
	// reading first, at 48 KiB or one read below a smaller cap:
	// pauseInputAt). 0 means DefaultMaxInputBuffered(MaxJobSize).
	MaxInputBuffered int
	// MaxOutputBuffered stops serving a connection whose unread replies
	// exceed it until the client reads. 0 means DefaultMaxOutputBuffered.
	MaxOutputBuffered int
	// MaxConnections closes, at once, a connection accepted while this many
	// are open. 0 means DefaultMaxConnections.
	MaxConnections int
	// MaxBufferMemory bounds the bytes held for all connections together:
	// unread replies, unparsed input, a partial put body and replies held
	// for the log. Past it the connections holding the most are closed.
	// 0 means DefaultMaxBufferMemory of the host's memory limit.
	MaxBufferMemory int64
	// DrainPoll is how often throttled connections are re-checked; 0 means 5ms.
	DrainPoll time.Duration
	// Logger receives operator-facing events; the zero value discards.
	Logger zerolog.Logger
	// Metrics, if set, is told how long each command took to execute.
	Metrics Metrics
	// Version is what stats reports as version (and the metrics'
	// sprout_build_info): cmd/sprout passes the build's, the one -v
	// prints. "" means "unknown".
	Version string
	// Route, if set, is shown each accepted connection before it is
	// enrolled in an event loop; true means it was taken elsewhere (a
	// cluster member that does not lead hands its clients to a proxy),
	// and the server forgets it. It runs on the accept loop's goroutine,
	// so it must not block. A server with a Route also keeps track of its
	// sessions, so that CloseClients can end them; without one, nothing
	// is added per connection.
	Route func(nc net.Conn) bool
	// Serving, with a Route, says whether this server serves its clients
	// itself now. A connection the Route left here whose session would
	// open while Serving says false is closed instead: it was routed while
	// the member served, and the member stopped serving before the
	// session opened, so CloseClients, which the member ran meanwhile,
	// could not end it. Its client connects again, and is routed anew.
	Serving func() bool
	// Leased, if set, says whether this member's leadership is
	// still confirmed (a majority heard lately, by a goroutine that is
	// running). A job is handed out (RESERVED) only while it says true;
	// otherwise the connection closes without that reply, and the job
	// goes back to ready with the session. It closes the gap between a
	// member's resumption after a stall (SIGSTOP, a frozen VM) and its
	// Raft goroutine noticing that another leads: input queued meanwhile
	// must not get jobs the new leader may have handed out since.
	Leased func() bool
	// Idle, if set, reports whether this server's sessions hold no job:
	// what a graceful shutdown waits for (WaitIdle). Unset, the store
	// holding no reserved job: its clients are the server's sessions. A
	// cluster member's sessions hold jobs in groups other members lead,
	// and its store's reserved jobs may be other members' sessions'.
	Idle func() bool
	// LogStats, if set, are the figures stats' binlog-* lines report, in
	// place of the store's log's: a cluster member's log, which all its
	// groups share, where its store's journal counts only its records.
	LogStats func() (wal.Stats, bool)
	// Queues, if set, makes each connection's Queue when it opens (a
	// cluster member's router), handing it the session's Answers for its
	// pending answers; otherwise every connection's queue is its own
	// client of the store.
	Queues func(Answers) Queue
	// TLS, if set, also serves clients over TLS on a listener of its own
	// (tls.go). Route sees a TLS connection once its handshake is done,
	// as the *tls.Conn, and Serve takes one back.
	TLS *TLSConfig

	// resolved is set by Resolve: New uses such a Config as it is.
	resolved bool
}

// Resolve returns c with every default filled in, the host-dependent ones
// from h: the one place the engine's defaults are computed. Fields already
// set are kept, except that Loops is capped at MaxLoops.
func (c Config) Resolve(h hostinfo.Host) Config {
	if c.Network == "" {
		c.Network = "tcp"
	}
	switch {
	case c.MaxJobSize == NoJobBodies:
		c.MaxJobSize = 0
	case c.MaxJobSize <= 0:
		c.MaxJobSize = DefaultMaxJobSize
	}
	if c.MaxInputBuffered <= 0 {
		c.MaxInputBuffered = DefaultMaxInputBuffered(c.MaxJobSize)
	}
	if c.MaxOutputBuffered <= 0 {
		c.MaxOutputBuffered = DefaultMaxOutputBuffered
	}
	if c.Loops <= 0 {
		c.Loops = DefaultLoops(h.CPUs)
	}
	c.Loops = min(c.Loops, MaxLoops)
	if c.MaxConnections <= 0 {
		c.MaxConnections = DefaultMaxConnections(h.OpenFileLimit, h.OpenDescriptors)
	}
	if c.MaxBufferMemory <= 0 {
		memory, _ := h.MemoryLimit()
		c.MaxBufferMemory = DefaultMaxBufferMemory(memory)
	}
	if c.DrainPoll <= 0 {
		c.DrainPoll = 5 * time.Millisecond
	}
	if c.Version == "" {
		c.Version = "unknown"
	}
	c.resolved = true
	return c
}

// Metrics receives figures from the event loops. Its methods run on the
// loops, once per command, so they must be cheap and never block.
type Metrics interface {
	// ObserveCommand reports the time the server spent executing one
	// command (not the time a reserve waited for a job, nor a reply for
	// the log); op.String() is the command's name.
	ObserveCommand(op codec.Op, d time.Duration)
}

const (
	// DefaultMaxJobSize is beanstalkd's default -z (2^16-1).
	DefaultMaxJobSize = 65535
	// MaxMaxJobSize is the clamp beanstalkd applies to -z.
	MaxMaxJobSize = 1 << 30
	// NoJobBodies is Config.MaxJobSize for -z 0: only empty bodies.
	NoJobBodies = -1
	// DefaultMaxOutputBuffered bounds unread replies per connection. A
	// reply is never cut: one larger than this is still sent whole.
	DefaultMaxOutputBuffered = 512 << 10
	// minMaxInputBuffered is the floor of DefaultMaxInputBuffered.
	minMaxInputBuffered = 64 << 10
	// pauseReadingAt is the unread input at which a session that cannot
	// consume it stops reading its socket (regulateInput) under a cap of
	// minMaxInputBuffered or more: at most one read (readBufferCap) more
	// arrives, which keeps it under the cap. Less waiting, as a command
	// or two behind a blocked reserve, leaves the socket read, so that
	// the client's hang-up is seen. A smaller cap lowers it (pauseInputAt).
	pauseReadingAt = minMaxInputBuffered - readBufferCap
	// MaxLoops is gnet's ceiling on event loops; it would clamp a larger
	// count silently.
	MaxLoops = 256
)

// JobSizeLimit is Config.MaxJobSize for -z n: NoJobBodies for 0, which
// the Config would take for the default.
func JobSizeLimit(n int) int {
	if n == 0 {
		return NoJobBodies
	}
	return n
}

// DefaultMaxInputBuffered is the input cap for a given max job size: room for
// two maximal puts, and at least 64 KiB. A session that cannot consume its
// input pauses reading below it (pauseInputAt); one that is read holds at
// most one partial command line, put bodies being copied out as they
// arrive. So the cap closes a connection only where the pause is not
// available.
func DefaultMaxInputBuffered(maxJobSize int) int {
	return max(2*(maxJobSize+256), minMaxInputBuffered)
}

// pauseInputAt is the unread input at which a session that cannot consume
// it stops reading its socket, under an input cap of maxInput:
// pauseReadingAt, or one read (readBufferCap) below a smaller cap. gnet
// reads at most readBufferCap bytes before each OnTraffic, and each ends
// in regulateInput, so a session held back that is still read holds less
// than this plus one read: less than the cap, which closes only a
// connection that is read. A cap of one read or less leaves no such room:
// the session pauses at its first byte unread (1 is the smallest cap, 0
// meaning the default), and, paused, is not closed though that read may
// have taken it past the cap. It never pauses with nothing unread: a lone
// reserve that waits costs no pause, and its client's hang-up is seen
// (on kqueue too, which has no gnet patch 0005).
func pauseInputAt(maxInput int) int {
	return min(pauseReadingAt, max(maxInput-readBufferCap, 1))
}

// DefaultLoops is one event loop per CPU the process may use (cpus:
// GOMAXPROCS, which follows a container's CPU limit) less one, and at
// least one. The CPU left over runs what is not a loop: the Go runtime's
// collector and scheduler, the store's timers, the log's writer, the
// accept loop and the HTTP side port. With a loop on every CPU, that work and the loops took
// turns on the same cores, and the commands caught in between waited
// milliseconds (benchmarks/README.md, "Where the tail came from").
func DefaultLoops(cpus int) int { return max(1, cpus-1) }

// descriptorMargin is what DefaultMaxConnections keeps free beyond the
// descriptors open when the host was probed: the log's segments, its
// reserve and its compaction, the HTTP side port and its clients, accepts
// in flight (an accepted socket is briefly held twice while gnet takes its
// own copy).
const descriptorMargin = 64

// Bounds of DefaultMaxBufferMemory.
const (
	minBufferMemory = 64 << 20
	maxBufferMemory = 1 << 30
)

// DefaultMaxConnections is the connection limit that keeps the process
// clear of its open-file limit: the limit, less the descriptors open when
// the host was probed, less descriptorMargin; at least 1. cmd/sprout probes
// before it opens the log and the side port, whose few descriptors come
// out of the margin. An unknown limit (0) gives 2^20.
func DefaultMaxConnections(openFileLimit uint64, openDescriptors int) int {
	if openFileLimit == 0 {
		return 1 << 20
	}
	limit := min(openFileLimit, 1<<24) // RLIM_INFINITY is not a plan
	return max(int(limit)-openDescriptors-descriptorMargin, 1)
}

// DefaultMaxBufferMemory is an eighth of memory, the memory the process
// may use (hostinfo.Host.MemoryLimit: its cgroup's limit where there is
// one, else the machine's memory), between 64 MiB and 1 GiB; 256 MiB if
// memory is unknown (0).
func DefaultMaxBufferMemory(memory int64) int64 {
	if memory <= 0 {
		return 256 << 20
	}
	return min(max(memory/8, minBufferMemory), maxBufferMemory)
}
