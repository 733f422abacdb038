package load

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sproutmq/sprout/internal/testproc/procstat"
)

// Sizes are the counts the catalogue's scenarios take from the command line.
type Sizes struct {
	IdleConns int // idle-conns; 0: as many as the open-file limit allows
	Jobs      int // jobs-memory's stored jobs
	DrainJobs int // drain-only's prefill; enough to outlast warm-up and measuring
	// MoveBacklog is the jobs the moving tube holds in the move-backlog
	// scenario; 0: 20,000.
	MoveBacklog int
}

// Catalogue returns every scenario, in report order.
func Catalogue(sz Sizes) []Scenario {
	idleConns, jobs := sz.IdleConns, sz.Jobs
	pc := func(conns, body int) Scenario {
		return Scenario{
			Name:  fmt.Sprintf("prodcons-c%d", conns),
			Title: fmt.Sprintf("producer/consumer, %d+%d conns, %s", conns, conns, FormatBytes(body)),
			Kind:  KindProdCons, Conns: conns, Body: body,
		}
	}
	body := func(size int, name string) Scenario {
		s := pc(10, size)
		s.Name = "body-" + name
		if size > 65535 { // both servers' default -z is 65535
			s.ServerArgs = []string{"-z", fmt.Sprint(size)}
		}
		return s
	}
	tubes := func(n int) Scenario {
		s := pc(100, 64)
		s.Name = fmt.Sprintf("tubes-%d", n)
		s.Tubes = n
		tubeWord := "tubes"
		if n == 1 {
			tubeWord = "tube"
		}
		s.Title = fmt.Sprintf("producer/consumer, 100+100 conns, 64 B, %s %s, use before each put", FormatThousands(float64(n)), tubeWord)
		return s
	}
	durable := func(ms, conns int) Scenario {
		s := pc(conns, 64)
		s.Name = fmt.Sprintf("durable-f%d-c%d", ms, conns)
		s.Title += fmt.Sprintf(", -b DIR -f %d", ms)
		s.ServerArgs = []string{"-b", "{dir}", "-f", fmt.Sprint(ms)}
		return s
	}
	putOnly := func(conns int, args []string) Scenario {
		s := Scenario{
			Name:  fmt.Sprintf("put-only-c%d", conns),
			Title: fmt.Sprintf("put only, %d conns, 64 B", conns),
			Kind:  KindPutOnly, Conns: conns, Body: 64, ServerArgs: args,
		}
		if len(args) > 0 {
			s.Name = fmt.Sprintf("durable-put-f%s-c%d", args[3], conns)
			s.Title += ", -b DIR -f " + args[3]
		}
		return s
	}
	// A cluster: three members on this machine, each -b DIR -f 0, at 100
	// connections through the leader, through a follower and spread over
	// every member, set against durable-f0-c100 and durable-put-f0-c100
	// (beanstalkd and one node). Spread over every member is what the
	// sharded cluster's capacity is measured with (docs/design/shards.md):
	// today's cluster of one group is its baseline.
	cluster := func(s Scenario, through Through) Scenario {
		s.Name = fmt.Sprintf("cluster-%s-%s", s.Name, through)
		s.Title += fmt.Sprintf(", cluster of %d (-b DIR -f 0 each), through %s", clusterMembers, map[Through]string{
			ThroughLeader: "the leader", ThroughFollower: "a follower", ThroughAll: "every member (connections spread over them in turn)"}[through])
		s.ServerArgs = []string{"-f", "0"}
		s.Members, s.Through = clusterMembers, through
		return s
	}
	// A fourth member added to three holding a backlog of 60 KB jobs
	// catches up by snapshot.
	catchUp := func(mib int) Scenario {
		const body = 60_000
		jobs := mib << 20 / body
		return Scenario{Name: fmt.Sprintf("cluster-catchup-%dm", mib), Kind: KindCatchUp, Members: clusterMembers,
			Jobs: jobs, Body: body, Reps: 1, Full: true, ServerArgs: []string{"-f", "0"},
			Title: fmt.Sprintf("cluster of %d (-b DIR -f 0 each) holding %s jobs of 60 KB (%d MiB): a member added, its catch-up by snapshot timed; first repetition only",
				clusterMembers, FormatThousands(float64(jobs)), mib)}
	}
	// A leader that loses its leadership rebuilds its store in place,
	// with a million jobs stored.
	rebuild := Scenario{Name: "cluster-rebuild-1m", Kind: KindRebuild, Members: clusterMembers, Jobs: 1_000_000, Body: 64,
		Kills: rebuildStops, Reps: 1, Full: true, ServerArgs: []string{"-f", "0"},
		Title: fmt.Sprintf("cluster of %d (-b DIR -f 0 each) holding 1,000,000 jobs of 64 B: the serving leader stopped (SIGSTOP) past an election timeout %d times; its rebuild in place timed; first repetition only",
			clusterMembers, rebuildStops)}
	// Capacity of several groups (docs/design/shards.md S6): 100
	// producer/consumer pairs, or 100 producers, each on a tube of its
	// own, spread over the members, with one group and with one group per
	// member, on three members and on five; the busiest member's CPU per
	// job is the capacity's measure, the members' summed CPU per job the
	// price of the groups. The puts again at 1,000 producers: each group's
	// rounds then carry as many puts as one group's do at 100 and more, so
	// the pair shows what the groups cost once the members are saturated,
	// where a fixed number of clients split over G groups no longer makes
	// each round G times smaller (docs/design/shards.md, open question 10).
	shard := func(base Scenario, what string, members, groups int) Scenario {
		s := cluster(base, ThroughAll)
		s.Members = members
		prefix := "cluster"
		if members != clusterMembers {
			prefix = fmt.Sprintf("cluster%d", members)
			s.Title = strings.Replace(s.Title, fmt.Sprintf("cluster of %d ", clusterMembers), fmt.Sprintf("cluster of %d ", members), 1)
		}
		s.Name = fmt.Sprintf("%s-g%d-%s-%d-all", prefix, groups, what, base.Conns)
		if groups > 1 {
			s.Groups = groups
			s.Title += fmt.Sprintf(", %d shard groups", groups)
		} else {
			s.Title += ", 1 shard group"
		}
		return s
	}
	shardTubes := func(members, groups int) Scenario { return shard(tubes(100), "tubes", members, groups) }
	putsTubes := putOnly(100, nil)
	putsTubes.Tubes = 100
	putsTubes.Title += ", a tube each (use once before the puts)"
	shardPuts := func(members, groups int) Scenario { return shard(putsTubes, "puts", members, groups) }
	putsTubes1000 := putOnly(1000, nil)
	putsTubes1000.Tubes = 1000
	putsTubes1000.Title = strings.Replace(putsTubes.Title, "100 conns", "1000 conns", 1)
	shardPuts1000 := func(members, groups int) Scenario { return shard(putsTubes1000, "puts", members, groups) }
	// A reserve across groups (docs/design/shards.md 6.2, 6.3): each pair
	// on three tubes, which the groups' placement spreads, so each
	// consumer's reserve spans groups; its latency against the tube-each
	// scenario's, whose reserves ask one group.
	crossReserve := shardTubes(clusterMembers, clusterMembers)
	crossReserve.Tubes = 3 * crossReserve.Conns
	crossReserve.Name = fmt.Sprintf("cluster-g%d-xreserve-all", clusterMembers)
	crossReserve.Title = strings.Replace(crossReserve.Title, "100 tubes", "300 tubes, 3 a pair (a reserve across groups)", 1)
	// Growth while serving (docs/design/shards.md S7): three members of
	// five groups grow to five, then shrink back to three, under traffic.
	grow := Scenario{Name: "cluster-g5-grow-3-5-3", Kind: KindGrow, Members: clusterMembers, Groups: 5, Replicas: 3, Kills: 2,
		Reps: 1, ServerArgs: []string{"-f", "0"},
		Title: fmt.Sprintf("cluster of %d (-b DIR -f 0 each) with 5 shard groups of 3 replicas, %d producer/consumer pairs on a tube each through the first %d: "+
			"2 members added, then removed; first repetition only", clusterMembers, growPairs, clusterMembers)}
	// A tube moving live between groups (docs/design/shards.md S8): the
	// longest its puts and reserves wait.
	move := Scenario{Name: "cluster-g3-move-under-load", Kind: KindMove, Members: clusterMembers, Groups: 3, Kills: 6,
		Reps: 1, ServerArgs: []string{"-f", "0"},
		Title: fmt.Sprintf("cluster of %d (-b DIR -f 0 each) with 3 shard groups, %d producer/consumer pairs through every member, %d on one tube "+
			"that moves to the next group 6 times, a second apart; first repetition only", clusterMembers, movePairs+movePairsElsewhere, movePairs)}
	// The same with a backlog in the moving tube: a move copies the tube
	// while it serves, then freezes it for what changed since
	// (docs/design/shards.md 3.3, "The copy ahead of the freeze").
	backlog := cmp.Or(sz.MoveBacklog, 20_000)
	moveBacklog := move
	moveBacklog.Name, moveBacklog.Kills, moveBacklog.Stored, moveBacklog.Body = "cluster-g3-move-backlog-"+FormatCount(float64(backlog)), 3, backlog, 1024
	moveBacklog.Title = strings.Replace(strings.Replace(move.Title, "6 times", "3 times", 1), "on one tube",
		fmt.Sprintf("on one tube holding %s delayed jobs of 1 KiB", FormatThousands(float64(backlog))), 1)
	// The groups growing while they serve (docs/design/shards.md S10):
	// two groups to four, their tubes moving live.
	growGroups := Scenario{Name: "cluster-g2-grow-groups-4", Kind: KindGrowGroups, Members: clusterMembers, Groups: 2, Kills: 2,
		Reps: 1, ServerArgs: []string{"-f", "0"},
		Title: fmt.Sprintf("cluster of %d (-b DIR -f 0 each) with 2 shard groups, %d producer/consumer pairs on a tube each through every member, "+
			"while the groups grow to 4 (sproutctl groups grow 4); first repetition only", clusterMembers, growGroupsPairs)}
	// Sessions live where their clients connect: three members hold
	// 19,000 idle connections each (a holder process per member, each
	// within the open-file limit) beside the traffic spread over them.
	idleCluster := cluster(pc(100, 64), ThroughAll)
	idleCluster.Name, idleCluster.Idle, idleCluster.Full = "cluster-idle-57k-prodcons-c100-all", 3*19_000, true
	idleCluster.Title += ", beside 3 × 19,000 idle connections, 19,000 on each member"
	c1000 := pc(1000, 64)
	c1000.Full = true
	// The cost of the work a server holds: prodcons-c10's traffic beside
	// a million stored jobs, and beside 19,000 idle connections. At 10
	// connections the server, not the generator, is what limits the rate
	// on this 2-core machine (at 100 the generator takes about a core), so
	// a cost that grows with the work shows most there.
	stored := pc(10, 64)
	stored.Name, stored.Stored = "stored-1m-c10", 1_000_000
	stored.Title += fmt.Sprintf(", beside 1,000,000 stored jobs (half ready in tube %s, which no consumer watches; half in the traffic's tube, delayed 1–2 h)", StoredTube)
	idleBeside := pc(10, 64)
	idleBeside.Name, idleBeside.Idle = "idle-19k-c10", 19_000
	idleBeside.Title += ", beside 19,000 idle connections (fewer if the open-file limit is lower)"
	// Large bodies as most clients send them, the put line and its body
	// in one write, with workers that reserve with a timeout.
	oneWrite := pc(5, 65_000)
	oneWrite.Name, oneWrite.ReserveTimeout = "body-64k-c5", 1
	oneWrite.Title += " (each put line and body in one write), reserve-with-timeout 1"
	// TLS, against Sprout in plaintext and beanstalkd behind stunnel.
	overTLS := func(s Scenario) Scenario {
		s.Name, s.TLS = "tls-"+s.Name, true
		s.Title += ", over TLS (beanstalkd behind stunnel)"
		return s
	}
	pipelined10 := Scenario{Name: "pipelined-c10-d100", Title: "pipelined puts, 10 conns, depth 100, 64 B", Kind: KindPipelined, Conns: 10, Depth: 100, Body: 64}
	roundTrip := Scenario{Name: "roundtrip-c1", Title: "put → reserve → delete round trips, 1 conn, 64 B", Kind: KindRoundTrip, Conns: 1, Body: 64}
	idleTitle := "idle connections, as many as the open-file limit allows"
	if idleConns > 0 {
		idleTitle = fmt.Sprintf("idle connections, up to %s", FormatThousands(float64(idleConns)))
	}
	return []Scenario{
		pc(1, 64), pc(10, 64), pc(100, 64), c1000,
		{Name: "put-only-c10", Title: "put only, 10 conns, 64 B", Kind: KindPutOnly, Conns: 10, Body: 64},
		{Name: "drain-only-c10", Title: fmt.Sprintf("drain only (reserve-with-timeout 0, delete), 10 conns, 64 B, %s jobs prefilled", FormatThousands(float64(sz.DrainJobs))), Kind: KindDrain, Conns: 10, Body: 64, Prefill: sz.DrainJobs},
		{Name: "pipelined-c1-d100", Title: "pipelined puts, 1 conn, depth 100, 64 B", Kind: KindPipelined, Conns: 1, Depth: 100, Body: 64},
		pipelined10,
		body(16, "16"), body(1024, "1k"), body(64<<10, "64k"), oneWrite,
		tubes(1), tubes(10_000),
		stored, idleBeside,
		roundTrip,
		overTLS(roundTrip), overTLS(pc(10, 64)), overTLS(pc(100, 64)),
		// The write-ahead log's figures: -f 0 at 1, 10 and 100 connections
		// against beanstalkd -b -f 0, and -f 50 against Sprout in memory;
		// in producer/consumer every job is two commits (put, delete), so
		// the same is measured with puts alone.
		durable(0, 1), durable(0, 10), durable(0, 100), durable(50, 100),
		putOnly(100, nil), putOnly(100, []string{"-b", "{dir}", "-f", "0"}), putOnly(100, []string{"-b", "{dir}", "-f", "50"}),
		// Producers that pipeline: beanstalkd still fsyncs every put, Sprout
		// shares each fsync among everything pending.
		{Name: "durable-pipe-f0-c100-d10", Title: "pipelined puts, 100 conns, depth 10, 64 B, -b DIR -f 0",
			Kind: KindPipelined, Conns: 100, Depth: 10, Body: 64, ServerArgs: []string{"-b", "{dir}", "-f", "0"}},
		cluster(pc(100, 64), ThroughLeader), cluster(pc(100, 64), ThroughFollower), cluster(pc(100, 64), ThroughAll),
		cluster(putOnly(100, nil), ThroughLeader), cluster(putOnly(100, nil), ThroughFollower),
		// A producer that pipelines through a member that does not lead
		// waits for each answer in turn unless its session pipelines too
		// (docs/design/shards.md 5.3).
		cluster(pipelined10, ThroughLeader), cluster(pipelined10, ThroughFollower), idleCluster,
		shardTubes(clusterMembers, 1), shardTubes(clusterMembers, clusterMembers), crossReserve,
		shardPuts(clusterMembers, 1), shardPuts(clusterMembers, clusterMembers),
		shardTubes(shardMembers, 1), shardTubes(shardMembers, shardMembers), shardPuts(shardMembers, 1), shardPuts(shardMembers, shardMembers),
		shardPuts1000(clusterMembers, 1), shardPuts1000(clusterMembers, clusterMembers),
		shardPuts1000(shardMembers, 1), shardPuts1000(shardMembers, shardMembers),
		grow, move, moveBacklog, growGroups,
		{Name: "cluster-failover", Kind: KindFailover, Members: clusterMembers, Kills: failoverKills, Reps: 1, ServerArgs: []string{"-f", "0"},
			Title: fmt.Sprintf("cluster of %d (-b DIR -f 0 each): the serving leader killed (-9) %d times, restarted on its directory after each; first repetition only",
				clusterMembers, failoverKills)},
		catchUp(160), catchUp(480), rebuild,
		{Name: "idle-conns", Title: idleTitle, Kind: KindIdle, Conns: idleConns, Full: true},
		{Name: "jobs-memory", Title: fmt.Sprintf("%s stored jobs of 64 B (pipelined puts, 10 conns)", FormatThousands(float64(jobs))),
			Kind: KindJobMemory, Conns: 10, Body: 64, Jobs: jobs, Full: true},
	}
}

