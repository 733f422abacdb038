package load

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/internal/testproc/procstat"
)

// Kind is the shape of a scenario's traffic.
type Kind int

const (
	// KindProdCons runs Conns producer connections, each putting one job
	// and waiting for INSERTED, and Conns consumer connections, each
	// reserving and deleting. At most backlogPerConn×Conns jobs are
	// outstanding, so the queue stays short and every put is consumed.
	KindProdCons Kind = iota
	// KindPutOnly runs Conns connections that put, one job at a time.
	KindPutOnly
	// KindDrain fills the tube with Prefill jobs (not timed), then runs
	// Conns connections that reserve-with-timeout 0 and delete until the
	// tube is empty or the time is up.
	KindDrain
	// KindPipelined runs Conns connections that write Depth puts at once,
	// then read Depth replies.
	KindPipelined
	// KindRoundTrip runs Conns connections that put, reserve and delete in
	// turn, timing the whole round trip.
	KindRoundTrip
	// KindIdle opens Conns connections (0: as many as the open-file limit
	// allows) that send nothing, and measures the server's resident memory
	// per connection.
	KindIdle
	// KindJobMemory puts Jobs jobs of Body bytes with pipelined puts and
	// measures the server's resident memory per stored job.
	KindJobMemory
	// KindFailover kills a cluster's serving leader Kills times and
	// measures each failover (runFailover); it needs Members.
	KindFailover
	// KindCatchUp puts Jobs jobs of Body bytes into a cluster of Members,
	// then adds a member and times its catch-up by snapshot, with round
	// trips through the leader meanwhile (runCatchUp).
	KindCatchUp
	// KindRebuild puts Jobs jobs of Body bytes into a cluster of Members,
	// then stops the serving leader (SIGSTOP) past an election timeout
	// Kills times; each time it resumes, it has lost its leadership and
	// rebuilds its store in place, and the time it reports for that
	// (sprout_cluster_last_rebuild_seconds) is taken (runRebuild).
	KindRebuild
	// KindGrow runs traffic through a cluster of Members with Groups
	// shard groups while Kills members are added, then removed: the
	// time until the replicas have spread over the members added, and
	// until the members removed have given theirs away and gone, and the
	// traffic's lowest rate meanwhile (runGrow).
	KindGrow
	// KindMove runs traffic through a cluster of Members with Groups
	// shard groups, some of it on one tube that moves to the next group
	// Kills times: the longest the tube's puts and reserves wait, and
	// what each move reports (runMove).
	KindMove
	// KindGrowGroups runs traffic through a cluster of Members with
	// Groups shard groups, a tube each pair, while the groups grow to
	// Kills × Groups: the growth's time, the longest the tubes it moved
	// went without a put or a reserve, and what it reports
	// (runGrowGroups).
	KindGrowGroups
)

// backlogPerConn bounds KindProdCons's outstanding jobs per producer.
const backlogPerConn = 10

