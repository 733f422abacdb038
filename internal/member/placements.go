package member

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/store"
)

// A prefix P is placed in group D (docs/design/shards.md 3.4, "Prefix
// placement on top of the moves as built"): the tubes whose names start
// with P live in D from then on, an exact placement (a tube's move) or a
// longer prefix's placement excepted. The placement covers, in each group
// S, the tubes it would give to D: T starts with P, and the owner of T
// with P → D added is D (covers). Driven by group 0's leader:
//
//  1. group 0 logs the placement pending (replication.PrefixPending):
//     routes do not follow it yet, and no other prefix's may begin;
//  2. D thaws a freeze of P left from an earlier placement that took P's
//     tubes out of D ("open");
//  3. each other group S, at once, freezes P (PrefixFreeze: S then refuses
//     every tube P covers, existing or not, as a tube's freeze does), and
//     its leader hands each covered tube it holds to D's leader, as a
//     tube's move does (export, adopt), answering with what it handed
//     ("take");
//  4. group 0 decides: the placement active (PrefixPlace, naming the
//     groups it took tubes from: a job keeps its id, so commands by id
//     search there) or aborted (PrefixAbort), whichever commits first;
//  5. placed: each S drops the covered tubes' jobs, then marks P moved
//     out, refusing its covered tubes for good ("finish"); aborted: D drops
//     the covered tubes it holds and does not own ("drop"), and each S
//     thaws P ("thaw").
//
// A placement whose driver is lost is aborted by group 0's next leader
// (resolvePrefixes) unless it was placed, and carried to its end either
// way; a group's leader finishes or thaws its own freeze once group 0 has
// decided. One prefix's placement is under way at a time, and a tube's
// move of a tube a pending placement covers is refused (both check after
// their freeze is in the source's log, so one of two racing sees the
// other).

// prefixPlaceResult is a placement's answer.
type prefixPlaceResult struct {
	Prefix string `json:"prefix"`
	Group  uint16 `json:"group"`
	// Tubes are the tubes it moved into Group, and Jobs their jobs.
	Tubes []string `json:"tubes"`
	Jobs  int      `json:"jobs"`
	// Paused is how long the covered tubes' commands were refused at
	// most, from the first group's freeze to the decision, in
	// milliseconds.
	Paused int64 `json:"paused_ms"`
}

// prefixTaken is a take step's answer: what a group handed over, and
// the groups it went to.
type prefixTaken struct {
	Tubes []string `json:"tubes"`
	Jobs  int      `json:"jobs"`
	Into  []uint16 `json:"into,omitempty"`
	// Held is how long the group had held the prefix's tubes frozen when
	// it answered, in milliseconds (their copies go before the freeze).
	Held int64 `json:"held_ms,omitempty"`
}

// covers reports whether placing prefix in group to takes tube to it, as
// the member routes now; a key of a grown group's slots
// (replication.SlotKey) takes the tubes of those slots.
func (m *Member) covers(tube, prefix string, to uint16) bool {
	rt := m.shards.routing.Load()
	if g, slots := replication.SlotGroup(prefix); slots {
		mod := rt.modulus[g]
		return mod > 0 && rt.state.OwnerPlacingSlots(tube, g, mod) == to
	}
	return len(tube) >= len(prefix) && tube[:len(prefix)] == prefix &&
		rt.state.OwnerPlacing(tube, meta.Placement{Prefix: prefix, Group: to}) == to
}

// takes reports whether the placement of prefix in group to (to
// replication.Unplaced: its undoing) takes tube out of group g, as the
// member routes now, and where to.
func (m *Member) takes(g uint16, tube, prefix string, to uint16) (uint16, bool) {
	if to != replication.Unplaced {
		return to, g != to && m.covers(tube, prefix, to)
	}
	if len(tube) < len(prefix) || tube[:len(prefix)] != prefix {
		return 0, false
	}
	dest := m.shards.routing.Load().state.OwnerWithout(tube, prefix)
	return dest, dest != g
}

