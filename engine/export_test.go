package engine

import (
	"context"

	"github.com/panjf2000/gnet/v2"
)

// ThrottledCount exposes how many sessions are polled for unread replies
// (throttled ones among them), for the back-pressure test.
func (s *Server) ThrottledCount() int {
	s.watchedMu.Lock()
	defer s.watchedMu.Unlock()
	return len(s.watched)
}

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