// Scenario is one workload, run the same way against each server.
type Scenario struct {
	Name  string // short, unique; -only matches it
	Title string // for people
	Kind  Kind
	Conns int // connections; for KindProdCons, producers (and as many consumers)
	Body  int // job body size in bytes
	Depth int // KindPipelined: puts per batch
	// Tubes spreads KindProdCons and KindPutOnly over this many tubes: each
	// producer sends use before every put, cycling through its share of the
	// tubes (KindPutOnly's, with a share of one tube, uses it once before
	// timing), and each consumer watches the same share. 0 uses the default
	// tube without use.
	Tubes int
	// ReserveTimeout, when positive, has KindProdCons's consumers send
	// reserve-with-timeout of that many seconds instead of reserve, and
	// reserve again after TIMED_OUT, as many clients' workers do.
	ReserveTimeout int `json:",omitempty"`
	Prefill        int // KindDrain: jobs put before timing starts
	Jobs           int // KindJobMemory: jobs to store
	// Stored, for a timed scenario, is how many jobs are put (pipelined,
	// not timed) before timing starts and left beside the traffic: half
	// ready in StoredTube, which no consumer watches, half delayed by an
	// hour or more in the tube the traffic uses. See setUpBeside. For
	// KindMove, the moving tube's backlog, delayed an hour, of Body bytes.
	Stored int
	// Idle, for a timed scenario, is how many connections are opened
	// before timing starts and held, silent, beside the traffic; fewer
	// when the open-file limit does not allow so many.
	Idle int
	// ServerArgs are extra server flags; "{dir}" becomes a fresh empty
	// directory for the run.
	ServerArgs []string
	// Members, when positive, runs the scenario against a cluster of that
	// many members of the server, each with its own -b directory (see
	// Cluster), and Through says whose client port the traffic uses: the
	// leader's, a follower's, or every member's in turn (ThroughAll).
	Members int
	Through Through `json:",omitempty"`
	// Groups and Replicas are for the sharded cluster (docs/design/shards.md):
	// when positive, each member is started with --cluster-groups Groups
	// and --cluster-replicas Replicas. Zero passes no flag, so the members
	// run the server's own defaults (today's cluster: one group on every
	// member).
	Groups   int `json:",omitempty"`
	Replicas int `json:",omitempty"`
	// Kills is KindFailover's number of leaders killed, KindRebuild's of
	// leaders stopped, KindGrow's of members added, and KindMove's of
	// moves.
	Kills int `json:",omitempty"`
	// Reps, when positive, runs the scenario in the first Reps
	// repetitions only.
	Reps int `json:",omitempty"`
	// Full marks scenarios that only the long run (-full) includes.
	Full bool
	// TLS sends the traffic over TLS (tls.go): to the server's own TLS
	// port where it has one (ServerSpec.NativeTLS), else through stunnel.
	TLS bool `json:",omitempty"`
}

// Timed says what one latency sample of the scenario covers.
func (s Scenario) Timed() string {
	switch s.Kind {
	case KindProdCons:
		if s.Tubes > 0 {
			return "each command: use+put (pipelined pair), reserve, delete"
		}
		return "each command: put, reserve, delete"
	case KindPutOnly:
		if s.Tubes > s.Conns {
			return "each use+put (pipelined pair)"
		}
		return "each put"
	case KindDrain:
		return "each command: reserve-with-timeout 0, delete"
	case KindPipelined:
		return "each put, from flushing its batch to reading its reply"
	case KindRoundTrip:
		return "put → reserve → delete, the whole round trip"
	case KindFailover:
		return "from kill -9 of the leader to the first put acknowledged through another member"
	case KindCatchUp:
		return "a new member's catch-up; put → reserve → delete through the leader meanwhile"
	case KindRebuild:
		return "a stopped leader's rebuild in place, from its lost leadership to following again"
	case KindGrow:
		return "members added, then removed: until the replicas have spread, and until the members removed have gone"
	case KindMove:
		return "a tube moved from group to group: the longest its puts and reserves waited"
	}
	return "—"
}

// Timed reports whether the scenario runs for a duration and yields jobs/s
// and latency; the memory and failover scenarios do not.
func (s Scenario) timed() bool {
	return s.Kind != KindIdle && s.Kind != KindJobMemory && s.Kind != KindFailover && s.Kind != KindCatchUp && s.Kind != KindRebuild &&
		s.Kind != KindGrow && s.Kind != KindMove
}

// RunConfig bounds one run.
type RunConfig struct {
	Warmup   time.Duration // before measuring starts
	Duration time.Duration // measured time
	MaxPuts  int64         // puts one run may write; 0 means 50 million
	// FileLimit is the open-file limit of the generator (and so of the
	// servers it starts); KindIdle stays below it.
	FileLimit int
}

