package segment

import (
	"testing"
	"time"
)

// fiveFsynced is a harness with a spare, an fsync an hour, and five
// records of 100 bytes written to segment 1 and fsynced.
func fiveFsynced(t *testing.T) *harness {
	p := testPolicy()
	p.syncEvery = time.Hour
	h := newHarness(t, p, nil).withSpare()
	h.at(2 * time.Hour)
	for id := range uint64(5) {
		h.put(id + 1)
	}
	h.expect("header 1 id=5, write 1@24+500")
	h.wrote()
	h.expect("observe 500B 5rec", "publish 500", "sync [1]")
	h.synced()
	h.expect()
	return h
}

// TestNoRetireBeforeFailedChunk: a batch spanning segments 1 and 2 whose
// write to segment 1 fails does not let segment 1 be retired (sealed,
// closed) before the rest of its chunk is written: the batch moved
// writing on to 2 when it was taken.
func TestNoRetireBeforeFailedChunk(t *testing.T) {
	h := fiveFsynced(t)
	for id := range uint64(5) {
		h.put(id + 6) // four fill segment 1, the fifth goes on in 2
	}
	h.expect("spare 3", "write 1@524+400, header 2 id=10, write 2@24+100")
	h.c.spareDone(h.now, 3, nil)
	h.writeFailed(0) // nothing written
	for _, a := range h.c.ready(h.now) {
		if a.kind == actRetire {
			t.Errorf("segment %d retired at %d while its chunk is still to be written: %q", a.seq, a.n, h.describe(a))
		}
	}
}

// halfWrittenAcrossRotation is fiveFsynced's harness with a sixth record
// written (not fsynced: -f MS), then a batch of four more spanning the
// rotation to segment 2, whose write to segment 1 failed after one and a
// half frames.
func halfWrittenAcrossRotation(t *testing.T) *harness {
	h := fiveFsynced(t)
	h.at(2*time.Hour + time.Minute)
	h.put(6)
	h.expect("write 1@524+100")
	h.wrote()
	h.expect("observe 100B 1rec", "publish 600", "timer +59m0s")
	for id := range uint64(4) {
		h.put(id + 7) // three fill segment 1, the fourth goes on in 2
	}
	h.expect("spare 3", "write 1@624+300, header 2 id=10, write 2@24+100")
	h.c.spareDone(h.now, 3, nil)
	h.writeFailed(150) // one and a half frames of segment 1
	return h
}

// TestNoSealMidFrame: the same with part of segment 1's chunk written (-f
// MS: the timer's fsync covers it): segment 1 was retired, so sealed,
// mid-frame, and the next start refused to start on the sealed segment's
// bad last frame.
func TestNoSealMidFrame(t *testing.T) {
	h := halfWrittenAcrossRotation(t)
	h.expect("report write-failed 1", "timer +10ms")
	h.at(3 * time.Hour)
	h.timer()
	for range 4 {
		for _, a := range h.c.ready(h.now) {
			if a.kind == actRetire {
				t.Errorf("segment %d retired (sealed) at %d, mid-frame (frames end at 624+100k)", a.seq, a.n)
			}
			if a.kind == actSync {
				h.synced()
			}
			if a.kind == actWrite {
				h.writeFailed(0)
			}
		}
	}
}

// TestNoSealMidFrameAtGiveUp: as TestNoSealMidFrame, but the disk keeps
// failing until Close's grace runs out (giveUp): segment 1, written to
// mid-frame, was then retired (sealed) at that length once the final
// fsync covered it, and the next start refused the sealed segment's bad
// last frame. It stays open, and the next start cuts the tear.
func TestNoSealMidFrameAtGiveUp(t *testing.T) {
	h := halfWrittenAcrossRotation(t)
	h.c.closeRequested(h.now)
	for i := range 200 {
		h.at(2*time.Hour + time.Minute + time.Duration(i)*time.Second)
		h.timer()
		for _, a := range h.c.ready(h.now) {
			switch a.kind {
			case actRetire:
				if a.seq == 1 && a.n%100 != 24 {
					t.Fatalf("segment 1 retired (sealed) at %d, mid-frame (frames end at 24+100k): %q", a.n, h.describe(a))
				}
			case actSync:
				h.synced()
			case actWrite:
				h.writeFailed(0)
			case actClosed:
				return
			}
		}
	}
}
