package wal

// Kind says what a record does on replay.
type Kind uint8

// Every kind is below 16: a cluster member's own frames in its segments
// begin with kinds from 16 on (internal/replication), so a record is never
// taken for one of those, nor one of those for a record.
const (
	// KindFull carries a whole job: tube, state, fields and body. Written
	// for a put and when compaction moves a live job to a newer segment.
	KindFull Kind = 1
	// KindUpdate carries a job's new state and fields, not its tube or body.
	KindUpdate Kind = 2
	// KindDelete says the job is gone.
	KindDelete Kind = 3
	// KindIDs says ids up to ID may have been issued: written ahead of the
	// id counter, so an id taken before its put was durable is never
	// issued again after a crash.
	KindIDs Kind = 4
	// KindClock is a cluster leader's wall clock (Time) at the start of a
	// proposed batch, never earlier than the last one applied
	// (docs/design/shards.md 5.6): the time followers give the dedup
	// table's entries and expire them by. Its ID is 0.
	KindClock Kind = 5
	// KindReq is one entry of a dedup table (store.DedupTable): the key
	// (Req), the job its command's first record named (ID), how many
	// records the command wrote (Count) and the entry's time (Time). A
	// cluster's snapshot carries the live table as these.
	KindReq Kind = 6
	// kindKeyed is not a Record's kind but the first byte of a record that
	// carries a request key (Record.Req): a KindFull, KindUpdate or
	// KindDelete record, whose own kind follows the key (encode.go).
	kindKeyed Kind = 7
	// KindMeta is a cluster's control record that names a tube
	// (internal/replication: a tube's placement and moves), shaped as a
	// full record with ID 0: Tube the tube, State what it does, the other
	// fields its arguments, and a body that may be empty. A store
	// applying it ignores it; a single node's journal never holds one.
	KindMeta Kind = 14
	// MetaPause is the State of a KindMeta record a cluster's store
	// writes itself (Options.LogPauses): a tube's pause-tube, Delay the
	// pause (0: the tube was freed, and its pause with it), Deadline its
	// end (wall ns). The other States are internal/replication's.
	MetaPause uint8 = 6
	// KindControl is a cluster's control record (internal/replication),
	// shaped as an update with ID 0: State says what it does (0: raise
	// the cluster version to Pri; 1: mark a member draining), the other
	// fields its arguments. A store applying it ignores it; a single
	// node's journal never holds one.
	KindControl Kind = 15
)

// Job states as stored; the numbering is beanstalkd's (and store.State's).
const (
	StateReady    uint8 = 1
	StateReserved uint8 = 2
	StateBuried   uint8 = 3
	StateDelayed  uint8 = 4
)

// Req is a request's key (docs/design/shards.md 5.6): the incarnation of
// the member whose session sent the request, and that member's number for
// it. The zero Req is no key: incarnations are random and never 0.
type Req struct {
	Incarnation uint64
	Number      uint64
}

// IsZero reports whether r is no key.
func (r Req) IsZero() bool { return r == Req{} }

// ImportKey is the key of a KindFull record an import writes
// (store.Client.ImportTube): a job of a tube moved in from another group,
// where it was put and counted in total-jobs, so a store applying it makes
// the job without counting it again. No request has this key (an
// incarnation is never 0), and a dedup table keeps no entry for it.
var ImportKey = Req{Number: 1}

// Record is one logged change to one job. Times are wall-clock nanoseconds
// since the Unix epoch, so they survive a restart; durations are
// nanoseconds.
type Record struct {
	Kind Kind
	ID   uint64
	// Req is the key of the request whose command wrote the record, on a
	// KindFull, KindUpdate or KindDelete record (zero: none; other kinds
	// but KindReq are written without it), and a KindReq's key.
	Req   Req
	Tube  string // KindFull and KindMeta only
	State uint8  // KindFull and KindUpdate (and what a control record does)
	Pri   uint32
	Delay int64 // ns: the delay of the last put or release
	TTR   int64 // ns
	// CreatedAt is when the job was put (wall ns).
	CreatedAt int64
	// Deadline is when a delayed job becomes ready (wall ns); 0 otherwise.
	Deadline                                    int64
	Reserves, Timeouts, Releases, Buries, Kicks uint32
	// Count is a KindReq's count of the records its command wrote.
	Count uint32
	// Time is a KindClock's clock and a KindReq's entry time (wall ns).
	Time int64
	Body []byte // KindFull (includes the trailing "\r\n") and KindMeta only
}
