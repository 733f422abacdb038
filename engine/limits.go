package engine

import (
	"bufio"
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// descriptorMargin is what DefaultMaxConnections keeps free beyond the
// descriptors open when serving starts: the log's next segments and its
// compaction, the HTTP side port and its clients, accepts in flight (an
// accepted socket is briefly held twice while gnet takes its own copy).
const descriptorMargin = 64

// Bounds of DefaultMaxBufferMemory.
const (
	minBufferMemory = 64 << 20
	maxBufferMemory = 1 << 30
)

// DefaultMaxConnections is the connection limit that keeps the process
// clear of its open-file limit: the limit, less the descriptors open now,
// less descriptorMargin; at least 1.
func DefaultMaxConnections() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 1 << 20
	}
	limit := min(rl.Cur, 1<<24) // RLIM_INFINITY is not a plan
	return max(int(limit)-openDescriptors()-descriptorMargin, 1)
}

// openDescriptors counts this process's open descriptors; where the system
// cannot list them it guesses a few dozen.
func openDescriptors() int {
	for _, dir := range []string{"/proc/self/fd", "/dev/fd"} {
		if entries, err := os.ReadDir(dir); err == nil {
			return len(entries) - 1 // the directory being read
		}
	}
	return 32
}

// DefaultMaxBufferMemory is an eighth of the memory the process may use
// (its cgroup's limit where there is one, else the machine's memory),
// between 64 MiB and 1 GiB.
func DefaultMaxBufferMemory() int64 {
	mem := memoryAvailable()
	if mem <= 0 {
		return 256 << 20
	}
	return min(max(mem/8, minBufferMemory), maxBufferMemory)
}

// memoryAvailable is the cgroup (v2, then v1) memory limit if set, else
// the machine's total memory; 0 if unknown.
func memoryAvailable() int64 {
	total := memTotal()
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err == nil && n > 0 && (total == 0 || n < total) {
			return n // "max", or v1's huge "unlimited", leave total
		}
	}
	return total
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemTotal:"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}
