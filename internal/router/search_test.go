package router

import (
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/testproc"
)

// answerChan is engine.Answers into a channel.
type answerChan chan engine.Answer

func (c answerChan) Answered(a engine.Answer) { c <- a }

// TestSearchByIDAsksMovedGroupsAtOnce: a command by id whose group had
// tubes moved out asks that group first and, once it answers NOT_FOUND,
// every group its tubes moved to (those the routing knows and those the
// answer names) at once, not one after another; the first answer other
// than NOT_FOUND is the command's, and the later ones are dropped. An id
// no group holds is NOT_FOUND once every group has answered; a group that
// answers that the job's tube is moving has the search begin again.
func TestSearchByIDAsksMovedGroupsAtOnce(t *testing.T) {
	const leader = 2
	sent := &sentItems{t: t}
	r := movedRouter(t, sent, func() []uint16 { return []uint16{1} })
	answers := make(answerChan, 4)
	s := r.NewQueue(answers).(*Session)
	var requests []Item
	collect := func() {
		for _, it := range sent.take() {
			if it.Kind == KindRequest && it.Request.Op == OpPeek {
				requests = append(requests, it)
			}
		}
	}
	// asked waits until the peeks sent since the last call are to groups
	// want, none more, and returns each one's sequence by group.
	asked := func(want ...uint16) map[uint16]uint32 {
		t.Helper()
		testproc.WaitFor(t, 5*time.Second, "peeks sent", func() bool {
			collect()
			return len(requests) >= len(want)
		})
		time.Sleep(20 * time.Millisecond) // none more comes
		collect()
		seqs := map[uint16]uint32{}
		var got []uint16
		for _, it := range requests {
			got = append(got, it.Group)
			seqs[it.Group] = it.Seq
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("peeks sent to groups %v, want %v", got, want)
		}
		requests = nil
		return seqs
	}
	reply := func(g uint16, seq uint32, rp Reply) {
		r.link.handle(leader, &Item{Kind: KindReply, Group: g, Session: s.id, Seq: seq, Reply: rp})
	}
	answer := func() engine.Answer {
		t.Helper()
		select {
		case a := <-answers:
			return a
		case <-time.After(5 * time.Second):
			t.Fatal("no answer")
		}
		return engine.Answer{}
	}
	notFound := func(moved ...uint16) Reply {
		return Reply{Status: StatusNotFound, Result: ResultMoved, Moved: moved}
	}

	id := meta.JobID(0, 5)
	var a engine.Answer
	if s.Peek(id, &a) {
		t.Fatal("a peek of another member's group answered at once")
	}
	seqs := asked(0)
	reply(0, seqs[0], notFound(2))
	seqs = asked(1, 2) // both before either answers
	reply(2, seqs[2], Reply{Status: StatusOK, Result: ResultJob, Job: JobReply{ID: id, Body: []byte("here\r\n")}})
	if a := answer(); a.JobID != id || string(a.JobBody) != "here\r\n" {
		t.Fatalf("the peek found job %d %q, want %d", a.JobID, a.JobBody, id)
	}
	reply(1, seqs[1], notFound())
	select {
	case a := <-answers:
		t.Fatalf("a second answer to one peek: %+v", a)
	case <-time.After(50 * time.Millisecond):
	}

	// Nowhere: NOT_FOUND once the last group answers.
	if s.Peek(id+1, &a) {
		t.Fatal("answered at once")
	}
	seqs = asked(0)
	reply(0, seqs[0], notFound())
	seqs = asked(1)
	reply(1, seqs[1], notFound())
	if a := answer(); a.JobID != 0 || a.Failed != 0 {
		t.Fatalf("a peek of an id held nowhere answered %+v, want NOT_FOUND", a)
	}

	// Moving: asked again from the id's group.
	if s.Peek(id+2, &a) {
		t.Fatal("answered at once")
	}
	seqs = asked(0)
	reply(0, seqs[0], notFound())
	seqs = asked(1)
	reply(1, seqs[1], Reply{Status: StatusWrongGroup})
	seqs = asked(0)
	reply(0, seqs[0], Reply{Status: StatusOK, Result: ResultJob, Job: JobReply{ID: id + 2, Body: []byte("back\r\n")}})
	if a := answer(); a.JobID != id+2 {
		t.Fatalf("the peek after a move found job %d, want %d", a.JobID, id+2)
	}
}
