package codec

import (
	"strconv"
	"time"
)

// Counter indexes ServerStats.Cmd. The order is the order of the cmd-* keys
// in beanstalkd's stats output, which is not protocol.txt's order.
type Counter uint8

const (
	CmdPut Counter = iota
	CmdPeek
	CmdPeekReady
	CmdPeekDelayed
	CmdPeekBuried
	CmdReserve
	CmdReserveWithTimeout
	CmdDelete
	CmdRelease
	CmdUse
	CmdWatch
	CmdIgnore
	CmdBury
	CmdKick
	CmdTouch
	CmdStats
	CmdStatsJob
	CmdStatsTube
	CmdListTubes
	CmdListTubeUsed
	CmdListTubesWatched
	CmdPauseTube
	NumCounters
)

var counterKeys = [NumCounters]string{
	CmdPut:                "cmd-put",
	CmdPeek:               "cmd-peek",
	CmdPeekReady:          "cmd-peek-ready",
	CmdPeekDelayed:        "cmd-peek-delayed",
	CmdPeekBuried:         "cmd-peek-buried",
	CmdReserve:            "cmd-reserve",
	CmdReserveWithTimeout: "cmd-reserve-with-timeout",
	CmdDelete:             "cmd-delete",
	CmdRelease:            "cmd-release",
	CmdUse:                "cmd-use",
	CmdWatch:              "cmd-watch",
	CmdIgnore:             "cmd-ignore",
	CmdBury:               "cmd-bury",
	CmdKick:               "cmd-kick",
	CmdTouch:              "cmd-touch",
	CmdStats:              "cmd-stats",
	CmdStatsJob:           "cmd-stats-job",
	CmdStatsTube:          "cmd-stats-tube",
	CmdListTubes:          "cmd-list-tubes",
	CmdListTubeUsed:       "cmd-list-tube-used",
	CmdListTubesWatched:   "cmd-list-tubes-watched",
	CmdPauseTube:          "cmd-pause-tube",
}

// String returns the counter's stats key, e.g. "cmd-put".
func (c Counter) String() string {
	if c >= NumCounters {
		return ""
	}
	return counterKeys[c]
}

// ServerStats is everything the stats command reports, in output order.
type ServerStats struct {
	CurrentJobsUrgent   uint64
	CurrentJobsReady    uint64
	CurrentJobsReserved uint64
	CurrentJobsDelayed  uint64
	CurrentJobsBuried   uint64
	// Cmd holds the cmd-* counters, indexed by Counter.
	Cmd                [NumCounters]uint64
	JobTimeouts        uint64
	TotalJobs          uint64
	MaxJobSize         int
	CurrentTubes       uint64
	CurrentConnections uint64
	CurrentProducers   uint64
	CurrentWorkers     uint64
	CurrentWaiting     uint64
	TotalConnections   uint64
	PID                int
	Version            string
	RusageUtime        time.Duration
	RusageStime        time.Duration
	// Uptime is in whole seconds.
	Uptime                int64
	BinlogOldestIndex     int64
	BinlogCurrentIndex    int64
	BinlogRecordsMigrated int64
	BinlogRecordsWritten  int64
	BinlogMaxSize         int64
	Draining              bool
	// ID is the per-process random id, 16 hex digits in beanstalkd.
	ID string
	// Hostname, OS and Platform are uname's nodename, version (not
	// release) and machine.
	Hostname string
	OS       string
	Platform string
}

