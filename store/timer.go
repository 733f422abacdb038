package store

import (
	"sync"
	"time"
)

// timerTarget is what a timer calls when it fires. The call happens on the
// timer goroutine with no store lock held, and may be stale: the target
// re-checks its own state under its own lock.
type timerTarget interface {
	// onTimer is called once the timer's deadline has come, at now; next
	// is the deadline of the timer due next, if it is due by now, else
	// now. A target with deadlines of its own to handle in deadline order
	// with the other targets' (a tube's delayed jobs) handles those up to
	// next, and if it has another due by now, leaves its timer unarmed
	// and returns it (again, ok): the goroutine calls it again in its
	// turn. Otherwise it re-arms its timer itself, as it needs.
	onTimer(now, next int64) (again int64, ok bool)
}

// timer is an entry in the store's timer heap. Embedded in clients (TTR),
// tubes (delay, pause) and waiters (reserve timeout).
type timer struct {
	when   int64 // guarded by timers.mu
	index  int   // guarded by timers.mu; -1 when not scheduled
	target timerTarget
}

func newTimer(target timerTarget) timer {
	return timer{index: -1, target: target}
}

// timers is one heap of deadlines served by one goroutine. Sleeping on a
// Go timer until the earliest deadline keeps delays, TTRs, reserve timeouts
// and pauses within about a millisecond of when they are due, with no tick.
type timers struct {
	now  func() int64
	mu   sync.Mutex
	heap []*timer      // guarded by mu
	wake chan struct{} // poked when the earliest deadline moves earlier
	// sleepUntil is when the goroutine will wake by itself (guarded by
	// mu); schedule pokes it only for a deadline before that. Without it
	// every reserve that re-armed the earliest TTR woke the goroutine,
	// a thread switch per command on a machine whose cores the event
	// loops need.
	sleepUntil int64
}

func newTimers(now func() int64) *timers {
	return &timers{now: now, wake: make(chan struct{}, 1)}
}

// schedule arms t for when, moving it if already armed.
// Lock order: may be called with tube.mu and client.mu held.
func (ts *timers) schedule(t *timer, when int64) {
	ts.mu.Lock()
	t.when = when
	if t.index < 0 {
		t.index = len(ts.heap)
		ts.heap = append(ts.heap, t)
		ts.up(t.index)
	} else if !ts.down(t.index) {
		ts.up(t.index)
	}
	poke := t.index == 0 && when < ts.sleepUntil
	if poke {
		ts.sleepUntil = when // one poke is enough until it sleeps again
	}
	ts.mu.Unlock()
	if poke {
		select {
		case ts.wake <- struct{}{}:
		default:
		}
	}
}

// cancel disarms t; a no-op if it is not armed.
func (ts *timers) cancel(t *timer) {
	ts.mu.Lock()
	if t.index >= 0 {
		i := t.index
		last := len(ts.heap) - 1
		if i != last {
			ts.swap(i, last)
		}
		ts.heap[last] = nil
		ts.heap = ts.heap[:last]
		if i != last && !ts.down(i) {
			ts.up(i)
		}
		t.index = -1
	}
	ts.mu.Unlock()
}

// run fires due timers until stop is closed. It takes every timer due
// from the heap at once, then fires them earliest first from a heap of
// its own (dueTimers), a target called again by the deadline it returns
// (a tube with more delayed jobs due) taking its place among the others:
// beanstalkd's prottick makes the soonest delayed job of all tubes ready
// first, and which waiting reserve gets which job follows from it. Kept
// apart from the store's heap, that order costs no lock per turn.
func (ts *timers) run(stop <-chan struct{}) {
	sleep := time.NewTimer(time.Hour)
	defer sleep.Stop()
	var due dueTimers
	for {
		ts.mu.Lock()
		now := ts.now()
		for len(ts.heap) > 0 && ts.heap[0].when <= now {
			t := ts.heap[0]
			ts.popLocked()
			due = append(due, dueTimer{when: t.when, t: t}) // in order: a heap already
		}
		wait := time.Duration(1<<62 - 1)
		if len(ts.heap) > 0 {
			wait = time.Duration(ts.heap[0].when - now)
		}
		ts.sleepUntil = now + int64(wait)
		if len(due) > 0 {
			ts.sleepUntil = now // it does not sleep: come straight back
		}
		ts.mu.Unlock()

		if len(due) > 0 {
			for len(due) > 0 {
				d := due.pop()
				next := now
				if len(due) > 0 {
					next = min(next, due[0].when)
				}
				if again, ok := d.t.target.onTimer(now, next); ok {
					due.push(dueTimer{when: again, t: d.t})
				}
			}
			continue
		}
		sleep.Reset(wait)
		select {
		case <-sleep.C:
		case <-ts.wake:
			if !sleep.Stop() {
				select {
				case <-sleep.C:
				default:
				}
			}
		case <-stop:
			return
		}
	}
}

// dueTimer is a timer run is firing, with the deadline it is due at.
type dueTimer struct {
	when int64
	t    *timer
}

// dueTimers is a min-heap of the timers run is firing, by deadline.
type dueTimers []dueTimer

func (h *dueTimers) push(d dueTimer) {
	*h = append(*h, d)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[i].when >= s[p].when {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *dueTimers) pop() dueTimer {
	s := *h
	d := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = dueTimer{}
	s = s[:last]
	for i := 0; ; {
		m := 2*i + 1
		if m >= len(s) {
			break
		}
		if r := m + 1; r < len(s) && s[r].when < s[m].when {
			m = r
		}
		if s[m].when >= s[i].when {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return d
}

func (ts *timers) popLocked() {
	last := len(ts.heap) - 1
	t := ts.heap[0]
	if last > 0 {
		ts.swap(0, last)
	}
	ts.heap[last] = nil
	ts.heap = ts.heap[:last]
	if last > 0 {
		ts.down(0)
	}
	t.index = -1
}

func (ts *timers) swap(i, k int) {
	ts.heap[i], ts.heap[k] = ts.heap[k], ts.heap[i]
	ts.heap[i].index = i
	ts.heap[k].index = k
}

func (ts *timers) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if ts.heap[i].when >= ts.heap[p].when {
			return
		}
		ts.swap(i, p)
		i = p
	}
}

func (ts *timers) down(i int) bool {
	start, n := i, len(ts.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && ts.heap[r].when < ts.heap[l].when {
			m = r
		}
		if ts.heap[m].when >= ts.heap[i].when {
			break
		}
		ts.swap(i, m)
		i = m
	}
	return i > start
}
