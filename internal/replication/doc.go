// Package replication makes three or five Sprout processes one queue: the
// changes a single node writes to its write-ahead log are replicated
// through Raft (go.etcd.io/raft/v3), and a change is acknowledged to its
// client only once a majority of the members has written and fsynced it.
// This comment is the design; the code follows it, and where they differ
// the code is wrong.
//
// # What is replicated
//
// Exactly what a single node logs: the store's wal.Records (put, delete,
// bury, kick, kick-job, release, the id watermark, and compaction's
// rewrites of live jobs), in the order the store appends them. The leader
// gathers the records appended since its last proposal into one batch,
// as the log writer gathers a group commit, and proposes the batch as one
// Raft entry: the entry's data is the records' frames (wal's encoding,
// checksums included), so one proposal, one append to every member's log
// and one fsync carry every command that arrived meanwhile. Reservations,
// touches, TTR expiries and reserve timeouts are not logged today and are
// not replicated: they live on the leader only (see Time).
//
// # Who applies what, and when
//
// Every member keeps a store (package store) that is the state machine.
//
//   - The leader executes commands on its store at once, as a single node
//     does: a put is in the ready heap before any member has it, and the
//     store appends its records as it always does, to the member's
//     Journal, which gathers them as a group commit gathers a batch; the
//     core proposes each batch to Raft as one entry, and every member
//     writes it to its log (The log on disk) when Raft says to. The
//     client's PendingAck is still its last record's log position; the
//     AckSource the engine waits on (store.Options.Acks) is this package,
//     publishing the end of the last entry that is both committed (a
//     majority has it) and durable here.
//     So nothing is acknowledged, and no job shown (a RESERVED or FOUND
//     waits for the job's put), before it is committed: the store's rule
//     does not change, only who publishes the position (store/doc.go).
//   - A follower applies committed entries, in index order, to its store
//     (store.Apply): records carry whole states, so applying is the
//     recovery path's replay, not a re-execution of commands. A follower
//     serves no command itself (see Any node serves).
//   - The leader's store is therefore ahead of what is committed: it holds
//     the effects of its proposals in flight. It does not apply its own
//     entries again when they commit. A member that becomes leader first
//     applies every entry in its log (Raft guarantees they will all
//     commit with its first entry of the new term, and hands them out in
//     order before it), and serves clients only once that first entry has
//     committed and is durable here, so its store holds every committed
//     change before any command runs on it.
//   - The leader proposes the batch gathered so far when its own earlier
//     writes are durable, or at once when the batch passes a size
//     (Config.MaxBatch): while its disk is busy the batch grows, as a
//     group commit does. No entry is larger than that size (unless one
//     record is): a larger batch goes as several entries, so that a
//     follower's round of applying stays short. Each proposal's end
//     position is remembered in order; as the leader's own entries come
//     out committed and durable here, their ends are published, in the
//     order proposed.
//
// # Losing leadership
//
// A leader that loses leadership (a higher term, or CheckQuorum finding
// no majority within an election timeout) may hold uncommitted changes in
// its store, which the next leader may never have. It drops them by
// dropping its store: every client connection is closed (their reserved
// jobs come back ready, as on any close), and the store is rebuilt from
// the member's own log, applying only entries known committed, the rest
// following as the new leader commits them. It does so in place, in the
// running process (Node.rebuild): the node publishes that it no longer
// serves, has the answers its last write held sent once that write is
// durable, whatever it is doing then (the vote it granted as it stepped
// down, which a campaign needs: a transfer's receiver, with a voter
// down, wins only with it), has whatever serves the store close its clients
// (NodeConfig.CloseClients), drops what its journal gathered and the
// replies waiting on it, waits until its log has made durable what it
// was given, and makes a new core on the log, whose first actions empty
// the store (store.Store.Reset) and fill it again from the log's head and
// committed entries, as at start (logged once, at warn, with the terms).
// The store, the transport, the listeners and the side port stay: other
// members' connections and clients proxied elsewhere never see it. A node
// partitioned from the majority therefore stops acknowledging (nothing it
// proposes commits) at once, and stops handing out jobs within one
// election timeout. Raft's CheckQuorum alone is not enough for that: it
// checks once per election timeout for the followers heard since the last
// check, so a leader cut off just after a check steps down nearly two
// timeouts later (17 ticks of 10 in the tests), while the majority may
// elect another after one. The core keeps a lease of its own: a serving
// leader that has not heard from a majority of the voters within the last
// election timeout is rebuilt at once (CheckQuorum stays on: it is also
// what makes followers ignore a disruptive candidate while their leader
// is alive). A lease counted in ticks cannot see a stall it has not
// ticked through yet: a leader resumed after a SIGSTOP runs its clients'
// queued commands before its node takes the tick that finds the majority
// gone. So the node also keeps the lease in time (Node.Leased): renewed
// only by a tick that still counts a majority heard, good for half an
// election timeout but never past an election timeout less two ticks from
// the heartbeat round a majority last answered (the followers' ticks may
// run a tick ahead; a round is numbered by the tick that sent it, raft's
// ReadIndex asked with that tick as its context, so an answer held on its
// way back counts from when its round went out, not when it came:
// Core.LeaseAgo), and
// asked by the engine before each job it hands out
// (engine.Config.Leased), which closes the connection instead, and by
// internal/router before each job handed out and each read answered from
// a group's store (peeks, stats, list-tubes), which refuses it instead
// (the member asks the next leader, or its own connection closes). Answers
// that waited in the node's inbox through a stall count as heard before
// it, not after the missed ticks it takes first (Node.tick). Clients'
// replies that were held when it stepped down were
// never sent: what they asked may or may not have been done by the new
// leader, as with any server that goes away. A leader that never served
// has applied only committed entries, and simply follows.
//
// The member's in-process writers are not clients: a tube's import or
// drop, the admin API's bulk changes. One that began before the loss and
// runs on stops at its next job once the store is Reset
// (store.ErrReset), and whatever it appended after the journal dropped
// its batch is dropped again when the member next serves (the journal
// reset again), never proposed: the store it was made on was rebuilt
// since. Its wait for an acknowledgement ends with the leadership it was
// made in (internal/member's awaitAcked compares terms): the journal's
// positions go on, so a later leadership's would pass it.
//
// # Time
//
// Deadlines in records are the leader's wall clock (store.Store.wall), as
// they are in a single node's log; a follower converts them to its own
// monotonic clock when it applies them, and never writes a time of its own
// into an entry. A new leader fires the delays it applied by its own
// wall clock, so members' clocks must agree (NTP) as they must for any
// deadline; taking the larger of its own clock and the last leader's for
// them, so that time never runs backwards across a failover, is not built
// yet: each batch of a finalized cluster carries the leader's clock (a
// KindClock record, store.Store.Clock, which does take the larger), but
// only the dedup table's entries go by it. Reservations, their TTRs
// and blocked reserves exist on the leader only: when the leader is lost,
// the jobs it had handed out are ready on the new leader (their reserves
// were never logged), their clients' connections end, and the workers
// that reconnect may get them again. That is the one way a job is
// delivered twice, and only across a failover (docs/cluster.md). A
// leadership handed over on purpose takes them along (handover.go).
//
// # The log on disk
//
// Each member's -b directory is its Raft log, in segments of the segment
// engine (SharedLog, sharedlog.go; store/segment/doc.go), the engine a
// single node's job journal (store/wal) is written with too: one segment
// log for every group the member holds (docs/design/shards.md 2.4), each
// group's index a GroupLog (wallog.go; WALLog is group 0's on a log of
// its own). While the member holds group 0 alone, a segment's header has
// version 2 (segment.VersionRaftLog), every segment begins with a
// checkpoint (segment.Options.Checkpoints), and each frame's payload
// begins with its kind (integers little-endian, each frame checked by its
// CRC-32C):
//
//   - checkpoint (16): the cluster's id, the member's Raft id and name,
//     the hard state (term, vote, commit) and the membership (raft's
//     ConfState, as protobuf). The first frame of every segment, so any
//     prefix of segments can be removed without losing what it says.
//   - entry (17): index, term, the term of the entry before it, type, and
//     the data: for a normal entry the batch of records, as a journal's
//     frames (store/wal). One Append is one group of entry frames, in one
//     segment.
//   - hard state (18): term, vote, commit, with each change.
//   - head begin (21): a snapshot's index: the head frames of a snapshot
//     being received follow it.
//   - head (19): a snapshot's index, then up to 1 MiB of its records as
//     wal frames (one larger record alone): a snapshot's records, in as
//     many frames as they take, each written as it arrives.
//   - snapshot (20): its index, term and membership, then the count and
//     bytes of its head frames, then the book as of its index (a u32
//     length and JSON) when one came with it: written once they are all
//     durable, it is what installs the snapshot. Head frames that no
//     snapshot frame follows (a stream that broke, a crash while one was
//     received) are not taken for installed. A release before the book
//     was written there reads the frame and ignores it.
//
// Once another group is attached (SharedLog.Attach), appends move at once
// to a new segment of version 3 (segment.VersionMultiRaft, Log.SetVersion),
// and the directory never gets a version 2 segment again: in a version 3
// segment each frame's payload has its group (u16) right after its kind;
// the checkpoint's group is 0 and names none, and after the name it holds
// the count of groups and, for each, its number, the highest job id its
// frames named so far (what the first checkpoint replayed says is the
// group's id floor: a header's id is every group's highest, and each
// group's ids are of its own prefix), hard state, membership and book (a
// u32 length and JSON, always there). One more kind: group
// dropped (22), the group's last index: replay forgets the group there
// (SharedLog.Drop: a member whose replica of the group was removed,
// internal/member's leaveGroup). A version 2 segment reads as group
// 0's, whatever follows it. A release that knows only version 2 refuses
// the directory at its first version 3 segment ("unknown version 3", a
// segment.VersionError): it never misreads one. Every group's frames go
// through the one writer: the appends of every group since the last batch
// are the next batch, and one fdatasync covers them all; each group's
// OnDurable waits for its own last write. A group's jobs are the segment
// log's items keyed group<<53 | id, so compaction hands each group's
// serving leader its own jobs (a group this member does not lead asks its
// leader for the rewrites: below, "Snapshots and a bounded log"); each
// group holds what it needs (segment.Log.Hold), and the log keeps from
// the smallest. The groups' indexes share nothing but the segment log: lock order is a
// GroupLog's mutex, the SharedLog's, the segment log's.
//
// Replay takes the frames in order. The last checkpoint or hard state
// is the state: a new state and the checkpoint that carries it go to the
// segment log in one append (segment.Group.Checkpoint), so a segment the
// writer starts after the state never opens with the one before. A head
// begin forgets the head frames before it that no snapshot frame took. A
// snapshot makes the head frames of its index since the last head begin
// the head (their places on disk: the head is never read into memory),
// and drops every entry; head frames that do not add up to what the
// snapshot frame counts mean a damaged log, refused as damage is. (A
// conversion's first segment, and directories written before the head
// begin frame, hold one group of head frames and their snapshot frame,
// without the counts.) An entry whose index follows the last one held is appended; one
// whose index is held replaces it and every entry after it (a deposed
// leader's uncommitted tail is superseded by appending the new leader's
// entries: the last entry written for an index wins); one with any other
// index, the first of the oldest segment left (the entries before it were
// compacted and their segments removed), starts the log there, its
// recorded previous term being Term(FirstIndex-1). The first segment's
// header id is the id floor: every id the removed segments named is at
// most it. A directory whose checkpoint names another cluster, or another
// member, is refused in one line (ForeignLogError), and so is a single
// node's directory (ErrSingleNodeLog; but below); neither names a flag:
// cmd/sprout says how to start on it.
//
// Every write goes through the segment log's writer with -f 0 semantics
// whatever -f says (AsyncStorageWrites: a MsgStorageAppend is answered
// from the log's OnDurable), so the group commit of a single node is the
// batching of a member, and "a majority has it" means written and fsynced
// by a majority. A hard state that only raises the commit index is the one
// write that asks for no fsync of its own (raft.MustSync: a member that
// loses it learns the commit index again from the leader): it is written
// unsynced (segment.Group.Unsynced) and the next fsync covers it, so
// commit updates do not put a second fsync between a member's appends. A
// write is never refused: on a full disk the log keeps trying and nothing
// after the write becomes durable meanwhile (so nothing is acknowledged),
// and the leader's journal refuses every record but deletes, as a single
// node does, while the log says it is full. The raft.Storage the library
// reads is an index of the entries held (term, segment, offset, size) over
// those files, with the newest entries in memory (every one not yet
// durable, and 8 MiB more): the log is never held in memory twice, and an
// older entry is read back from its segment (pread) and checked; entries
// written one after another (a replay, a follower catching up) are read
// a run at a time, up to 1 MiB in one pread (GroupLog.spanLocked).
//
// # Snapshots and a bounded log
//
// The log is kept small the way a single node keeps it small: the leader's
// compaction rewrites the live jobs of its oldest segment at the head
// (segment.Migrator, set on the leader's log once it serves), and those
// rewrites are records like any other, so they are proposed, committed and
// written by every member. For that the store must know, on every member,
// which segment holds each job's latest full record: ActApply and
// ActRestore give each record its place in this member's log (the segment
// its entry was written to, Log.Locate; or its head frame's,
// Log.ReadHead), and the leader's own entries, which it does not apply,
// are located once committed (ActLocate), so whichever member leads can
// move any job. The log knows the same from the entries it folds as they
// are applied (Compact) and tells the segment log which segments hold live
// records (segment.Log.Moved), and from which segment on it still holds
// anything (segment.Log.Hold). A segment before that one, with nothing
// live in it, is deleted once the fsync that covers the hard state whose
// commit includes the entries that moved its jobs has finished. A follower
// does not rewrite: its segments go as the leader's rewrites, applied,
// leave them with nothing live. Those come by themselves when the
// follower's segments are like the leader's (one group); where groups
// share a member's segments they are not, and an idle group's leader
// rewrites nothing, so a member asks a group's leader to rewrite the jobs
// of that group its log wants out of an old segment (a migrate request on
// the Raft stream, migrate.go), again each election timeout until the
// log sees them moved. So each directory stays within the single node's
// bound (twice the live data plus a few segments). Raft's log then begins
// at the first entry still held (Storage.FirstIndex), and a member that
// needs older entries (down for long, or a new member) gets a snapshot
// instead: the live jobs as of a committed index, built by the leader from
// its log (replaying its segments up to that index), sent as a stream of
// records beside the Raft message that announces it, and installed by the
// receiver as its head, its entries dropped.
//
// Neither side holds a snapshot whole in memory. Raft's pb.Snapshot
// carries only the metadata (index, term, membership; its Data is empty);
// the records stream beside it.
//
// The leader's view. Log.Snapshot, which raft calls on the node goroutine,
// only records where the snapshot's records are, at the index it picks
// (below): the places of the head's frames and of the entries' frames
// through the index, and the id floor. It reads nothing. That is a
// consistent view: those frames are committed, durable and never written
// again, and their segments stay (the log's segment.Log.Hold counts the
// view) while a stream reads the view, or until the first does: a view
// goes once its last stream closes (making another reads nothing, and what
// it keeps on disk must not outlast the need), or, if none opened it, once
// the log is compacted past its index. Not the leader's store: it holds
// its proposals in flight, which may never commit. Log.OpenSnapshot opens
// a stream over the view, on the transport's goroutine. A first pass reads
// the view's frames back (pread, each checked) and keeps, for each job
// live at the index, which of the view's records is its latest full
// record: an id and a count each, no body. A second pass reads them again
// and hands out chunks of up to 1 MiB of whole records, each a wal frame
// copied as it is on disk (a larger record alone): every live job's latest
// full record and the updates after it, in log order, then the highest id
// any record of the view named (KindIDs), then the table of request keys
// the view's records make (store.DedupTable: its clock, a KindClock, and
// each live key, a KindReq; docs/design/shards.md 5.6), so that the
// receiver answers a resent request as the sender would. Folding them, as
// store.Apply and wal.Fold do, gives the live jobs as of the index, and
// the keys. What the leader holds while it sends is its chunk and read
// buffers, that map and the table (about 145 bytes a key).
//
// Compaction keeps, beside the live jobs' entries and those kept for
// followers, the entries whose time (their batch's KindClock) is within
// store.DedupTTL of the latest entry time folded or of the wall clock
// less a second, and the head while its own time is: a store rebuilt
// from the log then has every key a resent request may come with, the
// keys of jobs deleted since among them. Only within the newest
// retainSegments segments, as the entries kept for followers: 10 s of a
// busy group's writes take about one segment of the default 10 MiB, and
// the directory keeps its bound.
//
// The receiver's spool. The transport hands each chunk, as it arrives
// and checks, to the sink Log.ReceiveSnapshot opens: the sink decodes
// the chunk's records (each checked by its CRC, as a peer's records
// always are) and writes a head begin frame, then each chunk as a head
// frame, each its own group in the member's log, with at most
// snapshotWindow (8 MiB) of them written and not yet durable. So the
// receiver holds a few chunks whatever the snapshot's size, and TCP's
// flow control paces the sender to the receiver's disk. The segments the
// spool writes stay until the snapshot is installed or given up. Once the
// whole has come and checks (its bytes, records and CRC-32C, its index,
// term and cluster) and every head frame is durable, the snapshot is
// received; only then is raft's message stepped into the core (a
// snapshot the log has not received whole is refused), and raft installs
// it (its MsgStorageAppend carries it): Log.InstallSnapshot writes the
// snapshot frame, and that frame, durable, is the install. A member that
// crashes before it finds its log as it was (the head frames without a
// snapshot frame are skipped, their segments removed in time); after it,
// the new head. A stream cut at any byte, a chunk or a whole that does
// not check, a disk that fills (the log says it is full), each ends the
// spool: nothing was installed, nothing is served from it, the refusal
// is logged once per peer and minute, and raft sends the snapshot again,
// from its start, on a new stream. The log keeps only the head frames'
// places (and, until they are counted live, their full records' ids and
// sizes); the store is filled by reading the head back in batches of a
// frame (Log.ReadHead, for ActRestore), and a snapshot built from a log
// whose head is an installed snapshot reads its frames as it reads
// entries.
//
// A single node's -b directory, or a beanstalkd binlog, becomes the first
// member of a new cluster with every job kept: the jobs it holds become
// the head of a snapshot at index 1, term 1, the state every initial
// member starts from, written as a new segment before the single node's
// segments are removed (logdir.go: the directory read with wal.Recover,
// the segment written with segment.Dir.Create, durably and renamed into
// place before the old ones go, so a crash leaves one complete copy; old
// segments found beside a member's are a conversion's leftovers, and go).
// Only a cluster whose initial members are this one alone takes it over
// (others would start from an empty index 1 and never ask for the jobs):
// members join it later (Membership changes).
//
// Precisely (Log, and the tests' MemoryLog as its reference): a log holds a head and
// the entries from FirstIndex on. The head is an installed snapshot's
// records (in WALLog, frames on disk), kept while some job is live only
// there, and the highest id any dropped record named (as a segment header
// keeps it). Replaying the head
// and then the committed entries, with wal.Fold (an update of a job not
// yet seen is skipped: its full record was dropped, and a later rewrite
// carries it), gives the live jobs as of any commit index at or after the
// last compaction; that is how a member's store is rebuilt at start and
// how a snapshot is built, at the commit index, with the id watermark as
// its last record. A log drops entries only through what was applied and
// committed, and only those that hold no live job's latest full record.
// WALLog drops them from its index as MemoryLog does, and frees their
// disk a segment at a time; restarted, it holds again every entry its
// segments still have, from the first on: more than it must, which a log
// may always do. A snapshot's view is made again once the last one is
// gone, or the log was compacted past it, or the membership changed.
//
// A member whose disk was emptied does not come back under its Raft id:
// the leader holds a match index for it that its empty log contradicts,
// and it could vote a second time in a term it voted in before. It comes
// back as a new member (Members and their traffic), and the snapshot
// fills it. Raft would panic on the first heartbeat that commits past the
// member's last entry; the node refuses that heartbeat instead and stops
// (ErrLogLost, logged at error, Node.Err), and cmd/sprout exits. Entries
// that reach it before that heartbeat do not fill it again: raft never
// probes a follower below the match it holds for it
// (TestEmptiedVoterNotFilledBeforeAHeartbeat), so it refuses them until the
// heartbeat comes. A leader
// elected while the member was away holds no match index for it, so
// nothing contradicts it and raft fills it again: that works, but only the
// second vote's hazard says it should not.
//
// # Any node serves
//
// Clients may connect to any member. A member that is not the serving
// leader hands each accepted connection (engine.Config.Route, before the
// engine enrolls it) to a proxy (proxy.go) that dials the leader's client
// address (members tell each other theirs when they connect) and copies
// bytes both ways, two goroutines per connection, so a client sees one
// queue wherever it connects, its pipelined commands run in order, and
// each reply comes from the leader's store; a client's end of file is
// passed on as a half-close, so the leader answers what came before it.
// The leader takes the proxies' connections as any client's. When the
// leader changes, every proxied connection to another member than the
// new leader is closed (to every member, while none is known), and the
// old leader closes its own clients (Losing leadership): a client
// reconnects and is never answered wrongly. With no leader known, or the
// leader's client port not answering, a new connection waits for one up
// to an election timeout (Node.ElectionTimeout, the longest raft draws),
// then is closed; one that finds this member serving meanwhile goes back
// to the engine (engine.Server.Serve). The proxy counts its connections
// (Proxy.Stats).
//
// # Members and their traffic
//
// --node NAME, --cluster-listen HOST:PORT and --cluster-peers
// NAME=HOST:PORT,... (the initial members, itself included) start a
// member; -b is required. Names hold letters, digits, '-', '_' and '.'.
// An initial member's Raft id is FNV-1a of its name (MemberID), so every
// member knows every other's from --cluster-peers alone; a member that
// joins later, or comes back on an emptied directory, gets a new id
// through a membership change (--cluster-join CLUSTER:ID). The cluster's
// id is FNV-1a of the initial members' sorted names (ClusterID): names
// and not addresses, so members that spell an address differently agree;
// the log keeps it in the directory, so that a directory from another
// cluster is refused. An initial member therefore keeps the
// --cluster-peers it started with; the members added since it knows from
// its log's book (Membership changes). Started on its directory with
// --cluster-peers rewritten, it is refused with the --cluster-join
// CLUSTER:ID (the directory's) that starts it as it is. A list without --node, a name or an address twice, a
// malformed entry, or one or two of the TLS files: each is refused at
// start in one line naming the flag (NodeConfig.Validate).
//
// Transport (transport.go, wire.go). Each member dials every peer and
// writes only on that connection; it reads only on the connection each
// peer dialled to it: one connection per peer and direction. Each
// connection starts with a hello each way, the dialer's first: protocol
// version, stream kind (messages or one snapshot), the cluster's id, the
// sender's Raft id and name, the receiver's name, the sender's client
// address (-l/-p, for the proxy) and --http address (for the admin API,
// which a follower forwards to the leader), and a trailer that members of
// protocol 2 do not read: the highest protocol the sender speaks and its
// incarnation (drawn at each start, so a peer logs a restart). The
// connection speaks the highest protocol both ends speak: 8 between
// members of this release (3's frames from a member whose router reads
// the commands streams, Host.Routes, and 5 to 8 each a message of the
// router's more: wire.go), down to 3 or 2 with members before, so a
// rolling upgrade keeps every pair talking (MemberStatus.Protocol shows
// each link's). Once group 0's leader speaks 3 with every member of its
// book, it finalizes the cluster (finalize.go): a control record raises
// the cluster version, which the book keeps, to 3; from then on every
// member refuses connections of protocol 2 and writes version 3
// segments, so the release before can neither talk to it nor open its
// directory (NodeConfig.NoFinalize keeps a cluster at 2). Protocol 3
// names each message's Raft group (docs/design/shards.md), batches a drain's small
// messages in one frame and coalesces its heartbeats and their responses
// into one frame of (group, flags, term, commit, context) tuples, which
// the reader expands back into the messages raft made (wire.go). The
// listener answers with its own
// hello, which may carry a refusal: another protocol version or cluster,
// a receiver that is not it, a sender that is not a member or has another
// id, or one removed (told so: it stops, ErrRemoved). Refusals are counted, answered with the reason, closed, and logged
// at warn once per peer (the name claimed, and the remote host) per
// minute; a malformed hello, a message not from the sender to the
// receiver, a snapshot among messages, or a frame past its limit is
// counted and logged the same way, and the connection closed with no
// answer; so is a frame of the other protocol, or a message of a group
// the member does not hold. After the hellos a messages connection carries
// frames, length (u32) and raftpb.Message or a batch of them, at most maxFrame (4 MiB; a
// larger length is refused before anything is allocated for it). A
// message larger than a part (1 MiB: raft's appends are about that, but
// one entry can hold a batch with a body of up to beanstalkd's 1 GiB)
// goes in parts, so that nothing a queue may hold is too large to send:
// a header frame (the message with its entries' data left out, and each
// entry's data length), then that data in parts of up to 1 MiB, written
// from the log's own entries, not copied. The writer sends what else is
// queued between two parts, so heartbeats, votes and answers never wait
// behind more than a part of a large message; appends wait their turn,
// small or not, as raft's replication wants them in order. The reader
// delivers the message when its last part has come; one message in parts
// is in flight per connection. An entry's data is allocated when its first part
// arrives, at the length its header gave, at most what a log frame holds
// (4 GiB): a peer is known by its hello, and with TLS its certificate.
// Sending never blocks the core: each peer has a
// bounded queue (DefaultSendQueue, twice raft's window of appends in
// flight); a message that finds it full is dropped, counted, and the peer
// is reported unreachable to the core (raft then probes it rather than
// streaming). A connection that takes no message for five seconds is
// dropped; a broken connection is dialled again with
// backoff (50 ms doubling to 1 s, jittered), and what is queued meanwhile
// is dropped: raft sends again what matters.
//
// A MsgSnap goes on a connection of its own, so heartbeats and appends do
// not wait behind it: the message as a frame (its snapshot's Data empty),
// then the receiver's go-ahead, one byte. The receiver refuses at once,
// before any record is read or built, a snapshot of a term older than
// its own, one at or below its commit index (raft would ignore it), one
// while it receives another of the same group or two of any, one of a
// group it does not hold, or while its log says the
// disk is full, each refusal logged once per peer and minute. Then the
// records (Snapshots and a bounded log), in chunks: length (u32), CRC-32C
// (u32), and the bytes, up to 1 MiB of whole records (one larger record
// alone); a length of 0 ends them, and a trailer follows: the cluster's
// id, the snapshot's index and term, its bytes and records, and the
// CRC-32C of all its bytes. The receiver checks each chunk and then the
// whole, spools them as they come, steps the message into its core once
// they are durable, and answers one byte, taken or refused, which the
// sender reports to its core (SnapshotSent); a refusal or a broken stream
// makes raft send it again later, from its start. Each read and write
// has its own deadline (snapshotIdle), so a stream may take as long as it
// needs while its bytes keep coming. Raft sends one snapshot to a peer at
// a time, and the transport takes one per peer and group (another fails
// at once), sending two to a peer at once (snapshotStreams). The member
// paces what it sends, at 96 MB/s of records for all its streams
// together on average since the first of them began (snapshotRate: a
// stream held up by its receiver's disk catches up afterwards; a
// stream's first pass over its view at four times that): fast enough that 500 MB is
// installed within 10 s, and the streams must not take the cores and the
// disk from the leader's clients all at once.
//
// A third kind of connection, the commands stream (commands.go), carries
// what a member's sessions send to the leaders of the groups that own
// their tubes, and the replies back (docs/design/shards.md, 5.9): one per
// ordered pair of members that speak protocol 3, dialled once the
// member's items handler is set (Host.OnItems), written by its dialler
// only, as the messages connection is. Its payloads are the router's
// items, which the transport does not decode: Host.SendItems queues one
// (never blocking; refused with no stream open or past the peer's 4 MiB
// queue), the writer merges what is queued into frames of up to 64 KiB
// (a payload past a part goes alone, in parts, in order), and the reader
// hands each frame's payload to the handler, in order. A broken stream
// loses what was in flight and is dialled again; Host.OnItemsStream tells
// the router, which resends.
//
// The transport carries the messages of every Raft group attached to it
// (transport.attach: each group this member holds a replica of): each
// group sends its own and is told of a peer unreachable or a snapshot's
// fate, and each message received goes to its group's end. A message of
// a group this member does not hold (one that left it, or has not come
// yet) is dropped and counted (TransportStats.MessagesUnrouted); so is
// one for a group whose node has no room for it (MessagesShed: a node
// busy with a long round or a rebuild, its inbox of 1,024 full), since
// the connection carries every group's messages and waiting for one
// group would cut the others off from the peer. Raft sends again what
// matters.
//
// With --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca every
// connection is mutual TLS 1.3 (tls.RequireAndVerifyClientCert). A
// member's certificate is checked against the host of its address in
// --cluster-peers, not its name: the dialer sets that host as the server
// name, as any TLS client does, and the listener, once the hello names
// the member, checks the client certificate for the same host. So
// certificates are issued as for any server (a DNS name, a wildcard for
// a headless Service, an IP address), with both server and client
// authentication, and one certificate may serve every member. A peer
// without a certificate from the CA, or with one not for the member it
// claims to be, is refused and counted apart (TLS refusals). The
// certificate and the CA are taken at each handshake from
// NodeConfig.TLSSource where one is given (internal/certs reads the files
// again on SIGHUP and when they change), so new connections use rotated
// files and open ones keep theirs. Without the files traffic is plaintext, with one warning at start unless every
// address, and the listening one, is loopback.
//
// # Membership changes
//
// Members are added and removed while the cluster serves, through raft's
// ConfChangeV2, one simple change at a time (no joint consensus: one
// voter more or less keeps every majority of the old and the new
// membership overlapping); nothing here decides membership but raft.
//
// The address book. Raft's membership (its ConfState) holds ids only.
// Beside it every member keeps the book: each member's name, address and
// Raft id, the ids removed, and the index of the last change it reflects
// (Book). A change's entry carries the member it is about in its
// Context (JSON: name, address, id), so every member that applies it
// updates its book as it updates raft's ConfState. Both are written to
// the log when the change is applied (Log.SetMembership: WALLog writes a
// checkpoint frame, which carries the book after the ConfState), and a
// member that starts again takes its peers from the book, not from
// --cluster-peers, which may be stale: the changes through the book's
// index are not applied again at start (their effect is what raft reads
// from InitialState). A snapshot carries the membership as of its index
// in its metadata, and the leader's book in the MsgSnap's Context (its
// records stream beside it): the receiver merges that book into its
// own (a book only grows, but for the ids it removes) and writes it in
// the snapshot's frame, so the install and its book are one write. A
// snapshot is built no further than the first change after the book's
// index, and built again after each change, so its ConfState is the one
// as of its index and a member added since finds itself in it. The
// leader sends one only while its core's book is the book as of the
// snapshot's index (the index between the book's and the applied one:
// the log builds it at the commit index, which runs ahead of what the
// leader applied while its own disk lags a majority's); else raft asks
// for it again, once the leader has applied that far. A peer's change that does not decode is refused when it
// comes in, as damaged records are.
//
// Adding (POST /cluster/members {"name","address"} on --http, or
// sproutctl members add NAME ADDR). The member that takes the request
// picks the new member's Raft id: random (crypto/rand), never 0, never
// one in use or in the book's removed ids, so a name reused after its
// disk was emptied never reuses an old id (doc above, "Snapshots"), and
// proposes ConfChangeAddLearnerNode (raft forwards a follower's proposal
// to the leader). Every member that applies it adds the learner to its
// book and to its transport. The answer gives the join string,
// CLUSTER:ID in hex; the operator then starts the new member with
// --cluster-join CLUSTER:ID, its --node and --cluster-listen, and
// --cluster-peers naming the members it can reach (their names and
// addresses: their ids it learns from their hellos, and the book from its
// first snapshot; a member the list does not name, group 0's leader added
// after the list was written, it takes at the cluster address its hello
// gives, until the book names its peers; from then on the book alone
// says who is a member, the list's names too), itself included or not: a
// joining member's own entry
// is only where it tells its client and --http ports to be reached, and
// without one that is its --cluster-listen's host. A wildcard host there
// is filled by each peer, on reading a hello, with the host of the
// sender's address in its book, the one the addition recorded (also for
// any member whose --cluster-peers host is a wildcard). --cluster-join
// also takes a list, NAME=CLUSTER:ID,... (SelectJoin): each member takes
// its own name's entry and, without one, starts as an initial member, so
// that one setting shared by every member (a StatefulSet's pod template)
// carries every addition's join string. Its directory must be empty, or its own
// log from an earlier start with the same join string; a directory of
// another cluster or member is refused in one line, as always. Its log
// starts empty (no entry, no membership): it cannot campaign, and the
// leader, whose log begins after index 1, fills it with a snapshot. The
// leader promotes a learner (ConfChangeAddNode) once it has taken
// something (its match index above 0), is active, and is within a window
// of appends in flight (256 entries) of the leader's commit index as of
// the tick it looks, and no other change is in flight. The request is
// answered once the learner's addition is applied on the member that took
// it (201, with the join string: the operator needs it to start the
// learner, so the answer cannot wait for the promotion; GET
// /cluster/members shows the role),
// or when it is known not to be: another change was applied first, raft
// having dropped this one (409), no leader (503), or ChangeTimeout runs
// out (503: it may still apply). A request that finds a change of its own
// still waiting on this member, or a learner not yet promoted, is
// refused with 409: one change at a time.
//
// Removing (DELETE /cluster/members/NAME, sproutctl members remove NAME):
// ConfChangeRemoveNode for the book's id of that name (404 when none),
// answered once applied here. A voter's removal is refused (409,
// ErrQuorumAtRisk) when the voters that would be left, counting only
// those up, are no majority of them (etcd's strict reconfiguration
// check, Node.checkRemoval): with three members and one down, removing
// one that runs would leave a membership of two with one down, which
// commits nothing, not even the addition that could mend it. Up is, on
// the leader, itself and a voter heard within the last election timeout
// (the lease's count) whose messages connection from the leader is open;
// on a follower that takes the request, itself, the leader heard within
// an election timeout, and the voters its connections to are open. A
// follower hears only its leader, so the leader checks a removal a
// follower forwards again, on its own view, and drops one it refuses
// (logged once a minute; the request then ends unapplied, 503). Removing
// the member that is down passes while the others are up: that is how a
// lost member goes. A group's replica's removal (RemoveReplica: a move,
// a drain) is checked the same way, and so is the removal a drain ends
// in; a learner's, which changes no majority, is not. Every member that applies it drops the
// member from its transport and puts its id among the removed; a removed
// member's hello is refused with the reason "removed", and a member told
// so stops (ErrRemoved), as does one that applies its own removal or
// starts on a log whose membership no longer holds it: cmd/sprout exits
// with one line (status 12). The leader does not remove itself from two
// voters (Node.lastButOne): raft would commit it with both, and the other,
// if it never learned of the commit (the message lost as the leader
// stops), would campaign in the old membership for the removed leader's
// vote for good. It hands the leadership to the other instead and answers
// 503 (ErrNotServing), to be asked again, or drops the follower's proposal
// and hands over the same way; the new leader then removes it as a
// follower. Otherwise the leader removing itself keeps leading
// until the change applies, then steps down (raft's StepDownOnRemoval)
// and stops as any removed member does, its clients' connections closed,
// and clients reconnect. It hands the leadership over as it goes, so the
// others need not wait an election timeout to find it gone: just before
// applying its removal it asks raft to transfer leadership to the voter
// with the most of its log (Core.handOver), and raft sends that voter a
// MsgTimeoutNow at once if it holds the whole log. The message outlives
// the step down and is sent before the member stops (Node.sendLast; the
// transport is drained for a tick before it closes). The voter gets it
// with the commit of the removal, and raft does not campaign while a
// committed membership change is unapplied: its core holds the message
// until the entries stepped before it are applied, then campaigns. A
// voter without the whole log gets nothing, and the election timeout is
// the fallback.
//
// Replacing a member whose directory was emptied: remove it, then add it
// again under the same name (a new id) and start it with the join string
// on its empty directory; the snapshot fills it.
//
// A single node's -b directory, or an imported beanstalkd binlog,
// becomes the first member of a new cluster with every job kept: its
// jobs are the first snapshot's head (The log on disk), and the members
// added to that cluster of one get them through a snapshot.
//
// # Observability
//
// GET /cluster on --http: node, leader, term, members (name, address, and
// on the leader each one's match index; each one's role, voter or
// learner), commit and applied
// (Node.Status, whose JSON is that body; match indexes are read at the
// leader's ticks), and jobs, the member's own store's, counted; with
// ?digest=1 (a walk of every job), a digest of that store that members
// at rest agree on (Node.Digest, digest.go), which the fault tests
// compare. /readyz is 200 on a member that knows a leader (itself
// once it serves) and has caught up with it once (Node.Ready,
// Core.CaughtUp): a member that knows a leader asks it for its commit
// index through raft's ReadIndex (again when the leader changes, or after
// an election timeout with no answer), and is caught up once it has
// applied that far; a leader, once it serves. Its own commit index would
// not do: a heartbeat raises it only to what the member already holds.
// Latched, so that it does not flap as the leader commits on. /metrics adds the term, leader changes, commit and
// applied indexes, follower lag, proposals and their batch sizes,
// snapshots sent, membership changes, the transport's counters and the
// proxy's connections: Node.Stats and Proxy.Stats are read at scrape
// time, and the sizes of proposals, which cannot be read afterwards, go
// to an Observer as they are made. This package registers no collector
// (internal/ops does).
//
// # Structure
//
// As the segment engine's writer is split (store/segment/doc.go), so is
// replication: a deterministic core (the raft.RawNode and this package's
// decisions about proposals, acknowledgement, application and leadership)
// driven by events with no I/O, goroutines or clock of its own, and a
// shell that owns the network, the log on disk and the timers. Tests drive
// several cores step by step through a simulated network and disks:
// elections, replication, acknowledgement, leadership loss with
// uncommitted changes, and catching up by snapshot, with no sleeps.
//
// The core (core.go, action.go) runs raft with AsyncStorageWrites, so all
// of a raft.Ready is in its messages. Events (Core methods): Tick; Step (a
// peer's message; one whose records do not decode is refused); Durable
// (every write through a number is durable); SnapshotSent (a snapshot
// reached a peer, or not); Unreachable; Campaign, TransferLeadership and
// ProposeChange (the operator's, and the tests'). Actions (Ready's result, in the order
// to carry them out): restore (the store emptied and filled from the
// log's head: at start, and when a snapshot was installed); send; write
// (a snapshot, entries, a hard state; then report Durable); apply
// (committed records, to the store, each with its place in the log);
// locate (where the leader's own committed full records are in its log,
// to the store); compact (the log may drop what was applied); publish
// (the acknowledged position, to the Journal); membership (a change
// applied, or a snapshot's membership installed: the ConfState and the
// book, to the log and the transport); serve; rebuild (the last action:
// the core takes no more events).
//
// What the shell provides: the Log (raft.Storage, plus the writes the
// actions ask for and OnDurable), the transport (raft's messages, and the
// fate of each snapshot sent), a ticker, and the store, made with the
// member's Journal as both its Journal and its AckSource (which refuses
// every record but deletes while a log that can fill, WALLog, says it is
// full). Only the raft library's reads of the Log, and Locate, happen
// inside the core's calls.
//
// The shell (node.go, StartNode) is one goroutine that owns the Core. It
// waits for an event: a tick (DefaultTick, 100 ms: heartbeats every tick,
// an election timeout of 10 to 20 ticks, so a new leader within about
// 1.4 s of the old one's loss, and a stalled member taken for dead only
// after a second); a peer's message (with any others already arrived, so
// one round of actions covers them all); a peer's snapshot (whose
// verdict goes back to its sender); or a wake-up from its mailbox, where
// other goroutines leave news without blocking: the Log's OnDurable (the
// highest write number durable), the transport's unreachable peers and
// snapshot outcomes, the Journal's first record of a batch. After each
// event it gives the core that news and carries out Ready's actions in
// order until there are none: restore (the store emptied in place,
// Store.Reset, and filled from the log's head read back a frame at a
// time, Log.ReadHead), send (to the transport, never waiting), write (to the Log; its
// OnDurable leaves the number in the mailbox), apply and locate (to the
// store), compact, publish, serve (logged; a log that migrates, WALLog,
// is given the store as its Migrator), and rebuild (Node.rebuild: the
// clients closed through NodeConfig.CloseClients, the journal reset, the
// log made durable, and a new core made on the log, whose first actions
// restore the store; "Losing leadership"). A tick after
// a stall gives the core every tick missed, up to an election timeout's,
// so the leader's lease counts the time that passed. At the end of each
// round it publishes, under one mutex, what Status, Ready, Leader (with
// a channel closed on every change, for the proxy) and Stats read, so
// none of them waits for the node goroutine; on the leader's ticks, the
// match indexes too. Close stops the goroutine, then the transport, then
// the store.
//
// A Node is one Raft group's replica on a member; what the member's
// groups share is its Host (host.go, docs/design/shards.md 2.3): its
// identity and its transport. StartNode starts group 0 with its host;
// group 0 holds the membership (its changes add and remove the
// transport's peers, and a member removed from it stops whole), and when
// it stops, for any reason, the host's other groups stop with it, then
// the transport. Host.StartGroup starts another group's replica on the
// host: its own Log (a GroupLog of the member's SharedLog, or any Log),
// store, journal and goroutine, its replicas on members of group 0 under
// their members' Raft ids, its messages on the host's connections. Its
// replicas change by Node.AddReplica and RemoveReplica (a member of the
// cluster added as a learner by the group's serving leader alone, so that
// raft never forwards a move a member planned on a view it has since lost,
// promoted once caught up as group 0's are;
// a replica removed stops with ErrRemoved, its member going on), not by
// AddMember (ErrStaticGroup). A replica removed and added again has its
// member's id again, and its member starts it empty; so that what the
// older one acknowledged (cut off, it hears of its removal and of the
// addition at once) never counts for the new one, a replica acknowledges
// no entry past one that removes it (one it appended, or one its log
// holds when it starts again), and the leader counts no
// acknowledgement below the index at which the group added the replica
// last (Book.Joined), answering instead as the empty one would, so raft
// sends the snapshot (Core.olderAck; TestMembershipReaddedReplica). In
// tests: two groups on three members fail over
// and rebuild in place each unnoticed by the other (host_test.go), and
// run on GroupLogs of one SharedLog per member, restarted from it
// (sharedlog_test.go). One ticker (Host.runTicker) ticks every group at
// once, so their heartbeats to a peer meet in one drain of its writer and
// go in one frame
// (TransportStats.Heartbeats, HeartbeatFrames).
//
// A group's state machine is an Applier (applier.go): its store. The
// cluster's metadata (members, placements, moves, growth) lives in group
// 0's log, which every member replicates (its Book and TubeBook): group 0
// is the metadata group (docs/design/shards.md 1.2, as built).
//
// The network tests start members in one process over loopback TCP, each
// with its own store and a MemoryLog that outlives its node (its disk):
// elections, acknowledgement only once a majority is durable, failover
// with the default timing, a cut-off leader's rebuild, catching up by
// snapshot, refused hellos and certificates, and a full send queue. Run
// on WALLogs in directories of their own, where a crash is a copy of the
// directory taken while the member runs (newest segment first, so it is
// what a crash could leave), they keep every member's directory within
// its bound under churn, through a failover, and lose no acknowledged
// change when members crash one at a time or all at once. The Log tests
// run against both logs, and a GroupLog of a group other than 0.
//
// internal/member runs a member (--node): the engine serves the node's
// store, the proxy is the engine's Route (and its Serving the engine's),
// the side port serves /cluster, /readyz and /metrics, and the node's
// CloseClients is the engine's. Its log is a WALLog in -b, closed after
// the node, so a member that restarts comes back with what it had made
// durable.
//
// Not yet: the new leader's wall
// clock is its machine's (Time). Of the log: the leader hands each live
// job of a segment to its store once per leadership, so a move the store
// could not make (none is expected) keeps that segment until the member
// restarts; and replay reads every segment whole, as a single node's
// does. Of snapshots: a broken stream starts again from its beginning
// (no resume); the leader's first pass keeps an entry per live job (about
// 50 bytes); and an entry, or a record of a snapshot, is held whole in
// memory where it is sent, received and written, so a 1 GiB body costs a
// few times that while it travels.
package replication
