package meta

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Transfer moves group's leadership from one member to another.
type Transfer struct {
	Group    uint16
	From, To string
}

// PlanLeaders is the transfers that balance leaderships, given each
// group's leader as the members report them (a group missing has none
// known) and whether a member's replica of a group is caught up, so that
// it can take the leadership at once. A draining or cordoned member
// hands over what it leads, each group to its caught up voter leading fewest; then,
// while one member leads two more than another, it hands one group
// towards it: straight to it if it is a caught up voter of a group it
// leads, else the first hop of the shortest chain of such transfers,
// which the next plans continue. Each member is in one transfer at most,
// either side.
func PlanLeaders(s *State, leaders map[uint16]string, caughtUp func(group uint16, member string) bool) []Transfer {
	count := map[string]int{}
	for _, m := range s.Members {
		if m.MayLead() && s.holdsVoter(m.Name) {
			count[m.Name] = 0
		}
	}
	for _, g := range s.Groups {
		if l, ok := leaders[g.ID]; ok {
			if _, eligible := count[l]; eligible {
				count[l]++
			}
		}
	}
	busy := map[string]bool{}
	var plan []Transfer
	// target is the member leading fewest, below most, among g's caught
	// up voters that may lead and are free.
	target := func(g *Group, below int) string {
		best := ""
		for _, v := range g.Voters() {
			n, eligible := count[v]
			if !eligible || busy[v] || n >= below || !caughtUp(g.ID, v) {
				continue
			}
			if best == "" || n < count[best] || n == count[best] && v < best {
				best = v
			}
		}
		return best
	}
	move := func(g *Group, from, to string) {
		plan = append(plan, Transfer{Group: g.ID, From: from, To: to})
		busy[from], busy[to] = true, true
		if _, ok := count[from]; ok {
			count[from]--
		}
		count[to]++
	}
	for _, m := range s.Members {
		if m.MayLead() {
			continue
		}
		for i := range s.Groups {
			g := &s.Groups[i]
			if leaders[g.ID] != m.Name || busy[m.Name] {
				continue
			}
			if to := target(g, int(^uint(0)>>1)); to != "" {
				move(g, m.Name, to)
			}
		}
	}
	// Balance: from the member leading most, towards the nearest member
	// leading at least two fewer. The nearest may share none of its groups:
	// then the first hop of the shortest chain of transfers goes (a to b,
	// b to c, ...), one per plan, and each plan after is a hop nearer.
	for {
		var from string
		for name, n := range count {
			if !busy[name] && (from == "" || n > count[from] || n == count[from] && name < from) {
				from = name
			}
		}
		if from == "" {
			return plan
		}
		if g, to := s.firstHop(from, count, leaders, busy, caughtUp); g != nil {
			move(g, from, to)
		} else {
			busy[from] = true // nothing it leads can go: try the next
		}
	}
}

// firstHop is the first transfer of the shortest chain from member from
// to a member leading at least two fewer groups: each hop a group its
// leader hands to a caught up voter that may lead, each member between
// leading one fewer than from, so that a hop only swaps two counts and
// the next plan, from the member the hop made lead most, goes on along
// the chain. Nil if there is none.
func (s *State) firstHop(from string, count map[string]int, leaders map[uint16]string, busy map[string]bool,
	caughtUp func(uint16, string) bool) (*Group, string) {
	type hop struct {
		group *Group
		to    string // the first hop's member
	}
	first := map[string]hop{from: {}}
	queue := []string{from}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		for i := range s.Groups {
			g := &s.Groups[i]
			if leaders[g.ID] != at {
				continue
			}
			voters := g.Voters()
			slices.Sort(voters)
			for _, v := range voters {
				if _, eligible := count[v]; !eligible || busy[v] || !caughtUp(g.ID, v) {
					continue
				}
				if _, seen := first[v]; seen {
					continue
				}
				h := first[at]
				if at == from {
					h = hop{group: g, to: v}
				}
				if count[v] <= count[from]-2 {
					return h.group, h.to
				}
				if count[v] != count[from]-1 {
					// Through a member leading as many as from, the hop
					// would leave it leading more than from did, and the
					// next plan could hand the group straight back.
					continue
				}
				first[v] = h
				queue = append(queue, v)
			}
		}
	}
	return nil, ""
}