// AppendServerStats appends the stats YAML document, for AppendOK. Strings
// are double-quoted as beanstalkd 1.13 does (1.12 left hostname, os and
// platform bare, which turned an os starting with '#' into a comment); like
// beanstalkd, it does not escape them.
func AppendServerStats(dst []byte, s *ServerStats) []byte {
	dst = append(dst, "---\n"...)
	dst = appendUintKey(dst, "current-jobs-urgent", s.CurrentJobsUrgent)
	dst = appendUintKey(dst, "current-jobs-ready", s.CurrentJobsReady)
	dst = appendUintKey(dst, "current-jobs-reserved", s.CurrentJobsReserved)
	dst = appendUintKey(dst, "current-jobs-delayed", s.CurrentJobsDelayed)
	dst = appendUintKey(dst, "current-jobs-buried", s.CurrentJobsBuried)
	for c, v := range s.Cmd {
		dst = appendUintKey(dst, counterKeys[c], v)
	}
	dst = appendUintKey(dst, "job-timeouts", s.JobTimeouts)
	dst = appendUintKey(dst, "total-jobs", s.TotalJobs)
	dst = appendIntKey(dst, "max-job-size", int64(s.MaxJobSize))
	dst = appendUintKey(dst, "current-tubes", s.CurrentTubes)
	dst = appendUintKey(dst, "current-connections", s.CurrentConnections)
	dst = appendUintKey(dst, "current-producers", s.CurrentProducers)
	dst = appendUintKey(dst, "current-workers", s.CurrentWorkers)
	dst = appendUintKey(dst, "current-waiting", s.CurrentWaiting)
	dst = appendUintKey(dst, "total-connections", s.TotalConnections)
	dst = appendIntKey(dst, "pid", int64(s.PID))
	dst = appendQuotedKey(dst, "version", s.Version)
	dst = appendRusageKey(dst, "rusage-utime", s.RusageUtime)
	dst = appendRusageKey(dst, "rusage-stime", s.RusageStime)
	dst = appendIntKey(dst, "uptime", s.Uptime)
	dst = appendIntKey(dst, "binlog-oldest-index", s.BinlogOldestIndex)
	dst = appendIntKey(dst, "binlog-current-index", s.BinlogCurrentIndex)
	dst = appendIntKey(dst, "binlog-records-migrated", s.BinlogRecordsMigrated)
	dst = appendIntKey(dst, "binlog-records-written", s.BinlogRecordsWritten)
	dst = appendIntKey(dst, "binlog-max-size", s.BinlogMaxSize)
	dst = appendBareKey(dst, "draining", strconv.FormatBool(s.Draining))
	dst = appendBareKey(dst, "id", s.ID)
	dst = appendQuotedKey(dst, "hostname", s.Hostname)
	dst = appendQuotedKey(dst, "os", s.OS)
	dst = appendQuotedKey(dst, "platform", s.Platform)
	return dst
}

// TubeStats is everything stats-tube reports, in output order.
type TubeStats struct {
	Name                string
	CurrentJobsUrgent   uint64
	CurrentJobsReady    uint64
	CurrentJobsReserved uint64
	CurrentJobsDelayed  uint64
	CurrentJobsBuried   uint64
	TotalJobs           uint64
	CurrentUsing        uint64
	CurrentWatching     uint64
	CurrentWaiting      uint64
	CmdDelete           uint64
	CmdPauseTube        uint64
	// Pause is the last requested pause in seconds, 0 once it has expired.
	Pause int64
	// PauseTimeLeft is in seconds, truncated.
	PauseTimeLeft int64
}

// AppendTubeStats appends the stats-tube YAML document, for AppendOK.
func AppendTubeStats(dst []byte, s *TubeStats) []byte {
	dst = append(dst, "---\n"...)
	dst = appendQuotedKey(dst, "name", s.Name)
	dst = appendUintKey(dst, "current-jobs-urgent", s.CurrentJobsUrgent)
	dst = appendUintKey(dst, "current-jobs-ready", s.CurrentJobsReady)
	dst = appendUintKey(dst, "current-jobs-reserved", s.CurrentJobsReserved)
	dst = appendUintKey(dst, "current-jobs-delayed", s.CurrentJobsDelayed)
	dst = appendUintKey(dst, "current-jobs-buried", s.CurrentJobsBuried)
	dst = appendUintKey(dst, "total-jobs", s.TotalJobs)
	dst = appendUintKey(dst, "current-using", s.CurrentUsing)
	dst = appendUintKey(dst, "current-watching", s.CurrentWatching)
	dst = appendUintKey(dst, "current-waiting", s.CurrentWaiting)
	dst = appendUintKey(dst, "cmd-delete", s.CmdDelete)
	dst = appendUintKey(dst, "cmd-pause-tube", s.CmdPauseTube)
	dst = appendIntKey(dst, "pause", s.Pause)
	dst = appendIntKey(dst, "pause-time-left", s.PauseTimeLeft)
	return dst
}

