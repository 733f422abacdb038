package engine

import (
	"context"

	"github.com/panjf2000/gnet/v2"

	"github.com/sproutmq/sprout/store"
)

// ThrottledCount is how many sessions are throttled: not served because
// their client does not read its replies. Only a session's event loop
// touches its throttled flag, so each is read there. A throttled session
// always has unread replies, so it is among the watched ones.
func (s *Server) ThrottledCount() int {
	s.watchedMu.Lock()
	watched := make([]*session, 0, len(s.watched))
	for ss := range s.watched {
		watched = append(watched, ss)
	}
	s.watchedMu.Unlock()
	throttled := make(chan bool, len(watched))
	for _, ss := range watched {
		err := ss.conn.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			throttled <- ss.throttled && !ss.closed
			return nil
		}))
		if err != nil {
			throttled <- false // the loop has stopped
		}
	}
	n := 0
	for range watched {
		if <-throttled {
			n++
		}
	}
	return n
}

// BodyBytesRead is how many bytes of put bodies were read from the socket
// straight into jobs.
func (s *Server) BodyBytesRead() uint64 { return s.bodyBytesRead.Load() }

// ReadBufferCap is the most gnet reads from a socket per event.
const ReadBufferCap = readBufferCap

// EventLoopCount is how many event loops Ping reaches.
func (s *Server) EventLoopCount() int { return len(s.eventLoops) }

// BlockLoop occupies event loop i, as a command stuck there would, until
// release is called.
func (s *Server) BlockLoop(i int) (release func()) {
	unblock, running := make(chan struct{}), make(chan struct{})
	err := s.eventLoops[i].Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		close(running)
		<-unblock
		return nil
	}))
	if err != nil {
		panic(err)
	}
	<-running
	return func() { close(unblock) }
}

// BodiesReused is how many large bodies were put in memory recycled from
// deleted jobs.
func (s *Server) BodiesReused() uint64 { return s.bodies.reused.Load() }

// HandshakeReserve is what a TLS handshake in flight is taken to hold.
const HandshakeReserve = handshakeReserve

// LocalQueue is the single node's Queue on c, for fakes that answer as it
// does.
func LocalQueue(c *store.Client) Queue { return (*localQueue)(c) }

// HeldSessions is how many sessions have replies waiting for the log.
func (s *Server) HeldSessions() int64 { return s.heldSessions.Load() }
