package store_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store"
)

func TestReserve(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns the job Reserve(0) must return, or nil for TIMED_OUT.
		setup func(s *store.Store, c, other *store.Client) *store.Job
	}{
		{"nothing ready: timeout 0 times out", func(s *store.Store, c, other *store.Client) *store.Job {
			return nil
		}},
		{"lowest priority first", func(s *store.Store, c, other *store.Client) *store.Job {
			put(s, other, 5, 0, 10)
			j := put(s, other, 3, 0, 10)
			put(s, other, 4, 0, 10)
			return j
		}},
		{"equal priority: lowest id, not put order", func(s *store.Store, c, other *store.Client) *store.Job {
			other.Put(20, 1, 0, 10, body(20))
			j, _ := other.Put(10, 1, 0, 10, body(10))
			other.Put(15, 1, 0, 10, body(15))
			return j
		}},
		{"lowest (pri, id) across watched tubes", func(s *store.Store, c, other *store.Client) *store.Job {
			c.Watch([]byte("a"))
			c.Watch([]byte("b"))
			putIn(s, other, "a", 5, 0, 10)
			j := putIn(s, other, "b", 3, 0, 10)
			putIn(s, other, "default", 3, 0, 10)
			putIn(s, other, "a", 4, 0, 10)
			return j
		}},
		{"unwatched tubes are ignored", func(s *store.Store, c, other *store.Client) *store.Job {
			putIn(s, other, "x", 0, 0, 10)
			return putIn(s, other, "default", 9, 0, 10)
		}},
		{"only an unwatched tube has jobs", func(s *store.Store, c, other *store.Client) *store.Job {
			putIn(s, other, "x", 0, 0, 10)
			return nil
		}},
		{"paused tubes are skipped", func(s *store.Store, c, other *store.Client) *store.Job {
			c.Watch([]byte("a"))
			putIn(s, other, "a", 0, 0, 10)
			s.PauseTube([]byte("a"), time.Minute)
			return putIn(s, other, "default", 9, 0, 10)
		}},
		{"only a paused tube has jobs", func(s *store.Store, c, other *store.Client) *store.Job {
			putIn(s, other, "default", 0, 0, 10)
			s.PauseTube([]byte("default"), time.Minute)
			return nil
		}},
		{"a pause that has run out no longer counts", func(s *store.Store, c, other *store.Client) *store.Job {
			j := put(s, other, 0, 0, 10)
			s.PauseTube([]byte("default"), time.Second)
			time.Sleep(time.Second)
			return j
		}},
		{"delayed jobs are not ready", func(s *store.Store, c, other *store.Client) *store.Job {
			put(s, other, 0, 1, 10)
			return nil
		}},
		{"buried jobs are not ready", func(s *store.Store, c, other *store.Client) *store.Job {
			j := put(s, other, 0, 0, 10)
			hold(other, j)
			other.Bury(j.ID(), 0)
			return nil
		}},
		{"jobs reserved by another client are not ready", func(s *store.Store, c, other *store.Client) *store.Job {
			j := put(s, other, 0, 0, 10)
			hold(other, j)
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, r := newClient(s)
				other, _ := newClient(s)
				other.Ignore([]byte("default")) // never a candidate itself
				other.Watch([]byte("other-only"))
				want := tc.setup(s, c, other)
				j, res := c.Reserve(0)
				if want == nil {
					if res != store.TimedOut || j != nil {
						t.Fatalf("Reserve(0) = %s, %s; want TimedOut", jobName(j), resultName(res))
					}
				} else {
					if res != store.Reserved || j != want {
						t.Fatalf("Reserve(0) = %s, %s; want job %d", jobName(j), resultName(res), want.ID())
					}
					wantState(t, s, j, store.StateReserved, c)
					if st := jobStats(t, s, j.ID()); st.TimeLeft != st.TTR || st.Reserves != 1 {
						t.Fatalf("reserved job: %+v", st)
					}
				}
				r.none(t)
				if g := s.Stats().Waiting; g != 0 {
					t.Fatalf("Reserve(0) left %d waiting", g)
				}
			})
		})
	}
}

