package store

import (
	"math"
	"time"
	"unsafe"
)

// State is where a job is in its life cycle. The numbering matches
// beanstalkd's binlog so a write-ahead log can store it as is.
type State uint8

const (
	StateInvalid State = iota // deleted
	StateReady
	StateReserved
	StateBuried
	StateDelayed
)

func (s State) String() string {
	switch s {
	case StateReady:
		return "ready"
	case StateReserved:
		return "reserved"
	case StateBuried:
		return "buried"
	case StateDelayed:
		return "delayed"
	}
	return "invalid"
}

// UrgentPriority: a ready job with a priority below this counts as urgent.
const UrgentPriority = 1024

// Job is one unit of work. id, body, tube and createdAt never change after
// creation, so they may be read without a lock; everything else is guarded
// by tube.mu.
//
// Every stored job costs a Job, so its fields are packed: 120 bytes, which
// leaves a body of up to 72 bytes (64 and "\r\n") room in the same
// 192-byte allocation (newJob). The pointers come first, so the collector
// scans only the start of it.
type Job struct {
	tube *Tube // immutable: a job never changes tube
	// body points at the job's data (bodyLen bytes including the trailing
	// "\r\n"): into the same allocation for a small body, else at the
	// buffer Put was given. Immutable.
	body  *byte
	owner *Client
	// prev and next link the job into its tube's buried FIFO while it is
	// buried (guarded by tube.mu), or into its owner's reservation order
	// while it is reserved (written with both tube.mu and owner.mu held).
	prev, next *Job

	id        uint64 // immutable
	createdAt int64  // immutable, monotonic ns
	deadline  int64  // monotonic ns: when a delayed job becomes ready, or a reserved job's TTR ends
	// putLSN is the log position of the record that created the job (0 if
	// recovered, or without a log); set before the job is visible, then
	// immutable.
	putLSN uint64

	bodyLen uint32 // immutable
	pri     uint32
	// delay (from the last put or release) and ttr are whole seconds, as
	// the protocol gives them; see delayNS and ttrNS.
	delay, ttr uint32
	counts     jobCounts
	// slot is the job's index in the heap that holds it: its tube's ready
	// or delay heap, or while it is reserved its owner's reserved heap; -1
	// when in none. While a job is reserved, slot and deadline are written
	// only with both tube.mu and owner.mu held, because the owner's heap
	// compares jobs of many tubes under owner.mu alone.
	slot int32
	// seg is the log segment of the job's latest full record, 0 if none;
	// the record's size follows from the tube name and body (logLoc).
	seg   uint32
	state State
}

// delayNS and ttrNS are the job's delay and time-to-run in nanoseconds.
func (j *Job) delayNS() int64 { return int64(j.delay) * int64(time.Second) }
func (j *Job) ttrNS() int64   { return int64(j.ttr) * int64(time.Second) }

// seconds turns a logged duration back into the whole seconds a Job keeps;
// every duration Sprout (or beanstalkd) logs is whole seconds within
// uint32.
func seconds(ns int64) uint32 {
	return uint32(min(max(ns/int64(time.Second), 0), math.MaxUint32))
}

// newJob allocates a job with body. A body of up to MaxCopiedBody bytes is
// copied into the job's own allocation, sized to the smallest class that
// holds both: one allocation instead of two, and no second size class to
// round up to. A longer body is kept as given.
func newJob(body []byte) *Job {
	n := len(body)
	if n == 0 || n > MaxCopiedBody {
		j := new(Job)
		j.body, j.bodyLen = unsafe.SliceData(body), uint32(n)
		return j
	}
	for _, c := range inlineClasses {
		if n <= c.room {
			j, room := c.alloc()
			copy(room, body)
			j.body, j.bodyLen = &room[0], uint32(n)
			return j
		}
	}
	panic("store: no inline class for a copied body")
}

// MaxCopiedBody is the longest body, "\r\n" included, that a job copies
// into its own allocation (newJob); a longer one it keeps as given. Longer ones would gain little:
// the job's rounding is then small beside the body's.
const MaxCopiedBody = 392

// inlineClasses are the job types with room for a body, one per
// allocation size class from 128 to 512 bytes, smallest first; each room
// fills its class exactly with a 120-byte Job (TestInlineClasses).
var inlineClasses = [...]struct {
	room  int
	alloc func() (*Job, []byte)
}{
	{8, inlineJob[[8]byte]}, {24, inlineJob[[24]byte]}, {40, inlineJob[[40]byte]},
	{56, inlineJob[[56]byte]}, {72, inlineJob[[72]byte]}, {88, inlineJob[[88]byte]},
	{104, inlineJob[[104]byte]}, {120, inlineJob[[120]byte]}, {136, inlineJob[[136]byte]},
	{168, inlineJob[[168]byte]}, {200, inlineJob[[200]byte]}, {232, inlineJob[[232]byte]},
	{264, inlineJob[[264]byte]}, {296, inlineJob[[296]byte]}, {328, inlineJob[[328]byte]},
	{360, inlineJob[[360]byte]}, {MaxCopiedBody, inlineJob[[MaxCopiedBody]byte]},
}

// inlineJob allocates a Job followed by a byte array B, and returns the
// job and the array as a slice.
func inlineJob[B any]() (*Job, []byte) {
	x := new(struct {
		j    Job
		room B
	})
	return &x.j, unsafe.Slice((*byte)(unsafe.Pointer(&x.room)), unsafe.Sizeof(x.room))
}

type jobCounts struct {
	reserves, timeouts, releases, buries, kicks uint32
}

// ID is the job's id; safe without locks.
func (j *Job) ID() uint64 { return j.id }

// TTR is the job's time-to-run in whole seconds, at least MinTTR's: set
// by its put, never changed after; safe without locks.
func (j *Job) TTR() uint32 { return j.ttr }

// Body is the job's data including its trailing "\r\n"; safe without locks
// and never modified.
func (j *Job) Body() []byte { return unsafe.Slice(j.body, j.bodyLen) }

// jobList is a FIFO of jobs linked through Job.prev and Job.next, so a job
// leaves it from anywhere in O(1).
type jobList struct {
	head, tail *Job
}

func (l *jobList) pushBack(j *Job) {
	j.prev, j.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = j
	} else {
		l.head = j
	}
	l.tail = j
}

func (l *jobList) remove(j *Job) {
	if j.prev != nil {
		j.prev.next = j.next
	} else {
		l.head = j.next
	}
	if j.next != nil {
		j.next.prev = j.prev
	} else {
		l.tail = j.prev
	}
	j.prev, j.next = nil, nil
}

func jobLess(a, b *Job) bool {
	if a.pri != b.pri {
		return a.pri < b.pri
	}
	return a.id < b.id
}

func delayLess(a, b *Job) bool {
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	return a.id < b.id
}
