package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sproutmq/sprout/benchmarks/load"
	"github.com/sproutmq/sprout/internal/docgen"
)

// The README's headline block: three figures of the latest run, written
// by a run that writes the repository's results (make bench) and checked
// against latest.json by TestReadmeHeadline.
const (
	headlineBlock = "headline"
	headlineBy    = "sproutbench (make bench)"
)

// errNoHeadline says a report lacks a scenario the headline needs (a run
// of a subset, -only).
var errNoHeadline = errors.New("sproutbench: the run lacks a scenario of the README's headline")

// headline writes the README's three figures from rep: Sprout ÷ beanstalkd
// in memory at 10+10 connections, durable at -f 0, and a cluster of three
// through its leader against beanstalkd at -f 0, with its failover.
func headline(rep load.Report) (string, error) {
	base, cand := rep.Meta.Base.Name, rep.Meta.Cand.Name
	runs := make(map[string]load.Outcome)
	for _, o := range rep.Outcomes {
		runs[o.Scenario.Name] = o
	}
	jobs := func(scenario, server string) (float64, error) {
		s := load.Summarize(runs[scenario].Runs[server])
		if !s.OK || s.JobsPerSec <= 0 {
			return 0, fmt.Errorf("%w: %s on %s", errNoHeadline, scenario, server)
		}
		return s.JobsPerSec, nil
	}
	var figures [6]float64
	for i, q := range []struct{ scenario, server string }{
		{"prodcons-c10", cand}, {"prodcons-c10", base},
		{"durable-f0-c100", cand}, {"durable-f0-c100", base},
		{"cluster-prodcons-c100-leader", cand}, {"durable-f0-c100", base},
	} {
		v, err := jobs(q.scenario, q.server)
		if err != nil {
			return "", err
		}
		figures[i] = v
	}
	failover := load.Summarize(runs["cluster-failover"].Runs[cand])
	if !failover.OK {
		return "", fmt.Errorf("%w: cluster-failover", errNoHeadline)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "- **%s** beanstalkd's jobs/s, 10 producers and 10 consumers, jobs in memory\n",
		load.FormatRatio(figures[0]/figures[1]))
	fmt.Fprintf(&b, "- **%s** beanstalkd's jobs/s with every change fsynced before it is acknowledged (`-b -f 0`, 100 + 100 connections)\n",
		load.FormatRatio(figures[2]/figures[3]))
	fmt.Fprintf(&b, "- **%s** beanstalkd's `-f 0` jobs/s through a cluster of three whose majority fsyncs every change; "+
		"from a `kill -9` of its leader to the next put acknowledged: %s (median of ten)\n",
		load.FormatRatio(figures[4]/figures[5]), load.FormatSeconds(failover.FailoverMedian))
	fmt.Fprintf(&b, "\n`make bench` on %s, %s against %s on one machine (%s) that the load generator shares: "+
		"[every figure](benchmarks/results/latest.md), [the method](docs/performance.md).\n",
		rep.Meta.Started.UTC().Format("2006-01-02"), firstWord(rep.Meta.CandVersion, cand), rep.Meta.BaseVersion,
		firstWord(rep.Meta.Host, "unknown"))
	return b.String(), nil
}

// firstWord is s up to its first comma, or def for an empty s.
func firstWord(s, def string) string {
	if s == "" {
		return def
	}
	s, _, _ = strings.Cut(s, ",")
	s, _, _ = strings.Cut(s, " (")
	return s
}

// writeHeadline rewrites the headline block of the README at root with
// rep's figures.
func writeHeadline(root string, rep load.Report) (string, error) {
	text, err := headline(rep)
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	_, replaced, err := docgen.ReplaceBlock(string(b), headlineBlock, headlineBy, text)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return path, os.WriteFile(path, []byte(replaced), 0o644)
}
