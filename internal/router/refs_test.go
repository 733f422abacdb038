package router

import (
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/store"
)

// TestRefsSyncKeepsTubes: a member's full sync of its references
// (Refs.Sync: sent at every placement change, Router.Replaced, and when
// a stream to the leader opens again) naming the same counts as before
// must leave the group's tubes as they were. A tube that only that
// member's sessions keep alive (watched by a worker, no job) is the same
// tube to one server: its pause, its total-jobs and cmd-delete, and its
// place in list-tubes stay.
func TestRefsSyncKeepsTubes(t *testing.T) {
	st := store.New(store.Options{})
	r := newServerRig(t, map[uint16]*store.Store{0: st})
	refs := func(seq uint32, sync bool, counts ...RefCount) {
		t.Helper()
		r.send(Item{Kind: KindRefs, Group: 0, Seq: seq, Refs: Refs{Sync: sync, Counts: counts}})
		if it := r.next(); it.Kind != KindReply || it.Reply.Status != StatusOK {
			t.Fatalf("refs %d: %+v", seq, it)
		}
	}
	refs(1, false, RefCount{Tube: []byte("a"), Watching: 1}, RefCount{Tube: []byte("b"), Watching: 1})
	// A job put into a and deleted; a paused.
	r.send(req(0, 1, 1, Request{Op: OpPut, Tube: []byte("a"), TTR: 60, Body: []byte("j\r\n")}))
	id := r.next().Reply.ID
	r.send(req(0, 1, 2, Request{Op: OpDelete, ID: id}), req(0, 1, 3, Request{Op: OpPauseTube, Tube: []byte("a"), Delay: 100}))
	r.next()
	r.next()
	before, _ := st.TubeStats([]byte("a"))
	names := func() []string {
		var out []string
		for _, t := range st.StampedTubes() {
			out = append(out, t.Name)
		}
		return out
	}
	order := names()
	stamps := st.StampedTubes()

	// The same counts again, as a sync (b listed first: a map's order).
	refs(2, true, RefCount{Tube: []byte("b"), Watching: 1}, RefCount{Tube: []byte("a"), Watching: 1})
	after, ok := st.TubeStats([]byte("a"))
	if !ok || after.Pause == 0 || after.TotalJobs != before.TotalJobs || after.CmdDelete != before.CmdDelete || after.CmdPause != before.CmdPause {
		t.Fatalf("stats-tube a after a sync of the same references: %+v, before %+v", after, before)
	}
	if got := names(); !slices.Equal(got, order) || !slices.Equal(st.StampedTubes(), stamps) {
		t.Fatalf("list-tubes after a sync of the same references: %v %v, before %v %v", got, st.StampedTubes(), order, stamps)
	}
}

// TestRefsChangedAsTheTubeMoves: a session's watch whose tube's placement
// changes between the router reading the tube's owner (changeRefs) and
// sending its total, while the member syncs every group for the change
// (Router.Replaced). The groups must end with the member's references as
// they are: the tube watched once, in its new group, and not in its old.
// The total went to the old group after its sync, which made the tube
// there (no leader checks that it owns a tube it is told of), and the
// new group's sync had not counted the watch: the tube had no watcher
// where it lives, and a phantom in the group it left, until the next
// sync of each.
func TestRefsChangedAsTheTubeMoves(t *testing.T) {
	before, err := meta.Formation([]meta.Member{{Name: "m1", ID: 1}, {Name: "m2", ID: 2}}, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	const tube = "racing"
	from := before.Owner(tube)
	to := (from + 1) % 3
	after := *before
	after.Exact = map[string]uint16{tube: to}
	var state atomic.Pointer[meta.State]
	state.Store(before)
	var armed atomic.Bool
	replaced := make(chan struct{})
	var r *Router
	sent := &sentItems{t: t}
	r = NewRouter(RouterConfig{
		Self: 1,
		Placement: func() *meta.State {
			st := state.Load()
			if armed.Load() && calledFrom("changeRefs") && armed.CompareAndSwap(true, false) {
				// The member applies the move now: its routing changes,
				// then it syncs every group (tubesChanged, Replaced).
				// Its syncs run on a goroutine of their own
				// (tubesChanged); given time to finish first if they can.
				state.Store(&after)
				go func() { r.Replaced(); close(replaced) }()
				select {
				case <-replaced:
				case <-time.After(200 * time.Millisecond):
				}
			}
			return st
		},
		Serving: func(uint16) *store.Store { return nil },
		Leader:  func(uint16) (uint64, bool) { return 2, true },
		Send:    sent.send,
	})
	t.Cleanup(r.Close)
	r.LeaderChanged()
	s := r.NewQueue(answerChan(make(chan engine.Answer, 8))).(*Session)
	armed.Store(true)
	s.Watch([]byte(tube), &engine.Answer{})
	if armed.Load() {
		t.Fatal("test bug: the hook did not run")
	}
	<-replaced
	// What each group's leader holds of member 1's references, applying
	// the refs items in the order sent.
	held := map[uint16]map[string]uint32{}
	for _, it := range sent.take() {
		if it.Kind != KindRefs {
			continue
		}
		if held[it.Group] == nil || it.Refs.Sync {
			held[it.Group] = map[string]uint32{}
		}
		for _, c := range it.Refs.Counts {
			held[it.Group][string(c.Tube)] = c.Watching
		}
	}
	if w := held[to][tube]; w != 1 {
		t.Errorf("group %d (the tube's now) counts %d watching %s, want 1", to, w, tube)
	}
	if w := held[from][tube]; w != 0 {
		t.Errorf("group %d (the tube's before) counts %d watching %s, want 0", from, w, tube)
	}
}

// calledFrom reports whether a function whose name ends in name is on the
// caller's stack.
func calledFrom(name string) bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "."+name) {
			return true
		}
		if !more {
			return false
		}
	}
}
