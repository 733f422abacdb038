//go:build linux

package clusterfault

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/testproc"
)

// The bounds the rounds wait within; generous, for a loaded machine and
// race-built members. Times are measured and reported; only the
// cluster's failover goals (failoverBound, failoverMedian) are asserted.
const (
	leaderWait   = 30 * time.Second
	convergeWait = 60 * time.Second
	ackWait      = 30 * time.Second
	// warmAcks are the acknowledged puts a round waits for before its
	// fault, and again after the recovery.
	warmAcks = 30
	// failoverBound is the cluster's failover goal for the worst case: a
	// new leader acknowledges within it.
	failoverBound = 3 * time.Second
	// failoverMedian is the goal for the median failover of each kind of
	// fault over the run's groups (docs/design/shards.md section 9:
	// "median <= 1.5 s").
	failoverMedian = 1500 * time.Millisecond
	// medianSamples is the failovers of a kind its median is held to
	// failoverMedian with: fewer (make test's short run has one or two
	// of each kind) would hold single failovers to it, which under the
	// load of the other packages' tests may take longer.
	medianSamples = 5
	// cordonWait bounds the balancers' handing over of a cordoned
	// member's groups: a round each second, once a group's leadership
	// has stayed put for 3 s.
	cordonWait = 30 * time.Second
	// leftWait bounds the closes of the clients' sessions reaching the
	// groups' leaders once the round's clients are gone: a close lost
	// with a leader is sent to the next within closeRecall (10 s).
	leftWait = 15 * time.Second
)

// errSkipped is a fault that cannot run in this cluster: it is not tried
// again. errNotNow is one that cannot run this round (the leaders are not
// placed for it): it is tried again on its next turn, up to notNowLimit
// turns in a row. Neither round is counted.
var (
	errSkipped  = errors.New("clusterfault: skipped")
	errNotNow   = errors.New("clusterfault: not this round")
	notNowLimit = 5
)

// fault is one kind of fault. inject does it to the cluster as lay
// shows it, recovers from it (restarts, SIGCONT, heals), and returns
// what it measured.
type fault struct {
	name string
	// leader: the fault takes leaders away, and each group's failover is
	// held to failoverBound; otherwise the fault takes no leader, and
	// what counts is the gap the clients saw.
	leader bool
	inject func(r *round, lay layout) (outcome, error)
	// severalGroups: the fault needs a cluster of several groups (a
	// tube's move); with one it is skipped, and not missed.
	severalGroups bool
	// several: with several groups, the fault takes away a member
	// leading several (lose, severalLed), in one of its rounds at least.
	several bool
}

// outcome is what a fault measured.
type outcome struct {
	victim string // the member it hit, or the partition's sides
	led    int    // the groups the victim led (a partition: the leaders cut off)
	// failovers are, by group whose leader the fault took away, the time
	// from the fault to a put into the group's tube acknowledged through
	// another member.
	failovers map[int]time.Duration
	// gap is the clients' largest gap in the groups the fault took no
	// leader from, through the members it did not hit (ledger.gap), its
	// group and how long after the fault it began, if there were such
	// groups (gapped).
	gap      time.Duration
	gapGroup int
	gapAfter time.Duration
	gapped   bool
	// stepDown is, by group, how long its cut-off leader kept leading.
	stepDown map[int]time.Duration
	// handedOver: the victim, stopped gracefully, handed every group it
	// led over (its log names none left to an election), and no handover
	// in the round went to an election instead, so no reservation may be
	// lost on a live connection: the new leaders took them with the
	// groups.
	handedOver bool
}

// measureGap sets o's gap: the clients' largest in the groups of
// through, each through the members named, within span (from the fault).
func (o *outcome) measureGap(l *ledger, through map[int][]int, span window) {
	var from time.Time
	o.gap, o.gapGroup, from = l.gap(through, span)
	o.gapAfter, o.gapped = from.Sub(span.from), true
}

var faults = []fault{
	{name: "kill -9 leader", leader: true, inject: killLeader, several: true},
	{name: "SIGSTOP leader", leader: true, inject: stopLeader, several: true},
	{name: "partition", leader: true, inject: partition},
	{name: "kill -9 follower", inject: killFollower},
	{name: "empty directory", inject: emptyDirectory},
	{name: "tube move", inject: moveTube, severalGroups: true},
	{name: "graceful restart", leader: true, inject: restartLeader, several: true},
}

// round is what a fault works with.
type round struct {
	t     *failing
	c     *cluster
	l     *ledger
	seq   *atomic.Uint64
	watch *leaderWatch
}

// results are a fault kind's figures over its rounds.
type results struct {
	rounds   int
	turns    int  // the turns it had: its rounds, and those it did not run
	notNow   int  // rounds it could not run (errNotNow)
	inARow   int  // of them since it last ran
	never    bool // not tried again
	counts   counts
	failover []time.Duration // per group
	gap      []time.Duration
	stepDown []time.Duration // per group
	converge []time.Duration
	// moves are the replica moves the members began in its rounds, and
	// movesAlone those a member planned alone (must be 0: every member
	// is of this release, so group 0's leader plans them all).
	moves, movesAlone uint64
	// skipReason is why it did not run, the last time.
	skipReason string
	// mostLed is the most groups a victim of its led (outcome.led).
	mostLed int
}

