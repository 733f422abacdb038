package store

import (
	"iter"
	"time"

	"github.com/sproutmq/sprout/internal/atomicmax"
	"github.com/sproutmq/sprout/store/wal"
)

// DedupTTL is how long a keyed request's outcome is kept: its entry
// expires this long after its entry time, by the replicated clock
// (docs/design/shards.md 5.6). A request resent after a failover comes
// as soon as its member learns the next leader, within an election
// timeout or two (1 to 2 s each); one resent later than this runs again.
// Every replica keeps every entry: when the table was a hash map, 60 s
// of 7,700 jobs/s through a follower (a keyed put and delete each) held
// 300 MiB on every member, so the window is five election timeouts, not
// 60 s. An entry is 40 bytes now, up to twice that with its slice's room.
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

// DedupTable maps request keys to their outcomes (docs/design/shards.md
// 5.6). A store keeps one with Options.Dedup; standing alone, it is the
// table a log's records make as a replica applies them, without a store:
// what a cluster's snapshot of its log up to an index carries (Records),
// since the leader's own store holds its proposals in flight as well.
// Folding the same records gives every member the same entries: entry
// times come from the records' KindClock, never from a local clock.
//
// Every replica folds every keyed record, and a busy group's window holds
// millions, so the table is laid out for the order keys come in: a
// member numbers its requests as it makes them (router.Link), so each
// sender's numbers arrive nearly in order. A sender's entries are kept
// in runs sorted by number, each mostly appended to and expired from its
// front; a number above the highest the sender ever had, every new
// request's, is known to have no entry without a search. A hash map of
// the same entries cost a replica about 0.8 µs a record in cache misses
// (BenchmarkDedupFold).
//
// A DedupTable is not safe for concurrent use; a store guards its own.
type DedupTable struct {
	// clock is the latest KindClock added (wall ns). A store's own table
	// leaves it 0: the store keeps the clock (Store.clock).
	clock   int64
	senders []*senderKeys // a member's requests each (few: a slice beats a map)
	n       int           // the entries held: live, and expired ones not yet dropped
}

// senderKeys are one sender's entries (a key's Incarnation: the member
// that numbered the requests).
type senderKeys struct {
	sender uint64
	// hi is the highest number ever added: a number above it has no entry.
	hi uint64
	// runs hold the entries, each sorted by number. A number that does
	// not fit near the end of the newest run (a restarted member
	// numbering from a new start, a request resent late) starts a run of
	// its own, up to maxRuns.
	runs []*keyRun
}

// keyRun is a run of a sender's entries sorted by number. Entries are
// appended in nearly their times' order, so expiry drops them from the
// front: one made again later (a snapshot's KindReq) may stay past its
// time behind an older one, and is skipped as expired. The entries are
// kept in blocks of runBlock, so that a run growing to a window's
// millions never copies itself (one slice did: its growth was 4 % of a
// cluster's CPU on pipelined puts), and expiry frees whole blocks.
type keyRun struct {
	blocks [][]numbered // each holds runBlock entries, but the last
	head   int          // blocks[0]'s entries before head are dropped
	spare  []numbered   // the block last freed, for the next: a steady run allocates none
}

// runBlock is the entries of a run's block: 20 KiB.
const runBlock = 512

// len counts the run's entries.
func (r *keyRun) len() int {
	if len(r.blocks) == 0 {
		return 0
	}
	return (len(r.blocks)-1)*runBlock + len(r.blocks[len(r.blocks)-1]) - r.head
}

// at is the run's i-th entry.
func (r *keyRun) at(i int) *numbered {
	i += r.head
	return &r.blocks[i/runBlock][i%runBlock]
}

// push appends k. A run's first block grows as a slice does, so that a
// small run holds no more room than it needs.
func (r *keyRun) push(k numbered) {
	if n := len(r.blocks); n == 0 || len(r.blocks[n-1]) == runBlock {
		var b []numbered
		switch {
		case r.spare != nil:
			b, r.spare = r.spare[:0], nil
		case n > 0:
			b = make([]numbered, 0, runBlock)
		}
		r.blocks = append(r.blocks, b)
	}
	last := &r.blocks[len(r.blocks)-1]
	*last = append(*last, k)
}

// search is where number is in the run, or would go, and whether it is
// there.
func (r *keyRun) search(number uint64) (int, bool) {
	n := r.len()
	i, j := 0, n
	for i < j {
		h := int(uint(i+j) >> 1)
		if r.at(h).number < number {
			i = h + 1
		} else {
			j = h
		}
	}
	return i, i < n && r.at(i).number == number
}

