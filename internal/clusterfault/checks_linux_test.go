//go:build linux

package clusterfault

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The checks computed from the clients' logs (doc.go, "What is checked"):
// no double holding, order within a group, and the clients' largest gap.

// watchEvery is how often the leader watch asks each member for the
// groups' leaders.
const watchEvery = 100 * time.Millisecond

// changeSlack widens a change of leader, as the watch saw it, on both
// sides when an overlap of holdings is matched against it: a member's
// view trails the change by up to a heartbeat, and the watch's polls by
// up to watchEvery and the request's own time.
const changeSlack = 500 * time.Millisecond

// window is a span of time.
type window struct{ from, to time.Time }

func (w window) meets(o window) bool { return !w.from.After(o.to) && !o.from.After(w.to) }

// leaderWatch follows every group's leader as each member sees it, for
// the whole run, and keeps when it was seen to change: the failovers (and
// the handovers that balance leaders) that may excuse a double holding.
// One goroutine per member polls its GET /cluster; a member that does
// not answer (stopped, killed, frozen) is forgotten until it answers
// again, so that its restart is not taken for a change.
type leaderWatch struct {
	c    *cluster
	stop chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// changes are, by group, the windows in which some member's view of
	// the group's leader went from one member to another. guarded by mu
	changes map[int][]window
}

func watchLeaders(c *cluster) *leaderWatch {
	w := &leaderWatch{c: c, stop: make(chan struct{}), changes: map[int][]window{}}
	for _, m := range c.members {
		w.wg.Add(1)
		go w.follow(m)
	}
	return w
}

func (w *leaderWatch) halt() {
	close(w.stop)
	w.wg.Wait()
}

// follow polls m. Only m's address is touched: the test goroutine owns
// m's process.
func (w *leaderWatch) follow(m *member) {
	defer w.wg.Done()
	type seen struct {
		leader string
		term   uint64
		at     time.Time // when the last poll that named it was sent
	}
	last := map[int]seen{}
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		sent := time.Now()
		st, err := m.status(false)
		if err != nil {
			clear(last)
			continue
		}
		got := time.Now()
		for _, g := range st.Groups {
			if g.Leader == "" {
				// No leader known: the change, if any, shows when one is.
				continue
			}
			// A leader elected again (a later term) changed too: its
			// store was rebuilt, its reservations gone.
			if prev, ok := last[g.ID]; ok && (prev.leader != g.Leader || prev.term != g.Term) {
				w.mu.Lock()
				w.changes[g.ID] = append(w.changes[g.ID], window{prev.at, got})
				w.mu.Unlock()
			}
			last[g.ID] = seen{g.Leader, g.Term, sent}
		}
	}
}

// changed reports whether group g's leader was seen to change within
// span, widened by changeSlack.
func (w *leaderWatch) changed(g int, span window) bool {
	span = window{span.from.Add(-changeSlack), span.to.Add(changeSlack)}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes[g] {
		if c.meets(span) {
			return true
		}
	}
	return false
}

// forget drops the changes that ended before t.
func (w *leaderWatch) forget(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for g, cs := range w.changes {
		w.changes[g] = slices.DeleteFunc(cs, func(c window) bool { return c.to.Before(t) })
	}
}

// holding is one reservation as its consumer saw it: from the RESERVED
// received to the delete, release or bury about to be sent (a consumer
// sends one at once), or the job's TTR, whichever came first; or to the
// kill of the member its connection went through, which ended its
// session (client.brokenAt).
type holding struct {
	id      uint64
	group   int
	session uint64    // the consumer's connection, unique over the run
	sent    time.Time // the reserve sent: the job was handed out after it
	start   time.Time // RESERVED received: the job was handed out before it
	end     time.Time
}

// overlaps are the round's pairs of holdings of one job, by different
// sessions, that overlap: excused when the job's group changed leader
// between the two hand-outs (a reservation lives on its group's leader
// only, so a failover or a handover hands the job out again while its
// holder, its connection open on another member, still works on it);
// the others are returned, described, and fail the round.
func overlaps(hs []holding, watch *leaderWatch) (excused int, bad []string) {
	byJob := map[uint64][]holding{}
	for _, h := range hs {
		byJob[h.id] = append(byJob[h.id], h)
	}
	for _, jhs := range byJob {
		slices.SortFunc(jhs, func(a, b holding) int { return a.start.Compare(b.start) })
		for i, a := range jhs {
			for _, b := range jhs[i+1:] {
				if !b.start.Before(a.end) {
					break // the later ones start later still
				}
				if a.session == b.session {
					continue // one session holds a job once: cannot happen
				}
				// Both hand-outs fall within [the earlier reserve sent,
				// the later RESERVED received]: a change of leader
				// between them must meet that span.
				span := window{a.sent, b.start}
				if b.sent.Before(a.sent) {
					span.from = b.sent
				}
				if watch.changed(a.group, span) {
					excused++
					continue
				}
				bad = append(bad, fmt.Sprintf("job %d (group %d): session %d held it %v to %v, session %d from %v (reserve sent %v), no change of the group's leader seen",
					a.id, a.group, a.session, a.start.Format(stamp), a.end.Format(stamp), b.session, b.start.Format(stamp), b.sent.Format(stamp)))
			}
		}
	}
	return excused, bad
}

