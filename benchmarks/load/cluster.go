package load

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/internal/testproc/procstat"
)

// Through names the members whose client ports a cluster scenario's
// connections use.
type Through string

// The members a cluster scenario's clients may connect to. ThroughAll
// spreads them over every member's client port in turn (dialTarget):
// producers and consumers alike, so a producer and the consumers that
// take its jobs are on different members in general.
const (
	ThroughLeader   Through = "leader"
	ThroughFollower Through = "follower"
	ThroughAll      Through = "all"
)

const (
	// clusterSettleTimeout bounds the wait for fresh members to elect a
	// leader that serves and all agree on (an election timeout is 1 to 2 s;
	// a loaded machine stretches the start), and for a restarted member to
	// catch up.
	clusterSettleTimeout = 20 * time.Second
	// failoverTimeout bounds one failover: past it the run fails. The
	// goal for the worst is 3 s.
	failoverTimeout = 10 * time.Second
	// failoverTry bounds each put of the failover probe: a member's proxy
	// holds a connection up to an election timeout while it knows no
	// leader, and a put to a member that has one is answered at once.
	failoverTry = time.Second
	// statusTimeout bounds one GET /cluster.
	statusTimeout = 2 * time.Second
)

// NodePlaceholder in a server's flags (ServerSpec.Args, from -sprout-args)
// becomes each member's name, so that, for example, each writes its own
// --cpu-profile.
const NodePlaceholder = "{node}"

// member is one process of a Cluster. Only the run's goroutine touches it.
type member struct {
	name     string
	peerAddr string // --cluster-listen
	httpAddr string // --http
	dir      string // -b, kept across restarts
	proc     *testproc.Process
}

// Cluster is a few Sprout members on loopback, started fresh for one run.
// Only the run's goroutine uses it.
type Cluster struct {
	spec    ServerSpec
	extra   []string // the scenario's flags, after each member's own
	peers   string   // --cluster-peers
	root    string   // holds every member's -b directory; removed by Stop
	members []*member
	http    *http.Client
}

