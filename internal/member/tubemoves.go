package member

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
)

// A tube moves live from its group S to another, D (docs/design/shards.md
// 3.3, as built), driven by S's leader, the one decision group 0's:
//
//  0. S's leader copies the tube's jobs to D's leader, the tube not yet
//     frozen (stageTube): D logs them as copies it does not serve
//     (replication.TubeBook.Staged; a command by id of one is answered as
//     if the job were not there: router.ServerConfig.Staged), so that
//     the freeze carries only what changed since (docs/design/shards.md
//     10, "The copy ahead of the freeze").
//  1. S freezes the tube (replication.TubeFreeze in S's log): S refuses
//     its commands from then on, the changes by id of its jobs among them
//     (router.ServerConfig.Frozen: the members' sessions send them again
//     where the tube, or the job, lives once the move is decided), and
//     ends the reserves waiting on it the same way (Router.Refreeze, which
//     also waits out the commands that passed the check before).
//  2. S's leader exports the tube's jobs changed since the copy, and the
//     ids gone (store.ExportTubeChanges, from the jobs the tube noted
//     changed while the copy was out; all of them without a copy:
//     ExportTube), with the sessions holding its reserved ones
//     (Router.Holders), and D's leader takes them as its own logged
//     records, each reserved job by its holder's owner client there with
//     what is left of its TTR (store.Client.ImportTubeChanges,
//     ImportTube), answering once its log has them.
//  3. Group 0 decides: the move's placement (the tube routes to D from
//     then on, on every member as it applies it) or its abort, whichever
//     commits first (replication.TubePlace, TubeAbort).
//  4. Placed: S drops the tube's jobs, then marks it moved out (it stays
//     refused there). Aborted: D drops what it took, and S thaws the tube,
//     its jobs and reservations as they were. D's adopt and drop of a
//     tube run one at a time, and keep to their move (serveDrop).
//
// A move whose driver is lost (S's leader changes, a member dies) is
// finished by S's next leader (resolveTubeMoves): a tube frozen and
// undecided is aborted unless group 0 placed it meanwhile, and either way
// carried to its end. One lost before the freeze leaves its copy in D,
// which D's leader drops (resolveStages), as it does when the tube moves
// there again (clearOtherAdopt). Jobs keep their ids; a command by id that the id's
// group no longer finds asks the groups its tubes moved to
// (router.RouterConfig.MovedFrom).

const (
	// tubeMoveTimeout bounds a move from its freeze, each step of a
	// placement but its copies (Member.stepTimeout), and each call
	// between members in them.
	tubeMoveTimeout = 30 * time.Second
	// stageTimeout bounds a move's copy ahead of its freeze, and a
	// placement's copies at each of its sources, which the tubes serve
	// through (a large tube's takes longer than a freeze may), each part
	// of one tubeMoveTimeout.
	stageTimeout = 10 * time.Minute
	// stagePace bounds how long a part of a copy, acknowledged by the
	// destination's log, waits for its other replicas' fsyncs before
	// the next part may come (Node.AwaitReplicas), well within the
	// part's tubeMoveTimeout.
	stagePace = 5 * time.Second
	// abortTimeout bounds the abort of a move or a placement, which has
	// its own: the move's may be what ended it. A move's answer comes
	// within all three (sproutctl waits 12 minutes).
	abortTimeout = 10 * time.Second
)

// stepTimeout bounds each step of a placement but its copies:
// tubeMoveTimeout, or a test's.
func (m *Member) stepTimeout() time.Duration {
	if d := m.stepTimeoutOverride.Load(); d > 0 {
		return time.Duration(d)
	}
	return tubeMoveTimeout
}

// phases bounds the phases of a move or a placement's step one after
// another, each from its start, all within whole.
type phases struct {
	whole  context.Context
	cancel context.CancelFunc
}

// next ends the phase before and begins one bounded by d.
func (p *phases) next(d time.Duration) context.Context {
	p.end()
	ctx, cancel := context.WithTimeout(p.whole, d)
	p.cancel = cancel
	return ctx
}

func (p *phases) end() {
	if p.cancel != nil {
		p.cancel()
	}
}

// abortContext is the context of an abort begun under ctx: ctx's values,
// not its end.
func abortContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
}

// routing is what the member's sessions route by: the formation with the
// tubes moves placed (group 0's TubeBook), and for each group the groups
// its tubes moved to, and on from those (a job keeps its id).
type routing struct {
	state *meta.State
	moved [][]uint16 // by group
	// modulus is, by grown group, the groups' count its growth reached.
	modulus map[uint16]int
}

// newRouting is the routing of the formation p with group 0's book b:
// the groups grown since, the slots placed in them, the tubes placed by
// name and by prefix.
func newRouting(p *meta.State, b replication.TubeBook) *routing {
	st := *p
	st.Groups = slices.Clone(p.Groups)
	for _, g := range b.Grown {
		grp := meta.Group{ID: g.ID}
		for _, r := range g.Replicas {
			grp.Replicas = append(grp.Replicas, meta.Replica{Member: r})
		}
		for len(st.Groups) < int(g.ID) {
			st.Groups = append(st.Groups, meta.Group{ID: uint16(len(st.Groups))}) // not grown yet: named by a later record
		}
		if int(g.ID) == len(st.Groups) {
			st.Groups = append(st.Groups, grp)
		} else {
			st.Groups[g.ID] = grp
		}
		st.Prefixes[g.ID] = g.ID + 1
	}
	// Slots placed in grown groups, the earlier growths' first.
	grown := slices.SortedFunc(slices.Values(b.Grown), func(x, y replication.GrownGroup) int {
		return cmp.Or(cmp.Compare(x.Modulus, y.Modulus), cmp.Compare(x.ID, y.ID))
	})
	for _, g := range grown {
		if _, active := b.Prefixes[replication.SlotKey(g.ID)].Routes(); active {
			st.PlaceSlots(g.ID, int(g.Modulus))
		}
	}
	st.Exact = maps.Clone(b.Placed)
	if st.Exact == nil {
		st.Exact = map[string]uint16{}
	}
	st.Placements = nil
	for prefix, pl := range b.Prefixes {
		if _, slots := replication.SlotGroup(prefix); slots {
			continue
		}
		if g, ok := pl.Routes(); ok {
			st.Placements = append(st.Placements, meta.Placement{Prefix: prefix, Group: g, Active: true})
		}
	}
	slices.SortFunc(st.Placements, func(a, b meta.Placement) int { return strings.Compare(a.Prefix, b.Prefix) })
	rt := &routing{state: &st, moved: make([][]uint16, len(st.Groups)), modulus: map[uint16]int{}}
	for _, g := range b.Grown {
		rt.modulus[g.ID] = int(g.Modulus)
	}
	for g := range rt.moved {
		seen := map[uint16]bool{uint16(g): true}
		queue := []uint16{uint16(g)}
		for len(queue) > 0 {
			from := queue[0]
			queue = queue[1:]
			for _, to := range b.Out[from] {
				if !seen[to] {
					seen[to] = true
					rt.moved[g] = append(rt.moved[g], to)
					queue = append(queue, to)
				}
			}
		}
	}
	return rt
}

// tubesChanged takes group g's TubeBook as it changed here: group 0's
// routes the sessions; a group whose tubes freeze ends the reserves
// waiting on them (router.Router.Refreeze). Called on the node's
// goroutine: what may wait goes on one of its own.
func (m *Member) tubesChanged(g uint16, b replication.TubeBook) {
	sh := m.shards
	if g == 0 {
		go m.endPlacedAdopts()
		m.checkFormed(b.Formed)
		old := sh.routing.Load()
		sh.routing.Store(newRouting(sh.placement, b))
		m.grew(b)
		if now := sh.routing.Load().state; m.sessions != nil && old != nil && (!maps.Equal(old.state.Exact, b.Placed) ||
			!slices.Equal(old.state.Placements, now.Placements) || old.state.Slots != now.Slots) {
			go m.sessions.Replaced()
		}
	}
	if len(b.Frozen) > 0 && m.sessions != nil {
		go m.sessions.Refreeze(g)
	}
}

