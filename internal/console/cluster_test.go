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
	// The fleet's tube list, each tube with its group (internal/admin
	// makes it from every group's part).
	mux.HandleFunc("GET /api/v1/tubes", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"tubes": [{"group": 1, "name": "emails", "current-jobs-ready": 7, "current-jobs-reserved": 0, "current-jobs-delayed": 0, "current-jobs-buried": 0},
			{"group": 0, "name": "default", "current-jobs-ready": 1, "current-jobs-reserved": 0, "current-jobs-delayed": 0, "current-jobs-buried": 0}]}`))
	})
	mux.Handle("/", c)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	b := newTab(t, hs.URL)
	b.login(testToken)
	b.waitFor(`document.getElementById("member").textContent === "member m2 · leader m1"`)
	view.Store(`{"node": "m2", "leader": "", "serving": false}`)
	b.waitFor(`document.getElementById("member").textContent === "member m2 · no leader (election)"`)

	// The Cluster page: the members as m2 sees them and its Raft groups,
	// following GET /cluster as it changes; a name is text, never markup.
	view.Store(`{"node": "m2", "leader": "m1", "state": "follower", "term": 3, "commit": 40, "applied": 40,
		"members": [{"name": "m1", "role": "voter", "address": "10.0.0.1:7000", "client": "10.0.0.1:11300", "connected": true, "protocol": 3},
		            {"name": "m2", "role": "voter", "address": "10.0.0.2:7000", "connected": true, "protocol": 3, "cordoned": true},
		            {"name": "<b>m3</b>", "role": "learner", "address": "10.0.0.3:7000", "connected": false}],
		"groups": [{"id": 0, "leader": "m1", "replicas": ["m1", "m2"], "learners": ["<b>m3</b>"], "tubes": 2, "jobs": 1234}]}`)
	b.click(`nav a[href="/members"]`)
	b.waitFor(`document.querySelectorAll("#members tbody tr").length === 3`)
	row := func(table, key, value string) string {
		return `[...document.querySelectorAll("#` + table + ` tbody tr")].find(tr => tr.dataset.` + key + ` === ` + js(value) + `)?.textContent`
	}
	b.waitFor(row("members", "member", "m1") + ` === "m1 (leader)voteryes10.0.0.1:700010.0.0.1:113003–"`)
	b.waitFor(row("members", "member", "<b>m3</b>") + ` === "<b>m3</b>learnerno10.0.0.3:7000–––"`)
	b.waitFor(row("members", "member", "m2") + `?.startsWith("m2voter, cordonedyes")`)
	b.waitFor(row("groups", "group", "0") + ` === "0m1m1, m2 · learning: <b>m3</b>2" + (1234).toLocaleString() + "–"`)
	b.waitFor(`document.getElementById("placement").hidden`)
	b.waitFor(`document.getElementById("cluster-facts").textContent.includes("leader m1")`)
	b.waitFor(`document.querySelector("#members tbody b, #groups tbody b") === null`)
	view.Store(`{"node": "m2", "leader": "", "state": "candidate", "term": 4, "members": [], "groups": [{"id": 0, "leader": "", "replicas": ["m1", "m2"], "tubes": 2, "jobs": 1234}]}`)
	b.waitFor(row("groups", "group", "0") + `?.startsWith("0none (election)")`)

	// Several groups: every group of the fleet, whether this member holds
	// a replica of it, and where each tube lives with its group's leader.
	view.Store(`{"node": "m2", "leader": "m1", "state": "follower", "term": 5, "members": [],
		"groups": [{"id": 0, "leader": "m1", "replicas": ["m1", "m2", "m3"], "tubes": 2, "jobs": 3, "held": true},
		           {"id": 1, "leader": "m3", "replicas": ["m1", "m3"], "tubes": 1, "jobs": 7, "held": false}]}`)
	b.waitFor(row("groups", "group", "1") + ` === "1m3m1, m31" + (7).toLocaleString() + "no"`)
	b.waitFor(row("groups", "group", "0") + `?.endsWith("yes")`)
	b.waitFor(`!document.getElementById("placement").hidden`)
	b.waitFor(row("placements", "tube", "emails") + ` === "emails1m3" + "7000"`)
	b.waitFor(row("placements", "tube", "default") + ` === "default0m1" + "1000"`)
	b.waitFor(`document.querySelectorAll("#placements tbody tr").length === 2 && document.querySelector("#placements tbody tr").dataset.tube === "default"`)
	b.waitFor(`document.querySelector("#placements a[href='/tubes/emails']") !== null`)
}
