package admin_test

import (
	"encoding/json"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// flipCluster is a one-member cluster whose leadership the test flips.
type flipCluster struct {
	mu      sync.Mutex
	serving bool
	changed chan struct{}
}

func (f *flipCluster) Name() string { return "m1" }
func (f *flipCluster) Leader() (admin.Leader, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.serving {
		return admin.Leader{Serving: true, Name: "m1"}, f.changed
	}
	return admin.Leader{Name: "m2"}, f.changed
}
func (f *flipCluster) set(serving bool) {
	f.mu.Lock()
	f.serving = serving
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// TestHistoryStartsEmptyOnNewLeadership: a member's history starts empty
// at each election, as doc.go says, not with the points of a leadership
// it had before (the sampler only skipped while it did not serve).
func TestHistoryStartsEmptyOnNewLeadership(t *testing.T) {
	var clock atomic.Int64 // fake wall clock: seconds, one more at each read
	clock.Store(1_000_000_000)
	now := func() time.Time { return time.Unix(clock.Add(1), 0) }
	st := store.New(store.Options{})
	srv := engine.New(engine.Config{Loops: 1, Version: "test"}, st)
	cl := &flipCluster{serving: true, changed: make(chan struct{})}
	api := admin.New(admin.Config{Store: st, Engine: srv, MaxJobSize: 1000, Token: testToken, Logger: zerolog.Nop(),
		Cluster: cl, Now: now, History: admin.HistoryConfig{Interval: 10 * time.Millisecond}})
	hs := httptest.NewServer(api)
	t.Cleanup(func() { hs.Close(); api.Close(); st.Close() })

	history := func() []int64 {
		resp, body := send(t, "GET", hs.URL+"/api/v1/history", "")
		var h struct{ Timestamps []int64 }
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		return h.Timestamps
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(history()); n < 2 {
		t.Fatalf("%d points while leading", n)
	}
	cl.set(false) // the leadership lost
	time.Sleep(100 * time.Millisecond)
	elected := clock.Load()
	cl.set(true) // elected again
	var points []int64
	testproc.WaitFor(t, 5*time.Second, "a history of the new leadership's points only", func() bool {
		points = history()
		return len(points) > 0 && points[0] > elected
	})
}
