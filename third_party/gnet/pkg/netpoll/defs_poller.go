// Copyright (c) 2021 The Gnet Authors. All rights reserved.
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

package netpoll

import (
	"runtime"
	"time"
)

// PollEventHandler is the callback for I/O events notified by the poller.
type PollEventHandler func(int, IOEvent, IOFlags) error

// PollAttachment is the user data which is about to be stored in "void *ptr" of epoll_data or "void *udata" of kevent.
type PollAttachment struct {
	FD       int
	Callback PollEventHandler
}

// yieldBeforeBlocking runs when a poll with a zero timeout has found no
// event, right before the poller blocks in the kernel until one comes.
// lastYield is when the poller last yielded; it is updated on a yield.
//
// A runtime.Gosched puts the loop goroutine on the global run queue and
// wakes another M (golang/go#13527), so the loop goes on on whichever
// thread takes it first; at every idle moment of a busy loop, that is
// thousands of thread hand-offs a second. Two reasons to yield remain:
//   - With GOMAXPROCS 1, a goroutine the loop readied (a timer, a log
//     writer) has no other P to run on until sysmon takes the P back from
//     the blocked thread (measured: 150 µs instead of 2 µs), so the loop
//     yields every time. With more Ps, the runtime offered that goroutine
//     to an idle P when it was readied.
//   - A goroutine that has not entered the scheduler for 10 ms is
//     preempted by sysmon, and the P of one that is in a system call then
//     is taken from its thread; each of those also resets sysmon to
//     waking every 20 µs. A busy loop's system calls do not enter the
//     scheduler, so the loop yields when it goes idle if its last yield
//     was yieldEvery ago or more: a few hundred yields a second at most.
func yieldBeforeBlocking(lastYield *time.Time) {
	if runtime.GOMAXPROCS(0) == 1 || time.Since(*lastYield) >= yieldEvery {
		*lastYield = time.Now()
		runtime.Gosched()
	}
}

// yieldEvery is how long a poller goes at most without yielding when it
// becomes idle: half of sysmon's 10 ms (forcePreemptNS), so that sysmon
// sees the loop goroutine enter the scheduler between two of its looks.
const yieldEvery = 5 * time.Millisecond
