package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// fullJournal is a log whose disk, once limited, has room for the test's
// count of records, then takes deletes only, as wal.Log does
// (wal.ErrNoSpace).
type fullJournal struct {
	*wal.Log
	limited atomic.Bool
	room    atomic.Int64
}

// limit leaves room for n more records.
func (j *fullJournal) limit(n int64) {
	j.room.Store(n)
	j.limited.Store(true)
}

func (j *fullJournal) Append(r *wal.Record, prev wal.Loc) (uint64, wal.Loc, error) {
	if r.Kind != wal.KindDelete && j.limited.Load() && j.room.Add(-1) < 0 {
		return 0, wal.Loc{}, wal.ErrNoSpace
	}
	return j.Log.Append(r, prev)
}

// TestTubeKickOnFullDisk: a tube kick the log refuses for want of space
// is 507, as a kick-job's is (it answered 200 {"kicked":0}, which reads as
// nothing to kick); one the disk stops after some jobs counts them.
func TestTubeKickOnFullDisk(t *testing.T) {
	wl, err := wal.Open(t.TempDir(), wal.Options{SegmentSize: 1 << 20, SyncEvery: 0})
	if err != nil {
		t.Fatal(err)
	}
	j := &fullJournal{Log: wl}
	st := store.New(store.Options{Journal: j})
	if err := wl.Start(st); err != nil {
		t.Fatal(err)
	}
	srv := engine.New(engine.Config{Loops: 1, Version: "test"}, st)
	api := admin.New(admin.Config{Store: st, Engine: srv, MaxJobSize: 1000, Token: testToken, Logger: zerolog.Nop()})
	hs := httptest.NewServer(api)
	t.Cleanup(func() { hs.Close(); api.Close(); _ = wl.Close(); st.Close() })

	for range 3 {
		if resp, body := post(t, hs.URL+"/api/v1/tubes/k/jobs", `{"body": "x", "delay": 3600}`); resp.StatusCode != http.StatusCreated {
			t.Fatalf("put: %d %s", resp.StatusCode, body)
		}
	}
	j.limit(1) // one more record, then the disk is full
	if resp, body := post(t, hs.URL+"/api/v1/tubes/k/kick", `{"bound": 10}`); resp.StatusCode != http.StatusOK || strings.TrimSpace(body) != `{"kicked":1}` {
		t.Fatalf("tube kick the disk stops after one job: %d %s, want 200 {\"kicked\":1}", resp.StatusCode, strings.TrimSpace(body))
	}
	for path, in := range map[string]string{"/api/v1/tubes/k/kick": `{"bound": 10}`, "/api/v1/jobs/2/kick": ``} {
		resp, body := post(t, hs.URL+path, in)
		if resp.StatusCode != http.StatusInsufficientStorage {
			t.Fatalf("%s on a full disk: %d %s, want 507", path, resp.StatusCode, strings.TrimSpace(body))
		}
	}
	if ts, _ := st.TubeStats([]byte("k")); ts.Ready != 1 || ts.Delayed != 2 {
		t.Fatalf("after the kicks: %+v, want 1 ready and 2 delayed", ts)
	}
}
