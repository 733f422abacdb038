package replication

import (
	"container/heap"
	"sync"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// Journal is a member's store.Journal and store.AckSource
// (store.Options.Journal and Acks): the store appends its records here
// instead of to a write-ahead log, and its replies wait here for their
// changes to be committed.
//
// Append only encodes the record into the batch the core will propose
// next, and gives it its position: the count of bytes of records
// appended before it and with it, so a client's PendingAck is the end of
// its last record. The core takes the whole batch as one proposal (take)
// and, when the entry is committed and durable here, the shell publishes
// the entry's end (Publish), releasing every reply that waited for it or
// less.
//
// Only the leader's store appends: a follower's store is changed only by
// Store.Apply, which logs nothing. A batch appended while the member does
// not serve is never proposed, so it is never acknowledged.
type Journal struct {
	// notify, if set, is called when a record is appended to an empty
	// batch, so the shell asks the core for its next actions. It is called
	// under a tube lock and must not block. Immutable.
	notify func()
	// full, if set, reports that the member's log is out of disk: every
	// record but a delete is refused (wal.ErrNoSpace), as a single node's
	// log refuses it. Set once, before the store appends.
	full func() bool
	// clock, if set, is the store's clock (store.Store.Clock) once the
	// cluster may carry it (finalized): each batch begins with it, a
	// KindClock record, so every replica's dedup table expires by the
	// leader's time (docs/design/shards.md 5.6). Set once, before the
	// store appends.
	clock func() (int64, bool)

	mu    sync.Mutex
	batch []byte // guarded by mu: the frames appended since the last take
	// room is what a new batch starts with: about the last batch's size,
	// so a busy leader's batch is not grown from nothing by appends each
	// time (a third of its allocations on pipelined puts). Guarded by mu.
	room int
	// spare is a batch raft has copied, for the next (recycle).
	spare   []byte // guarded by mu
	batched int    // guarded by mu: the records in batch
	// tail: batch is what a split left (take), in the array of the batch
	// split. Guarded by mu.
	tail     bool
	appended uint64  // guarded by mu: the position after the last record
	records  int64   // guarded by mu: records appended, ever
	migrated int64   // guarded by mu: compaction's rewrites among them
	acked    uint64  // guarded by mu: the position published
	waiting  waiters // guarded by mu: OnAcked callbacks for positions beyond acked
	// sealed: the last record of batch (or of what was taken) is a
	// handover's (HandOver), which the next leader takes only as the
	// last entry before its term (handover.go). What is appended after it
	// is held back, in held, until the handover is voided
	// (HandOverAborted, appended after them) or the leadership goes
	// (reset: never proposed, as after a loss). Guarded by mu.
	sealed      bool
	held        []byte // guarded by mu: the frames appended while sealed
	heldRecords int    // guarded by mu: the records in held
}

// maxBatchRoom bounds the room a new batch starts with.
const maxBatchRoom = 4 << 20

// NewJournal returns an empty journal; notify may be nil.
func NewJournal(notify func()) *Journal { return &Journal{notify: notify} }

var _ store.Journal = (*Journal)(nil)
var _ store.AckSource = (*Journal)(nil)

// Append implements store.Journal. It never blocks on anything but the
// journal's mutex, and fails only while the member's log is out of disk,
// for every record but a delete. The Loc it returns is none: a record's
// place is known once its entry is written and committed, when the store
// is told (Store.Located). A handover's record seals the journal, its
// void unseals it (sealed).
func (j *Journal) Append(r *wal.Record, _ wal.Loc) (uint64, wal.Loc, error) {
	if j.full != nil && r.Kind != wal.KindDelete && j.full() {
		return 0, wal.Loc{}, wal.ErrNoSpace
	}
	seal := r.Kind == wal.KindMeta && r.State == HandOver
	if r.Kind == wal.KindMeta && r.State == HandOverAborted {
		j.unseal()
	}
	j.mu.Lock()
	into, count := &j.batch, &j.batched
	if j.sealed {
		into, count = &j.held, &j.heldRecords
	}
	before := len(*into)
	if j.batch == nil && !j.sealed {
		if j.spare != nil {
			j.batch, j.spare = j.spare, nil
		} else if j.room > 0 {
			j.batch = make([]byte, 0, j.room)
		}
	}
	if before == 0 && j.clock != nil {
		if now, ok := j.clock(); ok {
			*into = wal.AppendFrame(*into, &wal.Record{Kind: wal.KindClock, Time: now})
			*count++
		}
	}
	*into = wal.AppendFrame(*into, r)
	*count++
	size := len(*into) - before
	j.appended += uint64(size)
	j.records++
	pos := j.appended
	notify := before == 0 && !j.sealed
	if seal {
		j.sealed = true
	}
	j.mu.Unlock()
	if notify && j.notify != nil {
		j.notify()
	}
	return pos, wal.Loc{}, nil
}

// unseal ends a seal: the leadership stays, and what was held goes out,
// in the order it came, after what the batch holds.
func (j *Journal) unseal() {
	j.mu.Lock()
	held, records := j.held, j.heldRecords
	j.sealed, j.held, j.heldRecords = false, nil, 0
	notify := len(j.batch) == 0 && len(held) > 0
	// A batch begins with a clock of its own; held does too (Append), so
	// the frames go as they are.
	j.batch = append(j.batch, held...)
	j.batched += records
	j.mu.Unlock()
	if notify && j.notify != nil {
		j.notify()
	}
}

// Sealed reports whether a handover's record is the last the journal
// hands over (Append): the core proposes no membership change meanwhile.
func (j *Journal) Sealed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.sealed
}

