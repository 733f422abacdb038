package ops

import (
	"sync"

	"github.com/sproutmq/sprout/codec"
)

// keptCounters keeps a cluster member's counters of the queue (total-jobs,
// job-timeouts, and each tube's total-jobs and cmd-delete) from going
// down. A member's store is emptied and filled again from its log when
// the member loses a leadership (replication's rebuild) or installs a
// snapshot: every count restarts from what the log still holds, which
// compaction has thinned, and job-timeouts (counted where a reservation
// ran out, never logged) from 0. Prometheus would read each drop as a
// counter reset and count the whole figure again. So each scrape adds
// what a figure gained since the last one, and nothing across a rebuild
// (the records replayed were counted before): a figure that went down,
// or any figure while a rebuild runs or when one ran since the last
// scrape, only takes its new value as the base of the next gain. What a
// figure gained between the scrape before a rebuild and the rebuild is
// not counted.
//
// A single server's store is never rebuilt: it has none (ops.Config
// without a Cluster), and its figures are reported as they are.
//
// With several groups each group's figures have keptCounters of their
// own (groupCounters), which see them only while this member leads the
// group: a scrape that finds it not led marks them away, and the first
// scrape that finds it led again gains nothing either, as across a
// rebuild, so each series goes on from where it stopped.
type keptCounters struct {
	// epoch reports the member's rebuilds so far and whether one is under
	// way (replication.Stats' Rebuilds, Rebuilding); nil for a group's,
	// whose scrapeAt is given them.
	epoch func() (rebuilds uint64, rebuilding bool)

	mu sync.Mutex
	// guarded by mu:
	scraped          bool   // a scrape has been made
	rebuilds         uint64 // epoch's at the last scrape
	rebuilding       bool   // epoch's at the last scrape
	away             bool   // a group's: a scrape since the last found it not led here
	jobs, timeouts   kept
	tubes, nextTubes map[string]keptTube // the tubes with series of their own, at the last scrape and at this one
}

// kept is one counter: its figure at the last scrape, and what is
// reported.
type kept struct{ last, total uint64 }

// see takes the figure now and returns what to report: the figure as it
// is at the first sight, and from then on what it gained if gain.
func (k *kept) see(now uint64, gain bool) uint64 {
	if gain && now >= k.last {
		k.total += now - k.last
	}
	k.last = now
	return k.total
}

type keptTube struct{ jobs, deletes kept }

func newKeptCounters(epoch func() (uint64, bool)) *keptCounters {
	return &keptCounters{epoch: epoch, tubes: map[string]keptTube{}, nextTubes: map[string]keptTube{}}
}

// scrape begins a scrape: it reports whether the figures may gain (no
// rebuild under way, none since the last scrape, which saw none under way
// either: the figures it read may have been a rebuild's partial ones),
// and holds mu until done.
func (k *keptCounters) scrape() (gain bool) {
	return k.scrapeAt(k.epoch())
}

// scrapeAt is scrape with the epoch read by the caller.
func (k *keptCounters) scrapeAt(rebuilds uint64, rebuilding bool) (gain bool) {
	k.mu.Lock()
	gain = !k.scraped || !k.away && !rebuilding && !k.rebuilding && rebuilds == k.rebuilds
	k.scraped, k.rebuilds, k.rebuilding, k.away = true, rebuilds, rebuilding, false
	return gain
}

// sameEpoch reports whether the member's rebuilds are as the scrape
// began (scrape) and none is under way. mu must be held.
func (k *keptCounters) sameEpoch() bool {
	rebuilds, rebuilding := k.epoch()
	return rebuilds == k.rebuilds && !rebuilding
}

// leave marks a group's figures away: a scrape found the group not led
// here.
func (k *keptCounters) leave() {
	k.mu.Lock()
	k.away = true
	k.mu.Unlock()
}

// stats rewrites st's counters as reported. mu must be held.
func (k *keptCounters) stats(st *codec.ServerStats, gain bool) {
	st.TotalJobs = k.jobs.see(st.TotalJobs, gain)
	st.JobTimeouts = k.timeouts.see(st.JobTimeouts, gain)
}

// tube rewrites a tube's counters as reported. A tube seen for the first
// time is reported as it is. mu must be held.
func (k *keptCounters) tube(name string, f *tubeFigures, gain bool) {
	t, seen := k.tubes[name]
	if !seen {
		gain = true // its figures as they are
	}
	f.totalJobs = float64(t.jobs.see(uint64(f.totalJobs), gain))
	f.deletes = float64(t.deletes.see(uint64(f.deletes), gain))
	k.nextTubes[name] = t
}

// done ends the scrape: the tubes it saw are those of the next. One not
// seen is forgotten (it was freed; made again, it starts afresh as on a
// single server), but not while the store is being rebuilt or just was:
// then the tubes the rebuild empties and makes again keep their counts.
func (k *keptCounters) done(gain bool) {
	if !gain {
		carryOver(k.nextTubes, k.tubes)
	}
	k.tubes, k.nextTubes = k.nextTubes, k.tubes
	clear(k.nextTubes)
	k.mu.Unlock()
}

// carryOver keeps in next the tubes of last it does not have: tubes a
// rebuild emptied and has not made again yet keep their counts.
func carryOver[V any](next, last map[string]V) {
	for name, v := range last {
		if _, ok := next[name]; !ok {
			next[name] = v
		}
	}
}
