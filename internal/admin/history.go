package admin

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// History defaults.
const (
	DefaultHistoryInterval = 5 * time.Second
	DefaultHistoryWindow   = time.Hour
	// DefaultHistoryTubes is how many tubes have series of their own:
	// 256 tubes of an hour at 5 s take about 4.4 MB.
	DefaultHistoryTubes = 256
	// OtherTubes names the series that sums the tubes past the cap. '<'
	// is in no tube's name.
	OtherTubes = "<other>"
)

// HistoryConfig says how often figures are sampled and how much is kept.
type HistoryConfig struct {
	// Interval is the time between samples; 0 means
	// DefaultHistoryInterval.
	Interval time.Duration
	// Window is how far back samples are kept; 0 means
	// DefaultHistoryWindow.
	Window time.Duration
	// MaxTubes is how many tubes have series of their own; 0 means
	// DefaultHistoryTubes.
	MaxTubes int
}

// Series kept per tube and for the server: the counts by state, then the
// rates of puts and deletes a second.
var (
	countNames = [...]string{"ready", "reserved", "delayed", "buried"}
	rateNames  = [...]string{"puts", "deletes"}
)

const (
	// noCount marks a point where a series has no value: the tube did not
	// exist (or was not tracked) then. Counts at or above it are kept as
	// noCount-1.
	noCount = math.MaxUint32
)

// series is one tube's (or the server's) points, in a ring shared with
// History.times: the point of sample seq is at seq % len.
type series struct {
	counts [len(countNames)][]uint32 // noCount where absent
	rates  [len(rateNames)][]float32 // NaN where absent
}

func newSeries(size int) *series {
	s := new(series)
	for i := range s.counts {
		s.counts[i] = make([]uint32, size)
		for k := range s.counts[i] {
			s.counts[i][k] = noCount
		}
	}
	for i := range s.rates {
		s.rates[i] = make([]float32, size)
		for k := range s.rates[i] {
			s.rates[i][k] = float32(math.NaN())
		}
	}
	return s
}

// point is one sample's values of a series; a rate is NaN when unknown.
type point struct {
	counts [len(countNames)]uint64
	rates  [len(rateNames)]float64
	absent bool
}

func (s *series) set(slot int, p *point) {
	for i, v := range p.counts {
		if p.absent {
			s.counts[i][slot] = noCount
		} else {
			s.counts[i][slot] = uint32(min(v, noCount-1))
		}
	}
	for i, v := range p.rates {
		if p.absent {
			v = math.NaN()
		}
		s.rates[i][slot] = float32(v)
	}
}

// counters are the totals rates are made from.
type counters struct{ puts, deletes uint64 }

// perSecond is how fast a counter went from prev to cur over dt seconds. A
// counter that went down started again (its tube was freed and made
// anew), from zero.
func perSecond(prev, cur uint64, dt float64) float64 {
	if cur < prev {
		prev = 0
	}
	return float64(cur-prev) / dt
}

// tubeSeries is a tracked tube's history.
type tubeSeries struct {
	*series
	lastSeen uint64 // the latest sample the tube was in
}

// History keeps, in memory, the figures the console charts: every
// Interval, over the last Window, the counts of jobs by state and the rates
// of puts and deletes, for the server and for each of the first MaxTubes
// tubes. Tubes past the cap are summed in one series (OtherTubes); a
// tracked tube that goes away keeps its series until its last point leaves
// the window, and its place then goes to the next new tube. Memory is
// bounded by (MaxTubes + 2) series of Window/Interval points, 24 bytes a
// point.
type History struct {
	interval time.Duration // immutable
	size     int           // immutable: points kept
	maxTubes int           // immutable
	st       *store.Store  // immutable
	// active, if set, says whether to sample now: a cluster member
	// samples only while it serves. Set before start.
	active func() bool
	engine Engine           // immutable
	now    func() time.Time // immutable
	quit   chan struct{}
	done   chan struct{}

	// Only the sampler touches these.
	prevAt      time.Time
	prevServer  counters
	prevTubes   map[string]counters // the tubes of the previous sample
	scratch     []store.TubeStats
	sampledOnce bool
	idle        bool // the last sample was skipped: not active

	mu     sync.Mutex
	seq    uint64                 // guarded by mu: samples taken
	times  []int64                // guarded by mu: unix seconds of each point
	server *series                // guarded by mu
	other  *series                // guarded by mu: the tubes past the cap, summed
	tubes  map[string]*tubeSeries // guarded by mu
}

