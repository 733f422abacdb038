package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
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
			if err := api.do(ctx, "POST", "/cluster/tubes/"+url.PathEscape(args[0])+"/move", nil, map[string]int{"group": group}, &out); err != nil {
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

// tubeMoveTimeout bounds a tube's move: the member answers once it is
// done, or after its own bound (30 s) with why not.
const tubeMoveTimeout = 45 * time.Second