func runRounds(tt *testing.T, bin string, n int) {
	t := &failing{T: tt}
	t.repeatAtEnd()
	c := newCluster(t, bin)
	started := time.Now()
	lay := c.awaitLeaders(leaderWait)
	t.Logf("%d members serve %d groups, %v after they started; leaders %s; replicas %v", len(c.members), c.groups,
		time.Since(started).Round(time.Millisecond), lay.describe(), lay.replicas)
	watch := watchLeaders(c)
	defer watch.halt()
	r := &round{t: t, c: c, l: newLedger(), seq: new(atomic.Uint64), watch: watch}
	tally := moveTally{}
	if formed := c.movesSince(tally); len(formed) > 0 {
		t.Logf("replica moves as the members formed: %s", describeMoves(formed))
	}
	byKind := map[string]*results{}
	chosen, err := regexp.Compile(*faultFilter)
	if err != nil {
		t.Fatalf("-faults: %v", err)
	}
	for _, f := range faults {
		byKind[f.name] = &results{}
		if !chosen.MatchString(f.name) {
			byKind[f.name].never = true
			byKind[f.name].skipReason = "not chosen by -faults"
		}
	}
	for i, done := 0, 0; done < n; i++ {
		f := faults[i%len(faults)]
		res := byKind[f.name]
		if res.never {
			if !slices.ContainsFunc(faults, func(f fault) bool { return !byKind[f.name].never }) {
				t.Fatalf("no fault can run:\n%s", summary(byKind))
			}
			continue
		}
		res.turns++
		roundStarted := time.Now()
		r.quietPhase()
		w := startWorkload(c, r.l, r.seq)
		r.awaitAcks(warmAcks)
		lay := c.awaitLeaders(leaderWait)
		out, err := f.inject(r, lay)
		switch {
		case errors.Is(err, errSkipped):
			w.halt()
			res.never, res.skipReason = true, err.Error()
			t.Logf("fault %q skipped: %v", f.name, err)
			continue
		case errors.Is(err, errNotNow):
			w.halt()
			res.notNow++
			res.skipReason = err.Error()
			if res.inARow++; res.inARow >= notNowLimit {
				res.never = true
				res.skipReason += fmt.Sprintf(" (%d turns in a row: not tried again)", res.inARow)
			}
			t.Logf("fault %q not run this round: %v", f.name, err)
			continue
		case err != nil:
			w.halt()
			t.Fatalf("round %d (%s): %v", done+1, f.name, err)
		}
		res.inARow = 0
		c.awaitLeaders(leaderWait)
		r.awaitAcks(warmAcks)
		w.halt()
		quiet := time.Now()
		c.awaitConverged(convergeWait)
		converged := time.Since(quiet)
		verifying := time.Now()
		peeked, drained := r.verify()
		verified := time.Since(verifying)
		r.checkHoldings()
		if left := c.leftBehind(leftWait); len(left) > 0 {
			t.Errorf("round %d (%s): the clients gone, the members still hold: %s", done+1, f.name, strings.Join(left, "; "))
			dumpDebug(c.members, strings.Join(left, "\n"), "left")
		}
		moves := c.movesSince(tally)
		for _, n := range moves {
			res.moves += n
		}
		res.movesAlone += moves[movedAlone]
		if moves[movedAlone] > 0 {
			t.Errorf("round %d (%s): %d replica moves planned by a member alone, beside group 0's leader: %s",
				done+1, f.name, moves[movedAlone], describeMoves(moves))
		}
		watch.forget(roundStarted.Add(-time.Minute))
		cnt, bad := r.l.take()
		done++
		res.rounds++
		res.counts.add(cnt)
		res.mostLed = max(res.mostLed, out.led)
		var failovers []string
		for _, g := range slices.Sorted(maps.Keys(out.failovers)) {
			took := out.failovers[g]
			res.failover = append(res.failover, took)
			failovers = append(failovers, fmt.Sprintf("g%d %v", g, took.Round(time.Millisecond)))
			if took > failoverBound {
				t.Errorf("round %d (%s): group %d's failover took %v, over %v", done, f.name, g, took, failoverBound)
			}
		}
		gap := "-"
		if out.gapped {
			res.gap = append(res.gap, out.gap)
			gap = fmt.Sprintf("%v (g%d, from %v after the fault)", out.gap.Round(time.Millisecond), out.gapGroup, out.gapAfter.Round(time.Millisecond))
		}
		for _, g := range slices.Sorted(maps.Keys(out.stepDown)) {
			took := out.stepDown[g]
			res.stepDown = append(res.stepDown, took)
			if took > electionTimeout+time.Second {
				t.Errorf("round %d (%s): group %d's cut-off leader led for %v, more than an election timeout (%v)",
					done, f.name, g, took, electionTimeout)
			}
		}
		res.converge = append(res.converge, converged)
		t.Logf("round %d, %s (%s, leading %d; leaders were %s): %d puts, %d deletes acknowledged; lost %d, resurrected %d, mismatched %d, duplicated %d, done though refused %d, wrong replies %d, "+
			"double deliveries %d, reservations lost %d; holdings overlapping %d excused, %d not; order: %d checked, %d broken, %d across groups; "+
			"failover [%s], clients' gap %s, converged %v, %d ids peeked and %d old jobs deleted in %v; %d connection errors, %d deletes by the workload's consumers; replica moves: %s",
			done, f.name, out.victim, out.led, lay.describe(), cnt.puts, cnt.deletes, cnt.lost, cnt.resurrected, cnt.mismatches, cnt.duplicated, cnt.refusedDone, cnt.wrong, cnt.doubles,
			cnt.reservationLost, cnt.overlapsExcused, cnt.overlapsBad, cnt.orderChecked, cnt.orderBad, cnt.crossInversions,
			strings.Join(failovers, ", "), gap, converged.Round(time.Millisecond), peeked, drained, verified.Round(time.Millisecond), w.errors.Load(), w.deletes.Load(), describeMoves(moves))
		if w.deletes.Load() == 0 {
			t.Errorf("round %d (%s): the workload's consumers had no delete acknowledged in the round: they stalled", done, f.name)
		}
		if out.handedOver && cnt.reservationLost > 0 {
			t.Errorf("round %d (%s): %d reservations lost on a live connection, though %s handed every group it led over: %s",
				done, f.name, cnt.reservationLost, out.victim, strings.Join(cnt.reservationsLost, "; "))
		}
		if cnt.lost+cnt.resurrected+cnt.mismatches+cnt.duplicated+cnt.refusedDone+cnt.wrong > 0 {
			t.Errorf("round %d (%s): lost %d, resurrected %d, mismatched %d, duplicated %d, done though refused %d, wrong replies %d: all must be 0\n\t%s",
				done, f.name, cnt.lost, cnt.resurrected, cnt.mismatches, cnt.duplicated, cnt.refusedDone, cnt.wrong, strings.Join(bad, "\n\t"))
		}
	}
	t.Log("summary:\n" + summary(byKind))
	for _, slow := range slowFailovers(byKind) {
		t.Errorf("%s", slow)
	}
	missed, notReached := neverRan(byKind, chosen, c.groups, n)
	for _, m := range missed {
		t.Errorf("%s", m)
	}
	for _, m := range notReached {
		t.Logf("%s", m)
	}
	for _, f := range faults {
		if res := byKind[f.name]; f.several && c.groups > 1 && res != nil && res.rounds > 0 && res.mostLed < 2 {
			t.Errorf("fault %q never took away a member leading several groups in its %d rounds (most led: %d)", f.name, res.rounds, res.mostLed)
		}
	}
}

// slowFailovers says which kinds of fault had a median failover, over
// their rounds' groups, above failoverMedian, of those with at least
// medianSamples failovers.
func slowFailovers(byKind map[string]*results) []string {
	var out []string
	for _, f := range faults {
		res := byKind[f.name]
		if m, ok := median(res.failover); ok && len(res.failover) >= medianSamples && m > failoverMedian {
			out = append(out, fmt.Sprintf("%s: the median failover over %d groups took %v, over %v (each: %v)",
				f.name, len(res.failover), m.Round(time.Millisecond), failoverMedian, res.failover))
		}
	}
	return out
}

