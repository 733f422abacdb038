package hostinfo

import (
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Host is what one probe found. The zero value of a field means unknown
// (or, for CgroupMemory, no limit).
type Host struct {
	// CPUs is GOMAXPROCS at the probe: the CPUs the process may use, which
	// the Go runtime takes from the cgroup's CPU limit where there is one.
	CPUs int
	// OpenFileLimit is the soft RLIMIT_NOFILE.
	OpenFileLimit uint64
	// OpenDescriptors is how many descriptors were open at the probe.
	OpenDescriptors int
	// MemTotal is the machine's memory, in bytes.
	MemTotal int64
	// CgroupMemory is the smallest memory limit of the process's own
	// control group and its parents, in bytes; 0 if none has one.
	CgroupMemory int64
	// CgroupDir is the group directory CgroupMemory was read in, as
	// mounted (/sys/fs/cgroup/memory/process_api/<id>).
	CgroupDir string
}

// unlimited is where a limit stops meaning anything: cgroup v1 writes "no
// limit" as its largest page count times the page size, 2^63-1 rounded
// down to a page (9223372036854771712 with 4 KiB pages).
const unlimited = 1 << 62

// guessedDescriptors is OpenDescriptors where the system cannot list them:
// a few dozen, as a Go program has at start.
const guessedDescriptors = 32

// Probe looks at the running process and its host.
func Probe() Host {
	h := probeFiles("/")
	h.CPUs = runtime.GOMAXPROCS(0)
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		h.OpenFileLimit = uint64(rl.Cur)
	}
	return h
}

// MemoryLimit is the memory the process may use: its cgroup's limit if
// that is below the machine's memory, else the machine's memory; 0 if
// neither is known. from says which: "cgroup DIR" or "machine".
func (h Host) MemoryLimit() (bytes int64, from string) {
	switch {
	case h.CgroupMemory > 0 && (h.MemTotal == 0 || h.CgroupMemory < h.MemTotal):
		return h.CgroupMemory, "cgroup " + h.CgroupDir
	case h.MemTotal > 0:
		return h.MemTotal, "machine"
	}
	return 0, ""
}

// probeFiles fills what comes from files, with root standing for "/" (a
// directory of fakes in tests).
func probeFiles(root string) Host {
	h := Host{OpenDescriptors: guessedDescriptors}
	fs, err := procfs.NewFS(filepath.Join(root, "proc"))
	if err != nil {
		return h
	}
	if mi, err := fs.Meminfo(); err == nil && mi.MemTotalBytes != nil {
		h.MemTotal = int64(min(*mi.MemTotalBytes, unlimited))
	}
	self, err := fs.Self()
	if err != nil {
		return h
	}
	if n, err := self.FileDescriptorsLen(); err == nil {
		h.OpenDescriptors = n
	}
	groups, errGroups := self.Cgroups()
	mounts, errMounts := fs.GetMounts()
	if errGroups == nil && errMounts == nil {
		h.CgroupMemory, h.CgroupDir = cgroupMemory(root, groups, mounts)
	}
	return h
}

// cgroupMemory is the smallest memory limit of the groups the process is
// in and their parents, and the directory it was read in (see the package
// comment).
func cgroupMemory(root string, groups []procfs.Cgroup, mounts []*procfs.MountInfo) (limit int64, dir string) {
	for _, g := range groups {
		var file string
		var isHierarchy func(m *procfs.MountInfo) bool
		switch {
		case g.HierarchyID == 0 && len(g.Controllers) == 0:
			file = "memory.max"
			isHierarchy = func(m *procfs.MountInfo) bool { return m.FSType == "cgroup2" }
		case slices.Contains(g.Controllers, "memory"):
			file = "memory.limit_in_bytes"
			isHierarchy = func(m *procfs.MountInfo) bool {
				_, memory := m.SuperOptions["memory"]
				return m.FSType == "cgroup" && memory
			}
		default:
			continue
		}
		groupDir, ok := mountedDir(g.Path, mounts, isHierarchy)
		if !ok {
			continue
		}
		for d := range groupAndParents(groupDir.path, groupDir.mountPoint) {
			if n, ok := readLimit(filepath.Join(root, d, file)); ok && (limit == 0 || n < limit) {
				limit, dir = n, d
			}
		}
	}
	return limit, dir
}

// groupDir is a control group's directory and the mount point above it.
type groupDir struct{ path, mountPoint string }

// mountedDir finds where the group at path (as /proc/self/cgroup names it)
// is mounted: below the mount of its hierarchy whose root holds it, the
// deepest such root if the hierarchy is mounted more than once.
func mountedDir(group string, mounts []*procfs.MountInfo, isHierarchy func(*procfs.MountInfo) bool) (groupDir, bool) {
	var best *procfs.MountInfo
	var below string
	for _, m := range mounts {
		if !isHierarchy(m) {
			continue
		}
		rel, ok := within(group, m.Root)
		if ok && (best == nil || len(m.Root) > len(best.Root)) {
			best, below = m, rel
		}
	}
	if best == nil {
		return groupDir{}, false
	}
	return groupDir{path: path.Join(best.MountPoint, below), mountPoint: path.Clean(best.MountPoint)}, true
}

// within reports whether p is root or below it, and p relative to root.
func within(p, root string) (string, bool) {
	p, root = path.Clean(p), path.Clean(root)
	if root == "/" {
		return p, true
	}
	if p == root {
		return "/", true
	}
	rel, ok := strings.CutPrefix(p, root+"/")
	return "/" + rel, ok
}

// groupAndParents yields dir, then each parent directory up to and
// including top.
func groupAndParents(dir, top string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for {
			if !yield(dir) || dir == top || dir == "/" || dir == "." {
				return
			}
			dir = path.Dir(dir)
		}
	}
}

// readLimit reads a memory limit file; false if it is missing, unreadable
// or says there is no limit.
func readLimit(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= unlimited { // "max" fails to parse
		return 0, false
	}
	return n, true
}
