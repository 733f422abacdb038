package router

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/sproutmq/sprout/store"
)

// outboxPayload bounds the payload an outbox builds for one member: past
// it, what it holds goes before more is added. The transport merges
// payloads into frames of this size anyway.
const outboxPayload = 64 << 10

// outbox batches what a Server sends, per member: the replies and events
// made while one payload of requests is handled, or while one
// acknowledgement releases held replies, go to each member as one
// payload, in the order they were added. Adding under an owner's lock
// and sending in order under the outbox's own keeps every session's
// replies in order, whichever goroutine made them.
type outbox struct {
	send func(to uint64, payload []byte) bool // immutable: ServerConfig.Send

	mu      sync.Mutex
	members []outPayload // guarded by mu: each member's payload being built, reused
	// refused: a member's stream did not take its payload (a full
	// queue), which stays to go first at a later flush. Guarded by mu.
	refused bool
}

// outPayload is the payload an outbox builds for one member.
type outPayload struct {
	to uint64
	b  []byte
}

// add queues payload's items for member to. The payload is the caller's
// again once add returns.
func (x *outbox) add(to uint64, payload []byte) {
	if len(payload) < 4 || binary.BigEndian.Uint32(payload) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.memberLocked(to)
	if len(p.b) > 4 && len(p.b)+len(payload)-4 > outboxPayload {
		x.sendLocked(p)
	}
	if len(p.b) == 0 {
		p.b = append(p.b, payload...)
		return
	}
	count := binary.BigEndian.Uint32(p.b) + binary.BigEndian.Uint32(payload)
	binary.BigEndian.PutUint32(p.b, count)
	p.b = append(p.b, payload[4:]...)
}

// addItem queues one item for member to.
func (x *outbox) addItem(to uint64, it *Item) {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.memberLocked(to)
	if len(p.b) > outboxPayload {
		x.sendLocked(p)
	}
	if b, err := AppendItem(p.b, it); err == nil {
		p.b = b
	}
}

// memberLocked is to's payload, made if need be.
func (x *outbox) memberLocked(to uint64) *outPayload {
	for i := range x.members {
		if x.members[i].to == to {
			return &x.members[i]
		}
	}
	x.members = append(x.members, outPayload{to: to})
	return &x.members[len(x.members)-1]
}

// flush sends what was added, one payload per member, and reports
// whether a member's stream refused its payload (a full queue): that one
// stays, to go first at the next flush (the member has no other way to
// learn that its requests were answered).
func (x *outbox) flush() (refused bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.refused = false
	for i := range x.members {
		x.sendLocked(&x.members[i])
	}
	return x.refused
}

// sendLocked sends p's payload, if it holds any, and empties it, unless
// the member's stream refuses it.
func (x *outbox) sendLocked(p *outPayload) {
	if len(p.b) > 4 && !x.send(p.to, p.b) {
		x.refused = true
		return
	}
	if cap(p.b) > 4*outboxPayload {
		p.b = nil // a large body's: not kept
	}
	p.b = p.b[:0]
}

// ackFlusher sends the held replies of one group's owners once the
// group's log acknowledges their changes. One callback, armed for the
// oldest position waited for, serves every owner, and one round of the
// Server's loop sends what each may, instead of a callback, a goroutine
// and a payload per reply (as the engine's loopFlusher does for a loop's
// connections).
type ackFlusher struct {
	acks  store.AckSource // immutable
	fired atomic.Bool
	fire  func() // immutable: marks it fired and wakes the Server's loop; safe anywhere

	mu      sync.Mutex
	waiting []*owner // guarded by mu: owners with held replies, each once (owner.queued)
	armedAt uint64   // guarded by mu: the lowest position a callback is armed for; 0 if none
}

func newAckFlusher(acks store.AckSource, wake chan<- struct{}) *ackFlusher {
	f := &ackFlusher{acks: acks}
	f.fire = func() {
		f.fired.Store(true)
		wakeUp(wake)
	}
	return f
}

// add queues o, whose oldest held reply waits for position pos. It may
// call fire at once, on this goroutine.
func (f *ackFlusher) add(o *owner, pos uint64) {
	f.mu.Lock()
	if !o.queued {
		o.queued = true
		f.waiting = append(f.waiting, o)
	}
	arm := f.armedAt == 0 || pos < f.armedAt
	if arm {
		f.armedAt = pos
	}
	f.mu.Unlock()
	if arm {
		f.acks.OnAcked(pos, f.fire)
	}
}

// flush sends, for every owner waiting, the replies the log has
// acknowledged, into the Server's outbox, and queues again those that
// still hold some.
func (f *ackFlusher) flush(spare []*owner) []*owner {
	f.mu.Lock()
	owners := f.waiting
	f.waiting, f.armedAt = spare[:0], 0
	for _, o := range owners {
		o.queued = false
	}
	f.mu.Unlock()
	acked := f.acks.Acked()
	for _, o := range owners {
		o.mu.Lock()
		if pos, held := o.sendAckedLocked(acked); held {
			f.add(o, pos)
		}
		o.mu.Unlock()
	}
	clear(owners)
	return owners[:0]
}
