package admin_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/testproc"
)

// specServer is the server URL of openapi.json; answers are routed as if
// they came from it, whatever port the test's server has.
const specServer = "http://127.0.0.1:8080"

// spec is openapi.json loaded and validated once, with its router, for
// every test's answers (checkAnswer).
var spec struct {
	once   sync.Once
	doc    *openapi3.T    // immutable after once
	router routers.Router // immutable after once
	err    error          // immutable after once
}

// loadSpec returns the document and its router, failing the test if the
// document is not valid OpenAPI 3.1.
func loadSpec(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	spec.once.Do(func() {
		loader := openapi3.NewLoader()
		if spec.doc, spec.err = loader.LoadFromData(admin.OpenAPI); spec.err != nil {
			return
		}
		// NewRouter validates the document (with kin-openapi's JSON Schema
		// 2020-12 rules, as its version is 3.1).
		spec.router, spec.err = legacy.NewRouter(spec.doc)
	})
	if spec.err != nil {
		t.Fatalf("openapi.json: %v", spec.err)
	}
	return spec.doc, spec.router
}

// checkAnswer validates one real answer against the document: the
// operation must list its status, and its body must match the schema of
// that status. Requests outside the documented paths and methods (the
// tests' unknown endpoints, 405s) have no operation to check against.
func checkAnswer(t testing.TB, method, path string, status int, header http.Header, body []byte) {
	t.Helper()
	_, router := loadSpec(t)
	req, err := http.NewRequest(method, specServer+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
		},
		Status:  status,
		Header:  header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s answered %d, which openapi.json does not describe: %v\n%s", method, path, status, err, body)
	}
}

// TestOpenAPIRoutes: every endpoint the API mounts is in openapi.json
// with the same methods, and every path and method the document
// describes is mounted.
func TestOpenAPIRoutes(t *testing.T) {
	doc, _ := loadSpec(t)
	if !doc.IsOpenAPI31OrLater() || doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	documented := make(map[string][]string)
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[path] = append(documented[path], method)
		}
	}
	mounted := admin.Endpoints()
	for _, m := range []map[string][]string{documented, mounted} {
		for _, methods := range m {
			sort.Strings(methods)
		}
	}
	for path, methods := range mounted {
		if !slices.Equal(documented[path], methods) {
			t.Errorf("%s: mounted for %v, documented for %v", path, methods, documented[path])
		}
	}
	for path, methods := range documented {
		if _, ok := mounted[path]; !ok {
			t.Errorf("%s: documented for %v, not mounted", path, methods)
		}
	}
}

// fleetAnswers calls the fleet's operations on a real cluster of one
// member formed with two shard groups: a tube moved, a prefix placed and
// unplaced, the groups grown to four, a replica's move refused (two
// members needed); each answer is checked against the document, and told
// to onAnswer. A single server answers them 404.
func fleetAnswers(t *testing.T, onAnswer func(method, path string, status int)) {
	t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	peer := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := start(t, "--admin-token", testToken, "-b", t.TempDir(), "--node", "a", "--cluster-listen", peer,
		"--cluster-peers", "a="+peer, "--cluster-groups", "2")
	c := s.client(t, testToken)
	c.onAnswer = onAnswer
	p := s.conn(t)
	mustDo(t, p, "use fleet", nil, "USING")
	mustDo(t, p, "put 0 0 60 3", []byte("job"), "INSERTED")
	// The tube lives in one of the two groups, each led once the member
	// has begun.
	var moved reply
	testproc.WaitFor(t, 20*time.Second, "the tube moved", func() bool {
		for _, g := range []int{1, 0} {
			if moved = c.do(http.MethodPost, "/api/v1/tubes/fleet/move", map[string]any{"group": g}); moved.status == http.StatusOK {
				return true
			}
		}
		return false
	})
	if jobs := num(t, moved.object(t), "jobs"); jobs != 1 {
		t.Errorf("the move took %v jobs, want 1", jobs)
	}
	c.ok(http.StatusOK, http.MethodPost, "/api/v1/placements/fle", map[string]any{"group": 0})
	c.ok(http.StatusOK, http.MethodDelete, "/api/v1/placements/fle", nil)
	if to := num(t, c.ok(http.StatusOK, http.MethodPost, "/api/v1/groups/grow", map[string]any{"to": 4}), "to"); to != 4 {
		t.Errorf("grown to %v groups, want 4", to)
	}
	if got := c.do(http.MethodPost, "/api/v1/groups/1/moves", map[string]any{"from": "a", "to": "b"}); got.status != http.StatusNotFound {
		t.Errorf("a replica's move to no member: %d %s, want 404", got.status, got.body)
	}
	if got := s.client(t, "").do(http.MethodPost, "/api/v1/groups/grow", map[string]any{"to": 8}); got.status != http.StatusUnauthorized {
		t.Errorf("a growth without the token: %d %s, want 401", got.status, got.body)
	}
	single := start(t, "--admin-token", testToken).client(t, testToken)
	if got := single.do(http.MethodPost, "/api/v1/groups/grow", map[string]any{"to": 4}); got.status != http.StatusNotFound {
		t.Errorf("a growth on a single server: %d %s, want 404", got.status, got.body)
	}
}

