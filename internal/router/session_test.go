package router

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/testproc"
)

// answersLog records what a session delivers, by each answer's N.
type answersLog []uint64

func (l *answersLog) Answered(a engine.Answer) { *l = append(*l, a.N) }

// TestSessionDeliversInOrder: answers that come out of their commands'
// order (replies from two leaders across a failover, or one given up on
// beside one answered) reach the engine in the commands' order; one that
// is not delivered (a cancelled reserve's) holds nothing up, and one for
// a command not awaited is dropped.
func TestSessionDeliversInOrder(t *testing.T) {
	var got answersLog
	s := &Session{answers: &got}
	s.awaited = []uint32{1, 2, 3, 4, 5}
	answer := func(seq uint32) { s.deliver(seq, &engine.Answer{N: uint64(seq)}) }
	answer(3)
	answer(2)
	if len(got) != 0 {
		t.Fatalf("delivered %v before the first command's answer", got)
	}
	answer(1)
	if want := (answersLog{1, 2, 3}); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	s.deliver(5, &engine.Answer{N: 5})
	s.deliver(4, nil) // nothing to deliver: the next goes
	answer(9)         // never awaited
	if want := (answersLog{1, 2, 3, 5}); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if len(s.awaited) != 0 || len(s.early) != 0 {
		t.Fatalf("left awaited %v, early %v", s.awaited, s.early)
	}
}

// ackedAt is an AckSource that has acknowledged up to its value.
type ackedAt uint64

func (a ackedAt) Acked() uint64                 { return uint64(a) }
func (a ackedAt) OnAcked(pos uint64, fn func()) {}

// TestClosesWith: a session closes when its member stops serving a group
// only if a reply of a command it ran there waits for the group's log.
func TestClosesWith(t *testing.T) {
	s := &Session{here: []hereAck{{group: 1, acks: ackedAt(5), pos: 6}, {group: 2, acks: ackedAt(9), pos: 9}}}
	for g, want := range map[uint16]bool{0: false, 1: true, 2: false, 3: false} {
		if got := ClosesWith(s, g); got != want {
			t.Errorf("ClosesWith(group %d) = %v, want %v", g, got, want)
		}
	}
	if !ClosesWith(&Session{local: engine.ClientQueue(nil)}, 0) {
		t.Error("a session on the store of the one group does not close with it")
	}
}

// TestSessionAskHeld: asked, the group's leader names the jobs the
// session no longer holds (another session's, here), and the session
// forgets them and keeps the one it holds; an answer about a job the
// session touched since it asked forgets nothing; a session closed asks
// nothing.
func TestSessionAskHeld(t *testing.T) {
	n := newLinkNet(t, 2)
	s := &Session{r: &Router{link: n.link}, id: 10}
	a := make(answers, 16)
	tube := []byte("h")
	reserve := func(session uint64, seq uint32) uint64 {
		t.Helper()
		n.link.Request(session, 0, seq, Request{Op: OpPut, Tube: tube, TTR: 60, Body: []byte("j\r\n")}, a.done)
		a.next(t)
		n.link.Request(session, 0, seq+1, Request{Op: OpReserve, Tubes: [][]byte{tube}, Timeout: 0}, a.done)
		return a.next(t).Reply.Job.ID
	}
	mine, theirs := reserve(s.id, 1), reserve(11, 1)
	s.seq.Store(2)
	s.holdJob(&JobReply{ID: mine, TTR: 60}, 0)
	s.holdJob(&JobReply{ID: theirs, TTR: 60}, 0)
	s.askHeld(0)
	testproc.WaitFor(t, 5*time.Second, "the job not held forgotten", func() bool { return s.holding() == 1 })
	s.mu.Lock()
	_, kept := s.held[mine]
	asked := s.held[mine].deadline
	s.mu.Unlock()
	if !kept {
		t.Fatalf("the session forgot job %d, which it holds, and kept %d", mine, theirs)
	}

	s.heldChanged(mine, true, 0) // touched since
	s.heldLost(mine, asked)
	if s.holding() != 1 {
		t.Error("an answer about a job touched since it was asked forgot it")
	}

	requests := n.link.requests.Load()
	s.ended = true
	s.askHeld(0)
	if got := n.link.requests.Load(); got != requests {
		t.Errorf("a closed session asked %d questions", got-requests)
	}
}

// TestLocalDone: after HoldLocal, LocalDone waits for a command that
// counted itself as running here before the hold was set (runHere), and
// only for its own group's.
func TestLocalDone(t *testing.T) {
	r := &Router{}
	const g = 3
	r.runningLocal[g].Add(1) // passed the hold's check before it was set
	r.HoldLocal(g, time.Now().Add(time.Minute))
	if r.LocalDone(g, time.Now().Add(20*time.Millisecond)) {
		t.Fatal("LocalDone did not wait for the command running here")
	}
	if !r.LocalDone(g+1, time.Now()) {
		t.Fatal("LocalDone waited for another group's command")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		r.runningLocal[g].Add(-1)
	}()
	if !r.LocalDone(g, time.Now().Add(5*time.Second)) {
		t.Fatal("LocalDone did not see the command end")
	}
}

// TestSessionSequenceSkipsZero: a session's sequence wraps after 2^32
// commands past 0, which means none to the Server.
func TestSessionSequenceSkipsZero(t *testing.T) {
	var s Session
	s.seq.Store(math.MaxUint32 - 1)
	for _, want := range []uint32{math.MaxUint32, 1, 2} {
		if got := s.next(); got != want {
			t.Fatalf("next: %d, want %d", got, want)
		}
	}
}

// TestSessionAskHeldFollowsAMove: a job whose tube moved while the
// session held it is where the tube went (its reservation moved with
// it): asked of the group the session filed it under, which answers not
// held but names where its tubes moved, the session asks those and files
// the job under the one that holds it, and forgets it if none does. It
// forgot it at once: no DEADLINE_SOON for it, and a graceful shutdown
// did not wait for it.
func TestSessionAskHeldFollowsAMove(t *testing.T) {
	n := newLinkNet(t, 2)
	n.servers[2].cfg.MovedTo = func(g uint16) []uint16 {
		if g == 0 {
			return []uint16{1}
		}
		return nil
	}
	s := &Session{r: &Router{link: n.link}, id: 10}
	a := make(answers, 16)
	tube := [][]byte{[]byte("moved")}
	n.link.Request(s.id, 1, 1, Request{Op: OpPut, Tube: tube[0], TTR: 60, Body: []byte("j\r\n")}, a.done)
	a.next(t)
	n.link.Request(s.id, 1, 2, Request{Op: OpReserve, Tubes: tube}, a.done)
	held := a.next(t).Reply.Job.ID
	s.seq.Store(2)
	s.holdJob(&JobReply{ID: held, TTR: 60}, 0)        // filed under group 0, where its id began
	s.holdJob(&JobReply{ID: held + 1000, TTR: 60}, 0) // held nowhere
	s.askHeld(0)
	testproc.WaitFor(t, 5*time.Second, "the job held nowhere forgotten", func() bool { return s.holding() == 1 })
	testproc.WaitFor(t, 5*time.Second, "the moved job filed under group 1", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.held[held].group == 1
	})
}
