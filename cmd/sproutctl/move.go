package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	"github.com/spf13/cobra"
)

const moveHelp = `Carry the ready jobs of each TUBE, in turn, from the server --from to the
server --to (either may be beanstalkd or Sprout), keeping each job's
priority, TTR and body bytes.

One job at a time: reserve it on the source (watching only that tube,
reserve-with-timeout 0), read its priority and TTR (stats-job), put it into
the same tube on the target (use creates the tube there) with no delay, and
delete it from the source only once the target answered INSERTED. On any
failure the job is released back on the source and the move stops. If the
delete finds the job gone (its TTR ran out), the copy on the target is
deleted again and the job moves on a later turn. Only a crash between the
put and the delete leaves a job on both servers.

Reserving counts a reserve in the job's stats and starts its TTR on the
source while it moves. Delayed and buried jobs stay where they are unless
--kick kicks them all first. A paused tube cannot be reserved from: move
refuses it. Moving onto the server itself (the same stats id) is refused.

Exits 0 when jobs moved, 3 when there was none to move, 1 when a job could
not be moved (the lines printed say how many did).`

func newMoveCmd(o *options) *cobra.Command {
	var from, to string
	var kick bool
	c := &cobra.Command{
		Use:   "move --from HOST:PORT --to HOST:PORT [--kick] TUBE...",
		Short: "Carry the ready jobs of tubes from one server to another",
		Long:  moveHelp,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, tubes []string) error {
			if from == to {
				return usagef("--from and --to are both %s", from)
			}
			for _, tube := range tubes {
				if err := checkTube(tube); err != nil {
					return err
				}
			}
			src, err := o.dial(from)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := o.dial(to)
			if err != nil {
				return err
			}
			defer dst.Close()
			if err := refuseSameServer(src, dst, from, to); err != nil {
				return err
			}
			var total int64
			for _, tube := range tubes {
				n, err := o.moveTube(src, dst, tube, kick)
				total += n
				if n > 0 || err == nil {
					fmt.Fprintf(o.stdout, "moved %s of tube %s from %s to %s\n", countJobs(n), tube, from, to)
				}
				if err != nil {
					err = fmt.Errorf("moving tube %s: %w", tube, err)
					if exitCode(err) == exitNotFound {
						// A job gone in the middle is a failed move, not
						// something named on the command line missing.
						err = errors.New(err.Error())
					}
					return err
				}
			}
			if total == 0 {
				return nothingf("no ready job to move in %s", strings.Join(tubes, ", "))
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&from, "from", "", "the source server, HOST:PORT (required)")
	f.StringVar(&to, "to", "", "the target server, HOST:PORT (required)")
	f.BoolVar(&kick, "kick", false, "first kick every buried and delayed job of each tube, so that they move too")
	_ = c.MarkFlagRequired("from")
	_ = c.MarkFlagRequired("to")
	return c
}

// refuseSameServer compares the servers' stats ids (the command has
// compared their addresses): a move onto the server itself would put each
// job back behind the others and move it again, without end.
func refuseSameServer(src, dst *beanstalk.Conn, from, to string) error {
	a, err := serverStats(src)
	if err != nil {
		return err
	}
	b, err := serverStats(dst)
	if err != nil {
		return err
	}
	if id := a.str("id"); id != "" && id == b.str("id") {
		return usagef("--from %s and --to %s are the same server (stats id %s)", from, to, id)
	}
	return nil
}

// moveTube moves the ready jobs of tube, after kicking the others with
// kick, and returns how many moved.
func (o *options) moveTube(src, dst *beanstalk.Conn, tube string, kick bool) (int64, error) {
	if kick {
		for {
			n, err := beanstalk.NewTube(src, tube).Kick(math.MaxInt32)
			if err != nil {
				return 0, fmt.Errorf("kick: %w", err)
			}
			if n == 0 {
				break
			}
		}
	}
	st, err := tubeStats(src, tube)
	if errors.Is(err, beanstalk.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ready := st.int("current-jobs-ready")
	if left := st.int("pause-time-left"); left > 0 && ready > 0 {
		return 0, fmt.Errorf("the tube is paused for %ds more, and reserve cannot take its %d ready jobs: end the pause (sproutctl pause %s 0) or wait", left, ready, tube)
	}
	bar := o.newBar(ready, "moving "+tube)
	defer bar.Clear()
	watch := beanstalk.NewTubeSet(src, tube)
	target := beanstalk.NewTube(dst, tube)
	var moved int64
	for {
		if err := o.ctx.Err(); err != nil {
			return moved, fmt.Errorf("interrupted: %w", err)
		}
		id, body, err := watch.Reserve(0)
		if errors.Is(err, beanstalk.ErrTimeout) {
			return moved, nil
		}
		if err != nil {
			return moved, fmt.Errorf("reserve: %w", err)
		}
		done, err := moveJob(src, target, id, body)
		if err != nil {
			return moved, err
		}
		if done {
			moved++
			if moved > ready {
				ready = moved
				bar.ChangeMax64(ready)
			}
			_ = bar.Add(1)
		}
	}
}

// moveJob puts the job id, reserved on src with body, into target, then
// deletes it from src. It reports whether the job moved. When the delete
// finds the job gone (its TTR ran out, so it is ready on src again or with
// another worker), the copy is deleted from the target and moveJob reports
// false without an error: the job is still the source's.
//
// After a failed put the job is released on src. On other errors, and when
// the release fails, the move stops and closes the connection, and src
// releases the job as it closes, as it does every job a closed connection
// held.
func moveJob(src *beanstalk.Conn, target *beanstalk.Tube, id uint64, body []byte) (bool, error) {
	st, err := src.StatsJob(id)
	if err != nil {
		return false, fmt.Errorf("stats-job %d: %w", id, err)
	}
	pri64, err1 := strconv.ParseUint(st["pri"], 10, 32)
	ttr, err2 := strconv.ParseUint(st["ttr"], 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return false, fmt.Errorf("stats-job %d: pri %q, ttr %q: %w", id, st["pri"], st["ttr"], err)
	}
	pri := uint32(pri64)
	copyID, err := target.Put(nonNil(body), pri, 0, time.Duration(ttr)*time.Second)
	if err != nil {
		err = fmt.Errorf("put job %d into the target: %w", id, err)
		if relErr := src.Release(id, pri, 0); relErr != nil {
			return false, fmt.Errorf("%w; releasing it on the source: %v", err, relErr)
		}
		return false, fmt.Errorf("%w; it was released on the source", err)
	}
	err = src.Delete(id)
	if err == nil {
		return true, nil
	}
	takeBack := target.Conn.Delete(copyID)
	switch {
	case errors.Is(err, beanstalk.ErrNotFound) && takeBack == nil:
		return false, nil
	case takeBack == nil:
		return false, fmt.Errorf("delete job %d from the source: %w; its copy %d on the target was deleted again", id, err, copyID)
	default:
		return false, fmt.Errorf("delete job %d from the source: %w; its copy %d on the target could not be deleted (%v), so it is on both servers", id, err, copyID, takeBack)
	}
}