func TestReserveDeadlineSoon(t *testing.T) {
	const none = store.ReserveResult(255)
	for _, tc := range []struct {
		name string
		// setup gives c its reservations and returns the job Reserve must
		// return, if any.
		setup   func(s *store.Store, c, other *store.Client) *store.Job
		timeout time.Duration
		want    store.ReserveResult
		// later is what the Notifier reports, with no time passing, when
		// Reserve says Waiting.
		later store.ReserveResult
	}{
		{"ttr 1 is inside the margin at once", ttrJobs(1), -1, store.DeadlineSoon, none},
		{"ttr 1, with a timeout", ttrJobs(1), 5 * time.Second, store.DeadlineSoon, none},
		{"ttr 1, timeout 0", ttrJobs(1), 0, store.DeadlineSoon, none},
		{"ttr 3 is not yet inside the margin", ttrJobs(3), 0, store.TimedOut, none},
		{"ttr 3, 1s before the margin", func(s *store.Store, c, other *store.Client) *store.Job {
			ttrJobs(3)(s, c, other)
			time.Sleep(2*time.Second - 1)
			return nil
		}, 0, store.TimedOut, none},
		{"ttr 3, at the margin", func(s *store.Store, c, other *store.Client) *store.Job {
			ttrJobs(3)(s, c, other)
			time.Sleep(2 * time.Second)
			return nil
		}, 0, store.DeadlineSoon, none},
		{"the soonest of several reservations counts", func(s *store.Store, c, other *store.Client) *store.Job {
			ttrJobs(10, 3, 20)(s, c, other)
			time.Sleep(2 * time.Second)
			return nil
		}, -1, store.DeadlineSoon, none},
		{"touch moves the margin", func(s *store.Store, c, other *store.Client) *store.Job {
			ttrJobs(3)(s, c, other)
			time.Sleep(2 * time.Second)
			c.Touch(c.ReservedIDs()[0])
			return nil
		}, 0, store.TimedOut, none},
		{"a ready job in a watched tube is reserved instead", func(s *store.Store, c, other *store.Client) *store.Job {
			ttrJobs(1)(s, c, other)
			return putIn(s, other, "default", 100, 0, 10)
		}, -1, store.Reserved, none},
		{"a ready job in an unwatched tube does not count", func(s *store.Store, c, other *store.Client) *store.Job {
			ttrJobs(1)(s, c, other)
			putIn(s, other, "x", 100, 0, 10)
			return nil
		}, -1, store.DeadlineSoon, none},
		{"delayed and buried jobs do not count", func(s *store.Store, c, other *store.Client) *store.Job {
			ttrJobs(1)(s, c, other)
			b := put(s, other, 0, 0, 10)
			other.ReserveJob(b.ID())
			other.Bury(b.ID(), 0)
			put(s, other, 0, 1, 10)
			return nil
		}, -1, store.DeadlineSoon, none},
		// beanstalkd's conn_ready ignores pause, so the reserve waits; its
		// connection timer is then already due and reports DEADLINE_SOON.
		{"a paused tube's ready job counts: blocked, then DEADLINE_SOON", pausedReady, -1, store.Waiting, store.DeadlineSoon},
		{"a paused tube's ready job counts, with a timeout", pausedReady, 5 * time.Second, store.Waiting, store.DeadlineSoon},
		{"a paused tube's ready job counts, timeout 0", pausedReady, 0, store.DeadlineSoon, none},
		{"a run-out TTR returns the job, which is then reserved", func(s *store.Store, c, other *store.Client) *store.Job {
			j := put(s, other, 0, 0, 2)
			hold(c, j)
			time.Sleep(2 * time.Second)
			synctest.Wait() // the TTR fires at this very instant
			return j
		}, 0, store.Reserved, none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, r := newClient(s)
				other, _ := newClient(s)
				want := tc.setup(s, c, other)
				held := c.ReservedIDs()
				j, res := c.Reserve(tc.timeout)
				if res != tc.want || j != want {
					t.Fatalf("Reserve(%v) = %s, %s; want %s, %s", tc.timeout, jobName(j), resultName(res), jobName(want), resultName(tc.want))
				}
				if tc.later == none {
					r.none(t)
				} else if e := r.next(t); e.job != nil || e.result != tc.later {
					t.Fatalf("Notifier: %s, want WaitEnded(%s)", e, resultName(tc.later))
				}
				// DEADLINE_SOON is only a warning: the reservations stand.
				if tc.want == store.DeadlineSoon || tc.later == store.DeadlineSoon {
					if got := c.ReservedIDs(); !slices.Equal(got, held) {
						t.Fatalf("reservations %v became %v", held, got)
					}
				}
				if g := s.Stats().Waiting; g != 0 {
					t.Fatalf("%d still waiting", g)
				}
			})
		})
	}
}

