package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestRemoteRefs: other members' sessions count in stats-tube's
// current-using and current-watching beside this store's own clients,
// keep the tube alive (and so its pause), and free it with the last
// reference, wherever it was held.
func TestRemoteRefs(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		const m1, m2 = 1, 2
		refs := func(tube string) (using, watching int) {
			st := tubeStats(t, s, tube)
			return st.Using, st.Watching
		}
		s.SetRefs(m1, []byte("remote"), 2, 3)
		if u, w := refs("remote"); u != 2 || w != 3 {
			t.Fatalf("after m1's 2 and 3: using %d, watching %d", u, w)
		}
		if !slices.Contains(s.TubeNames(), "remote") {
			t.Fatal("a tube only members reference is not listed")
		}
		s.SetRefs(m1, []byte("remote"), 1, 0)
		s.SetRefs(m2, []byte("remote"), 0, 1)
		c, _ := newClient(s)
		c.Use([]byte("remote"))
		if u, w := refs("remote"); u != 2 || w != 1 {
			t.Fatalf("m1 1/0, m2 0/1 and a client using it: using %d, watching %d", u, w)
		}
		checkNow(t, s, c)
		s.PauseTube([]byte("remote"), time.Minute)
		s.DropRefs(m1)
		c.Use([]byte(store.DefaultTube))
		if u, w := refs("remote"); u != 0 || w != 1 {
			t.Fatalf("with m2's watch alone: using %d, watching %d", u, w)
		}
		if st := tubeStats(t, s, "remote"); st.Pause == 0 {
			t.Error("the tube's pause went while m2 still watches it")
		}
		checkNow(t, s, c)
		s.SetRefs(m2, []byte("remote"), 0, 0)
		if _, ok := s.TubeStats([]byte("remote")); ok {
			t.Fatal("the tube outlived its last reference")
		}
		s.SetRefs(m2, []byte("remote"), 0, 0) // nothing held: nothing changes
		s.SetRefs(m1, []byte("remote"), 0, 1)
		if st := tubeStats(t, s, "remote"); st.Pause != 0 || st.Watching != 1 {
			t.Errorf("the tube made again: %+v, want a new tube, unpaused, watched once", st)
		}
		checkNow(t, s, c)
	})
}

// TestOwnerClient: a client for another member's session holds the tubes
// it uses and watches, but leaves current-using and current-watching to
// that member's references (SetRefs), so a session counts once.
func TestOwnerClient(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		o := s.NewOwnerClient(nil)
		o.Use([]byte("owned"))
		o.Watch([]byte("owned"))
		st := tubeStats(t, s, "owned")
		if st.Using != 0 || st.Watching != 0 {
			t.Fatalf("an owner client's use and watch counted: using %d, watching %d", st.Using, st.Watching)
		}
		if d := tubeStats(t, s, store.DefaultTube); d.Using != 0 || d.Watching != 0 {
			t.Fatalf("default, watched by the owner client alone: using %d, watching %d", d.Using, d.Watching)
		}
		s.SetRefs(7, []byte("owned"), 1, 1)
		if st := tubeStats(t, s, "owned"); st.Using != 1 || st.Watching != 1 {
			t.Fatalf("with the member's refs: using %d, watching %d, want 1 and 1", st.Using, st.Watching)
		}
		s.SetRefs(7, []byte("owned"), 0, 0)
		if _, ok := s.TubeStats([]byte("owned")); !ok {
			t.Fatal("a tube an owner client uses was freed")
		}
		if n, ok := o.Ignore([]byte("owned")); !ok || n != 1 {
			t.Fatalf("ignore: %d %v", n, ok)
		}
		o.Close()
		if _, ok := s.TubeStats([]byte("owned")); ok {
			t.Fatal("the tube outlived its owner client")
		}
		if d := tubeStats(t, s, store.DefaultTube); d.Using != 0 || d.Watching != 0 {
			t.Fatalf("default after the owner client closed: using %d, watching %d", d.Using, d.Watching)
		}
	})
}