const (
	// clusterMembers is the cluster scenarios' size, the smallest that
	// survives the loss of a member.
	clusterMembers = 3
	// shardMembers is the larger cluster the groups' capacity is measured
	// on (docs/design/shards.md S6: ≥ 2.8× at five members).
	shardMembers = 5
	// failoverKills is how many leaders cluster-failover kills.
	failoverKills = 10
	// rebuildStops is how many leaders cluster-rebuild-1m stops.
	rebuildStops = 3
)

// Plan is a whole benchmark: every scenario against every server, Reps times.
type Plan struct {
	// Servers are started in this order within each repetition, so with
	// beanstalkd first and Sprout second the runs alternate C, Sprout, C, …
	Servers   []ServerSpec
	Scenarios []Scenario
	Reps      int
	Run       RunConfig
	Progress  *Progress
	// Quiet, when positive, makes each run wait (at most QuietWait) until
	// other processes keep fewer than this many cores busy, so that a
	// burst of unrelated work does not land in one server's runs only.
	Quiet     float64
	QuietWait time.Duration
}

// Outcome is every run of one scenario.
type Outcome struct {
	Scenario Scenario
	Runs     map[string][]Result // by server name, in repetition order
}

// Execute runs the plan. Repetitions go round the whole list of
// scenarios (every scenario's first repetition, then every second, …), so
// that the machine's speed drifting during a long run weighs on every
// scenario alike, which matters for goals that compare two scenarios; within
// a repetition the servers take turns. Each run gets a freshly started
// server on a free loopback port, killed by PID afterwards. A server that
// refuses the scenario's flags is marked skipped for that scenario; other
// failures are recorded in the run's Result and the plan goes on. Execute
// stops early only when ctx ends, returning what it has.
func (p Plan) Execute(ctx context.Context) ([]Outcome, error) {
	outs := make([]Outcome, len(p.Scenarios))
	skipped := make([]map[string]string, len(p.Scenarios))
	for i, s := range p.Scenarios {
		outs[i] = Outcome{Scenario: s, Runs: map[string][]Result{}}
		skipped[i] = map[string]string{}
	}
	total := 0
	for _, s := range p.Scenarios {
		total += s.repsOf(p.Reps) * len(p.Servers)
	}
	n := 0
	for rep := range p.Reps {
		for i, s := range p.Scenarios {
			out := &outs[i]
			if rep >= s.repsOf(p.Reps) {
				continue
			}
			for _, spec := range p.Servers {
				n++
				if why, ok := skipped[i][spec.Name]; ok {
					out.Runs[spec.Name] = append(out.Runs[spec.Name], Result{Server: spec.Name, Skipped: why})
					continue
				}
				p.Progress.SetLabel(fmt.Sprintf("[%d/%d] %s  %s  rep %d/%d", n, total, s.Name, spec.Name, rep+1, s.repsOf(p.Reps)))
				if p.Quiet > 0 {
					p.waitQuiet(ctx)
				}
				r := p.runOne(ctx, s, spec)
				if r.Skipped != "" {
					skipped[i][spec.Name] = r.Skipped
				}
				out.Runs[spec.Name] = append(out.Runs[spec.Name], r)
				if ctx.Err() != nil {
					return outs, ctx.Err()
				}
			}
			if rep == s.repsOf(p.Reps)-1 {
				p.Progress.Printf("%-20s %s", s.Name, p.oneLine(*out))
			}
		}
	}
	return outs, nil
}