func newHistory(cfg HistoryConfig, st *store.Store, e Engine, now func() time.Time) *History {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultHistoryInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultHistoryWindow
	}
	if cfg.MaxTubes <= 0 {
		cfg.MaxTubes = DefaultHistoryTubes
	}
	size := max(int(cfg.Window/cfg.Interval), 1)
	return &History{
		interval:  cfg.Interval,
		size:      size,
		maxTubes:  cfg.MaxTubes,
		st:        st,
		engine:    e,
		now:       now,
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		prevTubes: make(map[string]counters),
		times:     make([]int64, size),
		server:    newSeries(size),
		other:     newSeries(size),
		tubes:     make(map[string]*tubeSeries),
	}
}

// start samples at once and then every interval, on a goroutine of its
// own, until stop.
func (h *History) start() {
	go func() {
		defer close(h.done)
		t := time.NewTicker(h.interval)
		defer t.Stop()
		for {
			h.sample()
			select {
			case <-h.quit:
				return
			case <-t.C:
			}
		}
	}()
}

func (h *History) stop() {
	close(h.quit)
	<-h.done
}

// sample reads the figures now: the server's from the engine's stats, each
// tube's through store.EachTube, which holds one tube's lock at a time.
func (h *History) sample() {
	if h.active != nil && !h.active() {
		h.idle = true
		return
	}
	if h.idle {
		h.forget() // a new leadership's history starts empty, as after a restart
		h.idle = false
	}
	st := h.engine.Stats()
	h.scratch = h.scratch[:0]
	h.st.EachTube(func(t *store.TubeStats) { h.scratch = append(h.scratch, *t) })
	h.record(h.now(), &st, h.scratch)
}

// forget drops every point and the figures rates are made from.
func (h *History) forget() {
	h.prevAt, h.prevServer, h.sampledOnce = time.Time{}, counters{}, false
	clear(h.prevTubes)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq = 0
	clear(h.times)
	h.server, h.other = newSeries(h.size), newSeries(h.size)
	clear(h.tubes)
}

// record adds one sample taken at now. Rates need the sample before: the
// first sample has none, and a tube new since the last one counts from
// zero (it was made in between).
func (h *History) record(now time.Time, st *codec.ServerStats, tubes []store.TubeStats) {
	dt := now.Sub(h.prevAt).Seconds()
	haveRates := h.sampledOnce && dt > 0
	server := point{counts: [4]uint64{st.CurrentJobsReady, st.CurrentJobsReserved, st.CurrentJobsDelayed, st.CurrentJobsBuried}}
	cur := counters{puts: st.TotalJobs, deletes: st.Cmd[codec.CmdDelete]}
	server.rates = h.rates(haveRates, h.prevServer, cur, dt)
	h.prevServer = cur

	prevTubes := h.prevTubes
	h.prevTubes = make(map[string]counters, len(tubes))
	points := make([]point, len(tubes))
	for i := range tubes {
		t := &tubes[i]
		cur := counters{puts: t.TotalJobs, deletes: t.CmdDelete}
		prev := prevTubes[t.Name] // zero for a tube new since the last sample
		points[i] = point{
			counts: [4]uint64{uint64(t.Ready), uint64(t.Reserved), uint64(t.Delayed), uint64(t.Buried)},
			rates:  h.rates(haveRates, prev, cur, dt),
		}
		h.prevTubes[t.Name] = cur
	}
	h.prevAt, h.sampledOnce = now, true

	h.mu.Lock()
	defer h.mu.Unlock()
	slot := int(h.seq % uint64(h.size))
	h.times[slot] = now.Unix()
	h.server.set(slot, &server)
	other := point{absent: true}
	for i := range tubes {
		ts := h.tubes[tubes[i].Name]
		if ts == nil && len(h.tubes) < h.maxTubes {
			ts = &tubeSeries{series: newSeries(h.size)}
			h.tubes[tubes[i].Name] = ts
		}
		if ts == nil {
			other.add(&points[i])
			continue
		}
		ts.set(slot, &points[i])
		ts.lastSeen = h.seq
	}
	h.other.set(slot, &other)
	absent := point{absent: true}
	for name, ts := range h.tubes {
		if ts.lastSeen == h.seq {
			continue
		}
		ts.set(slot, &absent)
		// Gone for the whole window: its place goes to the next new tube.
		if h.seq-ts.lastSeen >= uint64(h.size) {
			delete(h.tubes, name)
		}
	}
	h.seq++
}

