package store

import "sync"

// The id index finds a live job by id. Ids are issued densely and in
// increasing order, so most of the index is arrays of job pointers indexed
// by id: 8 bytes a job, against some 30 for a Go map, whose slots hold the
// key beside the pointer and run a quarter empty on average.
//
// Ids are spread over jobShards shards by id%jobShards, so that
// neighbouring ids (put at the same moment by different connections) take
// different locks. Within a shard, a job's place is its id/jobShards, cut
// into pages of pageSlots slots. A page is allocated when the first of its
// ids arrives and freed when its last job goes (a shard keeps one freed
// page to reuse). Pages are found through a map by page number, so ids far
// apart (recovered from the log, or after the id watermark's jump on
// restart) cost one page each, never the span between them.
//
// A page that keeps a few long-lived jobs (buried, or delayed for days)
// while the ids around them are deleted would cost its whole 1 KiB for
// them. So a page that has fallen more than pageAge pages behind the
// shard's newest and holds at most spillAt jobs gives them up to the
// shard's spill map and is freed, bounding the index at 64 bytes a job
// (once a page is allocated after the thinning).
// That is checked when a page becomes old and, for an old page that thins
// out later, at the next allocation of a page in the shard: a queue
// drained in id order empties its pages soon after they thin out, so they
// rarely go through the spill map on the way. Pages younger than pageAge
// are left alone: a short queue's pages drain soon after they fill.
//
// Invariants, per shard, with newest the highest page number ever
// allocated: page newest exists; a job is in its page if that page exists,
// and otherwise in spill, which happens only for pages below newest (a
// page below newest is never allocated again, so the two never hold ids of
// the same page); every page below newest-pageAge holds more than spillAt
// jobs, or is listed in sparse.
const (
	jobShards = 64
	// pageSlots makes a page (its count and slots) 1 KiB, a size class of
	// its own.
	pageSlots = 127
	spillAt   = pageSlots / 8
	pageAge   = 2
)

type idPage struct {
	live  int // non-nil slots
	slots [pageSlots]*Job
}

type jobShard struct {
	mu sync.RWMutex
	// All guarded by mu.
	pages  map[uint64]*idPage // by page number
	spill  map[uint64]*Job    // by id: the jobs of pages given up; nil when empty
	newest *idPage            // pages[newestN], the page most lookups want
	spare  *idPage            // an empty page kept for the next advance
	// newestN1 is the highest page number allocated plus one; 0 before
	// the first.
	newestN1 uint64
	// sparse lists old pages that have thinned out to spillAt jobs since
	// the last allocation of a page.
	sparse []uint64
	// Neighbouring shards take neighbouring ids, put at the same moment on
	// different cores: with 64 bytes after its fields, a shard's fields
	// never share a cache line with the next shard's lock, however the
	// array is aligned.
	_ [64]byte
}

func (s *Store) shard(id uint64) *jobShard { return &s.shards[id%jobShards] }

// place is where id goes within its shard: page number and slot.
func place(id uint64) (page uint64, slot int) {
	x := id / jobShards
	return x / pageSlots, int(x % pageSlots)
}

// lookup finds a live job by id without taking any tube lock. The caller
// must lock j.tube.mu and check j.state before trusting mutable fields.
func (s *Store) lookup(id uint64) *Job {
	sh := s.shard(id)
	sh.mu.RLock()
	j := sh.findLocked(id)
	sh.mu.RUnlock()
	return j
}

// findLocked looks id up; sh.mu must be held.
func (sh *jobShard) findLocked(id uint64) *Job {
	n, k := place(id)
	p := sh.pageLocked(n)
	if p != nil {
		return p.slots[k]
	}
	return sh.spill[id] // nil map: nil
}

// insertJobLocked makes j findable by id, a change of its tube
// (noteChangeLocked). j.tube.mu must be held. A
// job of another prefix's id (moved in from another group: move.go)
// goes to the spill map: its pages would move the shard's newest page
// past every id this store issues.
func (s *Store) insertJobLocked(j *Job) {
	j.tube.noteChangeLocked(j)
	sh := s.shard(j.id)
	sh.mu.Lock()
	if s.ownID(j.id) {
		sh.insertLocked(j)
	} else {
		if sh.spill == nil {
			sh.spill = make(map[uint64]*Job)
		}
		sh.spill[j.id] = j
	}
	sh.mu.Unlock()
}

