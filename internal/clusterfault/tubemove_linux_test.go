package clusterfault

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// moveClient waits for a tube's move, which answers once it is done.
var moveClient = &http.Client{Timeout: 45 * time.Second}

// tubeMoves counts the rounds of the tube-move fault: of each four, a
// tube's move, the same with its source or (every other time) its
// destination group's leader killed, a prefix's placement, the same with
// group 0's leader (its driver) killed.
var tubeMoves atomic.Int64

// moveBound is how long a move should hold its tube's commands when no
// fault hits it (the bound: at most 1 s). It is reported, not
// asserted: the hold grows with the tube's jobs, and make test's short run
// shares the machine with every other package's tests (CI once saw
// 1.07 s for a tube of 1,543 jobs there); the benchmark
// cluster-g3-move-under-load measures it.
const moveBound = time.Second

// moveTube moves a group's workload tube live to another group and back,
// under the workload, through a member that does not lead its group
// (docs/design/shards.md 9, "a live tube move under load"). Every other
// round kills the source group's leader, or every other time the
// destination group's (the issue: "a tube move interrupted by any
// member's death completes or rolls back"), at a random moment within the
// move's first 20 ms (a move takes about 10 here) and starts it again a
// second later: the move completes or is aborted (by the source group's
// next leader), and the round then brings the tube back to its group. The round's usual checks (nothing lost,
// resurrected or mismatched, no double holding, every group converged,
// every id peeked through the fence of its tube's group, which the tube
// is back in) hold either way; without the kill, each move's hold of the
// tube's commands is reported, marked when over moveBound. Every other
// pair of rounds places a prefix instead, the tube's name, which takes
// the tube alone (placePrefixRound), when the tube was never moved by name.
func moveTube(r *round, lay layout) (outcome, error) {
	c := r.c
	if c.groups < 2 {
		return outcome{}, fmt.Errorf("%w: one group, nowhere to move a tube", errSkipped)
	}
	g := rand.IntN(c.groups)
	to := (g + 1 + rand.IntN(c.groups-1)) % c.groups
	tube := c.tubes[g]
	leader := lay.leaders[g]
	n := tubeMoves.Add(1)
	kill := n%2 == 0
	// The member killed, if any: the source group's leader, or every
	// other time the destination group's (which may be the same).
	victim, killed := leader, g
	if dest := lay.leaders[to]; kill && n%8 == 6 && dest != nil {
		victim, killed = dest, to
	}
	var via *member
	for _, m := range c.others(leader) {
		if m.up() && m != victim {
			via = m
			break
		}
	}
	if n%4 == 3 || n%4 == 0 {
		if prefix, ok := c.placeable(r, lay, g); ok {
			return c.placePrefixRound(r, lay, prefix, g, to, via, kill)
		}
	}
	out := outcome{victim: fmt.Sprintf("%s from g%d to g%d and back through %s", tube, g, to, via.name)}
	if kill {
		out.victim += ", g" + fmt.Sprint(killed) + "'s leader " + victim.name + " killed"
		killAt := time.Duration(rand.IntN(20)) * time.Millisecond
		victim.noteMoves()
		time.AfterFunc(killAt, victim.killNow)
		begun := time.Now()
		_, paused, err := c.moveTubeTo(via, tube, to)
		r.t.Logf("moving %s with %s killed after %v: held %v, %v", tube, victim.name, killAt, paused, err)
		// Down for a second, as kill -9 of a leader is: the others elect
		// new leaders meanwhile, which the double-holding check sees
		// (a restart at once may win back its groups unseen).
		holdUntil(begun.Add(killAt + time.Second))
		c.start(victim)
		c.awaitLeaders(leaderWait)
		if err := c.settleTube(via, tube, g); err != nil {
			return out, err
		}
		return out, r.landsIn(tube, g)
	}
	for _, dest := range []int{to, g} {
		status, paused, err := c.postAgain(r, via, "/cluster/tubes/"+url.PathEscape(tube)+"/move", dest)
		if err != nil || status != http.StatusOK {
			return out, fmt.Errorf("moving %s to group %d: %d %v", tube, dest, status, err)
		}
		out.victim += fmt.Sprintf(", held %v", paused)
		if paused > moveBound {
			out.victim += fmt.Sprintf(" (over %v)", moveBound)
		}
		if err := r.landsIn(tube, dest); err != nil {
			return out, err
		}
	}
	return out, nil
}

