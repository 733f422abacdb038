package store_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store"
)

// jobOf makes a job in each state for the command tables: the job belongs
// to owner when reserved.
func jobOf(s *store.Store, owner, producer *store.Client, state string) *store.Job {
	switch state {
	case "ready":
		return put(s, producer, 5, 0, 10)
	case "delayed":
		return put(s, producer, 5, 30, 10)
	case "buried":
		j := put(s, producer, 5, 0, 10)
		hold(producer, j)
		producer.Bury(j.ID(), 5)
		return j
	case "reserved":
		j := put(s, producer, 5, 0, 10)
		hold(owner, j)
		return j
	}
	panic("jobOf: " + state)
}

func TestDelete(t *testing.T) {
	for _, tc := range []struct {
		state string
		mine  bool // reserved by the deleting client
		ok    bool
	}{
		{"ready", false, true},
		{"delayed", false, true},
		{"buried", false, true},
		{"reserved", true, true},
		{"reserved", false, false},
	} {
		name := tc.state
		if tc.state == "reserved" && !tc.mine {
			name = "reserved by another client"
		}
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, _ := newClient(s)
				other, _ := newClient(s)
				other.Use([]byte("t"))
				owner := other
				if tc.mine {
					owner = c
				}
				j := jobOf(s, owner, other, tc.state)
				before := globalCounts(s)
				if ok := c.Delete(j.ID()); ok != tc.ok {
					t.Fatalf("Delete = %v, want %v", ok, tc.ok)
				}
				ts := tubeStats(t, s, "t")
				if !tc.ok {
					if globalCounts(s) != before || ts.CmdDelete != 0 {
						t.Fatalf("a failed delete changed something: %+v, %+v", globalCounts(s), ts)
					}
					wantState(t, s, j, store.StateReserved, other)
					return
				}
				if _, live := store.PeekByID(s, j.ID()); live {
					t.Fatal("deleted job still found")
				}
				if got := globalCounts(s); got != (counts{}) {
					t.Fatalf("counts after delete: %+v", got)
				}
				if ts.CmdDelete != 1 {
					t.Fatalf("cmd-delete %d", ts.CmdDelete)
				}
				if c.Delete(j.ID()) || other.Delete(j.ID()) {
					t.Fatal("deleted twice")
				}
				if ts := tubeStats(t, s, "t"); ts.CmdDelete != 1 {
					t.Fatalf("a failed delete counted: cmd-delete %d", ts.CmdDelete)
				}
				checkNow(t, s, c, other)
				// The job's reference on its tube is gone with it.
				other.Use([]byte("default"))
				if slices.Contains(s.TubeNames(), "t") {
					t.Fatal("tube t outlived its last job and user")
				}
			})
		})
	}
	t.Run("missing", func(t *testing.T) {
		bubble(t, func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			if c.Delete(0) || c.Delete(77) {
				t.Fatal("deleted a missing job")
			}
		})
	})
	t.Run("a delayed job's delete re-arms the delay timer", func(t *testing.T) {
		bubble(t, func(t *testing.T, s *store.Store) {
			c, r := newClient(s)
			first := put(s, c, 1, 1, 10)
			second := put(s, c, 1, 2, 10)
			c.Delete(first.ID())
			checkNow(t, s, c)
			block(t, c, -1)
			time.Sleep(2 * time.Second)
			if e := r.next(t); e.job != second {
				t.Fatalf("got %s, want job %d", e, second.ID())
			}
		})
	})
}

