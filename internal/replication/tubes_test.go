package replication

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store/wal"
)

// TestTubeBookApply: group 0 keeps the first of a move's place and abort;
// a group freezes a tube for one move at a time, thaws it for that move
// only, and keeps it refused once moved out; it holds a tube's copies for
// the last move that adopted them, until that move's end.
func TestTubeBookApply(t *testing.T) {
	rec := func(what uint8, tube string, move uint64, group uint16) *wal.Record {
		return &wal.Record{Kind: wal.KindMeta, State: what, Tube: tube, Deadline: int64(move), Pri: uint32(group)}
	}
	var b TubeBook
	steps := []struct {
		r       *wal.Record
		changed bool
	}{
		{rec(TubeAbort, "a", 1, 0), true},
		{rec(TubePlace, "a", 1, 2), false}, // aborted first
		{&wal.Record{Kind: wal.KindMeta, State: TubePlace, Tube: "b", Deadline: 2, Pri: 3, Delay: 4}, true},
		{rec(TubeAbort, "b", 2, 0), false}, // placed first
		{rec(TubeFreeze, "c", 3, 1), true},
		{rec(TubeFreeze, "c", 3, 1), false},
		{rec(TubeThaw, "c", 4, 0), false}, // another move's
		{rec(TubeMovedOut, "c", 3, 0), true},
		{rec(TubeMovedOut, "c", 3, 0), false},
		{rec(TubeFreeze, "d", 5, 1), true},
		{rec(TubeThaw, "d", 5, 0), true},
		{rec(TubeAdopted, "e", 6, 0), true},
		{rec(TubeAdopted, "e", 6, 0), false},
		{rec(TubeAdoptEnded, "e", 7, 0), false}, // another move's
		{rec(TubeAdopted, "e", 8, 0), true},     // a later move's copies
		{rec(TubeAdoptEnded, "e", 8, 0), true},
		{rec(TubeAdopted, "f", 9, 0), true},
		{rec(TubeAdopted, "g", 10, AdoptStaged), true},
		{rec(TubeAdopted, "g", 10, AdoptStaged), false},
		{rec(TubeAdopted, "g", 10, 0), true},            // taken again at the freeze
		{rec(TubeAdopted, "g", 10, AdoptStaged), false}, // a stage come late
		{&wal.Record{Kind: wal.KindMeta, State: TubeAdopted, Tube: "h", Deadline: 11, Pri: uint32(AdoptStaged), Delay: 3}, true},
		{rec(TubeAdoptEnded, "g", 10, 0), true},
	}
	for i, s := range steps {
		if got := b.apply(s.r); got != s.changed {
			t.Fatalf("step %d (%+v): changed %v, want %v", i, *s.r, got, s.changed)
		}
	}
	want := TubeBook{Placed: map[string]uint16{"b": 3}, Decided: map[uint64]bool{1: false, 2: true},
		Unsettled: map[uint64][]uint16{1: {0}, 2: {3, 4}},
		Out:       map[uint16][]uint16{4: {3}}, Frozen: map[string]Frozen{"c": {Move: 3, To: 1, Moved: true}},
		Adopted: map[string]uint64{"f": 9, "h": 11}, Staged: map[string]Stage{"h": {Move: 11, From: 3}}}
	if !b.equal(want) || !b.equal(b.clone()) {
		t.Fatalf("book %+v, want %+v", b, want)
	}
	if got := b.Awaited(); !maps.Equal(got, map[uint64]bool{9: true, 11: true}) {
		t.Fatalf("the book awaits %v, want moves 9 and 11 (f's adopt, h's stage)", got)
	}
	// A snapshot carries the book as JSON: one that holds adopts alone
	// is not a zero one.
	var back Book
	if js, err := json.Marshal(Book{Tubes: TubeBook{Adopted: b.Adopted, Staged: b.Staged}}); err != nil || json.Unmarshal(js, &back) != nil ||
		!maps.Equal(back.Tubes.Adopted, b.Adopted) || !maps.Equal(back.Tubes.Staged, b.Staged) {
		t.Fatalf("a book of adopts alone came back as %+v (%v)", back.Tubes, err)
	}
	// A decision stays while one of its groups may ask for it; settled,
	// the last maxDecided are kept.
	for i := range maxDecided + 5 {
		b.apply(rec(TubeAbort, "x", uint64(100+i), 0))
	}
	if len(b.Decided) != maxDecided+7 || len(b.Order) != 0 {
		t.Fatalf("unsettled decisions forgotten: %d kept, %d settled", len(b.Decided), len(b.Order))
	}
	if !b.apply(settled(3, 2)) || b.apply(settled(3, 2)) || b.apply(settled(5, 2)) || !slices.Equal(b.Unsettled[2], []uint16{4}) {
		t.Fatalf("move 2 settled by group 3: unsettled %v", b.Unsettled[2])
	}
	var all []uint64
	for i := range maxDecided + 5 {
		all = append(all, uint64(100+i))
	}
	if !b.apply(settled(0, append(all, 1)...)) {
		t.Fatal("settling changed nothing")
	}
	_, first := b.Decided[100]
	placed, kept := b.Decided[2]
	if first || !kept || !placed || len(b.Order) != maxDecided || len(b.Decided) != maxDecided+1 || b.Order[maxDecided-1] != 1 {
		t.Fatalf("after settling: %d decided, %d settled (the first kept: %v; the unsettled placed move kept: %v)",
			len(b.Decided), len(b.Order), first, kept)
	}
}

