package engine

import (
	"context"
	"sync"

	"github.com/panjf2000/gnet/v2"
	"github.com/sproutmq/sprout/codec"
)

// Pipeliner is implemented by a Queue that may have several answers
// pending at once: a cluster member's session whose commands go to
// another member (docs/design/shards.md 5.3), where waiting for each
// answer in turn would cost a pipelining client a round trip between
// members per command. While the pending answers are all of commands it
// pipelines, the engine goes on with the commands that follow, up to
// MaxPipelined, and sends the replies in the commands' order; any other
// command waits until every answer pending has come, so it sees their
// effects, as on one server. The Queue delivers its answers in the order
// of their commands.
type Pipeliner interface {
	// Pipelines reports whether commands of op may be in flight behind
	// others: it holds only for commands the queue always answers later.
	Pipelines(op codec.Op) bool
}

// MaxPipelined bounds the answers a Pipeliner's session has pending, and
// MaxPipelinedBytes the put bodies among them: a session goes on while
// both are below. A deep pipeline fills the leader's batches (at 64, a
// follower's pipelined puts made a third as many entries a log write as
// the leader's own sessions); the bytes bound what a session's bodies in
// flight hold of its member's memory, whatever the largest job allowed.
const (
	MaxPipelined      = 256
	MaxPipelinedBytes = 1 << 20
)

// remote is a session's Queue when the server makes them (Config.Queues),
// and the Answers it delivers to: the answers arrive on any goroutine and
// reach the session's loop in the order they were delivered, however gnet
// orders its tasks, several to a task.
type remote struct {
	q         Queue
	pipeliner Pipeliner // q, if it pipelines; else nil
	ss        *session  // immutable
	drainTask gnet.RunnableFunc

	mu        sync.Mutex
	arrived   []Answer // guarded by mu: delivered, not yet taken by the loop
	scheduled bool     // guarded by mu: a task will take them
	spare     []Answer // loop only: the last batch's slice, for reuse

	// pipe holds, oldest first, what follows the session's awaiting
	// command: commands whose answers are pending (reply nil), and replies
	// of commands answered at once behind them (loop only).
	pipe []pipedReply
	// bodies is the bytes of put bodies whose answers are pending, of
	// which awaitedBody the awaiting command's (loop only).
	bodies, awaitedBody int
}

// pipedReply is one command in flight behind the session's awaiting one.
type pipedReply struct {
	op    codec.Op
	reply []byte // its reply if it was answered at once; nil while pending
	body  int    // a pending put's body length
}

func newRemote(ss *session, queues func(Answers) Queue) *remote {
	r := &remote{ss: ss}
	r.drainTask = r.drain
	r.q = queues(r)
	r.pipeliner, _ = r.q.(Pipeliner)
	return r
}

// Answered implements Answers.
func (r *remote) Answered(a Answer) {
	r.mu.Lock()
	r.arrived = append(r.arrived, a)
	schedule := !r.scheduled
	r.scheduled = true
	r.mu.Unlock()
	if schedule {
		_ = r.ss.conn.EventLoop().Execute(context.Background(), r.drainTask)
	}
}

// drain answers, on the session's loop, the commands whose answers
// arrived, in order, then serves the input that waited behind them. If
// the connection has closed meanwhile, they are dropped: OnClose has
// closed the queue, which put a reserved job back.
func (r *remote) drain(context.Context) error {
	r.mu.Lock()
	batch := r.arrived
	r.arrived, r.scheduled = r.spare[:0], false
	r.mu.Unlock()
	// A session on its way out after an answer that could not be given
	// (endLost) sends nothing more: its close is under way.
	if ss := r.ss; ss.end < endFenced {
		op := ss.awaiting
		ss.answerOnLoop(func(out *replies) {
			for i := range batch {
				if op == codec.OpNone {
					break // more answers than commands pending: a queue's bug
				}
				ss.answer(op, &batch[i], out)
				r.bodies -= r.awaitedBody
				r.awaitedBody = 0
				if ss.end >= endFenced {
					// FailedLost: no reply may follow one that could not
					// be given, or the client would take it for that one's.
					op = codec.OpNone
					break
				}
				r.next(out) // the next in flight becomes the awaited one
				op, ss.awaiting = ss.awaiting, codec.OpNone
			}
			ss.awaiting = op
		})
	}
	clear(batch)
	r.spare = batch
	return nil
}

// next makes the oldest command in flight the awaited one, once the one
// before it is answered: the replies given at once behind it go first.
func (r *remote) next(out *replies) {
	n := 0
	for ; n < len(r.pipe); n++ {
		p := &r.pipe[n]
		if p.reply == nil {
			r.ss.awaiting, r.awaitedBody = p.op, p.body
			n++
			break
		}
		out.buf = append(out.buf, p.reply...)
	}
	k := copy(r.pipe, r.pipe[n:])
	clear(r.pipe[k:])
	r.pipe = r.pipe[:k]
}

// mayGoOn reports whether the session may run more commands while answers
// are pending: each is of a command its queue pipelines, and there is
// room for one more.
func (r *remote) mayGoOn(awaiting codec.Op) bool {
	return r.pipelines(awaiting) && len(r.pipe)+1 < MaxPipelined && r.bodies < MaxPipelinedBytes
}

// pipelines reports whether the session's queue pipelines commands of op.
func (r *remote) pipelines(op codec.Op) bool {
	return r != nil && r.pipeliner != nil && r.pipeliner.Pipelines(op)
}

// remote is the session's remote, nil on a single node.
func (ss *session) remote() *remote {
	if qs := ss.loop.queues; qs != nil {
		return qs[ss]
	}
	return nil
}

// await marks op's answer pending: the awaited one, or in flight behind
// it; body is a put's body length.
func (ss *session) await(op codec.Op, body int) {
	r := ss.remote()
	if r != nil {
		r.bodies += body
	}
	if ss.awaiting == codec.OpNone {
		ss.awaiting = op
		if r != nil {
			r.awaitedBody = body
		}
		return
	}
	r.pipe = append(r.pipe, pipedReply{op: op, body: body})
}

// deferReply moves the replies from byte from of out, given at once to a
// command behind pending ones, into the pipe, to go after theirs.
func (ss *session) deferReply(out *replies, from int) {
	r := ss.remote()
	r.pipe = append(r.pipe, pipedReply{op: codec.OpNone, reply: append([]byte(nil), out.buf[from:]...)})
	out.buf = out.buf[:from]
}
