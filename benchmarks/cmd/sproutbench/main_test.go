package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/benchmarks/load"
	"github.com/sproutmq/sprout/internal/docgen"
)

// TestWriteResults checks that a run leaves only the latest files, under
// the names the READMEs link to, and that -render draws the same report
// again from latest.json.
func TestWriteResults(t *testing.T) {
	rep := load.Report{
		Meta: load.Meta{Started: time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC), Command: "test",
			Base: load.ServerSpec{Name: "beanstalkd"}, Cand: load.ServerSpec{Name: "sprout"}, Reps: 1},
		Outcomes: []load.Outcome{{
			Scenario: load.Scenario{Name: "prodcons-c10", Kind: load.KindProdCons, Conns: 10, Body: 64},
			Runs: map[string][]load.Result{
				"beanstalkd": {{Server: "beanstalkd", Jobs: 30000, Elapsed: time.Second, Samples: 1, P50: time.Microsecond, P99: time.Millisecond, P999: time.Millisecond}},
				"sprout":     {{Server: "sprout", Jobs: 40000, Elapsed: time.Second, Samples: 1, P50: time.Microsecond, P99: time.Millisecond, P999: time.Millisecond}},
			},
		}},
	}
	dir := t.TempDir()
	// A previous run's files are replaced, and nothing else is written.
	if err := os.WriteFile(filepath.Join(dir, "latest.md"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := writeResults(context.Background(), options{out: dir}, rep); err != nil {
		t.Fatal(err)
	}
	want := []string{"latency.svg", "latest.json", "latest.md", "ratio.svg", "resources.svg"}
	if got := listDir(t, dir); !slices.Equal(got, want) {
		t.Fatalf("wrote %v, want %v", got, want)
	}

	again := t.TempDir()
	if err := rerender(context.Background(), options{render: filepath.Join(dir, "latest.json"), out: again}); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, again); !slices.Equal(got, want) {
		t.Fatalf("-render wrote %v, want %v", got, want)
	}
	for _, name := range want {
		a, errA := os.ReadFile(filepath.Join(dir, name))
		b, errB := os.ReadFile(filepath.Join(again, name))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("%s differs after -render (%v, %v)", name, errA, errB)
		}
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

var update = flag.Bool("update", false, "rewrite README.md's headline from results/latest.json (make docs)")

// TestReadmeHeadline: the README's three figures are those of the
// committed results (make bench writes both; make docs rewrites the
// figures from latest.json).
func TestReadmeHeadline(t *testing.T) {
	b, err := os.ReadFile("../../results/latest.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep load.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	text, err := headline(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "**") || !strings.Contains(text, "latest.md") {
		t.Fatalf("headline:\n%s", text)
	}
	docgen.CheckBlock(t, "../../../README.md", headlineBlock, headlineBy, text, *update)
}

// TestHeadlineNeedsItsScenarios: a run of a subset leaves the README alone.
func TestHeadlineNeedsItsScenarios(t *testing.T) {
	if _, err := headline(load.Report{Meta: load.Meta{Base: load.ServerSpec{Name: "beanstalkd"},
		Cand: load.ServerSpec{Name: "sprout"}}}); !errors.Is(err, errNoHeadline) {
		t.Errorf("headline of an empty report: %v, want errNoHeadline", err)
	}
}