// placeable is the prefix a placement round places: group g's workload
// tube's whole name, if no other tube of the workload starts with it and
// no move placed it by name (a prefix does not take such a tube).
func (c *cluster) placeable(r *round, lay layout, g int) (string, bool) {
	tube := c.tubes[g]
	for _, other := range append(slices.Clone(c.tubes), c.quietTubes...) {
		if other != tube && strings.HasPrefix(other, tube) {
			return "", false
		}
	}
	for _, st := range lay.status {
		if _, placed := st.Placed[tube]; placed {
			return "", false
		}
	}
	return tube, true
}

// placePrefixRound places prefix, which takes group g's workload tube,
// in group to and back in g through via, under the workload; with kill,
// group 0's leader, which drives placements, is killed at a random moment
// within the first 20 ms and started again a second later: the placement
// completes or is aborted (by group 0's next leader), and the round then
// places the prefix back in g.
func (c *cluster) placePrefixRound(r *round, lay layout, prefix string, g, to int, via *member, kill bool) (outcome, error) {
	driver := lay.leaders[0]
	if kill && via == driver {
		for _, m := range c.others(driver) {
			if m.up() {
				via = m
				break
			}
		}
	}
	out := outcome{victim: fmt.Sprintf("prefix %s placed in g%d and back in g%d through %s", prefix, to, g, via.name)}
	if kill {
		out.victim += ", g0's leader " + driver.name + " killed"
		killAt := time.Duration(rand.IntN(20)) * time.Millisecond
		driver.noteMoves()
		time.AfterFunc(killAt, driver.killNow)
		begun := time.Now()
		_, paused, err := c.post(via, "/cluster/placements/"+url.PathEscape(prefix), to)
		r.t.Logf("placing %s with %s killed after %v: held %v, %v", prefix, driver.name, killAt, paused, err)
		holdUntil(begun.Add(killAt + time.Second))
		c.start(driver)
		c.awaitLeaders(leaderWait)
		if err := c.settle(via, "/cluster/placements/"+url.PathEscape(prefix), g); err != nil {
			return out, err
		}
		return out, r.landsIn(c.tubes[g], g)
	}
	for _, dest := range []int{to, g} {
		status, paused, err := c.postAgain(r, via, "/cluster/placements/"+url.PathEscape(prefix), dest)
		if err != nil || status != http.StatusOK {
			return out, fmt.Errorf("placing %s in group %d: %d %v", prefix, dest, status, err)
		}
		out.victim += fmt.Sprintf(", held %v", paused)
		if paused > moveBound {
			out.victim += fmt.Sprintf(" (over %v)", moveBound)
		}
		if err := r.landsIn(c.tubes[g], dest); err != nil {
			return out, err
		}
	}
	return out, nil
}

// moveTubeTo asks m to move tube to group g: the answer's status, and how
// long the move held the tube's commands.
func (c *cluster) moveTubeTo(m *member, tube string, g int) (int, time.Duration, error) {
	return c.post(m, "/cluster/tubes/"+url.PathEscape(tube)+"/move", g)
}

// post posts {"group": g} to path on m's --http, a move or a placement:
// the answer's status, and how long it held the tubes' commands.
func (c *cluster) post(m *member, path string, g int) (int, time.Duration, error) {
	req, err := http.NewRequest(http.MethodPost, m.httpBase()+path, strings.NewReader(fmt.Sprintf(`{"group": %d}`, g)))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	defer c.slowDumps(fmt.Sprintf("POST %s {\"group\": %d} through %s, asked at %s", path, g, m.name, time.Now().Format("15:04:05.000")))()
	resp, err := moveClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Paused int64  `json:"paused_ms"`
		Error  string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, 0, fmt.Errorf("%s", out.Error)
	}
	return resp.StatusCode, time.Duration(out.Paused) * time.Millisecond, nil
}