// settled is a MovesSettled record: group g's part of moves is over.
func settled(g uint16, moves ...uint64) *wal.Record {
	r := &wal.Record{Kind: wal.KindMeta, State: MovesSettled, Tube: "#", Deadline: 1, Pri: uint32(g)}
	for _, m := range moves {
		r.Body = binary.BigEndian.AppendUint64(r.Body, m)
	}
	return r
}

// TestTubeBookPrefixSettles: a prefix's placement waits for every group
// of the cluster to settle it; an abort of the active placement's move,
// come after its decision was forgotten, finds it placed and undoes
// nothing.
func TestTubeBookPrefixSettles(t *testing.T) {
	b := TubeBook{Formed: Formed{Groups: 2, Replicas: 3}, Grown: []GrownGroup{{ID: 2, Modulus: 3}}}
	rec := func(what uint8, move uint64, group uint16) *wal.Record {
		return &wal.Record{Kind: wal.KindMeta, State: what, Tube: "img-", Deadline: int64(move), Pri: uint32(group)}
	}
	b.apply(rec(PrefixPending, 7, 1))
	if !b.apply(rec(PrefixPlace, 7, 1)) || !slices.Equal(b.Unsettled[7], []uint16{0, 1, 2}) {
		t.Fatalf("placed: unsettled %v, want every group", b.Unsettled[7])
	}
	delete(b.Decided, 7) // forgotten, as maxDecided would
	delete(b.Unsettled, 7)
	if !b.apply(rec(PrefixAbort, 7, 0)) || !b.Decided[7] || !b.Prefixes["img-"].Active || b.Prefixes["img-"].Group != 1 || len(b.Dropping) != 0 {
		t.Fatalf("a late abort of the active placement: decided %v, placement %+v, dropping %v", b.Decided[7], b.Prefixes["img-"], b.Dropping)
	}
}

