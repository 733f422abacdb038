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

// takeFrom picks, from the groups' peeks of a round (counted from 1), the
// group to take from (-1: none has a ready job) and the take's bound: the
// best of the other groups' candidates, or none (unbounded) once
// maxBoundedRounds takes were lost.
func takeFrom(bests []Best, round int) (at int, bound store.Candidate, unbounded bool) {
	at = -1
	var best, others store.Candidate
	othersOK := false
	for i, b := range bests {
		switch {
		case !b.OK:
		case at < 0:
			at, best = i, b.Candidate
		case b.Candidate.Before(best):
			others, othersOK = best, true
			at, best = i, b.Candidate
		case !othersOK || b.Candidate.Before(others):
			others, othersOK = b.Candidate, true
		}
	}
	if othersOK && round <= maxBoundedRounds {
		return at, others, false
	}
	return at, noBound, othersOK
}

// Take reserves the most urgent job ready in groups' watched tubes, as
// the package's comment says.
func Take(groups []Group) Outcome {
	bests := make([]Best, len(groups))
	for round := 1; ; round++ {
		out := Outcome{Group: -1, Rounds: round}
		for i, g := range groups {
			c, ok, any := g.BestReady()
			bests[i] = Best{Candidate: c, OK: ok, AnyReady: any}
			out.AnyReady = out.AnyReady || any
		}
		at, bound, unbounded := takeFrom(bests, round)
		if at < 0 {
			return out
		}
		out.Group, out.Unbounded = at, unbounded
		j, _, r := groups[at].TakeAtMost(bound)
		if r == store.Taken {
			out.Job = j
			return out
		}
	}
}
