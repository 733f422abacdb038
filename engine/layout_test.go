package engine

import (
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
