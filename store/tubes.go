package store

// EachTube calls fn with the figures of every tube, in list-tubes order
// (creation order, except that a freed tube's slot is taken by the last
// one; "default" is always first). It is for readers off the event loops,
// such as a metrics scrape: the registry lock is held only while the list
// of tubes is copied, and each tube's lock only while its figures are
// copied, never while fn runs, so a pass over ten thousand tubes holds up
// a command for at most one tube's copy.
//
// A tube freed during the pass may still be reported, with the figures it
// had; one created during it may be missed. fn must not keep st.
func (s *Store) EachTube(fn func(st *TubeStats)) {
	s.registryMu.RLock()
	tubes := make([]*Tube, len(s.tubeList))
	copy(tubes, s.tubeList)
	s.registryMu.RUnlock()
	var st TubeStats
	for _, t := range tubes {
		t.mu.Lock()
		st = s.tubeStatsLocked(t)
		t.mu.Unlock()
		fn(&st)
	}
}
