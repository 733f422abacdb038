package engine

// ThrottledCount exposes how many sessions are parked on a full outbound
// buffer, for the back-pressure test.
func (s *Server) ThrottledCount() int {
	s.throttledMu.Lock()
	defer s.throttledMu.Unlock()
	return len(s.throttled)
}
