package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/internal/testproc/procstat"
)

const (
	// catchUpTube holds KindCatchUp's backlog, apart from the probe's
	// round trips in the default tube.
	catchUpTube = "backlog"
	// catchUpTimeout bounds the new member's catch-up: it took 140 s for
	// 480 MiB before snapshots streamed.
	catchUpTimeout = 5 * time.Minute
	// catchUpToken is the members' --admin-token: adding a member is a
	// change the admin API allows only with it.
	catchUpToken = "sproutbench-catch-up-admin-token"
	// catchUpPoll is how often the new member's /cluster is read while it
	// catches up: the catch-up time is known to within it.
	catchUpPoll = 50 * time.Millisecond
)

// CatchUp is what a KindCatchUp run measured.
type CatchUp struct {
	Jobs  int   // jobs in the backlog
	Bytes int64 // their bodies' bytes
	// Time runs from the new member's start to its store holding every
	// job the leader had committed when it was added.
	Time time.Duration
	// NewPeakRSS is the new member's highest RSS (VmHWM) by then.
	NewPeakRSS int64
	// LeaderRSS is the leader's RSS just before the member was added, and
	// LeaderPeakRSS its highest from then until the catch-up ended.
	LeaderRSS, LeaderPeakRSS int64
	// IdleP99 and SendP99 are the p99 of put → reserve → delete round
	// trips through the leader, alone and while the new member caught up,
	// over IdleSamples and SendSamples round trips.
	IdleP99, SendP99         time.Duration
	IdleSamples, SendSamples int64
}

// MBPerSec is the catch-up's rate in megabytes (10^6) of bodies a second.
func (c *CatchUp) MBPerSec() float64 {
	if c == nil || c.Time <= 0 {
		return 0
	}
	return float64(c.Bytes) / 1e6 / c.Time.Seconds()
}

// runCatchUp puts s.Jobs jobs of s.Body bytes through the leader of c,
// times round trips through it for the run's duration, then adds a member (POST /cluster/members
// on the leader, then the member started with the join string it gave)
// and times its catch-up, with round trips through the leader meanwhile.
func (s Scenario) runCatchUp(ctx context.Context, c *Cluster, leader *member, rc RunConfig, prog *Progress) (Result, error) {
	res := Result{Server: c.spec.Name}
	cu := &CatchUp{Jobs: s.Jobs, Bytes: int64(s.Jobs) * int64(s.Body)}
	res.CatchUp = cu

	fm := newMeter(0)
	prog.Begin(0, fm.total.Load)
	err := fillBacklog(leader.proc.Addr(), s.Jobs, s.Body, fm)
	prog.End()
	if err != nil {
		if now := c.leaderNow(ctx); now != leader {
			return res, fmt.Errorf("load: the backlog: %w; the leadership moved meanwhile, from %s to %s; %s's output: %s",
				err, leader.name, nameOf(now), leader.name, outputTail(leader.proc))
		}
		return res, fmt.Errorf("load: the backlog: %w", err)
	}
	res.Sent, res.Acked = int64(s.Jobs), int64(s.Jobs)
	if _, err := c.awaitSettled(ctx, clusterSettleTimeout); err != nil {
		return res, err
	}

	probe, err := testproc.Dial(leader.proc.Addr(), 5*time.Second)
	if err != nil {
		return res, err
	}
	defer probe.Close()
	idle, err := probeFor(ctx, probe, rc.Duration, nil)
	if err != nil {
		return res, fmt.Errorf("load: round trips before the catch-up: %w", err)
	}
	cu.IdleP99, cu.IdleSamples = time.Duration(idle.ValueAtQuantile(99)), idle.TotalCount()

	u, err := procstat.Read(leader.proc.PID())
	if err != nil {
		return res, err
	}
	cu.LeaderRSS = u.RSS
	if err := procstat.ResetPeak(leader.proc.PID()); err != nil {
		return res, err
	}

	m, join, err := c.addMember(ctx, leader)
	if err != nil {
		return res, err
	}
	target, err := c.status(ctx, leader)
	if err != nil {
		return res, err
	}

	stop := make(chan struct{})
	type probed struct {
		h   *hdrhistogram.Histogram
		err error
	}
	during := make(chan probed, 1)
	go func() {
		h, err := probeFor(ctx, probe, catchUpTimeout, stop)
		during <- probed{h, err}
	}()
	start := time.Now()
	err = c.startJoining(m, join)
	if err == nil {
		prog.Begin(catchUpTimeout, nil)
		err = c.awaitApplied(ctx, m, target.Commit, time.Now().Add(catchUpTimeout))
		prog.End()
	}
	cu.Time = time.Since(start)
	close(stop)
	p := <-during
	if err != nil {
		return res, err
	}
	if p.err != nil {
		return res, fmt.Errorf("load: round trips during the catch-up: %w", p.err)
	}
	cu.SendP99, cu.SendSamples = time.Duration(p.h.ValueAtQuantile(99)), p.h.TotalCount()
	if u, err = procstat.Read(m.proc.PID()); err != nil {
		return res, err
	}
	cu.NewPeakRSS = u.PeakRSS
	if u, err = procstat.Read(leader.proc.PID()); err != nil {
		return res, err
	}
	cu.LeaderPeakRSS = u.PeakRSS
	st, err := c.status(ctx, m)
	if err != nil {
		return res, err
	}
	if st.Jobs < s.Jobs {
		return res, fmt.Errorf("load: the new member holds %d jobs, want at least %d", st.Jobs, s.Jobs)
	}
	return res, nil
}

// fillBacklog puts n jobs of size bytes into catchUpTube at addr, on a
// few connections with puts pipelined, counting them in m.
func fillBacklog(addr string, n, size int, m *meter) error {
	return fillTube(addr, catchUpTube, testproc.PutFrame(size), n, m)
}

