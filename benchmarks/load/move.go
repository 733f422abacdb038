package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A tube moving live between the groups of a cluster while it serves
// (docs/design/shards.md S8, KindMove): the longest the tube's puts and
// reserves wait.
const (
	// moveSettle is how long the traffic runs before the first move: its
	// rate then is the baseline.
	moveSettle = 3 * time.Second
	// moveEvery is the time from one move's answer to the next's request.
	moveEvery = time.Second
	// movePairs are the producer/consumer pairs on the moving tube, and
	// movePairsElsewhere those on tubes of their own, through the members
	// in turn.
	movePairs          = 10
	movePairsElsewhere = 20
	// moveTube is the tube that moves.
	moveTube = "moving"
)

// Move is KindMove's figures.
type Move struct {
	// Moves counts the tube's moves; Jobs the jobs it held at each.
	Moves int
	Jobs  []int
	// Paused are the moves' own figures: from the freeze to the tube's
	// placement in its new group, as each answer said.
	Paused []time.Duration
	// PutGap and ReserveGap are the longest the moving tube went, from
	// its first move's request to its last's answer and a second after,
	// without a put acknowledged, and without a job reserved.
	PutGap, ReserveGap time.Duration
	// BaselineJobsPerSec is every pair's rate before the first move,
	// JobsPerSec over the moves.
	BaselineJobsPerSec, JobsPerSec float64
	// Reconnects counts the pairs' connections a member closed (a
	// session whose command's outcome it could not tell, when a group's
	// leadership was lost under it: docs/design/shards.md 5.1), each
	// dialled again.
	Reconnects int64
}

// runMove runs pairs through every member, some on a tube that moves to
// the next group Kills times, a moveEvery apart, and measures the gaps in
// its puts and reserves.
func (s Scenario) runMove(ctx context.Context, c *Cluster, prog *Progress) (Result, error) {
	res := Result{Server: c.spec.Name}
	mv := &Move{}
	res.Move = mv
	gaps := &moveGaps{tube: moveTube}
	if s.Stored > 0 {
		// A backlog the tube carries at each move: delayed an hour, so
		// the pairs' consumers leave it.
		if err := fillTube(c.members[0].proc.Addr(), moveTube, putFrameDelayed(s.Body, 3600), s.Stored, newMeter(0)); err != nil {
			return res, fmt.Errorf("load: the moving tube's backlog: %w", err)
		}
	}
	pairs := make([]pair, movePairs+movePairsElsewhere)
	for i := range pairs {
		tube := moveTube
		if i >= movePairs {
			tube = fmt.Sprintf("still-%d", i)
		}
		pairs[i] = pair{tube: tube, prod: c.members[i%len(c.members)], cons: c.members[(i+1)%len(c.members)]}
	}
	t, err := startPairs(pairs, gaps.note, true)
	if err != nil {
		return res, err
	}
	defer t.stop()
	var done atomic.Int64
	prog.Begin(moveSettle+time.Duration(s.Kills)*(moveEvery+2*time.Second), done.Load)
	defer prog.End()
	if sleepCtx(ctx, moveSettle, nil) {
		return res, ctx.Err()
	}
	before := t.jobs.Load()
	mv.BaselineJobsPerSec = float64(before) / moveSettle.Seconds()
	start := time.Now()
	gaps.watch(start)
	group := -1 // the tube's group: found by the first move's refusal
	for i := range s.Kills {
		via := c.members[i%len(c.members)]
		to := (group + 1) % s.Groups
		moved, err := moveTubeTo(ctx, via, to)
		if err == nil && moved == nil { // it lives there: the next one
			to = (to + 1) % s.Groups
			moved, err = moveTubeTo(ctx, via, to)
		}
		switch {
		case err != nil:
			return res, err
		case moved == nil:
			return res, fmt.Errorf("load: tube %s lives in two groups at once", moveTube)
		}
		group = to
		mv.Moves++
		mv.Jobs = append(mv.Jobs, moved.Jobs)
		mv.Paused = append(mv.Paused, time.Duration(moved.Paused)*time.Millisecond)
		done.Add(1)
		if sleepCtx(ctx, moveEvery, nil) {
			return res, ctx.Err()
		}
	}
	elapsed := time.Since(start)
	mv.PutGap, mv.ReserveGap = gaps.longest()
	jobs := t.jobs.Load() - before
	mv.JobsPerSec = float64(jobs) / elapsed.Seconds()
	mv.Reconnects = t.reconnects.Load()
	res.Jobs, res.Elapsed = jobs, elapsed
	res.Sent, res.Acked = t.jobs.Load(), t.jobs.Load()
	if err := t.stop(); err != nil {
		return res, fmt.Errorf("load: the traffic: %w", err)
	}
	return res, nil
}

// movedTube is a move's answer.
type movedTube struct {
	Jobs   int   `json:"jobs"`
	Paused int64 `json:"paused_ms"`
}

// moveTubeTo asks m to move the moving tube to group g: its answer, or
// nil when the tube lives in g already.
func moveTubeTo(ctx context.Context, m *member, g int) (*movedTube, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.httpAddr+"/cluster/tubes/"+moveTube+"/move",
		strings.NewReader(fmt.Sprintf(`{"group": %d}`, g)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+catchUpToken)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("load: moving tube %s: %w", moveTube, err)
	}
	defer resp.Body.Close()
	var out struct {
		movedTube
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	switch {
	case resp.StatusCode == http.StatusConflict && strings.Contains(out.Error, "already"):
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("load: moving tube %s to group %d: %s %s", moveTube, g, resp.Status, out.Error)
	}
	return &out.movedTube, nil
}

// moveGaps notes when a tube's puts were acknowledged and its
// jobs reserved, from watch on.
type moveGaps struct {
	tube    string // immutable
	mu      sync.Mutex
	watchAt time.Time   // zero: not yet
	puts    []time.Time // guarded by mu
	takes   []time.Time // guarded by mu
}

// note is pairTraffic's note.
func (g *moveGaps) note(tube string, reserved bool) {
	if tube != g.tube {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.watchAt.IsZero():
	case reserved:
		g.takes = append(g.takes, time.Now())
	default:
		g.puts = append(g.puts, time.Now())
	}
}

// watch starts noting from at.
func (g *moveGaps) watch(at time.Time) {
	g.mu.Lock()
	g.watchAt = at
	g.mu.Unlock()
}

// longest are the longest spans, from watch to now, without a put and
// without a reserve answered on the moving tube.
func (g *moveGaps) longest() (put, take time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	longest := func(at []time.Time) time.Duration {
		at = slices.Clone(at)
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		last, gap := g.watchAt, time.Duration(0)
		for _, a := range append(at, time.Now()) {
			gap = max(gap, a.Sub(last))
			last = a
		}
		return gap
	}
	return longest(g.puts), longest(g.takes)
}
