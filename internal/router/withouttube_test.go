package router

import (
	"testing"

	"github.com/sproutmq/sprout/store"
)

// TestWithoutTubeNeverBelowZero: a moving tube's figures, read after its
// group's, may hold jobs an import added meanwhile; the group's figures
// without them come out 0 rather than below (stats sent the figure as an
// unsigned number: 2^64 less).
func TestWithoutTubeNeverBelowZero(t *testing.T) {
	st := withoutTube(store.Stats{Ready: 2, Delayed: 1, Tubes: 0}, store.TubeStats{Name: "moving", Ready: 5, Delayed: 1})
	if st.Ready != 0 || st.Delayed != 0 || st.Tubes != 0 {
		t.Errorf("without the tube: %+v, want nothing below 0", st)
	}
	st = withoutTube(store.Stats{Ready: 7, Tubes: 3}, store.TubeStats{Name: "moving", Ready: 5})
	if st.Ready != 2 || st.Tubes != 2 {
		t.Errorf("without the tube: %+v, want 2 ready in 2 tubes", st)
	}
}
