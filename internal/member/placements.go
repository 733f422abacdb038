package member

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
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
	// most, from the pending placement to its decision, in milliseconds.
	Paused int64 `json:"paused_ms"`
}

// prefixTaken is a take step's answer: what a group handed to D.
type prefixTaken struct {
	Tubes []string `json:"tubes"`
	Jobs  int      `json:"jobs"`
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
		if (p[0] == '#' || len(tube) >= len(p) && string(tube[:len(p)]) == p) && m.covers(string(tube), p, f.To) {
			return true
		}
	}
	return false
}

// coveredTubes are the tubes of st's that placing prefix in group to
// takes there.
func (m *Member) coveredTubes(n *replication.Node, prefix string, to uint16) []string {
	var out []string
	for _, name := range n.Store().TubeNames() {
		if m.covers(name, prefix, to) {
			out = append(out, name)
		}
	}
	return out
}

// registerPlacements adds the endpoints of prefixes' placements to mux,
// guarded as the admin API's changes are:
//
//	POST /cluster/placements/{prefix}         {"group": N}: place the prefix (any member)
//	POST /cluster/placements/{prefix}/{step}  a group's leader's part (?group=G&to=D&move=E):
//	                                          open, take, finish, drop, thaw
func (m *Member) registerPlacements(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.Handle("POST /cluster/placements/{prefix}", guard(http.HandlerFunc(m.servePlace)))
	mux.Handle("POST /cluster/placements/{prefix}/{step}", guard(http.HandlerFunc(m.servePrefixStep)))
}

func (m *Member) servePlace(w http.ResponseWriter, r *http.Request) {
	prefix := r.PathValue("prefix")
	if prefix == "" || len(prefix) > maxTubeName {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("%q is not a prefix of tubes' names", prefix)})
		return
	}
	if m.shards.serving(0) == nil {
		m.forwardMove(w, r, 0) // group 0's leader drives it
		return
	}
	to, ok := m.readGroup(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), tubeMoveTimeout)
	defer cancel()
	res, err := m.placePrefix(ctx, prefix, to)
	if err != nil {
		writeMoveError(w, err)
		return
	}
	m.log.Info().Str("prefix", prefix).Int("group", int(res.Group)).Int("tubes", len(res.Tubes)).Int("jobs", res.Jobs).
		Int64("paused_ms", res.Paused).Str("remote", r.RemoteAddr).Msg("prefix placed")
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

func (p *placing) drives(move uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.move == move
}

// placePrefix places prefix in group to, this member leading group 0:
// the steps of this file's comment.
func (m *Member) placePrefix(ctx context.Context, prefix string, to uint16) (prefixPlaceResult, error) {
	res := prefixPlaceResult{Prefix: prefix, Group: to, Tubes: []string{}}
	n := m.node
	move := rand.Uint64()>>1 | 1
	if !m.placing.begin(move) {
		return res, fmt.Errorf("%w: a placement is under way", errTubeMove)
	}
	defer m.placing.end()
	b := n.Tubes()
	if p, pl, busy := b.Pending(); busy {
		return res, fmt.Errorf("%w: the placement of prefix %q in group %d is under way", errTubeMove, p, pl.Group)
	}
	if pl, ok := b.Prefixes[prefix]; ok && pl.Active && pl.Group == to {
		return res, fmt.Errorf("%w: prefix %q is placed in group %d already", errTubeMove, prefix, to)
	}
	if err := n.ProposePrefix(ctx, replication.PrefixPending, prefix, move, to, nil); err != nil {
		return res, err
	}
	if n.Tubes().Prefixes[prefix].Move != move {
		return res, fmt.Errorf("%w: another placement is under way", errTubeMove)
	}
	begun := time.Now()
	err := m.prefixStep(ctx, to, "open", prefix, move, to, nil)
	var from []uint16
	if err == nil {
		var mu sync.Mutex
		err = m.eachGroup(func(g uint16) error {
			if g == to {
				return nil
			}
			var out prefixTaken
			if err := m.prefixStep(ctx, g, "take", prefix, move, to, &out); err != nil {
				return fmt.Errorf("group %d: %w", g, err)
			}
			mu.Lock()
			defer mu.Unlock()
			res.Tubes = append(res.Tubes, out.Tubes...)
			res.Jobs += out.Jobs
			if len(out.Tubes) > 0 {
				from = append(from, g)
			}
			return nil
		})
	}
	if err == nil {
		slices.Sort(from)
		err = n.ProposePrefix(ctx, replication.PrefixPlace, prefix, move, to, from)
	}
	if err == nil && !n.Tubes().Decided[move] {
		err = fmt.Errorf("%w: the placement was aborted", errTubeMove)
	}
	if err != nil {
		return res, m.abortPrefix(ctx, prefix, move, to, err)
	}
	res.Paused = time.Since(begun).Milliseconds()
	slices.Sort(res.Tubes)
	return res, m.endPrefix(ctx, prefix, move, to, true)
}

