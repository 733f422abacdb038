package load

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// beanstalkdRSQuote is beanstalkd-rs's published figure, quoted beside
// the cluster's CPU per command for comparison
// (shared/reference/cluster-notes.md).
const beanstalkdRSQuote = "beanstalkd-rs reports about 16 µs of CPU per operation summed over its three nodes " +
	"at 100 connections, on a 12-core laptop (its design notes)"

// commandsPerJob is how many commands one job of s takes: what a
// per-operation CPU figure divides a job's by.
func (s Scenario) commandsPerJob() int {
	switch s.Kind {
	case KindProdCons:
		if s.Tubes > 0 {
			return 4 // use, put, reserve, delete
		}
		return 3 // put, reserve, delete
	case KindPutOnly:
		if s.Tubes > s.Conns {
			return 2 // use, put
		}
	case KindDrain:
		return 2 // reserve-with-timeout, delete
	case KindRoundTrip:
		return 3
	}
	return 1
}

// memberFigures is one place of Result.Members (the leader, then the
// followers) over a scenario's usable runs. Name is empty: which member
// led differs from run to run.
type memberFigures struct {
	MemberUsage               // CPU and RSS are the medians; Clients, whether any run's connections went there
	PerJob      time.Duration // the median of the place's CPU over each run's jobs
}

// usableRuns are the runs Summarize counts: neither skipped nor with
// errors.
func usableRuns(rs []Result) []Result {
	var ok []Result
	for _, r := range rs {
		if r.Skipped == "" && r.Errors == 0 {
			ok = append(ok, r)
		}
	}
	return ok
}

// memberMedians is, for each place in Result.Members, its figures over the
// usable runs.
func memberMedians(rs []Result) []memberFigures {
	var cpu, rss, perJob, idle [][]float64
	var clients []bool
	for _, r := range usableRuns(rs) {
		for i, m := range r.Members {
			if i == len(cpu) {
				cpu, rss, perJob, idle, clients = append(cpu, nil), append(rss, nil), append(perJob, nil), append(idle, nil), append(clients, false)
			}
			cpu[i] = append(cpu[i], float64(m.CPU))
			rss[i] = append(rss[i], float64(m.RSS))
			idle[i] = append(idle[i], float64(m.Idle))
			if r.Jobs > 0 {
				perJob[i] = append(perJob[i], float64(m.CPU)/float64(r.Jobs))
			}
			clients[i] = clients[i] || m.Clients
		}
	}
	out := make([]memberFigures, len(cpu))
	for i := range out {
		out[i] = memberFigures{
			MemberUsage: MemberUsage{Role: ThroughFollower, Clients: clients[i], CPU: time.Duration(median(cpu[i])), RSS: int64(median(rss[i])),
				Idle: int64(median(idle[i]))},
			PerJob: time.Duration(median(perJob[i])),
		}
	}
	if len(out) > 0 {
		out[0].Role = ThroughLeader
	}
	return out
}

// cpuPerJob is the summary's CPU per job: for a cluster, summed over the
// members.
func (s Summary) cpuPerJob() time.Duration {
	return time.Duration(s.CPUPer100k / 100_000 * float64(time.Second))
}

// cpuShares formats each place's share of the members' CPU, "—" when
// they spent none.
func cpuShares(ms []memberFigures) []string {
	var total time.Duration
	for _, m := range ms {
		total += m.CPU
	}
	shares := make([]string, len(ms))
	for i, m := range ms {
		shares[i] = "—"
		if total > 0 {
			shares[i] = fmt.Sprintf("%.0f%%", 100*m.CPU.Seconds()/total.Seconds())
		}
	}
	return shares
}

// busiestPerJob is the median over the usable runs of the busiest
// member's CPU over the run's jobs: issue 23's measure of a cluster's
// capacity, since the member that runs out of its core first bounds
// what the cluster carries. Zero when no run had jobs and members.
func busiestPerJob(rs []Result) time.Duration {
	var busiest []float64
	for _, r := range usableRuns(rs) {
		if r.Jobs <= 0 || len(r.Members) == 0 {
			continue
		}
		var most time.Duration
		for _, m := range r.Members {
			most = max(most, m.CPU)
		}
		busiest = append(busiest, float64(most)/float64(r.Jobs))
	}
	return time.Duration(median(busiest))
}

// placeNames name the places of Result.Members in the report: the
// leader, then the followers in the order the run found them.
func placeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("follower %d", i)
	}
	if n > 0 {
		names[0] = "leader"
	}
	return names
}