// movedFrom is router.RouterConfig.MovedFrom.
func (m *Member) movedFrom(g uint16) []uint16 {
	rt := m.shards.routing.Load()
	if int(g) >= len(rt.moved) {
		return nil
	}
	return rt.moved[g]
}

// groupOfJob is the group of id's prefix, unless tubes moved from it and
// this member's replica of a group they moved to holds the job, or its
// replica of the id's group does not and tubes went to only one group
// this member holds no replica of (the admin API's route by id: it asks
// one group, whose leader does not route a forwarded request again; the
// protocol's commands ask the id's group, then the others at once,
// router.Session.sendSearching).
func (m *Member) groupOfJob(id uint64) (uint16, bool) {
	g, ok := m.shards.routing.Load().state.GroupOfID(id)
	if !ok {
		return 0, false
	}
	home := m.shards.node(g)
	gone := home != nil && !home.Store().Holds(id)
	var unseen []uint16 // where tubes went that this member cannot look
	for _, to := range m.movedFrom(g) {
		n := m.shards.node(to)
		if n == nil {
			unseen = append(unseen, to)
			continue
		}
		// A copy taken ahead of a move's freeze is not the job: its
		// source serves it still.
		if tube, ok := n.Store().TubeOfJob(id); ok && !isStaged(n, tube) && (home == nil || gone) {
			return to, true
		}
	}
	if gone && len(unseen) == 1 {
		return unseen[0], true
	}
	return g, true
}

// tubeJobs is how many jobs n's store holds of tube.
func tubeJobs(n *replication.Node, tube string) int {
	ts, _ := n.Store().TubeStats([]byte(tube))
	return ts.Ready + ts.Delayed + ts.Buried + ts.Reserved
}

// isStaged reports whether tube's jobs in n's group are copies a move
// took in ahead of its source's freeze.
func isStaged(n *replication.Node, tube string) bool {
	_, ok := n.Tubes().Staged[tube]
	return ok
}

// frozen is router.RouterConfig.Frozen. While group g holds copies a
// tube's move took in, not yet placed (adopting), the tubes routed
// elsewhere count as moving too: their commands, by id among them, wait
// for the move's end, since a change made on a copy would be lost with it
// if the move is aborted (a move back to the group of a job's id finds
// the copy first). A tube whose copies a stage took in counts as moving
// even once it routes here (a placement may route it here while the stage
// waits for its driver): the copies are no jobs of it, and go
// (resolveStages).
func (m *Member) frozen(g uint16) (func(tube []byte) bool, bool) {
	n := m.shards.node(g)
	if n == nil {
		return nil, false
	}
	adopting := m.adopting(n)
	frozen, moving := n.AnyFrozen()
	if !frozen && !adopting {
		return nil, false
	}
	var check func(tube []byte) bool
	if frozen {
		check = m.frozenCheck(g, n)
	}
	if !adopting {
		return check, moving
	}
	rt, staged := m.shards.routing.Load().state, n.Tubes().Staged
	return func(tube []byte) bool {
		if check != nil && check(tube) || rt.Owner(string(tube)) != g {
			return true
		}
		_, ok := staged[string(tube)] // routed here by a placement since
		return ok
	}, true
}

// frozenCheck is how group g's node n tells a frozen tube: by its name,
// or, with prefixes frozen, by the check kept for the group's placements.
func (m *Member) frozenCheck(g uint16, n *replication.Node) func(tube []byte) bool {
	if len(n.Tubes().FrozenPrefixes) > 0 && int(g) < len(m.shards.frozenChecks) {
		return m.shards.frozenChecks[g]
	}
	return n.FrozenTube
}

// adopting reports whether n's group holds copies a tube's move took in
// that group 0 has not placed (TubeBook.Adopted; those placed are the
// tubes' jobs even before endPlacedAdopts records so).
func (m *Member) adopting(n *replication.Node) bool {
	adopted := n.Tubes().Adopted
	if len(adopted) == 0 {
		return false
	}
	decided := m.node.Tubes().Decided
	for _, move := range adopted {
		if !decided[move] {
			return true
		}
	}
	return false
}

// endPlacedAdopts records, in each group this member leads, that the
// copies of the moves group 0 placed are the tubes' jobs
// (TubeAdoptEnded), one pass at a time.
func (m *Member) endPlacedAdopts() {
	if !m.endingAdopts.CompareAndSwap(false, true) {
		return
	}
	defer m.endingAdopts.Store(false)
	decided := m.node.Tubes().Decided
	for g := range m.shards.groups() {
		n := m.shards.node(uint16(g))
		if n == nil || m.shards.serving(uint16(g)) == nil {
			continue
		}
		for tube, move := range n.Tubes().Adopted {
			if decided[move] {
				ctx, cancel := context.WithTimeout(context.Background(), replication.ChangeTimeout)
				err := endAdopt(ctx, n, tube, move)
				cancel()
				if err != nil {
					m.log.Debug().Err(err).Str("tube", tube).Int("group", g).Msg("a placed move's adopt not yet recorded ended")
				}
			}
		}
	}
}

// maxSettle bounds the moves one call settles, and maxSettleRequest its
// body (a move's id in hex, quoted, is at most 19 bytes). settleDelay is
// how long a member sees a decided move unsettled before it reports a
// group past it: a freeze or an adopt of the move proposed before its
// decision may reach the group's log after it (its proposer's leadership
// lost, a takePrefix or serveAdopt that checked a lagging replica of
// group 0), within an election or two, and one applied after the report
// would wait for an outcome group 0 may have forgotten.
const (
	maxSettle        = 1024
	maxSettleRequest = maxSettle*20 + 64
	settleDelay      = 5 * time.Second
)

// settledRequest is POST /cluster/moves/settled's body.
type settledRequest struct {
	Group uint16   `json:"group"`
	Moves []string `json:"moves"` // hex
}

// settleMoves tells group 0, for each group this member leads, the
// decided moves whose outcome the group's book no longer awaits
// (replication.MovesSettled): group 0 forgets an outcome only once every
// group that took part is past it, so that none asks for it afresh and
// has it decided the other way. A move is reported once this member has
// seen it unsettled for settleDelay. Called from the balance loop.
func (m *Member) settleMoves() {
	if !m.settling.CompareAndSwap(false, true) {
		return
	}
	defer m.settling.Store(false)
	unsettled := m.node.Tubes().Unsettled
	now := time.Now()
	if m.settleSeen == nil {
		m.settleSeen = make(map[uint64]time.Time)
	}
	maps.DeleteFunc(m.settleSeen, func(move uint64, _ time.Time) bool { _, ok := unsettled[move]; return !ok })
	if len(unsettled) == 0 {
		return
	}
	for move := range unsettled {
		if _, ok := m.settleSeen[move]; !ok {
			m.settleSeen[move] = now
		}
	}
	for g := range uint16(m.shards.groups()) {
		n := m.shards.node(g)
		if n == nil || !m.shards.leased(g) {
			continue
		}
		var due []uint64
		for move, groups := range unsettled {
			if slices.Contains(groups, g) && now.Sub(m.settleSeen[move]) >= settleDelay {
				due = append(due, move)
			}
		}
		if len(due) == 0 {
			continue // the book's walk (Awaited) is not made for nothing
		}
		// Read on the leader, its lease confirmed after unsettled was
		// read: its log is applied up to its term, which holds each of
		// those moves' freezes and adopts here, but for one proposed
		// before a decision and landing after it (settleDelay).
		awaited := n.Tubes().Awaited()
		req := settledRequest{Group: g}
		for _, move := range due {
			if len(req.Moves) < maxSettle && !awaited[move] {
				req.Moves = append(req.Moves, strconv.FormatUint(move, 16))
			}
		}
		if len(req.Moves) == 0 {
			continue
		}
		body, _ := json.Marshal(req)
		ctx, cancel := context.WithTimeout(context.Background(), replication.ChangeTimeout)
		err := m.callLeaderAgain(ctx, 0, "/cluster/moves/settled", body, nil, nil)
		cancel()
		if err != nil {
			m.log.Debug().Err(err).Int("group", int(g)).Int("moves", len(req.Moves)).Msg("moves' settling not recorded yet")
		}
	}
}