// holdsVoter reports whether member votes in any group.
func (s *State) holdsVoter(member string) bool {
	for i := range s.Groups {
		if slices.Contains(s.Groups[i].Voters(), member) {
			return true
		}
	}
	return false
}

// Move moves Group's replica from one member to another, as the member
// does it (internal/member, a learner added, promoted, then the giver
// removed). To "" removes From's replica alone: no member can take it
// (fewer members left than R), and the group goes on with one voter
// fewer until a member is added. From "" adds a replica on To alone: the
// group has fewer voters than R.
type Move struct {
	Group    uint16
	From, To string
	// Why names the rule that planned it, for the log: MoveDrain,
	// MoveExcess, MoveShort or MoveSpread.
	Why string
}

// Progress is how far mv has come on s: made, when To holds a voter and
// From no replica (or, for one side alone, when that side is so); begun,
// when the receiver holds a replica, or, for a removal alone, when it is
// made. A move neither made nor begun was not taken, or was undone.
func (mv Move) Progress(s *State) (made, begun bool) {
	i := slices.IndexFunc(s.Groups, func(g Group) bool { return g.ID == mv.Group })
	if i < 0 {
		return false, false
	}
	g := &s.Groups[i]
	gone := mv.From == "" || !g.Holds(mv.From)
	voter := mv.To == "" || slices.Contains(g.Voters(), mv.To)
	made = gone && voter
	if mv.To == "" {
		return made, made
	}
	return made, g.Holds(mv.To)
}

// The rules of PlanMove, in the order it tries them.
const (
	MoveDrain  = "drain"  // a draining member's replica goes
	MoveExcess = "excess" // a group with more voters than R loses one
	MoveShort  = "short"  // a group with fewer voters than R gains one
	MoveSpread = "spread" // from a member holding two more than another to it
)

// PlanMove is the next replica move of groups 1 and up (group 0 holds
// the membership and is on every member), if one is due, one at a time
// over the cluster: none while any group has a learner (a move under
// way). A draining member's replica goes first, to the live member not
// draining that holds fewest replicas and none of the group, ties broken
// by a hash of the member's name and the group, so that groups do not
// all pick the same member; it goes alone only when no member not
// draining, up or down, holds none of the group (fewer such members than
// R), and not while that would leave the group without a live majority
// of its voters; while a member that could take it is down, it waits.
// Then a group with more voters than R (a move cut short) loses
// the replica of a member down, else of the member holding most (none
// while a voter is no member), and one with fewer (a drain with no
// receiver, since made good by a member added) gains one there. Else,
// while a live member holds two more replicas than another, one of its
// groups that the other holds none of goes to it: so a member added
// receives replicas until each holds floor or ceil of R·(G-1)/M. A
// member down neither gives nor receives.
func PlanMove(s *State, live func(member string) bool) (Move, bool) {
	groups := s.Groups
	if len(groups) > 0 && groups[0].ID == 0 {
		groups = groups[1:]
	}
	for _, g := range groups {
		if slices.ContainsFunc(g.Replicas, func(r Replica) bool { return r.Learner }) {
			return Move{}, false
		}
	}
	load := loads(s, groups, live)
	for _, m := range s.Members {
		if !m.Draining {
			continue
		}
		for i := range groups {
			if !groups[i].Holds(m.Name) {
				continue
			}
			to := load.fewest(&groups[i])
			if to == "" && s.mayReceive(&groups[i]) {
				// A member that could take it is down (a restart, a
				// connection dialled again): the drain waits for it
				// rather than leave the group a voter short, one more
				// failure from stopping, for as long as its snapshot
				// would take. The replica goes alone only when no member
				// could ever take it (1.4: M - 1 < R); an operator whose
				// receiver is gone for good removes it too (it drains
				// then, and no longer counts) or adds one.
				continue
			}
			if to == "" && !groups[i].liveMajorityWithout(m.Name, live) {
				// With no receiver, the group would be left without a
				// live majority of its voters: the drain waits for the
				// member down to come back.
				continue
			}
			return Move{Group: groups[i].ID, From: m.Name, To: to, Why: MoveDrain}, true
		}
	}
	for i := range groups {
		g := &groups[i]
		switch voters := g.Voters(); {
		case len(voters) > s.Replicas && !slices.ContainsFunc(voters, func(v string) bool { return s.member(v) == nil }):
			// A move cut short after its receiver's promotion: the member
			// holding most gives its replica up. Not while a voter is no
			// member (removed still holding it, R then counting fewer
			// members): the voter to go would be a live one, leaving the
			// group's quorum to the one that is gone. The group's leader
			// takes such a replica out itself (internal/member:
			// dropRemovedReplicas).
			// A voter down goes first: shedding a live one would leave the
			// group one failure nearer to losing its majority.
			down := func(v string) int {
				if live(v) {
					return 0
				}
				return 1
			}
			most := slices.MaxFunc(voters, func(a, b string) int {
				return cmp.Or(cmp.Compare(down(a), down(b)), cmp.Compare(load[a], load[b]), cmp.Compare(b, a))
			})
			return Move{Group: g.ID, From: most, Why: MoveExcess}, true
		case len(voters) < s.Replicas:
			if to := load.fewest(g); to != "" {
				return Move{Group: g.ID, To: to, Why: MoveShort}, true
			}
		}
	}
	most, least := load.extremes()
	if most == "" || load[most]-load[least] <= 1 {
		return Move{}, false
	}
	for i := range groups {
		if groups[i].Holds(most) && !groups[i].Holds(least) {
			return Move{Group: groups[i].ID, From: most, To: least, Why: MoveSpread}, true
		}
	}
	return Move{}, false
}

