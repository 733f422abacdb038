package testproc

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CSRFHeader carries a session's CSRF token, as internal/admin names it
// (its own tests fail should the two differ).
const CSRFHeader = "X-CSRF-Token"

// APIRequest is one request to a server's HTTP API (its --http port), as
// one caller sends it: with a bearer token, a session's cookie and CSRF
// token, or nothing.
type APIRequest struct {
	Method, URL string
	// Body, if not nil, is sent as JSON: encoded, or as is for a string.
	Body    any
	Bearer  string
	Cookie  *http.Cookie
	CSRF    string
	Header  http.Header   // more headers
	Timeout time.Duration // 0: none
	TLS     *tls.Config   // the client's, for an https URL; nil: the default
}

// APIReply is an answer: its status, headers and body.
type APIReply struct {
	Status int
	Header http.Header
	Body   []byte
}

// DoAPI sends r and reads the whole answer; the test fails at once if
// the request cannot be made or the connection ends without one.
func DoAPI(t testing.TB, r APIRequest) APIReply {
	t.Helper()
	var rd io.Reader
	switch b := r.Body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(r.Method, r.URL, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.Bearer)
	}
	if r.Cookie != nil {
		req.AddCookie(r.Cookie)
	}
	if r.CSRF != "" {
		req.Header.Set(CSRFHeader, r.CSRF)
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	client := &http.Client{Timeout: r.Timeout}
	if r.TLS != nil {
		client.Transport = &http.Transport{TLSClientConfig: r.TLS}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return APIReply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// MetricSeries is every series of family on the /metrics of the server
// at base ("http://host:port"), asked for that family alone: each value
// by its series as written, the name and its labels, as
// sprout_current_jobs{state="ready"}.
func MetricSeries(client *http.Client, base, family string) (map[string]float64, error) {
	resp, err := client.Get(base + "/metrics?" + url.Values{"name[]": {family}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family) {
			continue // its HELP and TYPE
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("%s/metrics: %q", base, line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("%s/metrics: %q: %v", base, line, err)
		}
		series[line[:i]] = v
	}
	return series, sc.Err()
}