// TestOwnJobCommands: release, bury and touch work only on a job the client
// itself has reserved.
func TestOwnJobCommands(t *testing.T) {
	for _, cmd := range []struct {
		name string
		do   func(c *store.Client, id uint64) bool
	}{
		{"release", func(c *store.Client, id uint64) bool { return c.Release(id, 1, 0) == nil }},
		{"bury", func(c *store.Client, id uint64) bool { return c.Bury(id, 1) == nil }},
		{"touch", func(c *store.Client, id uint64) bool { return c.Touch(id) }},
	} {
		for _, tc := range []struct {
			state string
			mine  bool
			ok    bool
		}{
			{"ready", false, false},
			{"delayed", false, false},
			{"buried", false, false},
			{"reserved", false, false},
			{"reserved", true, true},
		} {
			name := cmd.name + "/" + tc.state
			if tc.state == "reserved" && !tc.mine {
				name += " by another client"
			}
			t.Run(name, func(t *testing.T) {
				bubble(t, func(t *testing.T, s *store.Store) {
					c, _ := newClient(s)
					other, _ := newClient(s)
					owner := other
					if tc.mine {
						owner = c
					}
					j := jobOf(s, owner, other, tc.state)
					before := jobStats(t, s, j.ID())
					if ok := cmd.do(c, j.ID()); ok != tc.ok {
						t.Fatalf("%s = %v, want %v", cmd.name, ok, tc.ok)
					}
					if !tc.ok {
						if after := jobStats(t, s, j.ID()); after != before {
							t.Fatalf("a failed %s changed the job: %+v to %+v", cmd.name, before, after)
						}
					}
				})
			})
		}
		t.Run(cmd.name+"/missing", func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, _ := newClient(s)
				if cmd.do(c, 42) {
					t.Fatalf("%s of a missing job succeeded", cmd.name)
				}
			})
		})
	}
}

func TestRelease(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pri, delay uint32
		wantState  store.State
		want       counts
	}{
		{"ready, urgent", 10, 0, store.StateReady, counts{urgent: 1, ready: 1}},
		{"ready, new priority not urgent", 5000, 0, store.StateReady, counts{ready: 1}},
		{"delayed", 10, 3, store.StateDelayed, counts{delayed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, _ := newClient(s)
				j := put(s, c, 2000, 7, 10)
				c.Kick(1)
				reserveNow(t, c, j)
				time.Sleep(time.Second)
				if c.Release(j.ID(), tc.pri, tc.delay) != nil {
					t.Fatal("Release failed")
				}
				st := jobStats(t, s, j.ID())
				wantLeft := time.Duration(tc.delay) * time.Second
				if st.State != tc.wantState || st.Pri != tc.pri || st.Delay != wantLeft || st.TimeLeft != wantLeft ||
					st.Releases != 1 || st.Reserves != 1 || st.Timeouts != 0 {
					t.Fatalf("after release: %+v", st)
				}
				if got := globalCounts(s); got != tc.want {
					t.Fatalf("counts %+v, want %+v", got, tc.want)
				}
				if len(c.ReservedIDs()) != 0 {
					t.Fatal("still held")
				}
				// The TTR no longer runs; a delay runs out into ready.
				time.Sleep(time.Minute)
				st = jobStats(t, s, j.ID())
				if st.State != store.StateReady || st.Timeouts != 0 {
					t.Fatalf("a minute later: %+v", st)
				}
				if c.Release(j.ID(), 1, 0) == nil {
					t.Fatal("released twice")
				}
			})
		})
	}
}

func TestBury(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		var js []*store.Job
		for range 4 {
			js = append(js, put(s, c, 5, 0, 10))
		}
		// Bury in the order 3, 1, 4, 2: the FIFO keeps that order.
		order := []int{2, 0, 3, 1}
		for k, i := range order {
			hold(c, js[i])
			if c.Bury(js[i].ID(), uint32(100+k)) != nil {
				t.Fatalf("Bury(%d) failed", js[i].ID())
			}
		}
		if st := jobStats(t, s, js[2].ID()); st.State != store.StateBuried || st.Pri != 100 || st.Buries != 1 || st.TimeLeft != 0 {
			t.Fatalf("buried job: %+v", st)
		}
		if got := globalCounts(s); got != (counts{buried: 4}) {
			t.Fatalf("counts %+v", got)
		}
		if c.Bury(js[2].ID(), 1) == nil {
			t.Fatal("buried twice")
		}
		for _, i := range order {
			if p := c.PeekBuried(); p != js[i] {
				t.Fatalf("peek-buried = %s, want job %d", jobName(p), js[i].ID())
			}
			if c.Kick(1) != 1 {
				t.Fatal("kick 1 kicked nothing")
			}
		}
		if c.PeekBuried() != nil {
			t.Fatal("FIFO not empty")
		}
		// Buried again after a kick: to the back, buries counted again.
		hold(c, js[2])
		c.Bury(js[2].ID(), 1)
		if st := jobStats(t, s, js[2].ID()); st.Buries != 2 || st.Kicks != 1 {
			t.Fatalf("re-buried: %+v", st)
		}
	})
}

