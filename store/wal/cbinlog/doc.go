// Package cbinlog reads the binlog directory of C beanstalkd (the -b flag)
// so that Sprout can import a running installation's jobs. It only reads:
// it never writes, locks or deletes anything in the directory, and it knows
// nothing of Sprout's own log beyond the wal.Record it returns.
//
// # Data flow
//
// Found lists the files named binlog.<N> and orders them by N. Read replays
// them in that order the way beanstalkd's recovery (file.c readrec) does,
// into a map of job id to the job's latest tube, Jobrec and body:
//
//   - a full record (tube name, Jobrec, body) creates the job, or, when
//     compaction copied a live job into a newer file, replaces its Jobrec
//     and body;
//   - a short record (Jobrec only) overwrites the job's Jobrec, and one with
//     state 0 deletes the job;
//   - a short record for a job with no full record seen is ignored: its full
//     record was in a file beanstalkd has since deleted, so the job was
//     deleted or migrated;
//   - reading a file stops at its first record with id 0, the zeros
//     beanstalkd preallocates.
//
// The jobs alive at the end come back as wal.KindFull records ordered by id.
// A Reserved job comes back Ready, because reserves are not logged and a
// restart frees them. A Buried job stays Buried with its stored counters;
// beanstalkd 1.12 would count one more bury on every restart.
//
// # Format
//
// Each file starts with an int32 version. Version 7 (beanstalkd 1.5 and
// later) stores an int32 tube-name length (0 for a short record), the name,
// an 80-byte Jobrec and the body, which includes the trailing "\r\n".
// Version 5 (beanstalkd 1.4) stores a size_t name length, a 77-byte Jobrec
// with times in microseconds, and the body. Both use the writer's native
// layout; this package reads the little-endian LP64 layout of amd64 and
// arm64, which is where beanstalkd runs.
//
// # Damage
//
// beanstalkd preallocates each file with zeros and, when killed, leaves a
// file's unused tail in place, so a file may end in fewer zero bytes than a
// whole record; that is the end of the file, not damage. A record cut short
// by the end of the last file is a write torn by a crash: it is dropped,
// together with the job if that record would have created it, and Read
// succeeds. Anything else (an unknown version, a name length or body size
// out of range, an unknown state, a record cut short in an earlier file) is
// returned as a *FileError naming the file and the offset of the record.
// beanstalkd itself warns and carries on with the next file; an import
// should rather stop and let the operator decide.
package cbinlog
