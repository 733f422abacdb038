package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
)

// A cluster of several groups growing and shrinking while it serves
// (docs/design/shards.md S7, KindGrow): the members added receive
// replicas, the members removed give theirs away first.
const (
	// growSettle is how long the traffic runs before the first member is
	// added: its rate then is the baseline.
	growSettle = 5 * time.Second
	// growTimeout bounds each phase: the replicas spread over the members
	// added, or the members removed gone.
	growTimeout = 3 * time.Minute
	// growWindow is the span over which the traffic's rate is read; the
	// lowest such rate during the phases is reported.
	growWindow = time.Second
	// growPoll is how often the members' views are read.
	growPoll = 200 * time.Millisecond
	// growPairs is the traffic: producer and consumer pairs, each on a
	// tube of its own (the tubes spread over the groups), through the
	// first members in turn, which stay.
	growPairs = 30
)

// Grow is KindGrow's figures.
type Grow struct {
	// Added and Removed are how many members were added, then removed.
	Added, Removed int
	// GrowTime runs from the first addition to the replicas spread: every
	// group with its voters and no learner, and the members holding
	// replicas of groups but 0 within one of each other. ShrinkTime runs
	// from the removals asked to the last member removed gone.
	GrowTime, ShrinkTime time.Duration
	// BaselineJobsPerSec is the traffic's rate before the first addition;
	// LowestJobsPerSec the lowest over any growWindow from then to the
	// end; JobsPerSec the rate over the phases.
	BaselineJobsPerSec, LowestJobsPerSec, JobsPerSec float64
}

// runGrow runs traffic through the first members of c while it adds
// s.Kills members (their replicas spreading to them), then removes them
// (draining them first), timing both and reading the traffic's rate.
func (s Scenario) runGrow(ctx context.Context, c *Cluster, prog *Progress) (Result, error) {
	res := Result{Server: c.spec.Name}
	g := &Grow{}
	res.Grow = g
	first := slices.Clone(c.members)
	var done atomic.Int64
	traffic, err := startGrowTraffic(first)
	if err != nil {
		return res, err
	}
	defer traffic.stop()
	prog.Begin(growSettle+2*growTimeout, done.Load)
	defer prog.End()
	if sleepCtx(ctx, growSettle, nil) {
		return res, ctx.Err()
	}
	before := traffic.jobs.Load()
	g.BaselineJobsPerSec = float64(before) / growSettle.Seconds()
	watch := traffic.watchRate(growWindow)
	start := time.Now()

	var added []*member
	for range s.Kills {
		m, join, err := c.addMember(ctx, first[0])
		if err != nil {
			return res, err
		}
		if err := c.startJoining(m, join); err != nil {
			return res, err
		}
		added = append(added, m)
		g.Added++
		// One membership change at a time: the next waits for this one's
		// promotion.
		if err := c.awaitVoter(ctx, first[0], m, time.Now().Add(growTimeout)); err != nil {
			return res, fmt.Errorf("%w; %s; its last output:\n%s\n%s's last lines on members and replicas:\n%s",
				err, c.membersAsSeen(ctx, first[0]), outputTail(m.proc), first[0].name, membershipLines(first[0].proc, 20))
		}
	}
	if err := c.awaitSpread(ctx, s.Replicas, time.Now().Add(growTimeout)); err != nil {
		return res, fmt.Errorf("load: after adding %d members: %w; %s%s", len(added), err,
			c.membersAsSeen(ctx, first[0]), c.plannerLines(ctx, first[0]))
	}
	g.GrowTime = time.Since(start)
	done.Add(1)

	shrink := time.Now()
	for _, m := range added {
		if err := c.removeMember(ctx, first[0], m); err != nil {
			return res, err
		}
	}
	for _, m := range added {
		for !m.proc.Exited() {
			if time.Since(shrink) > growTimeout {
				return res, fmt.Errorf("load: member %s, removed, still runs after %v; %s; the traffic: %v; its last output:\n%s\n%s's last lines on members and replicas:\n%s",
					m.name, growTimeout, c.membersAsSeen(ctx, first[0]), traffic.err(), outputTail(m.proc), first[0].name, membershipLines(first[0].proc, 12))
			}
			if sleepCtx(ctx, growPoll, nil) {
				return res, ctx.Err()
			}
		}
		g.Removed++
		// Gone as asked (exit status 12): not a member that died.
		c.members = slices.DeleteFunc(c.members, func(o *member) bool { return o == m })
	}
	g.ShrinkTime = time.Since(shrink)
	if err := c.awaitSpread(ctx, s.Replicas, time.Now().Add(growTimeout)); err != nil {
		return res, fmt.Errorf("load: after removing %d members: %w", len(added), err)
	}
	elapsed := time.Since(start)
	g.LowestJobsPerSec = watch()
	jobs := traffic.jobs.Load() - before
	g.JobsPerSec = float64(jobs) / elapsed.Seconds()
	res.Jobs, res.Elapsed = jobs, elapsed
	res.Sent, res.Acked = traffic.jobs.Load(), traffic.jobs.Load()
	if err := traffic.stop(); err != nil {
		// A client's connection that ended: its member's leaderships, as
		// a lost one closes the sessions waiting for its log.
		var lines strings.Builder
		for _, m := range first {
			fmt.Fprintf(&lines, "\n%s (exited %v), its last lines on leaderships and closes:\n%s",
				m.name, m.proc.Exited(), leadershipLines(m.proc, 30))
		}
		return res, fmt.Errorf("load: the traffic: %w%s", err, lines.String())
	}
	return res, nil
}

