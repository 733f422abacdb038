// Command sproutbench runs Sprout and C beanstalkd (the 1.13 release built
// from the shared folder beside the clone, else Debian's 1.12 on PATH) side by
// side on this machine, alternating them, and writes a report of the ratios
// with charts to benchmarks/results.
//
//	go run ./benchmarks/cmd/sproutbench            # short runs: make bench
//	go run ./benchmarks/cmd/sproutbench -full      # every scenario, longer: make bench-full
//	go run ./benchmarks/cmd/sproutbench -list      # the scenarios
//	go run ./benchmarks/cmd/sproutbench -only 'prodcons|roundtrip' -reps 5
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sproutmq/sprout/benchmarks/load"
	"github.com/sproutmq/sprout/internal/testproc"
)

type options struct {
	sprout, beanstalkd string
	baseName           string
	sproutArgs         string
	memberLogs         string
	full               bool
	reps               int
	duration, warmup   time.Duration
	only, with         string
	list               bool
	out                string
	progress           bool
	idleConns, jobs    int
	moveBacklog        int
	command            string
	render             string
	quiet              float64
	quietWait          time.Duration
	pin                bool
}

func main() {
	load.RunHolderIfAsked() // a child holding idle connections, not the bench
	var o options
	flag.StringVar(&o.sprout, "sprout", "", "Sprout executable; default: go build ./cmd/sprout into a temporary directory")
	flag.StringVar(&o.beanstalkd, "beanstalkd", "", "beanstalkd executable; default: $SPROUT_REF_BEANSTALKD, else the 1.13 release built by ../shared/tools/build-beanstalkd-1.13.sh, else beanstalkd on PATH")
	flag.StringVar(&o.baseName, "base-name", "beanstalkd", "what to call the -beanstalkd server in the report (for example nullqueue, see make bench-ceiling)")
	flag.StringVar(&o.memberLogs, "member-logs", "", "write each cluster member's output (its last start, up to 64 MiB) into this directory when its cluster stops")
	flag.StringVar(&o.sproutArgs, "sprout-args", "", "extra flags for Sprout, space-separated (for example \"--loops 1\"); for a cluster's members, {node} becomes each one's name")
	flag.BoolVar(&o.full, "full", false, "every scenario (1,000 connections, idle connections, 1M jobs) and longer runs")
	flag.IntVar(&o.reps, "reps", 0, "repetitions per server and scenario; default 3, or 5 with -full")
	flag.DurationVar(&o.duration, "duration", 0, "measured time per run; default 2s, or 5s with -full")
	flag.DurationVar(&o.warmup, "warmup", 0, "unmeasured time before each run; default 300ms, or 1s with -full")
	flag.StringVar(&o.only, "only", "", "run only scenarios whose name matches this regular expression, from the whole list")
	flag.StringVar(&o.with, "with", "", "also run the long-run scenarios whose name matches this regular expression (for example 'idle-conns|jobs-memory')")
	flag.BoolVar(&o.list, "list", false, "list the scenarios and exit")
	flag.StringVar(&o.out, "out", "", "results directory, where latest.md, latest.json and the charts are replaced; default benchmarks/results in the module; \"-\" writes no files")
	flag.BoolVar(&o.progress, "progress", false, "draw progress on stderr even when it is not a terminal")
	flag.IntVar(&o.idleConns, "idle-conns", 0, "connections for idle-conns; default as many as the open-file limit allows")
	flag.IntVar(&o.jobs, "jobs", 1_000_000, "jobs stored by jobs-memory")
	flag.IntVar(&o.moveBacklog, "move-backlog", 20_000, "jobs the moving tube holds in cluster-g3-move-backlog-N (N is this count: 20k by default)")
	flag.StringVar(&o.command, "command", "", "how this run was started, for the report; default the command line")
	flag.Float64Var(&o.quiet, "quiet", 0.5, "before each run, wait until other processes keep at most this many cores busy; 0 does not wait")
	flag.DurationVar(&o.quietWait, "quiet-wait", 5*time.Second, "the longest -quiet waits before a run")
	flag.BoolVar(&o.pin, "pin", false, "run each server on CPU 0 and the generator on the other CPUs (Linux), so that neither waits for a core the other holds")
	flag.StringVar(&o.render, "render", "", "run nothing: write the report and charts again from this results JSON file, into its directory unless -out is given")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sproutbench: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "sproutbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.render != "" {
		return rerender(ctx, o)
	}
	scenarios, err := choose(o)
	if err != nil {
		return err
	}
	if o.list {
		for _, s := range scenarios {
			only := ""
			if s.Full {
				only = "  (with -full or -with)"
			}
			fmt.Printf("%-20s %s%s\n", s.Name, s.Title, only)
		}
		return nil
	}
	if len(scenarios) == 0 {
		return fmt.Errorf("no scenario matches -only %q (see -list)", o.only)
	}
	setDefaults(&o)
	limit, err := load.RaiseFileLimit()
	if err != nil {
		return fmt.Errorf("open-file limit: %w", err)
	}

	baseFrom := "named by -beanstalkd"
	if o.beanstalkd == "" {
		// The differential tests' reference, found the same way.
		ref, notes, err := testproc.FindReference()
		for _, n := range notes {
			fmt.Fprintln(os.Stderr, "reference server: passed over", n)
		}
		if err != nil {
			return err
		}
		o.beanstalkd, baseFrom = ref.Path, ref.From
	}
	if o.sprout == "" {
		dir, err := os.MkdirTemp("", "sproutbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "building Sprout …")
		// Without the race detector whatever this binary was built with:
		// the benchmarks measure the server.
		o.sprout = filepath.Join(dir, "sprout")
		if err := testproc.BuildSprout(ctx, o.sprout, false); err != nil {
			return err
		}
	}
	base := load.ServerSpec{Name: o.baseName, Path: o.beanstalkd}
	cand := load.ServerSpec{Name: "sprout", Path: o.sprout, Args: strings.Fields(o.sproutArgs), MemberLogs: o.memberLogs}
	var genCPUs []int
	if o.pin {
		if runtime.NumCPU() < 2 {
			return fmt.Errorf("-pin needs at least 2 CPUs; this machine has %d", runtime.NumCPU())
		}
		for c := 1; c < runtime.NumCPU(); c++ {
			genCPUs = append(genCPUs, c)
		}
		if err := load.PinProcess(os.Getpid(), genCPUs); err != nil {
			return err
		}
		base.CPUs, cand.CPUs = []int{0}, []int{0}
	}

	// Sprout serves TLS itself; anything else gets stunnel in front.
	cand.NativeTLS = true
	base.NativeTLS = strings.HasPrefix(load.Version(base.Path), "sprout ")
	meta := load.Meta{
		Started: time.Now(), Command: o.command, Host: load.HostInfo(), GoVersion: runtime.Version(),
		Base: base, Cand: cand, BaseVersion: load.Version(base.Path), CandVersion: load.Version(cand.Path), BaseFrom: baseFrom,
		Reps: o.reps, Warmup: o.warmup, Duration: o.duration, FileLimit: limit, GenCPUs: genCPUs,
	}
	if len(cand.Args) > 0 {
		meta.CandVersion += ", flags " + o.sproutArgs
	}
	fmt.Fprintf(os.Stderr, "%s: %s (%s; %s)\n", base.Name, base.Path, meta.BaseVersion, baseFrom)
	plan := load.Plan{
		Servers:   []load.ServerSpec{base, cand},
		Scenarios: scenarios,
		Reps:      o.reps,
		Run:       load.RunConfig{Warmup: o.warmup, Duration: o.duration, FileLimit: limit},
		Progress:  load.NewProgress(os.Stderr, o.progress || load.IsTerminal(os.Stderr)),
		Quiet:     o.quiet,
		QuietWait: o.quietWait,
	}
	outs, runErr := plan.Execute(ctx)
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "interrupted; partial results follow and no files are written")
		load.WriteRatioTable(os.Stdout, outs, base.Name, cand.Name)
		return runErr
	}

	load.WriteRatioTable(os.Stdout, outs, base.Name, cand.Name)
	fmt.Println()
	if base.Name != "beanstalkd" {
		fmt.Printf("(the goals are set against beanstalkd, so none is judged against %s)\n", base.Name)
	} else {
		for _, g := range load.EvaluateGoals(outs, base.Name, cand.Name) {
			fmt.Printf("goal %-52s %14s vs %-14s %7s  %s  %s\n", g.Text, g.Sprout, g.Base, g.RatioText(), g.TargetText(), g.Met)
			if g.BaseOwn != "" {
				fmt.Printf("     %-52s %14s vs %-14s %7s  (%s against itself)\n", "", g.BaseOwn, g.BaseAgainst, load.FormatRatio(g.BaseRatio), base.Name)
			}
		}
	}
	if o.out != "-" {
		paths, err := writeResults(ctx, o, load.Report{Meta: meta, Outcomes: outs})
		if err != nil {
			return err
		}
		fmt.Println()
		for _, p := range paths {
			fmt.Println("wrote", p)
		}
	}
	failed := 0
	for _, out := range outs {
		for _, rs := range out.Runs {
			for _, r := range rs {
				if r.Errors > 0 {
					failed++
				}
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d runs failed; their errors are in the report's last table", failed)
	}
	return nil
}

// choose picks the scenarios: with -only, any that match from the whole
// catalogue; otherwise the short list, or all of them with -full.
func choose(o options) ([]load.Scenario, error) {
	drain := 300_000
	if o.full {
		drain = 1_000_000
	}
	all := load.Catalogue(load.Sizes{IdleConns: o.idleConns, Jobs: o.jobs, DrainJobs: drain, MoveBacklog: o.moveBacklog})
	var only, with *regexp.Regexp
	for _, f := range []struct {
		name, expr string
		re         **regexp.Regexp
	}{{"-only", o.only, &only}, {"-with", o.with, &with}} {
		if f.expr == "" {
			continue
		}
		re, err := regexp.Compile(f.expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.re = re
	}
	var out []load.Scenario
	for _, s := range all {
		switch {
		case only != nil && !only.MatchString(s.Name):
		case only == nil && s.Full && !o.full && !o.list && (with == nil || !with.MatchString(s.Name)):
		default:
			out = append(out, s)
		}
	}
	return out, nil
}

func setDefaults(o *options) {
	reps, dur, warm := 3, 2*time.Second, 300*time.Millisecond
	if o.full {
		reps, dur, warm = 5, 5*time.Second, time.Second
	}
	if o.reps <= 0 {
		o.reps = reps
	}
	if o.duration <= 0 {
		o.duration = dur
	}
	if o.warmup <= 0 {
		o.warmup = warm
	}
	// The report names the command a person typed (-command, from the
	// Makefile) and the generator's own arguments, quoted for a shell.
	var args []string
	for i := 1; i < len(os.Args); i++ {
		a := os.Args[i]
		if a == "-command" || a == "--command" {
			i++
			continue
		}
		if strings.HasPrefix(a, "-command=") || strings.HasPrefix(a, "--command=") {
			continue
		}
		args = append(args, shellQuote(a))
	}
	line := strings.Join(append([]string{"sproutbench"}, args...), " ")
	if o.command == "" {
		o.command = line
	} else {
		o.command += "`, running `" + line
	}
}

// rerender writes the report and charts again from a results JSON file.
func rerender(ctx context.Context, o options) error {
	b, err := os.ReadFile(o.render)
	if err != nil {
		return err
	}
	var rep load.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", o.render, err)
	}
	if o.out == "" {
		o.out = filepath.Dir(o.render)
	}
	paths, err := writeResults(ctx, o, rep)
	for _, p := range paths {
		fmt.Println("wrote", p)
	}
	return err
}

// writeResults writes the report, its data and its charts as latest.md,
// latest.json, ratio.svg, latency.svg and resources.svg, the names the
// READMEs link to, replacing the previous run's. Only the latest run is
// kept: git holds the earlier ones. Written into the repository (no -out),
// the run also rewrites the README's headline figures (headline), when it
// has their scenarios.
func writeResults(ctx context.Context, o options, rep load.Report) ([]string, error) {
	dir, root := o.out, ""
	if dir == "" {
		var err error
		if root, err = load.ModuleRoot(ctx); err != nil {
			return nil, fmt.Errorf("%w (or pass -out)", err)
		}
		dir = filepath.Join(root, "benchmarks", "results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	meta, outs := rep.Meta, rep.Outcomes
	b, c := meta.Base.Name, meta.Cand.Name
	names := load.ChartNames{Ratio: "ratio.svg", Latency: "latency.svg", Resources: "resources.svg"}
	var md strings.Builder
	if err := load.WriteMarkdown(&md, meta, outs, names); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(rep, "", "\t")
	if err != nil {
		return nil, err
	}
	files := []struct {
		name    string
		content []byte
	}{
		{names.Ratio, []byte(load.RatioSVG(outs, b, c))},
		{names.Latency, []byte(load.LatencySVG(outs, b, c))},
		{names.Resources, []byte(load.ResourcesSVG(outs, b, c))},
		{"latest.md", []byte(md.String())},
		{"latest.json", append(data, '\n')},
	}
	var paths []string
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, f.content, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	if root != "" {
		// The repository's results: the README quotes them.
		p, err := writeHeadline(root, rep)
		switch {
		case errors.Is(err, errNoHeadline):
			fmt.Fprintf(os.Stderr, "sproutbench: README.md's headline left as it was: %v\n", err)
		case err != nil:
			return paths, err
		default:
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// shellQuote quotes a for a POSIX shell when it needs it.
func shellQuote(a string) string {
	if a != "" && strings.IndexFunc(a, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r == ',' ||
			'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) < 0 {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}
