package store_test

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestStressRandomOps runs clients doing random operations on a few tubes
// at once, with the real clock, then stops them all and checks the store:
// its invariants, and that every job put was either deleted by exactly one
// successful Delete or is still there exactly once. Run it with -race.
func TestStressRandomOps(t *testing.T) {
	const (
		workers      = 16
		opsPerWorker = 40000
		duration     = 2 * time.Second
	)
	if testing.Short() {
		t.Skip("stress test")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	s := store.New(store.Options{})
	stressed := &stress{s: s, tubes: [][]byte{
		[]byte("default"), []byte("a"), []byte("b"), []byte("c"), []byte("d"),
	}}
	deadline := time.Now().Add(duration)
	workersDone := make([]*stressWorker, workers)
	var wg sync.WaitGroup
	for i := range workers {
		w := &stressWorker{stress: stressed, t: t, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		workersDone[i] = w
		wg.Go(func() { w.run(opsPerWorker, deadline) })
	}
	wg.Wait()
	s.Close() // stop the timers too: the checks below need a still store

	var puts, deletes []uint64
	ops := 0
	for _, w := range workersDone {
		puts = append(puts, w.puts...)
		deletes = append(deletes, w.deletes...)
		ops += w.ops
		for i, r := range w.abandoned {
			// A wait cancelled by Close may have been served just before:
			// at most one call, never more.
			if n := len(r.ch); n > 1 {
				t.Errorf("a cancelled wait (%d) got %d Notifier calls", i, n)
			}
		}
	}
	t.Logf("%d ops, %d puts, %d deletes, %d blocking reserves", ops, len(puts), len(deletes), stressed.waits.Load())

	if err := s.CheckInvariants(); err != nil {
		t.Fatalf("invariants:\n%v", err)
	}
	if err := s.CheckClients(); err != nil {
		t.Fatalf("client counts with every client closed:\n%v", err)
	}

	slices.Sort(puts)
	slices.Sort(deletes)
	if d := duplicates(puts); d != nil {
		t.Fatalf("ids put twice: %v", d)
	}
	if d := duplicates(deletes); d != nil {
		t.Fatalf("ids deleted twice: %v", d)
	}
	live := s.LiveJobIDs()
	for _, id := range deletes {
		if _, ok := slices.BinarySearch(puts, id); !ok {
			t.Fatalf("deleted id %d was never put", id)
		}
		if _, ok := slices.BinarySearch(live, id); ok {
			t.Fatalf("deleted id %d is still in the store", id)
		}
	}
	for _, id := range live {
		if _, ok := slices.BinarySearch(puts, id); !ok {
			t.Fatalf("live id %d was never put", id)
		}
		if _, ok := store.PeekByID(s, id); !ok {
			t.Fatalf("live id %d cannot be peeked", id)
		}
	}
	if len(live)+len(deletes) != len(puts) {
		t.Fatalf("%d live + %d deleted != %d put: jobs lost", len(live), len(deletes), len(puts))
	}

	st := s.Stats()
	if st.Reserved != 0 || st.Waiting != 0 {
		t.Fatalf("with every client closed: %d reserved, %d waiting", st.Reserved, st.Waiting)
	}
	if n := st.Ready + st.Delayed + st.Buried; n != int64(len(live)) {
		t.Fatalf("stats count %d jobs, the index %d", n, len(live))
	}
	if st.TotalJobs != int64(len(puts)) {
		t.Fatalf("total-jobs %d, puts %d", st.TotalJobs, len(puts))
	}
	for _, name := range s.TubeNames() {
		ts := tubeStats(t, s, name)
		if name != store.DefaultTube && ts.Ready+ts.Delayed+ts.Buried == 0 {
			t.Errorf("tube %q outlived its last job and client: %+v", name, ts)
		}
	}
}

func duplicates(sorted []uint64) []uint64 {
	var d []uint64
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			d = append(d, sorted[i])
		}
	}
	return d
}

// stress is what the workers share.
type stress struct {
	s     *store.Store
	tubes [][]byte
	maxID atomic.Uint64 // the highest id put so far
	waits atomic.Int64
}

// stressWorker is one connection: it alone uses its Client.
type stressWorker struct {
	*stress
	t   *testing.T
	rng *rand.Rand

	c    *store.Client
	rec  *recorder
	held []uint64 // ids this client reserved; some may have timed out since

	puts, deletes []uint64
	abandoned     []*recorder // of waits cancelled by Close
	ops           int
}

func (w *stressWorker) open() {
	w.rec = newRecorder()
	w.c = w.s.NewClient(w.rec)
	w.held = w.held[:0]
}

func (w *stressWorker) run(maxOps int, deadline time.Time) {
	w.open()
	defer func() { w.c.Close() }()
	for w.ops = 0; w.ops < maxOps; w.ops++ {
		if w.ops%64 == 0 && time.Now().After(deadline) {
			return
		}
		if !w.step() {
			return
		}
	}
}

