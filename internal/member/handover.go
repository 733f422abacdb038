package member

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sproutmq/sprout/internal/replication"
	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
)

// Handing a leadership over (handOver), to balance the leaders or before
// leaving a group: no session of this member closes, and the sessions'
// reservations go with the leadership (replication's handover.go), so a
// worker's delete of the job it holds is answered DELETED by the next
// leader, as one server would answer it.
const (
	// handOverSettle bounds the wait for the commands that passed the
	// router's hold before it was set (router.Router.LocalDone), the
	// wait for their acknowledgement, and the one for the handover's
	// record.
	handOverSettle = time.Second
	// handOverLate is how long past an election timeout, when raft drops
	// a transfer that has not happened, the leadership is awaited.
	handOverLate = 250 * time.Millisecond
	// handOverHold is how long the local fast path is held: past a
	// transfer, which raft drops after an election timeout if it has not
	// happened.
	handOverHold = 5 * time.Second
	// receiverPoll is how often a transfer's receiver is looked at: one
	// not heard from within a third of an election timeout has it
	// aborted.
	receiverPoll = 50 * time.Millisecond
)

// handOverAckWait bounds the wait for what ran here to be acknowledged
// before a handover's record: a variable for a test, which must see the
// handover go on past it.
var handOverAckWait = handOverSettle

// handOverRecordWait bounds the wait for a handover's record: a
// variable for a test, which must see it pass before the leader, its
// followers stopped, steps down.
var handOverRecordWait = handOverSettle

// errLeadershipStayed: raft did not transfer the leadership.
var errLeadershipStayed = errors.New("the leadership stayed")

// errElectedElsewhere: the transfer failed, and another member than its
// receiver won the election that followed.
var errElectedElsewhere = errors.New("the leadership went to an election")

// errLocalRuns: a command of this member's sessions still ran on the
// group's store here when the handover would have gone.
var errLocalRuns = errors.New("a command still ran on its store here")

// errNotLogged: the reservations the leader's sessions hold were not
// logged in time, so the leadership stays rather than go without them.
var errNotLogged = errors.New("its sessions' reservations were not logged in time")

