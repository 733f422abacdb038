// Package crashtest runs the sprout binary the way an operator does, on a
// -b directory, and checks what its write-ahead log promises from the
// outside, over the protocol:
//
//   - TestCrashRecovery: producers and consumers on many connections record
//     every reply they get; the server is killed with SIGKILL at a random
//     moment and restarted on the same directory, round after round. Every
//     job whose INSERTED arrived, and whose DELETED did not, must be back
//     with its exact body (and buried if its BURIED arrived); no job whose
//     DELETED arrived may come back; ids never go backwards. A delete or
//     bury the kill left unanswered is judged by what the restart finds.
//   - TestImportBeanstalkdBinlog: a binlog directory written by Debian's
//     beanstalkd is taken over by sprout: every job is there in its state,
//     the binlog files are gone, and new ids continue above the old ones.
//   - TestDirectoryLock: two servers never share a directory.
//
// The package holds only tests; they build cmd/sprout once per run and
// talk to it on 127.0.0.1 only. Servers are killed by PID when a test ends.
package crashtest
