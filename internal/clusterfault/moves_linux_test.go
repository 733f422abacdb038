package clusterfault

import (
	"maps"
	"testing"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestMovesBetween checks the counting of a member's replica moves
// between two looks, across a restart of its process.
func TestMovesBetween(t *testing.T) {
	before, after := &testproc.Process{}, &testproc.Process{}
	look := func(p *testproc.Process, asked, own uint64) moveLook {
		return moveLook{proc: p, by: map[string]uint64{"asked": asked, "own": own}}
	}
	for _, tc := range []struct {
		name               string
		last, stopped, now moveLook
		want               map[string]uint64
	}{
		{"first look", moveLook{}, moveLook{}, look(after, 2, 1), map[string]uint64{"asked": 2, "own": 1}},
		{"same process", look(before, 2, 1), moveLook{}, look(before, 5, 1), map[string]uint64{"asked": 3, "own": 0}},
		{"restarted, read before it stopped", look(before, 2, 1), look(before, 4, 3), look(after, 1, 0),
			map[string]uint64{"asked": 3, "own": 2}},
		{"restarted, not read before", look(before, 2, 1), moveLook{}, look(after, 1, 0), map[string]uint64{"asked": 1, "own": 0}},
		{"restarted, read of an older process", look(before, 2, 1), look(&testproc.Process{}, 9, 9), look(after, 1, 0),
			map[string]uint64{"asked": 1, "own": 0}},
	} {
		if got := movesBetween(tc.last, tc.stopped, tc.now); !maps.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
