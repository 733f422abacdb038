package store

import (
	"slices"
	"testing"
)

// TestBuriedWalkResumes: a walk of the buried FIFO that lets go of the lock
// between steps passes every job buried from start to end exactly once,
// in order, though the job it stopped at is kicked or buried again
// meanwhile; one deleted before the walk reaches it is not passed.
func TestBuriedWalkResumes(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	c := s.NewClient(nil)
	defer c.Close()
	var jobs []*Job
	for range 20 {
		id := s.NextID()
		j, err := c.Put(id, 1, 0, 60, []byte("x\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.ReserveJob(id); !ok {
			t.Fatal("reserve-job")
		}
		if err := c.Bury(id, 1); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	tube := jobs[0].tube
	w := buriedWalk{t: tube, atSeq: -1}
	var out []listed
	step := func() bool {
		var done bool
		out, done = w.step(3, out)
		return done
	}
	step() // 1, 2, 3
	_ = c.KickJob(jobs[2].id)
	step() // 3 is gone: from the head, passing 1 and 2 again, then 4
	c.Delete(jobs[5].id)
	step() // 5, 7, 8
	if _, ok := c.ReserveJob(jobs[8].id); !ok {
		t.Fatal("reserve-job")
	}
	_ = c.Bury(jobs[8].id, 1) // 9 goes to the end, with a new sequence
	for !step() {
	}
	var got []uint64
	for _, l := range out {
		got = append(got, l.j.id)
	}
	want := []uint64{1, 2, 3, 4, 5, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 9}
	if !slices.Equal(got, want) {
		t.Errorf("walked %v\nwant   %v", got, want)
	}
}
