package store_test

import (
	"bytes"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

func TestPut(t *testing.T) {
	for _, tc := range []struct {
		name              string
		id                uint64
		pri, delay, ttr   uint32
		wantState         store.State
		wantTTR, wantLeft time.Duration
		want              counts
	}{
		{"ready urgent", 7, 5, 0, 10, store.StateReady, 10 * time.Second, 0, counts{urgent: 1, ready: 1}},
		{"ready at the urgent threshold is not urgent", 8, store.UrgentPriority, 0, 10, store.StateReady, 10 * time.Second, 0, counts{ready: 1}},
		{"ready just below the threshold", 9, store.UrgentPriority - 1, 0, 10, store.StateReady, 10 * time.Second, 0, counts{urgent: 1, ready: 1}},
		{"delayed", 10, 0, 3, 10, store.StateDelayed, 10 * time.Second, 3 * time.Second, counts{delayed: 1}},
		{"ttr 0 becomes 1s", 11, 100, 0, 0, store.StateReady, time.Second, 0, counts{urgent: 1, ready: 1}},
		{"ttr 1 stays 1s", 12, 100, 0, 1, store.StateReady, time.Second, 0, counts{urgent: 1, ready: 1}},
		{"id as given, not from NextID", 1 << 40, 4294967295, 0, 60, store.StateReady, time.Minute, 0, counts{ready: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, _ := newClient(s)
				data := []byte("hello\r\n")
				j, _ := c.Put(tc.id, tc.pri, tc.delay, tc.ttr, data)
				if j.ID() != tc.id || !bytes.Equal(j.Body(), data) {
					t.Fatalf("Put returned id %d body %q", j.ID(), j.Body())
				}
				if p, live := store.PeekByID(s, tc.id); !live || p != j {
					t.Fatalf("Peek(%d) = %v, %v", tc.id, p, live)
				}
				st := jobStats(t, s, tc.id)
				want := store.JobStats{ID: tc.id, Tube: store.DefaultTube, State: tc.wantState, Pri: tc.pri,
					Delay: time.Duration(tc.delay) * time.Second, TTR: tc.wantTTR, TimeLeft: tc.wantLeft}
				if st != want {
					t.Errorf("JobStats = %+v\nwant       %+v", st, want)
				}
				if got := globalCounts(s); got != tc.want {
					t.Errorf("global counts %+v, want %+v", got, tc.want)
				}
				if got := tubeCounts(t, s, store.DefaultTube); got != tc.want {
					t.Errorf("tube counts %+v, want %+v", got, tc.want)
				}
				if s.Stats().TotalJobs != 1 || tubeStats(t, s, store.DefaultTube).TotalJobs != 1 {
					t.Errorf("total jobs: global %d, tube %d; want 1", s.Stats().TotalJobs, tubeStats(t, s, store.DefaultTube).TotalJobs)
				}
			})
		})
	}
}

func TestPutGoesToUsedTube(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		j := putIn(s, c, "emails", 1, 0, 1)
		if st := jobStats(t, s, j.ID()); st.Tube != "emails" {
			t.Fatalf("job went to %q", st.Tube)
		}
		if got := tubeCounts(t, s, store.DefaultTube); got != (counts{}) {
			t.Fatalf("default has %+v", got)
		}
		if ts := tubeStats(t, s, "emails"); ts.Ready != 1 || ts.TotalJobs != 1 {
			t.Fatalf("emails: %+v", ts)
		}
	})
}

func TestNextID(t *testing.T) {
	s := store.New(store.Options{})
	defer s.Close()
	for want := uint64(1); want <= 3; want++ {
		if got := s.NextID(); got != want {
			t.Fatalf("NextID = %d, want %d", got, want)
		}
	}
}

