package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sproutmq/sprout/internal/meta"
)

const groupsHelp = `List the Raft groups of a Sprout cluster, and move a group's replica from
one member to another, through the --http port of any member (--api), with
the admin token for a move.

  groups [list]             every group of the cluster as that member sees
                            it (GET /cluster): its id, leader, the members
                            voting in it (learners in brackets), and the
                            tubes and jobs of that member's replica, or of
                            the group's leader where it holds none; then
                            the tubes placed by name (tubes move) and the
                            prefixes placed (tubes place, PREFIX*), each
                            with its group
  groups move G FROM TO     move group G's replica from member FROM to member
                            TO, a cluster of several groups' (--cluster-groups):
                            TO is added as a learner, catches up from a
                            snapshot, becomes a voter, then FROM is removed
                            (handing the leadership over first if it leads)
                            and drops the group's log. Answered once done;
                            prints the group's replicas after.
  groups grow N             grow a cluster of several groups to N, a multiple
                            of their count, while it serves: the new groups
                            are made on the members holding the fewest
                            replicas, and each takes its share of the
                            tubes' hash slots from an old one, their tubes
                            moving live (as tubes move does). Asked again
                            after a growth that stopped half way, it goes on.

A group is moved one change at a time, and group 0, which holds the
membership, is on every member and does not move. The members move replicas
by themselves too, as members are added and removed (members add, remove),
and move them back if a move by hand leaves one member holding two more than
another. Exits 3 when the group,
FROM's replica or TO is not found, 4 when --api cannot be reached.`

// groupMoveTimeout bounds a move: the member answers once it is done, or
// with why not once its receiver stalls for a minute or has been catching
// up for 15 (internal/member's moveStall, moveCap); a client that gave up first
// would have the member take the receiver out again.
const groupMoveTimeout = 16 * time.Minute

// apiGroup is a group as GET /cluster lists it.
type apiGroup struct {
	ID       int      `json:"id"`
	Leader   string   `json:"leader"`
	Replicas []string `json:"replicas"`
	Learners []string `json:"learners"`
	Tubes    int      `json:"tubes"`
	Jobs     int64    `json:"jobs"`
}

func newGroupsCmd(o *options) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "groups [list | move GROUP FROM TO | grow N]",
		Short: "List a cluster's Raft groups, move a group's replica between members, grow their count",
		Long:  groupsHelp,
		RunE: func(_ *cobra.Command, args []string) error {
			verb := "list"
			if len(args) > 0 {
				verb, args = args[0], args[1:]
			}
			want := map[string]int{"list": 0, "move": 3, "grow": 1}
			n, known := want[verb]
			switch {
			case !known:
				return usagef("groups %s: want list, move GROUP FROM TO or grow N", verb)
			case len(args) != n:
				return usagef("groups %s takes %d argument(s), not %d", verb, n, len(args))
			}
			api, err := o.adminAPI("groups")
			if err != nil {
				return err
			}
			if verb == "grow" {
				return o.growGroups(api, args[0])
			}
			if verb == "move" {
				return o.moveGroupReplica(api, args[0], args[1], args[2])
			}
			var out struct {
				Groups   []apiGroup        `json:"groups"`
				Placed   map[string]uint16 `json:"placed,omitempty"`
				Prefixes map[string]uint16 `json:"prefixes,omitempty"`
			}
			ctx, cancel := context.WithTimeout(o.ctx, o.timeout) // a read: --timeout bounds it
			defer cancel()
			if err := api.do(ctx, "GET", "/cluster", nil, nil, &out); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(o.stdout, out)
			}
			var rows [][]string
			for _, g := range out.Groups {
				replicas := strings.Join(g.Replicas, ",")
				if len(g.Learners) > 0 {
					replicas += ",[" + strings.Join(g.Learners, ",") + "]"
				}
				leader := g.Leader
				if leader == "" {
					leader = "-"
				}
				rows = append(rows, []string{strconv.Itoa(g.ID), leader, replicas,
					strconv.Itoa(g.Tubes), strconv.FormatInt(g.Jobs, 10)})
			}
			if err := writeTable(o.stdout, []string{"GROUP", "LEADER", "REPLICAS", "TUBES", "JOBS"}, rows); err != nil {
				return err
			}
			return writePlacements(o.stdout, out.Placed, out.Prefixes)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `list: write {"groups": [...], "placed": {...}, "prefixes": {...}} as GET /cluster has them`)
	return c
}

// moveGroupReplica moves group's replica from one member to another and
// prints the group's replicas after.
func (o *options) moveGroupReplica(api *apiClient, group, from, to string) error {
	g, err := strconv.ParseUint(group, 10, 16)
	if err != nil {
		return usagef("groups move: %q is not a group's number", group)
	}
	ctx, cancel := context.WithTimeout(o.ctx, groupMoveTimeout)
	defer cancel()
	var out struct {
		Replicas []string `json:"replicas"`
		Learners []string `json:"learners"`
	}
	in := map[string]string{"from": from, "to": to}
	if err := api.do(ctx, "POST", fmt.Sprintf("/cluster/groups/%d/moves", g), nil, in, &out); err != nil {
		return err
	}
	replicas := strings.Join(out.Replicas, ",")
	if len(out.Learners) > 0 {
		replicas += ",[" + strings.Join(out.Learners, ",") + "]"
	}
	_, err = fmt.Fprintf(o.stdout, "moved group %d's replica from %s to %s; its replicas: %s\n", g, from, to, replicas)
	return err
}

// writePlacements writes, after a blank line, the tubes placed by name and
// the prefixes placed (PREFIX*), with their groups, if there are any.
func writePlacements(w io.Writer, placed, prefixes map[string]uint16) error {
	var rows [][]string
	for _, name := range slices.Sorted(maps.Keys(placed)) {
		rows = append(rows, []string{name, strconv.Itoa(int(placed[name]))})
	}
	for _, prefix := range slices.Sorted(maps.Keys(prefixes)) {
		rows = append(rows, []string{prefix + "*", strconv.Itoa(int(prefixes[prefix]))})
	}
	if len(rows) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	return writeTable(w, []string{"PLACED", "GROUP"}, rows)
}

// growWait bounds a growth to n groups: the member answers once it is
// done, or after its own bounds with why not: 2 minutes for the new
// groups, then each of their slots' placements (fewer than n) a
// placement's (tubeMoveTimeout). A count past the groups a cluster may
// have is bounded as that (the member refuses it): the product
// overflowed, and the request's deadline had passed before it went.
func growWait(n int) time.Duration {
	n = min(max(n, 1), meta.MaxGroups)
	return 150*time.Second + time.Duration(n-1)*tubeMoveTimeout
}

// growGroups grows the cluster's groups to n and prints what moved.
func (o *options) growGroups(api *apiClient, n string) error {
	to, err := strconv.Atoi(n)
	if err != nil || to < 1 {
		return usagef("groups grow: %q is not a count of groups", n)
	}
	ctx, cancel := context.WithTimeout(o.ctx, growWait(to))
	defer cancel()
	var out struct {
		From   int      `json:"from"`
		To     int      `json:"to"`
		Tubes  []string `json:"tubes"`
		Jobs   int      `json:"jobs"`
		Paused int64    `json:"paused_ms"`
	}
	if err := api.do(ctx, "POST", "/cluster/groups/grow", nil, map[string]int{"to": to}, &out); err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.stdout, "grew the groups from %d to %d: %d tubes moved, %d jobs, each placement holding its tubes at most %d ms\n",
		out.From, out.To, len(out.Tubes), out.Jobs, out.Paused)
	return err
}