// Result is what one run of a scenario against one server measured.
type Result struct {
	Server  string
	Skipped string // non-empty when the run could not happen, with why

	Jobs    int64         // jobs completed while measuring
	Elapsed time.Duration // measured time
	// Latency holds every sample taken while measuring; P50, P99 and P999
	// are read from it when the run ends (and alone survive JSON).
	Latency        *hdrhistogram.Histogram `json:"-"`
	Samples        int64
	P50, P99, P999 time.Duration
	CPU            time.Duration // server user+system CPU while measuring
	RSS            int64         // server resident memory at the end, bytes
	// GenCPU is the load generator's CPU time while measuring, and OtherCPU
	// the rest of the machine's busy time: work that shared the machine
	// with the run and makes its figures noisier.
	GenCPU, OtherCPU time.Duration

	// Items and PerItem are KindIdle's connections and KindJobMemory's
	// jobs, and the server's resident memory growth per item in bytes.
	Items   int64
	PerItem float64

	// Members are a cluster's members, the leader first: what each spent
	// (CPU and RSS above are their sums).
	Members []MemberUsage `json:",omitempty"`
	// Failovers are KindFailover's times from each kill of the leader to
	// the first put acknowledged through another member.
	Failovers []time.Duration `json:",omitempty"`
	// CatchUp is KindCatchUp's figures.
	CatchUp *CatchUp `json:",omitempty"`
	// Rebuilds are KindRebuild's times, as each stopped leader reported
	// them: from its lost leadership to its store rebuilt and following.
	Rebuilds []time.Duration `json:",omitempty"`
	// Grow is KindGrow's figures.
	Grow *Grow `json:",omitempty"`
	// Move is KindMove's figures.
	Move *Move `json:",omitempty"`
	// GrowGroups is KindGrowGroups' figures.
	GrowGroups *GrowGroups `json:",omitempty"`

	Sent, Acked int64 // puts written and puts answered INSERTED
	Errors      int64 // protocol errors and unexpected I/O failures
	FirstError  string
}

// JobsPerSec is the measured throughput.
func (r Result) JobsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Jobs) / r.Elapsed.Seconds()
}

// CPUPer100k is the server's CPU seconds per 100,000 jobs.
func (r Result) CPUPer100k() float64 {
	if r.Jobs == 0 {
		return 0
	}
	return r.CPU.Seconds() / float64(r.Jobs) * 100_000
}

// setLatency keeps h and reads its percentiles.
func (r *Result) setLatency(h *hdrhistogram.Histogram) {
	r.Latency, r.Samples = h, h.TotalCount()
	if r.Samples == 0 {
		return
	}
	r.P50 = time.Duration(h.ValueAtQuantile(50))
	r.P99 = time.Duration(h.ValueAtQuantile(99))
	r.P999 = time.Duration(h.ValueAtQuantile(99.9))
}

// Run drives the scenario against srv, a server started fresh for it.
func (s Scenario) Run(ctx context.Context, srv *Server, rc RunConfig, prog *Progress) (Result, error) {
	if rc.MaxPuts <= 0 {
		rc.MaxPuts = 50_000_000
	}
	switch s.Kind {
	case KindIdle:
		return s.runIdle(ctx, srv, rc, prog)
	case KindJobMemory:
		return s.runJobMemory(ctx, srv, rc, prog)
	case KindFailover, KindCatchUp, KindRebuild, KindGrow, KindMove:
		return Result{Server: srv.Spec.Name}, fmt.Errorf("load: scenario %s needs a cluster (Members)", s.Name)
	}
	return s.runTimed(ctx, srv, rc, prog)
}

// replyWait is how long past a timed run's end a reply may take before
// the generator gives up on it (a variable for the tests).
var replyWait = 2 * time.Minute

// task is one connection's loop in a timed run.
type task struct {
	run func(w worker) error
	// mayBlock marks loops that can wait on the server indefinitely (a
	// consumer's reserve); they are cut by a deadline at the end.
	mayBlock bool
}

