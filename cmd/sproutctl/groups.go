package main

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

const groupsHelp = `groups lists the Raft groups of a Sprout cluster as a member sees them
(GET /cluster on its --http port, given with --api): each group's id, its
leader, the members voting in it (learners in brackets), and the tubes
and jobs of that member's replica. A cluster runs one group today,
group 0, which holds every job. Exits 4 when --api cannot be reached.`

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
		Use:   "groups",
		Short: "List a cluster's Raft groups: leaders, replicas, tubes and jobs",
		Long:  groupsHelp,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			api, err := o.adminAPI("groups")
			if err != nil {
				return err
			}
			var out struct {
				Groups []apiGroup `json:"groups"`
			}
			if err := api.do(o.ctx, "GET", "/cluster", nil, nil, &out); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(o.stdout, map[string]any{"groups": out.Groups})
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
			return writeTable(o.stdout, []string{"GROUP", "LEADER", "REPLICAS", "TUBES", "JOBS"}, rows)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `write {"groups": [...]} as GET /cluster has them`)
	return c
}
