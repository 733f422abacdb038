//go:build linux

package clusterfault

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// cluster's failover goal (failoverBound) is asserted.
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
)

// errSkipped is a fault that cannot run here yet; its round is not counted.
var errSkipped = errors.New("clusterfault: skipped")

// fault is one kind of fault. inject does it to the cluster whose
// leader is l, recovers from it (restarts, SIGCONT, heals), and returns
// the failover it measured and, for a partition, how long the cut-off
// leader kept serving.
type fault struct {
	name string
	// leader: the fault takes the leader away, and its failover is held
	// to failoverBound; otherwise it is the gap the clients saw.
	leader bool
	inject func(r *round, l *member) (failover, stepDown time.Duration, err error)
}

var faults = []fault{
	{"kill -9 leader", true, killLeader},
	{"SIGSTOP leader", true, stopLeader},
	{"partition leader", true, partitionLeader},
	{"kill -9 follower", false, killFollower},
	{"empty directory", false, emptyDirectory},
}

// round is what a fault works with.
type round struct {
	t   *testing.T
	c   *cluster
	l   *ledger
	seq *atomic.Uint64
}

// results are a fault kind's figures over its rounds.
type results struct {
	rounds, skipped int
	counts          counts
	failover        []time.Duration
	stepDown        []time.Duration
	converge        []time.Duration
	skipReason      string
}

func runRounds(t *testing.T, bin string, n int) {
	c := newCluster(t, bin)
	started := time.Now()
	c.awaitLeader(leaderWait)
	t.Logf("three members serve, %v after they started", time.Since(started).Round(time.Millisecond))
	r := &round{t: t, c: c, l: newLedger(), seq: new(atomic.Uint64)}
	byKind := map[string]*results{}
	chosen, err := regexp.Compile(*faultFilter)
	if err != nil {
		t.Fatalf("-faults: %v", err)
	}
	for _, f := range faults {
		byKind[f.name] = &results{}
		if !chosen.MatchString(f.name) {
			byKind[f.name].skipped = 1
			byKind[f.name].skipReason = "not chosen by -faults"
		}
	}
	for i, done, idle := 0, 0, 0; done < n; i++ {
		f := faults[i%len(faults)]
		res := byKind[f.name]
		if res.skipped > 0 {
			if idle++; idle > len(faults) {
				t.Fatalf("no fault can run:\n%s", summary(byKind))
			}
			continue // a fault that cannot run here is tried once
		}
		idle = 0
		w := startWorkload(c, r.l, r.seq)
		r.awaitAcks(warmAcks)
		leader := c.awaitLeader(leaderWait)
		failover, stepDown, err := f.inject(r, leader)
		if errors.Is(err, errSkipped) {
			w.halt()
			res.skipped++
			res.skipReason = err.Error()
			t.Logf("fault %q skipped: %v", f.name, err)
			continue
		} else if err != nil {
			w.halt()
			t.Fatalf("round %d (%s): %v", done+1, f.name, err)
		}
		c.awaitLeader(leaderWait)
		r.awaitAcks(warmAcks)
		w.halt()
		quiet := time.Now()
		c.awaitConverged(convergeWait)
		converged := time.Since(quiet)
		r.verify()
		cnt := r.l.take()
		done++
		res.rounds++
		res.counts.add(cnt)
		res.failover = append(res.failover, failover)
		if stepDown > 0 {
			res.stepDown = append(res.stepDown, stepDown)
		}
		res.converge = append(res.converge, converged)
		t.Logf("round %d, %s (leader %s): %d puts, %d deletes acknowledged; lost %d, resurrected %d, mismatched %d, "+
			"double deliveries %d, reservations lost %d; failover %v, step-down %v, converged %v; %d connection errors",
			done, f.name, leader.name, cnt.puts, cnt.deletes, cnt.lost, cnt.resurrected, cnt.mismatches, cnt.doubles,
			cnt.reservationLost, failover.Round(time.Millisecond), stepDown.Round(time.Millisecond),
			converged.Round(time.Millisecond), w.errors.Load())
		if cnt.lost+cnt.resurrected+cnt.mismatches > 0 {
			t.Errorf("round %d (%s): lost %d, resurrected %d, mismatched %d: all must be 0",
				done, f.name, cnt.lost, cnt.resurrected, cnt.mismatches)
		}
		if f.leader && failover > failoverBound {
			t.Errorf("round %d (%s): failover took %v, over %v", done, f.name, failover, failoverBound)
		}
		if stepDown > electionTimeout+time.Second {
			t.Errorf("round %d (%s): the cut-off leader served for %v, more than an election timeout (%v)",
				done, f.name, stepDown, electionTimeout)
		}
	}
	t.Log("summary:\n" + summary(byKind))
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

// probe puts through the members named, a new connection each attempt,
// until one is acknowledged, and returns how long after from it was.
func (r *round) probe(from time.Time, through []*member) time.Duration {
	r.t.Helper()
	acked := make(chan time.Duration, 1)
	var done atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer done.Store(true)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	deadline := time.After(leaderWait)
	for i := 0; ; i++ {
		wg.Add(1)
		go func(m *member) {
			defer wg.Done()
			if took, ok := r.probeOnce(from, m); ok && !done.Swap(true) {
				acked <- took
			}
		}(through[i%len(through)])
		select {
		case took := <-acked:
			return took
		case <-deadline:
			r.t.Fatalf("no member of %v acknowledged a put within %v of the fault", names(through), leaderWait)
		case <-tick.C:
		}
	}
}

// probeOnce puts one job through m on a new connection.
func (r *round) probeOnce(from time.Time, m *member) (time.Duration, bool) {
	d := testproc.Dialer{Timeout: time.Second, Local: probeIP, ReplyTimeout: 2 * time.Second}
	conn, err := d.Dial(m.clientAddr())
	if err != nil {
		return 0, false
	}
	defer conn.Close()
	token := "probe-" + strconv.FormatUint(r.seq.Add(1), 10)
	body := []byte("chaos:" + token + ":after the fault")
	r.l.sending(token, body)
	// Group 0's tube: the faults take group 0's leader away (GET
	// /cluster's leader).
	probed := r.c.tubes[0]
	if err := conn.ExpectLine("use "+probed, "USING "+probed); err != nil {
		return 0, false
	}
	id, err := conn.Put(0, 0, 60, body)
	if err != nil {
		return 0, false
	}
	took := time.Since(from)
	r.l.putAcked(id, token)
	return took, true
}

var probeIP = []byte{127, 0, 0, 130}

func names(ms []*member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.name)
	}
	return out
}