func (s Scenario) runTimed(ctx context.Context, srv *Server, rc RunConfig, prog *Progress) (Result, error) {
	res := Result{Server: srv.Spec.Name}
	m := newMeter(rc.MaxPuts)
	bs, err := s.setUpBeside(ctx, srv, rc, m, prog)
	defer bs.close()
	res.Items = bs.items()
	if err != nil {
		return res, err
	}
	addrs := srv.trafficAddrs()
	conns, err := dialMany(addrs, s.connCount(), s.Body, nil, srv.tlsClient)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return res, err
	}
	// Every read and write is bounded, so the generator stops by itself even
	// if a server stops answering.
	safety := time.Now().Add(rc.Warmup + rc.Duration + replyWait)
	for _, c := range conns {
		_ = c.SetDeadline(safety)
	}
	tasks, err := s.tasks(conns, m)
	if err != nil {
		return res, err
	}

	start := make(chan struct{})
	var blocking, nonBlocking sync.WaitGroup
	for i, t := range tasks {
		wg := &nonBlocking
		if t.mayBlock {
			wg = &blocking
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			m.fail(t.run(worker{m: m, shard: i % histShards}))
		}()
	}

	prog.Begin(rc.Warmup+rc.Duration, m.total.Load)
	defer prog.End()
	close(start)
	interrupted := sleepCtx(ctx, rc.Warmup, m.empty)
	s0, serr := takeSample(srv)
	t0 := time.Now()
	m.phase.Store(phaseMeasure)
	if !interrupted {
		sleepCtx(ctx, rc.Duration, m.empty)
	}
	m.phase.Store(phaseStop)
	res.Elapsed = time.Since(t0)
	res.Jobs = m.measured.Load()
	s1, serr1 := takeSample(srv)
	close(m.stop)

	// Loops that cannot block finish their current command and return;
	// then the consumers, which may be waiting in reserve, are cut.
	nonBlocking.Wait()
	for _, c := range conns {
		_ = c.SetDeadline(time.Now())
	}
	blocking.Wait()
	besideErr := bs.check()

	res.setLatency(m.latency())
	if serr == nil && serr1 == nil {
		res.CPU = s1.server.CPU - s0.server.CPU
		res.RSS = s1.server.RSS
		res.GenCPU = s1.self - s0.self
		res.OtherCPU = max(0, s1.machine-s0.machine-res.CPU-res.GenCPU)
		clients := map[string]bool{}
		for i := range conns {
			clients[dialTarget(addrs, i)] = true
		}
		for i, m := range srv.members {
			res.Members = append(res.Members, MemberUsage{Name: m.name, Clients: clients[m.proc.Addr()],
				CPU: s1.members[i].CPU - s0.members[i].CPU, RSS: s1.members[i].RSS})
		}
	}
	res.Sent, res.Acked = m.sent.Load(), m.acked.Load()
	res.Errors, res.FirstError = m.errs.Load(), m.firstError()
	if res.Errors == 0 && res.Sent != res.Acked {
		// A put left unanswered until the run gave up on it: its worker
		// was cut as the run ended, which fail does not count.
		res.Errors, res.FirstError = 1, fmt.Sprintf("load: %d of %d puts never acknowledged", res.Sent-res.Acked, res.Sent)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, besideErr
}

// sample is a reading of the CPU time spent by the server (and by each of
// a cluster's members), by this process and by the whole machine.
type sample struct {
	server  procstat.Usage
	members []procstat.Usage
	self    time.Duration
	machine time.Duration
}

func takeSample(srv *Server) (sample, error) {
	var s sample
	var err error
	if len(srv.members) > 0 {
		if s.members, err = memberUsage(srv.members); err != nil {
			return s, err
		}
		s.server = sumUsage(s.members)
	} else if s.server, err = srv.Usage(); err != nil {
		return s, err
	}
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		return s, err
	}
	s.self = self.CPU
	s.machine, err = procstat.SystemBusy()
	return s, err
}

// sleepCtx waits for d, an early signal on early, or ctx's end; it reports
// whether it returned early.
func sleepCtx(ctx context.Context, d time.Duration, early <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-early:
		return true
	case <-ctx.Done():
		return true
	}
}

func (s Scenario) connCount() int {
	if s.Kind == KindProdCons {
		return 2 * s.Conns
	}
	return s.Conns
}

