package store

import "testing"

// TestStamps: tubes are stamped in the order they are made, each above
// every stamp given and the floor a request raised, which only rises.
func TestStamps(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	c := s.NewClient(nil)
	defer c.Close()
	c.Watch([]byte("a"))
	far := s.LatestStamp() + 1<<40 // a member whose clock is far ahead
	s.RaiseStamp(far)
	s.RaiseStamp(far - 5) // never lowered
	c.Watch([]byte("b"))
	c.Watch([]byte("c"))
	got := s.StampedTubes()
	if len(got) != 4 || got[0].Name != DefaultTube || got[1].Name != "a" || got[2].Name != "b" || got[3].Name != "c" {
		t.Fatalf("tubes %+v", got)
	}
	if !(got[0].Stamp < got[1].Stamp && got[2].Stamp > far && got[3].Stamp > got[2].Stamp) {
		t.Errorf("stamps %+v, want increasing, b's above %d", got, far)
	}
	if s.LatestStamp() != got[3].Stamp {
		t.Errorf("latest stamp %d, want c's %d", s.LatestStamp(), got[3].Stamp)
	}
}
