package admin_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

func TestMain(m *testing.M) { testproc.Main(m) }

// testToken is the admin token of the servers that have one.
const testToken = "0123456789abcdef-test-token"

// server is a real sprout with its side port.
type server struct {
	proc *testproc.Process
	base string // http://127.0.0.1:PORT
}

// start runs the sprout binary with --http on a free port and args (a
// token among them, or not).
func start(t *testing.T, args ...string) *server {
	t.Helper()
	p, base := testproc.StartSprout(t, append([]string{"--loops", "2"}, args...)...)
	return &server{proc: p, base: base}
}

// conn is a protocol connection to s, closed when the test ends.
func (s *server) conn(t *testing.T) *testproc.Conn {
	t.Helper()
	return testproc.DialTest(t, s.proc.Addr(), 5*time.Second)
}

// client sends API requests the way one caller would: with a bearer
// token, a session's cookie and CSRF token, or nothing.
type client struct {
	t      *testing.T
	base   string
	bearer string
	cookie *http.Cookie
	csrf   string
	header http.Header // extra headers
	// onAnswer, if set, is told of every answer.
	onAnswer func(method, path string, status int)
}

func (s *server) client(t *testing.T, bearer string) *client {
	return &client{t: t, base: s.base, bearer: bearer}
}

// reply is an answer: its status, headers and body.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// object decodes the body as a JSON object, numbers as json.Number.
func (r reply) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	return m
}

// do sends a request; body, if not nil, is sent as JSON (a string as is).
// Every answer is checked against openapi.json (checkAnswer).
func (c *client) do(method, path string, body any) reply {
	c.t.Helper()
	r := testproc.DoAPI(c.t, testproc.APIRequest{Method: method, URL: c.base + path, Body: body,
		Bearer: c.bearer, Cookie: c.cookie, CSRF: c.csrf, Header: c.header})
	checkAnswer(c.t, method, path, r.Status, r.Header, r.Body)
	if c.onAnswer != nil {
		c.onAnswer(method, path, r.Status)
	}
	return reply{status: r.Status, header: r.Header, body: r.Body}
}

// ok sends a request that must answer want, and decodes its object.
func (c *client) ok(want int, method, path string, body any) map[string]any {
	c.t.Helper()
	r := c.do(method, path, body)
	if r.status != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.body, want)
	}
	if len(r.body) == 0 {
		return nil
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		c.t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	return r.object(c.t)
}

// fails sends a request that must fail with status and a JSON error.
func (c *client) fails(status int, method, path string, body any) string {
	c.t.Helper()
	r := c.do(method, path, body)
	if r.status != status {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.body, status)
	}
	msg, ok := r.object(c.t)["error"].(string)
	if !ok || !strings.HasPrefix(msg, "admin: ") {
		c.t.Fatalf("%s %s: error %q", method, path, r.body)
	}
	return msg
}

// num reads a JSON number of an object.
func num(t *testing.T, m map[string]any, key string) int64 {
	t.Helper()
	n, ok := m[key].(json.Number)
	if !ok {
		t.Fatalf("%s: %v (%T), want a number in %v", key, m[key], m[key], m)
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

// jobs is the "jobs" of a listing, and its next cursor ("" for null).
func jobs(t *testing.T, m map[string]any) ([]map[string]any, string) {
	t.Helper()
	list, ok := m["jobs"].([]any)
	if !ok {
		t.Fatalf("no jobs in %v", m)
	}
	out := make([]map[string]any, len(list))
	for i, j := range list {
		out[i] = j.(map[string]any)
	}
	next, _ := m["next"].(string)
	return out, next
}

// statsInt reads one figure over the protocol.
func statsInt(t *testing.T, c *testproc.Conn, line, field string) int64 {
	t.Helper()
	v, err := c.StatsInt(line, field)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return v[0]
}

// mustDo sends a protocol command that must answer want (the reply's line).
func mustDo(t *testing.T, c *testproc.Conn, line string, body []byte, want string) testproc.Reply {
	t.Helper()
	r, err := c.Do(line, body)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if !strings.HasPrefix(string(r.Line), want) {
		t.Fatalf("%s: %q, want %q", line, r.Line, want)
	}
	return r
}
