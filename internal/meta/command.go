package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Op names a command.
type Op string

// The commands: placements (pending, then activated; removed), a tube
// placed by name, and a member marked draining.
const (
	OpPlace     Op = "place"
	OpActivate  Op = "activate"
	OpUnplace   Op = "unplace"
	OpPlaceTube Op = "place-tube"
	OpDrain     Op = "drain"
)

// Command is one change to the state, as the meta group's entries will
// carry it (JSON: they are rare and small).
type Command struct {
	Op     Op     `json:"op"`
	Prefix string `json:"prefix,omitempty"` // place, activate, unplace
	Tube   string `json:"tube,omitempty"`   // place-tube
	Group  uint16 `json:"group,omitempty"`  // place, place-tube
	Member string `json:"member,omitempty"` // drain
}

// ErrCommand refuses a command the state cannot take; the state is then
// unchanged.
var ErrCommand = errors.New("meta: command refused")

// maxName is beanstalkd's longest tube name.
const maxName = 200

// Apply makes c's change, or refuses it with the state unchanged. Every
// member applies the same commands in the same order, so it decides
// only from the state and c.
func (s *State) Apply(c Command) error {
	switch c.Op {
	case OpPlace:
		if err := s.checkGroup(c.Group); err != nil {
			return err
		}
		if c.Prefix == "" || len(c.Prefix) > maxName {
			return fmt.Errorf("%w: a prefix of %d bytes", ErrCommand, len(c.Prefix))
		}
		i, found := s.placement(c.Prefix)
		if found {
			return fmt.Errorf("%w: prefix %q is placed in group %d already", ErrCommand, c.Prefix, s.Placements[i].Group)
		}
		s.Placements = slices.Insert(s.Placements, i, Placement{Prefix: c.Prefix, Group: c.Group})
	case OpActivate:
		i, found := s.placement(c.Prefix)
		if !found {
			return fmt.Errorf("%w: prefix %q is not placed", ErrCommand, c.Prefix)
		}
		s.Placements[i].Active = true
	case OpUnplace:
		i, found := s.placement(c.Prefix)
		if !found {
			return fmt.Errorf("%w: prefix %q is not placed", ErrCommand, c.Prefix)
		}
		s.Placements = slices.Delete(s.Placements, i, i+1)
	case OpPlaceTube:
		if err := s.checkGroup(c.Group); err != nil {
			return err
		}
		if c.Tube == "" || len(c.Tube) > maxName {
			return fmt.Errorf("%w: a tube name of %d bytes", ErrCommand, len(c.Tube))
		}
		s.Exact[c.Tube] = c.Group
	case OpDrain:
		m := s.member(c.Member)
		if m == nil {
			return fmt.Errorf("%w: %q is not a member", ErrCommand, c.Member)
		}
		m.Draining = true
	default:
		return fmt.Errorf("%w: unknown op %q", ErrCommand, c.Op)
	}
	return nil
}

func (s *State) checkGroup(g uint16) error {
	if int(g) >= len(s.Groups) {
		return fmt.Errorf("%w: no group %d (the cluster has %d)", ErrCommand, g, len(s.Groups))
	}
	return nil
}

// placement is where prefix's placement is, or would go, in Placements.
func (s *State) placement(prefix string) (int, bool) {
	return slices.BinarySearchFunc(s.Placements, prefix, func(p Placement, q string) int { return cmp.Compare(p.Prefix, q) })
}
