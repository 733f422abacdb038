package wal_test

import (
	"testing"

	"github.com/sproutmq/sprout/store/segment/segtest"
	"github.com/sproutmq/sprout/store/wal"
)

// TestIDsNeverReused: after every job is deleted (and compaction has removed
// the segments that logged them), reopening, even several times in a row
// with nothing logged in between, resumes above every id ever issued.
func TestIDsNeverReused(t *testing.T) {
	dir := t.TempDir()
	opts := wal.Options{SegmentSize: 1024}
	var issued uint64
	for round := range 5 {
		l, m := open(t, dir, opts)
		if got := l.LastID(); got != issued {
			t.Fatalf("round %d: LastID = %d, want %d", round, got, issued)
		}
		if round%2 == 1 {
			// Nothing logged this time: the ids live on in segment headers alone.
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var lsn uint64
		for range 40 {
			id, _ := m.put(t, "default", "a body long enough to fill a few tiny segments", wal.StateReady, 0)
			if id <= issued {
				t.Fatalf("round %d: new id %d, but %d was issued before", round, id, issued)
			}
			issued = id
			lsn = m.del(t, id)
		}
		segtest.WaitDurable(t, l, lsn)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if seqs, _ := segtest.Segments(t, dir); seqs[0] == 1 && round > 0 {
			t.Logf("round %d: segment 1 still on disk (%v)", round, seqs)
		}
	}
	got, last := recoverDir(t, dir, opts)
	if len(got) != 0 || last != issued {
		t.Fatalf("recovered %d jobs and LastID %d; want none and %d", len(got), last, issued)
	}
}

// TestCloseWithoutStart: a log opened and never started closes, and frees
// its directory.
func TestCloseWithoutStart(t *testing.T) {
	dir := t.TempDir()
	l, err := wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	segtest.CloseUnstarted(t, l)
	l, err = wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	segtest.CloseUnstarted(t, l)
}

// TestAppendAllocs: Append, on every connection's hot path, allocates
// nothing once the log's buffers have grown, the writer running meanwhile.
func TestAppendAllocs(t *testing.T) {
	l, _ := open(t, t.TempDir(), wal.Options{NoSync: true, SegmentSize: 64 << 20})
	put := wal.Record{Kind: wal.KindFull, Tube: "default", State: wal.StateReady, Body: []byte("a body\r\n")}
	del := wal.Record{Kind: wal.KindDelete}
	putAndDelete := func() {
		put.ID++
		_, loc, err := l.Append(&put, wal.Loc{})
		if err != nil {
			t.Fatal(err)
		}
		del.ID = put.ID
		if _, _, err := l.Append(&del, loc); err != nil {
			t.Fatal(err)
		}
	}
	for range 1000 {
		putAndDelete()
	}
	if n := testing.AllocsPerRun(1000, putAndDelete); n > 0 {
		t.Errorf("Append allocates %v times per put and delete", n)
	}
}