// fillTube puts n jobs of frame (a put command) into tube at addr, on a
// few connections with puts pipelined, counting them in m.
func fillTube(addr, tube string, frame []byte, n int, m *meter) error {
	const conns, depth = 4, 8
	cs, err := dialMany([]string{addr}, conns, len(frame), nil, nil)
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	for _, c := range cs {
		if err := c.ExpectLine("use "+tube, "USING "+tube); err != nil {
			return err
		}
	}
	return fill(cs, m, [][]byte{frame}, n, depth)
}

// probeFor times put → reserve → delete round trips on c in the default
// tube until d has passed or stop is closed.
func probeFor(ctx context.Context, c *testproc.Conn, d time.Duration, stop <-chan struct{}) (*hdrhistogram.Histogram, error) {
	h := hdrhistogram.New(1, int64(time.Minute), 3)
	frame, size := testproc.PutFrame(64), bodySize(64)
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		select {
		case <-stop:
			return h, nil
		default:
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		t := time.Now()
		c.Write(frame)
		if err := c.Flush(); err != nil {
			return h, err
		}
		if _, err := c.Expect(testproc.ReplyInserted); err != nil {
			return h, err
		}
		id, err := reserveJob(c, size)
		if err != nil {
			return h, err
		}
		if err := deleteJob(c, id); err != nil {
			return h, err
		}
		_ = h.RecordValue(int64(time.Since(t)))
	}
	return h, ctx.Err()
}

// addMember asks leader to add a member (POST /cluster/members) and
// returns it, not started, with the join string the answer gave.
func (c *Cluster) addMember(ctx context.Context, leader *member) (*member, string, error) {
	name := fmt.Sprintf("m%d", len(c.members)+1)
	m := &member{name: name, dir: filepath.Join(c.root, name)}
	if err := os.Mkdir(m.dir, 0o700); err != nil {
		return nil, "", err
	}
	for _, addr := range []*string{&m.peerAddr, &m.httpAddr} {
		port, err := testproc.FreePort()
		if err != nil {
			return nil, "", err
		}
		*addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	body, _ := json.Marshal(map[string]string{"name": m.name, "address": m.peerAddr})
	// A leadership changing hands (the balancer's) drops the proposal:
	// nothing was added, so it is asked again.
	for try := 1; ; try++ {
		join, status, err := postMember(ctx, leader, body)
		if err == nil {
			c.members = append(c.members, m)
			return m, join, nil
		}
		if try == 5 || status != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "no leader is known") {
			return nil, "", fmt.Errorf("load: adding member %s: %w", m.name, err)
		}
		if sleepCtx(ctx, time.Second, nil) {
			return nil, "", ctx.Err()
		}
	}
}

// postMember posts an addition (body) to member via's membership
// endpoint: the join string it answers, or its status and why not.
func postMember(ctx context.Context, via *member, body []byte) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+via.httpAddr+"/cluster/members", bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+catchUpToken)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Join  string `json:"join"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		return "", resp.StatusCode, fmt.Errorf("%s %s %v", resp.Status, out.Error, err)
	}
	return out.Join, resp.StatusCode, nil
}

// startJoining starts m, added already, with --cluster-join join and
// every member now as --cluster-peers, as sproutctl members add prints
// them: a joiner reaches, and lets in, only the members it was given
// until it has caught up, and group 0's leader may be one added after the
// cluster formed.
func (c *Cluster) startJoining(m *member, join string) error {
	extra, peers := c.extra, c.peers
	c.extra = append(append([]string(nil), extra...), "--cluster-join", join)
	c.peers = peerList(c.members)
	defer func() { c.extra, c.peers = extra, peers }()
	return c.start(m)
}

// awaitApplied waits until m's /metrics say it applied index, or
// deadline passes: one figure, the cheapest read at every poll while the
// member catches up.
func (c *Cluster) awaitApplied(ctx context.Context, m *member, index uint64, deadline time.Time) error {
	var last string
	for time.Now().Before(deadline) {
		if m.proc.Exited() {
			return fmt.Errorf("load: member %s exited while catching up (%v): %s", m.name, m.proc.Err(), outputTail(m.proc))
		}
		applied, err := c.applied(ctx, m)
		switch {
		case err == nil && applied >= index:
			return nil
		case err == nil:
			last = fmt.Sprintf("applied %d of %d", applied, index)
		default:
			last = err.Error()
		}
		if sleepCtx(ctx, catchUpPoll, nil) {
			return ctx.Err()
		}
	}
	return errors.New("load: member " + m.name + " did not catch up in time: " + last)
}

// applied reads m's applied index from its /metrics.
func (c *Cluster) applied(ctx context.Context, m *member) (uint64, error) {
	v, err := c.metric(ctx, m, "sprout_cluster_applied_index")
	return uint64(v), err
}

// catchUpLine sums up the first usable catch-up among rs in one line.
func catchUpLine(rs []Result) string {
	for _, r := range rs {
		cu := r.CatchUp
		if r.Skipped != "" || r.Errors > 0 || cu == nil {
			continue
		}
		return fmt.Sprintf("caught up in %s (%.1f MB/s), new member's peak RSS %s, leader's RSS %s → peak %s, round-trip p99 %s idle, %s during",
			FormatSeconds(cu.Time), cu.MBPerSec(), FormatBytes(int(cu.NewPeakRSS)), FormatBytes(int(cu.LeaderRSS)),
			FormatBytes(int(cu.LeaderPeakRSS)), FormatLatency(cu.IdleP99), FormatLatency(cu.SendP99))
	}
	return "failed"
}

// nameOf is m's name, or "none".
func nameOf(m *member) string {
	if m == nil {
		return "none"
	}
	return m.name
}
