package replication

import (
	"testing"

	"github.com/sproutmq/sprout/store"
)

// TestStoreDigest: two stores holding the same jobs as the log describes
// them have one digest, whatever is reserved or which member's clock
// moved a delayed job; a change the log carries (a body, a burial, a
// priority, a job more) changes it.
func TestStoreDigest(t *testing.T) {
	type job struct {
		pri, delay, ttr uint32
		body            string
	}
	jobs := []job{{1, 0, 60, "a"}, {2, 0, 60, "b\r\nwith a line end"}, {3, 3600, 60, "later"}, {4, 0, 30, ""}}
	fill := func(jobs []job, reserve bool, bury uint64) *store.Store {
		st := store.New(store.Options{})
		t.Cleanup(st.Close)
		c := st.NewClient(nil)
		for i, j := range jobs {
			if _, err := c.Put(uint64(i+1), j.pri, j.delay, j.ttr, []byte(j.body+"\r\n")); err != nil {
				t.Fatal(err)
			}
		}
		if bury != 0 {
			if _, res := c.Reserve(0); res != store.Reserved {
				t.Fatalf("reserve: %v", res)
			}
			if err := c.Bury(bury, 1); err != nil {
				t.Fatal(err)
			}
		}
		if reserve {
			if _, res := c.Reserve(0); res != store.Reserved {
				t.Fatalf("reserve: %v", res)
			}
		}
		return st
	}
	n, base := StoreDigest(fill(jobs, false, 0))
	if n != len(jobs) || len(base) != 32 {
		t.Fatalf("digest of %d jobs: %d, %q", len(jobs), n, base)
	}
	if _, d := StoreDigest(fill(jobs, true, 0)); d != base {
		t.Errorf("a reservation changed the digest: %s, want %s", d, base)
	}
	if _, d := StoreDigest(store.New(store.Options{})); d == base {
		t.Error("an empty store has the digest of four jobs")
	}
	changed := map[string][]job{
		"a body":     {{1, 0, 60, "A"}, jobs[1], jobs[2], jobs[3]},
		"a priority": {{9, 0, 60, "a"}, jobs[1], jobs[2], jobs[3]},
		"a ttr":      {{1, 0, 61, "a"}, jobs[1], jobs[2], jobs[3]},
		"a job more": append(append([]job(nil), jobs...), job{1, 0, 60, "e"}),
	}
	for what, js := range changed {
		if _, d := StoreDigest(fill(js, false, 0)); d == base {
			t.Errorf("%s did not change the digest", what)
		}
	}
	if _, d := StoreDigest(fill(jobs, false, 1)); d == base {
		t.Error("a burial did not change the digest")
	}
}