// handOver hands group g's leadership, led here through n, to member to.
// The member's sessions send their commands for g the other way
// (router.Router.HoldLocal), the group's commands stop here (Gate) and
// its store hands no job out (store.Store.PauseJobs); once what ran is
// acknowledged, the jobs its sessions hold are logged (ProposeHandOver),
// and raft transfers the leadership. It returns once another member
// leads. If it stayed past an election timeout, the record is voided
// (ProposeHandOverAborted) before the group serves here again. One
// handover runs at a time.
func (m *Member) handOver(n *replication.Node, g uint16, to string) error {
	m.handingOver.Lock()
	defer m.handingOver.Unlock()
	term, err := servingTerm(n)
	if err != nil {
		return err // handed over meanwhile, or lost
	}
	m.sessions.HoldLocal(g, time.Now().Add(handOverHold))
	if !m.sessions.LocalDone(g, time.Now().Add(handOverSettle)) {
		// A command still runs here past the bound (its loop starved):
		// going now would close its session, waiting for its reply.
		return errLocalRuns
	}
	st := n.Store()
	st.PauseJobs()
	m.sessions.Gate(g)
	defer func() {
		m.sessions.Ungate(g)
		st.ResumeJobs()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), handOverAckWait)
	err = awaitRan(ctx, n, term)
	cancel()
	if errors.Is(err, replication.ErrNotServing) {
		return err
	}
	if err != nil {
		// It goes on: the record below is appended after what ran, so it
		// commits only once all of that does, and raft hands the
		// leadership only to a replica holding the whole log. A session
		// here still waiting for a reply of what ran closes with the
		// leadership (closeGroupClients), as after a loss.
		m.log.Warn().Int("group", int(g)).Str("to", to).Err(err).
			Msg("handing a leadership over before its log acknowledged what ran here")
	}
	held := m.sessions.Held(g)
	logged := false
	if len(held) > 0 {
		if hook := m.beforeRecord.Load(); hook != nil {
			(*hook)(g)
		}
		body, err := json.Marshal(held)
		if err == nil {
			// A wait of its own: the acknowledgements above may have
			// used the whole of theirs on a starved machine.
			ctx, cancel := context.WithTimeout(context.Background(), handOverRecordWait)
			err = n.ProposeHandOver(ctx, body)
			cancel()
		}
		if errors.Is(err, replication.ErrNotServing) {
			return err
		}
		logged = !errors.Is(err, replication.ErrNotAppended)
		if err != nil {
			// Not logged in time, it may be yet, or be passed by (the
			// next leader takes it only as the last entry before its
			// term): the leadership stays, and the record is voided.
			return m.keepLeadership(n, g, logged, fmt.Errorf("%w: %v", errNotLogged, err))
		}
	}
	m.log.Info().Int("group", int(g)).Str("to", to).Int("held", len(held)).Bool("logged", logged).
		Msg("handing a leadership over: its sessions' reservations listed")
	if hook := m.beforeTransfer.Load(); hook != nil {
		(*hook)(g)
	}
	if err := n.TransferLeadership(to); err != nil {
		return m.keepLeadership(n, g, logged, err)
	}
	timeout := time.After(n.ElectionTimeout() + handOverLate)
	poll := time.NewTicker(receiverPoll)
	defer poll.Stop()
	for {
		// Gone once another leads: a change proposed here (the removal
		// of a replica leaving) goes to it. Another than to won an
		// election: the transfer failed, and the leadership went as after
		// a failover.
		info, changed := n.Leader()
		if !info.Serving && info.Name != "" && info.Name != m.node.Name() {
			if info.Name != to {
				return fmt.Errorf("%w: %s was elected instead of %s", errElectedElsewhere, info.Name, to)
			}
			return nil
		}
		select {
		case <-changed:
		case <-n.Done():
			return nil
		case <-poll.C:
			if m.heardLately(to) {
				continue
			}
			// The receiver went silent (stopped, or cut off) under the
			// transfer, which raft would otherwise hold, dropping the
			// group's proposals, for an election timeout.
			if err := n.AbortTransfer(); err != nil {
				return nil // stopped
			}
			if info, _ := n.Leader(); !info.Serving {
				return nil // it took over meanwhile
			}
			return m.keepLeadership(n, g, logged, fmt.Errorf("%w: %s went silent", errLeadershipStayed, to))
		case <-timeout:
			if info, _ := n.Leader(); !info.Serving {
				return nil
			}
			return m.keepLeadership(n, g, logged, errLeadershipStayed)
		}
	}
}

// keepLeadership voids the handover's record if one may be logged, while
// this member still leads group g, and returns why the handover did not
// happen: the group serves here again once the record is void, since the
// next leader would take reservations changed since.
func (m *Member) keepLeadership(n *replication.Node, g uint16, logged bool, why error) error {
	if !logged {
		return why
	}
	// Bounded, the group's commands held meanwhile: a leader that cannot
	// commit steps down within an election timeout anyway. A void the
	// log refuses at once (full) is not tried again: it would be
	// refused as fast for the whole bound.
	retry := time.NewTicker(n.ElectionTimeout() / 10)
	defer retry.Stop()
	for stuck := time.Now().Add(2 * n.ElectionTimeout()); ; {
		if info, _ := n.Leader(); !info.Serving {
			return why
		}
		ctx, cancel := context.WithTimeout(context.Background(), handOverSettle)
		err := n.ProposeHandOverAborted(ctx)
		cancel()
		if err == nil {
			return why
		}
		if errors.Is(err, replication.ErrNotAppended) || time.Now().After(stuck) {
			m.log.Error().Err(err).Int("group", int(g)).Msg("a leadership that stayed cannot void its handover; it serves again")
			return why
		}
		select {
		case <-retry.C:
		case <-n.Done():
			return why // stopped: nothing serves here again
		}
	}
}

// heardLately reports whether a Raft message came from the member named
// within a third of an election timeout: heartbeats come every tick, a
// tenth of it, and a member stopped or cut off keeps its connection up
// for seconds, but sends nothing. A handover's receiver must be so.
func (m *Member) heardLately(name string) bool {
	return m.node.Host().HeardFrom(name, m.node.ElectionTimeout()/3)
}

// shutdownReceiver is the candidate a graceful shutdown hands a group
// to: the least by rank (whether it is barred from leading, whether it
// came back just now, the groups it leads), then by name; "" if none.
func shutdownReceiver(candidates []string, rank func(name string) [3]int) string {
	to, best := "", [3]int{}
	for _, name := range candidates {
		r := rank(name)
		if to == "" || cmp.Or(slices.Compare(r[:], best[:]), cmp.Compare(name, to)) < 0 {
			to, best = name, r
		}
	}
	return to
}