// StartCluster starts n members of spec with extra flags after their own
// and returns once each accepts connections (its proxy holds them until a
// leader is known: see awaitSettled). A server that exits with status 5
// at start yields ErrFlagsRefused.
func StartCluster(spec ServerSpec, n int, extra []string) (*Cluster, error) {
	root, err := os.MkdirTemp("", "sproutbench-"+spec.Name+"-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{spec: spec, extra: extra, root: root, http: &http.Client{Timeout: statusTimeout}}
	for i := 1; i <= n; i++ {
		m := &member{name: fmt.Sprintf("m%d", i), dir: filepath.Join(root, fmt.Sprintf("m%d", i))}
		if err := os.Mkdir(m.dir, 0o700); err != nil {
			c.Stop()
			return nil, err
		}
		for _, addr := range []*string{&m.peerAddr, &m.httpAddr} {
			port, err := testproc.FreePort()
			if err != nil {
				c.Stop()
				return nil, err
			}
			*addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		c.members = append(c.members, m)
	}
	c.peers = peerList(c.members)
	for _, m := range c.members {
		if err := c.start(m); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// peerList is members as --cluster-peers takes them.
func peerList(members []*member) string {
	peers := make([]string, len(members))
	for i, m := range members {
		peers[i] = m.name + "=" + m.peerAddr
	}
	return strings.Join(peers, ",")
}

// start starts m, again if it ran before, on a new client port and the
// same directory and member addresses.
func (c *Cluster) start(m *member) error {
	var args []string
	for _, a := range c.spec.Args {
		args = append(args, strings.ReplaceAll(a, NodePlaceholder, m.name))
	}
	args = append(args, "--http", m.httpAddr, "-b", m.dir, "--node", m.name,
		"--cluster-listen", m.peerAddr, "--cluster-peers", c.peers)
	args = append(args, c.extra...)
	limit := 1 << 20
	if c.spec.MemberLogs != "" {
		limit = memberLogLimit
	}
	p, err := testproc.Launch(testproc.Config{
		Binary:       c.spec.Path,
		Args:         args,
		StartTimeout: startTimeout,
		OutputLimit:  limit,
	})
	var se *testproc.StartError
	switch {
	case err == nil:
	case !errors.As(err, &se):
		return fmt.Errorf("load: start %s member %s: %w", c.spec.Name, m.name, err)
	case se.Exited && se.Process.ExitCode() == 5:
		return fmt.Errorf("%w: %s %s: %s", ErrFlagsRefused, c.spec.Name, se.Process, outputTail(se.Process))
	default:
		return fmt.Errorf("load: %s member %s did not start: %w", c.spec.Name, m.name, err)
	}
	m.proc = p
	if len(c.spec.CPUs) > 0 {
		return PinProcess(p.PID(), c.spec.CPUs)
	}
	return nil
}

// Stop ends every member by its PID (SIGTERM, then SIGKILL after
// stopGrace; all at once) and removes their directories, having written
// their output into the spec's MemberLogs, if set, each to a file named
// by the cluster's directory and the member.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		if m.proc != nil {
			wg.Go(func() { m.proc.Stop(stopGrace) })
		}
	}
	wg.Wait()
	if dir := c.spec.MemberLogs; dir != "" && os.MkdirAll(dir, 0o755) == nil {
		for _, m := range c.members {
			if m.proc != nil {
				_ = os.WriteFile(filepath.Join(dir, filepath.Base(c.root)+"-"+m.name+".log"), []byte(m.proc.Output()), 0o644)
			}
		}
	}
	_ = os.RemoveAll(c.root)
}

// memberLogLimit bounds the output kept of a member for MemberLogs.
const memberLogLimit = 64 << 20

// status is m's GET /cluster.
func (c *Cluster) status(ctx context.Context, m *member) (replication.Status, error) {
	var st replication.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.httpAddr+"/cluster", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s's /cluster: %s", m.name, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// metric reads one unlabelled figure from m's /metrics.
func (c *Cluster) metric(ctx context.Context, m *member, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.httpAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("load: %s's /metrics has no %s", m.name, name)
}

// up lists the members running.
func (c *Cluster) up() []*member {
	var up []*member
	for _, m := range c.members {
		if m.proc != nil && !m.proc.Exited() {
			up = append(up, m)
		}
	}
	return up
}

// others are the members running but m.
func (c *Cluster) others(m *member) []*member {
	return slices.DeleteFunc(c.up(), func(o *member) bool { return o == m })
}

// awaitSettled waits until every member runs, one serves, every member
// names it leader, has applied what the leader had committed when asked,
// and is finalized; it returns the leader.
func (c *Cluster) awaitSettled(ctx context.Context, timeout time.Duration) (*member, error) {
	deadline := time.Now().Add(timeout)
	for {
		leader, why := c.settled(ctx)
		if leader != nil {
			return leader, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("load: the cluster did not settle on a leader within %v: %s", timeout, why)
		}
		sleepCtx(ctx, 20*time.Millisecond, nil)
	}
}

// settled is one round of awaitSettled's checks: the leader, or why not.
func (c *Cluster) settled(ctx context.Context) (*member, string) {
	if up := c.up(); len(up) < len(c.members) {
		why := fmt.Sprintf("%d of %d members running", len(up), len(c.members))
		for _, m := range c.members {
			if m.proc != nil && m.proc.Exited() {
				why += fmt.Sprintf("; %s exited (%s): %s", m.name, m.proc, outputTail(m.proc))
			}
		}
		return nil, why
	}
	sts := make([]replication.Status, len(c.members))
	var leader *member
	var commit uint64
	for i, m := range c.members {
		st, err := c.status(ctx, m)
		if err != nil {
			return nil, err.Error()
		}
		sts[i] = st
		if st.Serving {
			leader, commit = m, st.Commit
		}
	}
	if leader == nil {
		return nil, "no member serves"
	}
	for i, st := range sts {
		if st.Leader != leader.name || st.Applied < commit {
			return nil, fmt.Sprintf("%s names leader %q and has applied %d of %d", c.members[i].name, st.Leader, st.Applied, commit)
		}
		// A release that finalizes its cluster (cluster_version 3; older
		// ones report none) serves its clients differently before: the
		// load starts once it has.
		if st.Version == 2 {
			return nil, c.members[i].name + " not finalized yet (cluster_version 2)"
		}
	}
	if why := balanced(sts); why != "" {
		return nil, why
	}
	return leader, ""
}

// balanced says why the shard groups' leaders, as the members' statuses
// name them, are not settled yet: a group without one, or a member
// leading more than its share (members hand over leaderships until each
// leads about G/M, docs/design/shards.md 1.5); "" once they are. A
// leadership handed over during a run would be measured as a failover.
func balanced(sts []replication.Status) string {
	leaders := map[int]string{}
	for _, st := range sts {
		for _, g := range st.Groups {
			if _, ok := leaders[g.ID]; !ok || g.Leader != "" {
				leaders[g.ID] = g.Leader
			}
		}
	}
	if len(leaders) < 2 {
		return ""
	}
	share := (len(leaders) + len(sts) - 1) / len(sts)
	led := map[string]int{}
	for id, name := range leaders {
		if name == "" {
			return fmt.Sprintf("group %d has no leader", id)
		}
		if led[name]++; led[name] > share {
			return fmt.Sprintf("%s leads more than %d of the %d groups: the leaders are being balanced", name, share, len(leaders))
		}
	}
	return ""
}

// errNoLeader is leaderNow's nil, as an error.
var errNoLeader = fmt.Errorf("load: no member serves within %v", clusterSettleTimeout)

// leaderNow is the member serving now, as its own /metrics says
// (sprout_cluster_serving),
// or nil if none says so within clusterSettleTimeout (a loaded member may
// be slow to answer, and an election takes a second or two).
func (c *Cluster) leaderNow(ctx context.Context) *member {
	deadline := time.Now().Add(clusterSettleTimeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		for _, m := range c.up() {
			if v, err := c.metric(ctx, m, "sprout_cluster_serving"); err == nil && v == 1 {
				return m
			}
		}
		sleepCtx(ctx, 20*time.Millisecond, nil)
	}
	return nil
}

// server is the cluster seen as one server whose clients connect to
// through, or to each of members in turn when through is nil: its CPU
// and memory are those of members, in that order.
func (c *Cluster) server(through *member, members []*member) *Server {
	if through != nil {
		return &Server{Spec: c.spec, Addr: through.proc.Addr(), PID: through.proc.PID(), members: members}
	}
	srv := &Server{Spec: c.spec, Addr: members[0].proc.Addr(), PID: members[0].proc.PID(), members: members}
	for _, m := range members {
		srv.spread = append(srv.spread, m.proc.Addr())
	}
	return srv
}

// memberUsage reads each member's /proc figures, in c.members order.
func memberUsage(members []*member) ([]procstat.Usage, error) {
	us := make([]procstat.Usage, len(members))
	for i, m := range members {
		u, err := procstat.Read(m.proc.PID())
		if err != nil {
			return nil, fmt.Errorf("load: member %s: %w", m.name, err)
		}
		us[i] = u
	}
	return us, nil
}

// sumUsage adds up the members' figures.
func sumUsage(us []procstat.Usage) procstat.Usage {
	var sum procstat.Usage
	for _, u := range us {
		sum.CPU += u.CPU
		sum.RSS += u.RSS
		sum.PeakRSS += u.PeakRSS
		sum.Threads += u.Threads
	}
	return sum
}

// MemberUsage is what one member of a cluster spent during a run.
type MemberUsage struct {
	Name    string
	Role    Through       // at the start of the run: ThroughLeader or ThroughFollower
	Clients bool          `json:",omitempty"` // some of the run's connections went to this member
	CPU     time.Duration // user+system CPU while measuring
	RSS     int64         // at the end of the run, bytes
	Idle    int64         `json:",omitempty"` // idle client connections it held beside the run (Scenario.Idle)
}

// holdIdle has each of members hold its share of n idle client
// connections, each share opened by a holder process of its own (the
// open-file limit is per process), and returns once every member counts
// its share: what each holds, and what ends them.
func holdIdle(ctx context.Context, members []*member, n int, prog *Progress) (held []int64, stop func(), err error) {
	label := prog.SetLabel("")
	defer prog.SetLabel(label)
	prog.SetLabel(fmt.Sprintf("%s  opening %s idle connections over %d members", label, FormatThousands(float64(n)), len(members)))
	holders := make([]*holder, len(members))
	stop = func() {
		for _, h := range holders {
			if h != nil {
				h.stop()
			}
		}
	}
	ctls := make([]*testproc.Conn, len(members))
	defer func() {
		for _, c := range ctls {
			if c != nil {
				c.Close()
			}
		}
	}()
	base := make([]int64, len(members))
	for i, m := range members {
		if ctls[i], err = (testproc.Dialer{Timeout: 5 * time.Second}).Dial(m.proc.Addr()); err != nil {
			return nil, stop, err
		}
		_ = ctls[i].SetDeadline(time.Now().Add(3 * memoryTimeout))
		if base[i], err = statInt(ctls[i], "stats", "current-connections"); err != nil {
			return nil, stop, err
		}
	}
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { holders[i], errs[i] = startHolder(ctx, m.proc.Addr(), n/len(members)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, stop, err
	}
	held = make([]int64, len(members))
	for i, h := range holders {
		held[i] = h.held
		if err := waitConnections(ctx, ctls[i], base[i]+h.held); err != nil {
			return nil, stop, fmt.Errorf("load: member %s: %w", members[i].name, err)
		}
	}
	return held, stop, nil
}

// runCluster starts a cluster of s.Members fresh for s, waits for it to
// settle, runs s through the leader or a follower (or kills leaders, for
// KindFailover), and stops every member.
func (p Plan) runCluster(ctx context.Context, s Scenario, spec ServerSpec) Result {
	res := Result{Server: spec.Name}
	if runtime.GOOS != "linux" {
		// The members' CPU and memory, summed, are the point, and they
		// come from /proc.
		res.Skipped = "skipped: cluster runs need Linux"
		return res
	}
	args := append(s.argsFor(""), s.shardFlags()...)
	if s.Kind == KindCatchUp || s.Kind == KindGrow || s.Kind == KindMove || s.Kind == KindGrowGroups {
		// Adding a member is a change: the admin API takes it only with
		// the token.
		args = append(args, "--admin-token", catchUpToken)
	}
	c, err := StartCluster(spec, s.Members, args)
	if errors.Is(err, ErrFlagsRefused) {
		res.Skipped = "skipped: no cluster mode"
		if shard := s.shardFlags(); len(shard) > 0 {
			// The refusal may be of either: the cluster's own flags
			// (beanstalkd) or these (a Sprout from before the sharded
			// cluster, for which they are unknown).
			res.Skipped += " with " + strings.Join(flagNames(shard), " ")
		}
		return res
	}
	if err != nil {
		res.Errors, res.FirstError = 1, err.Error()
		return res
	}
	defer c.Stop()
	leader, err := c.awaitSettled(ctx, clusterSettleTimeout)
	if err != nil {
		res.Errors, res.FirstError = 1, err.Error()
		return res
	}
	var r Result
	switch s.Kind {
	case KindFailover:
		r, err = s.runFailover(ctx, c, p.Progress)
	case KindCatchUp:
		r, err = s.runCatchUp(ctx, c, leader, p.Run, p.Progress)
	case KindRebuild:
		r, err = s.runRebuild(ctx, c, leader, p.Progress)
	case KindGrow:
		r, err = s.runGrow(ctx, c, p.Progress)
	case KindMove:
		r, err = s.runMove(ctx, c, p.Progress)
	case KindGrowGroups:
		r, err = s.runGrowGroups(ctx, c, p.Progress)
	default:
		// The leader first in the report, then the followers.
		order := append([]*member{leader}, c.others(leader)...)
		through := leader
		switch {
		case s.Through == ThroughAll:
			through = nil
		case s.Through == ThroughFollower && len(order) > 1:
			through = order[1]
		}
		var held []int64
		if s.Idle > 0 {
			var stop func()
			held, stop, err = holdIdle(ctx, order, s.Idle, p.Progress)
			defer stop()
		}
		if err == nil {
			traffic := s
			traffic.Idle = 0 // held above, by the members
			r, err = traffic.Run(ctx, c.server(through, order), p.Run, p.Progress)
		}
		for i := range r.Members {
			r.Members[i].Role = ThroughFollower
			if i < len(held) {
				r.Members[i].Idle = held[i]
			}
		}
		if len(r.Members) > 0 {
			r.Members[0].Role = ThroughLeader
		}
		if err == nil && ctx.Err() == nil {
			if now := c.leaderNow(ctx); now != leader {
				err = fmt.Errorf("load: the leadership moved during the run, from %s to %s", leader.name, nameOf(now))
			}
		}
	}
	for _, m := range c.members {
		if m.proc == nil {
			continue
		}
		if m.proc.Exited() && err == nil && ctx.Err() == nil {
			err = fmt.Errorf("load: %s member %s exited during the run (%v): %s", spec.Name, m.name, m.proc.Err(), outputTail(m.proc))
		}
		if report := m.proc.RaceReport(); report != "" && err == nil {
			err = fmt.Errorf("load: %s member %s reported a data race:\n%s", spec.Name, m.name, report)
		}
	}
	r.addError(ctx, err)
	r.Server = spec.Name
	return r
}

// shardFlags are the sharded cluster's flags s sets (Groups, Replicas),
// for every member; none when they are zero.
func (s Scenario) shardFlags() []string {
	var args []string
	if s.Groups > 0 {
		args = append(args, "--cluster-groups", strconv.Itoa(s.Groups))
	}
	if s.Replicas > 0 {
		args = append(args, "--cluster-replicas", strconv.Itoa(s.Replicas))
	}
	return args
}

// runFailover kills the serving leader s.Kills times (SIGKILL, by PID)
// and times each failover: from the kill to the first put acknowledged
// through a surviving member. The killed member is restarted on its
// directory, and the cluster settles again, before the next kill.
func (s Scenario) runFailover(ctx context.Context, c *Cluster, prog *Progress) (Result, error) {
	res := Result{Server: c.spec.Name}
	var done atomic.Int64 // failovers timed, for the progress display's goroutine
	prog.Begin(time.Duration(s.Kills)*4*time.Second, done.Load)
	defer prog.End()
	for range s.Kills {
		leader, err := c.awaitSettled(ctx, clusterSettleTimeout)
		if err != nil {
			return res, err
		}
		// From the signal on, as cmd/sprout's tests time it: Kill waits
		// until the process is gone.
		lost := time.Now()
		leader.proc.Kill()
		acked, err := putThrough(ctx, c.others(leader), lost.Add(failoverTimeout))
		if err != nil {
			return res, fmt.Errorf("load: after killing leader %s: %w", leader.name, err)
		}
		res.Failovers = append(res.Failovers, acked.Sub(lost))
		done.Add(1)
		res.Sent++
		res.Acked++
		if err := c.start(leader); err != nil {
			return res, err
		}
	}
	_, err := c.awaitSettled(ctx, clusterSettleTimeout)
	return res, err
}

// putThrough puts a job through members in turn, each time on a new
// connection, until one acknowledges it or deadline passes; it returns
// when the acknowledgement came.
func putThrough(ctx context.Context, members []*member, deadline time.Time) (time.Time, error) {
	if len(members) == 0 {
		return time.Time{}, errors.New("no member running")
	}
	var last error
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		m := members[i%len(members)]
		conn, err := testproc.Dial(m.proc.Addr(), min(failoverTry, time.Until(deadline)))
		if err == nil {
			_, err = conn.Put(0, 0, 60, []byte("failover"))
			conn.Close()
			if err == nil {
				return time.Now(), nil
			}
		}
		last = err
		sleepCtx(ctx, 10*time.Millisecond, nil)
	}
	if ctx.Err() != nil {
		return time.Time{}, ctx.Err()
	}
	return time.Time{}, fmt.Errorf("no surviving member acknowledged a put within %v: %v", failoverTimeout, last)
}
