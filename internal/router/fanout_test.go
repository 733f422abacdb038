package router

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// stampedTubes is st's list-tubes answer, as its Server sends it.
func stampedTubes(st *store.Store) []TubeStamp {
	var out []TubeStamp
	for _, t := range st.StampedTubes() {
		out = append(out, TubeStamp{Name: []byte(t.Name), Stamp: t.Stamp})
	}
	return out
}

// TestMergeTubes: the groups' lists merged by their head stamps, each
// group's order kept, the default tube once.
func TestMergeTubes(t *testing.T) {
	got := MergeTubes(
		[]TubeStamp{{Name: []byte("default"), Stamp: 1}, {Name: []byte("a"), Stamp: 2}, {Name: []byte("c"), Stamp: 9}},
		[]TubeStamp{{Name: []byte("default"), Stamp: 1}, {Name: []byte("b"), Stamp: 5}, {Name: []byte("d"), Stamp: 7}},
		nil,
	)
	if want := []string{"default", "a", "b", "d", "c"}; !slices.Equal(got, want) {
		t.Errorf("merged %v, want %v", got, want)
	}
}

// TestTubesAcrossGroups: one member's creates, sent to three groups'
// stores in turn with the stamp each reply brought back (as requests and
// replies carry it), list in the order they were made, as one server's
// list-tubes; and the groups' stats summed are one server's figures.
func TestTubesAcrossGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 5))
	one := store.New(store.Options{}) // the one server the cluster answers as
	defer one.Close()
	// The groups' leaders' clocks disagree, by an hour either way: the
	// stamps the requests carry keep the order all the same.
	groups := make([]*store.Store, 3)
	start := time.Now()
	for i := range groups {
		var skew atomic.Int64
		groups[i] = store.New(store.Options{Now: func() int64 { return int64(time.Since(start)) + skew.Load() }})
		defer groups[i].Close()
		skew.Store(int64(i-1) * int64(time.Hour))
	}
	var seen uint64 // the member's latest stamp
	for i := range 40 {
		name := []byte(fmt.Sprintf("tube-%02d", i))
		g := groups[rng.IntN(len(groups))]
		g.RaiseStamp(seen)
		for _, st := range []*store.Store{g, one} {
			c := st.NewClient(nil)
			c.Use(name)
			if _, err := c.Put(st.NextID(), 0, 0, 60, []byte("j\r\n")); err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
		seen = max(seen, g.LatestStamp())
	}
	var lists [][]TubeStamp
	var parts []store.Stats
	for _, g := range groups {
		lists = append(lists, stampedTubes(g))
		parts = append(parts, g.Stats())
	}
	if got, want := MergeTubes(lists...), one.TubeNames(); !slices.Equal(got, want) {
		t.Errorf("list-tubes across groups:\n%v\nwant one server's\n%v", got, want)
	}
	want := one.Stats()
	want.Waiting = 0
	if got := SumStats(parts...); got != want {
		t.Errorf("stats across groups %+v, want one server's %+v", got, want)
	}
}