// tasks builds each connection's loop, doing any untimed setup (watching
// tubes, filling the queue) first.
func (s Scenario) tasks(conns []*testproc.Conn, m *meter) ([]task, error) {
	frame, size := testproc.PutFrame(s.Body), bodySize(s.Body)
	tasks := make([]task, 0, len(conns))
	switch s.Kind {
	case KindProdCons:
		reserve := "reserve\r\n"
		if s.ReserveTimeout > 0 {
			reserve = "reserve-with-timeout " + strconv.Itoa(s.ReserveTimeout) + "\r\n"
		}
		tokens := make(chan struct{}, backlogPerConn*s.Conns)
		for range cap(tokens) {
			tokens <- struct{}{}
		}
		for i := range s.Conns {
			prod, cons := conns[i], conns[s.Conns+i]
			var uses []string
			if s.Tubes > 0 {
				share := s.tubeShare(i)
				uses = useLines(share)
				if err := watchOnly(cons, share); err != nil {
					return nil, err
				}
			}
			tasks = append(tasks,
				task{run: func(w worker) error { return producer(w, prod, frame, tokens, uses) }},
				task{run: func(w worker) error { return consumer(w, cons, tokens, reserve, size) }, mayBlock: true})
		}
	case KindPutOnly:
		for i, c := range conns {
			var uses []string
			if s.Tubes > 0 {
				uses = useLines(s.tubeShare(i))
				if len(uses) == 1 { // one tube: used once, so each put is one command
					if err := useOnce(c, uses[0]); err != nil {
						return nil, err
					}
					uses = nil
				}
			}
			tasks = append(tasks, task{run: func(w worker) error { return producer(w, c, frame, nil, uses) }})
		}
	case KindPipelined:
		for _, c := range conns {
			tasks = append(tasks, task{run: func(w worker) error { return pipeliner(w, c, frame, s.Depth) }})
		}
	case KindRoundTrip:
		for _, c := range conns {
			tasks = append(tasks, task{run: func(w worker) error { return roundTripper(w, c, frame, size) }})
		}
	case KindDrain:
		if err := fill(conns, m, [][]byte{frame}, s.Prefill, 100); err != nil {
			return nil, fmt.Errorf("load: prefill: %w", err)
		}
		for _, c := range conns {
			tasks = append(tasks, task{run: func(w worker) error { return drainer(w, c, size) }})
		}
	default:
		return nil, fmt.Errorf("load: scenario %s: kind %d is not timed", s.Name, s.Kind)
	}
	return tasks, nil
}

// tubeShare names the tubes of pair i: i, i+Conns, i+2·Conns, … below Tubes,
// or tube 0 alone when there are fewer tubes than pairs.
func (s Scenario) tubeShare(i int) []string {
	var names []string
	for k := i % s.Tubes; k < s.Tubes; k += s.Conns {
		names = append(names, "t"+strconv.Itoa(k))
		if s.Tubes < s.Conns {
			break
		}
	}
	return names
}

// watchOnly makes c watch exactly tubes, pipelining the commands.
func watchOnly(c *testproc.Conn, tubes []string) error {
	for _, t := range tubes {
		c.WriteString("watch " + t + "\r\n")
	}
	c.WriteString("ignore default\r\n")
	if err := c.Flush(); err != nil {
		return err
	}
	for range tubes {
		if _, err := c.Expect(testproc.ReplyWatching); err != nil {
			return err
		}
	}
	_, err := c.Expect(testproc.ReplyWatching)
	return err
}

// useLines are the use commands of tubes, each with its CRLF.
func useLines(tubes []string) []string {
	uses := make([]string, len(tubes))
	for k, name := range tubes {
		uses[k] = "use " + name + "\r\n"
	}
	return uses
}

// useOnce sends c's use command (a line with its CRLF) and reads its answer.
func useOnce(c *testproc.Conn, use string) error {
	c.WriteString(use)
	if err := c.Flush(); err != nil {
		return err
	}
	_, err := c.Expect(testproc.ReplyUsing)
	return err
}

// producer puts one job at a time. With tokens it first takes one (a
// consumer gives it back); with uses it sends use before each put.
func producer(w worker, c *testproc.Conn, frame []byte, tokens chan struct{}, uses []string) error {
	for k := 0; ; {
		if tokens != nil {
			select {
			case <-tokens:
			case <-w.m.stop:
				return nil
			}
		}
		if w.m.stopping() || w.m.limitHit() {
			return nil
		}
		t := time.Now()
		if uses != nil {
			c.WriteString(uses[k])
			k = (k + 1) % len(uses)
		}
		c.Write(frame)
		if err := c.Flush(); err != nil {
			return err
		}
		w.m.sent.Add(1)
		if uses != nil {
			if _, err := c.Expect(testproc.ReplyUsing); err != nil {
				return err
			}
		}
		if _, err := c.Expect(testproc.ReplyInserted); err != nil {
			return err
		}
		w.m.acked.Add(1)
		w.record(time.Since(t))
		if tokens == nil {
			w.complete(1)
		}
	}
}

