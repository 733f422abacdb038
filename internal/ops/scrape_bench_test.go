package ops_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/store"
)

// BenchmarkScrape10kTubes measures what a scrape of 10,000 tubes (each
// with a job) costs the clients of the real binary: one client does put,
// reserve and delete round trips while /metrics is scraped (b.N scrapes,
// one at a time), and after each scrape for as long again without one, so
// that other load on the machine falls on both alike. It reports the
// scrape time and the worst and 99th-percentile command latencies with
// and without a scrape under way, with the default cap on tubes with their
// own series and with every tube having its own. The server is a process
// of its own, as in production: in this one the clients would compete
// with its event loops for the Go scheduler. Run with:
//
//	go test -run '^$' -bench Scrape10kTubes -benchtime 30x ./internal/ops/
func BenchmarkScrape10kTubes(b *testing.B) {
	const tubes = 10_000
	for _, series := range []int{ops.DefaultTubeSeries, tubes} {
		b.Run(fmt.Sprint("cap=", series), func(b *testing.B) {
			p, metrics := startBinary(b, "--metrics-tubes", fmt.Sprint(series), "--log-level", "warn")
			fillTubes(b, p.Addr(), tubes)
			rt := dial(b, p.Addr())
			rt.do("use rt\r\n")
			rt.do("watch rt\r\n")
			rt.do("ignore default\r\n")
			fetch(b, metrics+"/metrics")            // warm up
			roundTrips(b, rt, 100*time.Millisecond) // and again

			var (
				scrapes      []time.Duration
				during, idle []time.Duration
				size         int
			)
			b.ResetTimer()
			for range b.N {
				done := make(chan struct{})
				start := time.Now()
				go func() {
					defer close(done)
					size = fetch(b, metrics+"/metrics")
				}()
				during = append(during, roundTripsUntil(b, rt, done)...)
				d := time.Since(start)
				scrapes = append(scrapes, d)
				b.StopTimer()
				idle = append(idle, roundTrips(b, rt, d)...)
				b.StartTimer()
			}
			b.StopTimer()
			var total time.Duration
			for _, d := range scrapes {
				total += d
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/scrape")
			b.ReportMetric(float64(slices.Max(scrapes).Milliseconds()), "worst-ms/scrape")
			b.ReportMetric(float64(size)/1e6, "MB/scrape")
			b.ReportMetric(us(slices.Max(during)), "worst-µs/cmd-scraping")
			b.ReportMetric(us(slices.Max(idle)), "worst-µs/cmd-idle")
			b.ReportMetric(us(percentile(during, 0.99)), "p99-µs/cmd-scraping")
			b.ReportMetric(us(percentile(idle, 0.99)), "p99-µs/cmd-idle")
			b.ReportMetric(us(percentile(during, 0.5)), "p50-µs/cmd-scraping")
			b.ReportMetric(us(percentile(idle, 0.5)), "p50-µs/cmd-idle")
			b.Logf("%d scrapes of %.1f MB; commands: %d during scrapes, %d without", b.N, float64(size)/1e6, len(during), len(idle))
		})
	}
}

// BenchmarkScrapeCPU is the CPU time one scrape of 10,000 tubes takes the
// process (server and client; the client asks for gzip and does not
// unpack it), with the default cap on tubes with their own series and with
// all of them having their own. The store is a stand-in, so only the side
// port's own cost is measured. CPU time, unlike the time a scrape takes,
// does not depend on what else the machine is running.
func BenchmarkScrapeCPU(b *testing.B) {
	var tubes []store.TubeStats
	for i := range 10_000 {
		tubes = append(tubes, store.TubeStats{Name: fmt.Sprint("tube-", i), Ready: 1, TotalJobs: 1})
	}
	st := &fakeStore{}
	st.setTubes(tubes...)
	for _, series := range []int{ops.DefaultTubeSeries, len(tubes)} {
		b.Run(fmt.Sprint("cap=", series), func(b *testing.B) {
			base := startOps(b, ops.Config{Engine: newFakeEngine(), Store: st, TubeSeries: series})
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			size := 0
			cpu0 := processCPU()
			for b.Loop() {
				req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				size = int(n)
			}
			cpu := processCPU() - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/scrape")
			b.ReportMetric(float64(size)/1e3, "gzip-kB/scrape")
		})
	}
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fillTubes makes n tubes with a job each, pipelined on one connection.
func fillTubes(b *testing.B, addr string, n int) {
	c := dial(b, addr)
	go func() {
		w := bufio.NewWriter(c.c)
		for i := range n {
			fmt.Fprintf(w, "use tube-%d\r\nput 0 0 60 1\r\nx\r\n", i)
		}
		_ = w.Flush()
	}()
	_ = c.c.SetDeadline(time.Now().Add(time.Minute))
	for range 2 * n {
		if line, err := c.r.ReadString('\n'); err != nil || strings.HasPrefix(line, "OUT_OF") {
			b.Fatalf("filling tubes: %q %v", line, err)
		}
	}
}

// roundTrips runs put, reserve, delete for d and returns every command's
// latency.
func roundTrips(b *testing.B, c *client, d time.Duration) []time.Duration {
	stop := make(chan struct{})
	time.AfterFunc(d, func() { close(stop) })
	return roundTripsUntil(b, c, stop)
}

func roundTripsUntil(b *testing.B, c *client, stop <-chan struct{}) []time.Duration {
	var lat []time.Duration
	timed := func(cmd string) string {
		start := time.Now()
		line := c.do(cmd)
		lat = append(lat, time.Since(start))
		return line
	}
	for {
		select {
		case <-stop:
			return lat
		default:
		}
		var id uint64
		if _, err := fmt.Sscanf(timed("put 0 0 60 3\r\nrt!\r\n"), "INSERTED %d", &id); err != nil {
			b.Fatal(err)
		}
		timed("reserve-with-timeout 0\r\n")
		if line := timed(fmt.Sprintf("delete %d\r\n", id)); line != "DELETED\r\n" {
			b.Fatalf("delete: %q", line)
		}
	}
}

// fetch GETs url and returns the body's size.
func fetch(b *testing.B, url string) int {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %s %v", url, resp.Status, err)
	}
	return int(n)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
