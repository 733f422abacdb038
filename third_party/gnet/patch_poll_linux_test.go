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

package gnet

import (
	"io"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// spin keeps the goroutine's thread busy for d, as a goroutine's work would.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// threadRecorder echoes what it reads and records the OS thread each
// OnTraffic runs on. Each call also wakes a helper goroutine, as a server
// wakes its timer or log goroutine: readying a goroutine is what leaves
// other Ms spinning for work when the loop next yields.
type threadRecorder struct {
	BuiltinEventEngine
	mu   sync.Mutex
	tids []int // guarded by mu
	wake chan struct{}
}

func (r *threadRecorder) OnTraffic(c Conn) Action {
	r.mu.Lock()
	r.tids = append(r.tids, unix.Gettid())
	r.mu.Unlock()
	buf, _ := c.Next(-1)
	_, _ = c.Write(buf)
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return None
}

// TestPatchPollLoopKeepsItsThread is the test of patch 0001: between two
// requests the event loop finds nothing to do and blocks in epoll_wait.
// Unpatched, it first calls runtime.Gosched, which puts the loop goroutine
// on the global run queue and wakes another M (golang/go#13527), and the
// loop goes on on whichever thread takes it. Measured on 2 CPUs: 2,000
// requests served on 5 threads with 214 to 276 switches unpatched (658 to
// 675 with -race); patched, 2 to 14 switches, those of the yield every
// yieldEvery.
func TestPatchPollLoopKeepsItsThread(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	rec := &threadRecorder{wake: make(chan struct{}, 1), tids: make([]int, 0, 4096)}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-rec.wake:
				spin(20 * time.Microsecond)
			case <-done:
				return
			}
		}
	}()
	client := patchServer(t, rec)

	const requests = 2000
	buf := make([]byte, 1)
	for i := 0; i < requests; i++ {
		if _, err := client.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	switches, threads := 0, map[int]bool{}
	for i, tid := range rec.tids {
		threads[tid] = true
		if i > 0 && tid != rec.tids[i-1] {
			switches++
		}
	}
	t.Logf("%d requests served on %d threads, %d thread switches between consecutive requests",
		len(rec.tids), len(threads), switches)
	// Patched, the loop goroutine leaves its thread only at its yield
	// every yieldEvery (some 30 in this test) or when the runtime takes
	// the P from a long epoll_wait, which a request every few
	// microseconds seldom leaves time for.
	const most = 50
	if switches > most {
		t.Errorf("%d thread switches in %d requests; want at most %d", switches, len(rec.tids), most)
	}
}

// TestPatchPollOneProcYields pins what patch 0001 keeps: with GOMAXPROCS 1
// the loop still yields before it blocks, so a goroutine it readied runs at
// once rather than when sysmon takes the only P back from the blocked
// thread. Measured: a median of 2 µs with the yield, 150 µs without.
func TestPatchPollOneProcYields(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	readied := make(chan time.Time, 1)
	waits := make(chan time.Duration, 1)
	go func() {
		for at := range readied {
			waits <- time.Since(at)
		}
	}()
	defer close(readied)
	client := patchServer(t, &readier{readied: readied})

	const requests = 50
	var all []time.Duration
	buf := make([]byte, 1)
	for i := 0; i < requests; i++ {
		if _, err := client.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			t.Fatal(err)
		}
		all = append(all, <-waits)
		time.Sleep(time.Millisecond) // let sysmon back off, as on a quiet server
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	median := all[len(all)/2]
	t.Logf("a goroutine the loop readied waited %v (median), %v at most", median, all[len(all)-1])
	if median > 50*time.Microsecond {
		t.Errorf("a goroutine the loop readied waited %v (median); want it to run before the loop blocks", median)
	}
}

// readier echoes, then readies a goroutine and goes idle.
type readier struct {
	BuiltinEventEngine
	readied chan<- time.Time
}

func (r *readier) OnTraffic(c Conn) Action {
	buf, _ := c.Next(-1)
	_, _ = c.Write(buf)
	r.readied <- time.Now()
	return None
}
