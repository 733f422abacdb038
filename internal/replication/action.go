package replication

import (
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/store/wal"
)

// Action is one thing the core asks the shell to do (see doc.go). Ready
// hands them out in the order to carry them out; which fields count
// depends on Kind. Entries, messages, snapshots and records are shared
// with raft and the log: nobody writes into them.
type Action struct {
	Kind ActionKind
	// Seq (ActWrite) numbers the write; once it and every write before it
	// are durable (Log.OnDurable), the shell reports Core.Durable(Seq).
	Seq uint64
	// ActWrite: what to write, in this order: the snapshot (nil: none),
	// the entries, the hard state (nil: unchanged).
	Snapshot  *pb.Snapshot
	Entries   []*pb.Entry
	HardState *pb.HardState
	// Messages (ActSend) go to the peers they name; ActRebuild's once the
	// writes before it are durable (the vote a leader grants as it steps
	// down).
	Messages []*pb.Message
	// Records (ActApply, ActLocate) are for the store. Their bodies alias
	// the log's entries: Store.Apply copies what it keeps. They are valid
	// until the next Ready (the core reuses their buffers).
	Records []wal.Record
	// Locs (ActApply, ActLocate) say where each of Records is in this
	// member's log (Log.Locate): a full record's segment and size.
	Locs []wal.Loc
	// Index is ActApply's, ActLocate's and ActRestore's last entry (the
	// head's, for ActRestore), and ActCompact's applied index.
	Index uint64
	// Pos (ActPublish) is the position replies may now be sent up to.
	Pos uint64
	// Term (ActServe, ActRebuild) is the term this member leads or led.
	Term uint64
	// Handed (ActServe) are the reservations the last leader handed over
	// with its leadership to this member (HandOver's body), nil if none.
	Handed []byte
	// Passed (ActServe) is the term of a leader that handed its
	// leadership over with reservations this member does not take, since
	// a term or an entry came between the record and this term's first
	// (handedOver.takenBy): 0 if none. The jobs are ready here, as after a
	// failover.
	Passed uint64
	// ConfState and Book (ActMembership) are the membership after the
	// change at Index, and the address book.
	ConfState *pb.ConfState
	Book      Book
	// Refused (ActMembership): the change at Index was planned on a
	// membership replaced since, and applied as none (Core.refuseChange):
	// ConfState and Book are as they were.
	Refused bool
}

// write makes an ActWrite's writes to l, in the order it gives them.
func (a *Action) write(l Log) {
	if a.Snapshot != nil {
		l.InstallSnapshot(a.Snapshot)
	}
	if len(a.Entries) > 0 {
		l.Append(a.Entries)
	}
	if a.HardState != nil {
		l.SetHardState(a.HardState)
	}
}

// ActionKind says what an Action asks.
type ActionKind uint8

const (
	// ActRestore: empty the store (Store.Reset) and apply the log's head
	// to it (Log.ReadHead, a frame at a time, each Store.Apply): at
	// start, and when a snapshot was installed. The entries after Index
	// follow as ActApply.
	ActRestore ActionKind = iota + 1
	// ActSend: send Messages. A MsgSnap's fate is reported back
	// (Core.SnapshotSent); other messages may be dropped silently.
	ActSend
	// ActWrite: write Snapshot, Entries and HardState to the log, then
	// report Core.Durable(Seq) once they are durable.
	ActWrite
	// ActApply: Store.Apply(Records, Locs): committed entries through
	// Index.
	ActApply
	// ActLocate: Store.Located(Records, Locs): the leader's own committed
	// full records (Kind and ID only), which its store holds already, and
	// where they are in its log, so compaction can move them.
	ActLocate
	// ActCompact: Log.Compact(Index), after the ActApply before it.
	ActCompact
	// ActPublish: Journal.Publish(Pos), releasing the replies waiting.
	ActPublish
	// ActServe: this member leads Term and its store holds every
	// committed change: take clients' commands.
	ActServe
	// ActMembership: a membership change at Index was applied: write
	// ConfState and Book to the log (Log.SetMembership), and follow the
	// book (the transport's peers; a member no longer in ConfState
	// stops). Before the ActCompact of the same entries.
	ActMembership
	// ActControl: a control record at Index changed the book: it raised
	// the cluster version to Book.Version (finalize.go), or marked a
	// member draining or cordoned or no longer (Book.Draining and
	// Cordoned, Node.SetDraining and SetCordoned):
	// write Book with the membership to the log (Log.SetMembership), and
	// act on it. Before the ActCompact of the same entries.
	ActControl
	// ActRebuild: this member led Term and lost it; its store may hold
	// changes that never commit. Close every client, drop the store and
	// start again from the log (Node.rebuild: in place, with a new core).
	// Messages are sent once the log has made the writes before it
	// durable, whether or not the clients have closed by then. This core
	// takes no more events.
	// It is the last action handed out.
	ActRebuild
)

func (k ActionKind) String() string {
	switch k {
	case ActRestore:
		return "restore"
	case ActSend:
		return "send"
	case ActWrite:
		return "write"
	case ActApply:
		return "apply"
	case ActLocate:
		return "locate"
	case ActCompact:
		return "compact"
	case ActPublish:
		return "publish"
	case ActServe:
		return "serve"
	case ActMembership:
		return "membership"
	case ActControl:
		return "control"
	case ActRebuild:
		return "rebuild"
	}
	return "unknown"
}
