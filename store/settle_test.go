package store

import (
	"slices"
	"testing"
)

// TestSettle: a client settled uses and watches the default tube alone,
// and the tubes it let go of, empty and unreferenced, are freed.
func TestSettle(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	c := s.NewClient(nil)
	defer c.Close()
	c.Use([]byte("a"))
	c.Watch([]byte("b"))
	c.Watch([]byte("c"))
	c.Ignore([]byte(DefaultTube))
	c.Settle()
	if c.UsedTube() != DefaultTube || !slices.Equal(c.Watched(), []string{DefaultTube}) {
		t.Errorf("using %q, watching %v; want the default tube alone", c.UsedTube(), c.Watched())
	}
	if names := s.TubeNames(); !slices.Equal(names, []string{DefaultTube}) {
		t.Errorf("tubes %v after the settle, want the default alone", names)
	}
	c.Settle() // again: nothing changes
	if names := s.TubeNames(); len(names) != 1 {
		t.Errorf("tubes %v", names)
	}
}
