package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// ErrNotServing is what Ping returns before the server is ready and after
// it has stopped.
var ErrNotServing = errors.New("engine: not serving")

// Ping runs a no-op task on every event loop and returns nil once all of
// them have run it; it returns ctx's error, wrapped, if any has not by the
// time ctx is done, and ErrNotServing before Ready or once Run has ended.
// A loop stuck in a command, or a deadlock, shows here. Safe from any
// goroutine; it never blocks a loop.
func (s *Server) Ping(ctx context.Context) error {
	select {
	case <-s.ready:
	default:
		return ErrNotServing
	}
	select {
	case <-s.stopped:
		return ErrNotServing
	default:
	}
	loops := s.eventLoops
	done := make(chan struct{}, len(loops)) // a late answer never blocks its loop
	answer := gnet.RunnableFunc(func(context.Context) error {
		done <- struct{}{}
		return nil
	})
	for i, el := range loops {
		if err := el.Execute(ctx, answer); err != nil {
			return fmt.Errorf("engine: event loop %d of %d: %w", i+1, len(loops), err)
		}
	}
	for answered := range len(loops) {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("engine: %d of %d event loops did not answer: %w",
				len(loops)-answered, len(loops), ctx.Err())
		}
	}
	return nil
}

// loopProbe marks the connections findLoops enrolls: the handler leaves
// them alone, so they are neither sessions nor counted.
type loopProbe struct{}

// findLoops returns the client's event loops. gnet hands out a loop only
// through a connection (Conn.EventLoop), and a client engine has no
// listener for OnBoot's Engine to work with, so one end of a socket pair
// is enrolled per expected loop before the accept loop starts: gnet's
// least-connections balancer puts each on a loop that has none, so every
// loop is reached once. The pairs are closed again at once; a loop lives
// as long as the client.
func (s *Server) findLoops(client *gnet.Client) ([]gnet.EventLoop, error) {
	want := s.cfg.Loops
	var loops []gnet.EventLoop
	var peers []*os.File
	defer func() {
		for _, p := range peers {
			_ = p.Close() // the enrolled end reads EOF and closes
		}
	}()
	for range want {
		c, peer, err := socketPair()
		if err != nil {
			return loops, err
		}
		peers = append(peers, peer)
		gc, err := client.EnrollContext(c, loopProbe{}) // closes c
		if err != nil {
			return loops, err
		}
		el := gc.EventLoop()
		if !containsLoop(loops, el) {
			loops = append(loops, el)
		}
	}
	if len(loops) != want {
		return loops, fmt.Errorf("engine: found %d of %d event loops", len(loops), want)
	}
	return loops, nil
}

func containsLoop(loops []gnet.EventLoop, el gnet.EventLoop) bool {
	for _, l := range loops {
		if l == el {
			return true
		}
	}
	return false
}

// socketPair returns a connected pair of unix stream sockets: one as a
// net.Conn for gnet, the other as a file.
func socketPair() (net.Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: socketpair: %w", err)
	}
	unix.CloseOnExec(fds[0])
	unix.CloseOnExec(fds[1])
	f := os.NewFile(uintptr(fds[0]), "loop-probe")
	peer := os.NewFile(uintptr(fds[1]), "loop-probe-peer")
	c, err := net.FileConn(f) // a dup of f's descriptor
	_ = f.Close()
	if err != nil {
		_ = peer.Close()
		return nil, nil, err
	}
	return c, peer, nil
}
