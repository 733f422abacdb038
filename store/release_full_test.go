package store

import "testing"

// TestReleaseWithoutDelayOnFullLog: on a full disk a release without a
// delay is answered RELEASED, as beanstalkd answers it (it never logs
// one); Sprout answered OUT_OF_MEMORY, and the worker could not hand its
// job back before its TTR. One with a delay is still refused. Found by a
// reviewing helper against the 1.13 binary on a full tmpfs.
func TestReleaseWithoutDelayOnFullLog(t *testing.T) {
	full := &fullJournal{}
	s := newStore(Options{}, full)
	defer s.Close()
	c := s.NewClient(nil)
	defer c.Close()
	j, err := c.Put(s.NextID(), 10, 0, 60, []byte("x\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, res := c.Reserve(0); res != Reserved || got != j {
		t.Fatalf("reserve: %v %v", got, res)
	}
	full.full.Store(true)
	if err := c.Release(j.ID(), 5, 1); err != ErrNoSpace {
		t.Fatalf("release with a delay on a full log: %v, want ErrNoSpace", err)
	}
	if err := c.Release(j.ID(), 5, 0); err != nil {
		t.Fatalf("release without a delay on a full log: %v; beanstalkd answers RELEASED", err)
	}
	if st := s.Stats(); st.Ready != 1 || st.Reserved != 0 {
		t.Fatalf("after the release: %+v, want the job ready", st)
	}
}
