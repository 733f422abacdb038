package replication

import (
	"iter"
	"math/bits"
)

// jobIndex is where a group's live jobs' latest full records are (a
// GroupLog's compaction accounting), by job id.
//
// Every replica folds every full record and delete of its groups into it,
// and a busy group holds millions of jobs. A group's leader hands ids out
// in increasing order, so most records name an id near the newest: the
// index keeps consecutive ids in pages of pageSlots, found by id through a
// small map of pages (and the page last used), where a hash map of the
// jobs cost a cache miss or two for every record (about 8 % of each
// member's CPU on pipelined puts). Jobs that outlive their neighbours (a
// long delay, a buried job) would keep a whole page each: when the pages
// hold fewer jobs than one slot in 2·sparseShare, the jobs of the pages
// with fewer than one in sparseShare move to a plain map (spare) and
// those pages are dropped. Ids that
// come from elsewhere (a moved tube's jobs keep their ids) take pages
// like any other and move to spare the same way when sparse.
//
// Each id is in at most one place: its page when it has one, else spare.
// A page made for a range with jobs in spare takes them back.
//
// A jobIndex is not safe for concurrent use (the GroupLog's mu guards it).
type jobIndex struct {
	pages map[uint64]*jobPage // by id / pageSlots
	// last is the page last used and its number, nil when none: most
	// records land in the page of the record before.
	last    *jobPage
	lastNum uint64
	// spare holds the jobs of ranges without a page, and spareIn counts
	// them by page number.
	spare   map[uint64]placed
	spareIn map[uint64]int
	n       int // jobs held
}

// jobPage holds the jobs of pageSlots consecutive ids.
type jobPage struct {
	used  [pageSlots / 64]uint64 // which slots hold a job
	n     int                    // how many
	slots [pageSlots]placed
}

// has reports whether slot s holds a job.
func (pg *jobPage) has(s uint64) bool { return pg.used[s/64]&(1<<(s%64)) != 0 }

// put makes p slot s's job, and reports whether the slot held none.
func (pg *jobPage) put(s uint64, p placed) bool {
	pg.slots[s] = p
	if pg.has(s) {
		return false
	}
	pg.used[s/64] |= 1 << (s % 64)
	pg.n++
	return true
}

// drop empties slot s, which holds a job.
func (pg *jobPage) drop(s uint64) {
	pg.used[s/64] &^= 1 << (s % 64)
	pg.n--
}

// held yields the slots holding a job, in order.
func (pg *jobPage) held() iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		for w, used := range pg.used {
			for ; used != 0; used &= used - 1 {
				if !yield(uint64(w*64 + bits.TrailingZeros64(used))) {
					return
				}
			}
		}
	}
}

const (
	pageSlots   = 256
	sparseShare = 8
)

// get is id's entry.
func (x *jobIndex) get(id uint64) (placed, bool) {
	if pg := x.page(id / pageSlots); pg != nil {
		if s := id % pageSlots; pg.has(s) {
			return pg.slots[s], true
		}
		return placed{}, false
	}
	p, ok := x.spare[id]
	return p, ok
}

// set makes p id's entry, in place of any it had.
func (x *jobIndex) set(id uint64, p placed) {
	num := id / pageSlots
	pg := x.page(num)
	if pg == nil {
		if _, ok := x.spare[id]; ok {
			x.spare[id] = p
			return
		}
		pg = x.newPage(num)
	}
	if pg.put(id%pageSlots, p) {
		x.n++
	}
}

// remove drops id's entry and returns it, if it had one.
func (x *jobIndex) remove(id uint64) (placed, bool) {
	num := id / pageSlots
	pg := x.page(num)
	if pg == nil {
		p, ok := x.spare[id]
		if ok {
			delete(x.spare, id)
			if x.spareIn[num]--; x.spareIn[num] == 0 {
				delete(x.spareIn, num)
			}
			x.n--
		}
		return p, ok
	}
	s := id % pageSlots
	if !pg.has(s) {
		return placed{}, false
	}
	pg.drop(s)
	x.n--
	p := pg.slots[s]
	if x.thin() {
		x.sweep()
	}
	return p, true
}

// len counts the jobs held.
func (x *jobIndex) len() int { return x.n }

// all yields every job held, in no particular order. The index must not
// change meanwhile.
func (x *jobIndex) all() iter.Seq2[uint64, placed] {
	return func(yield func(uint64, placed) bool) {
		for num, pg := range x.pages {
			for s := range pg.held() {
				if !yield(num*pageSlots+s, pg.slots[s]) {
					return
				}
			}
		}
		for id, p := range x.spare {
			if !yield(id, p) {
				return
			}
		}
	}
}

// clear empties the index.
func (x *jobIndex) clear() { *x = jobIndex{} }

// page is page num, or nil.
func (x *jobIndex) page(num uint64) *jobPage {
	if x.last != nil && num == x.lastNum {
		return x.last
	}
	pg := x.pages[num]
	if pg != nil {
		x.last, x.lastNum = pg, num
	}
	return pg
}

// newPage makes page num, taking back the jobs spare holds in its range.
func (x *jobIndex) newPage(num uint64) *jobPage {
	if x.pages == nil {
		x.pages = make(map[uint64]*jobPage)
	}
	if x.thin() {
		x.sweep()
	}
	pg := &jobPage{}
	x.pages[num] = pg
	x.last, x.lastNum = pg, num
	if x.spareIn[num] > 0 {
		delete(x.spareIn, num)
		for s := range uint64(pageSlots) {
			id := num*pageSlots + s
			if p, ok := x.spare[id]; ok {
				delete(x.spare, id)
				pg.put(s, p)
			}
		}
	}
	return pg
}

// thin reports whether the pages hold fewer jobs than one slot in
// 2·sparseShare, with a few pages' slack. A page emptied stays until then:
// the page of the newest ids empties and fills again all the time.
func (x *jobIndex) thin() bool {
	return len(x.pages)*pageSlots > 2*sparseShare*(x.n-len(x.spare))+sparseShare*pageSlots
}

// sweep moves the jobs of the sparse pages, all but the page last used,
// to spare, and drops those pages. The pages left hold at least
// pageSlots/sparseShare jobs each, at least twice thin's share: the next
// sweep comes only after half the jobs in pages are gone, or as many
// sparse pages were made as dense ones are left, so a sweep's cost, one
// step a page, is paid for by the changes that made it due.
func (x *jobIndex) sweep() {
	if x.spare == nil {
		x.spare = make(map[uint64]placed)
		x.spareIn = make(map[uint64]int)
	}
	for num, pg := range x.pages {
		if pg == x.last || pg.n >= pageSlots/sparseShare {
			continue
		}
		for s := range pg.held() {
			x.spare[num*pageSlots+s] = pg.slots[s]
		}
		if pg.n > 0 {
			x.spareIn[num] += pg.n
		}
		delete(x.pages, num)
	}
}
