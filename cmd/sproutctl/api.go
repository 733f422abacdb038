package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// apiClient calls Sprout's admin API: JSON under /api/v1 on the server's
// --http port, with a bearer token. It has the calls sproutctl makes, those
// the beanstalk protocol cannot: listing jobs and clearing a tube at once.
// Its fields are set by newAPIClient and only read after.
type apiClient struct {
	base    string // scheme://host:port, no trailing slash
	token   string
	timeout time.Duration // bounds connecting, and each exchange but a clear
	http    *http.Client
}

// newAPIClient returns a client of the API at base, http://HOST:PORT
// (http:// is assumed when base names no scheme).
func newAPIClient(base, token string, timeout time.Duration) *apiClient {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = (&net.Dialer{Timeout: timeout}).DialContext
	return &apiClient{
		base:    strings.TrimRight(base, "/"),
		token:   token,
		timeout: timeout,
		http:    &http.Client{Transport: transport},
	}
}

// apiError is an answer of the API other than 2xx: its status and the
// message of its {"error": "..."} body, or the body itself when it is not
// one. A 404 with an error of the API's own (no such tube or job) is
// errNotFound; one without (no admin API at that address) is not.
type apiError struct {
	method, path string
	status       int
	message      string
	fromAPI      bool // the body was the API's {"error": "..."}
}

func (e *apiError) Error() string {
	hint := ""
	switch {
	case e.status == http.StatusUnauthorized || e.status == http.StatusForbidden:
		hint = " (check the token: --token-file, SPROUT_ADMIN_TOKEN)"
	case !e.fromAPI:
		hint = " (is --api the --http address of a Sprout with the admin API?)"
	}
	return fmt.Sprintf("admin API %s %s: %d %s: %s%s", e.method, e.path, e.status, http.StatusText(e.status), e.message, hint)
}

func (e *apiError) Is(target error) bool {
	return target == errNotFound && e.status == http.StatusNotFound && e.fromAPI
}

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 64 << 10

// do sends a request with in (when not nil) as its JSON body, and decodes
// a 2xx answer into out.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return usagef("--api %s: %v", c.base, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		e := &apiError{method: method, path: path, status: resp.StatusCode}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		var answer struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &answer) == nil && answer.Error != "" {
			e.message, e.fromAPI = answer.Error, true
		} else {
			e.message = strings.TrimSpace(string(raw))
		}
		return e
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("admin API %s %s: reading the answer: %w", method, path, err)
	}
	return nil
}

// apiJob is a job as the API lists it: the keys of stats-job, and the
// body as text or in base64.
type apiJob struct {
	ID           uint64 `json:"id"`
	Tube         string `json:"tube"`
	State        string `json:"state"`
	Pri          uint32 `json:"pri"`
	Age          int64  `json:"age"`
	Delay        int64  `json:"delay"`
	TTR          int64  `json:"ttr"`
	TimeLeft     int64  `json:"time-left"`
	File         int64  `json:"file"`
	Reserves     int64  `json:"reserves"`
	Timeouts     int64  `json:"timeouts"`
	Releases     int64  `json:"releases"`
	Buries       int64  `json:"buries"`
	Kicks        int64  `json:"kicks"`
	Body         string `json:"body"`
	BodyEncoding string `json:"body-encoding"`
}

// hidden reports whether the API left the body out: a request that may not
// see bodies (a read-only server) gets neither body nor body-encoding.
func (j apiJob) hidden() bool { return j.BodyEncoding == "" }

// MarshalJSON writes the job as the API sent it: without "body" and
// "body-encoding" when it sent none.
func (j apiJob) MarshalJSON() ([]byte, error) {
	type plain apiJob
	if !j.hidden() {
		return json.Marshal(plain(j))
	}
	return json.Marshal(struct {
		plain
		Body         *string `json:"body,omitempty"`
		BodyEncoding *string `json:"body-encoding,omitempty"`
	}{plain: plain(j)})
}

// bytes returns the job's body; nil when hidden.
func (j apiJob) bytes() ([]byte, error) {
	switch j.BodyEncoding {
	case "base64":
		return base64.StdEncoding.DecodeString(j.Body)
	case "text":
		return []byte(j.Body), nil
	case "":
		return nil, nil
	default:
		return nil, fmt.Errorf("job %d: unknown body-encoding %q", j.ID, j.BodyEncoding)
	}
}

func tubePath(tube string) string { return "/api/v1/tubes/" + pathSegment(tube) }

// pathSegment escapes s as one segment of a path: as url.PathEscape does
// ("/" is %2F), and "." and ".." as %2E and %2E%2E, which the admin API
// takes (docs/admin-api.md) and which no server or proxy folds away with
// the segment before them.
func pathSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// listJobs returns a page of at most limit jobs of tube in state, from
// cursor on ("" for the first page), and the cursor of the next page, ""
// after the last.
func (c *apiClient) listJobs(ctx context.Context, tube, state string, limit int, cursor string) ([]apiJob, string, error) {
	q := url.Values{"state": {state}, "limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var page struct {
		Jobs []apiJob        `json:"jobs"`
		Next json.RawMessage `json:"next"`
	}
	if err := c.do(ctx, http.MethodGet, tubePath(tube)+"/jobs", q, nil, &page); err != nil {
		return nil, "", err
	}
	return page.Jobs, cursorOf(page.Next), nil
}

// cursorOf returns the cursor the API gave as a string, a number or null.
func cursorOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if t := strings.TrimSpace(string(raw)); t != "null" {
		return t
	}
	return ""
}

// clearTube deletes the jobs of tube in state (ready, delayed, buried or
// all) and returns how many it deleted. The server answers once it has
// deleted them all, which may take longer than any timeout of a reply:
// only ctx (SIGINT) ends the wait.
func (c *apiClient) clearTube(ctx context.Context, tube, state string) (int64, error) {
	var answer struct {
		Deleted int64 `json:"deleted"`
	}
	err := c.do(ctx, http.MethodPost, tubePath(tube)+"/clear", nil, map[string]string{"state": state}, &answer)
	return answer.Deleted, err
}
