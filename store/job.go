package store

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

// Job is one unit of work. ID, Body, tube and createdAt never change after
// creation, so they may be read without a lock; everything else is guarded
// by tube.mu.
type Job struct {
	id        uint64 // immutable
	body      []byte // immutable; includes the trailing "\r\n"
	tube      *Tube  // immutable: a job never changes tube
	createdAt int64  // immutable, monotonic ns

	// guarded by tube.mu
	pri      uint32
	state    State
	delay    int64 // ns, from the last put or release
	ttr      int64 // ns
	deadline int64 // monotonic ns: when a delayed job becomes ready, or a reserved job's TTR ends
	owner    *Client
	counts   jobCounts
	// heapIndex is the job's slot in its tube's ready or delay heap; -1
	// when in neither.
	heapIndex int32
	// ownerIndex is the job's slot in its owner's reserved heap. While a job
	// is reserved, ownerIndex and deadline are written only with both
	// tube.mu and owner.mu held, because the owner's heap compares jobs of
	// many tubes under owner.mu alone.
	ownerIndex int32
	// seg is the log segment of the job's latest full record, 0 if none;
	// the record's size follows from the tube name and body (logLoc).
	seg uint32
	// prev and next link the job into its tube's buried FIFO while it is
	// buried (guarded by tube.mu), or into its owner's reservation order
	// while it is reserved (written with both tube.mu and owner.mu held).
	prev, next *Job
	// putLSN is the log position of the record that created the job (0 if
	// recovered, or without a log); set before the job is visible, then
	// immutable.
	putLSN uint64
	// The fields are ordered so a Job stays in the 144-byte size class.
}

type jobCounts struct {
	reserves, timeouts, releases, buries, kicks uint32
}

// ID is the job's id; safe without locks.
func (j *Job) ID() uint64 { return j.id }

// Body is the job's data including its trailing "\r\n"; safe without locks
// and never modified.
func (j *Job) Body() []byte { return j.body }

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

// jobHeap is a binary heap of jobs ordered by less, keeping each job's
// heapIndex current so any job can be removed in O(log n).
type jobHeap struct {
	jobs  []*Job
	less  func(a, b *Job) bool
	index func(j *Job) *int32 // the job's slot field for this kind of heap
}

func tubeSlot(j *Job) *int32  { return &j.heapIndex }
func ownerSlot(j *Job) *int32 { return &j.ownerIndex }

func (h *jobHeap) Len() int { return len(h.jobs) }

func (h *jobHeap) min() *Job {
	if len(h.jobs) == 0 {
		return nil
	}
	return h.jobs[0]
}

func (h *jobHeap) push(j *Job) {
	i := len(h.jobs)
	*h.index(j) = int32(i)
	h.jobs = append(h.jobs, j)
	h.up(i)
}

func (h *jobHeap) remove(j *Job) {
	i := int(*h.index(j))
	last := len(h.jobs) - 1
	if i != last {
		h.swap(i, last)
	}
	h.jobs[last] = nil
	h.jobs = h.jobs[:last]
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	*h.index(j) = -1
	if cap(h.jobs) > 64 && len(h.jobs) < cap(h.jobs)/4 {
		h.jobs = append(make([]*Job, 0, cap(h.jobs)/2), h.jobs...)
	}
}

// fix restores order after j's key changed.
func (h *jobHeap) fix(j *Job) {
	i := int(*h.index(j))
	if !h.down(i) {
		h.up(i)
	}
}

func (h *jobHeap) swap(i, k int) {
	h.jobs[i], h.jobs[k] = h.jobs[k], h.jobs[i]
	*h.index(h.jobs[i]) = int32(i)
	*h.index(h.jobs[k]) = int32(k)
}

func (h *jobHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.jobs[i], h.jobs[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *jobHeap) down(i int) bool {
	start := i
	n := len(h.jobs)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(h.jobs[r], h.jobs[l]) {
			m = r
		}
		if !h.less(h.jobs[m], h.jobs[i]) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
