package member

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/replication"
)

const testAdminToken = "membership-test-token-0123456789"

// membersMux is a router with the membership endpoint alone.
func membersMux(node memberChanger, guard func(http.Handler) http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	registerMembers(mux, node, guard, zerolog.Nop(), nil, nil)
	return mux
}

// fakeChanger is a member whose changes the handler test sees.
type fakeChanger struct{ calls []string }

func (f *fakeChanger) Status() replication.Status { return replication.Status{} }
func (f *fakeChanger) AddMember(_ context.Context, name, addr string) (replication.Member, error) {
	f.calls = append(f.calls, "add "+name)
	return replication.Member{Name: name, Addr: addr, ID: 1}, nil
}
func (f *fakeChanger) RemoveMember(_ context.Context, name string) (replication.Member, error) {
	f.calls = append(f.calls, "remove "+name)
	return replication.Member{}, fmt.Errorf("%w: %s", replication.ErrUnknownMember, name)
}
func (f *fakeChanger) JoinString(id uint64) string { return "c:1" }

// Without --admin-token the endpoint reads but changes nothing (403), as
// the admin API; paths it does not serve are 404.
func TestMembersHandlerReadOnly(t *testing.T) {
	f := &fakeChanger{}
	h := membersMux(f, admin.NewAuth("", zerolog.Nop()).Middleware)
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{http.MethodGet, "/cluster/members", "", http.StatusOK},
		{http.MethodPost, "/cluster/members", `{"name":"b","address":"127.0.0.1:1"}`, http.StatusForbidden},
		{http.MethodDelete, "/cluster/members/b", "", http.StatusForbidden},
		{http.MethodPost, "/cluster/members/b/cordon", "", http.StatusForbidden},
		{http.MethodGet, "/elsewhere", "", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
		if rec.Code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, rec.Body, tc.want)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("changes reached the member: %v", f.calls)
	}
	h = membersMux(f, admin.NewAuth(testAdminToken, zerolog.Nop()).Middleware)
	req := httptest.NewRequest(http.MethodDelete, "/cluster/members/b", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Errorf("removing an unknown member: %d %s, want 404 with a JSON error", rec.Code, rec.Body)
	}
	// A cluster of one group balances no leader: nothing to cordon from.
	req = httptest.NewRequest(http.MethodPost, "/cluster/members/b/cordon", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "several groups") {
		t.Errorf("cordoning a member of a cluster of one group: %d %s, want 409", rec.Code, rec.Body)
	}
}

// TestRemoveWaitsForKnownReplicas: a member is not removed at once while
// a group's replicas are not known here (one this member holds none of,
// with no fresh report of its leader's): it may hold one there, which a
// removal would leave a voter short, not handed over first (drain). The
// handler used to remove it, seeing no replica. 503, to try again; with
// every group known and none held, it is removed.
func TestRemoveWaitsForKnownReplicas(t *testing.T) {
	f := &fakeChanger{}
	known := false
	var drained []uint16
	grouped := &groupedMembers{groups: 3, replicas: 3, knownWait: 300 * time.Millisecond,
		holding: func(string) ([]uint16, uint16, bool) {
			if !known {
				return nil, 2, false
			}
			return nil, 0, true
		},
		drain: func(w http.ResponseWriter, _ *http.Request, _ string, held []uint16) {
			drained = held
			w.WriteHeader(http.StatusAccepted)
		},
	}
	mux := http.NewServeMux()
	registerMembers(mux, f, admin.NewAuth(testAdminToken, zerolog.Nop()).Middleware, zerolog.Nop(), grouped, nil)
	remove := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodDelete, "/cluster/members/b", nil)
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	if rec := remove(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "group 2") ||
		rec.Header().Get("Retry-After") == "" {
		t.Fatalf("removing a member while group 2's replicas are unknown: %d %s %v, want 503 naming group 2, with Retry-After",
			rec.Code, rec.Body, rec.Header())
	}
	if len(f.calls) != 0 || drained != nil {
		t.Fatalf("changes reached the member: %v, drained %v", f.calls, drained)
	}
	known = true
	remove()
	if len(f.calls) != 1 || f.calls[0] != "remove b" {
		t.Fatalf("with every group's replicas known and none held: %v, want the member removed", f.calls)
	}
}
