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
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// pauser consumes nothing until it has pauseAt bytes buffered; then it
// pauses reading, writes a reply larger than the socket takes at once, and
// waits for the test's resume (a Wake); from then on it consumes everything,
// checking that byte i is pattern(i).
type pauser struct {
	BuiltinEventEngine
	pauseAt int
	reply   []byte
	conn    atomic.Value // Conn, from OnOpen
	paused  atomic.Bool
	resume  atomic.Bool  // set by the test before its Wake
	most    atomic.Int64 // the most bytes buffered while paused
	got     atomic.Int64 // bytes consumed after the resume
	wrong   atomic.Int64 // bytes consumed that were not pattern's
	closed  chan error
}

func pattern(i int64) byte { return byte(i % 251) }

func (h *pauser) OnOpen(c Conn) ([]byte, Action) {
	h.conn.Store(c)
	return nil, None
}

func (h *pauser) OnTraffic(c Conn) Action {
	if !h.resume.Load() {
		n := int64(c.InboundBuffered())
		if h.paused.Load() {
			if n > h.most.Load() {
				h.most.Store(n)
			}
		} else if n >= int64(h.pauseAt) {
			if err := c.PauseReading(); err != nil {
				return Close
			}
			h.paused.Store(true)
			_, _ = c.Write(h.reply)
		}
		return None
	}
	if h.paused.Load() {
		if err := c.ResumeReading(); err != nil {
			return Close
		}
		h.paused.Store(false)
	}
	in, _ := c.Next(-1)
	at := h.got.Load()
	for i, b := range in {
		if b != pattern(at+int64(i)) {
			h.wrong.Add(1)
		}
	}
	h.got.Add(int64(len(in)))
	return None
}

func (h *pauser) OnClose(_ Conn, err error) Action {
	h.closed <- err
	return None
}

// TestPatchPauseReading is the test of patch 0004: a client writes 8 MiB
// to a handler that pauses reading after 100 KiB. While paused, gnet reads
// nothing more (the client's write cannot finish, and at most one read's
// worth more is buffered, and the loop does not spin on the bytes waiting;
// unpatched there is no pause and all 8 MiB would be), a 4 MiB reply written during the pause reaches the client whole
// (writable events do not bring reading back), and after the resume
// every byte arrives, in order, and the client's close is seen.
func TestPatchPauseReading(t *testing.T) {
	for _, et := range []bool{false, true} {
		name := "level-triggered"
		if et {
			name = "edge-triggered"
		}
		t.Run(name, func(t *testing.T) {
			const total = 8 << 20
			h := &pauser{pauseAt: 100 << 10, reply: bytes.Repeat([]byte("r"), 4<<20), closed: make(chan error, 1)}
			client := patchServer(t, h, WithEdgeTriggeredIO(et), WithReadBufferCap(64<<10))
			data := make([]byte, total)
			for i := range data {
				data[i] = pattern(int64(i))
			}
			written := make(chan error, 1)
			go func() {
				_, err := client.Write(data)
				written <- err
			}()
			_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := io.CopyN(io.Discard, client, int64(len(h.reply))); err != nil {
				t.Fatalf("the reply written while paused: %d of %d bytes (%v)", n, len(h.reply), err)
			}
			before := cpuTime(t)
			select {
			case err := <-written:
				t.Fatalf("the client wrote all %d bytes while reading was paused (%v)", total, err)
			case <-time.After(300 * time.Millisecond):
			}
			// A loop told of readable bytes it must not read would spin.
			if spent := cpuTime(t) - before; spent > 150*time.Millisecond {
				t.Fatalf("the process spent %v of CPU in 300ms while paused: the loop spins", spent)
			}
			if !h.paused.Load() {
				t.Fatal("the handler never paused")
			}
			// A read in flight when the pause came may add one buffer's worth.
			if most, bound := h.most.Load(), int64(h.pauseAt+2*(64<<10)); most > bound {
				t.Fatalf("%d bytes were buffered while paused, want at most %d", most, bound)
			}
			h.resume.Store(true)
			if err := h.conn.Load().(Conn).Wake(nil); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-written:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the client's write did not finish after the resume")
			}
			deadline := time.Now().Add(10 * time.Second)
			for h.got.Load() < total && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if got := h.got.Load(); got != total || h.wrong.Load() != 0 {
				t.Fatalf("consumed %d of %d bytes, %d not in order", got, total, h.wrong.Load())
			}
			_ = client.Close()
			select {
			case <-h.closed:
			case <-time.After(10 * time.Second):
				t.Fatal("the client's close was not seen after the resume")
			}
		})
	}
}