// ttrJobs returns a setup in which c holds one job per ttr (in seconds).
func ttrJobs(ttrs ...uint32) func(s *store.Store, c, other *store.Client) *store.Job {
	return func(s *store.Store, c, other *store.Client) *store.Job {
		for _, ttr := range ttrs {
			hold(c, put(s, other, 0, 0, ttr))
		}
		return nil
	}
}

func pausedReady(s *store.Store, c, other *store.Client) *store.Job {
	ttrJobs(1)(s, c, other)
	c.Watch([]byte("paused"))
	// More watched tubes make the join slower than the timer, which has
	// already fired (see TestReserveJoinRaces).
	for i := range 8 {
		c.Watch(fmt.Appendf(nil, "t%d", i))
	}
	putIn(s, other, "paused", 0, 0, 10)
	s.PauseTube([]byte("paused"), time.Minute)
	return nil
}

// TestReserveWakes starts a blocked reserve and ends it from another
// goroutine in each way a job can become ready for it.
func TestReserveWakes(t *testing.T) {
	type env struct {
		s    *store.Store
		p    *store.Client // producer, using and watching "default"
		w    *store.Client // the waiter, watching "default" and "other"
		wRec *recorder
	}
	for _, tc := range []struct {
		name string
		// setup returns what to run in another goroutine, the job the
		// waiter must get, and how long after the trigger it must get it.
		setup func(e env) (trigger func(), want *store.Job, after time.Duration)
	}{
		{"put", func(e env) (func(), *store.Job, time.Duration) {
			return func() { put(e.s, e.p, 1, 0, 10) }, nil, 0
		}},
		{"put into the second watched tube", func(e env) (func(), *store.Job, time.Duration) {
			return func() { putIn(e.s, e.p, "other", 1, 0, 10) }, nil, 0
		}},
		{"release", func(e env) (func(), *store.Job, time.Duration) {
			j := put(e.s, e.p, 1, 0, 10)
			hold(e.p, j)
			return func() { e.p.Release(j.ID(), 1, 0) }, j, 0
		}},
		{"release with a delay", func(e env) (func(), *store.Job, time.Duration) {
			j := put(e.s, e.p, 1, 0, 10)
			hold(e.p, j)
			return func() { e.p.Release(j.ID(), 1, 2) }, j, 2 * time.Second
		}},
		{"kick of a buried job", func(e env) (func(), *store.Job, time.Duration) {
			j := put(e.s, e.p, 1, 0, 10)
			hold(e.p, j)
			e.p.Bury(j.ID(), 1)
			return func() { e.p.Kick(1) }, j, 0
		}},
		{"kick of a delayed job", func(e env) (func(), *store.Job, time.Duration) {
			j := put(e.s, e.p, 1, 100, 10)
			return func() { e.p.Kick(1) }, j, 0
		}},
		{"kick-job in another tube", func(e env) (func(), *store.Job, time.Duration) {
			j := putIn(e.s, e.p, "other", 1, 100, 10)
			e.p.Use([]byte("default"))
			return func() { e.p.KickJob(j.ID()) }, j, 0
		}},
		{"delay expiry", func(e env) (func(), *store.Job, time.Duration) {
			j := put(e.s, e.p, 1, 3, 10)
			return func() {}, j, 3 * time.Second
		}},
		{"unpause", func(e env) (func(), *store.Job, time.Duration) {
			j := putIn(e.s, e.p, "other", 1, 0, 10)
			e.s.PauseTube([]byte("other"), 4*time.Second)
			return func() {}, j, 4 * time.Second
		}},
		{"pause-tube 0 unpauses at once", func(e env) (func(), *store.Job, time.Duration) {
			j := putIn(e.s, e.p, "other", 1, 0, 10)
			e.s.PauseTube([]byte("other"), time.Hour)
			return func() { e.s.PauseTube([]byte("other"), 0) }, j, 0
		}},
		{"pause-tube 0 then a new pause: the waiter is served between them", func(e env) (func(), *store.Job, time.Duration) {
			// beanstalkd's prottick ends the 1 ns pause between the two
			// commands, pipelined or not.
			j := putIn(e.s, e.p, "other", 1, 0, 10)
			e.s.PauseTube([]byte("other"), time.Hour)
			return func() {
				e.s.PauseTube([]byte("other"), 0)
				e.s.PauseTube([]byte("other"), time.Hour)
			}, j, 0
		}},
		{"TTR expiry of another client's job", func(e env) (func(), *store.Job, time.Duration) {
			j := put(e.s, e.p, 1, 0, 2)
			hold(e.p, j)
			return func() {}, j, 2 * time.Second
		}},
		{"another client's close", func(e env) (func(), *store.Job, time.Duration) {
			j := put(e.s, e.p, 1, 0, 10)
			hold(e.p, j)
			return func() { e.p.Close() }, j, 0
		}},
		{"a kick of several: the first kicked goes, as in beanstalkd", func(e env) (func(), *store.Job, time.Duration) {
			// beanstalkd offers each job to waiters as it is kicked, so the
			// oldest buried job goes, not the most urgent.
			var want *store.Job
			for _, pri := range []uint32{5, 2, 9, 2} {
				j := put(e.s, e.p, pri, 0, 10)
				hold(e.p, j)
				e.p.Bury(j.ID(), pri)
				if want == nil {
					want = j
				}
			}
			return func() { e.p.Kick(10) }, want, 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				p, _ := newClient(s)
				w, r := newClient(s)
				w.Watch([]byte("other"))
				trigger, want, after := tc.setup(env{s, p, w, r})
				block(t, w, -1)
				r.none(t)
				if g := s.Stats().Waiting; g != 1 {
					t.Fatalf("Stats().Waiting = %d", g)
				}
				go trigger()
				if after > 0 {
					time.Sleep(after - 1)
					r.none(t)
					time.Sleep(1)
				}
				e := r.next(t)
				if e.job == nil || (want != nil && e.job != want) {
					t.Fatalf("Notifier: %s, want JobReserved(%s)", e, jobName(want))
				}
				wantState(t, s, e.job, store.StateReserved, w)
				if g := s.Stats().Waiting; g != 0 {
					t.Fatalf("Stats().Waiting = %d after the hand-off", g)
				}
				for _, name := range []string{"default", "other"} {
					if n := tubeStats(t, s, name).Waiting; n != 0 {
						t.Fatalf("%s still lists %d waiters", name, n)
					}
				}
				// The wait is over: a later job is not delivered too.
				put(s, w, 0, 0, 10)
				r.none(t)
				if !w.Delete(e.job.ID()) {
					t.Fatal("the waiter cannot delete the job it was given")
				}
			})
		})
	}
}

