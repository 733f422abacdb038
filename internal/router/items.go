package router

import (
	"errors"
	"time"

	"github.com/sproutmq/sprout/store"
)

// The commands stream's items (docs/design/shards.md 5.9): what a
// member's sessions send to the leaders of the groups that own their
// tubes, and what comes back. The transport frames them: a typed frame's
// payload is one items payload, and an item larger than a part goes in
// parts. This file knows only the payload's bytes, big-endian:
//
//	payload: count u32 | item...
//	item:    kind u8 | group u16 | session u64 | sequence u32 | length u32 | payload (length bytes)
//
//	request: number u64 | meta index u64 | stamp u64 | op u8 | the op's arguments:
//	  put:                                 tube | pri u32 | delay u32 | ttr u32 | body
//	  burn, stats, list-tubes:             nothing
//	  reserve:                             tubes | timeout i64 (ns) | flags u8 (flagSoonElsewhere) | soon i64 (ns)
//	  best:                                tubes
//	  take:                                tubes | bound's pri u32 | bound's id u64
//	  reserve-job, delete, touch, peek,
//	  stats-job, kick-job, held:           id u64 (held: protocol 6)
//	  release:                             id u64 | pri u32 | delay u32
//	  bury:                                id u64 | pri u32
//	  peek-ready, peek-delayed,
//	  peek-buried, stats-tube:             tube
//	  kick:                                tube | count u32
//	  pause-tube:                          tube | delay u32
//	wait:    wait u64 | meta index u64 | tubes
//	cancel:  wait u64
//	decline: wait u64 | job id u64
//	refs:    meta index u64 | stamp u64 | flags u8 (flagRefsSync) | count u32 | (tube | using u32 | watching u32)...
//	close:   nothing
//	leaders: count u16 | (group u16 | term u64 | index u64 | tubes u32 | jobs u64 | voters | learners)...
//	leaders-behind: leaders' fields, each report followed by behind (protocol 8)
//	move:    giver | receiver (the item's group is the move's; protocol 5)
//	sessions: upto u64 | count u32 | session u64... (increasing, none above upto; protocol 7)
//	reply:   status u8 | stamp u64 | then by status:
//	  wrong-group: meta index u64
//	  forward:     group u16
//	  not-leader:  nothing
//	  else:        result u8 | the result's fields:
//	    none:        nothing
//	    job:         job
//	    id:          id u64
//	    count:       count u32
//	    best:        pri u32 | id u64 | flags u8 (flagBestOK, flagBestAnyReady)
//	    tube-stats:  tube | urgent, ready, reserved, delayed, buried i64 | total-jobs u64 |
//	                 using, watching, waiting i64 | cmd-delete, cmd-pause u64 | pause, pause-time-left i64 (ns)
//	    job-stats:   id u64 | tube | state u8 | pri u32 | age, delay, ttr, time-left i64 (ns) | file i64 |
//	                 reserves, timeouts, releases, buries, kicks u32
//	    stats:       urgent, ready, reserved, delayed, buried, total-jobs, job-timeouts, waiting, tubes i64
//	    tubes:       count u32 | (stamp u64 | tube)...
//	event:   wait u64 | type u8 | offer: job; deadline-soon: nothing; wrong-group: meta index u64
//
//	tube:  length u8 (1 to 200) | name
//	giver, receiver: length u8 (0 to 128) | a member's name, or nothing
//	tubes: count u32 | tube...
//	voters, learners, behind: count u8 | member's Raft id u64...
//	job:   id u64 | pri u32 | ttr u32 | body
//	body:  length u32 | bytes, the job's data as stored: ending in "\r\n"
//
// Every enumeration's zero is refused, so a zeroed field never goes out
// by mistake; a flags byte with an unknown bit, an item whose fields do
// not fill its length exactly, and bytes after the last item are refused
// too. So a payload that decodes encodes again to the same bytes.

// Kind is what an item is.
type Kind uint8

const (
	// Member to group leader.
	KindRequest Kind = 1 + iota // a command for the group: answered by a reply
	KindWait                    // a wait across groups (6.3): answered by events
	KindCancel                  // the wait ended at the session
	KindDecline                 // an offer the session did not take
	KindRefs                    // the member's references (5.4): answered by a reply
	KindClose                   // the session ended: its owner client closes
	// Group leader to member.
	KindReply // the answer to a request or refs
	KindEvent // an offer, or the end of a wait
	// Member to member.
	KindLeaders // the groups the sender leads (1.4): members that hold no replica of them learn their leaders
	// Group 0's leader to a group's leader.
	KindMove // a replica move it planned, for the group's leader to make (1.4)
	// Member to group leader, protocol 7.
	KindSessions // the member's sessions open now: the others' owner clients close (OQ12)
	// Member to member, protocol 8.
	KindLeadersBehind // KindLeaders naming each group's voters behind: the balancers share the leaders' view
	numKinds
)

