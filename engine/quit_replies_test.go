package engine_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
)

// TestQuitDeliversEveryReply: replies to the commands a client pipelined
// before quit all reach it, as from beanstalkd, even when it reads them
// slowly: quit must not cut off what the socket has not taken yet.
func TestQuitDeliversEveryReply(t *testing.T) {
	_, network, addr := startServer(t, engine.Config{})
	// A small receive buffer, set before connecting, so the replies back
	// up in the server rather than in the client's kernel.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10)
		})
	}}
	c, err := d.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size, n = 60000, 100
	fmt.Fprintf(c, "put 0 0 60 %d\r\n%s\r\n", size, strings.Repeat("x", size))
	want := len("INSERTED 1\r\n") + n*(len(fmt.Sprintf("FOUND 1 %d\r\n", size))+size+2)
	if _, err := io.WriteString(c, strings.Repeat("peek 1\r\n", n)+"quit\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 16<<10)
	got := 0
	for {
		k, err := c.Read(buf)
		got += k
		if err != nil {
			if err != io.EOF && !isReset(err) {
				t.Fatalf("after %d bytes: %v", got, err)
			}
			break
		}
		time.Sleep(2 * time.Millisecond) // a slow reader
	}
	if got != want {
		t.Fatalf("got %d bytes of replies before the close, want %d (%d lost)", got, want, want-got)
	}
}
