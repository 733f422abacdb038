package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/sproutmq/sprout/store/wal"
)

// A shard group's leader that hands its leadership to another member on
// purpose (internal/member's handOver: leaders balanced, a member
// leaving) hands its sessions' reservations over with it, though they are
// not in the log (doc.go, "Time"). It stops serving the group's commands
// and handing jobs out, then logs what its sessions hold (HandOver, the
// body the member's, opaque here) and asks raft for the transfer. The
// member that serves next takes them as it begins to serve, before any
// command (OnServe), only if nothing can have changed them since: it
// leads the very next term, and its term's first entry comes right after
// the record's. So the leader's journal holds back whatever is appended
// after the record (Journal.sealed: a control record proposed meanwhile,
// a store's own record) and its core proposes no membership change,
// until the leadership goes (then they are dropped, as with any loss) or
// stays (HandOverAborted, which a leader whose transfer did not happen
// logs before it serves again, voids the record, and what waited goes
// out after it). Anything else logged in between (from a leader of an
// older release, which does not hold), a term between, or another member
// serving: the jobs are ready on the new leader, as after a failover.

// The records of a handover (wal.KindMeta): Deadline is the term of the
// leader that logs them; Body, HandOver's, what its sessions hold.
const (
	// HandOver: the leader of term Deadline hands its leadership over;
	// the next one takes the reservations in Body.
	HandOver uint8 = 15
	// HandOverAborted: the leadership was not handed over after all; the
	// leader serves again.
	HandOverAborted uint8 = 16
	// (17 is tubes.go's GroupsFormed.)
)

// handedOver is the last HandOver applied: its leader's term, its
// entry's index and its body.
type handedOver struct {
	term, index uint64
	body        []byte
}

// handedOf is what r, a HandOver or HandOverAborted record of the entry
// at index, leaves to take.
func handedOf(r *wal.Record, index uint64) handedOver {
	if r.State != HandOver || len(r.Body) == 0 {
		return handedOver{}
	}
	// r.Body aliases the entry: kept beyond it.
	return handedOver{term: uint64(r.Deadline), index: index, body: bytes.Clone(r.Body)}
}

// takenBy is the body a member that leads term from the entry at first
// on takes: only the very next term, begun right after the record.
func (h handedOver) takenBy(term, first uint64) []byte {
	if h.body == nil || h.term+1 != term || h.index+1 != first {
		return nil
	}
	return h.body
}

// ErrNotAppended: the record was refused at once (the log is full:
// wal.ErrNoSpace); nothing was logged, so there is nothing to void.
var ErrNotAppended = errors.New("replication: the handover's record was not logged")

// ProposeHandOver logs that this member, the group's serving leader,
// hands its leadership over with the reservations body names, and
// returns once the record is committed and applied here. What is
// appended after it waits (Journal.sealed) until the leadership goes or
// ProposeHandOverAborted.
func (n *Node) ProposeHandOver(ctx context.Context, body []byte) error {
	if len(body) == 0 {
		return fmt.Errorf("replication: a handover without reservations")
	}
	return n.proposeHandOver(ctx, HandOver, body)
}

// ProposeHandOverAborted logs that the leadership stays here after all,
// which voids the last HandOver: the leader logs it before it serves
// again, and returns once it is committed and applied here.
func (n *Node) ProposeHandOverAborted(ctx context.Context) error {
	return n.proposeHandOver(ctx, HandOverAborted, nil)
}

// proposeHandOver logs a handover's record in the term this member
// serves, and waits for its acknowledgement.
func (n *Node) proposeHandOver(ctx context.Context, what uint8, body []byte) error {
	info, changed := n.Leader()
	if !info.Serving {
		return ErrNotServing
	}
	r := wal.Record{Kind: wal.KindMeta, State: what, Tube: "#", Deadline: int64(info.Term), Body: body}
	pos, _, err := n.journal.Append(&r, wal.Loc{})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotAppended, err)
	}
	n.signal()
	acked := make(chan struct{})
	n.journal.OnAcked(pos, func() { close(acked) })
	for {
		select {
		case <-acked:
			return nil
		case <-changed:
			var now LeaderInfo
			if now, changed = n.Leader(); !now.Serving || now.Term != info.Term {
				return fmt.Errorf("%w: the leadership changed before the handover was logged", ErrNotServing)
			}
		case <-n.halted:
			return errStopped
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrChangeTimeout, ctx.Err())
		}
	}
}
