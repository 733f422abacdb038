//go:build linux

package clusterfault

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// The checks of checks_linux_test.go on made-up logs: what they must
// find, and what they must let pass.

// at is a time t milliseconds after an arbitrary start.
func at(ms int) time.Time {
	return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

func TestOverlaps(t *testing.T) {
	// Group 1's leader was seen to change between 5 s and 5.2 s.
	watch := &leaderWatch{changes: map[int][]window{1: {{at(5000), at(5200)}}}}
	hold := func(id uint64, group int, session uint64, sent, start, end int) holding {
		return holding{id: id, group: group, session: session, sent: at(sent), start: at(start), end: at(end)}
	}
	for _, tc := range []struct {
		name         string
		hs           []holding
		excused, bad int
	}{
		{"one after the other", []holding{hold(7, 0, 1, 0, 10, 20), hold(7, 0, 2, 15, 20, 30)}, 0, 0},
		{"at once, no change", []holding{hold(7, 0, 1, 0, 10, 2000), hold(7, 0, 2, 100, 110, 120)}, 0, 1},
		{"at once, received in the other order", []holding{hold(7, 0, 1, 100, 130, 140), hold(7, 0, 2, 0, 120, 2000)}, 0, 1},
		{"across group 1's change", []holding{hold(7, 1, 1, 4000, 4010, 6000), hold(7, 1, 2, 5500, 5600, 5610)}, 1, 0},
		{"across another group's change", []holding{hold(7, 0, 1, 4000, 4010, 6000), hold(7, 0, 2, 5500, 5600, 5610)}, 0, 1},
		{"long after group 1's change", []holding{hold(7, 1, 1, 8000, 8010, 9000), hold(7, 1, 2, 8500, 8600, 8610)}, 0, 1},
		{"just after it, within the slack", []holding{hold(7, 1, 1, 5300, 5310, 9000), hold(7, 1, 2, 5400, 5500, 5510)}, 1, 0},
		{"other jobs", []holding{hold(7, 0, 1, 0, 10, 2000), hold(8, 0, 2, 100, 110, 120)}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			excused, bad := overlaps(tc.hs, watch)
			if excused != tc.excused || len(bad) != tc.bad {
				t.Fatalf("excused %d, bad %d %v; want %d, %d", excused, len(bad), bad, tc.excused, tc.bad)
			}
		})
	}
}

func TestCheckOrder(t *testing.T) {
	out := func(group int, pri uint32, id uint64, sent, got int) handout {
		return handout{holding: holding{id: id, group: group, sent: at(sent), start: at(got)}, key: jobKey{pri, id}}
	}
	for _, tc := range []struct {
		name       string
		hs         []handout
		bad, cross int
	}{
		{"in order", []handout{out(0, 1, 5, 0, 10), out(0, 1, 6, 20, 30), out(0, 2, 3, 40, 50)}, 0, 0},
		{"a priority first, then a more urgent one", []handout{out(0, 2, 5, 0, 10), out(0, 1, 6, 20, 30)}, 1, 0},
		{"equal priorities by id", []handout{out(0, 1, 6, 0, 10), out(0, 1, 5, 20, 30)}, 1, 0},
		// Concurrent reserves: their order at the group is unknown.
		{"overlapping spans", []handout{out(0, 2, 5, 0, 30), out(0, 1, 6, 10, 20)}, 0, 0},
		// Groups are ordered each on its own; across them it is reported.
		{"across groups", []handout{out(0, 2, 5, 0, 10), out(1, 1, 6, 20, 30)}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := checkOrder(tc.hs)
			if f.checked != len(tc.hs) || len(f.violations) != tc.bad || f.crossInversions != tc.cross {
				t.Fatalf("checked %d, violations %v, across groups %d; want %d, %d, %d",
					f.checked, f.violations, f.crossInversions, len(tc.hs), tc.bad, tc.cross)
			}
		})
	}
}