// take hands the batch over to be proposed, with its end position and
// its count of records; nil when nothing was appended since the last
// take. A batch larger than limit (when limit > 0) is handed over in
// parts of whole records, each at most limit unless one record is larger:
// the rest stays for the next take, led by a KindClock record of its own.
// A batch grows past the limit while the node's goroutine is starved (a
// tube's import appends thousands of jobs meanwhile), and one entry of
// many megabytes is applied by each follower in one round, in which it
// answers no peer: long enough, under load, for the leader to lose its
// quorum.
func (j *Journal) take(limit int) (batch []byte, end uint64, records int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	b, n := j.batch, j.batched
	top := j.appended - uint64(len(j.held)) // the position after batch's last record
	if limit > 0 && len(b) > limit {
		if cut, count := frameCut(b, limit); cut < len(b) {
			// The part is copied out, the rest left where it is: a batch
			// of many parts is copied once, and a part raft keeps, or the
			// journal recycles, holds no more than itself.
			part := append(make([]byte, 0, cut), b[:cut]...)
			// Positions count the records appended, not a clock added
			// here: the part ends where the rest's records begin. (After
			// an untake the rest may begin with such a clock: the end is
			// then lower than the part's last record, which only delays
			// its acknowledgement to the next part's.)
			end, rest := top-uint64(len(b)-cut), b[cut:]
			n -= count
			if j.clock != nil && !beginsWithClock(rest) {
				if now, ok := j.clock(); ok {
					clock := wal.AppendFrame(make([]byte, 0, clockFrameSize), &wal.Record{Kind: wal.KindClock, Time: now})
					if cut >= len(clock) {
						rest = b[cut-len(clock):] // over the part's bytes, copied out
						copy(rest, clock)
					} else {
						rest = append(clock, rest...)
					}
					n++
				}
			}
			j.batch, j.batched, j.tail = rest, n, true
			return part, end, count
		}
	}
	if j.tail && len(b) > 0 {
		// The last of a split batch: its own array, so that recycling it
		// keeps no more than itself.
		b = append(make([]byte, 0, len(b)), b...)
	}
	j.batch, j.batched, j.tail = nil, 0, false
	if len(b) > 0 {
		j.room = min(len(b)+len(b)/4, maxBatchRoom)
	}
	return b, top, n
}

// beginsWithClock reports whether b's first frame is a KindClock record.
func beginsWithClock(b []byte) bool {
	kind, _, _, err := wal.NextFrame(b)
	return err == nil && kind == wal.KindClock
}

// clockFrameSize is a KindClock record's frame.
var clockFrameSize = wal.FrameSize(&wal.Record{Kind: wal.KindClock})

// frameCut is where to cut b, whole record frames, so the first part is
// at most limit bytes (at least one record besides clocks), and the
// frames before the cut. A frame that does not read (never one the
// journal wrote) ends the scan: all of b.
func frameCut(b []byte, limit int) (cut, frames int) {
	records := 0
	for cut < len(b) {
		kind, _, size, err := wal.NextFrame(b[cut:])
		if err != nil {
			return len(b), 0
		}
		if records > 0 && cut+size > limit {
			break
		}
		cut += size
		frames++
		if kind != wal.KindClock {
			records++
		}
	}
	return cut, frames
}

