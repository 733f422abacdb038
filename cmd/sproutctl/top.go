package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/beanstalkd/go-beanstalk"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
)

// snapshot is what top reads from the server once per interval.
type snapshot struct {
	at     time.Time
	server stats
	tubes  []stats // sorted by name
}

// topSource reads snapshots over one connection, made again after a
// failure. It is used by one goroutine at a time: top asks for the next
// snapshot only once the last one arrived.
type topSource struct {
	o    *options
	conn *beanstalk.Conn // nil until connected, and after a failure
}

func (s *topSource) read() (snapshot, error) {
	if s.conn == nil {
		c, err := s.o.dial(s.o.server)
		if err != nil {
			return snapshot{}, err
		}
		s.conn = c
	}
	server, err := serverStats(s.conn)
	var tubes []stats
	if err == nil {
		tubes, err = allTubeStats(s.conn)
	}
	if err != nil {
		s.conn.Close()
		s.conn = nil
		return snapshot{}, err
	}
	return snapshot{at: time.Now(), server: server, tubes: tubes}, nil
}

func (s *topSource) close() {
	if s.conn != nil {
		s.conn.Close()
	}
}

// snapshotMsg carries a snapshot, or the error that took its place, to
// the model.
type snapshotMsg struct {
	snap snapshot
	err  error
}

// tickMsg asks for the next snapshot.
type tickMsg struct{}

// topSorts are the orders top's tube table cycles through with s.
var topSorts = []string{"name", "ready", "put/s", "delete/s"}

// topModel is top's state, a bubbletea model: snapshots in, a frame out.
// It does no I/O of its own; read is called by the command Init and
// Update return, on bubbletea's goroutines, one at a time.
type topModel struct {
	addr        string
	interval    time.Duration
	read        func() (snapshot, error)
	interactive bool // a terminal: keys help line, height limit

	prev, cur *snapshot // the last two snapshots; nil before them
	err       error     // the last read's failure, shown until a read succeeds
	sortBy    int       // index into topSorts
	height    int       // terminal rows; 0 shows every tube
}

func (m topModel) fetch() tea.Msg {
	snap, err := m.read()
	return snapshotMsg{snap, err}
}

func (m topModel) Init() tea.Cmd { return m.fetch }

func (m topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "esc", "ctrl+c":
			return m, tea.Quit
		case "s":
			m.sortBy = (m.sortBy + 1) % len(topSorts)
		}
	case tea.WindowSizeMsg:
		m.height = msg.Height
	case snapshotMsg:
		m = m.observe(msg)
		return m, tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
	case tickMsg:
		return m, m.fetch
	}
	return m, nil
}

// observe takes in a snapshot, or a failure to read one.
func (m topModel) observe(msg snapshotMsg) topModel {
	m.err = msg.err
	if msg.err == nil {
		snap := msg.snap
		m.prev, m.cur = m.cur, &snap
	}
	return m
}

// rate returns the change of key per second between two stats, and false
// without two of them or when the counter went back (a restarted server).
func rate(prev, cur stats, dt time.Duration, key string) (float64, bool) {
	if prev == nil || cur == nil || dt <= 0 {
		return 0, false
	}
	d := cur.int(key) - prev.int(key)
	if d < 0 {
		return 0, false
	}
	return float64(d) / dt.Seconds(), true
}