// waitQuiet samples the machine's busy time, less this process's, until it
// falls to p.Quiet cores or p.QuietWait has passed.
func (p Plan) waitQuiet(ctx context.Context) {
	const window = 250 * time.Millisecond
	deadline := time.Now().Add(p.QuietWait)
	label := p.Progress.SetLabel("")
	p.Progress.SetLabel(label + "  waiting for other processes to quieten")
	p.Progress.Begin(p.QuietWait, nil)
	defer func() {
		p.Progress.End()
		p.Progress.SetLabel(label)
	}()
	for ctx.Err() == nil {
		m0, err0 := procstat.SystemBusy()
		s0, err1 := procstat.Read(os.Getpid())
		sleepCtx(ctx, window, nil)
		m1, err2 := procstat.SystemBusy()
		s1, err3 := procstat.Read(os.Getpid())
		if err := errors.Join(err0, err1, err2, err3); err != nil {
			return // not Linux: nothing to measure
		}
		other := (m1 - m0 - (s1.CPU - s0.CPU)).Seconds() / window.Seconds()
		if other <= p.Quiet || time.Now().After(deadline) {
			return
		}
	}
}

// oneLine sums an outcome up for the progress display.
func (p Plan) oneLine(out Outcome) string {
	var parts []string
	for _, spec := range p.Servers {
		sum := Summarize(out.Runs[spec.Name])
		switch {
		case sum.Skipped != "":
			parts = append(parts, spec.Name+": "+sum.Skipped)
		case !sum.OK:
			parts = append(parts, spec.Name+": failed")
		case out.Scenario.timed():
			parts = append(parts, fmt.Sprintf("%s %s/s", spec.Name, FormatCount(sum.JobsPerSec)))
		case out.Scenario.Kind == KindFailover:
			parts = append(parts, fmt.Sprintf("%s failover median %s, max %s", spec.Name,
				FormatSeconds(sum.FailoverMedian), FormatSeconds(sum.FailoverMax)))
		case out.Scenario.Kind == KindCatchUp:
			parts = append(parts, spec.Name+" "+catchUpLine(out.Runs[spec.Name]))
		case out.Scenario.Kind == KindRebuild:
			parts = append(parts, fmt.Sprintf("%s rebuild median %s, max %s", spec.Name,
				FormatSeconds(sum.RebuildMedian), FormatSeconds(sum.RebuildMax)))
		default:
			parts = append(parts, fmt.Sprintf("%s %s/item", spec.Name, FormatBytes(int(sum.PerItem))))
		}
	}
	return strings.Join(parts, "   ")
}