func TestPeek(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		a, _ := newClient(s)
		b, _ := newClient(s)
		ready := put(s, a, 1, 0, 10)
		delayed := put(s, a, 1, 5, 10)
		reserved := put(s, a, 0, 0, 10)
		reserveNow(t, a, reserved)
		buried := put(s, a, 0, 0, 10)
		reserveNow(t, a, buried)
		a.Bury(buried.ID(), 1)
		gone := put(s, a, 1, 0, 10)
		b.Delete(gone.ID())

		for _, j := range []*store.Job{ready, delayed, reserved, buried} {
			// b peeks too: reserved by someone else is still found.
			if p, live := store.PeekByID(s, j.ID()); !live || p != j {
				t.Errorf("Peek(%d) = %v, %v", j.ID(), p, live)
			}
		}
		for _, id := range []uint64{0, gone.ID(), 999} {
			if _, live := store.PeekByID(s, id); live {
				t.Errorf("Peek(%d) found a job", id)
			}
		}
	})
}

func TestUse(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		a, _ := newClient(s)
		b, _ := newClient(s)
		if a.UsedTube() != store.DefaultTube {
			t.Fatalf("new client uses %q", a.UsedTube())
		}
		a.Use([]byte("x"))
		a.Use([]byte("x")) // again: no change
		b.Use([]byte("x"))
		if a.UsedTube() != "x" || tubeStats(t, s, "x").Using != 2 || tubeStats(t, s, store.DefaultTube).Using != 0 {
			t.Fatalf("after use: a uses %q, x using %d, default using %d",
				a.UsedTube(), tubeStats(t, s, "x").Using, tubeStats(t, s, store.DefaultTube).Using)
		}
		checkNow(t, s, a, b)
	})
}

func TestWatchIgnore(t *testing.T) {
	type step struct {
		op        string // "watch" or "ignore"
		tube      string
		wantCount int
		wantOK    bool // ignore only
	}
	for _, tc := range []struct {
		name        string
		steps       []step
		wantWatched []string
	}{
		{"new client watches default", nil, []string{"default"}},
		{"watch appends", []step{{"watch", "a", 2, true}, {"watch", "b", 3, true}}, []string{"default", "a", "b"}},
		{"watch of a watched tube leaves the count", []step{{"watch", "a", 2, true}, {"watch", "a", 2, true}, {"watch", "default", 2, true}}, []string{"default", "a"}},
		{"ignore of an unwatched tube succeeds", []step{{"ignore", "nosuch", 1, true}}, []string{"default"}},
		{"ignore of an unwatched existing tube succeeds", []step{{"watch", "a", 2, true}, {"ignore", "a", 1, true}, {"ignore", "a", 1, true}}, []string{"default"}},
		{"ignore of the last tube: NOT_IGNORED", []step{{"ignore", "default", 1, false}}, []string{"default"}},
		{"ignore of the last tube after a switch", []step{{"watch", "a", 2, true}, {"ignore", "default", 1, true}, {"ignore", "a", 1, false}}, []string{"a"}},
		// beanstalkd's ms_delete: the last entry takes the freed slot.
		{"ignore swap-removes", []step{{"watch", "a1", 2, true}, {"watch", "a2", 3, true}, {"watch", "a3", 4, true}, {"ignore", "default", 3, true}}, []string{"a3", "a1", "a2"}},
		{"ignore of the last entry", []step{{"watch", "a1", 2, true}, {"watch", "a2", 3, true}, {"ignore", "a2", 2, true}, {"watch", "a3", 3, true}}, []string{"default", "a1", "a3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				c, _ := newClient(s)
				for _, st := range tc.steps {
					switch st.op {
					case "watch":
						if n := c.Watch([]byte(st.tube)); n != st.wantCount {
							t.Fatalf("Watch(%s) = %d, want %d", st.tube, n, st.wantCount)
						}
					case "ignore":
						if n, ok := c.Ignore([]byte(st.tube)); n != st.wantCount || ok != st.wantOK {
							t.Fatalf("Ignore(%s) = %d, %v; want %d, %v", st.tube, n, ok, st.wantCount, st.wantOK)
						}
					}
				}
				if got := c.Watched(); !slices.Equal(got, tc.wantWatched) {
					t.Fatalf("Watched = %v, want %v", got, tc.wantWatched)
				}
				for _, name := range tc.wantWatched {
					if w := tubeStats(t, s, name).Watching; w != 1 {
						t.Errorf("%s: watching %d, want 1", name, w)
					}
				}
				checkNow(t, s, c)
			})
		})
	}
}

func TestTubeLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *store.Store)
		want []string // TubeNames at the end
	}{
		{"only default at first", func(t *testing.T, s *store.Store) {}, []string{"default"}},
		{"use creates, switching away frees", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			c.Use([]byte("a"))
			if !slices.Equal(s.TubeNames(), []string{"default", "a"}) {
				t.Fatalf("after use a: %v", s.TubeNames())
			}
			c.Use([]byte("b"))
		}, []string{"default", "b"}},
		{"watch creates, ignore frees", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			c.Watch([]byte("a"))
			c.Watch([]byte("b"))
			c.Ignore([]byte("a"))
		}, []string{"default", "b"}},
		{"a tube used and watched needs both dropped", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			c.Use([]byte("a"))
			c.Watch([]byte("a"))
			c.Use([]byte("default"))
			if !slices.Contains(s.TubeNames(), "a") {
				t.Fatal("a freed while watched")
			}
			c.Ignore([]byte("a"))
		}, []string{"default"}},
		{"jobs keep a tube alive until deleted", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			ready := putIn(s, c, "a", 1, 0, 1)
			delayed := put(s, c, 1, 5, 1)
			c.Use([]byte("default"))
			if !slices.Contains(s.TubeNames(), "a") {
				t.Fatal("a freed with jobs in it")
			}
			c.Delete(ready.ID())
			if !slices.Contains(s.TubeNames(), "a") {
				t.Fatal("a freed with a delayed job in it")
			}
			c.Delete(delayed.ID())
		}, []string{"default"}},
		{"a reserved or buried job keeps its tube", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			c.Watch([]byte("a"))
			j := putIn(s, c, "a", 1, 0, 10)
			c.Use([]byte("default"))
			reserveNow(t, c, j)
			c.Ignore([]byte("a"))
			if !slices.Contains(s.TubeNames(), "a") {
				t.Fatal("a freed with a reserved job")
			}
			c.Bury(j.ID(), 1)
			if !slices.Contains(s.TubeNames(), "a") {
				t.Fatal("a freed with a buried job")
			}
		}, []string{"default", "a"}},
		{"close frees", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			c.Use([]byte("a"))
			c.Watch([]byte("b"))
			c.Close()
		}, []string{"default"}},
		{"default is never freed", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			c.Use([]byte("a"))
			c.Watch([]byte("a"))
			c.Ignore([]byte("default"))
			j := putIn(s, c, "default", 1, 0, 1)
			c.Delete(j.ID())
			c.Use([]byte("a"))
			if tubeStats(t, s, "default").Using+tubeStats(t, s, "default").Watching != 0 {
				t.Fatal("default still referenced by the client")
			}
			if refs := s.TubeRefs("default"); refs != 1 {
				t.Fatalf("default has %d refs, want the store's own 1", refs)
			}
			c.Close()
		}, []string{"default"}},
		// beanstalkd's tubes set is an Ms: freeing a moves the last tube, c,
		// into its slot; a new tube is appended.
		{"freeing swap-removes from the tube list", func(t *testing.T, s *store.Store) {
			a, _ := newClient(s)
			b, _ := newClient(s)
			c, _ := newClient(s)
			a.Use([]byte("a"))
			b.Use([]byte("b"))
			c.Use([]byte("c"))
			if got := s.TubeNames(); !slices.Equal(got, []string{"default", "a", "b", "c"}) {
				t.Fatalf("created a, b, c: %v", got)
			}
			a.Close()
			if got := s.TubeNames(); !slices.Equal(got, []string{"default", "c", "b"}) {
				t.Fatalf("freed a: %v", got)
			}
			a, _ = newClient(s)
			a.Use([]byte("d"))
			if got := s.TubeNames(); !slices.Equal(got, []string{"default", "c", "b", "d"}) {
				t.Fatalf("created d: %v", got)
			}
			c.Close() // c is in slot 1: d moves there
		}, []string{"default", "d", "b"}},
		{"freeing the last tube moves nothing", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			c.Watch([]byte("a"))
			c.Watch([]byte("b"))
			c.Ignore([]byte("b"))
		}, []string{"default", "a"}},
		{"a freed tube forgets its pause", func(t *testing.T, s *store.Store) {
			c, _ := newClient(s)
			c.Use([]byte("a"))
			if !s.PauseTube([]byte("a"), time.Hour) {
				t.Fatal("PauseTube(a) failed")
			}
			c.Use([]byte("default"))
			c.Use([]byte("a")) // a new tube a
			if ts := tubeStats(t, s, "a"); ts.Pause != 0 || ts.PauseTimeLeft != 0 || ts.CmdPause != 0 {
				t.Fatalf("recreated a kept its pause: %+v", ts)
			}
		}, []string{"default", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				tc.run(t, s)
				synctest.Wait()
				if got := s.TubeNames(); !slices.Equal(got, tc.want) {
					t.Fatalf("TubeNames = %v, want %v", got, tc.want)
				}
				if got := s.Stats().Tubes; got != len(tc.want) {
					t.Fatalf("Stats().Tubes = %d, want %d", got, len(tc.want))
				}
				for _, name := range tc.want {
					if _, ok := s.TubeStats([]byte(name)); !ok {
						t.Errorf("TubeStats(%s) not found", name)
					}
				}
			})
		})
	}
}

