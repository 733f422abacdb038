package admin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/store"
)

// TestPauseWaitsForItsRecord: a cluster group logs pauses
// (store.Options.LogPauses), and the API's pause answers once its record
// may be acknowledged, as the protocol's reply does; answered before, a
// failover could forget a pause the API had confirmed.
func TestPauseWaitsForItsRecord(t *testing.T) {
	g, st, base := inProcessWith(t, func(o *store.Options) { o.LogPauses = true }, func(*admin.Config) {}, nil)
	st.Lead()
	if resp, body := post(t, base+"/api/v1/tubes/p/jobs", `{"body": "x"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("put: %d %s", resp.StatusCode, body)
	}
	before := g.log.Durable()
	g.shut()
	answered := make(chan string, 1)
	go func() {
		resp, body := post(t, base+"/api/v1/tubes/p/pause", `{"delay": 60}`)
		answered <- http.StatusText(resp.StatusCode) + " " + body
	}()
	select {
	case a := <-answered:
		t.Fatalf("pause answered %q before its record (log at %d, was %d) may be acknowledged", a, g.log.Durable(), before)
	case <-time.After(300 * time.Millisecond):
	}
	g.open()
	if a := <-answered; a != "OK {\"paused\":60}\n" {
		t.Fatalf("pause answered %q once its record was acknowledged", a)
	}
}