// abortPrefix ends a placement that was not made active: group 0 (led
// here) decides it aborted, unless it was placed meanwhile (then it
// finishes), and the groups undo their parts. It returns why, or what
// stopped the abort (the resolver then carries it on).
func (m *Member) abortPrefix(ctx context.Context, prefix string, move uint64, to uint16, why error) error {
	n := m.node
	if err := n.ProposePrefix(ctx, replication.PrefixAbort, prefix, move, to, nil); err != nil {
		return fmt.Errorf("%v; its abort is not decided yet (%v)", why, err)
	}
	placed := n.Tubes().Decided[move]
	if err := m.endPrefix(ctx, prefix, move, to, placed); err != nil {
		return fmt.Errorf("%v; %v", why, err)
	}
	if placed {
		return nil
	}
	m.log.Warn().Str("prefix", prefix).Int("group", int(to)).Err(why).Msg("prefix placement aborted")
	return why
}

// endPrefix carries a decided placement to its end in every group:
// placed, the others drop what they handed over; aborted, D drops what it
// took and the others thaw.
func (m *Member) endPrefix(ctx context.Context, prefix string, move uint64, to uint16, placed bool) error {
	if !placed {
		if err := m.prefixStep(ctx, to, "drop", prefix, move, to, nil); err != nil {
			return fmt.Errorf("group %d has not dropped what it took yet (%w)", to, err)
		}
	}
	step := map[bool]string{true: "finish", false: "thaw"}[placed]
	return m.eachGroup(func(g uint16) error {
		if g == to {
			return nil
		}
		if err := m.prefixStep(ctx, g, step, prefix, move, to, nil); err != nil {
			return fmt.Errorf("group %d: %s: %w", g, step, err)
		}
		return nil
	})
}