// brings reports whether the placement of prefix in group to (or its
// undoing) brings tube into group g.
func (m *Member) brings(g uint16, tube, prefix string, to uint16) bool {
	if to != replication.Unplaced {
		return g == to && m.covers(tube, prefix, to)
	}
	return len(tube) >= len(prefix) && tube[:len(prefix)] == prefix &&
		m.shards.routing.Load().state.OwnerWithout(tube, prefix) == g
}

// parties are the groups a placement of a prefix in group to takes tubes
// from, and those it brings them into: every other group, and to; or,
// undoing the placement in group was, was, and every other group; or, a
// grown group's slots, the one group that has them, and to.
func (m *Member) parties(key string, to, was uint16) (from, into []uint16) {
	if d, slots := replication.SlotGroup(key); slots {
		if src, ok := m.slotSource(d); ok {
			return []uint16{src}, []uint16{to}
		}
	}
	one, rest := to, &from
	if to == replication.Unplaced {
		one, rest = was, &into
	}
	for g := range uint16(m.shards.groups()) {
		if g != one {
			*rest = append(*rest, g)
		}
	}
	if to == replication.Unplaced {
		return []uint16{was}, into
	}
	return from, []uint16{to}
}

// frozenTube reports whether group g refuses tube: a tube's move froze
// it, or a prefix's placement covers it (router.ServerConfig.Frozen).
func (m *Member) frozenTube(g uint16, tube []byte) bool {
	n := m.shards.node(g)
	if n == nil {
		return false
	}
	if n.FrozenTube(tube) {
		return true
	}
	for p, f := range n.Tubes().FrozenPrefixes {
		if p[0] == '#' || len(tube) >= len(p) && string(tube[:len(p)]) == p {
			if _, ok := m.takes(g, string(tube), p, f.To); ok {
				return true
			}
		}
	}
	return false
}

// coveredTubes are the tubes of group g's store (n) that the placement of
// prefix in group to takes out of g, each with where it goes.
func (m *Member) coveredTubes(n *replication.Node, g uint16, prefix string, to uint16) map[string]uint16 {
	out := map[string]uint16{}
	for _, name := range n.Store().TubeNames() {
		if dest, ok := m.takes(g, name, prefix, to); ok {
			out[name] = dest
		}
	}
	return out
}

// registerPlacements adds the endpoints of prefixes' placements to mux,
// guarded as the admin API's changes are:
//
//	POST /cluster/placements/{prefix}         {"group": N}: place the prefix (any member)
//	DELETE /cluster/placements/{prefix}       undo its placement: its tubes go where they would be without it
//	POST /cluster/placements/{prefix}/{step}  a group's leader's part (?group=G&to=D&move=E):
//	                                          open, take, finish, drop, thaw
func (m *Member) registerPlacements(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.Handle("POST /cluster/placements/{prefix}", guard(http.HandlerFunc(m.servePlace)))
	mux.Handle("DELETE /cluster/placements/{prefix}", guard(http.HandlerFunc(m.servePlace)))
	mux.Handle("POST /cluster/placements/{prefix}/{step}", guard(http.HandlerFunc(m.servePrefixStep)))
}

func (m *Member) servePlace(w http.ResponseWriter, r *http.Request) {
	prefix := r.PathValue("prefix")
	// A tube's name is the protocol's: so is a prefix of one, which keeps
	// the keys of grown groups' slots ("#3") out of reach.
	if !codec.ValidTubeName([]byte(prefix)) {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("%q is not a prefix of tubes' names", prefix)})
		return
	}
	if m.shards.serving(0) == nil {
		m.forwardMove(w, r, 0) // group 0's leader drives it
		return
	}
	to := replication.Unplaced
	if r.Method != http.MethodDelete {
		var ok bool
		if to, ok = m.readGroup(w, r); !ok {
			return
		}
	}
	res, err := m.placePrefix(r.Context(), prefix, to) // bounded step by step
	if err != nil {
		writeMoveError(w, err)
		return
	}
	m.log.Info().Str("prefix", prefix).Int("group", int(res.Group)).Bool("unset", to == replication.Unplaced).Int("tubes", len(res.Tubes)).
		Int("jobs", res.Jobs).Int64("paused_ms", res.Paused).Str("remote", r.RemoteAddr).Msg("prefix placed")
	if to == replication.Unplaced {
		admin.WriteValue(w, http.StatusOK, map[string]any{"prefix": prefix, "unset": true, "tubes": res.Tubes, "jobs": res.Jobs, "paused_ms": res.Paused})
		return
	}
	admin.WriteValue(w, http.StatusOK, res)
}

