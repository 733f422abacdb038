// Package testproc is the toolkit of the tests and benchmarks that run
// real servers: it starts beanstalkd-compatible server processes, talks to
// them, and reads their stats.
//
// Start runs a server with `-l 127.0.0.1 -p PORT` before its own arguments,
// on a free port, waits until it accepts a connection (or, with Config.Ready
// set to Probe, until it answers the protocol), collects its output, and
// kills it by PID when the test ends. The Process it returns can be killed
// with SIGKILL, stopped with SIGTERM, waited for and asked for its exit code
// and output. Launch does the same without a test, for the benchmark tools.
//
// Reference (and Beanstalkd, its path) finds the reference server: the
// binary $SPROUT_REF_BEANSTALKD names, else the beanstalkd 1.13 release where
// one is cached or can be built, else Debian's 1.12 on PATH; it says which in
// the test log. SproutBinary builds cmd/sprout once per test process; a
// TestMain that uses it calls RemoveSproutBinary after m.Run.
//
// Under -race (RaceEnabled) SproutBinary builds the server with the race
// detector too, so the storm, crash and conformance tests are race tests of
// the server under its heaviest load. The race detector reports on the
// server's stderr and goes on; Start keeps its reports apart from the rest of
// the output (whatever Config.OutputLimit), and a test whose server reported
// a data race fails when it ends, with the report. The benchmarks build the
// server without it (BuildSprout), as make builds bin/sprout.
//
// DoAPI is the one HTTP API client of the tests: one request, JSON body,
// bearer token, session cookie and CSRF token, the whole answer read.
//
// Conn is the one wire client: commands are buffered and flushed at once,
// so callers pipeline; replies are read into Reply (a kind, a number, the
// line and the body) without allocating, which the load generator needs, or
// byte for byte (ReadFrame), which the differential test needs. Do, Put,
// ExpectLine, Stats, StatsInt and Pipeline are whole exchanges, bounded by
// Dialer.ReplyTimeout, for tests. ParseYAML reads the YAML documents of
// stats and list replies. WaitFor polls for a state nothing announces.
// Package procstat, beside it, reads /proc.
package testproc
