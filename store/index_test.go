package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// indexOf is a lone id index: shards without a store, holding bare jobs.
type indexOf struct {
	shards [jobShards]jobShard
}

func (x *indexOf) insert(id uint64) *Job {
	j := &Job{id: id}
	x.shards[id%jobShards].insertLocked(j)
	return j
}

func (x *indexOf) remove(j *Job) { x.shards[j.id%jobShards].removeLocked(j) }

func (x *indexOf) find(id uint64) *Job { return x.shards[id%jobShards].findLocked(id) }

// check fails t on any broken invariant and returns the pages allocated
// and the jobs spilled over all shards.
func (x *indexOf) check(t *testing.T) (pages, spilled int) {
	t.Helper()
	for i := range x.shards {
		sh := &x.shards[i]
		sh.checkLocked(i, func(format string, args ...any) { t.Errorf(format, args...) })
		pages += len(sh.pages)
		spilled += len(sh.spill)
	}
	return pages, spilled
}

// rowIDs is how many consecutive ids fill one page in every shard.
const rowIDs = jobShards * pageSlots

func TestIndexDenseAcrossPages(t *testing.T) {
	var x indexOf
	const n = 5*rowIDs + 17 // pages end mid-way in some shards
	jobs := make([]*Job, n)
	for id := range uint64(n) {
		jobs[id] = x.insert(id)
	}
	pages, spilled := x.check(t)
	if want := 5*jobShards + 17; pages != want || spilled != 0 {
		t.Errorf("%d pages, %d spilled; want %d, 0", pages, spilled, want)
	}
	for id, j := range jobs {
		if got := x.find(uint64(id)); got != j {
			t.Fatalf("find(%d) = %v", id, got)
		}
	}
	for _, id := range []uint64{n, n + 1, rowIDs * 6, 1 << 40, math.MaxUint64} {
		if got := x.find(id); got != nil {
			t.Errorf("find(%d) = job %d, want none", id, got.id)
		}
	}
	// Deleting in id order, as a queue drains, frees pages behind and
	// never spills.
	for id, j := range jobs {
		x.remove(j)
		if id%1000 == 0 {
			if _, spilled := x.check(t); spilled != 0 {
				t.Fatalf("after deleting %d jobs: %d spilled", id+1, spilled)
			}
		}
	}
	if pages, spilled := x.check(t); pages != jobShards || spilled != 0 {
		t.Errorf("all deleted: %d pages, %d spilled; want only each shard's newest", pages, spilled)
	}
	for i := range x.shards {
		if sh := &x.shards[i]; sh.spare == nil {
			t.Errorf("shard %d kept no spare page", i)
		}
	}
}

func TestIndexSparseIDs(t *testing.T) {
	var x indexOf
	ids := []uint64{0, 1, 63, 64, rowIDs - 1, rowIDs, 1 << 32, 1<<32 + 4096, 1 << 63,
		math.MaxUint64 - jobShards*pageSlots, math.MaxUint64 - 64, math.MaxUint64 - 1, math.MaxUint64}
	jobs := map[uint64]*Job{}
	for _, id := range ids {
		jobs[id] = x.insert(id)
	}
	pages, _ := x.check(t)
	if pages > len(ids) {
		t.Errorf("%d ids took %d pages", len(ids), pages)
	}
	for id, j := range jobs {
		if x.find(id) != j {
			t.Errorf("find(%d) lost the job", id)
		}
		if x.find(id^2) != nil && jobs[id^2] == nil {
			t.Errorf("find(%d) found a job never inserted", id^2)
		}
	}
	for _, id := range ids {
		x.remove(jobs[id])
		if x.find(id) != nil {
			t.Errorf("find(%d) after remove found a job", id)
		}
		x.check(t)
	}
}

// TestIndexSpill keeps a few jobs in each old page, as long-buried jobs
// among deleted ones: the pages must go, their jobs stay findable.
func TestIndexSpill(t *testing.T) {
	var x indexOf
	const rows = 10
	var kept []*Job
	for id := range uint64(rows * rowIDs) {
		j := x.insert(id)
		if id%1000 == 0 {
			kept = append(kept, j)
		} else {
			x.remove(j)
		}
		if id%997 == 0 {
			x.check(t)
		}
	}
	pages, spilled := x.check(t)
	// Only the newest pageAge+1 rows may keep pages.
	if pages > (pageAge+1)*jobShards || spilled < len(kept)-(pageAge+1)*rowIDs/1000-jobShards {
		t.Errorf("%d kept jobs: %d pages, %d spilled", len(kept), pages, spilled)
	}
	for _, j := range kept {
		if x.find(j.id) != j {
			t.Fatalf("kept job %d lost", j.id)
		}
	}
	for _, j := range kept {
		x.remove(j)
	}
	if _, spilled := x.check(t); spilled != 0 {
		t.Errorf("%d left in spill", spilled)
	}
}

