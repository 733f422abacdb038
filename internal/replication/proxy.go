package replication

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// proxyRetry is how soon a connection that could not reach the leader
// tries again when no change of leader came meanwhile.
const proxyRetry = 200 * time.Millisecond

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	// Leader is the leader as this member knows it, with a channel closed
	// when that changes: Node.Leader.
	Leader func() (LeaderInfo, <-chan struct{})
	// Self is this member's name: a leader of that name that does not
	// serve yet is waited for, never dialled.
	Self string
	// Local serves a connection here (engine.Server.Serve): one that
	// waited for a leader and found this member serving.
	Local func(net.Conn)
	// Wait bounds how long a new connection waits for a leader it can
	// reach (Node.ElectionTimeout); then it is closed.
	Wait time.Duration
	// Logger gets the proxy's debug lines: a client's traffic is never
	// the operator's concern above that.
	Logger zerolog.Logger
}

// Proxy serves the clients of a member that does not lead (doc.go, "Any
// node serves"): Route leaves a connection to the engine while this member
// is the serving leader, and otherwise takes it, dials the leader's client
// address and copies bytes both ways until either side ends. A client's
// end of file is passed on as a half-close (CloseWrite), so the leader
// answers what was sent before it, as a single node does. With no leader
// known, or none reachable, a connection waits for one up to Wait. When
// the leader changes, every connection to another is closed: its session
// lived on the old leader, and its client must reconnect.
//
// Each proxied connection costs two goroutines and, where the kernel
// cannot splice between the sockets, a 32 KiB buffer each way (io.Copy);
// nothing else is buffered.
type Proxy struct {
	cfg    ProxyConfig        // immutable
	ctx    context.Context    // immutable; cancelled by Close
	cancel context.CancelFunc // immutable
	dialer net.Dialer         // immutable
	wg     sync.WaitGroup     // every goroutine the proxy started

	mu     sync.Mutex
	conns  map[*proxied]struct{} // guarded by mu: the connections copied now
	closed bool                  // guarded by mu

	current                                  atomic.Int64
	total, dialFailures, noLeader, leaderCut atomic.Uint64
}

// proxied is one client connection and its connection to the leader.
type proxied struct {
	client, upstream net.Conn // immutable
	leader           string   // immutable: the leader upstream reaches
	// halves counts the directions still copying; the last one to end
	// closes both connections.
	halves atomic.Int32
}

// ProxyStats are the proxy's figures, for /metrics.
type ProxyStats struct {
	// Current connections are copied to the leader now; Total ever were.
	Current int64
	Total   uint64
	// DialFailures counts the leader's client address refusing or not
	// answering a dial; NoLeader the connections closed for want of a
	// leader within Wait; LeaderChanged those closed because the leader
	// they reached is no longer the leader.
	DialFailures, NoLeader, LeaderChanged uint64
}