// stamp formats times in a report.
const stamp = "15:04:05.000000"

// jobKey is the order a group hands its ready jobs out in: priority,
// then id.
type jobKey struct {
	pri uint32
	id  uint64
}

func (k jobKey) compare(o jobKey) int {
	return cmp.Or(cmp.Compare(k.pri, o.pri), cmp.Compare(k.id, o.id))
}

func (k jobKey) String() string { return fmt.Sprintf("(%d, %d)", k.pri, k.id) }

// handout is a quiet job's first holding, with its key.
type handout struct {
	holding
	key jobKey
}

// orderFigures are what the order check found in a quiet phase.
type orderFigures struct {
	checked    int      // hand-outs checked
	violations []string // within a group: must be none
	// crossInversions are hand-outs answered while a more urgent quiet
	// job of another group was ready the whole time: 6.2's documented
	// difference (a take made unbounded after 4 lost rounds), reported.
	crossInversions int
}

// checkOrder checks the quiet phase's first hand-outs of its jobs (doc.go,
// "Order within a group"). A group hands out its ready jobs in (pri, id)
// order, but the clients see only when they sent a reserve and when its
// answer came: a hand-out b whose reserve was sent after a hand-out a of
// the same group was received came after it at the group, so key(a) <=
// key(b). Pairs whose spans overlap are not ordered by what the clients
// saw, and are not checked.
func checkOrder(hs []handout) orderFigures {
	var f orderFigures
	f.checked = len(hs)
	byGroup := map[int][]handout{}
	for _, h := range hs {
		byGroup[h.group] = append(byGroup[h.group], h)
	}
	for g, ghs := range byGroup {
		for _, v := range orderViolations(ghs) {
			f.violations = append(f.violations, fmt.Sprintf("group %d: %s", g, v))
		}
	}
	// Across groups: a hand-out a answered while a quiet job b of another
	// group, more urgent, was ready throughout (b's reserve sent after a
	// was received; b was put before the consumers started).
	for _, a := range hs {
		for _, b := range hs {
			if b.sent.After(a.start) && b.group != a.group && b.key.compare(a.key) < 0 {
				f.crossInversions++
				break
			}
		}
	}
	return f
}

// orderViolations are the pairs of one group's hand-outs that break the
// order: a received before b's reserve was sent, and key(a) > key(b).
func orderViolations(hs []handout) []string {
	byStart := slices.Clone(hs)
	slices.SortFunc(byStart, func(a, b handout) int { return a.start.Compare(b.start) })
	bySent := slices.Clone(hs)
	slices.SortFunc(bySent, func(a, b handout) int { return a.sent.Compare(b.sent) })
	var out []string
	var worst *handout // the greatest key among the hand-outs received so far
	i := 0
	for _, b := range bySent {
		for ; i < len(byStart) && byStart[i].start.Before(b.sent); i++ {
			if worst == nil || byStart[i].key.compare(worst.key) > 0 {
				worst = &byStart[i]
			}
		}
		if worst != nil && worst.key.compare(b.key) > 0 {
			out = append(out, fmt.Sprintf("job %v received at %v, then job %v reserved from %v (received %v)",
				worst.key, worst.start.Format(stamp), b.key, b.sent.Format(stamp), b.start.Format(stamp)))
		}
	}
	return out
}

// ack is a producer's acknowledged put: when, of which group, and
// through which member (its index in cluster.members).
type ack struct {
	at    time.Time
	group int
	via   int
}

// largestGap is the longest time within span during which one of the
// groups had no put acknowledged through the members counted for it
// (through[g], indices in cluster.members), that group, and when the gap
// began; span's ends count as acknowledgements, so a group that stopped
// shows the gap to the end.
func largestGap(acks []ack, through map[int][]int, span window) (gap time.Duration, group int, from time.Time) {
	last := map[int]time.Time{}
	for g := range through {
		last[g] = span.from
	}
	gap, group = -1, -1
	note := func(g int, since, until time.Time) {
		if d := until.Sub(since); d > gap {
			gap, group, from = d, g, since
		}
	}
	for _, a := range acks {
		vias, counted := through[a.group]
		if !counted || !slices.Contains(vias, a.via) || a.at.Before(span.from) || a.at.After(span.to) {
			continue
		}
		note(a.group, last[a.group], a.at)
		last[a.group] = a.at
	}
	for g, t := range last {
		note(g, t, span.to)
	}
	return max(gap, 0), group, from
}
