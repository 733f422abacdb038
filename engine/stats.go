package engine

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// binlogMaxSize is what beanstalkd reports for binlog-max-size without -b
// (its -s default).
const binlogMaxSize = 10 << 20

// unameInfo is what stats reports about the host, read once at start.
type unameInfo struct{ hostname, os, platform string }

func readUname() unameInfo {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		h, _ := os.Hostname()
		return unameInfo{hostname: h}
	}
	return unameInfo{
		hostname: unix.ByteSliceToString(u.Nodename[:]),
		os:       unix.ByteSliceToString(u.Version[:]),
		platform: unix.ByteSliceToString(u.Machine[:]),
	}
}

// Stats is what the stats command reports. Safe from any goroutine.
func (s *Server) Stats() codec.ServerStats {
	g := s.store.Stats()
	return s.serverStats(&g)
}

// serverStats is stats' document with g, the queue's figures, and the
// server's own: its connections, commands, log and process.
func (s *Server) serverStats(g *store.Stats) codec.ServerStats {
	jobs := s.store
	st := codec.ServerStats{
		CurrentJobsUrgent:   uint64(g.Urgent),
		CurrentJobsReady:    uint64(g.Ready),
		CurrentJobsReserved: uint64(g.Reserved),
		CurrentJobsDelayed:  uint64(g.Delayed),
		CurrentJobsBuried:   uint64(g.Buried),
		JobTimeouts:         uint64(g.JobTimeouts),
		TotalJobs:           uint64(g.TotalJobs),
		MaxJobSize:          s.cfg.MaxJobSize,
		CurrentTubes:        uint64(g.Tubes),
		CurrentConnections:  uint64(s.conns.current.Load()),
		CurrentProducers:    uint64(s.conns.producers.Load()),
		CurrentWorkers:      uint64(s.conns.workers.Load()),
		CurrentWaiting:      uint64(g.Waiting),
		TotalConnections:    uint64(s.conns.total.Load()),
		PID:                 os.Getpid(),
		Version:             s.cfg.Version,
		Uptime:              int64(time.Since(s.start) / time.Second),
		BinlogMaxSize:       binlogMaxSize,
		Draining:            s.draining.Load(),
		ID:                  s.id,
		Hostname:            s.uname.hostname,
		OS:                  s.uname.os,
		Platform:            s.uname.platform,
	}
	logStats := jobs.LogStats
	if s.cfg.LogStats != nil {
		logStats = s.cfg.LogStats
	}
	if ls, ok := logStats(); ok {
		st.BinlogOldestIndex = int64(ls.OldestIndex)
		st.BinlogCurrentIndex = int64(ls.CurrentIndex)
		st.BinlogRecordsMigrated = ls.RecordsMigrated
		st.BinlogRecordsWritten = ls.RecordsWritten
		st.BinlogMaxSize = ls.MaxSize
	}
	for i := range st.Cmd {
		st.Cmd[i] = s.cmds[i].Load()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		st.RusageUtime = time.Duration(ru.Utime.Nano())
		st.RusageStime = time.Duration(ru.Stime.Nano())
	}
	return st
}

func appendTubeStats(dst []byte, t *store.TubeStats) []byte {
	cs := WireTubeStats(t)
	return codec.AppendTubeStats(dst, &cs)
}

func appendJobStats(dst []byte, j *store.JobStats) []byte {
	cs := WireJobStats(j)
	return codec.AppendJobStats(dst, &cs)
}

// WireTubeStats is a tube's figures as stats-tube reports them, for other
// ways of reporting them (the admin API's JSON).
func WireTubeStats(t *store.TubeStats) codec.TubeStats {
	return codec.TubeStats{
		Name:                t.Name,
		CurrentJobsUrgent:   uint64(t.Urgent),
		CurrentJobsReady:    uint64(t.Ready),
		CurrentJobsReserved: uint64(t.Reserved),
		CurrentJobsDelayed:  uint64(t.Delayed),
		CurrentJobsBuried:   uint64(t.Buried),
		TotalJobs:           t.TotalJobs,
		CurrentUsing:        uint64(t.Using),
		CurrentWatching:     uint64(t.Watching),
		CurrentWaiting:      uint64(t.Waiting),
		CmdDelete:           t.CmdDelete,
		CmdPauseTube:        t.CmdPause,
		Pause:               int64(t.Pause / time.Second),
		PauseTimeLeft:       int64(t.PauseTimeLeft / time.Second),
	}
}

// WireJobStats is a job's figures as stats-job reports them.
func WireJobStats(j *store.JobStats) codec.JobStats {
	return codec.JobStats{
		ID:       j.ID,
		Tube:     j.Tube,
		State:    j.State.String(),
		Pri:      j.Pri,
		Age:      int64(j.Age / time.Second),
		Delay:    int64(j.Delay / time.Second),
		TTR:      int64(j.TTR / time.Second),
		TimeLeft: int64(j.TimeLeft / time.Second),
		Reserves: j.Reserves,
		Timeouts: j.Timeouts,
		Releases: j.Releases,
		Buries:   j.Buries,
		Kicks:    j.Kicks,
		File:     j.File,
	}
}

// Limits is what the server has done at its connection limits, for
// operators (stats has no place for it: its keys are beanstalkd's).
type Limits struct {
	// Open is the connections open now; MaxConnections the limit.
	Open, MaxConnections int64
	// Refused counts connections closed at once at MaxConnections; Shed,
	// accepts that failed for want of descriptors; Evicted, connections
	// closed to bring buffer memory back under its budget.
	Refused, Shed, Evicted uint64
	// TLSOnPlaintext counts connections to the plaintext port closed
	// because they began a TLS handshake.
	TLSOnPlaintext uint64
	// Fenced counts connections closed instead of being handed a job
	// while Config.Leased said no, or of being answered from a store
	// whose leadership was not leased (FailedFenced).
	Fenced uint64
	// BufferHeld is the bytes held for connections now; MaxBufferMemory
	// the budget.
	BufferHeld, MaxBufferMemory int64
	// BytesIn counts the bytes of commands and bodies parsed; BytesOut the
	// bytes of replies handed to the sockets.
	BytesIn, BytesOut uint64
}

// Limits reports the connection limits and what they have done; it may be
// called once Ready is closed, from any goroutine.
func (s *Server) Limits() Limits {
	return Limits{
		Open:            s.conns.current.Load(),
		MaxConnections:  int64(s.cfg.MaxConnections),
		Refused:         s.conns.refused.Load(),
		Shed:            s.conns.shed.Load(),
		Evicted:         s.conns.evicted.Load(),
		TLSOnPlaintext:  s.conns.tlsOnPlaintext.Load(),
		Fenced:          s.conns.fenced.Load(),
		BufferHeld:      s.bufferHeld.Load(),
		MaxBufferMemory: s.cfg.MaxBufferMemory,
		BytesIn:         s.bytesIn.Load(),
		BytesOut:        s.bytesOut.Load(),
	}
}