func TestReserveNotWokenByUnwatchedTube(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		w, r := newClient(s)
		block(t, w, -1)
		j := putIn(s, p, "x", 0, 0, 10)
		s.PauseTube([]byte("default"), time.Second)
		putIn(s, p, "default", 0, 0, 10) // paused: not handed out yet
		r.none(t)
		wantState(t, s, j, store.StateReady, nil)
		time.Sleep(time.Second)
		if e := r.next(t); e.job == nil || e.job == j {
			t.Fatalf("after the pause: %s", e)
		}
	})
}

// TestReserveWaiterOrder checks beanstalkd's ms_take order: waiters 1..6
// appended to one tube get jobs in the order 1,2,3,6,5,4.
func TestReserveWaiterOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		// feed makes six jobs ready and returns them in the order they must
		// be handed out.
		feed func(s *store.Store, p *store.Client) []*store.Job
	}{
		{"one put at a time", func(s *store.Store, p *store.Client) []*store.Job {
			var js []*store.Job
			for range 6 {
				js = append(js, put(s, p, 1, 0, 10))
			}
			return js
		}},
		{"one kick of six, in kick order", func(s *store.Store, p *store.Client) []*store.Job {
			// Each job is offered to waiters as it is kicked (earliest
			// deadline, then lowest id), whatever its priority.
			var js []*store.Job
			for _, pri := range []uint32{5, 3, 9, 1, 7, 3} {
				j := put(s, p, pri, 100, 10)
				js = append(js, j)
			}
			p.Kick(6)
			return js
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				p, _ := newClient(s)
				var recs []*recorder
				for range 6 {
					w, r := newClient(s)
					block(t, w, -1)
					recs = append(recs, r)
				}
				done := make(chan []*store.Job)
				go func() { done <- tc.feed(s, p) }()
				jobs := <-done
				synctest.Wait()
				got := make([]int, len(jobs)) // got[k]: the waiter that got the k-th job
				for i, r := range recs {
					select {
					case e := <-r.ch:
						k := slices.Index(jobs, e.job)
						if k < 0 {
							t.Fatalf("waiter %d got %s", i+1, e)
						}
						got[k] = i + 1
					default:
						t.Fatalf("waiter %d got nothing", i+1)
					}
				}
				if want := []int{1, 2, 3, 6, 5, 4}; !slices.Equal(got, want) {
					t.Fatalf("jobs went to waiters %v, want %v", got, want)
				}
			})
		})
	}
}

