package router

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
)

// leaseStores are a group's store on the leader cut off from the
// group's majority (deposed: it does not know yet that another was
// elected) and on the leader elected meanwhile. Both took job 1 into tube
// t; the elected one deleted it since, and put job 2 into tube n, which
// the deposed one never saw.
func leaseStores(t *testing.T) (deposed, elected *store.Store) {
	t.Helper()
	deposed, elected = store.New(store.Options{}), store.New(store.Options{})
	t.Cleanup(deposed.Close)
	t.Cleanup(elected.Close)
	for _, st := range []*store.Store{deposed, elected} {
		cl := st.NewClient(nil)
		cl.Use([]byte("t"))
		if _, err := cl.Put(st.NextID(), 0, 0, 60, []byte("a\r\n")); err != nil {
			t.Fatal(err)
		}
		if st == elected {
			if !cl.Delete(1) {
				t.Fatal("job 1 not deleted")
			}
			cl.Use([]byte("n"))
			if _, err := cl.Put(st.NextID(), 0, 0, 60, []byte("b\r\n")); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
	}
	return deposed, elected
}

// leaseReads are the reads a session sends a group's leader, each with
// whether an answer is the elected leader's (leaseStores), and not the
// deposed one's.
var leaseReads = []struct {
	name    string
	req     Request
	elected func(r Reply) bool
}{
	{"peek", Request{Op: OpPeek, ID: 1}, func(r Reply) bool { return r.Status == StatusNotFound }},
	{"peek of a job only the elected leader has", Request{Op: OpPeek, ID: 2}, func(r Reply) bool {
		return r.Status == StatusOK && r.Job.ID == 2
	}},
	{"peek-ready", Request{Op: OpPeekReady, Tube: []byte("t")}, func(r Reply) bool { return r.Status == StatusNotFound }},
	{"stats-job", Request{Op: OpStatsJob, ID: 1}, func(r Reply) bool { return r.Status == StatusNotFound }},
	{"stats-tube", Request{Op: OpStatsTube, Tube: []byte("n")}, func(r Reply) bool {
		return r.Status == StatusOK && r.TubeStats.Ready == 1
	}},
	{"stats", Request{Op: OpStats}, func(r Reply) bool { return r.Status == StatusOK && r.Stats.TotalJobs == 2 }},
	{"list-tubes", Request{Op: OpListTubes}, func(r Reply) bool {
		return r.Status == StatusOK && slices.ContainsFunc(r.Tubes, func(t TubeStamp) bool { return string(t.Name) == "n" })
	}},
	{"a reserve across groups' peek", Request{Op: OpBest, Tubes: [][]byte{[]byte("t")}}, func(r Reply) bool {
		return r.Status == StatusOK && !r.Best.OK
	}},
	{"reserve-with-timeout 0", Request{Op: OpReserve, Tubes: [][]byte{[]byte("n")}}, func(r Reply) bool {
		return r.Status == StatusOK && r.Job.ID == 2
	}},
}

// TestReadsFencedByTheLease: a read sent to a group's leader whose lease
// lapsed (cut off from the group's majority, it does not know yet that
// another was elected) is not answered from its store: refused
// (StatusNotLeader), it waits in the member's Link, goes to the next
// leader once the member learns of it, and the session gets that one's
// answer. Before, only a reply handing out a job was fenced: a peek on
// the deposed leader found a job the new leader had deleted, and stats
// and list-tubes missed what it had made.
func TestReadsFencedByTheLease(t *testing.T) {
	for i, c := range leaseReads {
		t.Run(c.name, func(t *testing.T) {
			deposed, elected := leaseStores(t)
			type sent struct {
				from    uint64
				payload []byte
			}
			out := make(chan sent, 16)
			server := func(self uint64, st *store.Store, leased bool) *Server {
				srv := NewServer(ServerConfig{
					Group: func(uint16) *store.Store { return st }, MaxJobSize: 1 << 16,
					Leased: func(uint16) bool { return leased },
					Send: func(to uint64, payload []byte) bool {
						out <- sent{self, append([]byte(nil), payload...)}
						return true
					},
				})
				t.Cleanup(srv.Close)
				return srv
			}
			servers := map[uint64]*Server{2: server(2, deposed, false), 3: server(3, elected, true)}
			var leader atomic.Uint64
			leader.Store(2)
			link := NewLink(LinkConfig{
				Leader: func(uint16) (uint64, bool) { return leader.Load(), true },
				Send: func(to uint64, payload []byte) bool {
					_ = servers[to].Handle(1, append([]byte(nil), payload...))
					return true
				},
			})
			// reply is the next payload a server sent, handed to the Link,
			// and its first item.
			reply := func(from uint64) Item {
				t.Helper()
				select {
				case s := <-out:
					if s.from != from {
						t.Fatalf("a reply from member %d, want one from %d", s.from, from)
					}
					var first Item
					if err := Each(s.payload, 0, func(it *Item) {
						if first.Kind == 0 {
							first = copyReply(*it)
						}
					}); err != nil {
						t.Fatal(err)
					}
					if err := link.Handle(from, s.payload); err != nil {
						t.Fatal(err)
					}
					return first
				case <-time.After(5 * time.Second):
					t.Fatalf("no reply from member %d", from)
				}
				return Item{}
			}
			var mu sync.Mutex
			var got []Item
			link.Request(uint64(10+i), 0, 1, c.req, func(it *Item) {
				mu.Lock()
				got = append(got, copyReply(*it))
				mu.Unlock()
			})
			if r := reply(2); r.Reply.Status != StatusNotLeader {
				t.Fatalf("%s on the leader whose lease lapsed: %+v, want StatusNotLeader, not its store's answer", c.name, r.Reply)
			}
			link.Retry(0) // as every retryEvery: refused again
			if r := reply(2); r.Reply.Status != StatusNotLeader {
				t.Fatalf("%s asked again of the leader whose lease lapsed: %+v, want StatusNotLeader", c.name, r.Reply)
			}
			mu.Lock()
			if len(got) != 0 {
				t.Fatalf("%s answered while refused: %+v", c.name, got)
			}
			mu.Unlock()
			leader.Store(3)
			link.LeaderChanged(0)
			reply(3)
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || !c.elected(got[0].Reply) {
				t.Fatalf("%s answered %+v, want the elected leader's answer", c.name, got)
			}
		})
	}
}

// TestLocalReadsFencedByTheLease: a read on the local fast path of a
// leader whose lease lapsed is not run there (the session sends it the
// other way, which refuses it, TestReadsFencedByTheLease); once the lease
// is confirmed again, it is.
func TestLocalReadsFencedByTheLease(t *testing.T) {
	deposed, _ := leaseStores(t)
	r := newServerRig(t, map[uint16]*store.Store{0: deposed})
	var leased atomic.Bool
	r.srv.cfg.Leased = func(uint16) bool { return leased.Load() }
	var stamp atomic.Uint64
	for i, c := range leaseReads {
		key := ownerKey{member: 7, session: uint64(10 + i)}
		if reply, _, _, ran := r.srv.local(key, c.req, &stamp); ran {
			t.Errorf("%s ran on the local path while not leased: %+v", c.name, reply)
		}
		leased.Store(true)
		if _, _, _, ran := r.srv.local(key, c.req, &stamp); !ran {
			t.Errorf("%s did not run on the local path once leased", c.name)
		}
		leased.Store(false)
	}
	if s := deposed.Stats(); s.Reserved != 0 {
		t.Fatalf("after the reads: %+v, want no job reserved", s)
	}
}

// TestOneGroupReadsFencedByTheLease: with one group, a session opened
// while this member leads it runs on the group's store (Session.local),
// as a single server's does. A read there while the lease is not
// confirmed closes the connection (engine.FailedFenced), as the engine
// does rather than hand out a job: its client connects again and is
// routed anew. Before, it was answered from the store.
func TestOneGroupReadsFencedByTheLease(t *testing.T) {
	deposed, _ := leaseStores(t)
	var leased atomic.Bool
	r := NewRouter(RouterConfig{
		Self:    1,
		Serving: func(uint16) *store.Store { return deposed },
		Leased:  func(uint16) bool { return leased.Load() },
		Leader:  func(uint16) (uint64, bool) { return 1, true },
		Send:    func(uint64, []byte) bool { return true },
	})
	defer r.Close()
	var answers answersLog
	s := r.NewQueue(&answers).(*Session)
	defer s.Close()
	if s.local == nil {
		t.Fatal("the session does not run on the group's store")
	}
	reads := map[string]func(a *engine.Answer) bool{
		"peek":                   func(a *engine.Answer) bool { return s.Peek(1, a) },
		"peek-ready":             s.PeekReady,
		"peek-delayed":           s.PeekDelayed,
		"peek-buried":            s.PeekBuried,
		"stats-job":              func(a *engine.Answer) bool { return s.JobStats(1, a) },
		"stats-tube":             func(a *engine.Answer) bool { return s.TubeStats([]byte("t"), a) },
		"stats":                  s.Stats,
		"list-tubes":             s.ListTubes,
		"reserve-with-timeout 0": func(a *engine.Answer) bool { return s.Reserve(0, a) },
		"reserve-job 9":          func(a *engine.Answer) bool { return s.ReserveJob(9, a) },
	}
	for name, read := range reads {
		var a engine.Answer
		if now := read(&a); !now || a.Failed != engine.FailedFenced {
			t.Errorf("%s while not leased: now %v, answer %+v; want it fenced", name, now, a)
		}
		leased.Store(true)
		a = engine.Answer{}
		if now := read(&a); !now || a.Failed != 0 {
			t.Errorf("%s once leased: now %v, answer %+v; want it answered", name, now, a)
		}
		leased.Store(false)
	}
}

// TestRefusedReadsAnsweredAgain: two peeks of a session's reserves
// across groups, each refused for the lease (the first reserve ended by
// its timer while its peek was refused, then the next one's), are each
// answered once the lease is back, whichever comes again first. The
// first, asked again after the second, was dropped as "sent again, its
// answer read": its call pending at the member for ever.
func TestRefusedReadsAnsweredAgain(t *testing.T) {
	deposed, _ := leaseStores(t)
	r := newServerRig(t, map[uint16]*store.Store{0: deposed})
	var leased atomic.Bool
	r.srv.cfg.Leased = func(uint16) bool { return leased.Load() }
	peek := req(0, 2, 0, Request{Op: OpBest, Tubes: [][]byte{[]byte("t")}})
	for seq := uint32(1); seq <= 2; seq++ {
		peek.Seq = seq
		r.send(peek)
		if got := r.next(); got.Seq != seq || got.Reply.Status != StatusNotLeader {
			t.Fatalf("peek %d while not leased: %+v, want StatusNotLeader", seq, got)
		}
	}
	leased.Store(true)
	for seq := uint32(1); seq <= 2; seq++ {
		peek.Seq = seq
		r.send(peek)
		if got := r.next(); got.Seq != seq || got.Reply.Status != StatusOK || !got.Reply.Best.OK {
			t.Fatalf("peek %d asked again once leased: %+v, want job 1 as the best", seq, got)
		}
	}
}
