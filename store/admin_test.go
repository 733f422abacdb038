package store_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// listAll pages through a tube's jobs in state, limit at a time, calling
// between after each page, and returns the ids in the order listed.
func listAll(t *testing.T, c *store.Client, tube string, state store.State, limit int, between func()) []uint64 {
	t.Helper()
	var ids []uint64
	var after *store.ListCursor
	for pages := 0; ; pages++ {
		page, next, ok := c.ListJobs([]byte(tube), state, after, limit)
		if !ok {
			t.Fatalf("ListJobs(%q): no such tube", tube)
		}
		if len(page) > limit {
			t.Fatalf("page of %d jobs, limit %d", len(page), limit)
		}
		for _, v := range page {
			if v.State != state || v.Tube != tube {
				t.Fatalf("job %d listed as %v in %q, want %v in %q", v.ID, v.State, v.Tube, state, tube)
			}
			ids = append(ids, v.ID)
		}
		if next == nil {
			return ids
		}
		if pages > 100000 {
			t.Fatal("paging does not end")
		}
		after = next
		if between != nil {
			between()
		}
	}
}

func ids(jobs []*store.Job) []uint64 {
	out := make([]uint64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID()
	}
	return out
}

// TestListJobsOrder: each state comes in its order, whatever the page size.
func TestListJobsOrder(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		rng := rand.New(rand.NewPCG(1, 2))
		var ready, delayed, buried, reserved []*store.Job
		for range 300 {
			ready = append(ready, putIn(s, p, "t", rng.Uint32N(5), 0, 60))
			delayed = append(delayed, putIn(s, p, "t", 1, 1+rng.Uint32N(100), 60))
		}
		// Bury in an order other than the ids'.
		toBury := make([]*store.Job, 0, 100)
		for range 100 {
			toBury = append(toBury, putIn(s, p, "t", 1, 0, 60))
		}
		rng.Shuffle(len(toBury), func(i, k int) { toBury[i], toBury[k] = toBury[k], toBury[i] })
		for _, j := range toBury {
			hold(p, j)
			if err := p.Bury(j.ID(), 1); err != nil {
				t.Fatal(err)
			}
			buried = append(buried, j)
		}
		// Reserved by several clients with various TTRs.
		for i := range 50 {
			w, _ := newClient(s)
			j := putIn(s, p, "t", 1, 0, uint32(1+rng.IntN(500)))
			hold(w, j)
			reserved = append(reserved, j)
			if i%2 == 0 {
				time.Sleep(time.Millisecond) // some deadlines tie, some do not
			}
		}
		putIn(s, p, "other", 0, 0, 60) // never listed

		slices.SortFunc(ready, func(a, b *store.Job) int {
			return cmpKeys(jobStats(t, s, a.ID()).Pri, a.ID(), jobStats(t, s, b.ID()).Pri, b.ID())
		})
		byTimeLeft := func(a, b *store.Job) int {
			return cmpKeys(jobStats(t, s, a.ID()).TimeLeft, a.ID(), jobStats(t, s, b.ID()).TimeLeft, b.ID())
		}
		slices.SortFunc(delayed, byTimeLeft)
		slices.SortFunc(reserved, byTimeLeft)

		admin, _ := newClient(s)
		for _, limit := range []int{1, 7, 300, store.MaxListPage} {
			for _, tc := range []struct {
				state store.State
				want  []*store.Job
			}{
				{store.StateReady, ready}, {store.StateDelayed, delayed},
				{store.StateBuried, buried}, {store.StateReserved, reserved},
			} {
				got := listAll(t, admin, "t", tc.state, limit, nil)
				if want := ids(tc.want); !slices.Equal(got, want) {
					t.Errorf("%v, %d a page:\n got %v\nwant %v", tc.state, limit, got, want)
				}
			}
		}
		if _, _, ok := admin.ListJobs([]byte("nope"), store.StateReady, nil, 10); ok {
			t.Error("ListJobs of a tube that does not exist: ok")
		}
		if slices.Contains(s.TubeNames(), "nope") {
			t.Error("ListJobs made the tube it looked for")
		}
	})
}

func cmpKeys[K int64 | uint32 | time.Duration](a K, aID uint64, b K, bID uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	case aID < bID:
		return -1
	case aID > bID:
		return 1
	}
	return 0
}

