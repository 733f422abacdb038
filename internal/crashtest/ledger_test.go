package crashtest

import (
	"fmt"
	"testing"

	"github.com/sproutmq/sprout/internal/testproc"
)

// TestLedgerDoubtOutlivesAnotherConsumersRelease replays the sequence
// behind a false "lost job" report of TestCrashRecovery. Consumer 2
// releases job 6399; the server hands it at once to consumer 1's waiting
// reserve (a RESERVED waits only for the job's put to be durable, not for
// the release), consumer 1 sends delete, and only then does consumer 2's
// RELEASED arrive. The kill cuts consumer 1's DELETED, but the delete was
// logged: after the restart the job is rightly gone. The RELEASED used to
// clear the delete's doubt, so the ledger expected the job back.
func TestLedgerDoubtOutlivesAnotherConsumersRelease(t *testing.T) {
	body := []byte("round 1 producer 0 job 297|")
	// The server as the restart left it: the job was put and deleted.
	s := testproc.Start(t, testproc.SproutBinary(t))
	c := dial(t, s.Addr())
	c.expect("use crash-a", "USING crash-a")
	id := c.put(0, 0, 60, body)
	c.expect(fmt.Sprintf("delete %d", id), "DELETED")

	l := newLedger()
	l.inserted[id] = job{"crash-a", body}
	l.noteLocked(id, 1, "INSERTED")
	l.checkReserved(id, body, 1, 2)
	l.checkReserved(id, body, 1, 1)
	l.sent(id, 1, 1, "delete")
	l.gotReleased(id, 1, 2, 0)
	if l.doubt[id] != "delete" {
		t.Fatalf("after another consumer's RELEASED, the unanswered delete's doubt is %q; want \"delete\"", l.doubt[id])
	}

	// The restart finds the job gone: the delete happened, and from then
	// on the job must stay gone.
	l.verify(t, s.Addr(), 2)
	if !l.deleted[id] || l.doubt[id] != "" || l.doubtsHappened != 1 {
		t.Errorf("after the restart: deleted %v, doubt %q, %d doubts happened; want true, none, 1; history: %s",
			l.deleted[id], l.doubt[id], l.doubtsHappened, l.describeLocked(id))
	}
}
