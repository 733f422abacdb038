package engine

import (
	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// replyPool holds the buffers replies are assembled in; one per OnTraffic,
// written with a single c.Write.
var replyPool bytebufferpool.Pool

// headerPool holds the small job-header buffers of asynchronous deliveries,
// kept apart from replyPool so its size calibration is not skewed.
var headerPool bytebufferpool.Pool

// session is one connection. Unless a field says otherwise it is only
// touched on the connection's event loop.
type session struct {
	srv    *Server       // immutable
	conn   gnet.Conn     // immutable; off-loop use only through gnet's thread-safe calls
	client *store.Client // immutable
	parser *codec.Parser // immutable
	cmd    codec.Command

	// put in progress: the header's fields and the id it took.
	putID                    uint64
	putPri, putDelay, putTTR uint32

	blocked   bool // a reserve is waiting; input stays buffered until it ends
	throttled bool // the client is not reading its replies
	closed    bool
	producer  bool // has put (stats current-producers)
	worker    bool // has reserved (stats current-workers)
}

// serve parses and answers as much buffered input as it may: everything,
// unless a reserve blocks or the client stops reading replies.
func (ss *session) serve() gnet.Action {
	c := ss.conn
	if ss.closed {
		return gnet.None
	}
	if ss.throttled {
		if c.OutboundBuffered() > ss.srv.cfg.MaxOutputBuffered/2 {
			return ss.checkInput()
		}
		ss.throttled = false
		ss.srv.unthrottle(ss)
	}
	if ss.blocked {
		return ss.checkInput()
	}
	in, _ := c.Peek(-1)
	out := replyPool.Get()
	consumed := 0
	action := gnet.None
	for {
		if c.OutboundBuffered()+len(out.B) > ss.srv.cfg.MaxOutputBuffered {
			ss.throttled = true
			ss.srv.throttle(ss)
			break
		}
		n, ok := ss.parser.Parse(in[consumed:], &ss.cmd)
		consumed += n
		if !ok {
			break
		}
		var quit bool
		out.B, quit = ss.dispatch(&ss.cmd, out.B)
		if quit {
			action = gnet.Close
			break
		}
		if ss.blocked {
			break
		}
	}
	// Tube names in ss.cmd alias in; they are dead once dispatched. gnet's
	// Discard(0) would throw away everything, hence the guard.
	if consumed > 0 {
		_, _ = c.Discard(consumed)
	}
	if len(out.B) > 0 {
		_, _ = c.Write(out.B)
	}
	replyPool.Put(out)
	if action != gnet.None {
		return action
	}
	return ss.checkInput()
}

// checkInput closes a connection whose unparsed input has outgrown its cap
// (a client pipelining behind a blocked reserve or without reading); body
// bytes are copied out as they arrive, so they never count.
func (ss *session) checkInput() gnet.Action {
	if ss.conn.InboundBuffered() > ss.srv.cfg.MaxInputBuffered {
		ss.srv.log.Debug().Int("buffered", ss.conn.InboundBuffered()).Msg("input cap exceeded; closing")
		return gnet.Close
	}
	return gnet.None
}

// resume continues after a blocked reserve has been answered.
func (ss *session) resume() {
	ss.blocked = false
	if ss.serve() == gnet.Close {
		_ = ss.conn.Close()
	}
}

func (ss *session) close() {
	if ss.closed {
		return
	}
	ss.closed = true
	if ss.throttled {
		ss.srv.unthrottle(ss)
	}
	ss.client.Close()
	ss.srv.conns.current.Add(-1)
	if ss.producer {
		ss.srv.conns.producers.Add(-1)
	}
	if ss.worker {
		ss.srv.conns.workers.Add(-1)
	}
}

// JobReserved implements store.Notifier: a blocked reserve got a job.
// It runs on whichever goroutine made the job available, so the reply goes
// through AsyncWrite, whose callback runs on this connection's loop.
func (ss *session) JobReserved(j *store.Job) {
	hdr := headerPool.Get()
	hdr.B = codec.AppendJobHeader(hdr.B, codec.WordReserved, j.ID(), len(j.Body()))
	err := ss.conn.AsyncWritev([][]byte{hdr.B, j.Body()}, func(gnet.Conn, error) error {
		headerPool.Put(hdr)
		// On error the connection is closed and OnClose has already put
		// the job back to ready.
		ss.resumeOnLoop()
		return nil
	})
	if err != nil {
		headerPool.Put(hdr)
	}
}

// WaitEnded implements store.Notifier: a blocked reserve ended empty.
func (ss *session) WaitEnded(r store.ReserveResult) {
	reply := codec.ReplyTimedOut
	if r == store.DeadlineSoon {
		reply = codec.ReplyDeadlineSoon
	}
	_ = ss.conn.AsyncWrite([]byte(reply), func(gnet.Conn, error) error {
		ss.resumeOnLoop()
		return nil
	})
}

// resumeOnLoop is resume for AsyncWrite callbacks, which run on the loop.
func (ss *session) resumeOnLoop() {
	if !ss.closed {
		ss.resume()
	}
}
