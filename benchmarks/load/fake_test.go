package load

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer is a beanstalkd stand-in that misbehaves on purpose, so that
// a test can check the generator notices: replyBody, when positive, is the
// body size its RESERVED replies carry whatever was put; dropPut, when
// positive, is the put (counted from 1) it never answers.
type fakeServer struct {
	ln        net.Listener
	replyBody int
	dropPut   int64

	puts atomic.Int64
	ids  atomic.Uint64
	jobs chan int      // the ready jobs' body sizes
	done chan struct{} // closed when the test ends: a reserve waiting ends
}

func startFake(t *testing.T, replyBody int, dropPut int64) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{ln: ln, replyBody: replyBody, dropPut: dropPut, jobs: make(chan int, 1<<20), done: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(func() { close(f.done); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); f.serve(c) }()
		}
	}()
	return f
}

func (f *fakeServer) serve(c net.Conn) {
	defer c.Close()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			return
		}
		reply := ""
		switch fields[0] {
		case "put":
			n, _ := strconv.Atoi(fields[4])
			if _, err := r.Discard(n + 2); err != nil {
				return
			}
			if f.puts.Add(1) == f.dropPut {
				continue // never answered
			}
			f.jobs <- n
			reply = fmt.Sprintf("INSERTED %d\r\n", f.ids.Add(1))
		case "reserve", "reserve-with-timeout":
			var n int
			if fields[0] == "reserve" {
				select {
				case n = <-f.jobs:
				case <-f.done: // a consumer left waiting when the run ended
					return
				}
			} else {
				select {
				case n = <-f.jobs:
				default:
					reply = "TIMED_OUT\r\n"
				}
			}
			if reply == "" {
				if f.replyBody > 0 {
					n = f.replyBody
				}
				reply = fmt.Sprintf("RESERVED 1 %d\r\n%s\r\n", n, strings.Repeat("x", n))
			}
		case "delete":
			reply = "DELETED\r\n"
		case "quit":
			return
		default:
			reply = "UNKNOWN_COMMAND\r\n"
		}
		w.WriteString(reply)
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// TestShortBodyFails: a server whose RESERVED replies carry less than was
// put does less work than the other and must not come out faster; the run
// fails.
func TestShortBodyFails(t *testing.T) {
	rc := RunConfig{Warmup: 20 * time.Millisecond, Duration: 150 * time.Millisecond}
	for _, s := range []Scenario{
		{Name: "prodcons", Kind: KindProdCons, Conns: 2, Body: 1024},
		{Name: "prodcons-rwt", Kind: KindProdCons, Conns: 2, Body: 1024, ReserveTimeout: 1},
		{Name: "roundtrip", Kind: KindRoundTrip, Conns: 1, Body: 1024},
		{Name: "drain", Kind: KindDrain, Conns: 2, Body: 1024, Prefill: 50_000},
	} {
		t.Run(s.Name, func(t *testing.T) {
			// The same fake with honest bodies: the run is clean.
			for _, short := range []bool{false, true} {
				body := 0
				if short {
					body = 16
				}
				f := startFake(t, body, 0)
				srv := &Server{Spec: ServerSpec{Name: "fake"}, Addr: f.ln.Addr().String()}
				r, err := s.Run(context.Background(), srv, rc, nil)
				r.addError(context.Background(), err)
				switch {
				case !short && r.Jobs == 0:
					t.Fatalf("honest bodies: no jobs (%d errors: %s)", r.Errors, r.FirstError)
				case short && r.Errors == 0:
					t.Errorf("bodies of 16 B for jobs of %d B: %d jobs, no error", s.Body, r.Jobs)
				case !short && r.Errors > 0:
					t.Errorf("honest bodies: %d errors, the first: %s", r.Errors, r.FirstError)
				}
			}
		})
	}
}

// TestUnacknowledgedPutFails: a put the server never answers fails the
// run, as benchmarks/README.md says (its worker, cut when the run gives up
// on the reply, is not counted as failing).
func TestUnacknowledgedPutFails(t *testing.T) {
	defer func(d time.Duration) { replyWait = d }(replyWait)
	replyWait = 300 * time.Millisecond
	rc := RunConfig{Warmup: 20 * time.Millisecond, Duration: 150 * time.Millisecond}
	for _, s := range []Scenario{
		{Name: "put-only", Kind: KindPutOnly, Conns: 2, Body: 64},
		{Name: "prodcons", Kind: KindProdCons, Conns: 2, Body: 64},
		{Name: "pipelined", Kind: KindPipelined, Conns: 2, Depth: 10, Body: 64},
	} {
		t.Run(s.Name, func(t *testing.T) {
			f := startFake(t, 0, 100)
			srv := &Server{Spec: ServerSpec{Name: "fake"}, Addr: f.ln.Addr().String()}
			r, err := s.Run(context.Background(), srv, rc, nil)
			r.addError(context.Background(), err)
			if r.Jobs == 0 || r.Sent == r.Acked {
				t.Fatalf("the fake answered every put or none: %d jobs, %d sent, %d acknowledged", r.Jobs, r.Sent, r.Acked)
			}
			if r.Errors == 0 {
				t.Errorf("%d puts sent, %d acknowledged, and no error", r.Sent, r.Acked)
			}
		})
	}
}
