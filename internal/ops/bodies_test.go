package ops

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// serveBodies serves h on the side port's server with bodyTime set to
// took, for the test.
func serveBodies(t *testing.T, took time.Duration, h http.HandlerFunc) string {
	t.Helper()
	was := bodyTime
	bodyTime = took
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, h, zerolog.Nop())
	t.Cleanup(func() {
		_ = s.Shutdown(t.Context())
		bodyTime = was
	})
	return ln.Addr().String()
}

// TestSlowBodyCutOff: a request whose body trickles in, a byte at a time,
// is cut off once its body's time is up, whether the handler reads the
// body (the login does, and needs no credential) or refuses the request
// first (net/http then reads the rest of the body): without the bound,
// either held its connection for as long as the client liked.
func TestSlowBodyCutOff(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"read":    func(w http.ResponseWriter, r *http.Request) { _, _ = io.ReadAll(r.Body) },
		"refused": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) },
	} {
		t.Run(name, func(t *testing.T) {
			addr := serveBodies(t, 300*time.Millisecond, h)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("POST /api/v1/session HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")); err != nil {
				t.Fatal(err)
			}
			// Trickle a byte every 50 ms, and read whatever comes back,
			// until the server closes the connection.
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				_, _ = io.Copy(io.Discard, c)
			}()
			for deadline := time.Now().Add(5 * time.Second); ; {
				select {
				case <-closed:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatal("a body trickling in for 5 s still holds its connection; its time was 300 ms")
				}
				_, _ = c.Write([]byte(" "))
			}
		})
	}
}

// TestBodyDeadlineLifted: a handler that runs on after it read its body,
// past the body's time, is not cancelled, and its answer arrives (as
// http.Server's ReadTimeout would cancel it: a long clear, a tube's move).
func TestBodyDeadlineLifted(t *testing.T) {
	addr := serveBodies(t, 200*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable)
		case <-time.After(600 * time.Millisecond):
			_, _ = w.Write(body)
		}
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 2 { // the same connection twice: the next request has a time of its own
		if _, err := c.Write([]byte("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.EqualFold(string(got), "hello") {
			t.Fatalf("request %d: %d %q, want 200 \"hello\"", i, resp.StatusCode, got)
		}
	}
}