// takeHanded gives the reservations group g's last leader handed over
// with its leadership (HandOver's body) to their sessions' owner clients
// on st, the group's store, as this member begins to serve the group
// (replication.NodeConfig.OnServe), on the node's goroutine, before it
// serves. Group 0 can be handed to a member as soon as its node runs,
// just before its router is made (startNode): the node waits for the
// router, up to routerWait, so that the jobs are given while nothing can
// change the group's leadership.
func (m *Member) takeHanded(g uint16, st *store.Store, handed []byte) {
	var held []router.Holder
	if err := json.Unmarshal(handed, &held); err != nil {
		m.log.Error().Err(err).Int("group", int(g)).Msg("reservations handed over with a leadership cannot be read")
		return
	}
	sessions := m.sessionsMade()
	if sessions == nil {
		select {
		case <-m.routerMade:
			sessions = m.sessionsMade()
		case <-time.After(routerWait):
			m.log.Warn().Int("group", int(g)).Int("handed", len(held)).
				Msg("the reservations handed over with the leadership are not taken: the router is not made; their jobs are ready")
			return
		}
	}
	took := sessions.Adopt(g, st, held)
	m.log.Info().Int("group", int(g)).Int("handed", len(held)).Int("taken", took).
		Msg("took the reservations handed over with the leadership")
}

// routerWait bounds takeHanded's wait for the router, made right after
// group 0's node starts.
const routerWait = 5 * time.Second

// handOverLeaderships hands every group this member leads to another of
// its voters, as a graceful shutdown is about to stop the node, the way
// Kafka's controlled shutdown moves partition leaderships off a broker:
// the groups' clients on other members then wait for a transfer (tens of
// milliseconds) instead of an election timeout, and the jobs their
// sessions hold go with it (handOver). Each group goes to the voter heard
// from lately that leads fewest groups, one that may lead (Book.MayLead)
// first, then one that has not just come back (comebacks: in a rolling
// restart, the member restarted last would otherwise take every group
// while it catches up); a group that cannot go, or whose tube move this
// member drives, is left to an election, as before. The node stops right
// after: the balancers elsewhere leave a new leadership where it went
// for leaderSettle, so none comes back meanwhile.
func (m *Member) handOverLeaderships(ctx context.Context) {
	sh, self := m.shards, m.node.Name()
	if m.sessions == nil || !m.node.Host().Finalized() {
		return // a member of the release before may lead: it reads no handover
	}
	reported, names := m.sessions.Reported(), m.memberNames()
	leads := map[string]int{}
	for g := range sh.groups() {
		leads[m.leaderOf(uint16(g), reported, names)]++
	}
	// A member that may not lead (cordoned or draining) is a receiver
	// only when no other is: it would hand the group on within seconds,
	// where another would not.
	book := m.node.Book()
	barred := map[string]int{}
	for id := range names {
		if !book.MayLead(id) {
			barred[names[id]] = 1
		}
	}
	for g := range sh.groups() {
		n := sh.node(uint16(g))
		if ctx.Err() != nil {
			return
		}
		if n == nil || m.driving(uint16(g)) {
			continue
		}
		if info, _ := n.Leader(); !info.Serving {
			continue
		}
		voters, _, _ := n.Replicas()
		var candidates []string
		for _, id := range voters {
			if name := names[id]; name != "" && name != self && m.heardLately(name) {
				candidates = append(candidates, name)
			}
		}
		now := time.Now()
		to := shutdownReceiver(candidates, func(name string) [3]int {
			return [3]int{barred[name], m.unsettled(name, now), leads[name]}
		})
		if to == "" {
			m.log.Warn().Int("group", g).Msg("shutting down: no voter to hand the group's leadership to; it goes to an election")
			continue
		}
		if err := m.handOver(n, uint16(g), to); err != nil {
			m.log.Warn().Int("group", g).Str("to", to).Err(err).Msg("shutting down: the group's leadership was not handed over; it goes to an election")
			continue
		}
		leads[to]++
		m.log.Info().Int("group", g).Str("to", to).Msg("shutting down: handed the group's leadership over")
	}
}
