// Command adminbench measures what the admin API's clear of a large tube
// does to the protocol's latency: it puts -jobs jobs into tube bulk, then
// times put/reserve/delete round trips on tube probe for -idle with
// nothing else running, and again while POST /api/v1/tubes/bulk/clear
// deletes them all, and reports the p99 of both and their ratio. It exits
// with status 3 when the ratio is over -goal.
//
//	go run ./benchmarks/cmd/adminbench -sprout bin/sprout -jobs 1000000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/sproutmq/sprout/benchmarks/load"
)

func main() {
	var (
		sprout = flag.String("sprout", "bin/sprout", "Sprout executable")
		goal   = flag.Float64("goal", 2, "the largest acceptable ratio of the p99s")
		cfg    load.AdminClearConfig
	)
	flag.IntVar(&cfg.Jobs, "jobs", 1_000_000, "jobs put into the tube that is cleared")
	flag.IntVar(&cfg.Body, "body", 64, "their body size in bytes")
	flag.IntVar(&cfg.Depth, "depth", 100, "puts in flight at once while filling")
	flag.DurationVar(&cfg.Idle, "idle", 3*time.Second, "how long the idle round trips are measured")
	flag.BoolVar(&cfg.Durable, "durable", false, "run the server with -b (a fresh directory)")
	flag.IntVar(&cfg.SyncMS, "f", 50, "with -durable, the server's -f")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg.Progress = func(step string) { fmt.Fprintln(os.Stderr, step) }
	res, err := load.AdminClear(ctx, load.ServerSpec{Name: "sprout", Path: *sprout}, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "adminbench:", err)
		os.Exit(1)
	}
	show := func(name string, s load.LatencySummary) {
		fmt.Printf("%-22s %8d round trips  p50 %8v  p99 %8v  max %8v\n", name, s.Count,
			s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond), s.Max.Round(time.Microsecond))
	}
	mode := "in memory"
	if cfg.Durable {
		mode = fmt.Sprintf("-b, -f %d", cfg.SyncMS)
	}
	fmt.Printf("clear of %d jobs of %d B (%s): deleted %d in %v\n", cfg.Jobs, cfg.Body, mode, res.Deleted, res.Took.Round(time.Millisecond))
	show("idle", res.Idle)
	show("during the clear", res.During)
	ratio := float64(res.During.P99) / float64(res.Idle.P99)
	fmt.Printf("p99 ratio %.2f× (goal ≤ %.1f×)\n", ratio, *goal)
	if ratio > *goal {
		os.Exit(3)
	}
}
