package router

import (
	"slices"
	"sync"
	"testing"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/store"
)

// TestReportNamesBehind: a leader's report names the voters it would not
// hand its group to (RouterConfig.Behind) to the members that read them
// (protocol 8, ReadsBehind), and is the report of protocol 7 to the
// others, which would refuse the new kind with the stream that carried
// it. A member that reads it keeps the names (Reported), so its
// balancer plans on the leader's view.
func TestReportNamesBehind(t *testing.T) {
	const self, newer, older = 1, 2, 3
	placement, err := meta.Formation([]meta.Member{{Name: "m1", ID: self}, {Name: "m2", ID: newer}, {Name: "m3", ID: older}}, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	led := store.New(store.Options{})
	var mu sync.Mutex
	sent := map[uint64][][]byte{}
	r := NewRouter(RouterConfig{
		Self:      self,
		Placement: func() *meta.State { return placement },
		Serving: func(g uint16) *store.Store {
			if g == 1 {
				return led
			}
			return nil
		},
		Leader:      func(g uint16) (uint64, bool) { return self, g == 1 },
		Term:        func(uint16) uint64 { return 4 },
		Replicas:    func(uint16) ([]uint64, []uint64, uint64) { return []uint64{self, newer, older}, nil, 9 },
		Behind:      func(g uint16) []uint64 { return []uint64{older} },
		ReadsBehind: func(member uint64) bool { return member == newer },
		Peers:       func() []uint64 { return []uint64{self, newer, older} },
		Send: func(to uint64, payload []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			sent[to] = append(sent[to], slices.Clone(payload))
			return true
		},
	})
	defer r.Close()
	r.LeaderChanged() // reports at once
	mu.Lock()
	defer mu.Unlock()
	if len(sent[self]) > 0 {
		t.Errorf("the member sent itself its report")
	}
	for to, want := range map[uint64]Kind{newer: KindLeadersBehind, older: KindLeaders} {
		var reports []LeaderReport
		for _, payload := range sent[to] {
			if err := Each(payload, 1<<16, func(it *Item) {
				if it.Kind == KindLeaders || it.Kind == KindLeadersBehind {
					if it.Kind != want {
						t.Errorf("member %d was sent %v, want %v", to, it.Kind, want)
					}
					for _, l := range it.Leaders {
						l.Voters, l.Behind = slices.Clone(l.Voters), slices.Clone(l.Behind)
						reports = append(reports, l)
					}
				}
			}); err != nil {
				t.Fatalf("a payload to %d: %v", to, err)
			}
		}
		if len(reports) == 0 || reports[0].Group != 1 || reports[0].Term != 4 {
			t.Fatalf("member %d was sent the reports %+v, want group 1's", to, reports)
		}
		if wantBehind := want == KindLeadersBehind; slices.Equal(reports[0].Behind, []uint64{older}) != wantBehind {
			t.Errorf("member %d was sent group 1's report naming %v behind", to, reports[0].Behind)
		}
	}

	// The member of protocol 8 that is sent it keeps what it names.
	other := NewRouter(RouterConfig{
		Self:      newer,
		Placement: func() *meta.State { return placement },
		Serving:   func(uint16) *store.Store { return nil },
		Leader:    func(uint16) (uint64, bool) { return 0, false },
		Send:      func(uint64, []byte) bool { return true },
	})
	defer other.Close()
	for _, payload := range sent[newer] {
		if err := other.Handle(self, payload); err != nil {
			t.Fatal(err)
		}
	}
	if rep, ok := other.Reported()[1]; !ok || rep.Leader != self || !slices.Equal(rep.Behind, []uint64{older}) {
		t.Errorf("the member sent the report keeps %+v (%v), want m1 leading group 1 with m3 behind", rep, ok)
	}
}

// TestReportBehindKeptThroughPlainReport: a leader sends the report of
// protocol 7 (KindLeaders) while its connection is dialled again and
// its protocol not known; the voters its last report named behind stay
// named for the same leadership, so that no balancer plans a transfer to
// one of them meanwhile, and go with a later term's report.
func TestReportBehindKeptThroughPlainReport(t *testing.T) {
	placement, err := meta.Formation([]meta.Member{{Name: "m1", ID: 1}, {Name: "m2", ID: 2}}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRouter(RouterConfig{
		Self:      2,
		Placement: func() *meta.State { return placement },
		Serving:   func(uint16) *store.Store { return nil },
		Leader:    func(uint16) (uint64, bool) { return 0, false },
		Send:      func(uint64, []byte) bool { return true },
	})
	defer r.Close()
	report := func(kind Kind, term uint64, behind []uint64) []uint64 {
		t.Helper()
		payload, err := AppendItem(nil, &Item{Kind: kind, Leaders: []LeaderReport{{Group: 1, Term: term, Voters: []uint64{1, 2, 3}, Behind: behind}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Handle(1, payload); err != nil {
			t.Fatal(err)
		}
		return r.Reported()[1].Behind
	}
	if got := report(KindLeadersBehind, 4, []uint64{3}); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("behind %v, want 3", got)
	}
	if got := report(KindLeaders, 4, nil); !slices.Equal(got, []uint64{3}) {
		t.Errorf("behind %v after a plain report of the same term, want 3 still", got)
	}
	if got := report(KindLeaders, 5, nil); len(got) != 0 {
		t.Errorf("behind %v after a plain report of a later term, want none", got)
	}
}