// NewProxy starts a proxy: its goroutine that closes the connections to
// a leader that is no more.
func NewProxy(cfg ProxyConfig) *Proxy {
	p := &Proxy{cfg: cfg, conns: make(map[*proxied]struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.watch()
	return p
}

// Route is engine.Config.Route: false while this member is the serving
// leader (the engine serves nc), else true, and nc is proxied. It never
// blocks: the wait for a leader and the dial happen on a goroutine of
// nc's own.
func (p *Proxy) Route(nc net.Conn) bool {
	if p.Serving() {
		return false
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = nc.Close()
		return true
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go p.serve(nc)
	return true
}

// Serving reports whether this member serves its clients itself: it
// leads, and has applied what was committed before its leadership. What
// Route leaves to the engine, and engine.Config.Serving.
func (p *Proxy) Serving() bool {
	info, _ := p.cfg.Leader()
	return info.Serving
}

// Stats reads the proxy's figures.
func (p *Proxy) Stats() ProxyStats {
	return ProxyStats{Current: p.current.Load(), Total: p.total.Load(), DialFailures: p.dialFailures.Load(),
		NoLeader: p.noLeader.Load(), LeaderChanged: p.leaderCut.Load()}
}

// Close stops the proxy:
//  1. no connection is taken any more (Route closes what it is given);
//  2. connections waiting for a leader, and every proxied one, close;
//  3. its goroutines are waited for.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.conns
	p.conns = make(map[*proxied]struct{})
	p.mu.Unlock()
	p.cancel()
	for pc := range conns {
		pc.close()
	}
	p.wg.Wait()
}

// serve finds nc a leader: itself, once it serves (nc goes back to the
// engine), or another member that answers a dial (nc is copied to it);
// after Wait with neither, nc is closed.
func (p *Proxy) serve(nc net.Conn) {
	defer p.wg.Done()
	end := time.Now().Add(p.cfg.Wait)
	deadline := time.NewTimer(p.cfg.Wait)
	defer deadline.Stop()
	var retry <-chan time.Time // set after a failed dial
	for {
		info, changed := p.cfg.Leader()
		switch {
		case info.Serving:
			p.cfg.Local(nc)
			return
		case retry == nil && info.Name != "" && info.Name != p.cfg.Self && info.Client != "":
			up, err := p.dial(info.Client, end)
			if err == nil {
				if p.pipe(nc, up, info.Name, changed) {
					return
				}
				continue // the leader changed while it was dialled
			}
			if p.ctx.Err() != nil {
				_ = nc.Close()
				return
			}
			p.dialFailures.Add(1)
			if e := p.cfg.Logger.Debug(); e.Enabled() {
				e.Err(err).Str("leader", info.Name).Str("address", info.Client).Msg("proxy: cannot reach the leader")
			}
			retry = time.After(proxyRetry)
		}
		select {
		case <-changed:
			retry = nil
		case <-retry:
			retry = nil
		case <-deadline.C:
			p.noLeader.Add(1)
			if e := p.cfg.Logger.Debug(); e.Enabled() {
				e.Str("remote", nc.RemoteAddr().String()).Dur("waited", p.cfg.Wait).
					Msg("proxy: no leader to reach; closing the connection")
			}
			_ = nc.Close()
			return
		case <-p.ctx.Done():
			_ = nc.Close()
			return
		}
	}
}

// dial connects to the leader's client address, giving up at end (the
// connection's wait is over) or when the proxy closes.
func (p *Proxy) dial(addr string, end time.Time) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(p.ctx, end)
	defer cancel()
	return p.dialer.DialContext(ctx, "tcp", addr)
}

// pipe copies between client and up, which reaches leader, until both
// directions end; it reports false, with up closed and client untouched,
// when the leader changed (changed closed) before the copying began.
func (p *Proxy) pipe(client, up net.Conn, leader string, changed <-chan struct{}) bool {
	pc := &proxied{client: client, upstream: up, leader: leader}
	pc.halves.Store(2)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.close()
		return true
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	// Registered first, then checked: a change after this check finds pc
	// in conns (watch closes it); one before it is seen here.
	select {
	case <-changed:
		if p.forget(pc) {
			_ = up.Close()
			return false
		}
		return true // watch took it, and closes both
	default:
	}
	p.current.Add(1)
	p.total.Add(1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.copy(pc, up, client)
	}()
	p.copy(pc, client, up)
	return true
}

// copy copies src to dst until src ends. At src's end of file dst is
// half-closed, so the other side learns of it; on an error both
// connections close, which ends the other direction too. The last
// direction to end closes both and forgets pc.
func (p *Proxy) copy(pc *proxied, dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			err = cw.CloseWrite()
		} else {
			err = errors.New("cannot half-close")
		}
	}
	if err != nil {
		pc.close()
	}
	if pc.halves.Add(-1) == 0 {
		pc.close()
		p.forget(pc) // unless watch or Close took it already
		p.current.Add(-1)
	}
}

// forget removes pc from the connections copied now; it reports whether
// it was there (so the caller owns closing it).
func (p *Proxy) forget(pc *proxied) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.conns[pc]; !ok {
		return false
	}
	delete(p.conns, pc)
	return true
}

// watch closes, at each change of leader, every connection to a member
// that is not the leader now (all of them when none is known, or when
// this member now leads).
func (p *Proxy) watch() {
	defer p.wg.Done()
	for {
		info, changed := p.cfg.Leader()
		var stale []*proxied
		p.mu.Lock()
		for pc := range p.conns {
			if pc.leader != info.Name || info.Serving {
				stale = append(stale, pc)
				delete(p.conns, pc)
			}
		}
		p.mu.Unlock()
		for _, pc := range stale {
			p.leaderCut.Add(1)
			pc.close()
		}
		if len(stale) > 0 {
			if e := p.cfg.Logger.Debug(); e.Enabled() {
				e.Int("connections", len(stale)).Str("leader", info.Name).
					Msg("proxy: closed the connections to a former leader")
			}
		}
		select {
		case <-changed:
		case <-p.ctx.Done():
			return
		}
	}
}

// close closes both connections; safe to repeat.
func (pc *proxied) close() {
	_ = pc.client.Close()
	_ = pc.upstream.Close()
}