// membersAsSeen is via's GET /cluster in a line: group 0's state there,
// the members with their roles and draining flags, and the groups with
// their leaders and replicas: what a removal that did not end left.
func (c *Cluster) membersAsSeen(ctx context.Context, via *member) string {
	st, err := c.status(ctx, via)
	if err != nil {
		return fmt.Sprintf("%s's view: %v", via.name, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s's view (group 0: %s, serving %v, term %d): members", via.name, st.State, st.Serving, st.Term)
	for _, ms := range st.Members {
		fmt.Fprintf(&b, " %s(%s", ms.Name, ms.Role)
		if ms.Protocol != 0 {
			fmt.Fprintf(&b, ", protocol %d", ms.Protocol)
		}
		if ms.Draining {
			b.WriteString(", draining")
		}
		if !ms.Connected {
			b.WriteString(", not connected")
		}
		b.WriteString(")")
	}
	for _, gs := range st.Groups {
		fmt.Fprintf(&b, ", group %d led by %q: %v learners %v", gs.ID, gs.Leader, gs.Replicas, gs.Learners)
	}
	return b.String()
}

// membershipLines are the last n lines of p's output about members,
// replicas and leaderships: what a removal goes through.
func membershipLines(p *testproc.Process, n int) string {
	return lastLines(p, n, func(line string) bool {
		return strings.Contains(line, "member") && (strings.Contains(line, "remov") || strings.Contains(line, "drain")) ||
			strings.Contains(line, "replica") || strings.Contains(line, "balance")
	})
}

// leadershipLines are the last n lines of p's output about leaderships,
// handovers, rebuilds and closes.
func leadershipLines(p *testproc.Process, n int) string {
	return lastLines(p, n, func(line string) bool {
		return strings.Contains(line, "leader") || strings.Contains(line, "hand") ||
			strings.Contains(line, "rebuil") || strings.Contains(line, "clos")
	})
}

// lastLines are the last n lines of p's output that keep picks, trimmed.
func lastLines(p *testproc.Process, n int, keep func(line string) bool) string {
	var picked []string
	for line := range strings.Lines(p.Output()) {
		if keep(line) {
			picked = append(picked, strings.TrimSpace(line))
		}
	}
	return strings.Join(picked[max(0, len(picked)-n):], "\n")
}

// plannerLines are the membership lines of via and of group 0's leader
// as via sees it, the member that plans the replicas' moves, with that
// leader's view.
func (c *Cluster) plannerLines(ctx context.Context, via *member) string {
	shown := []*member{via}
	if st, err := c.status(ctx, via); err == nil {
		i := slices.IndexFunc(st.Groups, func(gs replication.GroupStatus) bool { return gs.ID == 0 })
		for _, m := range c.up() {
			if i >= 0 && m.name == st.Groups[i].Leader && m != via {
				shown = append(shown, m)
			}
		}
	}
	var b strings.Builder
	for _, m := range shown {
		if m != via {
			// Its view, as near as GET /cluster shows what it plans
			// on: a group it sees no leader of, or with a learner,
			// holds every move back.
			fmt.Fprintf(&b, "\n%s", c.membersAsSeen(ctx, m))
		}
		fmt.Fprintf(&b, "\n%s's last lines on members and replicas:\n%s", m.name, membershipLines(m.proc, 20))
	}
	return b.String()
}

// awaitVoter waits until via lists m as a voter.
func (c *Cluster) awaitVoter(ctx context.Context, via, m *member, deadline time.Time) error {
	for time.Now().Before(deadline) {
		st, err := c.status(ctx, via)
		if err == nil && slices.ContainsFunc(st.Members, func(ms replication.MemberStatus) bool {
			return ms.Name == m.name && ms.Role == "voter"
		}) {
			return nil
		}
		if sleepCtx(ctx, growPoll, nil) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("load: member %s not a voter in time", m.name)
}

// removeMember asks to remove m (DELETE /cluster/members on via): a
// member holding replicas is drained first (202), then removed. A 503 (no
// leader of group 0 for now, or its leadership moved under the request)
// is asked again, as an operator would, until growTimeout.
func (c *Cluster) removeMember(ctx context.Context, via, m *member) error {
	deadline := time.Now().Add(growTimeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+via.httpAddr+"/cluster/members/"+m.name, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+catchUpToken)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return fmt.Errorf("load: removing member %s: %w; %s; %s's last lines on members and replicas:\n%s",
				m.name, err, c.membersAsSeen(ctx, via), via.name, membershipLines(via.proc, 12))
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline):
			return fmt.Errorf("load: removing member %s: %s %s", m.name, resp.Status, bytes.TrimSpace(body))
		}
		if sleepCtx(ctx, growPoll, nil) {
			return ctx.Err()
		}
	}
}

