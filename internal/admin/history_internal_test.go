package admin

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// chart is a history's JSON, decoded.
type chart struct {
	Interval   float64
	Timestamps []int64
	Series     map[string][]*float64
}

func readChart(t *testing.T, h *History, s *series, since int64) chart {
	t.Helper()
	h.mu.Lock()
	b := append(h.appendJSONLocked([]byte{'{'}, s, since), '}')
	h.mu.Unlock()
	var c chart
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for name, points := range c.Series {
		if len(points) != len(c.Timestamps) {
			t.Fatalf("%s: %d points, %d timestamps", name, len(points), len(c.Timestamps))
		}
	}
	return c
}

// values turns a series into numbers, NaN for null.
func values(points []*float64) []float64 {
	out := make([]float64, len(points))
	for i, p := range points {
		out[i] = math.NaN()
		if p != nil {
			out[i] = *p
		}
	}
	return out
}

func same(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !(math.IsNaN(a[i]) && math.IsNaN(b[i])) {
			return false
		}
	}
	return true
}

var nan = math.NaN()

// TestHistory: counts and rates per tube and for the server; a tube that
// goes away keeps its points for the window and then its place; tubes
// past the cap are summed under <other>; a counter that starts again (a
// tube made anew) counts from zero.
func TestHistory(t *testing.T) {
	h := newHistory(HistoryConfig{Interval: 5 * time.Second, Window: 20 * time.Second, MaxTubes: 2}, nil, nil, time.Now)
	t0 := time.Unix(1_000_000, 0)
	tube := func(name string, ready int, puts, deletes uint64) store.TubeStats {
		return store.TubeStats{Name: name, Ready: ready, TotalJobs: puts, CmdDelete: deletes}
	}
	server := func(ready, puts, deletes uint64) *codec.ServerStats {
		st := &codec.ServerStats{CurrentJobsReady: ready, TotalJobs: puts}
		st.Cmd[codec.CmdDelete] = deletes
		return st
	}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 5 * time.Second) }
	h.record(at(0), server(10, 100, 0), []store.TubeStats{tube("a", 10, 100, 0)})
	h.record(at(1), server(20, 150, 0), []store.TubeStats{tube("a", 10, 100, 0), tube("b", 10, 50, 0)})
	h.record(at(2), server(25, 200, 25), []store.TubeStats{tube("a", 5, 100, 5), tube("b", 10, 50, 0), tube("c", 10, 50, 20)})
	h.record(at(3), server(10, 200, 40), []store.TubeStats{tube("b", 5, 50, 5), tube("c", 5, 50, 25)}) // a gone
	h.record(at(4), server(15, 205, 40), []store.TubeStats{tube("a", 5, 5, 0), tube("b", 5, 50, 5), tube("c", 5, 50, 25)})

	c := readChart(t, h, h.server, math.MinInt64)
	if c.Interval != 5 || len(c.Timestamps) != 4 || c.Timestamps[0] != at(1).Unix() || c.Timestamps[3] != at(4).Unix() {
		t.Fatalf("server: interval %v, timestamps %v (the window holds 4)", c.Interval, c.Timestamps)
	}
	for name, want := range map[string][]float64{
		"ready":   {20, 25, 10, 15},
		"puts":    {10, 10, 0, 1},
		"deletes": {0, 5, 3, 0},
	} {
		if got := values(c.Series[name]); !same(got, want) {
			t.Errorf("server %s: %v, want %v", name, got, want)
		}
	}

	h.mu.Lock()
	a, b, tracked := h.tubes["a"], h.tubes["b"], len(h.tubes)
	h.mu.Unlock()
	if a == nil || b == nil || tracked != 2 {
		t.Fatalf("tracked %d tubes, want a and b", tracked)
	}
	ca := readChart(t, h, a.series, math.MinInt64)
	for name, want := range map[string][]float64{
		// Gone at 3; back at 4 as a new tube, its counter from zero.
		"ready":   {10, 5, nan, 5},
		"puts":    {0, 0, nan, 1},
		"deletes": {0, 1, nan, 0},
	} {
		if got := values(ca.Series[name]); !same(got, want) {
			t.Errorf("a %s: %v, want %v", name, got, want)
		}
	}
	// b was new at 1: its first rate counts from zero.
	if got := values(readChart(t, h, b.series, math.MinInt64).Series["puts"]); !same(got, []float64{10, 0, 0, 0}) {
		t.Errorf("b puts: %v", got)
	}
	// c is past the cap of two: summed under <other>.
	co := readChart(t, h, h.other, math.MinInt64)
	for name, want := range map[string][]float64{
		"ready":   {nan, 10, 5, 5},
		"puts":    {nan, 10, 0, 0},
		"deletes": {nan, 4, 1, 0},
	} {
		if got := values(co.Series[name]); !same(got, want) {
			t.Errorf("<other> %s: %v, want %v", name, got, want)
		}
	}
	// since: only what is newer.
	if got := readChart(t, h, h.server, at(3).Unix()); len(got.Timestamps) != 1 || got.Timestamps[0] != at(4).Unix() {
		t.Errorf("since: %v", got.Timestamps)
	}

	// b goes away: it keeps its points for the window, then its place
	// goes to c.
	for i := 5; i < 9; i++ {
		h.record(at(i), server(5, 205, 40), []store.TubeStats{tube("c", 5, 50, 25)})
		h.mu.Lock()
		_, kept := h.tubes["b"]
		_, cTracked := h.tubes["c"]
		h.mu.Unlock()
		if wantKept := i < 8; kept != wantKept || cTracked {
			t.Fatalf("sample %d: b kept %v, c tracked %v", i, kept, cTracked)
		}
	}
	h.record(at(9), server(5, 205, 40), []store.TubeStats{tube("c", 5, 50, 25)})
	h.mu.Lock()
	_, cTracked := h.tubes["c"]
	h.mu.Unlock()
	if !cTracked {
		t.Fatal("c did not take b's place")
	}
}
