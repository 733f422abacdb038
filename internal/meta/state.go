package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// The format's constants: changing one moves tubes or jobs.
const (
	// Slots is how many hash slots the tubes' names fall into.
	Slots = 4096
	// MaxGroups bounds the shard groups of a cluster.
	MaxGroups = 256
	// SeqBits is the width of a job id's sequence; the 8 bits above it
	// are its prefix, and every id is below 1<<(SeqBits+8) = 2^53.
	SeqBits = 45
	// Prefixes is how many id prefixes there are.
	Prefixes = 1 << 8
)

// Member is a member of the cluster: its name and Raft member id.
type Member struct {
	Name     string `json:"name"`
	ID       uint64 `json:"id"`
	Draining bool   `json:"draining,omitempty"` // being removed: its replicas and leaderships move away
	Cordoned bool   `json:"cordoned,omitempty"` // leads no group: its leaderships move away, its replicas stay
}

// MayLead reports whether the member may be given a group's leadership:
// it is neither draining nor cordoned.
func (m Member) MayLead() bool { return !m.Draining && !m.Cordoned }

// Replica is one member's replica of a group.
type Replica struct {
	Member  string `json:"member"`
	Learner bool   `json:"learner,omitempty"`
}

// Group is a shard group.
type Group struct {
	ID       uint16    `json:"id"`
	Replicas []Replica `json:"replicas"`
	// Preferred is the member that campaigns first at formation, so that
	// leaderships are spread from the start.
	Preferred string `json:"preferred"`
}

// Voters are the members whose replicas of g vote.
func (g *Group) Voters() []string {
	var v []string
	for _, r := range g.Replicas {
		if !r.Learner {
			v = append(v, r.Member)
		}
	}
	return v
}

// Holds reports whether member holds a replica of g.
func (g *Group) Holds(member string) bool {
	return slices.ContainsFunc(g.Replicas, func(r Replica) bool { return r.Member == member })
}

// Placement sends the tubes whose names start with Prefix to Group; it
// routes only once Active.
type Placement struct {
	Prefix string `json:"prefix"`
	Group  uint16 `json:"group"`
	Active bool   `json:"active,omitempty"`
}

// State is the cluster's placement. Its zero value is not a state:
// Formation makes the first.
type State struct {
	Replicas int           `json:"replicas"` // R, each group's voters
	Members  []Member      `json:"members"`  // sorted by name
	Groups   []Group       `json:"groups"`   // group g at index g
	Slots    [Slots]uint16 `json:"slots"`
	// Prefixes maps each id prefix to its group plus one; 0 is a prefix
	// no group took.
	Prefixes [Prefixes]uint16 `json:"prefixes"`
	// Exact are tubes placed by name; Placements, by prefix, sorted.
	Exact      map[string]uint16 `json:"exact"`
	Placements []Placement       `json:"placements,omitempty"`
}

// ErrFormation refuses a formation that cannot be made.
var ErrFormation = errors.New("meta: no such formation")