func TestTouch(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		j := put(s, c, 5, 0, 10)
		reserveNow(t, c, j)
		time.Sleep(8 * time.Second)
		if !c.Touch(j.ID()) {
			t.Fatal("Touch failed")
		}
		if st := jobStats(t, s, j.ID()); st.TimeLeft != 10*time.Second {
			t.Fatalf("touched: time-left %v", st.TimeLeft)
		}
		// The old deadline passes without effect; the new one ends it.
		time.Sleep(10*time.Second - 1)
		wantState(t, s, j, store.StateReserved, c)
		time.Sleep(1)
		synctest.Wait()
		if st := jobStats(t, s, j.ID()); st.State != store.StateReady || st.Timeouts != 1 {
			t.Fatalf("after the touched TTR: %+v", st)
		}
		if c.Touch(j.ID()) {
			t.Fatal("touched a job no longer held")
		}
	})
}

func TestTTRExpiry(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, r := newClient(s)
		other, _ := newClient(s)
		j := put(s, other, 7, 0, 3)
		reserveNow(t, c, j)
		time.Sleep(3*time.Second - 1)
		wantState(t, s, j, store.StateReserved, c)
		time.Sleep(1)
		synctest.Wait()
		st := jobStats(t, s, j.ID())
		if st.State != store.StateReady || st.Pri != 7 || st.Timeouts != 1 || st.Reserves != 1 || st.Releases != 0 {
			t.Fatalf("after the TTR: %+v", st)
		}
		if got := globalCounts(s); got != (counts{urgent: 1, ready: 1}) || s.Stats().JobTimeouts != 1 {
			t.Fatalf("counts %+v, job-timeouts %d", got, s.Stats().JobTimeouts)
		}
		// The client is not told; the job is no longer its to delete.
		r.none(t)
		if len(c.ReservedIDs()) != 0 || c.Release(j.ID(), 1, 0) == nil {
			t.Fatal("the client still holds the job")
		}
		if !other.Delete(j.ID()) {
			t.Fatal("a ready job can be deleted by anyone")
		}
	})
}

