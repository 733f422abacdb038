package replication

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// A tube moves from one shard group to another (docs/design/shards.md
// 3.3, as built: internal/member's moves of tubes) through records that
// name it (wal.KindMeta) in two groups' logs: its source group freezes it
// (its commands are refused, to be sent again, while its reserved jobs
// are ended by their holders), the destination's leader takes its jobs
// as its own records, and group 0, which every member holds, decides:
// the move's placement, or its abort, whichever commits first. The
// source then drops the tube's jobs and keeps refusing it (moved out),
// or, aborted, thaws it. What those records made is each group's
// TubeBook, kept with its book by checkpoints and snapshots.

// What a KindMeta record does (its State), ProposeTube's what; Tube is
// the tube, Deadline the move's id, Pri a group.
const (
	// TubePlace: in group 0, Tube lives in group Pri from now on, placed
	// by move Deadline from group Delay, unless that move was aborted.
	TubePlace uint8 = 1
	// TubeAbort: in group 0, move Deadline of Tube is aborted, unless it
	// placed the tube already.
	TubeAbort uint8 = 2
	// TubeFreeze: Tube is frozen in this group for move Deadline to group
	// Pri.
	TubeFreeze uint8 = 3
	// TubeThaw: Tube is no longer frozen here, if it is for move
	// Deadline (an aborted move; or a tube moving in again, whose earlier
	// move out is over).
	TubeThaw uint8 = 4
	// TubeMovedOut: Tube's move Deadline placed it elsewhere, and its
	// jobs here are dropped: it stays refused here.
	TubeMovedOut uint8 = 5
)

// maxDecided bounds the moves group 0 remembers the outcome of: a move's
// parties read its outcome within seconds of it.
const maxDecided = 1024

// TubeBook is what moves of tubes made of a group's book.
type TubeBook struct {
	// Placed are the tubes moves placed, by name, and their groups
	// (group 0 only): they route there, not by their names' hash.
	Placed map[string]uint16 `json:"placed,omitempty"`
	// Decided are moves' outcomes, by id (group 0 only): true placed,
	// false aborted. At most maxDecided, the oldest dropped first.
	Decided map[uint64]bool `json:"decided,omitempty"`
	// Order is Decided's ids in the order they were decided.
	Order []uint64 `json:"order,omitempty"`
	// Out are, by group, the groups tubes were moved to from it (group 0
	// only): a job keeps its id, so one of a group's prefix may be in
	// any of them, or in theirs.
	Out map[uint16][]uint16 `json:"out,omitempty"`
	// Frozen are this group's tubes moving out or moved out, by name.
	Frozen map[string]Frozen `json:"frozen,omitempty"`
	// Paused are this group's tubes' pauses, by name, as its leader's
	// store logged them (store.Options.LogPauses): the next leader's
	// store takes them (store.Store.SetPauses).
	Paused map[string]store.Pause `json:"paused,omitempty"`
}

// Frozen is a tube of a group moving out (Moved false) or moved out.
type Frozen struct {
	Move  uint64 `json:"move"`
	To    uint16 `json:"to"`
	Moved bool   `json:"moved,omitempty"`
}

// IsZero reports whether b holds nothing (omitzero).
func (b TubeBook) IsZero() bool {
	return len(b.Placed) == 0 && len(b.Decided) == 0 && len(b.Frozen) == 0 && len(b.Paused) == 0
}

// clone returns a copy that shares nothing with b.
func (b TubeBook) clone() TubeBook {
	out := make(map[uint16][]uint16, len(b.Out))
	for g, to := range b.Out {
		out[g] = slices.Clone(to)
	}
	return TubeBook{Placed: maps.Clone(b.Placed), Decided: maps.Clone(b.Decided), Order: slices.Clone(b.Order),
		Out: out, Frozen: maps.Clone(b.Frozen), Paused: maps.Clone(b.Paused)}
}

// equal reports whether b and o hold the same.
func (b TubeBook) equal(o TubeBook) bool {
	return maps.Equal(b.Placed, o.Placed) && maps.Equal(b.Decided, o.Decided) && maps.Equal(b.Frozen, o.Frozen) &&
		maps.EqualFunc(b.Out, o.Out, slices.Equal) && maps.Equal(b.Paused, o.Paused)
}