func TestTubeStatsMissing(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		if _, ok := s.TubeStats([]byte("nosuch")); ok {
			t.Fatal("TubeStats of a missing tube succeeded")
		}
		if s.PauseTube([]byte("nosuch"), time.Second) {
			t.Fatal("PauseTube of a missing tube succeeded")
		}
		if slices.Contains(s.TubeNames(), "nosuch") {
			t.Fatal("a lookup created the tube")
		}
	})
}

func TestPauseTube(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, r := newClient(s)
		j := put(s, c, 1, 0, 10)
		if !s.PauseTube([]byte("default"), 10*time.Second) {
			t.Fatal("PauseTube failed")
		}
		ts := tubeStats(t, s, "default")
		if ts.Pause != 10*time.Second || ts.PauseTimeLeft != 10*time.Second || ts.CmdPause != 1 {
			t.Fatalf("paused: %+v", ts)
		}
		// A paused tube still accepts put and peek, and kick and delete;
		// reserve skips it (TestReserve and TestReserveWakes cover that).
		if c.PeekReady() != j {
			t.Fatal("peek-ready ignores pause in beanstalkd")
		}
		if j2, res := c.Reserve(0); res != store.TimedOut {
			t.Fatalf("reserve from a paused tube: %s, %s", jobName(j2), resultName(res))
		}
		time.Sleep(4 * time.Second)
		if ts := tubeStats(t, s, "default"); ts.PauseTimeLeft != 6*time.Second {
			t.Fatalf("after 4s: pause-time-left %v", ts.PauseTimeLeft)
		}
		// Pausing again restarts the pause.
		s.PauseTube([]byte("default"), 2*time.Second)
		time.Sleep(2*time.Second - 1)
		synctest.Wait()
		if ts := tubeStats(t, s, "default"); ts.Pause != 2*time.Second || ts.PauseTimeLeft != 1 || ts.CmdPause != 2 {
			t.Fatalf("re-paused, 1ns before the end: %+v", ts)
		}
		time.Sleep(1)
		synctest.Wait()
		if ts := tubeStats(t, s, "default"); ts.Pause != 0 || ts.PauseTimeLeft != 0 || ts.CmdPause != 2 {
			t.Fatalf("after the pause: %+v", ts)
		}
		reserveNow(t, c, j)
		c.Release(j.ID(), 1, 0)

		// pause-tube 0 ends a pause at once: beanstalkd's 1 ns pause
		// ends at the prottick before its next command.
		s.PauseTube([]byte("default"), time.Hour)
		s.PauseTube([]byte("default"), 0)
		if ts := tubeStats(t, s, "default"); ts.Pause != 0 || ts.PauseTimeLeft != 0 || ts.CmdPause != 4 {
			t.Fatalf("pause 0: %+v", ts)
		}
		reserveNow(t, c, j)
		r.none(t)
	})
}

