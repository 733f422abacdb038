package segment_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
)

// observed is a segment.Observer that adds up what it is told.
type observed struct {
	mu               sync.Mutex
	batches, records int
	bytes            uint64
	syncs            int
	negative         bool // a duration below zero was reported
}

func (o *observed) ObserveBatch(bytes, records int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches++
	o.bytes += uint64(bytes)
	o.records += records
}

func (o *observed) ObserveSync(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.syncs++
	o.negative = o.negative || d < 0
}

func (o *observed) get() observed {
	o.mu.Lock()
	defer o.mu.Unlock()
	return observed{batches: o.batches, records: o.records, bytes: o.bytes, syncs: o.syncs, negative: o.negative}
}

// waitRecords waits up to 10 s for n records to have been reported.
func (o *observed) waitRecords(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); o.get().records < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d records reported within 10s; want %d", o.get().records, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestObserver: every record and byte written is reported in some batch,
// and an fsync is reported each time one is made, under each policy.
func TestObserver(t *testing.T) {
	const puts = 5
	for _, tc := range []struct {
		name string
		opts segment.Options
		// syncsBefore and syncsAfter check the fsyncs reported before and
		// after Close.
		syncsBefore, syncsAfter func(n int) bool
	}{
		{"-f 0", segment.Options{SyncEvery: 0},
			func(n int) bool { return n >= puts }, func(n int) bool { return n >= puts }},
		{"-f 1h", segment.Options{SyncEvery: time.Hour},
			func(n int) bool { return n == 0 }, func(n int) bool { return n == 1 }},
		{"-F", segment.Options{NoSync: true},
			func(n int) bool { return n == 0 }, func(n int) bool { return n <= 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &observed{}
			opts := tc.opts
			opts.Observer = o
			l, m := open(t, t.TempDir(), opts)
			for i := range puts {
				_, lsn := m.put(t, "a body")
				segtest.WaitDurable(t, l, lsn) // one batch each: nothing else is pending
				// The core counts the LSN published before the writer tells
				// the Observer; a waiter that comes in between runs at once.
				o.waitRecords(t, i+1)
			}
			got := o.get()
			if got.records != puts || got.batches != puts || got.bytes != l.Written() {
				t.Errorf("batches %d with %d records and %d bytes; want %d with %d records and %d bytes",
					got.batches, got.records, got.bytes, puts, puts, l.Written())
			}
			if !tc.syncsBefore(got.syncs) {
				t.Errorf("%d fsyncs reported while running", got.syncs)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if got := o.get(); !tc.syncsAfter(got.syncs) || got.negative {
				t.Errorf("%d fsyncs reported after Close (negative duration: %v)", got.syncs, got.negative)
			}
		})
	}
}