// TestTTRExpiriesInDeadlineOrder: a client's reservations that run out
// together go back soonest deadline first, as beanstalkd's conn_timeout
// takes them, each offered to the waiters at once; not in the order of
// the client's TTR heap. Job 1 is touched last, so the deadlines run 2,
// 3, 1, and the heap holds 2, 1, 3. The clock moves by hand past all
// three, so that one firing of the timer finds them all due.
func TestTTRExpiriesInDeadlineOrder(t *testing.T) {
	var clock atomic.Int64
	s := store.New(store.Options{Now: clock.Load})
	defer s.Close()
	c, _ := newClient(s)
	var js []*store.Job
	for range 3 {
		j := put(s, c, 0, 0, 2)
		hold(c, j)
		js = append(js, j)
		clock.Add(int64(time.Millisecond))
	}
	c.Touch(js[0].ID())
	w2, r2 := newClient(s)
	w3, r3 := newClient(s)
	block(t, w2, -1)
	block(t, w3, -1)
	clock.Add(int64(3 * time.Second))
	s.PokeTimers()
	for i, r := range []*recorder{r2, r3} {
		select {
		case e := <-r.ch:
			if want := js[i+1]; e.job != want {
				t.Errorf("waiter %d got %s, want job %d", i+1, e, want.ID())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d got nothing", i+1)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); jobStats(t, s, js[0].ID()).State != store.StateReady; {
		if time.Now().After(deadline) {
			t.Fatalf("job 1 is not back: %+v", jobStats(t, s, js[0].ID()))
		}
		time.Sleep(time.Millisecond)
	}
	for _, cl := range []*store.Client{c, w2, w3} {
		cl.Close()
	}
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestDelayExpiriesInDeadlineOrderAcrossTubes: delayed jobs of several
// tubes that come due together become ready in deadline order across the
// tubes, each offered to the waiters at once, as beanstalkd's prottick
// takes the soonest delayed job of all tubes each time; not tube by tube.
// Jobs 1 (a), 2 (b) and 3 (a) are put a millisecond apart; the clock
// moves by hand past all three, so that they come due together: the
// first waiter gets 1, the second 2, and 3 stays ready.
func TestDelayExpiriesInDeadlineOrderAcrossTubes(t *testing.T) {
	var clock atomic.Int64
	s := store.New(store.Options{Now: clock.Load})
	defer s.Close()
	p, _ := newClient(s)
	var js []*store.Job
	for _, tube := range []string{"a", "b", "a"} {
		js = append(js, putIn(s, p, tube, 0, 1, 60))
		clock.Add(int64(time.Millisecond))
	}
	var ws []*store.Client
	var rs []*recorder
	for range 2 {
		w, r := newClient(s)
		w.Watch([]byte("a"))
		w.Watch([]byte("b"))
		w.Ignore([]byte("default"))
		block(t, w, -1)
		ws, rs = append(ws, w), append(rs, r)
	}
	clock.Add(int64(2 * time.Second))
	s.PokeTimers()
	for i, r := range rs {
		select {
		case e := <-r.ch:
			if e.job != js[i] {
				t.Errorf("waiter %d got %s, want job %d", i+1, e, js[i].ID())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d got nothing", i+1)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Delayed != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("still delayed: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	wantState(t, s, js[2], store.StateReady, nil)
	for _, c := range append(ws, p) {
		c.Close()
	}
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestKick(t *testing.T) {
	type job struct {
		state string // "buried" or "delayed"
		delay uint32 // for delayed jobs
	}
	for _, tc := range []struct {
		name   string
		jobs   []job
		bound  uint32
		kicked []int // indexes into jobs, in kick order
	}{
		{"nothing to kick", nil, 5, nil},
		{"bound 0", []job{{"buried", 0}}, 0, nil},
		{"buried, oldest first, bounded", []job{{"buried", 0}, {"buried", 0}, {"buried", 0}}, 2, []int{0, 1}},
		{"delayed, earliest first", []job{{"delayed", 30}, {"delayed", 10}, {"delayed", 20}}, 2, []int{1, 2}},
		{"delayed, equal deadlines by id", []job{{"delayed", 10}, {"delayed", 10}}, 5, []int{0, 1}},
		// beanstalkd's kick_jobs: buried jobs if there are any, otherwise
		// delayed ones; never both in one command.
		{"buried before delayed", []job{{"delayed", 10}, {"buried", 0}, {"delayed", 5}}, 1, []int{1}},
		{"buried only, even with bound to spare", []job{{"delayed", 10}, {"buried", 0}, {"buried", 0}}, 10, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, _ := newClient(s)
				other, _ := newClient(s)
				c.Use([]byte("t"))
				other.Use([]byte("t"))
				var js []*store.Job
				for _, jb := range tc.jobs {
					switch jb.state {
					case "buried":
						js = append(js, jobOf(s, nil, other, "buried"))
					case "delayed":
						js = append(js, put(s, other, 5, jb.delay, 10))
					}
				}
				// A kick in another tube touches nothing here.
				c.Use([]byte("default"))
				if n := c.Kick(100); n != 0 {
					t.Fatalf("kick in the empty used tube kicked %d", n)
				}
				c.Use([]byte("t"))
				before := make([]store.JobStats, len(js))
				for i, j := range js {
					before[i] = jobStats(t, s, j.ID())
				}
				if n := c.Kick(tc.bound); int(n) != len(tc.kicked) {
					t.Fatalf("Kick(%d) = %d, want %d", tc.bound, n, len(tc.kicked))
				}
				for i, j := range js {
					st := jobStats(t, s, j.ID())
					if k := slices.Index(tc.kicked, i); k >= 0 {
						if st.State != store.StateReady || st.Kicks != 1 || st.Delay != before[i].Delay {
							t.Errorf("job %d should be kicked: %+v", i, st)
						}
					} else if st.State != before[i].State || st.Kicks != 0 {
						t.Errorf("job %d should be untouched: %+v", i, st)
					}
				}
				checkNow(t, s)
			})
		})
	}
}

// TestKickOrder checks the order kick takes delayed jobs in, through the
// bound: each kick of 1 takes the earliest remaining deadline.
func TestKickOrder(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		a := put(s, c, 1, 30, 10)
		b := put(s, c, 1, 10, 10)
		d := put(s, c, 1, 20, 10)
		e := put(s, c, 1, 10, 10)
		for _, want := range []*store.Job{b, e, d, a} {
			if p := c.PeekDelayed(); p != want {
				t.Fatalf("peek-delayed = %s, want job %d", jobName(p), want.ID())
			}
			c.Kick(1)
			wantState(t, s, want, store.StateReady, nil)
		}
	})
}

func TestKickJob(t *testing.T) {
	for _, tc := range []struct {
		state string
		ok    bool
	}{
		{"buried", true},
		{"delayed", true},
		{"ready", false},
		{"reserved", false},
	} {
		t.Run(tc.state, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, _ := newClient(s)
				other, _ := newClient(s)
				other.Use([]byte("elsewhere")) // not c's used tube
				j := jobOf(s, other, other, tc.state)
				before := jobStats(t, s, j.ID())
				if ok := c.KickJob(j.ID()) == nil; ok != tc.ok {
					t.Fatalf("KickJob = %v, want %v", ok, tc.ok)
				}
				st := jobStats(t, s, j.ID())
				if !tc.ok {
					if st != before {
						t.Fatalf("a failed kick-job changed the job: %+v to %+v", before, st)
					}
					return
				}
				if st.State != store.StateReady || st.Kicks != 1 || st.Delay != before.Delay || st.TimeLeft != 0 {
					t.Fatalf("after kick-job: %+v", st)
				}
				if got := globalCounts(s); got != (counts{urgent: 1, ready: 1}) {
					t.Fatalf("counts %+v", got)
				}
			})
		})
	}
	t.Run("missing", func(t *testing.T) {
		bubble(t, func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			if c.KickJob(9) == nil {
				t.Fatal("kicked a missing job")
			}
		})
	})
	t.Run("the middle of the buried FIFO", func(t *testing.T) {
		bubble(t, func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			a := jobOf(s, nil, c, "buried")
			b := jobOf(s, nil, c, "buried")
			d := jobOf(s, nil, c, "buried")
			c.KickJob(b.ID())
			checkNow(t, s)
			for _, want := range []*store.Job{a, d} {
				if p := c.PeekBuried(); p != want {
					t.Fatalf("peek-buried = %s, want job %d", jobName(p), want.ID())
				}
				c.Kick(1)
			}
		})
	})
}