func TestReserveBlockedEnds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ttr     uint32 // of a job the client holds; 0 for none
		timeout time.Duration
		at      time.Duration
		want    store.ReserveResult
	}{
		{"timeout", 0, 2 * time.Second, 2 * time.Second, store.TimedOut},
		{"DEADLINE_SOON while blocked", 5, -1, 4 * time.Second, store.DeadlineSoon},
		{"the timeout comes first", 5, 2 * time.Second, 2 * time.Second, store.TimedOut},
		{"the margin comes first", 5, 10 * time.Second, 4 * time.Second, store.DeadlineSoon},
		{"both at once: DEADLINE_SOON", 5, 4 * time.Second, 4 * time.Second, store.DeadlineSoon},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, r := newClient(s)
				c.Watch([]byte("other"))
				var held *store.Job
				if tc.ttr > 0 {
					held = put(s, c, 0, 0, tc.ttr)
					reserveNow(t, c, held)
				}
				block(t, c, tc.timeout)
				if st := tubeStats(t, s, "other"); st.Waiting != 1 || s.Stats().Waiting != 1 {
					t.Fatalf("waiting: tube %d, global %d", st.Waiting, s.Stats().Waiting)
				}
				time.Sleep(tc.at - 1)
				r.none(t)
				time.Sleep(1)
				if e := r.next(t); e.job != nil || e.result != tc.want {
					t.Fatalf("Notifier: %s, want WaitEnded(%s)", e, resultName(tc.want))
				}
				if st := tubeStats(t, s, "other"); st.Waiting != 0 || s.Stats().Waiting != 0 {
					t.Fatalf("still waiting: tube %d, global %d", st.Waiting, s.Stats().Waiting)
				}
				if held != nil {
					wantState(t, s, held, store.StateReserved, c)
				}
				// Nothing more comes: not the timeout after DEADLINE_SOON,
				// and not a later job.
				j := putIn(s, c, "other", 0, 0, 10)
				time.Sleep(20 * time.Second)
				r.none(t)
				wantState(t, s, j, store.StateReady, nil)
			})
		})
	}
}