// repsOf is how many of the plan's reps repetitions run s.
func (s Scenario) repsOf(reps int) int {
	if s.Reps > 0 {
		return min(s.Reps, reps)
	}
	return reps
}

// runOne starts spec fresh, runs s against it and kills it.
func (p Plan) runOne(ctx context.Context, s Scenario, spec ServerSpec) Result {
	if s.Members > 0 {
		return p.runCluster(ctx, s, spec)
	}
	res := Result{Server: spec.Name}
	var dir string
	if s.needsDir() {
		d, err := os.MkdirTemp("", "sproutbench-"+spec.Name+"-")
		if err != nil {
			res.Errors, res.FirstError = 1, err.Error()
			return res
		}
		dir = d
		defer os.RemoveAll(dir)
	}
	args := s.argsFor(dir)
	var st *serverTLS
	var tlsAddr string
	if s.TLS {
		d, err := os.MkdirTemp("", "sproutbench-tls-")
		if err != nil {
			res.Errors, res.FirstError = 1, err.Error()
			return res
		}
		defer os.RemoveAll(d)
		if spec.NativeTLS {
			tlsAddr, err = freeAddr()
		} else {
			_, err = FindStunnel()
		}
		if errors.Is(err, ErrNoStunnel) {
			res.Skipped = "skipped: " + err.Error()
			return res
		}
		if err == nil {
			st, err = newServerTLS(d)
		}
		if err != nil {
			res.Errors, res.FirstError = 1, err.Error()
			return res
		}
		dir = d // stunnel's configuration goes there
		if spec.NativeTLS {
			args = append(args, st.nativeTLSArgs(tlsAddr)...)
		}
	}
	srv, err := StartServer(spec, args...)
	if errors.Is(err, ErrFlagsRefused) {
		res.Skipped = "skipped: server lacks " + strings.Join(flagNames(s.ServerArgs), " ")
		return res
	}
	if err != nil {
		res.Errors, res.FirstError = 1, err.Error()
		return res
	}
	defer srv.Stop()
	if st != nil {
		if !spec.NativeTLS {
			if srv.stunnel, tlsAddr, err = st.startStunnel(dir, srv.Addr); err != nil {
				res.Errors, res.FirstError = 1, err.Error()
				return res
			}
			if len(spec.CPUs) > 0 {
				// Beside its server, as Sprout does its TLS on the
				// server's CPUs: unpinned, stunnel took the generator's.
				if err := PinProcess(srv.stunnel.PID(), spec.CPUs); err != nil {
					res.Errors, res.FirstError = 1, err.Error()
					return res
				}
			}
		}
		srv.tlsAddr, srv.tlsClient = tlsAddr, st.client
	}
	r, err := s.Run(ctx, srv, p.Run, p.Progress)
	if exited, why := srv.Exited(); exited {
		err = fmt.Errorf("load: %s exited during the run (%v): %s", spec.Name, why, srv.Output())
	}
	// Only a race-built server reports races: the package's own tests run
	// one under -race.
	if report := srv.RaceReport(); report != "" && err == nil {
		err = fmt.Errorf("load: %s reported a data race:\n%s", spec.Name, report)
	}
	r.addError(ctx, err)
	r.Server = spec.Name
	return r
}

