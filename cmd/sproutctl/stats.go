package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/beanstalkd/go-beanstalk"
	"github.com/spf13/cobra"
)

// stats is one stats, stats-tube or stats-job reply as go-beanstalk parses
// it: each value as the server wrote it, strings in double quotes.
type stats map[string]string

// str returns the value of key without the quotes of a YAML string.
func (s stats) str(key string) string {
	v := s[key]
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// int returns the value of key as an integer; 0 if it is missing or not a
// number.
func (s stats) int(key string) int64 {
	n, _ := strconv.ParseInt(s[key], 10, 64)
	return n
}

// typed returns the values as JSON has them, the way the admin API writes
// them: quoted strings as strings, unquoted integers and decimals as
// numbers, true and false as booleans. The keys in asString stay strings
// whatever they look like (the server's hexadecimal id).
func (s stats) typed(asString ...string) map[string]any {
	m := make(map[string]any, len(s))
	for k, v := range s {
		m[k] = s.str(k)
		if slices.Contains(asString, k) || strings.HasPrefix(v, `"`) {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m[k] = n
		} else if f, err := strconv.ParseFloat(v, 64); err == nil {
			m[k] = f
		} else if b, err := strconv.ParseBool(v); err == nil {
			m[k] = b
		}
	}
	return m
}

// serverStats returns the server's stats.
func serverStats(c *beanstalk.Conn) (stats, error) {
	s, err := c.Stats()
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return s, nil
}

// tubeStats returns the stats of tube; a tube that does not exist is
// errNotFound (through beanstalk.ErrNotFound).
func tubeStats(c *beanstalk.Conn, tube string) (stats, error) {
	s, err := beanstalk.NewTube(c, tube).Stats()
	if err != nil {
		return nil, fmt.Errorf("stats-tube %s: %w", tube, err)
	}
	return s, nil
}

// allTubeStats returns the stats of every tube, sorted by name. A tube that
// goes away between list-tubes and its stats-tube is left out.
func allTubeStats(c *beanstalk.Conn) ([]stats, error) {
	names, err := c.ListTubes()
	if err != nil {
		return nil, fmt.Errorf("list-tubes: %w", err)
	}
	slices.Sort(names)
	all := make([]stats, 0, len(names))
	for _, name := range names {
		s, err := tubeStats(c, name)
		if errors.Is(err, beanstalk.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		all = append(all, s)
	}
	return all, nil
}

func newStatsCmd(o *options) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "stats",
		Short: "Show the server's stats",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return o.withServer(func(c *beanstalk.Conn) error {
				s, err := serverStats(c)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(o.stdout, s.typed("id"))
				}
				var rows [][]string
				for _, k := range slices.Sorted(maps.Keys(s)) {
					rows = append(rows, []string{k, s.str(k)})
				}
				return writeTable(o.stdout, []string{"STAT", "VALUE"}, rows)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "write one JSON object, numbers as numbers")
	return c
}

// tubeColumns are the columns of tubes (and of top, before its rates):
// a header and the stats-tube key it shows.
var tubeColumns = []struct{ header, key string }{
	{"READY", "current-jobs-ready"},
	{"RESERVED", "current-jobs-reserved"},
	{"DELAYED", "current-jobs-delayed"},
	{"BURIED", "current-jobs-buried"},
	{"URGENT", "current-jobs-urgent"},
	{"WAITING", "current-waiting"},
	{"TOTAL", "total-jobs"},
}

// tubeRow returns a tube's name and its tubeColumns, then how long it stays
// paused ("" when it is not).
func tubeRow(s stats) []string {
	row := []string{s.str("name")}
	for _, col := range tubeColumns {
		row = append(row, s.str(col.key))
	}
	paused := ""
	if left := s.int("pause-time-left"); left > 0 {
		paused = fmt.Sprintf("%ds", left)
	}
	return append(row, paused)
}

func tubeHeaders() []string {
	h := []string{"TUBE"}
	for _, col := range tubeColumns {
		h = append(h, col.header)
	}
	return append(h, "PAUSED")
}

func newTubesCmd(o *options) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "tubes",
		Short: "List the tubes with their jobs by state",
		Long: `List the tubes, sorted by name, one line each: ready, reserved, delayed
and buried jobs, urgent ready jobs (priority below 1024), workers waiting,
the jobs ever put into it (TOTAL), and the time left of a pause.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return o.withServer(func(c *beanstalk.Conn) error {
				all, err := allTubeStats(c)
				if err != nil {
					return err
				}
				if asJSON {
					tubes := make([]map[string]any, len(all))
					for i, s := range all {
						tubes[i] = s.typed()
					}
					return writeJSON(o.stdout, map[string]any{"tubes": tubes})
				}
				rows := make([][]string, len(all))
				for i, s := range all {
					rows[i] = tubeRow(s)
				}
				return writeTable(o.stdout, tubeHeaders(), rows)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `write {"tubes": [...]}, each tube's stats-tube as an object`)
	c.AddCommand(newTubesMoveCmd(o), newTubesPlaceCmd(o))
	return c
}