func TestLargestGap(t *testing.T) {
	acks := []ack{
		{at(0), 0, 1}, {at(100), 1, 1}, {at(150), 0, 2}, {at(400), 0, 1},
		{at(500), 1, 2}, {at(700), 0, 2}, {at(900), 1, 1},
	}
	for _, tc := range []struct {
		name    string
		through map[int][]int
		span    window
		gap     time.Duration
		group   int
		from    int
	}{
		{"both groups, every member", map[int][]int{0: {1, 2}, 1: {1, 2}}, window{at(0), at(1000)}, 400 * time.Millisecond, 1, 100},
		{"group 0 through member 2", map[int][]int{0: {2}}, window{at(0), at(1000)}, 550 * time.Millisecond, 0, 150},
		{"to the end of the span", map[int][]int{0: {1, 2}}, window{at(100), at(1500)}, 800 * time.Millisecond, 0, 700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gap, group, from := largestGap(acks, tc.through, tc.span)
			if gap != tc.gap || group != tc.group || !from.Equal(at(tc.from)) {
				t.Fatalf("gap %v in group %d from %v, want %v in group %d from %v", gap, group, from, tc.gap, tc.group, at(tc.from))
			}
		})
	}
}

// put has l note a put of token, its body "chaos:TOKEN:", and returns the
// body: a job the ledger knows.
func put(l *ledger, token string) []byte {
	body := []byte("chaos:" + token + ":")
	l.sending(token, body)
	return body
}

// sighting is a job of token seen under id.
type sighting struct {
	token string
	id    uint64
}

func TestLedgerDuplicated(t *testing.T) {
	for _, tc := range []struct {
		name string
		// acked are the puts acknowledged, token to id; then each of
		// seen is reserved, and last is acknowledged, if not "".
		acked      map[string]uint64
		seen       []sighting
		last       sighting
		duplicated int
	}{
		{"seen under its id", map[string]uint64{"1": 5}, []sighting{{"1", 5}, {"1", 5}}, sighting{}, 0},
		{"seen under a new id", map[string]uint64{"1": 5}, []sighting{{"1", 5}, {"1", 9}}, sighting{}, 1},
		// A put whose reply was lost: its first sighting names its id.
		{"unacknowledged, seen under two ids", nil, []sighting{{"1", 7}, {"1", 7}, {"1", 8}}, sighting{}, 1},
		{"seen, then acknowledged under its id", nil, []sighting{{"1", 7}}, sighting{"1", 7}, 0},
		{"seen, then acknowledged under another id", nil, []sighting{{"1", 7}}, sighting{"1", 8}, 1},
		// verifyDo puts a fence again when its connection breaks.
		{"a fence put twice", map[string]uint64{fencePrefix + "1": 10}, []sighting{{fencePrefix + "1", 11}}, sighting{}, 0},
		{"two puts", map[string]uint64{"1": 5, "2": 6}, []sighting{{"1", 5}, {"2", 6}}, sighting{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger()
			bodies := map[string][]byte{}
			for _, token := range []string{"1", "2", fencePrefix + "1"} {
				bodies[token] = put(l, token)
			}
			for token, id := range tc.acked {
				l.putAcked(id, token)
			}
			for _, s := range tc.seen {
				l.reservedJob(s.id, bodies[s.token], at(0))
			}
			if tc.last.token != "" {
				l.putAcked(tc.last.id, tc.last.token)
			}
			c, bad := l.take()
			if c.duplicated != tc.duplicated || c.mismatches != 0 || c.resurrected != 0 {
				t.Fatalf("duplicated %d, mismatched %d, resurrected %d (%v); want %d, 0, 0",
					c.duplicated, c.mismatches, c.resurrected, bad, tc.duplicated)
			}
		})
	}
}