// TestListJobsPagingIsStable: between pages, jobs are deleted, put,
// kicked, buried and released; every job that stays where it was from the
// first page to the last is listed once, in order, and no job twice.
func TestListJobsPagingIsStable(t *testing.T) {
	for _, state := range []store.State{store.StateReady, store.StateBuried, store.StateDelayed} {
		t.Run(state.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T, s *store.Store) {
				p, _ := newClient(s)
				rng := rand.New(rand.NewPCG(3, 4))
				var jobs []*store.Job
				for range 500 {
					var delay uint32
					if state == store.StateDelayed {
						delay = 1000 + rng.Uint32N(1000)
					}
					j := putIn(s, p, "t", rng.Uint32N(3), delay, 60)
					if state == store.StateBuried {
						hold(p, j)
						if err := p.Bury(j.ID(), 1); err != nil {
							t.Fatal(err)
						}
					}
					jobs = append(jobs, j)
				}
				touched := map[uint64]bool{}
				churn := func() {
					for range 5 {
						j := jobs[rng.IntN(len(jobs))]
						touched[j.ID()] = true
						switch rng.IntN(3) {
						case 0:
							p.Delete(j.ID())
						case 1:
							_ = p.KickJob(j.ID())
						default:
							if _, ok := p.ReserveJob(j.ID()); ok {
								_ = p.Release(j.ID(), 0, 0)
							}
						}
						n := putIn(s, p, "t", 0, 0, 60)
						touched[n.ID()] = true
						if state == store.StateBuried {
							hold(p, n)
							_ = p.Bury(n.ID(), 0)
						}
					}
				}
				admin, _ := newClient(s)
				var wantOrder []uint64
				for _, v := range allViews(t, admin, state) {
					wantOrder = append(wantOrder, v.ID)
				}
				got := listAll(t, admin, "t", state, 13, churn)
				seen := map[uint64]bool{}
				for _, id := range got {
					if seen[id] {
						t.Fatalf("job %d listed twice", id)
					}
					seen[id] = true
				}
				var gotSteady, wantSteady []uint64
				for _, id := range got {
					if !touched[id] {
						gotSteady = append(gotSteady, id)
					}
				}
				for _, id := range wantOrder {
					if !touched[id] {
						wantSteady = append(wantSteady, id)
					}
				}
				if !slices.Equal(gotSteady, wantSteady) {
					t.Errorf("jobs left alone, as listed:\n got %v\nwant %v", gotSteady, wantSteady)
				}
			})
		})
	}
}

// allViews lists every job of tube "t" in state in one page.
func allViews(t *testing.T, c *store.Client, state store.State) []store.JobView {
	t.Helper()
	page, next, ok := c.ListJobs([]byte("t"), state, nil, store.MaxListPage)
	if !ok || next != nil {
		t.Fatalf("ListJobs: ok %v, next %v", ok, next)
	}
	return page
}

// TestListJobsViews: a view carries the job's stats-job figures and its
// body without the trailing CRLF.
func TestListJobsViews(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		j := putIn(s, p, "t", 7, 0, 30)
		v := allViews(t, p, store.StateReady)
		if len(v) != 1 {
			t.Fatalf("%d views", len(v))
		}
		if want := jobStats(t, s, j.ID()); v[0].JobStats != want {
			t.Errorf("figures %+v, want %+v", v[0].JobStats, want)
		}
		if want := string(body(j.ID())); string(v[0].Body)+"\r\n" != want {
			t.Errorf("body %q, want %q without CRLF", v[0].Body, want)
		}
	})
}

// TestClearTube: each state is cleared alone or all together, reserved jobs
// never, and the counts follow as for protocol deletes.
func TestClearTube(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		w, _ := newClient(s)
		for range 600 {
			putIn(s, p, "t", 1, 0, 60)
			putIn(s, p, "t", 1, 100, 60)
		}
		for range 300 {
			j := putIn(s, p, "t", 1, 0, 60)
			hold(p, j)
			if err := p.Bury(j.ID(), 1); err != nil {
				t.Fatal(err)
			}
		}
		reserved := putIn(s, p, "t", 0, 0, 60)
		hold(w, reserved)
		kept := putIn(s, p, "other", 1, 0, 60)

		admin, _ := newClient(s)
		var progress []int
		n, ok := admin.ClearTube([]byte("t"), []store.State{store.StateDelayed}, func(d int) { progress = append(progress, d) })
		if !ok || n != 600 {
			t.Fatalf("clear delayed: %d %v", n, ok)
		}
		if !slices.IsSorted(progress) || progress[len(progress)-1] != 600 || len(progress) < 2 {
			t.Errorf("progress %v: want rising batches ending at 600", progress)
		}
		if got := tubeCounts(t, s, "t"); got != (counts{urgent: 600, ready: 600, reserved: 1, buried: 300}) {
			t.Errorf("after clearing delayed: %+v", got)
		}
		n, _ = admin.ClearTube([]byte("t"), []store.State{store.StateReady, store.StateDelayed, store.StateBuried}, nil)
		if n != 900 {
			t.Errorf("clear all: %d, want 900", n)
		}
		if got := tubeCounts(t, s, "t"); got != (counts{reserved: 1}) {
			t.Errorf("after clearing all: %+v", got)
		}
		if st := tubeStats(t, s, "t"); st.CmdDelete != 1500 {
			t.Errorf("cmd-delete %d, want 1500", st.CmdDelete)
		}
		wantState(t, s, reserved, store.StateReserved, w)
		wantState(t, s, kept, store.StateReady, nil)
		if _, ok := admin.ClearTube([]byte("nope"), []store.State{store.StateReady}, nil); ok {
			t.Error("clear of a tube that does not exist: ok")
		}
		checkNow(t, s, p, w, admin)
	})
}

