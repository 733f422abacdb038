package store

import (
	"testing"
	"unsafe"
)

// TestJobSizeClass keeps a Job in Go's 144-byte allocation size class:
// one byte more costs every stored job 16 bytes (the next class is 160).
func TestJobSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Job{}); n > 144 {
		t.Errorf("a Job is %d bytes; reorder or shrink its fields to stay within 144", n)
	}
}

// TestWaiterSizeClass keeps a waiter, which every connection blocked in
// reserve has, in the 96-byte size class.
func TestWaiterSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(waiter{}); n > 96 {
		t.Errorf("a waiter is %d bytes; shrink it to stay within 96", n)
	}
}

// TestClientSize: every connection embeds a Client (in the engine's
// session, which must stay within 160 bytes).
func TestClientSize(t *testing.T) {
	if n := unsafe.Sizeof(Client{}); n > 96 {
		t.Errorf("a Client is %d bytes; keep what idle clients do not need behind a pointer", n)
	}
}