// TestProposeTube: a tube's move's records, proposed by the leader,
// reach every member's book (FrozenTube reads it), and a restart keeps
// them; a follower refuses to propose.
func TestProposeTube(t *testing.T) {
	c := newWALCluster(t, 3, 64<<10, nil)
	l := c.awaitServing(10 * time.Second)
	follower := c.others(l)[0]
	if err := follower.ProposeTube(t.Context(), TubeFreeze, "t", 7, 1, 0); !errors.Is(err, ErrNotServing) {
		t.Fatalf("ProposeTube on a follower: %v, want ErrNotServing", err)
	}
	for _, step := range []struct {
		what  uint8
		tube  string
		group uint16
	}{{TubeFreeze, "t", 1}, {TubePlace, "t", 1}, {TubeMovedOut, "t", 1}} {
		if err := l.ProposeTube(t.Context(), step.what, step.tube, 7, step.group, 0); err != nil {
			t.Fatal(err)
		}
	}
	seen := func(n *Node) bool {
		b := n.Tubes()
		return n.FrozenTube([]byte("t")) && !n.FrozenTube([]byte("u")) && b.Frozen["t"].Moved && b.Placed["t"] == 1 && b.Decided[7]
	}
	for _, n := range c.up() {
		testproc.WaitFor(t, 10*time.Second, n.Name()+" applying the move's records", func() bool { return seen(n) })
	}
	n := c.restart(follower.Name())
	testproc.WaitFor(t, 10*time.Second, "the restarted member's book", func() bool { return seen(n) })
}