// Formation is a new cluster's state, the same on every member that
// computes it from the same members (in any order), groups and replicas.
func Formation(members []Member, groups, replicas int) (*State, error) {
	switch {
	case len(members) == 0:
		return nil, fmt.Errorf("%w: no members", ErrFormation)
	case groups < 1 || groups > MaxGroups:
		return nil, fmt.Errorf("%w: %d groups (1 to %d)", ErrFormation, groups, MaxGroups)
	case replicas < 1:
		return nil, fmt.Errorf("%w: %d replicas", ErrFormation, replicas)
	}
	ms := slices.SortedFunc(slices.Values(members), func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	for i := 1; i < len(ms); i++ {
		if ms[i].Name == ms[i-1].Name {
			return nil, fmt.Errorf("%w: member %s twice", ErrFormation, ms[i].Name)
		}
	}
	m := len(ms)
	s := &State{Replicas: min(replicas, m), Members: ms, Exact: map[string]uint16{}}
	led := make([]int, m)
	for g := range groups {
		grp := Group{ID: uint16(g)}
		lead := -1
		for k := range s.Replicas {
			i := (g*s.Replicas + k) % m
			grp.Replicas = append(grp.Replicas, Replica{Member: ms[i].Name})
			if lead < 0 || led[i] < led[lead] {
				lead = i
			}
		}
		led[lead]++
		grp.Preferred = ms[lead].Name
		s.Groups = append(s.Groups, grp)
		s.Prefixes[g] = uint16(g) + 1
	}
	for i := range s.Slots {
		s.Slots[i] = uint16(i % groups)
	}
	return s, nil
}

// Slot is the hash slot of a tube's name.
func Slot(name string) int { return int(xxhash.Sum64String(name) >> (64 - 12)) }

// Owner is the group that owns the tube name.
func (s *State) Owner(name string) uint16 { return s.owner(name, Placement{}) }

// OwnerPlacing is the group that would own the tube name were p an
// active placement, in the place of any of p's prefix.
func (s *State) OwnerPlacing(name string, p Placement) uint16 {
	p.Active = true
	return s.owner(name, p)
}

// owner is Owner with p among the placements (none if its prefix is "").
func (s *State) owner(name string, p Placement) uint16 {
	if g, ok := s.Exact[name]; ok {
		return g
	}
	if g, ok := s.prefixOwner(name, p); ok {
		return g
	}
	return s.Slots[Slot(name)]
}

// OwnerPlacingSlots is the group that would own the tube name were the
// slots s with s mod modulus = g placed in group g (a growth of the
// groups' count to modulus).
func (s *State) OwnerPlacingSlots(name string, g uint16, modulus int) uint16 {
	if e, ok := s.Exact[name]; ok {
		return e
	}
	if p, ok := s.prefixOwner(name, Placement{}); ok {
		return p
	}
	if slot := Slot(name); slot%modulus != int(g) {
		return s.Slots[slot]
	}
	return g
}

// PlaceSlots places in group g the slots s with s mod modulus = g.
func (s *State) PlaceSlots(g uint16, modulus int) {
	for i := int(g); i < Slots; i += modulus {
		s.Slots[i] = g
	}
}

// OwnerWithout is the group that would own the tube name were the
// placement of prefix undone.
func (s *State) OwnerWithout(name, prefix string) uint16 {
	if g, ok := s.Exact[name]; ok {
		return g
	}
	if g, ok := s.prefixOwner(name, Placement{Prefix: prefix, Group: unplaced}); ok {
		return g
	}
	return s.Slots[Slot(name)]
}

// unplaced is prefixOwner's p that stands for no placement of its prefix.
const unplaced = 1<<16 - 1

// prefixOwner is the group of the longest active placement of a prefix
// of name, p in the place of its prefix's (none if its prefix is ""; its
// prefix placed nowhere if its group is unplaced), if one has one.
func (s *State) prefixOwner(name string, p Placement) (uint16, bool) {
	best := Placement{}
	if p.Prefix != "" && p.Group != unplaced && strings.HasPrefix(name, p.Prefix) {
		best = p
	}
	for _, q := range s.Placements {
		if q.Active && q.Prefix != p.Prefix && len(q.Prefix) > len(best.Prefix) && strings.HasPrefix(name, q.Prefix) {
			best = q
		}
	}
	return best.Group, best.Prefix != ""
}

// JobID is the id of sequence number seq under prefix.
func JobID(prefix uint8, seq uint64) uint64 { return uint64(prefix)<<SeqBits | seq&(1<<SeqBits-1) }

// GroupOfID is the group whose prefix id carries, and false for an id
// past 2^53 or of a prefix no group took.
func (s *State) GroupOfID(id uint64) (uint16, bool) {
	p := id >> SeqBits
	if p >= Prefixes || s.Prefixes[p] == 0 {
		return 0, false
	}
	return s.Prefixes[p] - 1, true
}

// member is the member named name, or nil.
func (s *State) member(name string) *Member {
	i, ok := slices.BinarySearchFunc(s.Members, name, func(m Member, n string) int { return cmp.Compare(m.Name, n) })
	if !ok {
		return nil
	}
	return &s.Members[i]
}