// holdUntil sleeps until at: a fault lasts at least that long.
func holdUntil(at time.Time) { time.Sleep(time.Until(at)) }

func killLeader(r *round, l *member) (time.Duration, time.Duration, error) {
	l.proc.Kill()
	at := time.Now()
	failover := r.probe(at, r.c.others(l))
	holdUntil(at.Add(time.Second))
	r.c.start(l)
	return failover, 0, nil
}

// stopLeader freezes the leader for one and a half election timeouts:
// when it runs again it has lost the leadership, and rebuilds its store.
func stopLeader(r *round, l *member) (time.Duration, time.Duration, error) {
	if err := l.signal(syscall.SIGSTOP); err != nil {
		return 0, 0, err
	}
	at := time.Now()
	failover := r.probe(at, r.c.others(l))
	holdUntil(at.Add(electionTimeout * 3 / 2))
	return failover, 0, l.signal(syscall.SIGCONT)
}

// partitionLeader cuts the leader off from both other members for one
// and a half election timeouts; its clients still reach it. How long it
// kept saying it serves is watched meanwhile (a member that does not
// answer serves nothing).
func partitionLeader(r *round, l *member) (time.Duration, time.Duration, error) {
	r.c.partition(l)
	at := time.Now()
	stepped := make(chan time.Duration, 1)
	go func() {
		for time.Since(at) < leaderWait {
			if st, err := l.status(); err != nil || !st.Serving {
				stepped <- time.Since(at)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		stepped <- leaderWait
	}()
	failover := r.probe(at, r.c.others(l))
	stepDown := <-stepped
	holdUntil(at.Add(electionTimeout * 3 / 2))
	r.c.heal()
	return failover, stepDown, nil
}

// killFollower kills a follower for two seconds; its failover is the gap
// the clients of the others saw, if any.
func killFollower(r *round, l *member) (time.Duration, time.Duration, error) {
	f := r.c.others(l)[0]
	f.proc.Kill()
	at := time.Now()
	gap := r.probe(at, r.c.others(f))
	holdUntil(at.Add(2 * time.Second))
	r.c.start(f)
	return gap, 0, nil
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
// Until the leader's side port serves /cluster/members (any answer but
// 404), the fault is skipped.
func emptyDirectory(r *round, l *member) (time.Duration, time.Duration, error) {
	if r.c.groups > 1 {
		// Replacing a member is a membership change, which a cluster of
		// several groups does not make yet (docs/design/shards.md S7).
		return 0, 0, fmt.Errorf("%w: a cluster of several groups does not replace members yet", errSkipped)
	}
	var list struct {
		Members []struct{ Name, Role string }
	}
	code, err := r.c.admin(l, http.MethodGet, "/cluster/members", "", &list)
	if err != nil {
		return 0, 0, err
	}
	if code == http.StatusNotFound {
		return 0, 0, fmt.Errorf("%w: the side port has no /cluster/members (membership changes are not served yet)", errSkipped)
	}
	f := r.c.others(l)[0]
	f.proc.Kill()
	at := time.Now()
	if err := f.emptyDir(); err != nil {
		return 0, 0, err
	}
	if _, err := r.c.admin(l, http.MethodDelete, "/cluster/members/"+f.name, "", nil); err != nil {
		return 0, 0, err
	}
	gap := r.probe(at, r.c.others(f))
	var added struct{ Join string }
	body := fmt.Sprintf(`{"name":%q,"address":%q}`, f.name, net.JoinHostPort(f.ip(), strconv.Itoa(clusterPort)))
	if _, err := r.c.admin(l, http.MethodPost, "/cluster/members", body, &added); err != nil {
		return 0, 0, err
	}
	if added.Join == "" {
		return 0, 0, errors.New("POST /cluster/members answered no join string")
	}
	f.join = added.Join
	r.c.start(f)
	deadline := time.Now().Add(convergeWait)
	for {
		_, err := r.c.admin(l, http.MethodGet, "/cluster/members", "", &list)
		for _, m := range list.Members {
			if err == nil && m.Name == f.name && m.Role == "voter" {
				return gap, 0, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%s not promoted to voter within %v: %+v (%v)", f.name, convergeWait, list, err)
		}
		r.c.checkAlive()
		time.Sleep(50 * time.Millisecond)
	}
}

// admin sends a request to m's side port with the admin token, decodes a
// 2xx answer's JSON into out (unless nil) and returns the status; any
// other answer but 404 is an error.
func (c *cluster) admin(m *member, method, path, body string, out any) (int, error) {
	req, err := http.NewRequest(method, m.httpBase()+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
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

// verifyBatch is how many peeks go in one pipeline.
const verifyBatch = 1000

// verify checks the queue against the ledger, through the leader: in
// each group, a fence put into the group's tube bounds the group's ids
// (its prefix's, meta.JobID), and every id of the group below it is
// peeked. Found: its body must be one put, and not a deleted job's. Not
// found: it must not be an acknowledged put no delete was sent for.
func (r *round) verify() {
	r.t.Helper()
	l := r.c.awaitLeader(leaderWait)
	conn, err := testproc.Dialer{Timeout: time.Second, Local: probeIP, ReplyTimeout: 30 * time.Second}.Dial(l.clientAddr())
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	for g, tube := range r.c.tubes {
		r.verifyGroup(conn, uint8(g), tube)
	}
}

// verifyGroup is verify of group g, whose tube is tube.
func (r *round) verifyGroup(conn *testproc.Conn, g uint8, tube string) {
	r.t.Helper()
	token := "fence-" + strconv.FormatUint(r.seq.Add(1), 10)
	body := []byte("chaos:" + token + ":")
	r.l.sending(token, body)
	if err := conn.ExpectLine("use "+tube, "USING "+tube); err != nil {
		r.t.Fatal(err)
	}
	fence, err := conn.Put(0, 0, 60, body)
	if err != nil {
		r.t.Fatalf("the fence put into %s: %v", tube, err)
	}
	r.l.putAcked(fence, token)
	first := meta.JobID(g, 1)
	if fence < first || fence>>meta.SeqBits != uint64(g) {
		r.t.Fatalf("the fence put into %s, of group %d, took id %d", tube, g, fence)
	}
	found := map[uint64]bool{}
	for from := first; from < fence; from += verifyBatch {
		var lines []string
		for id := from; id < min(from+verifyBatch, fence); id++ {
			lines = append(lines, "peek "+strconv.FormatUint(id, 10))
		}
		replies, err := conn.Pipeline(lines)
		if err != nil {
			r.t.Fatalf("peeking: %v", err)
		}
		r.l.mu.Lock()
		for _, rep := range replies {
			switch rep.Kind {
			case testproc.ReplyFound:
				found[rep.N] = true
				if r.l.seenLocked(rep.N, rep.Body) {
					r.t.Errorf("job %d: %.60q is resurrected or not what was put", rep.N, rep.Body)
				}
			case testproc.ReplyNotFound:
			default:
				r.t.Fatalf("peek: %q", rep.Line)
			}
		}
		r.l.mu.Unlock()
	}
	r.l.mu.Lock()
	var lost []uint64
	for id := range r.l.puts {
		if id >= first && id < fence && !found[id] && !r.l.deleteSent[id] {
			lost = append(lost, id)
		}
	}
	r.l.counts.lost += len(lost)
	r.l.mu.Unlock()
	if len(lost) > 0 {
		slices.Sort(lost)
		r.t.Errorf("acknowledged puts of group %d lost: %v", g, lost[:min(len(lost), 20)])
	}
	r.l.deleting(fence)
	if err := conn.ExpectLine(fmt.Sprint("delete ", fence), "DELETED"); err != nil {
		r.t.Fatal(err)
	}
	r.l.deleteAcked(fence)
}

// summary is the table make chaos prints.
func summary(byKind map[string]*results) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%-18s %6s %8s %8s %5s %11s %10s %7s %16s %16s %16s\n", "fault", "rounds", "puts", "deletes", "lost",
		"resurrected", "mismatches", "doubles", "failover med/max", "step-down max", "converge med/max")
	var total results
	for _, f := range faults {
		res := byKind[f.name]
		if res.rounds == 0 {
			reason := res.skipReason
			if reason == "" {
				reason = "not reached: too few rounds"
			}
			fmt.Fprintf(&b, "%-18s %6s  (%s)\n", f.name, "skip", reason)
			continue
		}
		total.rounds += res.rounds
		total.counts.add(res.counts)
		total.failover = append(total.failover, res.failover...)
		total.converge = append(total.converge, res.converge...)
		total.stepDown = append(total.stepDown, res.stepDown...)
		fmt.Fprintf(&b, "%-18s %6d %8d %8d %5d %11d %10d %7d %16s %16s %16s\n", f.name, res.rounds, res.counts.puts,
			res.counts.deletes, res.counts.lost, res.counts.resurrected, res.counts.mismatches, res.counts.doubles,
			medMax(res.failover), maxOnly(res.stepDown), medMax(res.converge))
	}
	fmt.Fprintf(&b, "%-18s %6d %8d %8d %5d %11d %10d %7d %16s %16s %16s\n", "all", total.rounds, total.counts.puts,
		total.counts.deletes, total.counts.lost, total.counts.resurrected, total.counts.mismatches, total.counts.doubles,
		"", maxOnly(total.stepDown), medMax(total.converge))
	fmt.Fprintf(&b, "(failover: fault to the first put acknowledged through another member; for a follower, the gap seen;\n"+
		" step-down: partition to the cut-off leader no longer serving; converge: workload stopped to equal digests;\n"+
		" reservations lost on a live connection (delete, release or bury NOT_FOUND): %d)\n", total.counts.reservationLost)
	return b.String()
}

func medMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%v/%v", s[(len(s)-1)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

func maxOnly(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return slices.Max(ds).Round(time.Millisecond).String()
}
