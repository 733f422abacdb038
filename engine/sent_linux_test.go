package engine_test

import (
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sproutmq/sprout/internal/testproc"
)

// waitSent waits until every byte c sent has been acknowledged by the
// server's kernel (the socket's send queue, SIOCOUTQ, is empty): the bytes
// are in the server's socket, or read from it. What a test that holds the
// server's loop, or trickles a body in, waits for.
func (c *rawConn) waitSent() {
	c.t.Helper()
	raw, err := c.c.(*net.TCPConn).SyscallConn()
	if err != nil {
		c.t.Fatal(err)
	}
	testproc.WaitFor(c.t, 10*time.Second, "the bytes sent acknowledged", func() bool {
		queued := -1
		_ = raw.Control(func(fd uintptr) { queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		return queued == 0
	})
}