// mayReceive reports whether a member of s, up or not, could take a
// replica of g: it holds none and is not draining.
func (s *State) mayReceive(g *Group) bool {
	return slices.ContainsFunc(s.Members, func(m Member) bool { return !m.Draining && !g.Holds(m.Name) })
}

// liveMajorityWithout reports whether g's voters but member keep a
// majority of live ones.
func (g *Group) liveMajorityWithout(member string, live func(string) bool) bool {
	n, up := 0, 0
	for _, v := range g.Voters() {
		if v == member {
			continue
		}
		n++
		if live(v) {
			up++
		}
	}
	return up > n/2
}

// replicaLoad is how many replicas each member that may receive one (live,
// not draining) holds.
type replicaLoad map[string]int

// loads counts the replicas of groups that each live member not draining
// holds.
func loads(s *State, groups []Group, live func(member string) bool) replicaLoad {
	load := replicaLoad{}
	for _, m := range s.Members {
		if !m.Draining && live(m.Name) {
			load[m.Name] = 0
		}
	}
	for _, g := range groups {
		for _, r := range g.Replicas {
			if _, ok := load[r.Member]; ok {
				load[r.Member]++
			}
		}
	}
	return load
}

// fewest is the member holding fewest replicas among those holding none
// of g, ties broken by a hash of the member's name and the group, so
// that groups do not all pick the same member; "" if there is none.
func (load replicaLoad) fewest(g *Group) string {
	best, bestTie := "", uint64(0)
	for name, n := range load {
		if g.Holds(name) {
			continue
		}
		tie := xxhash.Sum64String(name + "/" + strconv.Itoa(int(g.ID)))
		if best == "" || n < load[best] || n == load[best] && tie < bestTie {
			best, bestTie = name, tie
		}
	}
	return best
}

// extremes are the members holding most and fewest replicas, the first
// by name on ties; "" when there is none.
func (load replicaLoad) extremes() (most, least string) {
	for name, n := range load {
		if most == "" || n > load[most] || n == load[most] && name < most {
			most = name
		}
		if least == "" || n < load[least] || n == load[least] && name < least {
			least = name
		}
	}
	return most, least
}
