// Package load is Sprout's load generator: the scenarios that drive
// testproc.Conn (a beanstalkd client on raw sockets, with pipelining, that
// the tests share), and the
// side-by-side runs against C beanstalkd (the tests' reference,
// testproc.FindReference: the 1.13 release built beside the clone, else
// Debian's 1.12) that produce the report under
// benchmarks/results.
//
// A Plan runs every Scenario against every server Reps times, alternating
// the servers within each repetition. Each run starts its server fresh on a
// free loopback port (StartServer), warms up, then measures for a fixed time:
// jobs completed, latency in an HDR histogram, and the server's CPU time and
// resident memory read from /proc/PID (testproc/procstat). Summarize takes the median over the
// repetitions; WriteMarkdown, RatioSVG, LatencySVG and ResourcesSVG turn the
// outcomes into the report, and EvaluateGoals checks issue 4's targets.
//
// Traffic goes only to 127.0.0.0/8, and every run is bounded in time (each
// connection has a deadline) and in count (RunConfig.MaxPuts).
package load