// apply makes r's change and reports whether it changed b.
func (b *TubeBook) apply(r *wal.Record) bool {
	move := uint64(r.Deadline)
	switch r.State {
	case TubePlace, TubeAbort:
		if _, ok := b.Decided[move]; ok {
			return false // the first of place and abort decides
		}
		if b.Decided == nil {
			b.Decided = make(map[uint64]bool)
		}
		placed := r.State == TubePlace
		b.Decided[move] = placed
		b.Order = append(b.Order, move)
		if len(b.Order) > maxDecided {
			delete(b.Decided, b.Order[0])
			b.Order = slices.Delete(b.Order, 0, 1)
		}
		if placed {
			if b.Placed == nil {
				b.Placed = make(map[string]uint16)
			}
			to, from := uint16(r.Pri), uint16(r.Delay)
			b.Placed[r.Tube] = to
			if b.Out == nil {
				b.Out = make(map[uint16][]uint16)
			}
			if !slices.Contains(b.Out[from], to) {
				b.Out[from] = append(b.Out[from], to)
			}
		}
		return true
	case TubeFreeze:
		if f, ok := b.Frozen[r.Tube]; ok && f.Move == move {
			return false
		}
		if b.Frozen == nil {
			b.Frozen = make(map[string]Frozen)
		}
		b.Frozen[r.Tube] = Frozen{Move: move, To: uint16(r.Pri)}
		return true
	case TubeThaw:
		if f, ok := b.Frozen[r.Tube]; !ok || f.Move != move {
			return false
		}
		delete(b.Frozen, r.Tube)
		return true
	case TubeMovedOut:
		f, ok := b.Frozen[r.Tube]
		if !ok || f.Move != move || f.Moved {
			return false
		}
		f.Moved = true
		b.Frozen[r.Tube] = f
		return true
	case wal.MetaPause:
		// The pauses that have ended go; which is as this member's clock
		// says, which only bounds what it keeps: an ended pause pauses
		// nothing (store.Store.SetPauses).
		now := time.Now().UnixNano()
		maps.DeleteFunc(b.Paused, func(_ string, p store.Pause) bool { return p.Until < now })
		if r.Delay == 0 {
			_, ok := b.Paused[r.Tube]
			delete(b.Paused, r.Tube)
			return ok
		}
		if b.Paused == nil {
			b.Paused = make(map[string]store.Pause)
		}
		b.Paused[r.Tube] = store.Pause{Dur: time.Duration(r.Delay), Until: r.Deadline}
		return true
	}
	return false
}

// Tubes is what moves of tubes made of this group's book (TubeBook), as
// of the last change applied here.
func (n *Node) Tubes() TubeBook {
	if b := n.tubes.Load(); b != nil {
		return *b
	}
	return TubeBook{}
}

// AnyFrozen reports whether a tube is frozen or moved out in this group
// (FrozenTube), and whether one is frozen and not yet moved out (its jobs
// may be here still), reading no lock.
func (n *Node) AnyFrozen() (frozen, moving bool) {
	b := n.tubes.Load()
	return b != nil && len(b.Frozen) > 0, n.moving.Load()
}

// FrozenTube reports whether the tube is frozen or moved out in this
// group: its commands go to its group (what the router asks of every
// request naming a tube, so it reads no lock).
func (n *Node) FrozenTube(name []byte) bool {
	b := n.tubes.Load()
	if b == nil || len(b.Frozen) == 0 {
		return false
	}
	_, ok := b.Frozen[string(name)]
	return ok
}

// setTubes publishes b as the node's TubeBook, gives its store the
// pauses, and tells OnTubes.
func (n *Node) setTubes(b TubeBook) {
	c := b.clone()
	moving := false
	for _, f := range c.Frozen {
		moving = moving || !f.Moved
	}
	n.moving.Store(moving) // before the book: a reader seeing a freeze sees it moving
	n.tubes.Store(&c)
	if n.store != nil {
		n.store.SetPauses(c.Paused)
	}
	if fn := n.onTubes.Load(); fn != nil {
		(*fn)(c)
	}
}

// OnTubes has fn told of the node's TubeBook now and at each change, on
// the node's goroutine (it must not block): the member routes by group
// 0's, and refuses what a group's freezes.
func (n *Node) OnTubes(fn func(TubeBook)) {
	n.onTubes.Store(&fn)
	fn(n.Tubes())
}

// ProposeTube proposes a record of a tube's move in this group's log
// (internal/member's moves of tubes): what (TubePlace and the others),
// the tube, the move and a group; it returns once this member has
// applied it, or once its outcome is known not to be the change (a
// place after an abort, a thaw of another move: applied, nothing
// changes). Only the group's serving leader proposes (ErrNotServing).
// A TubePlace's from is the group the tube comes from; other records
// take none.
func (n *Node) ProposeTube(ctx context.Context, what uint8, tube string, move uint64, group, from uint16) error {
	if info, _ := n.Leader(); !info.Serving {
		return ErrNotServing
	}
	if what < TubePlace || what > TubeMovedOut || tube == "" || move == 0 {
		return fmt.Errorf("replication: no such record of a tube's move: %d %q %d", what, tube, move)
	}
	r := wal.Record{Kind: wal.KindMeta, Tube: tube, State: what, Pri: uint32(group), Delay: int64(from), Deadline: int64(move)}
	return n.proposeControl(ctx, &r, func() bool { return n.tubeApplied(&r) })
}

// tubeApplied reports whether r's outcome shows in the node's TubeBook.
func (n *Node) tubeApplied(r *wal.Record) bool {
	b := n.Tubes()
	move := uint64(r.Deadline)
	switch r.State {
	case TubePlace, TubeAbort:
		_, ok := b.Decided[move]
		return ok
	case TubeFreeze:
		f, ok := b.Frozen[r.Tube]
		return ok && f.Move == move
	case TubeThaw:
		f, ok := b.Frozen[r.Tube]
		return !ok || f.Move != move
	default:
		f, ok := b.Frozen[r.Tube]
		return !ok || f.Move != move || f.Moved
	}
}