// placing guards the placement this member drives: one at a time.
type placing struct {
	mu   sync.Mutex
	move uint64 // the placement driven here, 0 if none
}

func (p *placing) begin(move uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.move != 0 {
		return false
	}
	p.move = move
	return true
}

func (p *placing) end() { p.mu.Lock(); p.move = 0; p.mu.Unlock() }

// busy reports whether a placement is driven here.
func (p *placing) busy() bool { return !p.drives(0) }

func (p *placing) drives(move uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.move == move
}

// placePrefix places prefix in group to, this member leading group 0:
// the steps of this file's comment. Each has its own bound: the take
// (each source copying its tubes while they serve, then freezing and
// handing them) stageTimeout and a step's more, the others a step's
// (Member.stepTimeout) each; ctx bounds the whole.
func (m *Member) placePrefix(ctx context.Context, prefix string, to uint16) (prefixPlaceResult, error) {
	res := prefixPlaceResult{Prefix: prefix, Group: to, Tubes: []string{}}
	n := m.node
	move := rand.Uint64()>>1 | 1
	if !m.placing.begin(move) {
		return res, fmt.Errorf("%w: a placement is under way", errTubeMove)
	}
	defer m.placing.end()
	b := n.Tubes()
	placed, ok := b.Prefixes[prefix]
	switch p, pl, busy := b.Pending(); {
	case busy:
		return res, fmt.Errorf("%w: the placement of prefix %q in group %d is under way", errTubeMove, p, pl.Group)
	case ok && placed.Active && placed.Group == to:
		return res, fmt.Errorf("%w: prefix %q is placed in group %d already", errTubeMove, prefix, to)
	case to == replication.Unplaced && !ok:
		return res, fmt.Errorf("%w: prefix %q is not placed", errTubeMove, prefix)
	case len(b.Dropping) > 0:
		return res, fmt.Errorf("%w: an aborted placement's copies are being dropped", errTubeMove)
	}
	steps := phases{whole: ctx}
	defer steps.end()
	ctx = steps.next(m.stepTimeout())
	if err := m.awaitFormed(ctx); err != nil {
		return res, err
	}
	if err := n.ProposePrefix(ctx, replication.PrefixPending, prefix, move, to, nil); err != nil {
		return res, err
	}
	if n.Tubes().Prefixes[prefix].Move != move {
		return res, fmt.Errorf("%w: another placement is under way", errTubeMove)
	}
	var frozeAt time.Time // the first group's freeze, as this member's clock has it
	sources, dests := m.parties(prefix, to, placed.Group)
	// The destinations first: each thaws a freeze of the prefix left by
	// an earlier placement that took its tubes out of it.
	err := m.inGroups(dests, func(g uint16) error { return m.prefixStep(ctx, g, "open", prefix, move, to, nil) })
	touched := map[uint16]bool{} // the groups tubes left, or went to when undone
	if err == nil {
		var mu sync.Mutex
		ctx := steps.next(stageTimeout + m.stepTimeout())
		err = m.inGroups(sources, func(g uint16) error {
			var out prefixTaken
			if err := m.prefixStep(ctx, g, "take", prefix, move, to, &out); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if at := time.Now().Add(-time.Duration(out.Held) * time.Millisecond); frozeAt.IsZero() || at.Before(frozeAt) {
				frozeAt = at
			}
			res.Tubes = append(res.Tubes, out.Tubes...)
			res.Jobs += out.Jobs
			if len(out.Tubes) > 0 && to != replication.Unplaced {
				touched[g] = true
			}
			for _, d := range out.Into {
				touched[d] = true
			}
			return nil
		})
	}
	ctx = steps.next(m.stepTimeout())
	if err == nil {
		err = n.ProposePrefix(ctx, replication.PrefixPlace, prefix, move, to, slices.Sorted(maps.Keys(touched)))
	}
	if err == nil && !n.Tubes().Decided[move] {
		err = fmt.Errorf("%w: the placement was aborted", errTubeMove)
	}
	if err != nil {
		return res, m.abortPrefix(ctx, prefix, move, to, placed.Group, err)
	}
	if !frozeAt.IsZero() {
		res.Paused = time.Since(frozeAt).Milliseconds()
	}
	slices.Sort(res.Tubes)
	return res, m.endPrefix(ctx, prefix, move, to, placed.Group, true)
}