// writeCluster writes the report's cluster section: each cluster
// scenario's figures with CPU per command beside beanstalkd-rs's, each
// member's share, and the failovers. It writes nothing when no cluster
// scenario ran.
func writeCluster(p func(string, ...any), outs []Outcome, cand string) {
	var timed, failover, catchUp, rebuild, grow, move, growGroups []Outcome
	for _, o := range outs {
		switch {
		case o.Scenario.Members == 0:
		case o.Scenario.Kind == KindFailover:
			failover = append(failover, o)
		case o.Scenario.Kind == KindCatchUp:
			catchUp = append(catchUp, o)
		case o.Scenario.Kind == KindRebuild:
			rebuild = append(rebuild, o)
		case o.Scenario.Kind == KindGrow:
			grow = append(grow, o)
		case o.Scenario.Kind == KindMove:
			move = append(move, o)
		case o.Scenario.Kind == KindGrowGroups:
			growGroups = append(growGroups, o)
		default:
			timed = append(timed, o)
		}
	}
	if len(timed)+len(failover)+len(catchUp)+len(rebuild)+len(grow)+len(move)+len(growGroups) == 0 {
		return
	}
	p("\n## Cluster\n\n")
	if len(timed) > 0 {
		p("Three %s members on this machine, each with its own `-b` directory and `-f 0`, on loopback, sharing the machine's cores "+
			"with each other and with the load generator. A member serves its own clients' sessions and sends each command to the leader of its tube's group "+
			"(docs/design/shards.md, section 5). "+
			"CPU is the members' user+system time summed, per 100,000 jobs and per command "+
			"(a producer/consumer job is three: put, reserve, delete; a put-only job is one); "+
			"RSS is each member's at the end of the run (the tables above give the members' sums). Medians over the repetitions.\n\n", cand)
		p("| scenario | jobs/s | p99 | CPU s/100k, all members | CPU per job | CPU per command | leader's share of CPU | RSS leader | RSS followers |\n")
		p("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, o := range timed {
			s := Summarize(o.Runs[cand])
			if !s.OK {
				p("| %s | %s | | | | | | | |\n", o.Scenario.Name, cell(s, nil))
				continue
			}
			perJob := s.cpuPerJob()
			perCommand := perJob / time.Duration(o.Scenario.commandsPerJob())
			ms := memberMedians(o.Runs[cand])
			share, leaderRSS, followers := "—", "—", []string{}
			for i, m := range ms {
				if i == 0 {
					leaderRSS, share = FormatBytes(int(m.RSS)), cpuShares(ms)[0]
					continue
				}
				followers = append(followers, FormatBytes(int(m.RSS)))
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", o.Scenario.Name, fmtJobs(s), FormatLatency(s.P99), fmtCPU(s),
				FormatLatency(perJob), FormatLatency(perCommand), share, leaderRSS, strings.Join(followers, ", "))
		}
		p("\nFor comparison, %s; the CPU per command above is ours (per job divided by its commands), on this machine's two cores shared with the generator.\n", beanstalkdRSQuote)
		writeCapacity(p, timed, cand)
	}
	for _, o := range failover {
		s := Summarize(o.Runs[cand])
		p("\n### Failover (`%s`)\n\n", o.Scenario.Name)
		if !s.OK {
			p("%s.\n", cell(s, nil))
			continue
		}
		each := eachTime(o.Runs[cand], func(r Result) []time.Duration { return r.Failovers })
		p("From `kill -9` of the serving leader to the first put acknowledged through a surviving member, over %d kills "+
			"(the killed member restarted on its directory, and the three settled on a leader, before the next): "+
			"median %s, worst %s. Each, in order: %s.\n", len(each), FormatSeconds(s.FailoverMedian), FormatSeconds(s.FailoverMax), strings.Join(each, ", "))
	}
	writeCatchUp(p, catchUp, cand)
	writeGrow(p, grow, cand)
	writeMove(p, move, cand)
	writeGrowGroups(p, growGroups, cand)
	for _, o := range rebuild {
		s := Summarize(o.Runs[cand])
		p("\n### A leader rebuilt in place (`%s`)\n\n", o.Scenario.Name)
		if !s.OK {
			p("%s.\n", cell(s, nil))
			continue
		}
		each := eachTime(o.Runs[cand], func(r Result) []time.Duration { return r.Rebuilds })
		p("The serving leader of three holding %s jobs stopped (SIGSTOP) past an election timeout, then resumed: it has lost its leadership, "+
			"closes its clients and rebuilds its store from its log in place. Each time is the member's own (`sprout_cluster_last_rebuild_seconds`), "+
			"from the lost leadership to every entry its log held committed applied again: median %s, worst %s. Each, in order: %s.\n",
			FormatThousands(float64(o.Scenario.Jobs)), FormatSeconds(s.RebuildMedian), FormatSeconds(s.RebuildMax), strings.Join(each, ", "))
	}
}