func formatRate(r float64, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

func (m topModel) View() string {
	var b strings.Builder
	if m.err != nil {
		fmt.Fprintf(&b, "error: %v\n", m.err)
	}
	if m.cur == nil {
		if m.err == nil {
			fmt.Fprintf(&b, "connecting to %s…\n", m.addr)
		}
		return b.String()
	}
	var dt time.Duration
	var prevServer stats
	prevTubes := map[string]stats{}
	if m.prev != nil {
		dt = m.cur.at.Sub(m.prev.at)
		prevServer = m.prev.server
		for _, t := range m.prev.tubes {
			prevTubes[t.str("name")] = t
		}
	}
	s := m.cur.server
	// perSecond is the keys' counts a second, summed.
	perSecond := func(keys ...string) string {
		var sum float64
		for _, key := range keys {
			r, ok := rate(prevServer, s, dt, key)
			if !ok {
				return formatRate(0, false)
			}
			sum += r
		}
		return formatRate(sum, true)
	}
	fmt.Fprintf(&b, "%s  version %s  up %s  every %s\n", m.addr, s.str("version"),
		(time.Duration(s.int("uptime")) * time.Second).String(), m.interval)
	fmt.Fprintf(&b, "connections %s (producers %s, workers %s, waiting %s)  tubes %s\n",
		s.str("current-connections"), s.str("current-producers"), s.str("current-workers"),
		s.str("current-waiting"), s.str("current-tubes"))
	fmt.Fprintf(&b, "jobs  ready %s  reserved %s  delayed %s  buried %s  urgent %s\n",
		s.str("current-jobs-ready"), s.str("current-jobs-reserved"), s.str("current-jobs-delayed"),
		s.str("current-jobs-buried"), s.str("current-jobs-urgent"))
	fmt.Fprintf(&b, "per second  put %s  reserve %s  delete %s  timeouts %s  connections %s\n\n",
		perSecond("cmd-put"), perSecond("cmd-reserve", "cmd-reserve-with-timeout"), perSecond("cmd-delete"),
		perSecond("job-timeouts"), perSecond("total-connections"))

	type line struct {
		st             stats
		put, del       float64
		hasPut, hasDel bool
	}
	lines := make([]line, len(m.cur.tubes))
	for i, t := range m.cur.tubes {
		prev, ok := prevTubes[t.str("name")]
		if !ok && m.prev != nil {
			prev = stats{} // a new tube: its counters started at 0 since
		}
		l := line{st: t}
		l.put, l.hasPut = rate(prev, t, dt, "total-jobs")
		l.del, l.hasDel = rate(prev, t, dt, "cmd-delete")
		lines[i] = l
	}
	switch topSorts[m.sortBy] {
	case "ready":
		slices.SortStableFunc(lines, func(a, b line) int {
			return cmp.Compare(b.st.int("current-jobs-ready"), a.st.int("current-jobs-ready"))
		})
	case "put/s":
		slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(b.put, a.put) })
	case "delete/s":
		slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(b.del, a.del) })
	}
	shown := len(lines)
	if m.height > 0 {
		// The lines above, the table's header, the line of keys, and one
		// for "and N more".
		room := m.height - strings.Count(b.String(), "\n") - 3
		shown = min(shown, max(room, 0))
	}
	rows := make([][]string, 0, shown)
	for _, l := range lines[:shown] {
		rows = append(rows, append(tubeRow(l.st), formatRate(l.put, l.hasPut), formatRate(l.del, l.hasDel)))
	}
	b.WriteString(renderTable(append(tubeHeaders(), "PUT/S", "DELETE/S"), rows))
	b.WriteString("\n")
	if shown < len(lines) {
		fmt.Fprintf(&b, "… and %d more tubes\n", len(lines)-shown)
	}
	if m.interactive {
		fmt.Fprintf(&b, "q quit · s sort (by %s)\n", topSorts[m.sortBy])
	}
	return b.String()
}

func newTopCmd(o *options) *cobra.Command {
	var batch int
	var once bool
	interval := time.Second
	c := &cobra.Command{
		Use:   "top",
		Short: "A live view of the server and its tubes; q quits",
		Long: `A live view of the server (connections, jobs by state, commands per
second) and of its tubes (jobs by state, puts and deletes per second),
read every --interval. q quits, s changes the order of the tubes (name,
ready jobs, puts, deletes). Rates show "-" until there are two readings.

--batch N prints N readings one below the other instead, for scripts and
logs; --once is --batch 1. Without a terminal, top needs one of them.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if once {
				batch = 1
			}
			if batch < 0 || interval <= 0 {
				return usagef("--batch takes 1 or more, --interval a positive duration")
			}
			src := &topSource{o: o}
			defer src.close()
			m := topModel{addr: o.server, interval: interval, read: src.read}
			if batch > 0 {
				return o.topBatch(m, batch)
			}
			in, inOK := o.stdin.(*os.File)
			out, outOK := o.stdout.(*os.File)
			if !inOK || !outOK || !isatty.IsTerminal(in.Fd()) || !isatty.IsTerminal(out.Fd()) {
				return usagef("top needs a terminal; without one, give --batch N or --once")
			}
			m.interactive = true
			_, err := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(o.ctx),
				tea.WithInput(in), tea.WithOutput(out)).Run()
			if errors.Is(err, tea.ErrProgramKilled) && o.ctx.Err() != nil {
				return nil // SIGINT or SIGTERM: quitting as q does
			}
			return err
		},
	}
	f := c.Flags()
	f.IntVar(&batch, "batch", 0, "print N readings and exit, without a terminal")
	f.BoolVar(&once, "once", false, "print one reading and exit (--batch 1)")
	f.DurationVar(&interval, "interval", interval, "time between readings")
	return c
}

// topBatch prints n readings of m, interval apart. A failed reading ends
// it, with the exit status of the failure.
func (o *options) topBatch(m topModel, n int) error {
	for i := range n {
		if i > 0 {
			select {
			case <-o.ctx.Done():
				return nil
			case <-time.After(m.interval):
			}
		}
		snap, err := m.read()
		if err != nil {
			return err
		}
		m = m.observe(snapshotMsg{snap: snap})
		if i > 0 {
			fmt.Fprintln(o.stdout)
		}
		fmt.Fprintf(o.stdout, "%s\n%s", snap.at.Format(time.RFC3339), m.View())
	}
	return nil
}
