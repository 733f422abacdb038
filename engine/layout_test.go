package engine

import (
	"net"
	"testing"
	"unsafe"
)

// TestSessionSizeClass keeps a session, which every connection has, idle
// ones included, in the 160-byte size class: one byte more costs every
// connection 16 bytes (the next class is 176).
func TestSessionSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(session{}); n > 160 {
		t.Errorf("a session is %d bytes; make what idle connections do not need on first use", n)
	}
}

// Accepted connections' addresses keep reading as before, while equal IPs
// share one copy and no longer pin the socket addresses they came from.
func TestShareAddrs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var in ipInterner
	var accepted []net.Conn
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		nc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		local, remote := nc.LocalAddr().String(), nc.RemoteAddr().String()
		in.shareAddrs(nc)
		if got := nc.LocalAddr().String(); got != local {
			t.Errorf("local address %s became %s", local, got)
		}
		if got := nc.RemoteAddr().String(); got != remote || got != c.LocalAddr().String() {
			t.Errorf("remote address %s became %s; the client is at %s", remote, got, c.LocalAddr())
		}
		accepted, clients = append(accepted, nc), append(clients, c)
	}
	ip := func(a net.Addr) *byte { return &a.(*net.TCPAddr).IP[0] }
	first := accepted[0]
	for _, nc := range accepted[1:] {
		if ip(nc.LocalAddr()) != ip(first.LocalAddr()) || ip(nc.RemoteAddr()) != ip(first.RemoteAddr()) {
			t.Error("equal IPs of two connections are not shared")
		}
	}
	if ip(first.LocalAddr()) != ip(first.RemoteAddr()) {
		t.Error("127.0.0.1 as local and remote IP is not one copy")
	}
}

// The interning table starts over when full, so clients from everywhere
// cannot grow it without bound.
func TestIPInternerBound(t *testing.T) {
	var in ipInterner
	for i := range maxInternedIPs + 10 {
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).To4()
		got := in.intern(ip)
		if !got.Equal(ip) {
			t.Fatalf("intern(%s) = %s", ip, got)
		}
		if len(in.ips) > maxInternedIPs {
			t.Fatalf("%d interned IPs, bound %d", len(in.ips), maxInternedIPs)
		}
	}
	v6 := net.ParseIP("2001:db8::1")
	if got := in.intern(v6); !got.Equal(v6) || len(got) != net.IPv6len {
		t.Errorf("intern(%s) = %v", v6, got)
	}
}
