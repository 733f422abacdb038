package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/store/wal"
)

// groupMeta is the meta group's id on the members' connections: above
// every shard group's.
const groupMeta groupID = maxGroups

// The meta group's log holds its state whole, as one record rewritten on
// each change (docs/design/shards.md, 1.2): meta changes are rare and the
// state is tens of KB, so a follower, a restore and a snapshot read the
// state itself, never a history of commands, and the log's compaction
// keeps exactly the newest.
const (
	metaRecordID   = 1
	metaRecordTube = "meta"
)

// ErrNotServing refuses a change proposed to a member that does not lead
// the group (or no longer does: whether a change it took commits is then
// unknown, until the member has applied the new leader's log).
var ErrNotServing = errors.New("replication: this member does not lead the group")

// Meta is this member's replica of the meta group: the cluster's
// placement (meta.State), the same on every member that has applied the
// same entries. Every member starts it from the same formation, computed
// from the same flags (meta.Formation), so the state before the first
// entry needs no exchange. The serving leader takes changes (Propose);
// every member reads its state from memory (State).
type Meta struct {
	node  *Node      // immutable
	state *metaState // immutable
}

// StartMeta starts the meta group's replica on this member, from its log
// (cfg.Log) and its voters (cfg.Peers, members of group 0, this one among
// them); formation is the state before the log's first entry. Timing and
// member-wide settings are as StartGroup takes them.
func (h *Host) StartMeta(cfg NodeConfig, formation *meta.State) (*Meta, error) {
	boot := formation.Encode()
	var st *metaState
	n, err := h.startGroup(groupMeta, cfg, func(n *Node) Applier {
		st = newMetaState(boot, n.journal, func(err error) {
			n.fail(err, "the meta group's log holds a state this member cannot read; stopping its replica")
		})
		return st
	})
	if err != nil {
		return nil, err
	}
	return &Meta{node: n, state: st}, nil
}

// Node is the meta group's replica as a group: its status, leader and
// figures.
func (m *Meta) Node() *Node { return m.node }

// Close stops the replica.
func (m *Meta) Close() { m.node.Close() }

// State is a copy of the newest committed state this member has applied;
// changed is closed when a newer one is. It never goes back (its
// Version only grows), not even while a leader that lost its leadership
// rebuilds, and never shows a change that is not committed.
func (m *Meta) State() (s *meta.State, changed <-chan struct{}) {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	return m.state.pub.Clone(), m.state.changed
}

// Propose makes the changes cmds ask for, all or none, on the serving
// leader, and returns once they are committed and durable here. A command
// the state refuses is returned (meta.ErrCommand) with nothing changed;
// ErrNotServing on a member that does not lead, or that lost the
// leadership before the change committed (it may still have: read the
// state once a leader is known).
func (m *Meta) Propose(ctx context.Context, cmds ...meta.Command) error {
	n := m.node
	leader, lost := n.Leader()
	if !leader.Serving {
		return ErrNotServing
	}
	pos, err := m.state.execute(cmds)
	if err != nil {
		return err
	}
	acked := make(chan struct{})
	n.journal.OnAcked(pos, func() { close(acked) })
	select {
	case <-acked:
		return nil
	case <-lost:
		return fmt.Errorf("%w: the leadership changed before the change was acknowledged", ErrNotServing)
	case <-n.Done():
		return fmt.Errorf("%w: the member stopped", ErrNotServing)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// metaState is the meta group's Applier.
type metaState struct {
	boot    []byte      // immutable: the formation's state, before any entry
	journal *Journal    // immutable
	fail    func(error) // immutable: stops the replica, on the node goroutine

	mu sync.Mutex
	// cur is the state the log's entries make: on the serving leader,
	// with the changes it executed and has not seen committed (what the
	// next change builds on); emptied to the formation by Reset. pub is
	// the newest committed state applied (by Version), which readers get.
	cur, pub *meta.State   // guarded by mu
	changed  chan struct{} // guarded by mu: closed, and replaced, when pub changes
}

func newMetaState(boot []byte, j *Journal, fail func(error)) *metaState {
	st := &metaState{boot: boot, journal: j, fail: fail, changed: make(chan struct{})}
	st.cur, _ = meta.Decode(boot) // Encode's own bytes
	st.pub = st.cur
	return st
}

// execute applies cmds to a copy of the state and, if every one is taken,
// makes the copy the state and appends it to the journal, returning its
// position: the serving leader's half of a change. Readers get it once it
// is acknowledged: committed and durable here (a rebuild drops it with
// the journal's waits if it never is).
func (st *metaState) execute(cmds []meta.Command) (uint64, error) {
	pos, next, err := st.executeLocked(cmds)
	if err != nil {
		return 0, err
	}
	st.journal.OnAcked(pos, func() {
		st.mu.Lock()
		st.publishLocked(next)
		st.mu.Unlock()
	})
	return pos, nil
}

func (st *metaState) executeLocked(cmds []meta.Command) (uint64, *meta.State, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	next := st.cur.Clone()
	next.Version++
	for _, c := range cmds {
		if err := next.Apply(c); err != nil {
			return 0, nil, err
		}
	}
	// Framed as a ready job's record: what the log's compaction keeps live
	// and its snapshots carry.
	rec := &wal.Record{Kind: wal.KindFull, ID: metaRecordID, Tube: metaRecordTube, State: wal.StateReady, Body: next.Encode()}
	pos, _, err := st.journal.Append(rec, wal.Loc{})
	if err != nil {
		return 0, nil, err
	}
	st.cur = next
	return pos, next.Clone(), nil
}

// publishLocked makes s what readers get, if it is newer than what they
// have.
func (st *metaState) publishLocked(s *meta.State) {
	if s.Version <= st.pub.Version {
		return
	}
	st.pub = s
	close(st.changed)
	st.changed = make(chan struct{})
}

// newest is the newest state among records, nil if they hold none; a
// state that does not decode (its frame's CRC was right: a release that
// wrote what this one cannot read) stops the replica rather than route
// from a state the others do not have.
func (st *metaState) newest(records []wal.Record) *meta.State {
	var newest *wal.Record
	for i := range records {
		if r := &records[i]; r.Kind == wal.KindFull && r.ID == metaRecordID {
			newest = r
		}
	}
	if newest == nil {
		return nil
	}
	s, err := meta.Decode(newest.Body)
	if err != nil {
		st.fail(err)
		return nil
	}
	return s
}

// Apply implements Applier: the newest state among records replaces the
// state. Records that are not a state cannot come from a meta group's
// leader.
func (st *metaState) Apply(records []wal.Record, _ []wal.Loc) {
	if s := st.newest(records); s != nil {
		st.mu.Lock()
		st.cur = s
		st.publishLocked(s.Clone())
		st.mu.Unlock()
	}
}

// Located implements Applier: the leader's own changes were executed
// when they were made, and are published when acknowledged (execute).
func (st *metaState) Located([]wal.Record, []wal.Loc) {}

// Reset implements Applier: the formation's state, which the log's
// entries change; readers keep the newest committed state meanwhile.
func (st *metaState) Reset() error {
	s, err := meta.Decode(st.boot)
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.cur = s
	st.mu.Unlock()
	return nil
}

// Close implements Applier.
func (st *metaState) Close() {}
