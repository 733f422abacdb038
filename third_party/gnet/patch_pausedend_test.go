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

//go:build linux

package gnet

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// endPauser is a pauser that is a PausedEndHandler: it counts the ends it
// is told of, and records whether the first came while it was paused with
// nothing consumed.
type endPauser struct {
	*pauser
	ends       atomic.Int32
	endPaused  atomic.Bool
	halfClosed chan int64 // the bytes consumed when OnHalfClose fired
}

func (h *endPauser) OnPausedEnd(Conn) Action {
	if h.ends.Add(1) == 1 {
		h.endPaused.Store(h.paused.Load() && h.got.Load() == 0)
	}
	return None
}

func (h *endPauser) OnHalfClose(c Conn) Action {
	h.halfClosed <- h.got.Load() + int64(c.InboundBuffered())
	return Close
}

// TestPatchPausedEnd is the test of patch 0005: a client writes 160 KiB to
// a handler that pauses reading after 100 KiB, reads the 4 MiB reply
// written during the pause, and shuts down its writing side. The handler
// is told of that end while still paused, with nothing consumed, and once:
// level-triggered, the end is not reported at every poll (the loop does
// not spin), and the writable events of the reply keep it watched. After
// the resume every byte arrives, in order, then OnHalfClose. Unpatched,
// nothing tells the handler before it resumes.
func TestPatchPausedEnd(t *testing.T) {
	for _, et := range []bool{false, true} {
		name := "level-triggered"
		if et {
			name = "edge-triggered"
		}
		t.Run(name, func(t *testing.T) {
			const total = 160 << 10
			h := &endPauser{
				pauser:     &pauser{pauseAt: 100 << 10, reply: bytes.Repeat([]byte("r"), 4<<20), closed: make(chan error, 1)},
				halfClosed: make(chan int64, 1),
			}
			client := patchServer(t, h, WithEdgeTriggeredIO(et), WithReadBufferCap(64<<10))
			// What is not read must fit the receive buffer, so that the FIN
			// comes. The kernel counts a segment's overhead too: up to 60 KiB
			// not read can fill the default 128 KiB, closing the window with
			// the last bytes and the FIN still at the client.
			deadline := time.Now().Add(5 * time.Second)
			for h.conn.Load() == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			c, _ := h.conn.Load().(Conn)
			if c == nil {
				t.Fatal("the connection was not opened")
			}
			if err := c.SetReadBuffer(1 << 20); err != nil {
				t.Fatal(err)
			}
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
			select {
			case err := <-written:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("test bug: the kernel's buffers did not take the bytes not read, so the client's end cannot come")
			}
			if err := client.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			deadline = time.Now().Add(5 * time.Second)
			for h.ends.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if h.ends.Load() == 0 {
				t.Fatal("the handler was not told of the client's end during the pause")
			}
			if !h.endPaused.Load() {
				t.Fatal("the end was told with reading not paused, or after bytes were consumed")
			}
			before := cpuTime(t)
			time.Sleep(300 * time.Millisecond)
			if spent := cpuTime(t) - before; spent > 150*time.Millisecond {
				t.Fatalf("the process spent %v of CPU in 300ms after the end: the loop spins", spent)
			}
			if n := h.ends.Load(); n != 1 {
				t.Fatalf("told of the end %d times, want once", n)
			}
			h.resume.Store(true)
			if err := c.Wake(nil); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-h.halfClosed:
				if got != total || h.wrong.Load() != 0 {
					t.Fatalf("at the half-close: %d of %d bytes consumed, %d not in order", got, total, h.wrong.Load())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no half-close after the resume (%d of %d bytes consumed)", h.got.Load(), total)
			}
		})
	}
}
