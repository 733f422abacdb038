package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/beanstalkd/go-beanstalk"
	"github.com/spf13/cobra"
)

func newReserveCmd(o *options) *cobra.Command {
	var wait seconds
	var raw, asJSON, release, bury bool
	c := &cobra.Command{
		Use:   "reserve TUBE",
		Short: "Take the next ready job of a tube: show it, then delete it (or --release, --bury)",
		Long: `Reserve the next ready job of TUBE, as a worker does (watching TUBE only),
show it as peek does (--raw, --json), then delete it: the job is done.
--release puts it back, ready, with its priority; --bury buries it.
--wait waits that long for a job (30s, 5m or seconds; 0, the default,
does not wait). Exits 3 when no job came. The job counts a reserve in its
stats, and its TTR runs while sproutctl holds it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			tube := args[0]
			if err := checkTube(tube); err != nil {
				return err
			}
			switch {
			case raw && asJSON:
				return usagef("--raw and --json exclude each other")
			case release && bury:
				return usagef("--release and --bury exclude each other")
			}
			// --timeout bounds each reply beyond the wait.
			o.timeout += wait.duration()
			return o.withServer(func(c *beanstalk.Conn) error {
				id, body, err := beanstalk.NewTubeSet(c, tube).Reserve(wait.duration())
				if errors.Is(err, beanstalk.ErrTimeout) {
					return nothingf("no ready job in tube %s", tube)
				}
				if err != nil {
					return fmt.Errorf("reserve from %s: %w", tube, err)
				}
				st, err := o.showJob(c, id, body, raw, asJSON)
				if err != nil {
					// The connection's end releases the job.
					return err
				}
				return o.finish(c, id, st, release, bury, !raw && !asJSON)
			})
		},
	}
	f := c.Flags()
	f.Var(&wait, "wait", "how long to wait for a job: 30s, 5m or seconds (0: do not wait)")
	f.BoolVar(&release, "release", false, "put the job back, ready, instead of deleting it")
	f.BoolVar(&bury, "bury", false, "bury the job instead of deleting it")
	f.BoolVar(&raw, "raw", false, "write the body's bytes only")
	f.BoolVar(&asJSON, "json", false, "write the job's stats and body as one JSON object")
	return c
}

// finish deletes, releases or buries the reserved job id (st its stats,
// nil if not read yet), and says which on stdout when say is set.
func (o *options) finish(c *beanstalk.Conn, id uint64, st stats, release, bury, say bool) error {
	var pri uint32
	if release || bury {
		if st == nil {
			s, err := c.StatsJob(id)
			if err != nil {
				return fmt.Errorf("stats-job %d: %w", id, err)
			}
			st = s
		}
		p, err := strconv.ParseUint(st.str("pri"), 10, 32)
		if err != nil {
			return fmt.Errorf("stats-job %d: pri %q", id, st.str("pri"))
		}
		pri = uint32(p)
	}
	var done string
	var err error
	switch {
	case release:
		done, err = "released", c.Release(id, pri, 0)
	case bury:
		done, err = "buried", c.Bury(id, pri)
	default:
		done, err = "deleted", c.Delete(id)
	}
	if err != nil {
		return fmt.Errorf("job %d: %w", id, err)
	}
	if say {
		_, err = fmt.Fprintf(o.stdout, "%s job %d\n", done, id)
	}
	return err
}