// JobStats is everything stats-job reports, in output order. Durations are
// whole seconds; TimeLeft may be negative.
type JobStats struct {
	ID       uint64
	Tube     string
	State    string // "ready", "reserved", "buried" or "delayed"
	Pri      uint32
	Age      int64
	Delay    int64
	TTR      int64
	TimeLeft int64
	// File is the binlog file sequence number holding the job, or 0.
	File     int64
	Reserves uint32
	Timeouts uint32
	Releases uint32
	Buries   uint32
	Kicks    uint32
}

// AppendJobStats appends the stats-job YAML document, for AppendOK.
func AppendJobStats(dst []byte, s *JobStats) []byte {
	dst = append(dst, "---\n"...)
	dst = appendUintKey(dst, "id", s.ID)
	dst = appendQuotedKey(dst, "tube", s.Tube)
	dst = appendBareKey(dst, "state", s.State)
	dst = appendUintKey(dst, "pri", uint64(s.Pri))
	dst = appendIntKey(dst, "age", s.Age)
	dst = appendIntKey(dst, "delay", s.Delay)
	dst = appendIntKey(dst, "ttr", s.TTR)
	dst = appendIntKey(dst, "time-left", s.TimeLeft)
	dst = appendIntKey(dst, "file", s.File)
	dst = appendUintKey(dst, "reserves", uint64(s.Reserves))
	dst = appendUintKey(dst, "timeouts", uint64(s.Timeouts))
	dst = appendUintKey(dst, "releases", uint64(s.Releases))
	dst = appendUintKey(dst, "buries", uint64(s.Buries))
	dst = appendUintKey(dst, "kicks", uint64(s.Kicks))
	return dst
}

// AppendTubeList appends the YAML list of list-tubes and
// list-tubes-watched, for AppendOK. Names are never quoted here, even in
// 1.13.
func AppendTubeList(dst []byte, names []string) []byte {
	dst = append(dst, "---\n"...)
	for _, name := range names {
		dst = append(dst, "- "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	return dst
}

func appendKey(dst []byte, key string) []byte {
	dst = append(dst, key...)
	return append(dst, ": "...)
}

func appendUintKey(dst []byte, key string, v uint64) []byte {
	dst = strconv.AppendUint(appendKey(dst, key), v, 10)
	return append(dst, '\n')
}

func appendIntKey(dst []byte, key string, v int64) []byte {
	dst = strconv.AppendInt(appendKey(dst, key), v, 10)
	return append(dst, '\n')
}

func appendBareKey(dst []byte, key, v string) []byte {
	dst = append(appendKey(dst, key), v...)
	return append(dst, '\n')
}

func appendQuotedKey(dst []byte, key, v string) []byte {
	dst = append(appendKey(dst, key), '"')
	dst = append(dst, v...)
	return append(dst, "\"\n"...)
}

// appendRusageKey formats like beanstalkd's "%d.%06d" of a timeval.
func appendRusageKey(dst []byte, key string, d time.Duration) []byte {
	dst = strconv.AppendInt(appendKey(dst, key), int64(d/time.Second), 10)
	dst = append(dst, '.')
	usec := int64(d%time.Second) / int64(time.Microsecond)
	for div := int64(100000); div > 1 && usec < div; div /= 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendInt(dst, usec, 10)
	return append(dst, '\n')
}
