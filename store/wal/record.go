package wal

// Kind says what a record does on replay.
type Kind uint8

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
	// KindControl is a cluster's control record (internal/replication),
	// shaped as an update: ID 0, and Pri the cluster version it raises the
	// cluster to. A store applying it ignores it; a single node's journal
	// never holds one.
	KindControl Kind = 15
)

// Job states as stored; the numbering is beanstalkd's (and store.State's).
const (
	StateReady    uint8 = 1
	StateReserved uint8 = 2
	StateBuried   uint8 = 3
	StateDelayed  uint8 = 4
)

// Record is one logged change to one job. Times are wall-clock nanoseconds
// since the Unix epoch, so they survive a restart; durations are
// nanoseconds.
type Record struct {
	Kind  Kind
	ID    uint64
	Tube  string // KindFull only
	State uint8  // KindFull and KindUpdate
	Pri   uint32
	Delay int64 // ns: the delay of the last put or release
	TTR   int64 // ns
	// CreatedAt is when the job was put (wall ns).
	CreatedAt int64
	// Deadline is when a delayed job becomes ready (wall ns); 0 otherwise.
	Deadline                                    int64
	Reserves, Timeouts, Releases, Buries, Kicks uint32
	Body                                        []byte // KindFull only; includes the trailing "\r\n"
}
