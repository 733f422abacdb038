package replication

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
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
	// (6 is wal.MetaPause.)

	// The records of a prefix's placement (PrefixPlacing): Tube is the
	// prefix, Deadline the move's id, Pri its group.

	// PrefixPending: in group 0, the prefix's placement in group Pri is
	// under way (routes do not follow it yet); refused, and the move
	// aborted, while another prefix's is. Pri Unplaced: the prefix's
	// placement is being undone (refused if it has none).
	PrefixPending uint8 = 7
	// PrefixPlace: in group 0, the pending placement is active from now
	// on (an undoing: the prefix is no longer placed), unless it was
	// aborted; Body lists the groups it took tubes from, or an undoing
	// gave them to (big-endian uint16s).
	PrefixPlace uint8 = 8
	// PrefixAbort: in group 0, the pending placement is aborted, unless
	// it was made active already.
	PrefixAbort uint8 = 9
	// PrefixFreeze: this group refuses the tubes the placement takes
	// (member: PrefixPlacing.Covers) for move Deadline to group Pri.
	PrefixFreeze uint8 = 10
	// PrefixThaw: the prefix's freeze for move Deadline is over here (the
	// move aborted, or the prefix placed here again).
	PrefixThaw uint8 = 11
	// PrefixMovedOut: the tubes the placement took are dropped here; it
	// keeps refusing them.
	PrefixMovedOut uint8 = 12
	// GroupsGrow: in group 0, the cluster has the groups Body names (a
	// JSON []GrownGroup) besides those it was formed with and those grown
	// before: they own no tube until slots are placed in them (a
	// placement whose key is "#" and the group's number: SlotKey).
	GroupsGrow uint8 = 13
	// PrefixDropped: in group 0, the groups an aborted placement, move
	// Deadline, brought tubes into have dropped them (TubeBook.Dropping).
	PrefixDropped uint8 = 14
	// (15 and 16 are HandOver's: handover.go.)

	// GroupsFormed: in group 0, the cluster was formed with Pri groups of
	// Delay replicas (TubeBook.Formed), unless a record before said so:
	// the first applied is the cluster's.
	GroupsFormed uint8 = 17
	// TubeAdopted: move Deadline's copies of Tube are taken into this
	// group (its destination), not yet placed (TubeBook.Adopted); Pri
	// AdoptStaged: taken ahead of the freeze, the tube still served by
	// its source, group Delay (TubeBook.Staged).
	TubeAdopted uint8 = 18
	// TubeAdoptEnded: move Deadline's copies of Tube here are the tube's
	// jobs (group 0 placed it) or dropped (aborted).
	TubeAdoptEnded uint8 = 19
	// MovesSettled: in group 0, group Pri has ended its part of the
	// decided moves Body lists (big-endian uint64s): none of its freezes
	// or adopts waits for their outcomes (TubeBook.Unsettled).
	MovesSettled uint8 = 20
)

// Stage is a move's copy of a tube taken ahead of its freeze: the move,
// and the group it comes from.
type Stage struct {
	Move uint64 `json:"move"`
	From uint16 `json:"from"`
}

// AdoptStaged is a TubeAdopted record's group (ProposeTube's) for copies
// taken ahead of the source's freeze.
const AdoptStaged uint16 = 1

// Formed is the G and R a cluster was formed with (--cluster-groups,
// --cluster-replicas), as group 0's first GroupsFormed record says:
// what every member must run. Replicas is 0 for one group, whose
// members hold it all.
type Formed struct {
	Groups   uint16 `json:"groups"`
	Replicas uint16 `json:"replicas,omitempty"`
}

// Dropping is a placement group 0 aborted whose destinations may still
// hold the copies it brought them: until they have dropped them, no
// placement begins, and no tube it brought moves into them.
type Dropping struct {
	Prefix string `json:"prefix"`
	To     uint16 `json:"to"`
	Was    uint16 `json:"was,omitempty"`
}

// Unplaced is the group of a prefix's placement that undoes the one it
// has: its tubes go back to the groups they would be in without it.
const Unplaced uint16 = math.MaxUint16