// writeGrow writes the growth scenarios' runs: members added to a
// cluster of several groups and removed again under traffic, how long the
// replicas took to spread and to leave, and the traffic's rate meanwhile.
func writeGrow(p func(string, ...any), outs []Outcome, cand string) {
	if len(outs) == 0 {
		return
	}
	p("\n### Growing and shrinking (members added and removed while serving)\n\n")
	p("Traffic runs through the first members (producer/consumer pairs, a tube each, spread over the groups) while members are added " +
		"(`POST /cluster/members`, then started with the join string and the cluster's `--cluster-groups`): the members move replicas to them, " +
		"one move at a time, until every group has its voters and the members hold within one replica of each other. Then they are removed " +
		"(`DELETE /cluster/members`): each is drained, its replicas moved to the others, and removed. Baseline is the traffic's rate before the " +
		"first addition, lowest its lowest over any second from then to the end.\n\n")
	p("| scenario | added | spread after | removed | gone after | jobs/s baseline | jobs/s meanwhile | lowest over a second |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, o := range outs {
		for _, r := range o.Runs[cand] {
			g := r.Grow
			if r.Skipped != "" || r.Errors > 0 || g == nil {
				p("| %s | failed: %s | | | | | | |\n", o.Scenario.Name, r.FirstError)
				continue
			}
			p("| %s | %d | %s | %d | %s | %s | %s | %s |\n", o.Scenario.Name, g.Added, FormatSeconds(g.GrowTime), g.Removed,
				FormatSeconds(g.ShrinkTime), FormatThousands(g.BaselineJobsPerSec), FormatThousands(g.JobsPerSec), FormatThousands(g.LowestJobsPerSec))
		}
	}
}

// writeMove writes KindMove's figures.
func writeMove(p func(string, ...any), outs []Outcome, cand string) {
	if len(outs) == 0 {
		return
	}
	p("\n### A tube moving between groups while it serves\n\n")
	p("Producer/consumer pairs through every member, %d of them on one tube, the others on tubes of their own, while that tube "+
		"moves to the next group (`POST /cluster/tubes/TUBE/move`) a second after each move's answer. Held is each move's own figure, "+
		"from the freeze to the tube's placement in its new group; the gaps are the longest the moving tube went without a put "+
		"acknowledged, and without a job reserved, from the first move to the end. Reconnects are the pairs' connections a member "+
		"closed, each dialled again: a session whose command's outcome it could not tell, a group's leadership lost under it.\n\n", movePairs)
	p("| scenario | moves | jobs moved (median) | held median | held max | longest put gap | longest reserve gap | jobs/s baseline | jobs/s meanwhile | reconnects |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, o := range outs {
		for _, r := range o.Runs[cand] {
			m := r.Move
			if r.Skipped != "" || r.Errors > 0 || m == nil || m.Moves == 0 {
				p("| %s | failed: %s | | | | | | | | |\n", o.Scenario.Name, r.FirstError)
				continue
			}
			jobs := slices.Sorted(slices.Values(m.Jobs))
			held := slices.Sorted(slices.Values(m.Paused))
			p("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %d |\n", o.Scenario.Name, m.Moves, jobs[len(jobs)/2],
				FormatSeconds(held[len(held)/2]), FormatSeconds(held[len(held)-1]), FormatSeconds(m.PutGap), FormatSeconds(m.ReserveGap),
				FormatThousands(m.BaselineJobsPerSec), FormatThousands(m.JobsPerSec), m.Reconnects)
		}
	}
}

// writeCapacity writes the timed cluster scenarios' CPU by member: the
// capacity the busiest member's CPU per job implies, then each member's
// figures.
func writeCapacity(p func(string, ...any), timed []Outcome, cand string) {
	p("\n### Capacity by member's CPU\n\n")
	p("Two cores shared by every member and the generator cannot show what members on machines of their own would carry, " +
		"so capacity is read from CPU: the busiest member's user+system CPU per job (in each run, the member that spent most; " +
		"the median over the runs), and one core over that, the jobs/s at which that member would fill a core of its own. " +
		"Beside it, the CPU per job summed over the members, as in the table above.\n\n")
	p("| scenario | jobs/s | busiest member's CPU per job | capacity, 1 core ÷ that | CPU per job, all members |\n")
	p("|---|--:|--:|--:|--:|\n")
	for _, o := range timed {
		s := Summarize(o.Runs[cand])
		busiest := busiestPerJob(o.Runs[cand])
		if !s.OK || busiest <= 0 {
			p("| %s | %s | | | |\n", o.Scenario.Name, cell(s, fmtJobs))
			continue
		}
		// One core is one CPU-second a second.
		p("| %s | %s | %s | %s jobs/s | %s |\n", o.Scenario.Name, fmtJobs(s), FormatLatency(busiest),
			FormatThousands(1/busiest.Seconds()), FormatLatency(s.cpuPerJob()))
	}
	p("\nEach member: the leader, then the followers in the order the run found them (which member led changes from run to run); " +
		"whether the run's connections went to it; its CPU while measuring, over the jobs, and as a share of the members' CPU. Medians over the repetitions.\n\n")
	p("| scenario | member | clients | CPU s | CPU per job | share of CPU |\n")
	p("|---|---|:-:|--:|--:|--:|\n")
	for _, o := range timed {
		ms := memberMedians(o.Runs[cand])
		shares := cpuShares(ms)
		for i, name := range placeNames(len(ms)) {
			m, clients := ms[i], "no"
			if m.Clients {
				clients = "yes"
			}
			if m.Idle > 0 {
				clients += fmt.Sprintf(", %s idle (%s RSS)", FormatThousands(float64(m.Idle)), FormatBytes(int(m.RSS)))
			}
			p("| %s | %s | %s | %.3f | %s | %s |\n", o.Scenario.Name, name, clients, m.CPU.Seconds(), FormatLatency(m.PerJob), shares[i])
		}
	}
}

