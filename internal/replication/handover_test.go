package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/wal"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestHandOverTaken: the member a leader hands its leadership to takes
// the reservations the leader logged (HandOver) as it begins to serve;
// not when anything was logged after the record, nor after the leader
// voided it (HandOverAborted), nor a record of an earlier term. One it
// passes by for an entry logged after it is reported (Action.Passed); one
// voided, or another member's to take, is not.
func TestHandOverTaken(t *testing.T) {
	c := newCluster(t, 3, 100)
	l := c.elect(1)
	c.producer(l, "t").put(0, "job")
	c.run(l)
	c.stabilize()

	// log appends a handover's record on m, the leader, and commits it.
	log := func(m *member, what uint8, body string) {
		t.Helper()
		r := wal.Record{Kind: wal.KindMeta, State: what, Tube: "#", Deadline: int64(m.core.Status().GetTerm()), Body: []byte(body)}
		if _, _, err := m.journal.Append(&r, wal.Loc{}); err != nil {
			t.Fatal(err)
		}
		c.run(m)
		c.stabilize()
	}
	// transfer hands m's leadership to member to, which must serve.
	transfer := func(m *member, to uint64) *member {
		t.Helper()
		m.core.TransferLeadership(to)
		c.run(m)
		c.stabilize()
		n := c.members[to]
		if !n.serving() {
			t.Fatalf("member %d does not serve after the transfer", to)
		}
		return n
	}

	log(l, HandOver, "held by 1")
	l = transfer(l, 3)
	if string(l.handed) != "held by 1" || l.passed != 0 {
		t.Fatalf("member 3 took %q (passed term %d), want what member 1 logged", l.handed, l.passed)
	}

	// Something logged after the record anyway (the seal lifted, as a
	// leader of an older release never sets it): passed by.
	log(l, HandOver, "held by 3")
	recordTerm := l.core.Status().GetTerm()
	l.journal.unseal()
	c.producer(l, "t").put(0, "after the record")
	c.run(l)
	c.stabilize()
	l = transfer(l, 2)
	if l.handed != nil || l.passed != recordTerm {
		t.Fatalf("member 2 took %q, logged before a put, and reports passing term %d's, want %d's", l.handed, l.passed, recordTerm)
	}

	log(l, HandOver, "held by 2")
	log(l, HandOverAborted, "")
	l = transfer(l, 1)
	if l.handed != nil || l.passed != 0 {
		t.Fatalf("member 1 took %q, voided (passed term %d)", l.handed, l.passed)
	}

	// A record of the term before, as a follower of a deposed leader
	// might hold: not this term's to take.
	r := wal.Record{Kind: wal.KindMeta, State: HandOver, Tube: "#", Deadline: int64(l.core.Status().GetTerm()) - 1, Body: []byte("old")}
	if _, _, err := l.journal.Append(&r, wal.Loc{}); err != nil {
		t.Fatal(err)
	}
	c.run(l)
	c.stabilize()
	if l = transfer(l, 3); l.handed != nil {
		t.Fatalf("member 3 took %q, of an earlier term", l.handed)
	}

	// A follower keeps a record taken by another member no longer: member
	// 2 saw 3 take member 1's at the start, and leads later with nothing
	// to report.
	log(l, HandOver, "held by 3 again")
	l = transfer(l, 1)
	if string(l.handed) != "held by 3 again" {
		t.Fatalf("member 1 took %q, want member 3's record", l.handed)
	}
	l = transfer(l, 2)
	if l.handed != nil || l.passed != 0 {
		t.Fatalf("member 2 took %q and reports passing term %d's handover, taken by member 1", l.handed, l.passed)
	}
}

