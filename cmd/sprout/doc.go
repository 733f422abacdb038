// Command sprout is a beanstalkd-compatible work-queue server.
//
// # From the command line to a running server
//
// The configuration goes through four steps, each done once, in one place:
//
//  1. Parse (parseArgs; parse.go, env.go): the command line and the
//     SPROUT_* environment become options. Both are read through one
//     table, flagTable (flags.go): each row has a flag's letter, long
//     name, value and help, and its environment variable, its long alias
//     and its line in the usage text are derived from it. options holds
//     what the operator said and nothing more: a setting not given is
//     left zero, and nothing writes options afterwards. A refused value
//     stops here, with one line naming it, and exit status 5.
//  2. Probe (hostinfo.Probe): the host is looked at once: the CPUs the
//     process may use, its open-file limit and the descriptors open, the
//     machine's memory, and the memory limit of the process's own cgroup
//     and its parents.
//  3. Resolve (resolve; resolve.go): options and the probe become a
//     config with every default filled in: the engine's limits by
//     engine.Config.Resolve, the log's settings, the log level and format,
//     the buffer budget (an eighth of the memory limit) and the Go
//     runtime's memory limit (a share of the cgroup's, unless GOMEMLIMIT
//     or --go-memory-limit says otherwise).
//  4. Log (logConfig): the config is logged once, as it will be used; no
//     zero stands for "the default".
//
// run then applies it: the certificate files first (tls.go, loadCerts: one
// internal/certs.Set reads the client port's, the side port's and the
// members' certificates and CAs, and a file that cannot be read stops the
// start with one line naming its flags, status 5); what concerns the
// process next (the Go memory limit and the collector's headroom, so that
// the log's recovery already runs under them; the CPU profile; -u's socket
// and the privileges dropped, or the socket systemd handed over), then the
// member (internal/member), which owns the log, the store, the cluster
// node, the engine and the side port, and the order they start and stop in.
// run waits for the member to stop: SIGTERM and SIGINT shut it down, a
// second one at once; SIGUSR1 drains it; SIGHUP, where certificate files
// were read, reads them again, as the set also does by itself when they
// change. A member that stops on its own (its cluster log lost: exit 1;
// removed from the cluster: exit 12) says why.
//
// # Cluster mode
//
// With --node (cluster.go) parseArgs also checks the cluster's flags
// together (checkCluster: replication.NodeConfig.Validate's lines and the
// ones only the command line knows: -b is required, -l unix: is refused),
// and the member runs as a cluster member (internal/member, cluster.go).
//
// One version is reported everywhere: the one linked in as main.version,
// else the build info's (buildVersion), which -v prints; stats' version
// and sprout_build_info carry it as build metadata of a semantic version
// clients accept (buildinfo.StatsVersion: 1.13.0+sprout.VERSION), passed
// to the engine in its Config.
package main
