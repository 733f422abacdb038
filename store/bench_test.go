package store_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// nopNotifier is for benchmarks, which never block.
type nopNotifier struct{}

func (nopNotifier) JobReserved(*store.Job)          {}
func (nopNotifier) WaitEnded(r store.ReserveResult) {}

var benchBody = []byte("a job body of some thirty bytes\r\n")

// putReserveDelete is one producer-and-worker round trip.
func putReserveDelete(b *testing.B, s *store.Store, c *store.Client) {
	c.Put(s.NextID(), 0, 0, 60, benchBody)
	j, r := c.Reserve(0)
	if r != store.Reserved {
		b.Fatalf("Reserve(0) = %v", r)
	}
	if !c.Delete(j.ID()) {
		b.Fatal("Delete failed")
	}
}

func BenchmarkPutReserveDelete(b *testing.B) {
	s := store.New(store.Options{})
	defer s.Close()
	c := s.NewClient(nopNotifier{})
	defer c.Close()
	b.ReportAllocs()
	for b.Loop() {
		putReserveDelete(b, s, c)
	}
}

// BenchmarkPutReserveDeleteKeyed is the round trip a shard group's
// leader makes for a router's session: the put and the delete keyed
// (Options.Dedup), so each keeps an entry. The store's clock moves 1 ms a
// round trip, so entries expire as new ones come once the first minute's
// 120,000 are in: the table of a leader that takes 2,000 keyed requests
// a second, in its steady state.
func BenchmarkPutReserveDeleteKeyed(b *testing.B) {
	var now atomic.Int64
	s := store.New(store.Options{Dedup: true, Now: now.Load})
	defer s.Close()
	c := s.NewClient(nopNotifier{})
	defer c.Close()
	key := wal.Req{Incarnation: 1}
	roundTrip := func() {
		now.Add(int64(time.Millisecond))
		key.Number++
		c.PutKeyed(key, 0, 0, 60, benchBody)
		j, r := c.Reserve(0)
		if r != store.Reserved {
			b.Fatalf("Reserve(0) = %v", r)
		}
		key.Number++
		if !c.DeleteKeyed(key, j.ID()) {
			b.Fatal("Delete failed")
		}
	}
	for range store.DedupTTL / time.Millisecond {
		roundTrip()
	}
	b.ReportAllocs()
	for b.Loop() {
		roundTrip()
	}
}

// BenchmarkPutReserveDeleteParallel has one client per goroutine, all on
// "default" (contending for one tube lock) or each on its own tube.
func BenchmarkPutReserveDeleteParallel(b *testing.B) {
	for _, ownTube := range []bool{false, true} {
		name := "shared-tube"
		if ownTube {
			name = "tube-per-client"
		}
		b.Run(name, func(b *testing.B) {
			s := store.New(store.Options{})
			defer s.Close()
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				c := s.NewClient(nopNotifier{})
				defer c.Close()
				if ownTube {
					tube := fmt.Appendf(nil, "t%d", n.Add(1))
					c.Use(tube)
					c.Watch(tube)
					c.Ignore([]byte(store.DefaultTube))
				}
				for pb.Next() {
					putReserveDelete(b, s, c)
				}
			})
		})
	}
}

// BenchmarkPut1Tube and BenchmarkPut10000Tubes put into one tube; in the
// second, 9,999 other tubes exist, each with a ready job, a delayed job
// (so a timer each) and a watcher. Nothing scans all tubes, so the two
// should cost the same.
func BenchmarkPut1Tube(b *testing.B)      { benchmarkPutAmongTubes(b, 1) }
func BenchmarkPut10000Tubes(b *testing.B) { benchmarkPutAmongTubes(b, 10000) }

func benchmarkPutAmongTubes(b *testing.B, tubes int) {
	s := store.New(store.Options{})
	defer s.Close()
	others := s.NewClient(nopNotifier{})
	defer others.Close()
	for i := 1; i < tubes; i++ {
		name := fmt.Appendf(nil, "other-%05d", i)
		others.Use(name)
		others.Watch(name)
		others.Put(s.NextID(), 0, 0, 60, benchBody)
		others.Put(s.NextID(), 0, 3600, 60, benchBody)
	}
	if got := len(s.TubeNames()); got != tubes {
		b.Fatalf("%d tubes, want %d", got, tubes)
	}
	c := s.NewClient(nopNotifier{})
	defer c.Close()
	c.Use([]byte("bench"))
	b.ReportAllocs()
	for b.Loop() {
		c.Put(s.NextID(), 0, 0, 60, benchBody)
	}
}