func TestLedgerLost(t *testing.T) {
	// Jobs 1 to 6 of group 0, put and acknowledged; none is found.
	for _, tc := range []struct {
		name    string
		deletes func(l *ledger) // what was sent and answered
		lost    []uint64
	}{
		{"nothing deleted", func(l *ledger) {}, []uint64{1, 2, 3, 4, 5, 6}},
		{"deletes acknowledged, drained", func(l *ledger) {
			l.deleting(1)
			l.deleteAcked(1)
			l.deleting(2)
			l.drained(2)
		}, []uint64{3, 4, 5, 6}},
		// A delete whose answer never came may have deleted its job.
		{"deletes in doubt", func(l *ledger) {
			l.deleting(3)
			l.deleting(4)
		}, []uint64{1, 2, 5, 6}},
		// NOT_FOUND on the delete's own connection: it deleted nothing;
		// but 6's other delete is in doubt still.
		{"deletes answered NOT_FOUND", func(l *ledger) {
			l.deleting(5)
			l.deleteNotDone(5)
			l.deleting(6)
			l.deleting(6)
			l.deleteNotDone(6)
		}, []uint64{1, 2, 3, 4, 5}},
		{"two deletes, one answered NOT_FOUND, one acknowledged", func(l *ledger) {
			l.deleting(1)
			l.deleting(1)
			l.deleteNotDone(1)
			l.deleteAcked(1)
		}, []uint64{2, 3, 4, 5, 6}},
		{"two deletes, both answered NOT_FOUND", func(l *ledger) {
			l.deleting(1)
			l.deleting(1)
			l.deleteNotDone(1)
			l.deleteNotDone(1)
			l.deleteNotDone(1) // more answers than deletes: still not in doubt
			l.deleting(1)
			l.deleteNotDone(1)
		}, []uint64{1, 2, 3, 4, 5, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger()
			for id := uint64(1); id <= 6; id++ {
				token := fmt.Sprint(id)
				put(l, token)
				l.putAcked(id, token)
			}
			tc.deletes(l)
			l.mu.Lock()
			lost := l.lostLocked(1, 100, map[uint64]bool{})
			l.mu.Unlock()
			if !slices.Equal(lost, tc.lost) {
				t.Fatalf("lost %v, want %v", lost, tc.lost)
			}
			if c, _ := l.take(); c.lost != len(tc.lost) {
				t.Fatalf("counted %d lost, want %d", c.lost, len(tc.lost))
			}
		})
	}
	t.Run("found, or outside the walk", func(t *testing.T) {
		l := newLedger()
		for id := uint64(1); id <= 6; id++ {
			l.putAcked(id, fmt.Sprint(id))
		}
		l.mu.Lock()
		lost := l.lostLocked(2, 6, map[uint64]bool{3: true, 4: true})
		l.mu.Unlock()
		if !slices.Equal(lost, []uint64{2, 5}) {
			t.Fatalf("lost %v, want [2 5]", lost)
		}
	})
}

func TestJudge(t *testing.T) {
	reply := func(line string) testproc.Reply { return testproc.Reply{Line: []byte(line)} }
	timeout := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		cmd, hope string
		rep       testproc.Reply
		err       error
		want      verdict
	}{
		{"put 0 0 60 5", "INSERTED", reply("INSERTED 12"), nil, hoped},
		{"use chaos", "USING chaos", reply("USING chaos"), nil, hoped},
		{"use chaos", "USING chaos", reply("USING chaos-1"), nil, wrong},
		{"kick 1000", "KICKED", reply("KICKED 3"), nil, hoped},
		// No reply: the command may have run.
		{"put 0 0 60 5", "INSERTED", testproc.Reply{}, fmt.Errorf("put: %w", io.EOF), broken},
		{"delete 5", "DELETED", testproc.Reply{}, fmt.Errorf("delete 5: %w", timeout), broken},
		{"reserve-with-timeout 1", "RESERVED", testproc.Reply{}, &testproc.ProtocolError{Want: closedMidLine, Got: "RESER"}, broken},
		// No leader, or a member stopping: refused, not run.
		{"put 0 0 60 5", "INSERTED", reply("OUT_OF_MEMORY"), nil, refused},
		{"put 0 0 60 5", "INSERTED", reply("INTERNAL_ERROR"), nil, refused},
		{"put 0 0 60 5", "INSERTED", reply("DRAINING"), nil, refused},
		{"delete 5", "DELETED", reply("INTERNAL_ERROR"), nil, refused},
		{"release 5 1 0", "RELEASED", reply("OUT_OF_MEMORY"), nil, refused},
		{"kick 1000", "KICKED", reply("INTERNAL_ERROR"), nil, refused},
		{"delete 5", "DELETED", reply("DRAINING"), nil, wrong},
		// A reserve that got no job.
		{"reserve-with-timeout 1", "RESERVED", reply("TIMED_OUT"), nil, waited},
		{"reserve-with-timeout 0", "RESERVED", reply("DEADLINE_SOON"), nil, waited},
		{"put 0 0 60 5", "INSERTED", reply("TIMED_OUT"), nil, wrong},
		// NOT_FOUND: a job not held, to the commands by id that need it.
		{"delete 5", "DELETED", reply("NOT_FOUND"), nil, notFound},
		{"release 5 1 0", "RELEASED", reply("NOT_FOUND"), nil, notFound},
		{"bury 5 1", "BURIED", reply("NOT_FOUND"), nil, notFound},
		{"touch 5", "TOUCHED", reply("NOT_FOUND"), nil, notFound},
		{"put 0 0 60 5", "INSERTED", reply("NOT_FOUND"), nil, wrong},
		{"reserve-with-timeout 1", "RESERVED", reply("NOT_FOUND"), nil, wrong},
		// Anything else is a server bug.
		{"put 0 0 60 5", "INSERTED", reply("BAD_FORMAT"), nil, wrong},
		{"delete 5", "DELETED", reply("UNKNOWN_COMMAND"), nil, wrong},
		{"delete 5", "DELETED", reply("DELETEDX"), nil, wrong},
		{"release 5 1 0", "RELEASED", reply("BURIED"), nil, wrong},
		{"put 0 0 60 5", "INSERTED", reply("INSERTED x"), &testproc.ProtocolError{Want: "a number", Got: "INSERTED x"}, wrong},
		{"reserve-with-timeout 1", "RESERVED", testproc.Reply{}, &testproc.ProtocolError{Want: "a body ending in CRLF", Got: "xy"}, wrong},
	} {
		if got := judge(tc.cmd, tc.hope, tc.rep, tc.err); got != tc.want {
			t.Errorf("%s answered %q (%v), hoping for %s: judged %d, want %d", tc.cmd, tc.rep.Line, tc.err, tc.hope, got, tc.want)
		}
	}
}

