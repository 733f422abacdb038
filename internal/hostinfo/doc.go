// Package hostinfo probes what the host gives this process: the CPUs it
// may use, its open-file limit and the descriptors already open, the
// machine's memory, and the memory limit of its own control group and of
// that group's parents.
//
// cmd/sprout probes once, at start, before it opens anything; every
// default is then resolved from that one Host (engine.Config.Resolve for
// the engine's limits, cmd/sprout for the Go memory limit) and the startup
// log shows the result. Probe never fails: what it cannot read is left
// zero, which the defaults read as unknown.
//
// # The process's own control group
//
// /proc/self/cgroup names the process's group in each hierarchy: "0::/path"
// for cgroup v2, "N:memory:/path" for the v1 memory controller, the path
// being relative to the hierarchy's root as the process's cgroup namespace
// sees it. /proc/self/mountinfo says where each hierarchy is mounted and
// which of its directories the mount shows (the mount's root), so the
// group's directory is the mount point plus the group's path below that
// root. That finds the process's own group in every layout met in
// practice:
//
//   - a container with a cgroup namespace (Kubernetes on v2): path "/",
//     mount root "/": the mount point itself;
//   - a container without one (Docker on v1): path and mount root are both
//     "/docker/<id>": again the mount point;
//   - a host: a systemd unit (MemoryMax=, path
//     "/system.slice/sprout.service") or any nested group
//     ("/process_api/<id>"), below the mount point.
//
// Reading the files at the mount point's root, as Sprout did before,
// finds the process's own limit only in the first two.
//
// Limits are hierarchical: a parent's limit binds every group below it.
// The probe reads the limit file (v2 memory.max, v1
// memory.limit_in_bytes) in the group's directory and in each parent up to
// the mount point, in every hierarchy that has the memory controller, and
// keeps the smallest. "max", and v1's "unlimited" (2^63-1 rounded down to
// a page), mean no limit.
//
// The files are parsed with github.com/prometheus/procfs, which the
// metrics already depend on.
package hostinfo
