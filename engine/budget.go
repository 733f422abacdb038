package engine

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// budgetRecheck is how often the enforcer looks at the total by itself.
const budgetRecheck = 100 * time.Millisecond

// account records that ss now holds n bytes for its connection, and
// whether gnet holds unread replies for it (it is then polled from OnTick,
// since gnet reports no "drained"). Loop goroutine only.
func (s *Server) account(ss *session, n int64, unread bool) {
	// Only this loop writes ss.holding, and a session is in the loop's set
	// exactly while it holds something.
	old := ss.holding.Load()
	// Into the loop's set first: the enforcer, woken below, must find it.
	if tracked := n > 0; tracked != (old > 0) {
		ss.loop.mu.Lock()
		if tracked {
			ss.loop.holding[ss] = struct{}{}
		} else {
			delete(ss.loop.holding, ss)
		}
		ss.loop.mu.Unlock()
	}
	if old != n {
		ss.holding.Store(n)
		if total := s.bufferHeld.Add(n - old); n > old && total > s.cfg.MaxBufferMemory {
			select {
			case s.overBudget <- struct{}{}:
			default:
			}
		}
	}
	if unread != ss.watched {
		ss.watched = unread
		s.watchedMu.Lock()
		if unread {
			s.watched[ss] = struct{}{}
		} else {
			delete(s.watched, ss)
		}
		s.watchedMu.Unlock()
	}
}

// wakeWatched asks the loop of each session with unread replies to look
// again: to resume a throttled session, and to account for what its client
// has read meanwhile.
func (s *Server) wakeWatched() {
	s.watchedMu.Lock()
	for ss := range s.watched {
		_ = ss.conn.Wake(nil)
	}
	s.watchedMu.Unlock()
}

// enforceBudget closes connections while the bytes held for connections
// exceed MaxBufferMemory, the ones holding the most first, until stop.
func (s *Server) enforceBudget(stop <-chan struct{}) {
	// closing are the sessions this goroutine has closed and whose loops
	// have not yet run OnClose.
	closing := make(map[*session]struct{})
	// The check also runs on a timer, so that a session whose close did
	// not free enough is followed by the next without waiting for growth.
	recheck := time.NewTicker(budgetRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.overBudget:
		case <-recheck.C:
			if s.bufferHeld.Load() <= s.cfg.MaxBufferMemory {
				continue
			}
		}
		s.evictLargest(closing)
	}
}

// evictLargest closes the sessions holding the most until what is left
// fits the budget. Closing is asynchronous: a session's bytes leave the
// total when its loop runs OnClose, so sessions already being closed are
// counted as gone and not picked twice.
func (s *Server) evictLargest(closing map[*session]struct{}) {
	limit := s.cfg.MaxBufferMemory
	total := s.bufferHeld.Load()
	if total <= limit {
		return
	}
	type holder struct {
		ss *session
		n  int64
	}
	var hs []holder
	stillClosing := make(map[*session]struct{}, len(closing))
	s.loopsMu.Lock()
	for _, ls := range s.loops {
		ls.mu.Lock()
		for ss := range ls.holding {
			n := ss.holding.Load()
			if _, ok := closing[ss]; ok {
				stillClosing[ss] = struct{}{}
				total -= n
				continue
			}
			hs = append(hs, holder{ss, n})
		}
		ls.mu.Unlock()
	}
	s.loopsMu.Unlock()
	// A closed session leaves its loop's set; forget it here too.
	clear(closing)
	maps.Copy(closing, stillClosing)

	slices.SortFunc(hs, func(a, b holder) int { return cmp.Compare(b.n, a.n) })
	closed := 0
	var freed int64
	for _, h := range hs {
		if total <= limit {
			break
		}
		closing[h.ss] = struct{}{}
		_ = h.ss.conn.Close()
		total -= h.n
		freed += h.n
		closed++
	}
	if closed == 0 {
		return
	}
	s.conns.evicted.Add(uint64(closed))
	if n, ok := s.evictLog.note(uint64(closed)); ok {
		s.log.Warn().Uint64("closed", n).Int64("freed_bytes", freed).Int64("limit_bytes", limit).
			Msg("buffer memory over budget; closing the connections holding the most")
	}
}
