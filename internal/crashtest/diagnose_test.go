package crashtest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// What a failure report says about a job the restart lost, so that a rare
// failure explains itself: the job's history as the clients saw it, and
// every record for it in the directory as each restart found it.

// note adds an event to id's history; l.mu must be held.
func (l *ledger) noteLocked(id uint64, round int, event string) {
	l.history[id] = append(l.history[id], fmt.Sprintf("r%d %s", round, event))
}

// describeLocked is id's history, for a failure message; l.mu must be held.
func (l *ledger) describeLocked(id uint64) string {
	h := l.history[id]
	if len(h) == 0 {
		return "no history"
	}
	return strings.Join(h, ", ")
}

// snapshot hard-links the log segments in dir into snap, as the next
// restart will find them. Segments are never rewritten in place (only a
// torn tail is cut, by truncation), so links cost nothing and show what
// each restart replayed.
func snapshot(dir, snap string) error {
	if err := os.MkdirAll(snap, 0o750); err != nil {
		return err
	}
	names, err := filepath.Glob(filepath.Join(dir, "sprout.*.wal"))
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := os.Link(name, filepath.Join(snap, filepath.Base(name))); err != nil {
			return err
		}
	}
	return nil
}

// Record kinds and the frame layout, as store/wal writes them (encode.go).
const (
	segHeader   = 24
	frameHeader = 8
)

var kindNames = map[byte]string{1: "full", 2: "update", 3: "delete", 4: "ids"}
var stateNames = map[byte]string{1: "ready", 2: "reserved", 3: "buried", 4: "delayed"}

// scanRecords lists every record for id in the segments in snap: file,
// offset, kind and, for full and update records, state; and the range of
// segments there.
func scanRecords(snap string, id uint64) string {
	names, err := filepath.Glob(filepath.Join(snap, "sprout.*.wal"))
	if err != nil || len(names) == 0 {
		return fmt.Sprintf("no segments (%v)", err)
	}
	sort.Strings(names)
	var found []string
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			found = append(found, err.Error())
			continue
		}
		for off := segHeader; off+frameHeader+9 <= len(data); {
			n := int(binary.LittleEndian.Uint32(data[off:]))
			if n < 9 || off+frameHeader+n > len(data) {
				break // the zeros after the last record, or a torn one
			}
			p := data[off+frameHeader : off+frameHeader+n]
			if binary.LittleEndian.Uint64(p[1:]) == id {
				desc := fmt.Sprintf("%s@%d %s", filepath.Base(name), off, kindNames[p[0]])
				state := 9 // u8 kind, u64 id
				if p[0] == 1 {
					state += 2 + int(binary.LittleEndian.Uint16(p[9:])) // the tube
				}
				if (p[0] == 1 || p[0] == 2) && state < len(p) {
					desc += " " + stateNames[p[state]]
				}
				found = append(found, desc)
			}
			off += frameHeader + n
		}
	}
	if len(found) == 0 {
		found = []string{"no record"}
	}
	return fmt.Sprintf("segments %s..%s: %s", filepath.Base(names[0]), filepath.Base(names[len(names)-1]),
		strings.Join(found, ", "))
}

// explainLost logs, for each job the latest verify found missing, its
// records in the directory as each earlier restart found it (snaps/R holds
// what round R's kill left), and the end of the last round's server output.
func (l *ledger) explainLost(t *testing.T, snaps string, outputs []string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range l.lost {
		var b strings.Builder
		fmt.Fprintf(&b, "lost job %d: %s", id, l.describeLocked(id))
		for r := range outputs {
			fmt.Fprintf(&b, "\n  after round %d's kill: %s", r, scanRecords(filepath.Join(snaps, strconv.Itoa(r)), id))
		}
		t.Log(b.String())
	}
	if len(l.lost) > 0 && len(outputs) > 0 {
		t.Logf("the last round's server output:\n%s", tail(outputs[len(outputs)-1]))
	}
}
