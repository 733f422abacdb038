// Command walchurn measures how large Sprout's log directory grows under
// churn against the live data it holds: it puts -live jobs and leaves them,
// then puts and deletes -churn more, pipelined, and reports the directory's
// peak and final size beside the bound compaction aims at (twice the live
// data plus two segments, the current one and the spare included). It exits
// with status 3 if the peak went more than a segment past that bound.
//
//	go run ./benchmarks/cmd/walchurn -sprout bin/sprout -live 10000 -churn 1000000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/sproutmq/sprout/benchmarks/load"
)

func main() {
	var (
		sprout = flag.String("sprout", "bin/sprout", "Sprout executable")
		cfg    load.ChurnConfig
	)
	flag.IntVar(&cfg.Live, "live", 10_000, "jobs put first and never deleted")
	flag.IntVar(&cfg.Churn, "churn", 1_000_000, "jobs put and deleted after them")
	flag.IntVar(&cfg.Body, "body", 1024, "body size in bytes")
	flag.IntVar(&cfg.Depth, "depth", 100, "commands in flight at once")
	flag.IntVar(&cfg.SyncMS, "f", 50, "the server's -f")
	flag.Int64Var(&cfg.SegmentSize, "s", 10<<20, "the server's -s (segment size)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg.Progress = func(n int) { fmt.Fprintf(os.Stderr, "\rchurned %d of %d", n, cfg.Churn) }
	res, err := load.Churn(ctx, load.ServerSpec{Name: "sprout", Path: *sprout}, cfg)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "walchurn:", err)
		os.Exit(1)
	}
	mib := func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	fmt.Printf("%d live jobs of %d B (%s of records), then %d put+delete in %v with -f %d -s %d:\n",
		cfg.Live, cfg.Body, mib(res.LiveBytes), cfg.Churn, res.Elapsed.Round(1e6), cfg.SyncMS, cfg.SegmentSize)
	over := func(n int64) string {
		return fmt.Sprintf("%+.1f segments", float64(n-res.Bound)/float64(cfg.SegmentSize))
	}
	fmt.Printf("directory at the end %s (%s), at its peak %s (%s); bound 2×live + 2 segments = %s\n",
		mib(res.End), over(res.End), mib(res.Peak), over(res.Peak), mib(res.Bound))
	fmt.Printf("%d records written, %d of them live jobs moved by compaction\n", res.Written, res.Migrated)
	if res.Peak > res.Bound+cfg.SegmentSize {
		fmt.Println("the directory went more than a segment past the bound")
		os.Exit(3)
	}
}