// addError counts err against the run, unless it is nil or the run was
// interrupted (ctx ended), and keeps it as the first error if none is.
func (r *Result) addError(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	r.Errors++
	if r.FirstError == "" {
		r.FirstError = err.Error()
	}
}

// flagNames picks the flags out of args ("-b", "{dir}", "-f", "0" gives
// "-b", "-f"), for the skip message.
func flagNames(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			out = append(out, a)
		}
	}
	if len(out) > 1 && out[0] == "-b" {
		return out[:1] // the log directory is the flag the others depend on
	}
	return out
}

// Summary is the median over the usable runs of one scenario on one server.
type Summary struct {
	Runs       int    // usable runs: not skipped, no errors
	Failed     int    // runs with errors
	Skipped    string // why, when every run was skipped
	FirstError string
	OK         bool // at least one usable run

	JobsPerSec     float64
	P50, P99, P999 time.Duration
	CPUPer100k     float64 // seconds
	// BusiestPer100k is a cluster's busiest member's CPU-seconds per
	// 100,000 jobs (busiestPerJob): one core over it is the capacity.
	BusiestPer100k float64
	RSS            float64 // bytes
	PerItem        float64 // bytes
	Items          float64
	// FailoverMedian and FailoverMax are over every failover of the usable
	// runs together.
	FailoverMedian, FailoverMax time.Duration
	// KindCatchUp's figures (CatchUp), each the median: the time and its
	// rate in MB/s; the new member's peak RSS over the leader's RSS before;
	// the leader's peak RSS less its RSS before (at least 1 byte, so that
	// a goal on it has a figure); the round trips' p99 during the catch-up
	// over their p99 before.
	CatchUpTime                  time.Duration
	CatchUpRate, CatchUpMemory   float64
	CatchUpGrowth, CatchUpP99Ups float64
	// RebuildMedian and RebuildMax are over every rebuild of the usable
	// runs together (KindRebuild).
	RebuildMedian, RebuildMax time.Duration
}

