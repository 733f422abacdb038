package segment_test

import (
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
)

// headerVersion is the version segment seq's header in dir says.
func headerVersion(t *testing.T, dir string, seq uint32) uint32 {
	t.Helper()
	b, err := os.ReadFile(segPath(dir, seq))
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[8:])
}

// switchVersion calls SetVersion until a spare of v is there, as its
// user does, and returns the segment appends moved to.
func switchVersion(t *testing.T, l *testLog, v uint32, checkpoint []byte) uint32 {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if seg, ok := l.SetVersion(v, checkpoint); ok {
			return seg
		}
		select {
		case <-l.SpareMade():
		case <-deadline:
			t.Fatal("no spare of the new version made")
		}
	}
}

// TestSetVersion: a log switched to another version while it runs moves
// its appends at once to a segment of that version beginning with the
// checkpoint given (the spare made before the switch, of the old version,
// is dropped, never written to); the segments before keep theirs. Open
// replays both when the new one's user reads the old, each frame saying
// its segment's version, and a user that reads only the old refuses the
// directory, naming the new version.
func TestSetVersion(t *testing.T) {
	dir := t.TempDir()
	opts := segment.Options{SegmentSize: 64 << 10, Reads: []uint32{segment.VersionMultiRaft}}
	l, _ := openFrames(t, dir, opts)
	startCluster(t, l, "v2 checkpoint")
	before := appendGroup(t, l, "before")
	// Wait for the first spare: it is made with version 2, and must not
	// be used.
	select {
	case <-l.SpareMade():
	case <-time.After(10 * time.Second):
		t.Fatal("no spare made")
	}
	seg := switchVersion(t, l, segment.VersionMultiRaft, clusterFrame(nil, kindCheckpoint, "v3 checkpoint"))
	if seg != before.seg+2 {
		t.Fatalf("appends moved to segment %d, after %d: not past the spare of version 2", seg, before.seg)
	}
	after := appendGroup(t, l, "after")
	if after.seg != seg {
		t.Errorf("a group after the switch went to segment %d, not %d", after.seg, seg)
	}
	// Switching again to the version in use changes nothing.
	if s, ok := l.SetVersion(segment.VersionMultiRaft, nil); !ok || s != 0 {
		t.Errorf("SetVersion to the version in use: %d, %v", s, ok)
	}
	segtest.WaitDurable(t, l.Log, after.lsn)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if v := headerVersion(t, dir, before.seg); v != segment.VersionRaftLog {
		t.Errorf("segment %d's header says %d", before.seg, v)
	}
	if v := headerVersion(t, dir, seg); v != segment.VersionMultiRaft {
		t.Errorf("segment %d's header says %d", seg, v)
	}
	if fi, err := os.Stat(segPath(dir, before.seg+1)); err != nil || fi.Size() != segment.HeaderSize {
		t.Errorf("the spare of version 2 left: %v, %v", fi, err)
	}

	l, frames := openFrames(t, dir, opts)
	_ = l.Close()
	if _, err := os.Stat(segPath(dir, before.seg+1)); !os.IsNotExist(err) {
		t.Errorf("Open kept the unused spare of version 2: %v", err)
	}
	var got []string
	for _, f := range frames {
		got = append(got, string(f.Payload[1:]))
		want := segment.VersionRaftLog
		if f.Seg >= seg {
			want = segment.VersionMultiRaft
		}
		if f.Version != want {
			t.Errorf("frame %q in segment %d: version %d, want %d", f.Payload[1:], f.Seg, f.Version, want)
		}
	}
	if want := []string{"v2 checkpoint", "before", "v3 checkpoint", "after"}; !slices.Equal(got, want) {
		t.Errorf("replayed %q, want %q", got, want)
	}

	_, _, err := tryOpenFrames(dir, segment.Options{SegmentSize: 64 << 10})
	var verr *segment.VersionError
	if !errors.As(err, &verr) || verr.Version != segment.VersionMultiRaft || verr.Want != segment.VersionRaftLog {
		t.Fatalf("a version 2 reader opened a version 3 segment: %v", err)
	}
	t.Log(err)
}

// TestSetVersionBeforeStart: set before Start, a version is the first
// segment's, and the spares'.
func TestSetVersionBeforeStart(t *testing.T) {
	dir := t.TempDir()
	opts := segment.Options{SegmentSize: 4 << 10, Reads: []uint32{segment.VersionMultiRaft}}
	l, _ := openFrames(t, dir, opts)
	if _, ok := l.SetVersion(segment.VersionMultiRaft, nil); !ok {
		t.Fatal("SetVersion before Start refused")
	}
	startCluster(t, l, "v3 checkpoint")
	select {
	case <-l.SpareMade():
	case <-time.After(10 * time.Second):
		t.Fatal("no spare made")
	}
	var last written
	for range 8 { // past a segment: appends move to the spare
		last = appendGroup(t, l, string(make([]byte, 1<<10)))
	}
	segtest.WaitDurable(t, l.Log, last.lsn)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if last.seg < 2 {
		t.Fatalf("appends stayed in segment %d", last.seg)
	}
	for seq := uint32(1); seq <= last.seg; seq++ {
		if v := headerVersion(t, dir, seq); v != segment.VersionMultiRaft {
			t.Errorf("segment %d's header says %d", seq, v)
		}
	}
}
