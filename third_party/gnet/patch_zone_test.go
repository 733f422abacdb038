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
	"net"
	"testing"
	"unsafe"

	bsPool "github.com/panjf2000/gnet/v2/pkg/pool/byteslice"
	"github.com/panjf2000/gnet/v2/pkg/socket"
	"golang.org/x/sys/unix"
)

// TestPatchZoneNotPooled is the test of patch 0002. An enrolled net.Conn's
// addresses carry the net package's own zone name, one string shared by
// every address of that interface (net's zone cache), and the local and
// remote address of one connection hold the same string. Unpatched,
// closing the connection put that string's bytes into gnet's byte pool,
// twice: the next buffers of that size were the zone name itself, so gnet
// wrote connection data into net's cache and gave one buffer to two users.
func TestPatchZoneNotPooled(t *testing.T) {
	el := &eventloop{engine: &engine{opts: &Options{WriteBufferCap: 64}}}
	for i := 0; i < 20; i++ {
		zone := string([]byte("zone0007")) // a heap string, not from the pool, as net's are
		local := &net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 11300, Zone: zone}
		remote := &net.TCPAddr{IP: net.ParseIP("fe80::2"), Port: 40000, Zone: zone}
		c := newStreamConn("tcp", -1, el, nil, local, remote)
		c.release()

		a, b := bsPool.Get(len(zone)), bsPool.Get(len(zone))
		if unsafe.SliceData(a) == unsafe.StringData(zone) || unsafe.SliceData(b) == unsafe.StringData(zone) {
			t.Fatalf("round %d: the byte pool handed out the bytes of the address's zone %q", i, zone)
		}
		if unsafe.SliceData(a) == unsafe.SliceData(b) {
			t.Fatalf("round %d: the byte pool handed out one buffer twice", i)
		}
		copy(a, "XXXXXXXX")
		if zone != "zone0007" {
			t.Fatalf("round %d: writing a pooled buffer changed the address's zone to %q", i, zone)
		}
	}
}

// TestPatchZoneNumericName checks the other half of patch 0002: a zone
// without an interface name is made a decimal string of its own, which
// the address keeps, rather than a slice of a pooled buffer.
func TestPatchZoneNumericName(t *testing.T) {
	const index = 987654 // no such interface
	addr := socket.SockaddrToTCPOrUnixAddr(&unix.SockaddrInet6{Port: 1, ZoneId: index}).(*net.TCPAddr)
	if addr.Zone != "987654" {
		t.Fatalf("zone %q, want %q", addr.Zone, "987654")
	}
	for i := 0; i < 20; i++ {
		buf := bsPool.Get(32)
		copy(buf, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX")
		bsPool.Put(buf)
	}
	if addr.Zone != "987654" {
		t.Fatalf("pooled buffers overwrote the address's zone: %q", addr.Zone)
	}
}