// insertAt puts k at i, moving the entries from i on up by one.
func (r *keyRun) insertAt(i int, k numbered) {
	r.push(k)
	for j := r.len() - 1; j > i; j-- {
		*r.at(j) = *r.at(j - 1)
	}
	*r.at(i) = k
}

// dropFirst drops the run's first entry, and its block once that is
// emptied.
func (r *keyRun) dropFirst() {
	if r.head++; r.head == runBlock {
		r.spare = r.blocks[0]
		r.blocks[0] = nil
		r.blocks, r.head = r.blocks[1:], 0
	}
}

// numbered is an entry with its request's number.
type numbered struct {
	number uint64
	dedupEntry
}

// How a sender's runs take a number below the newest run's last: inserted
// in place when within nearEnd of its end (sessions' requests overtaking
// each other), else in a new run while there are fewer than maxRuns.
const (
	nearEnd = 64
	maxRuns = 8
)

// NewDedupTable returns an empty table.
func NewDedupTable() *DedupTable { return &DedupTable{} }

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

// Len counts the entries: each live one, and those expiry has not yet
// dropped.
func (d *DedupTable) Len() int { return d.n }

// Records are the table as records: its clock (KindClock; none while it
// is 0), then each live entry (KindReq), sender by sender, each sender's
// run by run in order of number. A store emptied (Reset) that applies a
// snapshot's jobs and then these has this table: the clock drops the
// entries the jobs' own keyed records made at its zero clock, and the
// entries set the live ones.
func (d *DedupTable) Records() iter.Seq[wal.Record] {
	return func(yield func(wal.Record) bool) {
		if d.clock != 0 && !yield(wal.Record{Kind: wal.KindClock, Time: d.clock}) {
			return
		}
		for _, s := range d.senders {
			for _, r := range s.runs {
				for i := range r.len() {
					k := r.at(i)
					if expired(k.at, d.clock) {
						continue
					}
					key := wal.Req{Incarnation: s.sender, Number: k.number}
					if !yield(wal.Record{Kind: wal.KindReq, ID: k.ID, Req: key, Time: k.at, Count: k.Count}) {
						return
					}
				}
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
	case !r.Req.IsZero() && r.Req != wal.ImportKey:
		s := d.senderOrNew(r.Req.Incarnation)
		if e := s.find(r.Req.Number); e != nil {
			e.Count++
			return
		}
		d.add(s, r.Req.Number, dedupEntry{Outcome: Outcome{ID: r.ID, Count: 1}, at: clock})
	}
}

// get is key's entry, expired or not.
func (d *DedupTable) get(key wal.Req) (dedupEntry, bool) {
	if s := d.sender(key.Incarnation); s != nil {
		if e := s.find(key.Number); e != nil {
			return *e, true
		}
	}
	return dedupEntry{}, false
}

// find is the entry of s's request number, expired or not, or nil; it is
// good until the table next changes.
func (s *senderKeys) find(number uint64) *dedupEntry {
	if number > s.hi {
		return nil
	}
	for _, r := range s.runs {
		n := r.len()
		if n == 0 || number < r.at(0).number || number > r.at(n-1).number {
			continue
		}
		if i, ok := r.search(number); ok {
			return &r.at(i).dedupEntry
		}
	}
	return nil
}

// sender is the entries of requests numbered by sender, or nil.
func (d *DedupTable) sender(sender uint64) *senderKeys {
	for _, s := range d.senders {
		if s.sender == sender {
			return s
		}
	}
	return nil
}

// senderOrNew is sender's entries, made empty if it has none.
func (d *DedupTable) senderOrNew(sender uint64) *senderKeys {
	if s := d.sender(sender); s != nil {
		return s
	}
	s := &senderKeys{sender: sender}
	d.senders = append(d.senders, s)
	return s
}

// set makes key's entry e, in place of any it has.
func (d *DedupTable) set(key wal.Req, e dedupEntry) {
	s := d.senderOrNew(key.Incarnation)
	if old := s.find(key.Number); old != nil {
		*old = e
		return
	}
	d.add(s, key.Number, e)
}

// add makes the entry e of s's request number, which has none.
func (d *DedupTable) add(s *senderKeys, number uint64, e dedupEntry) {
	s.hi = max(s.hi, number)
	s.insert(numbered{number, e})
	d.n++
}

// insert adds k, whose number has no entry, to one of s's runs.
func (s *senderKeys) insert(k numbered) {
	if len(s.runs) > 0 {
		r := s.runs[len(s.runs)-1]
		n := r.len()
		if n == 0 || k.number > r.at(n-1).number {
			r.push(k)
			return
		}
		if i, _ := r.search(k.number); n-i <= nearEnd || len(s.runs) == maxRuns {
			r.insertAt(i, k)
			return
		}
	}
	r := &keyRun{}
	r.push(k)
	s.runs = append(s.runs, r)
}

// expire drops the entries expired at now from the front of each run, and
// the runs and senders left empty.
func (d *DedupTable) expire(now int64) {
	senders := d.senders[:0]
	for _, s := range d.senders {
		runs := s.runs[:0]
		for _, r := range s.runs {
			n := r.len()
			for n > 0 && expired(r.at(0).at, now) {
				r.dropFirst()
				n--
				d.n--
			}
			if n == 0 {
				continue
			}
			runs = append(runs, r)
		}
		clear(s.runs[len(runs):])
		if s.runs = runs; len(runs) > 0 {
			senders = append(senders, s)
		}
	}
	clear(d.senders[len(senders):])
	d.senders = senders
}

// expiring counts the entries expire(now) would drop.
func (d *DedupTable) expiring(now int64) int {
	n := 0
	for _, s := range d.senders {
		for _, r := range s.runs {
			for i := 0; i < r.len() && expired(r.at(i).at, now); i++ {
				n++
			}
		}
	}
	return n
}

// reset empties the table.
func (d *DedupTable) reset() {
	clear(d.senders)
	d.clock, d.senders, d.n = 0, d.senders[:0], 0
}

// copy is the table with its entries' log positions cleared.
func (d *DedupTable) copy() *DedupTable {
	c := &DedupTable{clock: d.clock, n: d.n, senders: make([]*senderKeys, 0, len(d.senders))}
	for _, s := range d.senders {
		cs := &senderKeys{sender: s.sender, hi: s.hi, runs: make([]*keyRun, 0, len(s.runs))}
		for _, r := range s.runs {
			cr := &keyRun{}
			for i := range r.len() {
				k := *r.at(i)
				k.pos = 0
				cr.push(k)
			}
			cs.runs = append(cs.runs, cr)
		}
		c.senders = append(c.senders, cs)
	}
	return c
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
	atomicmax.Int64(&s.clock, s.wall(s.now()))
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
	s.dedupMu.Lock()
	d := s.dedup.copy()
	s.dedupMu.Unlock()
	d.clock = s.clock.Load()
	return d
}

// DedupEntries counts the entries of the store's dedup table that are
// not expired by the later of the replicated clock and the store's wall
// clock (the time Clock would give now, without raising the replicated
// clock to it): those a keyed request could still be answered from. Only
// the batches a leader proposes expire the others, so on an idle cluster
// they stay held until its next write: the count goes down anyway, as
// they can answer nothing. 0 without Options.Dedup.
func (s *Store) DedupEntries() int {
	if s.dedup == nil {
		return 0
	}
	now := max(s.wall(s.now()), s.clock.Load())
	s.dedupMu.Lock()
	defer s.dedupMu.Unlock()
	return s.dedup.n - s.dedup.expiring(now)
}

// applyDedup folds an applied record into the store's table and clock.
func (s *Store) applyDedup(r *wal.Record) {
	if r.Kind == wal.KindClock {
		atomicmax.Int64(&s.clock, r.Time)
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
	e, ok := s.dedup.get(*key)
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
	e, ok := s.dedup.get(key)
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
	s.dedup.set(key, dedupEntry{Outcome: out, at: now, pos: pos}) // answered found none live
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
	return c.PutKeyedAged(key, 0, pri, delay, ttr, body)
}

// PutKeyedAged is PutKeyed for a job made age ago (its put's command line
// came then; see PutAt).
func (c *Client) PutKeyedAged(key wal.Req, age time.Duration, pri, delay, ttr uint32, body []byte) (id uint64, put bool, err error) {
	if out, ok := c.answered(&key); ok {
		return out.ID, false, nil
	}
	id = c.s.NextID()
	now := c.s.now()
	_, err = c.put(key, id, now, now-int64(max(age, 0)), pri, delay, ttr, body)
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

// PauseTubeKeyed is PauseTube for a request with a key: true (PAUSED)
// again while the key is kept, if the first paused the tube, whose pause
// is not begun again (as PutKeyed; logPause keeps the key). Without
// Options.LogPauses the key is not kept.
func (c *Client) PauseTubeKeyed(key wal.Req, name []byte, d time.Duration) bool {
	if _, ok := c.answered(&key); ok {
		return true
	}
	return c.s.pauseTube(name, d, c, key)
}

// KickJobKeyed is KickJob for a request with a key: nil (KICKED) again
// while the key is kept, if the first kicked the job (as PutKeyed).
func (c *Client) KickJobKeyed(key wal.Req, id uint64) error {
	if _, ok := c.answered(&key); ok {
		return nil
	}
	return c.kickJob(key, id)
}
