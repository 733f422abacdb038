package main

import (
	"os"
	"testing"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestMain removes the sprout binary testproc.SproutBinary built for the
// tests that run the real server.
func TestMain(m *testing.M) {
	code := m.Run()
	testproc.RemoveSproutBinary()
	os.Exit(code)
}