func TestReserveMultiTubeWaiterServedOnce(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		w, r := newClient(s)
		for _, name := range []string{"a", "b", "c"} {
			w.Watch([]byte(name))
		}
		block(t, w, -1)
		for _, name := range []string{"default", "a", "b", "c"} {
			if n := tubeStats(t, s, name).Waiting; n != 1 {
				t.Fatalf("%s: %d waiting", name, n)
			}
		}
		j := putIn(s, p, "b", 1, 0, 10)
		if e := r.next(t); e.job != j {
			t.Fatalf("got %s, want job %d", e, j.ID())
		}
		for _, name := range []string{"default", "a", "b", "c"} {
			if n := tubeStats(t, s, name).Waiting; n != 0 {
				t.Fatalf("%s: %d waiting after the hand-off", name, n)
			}
			putIn(s, p, name, 0, 0, 10)
		}
		r.none(t)
	})
}

func TestReserveCloseCancelsWait(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		w, r := newClient(s)
		w.Watch([]byte("other"))
		held := put(s, p, 0, 0, 5)
		reserveNow(t, w, held)
		block(t, w, 10*time.Second)
		w.Close()
		if g := s.Stats().Waiting; g != 0 {
			t.Fatalf("Stats().Waiting = %d after close", g)
		}
		if slices.Contains(s.TubeNames(), "other") {
			t.Fatal("other kept alive by a closed waiter")
		}
		j := put(s, p, 0, 0, 10)
		time.Sleep(time.Minute) // past the timeout and the margin
		r.none(t)
		wantState(t, s, j, store.StateReady, nil)
		wantState(t, s, held, store.StateReady, nil)
	})
}

