//go:build !linux

package engine_test

import "time"

// waitSent is the Linux one's stand-in where the send queue cannot be
// read: a pause long enough for loopback, judged by time, not seen.
func (c *rawConn) waitSent() { time.Sleep(50 * time.Millisecond) }
