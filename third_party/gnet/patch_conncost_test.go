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

//go:build (darwin || dragonfly || freebsd || linux || netbsd || openbsd) && !poll_opt

package gnet

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPatchStreamConnKeepsNothingUnused is the test of patch 0006: the
// conn of an enrolled TCP connection holds no socket address of the
// remote (only a datagram socket's writes use one), no method value of
// processIO (the default reactor finds a conn by its descriptor and never
// calls the attachment's callback) and no boxed nil safe context. Each of
// those is an allocation that lives as long as the connection: 64 of the
// about 450 bytes an idle connection costs in gnet.
func TestPatchStreamConnKeepsNothingUnused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() //nolint:errcheck
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close() //nolint:errcheck
	var nc net.Conn
	select {
	case nc = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
	}
	if nc == nil {
		t.Fatal("accept failed")
	}

	cli, err := NewClient(&BuiltinEventEngine{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	defer cli.Stop() //nolint:errcheck
	gc, err := cli.EnrollContext(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := gc.(*conn)
	if c.remote != nil {
		t.Errorf("the conn keeps the remote's socket address %v", c.remote)
	}
	if c.pollAttachment.Callback != nil {
		t.Error("the conn's poll attachment holds a callback the default reactor never calls")
	}
	if c.safeCtx.Load() != nil {
		t.Error("the conn holds a boxed nil safe context")
	}
	if c.RemoteAddr().String() != dialed.LocalAddr().String() {
		t.Errorf("RemoteAddr %v, want %v", c.RemoteAddr(), dialed.LocalAddr())
	}

	el := &eventloop{engine: &engine{opts: &Options{}}}
	sa := &unix.SockaddrInet4{Port: 1}
	local, remote := &net.TCPAddr{Port: 2}, &net.TCPAddr{Port: 3}
	var keep *conn
	if n := testing.AllocsPerRun(100, func() { keep = newStreamConn("tcp", -1, el, sa, local, remote) }); n != 1 {
		t.Errorf("a stream's conn made with %v allocations, want 1 (the conn)", n)
	}
	_ = keep
}
