package store_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// eachTube collects what EachTube reports.
func eachTube(s *store.Store) []store.TubeStats {
	var got []store.TubeStats
	s.EachTube(func(st *store.TubeStats) { got = append(got, *st) })
	return got
}

// TestEachTube: EachTube reports every tube once, in list-tubes order,
// with the figures stats-tube reports.
func TestEachTube(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(s *store.Store)
	}{
		{"only default", func(s *store.Store) {}},
		{"jobs in every state", func(s *store.Store) {
			c, _ := newClient(s)
			putIn(s, c, "a", 0, 0, 10)    // urgent, ready
			putIn(s, c, "a", 5000, 0, 10) // ready
			putIn(s, c, "b", 1, 30, 10)   // delayed
			j := putIn(s, c, "c", 1, 0, 10)
			c.Watch([]byte("c"))
			c.Ignore([]byte("default"))
			j2, _ := c.Reserve(0)
			if j2 != j {
				panic("reserved the wrong job")
			}
			c.Bury(j.ID(), 1)
			putIn(s, c, "c", 1, 0, 10)
			c.Reserve(0)
			s.PauseTube([]byte("b"), time.Minute)
		}},
		{"a freed tube's slot is taken by the last", func(s *store.Store) {
			c, _ := newClient(s)
			for _, name := range []string{"a", "b", "c", "d"} {
				putIn(s, c, name, 1, 0, 10)
			}
			c.Use([]byte("default"))
			c.Watch([]byte("b"))
			c.Ignore([]byte("default"))
			j, _ := c.Reserve(0)
			c.Delete(j.ID())
			c.Ignore([]byte("b")) // refused: the last watched tube
			c.Watch([]byte("default"))
			c.Ignore([]byte("b"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				tc.run(s)
				got := eachTube(s)
				names := make([]string, len(got))
				for i := range got {
					names[i] = got[i].Name
					if want := tubeStats(t, s, got[i].Name); got[i] != want {
						t.Errorf("tube %s: EachTube %+v\nstats-tube         %+v", got[i].Name, got[i], want)
					}
				}
				if want := s.TubeNames(); !slices.Equal(names, want) {
					t.Errorf("EachTube order %v, want %v", names, want)
				}
			})
		})
	}
}

// TestEachTubeUnlocked: fn runs with no store lock held, so it may call
// the store, even create and free tubes, without deadlocking.
func TestEachTubeUnlocked(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		putIn(s, c, "a", 1, 0, 10)
		n := 0
		s.EachTube(func(st *store.TubeStats) {
			n++
			if _, ok := s.TubeStats([]byte(st.Name)); !ok {
				t.Errorf("tube %s vanished", st.Name)
			}
			c.Use([]byte(fmt.Sprint("new-", n))) // creates one tube, frees the last new one
		})
		if n != 2 {
			t.Fatalf("EachTube visited %d tubes, want 2 (the ones there when it began)", n)
		}
	})
}

// BenchmarkEachTube10k is the store's share of a metrics scrape of 10,000
// tubes.
func BenchmarkEachTube10k(b *testing.B) {
	s := store.New(store.Options{})
	defer s.Close()
	c := s.NewClient(nopNotifier{})
	defer c.Close()
	for i := range 10_000 {
		c.Use(fmt.Appendf(nil, "tube-%d", i))
		c.Put(s.NextID(), 0, 0, 60, benchBody)
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		s.EachTube(func(st *store.TubeStats) { n += st.Ready })
		if n != 10_000 {
			b.Fatalf("%d ready jobs, want 10000", n)
		}
	}
}
