package load

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/wal"
)

// ChurnConfig is a log-size run: Live jobs put and left alone, then Churn
// jobs put and deleted, Depth at a time on one connection, against a
// server started with -b DIR -f SyncMS -s SegmentSize.
type ChurnConfig struct {
	Live, Churn, Body, Depth int
	SyncMS                   int
	SegmentSize              int64
	// Progress, if set, is called about every second with the jobs churned.
	Progress func(churned int)
}

// ChurnResult is the log directory against the live data it holds.
type ChurnResult struct {
	// LiveBytes is the size of the live jobs' records (wal.FullSize each).
	LiveBytes int64
	// Peak is the largest the directory was, sampled every 20 ms; End its
	// size a second after the churn.
	Peak, End int64
	// Bound is what compaction aims at: twice the live data plus two
	// segments, the current one and the preallocated spare included.
	Bound int64
	// Elapsed is the time the churn took, after the live jobs were put.
	Elapsed time.Duration
	// Written and Migrated are the server's binlog-records-written and
	// binlog-records-migrated: the copies compaction made of live jobs.
	Written, Migrated int64
}

// Churn runs cfg against spec in a fresh directory and measures the
// directory. The jobs go to the default tube.
func Churn(ctx context.Context, spec ServerSpec, cfg ChurnConfig) (ChurnResult, error) {
	var res ChurnResult
	if cfg.Depth < 1 || cfg.SegmentSize <= 0 || cfg.Live < 0 || cfg.Churn < 0 || cfg.Body < 0 {
		return res, fmt.Errorf("load: churn: bad configuration %+v", cfg)
	}
	dir, err := os.MkdirTemp("", "sproutbench-churn-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := StartServer(spec, "-b", dir, "-f", strconv.Itoa(cfg.SyncMS), "-s", strconv.FormatInt(cfg.SegmentSize, 10))
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	c, err := testproc.Dialer{Timeout: 5 * time.Second, BufSize: 64 << 10}.Dial(srv.Addr)
	if err != nil {
		return res, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Hour))
	defer context.AfterFunc(ctx, func() { _ = c.Close() })() // an interrupt ends blocked reads

	// The sampler owns peak until stopSampling has waited for it.
	var peak int64
	sampling, cancelSampling := context.WithCancel(context.Background())
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			if n, err := dirSize(dir); err == nil {
				peak = max(peak, n)
			}
			select {
			case <-sampling.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	stopSampling := func() { cancelSampling(); sampler.Wait() }
	defer stopSampling()

	frame := testproc.PutFrame(cfg.Body)
	if err := fill([]*testproc.Conn{c}, newMeter(int64(cfg.Live)), [][]byte{frame}, cfg.Live, cfg.Depth); err != nil {
		return res, fmt.Errorf("load: putting the live jobs: %w", errors.Join(err, ctx.Err()))
	}
	start := time.Now()
	ids := make([]uint64, 0, cfg.Depth)
	lastReport := time.Now()
	for done := 0; done < cfg.Churn; {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		// (I/O errors after an interrupt are the closed connection's.)
		batch := min(cfg.Depth, cfg.Churn-done)
		for range batch {
			c.Write(frame)
		}
		if err := c.Flush(); err != nil {
			return res, err
		}
		ids = ids[:0]
		for range batch {
			rep, err := c.Expect(testproc.ReplyInserted)
			if err != nil {
				return res, err
			}
			ids = append(ids, rep.N)
		}
		for _, id := range ids {
			c.WriteCmdID("delete", id)
		}
		if err := c.Flush(); err != nil {
			return res, err
		}
		for range ids {
			if _, err := c.Expect(testproc.ReplyDeleted); err != nil {
				return res, err
			}
		}
		done += batch
		if cfg.Progress != nil && time.Since(lastReport) > time.Second {
			cfg.Progress(done)
			lastReport = time.Now()
		}
	}
	res.Elapsed = time.Since(start)
	// Compaction goes on by itself after the last write (-f N syncs an
	// idle tail, and each compaction step asks for the next); give it a
	// second.
	time.Sleep(time.Second)
	stopSampling()
	if res.End, err = dirSize(dir); err != nil {
		return res, err
	}
	if res.Written, err = statInt(c, "stats", "binlog-records-written"); err != nil {
		return res, err
	}
	if res.Migrated, err = statInt(c, "stats", "binlog-records-migrated"); err != nil {
		return res, err
	}
	res.Peak = max(peak, res.End)
	res.LiveBytes = int64(cfg.Live) * int64(wal.FullSize(len("default"), cfg.Body+2))
	res.Bound = 2*res.LiveBytes + 2*cfg.SegmentSize
	if report := srv.RaceReport(); report != "" {
		return res, fmt.Errorf("load: the server reported a data race:\n%s", report)
	}
	return res, nil
}

// dirSize sums the sizes of the log's segment files in dir.
func dirSize(dir string) (int64, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "sprout.*.wal"))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil {
			n += fi.Size()
		}
	}
	return n, nil
}