// TestOpenAPIAnswers calls every documented operation on a real server
// and checks that it succeeds (the client validates each answer against
// the document, as it does in every test of this package), and that the
// document it serves is openapi.json. The other tests of the package add
// the error answers.
func TestOpenAPIAnswers(t *testing.T) {
	doc, router := loadSpec(t)
	s := start(t, "--admin-token", testToken, "-z", "1000")
	c := s.client(t, testToken)
	// calledOps are the operations that answered a success.
	calledOps := make(map[string]bool)
	c.onAnswer = func(method, path string, status int) {
		req, err := http.NewRequest(method, specServer+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if route, _, err := router.FindRoute(req); err == nil && status < 300 {
			calledOps[route.Operation.OperationID] = true
		}
	}

	if got := c.do(http.MethodGet, "/api/v1/openapi.json", nil); got.status != http.StatusOK || !bytes.Equal(got.body, admin.OpenAPI) {
		t.Errorf("GET /api/v1/openapi.json: %d, %d bytes; want 200 and openapi.json", got.status, len(got.body))
	}
	file, err := os.ReadFile("openapi.json")
	if err != nil || !bytes.Equal(file, admin.OpenAPI) {
		t.Errorf("the embedded document is not openapi.json (%v)", err)
	}
	if got := s.client(t, "").do(http.MethodGet, "/api/v1/openapi.json", nil); got.status != http.StatusOK {
		t.Errorf("GET /api/v1/openapi.json without the token: %d, want 200", got.status)
	}

	// Jobs in every state, a binary body among them: the first put is
	// reserved, the last buried, and two stay ready.
	put := func(body map[string]any) uint64 {
		return uint64(num(t, c.ok(http.StatusCreated, http.MethodPost, "/api/v1/tubes/emails/jobs", body), "id"))
	}
	p := s.conn(t)
	mustDo(t, p, "watch emails", nil, "WATCHING")
	reserved := put(map[string]any{"body": `{"to": "ann@example.com"}`, "pri": 10, "ttr": 120})
	mustDo(t, p, "reserve-with-timeout 0", nil, "RESERVED "+strconv.FormatUint(reserved, 10))
	binary := put(map[string]any{"body": "AAEC/w==", "body-encoding": "base64"})
	ready := put(map[string]any{"body": "hello"})
	delayed := put(map[string]any{"body": "later", "delay": 3600})
	buried := put(map[string]any{"body": "to bury", "pri": 0})
	mustDo(t, p, "reserve-with-timeout 0", nil, "RESERVED "+strconv.FormatUint(buried, 10))
	mustDo(t, p, "bury "+strconv.FormatUint(buried, 10)+" 0", nil, "BURIED")

	c.ok(http.StatusOK, http.MethodGet, "/api/v1/stats", nil)
	c.ok(http.StatusOK, http.MethodGet, "/api/v1/tubes", nil)
	c.ok(http.StatusOK, http.MethodGet, "/api/v1/tubes/emails", nil)
	for _, state := range []string{"ready", "delayed", "reserved", "buried"} {
		c.ok(http.StatusOK, http.MethodGet, "/api/v1/tubes/emails/jobs?state="+state, nil)
	}
	if _, next := jobs(t, c.ok(http.StatusOK, http.MethodGet, "/api/v1/tubes/emails/jobs?limit=1&bodies=false", nil)); next == "" {
		t.Error("a page of 1 of 2 ready jobs has no next cursor")
	}
	for _, id := range []uint64{reserved, binary, ready, delayed, buried} {
		c.ok(http.StatusOK, http.MethodGet, "/api/v1/jobs/"+strconv.FormatUint(id, 10), nil)
	}
	c.ok(http.StatusOK, http.MethodPost, "/api/v1/jobs/"+strconv.FormatUint(delayed, 10)+"/kick", nil)
	c.ok(http.StatusOK, http.MethodDelete, "/api/v1/jobs/"+strconv.FormatUint(ready, 10), nil)
	c.ok(http.StatusOK, http.MethodPost, "/api/v1/tubes/emails/kick", map[string]any{"bound": 10})
	c.ok(http.StatusOK, http.MethodPost, "/api/v1/tubes/emails/pause", map[string]any{"delay": 1})
	c.ok(http.StatusOK, http.MethodPost, "/api/v1/tubes/emails/clear", map[string]any{"state": "all"})

	// The history has a point once the sampler has run (every 5 s).
	testproc.WaitFor(t, 15*time.Second, "a point in the history", func() bool {
		ts, _ := c.ok(http.StatusOK, http.MethodGet, "/api/v1/history", nil)["timestamps"].([]any)
		return len(ts) > 0
	})
	c.ok(http.StatusOK, http.MethodGet, "/api/v1/history?since=0", nil)
	c.ok(http.StatusOK, http.MethodGet, "/api/v1/tubes/emails/history", nil)
	c.ok(http.StatusOK, http.MethodGet, "/api/v1/tubes/%3Cother%3E/history", nil)

	// The console's session: log in, look, log out.
	anon := s.client(t, "")
	anon.onAnswer = c.onAnswer
	anon.ok(http.StatusOK, http.MethodGet, "/api/v1/session", nil)
	login := anon.do(http.MethodPost, "/api/v1/session", map[string]any{"token": testToken})
	if login.status != http.StatusOK {
		t.Fatalf("login: %d %s", login.status, login.body)
	}
	for _, ck := range (&http.Response{Header: login.header}).Cookies() {
		if ck.Name == admin.SessionCookie {
			anon.cookie = ck
		}
	}
	anon.ok(http.StatusOK, http.MethodGet, "/api/v1/session", nil)
	if got := anon.do(http.MethodDelete, "/api/v1/session", nil); got.status != http.StatusNoContent {
		t.Errorf("logout: %d %s", got.status, got.body)
	}

	fleetAnswers(t, c.onAnswer)

	// Every documented operation was called above, but a replica's move,
	// which needs two members (internal/member's TestShardGroupsMoveReplica
	// makes one; fleetAnswers checks its refusal against the document).
	var missed []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if !calledOps[op.OperationID] && op.OperationID != "moveReplica" {
				missed = append(missed, method+" "+path)
			}
		}
	}
	if len(missed) > 0 {
		t.Errorf("not called: %s", strings.Join(missed, ", "))
	}
}
