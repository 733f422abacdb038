package load

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in nanoseconds from 1 ns to a minute, to three
// significant figures.
const (
	histMin     = 1
	histMax     = int64(time.Minute)
	histSigFigs = 3
	// histShards bounds the number of histograms a run allocates (each is a
	// few hundred KiB); workers share them round-robin under a mutex.
	histShards = 64
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMin, histMax, histSigFigs)
}

// The phases of a timed run. Work completed during warm-up is not counted.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// meter is what the workers of one run share: the phase, the counters and
// the latency histograms.
type meter struct {
	phase atomic.Int32
	stop  chan struct{} // closed when phase becomes phaseStop

	measured atomic.Int64 // jobs completed during phaseMeasure
	total    atomic.Int64 // jobs completed in any phase, for the progress display
	sent     atomic.Int64 // puts written, in any phase
	acked    atomic.Int64 // puts answered INSERTED, in any phase
	errs     atomic.Int64 // failures while not stopping
	limit    int64        // immutable: puts allowed in one run

	errMu    sync.Mutex
	firstErr error // guarded by errMu

	emptyOnce sync.Once
	empty     chan struct{} // closed by the first drain worker that finds no job

	hists [histShards]struct {
		mu sync.Mutex
		h  *hdrhistogram.Histogram // guarded by mu
	}
}

func newMeter(limit int64) *meter {
	m := &meter{stop: make(chan struct{}), empty: make(chan struct{}), limit: limit}
	for i := range m.hists {
		m.hists[i].h = newHistogram()
	}
	return m
}

func (m *meter) stopping() bool { return m.phase.Load() == phaseStop }

// limitHit reports that the run has written as many puts as it may.
func (m *meter) limitHit() bool { return m.sent.Load() >= m.limit }

// fail records err, unless the run is stopping and err is a connection being
// cut, which is how the run ends consumers waiting in reserve.
func (m *meter) fail(err error) {
	if err == nil || (m.stopping() && isCut(err)) {
		return
	}
	m.errs.Add(1)
	m.errMu.Lock()
	if m.firstErr == nil {
		m.firstErr = err
	}
	m.errMu.Unlock()
}

func (m *meter) firstError() string {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	if m.firstErr == nil {
		return ""
	}
	return m.firstErr.Error()
}

func (m *meter) signalEmpty() { m.emptyOnce.Do(func() { close(m.empty) }) }

// latency merges the shards into one histogram.
func (m *meter) latency() *hdrhistogram.Histogram {
	all := newHistogram()
	for i := range m.hists {
		s := &m.hists[i]
		s.mu.Lock()
		all.Merge(s.h)
		s.mu.Unlock()
	}
	return all
}

// worker is one goroutine's handle on the meter.
type worker struct {
	m     *meter
	shard int
}

// record adds one latency sample when the run is measuring.
func (w worker) record(d time.Duration) {
	if w.m.phase.Load() != phaseMeasure {
		return
	}
	s := &w.m.hists[w.shard]
	s.mu.Lock()
	_ = s.h.RecordValue(int64(d)) // out of range only past a minute, which the conn deadline forbids
	s.mu.Unlock()
}

// complete counts n finished jobs.
func (w worker) complete(n int64) {
	w.m.total.Add(n)
	if w.m.phase.Load() == phaseMeasure {
		w.m.measured.Add(n)
	}
}

// isCut reports whether err is what a worker sees when the run cuts its
// connection short (a passed deadline or a closed socket).
func isCut(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed)
}
