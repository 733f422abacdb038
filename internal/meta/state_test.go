package meta

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/sproutmq/sprout/store"
)

func members(n int) []Member {
	var ms []Member
	for i := range n {
		ms = append(ms, Member{Name: fmt.Sprintf("m%d", i+1), ID: uint64(100 + i)})
	}
	return ms
}

// TestFormation: every member computes the same state from the same
// names, in any order; groups' replicas and preferred leaders are spread
// evenly, meta has at most five voters, slots go round the groups, and
// group g takes prefix g. A formation that cannot be made is refused.
func TestFormation(t *testing.T) {
	for _, tc := range []struct{ m, g, r, wantR int }{{3, 1, 3, 3}, {5, 5, 3, 3}, {7, 10, 3, 3}, {2, 4, 3, 2}, {1, 1, 3, 1}} {
		ms := members(tc.m)
		s, err := Formation(ms, tc.g, tc.r)
		if err != nil {
			t.Fatal(err)
		}
		shuffled := append([]Member(nil), ms...)
		rand.Shuffle(len(shuffled), func(i, k int) { shuffled[i], shuffled[k] = shuffled[k], shuffled[i] })
		if again, _ := Formation(shuffled, tc.g, tc.r); !reflect.DeepEqual(s, again) {
			t.Errorf("M=%d: the members' order changed the formation", tc.m)
		}
		held, preferred := map[string]int{}, map[string]int{}
		for g, grp := range s.Groups {
			if len(grp.Voters()) != tc.wantR || int(grp.ID) != g {
				t.Errorf("M=%d G=%d: group %d has voters %v", tc.m, tc.g, g, grp.Voters())
			}
			for _, r := range grp.Replicas {
				held[r.Member]++
			}
			preferred[grp.Preferred]++
			if !grp.Holds(grp.Preferred) {
				t.Errorf("group %d prefers %s, which holds no replica", g, grp.Preferred)
			}
			if got, ok := s.GroupOfID(JobID(uint8(g), 1)); !ok || got != uint16(g) {
				t.Errorf("prefix %d: group %d, %v", g, got, ok)
			}
		}
		lo, hi := tc.wantR*tc.g/tc.m, (tc.wantR*tc.g+tc.m-1)/tc.m
		for _, m := range ms {
			if held[m.Name] < lo || held[m.Name] > hi {
				t.Errorf("M=%d G=%d R=%d: %s holds %d replicas, want %d to %d", tc.m, tc.g, tc.r, m.Name, held[m.Name], lo, hi)
			}
			if n := preferred[m.Name]; n < tc.g/tc.m || n > (tc.g+tc.m-1)/tc.m {
				t.Errorf("M=%d G=%d: %s preferred for %d groups", tc.m, tc.g, m.Name, n)
			}
		}
		for i, g := range s.Slots {
			if int(g) != i%tc.g {
				t.Fatalf("slot %d in group %d", i, g)
			}
		}
	}
	for _, tc := range []struct {
		ms   []Member
		g, r int
	}{{nil, 1, 3}, {members(3), 0, 3}, {members(3), MaxGroups + 1, 3}, {members(3), 3, 0}, {append(members(2), Member{Name: "m1"}), 1, 3}} {
		if _, err := Formation(tc.ms, tc.g, tc.r); !errors.Is(err, ErrFormation) {
			t.Errorf("%d members, G=%d, R=%d: %v", len(tc.ms), tc.g, tc.r, err)
		}
	}
}

// TestSlotHash pins XXH64 (seed 0), whose top 12 bits choose a tube's
// slot: no library upgrade may move a tube.
func TestSlotHash(t *testing.T) {
	for in, want := range map[string]uint64{
		"":    0xef46db3751d8e999,
		"a":   0xd24ec4f1a98c6e5b,
		"abc": 0x44bc2cf5ad770999,
	} {
		if got := xxhash.Sum64String(in); got != want {
			t.Errorf("XXH64(%q) = %#x, want %#x", in, got, want)
		}
		if got := Slot(in); got != int(want>>52) {
			t.Errorf("Slot(%q) = %d, want %d", in, got, want>>52)
		}
	}
}

// TestOwnerSpread: names as clients make them spread over the groups
// within a few percent of even.
func TestOwnerSpread(t *testing.T) {
	for _, tc := range []struct {
		names       func(i int) string
		n, g, least int
	}{
		{func(i int) string { return fmt.Sprintf("tube-%d", i) }, 1000, 3, 290},
		{func(i int) string { return fmt.Sprintf("emails.%d", i) }, 50, 5, 5},
		{func(i int) string { return fmt.Sprintf("jobs/%05d", i) }, 10000, 16, 550},
	} {
		s, _ := Formation(members(5), tc.g, 3)
		per := make([]int, tc.g)
		for i := range tc.n {
			per[s.Owner(tc.names(i))]++
		}
		for g, n := range per {
			if n < tc.least {
				t.Errorf("%s… over %d groups: group %d owns %d (%v)", tc.names(0), tc.g, g, n, per)
			}
		}
	}
}

