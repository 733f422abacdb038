package engine

import (
	"cmp"
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
// ready and the replies it held for the log are dropped, never sent; the
// loops stop waiting for them (the AckSource may never call back for
// them: a member's journal forgets a lost leadership's waits). The
// listener stays open; a connection enrolled meanwhile may survive, so a
// caller that means to serve none first stops routing them here (Route).
// It needs a Route (Config.Route): only then are sessions tracked. On a
// server stopping it returns once Run has (Stop closes every connection).
//
// A cluster member that loses the leadership it served calls it before it
// starts again: its store may hold changes that never commit, and no
// client may be answered from it any more.
func (s *Server) CloseClients(ctx context.Context) error { return s.CloseClientsWhere(ctx, nil, nil) }

// CloseClientsWhere is CloseClients for the sessions whose Queue which
// picks (nil picks all): a cluster member whose router keeps the sessions
// that reach a group's leader elsewhere open across its own loss of that
// leadership closes only those served from its store, or waiting for its
// log. The loops stop waiting for lost, the AckSource of the leadership
// lost (nil: for every one); sessions that wait for another go on. It
// returns once none of them is open.
func (s *Server) CloseClientsWhere(ctx context.Context, which func(Queue) bool, lost store.AckSource) error {
	if s.cfg.Route == nil {
		return ErrNoRoute
	}
	select {
	case <-s.ready:
	default:
		return nil // no session was ever opened
	}
	closing := func(ss *session) bool { return which == nil || which(ss.queue()) }
	err := s.onEveryLoop(ctx, func(ls *loopState) {
		for ss := range ls.sessions {
			if closing(ss) {
				_ = ss.conn.Close() // OnClose runs later, on this loop
			}
		}
		for _, f := range ls.flushers {
			if lost == nil || f.acks == lost {
				f.forget()
			}
		}
	})
	if err != nil {
		return s.unlessStopping(ctx, err)
	}
	if which == nil {
		return pollUntil(ctx, func() bool { return s.conns.current.Load() == 0 })
	}
	var loopErr error
	err = pollUntil(ctx, func() bool {
		left := 0
		loopErr = s.onEveryLoop(ctx, func(ls *loopState) {
			for ss := range ls.sessions {
				if closing(ss) {
					left++
				}
			}
		})
		return loopErr != nil || left == 0
	})
	return s.unlessStopping(ctx, cmp.Or(err, loopErr))
}

// unlessStopping is err, unless the server is stopping, where gnet
// refuses the loops' work: Stop closes every connection, so none is open
// once Run has returned. A cluster member that hands its leaderships over
// after its engine stopped (a graceful shutdown) loses them, and rebuilds
// its stores with no client left.
func (s *Server) unlessStopping(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	select {
	case <-s.stopping:
	default:
		return err
	}
	select {
	case <-s.stopped: // first: a select picks at random among ready cases
		return nil
	default:
	}
	select {
	case <-s.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onEveryLoop runs fn on every event loop, one after another, each on its
// loop's goroutine, and returns once the last has run.
func (s *Server) onEveryLoop(ctx context.Context, fn func(*loopState)) error {
	for i, el := range s.eventLoops {
		ls := s.loopFor(el)
		done := make(chan struct{})
		err := el.Execute(ctx, gnet.RunnableFunc(func(context.Context) error {
			defer close(done)
			fn(ls)
			return nil
		}))
		if err != nil {
			return fmt.Errorf("engine: event loop %d of %d: %w", i+1, len(s.eventLoops), err)
		}
		select {
		case <-done:
		case <-s.stopped:
			// gnet drops a task queued as its loops stop.
			return fmt.Errorf("engine: event loop %d of %d: %w", i+1, len(s.eventLoops), errStopped)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// errStopped is onEveryLoop's error once Run has returned.
var errStopped = errors.New("engine: the server stopped")