func (h *History) rates(have bool, prev, cur counters, dt float64) [2]float64 {
	if !have {
		return [2]float64{math.NaN(), math.NaN()}
	}
	return [2]float64{perSecond(prev.puts, cur.puts, dt), perSecond(prev.deletes, cur.deletes, dt)}
}

// add sums q into p, for the tubes past the cap.
func (p *point) add(q *point) {
	p.absent = false
	for i := range p.counts {
		p.counts[i] += q.counts[i]
	}
	for i := range p.rates {
		if math.IsNaN(p.rates[i]) {
			p.rates[i] = 0
		}
		p.rates[i] += q.rates[i]
	}
}

// appendJSONLocked appends the points of s taken after since (unix seconds), as
// a chart wants them: the timestamps, then one array per series, null
// where the series has no value. h.mu must be held.
func (h *History) appendJSONLocked(dst []byte, s *series, since int64) []byte {
	n := min(h.seq, uint64(h.size))
	first := h.seq - n
	for first < h.seq && h.times[first%uint64(h.size)] <= since {
		first++
	}
	if s == nil { // a tube not sampled yet
		first = h.seq
		s = h.server // any series: none of its points is read
	}
	dst = append(dst, `"interval":`...)
	dst = strconv.AppendFloat(dst, h.interval.Seconds(), 'f', -1, 64)
	dst = append(dst, `,"timestamps":[`...)
	for seq := first; seq < h.seq; seq++ {
		if seq > first {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, h.times[seq%uint64(h.size)], 10)
	}
	dst = append(dst, `],"series":{`...)
	for i, name := range countNames {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendString(dst, name), ":["...)
		for seq := first; seq < h.seq; seq++ {
			if seq > first {
				dst = append(dst, ',')
			}
			if v := s.counts[i][seq%uint64(h.size)]; v == noCount {
				dst = append(dst, "null"...)
			} else {
				dst = strconv.AppendUint(dst, uint64(v), 10)
			}
		}
		dst = append(dst, ']')
	}
	for i, name := range rateNames {
		dst = append(appendString(append(dst, ','), name), ":["...)
		for seq := first; seq < h.seq; seq++ {
			if seq > first {
				dst = append(dst, ',')
			}
			if v := s.rates[i][seq%uint64(h.size)]; math.IsNaN(float64(v)) {
				dst = append(dst, "null"...)
			} else {
				dst = strconv.AppendFloat(dst, float64(v), 'f', -1, 32)
			}
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// historySince reads the since parameter: only points taken after it, in
// unix seconds, are answered (a chart that polls asks for what is new).
func historySince(r *http.Request) (int64, error) {
	s := r.URL.Query().Get("since")
	if s == "" {
		return math.MinInt64, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, "since must be a time in unix seconds, not %q", s)
	}
	return v, nil
}

// getServerHistory answers the server's series.
func (a *API) getServerHistory(w http.ResponseWriter, r *http.Request, _ Access) error {
	since, err := historySince(r)
	if err != nil {
		return err
	}
	h := a.history
	h.mu.Lock()
	b := h.appendJSONLocked([]byte{'{'}, h.server, since)
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, append(b, "}\n"...))
	return nil
}

// getTubeHistory answers a tube's series, or those of OtherTubes. A tube
// that exists but is past the cap is 404, saying so.
func (a *API) getTubeHistory(w http.ResponseWriter, r *http.Request, _ Access) error {
	name := r.PathValue("name")
	if name != OtherTubes {
		if _, err := tubeName(r); err != nil {
			return err
		}
	}
	since, err := historySince(r)
	if err != nil {
		return err
	}
	h := a.history
	h.mu.Lock()
	s := h.other
	if ts := h.tubes[name]; ts != nil {
		s = ts.series
	} else if name != OtherTubes {
		full := len(h.tubes) >= h.maxTubes
		h.mu.Unlock()
		switch _, ok := a.store(r.Context()).TubeStats([]byte(name)); {
		case !ok:
			return errNoTube([]byte(name))
		case full:
			return errorf(http.StatusNotFound, "tube %q has no history of its own: %d tubes are tracked already; it is summed under %s",
				name, h.maxTubes, OtherTubes)
		}
		// Made since the last sample: no points yet.
		h.mu.Lock()
		s = nil
	}
	b := appendString([]byte(`{"tube":`), name)
	b = h.appendJSONLocked(append(b, ','), s, since)
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, append(b, "}\n"...))
	return nil
}