// neverRan are the faults -faults chose (chosen) that apply to a cluster
// of groups groups (fault.severalGroups) and never ran in a run of
// rounds rounds, said with why. missed are those that had a turn, and
// were skipped or not run in every one (the leaders never placed for
// them, a capability missing): the run did not test them, and fails.
// notReached are those whose turn never came, rounds being fewer than
// the faults chosen, or that had one turn only and did not run in it:
// noted only, as the rounds asked for are done.
func neverRan(byKind map[string]*results, chosen *regexp.Regexp, groups, rounds int) (missed, notReached []string) {
	var applying []fault
	for _, f := range faults {
		if chosen.MatchString(f.name) && (!f.severalGroups || groups > 1) {
			applying = append(applying, f)
		}
	}
	for _, f := range applying {
		res := byKind[f.name]
		switch {
		case res.rounds > 0:
		case res.turns == 0 && rounds < len(applying):
			notReached = append(notReached, fmt.Sprintf("fault %q not reached: %d rounds for %d faults", f.name, rounds, len(applying)))
		case res.turns == 1:
			// One turn (make test's short run): the leaders may not have
			// been placed for it that once.
			notReached = append(notReached, fmt.Sprintf("fault %q not run in its one turn: %s", f.name, cmp.Or(res.skipReason, "no reason noted")))
		default:
			missed = append(missed, fmt.Sprintf("fault %q never ran, in %d turns: %s", f.name, res.turns, cmp.Or(res.skipReason, "no reason noted")))
		}
	}
	return missed, notReached
}

// checkHoldings runs the double-holding check on the holdings since the
// last (doc.go, "No double holding"): an overlap not excused by a change
// of the job's group's leader fails the test.
func (r *round) checkHoldings() {
	r.t.Helper()
	excused, bad := overlaps(r.l.takeHoldings(), r.watch)
	r.l.mu.Lock()
	r.l.counts.overlapsExcused += excused
	r.l.counts.overlapsBad += len(bad)
	r.l.mu.Unlock()
	for _, b := range bad[:min(len(bad), 20)] {
		r.t.Errorf("double holding: %s", b)
	}
}

// awaitAcks waits for n more acknowledged puts.
func (r *round) awaitAcks(n int64) {
	r.t.Helper()
	want := r.l.acks.Load() + n
	deadline := time.Now().Add(ackWait)
	for r.l.acks.Load() < want {
		if time.Now().After(deadline) {
			r.t.Fatalf("the workload had %d of %d acknowledged puts within %v", n-(want-r.l.acks.Load()), n, ackWait)
		}
		r.c.checkAlive()
		time.Sleep(10 * time.Millisecond)
	}
}

// probeEvery is how often probe starts a new attempt: attempts overlap,
// so one stuck behind a proxy to the lost leader does not hold the
// measure up.
const probeEvery = 25 * time.Millisecond

// probeGroups probes each group of through, all at once: through[g] are
// the members group g's puts go through. It returns each group's time.
func (r *round) probeGroups(from time.Time, through map[int][]*member) map[int]time.Duration {
	r.t.Helper()
	type result struct {
		group int
		took  time.Duration
		err   error
	}
	results := make(chan result, len(through))
	for g, ms := range through {
		go func() {
			took, err := r.probe(from, r.c.tubes[g], ms)
			results <- result{g, took, err}
		}()
	}
	out := map[int]time.Duration{}
	var errs []string
	for range through {
		res := <-results
		if res.err != nil {
			errs = append(errs, fmt.Sprintf("group %d: %v", res.group, res.err))
		}
		out[res.group] = res.took
	}
	if len(errs) > 0 {
		views := strings.Join(r.c.look().views, "; ")
		// Their goroutines, into their logs (Go's SIGQUIT dump): a
		// member that stopped answering shows where it waits.
		for _, ms := range through {
			for _, m := range ms {
				if m.up() {
					_ = m.signal(syscall.SIGQUIT)
				}
			}
		}
		time.Sleep(time.Second)
		r.t.Fatalf("%s\nthe members' views now: %s", strings.Join(errs, "\n"), views)
	}
	return out
}

// probe puts into tube through the members named, a new connection each
// attempt, until one is acknowledged, and returns how long after from it
// was.
func (r *round) probe(from time.Time, tube string, through []*member) (time.Duration, error) {
	acked := make(chan time.Duration, 1)
	var done atomic.Bool
	var wg sync.WaitGroup
	var lastMu sync.Mutex
	failed := map[string]map[string]int{} // by member, why its attempts failed, counted
	defer wg.Wait()
	defer done.Store(true)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	deadline := time.After(leaderWait)
	for i := 0; ; i++ {
		wg.Add(1)
		go func(m *member) {
			defer wg.Done()
			took, err := r.probeOnce(from, tube, m)
			if err != nil {
				why := err.Error()
				if i := strings.Index(why, ": read tcp"); i >= 0 {
					why = why[:i] + ": " + why[strings.LastIndex(why, ": ")+2:] // not the port
				}
				lastMu.Lock()
				if failed[m.name] == nil {
					failed[m.name] = map[string]int{}
				}
				failed[m.name][why]++
				lastMu.Unlock()
			} else if !done.Swap(true) {
				acked <- took
			}
		}(through[i%len(through)])
		select {
		case took := <-acked:
			return took, nil
		case <-deadline:
			lastMu.Lock()
			defer lastMu.Unlock()
			return 0, fmt.Errorf("no member of %v acknowledged a put into %s within %v of the fault (attempts failed: %v)", names(through), tube, leaderWait, failed)
		case <-tick.C:
		}
	}
}

// probeOnce puts one job into tube through m on a new connection.
func (r *round) probeOnce(from time.Time, tube string, m *member) (time.Duration, error) {
	token := "probe-" + strconv.FormatUint(r.seq.Add(1), 10)
	if _, err := r.putThrough(m, tube, token, "after the fault"); err != nil {
		return 0, err
	}
	return time.Since(from), nil
}

// putThrough puts a job of token into tube through m, on a connection of
// its own, and returns its id, noted in the ledger as acknowledged; a
// put refused is noted as such, and a wrong reply (judge) as one.
func (r *round) putThrough(m *member, tube, token, text string) (uint64, error) {
	d := testproc.Dialer{Timeout: time.Second, Local: probeIP, ReplyTimeout: 2 * time.Second}
	conn, err := d.Dial(m.clientAddr())
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	body := []byte("chaos:" + token + ":" + text)
	r.l.sending(token, body)
	use := "use " + tube
	rep, err := conn.Do(use, nil)
	if _, err := checked(r.l, m.name, use, "USING "+tube, rep, err); err != nil {
		return 0, err
	}
	put := fmt.Sprintf("put 0 0 %d %d", ttr, len(body))
	rep, err = conn.Do(put, body)
	v, err := checked(r.l, m.name, put, "INSERTED", rep, err)
	switch {
	case v == refused:
		r.l.putRefused(token, string(rep.Line))
	case v == hoped && rep.Kind == testproc.ReplyInserted:
		r.l.putAcked(rep.N, token)
		return rep.N, nil
	case err == nil:
		err = fmt.Errorf("%s through %s: %q", put, m.name, rep.Line)
	}
	return 0, err
}

func names(ms []*member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.name)
	}
	return out
}