// postAgain is post, asked again while it answers 503, up to
// retryUnavailable, as an operator would: "try again", the group's
// leadership moving (after a partition heals the balancer hands
// leaderships back; a member that has just stopped leading forwards a
// request once more, but no further, and not while it knows no leader).
//
// A 409 that says a move was aborted, or that one is still under way or
// not over, is asked again too: a move whose driver lost the group's
// leadership (an election under load: CI's parallel packages starved a
// leader past an election timeout during a move, on the code of the
// sixteenth session too) is aborted, as the issue allows ("completes or
// rolls back"), and the group's next leader resolves it.
func (c *cluster) postAgain(r *round, m *member, path string, g int) (int, time.Duration, error) {
	status, paused, err := c.post(m, path, g)
	for until := time.Now().Add(retryUnavailable); retryable(status, err) && time.Now().Before(until); {
		r.t.Logf("%s to group %d: %d %v: again", path, g, status, err)
		time.Sleep(250 * time.Millisecond)
		status, paused, err = c.post(m, path, g)
		if status == http.StatusConflict && alreadyIn(err, g) {
			return http.StatusOK, paused, nil // the first went through before its answer was lost
		}
	}
	return status, paused, err
}

// retryable reports whether postAgain asks again after status and err.
func retryable(status int, err error) bool {
	if status == http.StatusServiceUnavailable {
		return true
	}
	if status != http.StatusConflict || err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "was aborted") || strings.Contains(msg, "moving already") || strings.Contains(msg, "is not over")
}

// retryUnavailable is how long postAgain asks again: about the
// leaderships' settling after a fault (two election timeouts and a
// balancer's round), and an aborted move's resolution. Members built
// with the race detector, five of them on CI's two cores beside other
// packages' tests, lose leaderships to starvation during a move, and
// each rebuild takes seconds: three times as long (testproc.SproutBinary
// builds them so when the test is).
var retryUnavailable = func() time.Duration {
	if testproc.RaceEnabled {
		return 30 * time.Second
	}
	return 10 * time.Second
}()

// settleTube brings tube back to group g, where the round's checks look
// for it, once whatever move of it was under way is over (its group's
// next leader finishes one whose driver was killed).
func (c *cluster) settleTube(via *member, tube string, g int) error {
	return c.settle(via, "/cluster/tubes/"+url.PathEscape(tube)+"/move", g)
}

// settle posts {"group": g} to path on via until it is done, or answers
// that it was done already (alreadyIn); the caller then confirms where
// the tube lives (round.landsIn).
func (c *cluster) settle(via *member, path string, g int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		status, _, err := c.post(via, path, g)
		switch {
		case status == http.StatusOK:
			return nil
		case status == http.StatusConflict && alreadyIn(err, g):
			return nil // back, or never moved
		case time.Now().After(deadline):
			return fmt.Errorf("%s: not in group %d after a minute: %d %v", path, g, status, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// alreadyIn reports whether err, a move's or a placement's 409 to group
// g, says its tube or prefix is in g already: internal/member's "tube %q
// lives in group %d already" (serveTubeMove) and "prefix %q is placed in
// group %d already" (placePrefix). No other: "tube %q is moving already"
// is a move under way, whose outcome is not known yet.
func alreadyIn(err error, g int) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, fmt.Sprintf(" lives in group %d already", g)) ||
		strings.Contains(msg, fmt.Sprintf(" placed in group %d already", g))
}

// landsIn confirms that tube lives in group g, as every member up routes
// it: a put into it through each, on a connection of its own, must take
// an id of g (its prefix, meta.JobID). A member whose route is stale is
// answered WrongGroup by the tube's old group and sends the put again
// where the tube now lives ("stale routes cost one round trip and are
// never wrong", docs/design/shards.md 3.2), so an id of another group is
// a put into a group the tube no longer lives in: a failure. A put
// refused or unanswered (a leader being elected) is tried again, for
// leaderWait.
func (r *round) landsIn(tube string, g int) error {
	for _, m := range r.c.members {
		if !m.up() {
			continue
		}
		deadline := time.Now().Add(leaderWait)
		for {
			token := "owner-" + strconv.FormatUint(r.seq.Add(1), 10)
			id, err := r.putThrough(m, tube, token, "where it lives")
			if err == nil {
				if groupOf(id) != g {
					r.t.Errorf("a put into %s through %s took id %d, of group %d, once the tube lived in group %d",
						tube, m.name, id, groupOf(id), g)
				}
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no put into %s through %s acknowledged within %v of its move to group %d: %v", tube, m.name, leaderWait, g, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}
