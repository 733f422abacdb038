package load

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestHolder: a holder process opens its connections, says how many, and
// closes them all when stopped.
func TestHolder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	h, err := startHolder(t.Context(), ln.Addr().String(), 40)
	if err != nil {
		t.Fatal(err)
	}
	if h.held != 40 {
		t.Fatalf("the holder says it holds %d, want 40", h.held)
	}
	conns := make([]net.Conn, 0, 40)
	for len(conns) < 40 {
		select {
		case c := <-accepted:
			conns = append(conns, c)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 40 connections accepted", len(conns))
		}
	}
	h.stop()
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d after the holder stopped: %v, want it closed (EOF or reset)", i, err)
		}
		c.Close()
	}
}
