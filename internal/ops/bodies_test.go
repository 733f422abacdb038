package ops

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
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
// first (net/http then reads the rest of the body), and whatever length
// the request declares: without the bound, either held its connection for
// as long as the client liked, and a declared length of a PiB, when the
// time grew with it, bought 34 years.
func TestSlowBodyCutOff(t *testing.T) {
	read := func(w http.ResponseWriter, r *http.Request) { _, _ = io.ReadAll(r.Body) }
	for _, tc := range []struct {
		name     string
		h        http.HandlerFunc
		declared string
	}{
		{"read", read, "100"},
		{"refused", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) }, "100"},
		{"a PiB declared", func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, 4096)
			read(w, r)
		}, "1125899906842624"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serveBodies(t, 300*time.Millisecond, tc.h)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("POST /api/v1/session HTTP/1.1\r\nHost: x\r\nContent-Length: " + tc.declared + "\r\n\r\n{")); err != nil {
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

// TestSteadyBodyNotCutOff: a large body that keeps arriving, faster than
// a MiB a second, is read whole though it takes longer than bodyTime.
func TestSteadyBodyNotCutOff(t *testing.T) {
	const size = 2 << 20
	addr := serveBodies(t, 300*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil || n != size {
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	began := time.Now()
	for range size / len(chunk) { // 32 chunks 20 ms apart: 640 ms, at 3 MiB a second
		if _, err := c.Write(chunk); err != nil {
			t.Fatalf("after %v: %v", time.Since(began), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a body of 2 MiB over %v: %v %v, want 200", time.Since(began), resp, err)
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