// TestPauseRunOutBeforeItsTimer: a pause that has run out is over
// before its timer ends it, as beanstalkd's prottick ends it before any
// command: stats-tube shows none, and a new pause-tube serves the
// tube's waiters first rather than keep them waiting through it. The
// clock moves by hand and the timer goroutine is never poked, so it
// still sleeps through the first pause.
func TestPauseRunOutBeforeItsTimer(t *testing.T) {
	var clock atomic.Int64
	s := store.New(store.Options{Now: clock.Load})
	defer s.Close()
	producer, _ := newClient(s)
	worker, r := newClient(s)
	j := put(s, producer, 1, 0, 10)
	s.PauseTube([]byte("default"), time.Hour)
	block(t, worker, -1)
	clock.Add(int64(time.Hour))
	if ts := tubeStats(t, s, "default"); ts.Pause != 0 || ts.PauseTimeLeft != 0 || ts.Waiting != 1 {
		t.Fatalf("a pause run out: %+v", ts)
	}
	s.PauseTube([]byte("default"), time.Hour)
	select {
	case e := <-r.ch:
		if e.job != j {
			t.Fatalf("got %s, want job %d", e, j.ID())
		}
	default:
		t.Fatal("the waiter still waits: the new pause kept it waiting")
	}
	if ts := tubeStats(t, s, "default"); ts.Pause != time.Hour || ts.Waiting != 0 || ts.CmdPause != 2 {
		t.Fatalf("paused again: %+v", ts)
	}
	producer.Close()
	worker.Close()
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestStatsAfterMoves follows one job through every kind of move and checks
// the global and per-tube counts and the job's counters after each.
func TestStatsAfterMoves(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		a, _ := newClient(s)
		b, _ := newClient(s)
		a.Use([]byte("t"))
		a.Watch([]byte("t"))
		b.Watch([]byte("t"))
		var j *store.Job
		type jc struct{ reserves, timeouts, releases, buries, kicks uint32 }
		for _, step := range []struct {
			name  string
			do    func()
			want  counts
			state store.State
			jobC  jc
		}{
			{"put urgent", func() { j = put(s, a, 10, 0, 5) }, counts{urgent: 1, ready: 1}, store.StateReady, jc{}},
			{"reserve", func() { reserveNow(t, a, j) }, counts{reserved: 1}, store.StateReserved, jc{reserves: 1}},
			{"release not urgent, delayed", func() { a.Release(j.ID(), 2000, 4) }, counts{delayed: 1}, store.StateDelayed, jc{reserves: 1, releases: 1}},
			{"delay expiry", func() { time.Sleep(4 * time.Second) }, counts{ready: 1}, store.StateReady, jc{reserves: 1, releases: 1}},
			{"reserve-job", func() { b.ReserveJob(j.ID()) }, counts{reserved: 1}, store.StateReserved, jc{reserves: 2, releases: 1}},
			{"release urgent", func() { b.Release(j.ID(), 3, 0) }, counts{urgent: 1, ready: 1}, store.StateReady, jc{reserves: 2, releases: 2}},
			{"reserve again", func() { reserveNow(t, b, j) }, counts{reserved: 1}, store.StateReserved, jc{reserves: 3, releases: 2}},
			{"touch", func() { b.Touch(j.ID()) }, counts{reserved: 1}, store.StateReserved, jc{reserves: 3, releases: 2}},
			{"bury", func() { b.Bury(j.ID(), 1) }, counts{buried: 1}, store.StateBuried, jc{reserves: 3, releases: 2, buries: 1}},
			{"kick", func() { a.Kick(1) }, counts{urgent: 1, ready: 1}, store.StateReady, jc{reserves: 3, releases: 2, buries: 1, kicks: 1}},
			{"reserve, TTR runs out", func() { reserveNow(t, a, j); time.Sleep(5 * time.Second) }, counts{urgent: 1, ready: 1}, store.StateReady, jc{reserves: 4, releases: 2, buries: 1, kicks: 1, timeouts: 1}},
			{"reserve-job of a buried job", func() {
				reserveNow(t, a, j)
				a.Bury(j.ID(), 1)
				a.ReserveJob(j.ID())
			}, counts{reserved: 1}, store.StateReserved, jc{reserves: 6, releases: 2, buries: 2, kicks: 1, timeouts: 1}},
			{"close requeues without counting", func() { a.Close() }, counts{urgent: 1, ready: 1}, store.StateReady, jc{reserves: 6, releases: 2, buries: 2, kicks: 1, timeouts: 1}},
			{"release with delay, then kick-job", func() {
				reserveNow(t, b, j)
				b.Release(j.ID(), 3, 100)
				b.KickJob(j.ID())
			}, counts{urgent: 1, ready: 1}, store.StateReady, jc{reserves: 7, releases: 3, buries: 2, kicks: 2, timeouts: 1}},
		} {
			step.do()
			synctest.Wait()
			if got := globalCounts(s); got != step.want {
				t.Fatalf("%s: global counts %+v, want %+v", step.name, got, step.want)
			}
			if got := tubeCounts(t, s, "t"); got != step.want {
				t.Fatalf("%s: tube counts %+v, want %+v", step.name, got, step.want)
			}
			st := jobStats(t, s, j.ID())
			if got := (jc{st.Reserves, st.Timeouts, st.Releases, st.Buries, st.Kicks}); st.State != step.state || got != step.jobC {
				t.Fatalf("%s: job %v %+v, want %v %+v", step.name, st.State, got, step.state, step.jobC)
			}
			if got := s.Stats().JobTimeouts; got != int64(step.jobC.timeouts) {
				t.Fatalf("%s: job-timeouts %d", step.name, got)
			}
			checkNow(t, s)
		}
		b.Delete(j.ID())
		if got := globalCounts(s); got != (counts{}) {
			t.Fatalf("after delete: %+v", got)
		}
		ts := tubeStats(t, s, "t")
		if ts.CmdDelete != 1 || ts.TotalJobs != 1 || s.Stats().TotalJobs != 1 {
			t.Fatalf("after delete: %+v, global total %d", ts, s.Stats().TotalJobs)
		}
		if _, ok := store.StatsOfJob(s, j.ID()); ok {
			t.Fatal("JobStats of a deleted job")
		}
	})
}

