// Copyright (c) 2026 The Gnet Authors. All rights reserved.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package gnet

import (
	"bytes"
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// bigReplier answers every byte it reads with a reply of replySize bytes,
// and once its client has half-closed, closes the connection when all of
// that is sent. gnet has no "sent" event, so it looks after each Wake,
// which a goroutine sends every millisecond from OnHalfClose on.
type bigReplier struct {
	BuiltinEventEngine
	reply      []byte
	halfClosed atomic.Bool   // OnHalfClose has fired
	closed     chan error    // OnClose's error
	stop       chan struct{} // closed by the test: stop waking
}

func (h *bigReplier) OnTraffic(c Conn) Action {
	in, _ := c.Next(-1)
	for range in {
		_, _ = c.Write(h.reply)
	}
	if h.halfClosed.Load() && c.OutboundBuffered() == 0 {
		return Close
	}
	return None
}

func (h *bigReplier) OnHalfClose(c Conn) Action {
	h.halfClosed.Store(true)
	if c.OutboundBuffered() == 0 {
		return Close
	}
	go func() {
		for {
			select {
			case <-h.stop:
				return
			case <-time.After(time.Millisecond):
				if err := c.Wake(nil); err != nil {
					return
				}
			}
		}
	}()
	return None
}

func (h *bigReplier) OnClose(_ Conn, err error) Action {
	h.closed <- err
	return None
}

func newBigReplier(t *testing.T) *bigReplier {
	h := &bigReplier{
		reply:  bytes.Repeat([]byte("r"), 1<<20),
		closed: make(chan error, 1),
		stop:   make(chan struct{}),
	}
	t.Cleanup(func() { close(h.stop) })
	return h
}

// TestPatchHalfCloseDeliversReplies is the test of patch 0003: a client
// sends 20 requests, shuts down its writing side and reads. Unpatched,
// gnet closes the connection when it reads the end of file and sends only
// what the socket takes at once of the 20 MiB of replies pending (4 to 8.5
// MiB measured); with the handler serving the half-closed connection, all
// of it arrives, then the end of file.
func TestPatchHalfCloseDeliversReplies(t *testing.T) {
	for _, et := range []bool{false, true} {
		name := "level-triggered"
		if et {
			name = "edge-triggered"
		}
		t.Run(name, func(t *testing.T) {
			h := newBigReplier(t)
			client := patchServer(t, h, WithEdgeTriggeredIO(et))
			const requests = 20
			if _, err := client.Write(bytes.Repeat([]byte("q"), requests)); err != nil {
				t.Fatal(err)
			}
			// Let the server read the requests before the end of file, as a
			// client that half-closes after a pause would.
			time.Sleep(50 * time.Millisecond)
			if err := client.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_ = client.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := io.Copy(io.Discard, client)
			if want := int64(requests * len(h.reply)); err != nil || got != want {
				t.Fatalf("read %d bytes (%v), want %d and the end of file", got, err, want)
			}
			if !h.halfClosed.Load() {
				t.Error("OnHalfClose did not fire")
			}
			select {
			case err := <-h.closed:
				if err != nil {
					t.Errorf("OnClose: %v, want nil (the handler closed)", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("OnClose did not fire")
			}
		})
	}
}

// TestPatchHalfCloseSameRead: the requests and the end of file arrive
// together, so the read that returns them is followed at once by one that
// returns the end of file.
func TestPatchHalfCloseSameRead(t *testing.T) {
	h := newBigReplier(t)
	client := patchServer(t, h)
	if _, err := client.Write(bytes.Repeat([]byte("q"), 20)); err != nil {
		t.Fatal(err)
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.Copy(io.Discard, client)
	if want := int64(20 * len(h.reply)); err != nil || got != want {
		t.Fatalf("read %d bytes (%v), want %d and the end of file", got, err, want)
	}
}

// TestPatchHalfCloseLoopIdles: while a half-closed connection waits for its
// client to read, the loop must sleep. Level-triggered, a poller still
// watching the connection for reading would report the end of file at
// every poll and spin a core.
func TestPatchHalfCloseLoopIdles(t *testing.T) {
	h := newBigReplier(t)
	client := patchServer(t, h)
	if _, err := client.Write([]byte("qqqq")); err != nil {
		t.Fatal(err)
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if !h.halfClosed.Load() {
		t.Fatal("OnHalfClose did not fire")
	}
	before := cpuTime(t)
	time.Sleep(300 * time.Millisecond) // the client reads nothing meanwhile
	if used := cpuTime(t) - before; used > 100*time.Millisecond {
		t.Errorf("the process used %v of CPU in 300ms while a half-closed connection waited", used)
	}
	_ = client.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.Copy(io.Discard, client)
	if want := int64(4 * len(h.reply)); err != nil || got != want {
		t.Fatalf("read %d bytes (%v), want %d and the end of file", got, err, want)
	}
}

// TestPatchHalfCloseReset: a client that half-closes, then goes away
// without reading resets the connection, which closes it with an error.
func TestPatchHalfCloseReset(t *testing.T) {
	h := newBigReplier(t)
	client := patchServer(t, h)
	// 64 MiB of replies: more than the socket buffers take, however far
	// the kernel grows the client's (tcp_rmem up to 32 MiB); with 4 MiB the
	// server sometimes sent everything and closed cleanly before the reset.
	if _, err := client.Write(bytes.Repeat([]byte("q"), 64)); err != nil {
		t.Fatal(err)
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	_ = client.SetLinger(0)
	_ = client.Close()
	select {
	case err := <-h.closed:
		if err == nil || !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, io.EOF) {
			t.Errorf("OnClose: %v, want the reset", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnClose did not fire after the client reset the connection")
	}
}

// cpuTime is the CPU the process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
