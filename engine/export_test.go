package engine

// ThrottledCount exposes how many sessions are polled for unread replies
// (throttled ones among them), for the back-pressure test.
func (s *Server) ThrottledCount() int {
	s.watchedMu.Lock()
	defer s.watchedMu.Unlock()
	return len(s.watched)
}