func TestPeekUsedTube(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		other, _ := newClient(s)
		if c.PeekReady() != nil || c.PeekDelayed() != nil || c.PeekBuried() != nil {
			t.Fatal("peek in an empty tube found a job")
		}
		other.Use([]byte("t"))
		put(s, other, 5, 0, 10)
		ready := put(s, other, 2, 0, 10)
		put(s, other, 2, 0, 10)
		put(s, other, 1, 20, 10)
		delayed := put(s, other, 1, 10, 10)
		buried := jobOf(s, nil, other, "buried")
		jobOf(s, nil, other, "buried")
		reserved := put(s, other, 0, 0, 10)
		hold(other, reserved) // not a ready job any more

		// c uses default: it sees none of them.
		if c.PeekReady() != nil || c.PeekDelayed() != nil || c.PeekBuried() != nil {
			t.Fatal("peek looked beyond the used tube")
		}
		c.Use([]byte("t"))
		s.PauseTube([]byte("t"), time.Hour) // peek-ready ignores pause
		if p := c.PeekReady(); p != ready {
			t.Errorf("peek-ready = %s, want job %d", jobName(p), ready.ID())
		}
		if p := c.PeekDelayed(); p != delayed {
			t.Errorf("peek-delayed = %s, want job %d", jobName(p), delayed.ID())
		}
		if p := c.PeekBuried(); p != buried {
			t.Errorf("peek-buried = %s, want job %d", jobName(p), buried.ID())
		}
	})
}

