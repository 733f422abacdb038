package router

import (
	"slices"
	"sync"
	"testing"

	"github.com/sproutmq/sprout/store"
)

// TestResyncListsSessions: when the commands stream to a group's leader
// opens again, the router sends that leader the sessions open on this
// member before anything else of the resync, if the leader reads the
// list (protocol 7), and nothing of the kind to one that does not.
func TestResyncListsSessions(t *testing.T) {
	const self, leader = 1, 2
	var mu sync.Mutex
	var sent []Item
	syncs := true
	r := NewRouter(RouterConfig{
		Self:    self,
		Serving: func(uint16) *store.Store { return nil },
		Leader:  func(uint16) (uint64, bool) { return leader, true },
		Send: func(to uint64, payload []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			if err := Each(payload, 1<<16, func(it *Item) {
				it.Sessions.IDs = slices.Clone(it.Sessions.IDs)
				sent = append(sent, *it)
			}); err != nil {
				t.Errorf("a payload to %d: %v", to, err)
			}
			return true
		},
		SyncsSessions: func(member uint64) bool {
			mu.Lock()
			defer mu.Unlock()
			return member == leader && syncs
		},
	})
	defer r.Close()
	r.LeaderChanged() // greets the leader: calls go to it from then on
	a, b, c := r.NewQueue(nil).(*Session), r.NewQueue(nil).(*Session), r.NewQueue(nil).(*Session)
	b.Close()
	resync := func() []Item {
		mu.Lock()
		sent = nil
		mu.Unlock()
		r.StreamUp(leader)
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sent)
	}
	items := resync()
	if len(items) == 0 || items[0].Kind != KindSessions {
		t.Fatalf("the resync sent %v first, want the sessions", kinds(items))
	}
	if ss := items[0].Sessions; !slices.Equal(ss.IDs, []uint64{a.id, c.id}) || ss.Upto != c.id {
		t.Fatalf("sessions %+v, want %d and %d up to %d", ss, a.id, c.id, c.id)
	}
	mu.Lock()
	syncs = false
	mu.Unlock()
	if items := resync(); slices.ContainsFunc(items, func(it Item) bool { return it.Kind == KindSessions }) {
		t.Fatalf("a leader of protocol 6 was sent %v", kinds(items))
	}
}

func kinds(items []Item) []Kind {
	var ks []Kind
	for _, it := range items {
		ks = append(ks, it.Kind)
	}
	return ks
}
