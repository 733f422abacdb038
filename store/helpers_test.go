package store_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sproutmq/sprout/store"
)

// Timing. Tests that involve time run in a synctest bubble: the store's
// default clock and its timer goroutine then run on the bubble's fake clock,
// time.Sleep advances it instantly, and synctest.Wait returns only once the
// timer goroutine (and every other goroutine) has finished reacting. So
// "a second later" is exact and costs nothing, and "nothing happened" can
// be asserted without sleeping. TestOptionsNowFakeClock covers a clock
// passed in Options.Now.

// event is one Notifier call.
type event struct {
	job    *store.Job // set for JobReserved
	result store.ReserveResult
}

// recorder is a Notifier that records every call on a channel.
type recorder struct {
	ch chan event
}

func newRecorder() *recorder { return &recorder{ch: make(chan event, 64)} }

func (r *recorder) JobReserved(j *store.Job) { r.send(event{job: j, result: store.Reserved}) }

func (r *recorder) WaitEnded(res store.ReserveResult) { r.send(event{result: res}) }

func (r *recorder) send(e event) {
	select {
	case r.ch <- e:
	default:
		panic("recorder: 64 notifications not consumed") // the Notifier must not block
	}
}

// next waits for everything in the bubble to settle and returns the one
// call recorded since the last look; it fails if there is none or more.
func (r *recorder) next(t *testing.T) event {
	t.Helper()
	synctest.Wait()
	select {
	case e := <-r.ch:
		r.none(t)
		return e
	default:
		t.Fatal("no Notifier call")
		return event{}
	}
}

// none fails if the Notifier has been called since the last look.
func (r *recorder) none(t *testing.T) {
	t.Helper()
	synctest.Wait()
	select {
	case e := <-r.ch:
		t.Fatalf("unexpected Notifier call: %s", e)
	default:
	}
}

func (e event) String() string {
	if e.job != nil {
		return "JobReserved(" + itoa(e.job.ID()) + ")"
	}
	return "WaitEnded(" + resultName(e.result) + ")"
}

func resultName(r store.ReserveResult) string {
	switch r {
	case store.Reserved:
		return "Reserved"
	case store.Waiting:
		return "Waiting"
	case store.TimedOut:
		return "TimedOut"
	case store.DeadlineSoon:
		return "DeadlineSoon"
	}
	return "ReserveResult(" + itoa(uint64(r)) + ")"
}

func itoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append(b, byte('0'+n%10))
	}
	slices.Reverse(b)
	return string(b)
}

// bubble runs f in a synctest bubble with a new store, then checks the
// store's invariants once everything has settled, and closes it.
func bubble(t *testing.T, f func(t *testing.T, s *store.Store)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		s := store.New(store.Options{})
		t.Cleanup(s.Close)
		f(t, s)
		synctest.Wait()
		if err := s.CheckInvariants(); err != nil {
			t.Errorf("invariants after the test:\n%v", err)
		}
	})
}

// checkNow checks the invariants mid-test (the bubble must be settled).
func checkNow(t *testing.T, s *store.Store, open ...*store.Client) {
	t.Helper()
	synctest.Wait()
	if err := s.CheckInvariants(); err != nil {
		t.Fatalf("invariants:\n%v", err)
	}
	if open != nil {
		if err := s.CheckClients(open...); err != nil {
			t.Fatalf("client counts:\n%v", err)
		}
	}
}

func newClient(s *store.Store) (*store.Client, *recorder) {
	r := newRecorder()
	return s.NewClient(r), r
}

func body(id uint64) []byte { return []byte("job " + itoa(id) + "\r\n") }

// put stores a job in c's used tube with the next id.
func put(s *store.Store, c *store.Client, pri, delay, ttr uint32) *store.Job {
	id := s.NextID()
	j, err := c.Put(id, pri, delay, ttr, body(id))
	if err != nil {
		panic(err) // only a full disk fails a put, and these stores have no log
	}
	return j
}

// putIn stores a job in the named tube, leaving c using that tube.
func putIn(s *store.Store, c *store.Client, tube string, pri, delay, ttr uint32) *store.Job {
	c.Use([]byte(tube))
	return put(s, c, pri, delay, ttr)
}

// reserveNow reserves with timeout 0 and fails unless it gets want.
func reserveNow(t *testing.T, c *store.Client, want *store.Job) {
	t.Helper()
	j, r := c.Reserve(0)
	if r != store.Reserved || j != want {
		t.Fatalf("Reserve(0) = %s, %s; want job %d", jobName(j), resultName(r), want.ID())
	}
}

func jobName(j *store.Job) string {
	if j == nil {
		return "no job"
	}
	return "job " + itoa(j.ID())
}

// block starts a reserve that must wait.
func block(t *testing.T, c *store.Client, timeout time.Duration) {
	t.Helper()
	if j, r := c.Reserve(timeout); r != store.Waiting {
		t.Fatalf("Reserve(%v) = %s, %s; want Waiting", timeout, jobName(j), resultName(r))
	}
}

func jobStats(t *testing.T, s *store.Store, id uint64) store.JobStats {
	t.Helper()
	st, ok := store.StatsOfJob(s, id)
	if !ok {
		t.Fatalf("JobStats(%d): not found", id)
	}
	return st
}

func tubeStats(t *testing.T, s *store.Store, name string) store.TubeStats {
	t.Helper()
	st, ok := s.TubeStats([]byte(name))
	if !ok {
		t.Fatalf("TubeStats(%q): not found", name)
	}
	return st
}

// wantState checks a job's state and, for reserved jobs, who holds it.
func wantState(t *testing.T, s *store.Store, j *store.Job, want store.State, owner *store.Client) {
	t.Helper()
	if st := jobStats(t, s, j.ID()); st.State != want {
		t.Fatalf("job %d is %v, want %v", j.ID(), st.State, want)
	}
	if owner != nil && !slices.Contains(owner.ReservedIDs(), j.ID()) {
		t.Fatalf("job %d is not reserved by the expected client (it holds %v)", j.ID(), owner.ReservedIDs())
	}
}

// counts is the job-count part of the global and per-tube stats.
type counts struct{ urgent, ready, reserved, delayed, buried int }

func globalCounts(s *store.Store) counts {
	st := s.Stats()
	return counts{int(st.Urgent), int(st.Ready), int(st.Reserved), int(st.Delayed), int(st.Buried)}
}

func tubeCounts(t *testing.T, s *store.Store, name string) counts {
	t.Helper()
	st := tubeStats(t, s, name)
	return counts{st.Urgent, st.Ready, st.Reserved, st.Delayed, st.Buried}
}

// hold makes c reserve j (with reserve-job) and panics if it cannot: for
// setting up state, where a *testing.T may not be at hand.
func hold(c *store.Client, j *store.Job) {
	if _, ok := c.ReserveJob(j.ID()); !ok {
		panic("hold: ReserveJob(" + itoa(j.ID()) + ") failed")
	}
}
