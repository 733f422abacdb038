package console_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/console"
	"github.com/sproutmq/sprout/store"
)

// TestClusterMember: a cluster member's pages say, in the header, which
// member they come from and which one leads, from /cluster, and follow it
// when the leader changes. (The API's forwarding to the leader is
// internal/admin's and cmd/sprout's to test; here /cluster is made up.)
func TestClusterMember(t *testing.T) {
	chromiumPath(t)
	st := store.New(store.Options{})
	t.Cleanup(st.Close)
	srv := engine.New(engine.Config{Loops: 1, Version: "test"}, st)
	api := admin.New(admin.Config{Store: st, Engine: srv, MaxJobSize: 1000, Token: testToken, Logger: zerolog.Nop()})
	t.Cleanup(api.Close)
	c, err := console.New(console.Config{Auth: api.Auth(), Cluster: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	var view atomic.Value
	view.Store(`{"node": "m2", "leader": "m1", "serving": false}`)
	mux := http.NewServeMux()
	mux.Handle("/api/", api)
	mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(view.Load().(string)))
	})
	mux.Handle("/", c)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	b := newTab(t, hs.URL)
	b.login(testToken)
	b.waitFor(`document.getElementById("member").textContent === "member m2 · leader m1"`)
	view.Store(`{"node": "m2", "leader": "", "serving": false}`)
	b.waitFor(`document.getElementById("member").textContent === "member m2 · no leader (election)"`)
}
