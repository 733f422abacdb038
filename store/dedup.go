package store

import (
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/sproutmq/sprout/store/wal"
)

// DedupTTL is how long a keyed request's outcome is kept: its entry
// expires this long after its entry time, by the replicated clock
// (docs/design/shards.md 5.6). A request resent after a failover comes
// as soon as its member learns the next leader, within an election
// timeout or two (1 to 2 s each); one resent later than this runs again.
// Every replica keeps every entry: measured at about 300 bytes of a
// member's memory each (its Go heap's headroom included), 60 s of 7,700
// jobs/s through a follower (a keyed put and delete each) held 300 MiB
// on every member, so the window is five election timeouts, not 60 s.
const DedupTTL = 10 * time.Second

// Outcome is what a keyed command did, as a dedup table keeps it: the job
// its first record named (a put's new job; the job a delete, release,
// bury or kick-job changed; the first job a kick kicked) and how many
// records it wrote (the jobs a kick kicked; 1 for the others). Only a
// command that changed something has one: a command that changed nothing
// (NOT_FOUND, a full disk) wrote nothing, and runs again when resent.
type Outcome struct {
	ID    uint64
	Count uint32
}

// dedupEntry is one key's outcome in a dedup table.
type dedupEntry struct {
	Outcome
	at int64 // the entry time: the replicated clock (wall ns) when it was made
	// pos is the log position the command's replies waited for, which a
	// resent request's reply waits for too; 0 for an entry applied, which
	// is committed already.
	pos uint64
}

// queued is an entry in its table's queue: the key and the entry time it
// was queued with. An entry made again (a snapshot's KindReq over an
// entry of its records) is queued again, and its older place skipped.
type queued struct {
	key wal.Req
	at  int64
}

// DedupTable maps request keys to their outcomes (docs/design/shards.md
// 5.6). A store keeps one with Options.Dedup; standing alone, it is the
// table a log's records make as a replica applies them, without a store:
// what a cluster's snapshot of its log up to an index carries (Records),
// since the leader's own store holds its proposals in flight as well.
// Folding the same records gives every member the same table: entry
// times come from the records' KindClock, never from a local clock.
//
// A DedupTable is not safe for concurrent use; a store guards its own.
type DedupTable struct {
	// clock is the latest KindClock added (wall ns). A store's own table
	// leaves it 0: the store keeps the clock (Store.clock).
	clock   int64
	entries map[wal.Req]dedupEntry
	// peak is the most entries held since entries was made: a Go map
	// keeps the room of its largest size, so once a burst has passed
	// (a quarter of the peak left) expire moves the entries to a new one.
	peak int
	// queue holds the entries in the order they were made, from head on,
	// which is their entry times' order but where a snapshot's KindReq
	// records set entries again: expire drops what is due from its head.
	queue []queued
	head  int
}

// NewDedupTable returns an empty table.
func NewDedupTable() *DedupTable {
	return &DedupTable{entries: make(map[wal.Req]dedupEntry)}
}

// Add folds r into the table, as a replica applies it: a KindClock moves
// the clock on and drops the entries it expires, a KindReq sets its
// entry, and a record with a key makes its key's entry, with the clock as
// its entry time, or counts one more record of it (a kick's). Other
// records change nothing.
func (d *DedupTable) Add(r *wal.Record) {
	if r.Kind == wal.KindClock {
		d.clock = max(d.clock, r.Time)
	}
	d.fold(r, d.clock)
}

// AddFrames folds the records of b, whole frames checked already (a
// snapshot's view of a log), decoding only the records the table reads
// (wal.ScanReqs).
func (d *DedupTable) AddFrames(b []byte) error {
	return wal.ScanReqs(b, d.Add)
}

// Clock is the latest KindClock added, or a store's clock when the table
// was copied from it (Store.DedupTable).
func (d *DedupTable) Clock() int64 { return d.clock }

// Len counts the entries: each live one, and those the next KindClock
// drops.
func (d *DedupTable) Len() int { return len(d.entries) }

// Records are the table as records: its clock (KindClock; none while it
// is 0), then each live entry (KindReq), oldest first. A store emptied
// (Reset) that applies a snapshot's jobs and then these has this table:
// the clock drops the entries the jobs' own keyed records made at its
// zero clock, and the entries set the live ones.
func (d *DedupTable) Records() iter.Seq[wal.Record] {
	return func(yield func(wal.Record) bool) {
		if d.clock != 0 && !yield(wal.Record{Kind: wal.KindClock, Time: d.clock}) {
			return
		}
		for _, q := range d.queue[d.head:] {
			e, ok := d.entries[q.key]
			if !ok || e.at != q.at || expired(e.at, d.clock) {
				continue
			}
			if !yield(wal.Record{Kind: wal.KindReq, ID: e.ID, Req: q.key, Time: e.at, Count: e.Count}) {
				return
			}
		}
	}
}