// recycle takes back a batch taken, once nothing refers to it any more
// (raft copied it): the next batch is written into it.
func (j *Journal) recycle(b []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if cap(b) > cap(j.spare) && cap(b) <= 2*maxBatchRoom {
		j.spare = b[:0]
	}
}

// pending is the size of the batch not yet taken.
func (j *Journal) pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.batch)
}

// untake puts back a batch that could not be proposed, ahead of what was
// appended since: it goes out first, with the next proposal.
func (j *Journal) untake(b []byte, records int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.batch = append(b, j.batch...)
	j.batched += records
}

// reset drops the batch not yet taken and every callback waiting for a
// position not yet published: what was gathered is never proposed, and
// what waited on it is never acknowledged. Positions go on from where
// they were. The node calls it when the member lost the leadership it
// served (its clients were closed and their replies dropped, and the
// admin API's waits end on the loss); the core again when a leadership
// begins, as its term's first entry is applied and before anything is
// served, for what was appended in between by a change that began
// before the loss and ran on (a member's in-process writers: a tube's
// import, the admin API): the store it changed was rebuilt since. A
// seal ends with it, what it held dropped.
func (j *Journal) reset() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.batch, j.batched, j.tail = nil, 0, false
	j.sealed, j.held, j.heldRecords = false, nil, 0
	j.waiting = nil
}

// NoteMigrated implements store.Journal.
func (j *Journal) NoteMigrated() {
	j.mu.Lock()
	j.migrated++
	j.mu.Unlock()
}

// Recovered implements store.Journal: a member's store is filled by
// Store.Apply from the log, not recovered through its journal.
func (j *Journal) Recovered() []wal.Recovered { return nil }

// LastID implements store.Journal: ids are raised by the records applied.
func (j *Journal) LastID() uint64 { return 0 }

// Stats implements store.Journal with the figures a journal has: records
// appended and migrated. The log's own figures are the log's.
func (j *Journal) Stats() wal.Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return wal.Stats{RecordsWritten: j.records, RecordsMigrated: j.migrated}
}

// Durable implements store.Journal: in a cluster, what is durable for
// the store is what may be acknowledged.
func (j *Journal) Durable() uint64 { return j.Acked() }

// OnDurable implements store.Journal, as OnAcked.
func (j *Journal) OnDurable(pos uint64, fn func()) { j.OnAcked(pos, fn) }

// Appended is the position after the last record appended: what a
// leader about to hand its leadership over waits to see acknowledged.
func (j *Journal) Appended() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appended
}

// Acked implements store.AckSource: the end of the last entry of this
// leader's that is committed and durable here.
func (j *Journal) Acked() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.acked
}

// OnAcked implements store.AckSource.
func (j *Journal) OnAcked(pos uint64, fn func()) {
	j.mu.Lock()
	if pos <= j.acked {
		j.mu.Unlock()
		fn()
		return
	}
	heap.Push(&j.waiting, waiter{pos, fn})
	j.mu.Unlock()
}

// Publish makes pos acknowledged and runs, on this goroutine, every
// callback that waited for it or less. The shell calls it for ActPublish.
func (j *Journal) Publish(pos uint64) {
	var due []func()
	j.mu.Lock()
	j.acked = max(j.acked, pos)
	for len(j.waiting) > 0 && j.waiting[0].pos <= j.acked {
		due = append(due, heap.Pop(&j.waiting).(waiter).fn)
	}
	j.mu.Unlock()
	for _, fn := range due {
		fn()
	}
}

// waiter is an OnAcked callback and the position it waits for.
type waiter struct {
	pos uint64
	fn  func()
}

// waiters is a min-heap of waiters by position.
type waiters []waiter

func (w waiters) Len() int           { return len(w) }
func (w waiters) Less(a, b int) bool { return w[a].pos < w[b].pos }
func (w waiters) Swap(a, b int)      { w[a], w[b] = w[b], w[a] }
func (w *waiters) Push(x any)        { *w = append(*w, x.(waiter)) }
func (w *waiters) Pop() any {
	old := *w
	x := old[len(old)-1]
	old[len(old)-1] = waiter{}
	*w = old[:len(old)-1]
	return x
}
