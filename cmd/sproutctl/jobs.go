package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	"github.com/spf13/cobra"
)

// seconds is a number of whole seconds, the protocol's unit for delays,
// TTRs and pauses, written as a Go duration (30s, 1m30s; rounded up to the
// next second) or as a plain number of seconds. It is a flag value.
type seconds uint32

func parseSeconds(s string) (seconds, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return seconds(n), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, usagef("%q is not a duration (30s, 5m, 1h30m) nor a number of seconds", s)
	}
	n := (d + time.Second - 1) / time.Second
	if n > math.MaxUint32 {
		return 0, usagef("%s is longer than the protocol's %d seconds", s, uint32(math.MaxUint32))
	}
	return seconds(n), nil
}

func (s *seconds) Set(v string) error {
	n, err := parseSeconds(v)
	*s = n
	return err
}

func (s *seconds) String() string { return strconv.FormatUint(uint64(*s), 10) + "s" }
func (s *seconds) Type() string   { return "duration" }

// duration is s as go-beanstalk takes it.
func (s seconds) duration() time.Duration { return time.Duration(s) * time.Second }

// jobKeys is the order of stats-job's keys, as beanstalkd writes them.
var jobKeys = []string{"id", "tube", "state", "pri", "age", "delay", "ttr", "time-left", "file", "reserves", "timeouts", "releases", "buries", "kicks"}

// peekStates are the states peek can show over the protocol.
var peekStates = []string{"ready", "delayed", "buried"}

func newPeekCmd(o *options) *cobra.Command {
	var raw, asJSON bool
	c := &cobra.Command{
		Use:   "peek TUBE [ready|delayed|buried]",
		Short: "Show the next job of a tube in a state (ready by default)",
		Long: `Show the job that peek-ready, peek-delayed or peek-buried names in TUBE:
its id, its stats-job and its body, as text when it is printable UTF-8 and
as a hex dump otherwise. --raw writes only the body's bytes, --json the
stats and the body (as text, or base64 when not UTF-8) in one object.
Exits 3 when the tube has no job in that state.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, args []string) error {
			tube, state := args[0], "ready"
			if err := checkTube(tube); err != nil {
				return err
			}
			if len(args) == 2 {
				state = args[1]
			}
			if !slices.Contains(peekStates, state) {
				return usagef("peek shows ready, delayed or buried jobs, not %q", state)
			}
			if raw && asJSON {
				return usagef("--raw and --json exclude each other")
			}
			return o.withServer(func(c *beanstalk.Conn) error {
				id, body, err := peek(beanstalk.NewTube(c, tube), state)
				if errors.Is(err, beanstalk.ErrNotFound) {
					return nothingf("no %s job in tube %s", state, tube)
				}
				if err != nil {
					return err
				}
				_, err = o.showJob(c, id, body, raw, asJSON)
				return err
			})
		},
	}
	c.Flags().BoolVar(&raw, "raw", false, "write the body's bytes only")
	c.Flags().BoolVar(&asJSON, "json", false, "write the job's stats and body as one JSON object")
	return c
}

// showJob writes the job id, whose body is body, as peek and reserve show
// it: its stats-job and its body, the body's bytes alone (raw), or both
// as one JSON object (asJSON). It returns the job's stats (nil with raw,
// which does not read them).
func (o *options) showJob(c *beanstalk.Conn, id uint64, body []byte, raw, asJSON bool) (stats, error) {
	if raw {
		_, err := o.stdout.Write(body)
		return nil, err
	}
	st, err := c.StatsJob(id)
	if errors.Is(err, beanstalk.ErrNotFound) {
		return nil, nothingf("job %d went away while it was read", id)
	}
	if err != nil {
		return nil, fmt.Errorf("stats-job %d: %w", id, err)
	}
	if asJSON {
		m := stats(st).typed()
		m["body"], m["body-encoding"] = bodyJSON(body)
		return st, writeJSON(o.stdout, m)
	}
	return st, writeJob(o.stdout, stats(st), body)
}

// peek runs the peek command of state on tube.
func peek(t *beanstalk.Tube, state string) (uint64, []byte, error) {
	switch state {
	case "delayed":
		return t.PeekDelayed()
	case "buried":
		return t.PeekBuried()
	default:
		return t.PeekReady()
	}
}

// writeJob writes a job's stats, one line each in stats-job's order, then
// its body.
func writeJob(w io.Writer, st stats, body []byte) error {
	var rows [][]string
	for _, k := range jobKeys {
		if _, ok := st[k]; ok {
			rows = append(rows, []string{k, st.str(k)})
		}
	}
	var extra []string // keys a server adds to beanstalkd's, after them
	for k := range st {
		if !slices.Contains(jobKeys, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	for _, k := range extra {
		rows = append(rows, []string{k, st.str(k)})
	}
	if err := writeTable(w, []string{"STAT", "VALUE"}, rows); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "body (%d bytes):\n", len(body)); err != nil {
		return err
	}
	return writeBody(w, body)
}

func newPutCmd(o *options) *cobra.Command {
	pri := uint32(65536)
	var delay seconds
	ttr := seconds(60)
	c := &cobra.Command{
		Use:   "put TUBE [FILE|-]",
		Short: "Put a job, its body read from FILE or stdin; prints its id",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, args []string) error {
			tube := args[0]
			if err := checkTube(tube); err != nil {
				return err
			}
			var body []byte
			var err error
			if len(args) == 2 && args[1] != "-" {
				body, err = os.ReadFile(args[1])
			} else {
				body, err = io.ReadAll(o.stdin)
			}
			if err != nil {
				return fmt.Errorf("reading the body: %w", err)
			}
			return o.withServer(func(c *beanstalk.Conn) error {
				id, err := beanstalk.NewTube(c, tube).Put(nonNil(body), pri, delay.duration(), ttr.duration())
				if err != nil {
					return fmt.Errorf("put into %s: %w", tube, err)
				}
				_, err = fmt.Fprintln(o.stdout, id)
				return err
			})
		},
	}
	f := c.Flags()
	f.Uint32Var(&pri, "pri", pri, "priority, 0 (most urgent) to 4294967295")
	f.Var(&delay, "delay", "delay before the job is ready: 30s, 5m or seconds, rounded up")
	f.Var(&ttr, "ttr", "time to run once reserved: 30s, 5m or seconds, rounded up")
	return c
}

// nonNil returns body, or an empty body for nil: go-beanstalk's Put sends
// a nil body as a put command without a size, which no server accepts.
func nonNil(body []byte) []byte {
	if body == nil {
		return []byte{}
	}
	return body
}

func newDeleteCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a job",
		Long: `Delete the job ID. A job another client has reserved cannot be deleted
over the protocol: it is "not found" (exit status 3) like a job that does
not exist.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil {
				return usagef("%q is not a job id", args[0])
			}
			return o.withServer(func(c *beanstalk.Conn) error {
				if err := c.Delete(id); err != nil {
					if errors.Is(err, beanstalk.ErrNotFound) {
						return nothingf("job %d not found, or reserved by another client", id)
					}
					return fmt.Errorf("delete %d: %w", id, err)
				}
				_, err = fmt.Fprintf(o.stdout, "deleted job %d\n", id)
				return err
			})
		},
	}
}

func newKickCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "kick TUBE N",
		Short: "Kick up to N buried jobs, or delayed ones when none is buried",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			tube := args[0]
			if err := checkTube(tube); err != nil {
				return err
			}
			bound, err := strconv.ParseUint(args[1], 10, 32)
			if err != nil || bound == 0 {
				return usagef("kick takes a count from 1 to %d, not %q", uint32(math.MaxUint32), args[1])
			}
			return o.withServer(func(c *beanstalk.Conn) error {
				n, err := beanstalk.NewTube(c, tube).Kick(int(bound))
				if err != nil {
					return fmt.Errorf("kick in %s: %w", tube, err)
				}
				if n == 0 {
					return nothingf("no buried or delayed job in tube %s", tube)
				}
				_, err = fmt.Fprintf(o.stdout, "kicked %s in tube %s\n", countJobs(int64(n)), tube)
				return err
			})
		},
	}
}

func newPauseCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "pause TUBE DURATION",
		Short: "Pause reservations from a tube: 30s, 5m or seconds (0 ends a pause)",
		Long: `Pause reservations from TUBE for DURATION, a Go duration (30s, 5m, 1h30m)
rounded up to whole seconds, the protocol's unit, or a plain number of
seconds. 0 ends a pause. Exits 3 when the tube does not exist.`,
		Args: cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			tube := args[0]
			if err := checkTube(tube); err != nil {
				return err
			}
			d, err := parseSeconds(args[1])
			if err != nil {
				return err
			}
			return o.withServer(func(c *beanstalk.Conn) error {
				if err := beanstalk.NewTube(c, tube).Pause(d.duration()); err != nil {
					if errors.Is(err, beanstalk.ErrNotFound) {
						return nothingf("no tube %s", tube)
					}
					return fmt.Errorf("pause-tube %s: %w", tube, err)
				}
				if d == 0 {
					_, err = fmt.Fprintf(o.stdout, "tube %s is not paused\n", tube)
				} else {
					_, err = fmt.Fprintf(o.stdout, "paused tube %s for %ds\n", tube, d)
				}
				return err
			})
		},
	}
}