func TestClose(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		w, _ := newClient(s)
		p, _ := newClient(s)
		c.Watch([]byte("a"))
		c.Use([]byte("u"))
		a := putIn(s, p, "a", 3, 0, 10)
		d := putIn(s, p, "default", 4, 0, 20)
		kept := putIn(s, p, "default", 9, 0, 30)
		reserveNow(t, c, a)
		reserveNow(t, c, d)
		reserveNow(t, c, kept)
		c.Bury(kept.ID(), 9) // not reserved: Close leaves it buried
		before := jobStats(t, s, a.ID())
		time.Sleep(time.Second)

		c.Close()
		for _, j := range []*store.Job{a, d} {
			st := jobStats(t, s, j.ID())
			want := before
			want.ID, want.Tube, want.Pri, want.TTR = st.ID, st.Tube, st.Pri, st.TTR
			want.State, want.TimeLeft, want.Age = store.StateReady, 0, time.Second
			if st != want {
				t.Errorf("job %d after close: %+v\nwant %+v", j.ID(), st, want)
			}
		}
		wantState(t, s, kept, store.StateBuried, nil)
		if got := globalCounts(s); got != (counts{urgent: 2, ready: 2, buried: 1}) || s.Stats().JobTimeouts != 0 {
			t.Fatalf("counts %+v, job-timeouts %d", got, s.Stats().JobTimeouts)
		}
		if slices.Contains(s.TubeNames(), "u") {
			t.Fatal("the closed client's used tube survived")
		}
		if ts := tubeStats(t, s, "a"); ts.Watching != 0 || ts.Using != 0 {
			t.Fatalf("a: %+v", ts)
		}
		// The TTRs no longer run.
		time.Sleep(time.Minute)
		if s.Stats().JobTimeouts != 0 {
			t.Fatal("a requeued job timed out")
		}
		checkNow(t, s, w, p)
		// Another client can take the requeued jobs.
		reserveNow(t, w, d)
	})
}

// TestCloseRequeuesInReservationOrder: a closing client's jobs go back, and
// to waiters, oldest reservation first (beanstalkd's list order), not in
// TTR-deadline order.
func TestCloseRequeuesInReservationOrder(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		// Later reservations get shorter TTRs, so deadline order is the
		// reverse of reservation order.
		var js []*store.Job
		for _, ttr := range []uint32{300, 200, 100} {
			j := put(s, c, 0, 0, ttr)
			reserveNow(t, c, j)
			js = append(js, j)
		}
		w, r := newClient(s)
		block(t, w, -1)
		c.Close()
		if e := r.next(t); e.job != js[0] {
			t.Fatalf("waiter got %v, want the oldest reservation %s", e, jobName(js[0]))
		}
		if j := w.PeekReady(); j != js[1] {
			t.Fatalf("next ready is %s, want %s", jobName(j), jobName(js[1]))
		}
	})
}
