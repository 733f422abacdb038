// Package router is where a cluster member sends each client command to
// the Raft group that owns it, its sessions living where their clients
// connect (docs/design/shards.md, sections 5 and 6). It was built in
// the design's steps. What runs in the binary: Router and Session
// (router.go, session.go), over the groups' leaders' Servers and the
// member's Link, on the commands stream, for a cluster of one group
// (G = 1, S5) or of several (S6): a session sends each command to the
// group that owns it (RouterConfig.Placement: the used or named tube's
// group, the job id's prefix's), or runs it at once on that group's
// store here when this member leads it (Session.runHere, the local fast
// path, 5.1: below), stats and list-tubes to every group (fanout.go,
// 5.5), and a reserve whose watched tubes live in several groups through
// crossReserve (cross.go, 6.2, 6.3); and the codec of the commands
// stream's items (items.go, 5.9).
//
// # Several groups (G > 1)
//
// Every session is remote: its used tube and watch list stay with it,
// and each command goes to one group's leader: put, peek-ready,
// peek-delayed, peek-buried and kick to the used tube's owner,
// stats-tube and pause-tube to the named tube's, the commands by id to
// the group of the id's prefix (an id of a prefix no group took is
// NOT_FOUND at once). stats and list-tubes ask every group and answer
// once all have (a group without a leader fails them with
// INTERNAL_ERROR, as a partial sum would be a wrong reply); stats'
// current-waiting counts this member's sessions in a reserve. References
// go, per tube, to the tube's group, and each group's new leader gets
// the counts of its tubes (a sync per group). A reserve whose watched
// tubes all live in one group is that group's reserve, exactly
// beanstalkd's; across groups it is a crossReserve: the most urgent job
// ready when each group was asked, or a wait in every group, the first
// offer winning. Puts and changes by id pipeline across groups as within
// one: each touches one group's state, so changes in different groups
// commute; the one thing their order shows is list-tubes' order of tubes
// made by puts in flight together in different groups. DEADLINE_SOON
// (6.4): a session with several groups keeps the jobs it reserved, each
// with its group and the end of its TTR as estimated from when its reply
// came (Session.held), ends them on delete, release and bury and renews
// them on touch. A reserve in one group carries how long until the
// soonest of those in other groups comes within store.DeadlineMargin of
// its end (Request.SoonElsewhere, SoonIn): the group answers
// DEADLINE_SOON at once if none of its watched tubes has a ready job, or
// bounds its wait by it. A reserve across groups checks every group's
// the same way on its own timer, which asks the estimate again when it
// fires; each group's wait also ends at its own jobs' deadlines. When a
// group's leader changes (or its stream opens again) each session asks
// the leader, for each job of the group it keeps, whether its owner
// client still holds it (OpHeld, answered at once beside the session's
// order, while the leadership is leased; protocol 6): after a crash the new leader has those jobs ready,
// and the session forgets them (Session.askHeld); a DEADLINE_SOON its
// bound then brings from a group is not delivered, and the reserve goes
// on (Session.owesSoon).
//
// A tube moving to another group (docs/design/shards.md 3.3, as built:
// internal/member's tubemoves.go) is frozen in its group, whose Server
// then answers the requests naming it, the reserves and waits watching
// it, and the changes by id of its jobs their sessions do not hold,
// StatusWrongGroup (EventWrongGroup for a wait; Server.Refreeze ends
// those already waiting). The Link sends such a request again every
// moveRetry where its session then routes it (Link.RequestRouted), for up
// to moveWait, in the order the session made them; a request of a tube
// routed to another group than the session's last of the tube, still
// pending, waits for that one's answer (the member learned of the move
// in between: the older one may yet go again, and this one goes after
// it). A reserve starts over as a reserve across the groups its
// tubes then live in (Session.goOnAcross). A session takes a sequence and
// hands its item to the Link as one step (Session.post), whichever
// goroutine sends it, so each group still sees its sequences rise. A job
// keeps its id when its tube moves: a command by id that the id's group
// does not find asks the groups tubes moved to from it
// (RouterConfig.MovedFrom, Session.sendSearching).
//
// The local fast path (5.1): a command for a group this member leads
// runs at once on the group's store here, through the Server's owner
// client of the session (Server.local: the one its requests sent the
// other way use, so both ways see its reservations), when nothing of the
// session is on its way anywhere (no answer awaited, no burn) and the
// owner is idle (no reserve waiting, no reply held for the log). Its
// reply is then the engine's to hold until the group's log acknowledges
// it (Session.AckNeeded names the group's AckSource), as on a single
// server, with no item encoded, no hop through the member's own loop and
// no answer handed back to the event loop from another goroutine. A
// reserve runs so only if it does not wait: one that would, or whose
// wait a job held in another group bounds, goes the other way. A job is
// handed out, and a read answered, so only while the leadership is
// leased. When the member
// stops serving a group, a session with a reply run there that its log
// has not acknowledged closes (ClosesWith), as that reply never would
// be; the others stay open, their next commands going to the next
// leader. A member that hands a leadership over first holds the fast
// path for that group (HoldLocal), waits for the commands that passed
// the hold before it was set (LocalDone: each counts itself before its
// last look), then until what ran is acknowledged, so that none closes; then it stops the group's requests (Server.Gate),
// lists what its sessions hold (Server.Held) for the log, and the next
// leader gives those jobs to the same sessions' owner clients (Adopt). This holds for a single group's remote sessions too (those
// opened while another member led).
//
// A member learns the leaders of the groups it holds no replica of from
// the others: every member tells every other, every half second and at
// each change of its own, which groups it leads and serves, with their
// terms (a leaders item); a report of a later term replaces an earlier
// one, and one not renewed for three periods goes stale, so a lost
// leader's groups wait for the next one's report as for an election.
//
// # Sessions where the client connects (G = 1)
//
// The engine makes each connection's Queue with Router.NewQueue. A
// session opened while the member serves group 0 runs on the group's
// store through its own client, exactly as a single node's connection
// (engine.ClientQueue); when the member stops serving, such sessions
// close (IsLocal picks them for engine.Server.CloseClientsWhere), since
// the store is rebuilt under them. While the leadership is not leased,
// such a session closes rather than be handed a job (engine.Config.Leased)
// or answered a read from the store (Session.fenceHere,
// engine.FailedFenced): its client connects again. Any other session is
// remote for its whole life: it keeps its used tube and watch list
// itself, in beanstalkd's order, and sends every other command to the
// leader as a request. Puts and changes by job id pipeline (5.3, engine.Pipeliner):
// up to engine.MaxPipelined are in flight at once, run by the leader in
// order, their answers delivered to the engine in the commands' order
// whichever goroutine brings each (Session.deliver); any other command
// waits until they are answered, so it sees their effects. Its replies
// come committed, so it holds none for the log. When the leader changes, its pending
// request goes to the next one, and the session stays open; a
// reservation it held died with the old leader, as after a TTR.
//
// References (5.4): the router counts, per tube, how many of its remote
// sessions use and watch it, and sends the totals of the tubes that
// changed as refs items (to a group it leads, with none of its items on
// their way there, it sets them on the store at once, so that a command
// run here next counts them, as one server would); use, watch and ignore answer once the leader
// has them, so a stats-tube sent anywhere after USING counts the
// session. Each new leader gets every count at once (a sync), before the
// requests sent again to it (Link.LeaderChanged drops the refs items the
// sync replaces, has it made, then resends). The
// leader's store counts them beside its own clients
// (store.Store.SetRefs), and a remote session's owner client counts
// nothing itself (store.Store.NewOwnerClient).
//
// Ids: a put takes its id when its command line arrives, as in
// beanstalkd, so a put refused with its body (engine.Queue.PutRefused)
// has the group take an id at once (a burn), and so does a session
// closed in the middle of a put's body.
//
// Resends: a request goes again when its leader changes (another member,
// or the same one elected again: a later term, its store rebuilt between
// and what it had taken gone unanswered), when the stream
// to the leader opened again, or the leader's to this member (its answer
// may have been lost with the one before), when the leader was not serving yet
// (StatusNotLeader), and when it could not be queued. A leader never runs
// a session's request twice (it keeps the last sequence it took, and the
// answers sent since the session's last request that does not pipeline,
// which it sends again), and a change resent to a new leader
// after the old one may have made it is answered from the group's table
// of outcomes (5.6): each request carries a number, unique with its
// member (Link numbers start anywhere in each process), the leader makes
// the change with that key (store.Client.PutKeyed and the like), every
// replica keeps the keys from the log, and a key seen within
// store.DedupTTL gets the first outcome. A reserve sent again carries
// what is left of its timeout and of its DEADLINE_SOON bound (SoonIn),
// counted from when its session made it (call.sendPayload): a failover
// does not extend them. Each batch the leader proposes
// begins with its clock (a KindClock record), by which every replica
// expires the same entries; the log keeps them for a rebuild, and a
// snapshot carries them (internal/replication, "Snapshots and a bounded
// log"). The leader hands a
// job out, and answers a request that reads its store (peeks, stats,
// list-tubes, a reserve across groups' peek, a reserve that ends at
// once: leaseFenced; a reserve or a wait that ends empty after waiting:
// TIMED_OUT, DEADLINE_SOON), only while its leadership is leased, the lease
// asked once the store has answered; otherwise the request is answered
// StatusNotLeader and goes to the next leader, or to this one once its
// lease is confirmed again. A leader cut off from its group's majority
// thus answers nothing from a store that a leader elected meanwhile may
// have changed.
//
// A member's process numbers its sessions from a random point, and
// before any call of theirs tells the first leader it reaches that its
// sessions are new (a close of session 0): the owner clients its last
// process left there close, and their jobs are ready at once rather
// than at their TTR.
//
// Without a leader (5.7): a request waits up to RouterConfig.LeaderWait
// (the election timeout) from when it was made or the leader was lost,
// whichever is later, then Link.Expire ends it: one no leader took is
// answered as a refusal of the group's log (engine.Answer.Err, or
// engine.FailedInternal), one a lost leader took closes the connection
// (engine.FailedLost: it may have run); a reserve ends at its own
// timeout, the group counting as empty; refs count as acknowledged.
//
// A leader's Server sends what it answers in one payload per member: the
// replies to a payload of requests, and those one acknowledgement of the
// log releases (an ackFlusher per group, armed once for the oldest
// position waited for).
//
// A member removed from the cluster never comes back under its id: while
// this member serves, what its sessions left here (owner clients and
// their reservations, references) goes within a second (Server.Forget).
//
// Not yet: dropping what a member long unreachable left (its sessions
// may go on once it is back).
//
// # A reserve across groups: the take
//
// crossReserve asks every group holding watched tubes for its best ready
// job (OpBest: store.Client.BestReady, reserving nothing), then asks the
// group with the best to take it only if it does not come after the best
// of the others (OpTake: store.Client.TakeAtMost). The group's best may
// have improved meanwhile: it is taken all the same, since it beats every
// other candidate. If the group's best got worse (another session took
// its job), the take is Lost and the reserve looks again: each Lost means
// another reserve won a job, so the groups make progress. After
// maxBoundedRounds lost rounds, the next take goes without a bound, so a
// reserve never spins.
//
// The reply is thus the most urgent job among those ready in the watched
// tubes when it was taken, except a job that became ready in one group
// after that group was asked: the one visible difference from a single
// server (section 6.6). Within one group the order is exactly
// beanstalkd's, and so it is for every reserve whose tubes all live in
// one group.
//
// With nothing ready the reply is DEADLINE_SOON when a job the session
// holds in any group is within a second of its TTR (with beanstalkd's
// rule: only when no watched tube has a ready job, paused or not); else
// TIMED_OUT for a timeout of 0; else a wait, which the first offer ends,
// or the session's timer at the timeout or at the soonest DEADLINE_SOON,
// whichever comes first. A round still asking at the timeout (a group with
// no leader holds its peek until the router's next look) ends it: with a
// ready job if one is, as one server hands one out whatever the timeout,
// else TIMED_OUT, within lateRound.
//
// # A reserve across groups: the wait
//
// When nothing watched is ready, the session waits in every group at once
// (a wait item each): each group's store reserves the first job that
// comes for it, as a blocked reserve does on one server, and offers it
// (an event). The first offer wins, and the other groups' waits are
// cancelled. An offer that comes too late, because another group's won or
// the session's timer ended the wait, is declined (by the Link, its call
// gone): its group unreserves the job (store.Client.Unreserve), every
// figure as if it had never been reserved, and hands it to its next
// waiter. So a session never holds a reservation it did not receive. The
// group gives the job back already when the wait's cancel comes, which
// the session sends before its reserve answers, so before any command
// the client sends next: a release, bury or touch of that job's id is
// NOT_FOUND, as on one server (the job given back so is not taken again
// by the decline that follows: the owner's withdrawn). The same for a
// take on its way when the reserve ends or starts over: it is cancelled
// (crossReserve.taking). On this member's own groups such a cancel goes
// through the member's loop, which a command run at once (the local fast
// path) would overtake: a job a take or an offer handed a session here
// is unseen until the session says it took it (Server.Received), its
// cancel comes, or a later request of the session comes that way, and
// the session's commands in that group go that way meanwhile. A
// group where the session holds a job near its TTR ends the wait with
// DEADLINE_SOON, as one server would.
//
// # The commands stream's items
//
// A member's sessions reach the leaders of the groups that own their
// tubes over the commands stream, one per ordered pair of members; its
// transport carries each frame's payload as one typed frame of the Raft
// stream's framing, an item past a part's size in parts. The payload is
// a count and the items (items.go has the layout): each names its kind,
// group, session and sequence. Requests, refs, waits, cancels, declines
// and closes go to a leader; replies and events come back, each naming
// the sequence of the request, refs or wait it answers (a session
// numbers its items per group; refs are the member's, session 0). Every
// request carries its dedup number, the router's meta index and the
// member's latest tube creation stamp, and every reply the group's
// latest stamp.
//
// AppendItem appends an item to a payload, begun when empty, allocating
// nothing but the payload's growth. A Decoder checks a whole payload's
// framing first (Reset), then decodes item by item into an Item the
// caller reuses (Next), allocating nothing but the strings of stats
// replies: names, bodies and lists alias the payload, so whatever
// outlives the payload's buffer must be copied first, as gnet's Peek
// asks. No input makes decoding panic; every length is checked first.
// Tube names are 1 to 200 bytes, as beanstalkd's; a put's body, which
// travels as stored (ending in "\r\n"), is at most the receiver's max
// job size before its "\r\n", and a job's body in a reply or an offer is
// bounded by its frame. Errors are the Err values; a decoder stops at
// the first. Decoding is exact: a payload that decodes encodes again to
// its bytes, and the codes of kinds, ops, statuses, results and events
// are fixed, since members of two releases talk to each other.
//
// # The leader's side: Server
//
// A Server executes the requests other members' sessions send to the
// groups this member serves (server.go). Each remote session has an
// owner client in each group it uses, made on its first request, keyed
// by the member, the session and the group, and closed by the session's
// close item (its reservations go back). A close is remembered for
// closeRecall, and an item of the session that comes after it (a wait
// of its reserve across groups queued to this member's own loop when
// the close was made at once, Session.closeIn) makes no owner client:
// it is answered StatusNotLeader, which no one waits for any more. A
// close not taken (no leader known for a moment, a full queue) goes again
// with the group's next retry, to the same leader or the next. A
// close the Link no longer recalls when a stream down longer than
// closeRecall opens again is not lost either: every resync of a group
// begins with the member's sessions open now (KindSessions, protocol 7:
// Router.syncSessions), and the leader closes that member's owner
// clients in the group of the sessions not listed, up to the last id
// the member had given (Server.syncSessions). A tube's move gives the
// reservations of its jobs to their holders' owner clients in the group
// it moves to (Server.HolderClients), a group the session may never have
// sent to: its close goes to the groups tubes moved to from those it
// touched as well, and the closes of the last closeRecall go there as the
// member learns of a move (Link.CloseMoved), for a session that closed
// between the move's export and that. Requests of one payload
// run in order on the reader's goroutine; a reserve that waits holds the
// session's later requests back until it ends, as the engine stops
// reading a blocked connection. Replies wait for the group's log to
// acknowledge their changes (the store's AckSource), each behind the
// ones before it, so a session's replies go in its requests' order. A
// request for a group the member does not serve (any more: a store
// rebuilt after a lost leadership closes the owner clients made on it)
// is answered StatusNotLeader, and the router asks the leader. A wait
// across groups is a reserve without a timeout whose end goes as an
// event (an offer, or DEADLINE_SOON); a cancel, which names the wait's
// sequence, ends it unless its offer is on its way, which the member then
// declines, and a decline gives the job back as if never reserved.
//
// # The member's side: Link
//
// A Link sends a member's sessions' requests and waits to the leaders of
// the groups that own their tubes, and hands each answer to the callback
// it was sent with (link.go). A call stays pending until answered; when a
// group's leader changes, its pending calls go again, in the order they
// were made, to the new one, after the member's references (a call made
// meanwhile goes after them), and
// a call for a group without a known leader waits for one. An answer
// nobody waits for is dropped, and an offer in it declined at once, and a
// call answered or cancelled is not sent again, so a session never holds
// a job it did not receive. Closes, declines and each session's last
// cancels in a group (of a wait; of a reserve or a take) are recalled
// and sent again to a new leader, on a stream opened again, or once one
// was not taken. A change resent after a failover is
// made once, by its key (5.6).
package router