func (m *Member) serveSettled(w http.ResponseWriter, r *http.Request) {
	if m.shards.serving(0) == nil {
		m.forwardMove(w, r, 0)
		return
	}
	var req settledRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSettleRequest)).Decode(&req); err != nil {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: err.Error()})
		return
	}
	moves := make([]uint64, 0, len(req.Moves))
	for _, hex := range req.Moves {
		move, err := strconv.ParseUint(hex, 16, 64)
		if err != nil || move == 0 {
			admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("no such move: %q", hex)})
			return
		}
		moves = append(moves, move)
	}
	if int(req.Group) >= m.shards.groups() || len(moves) == 0 {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("nothing to settle: %+v", req)})
		return
	}
	if err := m.node.ProposeSettled(r.Context(), req.Group, moves); err != nil {
		writeChangeError(w, err)
		return
	}
	admin.WriteValue(w, http.StatusOK, map[string]int{"settled": len(moves)})
}

// endAdopt records, in n's group, that move's copies of tube there are
// placed or dropped (TubeAdoptEnded), if they are the last adopt's.
func endAdopt(ctx context.Context, n *replication.Node, tube string, move uint64) error {
	if move == 0 || n.Tubes().Adopted[tube] != move {
		return nil
	}
	return n.ProposeTube(ctx, replication.TubeAdoptEnded, tube, move, 0, 0)
}

// movedTo is router.RouterConfig.MovedTo: the groups group g's tubes
// and prefixes frozen here move or moved to, and every other group for
// a prefix's placement undone (its tubes go where their names route).
func (m *Member) movedTo(g uint16) []uint16 {
	n := m.shards.node(g)
	if n == nil {
		return nil
	}
	if frozen, _ := n.AnyFrozen(); !frozen {
		return nil
	}
	b := n.Tubes()
	var to []uint16
	for _, f := range b.Frozen {
		to = append(to, f.To)
	}
	for _, f := range b.FrozenPrefixes {
		if f.To != replication.Unplaced {
			to = append(to, f.To)
			continue
		}
		for h := range len(m.shards.routing.Load().state.Groups) {
			to = append(to, uint16(h))
		}
	}
	slices.Sort(to)
	to = slices.Compact(to)
	return slices.DeleteFunc(to, func(h uint16) bool { return h == g })
}

// tubeMoveResult is a move's answer.
type tubeMoveResult struct {
	Tube string `json:"tube"`
	From uint16 `json:"from"`
	To   uint16 `json:"to"`
	Jobs int    `json:"jobs"`
	// Paused is how long the tube's commands were refused, from the
	// freeze to the placement, in milliseconds.
	Paused int64 `json:"paused_ms"`
	// took is how long each step took, for the log: the stage, the
	// freeze, the sessions' refreeze, the hand-over, group 0's decision,
	// the finish.
	took [6]time.Duration
}

// stepsLog is took for the log.
func (r *tubeMoveResult) stepsLog() *zerolog.Array {
	a := zerolog.Arr()
	for _, d := range r.took {
		a.Int64(d.Milliseconds())
	}
	return a
}

// registerTubeMoves adds the endpoints of tubes' moves to mux, guarded as
// the admin API's changes are:
//
//	POST /cluster/tubes/{name}/move    {"group": N}: move the tube live (any member)
//	POST /cluster/tubes/{name}/adopt   D's leader takes the tube's jobs (?from=S&to=D&move=E&term=T,
//	                                   T the driver's term leading S: fenceDriver)
//	POST /cluster/tubes/{name}/stage   D's leader takes a copy of them ahead of the freeze (the same, &part=N after the first)
//	POST /cluster/tubes/{name}/adopt-changes  D's leader takes what changed since (the same)
//	POST /cluster/tubes/{name}/decide  group 0's leader decides a move ({"move","from","to","place"})
//	POST /cluster/tubes/{name}/drop    D's leader drops the jobs of an aborted move (?to=D&move=E)
//	POST /cluster/moves/settled        group 0's leader notes a group's part of moves over ({"group","moves"})
//
// The last six are the members' own, each forwarded to the leader it
// names when this member does not serve the group.
func (m *Member) registerTubeMoves(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.Handle("POST /cluster/tubes/{name}/move", guard(http.HandlerFunc(m.serveTubeMove)))
	mux.Handle("POST /cluster/tubes/{name}/adopt", guard(http.HandlerFunc(m.serveAdopt)))
	mux.Handle("POST /cluster/tubes/{name}/stage", guard(http.HandlerFunc(m.serveStage)))
	mux.Handle("POST /cluster/tubes/{name}/adopt-changes", guard(http.HandlerFunc(m.serveAdoptChanges)))
	mux.Handle("POST /cluster/tubes/{name}/decide", guard(http.HandlerFunc(m.serveDecide)))
	mux.Handle("POST /cluster/tubes/{name}/drop", guard(http.HandlerFunc(m.serveDrop)))
	mux.Handle("POST /cluster/moves/settled", guard(http.HandlerFunc(m.serveSettled)))
}

// errTubeMove is a move refused or given up, said in its message.
var errTubeMove = errors.New("tube move")

func (m *Member) serveTubeMove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !codec.ValidTubeName([]byte(name)) {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("%q is not a tube's name", name)})
		return
	}
	// The tube's group's leader moves it: the body is its to read.
	from := m.shards.routing.Load().state.Owner(name)
	if m.shards.serving(from) == nil {
		m.forwardMove(w, r, from)
		return
	}
	to, ok := m.readGroup(w, r)
	if !ok {
		return
	}
	if from == to {
		admin.WriteError(w, &admin.Error{Status: http.StatusConflict, Message: fmt.Sprintf("tube %q lives in group %d already", name, to)})
		return
	}
	res, err := m.moveTube(r.Context(), name, from, to)
	if err != nil {
		m.log.Info().Str("tube", name).Int("from", int(from)).Int("to", int(to)).Array("steps_ms", res.stepsLog()).
			Err(err).Msg("tube not moved")
		writeMoveError(w, err)
		return
	}
	m.log.Info().Str("tube", name).Int("from", int(from)).Int("to", int(to)).Int("jobs", res.Jobs).
		Int64("paused_ms", res.Paused).Array("steps_ms", res.stepsLog()).Str("remote", r.RemoteAddr).Msg("tube moved")
	admin.WriteValue(w, http.StatusOK, res)
}