// TestHandOverSealed: what a leader appends after its handover's record
// waits (Journal.sealed), and no membership change is proposed, so the
// record stays the last entry before the next term and the next leader
// takes the reservations; what waited is never acknowledged, as after a
// loss. A leadership that stays voids the record, and what waited goes
// out after it.
func TestHandOverSealed(t *testing.T) {
	c := newCluster(t, 3, 100)
	l := c.elect(1)
	c.putAcked(l, "before")

	record := func(m *member, what uint8, body string) {
		t.Helper()
		r := wal.Record{Kind: wal.KindMeta, State: what, Tube: "#", Deadline: int64(m.core.Status().GetTerm()), Body: []byte(body)}
		if _, _, err := m.journal.Append(&r, wal.Loc{}); err != nil {
			t.Fatal(err)
		}
	}
	record(l, HandOver, "held by 1")
	p := c.producer(l, "t")
	held := p.put(0, "after the record")
	// A control record too (the cluster's version, as finalization logs).
	if _, _, err := l.journal.Append(&wal.Record{Kind: wal.KindControl, Pri: clusterVersion}, wal.Loc{}); err != nil {
		t.Fatal(err)
	}
	c.run(l)
	c.stabilize()
	if err := l.core.ProposeChange(pb.ConfChangeRemoveNode, Member{ID: 3}, nil); !errors.Is(err, raft.ErrProposalDropped) {
		t.Fatalf("a membership change proposed while sealed: %v, want raft.ErrProposalDropped", err)
	}
	if p.acked() {
		t.Fatal("a put appended after the handover's record was acknowledged before the transfer")
	}
	if _, ok := viewOf(c.members[2].store)[held]; ok {
		t.Fatal("a follower holds a put appended after the handover's record")
	}
	l.core.TransferLeadership(2)
	c.run(l)
	c.stabilize()
	n := c.members[2]
	if !n.serving() || string(n.handed) != "held by 1" || n.passed != 0 {
		t.Fatalf("member 2 (serving %v) took %q, passed term %d's: want member 1's record taken", n.serving(), n.handed, n.passed)
	}
	if _, ok := viewOf(n.store)[held]; ok || p.acked() || c.members[3].controls != 0 {
		t.Fatalf("what the seal held back was logged after all (the put %v, control records %d)", ok, c.members[3].controls)
	}

	// The leadership stays: the void goes out, and what waited after it.
	record(n, HandOver, "held by 2")
	p = c.producer(n, "t")
	held = p.put(0, "waits for the void")
	c.run(n)
	c.stabilize()
	if p.acked() {
		t.Fatal("a put appended after the handover's record was acknowledged")
	}
	record(n, HandOverAborted, "")
	c.run(n)
	c.stabilize()
	if !p.acked() {
		t.Fatal("the put held by a voided handover was not acknowledged")
	}
	if _, ok := viewOf(c.members[3].store)[held]; !ok {
		t.Fatal("a follower lacks the put held by a voided handover")
	}
	if err := n.core.ProposeChange(pb.ConfChangeRemoveNode, Member{ID: 3}, nil); err != nil {
		t.Fatalf("a membership change once the handover is void: %v", err)
	}
}

// TestStepDownSendsVote: a leader that steps down for a transfer's
// campaign grants the receiver its vote, and sends it once the vote is
// durable, before its rebuild: with the group's third voter cut off, the
// receiver wins with that vote alone, without an election timeout.
func TestStepDownSendsVote(t *testing.T) {
	c := newCluster(t, 3, 100)
	l := c.elect(1)
	c.producer(l, "t").put(0, "job")
	c.run(l)
	c.stabilize()
	c.partition([]uint64{2}, []uint64{1, 3})
	l.core.TransferLeadership(3)
	c.run(l)
	c.stabilize() // no ticks: an election timeout never passes
	if got := c.members[3]; !got.serving() {
		t.Fatalf("member 3 does not serve after the transfer with member 2 cut off (leaders %v, member 1 rebuilt %v)",
			c.leaders(), l.rebuilds)
	}
}

