package conformance

import (
	"strings"
	"testing"

	"github.com/sproutmq/sprout/internal/testproc"
)

// backlogClients send more than a session takes at once: thousands of
// pipelined puts in one write, some read only after the client's end of
// file, and commands piled up behind a reserve that waits. beanstalkd
// stops reading such a connection until it can take more, and the
// client's writes wait; it then runs every command, in order. It still
// sees the client's end meanwhile, and ends a reserve that would wait for
// ever.
func backlogClients() []halfCloser {
	put := "put 0 0 60 100\r\n" + strings.Repeat("p", 100) + "\r\n"
	return []halfCloser{
		inOne("20,000 pipelined puts", strings.Repeat(put, 20_000)), // jobs 1-20000
		{name: "20,000 pipelined puts read late", readLate: true, pieces: []string{strings.Repeat(put, 20_000)}},
		inOne("320 KB of commands behind a waiting reserve",
			"watch empty\r\nignore default\r\nreserve-with-timeout 1\r\n"+strings.Repeat("list-tube-used\r\n", 20_000)),
		// Small enough for the kernel to take whole, so the client's end
		// (its FIN) arrives while the server reads nothing.
		inOne("64 KB of commands behind a reserve that waits for ever",
			"watch empty\r\nignore default\r\nreserve\r\n"+strings.Repeat("list-tube-used\r\n", 4_000)),
	}
}

// TestBacklog runs backlogClients against beanstalkd and a single Sprout
// node. Sprout used to close a connection whose unread input passed its
// cap (--max-input) instead of holding the client back.
func TestBacklog(t *testing.T) {
	ref := testproc.Reference(t)
	runHalfClosers(t, StartBinary(t, ref.Path), StartSprout(t), backlogClients())
}

// TestBacklogThroughFollower runs backlogClients against beanstalkd and a
// member that does not lead, which forwards the puts to the leader, a
// bounded number at a time (engine.MaxPipelined): the rest waits behind
// them. The member used to reset such a connection.
func TestBacklogThroughFollower(t *testing.T) {
	ref := testproc.Reference(t)
	if SelfTest() {
		t.Skip(SelfTestEnv + " is set: the stand-in has no cluster mode")
	}
	runHalfClosers(t, StartBinary(t, ref.Path), startFollower(t), backlogClients())
}