// TestProposePrefixWaitsForFormation: a prefix's placement does not
// begin before group 0's book holds the formation, whose groups are
// those that must settle its outcome; once recorded, it begins, and its
// decision waits for each of them.
func TestProposePrefixWaitsForFormation(t *testing.T) {
	c := newWALCluster(t, 3, 64<<10, nil)
	l := c.awaitServing(10 * time.Second)
	if err := l.ProposePrefix(t.Context(), PrefixPending, "img-", 7, 1, nil); !errors.Is(err, ErrNotFormed) {
		t.Fatalf("a placement before the formation: %v, want ErrNotFormed", err)
	}
	if _, ok := l.Tubes().Prefixes["img-"]; ok {
		t.Fatal("a placement refused before the formation is pending all the same")
	}
	if err := l.ProposeFormed(t.Context(), Formed{Groups: 3, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for _, what := range []uint8{PrefixPending, PrefixPlace} {
		if err := l.ProposePrefix(t.Context(), what, "img-", 7, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if b := l.Tubes(); !b.Decided[7] || !slices.Equal(b.Unsettled[7], []uint16{0, 1, 2}) {
		t.Fatalf("placed: decided %v, unsettled %v, want the formation's groups", b.Decided[7], b.Unsettled[7])
	}
}

// TestTubeBookPrefixes: group 0 keeps one prefix placement pending at a
// time (another's is aborted at once), makes it active or drops it,
// restores the placement a pending one replaced when it is aborted,
// keeps an aborted one's destinations to drop until they have, and notes
// the groups it took tubes from; a group freezes, thaws and marks moved
// out a prefix for one move at a time.
func TestTubeBookPrefixes(t *testing.T) {
	rec := func(what uint8, prefix string, move uint64, group uint16, body ...byte) *wal.Record {
		return &wal.Record{Kind: wal.KindMeta, State: what, Tube: prefix, Deadline: int64(move), Pri: uint32(group), Body: body}
	}
	var b TubeBook
	steps := []struct {
		r       *wal.Record
		changed bool
	}{
		{rec(PrefixPending, "img-", 10, 2), true},
		{rec(PrefixPending, "doc-", 11, 1), true}, // refused: aborted
		{rec(PrefixPlace, "doc-", 11, 1), false},
		{rec(PrefixPlace, "img-", 10, 2, 0, 0, 0, 1), true},
		{rec(PrefixAbort, "img-", 10, 0), false},
		{rec(PrefixPending, "img-", 12, 1), true}, // replaces the active one
		{rec(PrefixAbort, "img-", 12, 0), true},
		{rec(PrefixPending, "doc-", 14, 1), true},
		{rec(PrefixAbort, "doc-", 14, 0), true},
		{rec(PrefixDropped, "doc-", 14, 0), true},
		{rec(PrefixDropped, "doc-", 14, 0), false},
		{rec(PrefixFreeze, "img-", 10, 2), true},
		{rec(PrefixFreeze, "img-", 10, 2), false},
		{rec(PrefixThaw, "img-", 9, 0), false},
		{rec(PrefixMovedOut, "img-", 10, 0), true},
		{rec(PrefixFreeze, "a/", 13, 1), true},
		{rec(PrefixThaw, "a/", 13, 0), true},
	}
	for i, s := range steps {
		if got := b.apply(s.r); got != s.changed {
			t.Fatalf("step %d (%+v): changed %v, want %v", i, *s.r, got, s.changed)
		}
		if i == 5 {
			if g, ok := b.Prefixes["img-"].Routes(); !ok || g != 2 {
				t.Fatalf("a pending placement replacing an active one routes to %d %v, want 2", g, ok)
			}
			if p, pl, ok := b.Pending(); !ok || p != "img-" || pl.Group != 1 {
				t.Fatalf("pending %q %+v %v", p, pl, ok)
			}
		}
	}
	want := TubeBook{Prefixes: map[string]PrefixPlacement{"img-": {Group: 2, Active: true}},
		Decided: map[uint64]bool{10: true, 11: false, 12: false, 14: false}, Order: []uint64{11, 10, 12, 14},
		Dropping:       map[uint64]Dropping{12: {Prefix: "img-", To: 1, Was: 2}},
		Out:            map[uint16][]uint16{0: {2}, 1: {2}},
		FrozenPrefixes: map[string]Frozen{"img-": {Move: 10, To: 2, Moved: true}}}
	if !b.equal(want) || fmt.Sprint(b.Order) != "[11 10 12 14]" {
		t.Fatalf("book %+v, want %+v", b, want)
	}
	if _, _, ok := b.Pending(); ok {
		t.Fatal("a placement still pending")
	}
	// Group 0 awaits the aborted placement's drop (its outcome is asked
	// for), as a group its moved-out freezes no longer.
	if got := b.Awaited(); !maps.Equal(got, map[uint64]bool{12: true}) {
		t.Fatalf("the book awaits %v, want move 12 (dropping)", got)
	}
}

// TestTubeBookGrow: group 0 adds the groups a growth names, once each,
// and skips a body it cannot read; slot keys name their groups.
func TestTubeBookGrow(t *testing.T) {
	rec := func(body string) *wal.Record {
		return &wal.Record{Kind: wal.KindMeta, State: GroupsGrow, Tube: "#", Deadline: 1, Body: []byte(body)}
	}
	var b TubeBook
	for i, s := range []struct {
		body    string
		changed bool
	}{
		{`[{"id":2,"modulus":4,"replicas":["a","b"]},{"id":3,"modulus":4,"replicas":["c"]}]`, true},
		{`[{"id":3,"modulus":4,"replicas":["c"]}]`, false},
		{`not json`, false},
		{`[{"id":4,"modulus":8,"replicas":["a"]}]`, true},
	} {
		if got := b.apply(rec(s.body)); got != s.changed {
			t.Fatalf("step %d: changed %v, want %v", i, got, s.changed)
		}
	}
	if len(b.Grown) != 3 || b.Grown[0].ID != 2 || b.Grown[2].Modulus != 8 || !b.equal(b.clone()) {
		t.Fatalf("grown %+v", b.Grown)
	}
	if g, ok := SlotGroup(SlotKey(17)); !ok || g != 17 {
		t.Fatalf("SlotGroup(SlotKey(17)) = %d %v", g, ok)
	}
	if _, ok := SlotGroup("img-"); ok {
		t.Fatal("a prefix read as a slot key")
	}
}

// TestTubeBookFormed: group 0 keeps the first formation recorded, and
// skips one that names no groups or more than a uint16 holds.
func TestTubeBookFormed(t *testing.T) {
	rec := func(groups uint32, replicas int64) *wal.Record {
		return &wal.Record{Kind: wal.KindMeta, State: GroupsFormed, Tube: "#", Deadline: 1, Pri: groups, Delay: replicas}
	}
	var b TubeBook
	for i, s := range []struct {
		rec     *wal.Record
		changed bool
	}{
		{rec(0, 3), false},
		{rec(1<<16, 3), false},
		{rec(5, -1), false},
		{rec(5, 3), true},
		{rec(3, 3), false},
		{rec(5, 3), false},
	} {
		if got := b.apply(s.rec); got != s.changed {
			t.Fatalf("step %d: changed %v, want %v", i, got, s.changed)
		}
	}
	if b.Formed != (Formed{Groups: 5, Replicas: 3}) || !b.equal(b.clone()) || b.equal(TubeBook{}) {
		t.Fatalf("formed %+v, want 5 groups of 3 replicas", b.Formed)
	}
	// A snapshot carries the book as JSON: a book that holds the
	// formation alone is not a zero one.
	var back Book
	if js, err := json.Marshal(Book{Tubes: TubeBook{Formed: b.Formed}}); err != nil || json.Unmarshal(js, &back) != nil || back.Tubes.Formed != b.Formed {
		t.Fatalf("a book of the formation alone came back as %+v (%v)", back.Tubes, err)
	}
}

// TestOnTubesOrder: a book the node publishes while OnTubes starts never
// reaches its function before the older one OnTubes starts it with, or at
// once with it: the member routes by the last book its function got.
func TestOnTubesOrder(t *testing.T) {
	for range 300 {
		n := &Node{}
		book := func(v uint16) TubeBook { return TubeBook{Placed: map[string]uint16{"t": v}} }
		n.setTubes(book(0))
		const last = 20
		published := make(chan struct{})
		go func() {
			defer close(published)
			for v := range uint16(last) {
				n.setTubes(book(v + 1))
			}
		}()
		var got []uint16 // written by one call at a time, or the race detector says so
		n.OnTubes(func(b TubeBook) { got = append(got, b.Placed["t"]) })
		<-published
		n.tubesMu.Lock()
		seen := slices.Clone(got)
		n.tubesMu.Unlock()
		if !slices.IsSorted(seen) || seen[len(seen)-1] != last {
			t.Fatalf("the books' versions as the function got them: %v, want them rising to %d", seen, last)
		}
	}
}

// TestApplyControlSharedEntry: the journal batches records, so one entry
// may hold several control records (finalization and a tube's placement,
// proposed at once); every one of them applies, though the first sets the
// book's index to the entry's. An entry the book already holds (restored
// at or past it) is skipped whole.
func TestApplyControlSharedEntry(t *testing.T) {
	var c Core
	recs := []wal.Record{
		{Kind: wal.KindControl, State: controlVersion, Pri: clusterVersion},
		{Kind: wal.KindMeta, State: TubePlace, Tube: "a", Deadline: 1, Pri: 2},
		{Kind: wal.KindControl, State: controlCordon, Deadline: 7, Pri: 1},
	}
	acts := c.applyControl(nil, recs, 8)
	if b := c.book; len(acts) != 3 || b.Index != 8 || b.Version != clusterVersion || b.Tubes.Placed["a"] != 2 || !slices.Contains(b.Cordoned, 7) {
		t.Fatalf("%d actions, book %+v; want the version raised, tube a placed in group 2 and member 7 cordoned, at index 8", len(acts), b)
	}
	again := []wal.Record{{Kind: wal.KindControl, State: controlDrain, Deadline: 9, Pri: 1}}
	if acts := c.applyControl(nil, again, 8); len(acts) != 0 || len(c.book.Draining) != 0 {
		t.Fatalf("an entry the book holds applied again: %d actions, draining %v", len(acts), c.book.Draining)
	}
}
