// Package testproc starts beanstalkd-compatible server processes for tests
// and benchmarks: the reference beanstalkd or a freshly built cmd/sprout,
// each on a free 127.0.0.1 port.
//
// Start runs a server with `-l 127.0.0.1 -p PORT` before its own arguments,
// waits until it accepts a connection (or, with Config.Ready set to Probe,
// until it answers the protocol), collects its output, and kills it by PID
// when the test ends. The Process it returns can be killed with SIGKILL,
// stopped with SIGTERM, waited for and asked for its exit code and output.
// Launch does the same without a test, for the benchmark tools.
//
// Reference (and Beanstalkd, its path) finds the reference server: the
// binary $SPROUT_REF_BEANSTALKD names, else the beanstalkd 1.13 release where
// one is cached or can be built, else Debian's 1.12 on PATH; it says which in
// the test log. SproutBinary builds
// cmd/sprout once per test process; a TestMain that uses it calls
// RemoveSproutBinary after m.Run.
package testproc
