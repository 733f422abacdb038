package router

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

// e2eMember is a cluster member in this process with a Server for the
// group it leads and a Link to the leader, joined by its host's
// commands streams.
type e2eMember struct {
	name string
	node *replication.Node
	srv  *Server
	link *Link
	// dropTo, if set, is a member whose items from this one's Server are
	// dropped, as a connection that broke would lose them.
	dropTo atomic.Uint64
}

// startE2E starts three members on directories, each serving group 0's
// requests when it leads and sending its own through its Link.
func startE2E(t *testing.T) []*e2eMember {
	var peers []replication.Member
	for i := 1; i <= 3; i++ {
		port, err := testproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("m%d", i)
		addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
		peers = append(peers, replication.Member{Name: name, Addr: addr, ID: replication.MemberID(name)})
	}
	var members []*e2eMember
	for i, p := range peers {
		m := &e2eMember{name: p.Name}
		cfg := replication.NodeConfig{Node: p.Name, Listen: p.Addr, Peers: peers, Tick: 50 * time.Millisecond,
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", 11300+i), Logger: zerolog.Nop()}
		l, err := replication.OpenWALLog(cfg.WALConfig(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Log = l
		cfg.CloseClients = func(context.Context) error { m.srv.Detach(0); return nil }
		serving := func() bool { info, _ := m.node.Leader(); return info.Serving }
		m.srv = NewServer(ServerConfig{
			Group: func(g uint16) *store.Store {
				if g == 0 && serving() {
					return m.node.Store()
				}
				return nil
			},
			Send: func(to uint64, payload []byte) bool {
				if m.dropTo.Load() == to {
					return true
				}
				return m.node.Host().SendItems(to, payload)
			},
			MaxJobSize: 1 << 16,
		})
		m.link = NewLink(LinkConfig{
			Leader: func(uint16) (uint64, bool) {
				info, _ := m.node.Leader()
				return replication.MemberID(info.Name), info.Name != "" && info.Name != m.name
			},
			Send: func(to uint64, payload []byte) bool { return m.node.Host().SendItems(to, payload) },
		})
		if m.node, err = replication.StartNode(cfg); err != nil {
			t.Fatal(err)
		}
		host := m.node.Host()
		// A payload holds requests for this member's Server and answers
		// for its Link: each takes its own kinds.
		host.OnItems(func(from uint64, payload []byte) error {
			if err := m.srv.Handle(from, payload); err != nil {
				return err
			}
			return m.link.Handle(from, payload)
		})
		host.OnItemsStream(func(uint64, replication.ItemsEvent) { m.link.LeaderChanged(0) })
		go func() {
			for {
				_, changed := m.node.Leader()
				select {
				case <-changed:
					m.link.LeaderChanged(0)
				case <-m.node.Done():
					return
				}
			}
		}()
		t.Cleanup(func() {
			m.srv.Close()
			m.node.Close()
			_ = l.Close()
		})
		members = append(members, m)
	}
	return members
}

// leaderOf waits for a member to serve and returns it and the others.
func leaderOf(t *testing.T, members []*e2eMember) (*e2eMember, []*e2eMember) {
	t.Helper()
	var leader *e2eMember
	testproc.WaitFor(t, 10*time.Second, "a leader serving", func() bool {
		for _, m := range members {
			if info, _ := m.node.Leader(); info.Serving {
				leader = m
				return true
			}
		}
		return false
	})
	var others []*e2eMember
	for _, m := range members {
		if m != leader {
			others = append(others, m)
		}
	}
	return leader, others
}

// TestEndToEnd: sessions on members that do not lead put and reserve
// through their Links, over the hosts' commands streams, on the leader's
// Server: every put is answered once committed, and a reserve through
// another member gets the first. After the leader dies, the next one
// answers, and holds every job acknowledged before.
func TestEndToEnd(t *testing.T) {
	members := startE2E(t)
	leader, others := leaderOf(t, members)
	var mu sync.Mutex
	got := map[uint64]string{}
	put := func(via *e2eMember, session uint64, n int, what string) {
		t.Helper()
		done := make(chan Item, n)
		for i := range n {
			body := fmt.Sprintf("%s %d\r\n", what, i)
			via.link.Request(session, 0, uint32(i+1), Request{Op: OpPut, Tube: []byte("e2e"), TTR: 60, Body: []byte(body)},
				func(it *Item) { done <- *it })
		}
		for i := range n {
			select {
			case it := <-done:
				if it.Reply.Status != StatusOK || it.Reply.ID == 0 {
					t.Fatalf("put %d through %s: %+v", i, via.name, it.Reply)
				}
				mu.Lock()
				got[it.Reply.ID] = what
				mu.Unlock()
			case <-time.After(10 * time.Second):
				t.Fatalf("put %d through %s: no answer (%d pending)", i, via.name, via.link.Pending())
			}
		}
	}
	put(others[0], 1, 20, "before")
	if n := len(got); n != 20 {
		t.Fatalf("%d distinct ids for 20 puts", n)
	}
	done := make(chan Item, 1)
	others[1].link.Request(2, 0, 1, Request{Op: OpReserve, Tubes: [][]byte{[]byte("e2e")}, Timeout: 0}, func(it *Item) {
		it.Reply.Job.Body = append([]byte(nil), it.Reply.Job.Body...)
		done <- *it
	})
	select {
	case it := <-done:
		if it.Reply.Status != StatusOK || string(it.Reply.Job.Body) != "before 0\r\n" {
			t.Fatalf("reserve through %s: %+v", others[1].name, it.Reply)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reserve: no answer")
	}

	leader.node.Close()
	next, rest := leaderOf(t, others)
	via := rest[0]
	if via == leader {
		via = rest[1]
	}
	put(via, 3, 10, "after")
	st := next.node.Store()
	for id := range got {
		if _, ok := st.TubeStats([]byte("e2e")); !ok {
			t.Fatal("the tube is gone")
		}
		cl := st.NewClient(nil)
		if _, ok := cl.Peek(id); !ok {
			t.Errorf("acknowledged job %d (%s) is not on the new leader", id, got[id])
		}
		cl.Close()
	}
}

// TestEndToEndExactlyOnce: a put the leader committed but whose reply was
// lost is sent again to the next leader, which answers it from the
// group's table of outcomes (the keyed records it applied as a
// follower): the same id, and one job (docs/design/shards.md 5.6).
func TestEndToEndExactlyOnce(t *testing.T) {
	members := startE2E(t)
	leader, others := leaderOf(t, members)
	testproc.WaitFor(t, 10*time.Second, "every member finalized", func() bool {
		for _, m := range members {
			if !m.node.Host().Finalized() {
				return false
			}
		}
		return true
	})
	via := others[0]
	leader.dropTo.Store(via.node.ID())
	done := make(chan Item, 1)
	via.link.Request(1, 0, 1, Request{Op: OpPut, Tube: []byte("once"), TTR: 60, Body: []byte("once\r\n")},
		func(it *Item) { done <- *it })
	for _, m := range others {
		testproc.WaitFor(t, 10*time.Second, m.name+" applying the put", func() bool {
			return m.node.Store().Stats().TotalJobs == 1
		})
	}
	select {
	case it := <-done:
		t.Fatalf("a reply that was dropped came: %+v", it.Reply)
	default:
	}
	leader.node.Close()
	next, _ := leaderOf(t, others)
	if next == via {
		// This harness's Links reach other members only: the leadership
		// goes to the third.
		next = others[1]
		testproc.WaitFor(t, 10*time.Second, "the leadership moving to "+next.name, func() bool {
			_ = via.node.TransferLeadership(next.name)
			info, _ := next.node.Leader()
			return info.Serving
		})
	}
	var it Item
	select {
	case it = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the put sent again: no answer (%d pending)", via.link.Pending())
	}
	st := next.node.Store()
	cl := st.NewClient(nil)
	defer cl.Close()
	j, ok := cl.Peek(it.Reply.ID)
	if it.Reply.Status != StatusOK || !ok || string(j.Body()) != "once\r\n" {
		t.Fatalf("the put sent again: %+v, its job on the new leader %v", it.Reply, ok)
	}
	if n := st.Stats().TotalJobs; n != 1 {
		t.Fatalf("%d jobs on the new leader after a put sent twice, want 1", n)
	}
}