// consumer reserves with the command line reserve ("reserve\r\n" or a
// reserve-with-timeout, which it repeats after TIMED_OUT) and deletes,
// giving a token back per job.
func consumer(w worker, c *testproc.Conn, tokens chan struct{}, reserve string, size []byte) error {
	for !w.m.stopping() {
		t := time.Now()
		c.WriteString(reserve)
		if err := c.Flush(); err != nil {
			return err
		}
		rep, err := c.ReadReply(false)
		if err != nil {
			return err
		}
		switch rep.Kind {
		case testproc.ReplyReserved:
			if err := checkBody(rep, size); err != nil {
				return err
			}
		case testproc.ReplyTimedOut:
			continue
		default:
			return &testproc.ProtocolError{Want: "RESERVED", Got: string(rep.Line)}
		}
		id := rep.N
		w.record(time.Since(t))
		t = time.Now()
		if err := deleteJob(c, id); err != nil {
			return err
		}
		w.record(time.Since(t))
		select {
		case tokens <- struct{}{}:
		default: // only if a token was dropped at stop
		}
		w.complete(1)
	}
	return nil
}

// pipeliner writes depth puts, then reads depth replies.
func pipeliner(w worker, c *testproc.Conn, frame []byte, depth int) error {
	for !w.m.stopping() && !w.m.limitHit() {
		t := time.Now()
		for range depth {
			c.Write(frame)
		}
		if err := c.Flush(); err != nil {
			return err
		}
		w.m.sent.Add(int64(depth))
		for range depth {
			if _, err := c.Expect(testproc.ReplyInserted); err != nil {
				return err
			}
			w.m.acked.Add(1)
			w.record(time.Since(t))
		}
		w.complete(int64(depth))
	}
	return nil
}

// roundTripper puts a job, reserves it and deletes it, one command at a time.
func roundTripper(w worker, c *testproc.Conn, frame, size []byte) error {
	for !w.m.stopping() && !w.m.limitHit() {
		t := time.Now()
		c.Write(frame)
		if err := c.Flush(); err != nil {
			return err
		}
		w.m.sent.Add(1)
		if _, err := c.Expect(testproc.ReplyInserted); err != nil {
			return err
		}
		w.m.acked.Add(1)
		id, err := reserveJob(c, size)
		if err != nil {
			return err
		}
		if err := deleteJob(c, id); err != nil {
			return err
		}
		w.record(time.Since(t))
		w.complete(1)
	}
	return nil
}

// reserveJob reserves a job, waiting for one, and returns its id. Its
// body must be of size (bodySize).
func reserveJob(c *testproc.Conn, size []byte) (uint64, error) {
	c.WriteString("reserve\r\n")
	if err := c.Flush(); err != nil {
		return 0, err
	}
	rep, err := c.Expect(testproc.ReplyReserved)
	if err == nil {
		err = checkBody(rep, size)
	}
	return rep.N, err
}

// bodySize is what checkBody wants a RESERVED line to end with for a
// body of n bytes.
func bodySize(n int) []byte { return []byte(" " + strconv.Itoa(n)) }

// checkBody requires a RESERVED reply (whose body ReadReply has framed by
// its announced size) to announce size (bodySize): every job a scenario
// reserves is one it put, and a server handing back less than was put
// would do less work than the other and look faster.
func checkBody(rep testproc.Reply, size []byte) error {
	if !bytes.HasSuffix(rep.Line, size) {
		return &testproc.ProtocolError{Want: "RESERVED <id>" + string(size), Got: string(rep.Line)}
	}
	return nil
}

// deleteJob deletes id and waits for DELETED.
func deleteJob(c *testproc.Conn, id uint64) error {
	c.WriteCmdID("delete", id)
	if err := c.Flush(); err != nil {
		return err
	}
	_, err := c.Expect(testproc.ReplyDeleted)
	return err
}