// anyID is an id that was put at some point, by anyone.
func (w *stressWorker) anyID() uint64 {
	if m := w.maxID.Load(); m > 0 {
		return 1 + w.rng.Uint64N(m)
	}
	return 1
}

// ownID takes one of the ids this client reserved out of held.
func (w *stressWorker) ownID() (uint64, bool) {
	if len(w.held) == 0 {
		return 0, false
	}
	i := w.rng.IntN(len(w.held))
	id := w.held[i]
	w.held[i] = w.held[len(w.held)-1]
	w.held = w.held[:len(w.held)-1]
	return id, true
}

func (w *stressWorker) tube() []byte { return w.tubes[w.rng.IntN(len(w.tubes))] }

// step does one random operation; false stops the worker after a failure.
func (w *stressWorker) step() bool {
	c := w.c
	// A Notifier call with no wait outstanding is a duplicate or a stray.
	select {
	case e := <-w.rec.ch:
		w.t.Errorf("Notifier call with no wait outstanding: %s", e)
		return false
	default:
	}
	switch op := w.rng.IntN(100); {
	case op < 20:
		id := w.s.NextID()
		c.Put(id, w.rng.Uint32N(2048), w.rng.Uint32N(2), 1+w.rng.Uint32N(2), body(id))
		w.puts = append(w.puts, id)
		for m := w.maxID.Load(); m < id && !w.maxID.CompareAndSwap(m, id); m = w.maxID.Load() {
		}
	case op < 30:
		j, r := c.Reserve(0)
		switch r {
		case store.Reserved:
			w.held = append(w.held, j.ID())
		case store.Waiting:
			w.t.Errorf("Reserve(0) blocked")
			return false
		}
	case op < 38:
		w.waits.Add(1)
		j, r := c.Reserve(time.Duration(1+w.rng.IntN(20)) * time.Millisecond)
		switch r {
		case store.Reserved:
			w.held = append(w.held, j.ID())
		case store.Waiting:
			select {
			case e := <-w.rec.ch:
				if e.job != nil {
					w.held = append(w.held, e.job.ID())
				} else if e.result != store.TimedOut && e.result != store.DeadlineSoon {
					w.t.Errorf("a wait ended with %s", e)
				}
			case <-time.After(10 * time.Second):
				w.t.Errorf("a blocked reserve with a 20ms timeout was never answered")
				return false
			}
		}
	case op < 46:
		id := w.anyID()
		if w.rng.IntN(2) == 0 {
			if own, ok := w.ownID(); ok {
				id = own
			}
		}
		if c.Delete(id) {
			w.deletes = append(w.deletes, id)
		}
	case op < 52:
		if id, ok := w.ownID(); ok {
			c.Release(id, w.rng.Uint32N(2048), w.rng.Uint32N(2))
		}
	case op < 56:
		if id, ok := w.ownID(); ok {
			c.Bury(id, w.rng.Uint32N(2048))
		}
	case op < 60:
		if len(w.held) > 0 {
			c.Touch(w.held[w.rng.IntN(len(w.held))])
		}
	case op < 64:
		c.Kick(1 + w.rng.Uint32N(5))
	case op < 68:
		c.KickJob(w.anyID())
	case op < 72:
		if j, ok := c.ReserveJob(w.anyID()); ok {
			w.held = append(w.held, j.ID())
		}
	case op < 78:
		c.Use(w.tube())
	case op < 84:
		c.Watch(w.tube())
	case op < 89:
		c.Ignore(w.tube())
	case op < 91:
		w.s.PauseTube(w.tube(), time.Duration(w.rng.IntN(50))*time.Millisecond)
	case op < 96:
		w.read()
	case op < 98:
		c.Close()
		w.open()
	default:
		// Close while blocked: the wait is cancelled, and any job handed
		// over just before goes back.
		w.waits.Add(1)
		if _, r := c.Reserve(-1); r == store.Waiting {
			w.abandoned = append(w.abandoned, w.rec)
		}
		c.Close()
		w.open()
	}
	return true
}

// read exercises the read-only calls, for the race detector.
func (w *stressWorker) read() {
	s, c := w.s, w.c
	id := w.anyID()
	if j, ok := store.PeekByID(s, id); ok && j.ID() != id {
		w.t.Errorf("Peek(%d) returned job %d", id, j.ID())
	}
	if st, ok := store.StatsOfJob(s, id); ok && (st.ID != id || st.State == store.StateInvalid) {
		w.t.Errorf("JobStats(%d) = %+v", id, st)
	}
	s.TubeStats(w.tube())
	s.Stats()
	s.TubeNames()
	for _, j := range []*store.Job{c.PeekReady(), c.PeekDelayed(), c.PeekBuried()} {
		if j != nil {
			_ = j.Body()
		}
	}
	if n := len(c.Watched()); n < 1 {
		w.t.Errorf("watching %d tubes", n)
	}
	_ = c.UsedTube()
}
