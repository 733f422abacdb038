package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// topStats builds a stats reply as go-beanstalk returns it.
func topStats(kv ...string) stats {
	s := stats{}
	for i := 0; i+1 < len(kv); i += 2 {
		s[kv[i]] = kv[i+1]
	}
	return s
}

// TestTopModel steps top's model by messages, as bubbletea would, without
// a terminal or a server.
func TestTopModel(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	server := func(puts, deletes string) stats {
		return topStats("version", `"1.13"`, "uptime", "3723", "current-connections", "7", "current-producers", "2",
			"current-workers", "3", "current-waiting", "1", "current-tubes", "3", "current-jobs-ready", "12",
			"cmd-put", puts, "cmd-delete", deletes, "cmd-reserve", "0", "job-timeouts", "0", "total-connections", "9")
	}
	tube := func(name, ready, total, deletes string) stats {
		return topStats("name", `"`+name+`"`, "current-jobs-ready", ready, "total-jobs", total, "cmd-delete", deletes)
	}
	reads := 0
	m := topModel{addr: "127.0.0.1:11300", interval: time.Second, interactive: true,
		read: func() (snapshot, error) { reads++; return snapshot{}, errors.New("read by a test") }}

	if v := m.View(); !strings.Contains(v, "connecting to 127.0.0.1:11300") {
		t.Errorf("before the first reading: %q", v)
	}
	// Init reads at once; a reading schedules the next one.
	if msg := m.Init()(); reads != 1 || msg.(snapshotMsg).err == nil {
		t.Errorf("Init: %d reads, %#v", reads, msg)
	}
	next, cmd := m.Update(snapshotMsg{snap: snapshot{at: t0, server: server("100", "50"),
		tubes: []stats{tube("a", "5", "40", "10"), tube("b", "7", "60", "40")}}})
	m = next.(topModel)
	if cmd == nil {
		t.Fatal("a reading scheduled no next one")
	}
	if _, cmd := m.Update(tickMsg{}); cmd == nil || reads != 1 {
		t.Errorf("a tick: want a read command, not run yet (%d reads)", reads)
	} else if cmd(); reads != 2 {
		t.Errorf("the tick's command did not read")
	}
	v := m.View()
	for _, want := range []string{
		"127.0.0.1:11300  version 1.13  up 1h2m3s  every 1s",
		"connections 7 (producers 2, workers 3, waiting 1)  tubes 3",
		"per second  put -  reserve -",
		"q quit · s sort (by name)",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("first frame: no %q in\n%s", want, v)
		}
	}
	if !regexpLine(v, `^a +5( +\d*)* +- +-$`) {
		t.Errorf("first frame: want tube a with no rates yet\n%s", v)
	}

	// Two seconds later: rates from the differences; c is new, so its
	// counters count from 0.
	m = step(t, m, snapshotMsg{snap: snapshot{at: t0.Add(2 * time.Second), server: server("160", "70"),
		tubes: []stats{tube("a", "9", "44", "10"), tube("b", "1", "100", "80"), tube("c", "2", "2", "0")}}})
	v = m.View()
	if !strings.Contains(v, "per second  put 30.0  reserve 0.0  delete 10.0") {
		t.Errorf("second frame: server rates wrong\n%s", v)
	}
	for _, want := range []string{`^a +9 .* 2\.0 +0\.0$`, `^b +1 .* 20\.0 +20\.0$`, `^c +2 .* 1\.0 +0\.0$`} {
		if !regexpLine(v, want) {
			t.Errorf("second frame: no line matches %s\n%s", want, v)
		}
	}
	order := func(v string) string {
		var names []string
		for _, l := range strings.Split(v, "\n") {
			if f := strings.Fields(l); len(f) > 0 && (f[0] == "a" || f[0] == "b" || f[0] == "c") {
				names = append(names, f[0])
			}
		}
		return strings.Join(names, " ")
	}
	// s cycles the order: ready, put/s, delete/s, then name again.
	for _, want := range []string{"a c b", "b a c", "b a c", "a b c"} {
		m = step(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("s")})
		if got := order(m.View()); got != want {
			t.Errorf("sorted by %s: %s, want %s", topSorts[m.sortBy], got, want)
		}
	}

	// A short terminal shows what fits and says what it left out.
	m = step(t, m, tea.WindowSizeMsg{Width: 80, Height: 9})
	if v := m.View(); order(v) != "a" || !strings.Contains(v, "… and 2 more tubes") {
		t.Errorf("9 rows: want one tube and a note of the others\n%s", v)
	}

	// A failed reading is shown above the last good one; a counter that
	// went back (a restarted server) has no rate.
	m = step(t, m, snapshotMsg{err: errors.New("connection refused")})
	if v := m.View(); !strings.HasPrefix(v, "error: connection refused\n") || !strings.Contains(v, "put 30.0") {
		t.Errorf("after a failed reading\n%s", v)
	}
	m = step(t, m, snapshotMsg{snap: snapshot{at: t0.Add(3 * time.Second), server: server("5", "1")}})
	if v := m.View(); strings.Contains(v, "error:") || !strings.Contains(v, "put -  reserve 0.0  delete -") {
		t.Errorf("after a restart\n%s", v)
	}

	for _, key := range []tea.KeyMsg{{Type: tea.KeyRunes, Runes: []rune("q")}, {Type: tea.KeyCtrlC}, {Type: tea.KeyEsc}} {
		if _, cmd := m.Update(key); cmd == nil {
			t.Errorf("%s: no command", key)
		} else if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%s: does not quit", key)
		}
	}
}

func step(t *testing.T, m topModel, msg tea.Msg) topModel {
	t.Helper()
	next, _ := m.Update(msg)
	return next.(topModel)
}

// TestTopBatch runs top --batch against both servers.
func TestTopBatch(t *testing.T) {
	t.Parallel()
	for _, srv := range startServers(t) {
		c := dial(t, srv.addr)
		put(t, c, "top-a", 1, 0, 60, []byte("x"))
		r := must(t, exitOK, "-s", srv.addr, "top", "--batch", "2", "--interval", "200ms")
		if n := strings.Count(r.stdout, "TUBE "); n != 2 {
			t.Errorf("%s: %d frames, want 2\n%s", srv.name, n, r.stdout)
		}
		if !regexpLine(r.stdout, `^top-a +1 .* 0\.0 +0\.0$`) || strings.Contains(r.stdout, "q quit") {
			t.Errorf("%s: want top-a with its rates in the second frame, and no keys", srv.name)
		}
		r = must(t, exitOK, "-s", srv.addr, "top", "--once")
		if n := strings.Count(r.stdout, "TUBE "); n != 1 {
			t.Errorf("%s: --once printed %d frames", srv.name, n)
		}
		r = must(t, exitUsage, "-s", srv.addr, "top")
		if !strings.Contains(r.stderr, "needs a terminal") {
			t.Errorf("%s: top without a terminal: want it to ask for --batch", srv.name)
		}
	}
}
