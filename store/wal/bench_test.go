package wal_test

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// BenchmarkAppendSync measures group commit: parallel appenders (1, 8 and
// 64 per GOMAXPROCS) each append a put-sized record and wait until it is
// durable, with SyncEvery 0 (fsync before every acknowledgement), as
// connections do under -f 0. It reports records/s, the commits' p99
// latency, and fsyncs and batches per record: how well commits are
// grouped, as the Observer counts them, since a batch may be written while
// the last one's fsync runs.
func BenchmarkAppendSync(b *testing.B) {
	for _, perProc := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("appenders=%d", perProc*runtime.GOMAXPROCS(0)), func(b *testing.B) {
			benchAppend(b, wal.Options{SegmentSize: 64 << 20}, perProc)
		})
	}
}

// BenchmarkAppendNoSync is BenchmarkAppendSync under -F: without fsyncs
// to wait for, the writer goroutine's own cost per batch shows in batches
// per record.
func BenchmarkAppendNoSync(b *testing.B) {
	for _, perProc := range []int{1, 64} {
		b.Run(fmt.Sprintf("appenders=%d", perProc*runtime.GOMAXPROCS(0)), func(b *testing.B) {
			benchAppend(b, wal.Options{SegmentSize: 64 << 20, NoSync: true}, perProc)
		})
	}
}

// BenchmarkAppendSyncEvery is BenchmarkAppendSync under -f 1: a commit
// is acknowledged once written, and the writer fsyncs every millisecond,
// so that a good share of the commits arrive while an fsync runs: their
// p99 latency shows what it costs them if the writes wait for it.
func BenchmarkAppendSyncEvery(b *testing.B) {
	for _, perProc := range []int{8, 64} {
		b.Run(fmt.Sprintf("appenders=%d", perProc*runtime.GOMAXPROCS(0)), func(b *testing.B) {
			benchAppend(b, wal.Options{SegmentSize: 64 << 20, SyncEvery: time.Millisecond}, perProc)
		})
	}
}

// counts is an Observer that counts batches and fsyncs.
type counts struct{ batches, syncs atomic.Int64 }

func (c *counts) ObserveBatch(int, int)       { c.batches.Add(1) }
func (c *counts) ObserveSync(d time.Duration) { c.syncs.Add(1) }

func benchAppend(b *testing.B, opts wal.Options, perProc int) {
	var n counts
	opts.Observer = &n
	l, err := wal.Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Start(nopMigrator{}); err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var ids atomic.Uint64
	body := []byte("a job body of some thirty bytes\r\n")
	var mu sync.Mutex
	var latencies []time.Duration // guarded by mu
	b.SetParallelism(perProc)
	b.ResetTimer()
	n.batches.Store(0)
	n.syncs.Store(0)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		done := make(chan struct{}, 1)
		var took []time.Duration
		r := wal.Record{Kind: wal.KindFull, Tube: "default", State: wal.StateReady, TTR: int64(time.Minute), Body: body}
		for pb.Next() {
			r.ID = ids.Add(1)
			began := time.Now()
			lsn, _, err := l.Append(&r, wal.Loc{})
			if err != nil {
				b.Error(err)
				return
			}
			l.OnDurable(lsn, func() { done <- struct{}{} })
			<-done
			took = append(took, time.Since(began))
		}
		mu.Lock()
		latencies = append(latencies, took...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	if len(latencies) > 0 {
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(n.syncs.Load())/float64(b.N), "fsyncs/record")
	b.ReportMetric(float64(n.batches.Load())/float64(b.N), "batches/record")
}

type nopMigrator struct{}

func (nopMigrator) Migrate(uint32, []uint64) {}

// BenchmarkAppend measures what a store pays per record on its hot path,
// under a tube lock: encoding a put-sized record into the batch and the
// log's mutex, with the writer writing batches meanwhile (-F, so no fsync
// paces it), no one waiting for them.
func BenchmarkAppend(b *testing.B) {
	l, err := wal.Open(b.TempDir(), wal.Options{SegmentSize: 1 << 30, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Start(nopMigrator{}); err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := wal.Record{Kind: wal.KindFull, Tube: "default", State: wal.StateReady, TTR: int64(time.Minute),
		Body: []byte("a job body of some thirty bytes\r\n")}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.ID = uint64(i + 1)
		if _, _, err := l.Append(&r, wal.Loc{}); err != nil {
			b.Fatal(err)
		}
	}
}