// eachGroup runs fn for every group at once, and returns the first error.
func (m *Member) eachGroup(fn func(g uint16) error) error {
	errs := make([]error, m.shards.groups())
	var wg sync.WaitGroup
	for g := range errs {
		wg.Go(func() { errs[g] = fn(uint16(g)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prefixStep asks group g's leader for its step of move.
func (m *Member) prefixStep(ctx context.Context, g uint16, step, prefix string, move uint64, to uint16, out any) error {
	q := url.Values{"group": {strconv.Itoa(int(g))}, "to": {strconv.Itoa(int(to))}, "move": {strconv.FormatUint(move, 16)}}
	return m.callLeader(ctx, g, "/cluster/placements/"+url.PathEscape(prefix)+"/"+step+"?"+q.Encode(), nil, out)
}

func (m *Member) servePrefixStep(w http.ResponseWriter, r *http.Request) {
	n, g, move, ok := m.servedGroup(w, r, "group")
	if !ok {
		return
	}
	to, err := strconv.ParseUint(r.URL.Query().Get("to"), 10, 16)
	if err != nil || int(to) >= m.shards.groups() || move == 0 {
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
	var out any = map[string]bool{"done": true}
	switch step := r.PathValue("step"); step {
	case "open":
		if err = m.endPrefixOut(r.Context(), n, prefix, move); err != nil {
			break
		}
		if f, ok := n.Tubes().FrozenPrefixes[prefix]; ok && g == uint16(to) {
			err = n.ProposePrefix(r.Context(), replication.PrefixThaw, prefix, f.Move, 0, nil)
		}
	case "take":
		out, err = m.takePrefix(r.Context(), n, g, prefix, move, uint16(to))
	case "finish":
		err = m.finishPrefix(r.Context(), n, prefix, move, uint16(to))
	case "drop", "thaw":
		if err = m.awaitDecided(r.Context(), move, false); err != nil {
			break
		}
		if step == "thaw" {
			err = n.ProposePrefix(r.Context(), replication.PrefixThaw, prefix, move, 0, nil)
			break
		}
		for _, tube := range m.coveredTubes(n, prefix, uint16(to)) {
			if m.shards.routing.Load().state.Owner(tube) != g && err == nil {
				err = dropTube(r.Context(), n.Store(), tube)
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

// takePrefix is group g's take step, this member leading it: freeze the
// prefix, then hand each tube it covers here to group to's leader.
func (m *Member) takePrefix(ctx context.Context, n *replication.Node, g uint16, prefix string, move uint64, to uint16) (prefixTaken, error) {
	out := prefixTaken{Tubes: []string{}}
	if err := m.endPrefixOut(ctx, n, prefix, move); err != nil {
		return out, err
	}
	if err := n.ProposePrefix(ctx, replication.PrefixFreeze, prefix, move, to, nil); err != nil {
		return out, err
	}
	m.sessions.Refreeze(g)
	for tube, f := range n.Tubes().Frozen {
		if !f.Moved && m.covers(tube, prefix, to) {
			return out, fmt.Errorf("%w: tube %q is moving to group %d", errTubeMove, tube, f.To)
		}
	}
	for _, tube := range m.coveredTubes(n, prefix, to) {
		jobs, err := m.handTube(ctx, n, tube, move, g, to)
		if err != nil {
			return out, err
		}
		out.Tubes = append(out.Tubes, tube)
		out.Jobs += jobs
	}
	return out, nil
}

// prefixIn is tubeMoving's key of prefix in group g: the steps of its
// placements there, and the resolver's (a tube's name has no space).
func prefixIn(prefix string, g uint16) string { return fmt.Sprintf("prefix %s in %d", prefix, g) }

// endPrefixOut ends what an earlier placement of prefix, not move, left
// frozen in n's group and not marked moved out, before move goes on: one
// group 0 placed is finished (the covered tubes here are copies), one it
// aborted is thawed, and one it has not decided refuses move.
func (m *Member) endPrefixOut(ctx context.Context, n *replication.Node, prefix string, move uint64) error {
	f, ok := n.Tubes().FrozenPrefixes[prefix]
	if !ok || f.Moved || f.Move == move {
		return nil
	}
	placed, decided := m.node.Tubes().Decided[f.Move]
	switch {
	case !decided:
		return fmt.Errorf("%w: prefix %q's placement %x is not over", errTubeMove, prefix, f.Move)
	case placed:
		return m.finishPrefix(ctx, n, prefix, f.Move, f.To)
	}
	return n.ProposePrefix(ctx, replication.PrefixThaw, prefix, f.Move, 0, nil)
}

// finishPrefix is a group's finish step: once this member routes by the
// placement, the covered tubes' jobs go, and the prefix is marked moved
// out.
func (m *Member) finishPrefix(ctx context.Context, n *replication.Node, prefix string, move uint64, to uint16) error {
	if err := m.awaitDecided(ctx, move, true); err != nil {
		return err
	}
	for _, tube := range m.coveredTubes(n, prefix, to) {
		if err := dropTube(ctx, n.Store(), tube); err != nil {
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
				err := m.abortPrefix(ctx, prefix, pl.Move, pl.Group, fmt.Errorf("%w: its driver was lost", errTubeMove))
				m.log.Info().Str("prefix", prefix).Err(err).Msg("a prefix's placement, left by its driver, resolved")
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
					err = m.finishPrefix(ctx, n, prefix, f.Move, f.To)
				} else {
					err = n.ProposePrefix(ctx, replication.PrefixThaw, prefix, f.Move, 0, nil)
				}
				m.log.Info().Str("prefix", prefix).Int("group", g).Bool("placed", placed).Err(err).Msg("a prefix's freeze resolved")
			}()
		}
	}
}
