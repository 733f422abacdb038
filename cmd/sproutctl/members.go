package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

const membersHelp = `List, add and remove the members of a Sprout cluster, through the
membership endpoint on the --http port of any member (--api), with the
admin token for changes.

  members [list]          each member: name, role (voter or learner), address
  members add NAME ADDR   add NAME, whose --cluster-listen is ADDR, as a
                          learner; prints how to start it (--cluster-join).
                          Once started it catches up, and the leader makes it a
                          voter: list shows when.
  members remove NAME     remove NAME; it stops serving and exits (status 12).
  members cordon NAME     NAME leads no group: it hands over the groups it
                          leads, and is given none; it keeps its replicas
                          and its clients (before maintenance: stopped,
                          even by kill -9, it pauses no group).
  members uncordon NAME   NAME may lead again: the leaders balance.

In a cluster of several groups (--cluster-groups), add prints the groups and
replicas the new member starts with too, and once it runs, replicas of the
groups move to it until the members hold about as many each. remove of a
member holding replicas of groups but 0 marks it draining: they move to
other members, then it is removed (exit 0 at once; list shows the drain).
Only a cluster of several groups balances its leaders, so only there is a
member cordoned (exit 1 otherwise); list shows it cordoned until uncordon.

One change at a time: a change while another is in flight, or while a
learner is not yet promoted, is refused (exit 1); start the learner, or
remove it. A removal that would leave the voters up short of a majority
(with three members and one down, removing one that runs) is refused too
(exit 1): remove the member that is down first, or bring it back. Exits 3
when remove names no member, 4 when --api cannot be reached.`

// memberChangeTimeout bounds a change: the member answers once it has
// applied it, or after its own bound (10 s) with why not.
const memberChangeTimeout = 20 * time.Second

// apiMember is a member as GET /cluster/members lists it.
type apiMember struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	Address   string `json:"address"`
	Role      string `json:"role"`
	Client    string `json:"client"`
	Connected bool   `json:"connected"`
	Draining  bool   `json:"draining,omitempty"`
	Cordoned  bool   `json:"cordoned,omitempty"`
}

func newMembersCmd(o *options) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "members [list | add NAME HOST:PORT | remove NAME | cordon NAME | uncordon NAME]",
		Short: "List, add, remove and cordon a cluster's members",
		Long:  membersHelp,
		RunE: func(_ *cobra.Command, args []string) error {
			verb := "list"
			if len(args) > 0 {
				verb, args = args[0], args[1:]
			}
			want := map[string]int{"list": 0, "add": 2, "remove": 1, "cordon": 1, "uncordon": 1}
			n, known := want[verb]
			switch {
			case !known:
				return usagef("members %s: want list, add NAME HOST:PORT, remove NAME, cordon NAME or uncordon NAME", verb)
			case len(args) != n:
				return usagef("members %s takes %d argument(s), not %d", verb, n, len(args))
			}
			api, err := o.adminAPI("members")
			if err != nil {
				return err
			}
			wait := memberChangeTimeout
			if verb == "list" {
				wait = o.timeout // a read: --timeout bounds it
			}
			ctx, cancel := context.WithTimeout(o.ctx, wait)
			defer cancel()
			switch verb {
			case "add":
				return o.addMember(ctx, api, args[0], args[1])
			case "cordon", "uncordon":
				method := "POST"
				if verb == "uncordon" {
					method = "DELETE"
				}
				var out struct {
					Cordoned bool `json:"cordoned"`
				}
				if err := api.do(ctx, method, "/cluster/members/"+url.PathEscape(args[0])+"/cordon", nil, nil, &out); err != nil {
					return err
				}
				if !out.Cordoned {
					_, err := fmt.Fprintf(o.stdout, "%s may lead again: the leaders balance within seconds\n", args[0])
					return err
				}
				_, err := fmt.Fprintf(o.stdout, "cordoned %s: it hands over the groups it leads within seconds, and is given none "+
					"(groups shows the leaders)\n", args[0])
				return err
			case "remove":
				var out struct {
					apiMember
					Draining bool  `json:"draining"`
					Groups   []int `json:"groups"`
				}
				if err := api.do(ctx, "DELETE", "/cluster/members/"+url.PathEscape(args[0]), nil, nil, &out); err != nil {
					return err
				}
				if out.Draining {
					_, err := fmt.Fprintf(o.stdout, "draining %s: its replicas of groups %v move to other members, then it is removed "+
						"(members list shows it draining until then)\n", out.Name, out.Groups)
					return err
				}
				_, err := fmt.Fprintf(o.stdout, "removed %s (id %s, %s)\n", out.Name, out.ID, out.Address)
				return err
			}
			members, err := listMembers(ctx, api)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(o.stdout, map[string]any{"members": members})
			}
			var rows [][]string
			for _, m := range members {
				role := m.Role
				if m.Draining {
					role += ", draining"
				}
				if m.Cordoned {
					role += ", cordoned"
				}
				rows = append(rows, []string{m.Name, role, m.Address, m.Client, m.ID})
			}
			return writeTable(o.stdout, []string{"NAME", "ROLE", "ADDRESS", "CLIENT", "ID"}, rows)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `list: write {"members": [...]} as the endpoint has them`)
	return c
}

func listMembers(ctx context.Context, api *apiClient) ([]apiMember, error) {
	var out struct {
		Members []apiMember `json:"members"`
	}
	err := api.do(ctx, "GET", "/cluster/members", nil, nil, &out)
	return out.Members, err
}

// addMember adds a learner and prints the flags to start it with: its
// join string, and every member as --cluster-peers; and its entry for a
// join list shared by every member (a StatefulSet's).
func (o *options) addMember(ctx context.Context, api *apiClient, name, addr string) error {
	var out struct {
		apiMember
		Join string `json:"join"`
		// Groups and Replicas, a cluster of several groups': the new
		// member starts with them.
		Groups   int `json:"groups"`
		Replicas int `json:"replicas"`
	}
	in := map[string]string{"name": name, "address": addr}
	if err := api.do(ctx, "POST", "/cluster/members", nil, in, &out); err != nil {
		return err
	}
	peers := []string{}
	if members, err := listMembers(ctx, api); err == nil {
		for _, m := range members {
			peers = append(peers, m.Name+"="+m.Address)
		}
	}
	groups := ""
	if out.Groups > 1 {
		groups = fmt.Sprintf(" --cluster-groups %d --cluster-replicas %d", out.Groups, out.Replicas)
	}
	_, err := fmt.Fprintf(o.stdout, "added %s (id %s) as a learner; start it, on an empty -b directory, with:\n"+
		"  --node %s --cluster-listen %s --cluster-join %s --cluster-peers %s%s\n"+
		"or, where the members share one --cluster-join list (deploy/k8s's ConfigMap), append its entry:\n"+
		"  %s=%s\n"+
		"the leader makes it a voter once it has caught up (sproutctl members list)\n",
		out.Name, out.ID, out.Name, out.Address, out.Join, strings.Join(peers, ","), groups, out.Name, out.Join)
	return err
}
