package router

import (
	"math"

	"github.com/sproutmq/sprout/store"
)

// Group is one group's half of a session's reserve: the session's store
// client in that group, watching the session's tubes that live there.
// *store.Client is one.
type Group interface {
	BestReady() (best store.Candidate, ok, anyReady bool)
	TakeAtMost(bound store.Candidate) (*store.Job, store.Candidate, store.TakeResult)
}

// maxBoundedRounds is how many takes may be Lost before the next goes
// without a bound.
const maxBoundedRounds = 4

// noBound comes after every job.
var noBound = store.Candidate{Pri: math.MaxUint32, ID: math.MaxUint64}

// Outcome is how Take ended.
type Outcome struct {
	// Job is the job reserved, in Groups[Group]; nil when no watched,
	// unpaused tube had a ready job.
	Job   *store.Job
	Group int
	// AnyReady: some watched tube had a ready job, paused or not, at the
	// last look (beanstalkd's rule for DEADLINE_SOON).
	AnyReady bool
	// Rounds counts the looks; Unbounded, that the take went without a
	// bound after maxBoundedRounds were lost.
	Rounds    int
	Unbounded bool
}

// Take reserves the most urgent job ready in groups' watched tubes, as
// the package's comment says.
func Take(groups []Group) Outcome {
	for round := 1; ; round++ {
		out := Outcome{Group: -1, Rounds: round}
		var best, others store.Candidate
		othersOK := false
		for i, g := range groups {
			c, ok, any := g.BestReady()
			out.AnyReady = out.AnyReady || any
			switch {
			case !ok:
			case out.Group < 0:
				out.Group, best = i, c
			case c.Before(best):
				others, othersOK = best, true
				out.Group, best = i, c
			case !othersOK || c.Before(others):
				others, othersOK = c, true
			}
		}
		if out.Group < 0 {
			return out
		}
		bound := noBound
		if othersOK && round <= maxBoundedRounds {
			bound = others
		}
		out.Unbounded = round > maxBoundedRounds && othersOK
		j, _, r := groups[out.Group].TakeAtMost(bound)
		if r == store.Taken {
			out.Job = j
			return out
		}
	}
}
