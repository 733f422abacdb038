package hostinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	gib = 1 << 30
	// v1Unlimited is what cgroup v1 shows for no limit with 4 KiB pages.
	v1Unlimited = "9223372036854771712"
)

// Mount lines as the kernel writes them.
const (
	mountRoot   = "23 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n"
	mountTmpfs  = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
	mountV1Mem  = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	mountV1CPU  = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
	mountHybrid = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	mountV2     = "30 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
)

// fakeRoot makes a directory standing for "/": /proc/self links to
// /proc/4242, whose cgroup and mountinfo are given, and files maps other
// paths to their contents.
func fakeRoot(t *testing.T, cgroup, mountinfo string, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	all := map[string]string{
		"proc/4242/cgroup":    cgroup,
		"proc/4242/mountinfo": mountinfo,
		"proc/meminfo":        "MemTotal:       16384000 kB\nMemFree:         1000000 kB\n",
	}
	for name, content := range files {
		all[name] = content
	}
	for name, content := range all {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("4242", filepath.Join(root, "proc/self")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "proc/4242/fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// limits are limit files below mount, for fakeRoot: file in each
// directory of dirValues (a directory, then its limit, and so on; "" is
// the mount point itself).
func limits(mount, file string, dirValues ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(dirValues); i += 2 {
		m[filepath.Join(mount, dirValues[i], file)] = dirValues[i+1]
	}
	return m
}

// withFile adds a file to m.
func withFile(m map[string]string, name, content string) map[string]string {
	m[name] = content
	return m
}

// The mount points of the fakes, and their limit files.
const (
	v1Mount = "sys/fs/cgroup/memory"
	v1File  = "memory.limit_in_bytes"
	v2Mount = "sys/fs/cgroup"
	v2File  = "memory.max"
)

func TestCgroupMemory(t *testing.T) {
	cases := []struct {
		name              string
		cgroup, mountinfo string
		files             map[string]string
		wantLimit         int64
		wantDir           string
	}{
		// These machines: v1, the process in a nested group whose limit
		// the mount root's file does not show.
		{name: "v1 nested group", cgroup: "4:memory:/process_api/56ec\n1:cpu:/\n0::/\n",
			mountinfo: mountRoot + mountTmpfs + mountV1CPU + mountV1Mem + mountHybrid,
			files:     limits(v1Mount, v1File, "", v1Unlimited, "process_api", v1Unlimited, "process_api/56ec", "2147483648\n"),
			wantLimit: 2 * gib, wantDir: "/sys/fs/cgroup/memory/process_api/56ec"},
		{name: "v1 parent's limit is smaller", cgroup: "4:memory:/outer/inner\n", mountinfo: mountRoot + mountTmpfs + mountV1Mem,
			files:     limits(v1Mount, v1File, "", v1Unlimited, "outer", "805306368", "outer/inner", v1Unlimited),
			wantLimit: 768 << 20, wantDir: "/sys/fs/cgroup/memory/outer"},
		{name: "v1 memory co-mounted with another controller", cgroup: "3:cpu,memory:/job\n",
			mountinfo: mountRoot + "35 31 0:32 / /sys/fs/cgroup/cpu,memory rw - cgroup cgroup rw,cpu,memory\n",
			files:     limits("sys/fs/cgroup/cpu,memory", v1File, "job", "1073741824"),
			wantLimit: gib, wantDir: "/sys/fs/cgroup/cpu,memory/job"},
		// Docker on v1 without a cgroup namespace bind-mounts the
		// container's own group: the mount's root is the group.
		{name: "v1 container without a cgroup namespace", cgroup: "4:memory:/docker/abc123\n",
			mountinfo: mountRoot + "35 31 0:32 /docker/abc123 /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,memory\n",
			files:     limits(v1Mount, v1File, "", "536870912"),
			wantLimit: 512 << 20, wantDir: "/sys/fs/cgroup/memory"},
		// A systemd unit with MemoryMax= on a v2 host; memory.high only
		// throttles, so it is not the limit.
		{name: "v2 systemd service", cgroup: "0::/system.slice/sprout.service\n", mountinfo: mountRoot + mountV2,
			files: withFile(limits(v2Mount, v2File, "system.slice", "max\n", "system.slice/sprout.service", "536870912\n"),
				"sys/fs/cgroup/system.slice/sprout.service/memory.high", "402653184\n"),
			wantLimit: 512 << 20, wantDir: "/sys/fs/cgroup/system.slice/sprout.service"},
		// A Kubernetes pod on v2: the container's cgroup namespace makes
		// its own group the root it sees.
		{name: "v2 container with a cgroup namespace", cgroup: "0::/\n", mountinfo: mountRoot + mountV2,
			files: limits(v2Mount, v2File, "", "1073741824\n"), wantLimit: gib, wantDir: "/sys/fs/cgroup"},
		{name: "v2 parent's limit is smaller", cgroup: "0::/kubepods.slice/pod1/ctr\n", mountinfo: mountRoot + mountV2,
			files:     limits(v2Mount, v2File, "kubepods.slice", "max", "kubepods.slice/pod1", "268435456", "kubepods.slice/pod1/ctr", "max"),
			wantLimit: 256 << 20, wantDir: "/sys/fs/cgroup/kubepods.slice/pod1"},
		{name: "v2 without a limit", cgroup: "0::/user.slice/session-1.scope\n", mountinfo: mountRoot + mountV2,
			files: limits(v2Mount, v2File, "user.slice", "max\n", "user.slice/session-1.scope", "max\n")},
		{name: "v1 unlimited everywhere", cgroup: "4:memory:/process_api/1\n0::/\n",
			mountinfo: mountRoot + mountTmpfs + mountV1Mem + mountHybrid,
			files:     limits(v1Mount, v1File, "", v1Unlimited, "process_api/1", v1Unlimited)},
		{name: "hierarchy not mounted", cgroup: "4:memory:/a\n", mountinfo: mountRoot + mountTmpfs + mountV1CPU},
		{name: "group outside the mount's root", cgroup: "4:memory:/elsewhere\n",
			mountinfo: mountRoot + "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n",
			files:     limits(v1Mount, v1File, "", "536870912")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, tc.cgroup, tc.mountinfo, tc.files)
			h := probeFiles(root)
			if h.CgroupMemory != tc.wantLimit || h.CgroupDir != tc.wantDir {
				t.Errorf("cgroup memory %d in %q; want %d in %q", h.CgroupMemory, h.CgroupDir, tc.wantLimit, tc.wantDir)
			}
			if h.MemTotal != 16384000<<10 {
				t.Errorf("MemTotal %d; want %d", h.MemTotal, 16384000<<10)
			}
		})
	}
}

// A proc that cannot be read leaves everything unknown, and the
// descriptors at a guess.
func TestProbeNothingReadable(t *testing.T) {
	h := probeFiles(filepath.Join(t.TempDir(), "nothing"))
	if h != (Host{OpenDescriptors: guessedDescriptors}) {
		t.Errorf("probe of nothing: %+v", h)
	}
	root := fakeRoot(t, "garbage", "garbage", nil)
	if h := probeFiles(root); h.CgroupMemory != 0 || h.CgroupDir != "" {
		t.Errorf("unparsable cgroup files gave %+v", h)
	}
}

func TestMemoryLimit(t *testing.T) {
	cases := []struct {
		host     Host
		want     int64
		wantFrom string
	}{
		{Host{MemTotal: 16 * gib, CgroupMemory: gib, CgroupDir: "/sys/fs/cgroup"}, gib, "cgroup /sys/fs/cgroup"},
		{Host{MemTotal: 16 * gib, CgroupMemory: 32 * gib, CgroupDir: "/x"}, 16 * gib, "machine"},
		{Host{MemTotal: 16 * gib}, 16 * gib, "machine"},
		{Host{CgroupMemory: gib, CgroupDir: "/x"}, gib, "cgroup /x"},
		{Host{}, 0, ""},
	}
	for _, tc := range cases {
		if got, from := tc.host.MemoryLimit(); got != tc.want || from != tc.wantFrom {
			t.Errorf("%+v.MemoryLimit() = %d, %q; want %d, %q", tc.host, got, from, tc.want, tc.wantFrom)
		}
	}
}

// The real probe of the machine the tests run on: sane figures, and a
// cgroup limit only where /proc/self/cgroup names a memory group.
func TestProbe(t *testing.T) {
	h := Probe()
	if h.CPUs < 1 || h.OpenDescriptors < 3 {
		t.Errorf("probe %+v: want at least one CPU and three descriptors", h)
	}
	if _, err := os.Stat("/proc/self/cgroup"); err == nil && h.MemTotal <= 0 {
		t.Errorf("probe %+v: no MemTotal on Linux", h)
	}
	if h.CgroupMemory > 0 && !strings.HasPrefix(h.CgroupDir, "/") {
		t.Errorf("cgroup limit %d read in %q", h.CgroupMemory, h.CgroupDir)
	}
	t.Logf("%+v", h)
}
