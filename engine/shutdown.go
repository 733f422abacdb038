package engine

import (
	"context"
	"net"
	"time"
)

// shutdownPoll is how often the shutdown waits look again.
const shutdownPoll = 10 * time.Millisecond

// Draining reports whether puts are refused: after SetDraining (SIGUSR1)
// or BeginShutdown.
func (s *Server) Draining() bool { return s.draining.Load() }

// BeginShutdown starts a graceful shutdown:
//  1. the listeners close, so no new connection is accepted;
//  2. put answers DRAINING, and Draining reports true;
//  3. the store hands no job out: new reserves wait (or time out) and
//     blocked ones stay blocked.
//
// Everything else keeps working, so workers can delete, release, bury or
// touch the jobs they hold. WaitIdle tells when none is held; Stop ends.
func (s *Server) BeginShutdown() {
	s.draining.Store(true)
	s.store.HoldJobs()
	select {
	case <-s.ready:
		for _, l := range []net.Listener{s.ln, s.tlsLn} {
			if l != nil {
				_ = l.Close()
			}
		}
	default:
	}
}

// WaitIdle returns once no job is reserved by this server's sessions
// (Config.Idle), or with ctx's error when ctx is done first.
func (s *Server) WaitIdle(ctx context.Context) error {
	idle := s.cfg.Idle
	if idle == nil {
		idle = func() bool { return s.store.Stats().Reserved == 0 }
	}
	return pollUntil(ctx, idle)
}

// awaitHeldReplies waits until no reply waits for the log, or ctx is done.
func (s *Server) awaitHeldReplies(ctx context.Context) {
	_ = pollUntil(ctx, func() bool { return s.heldSessions.Load() == 0 })
}

func pollUntil(ctx context.Context, done func() bool) error {
	t := time.NewTicker(shutdownPoll)
	defer t.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// SetDraining makes every later put answer DRAINING (beanstalkd's SIGUSR1).
// It cannot be undone.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Stop shuts the server down:
//  1. the listeners close, so the accept loops end, and TLS handshakes
//     in progress give up;
//  2. replies held for the log are sent as it makes them durable, until
//     none is left or ctx is done;
//  3. every TLS session ends as after quit, followed by close_notify
//     (goodbyeTLS), unless ctx is done;
//  4. gnet closes every connection, and OnClose puts each one's reserved
//     jobs back to ready;
//  5. Run returns.
//
// The store and its log stay open; the caller closes them after Run has
// returned, which writes and fsyncs whatever was appended.
func (s *Server) Stop(ctx context.Context) error {
	select {
	case <-s.ready:
	case <-s.stopped:
		return nil
	}
	s.stopOnce.Do(func() {
		s.stopCtx = ctx
		close(s.stopping)
	})
	select {
	case <-s.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// goodbyeTLS ends each TLS session open as quit would, close_notify
// after its last reply (tlsConn.finish), as Stop begins to close the
// connections: a TLS client then reads the end of its stream, where a
// bare TCP close cannot be told from one cut short. Best effort: not
// once ctx is done.
func (s *Server) goodbyeTLS(ctx context.Context) {
	if s.tlsLn == nil || ctx.Err() != nil {
		return
	}
	_ = s.onEveryLoop(ctx, func(ls *loopState) {
		for ss := range ls.tlsSessions {
			if tc, ok := ss.conn.(*tlsConn); ok {
				tc.finish(ss) // which forgets ss here
			}
		}
	})
}
