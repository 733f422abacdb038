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
	s.Each(func(f Stat) { dst = appendStat(dst, f) })
	return dst
}

// Each calls fn with every figure of the stats document, in its order.
func (s *ServerStats) Each(fn func(f Stat)) {
	fn(uintStat("current-jobs-urgent", s.CurrentJobsUrgent))
	fn(uintStat("current-jobs-ready", s.CurrentJobsReady))
	fn(uintStat("current-jobs-reserved", s.CurrentJobsReserved))
	fn(uintStat("current-jobs-delayed", s.CurrentJobsDelayed))
	fn(uintStat("current-jobs-buried", s.CurrentJobsBuried))
	for c, v := range s.Cmd {
		fn(uintStat(counterKeys[c], v))
	}
	fn(uintStat("job-timeouts", s.JobTimeouts))
	fn(uintStat("total-jobs", s.TotalJobs))
	fn(intStat("max-job-size", int64(s.MaxJobSize)))
	fn(uintStat("current-tubes", s.CurrentTubes))
	fn(uintStat("current-connections", s.CurrentConnections))
	fn(uintStat("current-producers", s.CurrentProducers))
	fn(uintStat("current-workers", s.CurrentWorkers))
	fn(uintStat("current-waiting", s.CurrentWaiting))
	fn(uintStat("total-connections", s.TotalConnections))
	fn(intStat("pid", int64(s.PID)))
	fn(Stat{Key: "version", Kind: StatString, Str: s.Version})
	fn(Stat{Key: "rusage-utime", Kind: StatSeconds, Dur: s.RusageUtime})
	fn(Stat{Key: "rusage-stime", Kind: StatSeconds, Dur: s.RusageStime})
	fn(intStat("uptime", s.Uptime))
	fn(intStat("binlog-oldest-index", s.BinlogOldestIndex))
	fn(intStat("binlog-current-index", s.BinlogCurrentIndex))
	fn(intStat("binlog-records-migrated", s.BinlogRecordsMigrated))
	fn(intStat("binlog-records-written", s.BinlogRecordsWritten))
	fn(intStat("binlog-max-size", s.BinlogMaxSize))
	fn(Stat{Key: "draining", Kind: StatBool, Bool: s.Draining})
	fn(Stat{Key: "id", Kind: StatWord, Str: s.ID})
	fn(Stat{Key: "hostname", Kind: StatString, Str: s.Hostname})
	fn(Stat{Key: "os", Kind: StatString, Str: s.OS})
	fn(Stat{Key: "platform", Kind: StatString, Str: s.Platform})
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
	s.Each(func(f Stat) { dst = appendStat(dst, f) })
	return dst
}

// Each calls fn with every figure of the stats-tube document, in its order.
func (s *TubeStats) Each(fn func(f Stat)) {
	fn(Stat{Key: "name", Kind: StatString, Str: s.Name})
	fn(uintStat("current-jobs-urgent", s.CurrentJobsUrgent))
	fn(uintStat("current-jobs-ready", s.CurrentJobsReady))
	fn(uintStat("current-jobs-reserved", s.CurrentJobsReserved))
	fn(uintStat("current-jobs-delayed", s.CurrentJobsDelayed))
	fn(uintStat("current-jobs-buried", s.CurrentJobsBuried))
	fn(uintStat("total-jobs", s.TotalJobs))
	fn(uintStat("current-using", s.CurrentUsing))
	fn(uintStat("current-watching", s.CurrentWatching))
	fn(uintStat("current-waiting", s.CurrentWaiting))
	fn(uintStat("cmd-delete", s.CmdDelete))
	fn(uintStat("cmd-pause-tube", s.CmdPauseTube))
	fn(intStat("pause", s.Pause))
	fn(intStat("pause-time-left", s.PauseTimeLeft))
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
	s.Each(func(f Stat) { dst = appendStat(dst, f) })
	return dst
}

// Each calls fn with every figure of the stats-job document, in its order.
func (s *JobStats) Each(fn func(f Stat)) {
	fn(uintStat("id", s.ID))
	fn(Stat{Key: "tube", Kind: StatString, Str: s.Tube})
	fn(Stat{Key: "state", Kind: StatWord, Str: s.State})
	fn(uintStat("pri", uint64(s.Pri)))
	fn(intStat("age", s.Age))
	fn(intStat("delay", s.Delay))
	fn(intStat("ttr", s.TTR))
	fn(intStat("time-left", s.TimeLeft))
	fn(intStat("file", s.File))
	fn(uintStat("reserves", uint64(s.Reserves)))
	fn(uintStat("timeouts", uint64(s.Timeouts)))
	fn(uintStat("releases", uint64(s.Releases)))
	fn(uintStat("buries", uint64(s.Buries)))
	fn(uintStat("kicks", uint64(s.Kicks)))
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

// StatKind is how a stats figure is written: the YAML documents write each
// kind their own way, and another encoding (the admin API's JSON) tells a
// number from a string by it.
type StatKind uint8

const (
	StatUint    StatKind = iota // an unsigned number, in Stat.Uint
	StatInt                     // a signed number, in Stat.Int
	StatString                  // a string, in Stat.Str; double-quoted in YAML
	StatWord                    // a string, in Stat.Str, written bare in YAML: a job's state, the server's id
	StatBool                    // true or false, in Stat.Bool
	StatSeconds                 // a duration in Stat.Dur, written as seconds with microseconds: rusage
)

// Stat is one figure of a stats, stats-tube or stats-job document: its key,
// as the protocol spells it, and its value in the field its Kind names.
type Stat struct {
	Key  string
	Kind StatKind
	Uint uint64
	Int  int64
	Str  string
	Bool bool
	Dur  time.Duration
}

func uintStat(key string, v uint64) Stat { return Stat{Key: key, Kind: StatUint, Uint: v} }
func intStat(key string, v int64) Stat   { return Stat{Key: key, Kind: StatInt, Int: v} }

// appendStat appends f as one line of a YAML document.
func appendStat(dst []byte, f Stat) []byte {
	dst = append(dst, f.Key...)
	dst = append(dst, ": "...)
	switch f.Kind {
	case StatUint:
		dst = strconv.AppendUint(dst, f.Uint, 10)
	case StatInt:
		dst = strconv.AppendInt(dst, f.Int, 10)
	case StatString:
		dst = append(dst, '"')
		dst = append(dst, f.Str...)
		dst = append(dst, '"')
	case StatWord:
		dst = append(dst, f.Str...)
	case StatBool:
		dst = strconv.AppendBool(dst, f.Bool)
	case StatSeconds:
		dst = AppendSeconds(dst, f.Dur)
	}
	return append(dst, '\n')
}

// AppendSeconds appends d as whole seconds and six digits of microseconds,
// as beanstalkd formats a timeval ("%d.%06d"); nanoseconds are dropped.
func AppendSeconds(dst []byte, d time.Duration) []byte {
	dst = strconv.AppendInt(dst, int64(d/time.Second), 10)
	dst = append(dst, '.')
	usec := int64(d%time.Second) / int64(time.Microsecond)
	for div := int64(100000); div > 1 && usec < div; div /= 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, usec, 10)
}
