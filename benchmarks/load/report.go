package load

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Meta describes the machine and settings of one benchmark.
type Meta struct {
	Started   time.Time
	Command   string
	Host      string // CPU model and count, memory, kernel
	GoVersion string
	// Base and Cand are the reference server and Sprout, with the line
	// each prints for -v.
	Base, Cand               ServerSpec
	BaseVersion, CandVersion string
	// BaseFrom says how the reference server was found (testproc.FindReference),
	// or that -beanstalkd named it; empty in reports from before it was kept.
	BaseFrom         string `json:",omitempty"`
	Reps             int
	Warmup, Duration time.Duration
	FileLimit        int
	// GenCPUs are the CPUs the generator ran on with -pin (the servers'
	// are in Base.CPUs and Cand.CPUs); empty when nothing was pinned.
	GenCPUs []int `json:",omitempty"`
}

// cpusSentence says where the servers and the generator ran.
func cpusSentence(meta Meta) string {
	if len(meta.GenCPUs) == 0 || len(meta.Cand.CPUs) == 0 {
		return "The load generator, written in Go, shares the machine's CPUs with the server under test."
	}
	return fmt.Sprintf("Pinned (-pin): each server ran on CPUs %v and the load generator, written in Go, on CPUs %v, "+
		"so neither waited for a core the other held.", meta.Cand.CPUs, meta.GenCPUs)
}

// Report is a whole benchmark's data, as written to the results' JSON files
// so that the markdown and charts can be rendered again (-render).
type Report struct {
	Meta     Meta
	Outcomes []Outcome
}

// ChartNames are the file names of one report's charts.
type ChartNames struct {
	Ratio, Latency, Resources string
}

