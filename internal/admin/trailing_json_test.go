package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/store"
)

type quietEngine struct{}

func (quietEngine) Stats() codec.ServerStats           { return codec.ServerStats{} }
func (quietEngine) Draining() bool                     { return false }
func (quietEngine) CountCommand(codec.Counter, uint64) {}

// TestTrailingJSONRefused: a change's body is one JSON object and nothing
// after it (decodeJSON: "refusing ... anything after the object"). A
// stray } or ] after it is as malformed as a stray x, which is 400; it
// must not be taken as the object alone and the change made.
func TestTrailingJSONRefused(t *testing.T) {
	st := store.New(store.Options{})
	api := admin.New(admin.Config{Store: st, Engine: quietEngine{}, MaxJobSize: 1 << 16, Token: testToken})
	t.Cleanup(func() { api.Close(); st.Close() })
	for _, tc := range []struct{ path, body string }{
		{"/api/v1/tubes/t/jobs", `{"body": "x"} x`}, // refused today
		{"/api/v1/tubes/t/jobs", `{"body": "x"}}`},
		{"/api/v1/tubes/t/jobs", `{"body": "x"}]`},
		{"/api/v1/tubes/t/kick", `{"bound": 1}}`},
		{"/api/v1/tubes/t/clear", `{"state": "all"}]`},
		{"/api/v1/session", `{"token": "` + testToken + `"}}`},
	} {
		r := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body))
		r.Header.Set("Authorization", "Bearer "+testToken)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			t.Errorf("POST %s %s: %d %s, want 400", tc.path, tc.body, w.Code, strings.TrimSpace(w.Body.String()))
		}
	}
}
