package load

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// A busy server holds more than the traffic it is serving at the moment:
// a backlog nobody is consuming yet, jobs scheduled for later, clients
// connected but quiet. Scenario.Stored and Scenario.Idle put such work
// beside a timed scenario's traffic before timing starts, so that its
// figures can be set against the same traffic on an empty server.

const (
	// StoredTube holds the ready half of Scenario.Stored. No consumer
	// watches it, so the traffic's consumers never reserve those jobs (a
	// low priority in the traffic's own tube would not do: a consumer
	// waiting in reserve while the traffic's queue is momentarily empty
	// would take one).
	StoredTube = "stored"
	// storedDelayMin and storedDelays set the delayed half's delays:
	// storedDelays different ones, a second apart, from storedDelayMin
	// seconds. None comes due during a run, and with different deadlines
	// the delayed jobs are ordered throughout the server's timer structure
	// rather than each new one landing at its end.
	storedDelayMin = 3600
	storedDelays   = 3600
	// storedFillConns and storedFillDepth are how the stored jobs are put:
	// like jobs-memory, 10 connections with 100 puts in flight on each.
	storedFillConns = 10
	storedFillDepth = 100
)

// beside is what setUpBeside put beside a timed run's traffic; its zero
// value holds nothing. Only the run's own goroutine touches it.
type beside struct {
	ctl            *testproc.Conn // stats connection, open for the whole run; nil when nothing was set up
	idle           []net.Conn
	conns          int64 // connections the server counted before the idle ones (ctl included)
	ready, delayed int64 // stored jobs: in StoredTube, and delayed in the traffic's tube
	idleHeld       int64
}

// setUpBeside stores s.Stored jobs and opens s.Idle idle connections, in
// that order, and waits until the server holds them all. The puts count as
// sent and acknowledged in m. It returns a non-nil *beside to close even
// when it fails.
func (s Scenario) setUpBeside(ctx context.Context, srv *Server, rc RunConfig, m *meter, prog *Progress) (*beside, error) {
	bs := &beside{}
	if s.Stored <= 0 && s.Idle <= 0 {
		return bs, nil
	}
	ctl, conns, _, err := memoryBaseline(srv)
	if err != nil {
		return bs, err
	}
	bs.ctl, bs.conns = ctl, conns
	label := prog.SetLabel("")
	defer prog.SetLabel(label)

	if s.Stored > 0 {
		prog.SetLabel(fmt.Sprintf("%s  storing %s jobs", label, FormatThousands(float64(s.Stored))))
		prog.Begin(0, m.total.Load)
		err := bs.store(srv.Addr, m, s.Stored, s.Body)
		prog.End()
		if err != nil {
			return bs, fmt.Errorf("load: storing jobs: %w", err)
		}
	}

	if s.Idle > 0 {
		n := s.Idle
		if rc.FileLimit > 0 {
			// The traffic's connections need descriptors too.
			n = min(n, IdleConns(s.Idle, rc.FileLimit-s.connCount()))
		}
		prog.SetLabel(fmt.Sprintf("%s  opening %s idle connections", label, FormatThousands(float64(n))))
		var opened atomic.Int64
		prog.Begin(0, opened.Load)
		var err error
		bs.idle, err = dialIdle(ctx, srv.Addr, n, &opened)
		prog.End()
		bs.idleHeld = opened.Load()
		if err != nil {
			return bs, err
		}
	}
	// The filling connections are gone and every idle one is accepted
	// before timing starts, so neither lands in the measurement.
	if err := waitConnections(ctx, ctl, bs.conns+bs.idleHeld); err != nil {
		return bs, err
	}
	return bs, bs.checkStored()
}

// store puts n jobs of body bytes over fresh connections: n/2 (rounded up)
// ready in StoredTube, the rest delayed in the default tube.
func (bs *beside) store(addr string, m *meter, n, body int) error {
	conns, err := dialMany([]string{addr}, storedFillConns, body, nil, nil)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	for _, c := range conns {
		_ = c.SetDeadline(time.Now().Add(memoryTimeout))
	}
	ready := (n + 1) / 2
	if err := useTube(conns, StoredTube); err != nil {
		return err
	}
	if err := fill(conns, m, [][]byte{testproc.PutFrame(body)}, ready, storedFillDepth); err != nil {
		return err
	}
	bs.ready = int64(ready)
	if err := useTube(conns, "default"); err != nil {
		return err
	}
	frames := make([][]byte, storedDelays)
	for i := range frames {
		frames[i] = putFrameDelayed(body, storedDelayMin+i)
	}
	if err := fill(conns, m, frames, n-ready, storedFillDepth); err != nil {
		return err
	}
	bs.delayed = int64(n - ready)
	return nil
}

// useTube sends use tube on every connection, pipelined.
func useTube(conns []*testproc.Conn, tube string) error {
	for _, c := range conns {
		c.WriteString("use " + tube + "\r\n")
		if err := c.Flush(); err != nil {
			return err
		}
	}
	for _, c := range conns {
		if _, err := c.Expect(testproc.ReplyUsing); err != nil {
			return err
		}
	}
	return nil
}

// putFrameDelayed is PutFrame with a delay in seconds.
func putFrameDelayed(size, delay int) []byte {
	b := fmt.Appendf(nil, "put 1024 %d 60 %d\r\n", delay, size)
	for range size {
		b = append(b, 'x')
	}
	return append(b, '\r', '\n')
}

// checkStored fails unless the server still holds the stored jobs as they
// were put: the traffic must run beside them, not through them.
func (bs *beside) checkStored() error {
	if bs.ready == 0 && bs.delayed == 0 {
		return nil
	}
	ready, err := statInt(bs.ctl, "stats-tube "+StoredTube, "current-jobs-ready")
	if err != nil {
		return err
	}
	delayed, err := statInt(bs.ctl, "stats", "current-jobs-delayed")
	if err != nil {
		return err
	}
	if ready != bs.ready || delayed != bs.delayed {
		return fmt.Errorf("load: server holds %d ready jobs in %s and %d delayed, want %d and %d",
			ready, StoredTube, delayed, bs.ready, bs.delayed)
	}
	return nil
}

// check runs when the traffic has stopped, its connections still open: the
// stored jobs and the idle connections must all still be there.
func (bs *beside) check() error {
	if bs.ctl == nil {
		return nil
	}
	// However long the run was, the check gets its own time.
	_ = bs.ctl.SetDeadline(time.Now().Add(memoryTimeout))
	if err := bs.checkStored(); err != nil {
		return err
	}
	if bs.idleHeld > 0 {
		cur, err := statInt(bs.ctl, "stats", "current-connections")
		if err != nil {
			return err
		}
		if cur < bs.conns+bs.idleHeld {
			return fmt.Errorf("load: server counts %d connections at the end, fewer than the %d idle ones and the %d before them",
				cur, bs.idleHeld, bs.conns)
		}
	}
	return nil
}

// items is what the run held beside its traffic, for Result.Items: idle
// connections or stored jobs.
func (bs *beside) items() int64 {
	if bs.idleHeld > 0 {
		return bs.idleHeld
	}
	return bs.ready + bs.delayed
}

func (bs *beside) close() {
	closeIdle(bs.idle)
	if bs.ctl != nil {
		bs.ctl.Close()
	}
}
