package load

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

const (
	// rebuildStop is how long runRebuild keeps the leader stopped: past
	// the longest election timeout (2 s), so the others elect another and
	// the stopped one finds its leadership lost when it resumes.
	rebuildStop = 3 * time.Second
	// rebuildTimeout bounds the wait for a resumed leader's rebuild.
	rebuildTimeout = 60 * time.Second
)

// runRebuild fills c with s.Jobs jobs of s.Body bytes through leader,
// then s.Kills times stops the serving leader past an election timeout
// and resumes it, and takes the time it reports for rebuilding its store
// in place.
func (s Scenario) runRebuild(ctx context.Context, c *Cluster, leader *member, prog *Progress) (Result, error) {
	res := Result{Server: c.spec.Name}
	fm := newMeter(0)
	prog.Begin(0, fm.total.Load)
	err := fillBacklog(leader.proc.Addr(), s.Jobs, s.Body, fm)
	prog.End()
	if err != nil {
		return res, fmt.Errorf("load: the jobs: %w", err)
	}
	res.Sent, res.Acked = int64(s.Jobs), int64(s.Jobs)
	for range s.Kills {
		// Not awaitSettled, which reads every member: one member's
		// /metrics names the leader.
		if leader = c.leaderNow(ctx); leader == nil {
			return res, errNoLeader
		}
		before, err := c.metric(ctx, leader, "sprout_cluster_rebuilds_total")
		if err != nil {
			return res, err
		}
		if err := leader.proc.Signal(syscall.SIGSTOP); err != nil {
			return res, err
		}
		select {
		case <-time.After(rebuildStop): // the fault itself: the leader stopped
		case <-ctx.Done():
		}
		if err := leader.proc.Signal(syscall.SIGCONT); err != nil {
			return res, err
		}
		took, err := c.awaitRebuild(ctx, leader, before)
		if err != nil {
			return res, err
		}
		res.Rebuilds = append(res.Rebuilds, took)
	}
	if c.leaderNow(ctx) == nil {
		return res, errNoLeader
	}
	return res, nil
}

// awaitRebuild waits until m has counted a rebuild past before and
// reported how long it took.
func (c *Cluster) awaitRebuild(ctx context.Context, m *member, before float64) (time.Duration, error) {
	deadline := time.Now().Add(rebuildTimeout)
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		n, err := c.metric(ctx, m, "sprout_cluster_rebuilds_total")
		if err == nil && n > before {
			secs, err := c.metric(ctx, m, "sprout_cluster_last_rebuild_seconds")
			if err == nil && secs > 0 {
				return time.Duration(secs * float64(time.Second)), nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("load: %s did not report its rebuild within %v (last: %v); its output: %s",
				m.name, rebuildTimeout, err, outputTail(m.proc))
		}
		if sleepCtx(ctx, pause, nil) {
			return 0, ctx.Err()
		}
	}
}