// GrownGroup is a group the cluster grew, its replicas' members, and
// the groups' count its growth reached (Modulus): the slots s with
// s mod Modulus = ID are the ones placed in it.
type GrownGroup struct {
	ID       uint16   `json:"id"`
	Modulus  uint16   `json:"modulus"`
	Replicas []string `json:"replicas"`
	// Preferred is the replica that campaigns first (NodeConfig.
	// CampaignFirst), so that the grown groups' leaderships are spread
	// from their first election; "" for none.
	Preferred string `json:"preferred,omitempty"`
}

// SlotKey is the key of the placement of group g's slots, in
// TubeBook.Prefixes and FrozenPrefixes: a tube's name has no '#', so no
// prefix is one.
func SlotKey(g uint16) string { return "#" + strconv.Itoa(int(g)) }

// SlotGroup is the group a SlotKey places slots in, and false for a
// prefix.
func SlotGroup(key string) (uint16, bool) {
	if len(key) < 2 || key[0] != '#' {
		return 0, false
	}
	g, err := strconv.ParseUint(key[1:], 10, 16)
	return uint16(g), err == nil
}

// maxDecided bounds the settled moves group 0 remembers the outcome of
// (TubeBook.Order): a late step of a settled move (a resend, a deposed
// driver's) comes within seconds of its decision. A move not settled is
// remembered until it is: a group whose freeze waits for the outcome may
// ask for it after any time (its leader lost for a day), and an outcome
// forgotten would be decided afresh, maybe the other way.
const maxDecided = 1024