// awaitSpread waits until the members up agree that every group has a
// leader, its groups but 0 have replicas voters and no learner, and the
// members hold replicas of groups but 0 within one of each other.
func (c *Cluster) awaitSpread(ctx context.Context, replicas int, deadline time.Time) error {
	last := "no answer"
	for time.Now().Before(deadline) {
		if last = c.spread(ctx, replicas); last == "" {
			return nil
		}
		if sleepCtx(ctx, growPoll, nil) {
			return ctx.Err()
		}
	}
	return errors.New("the replicas did not spread in time: " + last)
}

// spread says why the replicas are not spread yet, "" once they are
// (awaitSpread): each group as its leader lists it.
func (c *Cluster) spread(ctx context.Context, replicas int) string {
	held := map[string]int{}
	groups := map[int][]string{}
	learners := 0
	for _, m := range c.up() {
		st, err := c.status(ctx, m)
		if err != nil {
			return err.Error()
		}
		held[m.name] += 0
		for _, gs := range st.Groups {
			if gs.Leader != m.name {
				continue
			}
			groups[gs.ID] = gs.Replicas
			learners += len(gs.Learners)
		}
	}
	lo, hi := -1, 0
	for id, rs := range groups {
		if id > 0 && len(rs) != replicas {
			return fmt.Sprintf("group %d has voters %v", id, rs)
		}
		for _, r := range rs {
			if id > 0 {
				held[r]++
			}
		}
	}
	for _, n := range held {
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	switch {
	case learners > 0:
		return fmt.Sprintf("%d learners", learners)
	case hi-lo > 1:
		return fmt.Sprintf("replicas held %v", held)
	}
	return ""
}

// pairTraffic is producer/consumer pairs, each putting a job into its
// tube and reserving and deleting one, until stop, counting the jobs
// deleted: KindGrow's traffic and KindMove's.
type pairTraffic struct {
	jobs atomic.Int64
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	// note, if set, is told of each put acknowledged (reserved false) and
	// each job reserved, with its pair's tube: immutable.
	note func(tube string, reserved bool)
	// redial, if set, has a pair whose connection broke dial again and go
	// on, counted in reconnects, as a client library does when a member
	// closes a session whose command's outcome it cannot tell
	// (docs/design/shards.md 5.1); else that ends the traffic with an
	// error. Immutable.
	redial     bool
	reconnects atomic.Int64
	mu         sync.Mutex
	first      error
}

// pair is one producer/consumer pair: its tube, and the members its
// producer and its consumer connect to.
type pair struct {
	tube       string
	prod, cons *member
}

// startPairs starts pairs, telling note (if set) of their puts and
// reserves; with redial, a pair whose connection broke dials again.
func startPairs(pairs []pair, note func(tube string, reserved bool), redial bool) (*pairTraffic, error) {
	t := &pairTraffic{quit: make(chan struct{}), note: note, redial: redial}
	for _, p := range pairs {
		prod, cons, err := p.dial()
		if err != nil {
			t.stop()
			return nil, err
		}
		t.wg.Go(func() { t.pair(p, prod, cons) })
	}
	return t, nil
}

// dial connects p's producer, using its tube, and its consumer,
// watching it.
func (p pair) dial() (prod, cons *testproc.Conn, err error) {
	if prod, err = testproc.Dial(p.prod.proc.Addr(), 10*time.Second); err != nil {
		return nil, nil, err
	}
	if cons, err = testproc.Dial(p.cons.proc.Addr(), 10*time.Second); err != nil {
		prod.Close()
		return nil, nil, err
	}
	if err = prod.ExpectLine("use "+p.tube, "USING "+p.tube); err == nil {
		err = cons.ExpectLine("watch "+p.tube, "WATCHING 2")
	}
	if err != nil {
		prod.Close()
		cons.Close()
		return nil, nil, err
	}
	return prod, cons, nil
}

// startGrowTraffic starts growPairs pairs through members in turn, each
// on a tube of its own.
func startGrowTraffic(members []*member) (*pairTraffic, error) {
	pairs := make([]pair, growPairs)
	for i := range pairs {
		m := members[i%len(members)]
		pairs[i] = pair{tube: fmt.Sprintf("grow-%d", i), prod: m, cons: m}
	}
	return startPairs(pairs, nil, false)
}

// pair puts a job into p's tube and reserves and deletes one, until
// quit. With redial, a connection broken is dialled again, and a reserve
// that times out is no error: a put whose answer the break lost may not
// have been made, and the tube's pairs then hold one job fewer.
func (t *pairTraffic) pair(p pair, prod, cons *testproc.Conn) {
	defer func() {
		prod.Close()
		cons.Close()
	}()
	fail := func(err error) {
		t.mu.Lock()
		if t.first == nil {
			t.first = fmt.Errorf("tube %s: %w", p.tube, err)
		}
		t.mu.Unlock()
	}
	// broken dials again after err, if it broke the connection and the
	// traffic redials, and reports whether the pair goes on.
	broken := func(err error) bool {
		var netErr net.Error
		if !t.redial || !errors.Is(err, io.EOF) && !errors.As(err, &netErr) {
			fail(err)
			return false
		}
		prod.Close()
		cons.Close()
		for deadline := time.Now().Add(pairRedialWait); ; time.Sleep(100 * time.Millisecond) {
			select {
			case <-t.quit:
				return false
			default:
			}
			if np, nc, derr := p.dial(); derr == nil {
				prod, cons = np, nc
				t.reconnects.Add(1)
				return true
			} else if time.Now().After(deadline) {
				fail(fmt.Errorf("%w; dialling again: %w", err, derr))
				return false
			}
		}
	}
	for {
		select {
		case <-t.quit:
			return
		default:
		}
		if _, err := prod.Put(0, 0, 60, []byte("job")); err != nil {
			if broken(err) {
				continue
			}
			return
		}
		if t.note != nil {
			t.note(p.tube, false)
		}
		r, err := cons.Do("reserve-with-timeout 5", nil)
		switch {
		case err != nil:
			if broken(err) {
				continue
			}
			return
		case r.Kind == testproc.ReplyTimedOut && t.redial:
			continue
		case r.Kind != testproc.ReplyReserved:
			fail(fmt.Errorf("reserve: %+v", r))
			return
		}
		if t.note != nil {
			t.note(p.tube, true)
		}
		if err := cons.ExpectLine(fmt.Sprintf("delete %d", r.N), "DELETED"); err != nil {
			if broken(err) {
				continue
			}
			return
		}
		t.jobs.Add(1)
	}
}

// pairRedialWait bounds a broken pair's dialling again.
const pairRedialWait = 30 * time.Second

// watchRate samples the jobs done every window from now on; the func it
// returns stops it and gives the lowest rate seen over a window.
func (t *pairTraffic) watchRate(window time.Duration) func() float64 {
	stop := make(chan struct{})
	lowest := make(chan float64, 1)
	go func() {
		tick := time.NewTicker(window)
		defer tick.Stop()
		low, last := -1.0, t.jobs.Load()
		for {
			select {
			case <-stop:
				lowest <- max(low, 0)
				return
			case <-tick.C:
				now := t.jobs.Load()
				if rate := float64(now-last) / window.Seconds(); low < 0 || rate < low {
					low = rate
				}
				last = now
			}
		}
	}()
	return func() float64 {
		close(stop)
		return <-lowest
	}
}

// stop ends the pairs and returns the first error one met.
func (t *pairTraffic) stop() error {
	t.once.Do(func() { close(t.quit) })
	t.wg.Wait()
	return t.err()
}

// err is the first error of a pair so far.
func (t *pairTraffic) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first
}
