package engine

import (
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"

	"github.com/sproutmq/sprout/store"
)

// loopState is what one event loop's sessions share.
type loopState struct {
	srv *Server        // immutable
	el  gnet.EventLoop // immutable

	// flushers send held replies, one per AckSource the loop's sessions
	// have waited for (the store's log; later, each local group's
	// journal), made when first needed; loop goroutine only.
	flushers []*loopFlusher

	// batch collects the replies of one serve call; only the loop's
	// goroutine touches it, and serve is never re-entered on a loop.
	batch replies
	// answer is where a Queue answers the command being executed; loop
	// goroutine only, read before the next command.
	answer Answer

	// queues are the sessions' Queues when the server makes them
	// (Config.Queues), with their pending answers (remote); nil, and each
	// session's store client its queue, otherwise. Loop goroutine only.
	queues map[*session]*remote

	// tlsOut collects the records a TLS session's tls.Conn writes, until
	// the session hands them to gnet; only the loop's goroutine touches
	// it, and it is empty between calls.
	tlsOut []byte
	// tlsIn is where a TLS session's records are decrypted, until the
	// callback ends (tlsConn.settle); loop goroutine only.
	tlsIn []byte

	// sessions are the loop's open sessions, for CloseClients; only the
	// loop's goroutine touches it. Nil, and nothing tracked, unless the
	// server has a Route (Config.Route).
	sessions map[*session]struct{}
	// tlsSessions are the loop's open TLS sessions, which Stop ends with
	// close_notify (goodbyeTLS); made at the first. Loop goroutine only.
	tlsSessions map[*session]struct{}

	mu      sync.Mutex
	holding map[*session]struct{} // guarded by mu: sessions holding buffer bytes

	// reading is 1 + the body pool's epoch when the loop's current
	// callback began, 0 between callbacks (bodies.go); written by the
	// loop, read by the pool. Unused without a pool.
	reading atomic.Uint64
}

// loopFor returns the shared state of event loop el.
func (s *Server) loopFor(el gnet.EventLoop) *loopState {
	s.loopsMu.Lock()
	defer s.loopsMu.Unlock()
	ls := s.loops[el]
	if ls == nil {
		ls = &loopState{srv: s, el: el, batch: replies{keep: keepBatch}, holding: make(map[*session]struct{})}
		if s.cfg.Route != nil {
			ls.sessions = make(map[*session]struct{})
		}
		if s.cfg.Queues != nil {
			ls.queues = make(map[*session]*remote)
		}
		if s.bodies != nil {
			s.bodies.addReader(&ls.reading)
		}
		s.loops[el] = ls
	}
	return ls
}

// flusherFor is the loop's flusher for held replies waiting for src.
// Loop goroutine only.
func (ls *loopState) flusherFor(src store.AckSource) *loopFlusher {
	for _, f := range ls.flushers {
		if f.acks == src {
			return f
		}
	}
	f := newLoopFlusher(ls.el, src, &ls.srv.heldSessions)
	ls.flushers = append(ls.flushers, f)
	return f
}
