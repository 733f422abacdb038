package engine

import (
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sproutmq/sprout/codec"
)

// handler is the gnet event handler. Every method runs on the event loop
// that owns the connection (OnTick on gnet's ticker goroutine).
type handler struct {
	gnet.BuiltinEventEngine
	srv *Server
}

func (h *handler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if _, ok := c.Context().(loopProbe); ok {
		return nil, gnet.None
	}
	s := h.srv
	if s.cfg.Serving != nil && !s.cfg.Serving() {
		s.conns.refused.Add(1)
		return nil, gnet.Close
	}
	ss := &session{
		loop:   s.loopFor(c.EventLoop()),
		conn:   c,
		parser: *codec.NewParser(s.cfg.MaxJobSize),
	}
	if hand, ok := c.Context().(*tlsHandoff); ok {
		hand.tio.out = &ss.loop.tlsOut
		ss.conn = &tlsConn{Conn: c, tc: hand.tc, tio: hand.tio}
		if ss.loop.tlsSessions == nil {
			ss.loop.tlsSessions = make(map[*session]struct{})
		}
		ss.loop.tlsSessions[ss] = struct{}{}
		s.tls.current.Add(1)
		s.tls.total.Add(1)
	}
	if ss.loop.queues != nil {
		ss.loop.queues[ss] = newRemote(ss, s.cfg.Queues)
	} else {
		s.store.InitClient(&ss.client, ss)
	}
	c.SetContext(ss)
	if ss.loop.sessions != nil {
		ss.loop.sessions[ss] = struct{}{}
	}
	s.conns.current.Add(1)
	s.conns.total.Add(1)
	if e := s.log.Debug(); e.Enabled() {
		e.Str("remote", c.RemoteAddr().String()).Msg("open")
	}
	return nil, gnet.None
}

func (h *handler) OnClose(c gnet.Conn, err error) gnet.Action {
	ss, _ := c.Context().(*session)
	if ss == nil {
		return gnet.None
	}
	ss.close()
	if _, ok := ss.conn.(*tlsConn); ok {
		h.srv.tls.current.Add(-1)
	}
	if e := h.srv.log.Debug(); e.Enabled() {
		e.Err(err).Msg("close")
	}
	return gnet.None
}

func (h *handler) OnTraffic(c gnet.Conn) gnet.Action { return h.traffic(c, endNone) }

// OnPausedEnd makes handler a gnet.PausedEndHandler (patch 0005 of
// third_party/gnet): a client that ends its writing side while its
// session has paused reading (a blocked command with much input behind
// it) will send nothing more, so a reserve that waits ends at once, as
// beanstalkd ends it when its client hangs up (session.inputEnds).
// Reading resumes as it would have; the end of file then comes to
// OnHalfClose.
func (h *handler) OnPausedEnd(c gnet.Conn) gnet.Action {
	if _, ok := c.Context().(*session); !ok {
		return gnet.Close
	}
	return h.traffic(c, endInputEnding)
}

// traffic serves c's session: with end endInputEnding, its client's end
// has come (OnPausedEnd).
func (h *handler) traffic(c gnet.Conn, end ending) gnet.Action {
	ss := c.Context().(*session)
	ss.loop.beginReading()
	defer ss.loop.endReading()
	tc, ok := ss.conn.(*tlsConn)
	if !ok {
		if end != endNone {
			return ss.inputEnds(end)
		}
		return ss.serve()
	}
	// A TLS client's records are decrypted first; close_notify ends its
	// input as a half-close does.
	defer tc.settle()
	var a gnet.Action
	switch ended, err := tc.pump(&ss.loop.tlsIn); {
	case err != nil:
		if e := h.srv.log.Debug(); e.Enabled() {
			e.Err(err).Msg("TLS: closing")
		}
		return gnet.Close
	case ended:
		a = ss.halfClose()
	case end != endNone:
		a = ss.inputEnds(end)
	default:
		a = ss.serve()
	}
	if a == gnet.Close {
		tc.finish(ss)
	}
	return a
}

// OnHalfClose makes handler a gnet.HalfCloseHandler: when a client shuts
// down its writing side, gnet stops reading and leaves the connection to
// the session, which answers what it has received and closes once its
// replies are sent (see session.halfClose).
func (h *handler) OnHalfClose(c gnet.Conn) gnet.Action {
	if ss, _ := c.Context().(*session); ss != nil {
		ss.loop.beginReading()
		defer ss.loop.endReading()
		tc, ok := ss.conn.(*tlsConn)
		if ok {
			// The records that came before the end are served; a record
			// cut short never will be whole.
			defer tc.settle()
			if _, err := tc.pump(&ss.loop.tlsIn); err != nil {
				return gnet.Close
			}
			tc.ended = true
			tc.dropInput()
		}
		a := ss.halfClose()
		if ok && a == gnet.Close {
			tc.finish(ss)
		}
		return a
	}
	return gnet.Close
}

// OnTick re-checks sessions with unread replies in gnet: gnet has no
// "drained" event, so throttled sessions and the buffer budget poll.
func (h *handler) OnTick() (time.Duration, gnet.Action) {
	h.srv.wakeWatched()
	return h.srv.cfg.DrainPoll, gnet.None
}