// readGroup reads a move's body, {"group": N}, and answers r itself
// when it is not one, or names no group of the cluster.
func (m *Member) readGroup(w http.ResponseWriter, r *http.Request) (uint16, bool) {
	var req struct {
		Group *int `json:"group"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMemberRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Group == nil {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("want {\"group\": N}: %v", err)})
		return 0, false
	}
	if groups := m.shards.groups(); *req.Group < 0 || *req.Group >= groups {
		admin.WriteError(w, &admin.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no group %d: the cluster has groups 0 to %d", *req.Group, groups-1)})
		return 0, false
	}
	return uint16(*req.Group), true
}

// writeMoveError answers a move refused (errTubeMove) 409, one that
// could not be made now 503.
func writeMoveError(w http.ResponseWriter, err error) {
	status := http.StatusServiceUnavailable
	if errors.Is(err, errTubeMove) {
		status = http.StatusConflict
	}
	admin.WriteError(w, &admin.Error{Status: status, Message: err.Error()})
}

// tubeMoving notes the tubes whose moves this member drives or takes, each
// keyed by the tube and the group (tubeIn), so that its resolver leaves
// them alone, and a destination's adopt and drop of one tube run one at a
// time. The move whose copies a destination took is its group's log's
// (replication.TubeBook.Adopted), so that its next leader knows it too.
type tubeMoving struct {
	mu    sync.Mutex
	tubes map[string]bool
}

// await is begin, tried until it succeeds or ctx ends.
func (t *tubeMoving) await(ctx context.Context, tube string) error {
	for !t.begin(tube) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func (t *tubeMoving) begin(tube string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tubes[tube] {
		return false
	}
	if t.tubes == nil {
		t.tubes = map[string]bool{}
	}
	t.tubes[tube] = true
	return true
}

func (t *tubeMoving) end(tube string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.tubes, tube)
}

func (t *tubeMoving) has(tube string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tubes[tube]
}

// busyIn reports whether a key of group g is noted.
func (t *tubeMoving) busyIn(g uint16) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key := range t.tubes {
		if strings.HasSuffix(key, fmt.Sprintf("@%d", g)) || strings.HasSuffix(key, fmt.Sprintf(" in %d", g)) {
			return true
		}
	}
	return false
}

// driving reports whether this member drives, or takes its part in, a
// move of a tube, a prefix's placement or a growth in group g: its
// leadership of g is not handed over to balance the leaders meanwhile (a
// step would fail half way).
func (m *Member) driving(g uint16) bool {
	if g == 0 {
		if m.placing.busy() || m.growing.busy() {
			return true
		}
	}
	return m.tubeMoves.busyIn(g)
}

// tubeIn is tubeMoving's key of tube in group g (a tube's name has no
// '@').
func tubeIn(tube string, g uint16) string { return fmt.Sprintf("%s@%d", tube, g) }

// moveTube moves tube from group from, which this member leads, to group
// to: the steps of this file's comment, its copy within stageTimeout, the
// rest within tubeMoveTimeout.
func (m *Member) moveTube(ctx context.Context, tube string, from, to uint16) (tubeMoveResult, error) {
	res := tubeMoveResult{Tube: tube, From: from, To: to}
	n := m.shards.node(from)
	if !m.tubeMoves.begin(tubeIn(tube, from)) {
		return res, fmt.Errorf("%w: tube %q is moving already", errTubeMove, tube)
	}
	defer m.tubeMoves.end(tubeIn(tube, from))
	if f, ok := n.Tubes().Frozen[tube]; ok {
		return res, fmt.Errorf("%w: tube %q's move %x to group %d is not over", errTubeMove, tube, f.Move, f.To)
	}
	for _, d := range m.node.Tubes().Dropping {
		if m.brings(to, tube, d.Prefix, d.To) {
			return res, fmt.Errorf("%w: group %d is dropping copies of prefix %q's tubes", errTubeMove, to, d.Prefix)
		}
	}
	move := rand.Uint64()>>1 | 1
	step := time.Now()
	lap := func(i int) {
		now := time.Now()
		res.took[i], step = now.Sub(step), now
	}
	steps := phases{whole: ctx}
	defer steps.end()
	since, err := m.stageTube(steps.next(stageTimeout), n, tube, move, from, to)
	if since != nil {
		defer n.Store().EndTubeCopy([]byte(tube), since) // when no export ended it
	}
	lap(0)
	ctx = steps.next(tubeMoveTimeout)
	if err != nil {
		return res, m.abortTubeMove(ctx, n, tube, move, from, to, err)
	}
	if hook := m.afterStage.Load(); hook != nil && since != nil {
		(*hook)()
	}
	if err := n.ProposeTube(ctx, replication.TubeFreeze, tube, move, to, 0); err != nil {
		if since == nil {
			return res, err
		}
		return res, m.abortTubeMove(ctx, n, tube, move, from, to, err)
	}
	frozenAt := time.Now()
	lap(1)
	// Once every owner client of the group has been seen with the freeze
	// applied, nothing of the tube changes here: a command that passed
	// the check before it has run.
	m.sessions.Refreeze(from)
	lap(2)
	for p, f := range n.Tubes().FrozenPrefixes {
		if _, ok := m.takes(from, tube, p, f.To); ok && !f.Moved {
			return res, m.abortTubeMove(ctx, n, tube, move, from, to, fmt.Errorf("%w: prefix %q's placement in group %d takes tube %q", errTubeMove, p, f.To, tube))
		}
	}
	jobs, err := m.handTube(ctx, n, tube, move, from, to, since)
	res.Jobs = jobs
	lap(3)
	if err != nil {
		return res, m.abortTubeMove(ctx, n, tube, move, from, to, err)
	}
	placed, err := m.decideTubeMove(ctx, tube, move, from, to, true)
	lap(4)
	if err != nil {
		return res, m.abortTubeMove(ctx, n, tube, move, from, to, fmt.Errorf("tube %q's placement: %w", tube, err))
	}
	if !placed {
		return res, m.abortTubeMove(ctx, n, tube, move, from, to, fmt.Errorf("%w: tube %q's move was aborted", errTubeMove, tube))
	}
	res.Paused = time.Since(frozenAt).Milliseconds()
	err = m.finishTubeMove(ctx, n, tube, move)
	lap(5)
	return res, err
}

// stageTube copies tube's jobs in group from (n, led here), not yet
// frozen, to group to's leader, ahead of the move's freeze: the leader
// takes them in as copies it does not serve (replication.TubeBook.Staged),
// and the freeze then hands over only what changed since (handTube). It
// returns what it copied, or nil when it copied nothing: an empty tube,
// or a leader of a release before, which has no stage (the freeze then
// hands over the whole tube).
//
// The copy goes in chunks of stageChunk bytes, each made once the last
// is in that group's log, so one chunk's frames are held at a time: one
// import of a large tube outran the log's fsyncs past its bound on what
// it holds unsynced (and the group's replication, past its leaders'
// heartbeats, on two cores).
func (m *Member) stageTube(ctx context.Context, n *replication.Node, tube string, move uint64, from, to uint16) (*store.TubeCopy, error) {
	term, err := servingTerm(n)
	if err != nil {
		return nil, err
	}
	chunk := stageChunk
	if c := m.stageChunkBytes.Load(); c > 0 {
		chunk = int(c)
	}
	part := 0
	send := func(frames []byte) error {
		if t, err := servingTerm(n); err != nil || t != term {
			return fmt.Errorf("%w: group %d's leadership here was lost under its stage", replication.ErrNotServing, from)
		}
		body, err := adoptionBody(adoption{}, frames)
		if err != nil {
			return err
		}
		q := driverQuery(from, to, move, term)
		if part > 0 {
			q.Set("part", strconv.Itoa(part))
		}
		path := "/cluster/tubes/" + url.PathEscape(tube) + "/stage?" + q.Encode()
		ctx, cancel := context.WithTimeout(ctx, tubeMoveTimeout)
		defer cancel()
		// Only the first call's 404 says no stage is there: one after it
		// may come from an older leader after a newer one logged the
		// copy, which the whole tube's import would then keep, stale.
		if part > 0 {
			err = m.callLeaderAgain(ctx, to, path, body, nil, nil)
		} else {
			err = m.callLeader(ctx, to, path, body, nil)
			if le, ok := errors.AsType[*leaderError](err); ok && le.status == http.StatusNotFound {
				return errNoStage
			}
			if err != nil && leaderLostUnder(err) {
				m.callingNext(to, path, 1, err)
				err = m.callLeaderAgain(ctx, to, path, body, nil, nil)
			}
		}
		if err != nil {
			return fmt.Errorf("group %d did not take part %d of tube %q's copy: %w", to, part+1, tube, err)
		}
		part++
		return nil
	}
	jobs, since, ok, err := n.Store().ExportTubeCopy([]byte(tube), chunk, send)
	switch {
	case errors.Is(err, errNoStage):
		return nil, nil
	case err != nil:
		return nil, err
	case !ok || jobs == 0:
		return nil, nil
	}
	return since, nil
}

// errNoStage is a stage's first part answered 404: a leader of a release
// before, which has no stage.
var errNoStage = errors.New("no stage there")

// handTube hands tube's jobs in group from (n, led here), frozen, to
// group to's leader, with the sessions holding its reserved ones, and
// returns how many it handed once that leader's log has them: all of
// them, or with since (stageTube's copy, which that group holds) only
// those changed since and the ids gone.
func (m *Member) handTube(ctx context.Context, n *replication.Node, tube string, move uint64, from, to uint16, since *store.TubeCopy) (int, error) {
	term, err := servingTerm(n)
	if err != nil {
		return 0, err
	}
	// The commands that passed the freeze's check have run (Refreeze),
	// but their changes may not be committed yet: exported before, a put
	// the next leader of the group never had (this one cut off with it)
	// would be in the tube's new group, its session's resend of it made
	// there again, unknown to that group's table of request keys: two
	// jobs of one put (found by a reviewing helper). So the export waits
	// for the log to acknowledge all that ran.
	if err := awaitRan(ctx, n, term); err != nil {
		return 0, err
	}
	// The export is the tube's jobs as the group's log has them only if
	// this member led the group throughout: a leadership lost rebuilds
	// the store, and is published lost before that begins (and never won
	// back in the same term).
	var (
		frames []byte
		jobs   int
		held   []store.Held
		fig    store.TubeFigures
		gone   []uint64
	)
	path := "/adopt?"
	if since != nil {
		frames, jobs, held, fig, gone, _ = n.Store().ExportTubeChanges([]byte(tube), since)
		path = "/adopt-changes?"
	} else {
		frames, jobs, held, fig, _ = n.Store().ExportTube([]byte(tube))
	}
	leading := func() error {
		if t, err := servingTerm(n); err != nil || t != term {
			return fmt.Errorf("%w: group %d's leadership here was lost under its move", replication.ErrNotServing, from)
		}
		return nil
	}
	if err := leading(); err != nil {
		return jobs, err
	}
	head := adoption{Figures: fig, Holders: m.sessions.Holders(from, held)}
	if since != nil {
		head.Gone, head.Jobs = gone, jobs
	}
	body, err := adoptionBody(head, frames)
	if err != nil {
		return jobs, err
	}
	q := driverQuery(from, to, move, term)
	// An import sent again to the group's next leader skips the jobs it
	// has (the first's that its log committed); one of changes makes
	// them again, the same.
	if err := m.callLeaderAgain(ctx, to, "/cluster/tubes/"+url.PathEscape(tube)+path+q.Encode(), body, nil, leading); err != nil {
		return jobs, fmt.Errorf("group %d did not take tube %q's jobs: %w", to, tube, err)
	}
	return jobs, nil
}

// driverQuery is the query of a move's call to its destination's leader
// (a stage's part, an adopt): the groups, the move, and the term in which
// its driver leads the source, which fenceDriver checks.
func driverQuery(from, to uint16, move, term uint64) url.Values {
	return url.Values{"from": {strconv.Itoa(int(from))}, "to": {strconv.Itoa(int(to))}, "move": {strconv.FormatUint(move, 16)},
		"term": {strconv.FormatUint(term, 10)}}
}

// fenceDriver refuses a call of a move's driver that led group from in
// term (an older release's says none), when a later term of the group is
// known here: from its replica here, or from a driver's call before. That
// leadership is over, and its driver with it; a part of its copy come
// late would abort the live move of the tube the group's next leader
// staged here meanwhile (clearOtherAdopt), its own move being lost.
func (m *Member) fenceDriver(from uint16, term string) error {
	if term == "" {
		return nil
	}
	t, err := strconv.ParseUint(term, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: term %q", errTubeMove, term)
	}
	known := t
	if n := m.shards.node(from); n != nil {
		l, _ := n.Leader()
		known = max(known, l.Term)
	}
	m.driverTermsMu.Lock()
	if m.driverTerms == nil {
		m.driverTerms = map[uint16]uint64{}
	}
	known = max(known, m.driverTerms[from])
	m.driverTerms[from] = known
	m.driverTermsMu.Unlock()
	if t < known {
		return fmt.Errorf("%w: the driver led group %d in term %d; it has been led in term %d since", errTubeMove, from, t, known)
	}
	return nil
}

// maxAdoptPresize bounds the room an adopt's body is read into at once:
// a peer's Content-Length is not trusted further.
const maxAdoptPresize = 256 << 20

// adoption is what goes with a tube's jobs to its new group's leader,
// ahead of their frames (its length first, 4 bytes): the tube's figures
// and the sessions holding its reserved jobs; after a stage, the ids of
// its copies gone since, and how many jobs the tube holds.
type adoption struct {
	Figures store.TubeFigures `json:"figures"`
	Holders []router.Holder   `json:"holders,omitempty"`
	Gone    []uint64          `json:"gone,omitempty"`
	Jobs    int               `json:"jobs,omitempty"`
}

// adoptionBody is an adopt's body: head, then frames.
func adoptionBody(head adoption, frames []byte) ([]byte, error) {
	js, err := json.Marshal(head)
	if err != nil {
		return nil, err
	}
	body := make([]byte, 0, 4+len(js)+len(frames)) // the frames copied once: tens of megabytes for a large tube
	body = binary.BigEndian.AppendUint32(body, uint32(len(js)))
	return append(append(body, js...), frames...), nil
}

// abortTubeMove ends a move that did not reach its placement: group 0
// decides it aborted, unless it was placed meanwhile (then it finishes);
// the destination drops what it took, and the tube thaws here. It returns
// why, or what stopped the abort (the resolver then finishes it).
func (m *Member) abortTubeMove(ctx context.Context, n *replication.Node, tube string, move uint64, from, to uint16, why error) error {
	ctx, cancel := abortContext(ctx)
	defer cancel()
	placed, err := m.decideTubeMove(ctx, tube, move, from, to, false)
	switch {
	case err != nil:
		return fmt.Errorf("%v; its abort is not decided yet (%v)", why, err)
	case placed:
		return m.finishTubeMove(ctx, n, tube, move)
	}
	q := url.Values{"to": {strconv.Itoa(int(to))}, "move": {strconv.FormatUint(move, 16)}}
	if err := m.callLeaderAgain(ctx, to, "/cluster/tubes/"+url.PathEscape(tube)+"/drop?"+q.Encode(), nil, nil, nil); err != nil {
		return fmt.Errorf("%v; group %d has not dropped what it took yet (%v)", why, to, err)
	}
	if err := n.ProposeTube(ctx, replication.TubeThaw, tube, move, 0, 0); err != nil {
		return fmt.Errorf("%v; the tube is not thawed yet (%v)", why, err)
	}
	m.log.Warn().Str("tube", tube).Int("from", int(from)).Int("to", int(to)).Err(why).Msg("tube move aborted")
	return why
}

// endMoveOut ends the move out of n's group of tube that is frozen there
// and not yet moved out, if one is, before the tube moves in again: one
// group 0 placed is finished (its jobs here are copies); one it aborted,
// or has not decided, refuses the move in (the tube lives here still, or
// may).
func (m *Member) endMoveOut(ctx context.Context, n *replication.Node, tube string) error {
	f, ok := n.Tubes().Frozen[tube]
	if !ok || f.Moved {
		return nil
	}
	if placed, decided := m.node.Tubes().Decided[f.Move]; !decided || !placed {
		return fmt.Errorf("%w: tube %q's move %x out of here is not over", errTubeMove, tube, f.Move)
	}
	return m.finishTubeMove(ctx, n, tube, f.Move)
}

// finishTubeMove ends a placed move here: once this member has applied
// its placement (its sessions route the tube to its new group, or on from
// there if it has moved again since), its jobs go, and the tube is marked
// moved out.
func (m *Member) finishTubeMove(ctx context.Context, n *replication.Node, tube string, move uint64) error {
	if err := m.awaitDecided(ctx, move, true); err != nil {
		return err
	}
	// Its jobs go first: while it is not marked moved out, the commands
	// by id of its jobs are refused here (a delete answered here once it
	// is placed elsewhere would be a delete of a copy).
	if err := dropTube(ctx, n, tube); err != nil {
		return err
	}
	if f := n.Tubes().Frozen[tube]; !f.Moved {
		return n.ProposeTube(ctx, replication.TubeMovedOut, tube, move, 0, 0)
	}
	return nil
}

// dropTube deletes the tube's jobs from n's store, reserved ones too,
// logged, and waits for its log.
func dropTube(ctx context.Context, n *replication.Node, tube string) error {
	term, err := servingTerm(n)
	if err != nil {
		return err
	}
	cl := n.Store().NewOwnerClient(nil)
	defer cl.Close()
	cl.DropTube([]byte(tube))
	return awaitAcked(ctx, n, term, cl.PendingAck())
}

// servingTerm is the term of n's group's leadership here, taken before a
// change whose acknowledgement awaitAcked then waits for.
func servingTerm(n *replication.Node) (uint64, error) {
	l, _ := n.Leader()
	if !l.Serving {
		return 0, replication.ErrNotServing
	}
	return l.Term, nil
}

// awaitRan is awaitAcked for everything n's store has appended to its
// group's log so far: what ran there.
func awaitRan(ctx context.Context, n *replication.Node, term uint64) error {
	j, ok := n.Store().Acks().(interface{ Appended() uint64 })
	if !ok {
		return nil // no log: nothing waits
	}
	return awaitAcked(ctx, n, term, j.Appended())
}

// awaitAcked waits until the log of n's group acknowledges pos, a
// change made while this member led it in term. A leadership lost
// meanwhile ends the wait with ErrNotServing: the journal drops what
// waited on it (nothing gathered in a lost leadership is acknowledged),
// and a later leadership's positions go past pos, so without the term
// the wait would last its whole context, or end as if acknowledged.
func awaitAcked(ctx context.Context, n *replication.Node, term, pos uint64) error {
	acks := n.Store().Acks()
	done := make(chan struct{})
	if acks == nil {
		close(done)
	} else {
		acks.OnAcked(pos, func() { close(done) })
	}
	// The leadership is looked at after the acknowledgement too: one that
	// a later leadership's positions made, with the loss not yet seen
	// here, is none.
	for {
		l, changed := n.Leader()
		if !l.Serving || l.Term != term {
			return fmt.Errorf("%w: its leadership here was lost before its log acknowledged the change", replication.ErrNotServing)
		}
		select {
		case <-done:
			return nil
		default:
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// decideTubeMove has group 0 decide move: its placement (place) or its
// abort, and reports which it decided, whichever came first.
func (m *Member) decideTubeMove(ctx context.Context, tube string, move uint64, from, to uint16, place bool) (bool, error) {
	in, _ := json.Marshal(decideRequest{Move: strconv.FormatUint(move, 16), From: from, To: to, Place: place})
	var out struct {
		Placed bool `json:"placed"`
	}
	// Group 0 takes a decision twice: the first committed stands.
	err := m.callLeaderAgain(ctx, 0, "/cluster/tubes/"+url.PathEscape(tube)+"/decide", in, &out, nil)
	return out.Placed, err
}

// decideRequest is POST /cluster/tubes/{name}/decide's body.
type decideRequest struct {
	Move  string `json:"move"` // hex
	From  uint16 `json:"from"`
	To    uint16 `json:"to"`
	Place bool   `json:"place"`
}

func (m *Member) serveDecide(w http.ResponseWriter, r *http.Request) {
	if m.shards.serving(0) == nil {
		m.forwardMove(w, r, 0)
		return
	}
	var req decideRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMemberRequest)).Decode(&req); err != nil {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: err.Error()})
		return
	}
	move, err := strconv.ParseUint(req.Move, 16, 64)
	if err != nil || move == 0 || int(req.To) >= m.shards.groups() || int(req.From) >= m.shards.groups() {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("no such move: %+v", req)})
		return
	}
	what := replication.TubeAbort
	if req.Place {
		what = replication.TubePlace
	}
	if err := m.node.ProposeTube(r.Context(), what, r.PathValue("name"), move, req.To, req.From); err != nil {
		writeChangeError(w, err)
		return
	}
	admin.WriteValue(w, http.StatusOK, map[string]bool{"placed": m.node.Tubes().Decided[move]})
}

// servedGroup is the node of the group r's query parameter key names,
// and the move its move parameter does, when this member serves that
// group; else r is answered (forwarded to the group's leader, or
// refused) and ok is false.
func (m *Member) servedGroup(w http.ResponseWriter, r *http.Request, key string) (*replication.Node, uint16, uint64, bool) {
	g, err := strconv.ParseUint(r.URL.Query().Get(key), 10, 16)
	move, merr := strconv.ParseUint(r.URL.Query().Get("move"), 16, 64)
	if err != nil || merr != nil || int(g) >= m.shards.groups() {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: "want ?" + key + "=GROUP&move=ID"})
		return nil, 0, 0, false
	}
	if m.shards.serving(uint16(g)) == nil {
		m.forwardMove(w, r, uint16(g))
		return nil, 0, 0, false
	}
	return m.shards.node(uint16(g)), uint16(g), move, true
}

// What an adopt takes in: a tube's jobs at its freeze, its copy ahead
// of it (stageTube), or what changed since that copy.
const (
	adoptWhole = iota
	adoptStage
	adoptStageMore // a stage's part after its first
	adoptChanges
)

func (m *Member) serveAdopt(w http.ResponseWriter, r *http.Request) { m.adopt(w, r, adoptWhole) }

func (m *Member) serveStage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("part") {
		m.adopt(w, r, adoptStageMore)
		return
	}
	m.adopt(w, r, adoptStage)
}

func (m *Member) serveAdoptChanges(w http.ResponseWriter, r *http.Request) {
	m.adopt(w, r, adoptChanges)
}

// adopt takes a moving tube's jobs into the group this member leads, as
// what says.
func (m *Member) adopt(w http.ResponseWriter, r *http.Request, what int) {
	n, g, move, ok := m.servedGroup(w, r, "to")
	if !ok {
		return
	}
	from, err := strconv.ParseUint(r.URL.Query().Get("from"), 10, 16)
	if err != nil {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: "want ?from=GROUP"})
		return
	}
	tube := r.PathValue("name")
	asked := time.Now()
	// Read into room for what the request says it holds (up to
	// maxAdoptPresize): a large tube's frames read into a buffer grown by
	// the reads were copied over and over.
	buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 0), maxAdoptPresize)+bytes.MinRead))
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return
	}
	body := buf.Bytes()
	read := time.Since(asked)
	var in adoption
	if len(body) < 4 || int(binary.BigEndian.Uint32(body)) > len(body)-4 {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: "not a tube's jobs"})
		return
	}
	head := binary.BigEndian.Uint32(body)
	if err := json.Unmarshal(body[4:4+head], &in); err != nil {
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Message: "not a tube's jobs: " + err.Error()})
		return
	}
	frames := body[4+head:]
	key := tubeIn(tube, g)
	if !m.tubeMoves.begin(key) {
		admin.WriteError(w, &admin.Error{Status: http.StatusConflict, Message: fmt.Sprintf("tube %q is moving in or out of group %d already", tube, g)})
		return
	}
	defer m.tubeMoves.end(key)
	copying := what == adoptStage || what == adoptStageMore
	if err := m.fenceDriver(uint16(from), r.URL.Query().Get("term")); err != nil {
		writeMoveError(w, err)
		return
	}
	if placed, decided := m.node.Tubes().Decided[move]; decided {
		// Late: aborted, its abort's drop may have come already, and
		// nothing would drop these copies; placed, the tube's jobs here
		// are no copies (a deposed driver's call, or one sent again).
		writeMoveError(w, fmt.Errorf("%w: move %x of tube %q was decided (placed: %v)", errTubeMove, move, tube, placed))
		return
	}
	if b := n.Tubes(); what == adoptStage && b.Adopted[tube] == move && b.Staged[tube].Move != move {
		// Late too: the freeze's changes are taken, and a copy over them
		// would bring back what they dropped.
		writeMoveError(w, fmt.Errorf("%w: move %x of tube %q is past its stage", errTubeMove, move, tube))
		return
	}
	if m.shards.routing.Load().state.Owner(tube) == g {
		// Late too, a deposed driver's: the tube lives here, and its jobs
		// here are no copies.
		writeMoveError(w, fmt.Errorf("%w: tube %q lives in group %d", errTubeMove, tube, g))
		return
	}
	if what == adoptStageMore && n.Tubes().Staged[tube].Move != move {
		// The copy's first part is not here (dropped as an abort's, or
		// ended by another move's): the rest alone would be part of it.
		writeMoveError(w, fmt.Errorf("%w: group %d holds no copy of tube %q's move %x to go on with", errTubeMove, g, tube, move))
		return
	}
	if err := m.clearOtherAdopt(r.Context(), n, g, tube, move); err != nil {
		writeMoveError(w, err)
		return
	}
	if what == adoptChanges && n.Tubes().Adopted[tube] != move {
		// Its copy is not here (dropped as an abort's): the changes alone
		// would be part of the tube.
		writeMoveError(w, fmt.Errorf("%w: group %d holds no copy of tube %q's move %x", errTubeMove, g, tube, move))
		return
	}
	// A tube that moved out of here before comes back: its move out ends
	// first (its driver may have been lost after group 0 placed it, and
	// before the copies here went), and it is no longer refused here once
	// it is placed here again.
	if err := m.endMoveOut(r.Context(), n, tube); err != nil {
		writeMoveError(w, err)
		return
	}
	if err := m.endPrefixesOut(r.Context(), n, g, 0); err != nil {
		writeMoveError(w, err)
		return
	}
	// The mark stays through a stage: should the copy be given up, the
	// tube is still refused here.
	if f, ok := n.Tubes().Frozen[tube]; ok && f.Moved && !copying {
		if err := n.ProposeTube(r.Context(), replication.TubeThaw, tube, f.Move, 0, 0); err != nil {
			writeChangeError(w, err)
			return
		}
	}
	term, err := servingTerm(n)
	if err != nil {
		writeMoveError(w, err)
		return
	}
	cl := n.Store().NewOwnerClient(nil)
	defer cl.Close()
	var staged, stagedFrom uint16
	if what == adoptStage {
		staged, stagedFrom = replication.AdoptStaged, uint16(from)
	}
	if what != adoptStageMore {
		if err := n.ProposeTube(r.Context(), replication.TubeAdopted, tube, move, staged, stagedFrom); err != nil {
			writeChangeError(w, err)
			return
		}
	}
	began := time.Now()
	prepared := began.Sub(asked) - read
	var made int
	switch holders := m.sessions.HolderClients(g, in.Holders); what {
	case adoptStage, adoptStageMore: // copies: no holder, no figures
		made, err = cl.ImportTube([]byte(tube), frames, store.TubeFigures{}, nil)
	case adoptChanges:
		made, err = cl.ImportTubeChanges([]byte(tube), frames, in.Gone, in.Figures, holders)
		// The copy and its changes are the tube, or the move is given up.
		if held := tubeJobs(n, tube); err == nil && held != in.Jobs {
			err = fmt.Errorf("%w: the copy of tube %q holds %d jobs with its changes, its source %d", errTubeMove, tube, held, in.Jobs)
		}
	default:
		made, err = cl.ImportTube([]byte(tube), frames, in.Figures, holders)
	}
	imported := time.Since(began)
	if hook := m.afterImport.Load(); hook != nil {
		(*hook)(g)
	}
	if err == nil {
		err = awaitAcked(r.Context(), n, term, cl.PendingAck())
	}
	acked := time.Since(began) - imported
	var behind []string
	if err == nil && copying {
		// The next part waits for every replica's fsyncs, not the
		// quorum's alone (AwaitReplicas), up to stagePace.
		ctx, cancel := context.WithTimeout(r.Context(), stagePace)
		behind = n.AwaitReplicas(ctx, n.ElectionTimeout())
		cancel()
	}
	paced := time.Since(began) - imported - acked
	m.log.Info().Str("tube", tube).Int("group", int(g)).Int("what", what).Int("jobs", made).Int("gone", len(in.Gone)).Int64("read_ms", read.Milliseconds()).
		Int64("prepare_ms", prepared.Milliseconds()).Int64("import_ms", imported.Milliseconds()).
		Int64("ack_ms", acked.Milliseconds()).Int64("pace_ms", paced.Milliseconds()).Strs("replicas_behind", behind).Err(err).Msg("took a moving tube's jobs")
	if errors.Is(err, errTubeMove) {
		writeMoveError(w, err) // given up, not to be sent again
		return
	}
	if err != nil {
		admin.WriteError(w, &admin.Error{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf("taking tube %q's jobs: %v", tube, err)})
		return
	}
	if copying {
		m.stageParts.Store(move, time.Now()) // the copy goes on: resolveStages waits
	}
	admin.WriteValue(w, http.StatusOK, map[string]int{"jobs": made})
}

// clearOtherAdopt ends, before move's copies of tube come into n's group
// g, the copies an earlier move left here. A stage whose driver was lost
// leaves its copies while the tube's source still serves it, and may
// begin another move of it at once: taken in again, the old copies would
// hide the tube's changes (an import skips the ids it holds). That move
// is decided aborted, unless group 0 placed it, and its copies dropped.
// Another undecided adopt, one at the source's freeze, is refused: its
// source is frozen, and resolves it.
func (m *Member) clearOtherAdopt(ctx context.Context, n *replication.Node, g uint16, tube string, move uint64) error {
	b := n.Tubes()
	by := b.Adopted[tube]
	if by == 0 || by == move {
		return nil
	}
	placed, decided := m.node.Tubes().Decided[by]
	if !decided {
		st, staged := b.Staged[tube]
		if !staged {
			return fmt.Errorf("%w: group %d holds tube %q's copies of move %x, not yet decided", errTubeMove, g, tube, by)
		}
		var err error
		if placed, err = m.decideTubeMove(ctx, tube, by, st.From, g, false); err != nil {
			return err
		}
	}
	// A stage's copies are never the tube's jobs, wherever it routes
	// (its commands are refused here while they stay: Member.frozen);
	// an adopt's at the freeze are not once the tube lives here.
	if _, staged := b.Staged[tube]; !placed && (staged || m.shards.routing.Load().state.Owner(tube) != g) {
		if err := dropTube(ctx, n, tube); err != nil {
			return err
		}
	}
	// Placed, its copies were the tube's jobs here, moved out since (a
	// tube moves in only where it does not live): its adopt alone is
	// left to end (endPlacedAdopts had not yet).
	return endAdopt(ctx, n, tube, by)
}

// staged is router.RouterConfig.Staged: the tubes of group g whose
// copies a move took in ahead of its source's freeze.
func (m *Member) staged(g uint16) func(tube []byte) bool {
	n := m.shards.node(g)
	if n == nil {
		return nil
	}
	st := n.Tubes().Staged
	if len(st) == 0 {
		return nil
	}
	return func(tube []byte) bool {
		_, ok := st[string(tube)]
		return ok
	}
}

// uncounted is router.RouterConfig.Uncounted: the tubes of group g
// whose jobs here another group counts in stats and list-tubes: a
// stage's copies, and, while a move has a tube's jobs in both groups
// (from the destination's adopt at the freeze to the source's drop after
// the placement), the copies adopted here or the frozen jobs left here,
// whichever side the tube does not route to now.
func (m *Member) uncounted(g uint16) func(tube []byte) bool {
	n := m.shards.node(g)
	if n == nil {
		return nil
	}
	b := n.Tubes()
	frozen, _ := n.AnyFrozen()
	if len(b.Staged) == 0 && len(b.Adopted) == 0 && !frozen {
		return nil
	}
	check := m.frozenCheck(g, n)
	rt := m.shards.routing.Load().state
	return func(tube []byte) bool {
		if _, ok := b.Staged[string(tube)]; ok {
			return true
		}
		_, adopted := b.Adopted[string(tube)]
		return (adopted || check(tube)) && rt.Owner(string(tube)) != g
	}
}

// serveDrop drops what a move's adopt took, for its abort: after the
// adopt of the same tube here, if one runs, and not if the copies here
// are another move's that group 0 has not decided yet (this drop is then
// a deposed driver's, late: that move's own abort drops them).
func (m *Member) serveDrop(w http.ResponseWriter, r *http.Request) {
	n, g, move, ok := m.servedGroup(w, r, "to")
	if !ok {
		return
	}
	tube := r.PathValue("name")
	key := tubeIn(tube, g)
	if err := m.tubeMoves.await(r.Context(), key); err != nil {
		return // the driver went away
	}
	defer m.tubeMoves.end(key)
	by := n.Tubes().Adopted[tube]
	if by != 0 && by != move {
		if _, decided := m.node.Tubes().Decided[by]; !decided {
			writeMoveError(w, fmt.Errorf("%w: group %d holds tube %q's copies of move %x, not yet decided, not of move %x", errTubeMove, g, tube, by, move))
			return
		}
	}
	if m.shards.routing.Load().state.Owner(tube) == g {
		admin.WriteError(w, &admin.Error{Status: http.StatusConflict, Message: fmt.Sprintf("tube %q lives in group %d: its jobs stay", tube, g)})
		return
	}
	if err := dropTube(r.Context(), n, tube); err != nil {
		writeChangeError(w, err)
		return
	}
	if err := endAdopt(r.Context(), n, tube, by); err != nil {
		writeChangeError(w, err)
		return
	}
	admin.WriteValue(w, http.StatusOK, map[string]bool{"dropped": true})
}

// callLeader posts body to path on group g's leader's --http, with this
// member's admin token, and reads its JSON answer into out (if set).
func (m *Member) callLeader(ctx context.Context, g uint16, path string, body []byte, out any) error {
	l, err := m.awaitGroupLeader(ctx, g)
	if err != nil {
		return err
	}
	switch {
	case l.Serving && m.httpLn == nil:
		return fmt.Errorf("%w: group %d is led here, and this member has no --http to take the call", replication.ErrNoLeader, g)
	case l.Serving:
		l.HTTP = m.HTTPAddr().String()
	case l.HTTP == "":
		return fmt.Errorf("%w: group %d has no leader known here", replication.ErrNoLeader, g)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.sideScheme()+"://"+l.HTTP+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if m.cfg.HTTP.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+m.cfg.HTTP.AdminToken)
	}
	resp, err := (&http.Client{Transport: m.forwarding}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return &leaderError{group: g, leader: l.Name, status: resp.StatusCode, msg: e.Error}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// leaderError is a group leader's answer other than 200 to callLeader.
type leaderError struct {
	group  uint16
	leader string
	status int
	msg    string
}

func (e *leaderError) Error() string {
	return fmt.Sprintf("group %d's leader %s: %d %s", e.group, e.leader, e.status, e.msg)
}

// leaderLostUnder reports whether err, a call to a group's leader that
// failed, failed because that leadership was lost or moved under it (its
// 503, no leader known, no answer at all), not because the leader
// refused what it was asked: the same call to the group's next leader may
// pass.
func leaderLostUnder(err error) bool {
	if le, ok := errors.AsType[*leaderError](err); ok {
		return le.status == http.StatusServiceUnavailable
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

const (
	// leaderRetry is how long a move's calls are made again while the
	// group they go to has lost its leader under them: an election, and
	// under CPU starvation a rebuild of seconds, with time left in the
	// move's for what follows.
	leaderRetry = tubeMoveTimeout / 2
	// leaderRetryPause is the pause between such calls.
	leaderRetryPause = 200 * time.Millisecond
)

// callLeaderAgain is callLeader, made again while group g's leader is
// lost under it (leaderLostUnder), for up to leaderRetry and within ctx:
// each call must be one the group may take twice. still, when set, is
// asked before each call again, and ends the calls with its error: the
// caller's own standing (the leadership its request was made in).
func (m *Member) callLeaderAgain(ctx context.Context, g uint16, path string, body []byte, out any, still func() error) error {
	until := time.Now().Add(leaderRetry)
	for calls := 1; ; calls++ {
		err := m.callLeader(ctx, g, path, body, out)
		if err == nil || !leaderLostUnder(err) || time.Now().After(until) {
			return err
		}
		m.callingNext(g, path, calls, err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(leaderRetryPause):
		}
		if still != nil {
			if serr := still(); serr != nil {
				return fmt.Errorf("%w; and %w", err, serr)
			}
		}
	}
}

// callingNext logs a move's call to group g's leader made again, after
// calls lost under it.
func (m *Member) callingNext(g uint16, path string, calls int, err error) {
	m.log.Info().Int("group", int(g)).Str("path", path).Int("calls", calls).Err(err).
		Msg("a group's leader was lost under a move's call: calling its next")
}

// resolveTubeMoves finishes, for each group this member leads, the moves
// of its tubes that no move here drives (their driver was lost): one
// placed is finished, one not decided is aborted unless group 0 placed it
// first, and one moved out whose jobs are still here has them dropped.
func (m *Member) resolveTubeMoves() {
	go m.endPlacedAdopts()
	if m.keepLostMoves.Load() {
		return
	}
	m.resolveStages()
	for g := range m.shards.groups() {
		if m.shards.serving(uint16(g)) == nil {
			continue
		}
		n := m.shards.node(uint16(g))
		if frozen, _ := n.AnyFrozen(); !frozen {
			continue
		}
		for tube, f := range n.Tubes().Frozen {
			if m.tubeMoves.has(tubeIn(tube, uint16(g))) {
				continue
			}
			if f.Moved {
				if tubeJobs(n, tube) == 0 || isStaged(n, tube) { // a stage's copies
					continue
				}
			}
			go func() {
				key := tubeIn(tube, uint16(g))
				if !m.tubeMoves.begin(key) {
					return
				}
				defer m.tubeMoves.end(key)
				if now, ok := n.Tubes().Frozen[tube]; !ok || now != f {
					return // resolved meanwhile, or moved in again
				}
				ctx, cancel := context.WithTimeout(context.Background(), tubeMoveTimeout)
				defer cancel()
				var err error
				if f.Moved {
					err = dropTube(ctx, n, tube)
				} else {
					err = m.abortTubeMove(ctx, n, tube, f.Move, uint16(g), f.To, fmt.Errorf("%w: its driver was lost", errTubeMove))
				}
				m.log.Info().Str("tube", tube).Int("group", g).Err(err).Msg("a tube's move, left by its driver, resolved")
			}()
		}
	}
}

// stageLost is how long a group's leader sees a move's copy taken ahead
// of its freeze, no part of it coming (stageParts), no adopt of it
// running here and group 0 not deciding it, before it has the move
// aborted: the move's driver has as long after the copy's last part for
// the rest (tubeMoveTimeout), so one still live past that is giving up.
const stageLost = tubeMoveTimeout

// stageChunk is how much of a tube's copy ahead of its freeze goes in
// one call (stageTube): well within the segment log's bound on what it
// holds unsynced (64 MB), which an import of a whole large tube outran.
const stageChunk = 16 << 20

// resolveStages ends, in each group this member leads, the copies moves
// took in ahead of their freezes that will not be taken further: a move
// aborted (its driver's drop may be lost with it), or one whose driver
// was lost before the freeze, which leaves nothing in its source's log
// for the source's resolver, decided aborted here after stageLost (a
// driver that freezes after all then reads it aborted, and thaws). Called
// from the balance loop.
func (m *Member) resolveStages() {
	seen := map[uint64]bool{}
	decided := m.node.Tubes().Decided
	for g := range m.shards.groups() {
		if m.shards.serving(uint16(g)) == nil {
			continue
		}
		n := m.shards.node(uint16(g))
		for tube, st := range n.Tubes().Staged {
			key := tubeIn(tube, uint16(g))
			if m.tubeMoves.has(key) {
				continue
			}
			placed, ok := decided[st.Move]
			if placed {
				continue // endPlacedAdopts ends it
			}
			// One whose tube routes here now can go no further: its
			// freeze's adopt would be refused.
			if !ok && m.shards.routing.Load().state.Owner(tube) != uint16(g) {
				seen[st.Move] = true
				if m.stagesSeen == nil {
					m.stagesSeen = map[uint64]time.Time{}
				}
				first, was := m.stagesSeen[st.Move]
				if !was {
					m.stagesSeen[st.Move] = time.Now()
				}
				// A copy that goes on is no copy left: its wait runs from
				// its last part.
				if last, ok := m.stageParts.Load(st.Move); ok && last.(time.Time).After(first) {
					first = last.(time.Time)
					m.stagesSeen[st.Move] = first
				}
				wait := time.Duration(m.stageLostAfter.Load())
				if wait == 0 {
					wait = stageLost
				}
				if !was || time.Since(first) < wait {
					continue
				}
			}
			go func() {
				if !m.tubeMoves.begin(key) {
					return
				}
				defer m.tubeMoves.end(key)
				if now, ok := n.Tubes().Staged[tube]; !ok || now != st {
					return // taken further meanwhile, or ended
				}
				ctx, cancel := context.WithTimeout(context.Background(), tubeMoveTimeout)
				defer cancel()
				err := m.clearOtherAdopt(ctx, n, uint16(g), tube, 0)
				m.log.Info().Str("tube", tube).Int("group", g).Int("from", int(st.From)).Err(err).
					Msg("a tube's copy taken ahead of its move's freeze, left by its driver, dropped")
			}()
		}
	}
	for move := range m.stagesSeen {
		if !seen[move] {
			delete(m.stagesSeen, move)
		}
	}
	m.stageParts.Range(func(move, last any) bool {
		if !seen[move.(uint64)] && time.Since(last.(time.Time)) > stageLost {
			m.stageParts.Delete(move) // over, one way or another
		}
		return true
	})
}
