package member

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
)

// The cluster's groups grow from C to N, a multiple of C, while it serves
// (docs/design/shards.md 1.7, as built), driven by group 0's leader:
//
//  1. group 0 logs the new groups C…N−1, each with the members of its
//     replicas (replication.GroupsGrow: TubeBook.Grown). Every member
//     counts them from then on (routes, ids: group g's ids carry prefix
//     g), and those named start their replicas as the formation's do;
//     the new groups own no tube yet.
//  2. once each has a leader, each new group d takes its slots, the s
//     with s mod N = d, all from group d mod C: a placement whose key is
//     replication.SlotKey(d), carried as a prefix's is (placements.go),
//     the tubes it covers being those of such a slot that no exact or
//     prefix placement holds elsewhere. One at a time; each moves its
//     tubes live.
//
// Asked again with the same N, a growth left half way goes on: groups
// grown already are not grown again, and slots placed already stay.

// growTimeout bounds a growth's new groups, logged and elected; each
// placement of their slots then has its own bounds (placePrefix).
const growTimeout = 2 * time.Minute

// growResult is a growth's answer.
type growResult struct {
	From   int      `json:"from"`
	To     int      `json:"to"`
	Tubes  []string `json:"tubes"`
	Jobs   int      `json:"jobs"`
	Paused int64    `json:"paused_ms"` // the longest a placement held its tubes
}

// grew takes group 0's book as it changed here: the groups it names
// grown count from now on, and of those new to this member since it
// started (a growth applied now, not one its book held at start:
// seedGrown), this member starts the replicas they name it in. A replica
// of a grown group held before starts from the log at start
// (startShards), or, added since, as its leader's reports say
// (followReplicas), as a formation group's does. Called on group 0's
// goroutine: the starts go on one of their own.
func (m *Member) grew(b replication.TubeBook) {
	sh := m.shards
	n := int32(sh.groups())
	var start []replication.GrownGroup
	sh.grownMu.Lock()
	for _, g := range b.Grown {
		n = max(n, int32(g.ID)+1)
		if !sh.grownSeen[g.ID] {
			sh.grownSeen[g.ID] = true
			if slices.Contains(g.Replicas, m.node.Name()) {
				start = append(start, g)
			}
		}
	}
	sh.grownMu.Unlock()
	if n > sh.count.Load() {
		sh.count.Store(n)
	}
	if len(start) > 0 {
		go m.startGrown(start)
	}
}

// seedGrown notes the grown groups group 0's book names at start: grew
// starts no replica of them (a replica of one held here starts from the
// log; one that left must not come back empty).
func (m *Member) seedGrown() {
	sh := m.shards
	sh.grownMu.Lock()
	defer sh.grownMu.Unlock()
	sh.grownSeen = map[uint16]bool{}
	for _, g := range m.node.Tubes().Grown {
		sh.grownSeen[g.ID] = true
	}
}

// grownRetry is how soon a grown group's replica whose start failed is
// started again, doubling after each failure up to grownRetryMax.
const (
	grownRetry    = time.Second
	grownRetryMax = 30 * time.Second
)

// startGrown starts this member's replicas of the groups just grown, as
// the voters the growth named: unless one runs already, or the group's
// leader reports a membership without this member (it left since). One
// whose start failed is started again after grownRetry, then less and
// less often, until it starts, one of those holds, or the member stops:
// left down, the group runs a replica short until the member restarts,
// and when its start failed on enough of the group's members, it has no
// quorum, so no leader whose report could name the replica to start
// (followReplicas' startOriginal), and the growth stops there.
func (m *Member) startGrown(grown []replication.GrownGroup) {
	failed := m.startGrownOnce(grown, 0)
	for try, wait := 1, grownRetry; len(failed) > 0; try, wait = try+1, min(2*wait, grownRetryMax) {
		select {
		case <-m.node.Done():
			return
		case <-time.After(wait):
		}
		failed = m.startGrownOnce(failed, try)
	}
}

// startGrownOnce is a pass of startGrown over grown, its try-th again
// (0: the first), and returns the groups whose start failed. The first
// failure of each is logged at error, those after it at debug.
func (m *Member) startGrownOnce(grown []replication.GrownGroup, try int) (failed []replication.GrownGroup) {
	m.growMu.Lock()
	defer m.growMu.Unlock()
	held := m.clusterLog.Shared().Groups()
	reported := m.sessions.Reported()
	self := m.node.ID()
	for _, g := range grown {
		if m.shards.nodes[g.ID].Load() != nil || m.shards.leftAt(g.ID) > 0 {
			continue
		}
		if rep, ok := reported[g.ID]; ok && rep.Index > 0 && !slices.Contains(rep.Voters, self) && !slices.Contains(rep.Learners, self) {
			continue
		}
		replicas := g.Replicas
		if slices.Contains(held, g.ID) {
			replicas = nil // on its log (a try before attached it)
		}
		ctx, cancel := context.WithTimeout(context.Background(), shardsStartTimeout)
		err := m.startGroup(ctx, g.ID, replicas, false, replicas != nil && g.Preferred == m.node.Name())
		cancel()
		if err != nil {
			failed = append(failed, g)
			ev := m.log.Debug()
			if try == 0 {
				ev = m.log.Error()
			}
			ev.Err(err).Int("group", int(g.ID)).Int("try", try).Msg("cannot start the replica of a grown group: trying again")
			continue
		}
		m.log.Info().Int("group", int(g.ID)).Strs("replicas", g.Replicas).Int("try", try).Msg("a grown group's replica started here")
	}
	return failed
}