// TestKickTube: kick on a named tube, in batches, buried first as kick
// does, up to the bound; a waiter gets the first job kicked.
func TestKickTube(t *testing.T) {
	bubble(t, func(t *testing.T, s *store.Store) {
		p, _ := newClient(s)
		var buried []*store.Job
		for range 700 {
			j := putIn(s, p, "t", 1, 0, 60)
			hold(p, j)
			if err := p.Bury(j.ID(), 1); err != nil {
				t.Fatal(err)
			}
			buried = append(buried, j)
			putIn(s, p, "t", 1, 100, 60)
		}
		w, wr := newClient(s)
		w.Watch([]byte("t"))
		block(t, w, -1)

		admin, _ := newClient(s)
		n, ok, _ := admin.KickTube([]byte("t"), 650)
		if !ok || n != 650 {
			t.Fatalf("kick 650: %d %v", n, ok)
		}
		if e := wr.next(t); e.job != buried[0] {
			t.Errorf("waiter got %s, want the first job kicked (%d)", e, buried[0].ID())
		}
		n, _, _ = admin.KickTube([]byte("t"), 1000)
		if n != 50 {
			t.Errorf("second kick: %d, want the 50 buried left, not the delayed", n)
		}
		n, _, _ = admin.KickTube([]byte("t"), 1000)
		if n != 700 {
			t.Errorf("third kick: %d, want the 700 delayed", n)
		}
		if got := tubeCounts(t, s, "t"); got != (counts{urgent: 1399, ready: 1399, reserved: 1}) {
			t.Errorf("after kicking: %+v", got)
		}
		if _, ok, _ := admin.KickTube([]byte("nope"), 1); ok {
			t.Error("kick of a tube that does not exist: ok")
		}
		checkNow(t, s, p, w, admin)
	})
}

// TestBulkChangesAreLogged: a clear and a kick on a tube survive a restart,
// and the admin client's replies wait for them like the protocol's.
func TestBulkChangesAreLogged(t *testing.T) {
	dir := t.TempDir()
	d := openDurable(t, dir, wal.Options{})
	c, _ := newClient(d.Store)
	c.Use([]byte("t"))
	var buried []uint64
	for i := range 600 {
		id := mustPut(t, d.Store, c, 1, 0, 60, "job")
		if i%2 == 0 {
			mustReserve(t, c, id)
			if err := c.Bury(id, 1); err != nil {
				t.Fatal(err)
			}
			buried = append(buried, id)
		}
	}
	d.settle(t, c)
	admin, _ := newClient(d.Store)
	before := admin.PendingAck()
	if n, _ := admin.ClearTube([]byte("t"), []store.State{store.StateReady}, nil); n != 300 {
		t.Fatalf("cleared %d, want 300", n)
	}
	if n, _, _ := admin.KickTube([]byte("t"), 100); n != 100 {
		t.Fatalf("kicked %d, want 100", n)
	}
	if admin.PendingAck() <= before {
		t.Fatal("the bulk changes left the admin client's PendingAck where it was")
	}
	d.settle(t, admin)
	c.Close()
	admin.Close()
	d.close(t)

	d = openDurable(t, dir, wal.Options{})
	if got := tubeCounts(t, d.Store, "t"); got != (counts{urgent: 100, ready: 100, buried: 200}) {
		t.Errorf("after a restart: %+v, want the 100 kicked ready and 200 buried", got)
	}
	for i, id := range buried {
		st := jobStats(t, d.Store, id)
		if want := map[bool]store.State{true: store.StateReady, false: store.StateBuried}[i < 100]; st.State != want {
			t.Errorf("job %d (buried %d of %d): %v after a restart, want %v", id, i+1, len(buried), st.State, want)
		}
	}
}
