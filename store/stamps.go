package store

import (
	"sync/atomic"

	"github.com/sproutmq/sprout/internal/atomicmax"
)

// Tube creation stamps (docs/design/shards.md 5.5): in a cluster of many
// groups, list-tubes merges each group's list, and each tube carries the
// wall-clock nanoseconds its group's leader made it at, raised above the
// latest stamp the asking member had seen, so that one session's creates
// in several groups keep their order. A store stamps every tube it makes;
// a single node never reads the stamps.

// StampedTube is a tube's name and creation stamp.
type StampedTube struct {
	Name  string
	Stamp uint64
}

// stamps is a store's stamping state.
type stamps struct {
	// latest is the stamp of the tube made last; floor, the latest stamp
	// a request said it had seen (RaiseStamp). A new tube's stamp is
	// above both.
	latest, floor atomic.Uint64
}

// RaiseStamp has the tubes made from now on stamped above stamp: a
// request's, the latest its member has seen.
func (s *Store) RaiseStamp(stamp uint64) {
	atomicmax.Uint64(&s.stamps.floor, stamp)
}

// LatestStamp is the stamp of the tube made last, or the floor if that is
// later: what a reply tells its member it has seen.
func (s *Store) LatestStamp() uint64 {
	return max(s.stamps.latest.Load(), s.stamps.floor.Load())
}

// nextStampLocked is a new tube's stamp: the wall clock, above every
// stamp given and the floor. registryMu is held for writing.
func (s *Store) nextStampLocked() uint64 {
	stamp := max(uint64(max(s.wall(s.now()), 0)), s.stamps.latest.Load()+1, s.stamps.floor.Load()+1)
	s.stamps.latest.Store(stamp)
	return stamp
}

// StampedTubes lists the tubes in beanstalkd's order (TubeNames), each
// with its creation stamp.
func (s *Store) StampedTubes() []StampedTube {
	s.registryMu.RLock()
	defer s.registryMu.RUnlock()
	tubes := make([]StampedTube, len(s.tubeList))
	for i, t := range s.tubeList {
		tubes[i] = StampedTube{Name: t.name, Stamp: t.stamp}
	}
	return tubes
}