func TestTubeStatsCounts(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		a, _ := newClient(s)
		b, _ := newClient(s)
		w, _ := newClient(s)
		a.Use([]byte("t"))
		b.Watch([]byte("t"))
		w.Watch([]byte("t"))
		w.Ignore([]byte("default"))
		block(t, w, -1)
		ts := tubeStats(t, s, "t")
		want := store.TubeStats{Name: "t", Using: 1, Watching: 2, Waiting: 1}
		if ts != want {
			t.Fatalf("TubeStats = %+v\nwant         %+v", ts, want)
		}
		if d := tubeStats(t, s, "default"); d.Using != 2 || d.Watching != 2 || d.Waiting != 0 {
			t.Fatalf("default: %+v", d)
		}
		if g := s.Stats(); g.Waiting != 1 || g.Tubes != 2 {
			t.Fatalf("global: %+v", g)
		}
		checkNow(t, s, a, b, w)
		w.Close()
		if ts := tubeStats(t, s, "t"); ts.Waiting != 0 || ts.Watching != 1 || s.Stats().Waiting != 0 {
			t.Fatalf("after the waiter closed: %+v, global waiting %d", ts, s.Stats().Waiting)
		}
		checkNow(t, s, a, b)
	})
}

func TestJobStatsTimes(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		j := put(s, c, 1, 5, 10)
		check := func(when string, state store.State, age, left, delay time.Duration) {
			t.Helper()
			st := jobStats(t, s, j.ID())
			if st.State != state || st.Age != age || st.TimeLeft != left || st.Delay != delay || st.TTR != 10*time.Second {
				t.Fatalf("%s: %v age %v time-left %v delay %v ttr %v; want %v %v %v %v",
					when, st.State, st.Age, st.TimeLeft, st.Delay, st.TTR, state, age, left, delay)
			}
		}
		check("put delay 5", store.StateDelayed, 0, 5*time.Second, 5*time.Second)
		time.Sleep(2 * time.Second)
		check("2s later", store.StateDelayed, 2*time.Second, 3*time.Second, 5*time.Second)
		c.Kick(1)
		check("kicked: delay kept", store.StateReady, 2*time.Second, 0, 5*time.Second)
		reserveNow(t, c, j)
		time.Sleep(3 * time.Second)
		check("reserved 3s", store.StateReserved, 5*time.Second, 7*time.Second, 5*time.Second)
		c.Touch(j.ID())
		check("touched", store.StateReserved, 5*time.Second, 10*time.Second, 5*time.Second)
		c.Release(j.ID(), 1, 1)
		check("released delay 1", store.StateDelayed, 5*time.Second, time.Second, time.Second)
		time.Sleep(time.Second)
		synctest.Wait()
		check("delay over", store.StateReady, 6*time.Second, 0, time.Second)
		reserveNow(t, c, j)
		c.Bury(j.ID(), 1)
		time.Sleep(time.Second)
		check("buried", store.StateBuried, 7*time.Second, 0, time.Second)
	})
}

