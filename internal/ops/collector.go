package ops

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// Engine is what the side port reads of the engine; *engine.Server has it.
type Engine interface {
	Stats() codec.ServerStats
	// Limits may only be read once Ready is closed.
	Limits() engine.Limits
	// TLSStats are the TLS client port's figures; false without one.
	TLSStats() (engine.TLSStats, bool)
	Ready() <-chan struct{}
	Draining() bool
	Ping(ctx context.Context) error
}

// Store is what the side port reads of the store; *store.Store has it.
type Store interface {
	EachTube(fn func(st *store.TubeStats))
	LogStats() (wal.Stats, bool)
}

// DefaultTubeSeries is how many tubes get their own series by default.
const DefaultTubeSeries = 1000

// OtherTube is the tube label under which the tubes past the cap are
// summed. Tube names may hold letters, digits and -+/;.$_(), so "_other"
// could be a real tube; '<' can never be in one.
const OtherTube = "<other>"

// jobStates are the state label's values, in stats order. Urgent jobs are
// a subset of ready ones, so they have a metric of their own rather than a
// state that sums would count twice.
var jobStates = [...]string{"ready", "reserved", "delayed", "buried"}

// scalar is one figure read at scrape time: unlabelled, or with the
// labels its collector gives the values of (as clusterCollector does
// each group's).
type scalar[F any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(f *F) float64
}

func newScalar[F any](name, help string, kind prometheus.ValueType, value func(f *F) float64, labels ...string) scalar[F] {
	return scalar[F]{prometheus.NewDesc(name, help, labels, nil), kind, value}
}

// collectScalars sends each of scalars read from f, with labels as the
// values of the labels its desc has, if any.
func collectScalars[F any](ch chan<- prometheus.Metric, scalars []scalar[F], f *F, labels ...string) {
	for _, s := range scalars {
		ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(f), labels...)
	}
}

// tubeFigure is one per-tube figure.
type tubeFigure struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(f *tubeFigures) float64
}

// collector reads the engine's and the store's figures at scrape time.
// Its fields are immutable after newCollector but otherCounters, which
// has its own lock; Collect may run on several goroutines at once.
type collector struct {
	engine Engine
	store  Store
	// tubeSeries is how many tubes get their own series: the first ones
	// in list-tubes order (see collectTubes).
	tubeSeries int

	// logStats, if set, are the log's figures in place of the store's
	// (Config.Log: a cluster member's shared log).
	logStats func() wal.Stats

	// queue are the figures of stats that are the queue's (jobs, tubes),
	// and stats the server's own (connections, uptime, …). With groups
	// the queue's, jobs, tubeJobs, tubes and otherTubes carry a group
	// label besides their own (groups.go).
	queue  []scalar[codec.ServerStats]
	stats  []scalar[codec.ServerStats]
	limits []scalar[engine.Limits]
	log    []scalar[wal.Stats]

	commands, jobs, buildInfo *prometheus.Desc
	tubeJobs                  *prometheus.Desc
	tubes                     []tubeFigure
	otherTubes                *prometheus.Desc

	otherCounters otherCounters
	// kept keeps a cluster member's counters of the queue from going
	// down when its store is rebuilt; nil on a single server, and with
	// groups, whose figures each group's keeps (groupFigures).
	kept *keptCounters
	// groups, if set, are the groups of a cluster of several, whose
	// leaders export their queue figures (groups.go); byGroup keeps each
	// group's counters.
	groups  Groups
	byGroup groupCounters
}