// drainer reserves without waiting and deletes until the tube is empty.
func drainer(w worker, c *testproc.Conn, size []byte) error {
	for !w.m.stopping() {
		t := time.Now()
		c.WriteString("reserve-with-timeout 0\r\n")
		if err := c.Flush(); err != nil {
			return err
		}
		rep, err := c.ReadReply(false)
		if err != nil {
			return err
		}
		switch rep.Kind {
		case testproc.ReplyReserved:
			if err := checkBody(rep, size); err != nil {
				return err
			}
		case testproc.ReplyTimedOut:
			w.m.signalEmpty()
			return nil
		default:
			return &testproc.ProtocolError{Want: "RESERVED or TIMED_OUT", Got: string(rep.Line)}
		}
		w.record(time.Since(t))
		t = time.Now()
		if err := deleteJob(c, rep.N); err != nil {
			return err
		}
		w.record(time.Since(t))
		w.complete(1)
	}
	return nil
}

// fill puts n jobs over conns in pipelined batches of depth, counting them
// as sent and acknowledged in m, and returns when all are acknowledged. Each
// connection writes frames in turn, from the first.
func fill(conns []*testproc.Conn, m *meter, frames [][]byte, n, depth int) error {
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		share := n / len(conns)
		if i < n%len(conns) {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := 0
			for share > 0 {
				batch := min(depth, share)
				for range batch {
					c.Write(frames[k])
					k = (k + 1) % len(frames)
				}
				if err := c.Flush(); err != nil {
					errs[i] = err
					return
				}
				m.sent.Add(int64(batch))
				for range batch {
					if _, err := c.Expect(testproc.ReplyInserted); err != nil {
						errs[i] = err
						return
					}
					m.acked.Add(1)
					m.total.Add(1)
				}
				share -= batch
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// dialTarget is where connection i of a run goes: addrs in turn, so that
// with a cluster's members (ThroughAll) each holds an even share, and a
// producer/consumer pair's producer (i) and consumer (i+Conns) are on
// different members unless Conns is a multiple of their number.
func dialTarget(addrs []string, i int) string { return addrs[i%len(addrs)] }

// dialMany opens n connections with a few dialers at once, connection i to
// dialTarget(addrs, i). sources, when given, are the local addresses to
// spread them over. tlsClient, when set, has them speak TLS.
func dialMany(addrs []string, n, body int, sources []net.IP, tlsClient *tls.Config) ([]*testproc.Conn, error) {
	bufSize := min(max(16<<10, body+512), 128<<10)
	conns := make([]*testproc.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	const dialers = 16
	for d := range min(dialers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := d; i < n; i += dialers {
				var src net.IP
				if len(sources) > 0 {
					src = sources[i%len(sources)]
				}
				conns[i], errs[i] = testproc.Dialer{Timeout: 5 * time.Second, Local: src, BufSize: bufSize, TLS: tlsClient}.Dial(dialTarget(addrs, i))
			}
		}()
	}
	wg.Wait()
	var ok []*testproc.Conn
	var first error
	for i, c := range conns {
		if errs[i] != nil && first == nil {
			first = fmt.Errorf("load: dial %s (connection %d of %d): %w", dialTarget(addrs, i), i+1, n, errs[i])
		}
		if c != nil {
			ok = append(ok, c)
		}
	}
	return ok, first
}

// LoopbackSources returns 127.0.0.2 … 127.0.0.(n+1), local addresses to
// spread many connections over so that no one address runs out of
// ephemeral ports.
func LoopbackSources(n int) []net.IP {
	ips := make([]net.IP, n)
	for i := range ips {
		ips[i] = net.IPv4(127, 0, 0, byte(2+i))
	}
	return ips
}

// argsFor substitutes dir for "{dir}" in the scenario's server flags.
func (s Scenario) argsFor(dir string) []string {
	out := make([]string, len(s.ServerArgs))
	for i, a := range s.ServerArgs {
		out[i] = strings.ReplaceAll(a, "{dir}", dir)
	}
	return out
}

// needsDir reports whether the scenario's flags name a directory.
func (s Scenario) needsDir() bool {
	for _, a := range s.ServerArgs {
		if strings.Contains(a, "{dir}") {
			return true
		}
	}
	return false
}
