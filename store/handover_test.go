package store_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// TestHandOverReservations: a leader's client lists what it holds, the
// oldest reservation first, with the ends of their TTRs; a replica that
// applied the same jobs (ready there, as reservations are not logged)
// has its client of the same session take them: reserved by it until
// the same deadline, with their reserve counts (not counted again), and
// then its own to delete or bury. A job deleted or buried meanwhile is not taken.
func TestHandOverReservations(t *testing.T) {
	leader, replica := store.New(store.Options{}), store.New(store.Options{})
	t.Cleanup(leader.Close)
	t.Cleanup(replica.Close)
	c := leader.NewClient(nil)
	first, second, gone := put(leader, c, 5, 0, 60), put(leader, c, 1, 0, 30), put(leader, c, 0, 0, 60)
	for _, want := range []*store.Job{gone, second, first} {
		if j, res := c.Reserve(0); res != store.Reserved || j != want {
			t.Fatalf("reserve: %v %v, want job %d", j, res, want.ID())
		}
	}
	frames, _, _, _, _ := leader.ExportTube([]byte(store.DefaultTube))
	recs, err := wal.DecodeFrames(nil, frames)
	if err != nil {
		t.Fatal(err)
	}
	replica.Apply(recs, nil)
	if !c.Delete(gone.ID()) {
		t.Fatal("delete of a held job")
	}
	replica.Apply([]wal.Record{{Kind: wal.KindDelete, ID: gone.ID()}}, nil)

	held := c.Reservations()
	if len(held) != 2 || held[0].ID != second.ID() || held[1].ID != first.ID() {
		t.Fatalf("reservations %+v: want jobs %d then %d", held, second.ID(), first.ID())
	}
	if left := time.Until(time.Unix(0, held[0].Deadline)); left < 25*time.Second || left > 30*time.Second {
		t.Fatalf("job %d's TTR ends in %v, want about 30s", held[0].ID, left)
	}

	r := replica.NewClient(nil)
	for _, h := range held {
		if !r.Adopt(h) {
			t.Fatalf("job %d not taken", h.ID)
		}
	}
	if r.Adopt(store.Reservation{ID: gone.ID(), Deadline: held[0].Deadline}) {
		t.Fatal("a deleted job taken")
	}
	if got := r.Reservations(); len(got) != 2 || got[0] != held[0] || got[1] != held[1] {
		t.Fatalf("taken: %+v, want %+v", got, held)
	}
	js, _ := r.JobStats(first.ID())
	if js.State != store.StateReserved || js.Reserves != 1 || js.TimeLeft < 55*time.Second {
		t.Fatalf("job %d taken: %+v", first.ID(), js)
	}
	if st := replica.Stats(); st.Reserved != 2 || st.Ready != 0 {
		t.Fatalf("replica stats %+v: want 2 reserved, 0 ready", st)
	}
	if err := r.Bury(second.ID(), 1); err != nil {
		t.Fatalf("its holder buries it there: %v", err)
	}
	if r.Adopt(held[0]) {
		t.Fatal("a buried job taken")
	}
	if !r.Delete(first.ID()) {
		t.Fatal("its holder deletes it there")
	}
}

// TestResumeJobs: jobs paused (PauseJobs) are handed out again once
// every pause is resumed, first to the reserve that waited meanwhile; a
// graceful shutdown's hold (HoldJobs) is not undone by a resume.
func TestResumeJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := store.New(store.Options{})
		defer s.Close()
		p := s.NewClient(nil)
		wRec := newRecorder()
		w := s.NewClient(wRec)
		s.PauseJobs()
		s.PauseJobs()
		if _, r := w.Reserve(-1); r != store.Waiting {
			t.Fatalf("reserve while paused: %v", r)
		}
		j := put(s, p, 1, 0, 60)
		s.ResumeJobs() // one pause left
		wRec.none(t)
		s.ResumeJobs()
		if e := wRec.next(t); e.job != j {
			t.Fatalf("the waiting reserve got %s, want job %d", e, j.ID())
		}
		if _, r := p.Reserve(0); r != store.TimedOut {
			t.Fatalf("a second reserve: %v", r)
		}
		s.PauseJobs()
		s.HoldJobs() // a shutdown begins meanwhile
		s.ResumeJobs()
		put(s, p, 1, 0, 60)
		if _, r := p.Reserve(0); r != store.TimedOut {
			t.Fatalf("a reserve once held for good: %v", r)
		}
	})
}
