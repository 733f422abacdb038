package container

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/sproutmq/sprout/deploy/internal/render"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// failoverBound is how soon after the leader's pod is killed a put must
// be acknowledged again through a member that survived: "within a few
// seconds", the cluster's failover requirement. An election takes 1 to
// 2 s; the rest is room for a loaded machine.
const failoverBound = 10 * time.Second

// clusterStatus is GET /cluster on a member's http port.
func clusterStatus(ops string) (replication.Status, error) {
	var st replication.Status
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + ops + "/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /cluster: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// waitLeader polls /cluster on the members until every one of them names
// the same leader, one of them, and passes /readyz; it returns the
// leader's index in members.
func waitLeader(t *testing.T, members []shard, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		leader, agreed := "", true
		for _, m := range members {
			st, err := clusterStatus(m.ops)
			switch {
			case err != nil:
				last, agreed = fmt.Sprintf("%s: %v", m.member, err), false
			case st.Leader == "" || leader != "" && st.Leader != leader:
				last, agreed = fmt.Sprintf("%s sees leader %q (term %d)", m.member, st.Leader, st.Term), false
			case status(m.ops, "/readyz") != http.StatusOK:
				last, agreed = m.member+": /readyz not 200", false
			default:
				leader = st.Leader
			}
		}
		if agreed {
			for i, m := range members {
				if m.member == leader {
					return i
				}
			}
			t.Fatalf("the members agree on leader %q, none of them", leader)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no leader all of %d members agree on and ready within %v: %s", len(members), timeout, last)
	return -1
}

// producer puts jobs through a member until stopped, reconnecting when
// its connection is closed or a put fails (as when the leader changes or
// drains), to the next of addrs as a Service would pick another ready
// pod, and keeps every acknowledged job's id and body.
type producer struct {
	addrs []string
	stop  chan struct{}
	done  chan struct{}

	mu    sync.Mutex
	acked map[uint64]string // guarded by mu
	puts  []put             // guarded by mu: the acknowledged puts, in order
	errs  int               // guarded by mu: puts that failed (not acknowledged)
}

func startProducer(addrs ...string) *producer {
	p := &producer{addrs: addrs, stop: make(chan struct{}), done: make(chan struct{}), acked: make(map[uint64]string)}
	go p.run()
	return p
}

func (p *producer) run() {
	defer close(p.done)
	var conn *beanstalk.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	next := 0
	for n := 0; ; n++ {
		select {
		case <-p.stop:
			return
		default:
		}
		if conn == nil {
			c, err := beanstalk.Dial("tcp", p.addrs[next%len(p.addrs)])
			next++
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			conn = c
		}
		body := fmt.Sprintf("job %d", n)
		sent := time.Now()
		id, err := conn.Put([]byte(body), 100, 0, time.Minute)
		p.mu.Lock()
		if err != nil {
			p.errs++
		} else {
			p.acked[id] = body
			p.puts = append(p.puts, put{sent: sent, acked: time.Now()})
		}
		p.mu.Unlock()
		if err != nil {
			conn.Close()
			conn = nil
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// put is when an acknowledged put was sent, and acknowledged.
type put struct{ sent, acked time.Time }

// sentSince is how many puts sent after t were acknowledged, and when the
// first was.
func (p *producer) sentSince(t time.Time) (int, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, first := 0, time.Time{}
	for _, put := range p.puts {
		if put.sent.After(t) {
			if n == 0 {
				first = put.acked
			}
			n++
		}
	}
	return n, first
}

func (p *producer) finish() (map[uint64]string, int) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked, p.errs
}

// TestClusterFailover plays deploy/k8s with components/cluster as the
// StatefulSet controller would make its three pods, waits until the
// members agree on a leader, puts jobs through a member that does not
// lead (its proxy carries them to the leader), kills the leader's pod
// with SIGKILL while the puts go on, and requires a put acknowledged
// again through the surviving member within failoverBound and every
// acknowledged job on the new leader. The killed pod is then started
// again on its claim and must rejoin: ready, following the new leader.
func TestClusterFailover(t *testing.T) {
	needPodman(t)
	sts := clusterStatefulSet(t)
	t0 := time.Now()
	members := playStatefulSet(t, sts, int(*sts.Spec.Replicas), nil)
	lead := waitLeader(t, members, 60*time.Second)
	t.Logf("%d pods played, %s leads, all ready in %v", len(members), members[lead].member, time.Since(t0).Round(time.Millisecond))

	via := members[(lead+1)%len(members)] // survives the kill
	p := startProducer(via.queue)
	testproc.WaitFor(t, 30*time.Second, "puts acknowledged through "+via.member, func() bool {
		n, _ := p.sentSince(t0)
		return n >= 50
	})

	ids := podContainers(t, members[lead])
	kill := time.Now()
	must(t, "pod", "kill", members[lead].pod)
	killed := time.Now() // a put sent from now on needs a new leader
	var first time.Time
	testproc.WaitFor(t, failoverBound, "a put acknowledged through "+via.member+" after the leader's pod was killed", func() bool {
		var n int
		n, first = p.sentSince(killed)
		return n > 0
	})
	testproc.WaitFor(t, 30*time.Second, "more puts after the failover", func() bool {
		n, _ := p.sentSince(killed)
		return n >= 20
	})
	acked, failed := p.finish()
	t.Logf("leader's pod killed (podman pod kill took %v); the first put sent after it was acknowledged through %s %v after the kill began; %d puts acknowledged, %d not (retried)",
		killed.Sub(kill).Round(time.Millisecond), via.member, first.Sub(kill).Round(time.Millisecond), len(acked), failed)

	survivors := append(append([]shard{}, members[:lead]...), members[lead+1:]...)
	newLead := survivors[waitLeader(t, survivors, 30*time.Second)]
	t.Logf("%s leads now", newLead.member)
	checkJobs(t, newLead.queue, acked)
	st, err := clusterStatus(newLead.ops)
	if err != nil {
		t.Fatal(err)
	}

	// The killed pod comes back on its claim and catches up: it applies
	// everything committed so far.
	back := members[lead]
	t1 := time.Now()
	startStopped(t, back, ids)
	waitLeader(t, members, 60*time.Second)
	testproc.WaitFor(t, 30*time.Second, back.member+" applying the commit index "+strconv.FormatUint(st.Commit, 10), func() bool {
		mine, err := clusterStatus(back.ops)
		return err == nil && mine.Applied >= st.Commit
	})
	t.Logf("%s restarted, ready and caught up in %v", back.member, time.Since(t1).Round(time.Millisecond))
	checkJobs(t, back.queue, acked)
}

// checkJobs peeks every acknowledged job through addr, a member's client
// port, and compares its body.
func checkJobs(t *testing.T, addr string, acked map[uint64]string) {
	t.Helper()
	conn, err := beanstalk.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lost := 0
	for id, want := range acked {
		body, err := conn.Peek(id)
		if err != nil || string(body) != want {
			if lost++; lost <= 5 {
				t.Errorf("acknowledged job %d (%q): peek through %s = %q, %v", id, want, addr, body, err)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged jobs lost", lost, len(acked))
	}
	stats, err := conn.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(stats["current-jobs-ready"]); n < len(acked) {
		t.Errorf("current-jobs-ready = %d; %d jobs were acknowledged", n, len(acked))
	}
}

// maxGap is the longest time between two acknowledged puts sent after t.
func (p *producer) maxGap(t time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gap time.Duration
	last := t
	for _, put := range p.puts {
		if put.sent.After(t) {
			gap = max(gap, put.acked.Sub(last))
			last = put.acked
		}
	}
	return gap
}

// TestClusterRollout replaces the members one at a time, as a
// StatefulSet's rolling update does (highest ordinal first, the next once
// the last is ready again): each pod is stopped with SIGTERM and the
// StatefulSet's grace period, must exit 0, and is started again on its
// claim. A producer puts through whichever member answers, as through the
// Service; every acknowledged job must survive the rollout, and the
// longest pause between acknowledged puts is logged.
func TestClusterRollout(t *testing.T) {
	needPodman(t)
	sts := clusterStatefulSet(t)
	members := playStatefulSet(t, sts, int(*sts.Spec.Replicas), nil)
	waitLeader(t, members, 60*time.Second)

	var addrs []string
	for _, m := range members {
		addrs = append(addrs, m.queue)
	}
	t0 := time.Now()
	p := startProducer(addrs...)
	grace := strconv.Itoa(int(*sts.Spec.Template.Spec.TerminationGracePeriodSeconds))
	for i := len(members) - 1; i >= 0; i-- {
		m := members[i]
		before, _ := p.sentSince(t0)
		st, err := clusterStatus(m.ops)
		if err != nil {
			t.Fatal(err)
		}
		ids := podContainers(t, m)
		t1 := time.Now()
		must(t, "pod", "stop", "-t", grace, m.pod)
		stopped := time.Since(t1)
		if code := must(t, "inspect", "-f", "{{.State.ExitCode}}", m.container); code != "0" {
			t.Errorf("%s exited %s on SIGTERM; want 0", m.member, code)
		}
		startStopped(t, m, ids)
		waitLeader(t, members, 60*time.Second)
		testproc.WaitFor(t, 30*time.Second, "puts after "+m.member+" was replaced", func() bool {
			n, _ := p.sentSince(t0)
			return n >= before+20
		})
		t.Logf("%s (%s) stopped in %v, replaced and ready %v after the stop began",
			m.member, st.State, stopped.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	gap := p.maxGap(t0)
	acked, failed := p.finish()
	t.Logf("rollout of %d members: %d puts acknowledged, %d not (retried); longest pause between acknowledged puts %v",
		len(members), len(acked), failed, gap.Round(time.Millisecond))
	checkJobs(t, members[0].queue, acked)
}

// clusterStatefulSet is deploy/k8s with components/cluster's StatefulSet
// (and other components', paths relative to deploy/container), rendered as
// a user's overlay would and strictly decoded.
func clusterStatefulSet(t *testing.T, components ...string) *appsv1.StatefulSet {
	t.Helper()
	docs, err := render.Overlay("../k8s", append([]string{"../k8s/components/cluster"}, components...)...)
	if err != nil {
		t.Fatal(err)
	}
	sts, err := render.StatefulSetOf(docs)
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// TestClusterGroups plays components/cluster-groups: five members formed
// with five shard groups of three replicas each. Every group gets a
// leader, and each member comes to lead one; a producer puts into a tube of each group through one member;
// the pod of another member, one that leads a group, is killed; a put
// into each tube is then acknowledged again through the producer's member
// within failoverBound, and every acknowledged job is there.
func TestClusterGroups(t *testing.T) {
	needPodman(t)
	sts := clusterStatefulSet(t, "../k8s/components/cluster-groups")
	t0 := time.Now()
	members := playStatefulSet(t, sts, int(*sts.Spec.Replicas), nil)
	var names []meta.Member
	for _, m := range members {
		names = append(names, meta.Member{Name: m.member, ID: replication.MemberID(m.member)})
	}
	placement, err := meta.Formation(names, 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	leaders := groupLeaders(t, members, len(placement.Groups), 90*time.Second)
	t.Logf("%d pods played, the groups' leaders %v, in %v", len(members), leaders, time.Since(t0).Round(time.Millisecond))
	// The members hand leaderships over until each leads one.
	testproc.WaitFor(t, 60*time.Second, "each member leading one group", func() bool {
		leaders = groupLeaders(t, members, len(placement.Groups), 10*time.Second)
		distinct := map[string]bool{}
		for _, l := range leaders {
			distinct[l] = true
		}
		return len(distinct) == len(members)
	})
	t.Logf("balanced in %v: %v", time.Since(t0).Round(time.Millisecond), leaders)

	via := members[0]
	var victim shard
	for _, m := range members[1:] {
		if slices.Contains(slices.Collect(maps.Values(leaders)), m.member) {
			victim = m
			break
		}
	}
	if victim.pod == "" {
		t.Fatalf("sprout-0 leads every group: %v", leaders)
	}
	tubes := make([]string, len(placement.Groups))
	for i := 0; slices.Contains(tubes, ""); i++ {
		if name := fmt.Sprintf("g%d", i); tubes[placement.Owner(name)] == "" {
			tubes[placement.Owner(name)] = name
		}
	}
	conn, err := beanstalk.Dial("tcp", via.queue)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { conn.Close() }()
	acked := map[uint64]string{}
	put := func(tube, body string) error {
		id, err := beanstalk.NewTube(conn, tube).Put([]byte(body), 0, 0, time.Minute)
		if err == nil {
			acked[id] = body
		}
		return err
	}
	for _, tube := range tubes {
		for i := range 5 {
			if err := put(tube, fmt.Sprintf("%s %d", tube, i)); err != nil {
				t.Fatalf("put into %s through %s: %v", tube, via.member, err)
			}
		}
	}
	must(t, "pod", "kill", victim.pod)
	killed := time.Now()
	for _, tube := range tubes {
		testproc.WaitFor(t, failoverBound-time.Since(killed), "a put into "+tube+" after "+victim.member+" was killed", func() bool {
			if err := put(tube, tube+" after"); err != nil {
				conn.Close()
				if conn, err = beanstalk.Dial("tcp", via.queue); err != nil {
					t.Fatalf("%s closed, and dialling it again: %v", via.member, err)
				}
				return false
			}
			return true
		})
	}
	t.Logf("%s killed; a put into every group's tube acknowledged again through %s within %v", victim.member, via.member, time.Since(killed).Round(time.Millisecond))
	checkJobs(t, via.queue, acked)
}

// groupLeaders polls the members' /cluster until each of the groups has
// a leader in some member's view, and returns them by group.
func groupLeaders(t *testing.T, members []shard, groups int, timeout time.Duration) map[int]string {
	t.Helper()
	leaders := map[int]string{}
	testproc.WaitFor(t, timeout, fmt.Sprintf("a leader for each of %d groups", groups), func() bool {
		clear(leaders)
		for _, m := range members {
			st, err := clusterStatus(m.ops)
			if err != nil {
				continue
			}
			for _, g := range st.Groups {
				if g.Leader != "" {
					leaders[g.ID] = g.Leader
				}
			}
		}
		return len(leaders) == groups
	})
	return leaders
}
