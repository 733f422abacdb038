package store

// Remote references (docs/design/shards.md 5.4): in a cluster of many
// groups, a session lives on the member its client connected to, and the
// tubes it uses and watches may live in a group led elsewhere. Each
// member tells the tube's group how many of its sessions use and watch
// it, and the group's store counts them as its own clients': in
// stats-tube's current-using and current-watching, and in the tube's
// life (a tube referenced by a session anywhere is not freed).

// remoteRef names one member's references to one tube.
type remoteRef struct {
	member uint64
	tube   string
}

// remoteCounts are a member's sessions using and watching a tube, and the
// tube they hold (one reference each, as a client's use and watch do).
type remoteCounts struct {
	using, watching uint32
	t               *Tube
}

// SetRefs sets how many of member's sessions use and watch the tube named:
// they count as this store's own clients' do, and zero for both drops
// them. The tube is made if it does not exist.
func (s *Store) SetRefs(member uint64, tube []byte, using, watching uint32) {
	s.refsMu.Lock()
	defer s.refsMu.Unlock()
	key := remoteRef{member, string(tube)}
	old := s.remote[key]
	s.setRefsLocked(key, old, remoteCounts{using: using, watching: watching, t: old.t})
}

// DropRefs drops every reference member's sessions held: its process
// restarted, it was removed, or it has been unreachable too long.
func (s *Store) DropRefs(member uint64) { s.DropRefsExcept(member, nil) }

// DropRefsExcept drops member's references to every tube keep does not
// keep (nil: to every tube). A sync sets the tubes it lists first, then
// drops the others: dropping all first would free, and make again, a
// tube only those references keep, losing its pause, its counts and its
// place in list-tubes.
func (s *Store) DropRefsExcept(member uint64, keep func(tube string) bool) {
	s.refsMu.Lock()
	defer s.refsMu.Unlock()
	for key, old := range s.remote {
		if key.member == member && (keep == nil || !keep(key.tube)) {
			s.setRefsLocked(key, old, remoteCounts{t: old.t})
		}
	}
}

// setRefsLocked moves key's counts from old to now; refsMu is held, and
// no other store lock.
func (s *Store) setRefsLocked(key remoteRef, old, now remoteCounts) {
	oldN, nowN := int64(old.using+old.watching), int64(now.using+now.watching)
	if nowN > 0 && now.t == nil {
		now.t = s.acquireTube([]byte(key.tube)) // one reference
		oldN = 1
	}
	t := now.t
	if t == nil {
		return // nothing held, nothing to hold
	}
	t.mu.Lock()
	t.nUsing += int(now.using) - int(old.using)
	t.nWatching += int(now.watching) - int(old.watching)
	t.mu.Unlock()
	if nowN > 0 {
		t.refs.Add(nowN - oldN)
		if s.remote == nil {
			s.remote = make(map[remoteRef]remoteCounts)
		}
		s.remote[key] = now
		return
	}
	// The last of them: all but one reference go now, the last through
	// releaseTube, which frees the tube if nothing else holds it.
	t.refs.Add(1 - oldN)
	delete(s.remote, key)
	s.releaseTube(t)
}