// eachTime formats, in order, the times of picks from each usable run
// (neither skipped nor with errors, the runs Summarize counts).
func eachTime(runs []Result, of func(Result) []time.Duration) []string {
	var each []string
	for _, r := range usableRuns(runs) {
		for _, d := range of(r) {
			each = append(each, FormatSeconds(d))
		}
	}
	return each
}

// writeCatchUp writes the catch-up scenarios' runs: a member added to
// three holding a backlog, how fast it caught up, the memory each side
// took, and the round trips through the leader meanwhile.
func writeCatchUp(p func(string, ...any), outs []Outcome, cand string) {
	if len(outs) == 0 {
		return
	}
	p("\n### A member catching up\n\n")
	p("A fourth member added (`POST /cluster/members` on the leader, then started with the join string) to three holding a backlog of " +
		"60 KB jobs; it catches up by snapshot. The time runs from its start to its store holding everything the leader had committed " +
		"when it was added; MB/s is the jobs' bodies over that time. Peak RSS is VmHWM (the leader's reset when the member is added). " +
		"The p99 is of put → reserve → delete round trips on one connection through the leader, for the run's duration before the member " +
		"is added (idle) and while it catches up.\n\n")
	p("| scenario | jobs | catch-up | MB/s | new member's peak RSS | ÷ leader's RSS before | leader's RSS before → peak | p99 idle → during | ratio |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, o := range outs {
		for _, r := range o.Runs[cand] {
			cu := r.CatchUp
			if r.Skipped != "" || r.Errors > 0 || cu == nil {
				p("| %s | failed | | | | | | | |\n", o.Scenario.Name)
				continue
			}
			p("| %s | %s | %s | %.0f | %s | %s | %s → %s | %s → %s | %s |\n", o.Scenario.Name, FormatThousands(float64(cu.Jobs)),
				FormatSeconds(cu.Time), cu.MBPerSec(), FormatBytes(int(cu.NewPeakRSS)),
				FormatRatio(float64(cu.NewPeakRSS)/float64(max(cu.LeaderRSS, 1))), FormatBytes(int(cu.LeaderRSS)), FormatBytes(int(cu.LeaderPeakRSS)),
				FormatLatency(cu.IdleP99), FormatLatency(cu.SendP99), FormatRatio(float64(cu.SendP99)/float64(max(cu.IdleP99, 1))))
		}
	}
}

// clusterNote sums up a cluster run for the table of every run: who led
// and where the clients were, or the failovers.
func clusterNote(r Result) string {
	if r.CatchUp != nil && r.Errors == 0 {
		return catchUpLine([]Result{r})
	}
	if g := r.Grow; g != nil && r.Errors == 0 {
		return fmt.Sprintf("spread over %d added in %s, %d removed in %s; lowest %s jobs/s of %s", g.Added, FormatSeconds(g.GrowTime),
			g.Removed, FormatSeconds(g.ShrinkTime), FormatThousands(g.LowestJobsPerSec), FormatThousands(g.BaselineJobsPerSec))
	}
	if len(r.Rebuilds) > 0 {
		each := make([]string, len(r.Rebuilds))
		for i, d := range r.Rebuilds {
			each[i] = FormatSeconds(d)
		}
		return "rebuilds: " + strings.Join(each, ", ")
	}
	if len(r.Failovers) > 0 {
		each := make([]string, len(r.Failovers))
		for i, d := range r.Failovers {
			each[i] = FormatSeconds(d)
		}
		return "failovers: " + strings.Join(each, ", ")
	}
	var leader string
	var clients []string
	for _, m := range r.Members {
		if m.Role == ThroughLeader {
			leader = m.Name
		}
		if m.Clients {
			clients = append(clients, m.Name)
		}
	}
	if leader == "" {
		return ""
	}
	slices.Sort(clients)
	return fmt.Sprintf("leader %s, clients on %s", leader, strings.Join(clients, ", "))
}
