package engine_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
)

// TestSmallInputCapHoldsBlockedClientBack: with --max-input below 64 KiB,
// a client that pipelines commands behind a waiting reserve is held back
// and answered, as at the default cap (TestBlockedInputHeldBack) and as
// beanstalkd answers it, instead of being closed once its input passes
// the cap. Its session stops reading one read (ReadBufferCap) below the
// cap, so what it holds stays under the cap; with a cap of one read or
// less, at its first byte unread, so it holds at most one read. It used
// to stop reading only at 48 KiB, and was closed at the cap first.
func TestSmallInputCapHoldsBlockedClientBack(t *testing.T) {
	for _, limit := range []int{engine.ReadBufferCap, engine.ReadBufferCap + 8<<10} {
		t.Run(fmt.Sprintf("cap %d", limit), func(t *testing.T) {
			srv, network, addr := startServer(t, engine.Config{MaxInputBuffered: limit})
			c := dialRaw(t, network, addr)
			c.send("list-tube-used\r\n") // open: its close would show
			c.expect("USING default\r\n")
			const commands = 4096 // 64 KiB behind the reserve
			written := make(chan error, 1)
			go func() {
				_, err := io.WriteString(c.c, "reserve-with-timeout 2\r\n"+strings.Repeat("list-tube-used\r\n", commands))
				written <- err
			}()
			// It pauses at limit-ReadBufferCap bytes unread, or at the first.
			pauseAt := max(int64(limit-engine.ReadBufferCap), 1)
			most := int64(max(limit, engine.ReadBufferCap))
			waitFor(t, "the input behind the reserve to be read", func() bool {
				l := srv.Limits()
				if l.Open == 0 {
					t.Fatalf("closed with input behind the reserve, instead of held back")
				}
				return l.BufferHeld >= pauseAt
			})
			for range 30 {
				if held := srv.Limits().BufferHeld; held > most {
					t.Fatalf("%d bytes of input held behind the reserve, want at most %d", held, most)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got, err := c.reply(5 * time.Second); err != nil || got != "TIMED_OUT\r\n" {
				t.Fatalf("got %q (%v), want TIMED_OUT: closed for input it was not let consume", got, err)
			}
			for i := range commands {
				if line, err := c.reply(5 * time.Second); err != nil || line != "USING default\r\n" {
					t.Fatalf("reply %d behind the reserve: %q (%v)", i, line, err)
				}
			}
			if err := <-written; err != nil {
				t.Fatalf("the client's write: %v", err)
			}
		})
	}
}