// TestIndexThinOut deletes most of an old page's jobs later: the page is
// given up at the shard's next page allocation, not at once.
func TestIndexThinOut(t *testing.T) {
	var x indexOf
	const rows = pageAge + 2
	jobs := make([]*Job, rows*rowIDs)
	for id := range jobs {
		jobs[id] = x.insert(uint64(id))
	}
	// Shard 0's page 0 is old; leave it 3 jobs.
	for k := range pageSlots - 3 {
		x.remove(jobs[k*jobShards])
	}
	sh := &x.shards[0]
	if sh.pages[0] == nil || len(sh.sparse) != 1 {
		t.Fatalf("page 0: %v, sparse %v; want the page kept and listed", sh.pages[0] != nil, sh.sparse)
	}
	x.check(t)
	x.insert(uint64(len(jobs))) // shard 0 allocates page rows
	if sh.pages[0] != nil || len(sh.spill) != 3 || len(sh.sparse) != 0 {
		t.Errorf("page 0: %v, %d spilled, sparse %v; want it given up", sh.pages[0] != nil, len(sh.spill), sh.sparse)
	}
	x.check(t)
	for k := pageSlots - 3; k < pageSlots; k++ {
		if j := jobs[k*jobShards]; x.find(j.id) != j {
			t.Errorf("job %d lost", j.id)
		}
	}
}

// TestIndexLateInsert is a put whose body came long after its id was
// taken: its page is gone, so the job goes to the spill map.
func TestIndexLateInsert(t *testing.T) {
	var x indexOf
	for id := range uint64(3 * rowIDs) {
		x.remove(x.insert(id))
	}
	late := x.insert(5)
	if _, spilled := x.check(t); spilled != 1 {
		t.Errorf("%d spilled, want the late job", spilled)
	}
	if x.find(5) != late {
		t.Fatal("late job not found")
	}
	x.remove(late)
	if _, spilled := x.check(t); spilled != 0 || x.find(5) != nil {
		t.Errorf("late job still indexed")
	}
}

// TestIndexRandom checks the index against a map under random inserts (in
// mostly increasing order, sometimes late or far away) and deletes.
func TestIndexRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x indexOf
	want := map[uint64]*Job{}
	next := uint64(1)
	for i := range 200_000 {
		switch r := rng.IntN(100); {
		case r < 50:
			id := next
			switch {
			case r < 2 && next > 100:
				id = next - 1 - rng.Uint64N(min(next-1, 20000)) // late
			case r < 3:
				next += rng.Uint64N(1 << 20) // a watermark jump, or recovered ids
				id = next
			default:
				next++
			}
			if want[id] == nil {
				want[id] = x.insert(id)
			}
		default:
			for id, j := range want { // random enough for this
				x.remove(j)
				delete(want, id)
				break
			}
		}
		if i%5000 == 0 {
			x.check(t)
		}
	}
	x.check(t)
	n := 0
	for i := range x.shards {
		x.shards[i].eachLocked(func(j *Job) {
			n++
			if want[j.id] != j {
				t.Errorf("job %d in the index, not wanted", j.id)
			}
		})
	}
	if n != len(want) {
		t.Errorf("index holds %d jobs, want %d", n, len(want))
	}
	for id, j := range want {
		if x.find(id) != j {
			t.Fatalf("find(%d) lost the job", id)
		}
	}
}

// TestIndexConcurrentLookups runs lookups of live jobs while other ids are
// inserted and deleted around them, page allocation, freeing and spilling
// included; run with -race.
func TestIndexConcurrentLookups(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	c := s.NewClient(nopNotify{})
	defer c.Close()
	// Long-lived jobs, one every 500 ids, which the churn below leaves
	// in pages that empty and spill.
	var pinned []uint64
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				ids := pinned
				mu.Unlock()
				for _, id := range ids {
					if j, ok := s.peek(id, nil); !ok || j.ID() != id {
						t.Errorf("reader %d: pinned job %d not found", w, id)
						return
					}
				}
			}
		}()
	}
	for range 4 * rowIDs {
		id := s.NextID()
		if _, err := c.Put(id, 0, 0, 60, []byte("x\r\n")); err != nil {
			t.Fatal(err)
		}
		if id%500 == 0 {
			mu.Lock()
			pinned = append(pinned, id)
			mu.Unlock()
			continue
		}
		if !c.Delete(id) {
			t.Fatalf("delete %d failed", id)
		}
	}
	close(stop)
	wg.Wait()
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if got := s.LiveJobIDs(); fmt.Sprint(got) != fmt.Sprint(pinned) {
		t.Errorf("live %v, want %v", got, pinned)
	}
}

type nopNotify struct{}

func (nopNotify) JobReserved(*Job)          {}
func (nopNotify) WaitEnded(r ReserveResult) {}