// slotSource is the group grown group d's slots come from: d modulo the
// groups' count before d's growth (the lowest group it grew).
func (m *Member) slotSource(d uint16) (uint16, bool) {
	rt := m.shards.routing.Load()
	mod, ok := rt.modulus[d]
	if !ok {
		return 0, false
	}
	before := d
	for g, n := range rt.modulus {
		if n == mod {
			before = min(before, g)
		}
	}
	return d % before, before > 0
}

// growing says whether this member drives a growth: one at a time. A
// flag, not a lock: the balancer's look (driving) took the lock for an
// instant each tick, and a growth asked then was refused as under way.
type growing struct{ on atomic.Bool }

func (g *growing) begin() bool { return g.on.CompareAndSwap(false, true) }
func (g *growing) end()        { g.on.Store(false) }
func (g *growing) busy() bool  { return g.on.Load() }

// registerGrowth adds POST /cluster/groups/grow {"to": N} to mux (any
// member: forwarded to group 0's leader, which drives it), guarded as
// the admin API's changes are.
func (m *Member) registerGrowth(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.Handle("POST /cluster/groups/grow", guard(http.HandlerFunc(m.serveGrow)))
}

func (m *Member) serveGrow(w http.ResponseWriter, r *http.Request) {
	if m.shards.serving(0) == nil {
		m.forwardMove(w, r, 0)
		return
	}
	to, ok := m.readCount(w, r)
	if !ok {
		return
	}
	res, err := m.growGroups(r.Context(), to)
	if err != nil {
		writeMoveError(w, err)
		return
	}
	m.log.Info().Int("from", res.From).Int("to", res.To).Int("tubes", len(res.Tubes)).Int("jobs", res.Jobs).
		Int64("paused_ms", res.Paused).Str("remote", r.RemoteAddr).Msg("groups grown")
	admin.WriteValue(w, http.StatusOK, res)
}

// growGroups grows the cluster's groups to n, this member leading group
// 0: the steps of this file's comment.
func (m *Member) growGroups(ctx context.Context, n int) (growResult, error) {
	if !m.growing.begin() {
		return growResult{}, fmt.Errorf("%w: a growth is under way", errTubeMove)
	}
	defer m.growing.end()
	b := m.node.Tubes()
	// The groups' count before this growth: the grown ones of an earlier
	// growth to n do not count.
	from := m.shards.groups()
	for _, g := range b.Grown {
		if int(g.Modulus) == n {
			from = min(from, int(g.ID))
		}
	}
	res := growResult{From: from, To: n, Tubes: []string{}}
	switch {
	case from < 2:
		return res, fmt.Errorf("%w: a cluster of one group does not grow (form it with --cluster-groups)", errTubeMove)
	case n <= from || n%from != 0 || n > meta.MaxGroups:
		return res, fmt.Errorf("%w: %d groups grow to a multiple of %d, at most %d, not to %d", errTubeMove, from, from, meta.MaxGroups, n)
	case from != m.shards.groups() && m.shards.groups() != n:
		return res, fmt.Errorf("%w: the groups are growing to %d", errTubeMove, m.shards.groups())
	}
	for _, g := range b.Grown {
		if _, placed := b.Prefixes[replication.SlotKey(g.ID)].Routes(); !placed && int(g.Modulus) != n {
			return res, fmt.Errorf("%w: group %d's slots, of a growth to %d, are not placed: grow to %d again first", errTubeMove, g.ID, g.Modulus, g.Modulus)
		}
	}
	grown, cancel := context.WithTimeout(ctx, growTimeout)
	defer cancel()
	if m.shards.groups() < n {
		placed, err := m.newGroups(from, n)
		if err != nil {
			return res, err
		}
		if err := m.node.ProposeGrow(grown, placed); err != nil {
			return res, err
		}
	}
	for d := from; d < n; d++ {
		if err := m.awaitLed(grown, uint16(d)); err != nil {
			return res, err
		}
	}
	for d := from; d < n; d++ {
		key := replication.SlotKey(uint16(d))
		if pl := m.node.Tubes().Prefixes[key]; pl.Active && pl.Group == uint16(d) {
			continue
		}
		placed, err := m.placePrefix(ctx, key, uint16(d))
		res.Tubes = append(res.Tubes, placed.Tubes...)
		res.Jobs += placed.Jobs
		res.Paused = max(res.Paused, placed.Paused)
		if err != nil {
			return res, fmt.Errorf("group %d's slots: %w", d, err)
		}
	}
	slices.Sort(res.Tubes)
	return res, nil
}