var kindNames = [numKinds]string{
	KindRequest: "request", KindWait: "wait", KindCancel: "cancel", KindDecline: "decline",
	KindRefs: "refs", KindClose: "close", KindReply: "reply", KindEvent: "event", KindLeaders: "leaders",
	KindMove: "move", KindSessions: "sessions", KindLeadersBehind: "leaders-behind",
}

func (k Kind) String() string {
	if k == 0 || k >= numKinds {
		return "kind?"
	}
	return kindNames[k]
}

// Op is a request's command: one for each command 5.2 routes to a group,
// and the parts of a reserve across groups. The result a reply to it
// carries when its status is StatusOK is given with each.
type Op uint8

const (
	OpPut         Op = 1 + iota // Tube, Pri, Delay, TTR, Body: ResultID
	OpBurn                      // take an id and store nothing (a put refused after its header, §4): ResultID
	OpReserve                   // Tubes, Timeout, SoonElsewhere, SoonIn: ResultJob
	OpBest                      // Tubes: ResultBest (store.Client.BestReady)
	OpTake                      // Tubes, Bound: ResultJob (store.Client.TakeAtMost)
	OpReserveJob                // ID: ResultJob
	OpDelete                    // ID: ResultNone
	OpRelease                   // ID, Pri, Delay: ResultNone
	OpBury                      // ID, Pri: ResultNone
	OpTouch                     // ID: ResultNone
	OpPeek                      // ID: ResultJob
	OpStatsJob                  // ID: ResultJobStats
	OpKickJob                   // ID: ResultNone
	OpPeekReady                 // Tube: ResultJob
	OpPeekDelayed               // Tube: ResultJob
	OpPeekBuried                // Tube: ResultJob
	OpKick                      // Tube, Count: ResultCount
	OpStatsTube                 // Tube: ResultTubeStats
	OpPauseTube                 // Tube, Delay: ResultNone
	OpStats                     // ResultStats, the group's part (5.5)
	OpListTubes                 // ResultTubes, with their creation stamps (5.5)
	// ID: ResultNone, OK if the session's owner client holds job ID
	// reserved, else NOT_FOUND (6.4: Session.askHeld). Only members of
	// protocol 6 read it (LinkConfig.AnswersHeld); a leader answers it at
	// once, beside the session's order (Server.answerHeld).
	OpHeld
	numOps
)

var opNames = [numOps]string{
	OpPut: "put", OpBurn: "burn", OpReserve: "reserve", OpBest: "best", OpTake: "take",
	OpReserveJob: "reserve-job", OpDelete: "delete", OpRelease: "release", OpBury: "bury",
	OpTouch: "touch", OpPeek: "peek", OpStatsJob: "stats-job", OpKickJob: "kick-job",
	OpPeekReady: "peek-ready", OpPeekDelayed: "peek-delayed", OpPeekBuried: "peek-buried",
	OpKick: "kick", OpStatsTube: "stats-tube", OpPauseTube: "pause-tube", OpStats: "stats",
	OpListTubes: "list-tubes", OpHeld: "held",
}

func (o Op) String() string {
	if o == 0 || o >= numOps {
		return "op?"
	}
	return opNames[o]
}

// byID reports whether op names a job by its id.
func byID(op Op) bool {
	switch op {
	case OpDelete, OpRelease, OpBury, OpTouch, OpKickJob, OpReserveJob, OpPeek, OpStatsJob:
		return true
	}
	return false
}

// Status is how a group ended a request: the store's outcomes, and the
// two that send the router elsewhere.
type Status uint8

const (
	StatusOK           Status = 1 + iota // done, with the op's result
	StatusNotFound                       // store.ErrNotFound, or a method's false
	StatusNoSpace                        // store.ErrNoSpace: the group's log cannot take the change
	StatusTimedOut                       // reserve: store.TimedOut
	StatusDeadlineSoon                   // reserve: store.DeadlineSoon
	StatusLost                           // take: store.Lost, with the group's best (ResultBest)
	StatusEmpty                          // take: store.Empty
	StatusWrongGroup                     // the group does not own the tube at MetaIndex (3.2)
	statusRetired                        // 9: once a moved job's forward, never sent: refused (ResultMoved names where tubes went)
	StatusNotLeader                      // this member does not serve the group: the router asks its leader (5.7)
	numStatuses
)

