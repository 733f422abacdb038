package engine

// descriptorMargin is what DefaultMaxConnections keeps free beyond the
// descriptors open when the host was probed: the log's segments, its
// reserve and its compaction, the HTTP side port and its clients, accepts
// in flight (an accepted socket is briefly held twice while gnet takes its
// own copy).
const descriptorMargin = 64

// Bounds of DefaultMaxBufferMemory.
const (
	minBufferMemory = 64 << 20
	maxBufferMemory = 1 << 30
)

// DefaultMaxConnections is the connection limit that keeps the process
// clear of its open-file limit: the limit, less the descriptors open when
// the host was probed, less descriptorMargin; at least 1. cmd/sprout probes
// before it opens the log and the side port, whose few descriptors come
// out of the margin. An unknown limit (0) gives 2^20.
func DefaultMaxConnections(openFileLimit uint64, openDescriptors int) int {
	if openFileLimit == 0 {
		return 1 << 20
	}
	limit := min(openFileLimit, 1<<24) // RLIM_INFINITY is not a plan
	return max(int(limit)-openDescriptors-descriptorMargin, 1)
}

// DefaultMaxBufferMemory is an eighth of memory, the memory the process
// may use (hostinfo.Host.MemoryLimit: its cgroup's limit where there is
// one, else the machine's memory), between 64 MiB and 1 GiB; 256 MiB if
// memory is unknown (0).
func DefaultMaxBufferMemory(memory int64) int64 {
	if memory <= 0 {
		return 256 << 20
	}
	return min(max(memory/8, minBufferMemory), maxBufferMemory)
}
