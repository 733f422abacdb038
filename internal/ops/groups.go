package ops

import (
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// Groups is what the side port reads of the queue of a cluster of several
// groups (internal/member's, formed with --cluster-groups G > 1): the
// groups this member leads. Each member exports the queue's figures of
// the groups it leads, labelled with the group, and none of the others':
// summed over the cluster's members, each figure is what stats shows.
// A group's series move from member to member with its leadership.
//
// With one group, there is no Groups: every member exports its replica's
// figures, unlabelled, as a single server does.
type Groups interface {
	// EachLed calls fn with each group this member leads and serves
	// now, in order of id.
	EachLed(fn func(g *LedGroup))
}

// LedGroup is a group this member leads, as one scrape reads it.
type LedGroup struct {
	ID uint16
	// Stats are the group's part of stats (router.SumStats' parts): a
	// tube whose jobs another group counts (a moving tube's copies) left
	// out, and the default tube, which every group's store holds,
	// counted in the group that owns its name alone. Waiting is not
	// read: it is the member's (waiter).
	Stats store.Stats
	// EachTube walks the tubes the group counts, those of Stats, in the
	// order of its store's EachTube.
	EachTube func(fn func(st *store.TubeStats))
	// Rebuilds and Rebuilding are the group's replica's
	// (replication.Stats'), read after Stats: its counters gain nothing
	// across a rebuild (keptCounters).
	Rebuilds   uint64
	Rebuilding bool
	// Served, if set, reports whether the group is still led and served
	// here by the store read, asked after its tubes are walked: a
	// leadership lost meanwhile may have had the store emptied under the
	// walk (a rebuild stops serving before it empties the store).
	Served func() bool
}

// waiter is a Groups that counts the member's own sessions waiting in a
// reserve, stats' current-waiting with several groups
// (router.Router.Waiting): sprout_current_waiting is that, unlabelled.
type waiter interface {
	Waiting() int64
}

// groupCounters keeps each group's counters from going down
// (keptCounters) and its OtherTube counters (otherCounters), from one
// scrape to the next and across the scrapes that find the group led
// elsewhere. It holds what it kept of every group this member ever led:
// no more than G times the tubes with series of their own.
type groupCounters struct {
	scrape sync.Mutex // held by a scrape of the groups (collectGroups)
	mu     sync.Mutex
	byID   map[uint16]*groupFigures // guarded by mu
}

// groupFigures are one group's counters.
type groupFigures struct {
	kept  *keptCounters // immutable; has its own lock
	other otherCounters // has its own lock
}

// led returns the counters of each group of ids, made for one seen for
// the first time, and marks the others' away (keptCounters.leave).
// gc.mu is taken before a group's keptCounters' lock, never after.
func (gc *groupCounters) led(ids []uint16) []*groupFigures {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if gc.byID == nil {
		gc.byID = make(map[uint16]*groupFigures)
	}
	out := make([]*groupFigures, len(ids))
	for i, id := range ids {
		f := gc.byID[id]
		if f == nil {
			f = &groupFigures{kept: newKeptCounters(nil)}
			gc.byID[id] = f
		}
		out[i] = f
	}
	for id, f := range gc.byID {
		if !slices.Contains(ids, id) {
			f.kept.leave()
		}
	}
	return out
}

// collectGroups sends the queue's series of each group this member
// leads, labelled with the group: sprout_current_jobs and the other
// figures of c.queue, and the per-tube series, whose cap
// (--metrics-tubes) counts each group's tubes.
func (c *collector) collectGroups(ch chan<- prometheus.Metric) {
	// One scrape at a time, from its read of the figures to its counters'
	// update: two overlapping (two Prometheus servers) would otherwise
	// count a gain twice, the later read taken before the earlier.
	c.byGroup.scrape.Lock()
	defer c.byGroup.scrape.Unlock()
	var led []LedGroup
	c.groups.EachLed(func(g *LedGroup) { led = append(led, *g) })
	ids := make([]uint16, len(led))
	for i := range led {
		ids[i] = led[i].ID
	}
	figures := c.byGroup.led(ids)
	for i := range led {
		g, f := &led[i], figures[i]
		label := strconv.Itoa(int(g.ID))
		st := codec.ServerStats{
			CurrentJobsUrgent:   figure(g.Stats.Urgent),
			CurrentJobsReady:    figure(g.Stats.Ready),
			CurrentJobsReserved: figure(g.Stats.Reserved),
			CurrentJobsDelayed:  figure(g.Stats.Delayed),
			CurrentJobsBuried:   figure(g.Stats.Buried),
			JobTimeouts:         figure(g.Stats.JobTimeouts),
			TotalJobs:           figure(g.Stats.TotalJobs),
			CurrentTubes:        figure(g.Stats.Tubes),
		}
		var tubes []store.TubeStats
		g.EachTube(func(t *store.TubeStats) { tubes = append(tubes, *t) })
		if g.Served != nil && !g.Served() {
			// Its tubes may be a rebuild's partial ones: were they taken,
			// those missing would be forgotten, and counted afresh from
			// their thinned figures when this member leads it again.
			f.kept.leave()
			continue
		}
		walk := func(fn func(*store.TubeStats)) {
			for i := range tubes {
				fn(&tubes[i])
			}
		}
		gain := f.kept.scrapeAt(g.Rebuilds, g.Rebuilding)
		f.kept.stats(&st, gain)
		collectScalars(ch, c.queue, &st, label)
		c.collectJobs(ch, &st, label)
		c.collectTubes(ch, walk, &f.other, f.kept, gain, label)
		f.kept.done(gain)
	}
}

// figure is one of LedGroup.Stats as exported. Those figures are the
// group's store's less the tubes another group counts, each read after
// the store's, while an import may be adding jobs and tubes to them: for
// an instant they can come out below 0, which is 0 here, not 2^64 less.
func figure[N int | int64](n N) uint64 { return uint64(max(n, 0)) }
