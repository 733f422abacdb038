package load

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/internal/testproc/procstat"
)

const (
	// idleHeadroom is how many descriptors below the open-file limit
	// KindIdle stays, for the servers' listeners, logs and the control
	// connection, and the generator's own files.
	idleHeadroom = 256
	// settle is how long the memory scenarios wait before reading the
	// server's resident memory, so that it reflects a steady state.
	settle = time.Second
	// memoryTimeout bounds each waiting step of the memory scenarios.
	memoryTimeout = 2 * time.Minute
)

// IdleConns is how many connections KindIdle opens under an open-file limit
// of fileLimit when the scenario asks for want (0: as many as possible):
// below the limit by the headroom and by what this process has open
// already (a run of every scenario keeps several hundred).
func IdleConns(want, fileLimit int) int {
	n := fileLimit - idleHeadroom - openFiles()
	if want > 0 && want < n {
		n = want
	}
	return max(n, 1)
}

// openFiles is how many descriptors this process has open, where /proc
// says; 0 elsewhere.
func openFiles() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(fds)
}

// runIdle opens idle connections and reports the server's resident memory
// growth per connection.
func (s Scenario) runIdle(ctx context.Context, srv *Server, rc RunConfig, prog *Progress) (Result, error) {
	res := Result{Server: srv.Spec.Name}
	n := IdleConns(s.Conns, rc.FileLimit)
	ctl, before, base, err := memoryBaseline(srv)
	if err != nil {
		return res, err
	}
	defer ctl.Close()

	var opened atomic.Int64
	prog.Begin(0, opened.Load)
	defer prog.End()
	conns, firstErr := dialIdle(ctx, srv.Addr, n, &opened)
	defer closeIdle(conns)
	got := opened.Load()
	if firstErr != nil {
		res.Errors, res.FirstError = 1, firstErr.Error()
	}
	if got == 0 {
		return res, firstErr
	}
	if err := waitConnections(ctx, ctl, before+got); err != nil {
		return res, err
	}
	sleepCtx(ctx, settle, nil)
	u, err := srv.Usage()
	if err != nil {
		return res, err
	}
	res.Items, res.RSS = got, u.RSS
	res.PerItem = float64(u.RSS-base.RSS) / float64(got)
	return res, ctx.Err()
}

// dialIdle opens n connections that will send nothing, counting them in
// opened as they connect. It stops at the first failure, returning the
// connections it has (nil where none) and that failure.
func dialIdle(ctx context.Context, addr string, n int, opened *atomic.Int64) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	var firstErr error
	var errMu sync.Mutex
	var wg sync.WaitGroup
	// Several source addresses, so that no one of them runs out of
	// ephemeral ports when runs follow each other quickly.
	sources := LoopbackSources(16)
	const dialers = 32
	for d := range min(dialers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := d; i < n && ctx.Err() == nil; i += dialers {
				d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: sources[i%len(sources)]}}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("load: idle connection %d of %d: %w", i+1, n, err)
					}
					errMu.Unlock()
					return
				}
				conns[i] = c
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	return conns, firstErr
}

// closeIdle resets the connections dialIdle opened: a reset instead of a
// FIN leaves no TIME_WAIT to hold the source port for the next run.
func closeIdle(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}
}

// waitConnections polls stats until the server counts want connections.
func waitConnections(ctx context.Context, ctl *testproc.Conn, want int64) error {
	deadline := time.Now().Add(memoryTimeout)
	for {
		cur, err := statInt(ctl, "stats", "current-connections")
		if err != nil {
			return err
		}
		if cur == want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("load: server counts %d connections, want %d", cur, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memoryBaseline opens the control connection a memory scenario reads
// stats on, and takes the server's connection count and usage before the
// scenario adds anything.
func memoryBaseline(srv *Server) (ctl *testproc.Conn, conns int64, base procstat.Usage, err error) {
	ctl, err = testproc.Dialer{Timeout: 5 * time.Second}.Dial(srv.Addr)
	if err != nil {
		return nil, 0, base, err
	}
	_ = ctl.SetDeadline(time.Now().Add(3 * memoryTimeout))
	if conns, err = statInt(ctl, "stats", "current-connections"); err == nil {
		base, err = srv.Usage()
	}
	if err != nil {
		ctl.Close()
		return nil, 0, base, err
	}
	return ctl, conns, base, nil
}

// runJobMemory stores s.Jobs jobs with pipelined puts and reports the
// server's resident memory growth per job. The puts' rate is the run's
// jobs/s.
func (s Scenario) runJobMemory(ctx context.Context, srv *Server, rc RunConfig, prog *Progress) (Result, error) {
	res := Result{Server: srv.Spec.Name}
	ctl, before, base, err := memoryBaseline(srv)
	if err != nil {
		return res, err
	}
	defer ctl.Close()
	conns, err := dialMany([]string{srv.Addr}, s.Conns, s.Body, nil, nil)
	if err != nil {
		for _, c := range conns {
			c.Close()
		}
		return res, err
	}
	for _, c := range conns {
		_ = c.SetDeadline(time.Now().Add(memoryTimeout))
	}
	m := newMeter(int64(s.Jobs))
	prog.Begin(0, m.total.Load)
	defer prog.End()
	t0 := time.Now()
	err = fill(conns, m, [][]byte{testproc.PutFrame(s.Body)}, s.Jobs, 100)
	res.Elapsed = time.Since(t0)
	u1, uerr := srv.Usage()
	res.Sent, res.Acked = m.sent.Load(), m.acked.Load()
	// The filling connections go before memory is read: a server may keep
	// their grown input buffers, which are not the jobs' cost.
	for _, c := range conns {
		c.Close()
	}
	if err != nil {
		return res, err
	}
	if uerr != nil {
		return res, uerr
	}
	res.Jobs, res.CPU = res.Acked, u1.CPU-base.CPU
	ready, err := statInt(ctl, "stats", "current-jobs-ready")
	if err != nil {
		return res, err
	}
	if ready != int64(s.Jobs) {
		return res, fmt.Errorf("load: server holds %d ready jobs after %d puts", ready, s.Jobs)
	}
	if err := waitConnections(ctx, ctl, before); err != nil {
		return res, err
	}
	sleepCtx(ctx, settle, nil)
	u, err := srv.Usage()
	if err != nil {
		return res, err
	}
	res.Items, res.RSS = int64(s.Jobs), u.RSS
	res.PerItem = float64(u.RSS-base.RSS) / float64(s.Jobs)
	return res, ctx.Err()
}