// fold is Add with clock as the replicated clock.
func (d *DedupTable) fold(r *wal.Record, clock int64) {
	switch {
	case r.Kind == wal.KindClock:
		d.expire(clock)
	case r.Kind == wal.KindReq:
		d.set(r.Req, dedupEntry{Outcome: Outcome{ID: r.ID, Count: r.Count}, at: r.Time})
	case !r.Req.IsZero():
		if e, ok := d.entries[r.Req]; ok {
			e.Count++
			d.entries[r.Req] = e
			return
		}
		d.add(r.Req, dedupEntry{Outcome: Outcome{ID: r.ID, Count: 1}, at: clock})
	}
}

// set makes key's entry e.
func (d *DedupTable) set(key wal.Req, e dedupEntry) {
	if old, had := d.entries[key]; had && old.at == e.at {
		d.entries[key] = e
		return
	}
	d.add(key, e)
}

// add is set for a key that has no entry, or an expired one: one probe
// of the map fewer, which a leader's table, larger than the caches, pays
// for in a miss.
func (d *DedupTable) add(key wal.Req, e dedupEntry) {
	d.entries[key] = e
	d.peak = max(d.peak, len(d.entries))
	d.queue = append(d.queue, queued{key, e.at})
}

// expire drops the entries expired at now from the head of the queue.
func (d *DedupTable) expire(now int64) {
	for d.head < len(d.queue) && expired(d.queue[d.head].at, now) {
		q := d.queue[d.head]
		d.head++
		if e, ok := d.entries[q.key]; ok && e.at == q.at {
			delete(d.entries, q.key)
		}
	}
	if d.head == len(d.queue) {
		d.queue, d.head = d.queue[:0], 0
	} else if d.head >= 1024 && d.head*2 >= len(d.queue) {
		n := copy(d.queue, d.queue[d.head:])
		d.queue, d.head = d.queue[:n], 0
	}
	if d.peak >= shrinkFrom && len(d.entries) <= d.peak/4 {
		entries := make(map[wal.Req]dedupEntry, len(d.entries))
		maps.Copy(entries, d.entries)
		d.entries, d.peak = entries, len(entries)
		if cap(d.queue) >= shrinkFrom && len(d.queue) <= cap(d.queue)/4 {
			d.queue = slices.Clone(d.queue)
		}
	}
}

// shrinkFrom is the peak below which a table's map is never remade:
// small tables keep their room.
const shrinkFrom = 1 << 16

// reset empties the table.
func (d *DedupTable) reset() {
	clear(d.entries)
	d.clock, d.queue, d.head = 0, d.queue[:0], 0
}

// expired reports whether an entry made at is expired at now.
func expired(at, now int64) bool { return now-at >= int64(DedupTTL) }

// Clock is the leader's clock, in wall ns: its own wall clock, or the
// replicated clock (the latest KindClock applied) if that is later, so
// that time never runs backwards across a failover (docs/design/shards.md
// 5.6). It raises the replicated clock to what it returns, so that its
// readings never go back either. A cluster's leader stamps each batch it
// proposes with it (a KindClock record first), and keyed commands take
// their entries' times from it.
func (s *Store) Clock() int64 {
	raiseTime(&s.clock, s.wall(s.now()))
	return s.clock.Load()
}

// DedupTable copies the store's dedup table and clock as they are now;
// nil without Options.Dedup. A leader's holds the outcomes of its
// commands not yet committed, too: a snapshot of a log up to an index is
// the records' table (DedupTable.AddFrames), not this.
func (s *Store) DedupTable() *DedupTable {
	if s.dedup == nil {
		return nil
	}
	d := NewDedupTable()
	s.dedupMu.Lock()
	for k, e := range s.dedup.entries {
		e.pos = 0
		d.entries[k] = e
	}
	for _, q := range s.dedup.queue[s.dedup.head:] {
		if e, ok := d.entries[q.key]; ok && e.at == q.at {
			d.queue = append(d.queue, q)
		}
	}
	s.dedupMu.Unlock()
	d.clock = s.clock.Load()
	return d
}

// DedupEntries counts the entries of the store's dedup table (those not
// yet dropped by expiry); 0 without Options.Dedup.
func (s *Store) DedupEntries() int {
	if s.dedup == nil {
		return 0
	}
	s.dedupMu.Lock()
	defer s.dedupMu.Unlock()
	return s.dedup.Len()
}

