// Package testproc starts beanstalkd-compatible server processes for tests
// and benchmarks: Debian's beanstalkd or a freshly built cmd/sprout, each on
// a free 127.0.0.1 port.
//
// Start runs a server with `-l 127.0.0.1 -p PORT` before its own arguments,
// waits until it accepts a connection (or, with Config.Ready set to Probe,
// until it answers the protocol), collects its output, and kills it by PID
// when the test ends. The Process it returns can be killed with SIGKILL,
// stopped with SIGTERM, waited for and asked for its exit code and output.
// Launch does the same without a test, for the benchmark tools.
//
// Beanstalkd finds the reference server on PATH, and SproutBinary builds
// cmd/sprout once per test process; a TestMain that uses it calls
// RemoveSproutBinary after m.Run.
package testproc
