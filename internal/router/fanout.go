package router

import "github.com/sproutmq/sprout/store"

// stats and list-tubes across groups (docs/design/shards.md 5.5): each
// group's leader answers its part, and the member puts them together as
// one server's. Every group's store holds the default tube (a store
// always does), so it counts, and is listed, once.

// SumStats is the queue's part of stats over the groups' parts: jobs by
// state, total-jobs, job-timeouts and current-tubes summed, the default
// tube once. Waiting is left 0: current-waiting is the member's own
// sessions blocked in a reserve, which summing the groups' waiters would
// count once per group a session waits in.
func SumStats(parts ...store.Stats) store.Stats {
	var sum store.Stats
	for _, p := range parts {
		sum.Urgent += p.Urgent
		sum.Ready += p.Ready
		sum.Reserved += p.Reserved
		sum.Delayed += p.Delayed
		sum.Buried += p.Buried
		sum.TotalJobs += p.TotalJobs
		sum.JobTimeouts += p.JobTimeouts
		sum.Tubes += p.Tubes
	}
	if len(parts) > 1 {
		sum.Tubes -= len(parts) - 1 // every group's default tube, but one
	}
	return sum
}

// MergeTubes merges the groups' list-tubes answers, each in its group's
// order (beanstalkd's: creation, swap-remove on free), into one list:
// by the stamps at the lists' heads, the earlier first (the earlier list
// on a tie), so each group's order is kept. That is the order of
// creation, beanstalkd's, while no tube listed was freed between the
// creations; otherwise only the order may differ, never the set. A name
// listed again (every group's default tube) is listed once, where it
// first comes. Its cost is the tubes times the groups.
func MergeTubes(lists ...[]TubeStamp) []string {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]string, 0, n)
	seen := make(map[string]bool, n)
	at := make([]int, len(lists))
	for {
		next := -1
		for i, l := range lists {
			if at[i] < len(l) && (next < 0 || l[at[i]].Stamp < lists[next][at[next]].Stamp) {
				next = i
			}
		}
		if next < 0 {
			return out
		}
		t := lists[next][at[next]]
		at[next]++
		if name := string(t.Name); !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
}