// awaitLed waits until group g has a leader this member knows the side
// port of.
func (m *Member) awaitLed(ctx context.Context, g uint16) error {
	for {
		l, err := m.awaitGroupLeader(ctx, g)
		if err != nil {
			return err
		}
		if l.Serving || l.HTTP != "" {
			return nil
		}
	}
}

// readCount reads a growth's body, {"to": N}, and answers r itself when
// it is not one.
func (m *Member) readCount(w http.ResponseWriter, r *http.Request) (int, bool) {
	var req struct {
		To *int `json:"to"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMemberRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.To == nil {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("want {\"to\": N}: %v", err)})
		return 0, false
	}
	return *req.To, true
}

// errGrowthUnplaced refuses a growth whose new groups could not elect a
// leader: too few members are up to hold a majority of each one's
// replicas.
var errGrowthUnplaced = errors.New("member: too few members up to place the new groups")

// newGroups are groups from…n−1, placed (placeGrown) on group 0's view
// of the members: up as the replica planners judge it (upIn); an error
// if too few are up.
func (m *Member) newGroups(from, n int) ([]replication.GrownGroup, error) {
	reported, names := m.sessions.Reported(), m.memberNames()
	cur := m.currentPlacement(reported, names)
	led := map[string]int{}
	for g := range m.shards.groups() {
		if name := m.leaderOf(uint16(g), reported, names); name != "" {
			led[name]++
		}
	}
	return placeGrown(cur, led, m.upIn(m.reachable()), from, n)
}

// placeGrown places groups from…n−1 on cur's members, each on R replicas
// (cur.Replicas), in turn on the members up holding the fewest replicas,
// then those down, draining ones last of all; each prefers as its first
// leader the replica that leads the fewest groups (led, counting those
// preferred before it; neither draining nor cordoned; none if no replica
// may lead).
//
// A member down (added and not started yet, restarting) is chosen only
// when fewer than R are up: its replica starts when it comes back
// (startOriginal), and the group runs on the others meanwhile, as a
// formation's group does with a member down. Placed first by its count
// alone (a member just added holds none), it went into every new group,
// and two of three replicas down left a group with no leader: the growth
// failed after growTimeout, and the group, with no report, held every
// move after it. A group that would have no majority of its replicas up
// is refused (errGrowthUnplaced), never logged: the operator starts the
// members, or removes those gone, and asks again.
func placeGrown(cur *meta.State, led map[string]int, up func(string) bool, from, n int) ([]replication.GrownGroup, error) {
	led = maps.Clone(led)
	held, rank := map[string]int{}, map[string]int{}
	mayLead := map[string]bool{}
	var members []string
	for _, mb := range cur.Members {
		members = append(members, mb.Name)
		switch {
		case mb.Draining:
			rank[mb.Name] = 2
		case !up(mb.Name):
			rank[mb.Name] = 1
		}
		mayLead[mb.Name] = mb.MayLead()
	}
	for _, g := range cur.Groups[1:] {
		for _, r := range g.Replicas {
			held[r.Member]++
		}
	}
	replicas := cur.Replicas
	var out []replication.GrownGroup
	for g := from; g < n; g++ {
		slices.SortStableFunc(members, func(a, b string) int { return cmp.Or(rank[a]-rank[b], held[a]-held[b]) })
		grp := replication.GrownGroup{ID: uint16(g), Modulus: uint16(n), Replicas: slices.Clone(members[:replicas])}
		slices.Sort(grp.Replicas)
		if ups := len(slices.DeleteFunc(slices.Clone(grp.Replicas), func(r string) bool { return !up(r) })); ups <= replicas/2 {
			return nil, fmt.Errorf("%w: group %d on %v would have %d of its %d replicas up, no majority to elect a leader: start the members down, or remove those gone, and grow again",
				errGrowthUnplaced, g, grp.Replicas, ups, replicas)
		}
		for _, r := range grp.Replicas {
			held[r]++
			if mayLead[r] && (grp.Preferred == "" || led[r] < led[grp.Preferred]) {
				grp.Preferred = r
			}
		}
		if grp.Preferred != "" {
			led[grp.Preferred]++
		}
		out = append(out, grp)
	}
	return out, nil
}
