// Package conformance holds Sprout's differential wire test against the
// reference server, beanstalkd, and the harness it runs on.
//
// The reference is the beanstalkd 1.13 release where one is at hand, else
// Debian's 1.12. testproc.Reference says where it looks:
// $SPROUT_REF_BEANSTALKD, then the cache of shared/tools/build-beanstalkd-1.13.sh,
// then that script, then PATH. Every test logs which one it got, and a
// failure report names its version.
//
// The test is Sprout's strongest compatibility evidence. It starts a fresh
// beanstalkd and a fresh Sprout side by side, sends both the same bytes on the
// same numbered connections, one step at a time, and requires the replies to
// match byte for byte. Two kinds of input are sent:
//
//   - TestScripted: a table of named scripts, one per family of protocol
//     quirks (dispatch by prefix, the 224-byte line buffer, body framing,
//     integer parsing, watch lists, reservation order, timeouts, ...). The
//     reply counts, and the replies a script spells out, are checked against
//     the live beanstalkd on every run, so a script cannot drift from the
//     reference unnoticed.
//   - TestRandom: a seeded, weighted grammar of valid and malformed commands
//     over a few tubes and the job ids seen so far, on four connections,
//     including reserves that wait and commands pipelined behind them.
//   - TestScriptedTLS and TestRandomTLS: the same, with Sprout's
//     connections over TLS (its --tls-listen, StartSproutTLS): the bytes
//     the protocol sees are the same, and so must the replies be.
//   - TestHalfClose and TestHalfCloseDurable: clients that pipeline, then
//     shut down their writing side (nc -N, a batch script), one byte at a
//     time or all at once, with replies large and small, read as they come
//     or only after the end of file; everything each server sends until it
//     closes the connection is compared byte for byte.
//
// Only normalizeReply stands between "byte for byte" and the comparison: it
// masks the stats values that belong to the process (pid, uptime, rusage,
// ...) and allows a one-second skew in time-derived fields. Against a 1.12
// reference, and only then, two more allowances apply, for what changed in
// 1.13, which Sprout follows: quotedIn113 (1.13 quotes tube names in
// stats-tube and stats-job) and knownDifferences (steps 1.13 answers
// otherwise, sent to Sprout alone).
//
// Data flow: a step's bytes go to the reference, then to Sprout; Conn splits
// what comes back into replies (a line, plus the body of RESERVED, FOUND and
// OK); the replies are normalised and compared. Timers (a delay, a pause or a
// reserve timeout of one second) are never raced: the random run sleeps
// through them at a fixed step, so a seed replays the same command stream. On
// a mismatch the test prints the seed, the step and the last 20 steps with
// every byte quoted.
//
// The harness (StartBeanstalkd, StartSprout, StartBinary, Conn) is ordinary
// code so that other packages, such as benchmarks, can reuse it. With
// SPROUT_CONFORMANCE_SELFTEST=1, StartSprout starts a second beanstalkd, which
// shows that the harness itself is deterministic, whatever state Sprout is in.
//
// Typical runs:
//
//	go test ./internal/conformance
//	go test ./internal/conformance -run 'TestRandom$' -seed=7 -steps=20000
//	go test ./internal/conformance -run 'TestRandom$' -seed=0   # a new seed each run
//	SPROUT_CONFORMANCE_SELFTEST=1 go test -race -count=3 ./internal/conformance
//	SPROUT_REF_BEANSTALKD=/usr/bin/beanstalkd go test ./internal/conformance   # against Debian's 1.12
package conformance
