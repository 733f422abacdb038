package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/panjf2000/gnet/v2"

	"github.com/sproutmq/sprout/store"
)

// ErrNoRoute is what CloseClients returns on a server without a Route: it
// keeps no track of its sessions.
var ErrNoRoute = errors.New("engine: sessions are tracked only with a Route")

// CloseClients closes every client connection the server serves and
// returns once none is open, or with ctx's error: the event loops close
// their sessions, and as on any close each one's reserved jobs go back to
// ready and the replies it held for the log are dropped, never sent. The
// listener stays open; a connection enrolled meanwhile may survive, so a
// caller that means to serve none first stops routing them here (Route).
// It needs a Route (Config.Route): only then are sessions tracked.
//
// A cluster member that loses the leadership it served calls it before it
// starts again: its store may hold changes that never commit, and no
// client may be answered from it any more.
func (s *Server) CloseClients(ctx context.Context) error {
	if s.cfg.Route == nil {
		return ErrNoRoute
	}
	select {
	case <-s.ready:
	default:
		return nil // no session was ever opened
	}
	for i, el := range s.eventLoops {
		ls := s.loopFor(el)
		err := el.Execute(ctx, gnet.RunnableFunc(func(context.Context) error {
			for ss := range ls.sessions {
				_ = ss.conn.Close() // OnClose runs later, on this loop
			}
			return nil
		}))
		if err != nil {
			return fmt.Errorf("engine: event loop %d of %d: %w", i+1, len(s.eventLoops), err)
		}
	}
	return pollUntil(ctx, func() bool { return s.conns.current.Load() == 0 })
}

// SetStore makes st the store every new session uses, and the one stats,
// draining and shutdown read. Sessions already open keep their client of
// the old store, so it may only be called while none is open: a cluster
// member replaces a follower's store when a snapshot is installed, and a
// follower serves no session of its own (its connections go to the
// leader through Route). st must have the same AckSource: the event
// loops' flushers wait on it. Otherwise, or with sessions open, it
// returns an error and changes nothing.
func (s *Server) SetStore(st *store.Store) error {
	if st.Acks() != s.acks {
		return errors.New("engine: the new store has another AckSource")
	}
	if n := s.conns.current.Load(); n != 0 {
		return fmt.Errorf("engine: cannot replace the store under %d open sessions", n)
	}
	s.store.Store(st)
	return nil
}
