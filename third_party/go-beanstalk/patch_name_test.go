package beanstalk

import (
	"errors"
	"strings"
	"testing"
)

// TestPatchNameOf200Bytes uses and watches a tube whose name is 200 bytes,
// the longest beanstalkd takes, and is refused one of 201 before anything
// is sent.
func TestPatchNameOf200Bytes(t *testing.T) {
	name := strings.Repeat("a", 200)
	c := NewConn(mock(
		"use "+name+"\r\nput 0 0 0 1\r\nx\r\nwatch "+name+"\r\nignore default\r\nreserve-with-timeout 0\r\n",
		"USING "+name+"\r\nINSERTED 1\r\nWATCHING 2\r\nWATCHING 1\r\nRESERVED 1 1\r\nx\r\n",
	))
	if _, err := NewTube(c, name).Put([]byte("x"), 0, 0, 0); err != nil {
		t.Fatalf("put into a tube of 200 bytes: %v", err)
	}
	if _, _, err := NewTubeSet(c, name).Reserve(0); err != nil {
		t.Fatalf("reserve from a tube of 200 bytes: %v", err)
	}
	if _, err := NewTube(c, name+"a").Put([]byte("x"), 0, 0, 0); !errors.Is(err, ErrTooLong) {
		t.Errorf("put into a tube of 201 bytes: %v, want %v", err, ErrTooLong)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