// newCollector reads e's and s's figures; with groups (a cluster of
// several groups), the queue's are those of the groups this member
// leads, each labelled with its group, and s's are not read.
func newCollector(e Engine, s Store, tubeSeries int, groups Groups) *collector {
	const (
		counter = prometheus.CounterValue
		gauge   = prometheus.GaugeValue
	)
	type stats = codec.ServerStats
	// The queue's figures' labels: with groups, each has a group label
	// too, last.
	var group []string
	ofGroup := ""
	if groups != nil {
		group = []string{"group"}
		ofGroup = ", of the group this member leads"
	}
	tube := append([]string{"tube"}, group...)
	c := &collector{
		engine:     e,
		store:      s,
		tubeSeries: tubeSeries,
		groups:     groups,
		commands: prometheus.NewDesc("sprout_commands_total",
			"Commands received, by command (stats cmd-*).", []string{"command"}, nil),
		jobs: prometheus.NewDesc("sprout_current_jobs",
			"Jobs in each state (stats current-jobs-*)"+ofGroup+".", append([]string{"state"}, group...), nil),
		buildInfo: prometheus.NewDesc("sprout_build_info",
			"Always 1; the version is a label.", []string{"version"}, nil),
		tubeJobs: prometheus.NewDesc("sprout_tube_current_jobs",
			"Jobs in each state in a tube (stats-tube current-jobs-*).", append([]string{"tube", "state"}, group...), nil),
		otherTubes: prometheus.NewDesc("sprout_other_tubes",
			`Tubes past the --metrics-tubes cap, whose figures are summed under tube="`+OtherTube+`"`+ofGroup+".", group, nil),
	}
	c.queue = []scalar[stats]{
		newScalar("sprout_current_jobs_urgent", "Ready jobs with a priority below 1024 (stats current-jobs-urgent)"+ofGroup+".",
			gauge, func(s *stats) float64 { return float64(s.CurrentJobsUrgent) }, group...),
		newScalar("sprout_job_timeouts_total", "Reservations that ran out of time to run (stats job-timeouts)"+ofGroup+".",
			counter, func(s *stats) float64 { return float64(s.JobTimeouts) }, group...),
		newScalar("sprout_jobs_total", "Jobs created (stats total-jobs)"+ofGroup+".",
			counter, func(s *stats) float64 { return float64(s.TotalJobs) }, group...),
		newScalar("sprout_current_tubes", "Tubes that exist (stats current-tubes)"+ofGroup+".",
			gauge, func(s *stats) float64 { return float64(s.CurrentTubes) }, group...),
	}
	c.stats = []scalar[stats]{
		newScalar("sprout_max_job_size_bytes", "Largest body a put may carry (stats max-job-size).",
			gauge, func(s *stats) float64 { return float64(s.MaxJobSize) }),
		newScalar("sprout_current_connections", "Open connections (stats current-connections).",
			gauge, func(s *stats) float64 { return float64(s.CurrentConnections) }),
		newScalar("sprout_connections_total", "Connections opened (stats total-connections).",
			counter, func(s *stats) float64 { return float64(s.TotalConnections) }),
		newScalar("sprout_current_producers", "Open connections that have put a job (stats current-producers).",
			gauge, func(s *stats) float64 { return float64(s.CurrentProducers) }),
		newScalar("sprout_current_workers", "Open connections that have reserved a job (stats current-workers).",
			gauge, func(s *stats) float64 { return float64(s.CurrentWorkers) }),
		newScalar("sprout_current_waiting", "Connections waiting in a reserve (stats current-waiting).",
			gauge, func(s *stats) float64 { return float64(s.CurrentWaiting) }),
		newScalar("sprout_uptime_seconds", "Seconds since the server started (stats uptime).",
			gauge, func(s *stats) float64 { return float64(s.Uptime) }),
		newScalar("sprout_draining", "1 in drain mode (SIGUSR1), when puts are refused (stats draining).",
			gauge, func(s *stats) float64 { return bit(s.Draining) }),
	}
	type limits = engine.Limits
	c.limits = []scalar[limits]{
		newScalar("sprout_max_connections", "Connections open at which new ones are closed at once (--max-connections).",
			gauge, func(l *limits) float64 { return float64(l.MaxConnections) }),
		newScalar("sprout_connections_refused_total", "Connections closed at once because --max-connections were open.",
			counter, func(l *limits) float64 { return float64(l.Refused) }),
		newScalar("sprout_connections_shed_total", "Connections closed or left waiting for want of file descriptors.",
			counter, func(l *limits) float64 { return float64(l.Shed) }),
		newScalar("sprout_connections_evicted_total", "Connections closed to bring buffer memory back under its budget.",
			counter, func(l *limits) float64 { return float64(l.Evicted) }),
		newScalar("sprout_connections_tls_on_plaintext_total", "Connections to the plaintext client port closed for beginning a TLS handshake.",
			counter, func(l *limits) float64 { return float64(l.TLSOnPlaintext) }),
		newScalar("sprout_connections_fenced_total", "Connections closed instead of being handed a job while this cluster member's lease was not confirmed.",
			counter, func(l *limits) float64 { return float64(l.Fenced) }),
		newScalar("sprout_buffer_bytes", "Bytes held for connections: unread replies, unparsed input, partial bodies, replies waiting for the log.",
			gauge, func(l *limits) float64 { return float64(l.BufferHeld) }),
		newScalar("sprout_buffer_budget_bytes", "Budget for the bytes held for connections (--max-buffer-memory).",
			gauge, func(l *limits) float64 { return float64(l.MaxBufferMemory) }),
		newScalar("sprout_received_bytes_total", "Bytes of commands and job bodies received and parsed.",
			counter, func(l *limits) float64 { return float64(l.BytesIn) }),
		newScalar("sprout_sent_bytes_total", "Bytes of replies handed to the sockets.",
			counter, func(l *limits) float64 { return float64(l.BytesOut) }),
	}
	type logStats = wal.Stats
	c.log = []scalar[logStats]{
		newScalar("sprout_binlog_oldest_index", "Number of the oldest write-ahead log segment (stats binlog-oldest-index).",
			gauge, func(l *logStats) float64 { return float64(l.OldestIndex) }),
		newScalar("sprout_binlog_current_index", "Number of the segment being written (stats binlog-current-index).",
			gauge, func(l *logStats) float64 { return float64(l.CurrentIndex) }),
		newScalar("sprout_binlog_records_written_total", "Records appended to the write-ahead log (stats binlog-records-written).",
			counter, func(l *logStats) float64 { return float64(l.RecordsWritten) }),
		newScalar("sprout_binlog_records_migrated_total", "Records moved forward by compaction (stats binlog-records-migrated).",
			counter, func(l *logStats) float64 { return float64(l.RecordsMigrated) }),
		newScalar("sprout_binlog_max_size_bytes", "Size of each segment (stats binlog-max-size, -s).",
			gauge, func(l *logStats) float64 { return float64(l.MaxSize) }),
		newScalar("sprout_binlog_disk_bytes", "Bytes the segments take on disk.",
			gauge, func(l *logStats) float64 { return float64(l.DiskBytes) }),
		newScalar("sprout_binlog_live_bytes", "Bytes of the records of live jobs.",
			gauge, func(l *logStats) float64 { return float64(l.LiveBytes) }),
		newScalar("sprout_binlog_room_bytes", "Bytes kept on disk for the live jobs' deletes (DIR/sprout.room), given up to them when the disk fills.",
			gauge, func(l *logStats) float64 { return float64(l.RoomBytes) }),
	}
	newTube := func(name, help string, kind prometheus.ValueType, value func(f *tubeFigures) float64) tubeFigure {
		return tubeFigure{prometheus.NewDesc(name, help, tube, nil), kind, value}
	}
	c.tubes = []tubeFigure{
		newTube("sprout_tube_current_jobs_urgent", "Ready jobs with a priority below 1024 in a tube.",
			gauge, func(f *tubeFigures) float64 { return f.urgent }),
		newTube("sprout_tube_current_waiting", "Connections waiting in a reserve that watches a tube.",
			gauge, func(f *tubeFigures) float64 { return f.waiting }),
		newTube("sprout_tube_current_using", "Connections using a tube.",
			gauge, func(f *tubeFigures) float64 { return f.using }),
		newTube("sprout_tube_current_watching", "Connections watching a tube.",
			gauge, func(f *tubeFigures) float64 { return f.watching }),
		newTube("sprout_tube_paused", "1 while a tube is paused (pause-tube); under "+OtherTube+", how many are.",
			gauge, func(f *tubeFigures) float64 { return f.paused }),
		newTube("sprout_tube_jobs_total", "Jobs put into a tube (stats-tube total-jobs).",
			counter, func(f *tubeFigures) float64 { return f.totalJobs }),
		newTube("sprout_tube_deletes_total", "Delete commands on a tube's jobs (stats-tube cmd-delete).",
			counter, func(f *tubeFigures) float64 { return f.deletes }),
	}
	return c
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.commands
	ch <- c.jobs
	ch <- c.buildInfo
	ch <- c.tubeJobs
	ch <- c.otherTubes
	for _, s := range slices.Concat(c.queue, c.stats) {
		ch <- s.desc
	}
	for _, s := range c.limits {
		ch <- s.desc
	}
	for _, s := range c.log {
		ch <- s.desc
	}
	for _, f := range c.tubes {
		ch <- f.desc
	}
}