// indices are ms' indices in c.members (ack.via's).
func (c *cluster) indices(ms []*member) []int {
	var out []int
	for _, m := range ms {
		out = append(out, slices.Index(c.members, m))
	}
	return out
}

// holdUntil sleeps until at: a fault lasts at least that long.
func holdUntil(at time.Time) { time.Sleep(time.Until(at)) }

// holdFor is lose's hold of a fault that lasts d.
func holdFor(d time.Duration) func(*member, time.Time) error {
	return func(_ *member, at time.Time) error { holdUntil(at.Add(d)); return nil }
}

// lose takes the busiest member away (kill -9, SIGSTOP or SIGTERM, by
// stop), and probes each group it led through the others; it holds the
// fault (hold, given when it began), then recovers by resume. The
// clients' gap is that of the other groups through the other members,
// and of its own too when it hands them over (handsOver: a graceful
// stop, which should pause them no longer than the others).
func lose(r *round, lay layout, stop func(*member) error, hold func(m *member, at time.Time) error, resume func(*member) error, handsOver bool) (outcome, error) {
	v := r.c.busiest(lay)
	lay, err := r.severalLed(lay, v)
	if err != nil {
		return outcome{}, err
	}
	// A member leading more than its share hands groups over (every 3 s
	// at most): what it leads is asked again, right before the fault, so
	// that a group handed over meanwhile is not taken for a failover of a
	// few milliseconds.
	var led []int
	st, err := v.status(false)
	for _, g := range lay.ledBy(v) {
		if gs, held := groupIn(st, g); err == nil && held && gs.Leader == v.name {
			led = append(led, g)
		}
	}
	if len(led) == 0 {
		return outcome{}, fmt.Errorf("%w: %s, leading the most groups (leaders %s), handed them over as the fault began (%v)",
			errNotNow, v.name, lay.describe(), err)
	}
	others := r.c.others(v)
	if err := stop(v); err != nil {
		return outcome{}, err
	}
	at := time.Now()
	through := map[int][]*member{}
	for _, g := range led {
		through[g] = others
	}
	out := outcome{victim: v.name, led: len(led), failovers: r.probeGroups(at, through)}
	if err := hold(v, at); err != nil {
		return out, err
	}
	end := time.Now()
	if err := resume(v); err != nil {
		return out, err
	}
	counted := map[int][]int{}
	for g := range r.c.groups {
		if handsOver || !slices.Contains(led, g) {
			counted[g] = r.c.indices(others)
		}
	}
	if len(counted) > 0 {
		out.measureGap(r.l, counted, window{at, end})
	}
	return out, nil
}

// severalLed has v, the member a fault takes away, lead several groups
// when it leads one (the issue's "kill -9 of a member leading several
// groups": with leaders balanced and as many groups as members each
// leads one): every other member is cordoned until the balancers have
// handed v a second group (of those it holds a replica of), then
// uncordoned, the fault following at once; a balancer hands an excess
// over every 3 s at most, and lose asks what v leads again right before
// the fault. With one group, or v leading several, nothing.
func (r *round) severalLed(lay layout, v *member) (layout, error) {
	if r.c.groups < 2 || len(lay.ledBy(v)) >= 2 {
		return lay, nil
	}
	others := r.c.others(v)
	cordon := func(method string) error {
		for _, m := range others {
			if _, err := r.c.admin(v, method, "/cluster/members/"+m.name+"/cordon", "", nil); err != nil {
				return fmt.Errorf("%s cordon of %s: %w", method, m.name, err)
			}
		}
		return nil
	}
	if err := cordon(http.MethodPost); err != nil {
		return lay, err
	}
	asked := time.Now()
	for {
		l := r.c.look()
		if len(l.leaders) == r.c.groups && len(l.ledBy(v)) >= 2 {
			r.t.Logf("the others cordoned: %s leads %v after %v (leaders %s)", v.name, l.ledBy(v), time.Since(asked).Round(time.Millisecond), l.describe())
			break
		}
		if time.Since(asked) > cordonWait {
			if err := cordon(http.MethodDelete); err != nil {
				return lay, err
			}
			return lay, fmt.Errorf("%w: the others cordoned, %s still leads %v after %v (leaders %s)", errNotNow, v.name, l.ledBy(v), cordonWait, l.describe())
		}
		r.c.checkAlive()
		time.Sleep(50 * time.Millisecond)
	}
	if err := cordon(http.MethodDelete); err != nil {
		return lay, err
	}
	return r.c.look(), nil
}

// killLeader kills the member leading the most groups for a second.
func killLeader(r *round, lay layout) (outcome, error) {
	return lose(r, lay, func(m *member) error { m.kill(); return nil }, holdFor(time.Second),
		func(m *member) error { r.c.start(m); return nil }, false)
}

// stopLeader freezes the member leading the most groups for one and a
// half election timeouts: when it runs again it has lost those
// leaderships, and rebuilds the groups in place.
func stopLeader(r *round, lay layout) (outcome, error) {
	return lose(r, lay, func(m *member) error { return m.signal(syscall.SIGSTOP) }, holdFor(electionTimeout*3/2),
		func(m *member) error { return m.signal(syscall.SIGCONT) }, false)
}

// restartLeader restarts the member leading the most groups as a rolling
// restart does: SIGTERM, which it must answer by exiting 0 within
// shutdownWait (it refuses puts, hands out no job, waits for the jobs
// its own workers hold, closes its connections and hands each group it
// leads to another member), then started again at once on its
// directory. Its groups' failover, from the SIGTERM, is how long clients
// on the other members wait for a put into them: while it drains, it
// goes on serving them; its handover's pause is in the clients' gap,
// which counts every group.
func restartLeader(r *round, lay layout) (outcome, error) {
	handedOver := false
	said := map[*member]int{} // each member's output before the SIGTERM
	var victim *member
	out, err := lose(r, lay, func(m *member) error {
		victim = m
		for _, o := range r.c.members {
			if o.proc != nil {
				said[o] = len(o.proc.Output())
			}
		}
		m.noteMoves()
		return m.signal(syscall.SIGTERM)
	},
		func(m *member, at time.Time) error {
			if !m.proc.Wait(shutdownWait) {
				return fmt.Errorf("%s still runs %v after SIGTERM", m.name, shutdownWait)
			}
			if code := m.proc.ExitCode(); code != 0 {
				return fmt.Errorf("%s exited %d after SIGTERM, want 0", m.name, code)
			}
			// A group that could not go (no voter heard from lately, a
			// transfer refused: a starved machine) went to an election,
			// as after a kill, and its reservations with it. An output
			// cut at its limit cannot say.
			said := m.proc.Output()
			handedOver = len(said) < outputLimit && !strings.Contains(said, "it goes to an election")
			r.t.Logf("%s exited %v after SIGTERM, every group handed over: %v", m.name, time.Since(at).Round(time.Millisecond), handedOver)
			return nil
		}, func(m *member) error { r.c.start(m); return nil }, true)
	// A balancing handover in the round (back to the member restarted,
	// among others) that ended in an election instead, on a starved
	// machine, may lose reservations as any failover does.
	for _, o := range r.c.members {
		if o.proc == nil {
			continue
		}
		from := said[o]
		if o == victim {
			from = 0 // a new process
		}
		all := o.proc.Output()
		if len(all) >= outputLimit || strings.Contains(all[min(from, len(all)):], "the leadership went to an election") {
			if handedOver {
				r.t.Logf("%s: a handover in the round went to an election instead", o.name)
			}
			handedOver = false
		}
	}
	out.handedOver = handedOver
	return out, err
}