// WriteMarkdown writes the report: goals, then one table per kind of figure,
// then every run.
func WriteMarkdown(w io.Writer, meta Meta, outs []Outcome, charts ChartNames) error {
	b, c := meta.Base.Name, meta.Cand.Name
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }

	p("# Sprout vs beanstalkd, same machine, same run\n\n")
	p("Run %s on %s; %s.\n", meta.Started.UTC().Format("2006-01-02 15:04 MST"), meta.Host, meta.GoVersion)
	if meta.BaseFrom != "" {
		p("Servers: `%s` (%s: `%s`; %s) and `%s` (%s).\n", b, meta.BaseVersion, meta.Base.Path, meta.BaseFrom, c, meta.CandVersion)
	} else {
		p("Servers: `%s` (%s) and `%s` (%s).\n", b, meta.BaseVersion, c, meta.CandVersion)
	}
	p("Command: `%s`.\n\n", meta.Command)
	p("Each figure is the median of %d repetitions that alternate the servers (%s, %s, %s, %s, …); "+
		"repetitions go round the whole list of scenarios, so drift in the machine's speed weighs on all alike; "+
		"every run starts its server fresh on a free loopback port and kills it by PID afterwards, "+
		"then warms up for %v and measures for %v. "+
		"Ratios are %s ÷ %s from the same benchmark; for jobs/s above 1 means Sprout is faster, "+
		"for latency, CPU and memory below 1 means Sprout uses less. %s\n\n",
		meta.Reps, b, c, b, c, meta.Warmup, meta.Duration, c, b, cpusSentence(meta))
	if med, hi := otherLoad(outs); hi > 0 {
		p("Other processes kept a median %.2f and at most %.2f of the machine's cores busy during a measured run "+
			"(machine busy time from /proc/stat less the server's and the generator's).\n\n", med, hi)
	}
	if charts.Ratio != "" {
		p("![Throughput, %s ÷ %s](%s)\n\n", c, b, charts.Ratio)
	}
	if charts.Latency != "" {
		p("![Latency percentiles](%s)\n\n", charts.Latency)
	}
	if charts.Resources != "" {
		p("![Server CPU and memory, %s ÷ %s](%s)\n\n", c, b, charts.Resources)
	}

	p("## Goals\n\n")
	p("| goal | %s | compared with | ratio | target | met |\n|---|--:|--:|--:|:-:|:-:|\n", c)
	goals := EvaluateGoals(outs, b, c)
	var selfGoals []GoalRow
	for _, g := range goals {
		with := " (" + b + ")"
		switch {
		case g.Absolute:
			with = ""
		case g.AgainstBase:
			with = " (" + b + " on " + g.Against + ")"
		case g.Against != "":
			with = " (" + c + " on " + g.Against + ")"
			if g.BaseOwn != "" {
				selfGoals = append(selfGoals, g)
			}
		}
		p("| %s | %s | %s%s | %s | %s | %s |\n", g.Text, g.Sprout, g.Base, with, g.RatioText(), g.TargetText(), g.Met)
	}
	if len(selfGoals) > 0 {
		p("\nThe goals that set Sprout against itself, with %s's figures on the same two scenarios (no target):\n\n", b)
		p("| goal | %s | compared with | ratio |\n|---|--:|--:|--:|\n", b)
		for _, g := range selfGoals {
			p("| %s | %s | %s (%s on %s) | %s |\n", g.Text, g.BaseOwn, g.BaseAgainst, b, g.Against, FormatRatio(g.BaseRatio))
		}
	}

	timed, memory := splitOutcomes(outs)
	if len(timed) > 0 {
		p("\n## Throughput (jobs/s)\n\n")
		p("| scenario | %s | %s | ratio |\n|---|--:|--:|--:|\n", b, c)
		for _, o := range timed {
			sb, sc := Summarize(o.Runs[b]), Summarize(o.Runs[c])
			p("| %s | %s | %s | %s |\n", o.Scenario.Name, cell(sb, fmtJobs), cell(sc, fmtJobs), ratioCell(sc, sb, MetricJobsPerSec))
		}

		p("\n## Latency\n\n")
		p("What one sample covers is listed under Scenarios below.\n\n")
		p("| scenario | p50 %s | p50 %s | p99 %s | p99 %s | p99 ratio | p99.9 %s | p99.9 %s |\n", b, c, b, c, b, c)
		p("|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, o := range timed {
			sb, sc := Summarize(o.Runs[b]), Summarize(o.Runs[c])
			q := func(s Summary, d time.Duration) string {
				if !s.OK {
					return cell(s, nil)
				}
				return FormatLatency(d)
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", o.Scenario.Name,
				q(sb, sb.P50), q(sc, sc.P50), q(sb, sb.P99), q(sc, sc.P99), ratioCell(sc, sb, MetricP99), q(sb, sb.P999), q(sc, sc.P999))
		}

		p("\n## Server CPU and memory\n\n")
		p("CPU is the server's user+system time (from /proc/PID/stat) while measuring, per 100,000 jobs; RSS is VmRSS at the end of the run.\n\n")
		p("| scenario | CPU s/100k %s | CPU s/100k %s | ratio | RSS %s | RSS %s |\n|---|--:|--:|--:|--:|--:|\n", b, c, b, c)
		for _, o := range timed {
			sb, sc := Summarize(o.Runs[b]), Summarize(o.Runs[c])
			p("| %s | %s | %s | %s | %s | %s |\n", o.Scenario.Name, cell(sb, fmtCPU), cell(sc, fmtCPU), ratioCell(sc, sb, MetricCPU), cell(sb, fmtRSS), cell(sc, fmtRSS))
		}
	}
	if len(memory) > 0 {
		p("\n## Memory per connection and per job\n\n")
		p("RSS growth (VmRSS from /proc/PID/status, after a %v pause) over the server's RSS just after start, divided by the connections or jobs held.\n\n", settle)
		p("| scenario | items | %s | %s | ratio | %s RSS | %s RSS |\n|---|--:|--:|--:|--:|--:|--:|\n", b, c, b, c)
		for _, o := range memory {
			sb, sc := Summarize(o.Runs[b]), Summarize(o.Runs[c])
			items := FormatThousands(math.Max(sb.Items, sc.Items))
			p("| %s | %s | %s | %s | %s | %s | %s |\n", o.Scenario.Name, items, cell(sb, fmtPerItem), cell(sc, fmtPerItem),
				ratioCell(sc, sb, MetricPerItem), cell(sb, fmtRSS), cell(sc, fmtRSS))
		}
		for _, o := range memory {
			if o.Scenario.Kind == KindJobMemory {
				sb, sc := Summarize(o.Runs[b]), Summarize(o.Runs[c])
				p("\nFilling %s with pipelined puts ran at %s (%s) and %s (%s) jobs/s.\n", o.Scenario.Name, cell(sb, fmtJobs), b, cell(sc, fmtJobs), c)
			}
		}
	}
	writeCluster(p, outs, c)

	p("\n## Scenarios\n\n")
	for _, o := range outs {
		s := o.Scenario
		p("- `%s`: %s", s.Name, s.Title)
		if s.timed() {
			p("; latency sample: %s", s.Timed())
		}
		if len(s.ServerArgs) > 0 {
			p("; server flags `%s`", strings.Join(s.ServerArgs, " "))
		}
		p(".\n")
	}
	p("\nJobs/s counts completed jobs: deletes for producer/consumer, drain and round trips, acknowledged puts for put-only and pipelined. "+
		"Producer/consumer keeps at most %d jobs per producer outstanding, so the queue stays short.\n", backlogPerConn)

	p("\n## Every run\n\n<details><summary>%d scenarios × %d repetitions × 2 servers</summary>\n\n", len(outs), meta.Reps)
	p("| scenario | server | rep | jobs/s | p50 | p99 | p99.9 | CPU s/100k | RSS | per item | puts sent/acked | generator cores | other cores | note |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, o := range outs {
		for _, name := range []string{b, c} {
			for i, r := range o.Runs[name] {
				note := r.Skipped
				if r.Errors > 0 {
					note = fmt.Sprintf("%d errors: %s", r.Errors, mdEscape(firstLine(r.FirstError)))
				}
				per := "—"
				if r.Items > 0 && !o.Scenario.timed() {
					per = FormatThousands(r.PerItem) + " B"
				}
				if note == "" {
					note = clusterNote(r)
				}
				if note == "" && o.Scenario.Idle > 0 && r.Items < int64(o.Scenario.Idle) {
					note = fmt.Sprintf("%s idle connections, not %s (open-file limit %d)",
						FormatThousands(float64(r.Items)), FormatThousands(float64(o.Scenario.Idle)), meta.FileLimit)
				}
				gen, other := "—", "—"
				if r.Elapsed > 0 && o.Scenario.timed() {
					gen = strconv.FormatFloat(r.GenCPU.Seconds()/r.Elapsed.Seconds(), 'f', 2, 64)
					other = strconv.FormatFloat(r.OtherCPU.Seconds()/r.Elapsed.Seconds(), 'f', 2, 64)
				}
				p("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s/%s | %s | %s | %s |\n", o.Scenario.Name, name, i+1,
					FormatThousands(r.JobsPerSec()), FormatLatency(r.P50), FormatLatency(r.P99), FormatLatency(r.P999),
					strconv.FormatFloat(r.CPUPer100k(), 'f', 3, 64), FormatBytes(int(r.RSS)), per, FormatThousands(float64(r.Sent)), FormatThousands(float64(r.Acked)),
					gen, other, note)
			}
		}
	}
	p("\n</details>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

// otherLoad returns the median and the largest number of cores that other
// processes kept busy during the timed runs.
func otherLoad(outs []Outcome) (med, hi float64) {
	var cores []float64
	for _, o := range outs {
		for _, rs := range o.Runs {
			for _, r := range rs {
				if r.Skipped == "" && r.Elapsed > 0 && o.Scenario.timed() {
					c := r.OtherCPU.Seconds() / r.Elapsed.Seconds()
					cores = append(cores, c)
					hi = math.Max(hi, c)
				}
			}
		}
	}
	return median(cores), hi
}

func splitOutcomes(outs []Outcome) (timed, memory []Outcome) {
	for _, o := range outs {
		switch {
		case o.Scenario.timed():
			timed = append(timed, o)
		case o.Scenario.Kind == KindIdle, o.Scenario.Kind == KindJobMemory:
			memory = append(memory, o)
		}
	}
	return timed, memory
}

func fmtJobs(s Summary) string    { return FormatThousands(s.JobsPerSec) }
func fmtCPU(s Summary) string     { return strconv.FormatFloat(s.CPUPer100k, 'f', 3, 64) }
func fmtRSS(s Summary) string     { return FormatBytes(int(s.RSS)) }
func fmtPerItem(s Summary) string { return FormatThousands(s.PerItem) + " B" }

// cell formats a summary's figure, or says why there is none.
func cell(s Summary, f func(Summary) string) string {
	switch {
	case s.Skipped != "":
		return s.Skipped
	case !s.OK && s.Failed > 0:
		return "failed"
	case !s.OK:
		return "—"
	}
	return f(s)
}

// ratioCell writes cand's figure over base's, bold when it is on Sprout's
// good side of 1.
func ratioCell(cand, base Summary, m Metric) string {
	if !cand.OK || !base.OK {
		return "—"
	}
	r := ratio(m.of(cand), m.of(base))
	if math.IsNaN(r) {
		return "—"
	}
	good := r > 1
	if m != MetricJobsPerSec {
		good = r < 1
	}
	if good {
		return "**" + FormatRatio(r) + "**"
	}
	return FormatRatio(r)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 160 {
		line = line[:160] + "…"
	}
	return line
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// WriteRatioTable writes the short summary printed at the end of a run: one
// line per scenario with its main figure on each server and the ratio.
func WriteRatioTable(w io.Writer, outs []Outcome, base, cand string) {
	fmt.Fprintf(w, "%-20s %16s %16s %9s\n", "scenario", base, cand, "ratio")
	for _, o := range outs {
		sb, sc := Summarize(o.Runs[base]), Summarize(o.Runs[cand])
		m, f, unit := MetricJobsPerSec, fmtJobs, " jobs/s"
		switch {
		case o.Scenario.Kind == KindFailover:
			m, f, unit = MetricFailoverMedian, func(s Summary) string { return FormatSeconds(s.FailoverMedian) }, " failover median"
		case o.Scenario.Kind == KindCatchUp:
			m, f, unit = MetricCatchUpTime, func(s Summary) string { return FormatSeconds(s.CatchUpTime) }, " catch-up"
		case o.Scenario.Kind == KindRebuild:
			m, f, unit = MetricRebuildMax, func(s Summary) string { return FormatSeconds(s.RebuildMax) }, " worst rebuild"
		case !o.Scenario.timed():
			m, f, unit = MetricPerItem, func(s Summary) string { return FormatThousands(s.PerItem) }, " B/item"
		}
		r := "—"
		if sb.OK && sc.OK {
			r = FormatRatio(ratio(m.of(sc), m.of(sb)))
		}
		fmt.Fprintf(w, "%-20s %16s %16s %9s%s\n", o.Scenario.Name, short(cell(sb, f)), short(cell(sc, f)), r, unit)
	}
}

func short(s string) string {
	if len(s) > 16 {
		return s[:15] + "…"
	}
	return s
}
