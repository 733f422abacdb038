//go:build !race

package testproc

// RaceEnabled reports whether this binary was built with the race detector;
// SproutBinary builds the server the same way.
const RaceEnabled = false