// Collect implements prometheus.Collector: it reads every figure now.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	var st codec.ServerStats
	if c.groups != nil {
		st = c.engine.Stats()
		if w, ok := c.groups.(waiter); ok {
			st.CurrentWaiting = uint64(w.Waiting())
		}
	} else {
		gain := true
		if c.kept != nil {
			gain = c.kept.scrape()
			// A rebuild begun during the walk of the tubes may have left
			// some out: they are not forgotten.
			defer func() { c.kept.done(gain && c.kept.sameEpoch()) }()
		}
		// Read in the scrape's turn: a figure read before it, by a scrape
		// that took its turn after another's, would set the counters'
		// last figure back, and the next scrape count the gain again.
		st = c.engine.Stats()
		if c.kept != nil {
			c.kept.stats(&st, gain)
		}
		collectScalars(ch, c.queue, &st)
		c.collectJobs(ch, &st)
		c.collectTubes(ch, c.store.EachTube, &c.otherCounters, c.kept, gain)
	}
	collectScalars(ch, c.stats, &st)
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, st.Version)
	for i, n := range st.Cmd {
		name := strings.TrimPrefix(codec.Counter(i).String(), "cmd-")
		ch <- prometheus.MustNewConstMetric(c.commands, prometheus.CounterValue, float64(n), name)
	}
	select {
	case <-c.engine.Ready():
		l := c.engine.Limits()
		collectScalars(ch, c.limits, &l)
	default:
	}
	if c.logStats != nil {
		ls := c.logStats()
		collectScalars(ch, c.log, &ls)
	} else if ls, ok := c.store.LogStats(); ok {
		collectScalars(ch, c.log, &ls)
	}
	if c.groups != nil {
		c.collectGroups(ch)
	}
}