// applyDedup folds an applied record into the store's table and clock.
func (s *Store) applyDedup(r *wal.Record) {
	if r.Kind == wal.KindClock {
		raiseTime(&s.clock, r.Time)
	}
	if s.dedup == nil || r.Kind != wal.KindClock && r.Kind != wal.KindReq && r.Req.IsZero() {
		return
	}
	s.dedupMu.Lock()
	s.dedup.fold(r, s.clock.Load())
	s.dedupMu.Unlock()
}

// answered finds the outcome of a keyed call's request, if the store
// keeps one not expired by the leader's clock; c's replies then wait for
// what the command's did. Without Options.Dedup it clears *key first: the
// call goes on as the unkeyed one.
func (c *Client) answered(key *wal.Req) (Outcome, bool) {
	s := c.s
	if s.dedup == nil {
		*key = wal.Req{}
	}
	if key.IsZero() {
		return Outcome{}, false
	}
	now := s.Clock()
	s.dedupMu.Lock()
	e, ok := s.dedup.entries[*key]
	s.dedupMu.Unlock()
	if !ok || expired(e.at, now) {
		return Outcome{}, false
	}
	c.raisePendingAck(e.pos)
	return e.Outcome, true
}

// Answered reports whether the store keeps the outcome of key's request
// (a keyed call's answered would find it): a request sent again after it
// ran is answered from it wherever its tube has gone since.
func (s *Store) Answered(key wal.Req) bool {
	if s.dedup == nil || key.IsZero() {
		return false
	}
	now := s.Clock()
	s.dedupMu.Lock()
	e, ok := s.dedup.entries[key]
	s.dedupMu.Unlock()
	return ok && !expired(e.at, now)
}

// keep notes key's outcome once its command has run here, the leader,
// and drops the entries expired meanwhile. key must not be zero.
func (c *Client) keep(key wal.Req, out Outcome) {
	s := c.s
	now := s.Clock()
	pos := c.PendingAck() // at least the command's last record's
	s.dedupMu.Lock()
	s.dedup.expire(now)
	s.dedup.add(key, dedupEntry{Outcome: out, at: now, pos: pos}) // answered found none live
	s.dedupMu.Unlock()
}

// PutKeyed is Put for a request with a key (docs/design/shards.md 5.6),
// taking its id itself (Store.NextID). The first time, it puts the job
// as Put does, its record carrying the key, and keeps the outcome; while
// the key is kept, it puts nothing (put is false, and body is not kept)
// and answers the id the first put gave, whose job may be gone since, its
// reply waiting for the first's. The caller must not make two calls with
// one key at once (the router joins a resent request with its original
// while that is in flight). Without Options.Dedup the key is ignored.
func (c *Client) PutKeyed(key wal.Req, pri, delay, ttr uint32, body []byte) (id uint64, put bool, err error) {
	if out, ok := c.answered(&key); ok {
		return out.ID, false, nil
	}
	id = c.s.NextID()
	_, err = c.put(key, id, pri, delay, ttr, body)
	return id, err == nil, err
}

// DeleteKeyed is Delete for a request with a key: true again while the
// key is kept, if the first deleted the job (as PutKeyed).
func (c *Client) DeleteKeyed(key wal.Req, id uint64) bool {
	if _, ok := c.answered(&key); ok {
		return true
	}
	return c.delete(key, id)
}

// ReleaseKeyed is Release for a request with a key: nil (RELEASED) again
// while the key is kept, if the first released the job (as PutKeyed).
func (c *Client) ReleaseKeyed(key wal.Req, id uint64, pri, delay uint32) error {
	if _, ok := c.answered(&key); ok {
		return nil
	}
	return c.release(key, id, pri, delay)
}

// BuryKeyed is Bury for a request with a key: nil (BURIED) again while
// the key is kept, if the first buried the job (as PutKeyed).
func (c *Client) BuryKeyed(key wal.Req, id uint64, pri uint32) error {
	if _, ok := c.answered(&key); ok {
		return nil
	}
	return c.bury(key, id, pri)
}

// KickKeyed is Kick for a request with a key: the count the first kicked
// again while the key is kept, if it kicked any (as PutKeyed). Every
// job's record carries the key, so a replica counts what committed.
func (c *Client) KickKeyed(key wal.Req, n uint32) uint32 {
	if out, ok := c.answered(&key); ok {
		return out.Count
	}
	return c.kick(key, n)
}

// KickJobKeyed is KickJob for a request with a key: nil (KICKED) again
// while the key is kept, if the first kicked the job (as PutKeyed).
func (c *Client) KickJobKeyed(key wal.Req, id uint64) error {
	if _, ok := c.answered(&key); ok {
		return nil
	}
	return c.kickJob(key, id)
}