// awaitFormed waits, until ctx ends, for group 0's book to hold the
// cluster's formation, which this member records as its leader
// (recordFormation): a placement begins only then (Node.ProposePrefix).
func (m *Member) awaitFormed(ctx context.Context) error {
	for m.node.Tubes().Formed.Groups == 0 {
		select {
		case <-ctx.Done():
			return replication.ErrNotFormed
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// abortPrefix ends a placement that was not made active: group 0 (led
// here) decides it aborted, unless it was placed meanwhile (then it
// finishes), and the groups undo their parts. It returns why, or what
// stopped the abort (the resolver then carries it on).
func (m *Member) abortPrefix(ctx context.Context, prefix string, move uint64, to, was uint16, why error) error {
	ctx, cancel := abortContext(ctx)
	defer cancel()
	n := m.node
	if err := n.ProposePrefix(ctx, replication.PrefixAbort, prefix, move, to, nil); err != nil {
		return fmt.Errorf("%v; its abort is not decided yet (%v)", why, err)
	}
	placed := n.Tubes().Decided[move]
	if err := m.endPrefix(ctx, prefix, move, to, was, placed); err != nil {
		return fmt.Errorf("%v; %v", why, err)
	}
	if placed {
		return nil
	}
	if err := n.ProposePrefix(ctx, replication.PrefixDropped, prefix, move, to, nil); err != nil {
		return fmt.Errorf("%v; its copies are dropped, not yet recorded so (%v)", why, err)
	}
	m.log.Warn().Str("prefix", prefix).Int("group", int(to)).Err(why).Msg("prefix placement aborted")
	return why
}

// endPrefix carries a decided placement (of prefix in group to, or the
// undoing of the one in was) to its end in every group: placed, the
// sources drop what they handed over; aborted, the destinations drop what
// they took and the sources thaw.
func (m *Member) endPrefix(ctx context.Context, prefix string, move uint64, to, was uint16, placed bool) error {
	sources, dests := m.parties(prefix, to, was)
	if !placed {
		if err := m.inGroups(dests, func(g uint16) error { return m.prefixStep(ctx, g, "drop", prefix, move, to, nil) }); err != nil {
			return fmt.Errorf("what was taken is not all dropped yet (%w)", err)
		}
	}
	step := map[bool]string{true: "finish", false: "thaw"}[placed]
	return m.inGroups(sources, func(g uint16) error { return m.prefixStep(ctx, g, step, prefix, move, to, nil) })
}

// inGroups runs fn for each of groups at once, and returns their errors,
// each with its group's.
func (m *Member) inGroups(groups []uint16, fn func(g uint16) error) error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			if err := fn(g); err != nil {
				errs[i] = fmt.Errorf("group %d: %w", g, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prefixStep asks group g's leader for its step of move. Every step but
// the take may be taken twice (each finds what it did done), so those
// follow a leader lost under them to the group's next (callLeaderAgain);
// a take lost so is the placement's abort, which such steps carry out.
func (m *Member) prefixStep(ctx context.Context, g uint16, step, prefix string, move uint64, to uint16, out any) error {
	q := url.Values{"group": {strconv.Itoa(int(g))}, "to": {strconv.Itoa(int(to))}, "move": {strconv.FormatUint(move, 16)}}
	path := "/cluster/placements/" + url.PathEscape(prefix) + "/" + step + "?" + q.Encode()
	if step == "take" {
		return m.callLeader(ctx, g, path, nil, out)
	}
	return m.callLeaderAgain(ctx, g, path, nil, out, nil)
}

func (m *Member) servePrefixStep(w http.ResponseWriter, r *http.Request) {
	n, g, move, ok := m.servedGroup(w, r, "group")
	if !ok {
		return
	}
	to, err := strconv.ParseUint(r.URL.Query().Get("to"), 10, 16)
	if err != nil || int(to) >= m.shards.groups() && uint16(to) != replication.Unplaced || move == 0 {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: "want ?group=G&to=D&move=ID"})
		return
	}
	prefix := r.PathValue("prefix")
	key := prefixIn(prefix, g)
	if !m.tubeMoves.begin(key) {
		admin.WriteError(w, &admin.Error{Status: http.StatusConflict, Message: fmt.Sprintf("prefix %q is busy in group %d", prefix, g)})
		return
	}
	defer m.tubeMoves.end(key)
	if hook := m.beforePrefixStep.Load(); hook != nil {
		(*hook)(g, r.PathValue("step"))
	}
	var out any = map[string]bool{"done": true}
	switch step := r.PathValue("step"); step {
	case "open":
		if err = m.awaitPending(r.Context(), prefix, move); err != nil {
			break
		}
		if err = m.endPrefixesOut(r.Context(), n, g, move); err != nil {
			break
		}
		if f, ok := n.Tubes().FrozenPrefixes[prefix]; ok {
			err = n.ProposePrefix(r.Context(), replication.PrefixThaw, prefix, f.Move, 0, nil)
		}
	case "take":
		out, err = m.takePrefix(r.Context(), n, g, prefix, move, uint16(to))
	case "finish":
		err = m.finishPrefix(r.Context(), n, g, prefix, move, uint16(to))
	case "drop", "thaw":
		if err = m.awaitDecided(r.Context(), move, false); err != nil {
			break
		}
		if step == "thaw" {
			err = n.ProposePrefix(r.Context(), replication.PrefixThaw, prefix, move, 0, nil)
			break
		}
		for _, tube := range n.Store().TubeNames() {
			if m.brings(g, tube, prefix, uint16(to)) && m.shards.routing.Load().state.Owner(tube) != g && err == nil {
				err = dropTube(r.Context(), n, tube)
			}
		}
		// Its copies gone, the placement's adopts here hold nothing back
		// (Member.frozen), as a tube's abort's drop ends its own.
		for tube := range n.Tubes().Adopted {
			if err == nil {
				err = endAdopt(r.Context(), n, tube, move)
			}
		}
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		writeMoveError(w, err)
		return
	}
	admin.WriteValue(w, http.StatusOK, out)
}

// takePrefix is group g's take step, this member leading it: copy each
// tube the prefix covers here to its new group while it serves
// (stageTube, as a tube's move does), freeze the prefix, then hand each
// to its new group's leader: what changed since its copy, or the whole
// of a tube made meanwhile.
func (m *Member) takePrefix(ctx context.Context, n *replication.Node, g uint16, prefix string, move uint64, to uint16) (out prefixTaken, _ error) {
	out.Tubes = []string{}
	// The copies have their own bound, as a move's do; the steps before
	// and after them a step's each.
	steps := phases{whole: ctx}
	defer steps.end()
	ctx = steps.next(m.stepTimeout())
	if err := m.awaitPending(ctx, prefix, move); err != nil {
		return out, err
	}
	if err := m.endPrefixesOut(ctx, n, g, move); err != nil {
		return out, err
	}
	ctx = steps.next(stageTimeout)
	staged := map[string]*store.TubeCopy{}
	stagedTo := map[string]uint16{}
	for tube, dest := range m.coveredTubes(n, g, prefix, to) {
		since, err := m.stageTube(ctx, n, tube, move, g, dest)
		if err != nil {
			return out, err
		}
		if since != nil {
			staged[tube], stagedTo[tube] = since, dest
			defer n.Store().EndTubeCopy([]byte(tube), since) // when no export ended it
		}
	}
	if hook := m.afterStage.Load(); hook != nil && len(staged) > 0 {
		(*hook)()
	}
	ctx = steps.next(m.stepTimeout())
	if err := n.ProposePrefix(ctx, replication.PrefixFreeze, prefix, move, to, nil); err != nil {
		return out, err
	}
	frozen := time.Now()
	defer func() { out.Held = time.Since(frozen).Milliseconds() }()
	m.sessions.Refreeze(g)
	for tube, f := range n.Tubes().Frozen {
		if _, ok := m.takes(g, tube, prefix, to); ok && !f.Moved {
			return out, fmt.Errorf("%w: tube %q is moving to group %d", errTubeMove, tube, f.To)
		}
	}
	covered := m.coveredTubes(n, g, prefix, to)
	hand := maps.Clone(covered)
	// A tube copied and freed since is handed too: its copies there go
	// (all its ids are gone), or they would be its jobs once placed.
	maps.Copy(hand, stagedTo)
	for tube, dest := range hand {
		jobs, err := m.handTube(ctx, n, tube, move, g, dest, staged[tube])
		if err != nil {
			return out, err
		}
		if _, ok := covered[tube]; !ok {
			continue
		}
		out.Tubes = append(out.Tubes, tube)
		out.Jobs += jobs
		if !slices.Contains(out.Into, dest) {
			out.Into = append(out.Into, dest)
		}
	}
	return out, nil
}

// prefixIn is tubeMoving's key of prefix in group g: the steps of its
// placements there, and the resolver's (a tube's name has no space).
func prefixIn(prefix string, g uint16) string { return fmt.Sprintf("prefix %s in %d", prefix, g) }

// endPrefixesOut ends what earlier placements, of any prefix, not move,
// left frozen in n's group g and not marked moved out, before move goes
// on or tubes come in (their copies here would beat the jobs coming in):
// one group 0 placed is finished (the tubes it covers here are copies),
// one it aborted is thawed, and one it has not decided refuses.
func (m *Member) endPrefixesOut(ctx context.Context, n *replication.Node, g uint16, move uint64) error {
	for prefix, f := range n.Tubes().FrozenPrefixes {
		if f.Moved || f.Move == move {
			continue
		}
		placed, decided := m.node.Tubes().Decided[f.Move]
		var err error
		switch {
		case !decided:
			err = fmt.Errorf("%w: prefix %q's placement %x is not over", errTubeMove, prefix, f.Move)
		case placed:
			err = m.finishPrefix(ctx, n, g, prefix, f.Move, f.To)
		default:
			err = n.ProposePrefix(ctx, replication.PrefixThaw, prefix, f.Move, 0, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// awaitPending waits until this member's replica of group 0 shows move
// as the pending placement of prefix: a step of a placement group 0 has
// decided meanwhile (a step sent again, or late) is refused.
func (m *Member) awaitPending(ctx context.Context, prefix string, move uint64) error {
	for {
		b := m.node.Tubes()
		if _, decided := b.Decided[move]; decided {
			return fmt.Errorf("%w: placement %x of prefix %q is over", errTubeMove, move, prefix)
		}
		if pl := b.Prefixes[prefix]; pl.Move == move && !pl.Active {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// finishPrefix is a group's finish step: once this member routes by the
// placement, the covered tubes' jobs go, and the prefix is marked moved
// out.
func (m *Member) finishPrefix(ctx context.Context, n *replication.Node, g uint16, prefix string, move uint64, to uint16) error {
	if err := m.awaitDecided(ctx, move, true); err != nil {
		return err
	}
	if f := n.Tubes().FrozenPrefixes[prefix]; f.Move != move || f.Moved {
		return nil // finished, or a later placement of the prefix is here: this step is late
	}
	for tube := range m.coveredTubes(n, g, prefix, to) {
		if err := dropTube(ctx, n, tube); err != nil {
			return err
		}
	}
	if f := n.Tubes().FrozenPrefixes[prefix]; f.Move == move && !f.Moved {
		return n.ProposePrefix(ctx, replication.PrefixMovedOut, prefix, move, 0, nil)
	}
	return nil
}

// awaitDecided waits until this member's replica of group 0 has decided
// move as placed says (the member routes by it then); decided otherwise
// is a refusal.
func (m *Member) awaitDecided(ctx context.Context, move uint64, placed bool) error {
	for {
		if got, ok := m.node.Tubes().Decided[move]; ok {
			if got != placed {
				return fmt.Errorf("%w: move %x was decided otherwise", errTubeMove, move)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// resolvePrefixes carries on the placements no driver here drives, each
// seen undriven at the member's previous tick too (a driver elsewhere
// finishes its own within milliseconds): as group 0's leader, a pending
// one is aborted (unless it was placed first) and ended in every group;
// as another group's leader, a freeze group 0 has decided is finished or
// thawed here. Called from the member's balance loop only.
func (m *Member) resolvePrefixes() {
	seen := m.prefixesSeen
	m.prefixesSeen = map[string]uint64{}
	stale := func(key string, move uint64) bool {
		m.prefixesSeen[key] = move
		return seen[key] == move
	}
	if m.shards.serving(0) != nil {
		if prefix, pl, ok := m.node.Tubes().Pending(); ok && !m.placing.drives(pl.Move) && stale("pending "+prefix, pl.Move) {
			go func() {
				if !m.placing.begin(pl.Move) {
					return
				}
				defer m.placing.end()
				ctx, cancel := context.WithTimeout(context.Background(), tubeMoveTimeout)
				defer cancel()
				err := m.abortPrefix(ctx, prefix, pl.Move, pl.Group, pl.Was, fmt.Errorf("%w: its driver was lost", errTubeMove))
				m.log.Info().Str("prefix", prefix).Err(err).Msg("a prefix's placement, left by its driver, resolved")
			}()
		}
	}
	if m.shards.serving(0) != nil {
		for move, d := range m.node.Tubes().Dropping {
			if m.placing.drives(move) || !stale(fmt.Sprintf("dropping %x", move), move) {
				continue
			}
			go func() {
				if !m.placing.begin(move) {
					return
				}
				defer m.placing.end()
				ctx, cancel := context.WithTimeout(context.Background(), tubeMoveTimeout)
				defer cancel()
				err := m.endPrefix(ctx, d.Prefix, move, d.To, d.Was, false)
				if err == nil {
					err = m.node.ProposePrefix(ctx, replication.PrefixDropped, d.Prefix, move, d.To, nil)
				}
				m.log.Info().Str("prefix", d.Prefix).Err(err).Msg("an aborted placement's copies, left by its driver, dropped")
			}()
		}
	}
	decided := m.node.Tubes().Decided
	for g := range m.shards.groups() {
		if m.shards.serving(uint16(g)) == nil {
			continue
		}
		n := m.shards.node(uint16(g))
		for prefix, f := range n.Tubes().FrozenPrefixes {
			placed, ok := decided[f.Move]
			key := prefixIn(prefix, uint16(g))
			if f.Moved || !ok || m.placing.drives(f.Move) || !stale(key, f.Move) {
				continue
			}
			go func() {
				if !m.tubeMoves.begin(key) {
					return
				}
				defer m.tubeMoves.end(key)
				if now, ok := n.Tubes().FrozenPrefixes[prefix]; !ok || now != f {
					return // resolved meanwhile
				}
				ctx, cancel := context.WithTimeout(context.Background(), tubeMoveTimeout)
				defer cancel()
				var err error
				if placed {
					err = m.finishPrefix(ctx, n, uint16(g), prefix, f.Move, f.To)
				} else {
					err = n.ProposePrefix(ctx, replication.PrefixThaw, prefix, f.Move, 0, nil)
				}
				m.log.Info().Str("prefix", prefix).Int("group", g).Bool("placed", placed).Err(err).Msg("a prefix's freeze resolved")
			}()
		}
	}
}
