package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// The groups of a cluster growing while it serves (docs/design/shards.md
// S10, KindGrowGroups): how long the growth takes, and the longest the
// tubes it moves wait.
const (
	// growGroupsPairs are the producer/consumer pairs, each on a tube of
	// its own, through the members in turn.
	growGroupsPairs = 30
	// growGroupsAfter is how long the traffic runs after the growth's
	// answer before the gaps are read: a tube still refused would show.
	growGroupsAfter = time.Second
)

// GrowGroups is KindGrowGroups' figures.
type GrowGroups struct {
	From, To int
	// Took is from the growth's request to its answer.
	Took time.Duration
	// Tubes are the tubes it moved, Jobs their jobs, and Paused the
	// longest one of its placements held its tubes, as its answer said.
	Tubes, Jobs int
	Paused      time.Duration
	// PutGap and ReserveGap are the longest a moved tube went, from the
	// growth's request to growGroupsAfter past its answer, without a put
	// acknowledged, and without a job reserved.
	PutGap, ReserveGap time.Duration
	// BaselineJobsPerSec is the pairs' rate before the growth, JobsPerSec
	// from its request to growGroupsAfter past its answer.
	BaselineJobsPerSec, JobsPerSec float64
	// Reconnects counts the pairs' connections a member closed, each
	// dialled again (Move.Reconnects).
	Reconnects int64
}

// runGrowGroups runs a pair on a tube each through every member, grows
// the groups to Kills × Groups, and measures.
func (s Scenario) runGrowGroups(ctx context.Context, c *Cluster, prog *Progress) (Result, error) {
	res := Result{Server: c.spec.Name}
	gg := &GrowGroups{From: s.Groups, To: s.Kills * s.Groups}
	res.GrowGroups = gg
	pairs := make([]pair, growGroupsPairs)
	gaps := map[string]*moveGaps{}
	for i := range pairs {
		tube := fmt.Sprintf("grow-%d", i)
		gaps[tube] = &moveGaps{tube: tube}
		pairs[i] = pair{tube: tube, prod: c.members[i%len(c.members)], cons: c.members[(i+1)%len(c.members)]}
	}
	t, err := startPairs(pairs, func(tube string, reserved bool) { gaps[tube].note(tube, reserved) }, true)
	if err != nil {
		return res, err
	}
	defer t.stop()
	var done atomic.Int64
	prog.Begin(moveSettle+growGroupsAfter+10*time.Second, done.Load)
	defer prog.End()
	if sleepCtx(ctx, moveSettle, nil) {
		return res, ctx.Err()
	}
	before := t.jobs.Load()
	gg.BaselineJobsPerSec = float64(before) / moveSettle.Seconds()
	start := time.Now()
	for _, g := range gaps {
		g.watch(start)
	}
	out, err := growTo(ctx, c.members[0], gg.To)
	if err != nil {
		return res, err
	}
	gg.Took = time.Since(start)
	gg.Tubes, gg.Jobs, gg.Paused = len(out.Tubes), out.Jobs, time.Duration(out.Paused)*time.Millisecond
	done.Add(1)
	if sleepCtx(ctx, growGroupsAfter, nil) {
		return res, ctx.Err()
	}
	for _, tube := range out.Tubes {
		if g := gaps[tube]; g != nil {
			put, take := g.longest()
			gg.PutGap, gg.ReserveGap = max(gg.PutGap, put), max(gg.ReserveGap, take)
		}
	}
	elapsed := time.Since(start)
	jobs := t.jobs.Load() - before
	gg.JobsPerSec = float64(jobs) / elapsed.Seconds()
	gg.Reconnects = t.reconnects.Load()
	res.Jobs, res.Elapsed = jobs, elapsed
	res.Sent, res.Acked = t.jobs.Load(), t.jobs.Load()
	if err := t.stop(); err != nil {
		return res, fmt.Errorf("load: the traffic: %w", err)
	}
	return res, nil
}

// grown is a growth's answer.
type grown struct {
	Tubes  []string `json:"tubes"`
	Jobs   int      `json:"jobs"`
	Paused int64    `json:"paused_ms"`
}

// growTo asks m to grow the groups to n, and again (a growth goes on
// where it stopped) when a leader it needed changed meanwhile.
func growTo(ctx context.Context, m *member, n int) (*grown, error) {
	for try := 1; ; try++ {
		out, status, err := growOnce(ctx, m, n)
		if err == nil || try == 5 || status != http.StatusServiceUnavailable && status != http.StatusConflict {
			return out, err
		}
		if sleepCtx(ctx, time.Second, nil) {
			return nil, ctx.Err()
		}
	}
}

// growOnce asks m once: its answer, or its status and why not.
func growOnce(ctx context.Context, m *member, n int) (*grown, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.httpAddr+"/cluster/groups/grow",
		strings.NewReader(fmt.Sprintf(`{"to": %d}`, n)))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+catchUpToken)
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("load: growing the groups to %d: %w", n, err)
	}
	defer resp.Body.Close()
	var out struct {
		grown
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, fmt.Errorf("load: growing the groups to %d: %s %s", n, resp.Status, out.Error)
	}
	return &out.grown, resp.StatusCode, nil
}

// writeGrowGroups writes KindGrowGroups' figures.
func writeGrowGroups(p func(string, ...any), outs []Outcome, cand string) {
	if len(outs) == 0 {
		return
	}
	p("\n### The groups growing while they serve\n\n")
	p("Producer/consumer pairs, a tube each, through every member while the groups grow (`POST /cluster/groups/grow`): "+
		"the new groups are made, then each takes its hash slots' tubes, moved live. Took is from the request to the answer; "+
		"held is the longest one placement held its tubes, as the answer said; the gaps are the longest a moved tube went "+
		"without a put acknowledged, and without a job reserved, from the request to %s after the answer. Reconnects are the pairs' "+
		"connections a member closed, each dialled again.\n\n", FormatSeconds(growGroupsAfter))
	p("| scenario | groups | took | tubes moved | jobs moved | held max | longest put gap | longest reserve gap | jobs/s baseline | jobs/s meanwhile | reconnects |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, o := range outs {
		for _, r := range o.Runs[cand] {
			g := r.GrowGroups
			if r.Skipped != "" || r.Errors > 0 || g == nil || g.Took == 0 {
				p("| %s | failed: %s | | | | | | | | | |\n", o.Scenario.Name, r.FirstError)
				continue
			}
			p("| %s | %d → %d | %s | %d | %d | %s | %s | %s | %s | %s | %d |\n", o.Scenario.Name, g.From, g.To, FormatSeconds(g.Took),
				g.Tubes, g.Jobs, FormatSeconds(g.Paused), FormatSeconds(g.PutGap), FormatSeconds(g.ReserveGap),
				FormatThousands(g.BaselineJobsPerSec), FormatThousands(g.JobsPerSec), g.Reconnects)
		}
	}
}