// TestPutAtAge: a job put with the time of its put's command line (PutAt,
// PutKeyedAged) is as old as that, as beanstalkd makes the job when the
// line arrives; its delay still begins at the put. A time after the put
// counts as the put's.
func TestPutAtAge(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		c, _ := newClient(s)
		id, header := s.NextID(), s.Now()
		time.Sleep(3 * time.Second) // the body comes slowly
		j, err := c.PutAt(id, header, 1, 5, 10, body(id))
		if err != nil {
			t.Fatal(err)
		}
		if st := jobStats(t, s, j.ID()); st.Age != 3*time.Second || st.TimeLeft != 5*time.Second {
			t.Fatalf("put 3 s after its header: %+v", st)
		}
		id = s.NextID()
		if j, _ = c.PutAt(id, s.Now()+int64(time.Hour), 1, 0, 10, body(id)); jobStats(t, s, j.ID()).Age != 0 {
			t.Fatalf("made after its put: %+v", jobStats(t, s, j.ID()))
		}
		id, _, err = c.PutKeyedAged(wal.Req{}, 2*time.Second, 1, 0, 10, body(0))
		if st := jobStats(t, s, id); err != nil || st.Age != 2*time.Second {
			t.Fatalf("keyed, 2 s after its header: %+v, %v", st, err)
		}
	})
}

// TestOptionsNowFakeClock runs outside a bubble with a clock the test
// moves by hand. The timer goroutine sleeps on a real timer computed from
// that clock, so the test pokes it after each move (PokeTimers).
func TestOptionsNowFakeClock(t *testing.T) {
	var clock atomic.Int64
	clock.Store(1000)
	s := store.New(store.Options{Now: clock.Load})
	defer s.Close()
	if s.Now() != 1000 {
		t.Fatalf("Now = %d", s.Now())
	}
	producer, _ := newClient(s)
	worker, r := newClient(s)
	j := put(s, producer, 1, 1, 1)
	if st := jobStats(t, s, j.ID()); st.TimeLeft != time.Second || st.Age != 0 {
		t.Fatalf("put: %+v", st)
	}
	if j2, res := worker.Reserve(-1); res != store.Waiting {
		t.Fatalf("Reserve = %s, %s", jobName(j2), resultName(res))
	}

	clock.Add(int64(time.Second) - 1)
	s.PokeTimers()
	select {
	case e := <-r.ch:
		t.Fatalf("1ns early: %s", e)
	case <-time.After(20 * time.Millisecond):
	}
	clock.Add(1)
	s.PokeTimers()
	select {
	case e := <-r.ch:
		if e.job != j {
			t.Fatalf("got %s, want job %d", e, j.ID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the delay did not end after the clock moved")
	}
	if st := jobStats(t, s, j.ID()); st.State != store.StateReserved || st.Age != time.Second || st.TimeLeft != time.Second {
		t.Fatalf("reserved: %+v", st)
	}
	clock.Add(int64(time.Second))
	s.PokeTimers()
	deadline := time.Now().Add(10 * time.Second)
	for jobStats(t, s, j.ID()).State != store.StateReady {
		if time.Now().After(deadline) {
			t.Fatal("the TTR did not run out after the clock moved")
		}
		time.Sleep(time.Millisecond)
	}
	producer.Close()
	worker.Close()
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