// collectJobs sends sprout_current_jobs, by state, of st; group, if
// given, is the value of the group label.
func (c *collector) collectJobs(ch chan<- prometheus.Metric, st *codec.ServerStats, group ...string) {
	for i, n := range [len(jobStates)]uint64{st.CurrentJobsReady, st.CurrentJobsReserved, st.CurrentJobsDelayed, st.CurrentJobsBuried} {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(n), append([]string{jobStates[i]}, group...)...)
	}
}

// collectTubes sends the per-tube series. The first tubeSeries tubes in
// list-tubes order get their own; the rest are summed under OtherTube, so
// a server with a tube per customer or per request id cannot flood the
// time-series database. That order is creation order, except that a freed
// tube's slot goes to the newest tube: so "default" (created first, never
// freed) always has its own series, and a tube that has its own keeps it
// for as long as it exists, rather than flipping in and out of OtherTube
// from one scrape to the next as a name order would make it.
//
// The counters of OtherTube are kept by oc, since a plain sum would drop
// each time a tube past the cap was freed. kept, if set, keeps the
// tubes' own counters (a cluster member's); gain is false while a
// cluster member's store is rebuilt or just was (keptCounters): its
// tubes' counters then gain nothing.
//
// each walks the tubes: the store's EachTube, or with groups the tubes
// a group counts (Groups), and group is then that group's label value,
// the cap counting each group's tubes.
func (c *collector) collectTubes(ch chan<- prometheus.Metric, each func(fn func(*store.TubeStats)), oc *otherCounters, kept *keptCounters, gain bool, group ...string) {
	var other tubeFigures
	seen, summed := 0, 0
	oc.mu.Lock()
	defer oc.mu.Unlock()
	each(func(t *store.TubeStats) {
		seen++
		if seen > c.tubeSeries {
			other.add(t)
			oc.noteLocked(t, gain)
			summed++
			return
		}
		var f tubeFigures
		f.add(t)
		if kept != nil {
			kept.tube(t.Name, &f, gain)
		}
		c.sendTube(ch, t.Name, &f, group...)
	})
	if !gain {
		carryOver(oc.next, oc.last)
	}
	oc.last, oc.next = oc.next, oc.last
	clear(oc.next)
	if oc.shown {
		other.totalJobs, other.deletes = float64(oc.total.jobs), float64(oc.total.deletes)
		c.sendTube(ch, OtherTube, &other, group...)
	}
	ch <- prometheus.MustNewConstMetric(c.otherTubes, prometheus.GaugeValue, float64(summed), group...)
}