// forgetJobLocked removes j from the id index. j.tube.mu must be held.
func (s *Store) forgetJobLocked(j *Job) {
	sh := s.shard(j.id)
	sh.mu.Lock()
	sh.removeLocked(j)
	sh.mu.Unlock()
	if s.recycle != nil && j.bodyLen > MaxCopiedBody {
		s.recycle(j.Body())
	}
}

// pageLocked is page n, nil if it is not there; the newest is found
// without the map.
func (sh *jobShard) pageLocked(n uint64) *idPage {
	if n+1 == sh.newestN1 {
		return sh.newest
	}
	return sh.pages[n]
}

func (sh *jobShard) insertLocked(j *Job) {
	n, k := place(j.id)
	p := sh.pageLocked(n)
	if p == nil {
		if n+1 < sh.newestN1 {
			// A page behind the newest that has been freed or given up:
			// a put whose body arrived long after its id was taken.
			if sh.spill == nil {
				sh.spill = make(map[uint64]*Job)
			}
			sh.spill[j.id] = j
			return
		}
		p = sh.advanceLocked(n)
	}
	p.slots[k] = j
	p.live++
}

// advanceLocked allocates page n, beyond the newest, as the new newest,
// and deals with the pages that this makes old.
func (sh *jobShard) advanceLocked(n uint64) *idPage {
	if sh.pages == nil {
		sh.pages = make(map[uint64]*idPage)
	}
	old := sh.newestN1
	if old > 0 && sh.newest.live == 0 {
		// The previous newest emptied while it was kept.
		sh.freeLocked(old-1, sh.newest)
	}
	p := sh.spare
	if p == nil {
		p = new(idPage)
	}
	sh.spare = nil
	sh.pages[n] = p
	sh.newest, sh.newestN1 = p, n+1
	if old == 0 {
		return p
	}
	// Pages that were young and are now old: those from old-1-pageAge up
	// to below n-pageAge; at most pageAge+1 of them exist.
	from := uint64(0)
	if old > pageAge+1 {
		from = old - 1 - pageAge
	}
	for m := from; m < old && m+pageAge < n; m++ {
		sh.spillIfSparseLocked(m)
	}
	for _, m := range sh.sparse {
		sh.spillIfSparseLocked(m)
	}
	sh.sparse = sh.sparse[:0]
	return p
}

func (sh *jobShard) removeLocked(j *Job) {
	n, k := place(j.id)
	p := sh.pageLocked(n)
	if p == nil {
		delete(sh.spill, j.id)
		if len(sh.spill) == 0 {
			sh.spill = nil // a map keeps its largest size; drop it
		}
		return
	}
	p.slots[k] = nil
	p.live--
	switch {
	case n+1 == sh.newestN1:
		// Kept even when empty: the next puts are likely to land in it.
	case p.live == 0:
		sh.freeLocked(n, p)
	case p.live == spillAt && n+1+pageAge < sh.newestN1:
		sh.sparse = append(sh.sparse, n)
	}
}

// freeLocked drops empty page n, keeping it as the spare if there is none:
// in a queue that drains in id order, pages empty behind as fast as they
// are needed ahead.
func (sh *jobShard) freeLocked(n uint64, p *idPage) {
	delete(sh.pages, n)
	if sh.spare == nil {
		sh.spare = p
	}
}

// spillIfSparseLocked moves page n's jobs, if it exists and holds at most
// spillAt, to the spill map and frees the page.
func (sh *jobShard) spillIfSparseLocked(n uint64) {
	p := sh.pages[n]
	if p == nil || p.live > spillAt {
		return
	}
	if sh.spill == nil {
		sh.spill = make(map[uint64]*Job, p.live)
	}
	for _, j := range p.slots {
		if j != nil {
			sh.spill[j.id] = j
		}
	}
	delete(sh.pages, n)
}

// eachLocked calls f for every job in the shard; sh.mu must be held.
func (sh *jobShard) eachLocked(f func(j *Job)) {
	for _, p := range sh.pages {
		for _, j := range p.slots {
			if j != nil {
				f(j)
			}
		}
	}
	for _, j := range sh.spill {
		f(j)
	}
}