func TestReserveJob(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns the id to reserve and the job expected, if any.
		setup func(s *store.Store, c, other *store.Client) (uint64, *store.Job)
	}{
		{"ready", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			j := put(s, other, 5, 0, 10)
			return j.ID(), j
		}},
		{"ready, not the lowest priority", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			put(s, other, 0, 0, 10)
			j := put(s, other, 5, 0, 10)
			return j.ID(), j
		}},
		{"delayed", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			put(s, other, 5, 1, 10)
			j := put(s, other, 5, 2, 10)
			put(s, other, 5, 3, 10)
			return j.ID(), j
		}},
		{"buried, middle of the FIFO", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			var js []*store.Job
			for range 3 {
				j := put(s, other, 5, 0, 10)
				hold(other, j)
				other.Bury(j.ID(), 5)
				js = append(js, j)
			}
			return js[1].ID(), js[1]
		}},
		{"in an unwatched tube", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			j := putIn(s, other, "x", 5, 0, 10)
			return j.ID(), j
		}},
		{"in a paused tube", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			j := putIn(s, other, "x", 5, 0, 10)
			s.PauseTube([]byte("x"), time.Hour)
			return j.ID(), j
		}},
		{"with a reservation inside the margin (no DEADLINE_SOON)", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			hold(c, put(s, other, 0, 0, 1))
			j := put(s, other, 5, 0, 10)
			return j.ID(), j
		}},
		{"reserved by another client", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			j := put(s, other, 5, 0, 10)
			other.ReserveJob(j.ID())
			return j.ID(), nil
		}},
		{"reserved by this client", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			j := put(s, other, 5, 0, 10)
			c.ReserveJob(j.ID())
			return j.ID(), nil
		}},
		{"deleted", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			j := put(s, other, 5, 0, 10)
			other.Delete(j.ID())
			return j.ID(), nil
		}},
		{"never existed", func(s *store.Store, c, other *store.Client) (uint64, *store.Job) {
			return 12345, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, _ := newClient(s)
				other, _ := newClient(s)
				id, want := tc.setup(s, c, other)
				var before store.JobStats
				if want != nil {
					before = jobStats(t, s, id)
				}
				before0 := globalCounts(s)
				j, ok := c.ReserveJob(id)
				if want == nil {
					if ok {
						t.Fatalf("ReserveJob(%d) succeeded", id)
					}
					if got := globalCounts(s); got != before0 {
						t.Fatalf("a failed ReserveJob changed the counts: %+v to %+v", before0, got)
					}
					return
				}
				if !ok || j != want {
					t.Fatalf("ReserveJob(%d) = %s, %v", id, jobName(j), ok)
				}
				wantState(t, s, j, store.StateReserved, c)
				st := jobStats(t, s, id)
				if st.Reserves != before.Reserves+1 || st.TimeLeft != st.TTR || st.Pri != before.Pri {
					t.Fatalf("after ReserveJob: %+v (before %+v)", st, before)
				}
				if g := s.Stats().Reserved; g != int64(len(c.ReservedIDs())) {
					t.Fatalf("global reserved %d", g)
				}
			})
		})
	}
}

// TestReserveJoinRaces reproduces two races in Reserve's joining of the
// waiting sets: the wait may end (by a hand-off from a tube already joined,
// or by the timer) while Reserve is still joining the other tubes, and the
// ending's waiter.leave must not take the unjoined tubes' slot indexes for
// real ones. It runs with real goroutines, not in a bubble.
func TestReserveJoinRaces(t *testing.T) {
	const tubes, rounds = 24, 300
	setup := func(t *testing.T) (s *store.Store, w *store.Client, r *recorder, bystanders []*store.Client) {
		s = store.New(store.Options{})
		t.Cleanup(s.Close)
		w, r = newClient(s)
		for i := range tubes {
			w.Watch(fmt.Appendf(nil, "t%02d", i))
		}
		// Bystanders block on a tube w joins last: a wrong slot index
		// there would drop one of them from the set.
		for range 3 {
			b, _ := newClient(s)
			b.Watch(fmt.Appendf(nil, "t%02d", tubes-1))
			b.Ignore([]byte("default"))
			if _, res := b.Reserve(-1); res != store.Waiting {
				t.Fatal("bystander did not block")
			}
			bystanders = append(bystanders, b)
		}
		return s, w, r, bystanders
	}
	finish := func(t *testing.T, s *store.Store, w *store.Client, bystanders []*store.Client) {
		w.Close() // first: its reservation must not run out during the check
		if n := tubeStats(t, s, fmt.Sprintf("t%02d", tubes-1)).Waiting; n != len(bystanders) {
			t.Errorf("last tube lists %d waiters, want the %d bystanders", n, len(bystanders))
		}
		if err := s.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		for _, b := range bystanders {
			b.Close()
		}
	}
	await := func(t *testing.T, r *recorder) event {
		select {
		case e := <-r.ch:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("a blocked reserve was never answered")
			return event{}
		}
	}

	t.Run("hand-off from the first tube while joining the rest", func(t *testing.T) {
		s, w, r, bystanders := setup(t)
		p, _ := newClient(s)
		for range rounds {
			start := make(chan struct{})
			done := make(chan struct{})
			go func() {
				<-start
				put(s, p, 0, 0, 10) // into default, w's first tube
				close(done)
			}()
			close(start)
			j, res := w.Reserve(-1)
			if res == store.Waiting {
				e := await(t, r)
				j = e.job
			}
			<-done
			if j == nil || !w.Delete(j.ID()) {
				t.Fatalf("round ended with %s", jobName(j))
			}
		}
		p.Close()
		finish(t, s, w, bystanders)
	})

	t.Run("DEADLINE_SOON timer fires while joining", func(t *testing.T) {
		s, w, r, bystanders := setup(t)
		p, _ := newClient(s)
		// A ready job in a paused watched tube makes the reserve wait even
		// though w's reservation is inside the margin: the timer is due
		// before the first tube is joined.
		putIn(s, p, "t00", 0, 0, 10)
		s.PauseTube([]byte("t00"), time.Hour)
		p.Use([]byte("default"))
		held := put(s, p, 0, 0, 1)
		reserveNow(t, w, held)
		for range rounds {
			// Keep the reservation inside the margin but from running out.
			if !w.Touch(held.ID()) {
				t.Fatal("the reservation ran out between rounds")
			}
			if _, res := w.Reserve(-1); res == store.Waiting {
				if e := await(t, r); e.result != store.DeadlineSoon {
					t.Fatalf("got %s", e)
				}
			} else if res != store.DeadlineSoon {
				t.Fatalf("got %s", resultName(res))
			}
		}
		p.Close()
		finish(t, s, w, bystanders)
	})
}