// Result is what a reply carries besides its status.
type Result uint8

const (
	ResultNone      Result = 1 + iota
	ResultJob              // Job
	ResultID               // ID
	ResultCount            // Count
	ResultBest             // Best
	ResultTubeStats        // TubeStats
	ResultJobStats         // JobStats
	ResultStats            // Stats
	ResultTubes            // Tubes
	ResultMoved            // Moved: a NOT_FOUND of a command by id
	numResults
)

// EventType is what ends, or would end, a wait across groups.
type EventType uint8

const (
	EventOffer        EventType = 1 + iota // the group reserved Job for the wait
	EventDeadlineSoon                      // a job the session holds in the group is near its TTR
	EventWrongGroup                        // the group no longer owns a watched tube at MetaIndex: register again
	numEventTypes
)

// Item is one item of the commands stream: its header, and the payload of
// its Kind, in the field of that name (Wait serves wait and cancel, whose
// payload is Wait.ID alone). The other fields are ignored by AppendItem
// and zero after Decoder.Next, which reuses the slices' arrays.
type Item struct {
	Kind  Kind
	Group uint16
	// Session is the session's id on its member: with the member's
	// incarnation, the owner key. Refs are the member's own (session 0
	// by the router's convention).
	Session uint64
	// Seq numbers a session's items per group; a reply or an event names
	// the sequence of the request, refs or wait it answers. It wraps
	// after 2^32, skipping 0, and compares in serial-number order
	// (seqAfter).
	Seq uint32

	Request  Request
	Wait     Wait
	Decline  Decline
	Refs     Refs
	Reply    Reply
	Event    Event
	Leaders  []LeaderReport // KindLeaders' and KindLeadersBehind's
	Move     Move           // KindMove's
	Sessions Sessions       // KindSessions'
}

// Sessions are a member's sessions open now, in increasing order, and
// the last session id it had given when it listed them (Upto): the
// group's leader closes the member's owner clients of sessions at or
// below Upto that are not listed (docs/design/shards.md, question 12).
// A session made after the list has an id above Upto, so a list never
// closes what its member opened since. Only members of protocol 7 read
// it (LinkConfig's SyncsSessions).
type Sessions struct {
	Upto uint64
	IDs  []uint64
}

// Move is a replica move of the item's group that group 0's leader
// planned (meta.PlanMove): From's replica goes to To. Either may be
// empty, as in meta.Move: From "" adds a replica on To, To "" removes
// From's. Names alias the payload.
type Move struct {
	From, To []byte
}

// maxMemberName bounds a member's name in a move: the cluster's bound
// (internal/replication) is 128.
const maxMemberName = 128

// LeaderReport is a group its sender leads and serves, at the Raft term
// it was elected in: a report of a later term replaces an earlier one.
// With it go the group's replicas (members' Raft ids) as of the
// membership change of index Index: how a member learns it was added to
// a group, or removed from one without hearing of it
// (docs/design/shards.md S7).
type LeaderReport struct {
	Group            uint16
	Term             uint64
	Index            uint64
	Voters, Learners []uint64
	// Tubes and Jobs are the leader's store's: its tubes, and its jobs
	// ready, reserved, delayed and buried (GET /cluster's groups).
	Tubes uint32
	Jobs  uint64
	// Behind are the voters the leader would not hand the leadership to,
	// not caught up or not heard from lately (KindLeadersBehind only).
	Behind []uint64
}

// Request is a command for a group. Which arguments an op reads is given
// with its Op.
type Request struct {
	// Number is the member's request number: with its incarnation, the
	// dedup key (5.6).
	Number uint64
	// MetaIndex is the router's meta index when it routed the request
	// (3.2); Stamp, the latest tube creation stamp the member has seen,
	// which a tube the request creates is stamped above (5.5).
	MetaIndex, Stamp uint64
	Op               Op

	Tube  []byte   // the used or named tube
	Tubes [][]byte // the session's watched tubes that live in the group
	ID    uint64
	Pri   uint32
	// Delay is in seconds: put's and release's, and pause-tube's.
	Delay uint32
	TTR   uint32 // seconds
	// Body is put's job data as stored, ending in "\r\n"; at most the
	// decoder's MaxJobSize bytes before it.
	Body []byte
	// Age is put's: how long ago its command line came, which its job's
	// age counts from, as beanstalkd's does. Not encoded: a put run on
	// this member's store (Session.runHere) has it, one sent to another
	// member's counts from its arrival there.
	Age   time.Duration
	Count uint32 // kick's bound
	// Timeout is reserve's: negative waits for ever, zero does not wait.
	Timeout time.Duration
	// SoonElsewhere says that the session holds jobs in other groups;
	// SoonIn, how long until the soonest of them is within a second of
	// its TTR, which the group answers DEADLINE_SOON at (6.1).
	SoonElsewhere bool
	SoonIn        time.Duration
	// Bound is take's: the best candidate of the other groups.
	Bound store.Candidate
}