// BenchmarkStoredJobs puts jobs of 64 bytes (66 with "\r\n", from one
// buffer, as the codec hands over a body that arrives whole) and keeps
// them, reporting the live heap per stored job after a collection
// (live-B/job) and everything allocated per put (alloc-B/job), which sets
// how often the collector runs and so how far the heap grows beyond the
// live jobs. Run with -benchtime=1000000x for the end-to-end jobs-memory
// scenario's size.
func BenchmarkStoredJobs(b *testing.B) {
	s := store.New(store.Options{})
	defer s.Close()
	c := s.NewClient(nopNotifier{})
	defer c.Close()
	payload := append(bytes.Repeat([]byte("x"), 64), "\r\n"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	for b.Loop() {
		c.Put(s.NextID(), 0, 0, 60, payload)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := float64(b.N)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "live-B/job")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "alloc-B/job")
	runtime.KeepAlive(c)
}

// BenchmarkExportTubeChanges is a tube move's freeze at its source: a
// tube of 250,000 jobs copied while it served (ExportTubeCopy), 1% of
// them changed since (reserved and released behind the others), and
// each op the export of what changed (ExportTubeChanges), which the
// tube's lock and the move's pause wait for: from the jobs the tube
// noted changed (noted), or comparing every job (every-job: the note
// ended first, as one past its bound is). The copy is remade, untimed,
// before each op: run it with -benchtime 20x.
func BenchmarkExportTubeChanges(b *testing.B) {
	for _, noted := range []bool{true, false} {
		name := "noted"
		if !noted {
			name = "every-job"
		}
		b.Run(name, func(b *testing.B) { benchmarkExportTubeChanges(b, noted) })
	}
}

func benchmarkExportTubeChanges(b *testing.B, noted bool) {
	const jobs, changed = 250_000, 2_500
	s := store.New(store.Options{})
	defer s.Close()
	c := s.NewClient(nopNotifier{})
	defer c.Close()
	c.Use([]byte("t"))
	c.Watch([]byte("t"))
	for range jobs {
		c.Put(s.NextID(), 1, 0, 60, benchBody)
	}
	discard := func([]byte) error { return nil }
	for b.Loop() {
		b.StopTimer()
		_, since, ok, err := s.ExportTubeCopy([]byte("t"), 16<<20, discard)
		if !ok || err != nil {
			b.Fatal(ok, err)
		}
		for range changed {
			j, r := c.Reserve(0)
			if r != store.Reserved {
				b.Fatalf("Reserve(0) = %v", r)
			}
			if err := c.Release(j.ID(), 2, 0); err != nil {
				b.Fatal(err)
			}
		}
		if !noted {
			s.EndTubeCopy([]byte("t"), since)
		}
		b.StartTimer()
		frames, n, _, _, _, _ := s.ExportTubeChanges([]byte("t"), since)
		if n != jobs || len(frames) == 0 {
			b.Fatalf("the changes: %d jobs, %d bytes", n, len(frames))
		}
	}
}

// BenchmarkDelayExpiry is the timer goroutine making delayed jobs ready:
// each op puts 10,000 jobs delayed a second, a microsecond apart, round
// robin over the tubes (so their deadlines interleave across tubes), on
// a clock moved by hand, then moves it past them all and times the jobs
// becoming ready (ns/job), until a reserve waiting on one more tube gets
// the job put there last. The puts and the jobs' deletion are untimed.
func BenchmarkDelayExpiry(b *testing.B) {
	for _, tubes := range []int{1, 10, 1000} {
		b.Run(fmt.Sprintf("tubes=%d", tubes), func(b *testing.B) { benchmarkDelayExpiry(b, tubes) })
	}
}

// lastJob is the Notifier of the reserve that waits for the last job.
type lastJob chan *store.Job

func (l lastJob) JobReserved(j *store.Job)      { l <- j }
func (lastJob) WaitEnded(r store.ReserveResult) {}

func benchmarkDelayExpiry(b *testing.B, tubes int) {
	const batch = 10_000
	var now atomic.Int64
	s := store.New(store.Options{Now: now.Load})
	defer s.Close()
	c := s.NewClient(nopNotifier{})
	defer c.Close()
	last := make(lastJob, 1)
	w := s.NewClient(last)
	defer w.Close()
	w.Watch([]byte("last"))
	w.Ignore([]byte(store.DefaultTube))
	names := make([][]byte, tubes)
	for i := range names {
		names[i] = fmt.Appendf(nil, "t%d", i)
	}
	ids := make([]uint64, batch)
	for b.Loop() {
		b.StopTimer()
		for i := range batch {
			now.Add(int64(time.Microsecond))
			c.Use(names[i%tubes])
			ids[i] = s.NextID()
			c.Put(ids[i], 0, 1, 60, benchBody)
		}
		now.Add(int64(time.Microsecond))
		c.Use([]byte("last"))
		c.Put(s.NextID(), 0, 1, 60, benchBody)
		if _, r := w.Reserve(-1); r != store.Waiting {
			b.Fatalf("Reserve = %v", r)
		}
		now.Add(2 * int64(time.Second))
		b.StartTimer()
		s.PokeTimers()
		j := <-last
		b.StopTimer()
		w.Delete(j.ID())
		for _, id := range ids {
			c.Delete(id)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/job")
}