// Summarize takes the median of each figure over the runs that were neither
// skipped nor failed.
func Summarize(rs []Result) Summary {
	var s Summary
	var jobs, p50, p99, p999, cpu, rss, per, items, failovers, rebuilds []float64
	var cuTime, cuRate, cuMemory, cuGrowth, cuP99 []float64
	skips := 0
	for _, r := range rs {
		switch {
		case r.Skipped != "":
			skips++
			s.Skipped = r.Skipped
			continue
		case r.Errors > 0:
			s.Failed++
			if s.FirstError == "" {
				s.FirstError = r.FirstError
			}
			continue
		}
		s.Runs++
		jobs = append(jobs, r.JobsPerSec())
		p50 = append(p50, float64(r.P50))
		p99 = append(p99, float64(r.P99))
		p999 = append(p999, float64(r.P999))
		cpu = append(cpu, r.CPUPer100k())
		rss = append(rss, float64(r.RSS))
		per = append(per, r.PerItem)
		items = append(items, float64(r.Items))
		for _, d := range r.Failovers {
			failovers = append(failovers, float64(d))
		}
		for _, d := range r.Rebuilds {
			rebuilds = append(rebuilds, float64(d))
		}
		if cu := r.CatchUp; cu != nil && cu.Time > 0 {
			cuTime, cuRate = append(cuTime, float64(cu.Time)), append(cuRate, cu.MBPerSec())
			cuMemory = append(cuMemory, float64(cu.NewPeakRSS)/float64(max(cu.LeaderRSS, 1)))
			cuGrowth = append(cuGrowth, float64(max(cu.LeaderPeakRSS-cu.LeaderRSS, 1)))
			cuP99 = append(cuP99, float64(cu.SendP99)/float64(max(cu.IdleP99, 1)))
		}
	}
	if skips < len(rs) {
		s.Skipped = ""
	}
	s.OK = s.Runs > 0
	s.JobsPerSec, s.CPUPer100k, s.RSS = median(jobs), median(cpu), median(rss)
	s.P50, s.P99, s.P999 = time.Duration(median(p50)), time.Duration(median(p99)), time.Duration(median(p999))
	s.PerItem, s.Items = median(per), median(items)
	s.BusiestPer100k = busiestPerJob(rs).Seconds() * 100_000
	s.FailoverMedian = time.Duration(median(failovers))
	s.CatchUpTime, s.CatchUpRate, s.CatchUpMemory = time.Duration(median(cuTime)), median(cuRate), median(cuMemory)
	s.CatchUpGrowth, s.CatchUpP99Ups = median(cuGrowth), median(cuP99)
	if len(failovers) > 0 {
		s.FailoverMax = time.Duration(slices.Max(failovers))
	}
	s.RebuildMedian = time.Duration(median(rebuilds))
	if len(rebuilds) > 0 {
		s.RebuildMax = time.Duration(slices.Max(rebuilds))
	}
	return s
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
