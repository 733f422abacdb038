//go:build race

package storm

// raceEnabled reports a -race build: its clients are slower, and it allows
// at most 8,128 live goroutines.
const raceEnabled = true
