package member

import (
	"github.com/sproutmq/sprout/internal/ops"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
	"github.com/sproutmq/sprout/store/wal"
)

// ledGroups is what the side port reads of the queue with several groups
// (ops.Groups): the groups this member leads and serves, each counted as
// its part of stats is (router.SumStats), so that the groups' series
// summed over the members are what stats shows.
type ledGroups struct{ m *Member }

// EachLed implements ops.Groups. A group's figures are read from its
// store, then its replica's rebuilds: a leadership lost while they were
// read shows there (or as the group no longer served), and the group is
// then left out of this scrape.
func (l ledGroups) EachLed(fn func(g *ops.LedGroup)) {
	m := l.m
	sh := m.shards
	defaultOwner := sh.routing.Load().state.Owner(store.DefaultTube)
	var led []ops.LedGroup
	for g := range uint16(sh.groups()) {
		st := sh.serving(g)
		if st == nil {
			continue
		}
		uncounted := m.uncounted(g)
		owns := g == defaultOwner
		skip := func(name string) bool {
			return name == store.DefaultTube && !owns || uncounted != nil && uncounted([]byte(name))
		}
		figures := router.CountedStats(st, uncounted)
		figures.Waiting = 0
		if !owns {
			figures.Tubes-- // the default tube, counted in its owner's
		}
		led = append(led, ops.LedGroup{ID: g, Stats: figures, EachTube: func(fn func(*store.TubeStats)) {
			st.EachTube(func(ts *store.TubeStats) {
				if !skip(ts.Name) {
					fn(ts)
				}
			})
		}, Served: func() bool { return sh.serving(g) == st }})
	}
	if len(led) == 0 {
		return
	}
	byGroup := map[int]bool{}
	for _, gs := range m.node.Stats().Groups {
		for i := range led {
			if int(led[i].ID) == gs.Group {
				led[i].Rebuilds, led[i].Rebuilding = gs.Rebuilds, gs.Rebuilding
				byGroup[gs.Group] = gs.Serving && !gs.Rebuilding
			}
		}
	}
	for i := range led {
		if byGroup[int(led[i].ID)] {
			fn(&led[i])
		}
	}
}

// Waiting implements ops' waiter: this member's sessions in a reserve,
// stats' current-waiting with several groups.
func (l ledGroups) Waiting() int64 { return l.m.sessions.Waiting() }

// logFigures are the figures of the member's log for the
// sprout_binlog_* series: its segments, records and bytes are the shared
// log's, every group's, which its groups' journals do not have
// (replication.Journal.Stats counts the records a store appended, and
// migrated); the records migrated are group 0's journal's, as stats'
// binlog-records-migrated, since the shared log does not count the
// records its groups' leaders rewrite.
func (m *Member) logFigures() wal.Stats {
	st := m.clusterLog.Shared().Stats()
	if own, ok := m.store.LogStats(); ok {
		st.RecordsMigrated = own.RecordsMigrated
	}
	return st
}