// TestReserveAcrossTubesRace has Reserve compare the ready jobs of two
// tubes while another client keeps changing the priority of the one in the
// tube scanned first (reserve-job, then release with a new priority).
// Reserve must not read that job's priority after letting go of its tube's
// lock; -race reports it.
func TestReserveAcrossTubesRace(t *testing.T) {
	s := store.New(store.Options{})
	defer s.Close()
	reader, _ := newClient(s)
	reader.Watch([]byte("b"))
	writer, _ := newClient(s)
	j := put(s, writer, 100, 0, 60)  // in default, scanned first
	putIn(s, writer, "b", 50, 0, 60) // compared against j's priority
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			if _, ok := writer.ReserveJob(j.ID()); ok {
				writer.Release(j.ID(), uint32(100+i%2), 0)
			}
		}
	}()
	for range 2000 {
		if got, r := reader.Reserve(0); r == store.Reserved {
			reader.Release(got.ID(), 50, 0)
		}
	}
	<-done
	reader.Close()
	writer.Close()
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// A waiter shares its client's watch list rather than copying it; once the
// wait has ended the client may change the list in place (ignore swaps the
// last tube into the gap) without disturbing waiting sets or later waits.
func TestReserveWatchListChangesBetweenWaits(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, r := newClient(s)
		other, _ := newClient(s)
		c.Watch([]byte("a"))
		c.Watch([]byte("b"))
		block(t, c, -1)
		j := putIn(s, other, "default", 0, 0, 10)
		if e := r.next(t); e.job != j {
			t.Fatalf("Notifier: %s, want job %d", e, j.ID())
		}
		checkNow(t, s)
		c.Delete(j.ID())
		if _, ok := c.Ignore([]byte("default")); !ok {
			t.Fatal("ignore default refused")
		}
		block(t, c, -1)
		checkNow(t, s)
		putIn(s, other, "default", 0, 0, 10) // no longer watched
		r.none(t)
		j = putIn(s, other, "a", 0, 0, 10)
		if e := r.next(t); e.job != j {
			t.Fatalf("Notifier: %s, want job %d from a", e, j.ID())
		}
		for _, name := range []string{"default", "a", "b"} {
			if st := tubeStats(t, s, name); st.Waiting != 0 {
				t.Errorf("tube %s still counts %d waiting", name, st.Waiting)
			}
		}
	})
}
