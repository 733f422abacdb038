package replication

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/testproc"
)

// startMetas starts the meta group's replica on every member of c, each
// from the formation of c's members with groups and 3 replicas, on its
// own log.
func startMetas(t *testing.T, c *netCluster, groups int, logs map[string]*gatedLog) map[string]*Meta {
	t.Helper()
	metas := map[string]*Meta{}
	for _, m := range c.peers {
		metas[m.Name] = startMeta(t, c, m.Name, groups, logs[m.Name])
	}
	return metas
}

func startMeta(t *testing.T, c *netCluster, name string, groups int, log *gatedLog) *Meta {
	t.Helper()
	var ms []meta.Member
	for _, m := range c.peers {
		ms = append(ms, meta.Member{Name: m.Name, ID: m.ID})
	}
	formation, err := meta.Formation(ms, groups, 3)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.nodes[name].Host().StartMeta(NodeConfig{Peers: c.peers, Log: log, Tick: testTick,
		Logger: zerolog.New(c.output).Level(zerolog.InfoLevel).With().Timestamp().Logger()}, formation)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// metaNodes are the meta replicas' nodes that run.
func metaNodes(metas map[string]*Meta) []*Node {
	nodes := map[string]*Node{}
	for name, m := range metas {
		nodes[name] = m.Node()
	}
	return groupUp(nodes)
}

// awaitMeta waits until every replica in metas has want as its state.
func awaitMeta(t *testing.T, metas map[string]*Meta, want *meta.State, what string) {
	t.Helper()
	for name, m := range metas {
		testproc.WaitFor(t, 10*time.Second, fmt.Sprintf("%s's meta state %s", name, what), func() bool {
			got, _ := m.State()
			return reflect.DeepEqual(got, want)
		})
	}
}

// TestMetaGroup: three members start the meta group from the same
// formation with nothing exchanged; the leader takes changes, each
// refused whole or applied on every member; a follower refuses them; a
// replica stopped while the state changed catches up (through a snapshot,
// its log compacted meanwhile); after a failover the new leader has the
// state and takes changes; the meta group's messages share the members'
// connections with group 0, whose leader and term do not move.
func TestMetaGroup(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	logs := groupLogs(c, 2)
	l0 := c.awaitServing(10 * time.Second)
	term0 := l0.Status().Term
	metas := startMetas(t, c, 3, logs)
	want, _ := metas["m1"].State()
	if want.Owner("emails") != want.Slots[meta.Slot("emails")] || len(want.Groups) != 3 {
		t.Fatalf("the formation: %+v", want)
	}
	awaitMeta(t, metas, want, "at formation")

	leader := c.awaitServing(10*time.Second, metaNodes(metas)...)
	lm := metas[leader.Name()]
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for name, m := range metas {
		if m != lm {
			if err := m.Propose(ctx, meta.Command{Op: meta.OpPlaceTube, Tube: "x", Group: 1}); !errors.Is(err, ErrNotServing) {
				t.Errorf("a change proposed to %s, a follower: %v", name, err)
			}
		}
	}
	place := func(m *Meta, tube string, group uint16) {
		t.Helper()
		if err := m.Propose(ctx, meta.Command{Op: meta.OpPlaceTube, Tube: tube, Group: group}); err != nil {
			t.Fatalf("placing %s: %v", tube, err)
		}
		if err := want.Apply(meta.Command{Op: meta.OpPlaceTube, Tube: tube, Group: group}); err != nil {
			t.Fatal(err)
		}
		want.Version++
	}
	place(lm, "emails", 2)
	err := lm.Propose(ctx, meta.Command{Op: meta.OpPlaceTube, Tube: "a", Group: 1}, meta.Command{Op: meta.OpPlaceTube, Tube: "b", Group: 9})
	if !errors.Is(err, meta.ErrCommand) {
		t.Errorf("a change with a group that does not exist: %v", err)
	}
	awaitMeta(t, metas, want, "after a change (and one refused)")
	if got, _ := lm.State(); got.Owner("emails") != 2 {
		t.Errorf("emails is in group %d, want 2", got.Owner("emails"))
	}

	// A replica down while the state changes, its log compacted past it
	// by the others, catches up when it starts again.
	var down string
	for name, m := range metas {
		if m != lm {
			down = name
			break
		}
	}
	metas[down].Close()
	delete(metas, down)
	for i := range 10 {
		place(lm, fmt.Sprint("tube-", i), uint16(i%3))
	}
	snaps := c.nodes[leader.Name()].Stats().Transport.SnapshotsSent
	metas[down] = startMeta(t, c, down, 3, logs[down])
	awaitMeta(t, metas, want, "after "+down+" caught up")
	testproc.WaitFor(t, 5*time.Second, "the snapshot "+down+" caught up with, counted as sent", func() bool {
		return c.nodes[leader.Name()].Stats().Transport.SnapshotsSent > snaps
	})

	// The leader's replica stops: another takes over with the state.
	lm.Close()
	delete(metas, leader.Name())
	leader = c.awaitServing(10*time.Second, metaNodes(metas)...)
	place(metas[leader.Name()], "after-failover", 0)
	awaitMeta(t, metas, want, "after the failover")

	if st := l0.Status(); st.Term != term0 || !st.Serving {
		t.Errorf("group 0 moved while the meta group failed over: term %d (was %d), serving %v", st.Term, term0, st.Serving)
	}
	if got := len(c.nodes[l0.Name()].Host().Groups()); got != 1 {
		t.Errorf("the host lists %d shard groups, want group 0 alone (the meta group is not one)", got)
	}
}

// TestMetaLostLeadership: a change the meta leader took but could not
// commit (its followers gone) is answered ErrNotServing once the leader
// steps down, and is gone from its state after the rebuild; the state
// committed before stays.
func TestMetaLostLeadership(t *testing.T) {
	c := newNetCluster(t, 3, 100, nil)
	logs := groupLogs(c, 100)
	c.awaitServing(10 * time.Second)
	metas := startMetas(t, c, 2, logs)
	leader := c.awaitServing(10*time.Second, metaNodes(metas)...)
	lm := metas[leader.Name()]
	if err := lm.Propose(t.Context(), meta.Command{Op: meta.OpPlaceTube, Tube: "kept", Group: 1}); err != nil {
		t.Fatal(err)
	}
	for name, m := range metas {
		if m != lm {
			m.Close()
			delete(metas, name)
		}
	}
	// Readers never see the change that cannot commit, nor the state go
	// back while the leader rebuilds.
	seen := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		s, changed := lm.State()
		for {
			if _, never := s.Exact["never"]; never || s.Exact["kept"] != 1 || s.Version != 1 {
				seen <- fmt.Errorf("version %d, exact %v", s.Version, s.Exact)
				return
			}
			select {
			case <-changed:
				s, changed = lm.State()
			case <-stop:
				seen <- nil
				return
			}
		}
	}()
	err := lm.Propose(t.Context(), meta.Command{Op: meta.OpPlaceTube, Tube: "never", Group: 1})
	if !errors.Is(err, ErrNotServing) {
		t.Fatalf("a change that could not commit: %v", err)
	}
	testproc.WaitFor(t, 10*time.Second, "the meta leader's rebuild", func() bool {
		st := lm.Node().Stats()
		return st.Rebuilds == 1 && st.LastRebuild > 0
	})
	close(stop)
	if err := <-seen; err != nil {
		t.Errorf("a reader saw a state it should not have: %v", err)
	}
	if s, _ := lm.State(); s.Exact["kept"] != 1 || len(s.Exact) != 1 || s.Version != 1 {
		t.Errorf("the state after the rebuild: version %d, exact %v", s.Version, s.Exact)
	}
}
