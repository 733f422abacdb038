// Package procstat reads what Linux's /proc says about a server process and
// about the machine, through github.com/prometheus/procfs, for the tests and
// the load generator that watch a server from outside: its CPU time,
// resident memory, threads and descriptors, and how busy the machine was.
//
// It is apart from testproc so that what imports testproc alone (the deploy
// module's tests) does not need procfs.
package procstat

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// Usage is what /proc/PID/stat and /proc/PID/status say about a process.
type Usage struct {
	CPU     time.Duration // user+system time
	RSS     int64         // VmRSS, bytes
	PeakRSS int64         // VmHWM, bytes: the highest RSS since start or ResetPeak
	Threads int
}

// Read reads pid's Usage.
func Read(pid int) (Usage, error) {
	stat, err := of(pid, procfs.Proc.Stat)
	if err != nil {
		return Usage{}, err
	}
	status, err := of(pid, procfs.Proc.NewStatus)
	if err != nil {
		return Usage{}, err
	}
	return Usage{
		CPU:     seconds(stat.CPUTime()),
		RSS:     int64(status.VmRSS),
		PeakRSS: int64(status.VmHWM),
		Threads: stat.NumThreads,
	}, nil
}

// FDs counts pid's open descriptors.
func FDs(pid int) (int, error) { return of(pid, procfs.Proc.FileDescriptorsLen) }

// Sockets counts the sockets among pid's open descriptors.
func Sockets(pid int) (int, error) {
	targets, err := of(pid, procfs.Proc.FileDescriptorTargets)
	n := 0
	for _, target := range targets {
		// A descriptor closed since the listing has no target.
		if strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n, err
}

// OpenFileLimit returns pid's soft limit on open files.
func OpenFileLimit(pid int) (int, error) {
	limits, err := of(pid, procfs.Proc.Limits)
	return int(limits.OpenFiles), err
}

// of reads one thing about process pid.
func of[T any](pid int, read func(procfs.Proc) (T, error)) (T, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		var zero T
		return zero, err
	}
	return read(p)
}

// ResetPeak makes pid's PeakRSS start again from its current RSS, by
// writing 5 to /proc/PID/clear_refs (procfs only reads).
func ResetPeak(pid int) error {
	return os.WriteFile(filepath.Join(procfs.DefaultMountPoint, strconv.Itoa(pid), "clear_refs"), []byte("5"), 0)
}

// SystemBusy returns the CPU time the whole machine has spent busy since
// boot: /proc/stat's total but idle and iowait (and guest time, which user
// time already holds). Two readings tell how much work shared the machine
// with a run.
func SystemBusy() (time.Duration, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	stat, err := fs.Stat()
	if err != nil {
		return 0, err
	}
	c := stat.CPUTotal
	return seconds(c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal), nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