// sendTube sends a tube's series; group, if given, is the value of the
// group label.
func (c *collector) sendTube(ch chan<- prometheus.Metric, name string, f *tubeFigures, group ...string) {
	// The metrics copy the label values: one slice serves every state.
	labels := append([]string{name, ""}, group...)
	for i, n := range f.jobs {
		labels[1] = jobStates[i]
		ch <- prometheus.MustNewConstMetric(c.tubeJobs, prometheus.GaugeValue, n, labels...)
	}
	labels = append(labels[:1], group...)
	for _, fig := range c.tubes {
		ch <- prometheus.MustNewConstMetric(fig.desc, fig.kind, fig.value(f), labels...)
	}
}

// otherCounters keeps the counters of OtherTube monotonic. Summed afresh
// at each scrape, they would drop whenever a tube past the cap was freed
// (or got its own series), and Prometheus would read each drop as a
// counter reset and count the whole sum again. Instead each scrape adds
// what every tube past the cap gained since the last scrape; a tube seen
// there for the first time adds all it has.
type otherCounters struct {
	mu    sync.Mutex
	last  map[string]tubeCounts // guarded by mu: the tubes past the cap at the last scrape
	next  map[string]tubeCounts // guarded by mu: this scrape's, becoming last
	total tubeCounts            // guarded by mu: what is reported
	// shown is set once a tube has been past the cap: from then on the
	// series of OtherTube are always sent, so its counters never vanish.
	shown bool // guarded by mu
}

type tubeCounts struct{ jobs, deletes uint64 }

// noteLocked adds what t gained since the last scrape, if gain (see
// collectTubes). mu must be held.
func (o *otherCounters) noteLocked(t *store.TubeStats, gain bool) {
	if o.next == nil {
		o.last, o.next = make(map[string]tubeCounts), make(map[string]tubeCounts)
	}
	now := tubeCounts{t.TotalJobs, t.CmdDelete}
	gained := now
	if prev, ok := o.last[t.Name]; !gain {
		gained = tubeCounts{}
	} else if ok && now.jobs >= prev.jobs && now.deletes >= prev.deletes {
		// Otherwise the tube was freed and made again since.
		gained = tubeCounts{now.jobs - prev.jobs, now.deletes - prev.deletes}
	}
	o.total.jobs += gained.jobs
	o.total.deletes += gained.deletes
	o.next[t.Name] = now
	o.shown = true
}

// tubeFigures are one tube's figures, or the sum of several tubes'.
type tubeFigures struct {
	jobs                             [len(jobStates)]float64 // in jobStates order
	urgent, waiting, using, watching float64
	paused                           float64 // tubes paused now
	totalJobs, deletes               float64
}

func (f *tubeFigures) add(t *store.TubeStats) {
	f.jobs[0] += float64(t.Ready)
	f.jobs[1] += float64(t.Reserved)
	f.jobs[2] += float64(t.Delayed)
	f.jobs[3] += float64(t.Buried)
	f.urgent += float64(t.Urgent)
	f.waiting += float64(t.Waiting)
	f.using += float64(t.Using)
	f.watching += float64(t.Watching)
	f.paused += bit(t.PauseTimeLeft > 0)
	f.totalJobs += float64(t.TotalJobs)
	f.deletes += float64(t.CmdDelete)
}
