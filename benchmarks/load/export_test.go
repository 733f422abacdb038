package load

import "net"

// NewConnForTest wraps an existing connection, such as one end of a
// net.Pipe, in a Conn.
func NewConnForTest(nc net.Conn) *Conn { return newConn(nc, 0) }
