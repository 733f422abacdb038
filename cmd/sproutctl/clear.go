package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/beanstalkd/go-beanstalk"
	"github.com/spf13/cobra"
)

// clearStates are what clear --state takes; over the protocol "all" is the
// three states peek reaches.
var clearStates = []string{"ready", "delayed", "buried", "all"}

func newClearCmd(o *options) *cobra.Command {
	var state string
	c := &cobra.Command{
		Use:   "clear TUBE --state ready|delayed|buried|all",
		Short: "Delete every job of a tube in a state",
		Long: `Delete the jobs of TUBE in a state. With --api, Sprout's admin API clears
the tube in one request. Without it, over the protocol (beanstalkd too),
sproutctl peeks and deletes one job at a time, with a progress bar; jobs
that workers hold reserved are out of its reach, so "all" means ready,
delayed and buried. Exits 3 when the tube does not exist or had no such job.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			tube := args[0]
			if err := checkTube(tube); err != nil {
				return err
			}
			if !slices.Contains(clearStates, state) {
				return usagef("--state takes %s, not %q", strings.Join(clearStates, ", "), state)
			}
			var deleted int64
			var err error
			if o.api != "" {
				deleted, err = o.clearByAPI(tube, state)
			} else {
				deleted, err = o.clearByProtocol(tube, state)
			}
			if err != nil {
				return err
			}
			if deleted == 0 {
				return nothingf("no %s job in tube %s", state, tube)
			}
			_, err = fmt.Fprintf(o.stdout, "deleted %s (%s) from tube %s\n", countJobs(deleted), state, tube)
			return err
		},
	}
	c.Flags().StringVar(&state, "state", "", "ready, delayed, buried or all (required)")
	_ = c.MarkFlagRequired("state")
	return c
}

func (o *options) clearByAPI(tube, state string) (int64, error) {
	api, err := o.adminAPI("clear")
	if err != nil {
		return 0, err
	}
	return api.clearTube(o.ctx, tube, state)
}

// clearByProtocol deletes the jobs of tube in state one by one: peek, then
// delete. A job a worker reserves between the two is skipped (the delete
// finds it gone), and so is every job reserved.
func (o *options) clearByProtocol(tube, state string) (int64, error) {
	states := []string{state}
	if state == "all" {
		states = peekStates
	}
	c, err := o.dial(o.server)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	st, err := tubeStats(c, tube)
	if errors.Is(err, beanstalk.ErrNotFound) {
		return 0, nothingf("no tube %s", tube)
	}
	if err != nil {
		return 0, err
	}
	var total int64
	for _, s := range states {
		total += st.int("current-jobs-" + s)
	}
	bar := o.newBar(total, "clearing "+tube)
	defer bar.Clear()
	t := beanstalk.NewTube(c, tube)
	var deleted int64
	for _, s := range states {
		for {
			if err := o.ctx.Err(); err != nil {
				return deleted, fmt.Errorf("interrupted after deleting %s: %w", countJobs(deleted), err)
			}
			id, _, err := peek(t, s)
			if errors.Is(err, beanstalk.ErrNotFound) {
				break
			}
			if err != nil {
				return deleted, fmt.Errorf("peek-%s in %s, after deleting %s: %w", s, tube, countJobs(deleted), err)
			}
			if err := c.Delete(id); errors.Is(err, beanstalk.ErrNotFound) {
				continue
			} else if err != nil {
				return deleted, fmt.Errorf("delete %d, after deleting %s: %w", id, countJobs(deleted), err)
			}
			deleted++
			if deleted > total {
				total = deleted
				bar.ChangeMax64(total)
			}
			_ = bar.Add(1)
		}
	}
	return deleted, nil
}

func newJobsCmd(o *options) *cobra.Command {
	var state string
	var limit int
	var asJSON bool
	c := &cobra.Command{
		Use:   "jobs TUBE [--state STATE] [--limit N]",
		Short: "List a tube's jobs in a state (admin API only)",
		Long: `List the jobs of TUBE in a state (ready by default; delayed, reserved or
buried) in the order the server keeps them, at most --limit (0: all). The
protocol cannot list jobs, so this needs Sprout's admin API: --api and a
token.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			tube := args[0]
			if err := checkTube(tube); err != nil {
				return err
			}
			if !slices.Contains([]string{"ready", "delayed", "reserved", "buried"}, state) {
				return usagef("--state takes ready, delayed, reserved or buried, not %q", state)
			}
			if limit < 0 {
				return usagef("--limit must be 0 (all) or more")
			}
			api, err := o.adminAPI("jobs")
			if err != nil {
				return err
			}
			var jobs []apiJob
			cursor := ""
			for {
				page := apiPage
				if limit > 0 {
					page = min(page, limit-len(jobs))
				}
				more, next, err := api.listJobs(o.ctx, tube, state, page, cursor)
				if err != nil {
					return err
				}
				jobs = append(jobs, more...)
				if next == "" || len(more) == 0 || (limit > 0 && len(jobs) >= limit) {
					break
				}
				cursor = next
			}
			if limit > 0 && len(jobs) > limit {
				jobs = jobs[:limit]
			}
			if asJSON {
				return writeJSON(o.stdout, map[string]any{"jobs": jobs})
			}
			rows := make([][]string, len(jobs))
			for i, j := range jobs {
				body, err := j.bytes()
				if err != nil {
					return err
				}
				size, preview := strconv.Itoa(len(body)), bodyPreview(body)
				if j.hidden() {
					size, preview = "-", "(hidden)"
				}
				rows[i] = []string{
					strconv.FormatUint(j.ID, 10), j.State, strconv.FormatUint(uint64(j.Pri), 10),
					strconv.FormatInt(j.Age, 10), strconv.FormatInt(j.Delay, 10), strconv.FormatInt(j.TTR, 10),
					strconv.FormatInt(j.TimeLeft, 10), strconv.FormatInt(j.Reserves, 10),
					size, preview,
				}
			}
			return writeTable(o.stdout, []string{"ID", "STATE", "PRI", "AGE", "DELAY", "TTR", "TIME-LEFT", "RESERVES", "SIZE", "BODY"}, rows)
		},
	}
	f := c.Flags()
	f.StringVar(&state, "state", "ready", "ready, delayed, reserved or buried")
	f.IntVar(&limit, "limit", 50, "list at most N jobs; 0 lists all")
	f.BoolVar(&asJSON, "json", false, `write {"jobs": [...]} as the admin API has them`)
	return c
}

// apiPage is how many jobs one request of jobs asks for.
const apiPage = 500

// previewLen is how much of a body a table shows.
const previewLen = 40

// bodyPreview returns the start of a body for a table cell: readable text
// on one line, else a note of its size.
func bodyPreview(body []byte) string {
	if !readable(body) {
		return "(binary)"
	}
	s := strings.Join(strings.Fields(string(body)), " ")
	if r := []rune(s); len(r) > previewLen {
		s = string(r[:previewLen-1]) + "…"
	}
	return s
}