// TestHandOverNotAppended: a handover's record, or its void, that the
// journal refuses at once (the disk full) says so (ErrNotAppended), so
// that a leader does not wait to void what was never logged, nor try a
// void again that is refused as fast; once the disk has room, it is
// logged.
func TestHandOverNotAppended(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	l := c.awaitServing(10 * time.Second)
	c.logs[l.self.Name].noSpace.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.ProposeHandOver(ctx, []byte(`[]`)); !errors.Is(err, ErrNotAppended) || !errors.Is(err, wal.ErrNoSpace) {
		t.Errorf("ProposeHandOver on a full disk: %v, want ErrNotAppended of wal.ErrNoSpace", err)
	}
	if err := l.ProposeHandOverAborted(ctx); !errors.Is(err, ErrNotAppended) {
		t.Errorf("ProposeHandOverAborted on a full disk: %v, want ErrNotAppended", err)
	}
	c.logs[l.self.Name].noSpace.Store(false)
	if err := l.ProposeHandOverAborted(ctx); err != nil {
		t.Errorf("ProposeHandOverAborted once the disk has room: %v", err)
	}
}

// TestAbortedTransferTimeoutNowDropped: a leader whose handover did not
// happen (its receiver silent: internal/member's handOver aborts the
// transfer and voids the record) serves again. The MsgTimeoutNow raft
// sent the receiver as the transfer began may still be in the
// receiver's inbox, the void behind it: stepped with it, it made the receiver campaign as a transfer does,
// which the third voter grants whatever its lease (raft's
// campaignTransfer), and serve while the old leader, not reached by the
// vote request, still served on its lease (found by a reviewing helper).
// A MsgTimeoutNow held while its leader appends entries after it is
// stale: dropped.
func TestAbortedTransferTimeoutNowDropped(t *testing.T) {
	c := newCluster(t, 3, 100)
	l := c.elect(1)
	c.putAcked(l, "job")
	r := wal.Record{Kind: wal.KindMeta, State: HandOver, Tube: "#", Deadline: int64(l.core.Status().GetTerm()), Body: []byte("held by 1")}
	if _, _, err := l.journal.Append(&r, wal.Loc{}); err != nil {
		t.Fatal(err)
	}
	c.run(l)
	c.stabilize()

	l.core.TransferLeadership(2)
	c.run(l)
	var timeoutNow *pb.Message
	for i, m := range c.net {
		if m.GetType() == pb.MsgTimeoutNow {
			timeoutNow = m
			c.net = append(c.net[:i:i], c.net[i+1:]...)
			break
		}
	}
	if timeoutNow == nil {
		t.Fatal("no MsgTimeoutNow sent to the caught-up receiver")
	}
	// Member 2 goes silent (its goroutine stalled): what comes for it
	// waits in its inbox. The leader aborts the transfer and voids its
	// record, with member 3.
	c.members[2].up = false
	l.core.TransferLeadership(1)
	c.run(l)
	void := wal.Record{Kind: wal.KindMeta, State: HandOverAborted, Tube: "#", Deadline: int64(l.core.Status().GetTerm())}
	if _, _, err := l.journal.Append(&void, wal.Loc{}); err != nil {
		t.Fatal(err)
	}
	c.run(l)
	var inbox []*pb.Message
	for range 3 {
		for _, m := range c.net {
			if m.GetTo() == 2 {
				inbox = append(inbox, m)
			}
		}
		c.stabilize()
	}
	// Serving again, it hands jobs out: reservations are not logged.
	if !l.serving() || l.core.HeardAgo() != 0 {
		t.Fatalf("the leader serves %v, heard a majority %d ticks ago: want it serving, leased", l.serving(), l.core.HeardAgo())
	}

	// Member 2 resumes: its inbox in order, the MsgTimeoutNow first; its
	// messages to member 1 are lost.
	n := c.members[2]
	n.up = true
	c.cut[[2]uint64{2, 1}] = true
	if err := n.core.Step(timeoutNow); err != nil {
		t.Fatal(err)
	}
	for _, m := range inbox {
		if err := n.core.Step(m); err != nil {
			t.Fatal(err)
		}
	}
	c.run(n)
	c.stabilize()
	if n.serving() && l.serving() {
		t.Fatalf("member 2 serves (term %d) while member 1, which aborted the transfer, serves on (term %d, a majority heard %d ticks ago)",
			n.core.Status().GetTerm(), l.core.Status().GetTerm(), l.core.HeardAgo())
	}
}