func TestLedgerRefused(t *testing.T) {
	l := newLedger()
	refusedBody, otherBody := put(l, "1"), put(l, "2")
	l.putRefused("1", "OUT_OF_MEMORY")
	l.reservedJob(7, otherBody, at(0))
	if c, bad := l.take(); c.refusedDone != 0 {
		t.Fatalf("a put not refused seen: done though refused %d (%v), want 0", c.refusedDone, bad)
	}
	l.reservedJob(8, refusedBody, at(0))
	if c, bad := l.take(); c.refusedDone != 1 || len(bad) != 1 {
		t.Fatalf("a refused put seen: done though refused %d (%v), want 1", c.refusedDone, bad)
	}
	l.wrongReply("delete 5 through m1: \"BAD_FORMAT\"")
	if c, bad := l.take(); c.wrong != 1 || len(bad) != 1 {
		t.Fatalf("wrong replies %d (%v), want 1", c.wrong, bad)
	}
}

func TestNeverRan(t *testing.T) {
	// ran: the faults that ran; tried: those that had turns and did not.
	byKind := func(ran []string, tried map[string]string) map[string]*results {
		out := map[string]*results{}
		for _, f := range faults {
			out[f.name] = &results{}
		}
		for _, name := range ran {
			out[name].rounds, out[name].turns = 1, 1
		}
		for name, why := range tried {
			out[name].turns, out[name].skipReason = 2, why
		}
		return out
	}
	var all []string
	for _, f := range faults {
		all = append(all, f.name)
	}
	every := regexp.MustCompile("")
	for _, tc := range []struct {
		name               string
		byKind             map[string]*results
		chosen             *regexp.Regexp
		groups, rounds     int
		missed, notReached int
	}{
		{"every fault ran", byKind(all, nil), every, 5, 7, 0, 0},
		{"one group: no tube move", byKind(slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == "tube move" }),
			map[string]string{"tube move": "one group"}), every, 1, 7, 0, 0},
		{"several groups: the tube move skipped", byKind(slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == "tube move" }),
			map[string]string{"tube move": "skipped"}), every, 5, 7, 1, 0},
		{"a fault never placed for", byKind(all[:3], map[string]string{all[3]: "every member leads a group"}),
			regexp.MustCompile("leader|partition|follower"), 5, 20, 1, 0},
		{"too few rounds", byKind(all[:6], nil), every, 5, 6, 0, 1},
		{"not chosen", byKind(all[:1], nil), regexp.MustCompile("^kill -9 leader$"), 5, 3, 0, 0},
		{"one turn, not run", func() map[string]*results {
			out := byKind(all[:6], nil)
			out[all[6]].turns, out[all[6]].skipReason = 1, "not now"
			return out
		}(), every, 5, 7, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			missed, notReached := neverRan(tc.byKind, tc.chosen, tc.groups, tc.rounds)
			if len(missed) != tc.missed || len(notReached) != tc.notReached {
				t.Fatalf("missed %v, not reached %v; want %d, %d", missed, notReached, tc.missed, tc.notReached)
			}
		})
	}
}