// shutdownWait is how long a member stopped by SIGTERM may take to exit:
// its --shutdown-timeout (25 s by default) for its workers' jobs, and
// time to hand its groups over and close its log.
const shutdownWait = 40 * time.Second

// partition cuts the members in two for one and a half election
// timeouts, their clients still reaching every member: with five
// members {m1, m2} from {m3, m4, m5}, which leaves some groups' majorities
// on each side (docs/design/shards.md 9); with three, the member leading
// the most groups from the other two. Each group whose leader is on the
// side without its majority fails over: probed through the members of
// its majority side, and its cut-off leader watched until it no longer
// leads it. Every other group must go on serving on its majority side,
// and its clients' gap there is the outcome's. Members on one side must
// keep their connections to each other: the rules cut what they name.
func partition(r *round, lay layout) (outcome, error) {
	var a, b []*member
	if len(r.c.members) == 5 {
		a, b = r.c.members[:2], r.c.members[2:]
	} else {
		v := r.c.busiest(lay)
		a, b = []*member{v}, r.c.others(v)
	}
	majority := map[int][]*member{} // by group, the side holding most of its replicas
	cutOff := map[int]*member{}     // by group, its leader when the cut leaves it without a majority
	for g := range r.c.groups {
		on := 0
		for _, m := range a {
			if slices.Contains(lay.replicas[g], m.name) {
				on++
			}
		}
		side := b
		if 2*on > len(lay.replicas[g]) {
			side = a
		}
		majority[g] = side
		if !slices.Contains(side, lay.leaders[g]) {
			cutOff[g] = lay.leaders[g]
		}
	}
	r.c.cut(a, b)
	at := time.Now()
	type stepped struct {
		group int
		took  time.Duration
	}
	steps := make(chan stepped, len(cutOff))
	for g, l := range cutOff {
		go func() {
			for time.Since(at) < leaderWait {
				st, err := l.status(false)
				gs, held := groupIn(st, g)
				if err != nil || !held || gs.Leader != l.name || g == 0 && !st.Serving {
					steps <- stepped{g, time.Since(at)}
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			steps <- stepped{g, leaderWait}
		}()
	}
	through := map[int][]*member{}
	for g := range cutOff {
		through[g] = majority[g]
	}
	out := outcome{victim: fmt.Sprintf("%v | %v", names(a), names(b)), led: len(cutOff),
		failovers: r.probeGroups(at, through), stepDown: map[int]time.Duration{}}
	served := map[int][]*member{}
	counted := map[int][]int{}
	for g := range r.c.groups {
		if _, cut := cutOff[g]; !cut {
			served[g] = majority[g]
			counted[g] = r.c.indices(majority[g])
		}
	}
	r.probeGroups(at, served) // fails the test if a group no longer serves
	for range cutOff {
		s := <-steps
		out.stepDown[s.group] = s.took
	}
	holdUntil(at.Add(electionTimeout * 3 / 2))
	if err := r.c.checkCut(a, b); err != nil {
		return out, err
	}
	for _, side := range [][]*member{a, b} {
		for _, m := range side {
			st, err := m.status(false)
			if err != nil {
				return out, fmt.Errorf("%s during the partition: %v", m.name, err)
			}
			for _, ms := range st.Members {
				if o := r.c.byName(ms.Name); o != m && contains(side, o) && !ms.Connected {
					return out, fmt.Errorf("%s lost its connection to %s, on its side of the partition: the rules cut more than they name", m.name, o.name)
				}
			}
		}
	}
	end := time.Now()
	r.c.heal()
	if len(counted) > 0 {
		out.measureGap(r.l, counted, window{at, end})
	}
	return out, nil
}

// killFollower kills a member that leads no group for two seconds: no
// group should pause, and the outcome is the clients' largest gap
// through the other members. With leaders balanced and as many groups as
// members or more, every member leads one, and the admin API has no
// leadership transfer to free one: the round is not run then.
func killFollower(r *round, lay layout) (outcome, error) {
	f, cordoned, err := r.follower(lay)
	if err != nil {
		return outcome{}, err
	}
	f.kill()
	at := time.Now()
	holdUntil(at.Add(2 * time.Second))
	end := time.Now()
	r.c.start(f)
	if cordoned {
		if _, err := r.c.admin(lay.leaders[0], http.MethodDelete, "/cluster/members/"+f.name+"/cordon", "", nil); err != nil {
			return outcome{}, fmt.Errorf("uncordoning %s: %w", f.name, err)
		}
	}
	counted := map[int][]int{}
	for g := range r.c.groups {
		counted[g] = r.c.indices(r.c.others(f))
	}
	out := outcome{victim: f.name}
	out.measureGap(r.l, counted, window{at, end})
	return out, nil
}

// follower is a member leading no group: one that leads none now, else
// one the round cordons (sproutctl members cordon, on group 0's leader,
// which it is not) until the balancers have handed its groups over; the
// caller uncordons it (cordoned) once the fault is done. With as many
// groups as members each member leads one, so only a cordon makes one.
func (r *round) follower(lay layout) (f *member, cordoned bool, err error) {
	if f = lay.leadingNone(r.c.members); f != nil {
		return f, false, nil
	}
	candidates := r.c.others(lay.leaders[0])
	f = candidates[rand.IntN(len(candidates))]
	if _, err := r.c.admin(lay.leaders[0], http.MethodPost, "/cluster/members/"+f.name+"/cordon", "", nil); err != nil {
		return nil, false, fmt.Errorf("cordoning %s: %w", f.name, err)
	}
	asked := time.Now()
	for {
		l := r.c.look()
		if len(l.leaders) == r.c.groups && len(l.ledBy(f)) == 0 {
			r.t.Logf("cordoned %s: it leads no group after %v (leaders %s)", f.name, time.Since(asked).Round(time.Millisecond), l.describe())
			return f, true, nil
		}
		if time.Since(asked) > cordonWait {
			return nil, false, fmt.Errorf("%s, cordoned, still leads groups after %v (leaders %s)", f.name, cordonWait, l.describe())
		}
		r.c.checkAlive()
		time.Sleep(50 * time.Millisecond)
	}
}

// emptyDirectory restarts a follower on an empty directory, as a new
// member. The procedure, in one place, as membership changes are served
// (docs/cluster.md "Membership", internal/replication/doc.go "Replacing a member
// whose directory was emptied"):
//
//  1. kill the member (-9) and empty its directory;
//  2. remove it: DELETE /cluster/members/NAME on the leader's side port,
//     with the admin token; the remaining two commit it;
//  3. add it again under its name (a new Raft id): POST /cluster/members
//     {"name","address"}, whose answer holds the join string;
//  4. start it on the empty directory with --cluster-join (kept for its
//     later starts: a member keeps its command line); a snapshot fills it;
//  5. wait until the leader has promoted it (GET /cluster/members: role
//     voter): until then the cluster has two voters, and the next round's
//     fault would leave it without a majority.
//
// With several groups the member chosen leads none (the round waits
// for a layout with one, errNotNow), its removal marks it draining: its
// replicas move to the other members (or, with no member to take one,
// its groups go on with one voter fewer), then group 0's leader removes
// it; once added again and promoted, replicas move back to it until
// every group has its voters and the members hold about as many. The
// round waits for both (drained, then every group whole again).
//
// Until the leader's side port serves /cluster/members (any answer but
// 404), the fault is skipped. The outcome is the clients' largest gap
// through the other members, from the kill to the promotion.
func emptyDirectory(r *round, lay layout) (outcome, error) {
	l := lay.leaders[0]
	var list struct {
		Members []struct{ Name, Role string }
	}
	code, err := r.c.admin(l, http.MethodGet, "/cluster/members", "", &list)
	if err != nil {
		return outcome{}, err
	}
	if code == http.StatusNotFound {
		return outcome{}, fmt.Errorf("%w: the side port has no /cluster/members (membership changes are not served yet)", errSkipped)
	}
	f := r.c.others(l)[0]
	if r.c.groups > 1 {
		// Cordoned, it is no longer once removed: it comes back under a
		// new Raft id.
		if f, _, err = r.follower(lay); err != nil {
			return outcome{}, err
		}
	}
	f.kill()
	at := time.Now()
	if err := f.emptyDir(); err != nil {
		return outcome{}, err
	}
	code, err = r.c.admin(l, http.MethodDelete, "/cluster/members/"+f.name, "", nil)
	if err != nil {
		return outcome{}, err
	}
	if code == http.StatusAccepted {
		// Draining: its replicas move away, then it is removed.
		if err := r.c.awaitMembers(l, convergeWait, []*member{f}, func(ms []memberRole) bool {
			return !slices.ContainsFunc(ms, func(m memberRole) bool { return m.Name == f.name })
		}); err != nil {
			return outcome{}, fmt.Errorf("%s, draining, not removed: %w", f.name, err)
		}
	}
	var added struct{ Join string }
	body := fmt.Sprintf(`{"name":%q,"address":%q}`, f.name, net.JoinHostPort(f.ip(), strconv.Itoa(clusterPort)))
	if _, err := r.c.admin(l, http.MethodPost, "/cluster/members", body, &added); err != nil {
		return outcome{}, err
	}
	if added.Join == "" {
		return outcome{}, errors.New("POST /cluster/members answered no join string")
	}
	f.join = added.Join
	r.c.start(f)
	// Until it is a voter the cluster has a voter fewer, and the next
	// round's fault would leave it without a majority.
	if err := r.c.awaitMembers(l, convergeWait, nil, func(ms []memberRole) bool {
		return slices.Contains(ms, memberRole{Name: f.name, Role: "voter"})
	}); err != nil {
		return outcome{}, fmt.Errorf("%s not promoted to voter: %w", f.name, err)
	}
	if r.c.groups > 1 {
		deadline := time.Now().Add(convergeWait)
		for !r.c.whole(r.c.look()) {
			if time.Now().After(deadline) {
				return outcome{}, fmt.Errorf("the groups not whole again within %v of %s's return: %s", convergeWait, f.name, strings.Join(r.c.look().views, "; "))
			}
			r.c.checkAlive()
			time.Sleep(100 * time.Millisecond)
		}
	}
	counted := map[int][]int{}
	for g := range r.c.groups {
		counted[g] = r.c.indices(r.c.others(f))
	}
	out := outcome{victim: f.name}
	out.measureGap(r.l, counted, window{at, time.Now()})
	return out, nil
}

// memberRole is a member as GET /cluster/members lists it.
type memberRole struct{ Name, Role string }

// awaitMembers waits until GET /cluster/members on m answers members for
// which ok holds; the members down are stopped on purpose meanwhile.
func (c *cluster) awaitMembers(m *member, timeout time.Duration, down []*member, ok func([]memberRole) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		var list struct{ Members []memberRole }
		_, err := c.admin(m, http.MethodGet, "/cluster/members", "", &list)
		if err == nil && ok(list.Members) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %+v (%v)", timeout, list.Members, err)
		}
		c.checkAlive(down...)
		time.Sleep(50 * time.Millisecond)
	}
}

