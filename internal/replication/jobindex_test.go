package replication

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/sproutmq/sprout/store/segment"
)

// TestJobIndexModel drives a jobIndex and a map with the same changes, in
// the shapes a group's log makes: ids handed out in increasing order and
// deleted soon, a few out of order, survivors left behind (long delays,
// buried jobs), rewrites of old ids (compaction), a moved tube's ids far
// from the group's, and ranges that come back after their page went to
// spare. After every step both must hold the same jobs, and the pages must
// stay within the density the index promises.
func TestJobIndexModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var x jobIndex
		want := map[uint64]placed{}
		next := uint64(1)
		check := func(step int) {
			t.Helper()
			if x.len() != len(want) {
				t.Fatalf("seed %d step %d: len %d, want %d", seed, step, x.len(), len(want))
			}
			inPages := x.n - len(x.spare)
			if limit := 2*sparseShare*inPages + sparseShare*pageSlots + pageSlots; len(x.pages)*pageSlots > limit {
				t.Fatalf("seed %d step %d: %d pages for %d jobs in pages: thinner than promised", seed, step, len(x.pages), inPages)
			}
			for num := range x.spareIn {
				if _, ok := x.pages[num]; ok {
					t.Fatalf("seed %d step %d: page %d exists and spare holds jobs of its range", seed, step, num)
				}
			}
		}
		ids := func() []uint64 { return append([]uint64(nil), slicesKeys(want)...) }
		for step := range 20000 {
			p := placed{index: uint64(step + 1), loc: segment.Loc{Seg: uint32(rng.IntN(50)), Size: uint32(1 + rng.IntN(1000))}}
			switch r := rng.IntN(100); {
			case r < 45: // a new job
				id := next
				next++
				if rng.IntN(20) == 0 { // a little out of order
					id += uint64(rng.IntN(5))
				}
				x.set(id, p)
				want[id] = p
			case r < 85: // a delete, mostly of a young job
				if len(want) == 0 {
					continue
				}
				var id uint64
				if rng.IntN(10) < 8 {
					id = next - 1 - uint64(rng.IntN(300))
				} else {
					all := ids()
					id = all[rng.IntN(len(all))]
				}
				gotP, gotOK := x.remove(id)
				wantP, wantOK := want[id]
				delete(want, id)
				if gotOK != wantOK || gotP != wantP {
					t.Fatalf("seed %d step %d: remove(%d) = %v %v, want %v %v", seed, step, id, gotP, gotOK, wantP, wantOK)
				}
			case r < 93: // a rewrite of a live job
				if len(want) == 0 {
					continue
				}
				all := ids()
				id := all[rng.IntN(len(all))]
				x.set(id, p)
				want[id] = p
			case r < 97: // a moved tube's job, far from the group's ids
				id := 5<<45 + uint64(rng.IntN(100000))
				x.set(id, p)
				want[id] = p
			default: // a new job in an old range (a page that went to spare)
				id := uint64(1 + rng.IntN(int(next)))
				x.set(id, p)
				want[id] = p
			}
			for range 3 {
				id := uint64(rng.IntN(int(next) + 10))
				gotP, gotOK := x.get(id)
				wantP, wantOK := want[id]
				if gotOK != wantOK || gotP != wantP {
					t.Fatalf("seed %d step %d: get(%d) = %v %v, want %v %v", seed, step, id, gotP, gotOK, wantP, wantOK)
				}
			}
			if step%500 == 0 {
				check(step)
				if got := maps.Collect(x.all()); !maps.Equal(got, want) {
					t.Fatalf("seed %d step %d: all() yields %d jobs, want %d (or different places)", seed, step, len(got), len(want))
				}
			}
		}
		check(-1)
		if len(x.spare) == 0 {
			t.Errorf("seed %d: no job ever went to spare: the run did not test sparse pages", seed)
		}
		x.clear()
		if x.len() != 0 || len(maps.Collect(x.all())) != 0 {
			t.Fatalf("seed %d: clear left jobs", seed)
		}
	}
}

// TestJobIndexSurvivors: long-lived jobs, one in a thousand, among
// millions deleted, keep neither a page each nor every page.
func TestJobIndexSurvivors(t *testing.T) {
	var x jobIndex
	const total, every = 1_000_000, 1000
	for id := uint64(1); id <= total; id++ {
		x.set(id, placed{index: id, loc: segment.Loc{Seg: 1, Size: 100}})
		if old := id - 300; id > 300 && old%every != 0 {
			x.remove(old)
		}
	}
	if len(x.pages) > 8*sparseShare {
		t.Errorf("%d pages for %d jobs (%d in spare)", len(x.pages), x.len(), len(x.spare))
	}
	for id := uint64(every); id <= total-300; id += every {
		if p, ok := x.get(id); !ok || p.index != id {
			t.Fatalf("survivor %d: %v %v", id, p, ok)
		}
	}
}

func slicesKeys(m map[uint64]placed) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// BenchmarkJobIndex folds what a replica folds on pipelined puts: a new id
// per record, each job deleted a while later, a few left behind; a window
// of live jobs (window) as a busy group holds. "map" is the hash map the
// index replaced, for comparison.
func BenchmarkJobIndex(b *testing.B) {
	const window = 1 << 20
	p := placed{index: 1, loc: segment.Loc{Seg: 1, Size: 100}}
	b.Run("index", func(b *testing.B) {
		var x jobIndex
		for i := range uint64(b.N) {
			id := i + 1
			if _, ok := x.get(id); !ok {
				x.set(id, p)
			}
			if id > window && id%997 != 0 {
				x.remove(id - window)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		x := map[uint64]placed{}
		for i := range uint64(b.N) {
			id := i + 1
			if _, ok := x[id]; !ok {
				x[id] = p
			}
			if id > window && id%997 != 0 {
				delete(x, id-window)
			}
		}
	})
}