// TestOwner: an exact placement comes first, then the longest active
// prefix, then the slot; a pending prefix does not route, and one
// removed returns its tubes to hashing.
func TestOwner(t *testing.T) {
	s, _ := Formation(members(3), 8, 3)
	byHash := s.Owner("emails.eu.bounces")
	// As internal/member's routing lays group 0's placements over the
	// formation: sorted by prefix, active once their tubes moved.
	place := func(prefix string, g uint16, active bool) {
		s.Placements = slices.DeleteFunc(s.Placements, func(p Placement) bool { return p.Prefix == prefix })
		s.Placements = append(s.Placements, Placement{Prefix: prefix, Group: g, Active: active})
		slices.SortFunc(s.Placements, func(a, b Placement) int { return strings.Compare(a.Prefix, b.Prefix) })
	}
	unplace := func(prefix string) {
		s.Placements = slices.DeleteFunc(s.Placements, func(p Placement) bool { return p.Prefix == prefix })
	}
	other := func(not ...uint16) uint16 {
		for g := range uint16(8) {
			if !containsU16(not, g) {
				return g
			}
		}
		return 0
	}
	gEmails := other(byHash)
	gEU := other(byHash, gEmails)
	gExact := other(byHash, gEmails, gEU)
	place("emails.", gEmails, false)
	if got := s.Owner("emails.eu.bounces"); got != byHash {
		t.Errorf("a pending prefix routes: %d", got)
	}
	place("emails.", gEmails, true)
	place("emails.eu.", gEU, true)
	for name, want := range map[string]uint16{"emails.eu.bounces": gEU, "emails.us": gEmails, "emails": s.Slots[Slot("emails")]} {
		if got := s.Owner(name); got != want {
			t.Errorf("Owner(%q) = %d, want %d", name, got, want)
		}
	}
	// OwnerPlacing: as if a placement were active in the place of its
	// prefix's; a longer prefix keeps its own.
	for name, want := range map[string]uint16{"emails.eu.bounces": gEU, "emails.us": gExact, "emails": s.Slots[Slot("emails")]} {
		if got := s.OwnerPlacing(name, Placement{Prefix: "emails.", Group: gExact}); got != want {
			t.Errorf("OwnerPlacing(%q, emails. → %d) = %d, want %d", name, gExact, got, want)
		}
	}
	if got := s.OwnerWithout("emails.us", "emails."); got != s.Slots[Slot("emails.us")] {
		t.Errorf("OwnerWithout(emails.us, emails.) = %d, want its slot's %d", got, s.Slots[Slot("emails.us")])
	}
	if got := s.OwnerWithout("emails.eu.x", "emails."); got != gEU {
		t.Errorf("OwnerWithout(emails.eu.x, emails.) = %d, want the longer prefix's %d", got, gEU)
	}
	s.Exact["emails.eu.bounces"] = gExact
	if got := s.Owner("emails.eu.bounces"); got != gExact {
		t.Errorf("an exact placement: %d, want %d", got, gExact)
	}
	if got := s.OwnerPlacing("emails.eu.bounces", Placement{Prefix: "emails.eu.", Group: gEmails}); got != gExact {
		t.Errorf("OwnerPlacing of a tube placed by name: %d, want %d", got, gExact)
	}
	unplace("emails.eu.")
	unplace("emails.")
	if got := s.Owner("emails.us"); got != s.Slots[Slot("emails.us")] {
		t.Errorf("after the prefixes went: %d", got)
	}
}

func containsU16(s []uint16, v uint16) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestJobIDs: with prefix 0 ids are today's; every id is below 2^53 and
// finds its group in its prefix; an id of no group's prefix, or past
// 2^53, finds none.
func TestJobIDs(t *testing.T) {
	if SeqBits != store.IDSeqBits {
		t.Fatalf("meta's id layout (%d bits of sequence) is not the store's (%d)", SeqBits, store.IDSeqBits)
	}
	s, _ := Formation(members(3), 3, 3)
	for _, seq := range []uint64{1, 2, 1 << 40} {
		if JobID(0, seq) != seq {
			t.Errorf("JobID(0, %d) = %d", seq, JobID(0, seq))
		}
	}
	if id := JobID(255, 1<<SeqBits-1); id >= 1<<53 {
		t.Errorf("the largest id %d is not below 2^53", id)
	}
	for g := range uint8(3) {
		if got, ok := s.GroupOfID(JobID(g, 12345)); !ok || got != uint16(g) {
			t.Errorf("an id of prefix %d: group %d, %v", g, got, ok)
		}
	}
	for _, id := range []uint64{JobID(3, 1), 1 << 53} {
		if g, ok := s.GroupOfID(id); ok {
			t.Errorf("id %#x found group %d", id, g)
		}
	}
}