// whole reports whether every group of l has its voters (group 0 every
// member, the others c.replicas), no learner, and a leader, and the
// members up hold replicas of groups 1 and up within one of each other:
// the replicas have moved back after a member's return.
func (c *cluster) whole(l layout) bool { return c.lacking(l) == "" }

// lacking says what keeps l from being whole, or "".
func (c *cluster) lacking(l layout) string {
	held := map[string]int{}
	for _, m := range c.members {
		if m.up() {
			held[m.name] = 0
		}
	}
	voters := func(g int) int {
		if g == 0 {
			return len(c.members)
		}
		return c.replicas
	}
	for g := range c.groups {
		if l.leaders[g] == nil {
			return fmt.Sprintf("g%d has no leader", g)
		}
		st := l.status[l.leaders[g]]
		gs, ok := groupIn(st, g)
		switch {
		case !ok:
			return fmt.Sprintf("g%d's leader %s does not list it", g, l.leaders[g].name)
		case len(gs.Learners) > 0:
			return fmt.Sprintf("g%d has learners %v", g, gs.Learners)
		case len(gs.Replicas) != voters(g):
			return fmt.Sprintf("g%d has %d voters %v, not %d", g, len(gs.Replicas), gs.Replicas, voters(g))
		}
		for _, r := range gs.Replicas {
			if g > 0 {
				held[r]++
			}
		}
	}
	lo, hi := -1, 0
	for _, n := range held {
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if hi-lo > 1 {
		return fmt.Sprintf("the members hold uneven numbers of replicas: %v", held)
	}
	return ""
}

// admin sends a request to m's side port with the admin token, decodes a
// 2xx answer's JSON into out (unless nil) and returns the status; any
// other answer but 404 is an error. A change (any method but GET) is
// answered once group 0 has committed it, which under load can take
// longer than a look's httpClient waits: CI timed out an uncordon after
// 2 s while a restarted member replayed its log, and the change
// committed a second later.
func (c *cluster) admin(m *member, method, path, body string, out any) (int, error) {
	req, err := http.NewRequest(method, m.httpBase()+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	client := httpClient
	if method != http.MethodGet {
		client = changeClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound && method == http.MethodGet:
		return resp.StatusCode, nil
	case resp.StatusCode/100 != 2:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return resp.StatusCode, fmt.Errorf("%s %s on %s: %s %s", method, path, m.name, resp.Status, msg)
	case out != nil:
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode, nil
}

// changeClient waits for an admin change's answer: a commit in group 0.
var changeClient = &http.Client{Timeout: 20 * time.Second}

// verifyBatch is how many peeks go in one pipeline.
const verifyBatch = 1000

// verify checks the queue against the ledger, each group through its
// leader, and returns how many ids it peeked and how many old jobs it
// deleted (drain): in each group, a fence put into the group's tube
// bounds the group's ids (its prefix's, meta.JobID), and every id of the
// group below it is peeked. Found: its body must be one put, and not a
// deleted job's. Not found: it must not be an acknowledged put no delete
// was sent for. A peek waits for the one before it (a routed session
// pipelines no read), so through another member each is a round trip
// between members: tens of thousands of ids took 40 s a round.
func (r *round) verify() (peeked, drained int) {
	r.t.Helper()
	leaders := r.c.awaitLeaders(leaderWait).leaders
	conns := map[*member]*verifyConn{}
	defer func() {
		for _, v := range conns {
			v.close()
		}
	}()
	for g, tube := range r.c.tubes {
		l := leaders[g]
		v := conns[l]
		if v == nil {
			v = &verifyConn{m: l}
			conns[l] = v
		}
		p, d := r.verifyGroup(v, uint8(g), tube)
		peeked, drained = peeked+p, drained+d
	}
	return peeked, drained
}

// verifyConn is verify's connection to a member, dialled again when it
// breaks: a member closes a session whose command's outcome it cannot
// tell, a group's leadership lost under it (docs/design/shards.md 5.1),
// and an election on a starved machine comes during verify too.
type verifyConn struct {
	m       *member
	conn    *testproc.Conn
	tube    string // the tube its steps use
	using   string // the tube conn uses
	redials int    // how many times it was dialled again
}

func (v *verifyConn) close() {
	if v.conn != nil {
		v.conn.Close()
		v.conn, v.using = nil, ""
	}
}

// verifyRedials bounds how many times in a row verify dials a member
// again.
const verifyRedials = 5

// verifyDo runs step on v's connection, which uses v's tube; if it
// fails, it dials again, and runs step again, so a step must be one that
// may run twice (a peek; a delete, whose second may find its job gone; a
// put, whose first may have been taken).
func (r *round) verifyDo(v *verifyConn, what string, step func(*testproc.Conn) error) {
	r.t.Helper()
	for attempt := 0; ; attempt++ {
		err := r.verifyConnect(v)
		if err == nil {
			if err = step(v.conn); err == nil {
				return
			}
		}
		v.close()
		if attempt == verifyRedials {
			r.t.Fatalf("%s through %s: %v", what, v.m.name, err)
		}
		r.t.Logf("%s through %s: %v; dialling it again", what, v.m.name, err)
		v.redials++
		time.Sleep(200 * time.Millisecond)
	}
}

// verifyConnect dials v's member if v has no connection, and has the
// connection use v's tube.
func (r *round) verifyConnect(v *verifyConn) error {
	if v.conn == nil {
		conn, err := testproc.Dialer{Timeout: time.Second, Local: probeIP, ReplyTimeout: 30 * time.Second}.Dial(v.m.clientAddr())
		if err != nil {
			return err
		}
		v.conn = conn
	}
	if v.using != v.tube {
		if err := v.conn.ExpectLine("use "+v.tube, "USING "+v.tube); err != nil {
			return err
		}
		v.using = v.tube
	}
	return nil
}

// verifyGroup is verify of group g, whose tube is tube. The first time,
// every id below the fence is peeked; later only the ids above the last
// fence, and below it those the ledger knows (acknowledged puts, ids
// reserved or sent a delete) or that were there at the last walk: an id
// found absent and never seen cannot be issued again (ids only grow), and
// most are not issued at all (a new leader goes on above the logged
// watermark, up to 4096 ids on, store.NextID), so walking them each round
// would cost more with every failover, and find nothing.
func (r *round) verifyGroup(v *verifyConn, g uint8, tube string) (peeked, drained int) {
	r.t.Helper()
	token := fencePrefix + strconv.FormatUint(r.seq.Add(1), 10)
	body := []byte("chaos:" + token + ":")
	r.l.sending(token, body)
	v.tube = tube
	var fence uint64
	r.verifyDo(v, "the fence put into "+tube, func(conn *testproc.Conn) (err error) {
		fence, err = conn.Put(0, 0, ttr, body)
		return err
	})
	r.l.putAcked(fence, token)
	first := meta.JobID(g, 1)
	if fence < first || fence>>meta.SeqBits != uint64(g) {
		r.t.Fatalf("the fence put into %s, of group %d, took id %d", tube, g, fence)
	}
	ids := r.l.toPeek(first, fence)
	found := map[uint64]bool{}
	for from := 0; from < len(ids); from += verifyBatch {
		var lines []string
		for _, id := range ids[from:min(from+verifyBatch, len(ids))] {
			lines = append(lines, "peek "+strconv.FormatUint(id, 10))
		}
		var sent time.Time
		var replies []testproc.Reply
		r.verifyDo(v, "peeking", func(conn *testproc.Conn) (err error) {
			sent = time.Now()
			replies, err = conn.Pipeline(lines)
			return err
		})
		r.l.mu.Lock()
		for _, rep := range replies {
			switch rep.Kind {
			case testproc.ReplyFound:
				found[rep.N] = true
				if r.l.seenLocked(rep.N, rep.Body, sent) {
					r.t.Errorf("job %d: %.60q is resurrected, not what was put or a put's second job", rep.N, rep.Body)
				}
			case testproc.ReplyNotFound:
			default:
				r.t.Fatalf("peek: %q", rep.Line)
			}
		}
		r.l.mu.Unlock()
	}
	r.l.walked(first, fence, found)
	r.l.mu.Lock()
	lost := r.l.lostLocked(first, fence, found)
	r.l.mu.Unlock()
	if len(lost) > 0 {
		r.t.Errorf("acknowledged puts of group %d lost: %v", g, lost[:min(len(lost), 20)])
	}
	drained = r.drain(v, found)
	r.l.deleting(fence)
	var deleted testproc.Reply
	redials := v.redials
	r.verifyDo(v, "the fence's delete", func(conn *testproc.Conn) (err error) {
		deleted, err = conn.Do(fmt.Sprint("delete ", fence), nil)
		return err
	})
	switch {
	case deleted.Kind == testproc.ReplyDeleted:
		r.l.deleteAcked(fence)
	case deleted.Kind == testproc.ReplyNotFound && v.redials > redials:
		// Sent again: the first may have deleted it.
	default:
		r.t.Fatalf("delete %d (the fence): %q", fence, deleted.Line)
	}
	return len(ids), drained
}

// keepJobs is how many of the jobs it found in a group verify leaves
// there: it deletes the older ones (drain). The consumers, every reserve
// one across groups, delete a tenth of what the producers put under the
// race detector, so without it the stores grew by thousands of jobs a
// round, and every later round's snapshots, tube moves and digests cost
// more than the last (a tube of 14,000 jobs held 20 s by its move in the
// tenth round, and the members, race-built, lost leaderships under it).
const keepJobs = 2000

// drain deletes the jobs of found, a group's, but the newest keepJobs,
// through v: each a delete acknowledged (its job must never be seen
// again), or refused because a session still holds it.
func (r *round) drain(v *verifyConn, found map[uint64]bool) (drained int) {
	r.t.Helper()
	ids := slices.Sorted(maps.Keys(found))
	ids = ids[:max(0, len(ids)-keepJobs)]
	for from := 0; from < len(ids); from += verifyBatch {
		batch := ids[from:min(from+verifyBatch, len(ids))]
		lines := make([]string, len(batch))
		for i, id := range batch {
			r.l.deleting(id)
			lines[i] = "delete " + strconv.FormatUint(id, 10)
		}
		var replies []testproc.Reply
		redials := v.redials
		r.verifyDo(v, "draining", func(conn *testproc.Conn) (err error) {
			replies, err = conn.Pipeline(lines)
			return err
		})
		for i, rep := range replies {
			switch rep.Kind {
			case testproc.ReplyDeleted:
				r.l.drained(batch[i])
				drained++
			case testproc.ReplyNotFound:
				// Reserved still, by a session whose close its member
				// has not seen yet: the delete did nothing, and the job
				// must be found again. Or, sent again on a new
				// connection (verifyDo), deleted by the first try,
				// whose answer was lost: then it stays in doubt.
				if v.redials == redials {
					r.l.deleteNotDone(batch[i])
				}
			default:
				r.t.Fatalf("delete %d: %q", batch[i], rep.Line)
			}
		}
	}
	return drained
}

// summary is the table make chaos prints.
func summary(byKind map[string]*results) string {
	var b bytes.Buffer
	row := "%-16s %6s %7s %7s %4s %5s %5s %4s %7s %11s %11s %18s %9s %9s %16s %6s\n"
	fmt.Fprintf(&b, row, "fault", "rounds", "puts", "deletes", "lost", "resur", "mism", "dup", "doubles", "overlaps",
		"order", "failover med/max", "gap max", "step max", "converge med/max", "moves")
	var total results
	for _, f := range faults {
		res := byKind[f.name]
		if res.rounds == 0 {
			reason := res.skipReason
			if reason == "" {
				reason = "not reached: too few rounds"
			}
			fmt.Fprintf(&b, "%-16s %6s  (%s)\n", f.name, "skip", reason)
			continue
		}
		total.rounds += res.rounds
		total.counts.add(res.counts)
		total.failover = append(total.failover, res.failover...)
		total.gap = append(total.gap, res.gap...)
		total.converge = append(total.converge, res.converge...)
		total.stepDown = append(total.stepDown, res.stepDown...)
		total.moves += res.moves
		total.movesAlone += res.movesAlone
		fmt.Fprintf(&b, row, f.name, strconv.Itoa(res.rounds), strconv.Itoa(res.counts.puts), strconv.Itoa(res.counts.deletes),
			strconv.Itoa(res.counts.lost), strconv.Itoa(res.counts.resurrected), strconv.Itoa(res.counts.mismatches),
			strconv.Itoa(res.counts.duplicated), strconv.Itoa(res.counts.doubles), overlapCell(res.counts), orderCell(res.counts),
			medMaxN(res.failover), maxOnly(res.gap), maxOnly(res.stepDown), medMax(res.converge), movesCell(res))
		if res.notNow > 0 {
			fmt.Fprintf(&b, "%-16s %6s  (%d rounds not run: %s)\n", "", "", res.notNow, res.skipReason)
		}
	}
	fmt.Fprintf(&b, row, "all", strconv.Itoa(total.rounds), strconv.Itoa(total.counts.puts), strconv.Itoa(total.counts.deletes),
		strconv.Itoa(total.counts.lost), strconv.Itoa(total.counts.resurrected), strconv.Itoa(total.counts.mismatches),
		strconv.Itoa(total.counts.duplicated), strconv.Itoa(total.counts.doubles), overlapCell(total.counts), orderCell(total.counts),
		"", maxOnly(total.gap), maxOnly(total.stepDown), medMax(total.converge), movesCell(&total))
	fmt.Fprintf(&b, "(dup: jobs seen under an id not their put's, one put made two jobs (must be 0);\n"+
		" failover: per group whose leader the fault took, fault to the first put into it acknowledged through another member (n: groups);\n"+
		" gap: the clients' longest time without an acknowledged put in a group whose leader the fault did not take, through the members it did not hit;\n"+
		" step: partition to a cut-off leader no longer leading; converge: workload stopped to equal digests;\n"+
		" moves: replica moves the members began/of them planned by a member alone (must be 0);\n"+
		" overlaps: holdings of a job by two sessions at once, excused by a change of the group's leader/not (must be 0);\n"+
		" order: quiet hand-outs checked/out of order within a group (must be 0)/out of order across groups (reported);\n"+
		" quiet phases not checked (a connection failed): %d; reservations lost on a live connection (delete, release or bury NOT_FOUND): %d;\n"+
		" jobs of puts refused (OUT_OF_MEMORY, INTERNAL_ERROR, DRAINING) (must be 0): %d; wrong replies (must be 0): %d)\n",
		total.counts.quietDisturbed, total.counts.reservationLost, total.counts.refusedDone, total.counts.wrong)
	return b.String()
}

func movesCell(res *results) string { return fmt.Sprintf("%d/%d", res.moves, res.movesAlone) }

// movedAlone is movesMetric's label for a move a member planned alone.
const movedAlone = "self_alone"

// describeMoves names the moves by who planned them.
func describeMoves(moves map[string]uint64) string {
	var total uint64
	for _, n := range moves {
		total += n
	}
	return fmt.Sprintf("%d (%d planned by group 0's leader for itself, %d asked of a group's leader by it, %d planned alone)",
		total, moves["self_leading_group_0"], moves["group_0_leader"], moves[movedAlone])
}

func overlapCell(c counts) string { return fmt.Sprintf("%d/%d", c.overlapsExcused, c.overlapsBad) }

func orderCell(c counts) string {
	return fmt.Sprintf("%d/%d/%d", c.orderChecked, c.orderBad, c.crossInversions)
}

// medMaxN is medMax with the number of samples.
func medMaxN(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%d)", medMax(ds), len(ds))
}

func medMax(ds []time.Duration) string {
	m, ok := median(ds)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%v/%v", m.Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}

// median is the middle of ds, the lower of the two middles of an even
// number; none of none.
func median(ds []time.Duration) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2], true
}

func maxOnly(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return slices.Max(ds).Round(time.Millisecond).String()
}