// Wait is a wait across groups (6.3): its id, unique per session, and
// for a wait item the router's meta index and the session's watched
// tubes that live in the group. A cancel names the wait alone.
type Wait struct {
	ID        uint64
	MetaIndex uint64
	Tubes     [][]byte
}

// Decline gives back a job offered to a wait the session no longer
// waits for (6.3).
type Decline struct {
	Wait uint64
	Job  uint64
}

// Refs are how many of the member's sessions use and watch tubes of the
// group (5.4, store.Store.SetRefs): the counts of the tubes whose counts
// changed, or with Sync all of them, every tube not listed dropping to
// zero (RefSync). Counts are the member's totals, not differences, so a
// resent refs item sets what it set the first time.
type Refs struct {
	MetaIndex, Stamp uint64 // as a request's
	Sync             bool
	Counts           []RefCount
}

// RefCount is the member's sessions using and watching one tube.
type RefCount struct {
	Tube            []byte
	Using, Watching uint32
}

// Reply answers a request or refs.
type Reply struct {
	Status Status
	// Stamp is the group's latest tube creation stamp (5.5).
	Stamp uint64
	// MetaIndex is StatusWrongGroup's: the router routes again once its
	// meta has applied it.
	MetaIndex uint64

	// The result, for the other statuses: the field Result names.
	Result    Result
	Job       JobReply
	ID        uint64
	Count     uint32
	Best      Best
	TubeStats store.TubeStats
	JobStats  store.JobStats
	Stats     store.Stats
	Tubes     []TubeStamp
	// Moved are the groups tubes of the answering group moved to, or are
	// moving to, when it does not hold a job asked for by id: the job
	// keeps its id, so it may be in one of them (docs/design/shards.md
	// 4). The group's own log says so before it drops a tube's jobs, so
	// the search needs no member's routing to have caught up.
	Moved []uint16
}

// JobReply is a job as a reply or an offer carries it.
type JobReply struct {
	ID  uint64
	Pri uint32
	TTR uint32 // seconds: the session's estimate of the deadline (6.4)
	// Body is the job's data as stored, ending in "\r\n".
	Body []byte
}

// Best is store.Client.BestReady's answer, and with StatusLost the
// group's best that beat nothing.
type Best struct {
	Candidate    store.Candidate
	OK, AnyReady bool
}

// TubeStamp is a tube of list-tubes, with its creation stamp (5.5).
type TubeStamp struct {
	Name  []byte
	Stamp uint64
}

// Event is what a group sends a wait across groups.
type Event struct {
	Wait      uint64
	Type      EventType
	Job       JobReply // EventOffer's
	MetaIndex uint64   // EventWrongGroup's
}

// Errors of encoding and decoding. Decoding refuses an item with the
// first error it finds; encoding refuses what decoding would.
var (
	ErrShort      = errors.New("router: an item runs past its frame")
	ErrTrailing   = errors.New("router: bytes after the last item")
	ErrLength     = errors.New("router: an item's fields do not fill its length")
	ErrKind       = errors.New("router: an item of unknown kind")
	ErrOp         = errors.New("router: a request of unknown op")
	ErrStatus     = errors.New("router: a reply of unknown status")
	ErrResult     = errors.New("router: a reply of unknown result")
	ErrEvent      = errors.New("router: an event of unknown type")
	ErrFlags      = errors.New("router: unknown flags")
	ErrTubeName   = errors.New("router: a tube name empty or longer than 200 bytes")
	ErrBody       = errors.New("router: a job body that does not end in \\r\\n")
	ErrJobTooBig  = errors.New("router: a put's body is longer than the max job size")
	ErrState      = errors.New("router: a job's state out of range")
	ErrItemTooBig = errors.New("router: an item or a list too long for its length field")
	ErrMemberName = errors.New("router: a member's name longer than 128 bytes")
	ErrSessions   = errors.New("router: sessions not in increasing order, or above the list's last id")
)

const (
	// itemHeader is an item's bytes before its payload.
	itemHeader = 1 + 2 + 8 + 4 + 4
	// minTube is a tube's least encoding: a length and one byte.
	minTube = 2

	flagSoonElsewhere byte = 1
	flagRefsSync      byte = 1
	flagBestOK        byte = 1
	flagBestAnyReady  byte = 2
)