// TubeBook is what moves of tubes made of a group's book.
type TubeBook struct {
	// Placed are the tubes moves placed, by name, and their groups
	// (group 0 only): they route there, not by their names' hash.
	Placed map[string]uint16 `json:"placed,omitempty"`
	// Decided are moves' outcomes, by id (group 0 only): true placed,
	// false aborted. Those in Unsettled, and the last maxDecided of
	// Order.
	Decided map[uint64]bool `json:"decided,omitempty"`
	// Order is the ids of Decided's settled moves, in the order they were
	// settled: the first is forgotten first.
	Order []uint64 `json:"order,omitempty"`
	// Unsettled are, by decided move, the groups whose part of it may not
	// be over yet (group 0 only): a tube's move's source and destination,
	// every group for a prefix's placement. Each drops out once it has no
	// freeze of the move not yet moved out, and no copies it adopted not
	// yet ended (MovesSettled); the move is settled when none is left.
	Unsettled map[uint64][]uint16 `json:"unsettled,omitempty"`
	// Out are, by group, the groups tubes were moved to from it (group 0
	// only): a job keeps its id, so one of a group's prefix may be in
	// any of them, or in theirs.
	Out map[uint16][]uint16 `json:"out,omitempty"`
	// Prefixes are the placements by prefix (group 0 only), by prefix:
	// an active one routes the tubes whose names start with it, an
	// exact placement (Placed) or a longer prefix's excepted; at most one
	// is pending.
	Prefixes map[string]PrefixPlacement `json:"prefixes,omitempty"`
	// Dropping are the aborted placements whose copies may be left, by
	// move (group 0 only).
	Dropping map[uint64]Dropping `json:"dropping,omitempty"`
	// Frozen are this group's tubes moving out or moved out, by name.
	Frozen map[string]Frozen `json:"frozen,omitempty"`
	// Adopted are this group's tubes whose copies a move took in, until
	// the move is placed or its copies dropped: by tube, the move. Its
	// leader, whichever member leads, holds back the commands of tubes
	// routed elsewhere meanwhile (internal/member's Member.frozen), and
	// refuses a late drop of another move (serveDrop).
	Adopted map[string]uint64 `json:"adopted,omitempty"`
	// Staged are the tubes of Adopted whose copies were taken ahead of
	// the source's freeze (a move's stage), by tube, the move: the source
	// still serves the tube, and a command by id of a copy is answered as
	// if the job were not here, until the copies are taken again at the
	// freeze (TubeAdopted, not staged).
	Staged map[string]Stage `json:"staged,omitempty"`
	// FrozenPrefixes are this group's prefixes moving out or moved out:
	// the tubes each one's placement takes (Frozen.To its group).
	FrozenPrefixes map[string]Frozen `json:"frozen_prefixes,omitempty"`
	// Grown are the groups the cluster grew (group 0 only), in order.
	Grown []GrownGroup `json:"grown,omitempty"`
	// Formed is the G and R the cluster was formed with (group 0 only;
	// zero until its leader recorded them: Node.ProposeFormed).
	Formed Formed `json:"formed,omitzero"`
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

// PrefixPlacement is a prefix's group, and the move that placed it:
// pending until Active.
type PrefixPlacement struct {
	Group  uint16 `json:"group"`
	Move   uint64 `json:"move"`
	Active bool   `json:"active,omitempty"`
	// Replaces: while pending, the prefix is placed in group Was (its
	// tubes route there), as it is again if this placement is aborted.
	Replaces bool   `json:"replaces,omitempty"`
	Was      uint16 `json:"was,omitempty"`
}

// Routes reports the group the placement routes its tubes to now.
func (p PrefixPlacement) Routes() (uint16, bool) {
	switch {
	case p.Active:
		return p.Group, true
	case p.Replaces:
		return p.Was, true
	}
	return 0, false
}

// Pending is the prefix placement under way, if one is.
func (b TubeBook) Pending() (string, PrefixPlacement, bool) {
	for p, pl := range b.Prefixes {
		if !pl.Active {
			return p, pl, true
		}
	}
	return "", PrefixPlacement{}, false
}

// IsZero reports whether b holds nothing (omitzero).
func (b TubeBook) IsZero() bool {
	return len(b.Placed) == 0 && len(b.Decided) == 0 && len(b.Unsettled) == 0 && len(b.Frozen) == 0 && len(b.Paused) == 0 &&
		len(b.Prefixes) == 0 && len(b.FrozenPrefixes) == 0 && len(b.Grown) == 0 && len(b.Dropping) == 0 &&
		len(b.Out) == 0 && len(b.Adopted) == 0 && len(b.Staged) == 0 && len(b.Order) == 0 && b.Formed == Formed{}
}

// clone returns a copy that shares nothing with b.
func (b TubeBook) clone() TubeBook {
	return TubeBook{Placed: maps.Clone(b.Placed), Decided: maps.Clone(b.Decided), Order: slices.Clone(b.Order),
		Unsettled: cloneGroups(b.Unsettled), Out: cloneGroups(b.Out), Frozen: maps.Clone(b.Frozen), Adopted: maps.Clone(b.Adopted), Staged: maps.Clone(b.Staged), Paused: maps.Clone(b.Paused),
		Prefixes: maps.Clone(b.Prefixes), FrozenPrefixes: maps.Clone(b.FrozenPrefixes), Grown: slices.Clone(b.Grown),
		Dropping: maps.Clone(b.Dropping), Formed: b.Formed}
}

// cloneGroups returns a copy of m that shares nothing with it.
func cloneGroups[K comparable](m map[K][]uint16) map[K][]uint16 {
	if m == nil {
		return nil
	}
	out := make(map[K][]uint16, len(m))
	for k, gs := range m {
		out[k] = slices.Clone(gs)
	}
	return out
}

// equal reports whether b and o hold the same.
func (b TubeBook) equal(o TubeBook) bool {
	return b.Formed == o.Formed && maps.Equal(b.Placed, o.Placed) && maps.Equal(b.Decided, o.Decided) && maps.Equal(b.Frozen, o.Frozen) &&
		maps.Equal(b.Adopted, o.Adopted) && maps.Equal(b.Staged, o.Staged) &&
		maps.EqualFunc(b.Out, o.Out, slices.Equal) && maps.EqualFunc(b.Unsettled, o.Unsettled, slices.Equal) && maps.Equal(b.Paused, o.Paused) &&
		maps.Equal(b.Prefixes, o.Prefixes) && maps.Equal(b.FrozenPrefixes, o.FrozenPrefixes) && maps.Equal(b.Dropping, o.Dropping) &&
		slices.EqualFunc(b.Grown, o.Grown, func(x, y GrownGroup) bool {
			return x.ID == y.ID && x.Modulus == y.Modulus && slices.Equal(x.Replicas, y.Replicas) && x.Preferred == y.Preferred
		})
}

// decide records move's outcome, unless it has one: the first decides.
// It stays unsettled while a group of parties may ask for it; a move of
// no parties (refused before any group took part) is settled at once.
func (b *TubeBook) decide(move uint64, placed bool, parties []uint16) bool {
	if _, ok := b.Decided[move]; ok {
		return false
	}
	if b.Decided == nil {
		b.Decided = make(map[uint64]bool)
	}
	b.Decided[move] = placed
	parties = slices.Compact(slices.Sorted(slices.Values(parties)))
	if len(parties) == 0 {
		b.settled(move)
		return true
	}
	if b.Unsettled == nil {
		b.Unsettled = make(map[uint64][]uint16)
	}
	b.Unsettled[move] = parties
	return true
}

// settle drops group g out of move's unsettled groups, and reports
// whether it was one.
func (b *TubeBook) settle(move uint64, g uint16) bool {
	gs := b.Unsettled[move]
	i, ok := slices.BinarySearch(gs, g)
	if !ok {
		return false
	}
	if gs = slices.Delete(slices.Clone(gs), i, i+1); len(gs) > 0 {
		b.Unsettled[move] = gs
		return true
	}
	delete(b.Unsettled, move)
	b.settled(move)
	return true
}

// settled queues move's decision to be forgotten, after maxDecided
// others settled later.
func (b *TubeBook) settled(move uint64) {
	b.Order = append(b.Order, move)
	if len(b.Order) > maxDecided {
		delete(b.Decided, b.Order[0])
		b.Order = slices.Delete(b.Order, 0, 1)
	}
}

// groupIDs are the cluster's groups, as group 0's book knows them: none
// before its formation is recorded.
func (b TubeBook) groupIDs() []uint16 {
	var ids []uint16
	for g := range b.Formed.Groups {
		ids = append(ids, g)
	}
	for _, g := range b.Grown {
		ids = append(ids, g.ID)
	}
	return ids
}

// Awaited are the moves this group's part of is not over: a freeze not
// yet moved out, copies it adopted not yet placed or dropped, or (group
// 0) an aborted placement's copies not yet dropped (Dropping, whose drop
// asks for its outcome). Group 0 keeps a move's outcome while a group's
// book awaits it.
func (b TubeBook) Awaited() map[uint64]bool {
	awaited := make(map[uint64]bool)
	for m := range b.Dropping {
		awaited[m] = true
	}
	for _, frozen := range []map[string]Frozen{b.Frozen, b.FrozenPrefixes} {
		for _, f := range frozen {
			if !f.Moved {
				awaited[f.Move] = true
			}
		}
	}
	for _, m := range b.Adopted {
		awaited[m] = true
	}
	return awaited
}

// movedOut notes that tubes moved from group from to group to.
func (b *TubeBook) movedOut(from, to uint16) {
	if b.Out == nil {
		b.Out = make(map[uint16][]uint16)
	}
	if from != to && !slices.Contains(b.Out[from], to) {
		b.Out[from] = append(b.Out[from], to)
	}
}

// freeze, thaw and moveOut are TubeFreeze, TubeThaw and TubeMovedOut,
// and the prefixes' alike, on frozen (b.Frozen or b.FrozenPrefixes).
func freeze(frozen *map[string]Frozen, key string, move uint64, to uint16) bool {
	if f, ok := (*frozen)[key]; ok && f.Move == move {
		return false
	}
	if *frozen == nil {
		*frozen = make(map[string]Frozen)
	}
	(*frozen)[key] = Frozen{Move: move, To: to}
	return true
}

func thaw(frozen map[string]Frozen, key string, move uint64) bool {
	if f, ok := frozen[key]; !ok || f.Move != move {
		return false
	}
	delete(frozen, key)
	return true
}

func moveOut(frozen map[string]Frozen, key string, move uint64) bool {
	f, ok := frozen[key]
	if !ok || f.Move != move || f.Moved {
		return false
	}
	f.Moved = true
	frozen[key] = f
	return true
}

// apply makes r's change and reports whether it changed b.
func (b *TubeBook) apply(r *wal.Record) bool {
	move := uint64(r.Deadline)
	switch r.State {
	case TubePlace, TubeAbort:
		placed := r.State == TubePlace
		if !b.decide(move, placed, []uint16{uint16(r.Delay), uint16(r.Pri)}) {
			return false
		}
		if placed {
			if b.Placed == nil {
				b.Placed = make(map[string]uint16)
			}
			b.Placed[r.Tube] = uint16(r.Pri)
			b.movedOut(uint16(r.Delay), uint16(r.Pri))
		}
		return true
	case PrefixPending:
		if _, _, busy := b.Pending(); busy {
			return b.decide(move, false, nil) // refused: the proposer reads it aborted
		}
		if b.Prefixes == nil {
			b.Prefixes = make(map[string]PrefixPlacement)
		}
		was, had := b.Prefixes[r.Tube]
		if uint16(r.Pri) == Unplaced && !had {
			return b.decide(move, false, nil) // nothing to undo
		}
		b.Prefixes[r.Tube] = PrefixPlacement{Group: uint16(r.Pri), Move: move, Replaces: had, Was: was.Group}
		return true
	case PrefixPlace, PrefixAbort:
		pl, ok := b.Prefixes[r.Tube]
		ours := ok && pl.Move == move
		// The active placement's move was placed: an abort of it, late,
		// whose decision is forgotten, does not undo it.
		if !b.decide(move, ours && (r.State == PrefixPlace || pl.Active), b.groupIDs()) {
			return false
		}
		if !ours || pl.Active {
			return true
		}
		if r.State == PrefixPlace {
			for i := 0; i+1 < len(r.Body); i += 2 {
				if g := uint16(r.Body[i])<<8 | uint16(r.Body[i+1]); pl.Group == Unplaced {
					b.movedOut(pl.Was, g)
				} else {
					b.movedOut(g, pl.Group)
				}
			}
			if pl.Group == Unplaced {
				delete(b.Prefixes, r.Tube)
			} else {
				b.Prefixes[r.Tube] = PrefixPlacement{Group: pl.Group, Move: move, Active: true}
			}
		} else {
			if b.Dropping == nil {
				b.Dropping = make(map[uint64]Dropping)
			}
			b.Dropping[move] = Dropping{Prefix: r.Tube, To: pl.Group, Was: pl.Was}
			if pl.Replaces {
				b.Prefixes[r.Tube] = PrefixPlacement{Group: pl.Was, Active: true}
			} else {
				delete(b.Prefixes, r.Tube)
			}
		}
		return true
	case PrefixDropped:
		if _, ok := b.Dropping[move]; !ok {
			return false
		}
		delete(b.Dropping, move)
		return true
	case TubeAdopted:
		staged := uint16(r.Pri) == AdoptStaged
		if b.Adopted[r.Tube] == move && (staged || b.Staged[r.Tube].Move != move) {
			return false // taken already, or a stage come after the freeze's
		}
		if b.Adopted == nil {
			b.Adopted = make(map[string]uint64)
		}
		b.Adopted[r.Tube] = move
		if !staged {
			delete(b.Staged, r.Tube)
			return true
		}
		if b.Staged == nil {
			b.Staged = make(map[string]Stage)
		}
		b.Staged[r.Tube] = Stage{Move: move, From: uint16(r.Delay)}
		return true
	case TubeAdoptEnded:
		if b.Adopted[r.Tube] != move {
			return false
		}
		delete(b.Adopted, r.Tube)
		delete(b.Staged, r.Tube)
		return true
	case MovesSettled:
		changed := false
		for i := 0; i+8 <= len(r.Body); i += 8 {
			changed = b.settle(binary.BigEndian.Uint64(r.Body[i:]), uint16(r.Pri)) || changed
		}
		return changed
	case TubeFreeze:
		return freeze(&b.Frozen, r.Tube, move, uint16(r.Pri))
	case TubeThaw:
		return thaw(b.Frozen, r.Tube, move)
	case TubeMovedOut:
		return moveOut(b.Frozen, r.Tube, move)
	case PrefixFreeze:
		return freeze(&b.FrozenPrefixes, r.Tube, move, uint16(r.Pri))
	case PrefixThaw:
		return thaw(b.FrozenPrefixes, r.Tube, move)
	case PrefixMovedOut:
		return moveOut(b.FrozenPrefixes, r.Tube, move)
	case GroupsGrow:
		var grown []GrownGroup
		if err := json.Unmarshal(r.Body, &grown); err != nil {
			return false // not written by ProposeGrow: nothing to do
		}
		changed := false
		for _, g := range grown {
			if !slices.ContainsFunc(b.Grown, func(h GrownGroup) bool { return h.ID == g.ID }) {
				b.Grown = append(b.Grown, g)
				changed = true
			}
		}
		return changed
	case GroupsFormed:
		if b.Formed.Groups != 0 || r.Pri == 0 || r.Pri > math.MaxUint16 || r.Delay < 0 || r.Delay > math.MaxUint16 {
			return false
		}
		b.Formed = Formed{Groups: uint16(r.Pri), Replicas: uint16(r.Delay)}
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
	return b != nil && (len(b.Frozen) > 0 || len(b.FrozenPrefixes) > 0), n.moving.Load()
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
	for _, f := range c.FrozenPrefixes {
		moving = moving || !f.Moved
	}
	n.tubesMu.Lock()
	defer n.tubesMu.Unlock()
	n.moving.Store(moving) // before the book: a reader seeing a freeze sees it moving
	n.tubes.Store(&c)
	if n.store != nil {
		n.store.SetPauses(c.Paused)
	}
	if fn := n.onTubes.Load(); fn != nil {
		(*fn)(c)
	}
}

// OnTubes has fn told of the node's TubeBook now, on the caller's
// goroutine, and at each change, on the node's (it must not block): the
// member routes by group 0's, and refuses what a group's freezes. A
// change made while OnTubes runs reaches fn after the book it starts
// with, never before.
func (n *Node) OnTubes(fn func(TubeBook)) {
	n.tubesMu.Lock()
	defer n.tubesMu.Unlock()
	n.onTubes.Store(&fn)
	fn(n.Tubes())
}

// ProposeTube proposes a record of a tube's move in this group's log
// (internal/member's moves of tubes): what (TubePlace and the others),
// the tube, the move and a group; it returns once this member has
// applied it, or once its outcome is known not to be the change (a
// place after an abort, a thaw of another move: applied, nothing
// changes). Only the group's serving leader proposes (ErrNotServing).
// A TubePlace's from is the group the tube comes from, as is a staged
// TubeAdopted's (group AdoptStaged); other records take none.
func (n *Node) ProposeTube(ctx context.Context, what uint8, tube string, move uint64, group, from uint16) error {
	if info, _ := n.Leader(); !info.Serving {
		return ErrNotServing
	}
	if (what < TubePlace || what > TubeMovedOut) && what != TubeAdopted && what != TubeAdoptEnded || tube == "" || move == 0 {
		return fmt.Errorf("replication: no such record of a tube's move: %d %q %d", what, tube, move)
	}
	r := wal.Record{Kind: wal.KindMeta, Tube: tube, State: what, Pri: uint32(group), Delay: int64(from), Deadline: int64(move)}
	return n.proposeControl(ctx, &r, func() bool { return n.tubeApplied(&r) })
}

// ErrNotFormed is ProposePrefix's answer to a placement proposed before
// group 0's book holds the cluster's formation (recorded by its leader
// within a second or so of its election).
var ErrNotFormed = errors.New("replication: the cluster's formation is not recorded yet")

// ProposePrefix proposes a record of a prefix's placement in this
// group's log, as ProposeTube does a tube's: what (PrefixPending and the
// others), the prefix, the move and its group; a PrefixPlace's from are
// the groups it took tubes from. A placement begins (PrefixPending) only
// once the book holds the cluster's formation: its outcome is kept until
// each of the cluster's groups settles it (TubeBook.groupIDs), and before
// the formation is recorded the book knows of none.
func (n *Node) ProposePrefix(ctx context.Context, what uint8, prefix string, move uint64, group uint16, from []uint16) error {
	if info, _ := n.Leader(); !info.Serving {
		return ErrNotServing
	}
	if (what < PrefixPending || what > PrefixMovedOut) && what != PrefixDropped || prefix == "" || len(prefix) > 200 || move == 0 {
		return fmt.Errorf("replication: no such record of a prefix's placement: %d %q %d", what, prefix, move)
	}
	if what == PrefixPending && n.Tubes().Formed.Groups == 0 {
		return ErrNotFormed
	}
	r := wal.Record{Kind: wal.KindMeta, Tube: prefix, State: what, Pri: uint32(group), Deadline: int64(move)}
	for _, g := range from {
		r.Body = binary.BigEndian.AppendUint16(r.Body, g)
	}
	return n.proposeControl(ctx, &r, func() bool { return n.tubeApplied(&r) })
}

// ProposeSettled proposes, in group 0's log, that group g has ended its
// part of moves (MovesSettled: its book awaits none of them), and
// returns once this member has applied it.
func (n *Node) ProposeSettled(ctx context.Context, g uint16, moves []uint64) error {
	if info, _ := n.Leader(); !info.Serving {
		return ErrNotServing
	}
	if n.group != group0 || len(moves) == 0 {
		return fmt.Errorf("replication: %d moves settled proposed in group %d", len(moves), n.group)
	}
	r := wal.Record{Kind: wal.KindMeta, State: MovesSettled, Tube: "#", Deadline: 1, Pri: uint32(g)}
	for _, m := range moves {
		r.Body = binary.BigEndian.AppendUint64(r.Body, m)
	}
	return n.proposeControl(ctx, &r, func() bool {
		b := n.Tubes()
		return !slices.ContainsFunc(moves, func(m uint64) bool { return slices.Contains(b.Unsettled[m], g) })
	})
}

// ProposeGrow proposes, in group 0's log, that the cluster has the groups
// grown besides its others, and returns once this member has applied it.
func (n *Node) ProposeGrow(ctx context.Context, grown []GrownGroup) error {
	if info, _ := n.Leader(); !info.Serving {
		return ErrNotServing
	}
	body, err := json.Marshal(grown)
	if err != nil || len(grown) == 0 {
		return fmt.Errorf("replication: no groups to grow: %v", err)
	}
	r := wal.Record{Kind: wal.KindMeta, State: GroupsGrow, Tube: "#", Deadline: 1, Body: body}
	return n.proposeControl(ctx, &r, func() bool {
		b := n.Tubes()
		return !slices.ContainsFunc(grown, func(g GrownGroup) bool {
			return !slices.ContainsFunc(b.Grown, func(h GrownGroup) bool { return h.ID == g.ID })
		})
	})
}

// ProposeFormed proposes, in group 0's log, that the cluster was formed
// with f, and returns once this member has applied a GroupsFormed record:
// this one, or one before it, whose f is then the cluster's.
func (n *Node) ProposeFormed(ctx context.Context, f Formed) error {
	if info, _ := n.Leader(); !info.Serving {
		return ErrNotServing
	}
	if n.group != group0 || f.Groups == 0 {
		return fmt.Errorf("replication: a formation of %d groups proposed in group %d", f.Groups, n.group)
	}
	r := wal.Record{Kind: wal.KindMeta, State: GroupsFormed, Tube: "#", Deadline: 1, Pri: uint32(f.Groups), Delay: int64(f.Replicas)}
	return n.proposeControl(ctx, &r, func() bool { return n.Tubes().Formed.Groups != 0 })
}

// tubeApplied reports whether r's outcome shows in the node's TubeBook.
func (n *Node) tubeApplied(r *wal.Record) bool {
	b := n.Tubes()
	move := uint64(r.Deadline)
	frozen := b.Frozen
	switch r.State {
	case PrefixFreeze, PrefixThaw, PrefixMovedOut:
		frozen = b.FrozenPrefixes
	}
	f, ok := frozen[r.Tube]
	switch r.State {
	case TubePlace, TubeAbort, PrefixPlace, PrefixAbort:
		_, ok := b.Decided[move]
		return ok
	case PrefixPending:
		_, decided := b.Decided[move]
		return decided || b.Prefixes[r.Tube].Move == move
	case PrefixDropped:
		_, ok := b.Dropping[move]
		return !ok
	case TubeAdopted:
		return b.Adopted[r.Tube] == move && (uint16(r.Pri) == AdoptStaged || b.Staged[r.Tube].Move != move)
	case TubeAdoptEnded:
		return b.Adopted[r.Tube] != move
	case TubeFreeze, PrefixFreeze:
		return ok && f.Move == move
	case TubeThaw, PrefixThaw:
		return !ok || f.Move != move
	default:
		return !ok || f.Move != move || f.Moved
	}
}