func TestSlowFailovers(t *testing.T) {
	ms := func(ds ...int) []time.Duration {
		var out []time.Duration
		for _, d := range ds {
			out = append(out, time.Duration(d)*time.Millisecond)
		}
		return out
	}
	byKind := map[string]*results{}
	for _, f := range faults {
		byKind[f.name] = &results{}
	}
	byKind["kill -9 leader"].failover = ms(1100, 2900, 1200, 1000, 1300)   // median 1.2 s: one slow group is no fault
	byKind["SIGSTOP leader"].failover = ms(1600, 1400, 1700, 1600, 1300)   // median 1.6 s
	byKind["partition"].failover = ms(1400, 1600, 1300, 1600, 1500, 1600)  // the lower middle: 1.5 s
	byKind["graceful restart"].failover = ms(1500, 1500, 1500, 1500, 1500) // on the bound
	byKind["kill -9 follower"].failover = ms(2000, 2000)                   // too few to hold to the median
	slow := slowFailovers(byKind)
	if len(slow) != 1 || !strings.HasPrefix(slow[0], "SIGSTOP leader:") {
		t.Fatalf("slow failovers %q, want SIGSTOP leader's only", slow)
	}
}

func TestLacking(t *testing.T) {
	// Five members, group 0 on all, groups 1 and 2 on three each, every
	// group led by m1, whose view is the layout's.
	c := &cluster{groups: 3, replicas: 3}
	for i := 1; i <= 5; i++ {
		c.members = append(c.members, &member{index: i, name: fmt.Sprintf("m%d", i)})
	}
	m1 := c.members[0]
	all := []string{"m1", "m2", "m3", "m4", "m5"}
	lay := func(groups ...replication.GroupStatus) layout {
		l := layout{status: map[*member]replication.Status{m1: {Groups: groups}}, leaders: map[int]*member{}}
		for _, g := range groups {
			l.leaders[g.ID] = m1
		}
		return l
	}
	group := func(id int, replicas []string, learners ...string) replication.GroupStatus {
		return replication.GroupStatus{ID: id, Leader: "m1", Held: true, Replicas: replicas, Learners: learners}
	}
	for _, tc := range []struct {
		name  string
		l     layout
		whole bool
	}{
		{"whole", lay(group(0, all), group(1, all[:3]), group(2, all[2:])), true},
		{"group 0 short of a member", lay(group(0, all[1:]), group(1, all[:3]), group(2, all[2:])), false},
		{"a group short of a replica", lay(group(0, all), group(1, all[:2]), group(2, all[2:])), false},
		{"a learner", lay(group(0, all), group(1, all[:3], "m4"), group(2, all[2:])), false},
		{"no leader of a group", lay(group(0, all), group(1, all[:3])), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if lacking := c.lacking(tc.l); (lacking == "") != tc.whole {
				t.Fatalf("lacking %q, want whole %v", lacking, tc.whole)
			}
		})
	}
	// m1 and m2 hold three replicas each, m4 one (the members are not
	// up here: only those holding one count).
	c.groups = 4
	uneven := lay(group(0, all), group(1, all[:3]), group(2, all[:3]), group(3, []string{"m1", "m2", "m4"}))
	if lacking := c.lacking(uneven); lacking == "" {
		t.Fatal("replicas held unevenly: whole")
	}
}

func TestAlreadyIn(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		g    int
		want bool
	}{
		{`tube "chaos" lives in group 2 already`, 2, true},
		{`tube "chaos" lives in group 2 already`, 3, false},
		{`tube "chaos" lives in group 12 already`, 2, false},
		{`tube move: prefix "chaos" is placed in group 1 already`, 1, true},
		{`tube move: prefix "chaos" is placed in group 1 already`, 0, false},
		// A move under way: where the tube ends is not known yet.
		{`tube move: tube "chaos" is moving already`, 2, false},
		{`tube "chaos" is moving in or out of group 2 already`, 2, false},
		{`tube move: the placement of prefix "chaos" in group 2 is under way`, 2, false},
	} {
		if got := alreadyIn(errors.New(tc.msg), tc.g); got != tc.want {
			t.Errorf("%q, group %d: %v, want %v", tc.msg, tc.g, got, tc.want)
		}
	}
	if alreadyIn(nil, 0) {
		t.Error("no error: already in")
	}
}
