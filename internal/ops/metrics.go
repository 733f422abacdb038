package ops

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sproutmq/sprout/codec"
)

// Bucket bounds, in the units of their histograms. Commands execute in
// microseconds (a reserve's wait and a reply's wait for the log are not
// counted); an fsync takes from a fraction of a millisecond (a cache with
// power-loss protection) to seconds (a struggling disk).
var (
	commandBuckets = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
		1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1}
	fsyncBuckets = []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
		0.1, 0.25, 0.5, 1, 2.5}
	batchByteBuckets   = prometheus.ExponentialBuckets(64, 4, 10) // 64 B to 16 MiB
	batchRecordBuckets = prometheus.ExponentialBuckets(1, 2, 14)  // 1 to 8192
)

// Metrics holds the histograms fed as things happen: command latencies
// from the event loops (engine.Metrics), the write-ahead log's batches
// and fsyncs from its writer goroutine (segment.Observer), and a cluster
// leader's proposals from its node goroutine (replication.Observer).
// Start registers them, the log's only when the store has a log, the
// proposals' only in cluster mode. Every method is safe for
// concurrent use and lock-free.
type Metrics struct {
	commandVec *prometheus.HistogramVec // immutable after NewMetrics
	// commands has one observer per codec.Op, resolved once so that the
	// loops never look a label up; nil for ops without a name. Immutable
	// after NewMetrics.
	commands [256]prometheus.Observer

	fsync        prometheus.Histogram // immutable
	batchBytes   prometheus.Histogram // immutable
	batchRecords prometheus.Histogram // immutable

	proposalBytes   prometheus.Histogram // immutable
	proposalRecords prometheus.Histogram // immutable

	// httpTLS counts the side port's TLS handshakes, once ServeTLS serves
	// it (servesTLS).
	httpTLS   httpTLS
	servesTLS atomic.Bool
}

// NewMetrics returns the histograms, with a series for every command.
func NewMetrics() *Metrics {
	m := &Metrics{
		commandVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sprout_command_duration_seconds",
			Help: "Time the server spent executing a command, by command " +
				"(not the time a reserve waited for a job nor a reply waited for the log).",
			Buckets: commandBuckets,
		}, []string{"command"}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sprout_binlog_fsync_duration_seconds",
			Help:    "Time one fsync of the write-ahead log took, for the fsyncs that worked.",
			Buckets: fsyncBuckets,
		}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sprout_binlog_batch_bytes",
			Help:    "Bytes the write-ahead log wrote in one batch (group commit).",
			Buckets: batchByteBuckets,
		}),
		batchRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sprout_binlog_batch_records",
			Help:    "Records the write-ahead log wrote in one batch (group commit).",
			Buckets: batchRecordBuckets,
		}),
		proposalBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sprout_cluster_proposal_bytes",
			Help:    "Bytes of records the leader proposed in one Raft entry.",
			Buckets: batchByteBuckets,
		}),
		proposalRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sprout_cluster_proposal_records",
			Help:    "Records the leader proposed in one Raft entry.",
			Buckets: batchRecordBuckets,
		}),
	}
	for op := range len(m.commands) {
		if name := codec.Op(op).String(); name != "" {
			m.commands[op] = m.commandVec.WithLabelValues(name)
		}
	}
	return m
}

// ObserveCommand implements engine.Metrics. It runs on the event loops.
func (m *Metrics) ObserveCommand(op codec.Op, d time.Duration) {
	if o := m.commands[op]; o != nil {
		o.Observe(d.Seconds())
	}
}

// ObserveBatch implements segment.Observer.
func (m *Metrics) ObserveBatch(bytes, records int) {
	m.batchBytes.Observe(float64(bytes))
	m.batchRecords.Observe(float64(records))
}

// ObserveProposal implements replication.Observer: it runs on the
// member's node goroutine.
func (m *Metrics) ObserveProposal(bytes, records int) {
	m.proposalBytes.Observe(float64(bytes))
	m.proposalRecords.Observe(float64(records))
}

// ObserveSync implements segment.Observer.
func (m *Metrics) ObserveSync(d time.Duration) { m.fsync.Observe(d.Seconds()) }
