package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

const tubesMoveHelp = `Move a tube live to another Raft group of a cluster of several groups
(--cluster-groups), through the --http port of any member (--api), with the
admin token.

The tube's group stops serving it (its commands wait, to be sent to the new
group), its jobs move with their ids, states, priorities, remaining delays
and burial order, a reserved job still held by its worker, the cluster
places the tube in the new group, and its commands go there. Answered once
done, with how many jobs moved and how long the tube's commands waited.

Exits 3 when the group is not found, 4 when --api cannot be reached, and
with the member's refusal (the tube in that group already, a move of it
under way) otherwise.`

func newTubesMoveCmd(o *options) *cobra.Command {
	var group int
	c := &cobra.Command{
		Use:   "move TUBE --group N",
		Short: "Move a tube live to another Raft group of the cluster",
		Long:  tubesMoveHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := checkTube(args[0]); err != nil {
				return err
			}
			if group < 0 {
				return usagef("tubes move: --group N, a group's number, is required")
			}
			api, err := o.adminAPI("tubes move")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(o.ctx, tubeMoveTimeout)
			defer cancel()
			var out struct {
				From   int   `json:"from"`
				To     int   `json:"to"`
				Jobs   int   `json:"jobs"`
				Paused int64 `json:"paused_ms"`
			}
			if err := api.do(ctx, "POST", "/cluster/tubes/"+pathSegment(args[0])+"/move", nil, map[string]int{"group": group}, &out); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "moved tube %s from group %d to group %d: %s jobs, its commands held %d ms\n",
				args[0], out.From, out.To, strconv.Itoa(out.Jobs), out.Paused)
			return err
		},
	}
	c.Flags().IntVar(&group, "group", -1, "the group to move the tube to")
	return c
}

const tubesPlaceHelp = `Place every tube whose name starts with PREFIX in a Raft group of a cluster
of several groups (--cluster-groups), through the --http port of any member
(--api), with the admin token.

The tubes that exist move there live, as tubes move does, all at once: the
groups they live in stop serving them, their jobs move with their ids, and
their commands go to the new group; a tube made later with such a name is
made there. A tube moved by name (tubes move), or under a longer prefix
placed elsewhere, stays where it is. Placing the prefix in another group
later moves its tubes again. --unset undoes the placement: its tubes go
back, live, to the groups they would be in without it. Answered once
done, with the tubes moved, their jobs, and how long their commands
waited.

Exits 3 when the group is not found, 4 when --api cannot be reached, and
with the member's refusal (the prefix in that group already, or not
placed when undone, a placement under way, a tube it takes moving by name)
otherwise.`

func newTubesPlaceCmd(o *options) *cobra.Command {
	var group int
	var unset bool
	c := &cobra.Command{
		Use:   "place PREFIX (--group N | --unset)",
		Short: "Place the tubes whose names start with PREFIX in a Raft group of the cluster",
		Long:  tubesPlaceHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if (group < 0) == !unset {
				return usagef("tubes place: --group N, a group's number, or --unset, is required, not both")
			}
			api, err := o.adminAPI("tubes place")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(o.ctx, tubeMoveTimeout)
			defer cancel()
			var out struct {
				Group  int      `json:"group"`
				Tubes  []string `json:"tubes"`
				Jobs   int      `json:"jobs"`
				Paused int64    `json:"paused_ms"`
			}
			path := "/cluster/placements/" + pathSegment(args[0])
			if unset {
				if err := api.do(ctx, "DELETE", path, nil, nil, &out); err != nil {
					return err
				}
				_, err = fmt.Fprintf(o.stdout, "unset prefix %s: %d tubes moved (%s), %d jobs, their commands held %d ms\n",
					args[0], len(out.Tubes), strings.Join(out.Tubes, " "), out.Jobs, out.Paused)
				return err
			}
			if err := api.do(ctx, "POST", path, nil, map[string]int{"group": group}, &out); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "placed prefix %s in group %d: %d tubes moved (%s), %d jobs, their commands held %d ms\n",
				args[0], out.Group, len(out.Tubes), strings.Join(out.Tubes, " "), out.Jobs, out.Paused)
			return err
		},
	}
	c.Flags().IntVar(&group, "group", -1, "the group to place the prefix's tubes in")
	c.Flags().BoolVar(&unset, "unset", false, "undo the prefix's placement: its tubes go back to the groups their names give")
	return c
}

// tubeMoveTimeout bounds a tube's move or a prefix's placement: the
// member answers once it is done, or after its own bounds (10 minutes for
// the copies, which the tubes serve through, and 30 s for each step
// around them) with why not.
const tubeMoveTimeout = 12 * time.Minute
