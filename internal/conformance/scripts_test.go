package conformance

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	// quietWait is how long a step that expects no reply listens for one.
	quietWait = 150 * time.Millisecond
	// settleWait is how long a step listens for a reply beyond those it
	// expects, which would mean the script miscounted (on beanstalkd) or
	// Sprout answered too much.
	settleWait = 10 * time.Millisecond
)

// step is one move of a script: send bytes on a connection, then read a
// number of replies from both servers and compare them.
type step struct {
	conn      int           // connection number; dialled on first use
	send      string        // bytes to send verbatim; empty to only read
	replies   int           // replies to read after sending
	want      []string      // where set, the reference's replies verbatim: documents the quirk
	wait      time.Duration // how long each reply may take; replyWait if zero
	quiet     time.Duration // with replies == 0, how long to listen for silence; quietWait if zero
	pause     time.Duration // sleep before sending (timing scripts only)
	closes    bool          // the server then closes the connection
	halfClose bool          // after sending, shut down the client's writing side
	// freed: a tube was freed before this step's list-tubes, so that
	// through shard groups its order may differ (TestScriptedClusterGroups).
	freed bool
}

// on is the usual step: send on conn and expect that many replies.
func on(conn int, send string, replies int) step {
	return step{conn: conn, send: send, replies: replies}
}

// wants records what beanstalkd answers, checked on every run.
func (s step) wants(replies ...string) step { s.want = replies; return s }

// within allows each reply to take up to d (timers, blocked reserves).
func (s step) within(d time.Duration) step { s.wait = d; return s }

// silentFor listens for d to prove that a step gets no reply yet.
func (s step) silentFor(d time.Duration) step { s.quiet = d; return s }

// after sleeps for d before sending.
func (s step) after(d time.Duration) step { s.pause = d; return s }

// closing expects the server to close the connection after the replies.
func (s step) closing() step { s.closes = true; return s }

// halfClosing shuts down the client's writing side after sending.
func (s step) halfClosing() step { s.halfClose = true; return s }

// afterFree says that a tube was freed before this list-tubes: through
// shard groups, its reply is compared as a set (doc.go).
func (s step) afterFree() step { s.freed = true; return s }

// script is a named sequence of steps run against fresh servers.
type script struct {
	name  string
	steps []step
}

// runScript runs steps against a fresh beanstalkd and a fresh Sprout.
func runScript(t *testing.T, steps []step) { runScriptOn(t, steps, false) }

// runScriptOn is runScript, with Sprout's connections over TLS if overTLS.
func runScriptOn(t *testing.T, steps []step, overTLS bool) {
	runSteps(newSession(t, "script "+t.Name(), overTLS), steps)
}

// runSteps runs a script's steps on s. Through shard groups (s.groups),
// the job ids of the commands go to Sprout translated
// (groupsView.translateLines).
func runSteps(s *session, steps []step) {
	for i, st := range steps {
		time.Sleep(st.pause)
		sent := []byte(st.send)
		e := s.log.add(i, st.conn, sent, "")
		if d := s.knownDifference(sent); d != nil {
			s.sendKnownDifference(e, d)
			continue
		}
		if len(sent) > 0 {
			sut := sent
			if s.groups != nil {
				sut = s.groups.translateLines(sent)
			}
			if !bytes.Equal(sut, sent) {
				e.sentSut = sut
			}
			s.sendPair(st.conn, sent, sut)
		}
		if st.halfClose {
			s.halfClose(st.conn)
		}
		if st.freed && s.groups != nil {
			e.tubeSets = slices.Repeat([]bool{true}, st.replies)
		}
		s.exchange(e, st.conn, st.replies, cmp.Or(st.wait, replyWait))
		if st.want != nil && !slices.Equal(st.want, asStrings(e.ref)) {
			s.fail("test bug: beanstalkd answered %q, the script says %q", e.ref, st.want)
		}
		if st.closes {
			s.expectClosed(st.conn)
			continue
		}
		listen := settleWait
		if st.replies == 0 {
			listen = cmp.Or(st.quiet, quietWait)
		}
		s.expectSilence(e, st.conn, listen)
	}
	// Nothing may be left unread on any connection.
	for _, n := range slices.Sorted(maps.Keys(s.conns)) {
		e := s.log.add(len(steps), n, nil, "end of script: listening for stray replies")
		s.expectSilence(e, n, 100*time.Millisecond)
	}
}

// asStrings converts replies for comparison with a step's want.
func asStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// junk is an n-byte line body that no command starts with.
func junk(n int) string { return strings.Repeat("X", n) }

// filler is n bytes made of s repeated: body bytes that look like commands,
// to show they are discarded unread.
func filler(n int, s string) string { return strings.Repeat(s, n/len(s)+1)[:n] }

// yamlList is the OK reply of list-tubes and list-tubes-watched.
func yamlList(names ...string) string {
	doc := "---\n"
	for _, n := range names {
		doc += "- " + n + "\n"
	}
	return fmt.Sprintf("OK %d\r\n%s\r\n", len(doc), doc)
}

// scripts is the table of quirks, one script per family. Job ids in the
// comments are those a fresh server hands out.
func scripts() []script {
	name200 := strings.Repeat("t", 200)
	return []script{
		{"dispatch by prefix", []step{
			// Commands are matched by prefix, in a fixed order.
			on(0, "reservex\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "statsx\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "stats-job\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "stats-tube\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "list-tubesx\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "list-tube-usedx\r\n", 1),
			on(0, "list-tubes-watchedx\r\n", 1),
			on(0, "peek-readyx\r\n", 1),
			on(0, "peek-delayedx\r\n", 1),
			on(0, "peek-buriedx\r\n", 1),
			on(0, "reserve-jobx 1\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "reserve-with-timeout\r\n", 1).wants("BAD_FORMAT\r\n"),
			// Without their trailing space these are unknown.
			on(0, "put\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "use\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "peek\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "delete\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "kick\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "kick-job\r\n", 1),
			on(0, "touch\r\n", 1),
			on(0, "release\r\n", 1),
			on(0, "bury\r\n", 1),
			on(0, "watch\r\n", 1),
			on(0, "ignore\r\n", 1),
			on(0, "\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "PUT 0 0 60 1\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "Stats\r\n", 1),
			on(0, "put\t0 0 60 1\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "nont10knowncommand\r\n", 1),
			// No space is needed after pause-tube.
			on(0, "pause-tubedefault 0\r\n", 1).wants("PAUSED\r\n"),
			on(0, "stats\r\n", 1),
			// Anything starting with quit quits.
			on(0, "quitxyz\r\n", 0).closing(),
			on(0, "list-tube-used\r\n", 1).wants("USING default\r\n"),
			on(0, "quit\r\n", 0).closing(),
		}},

		{"224-byte line buffer", []step{
			on(0, "use "+name200+"\r\n", 1),
			// The longest legal command is exactly 224 bytes.
			on(0, "pause-tube "+name200+" 4294967295\r\n", 1).wants("PAUSED\r\n"),
			on(0, "use "+name200+"t\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, junk(222)+"\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			// 225 bytes: the \r is byte 224, the buffer is discarded and
			// the \n starts a skip to the next \r\n, the next command's.
			on(0, junk(223)+"\r\n", 0),
			on(0, "list-tube-used\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, junk(500)+"\r\nlist-tube-used\r\n", 2).wants("BAD_FORMAT\r\n", "USING "+name200+"\r\n"),
			// While skipping, the buffer restarts every 224 bytes: a \r\n
			// split across that boundary is missed too.
			on(0, junk(447)+"\r\n", 0),
			on(0, "list-tube-used\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, junk(448)+"\r\nlist-tube-used\r\n", 2),
			on(0, "stats-tube "+name200+"\r\n", 1),
			on(0, "list-tubes\r\n", 1),
			on(0, "stats\r\n", 1),
		}},

		{"stray CR, NUL and split lines", []step{
			// Only the first \r counts: not followed by \n, it hides the
			// \r\n after it, and the server waits for 224 bytes.
			on(0, "list-tube-used\rx\r\n", 0),
			on(0, junk(224-18)+"\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "list-tube-used\r\n", 1).wants("USING default\r\n"),
			on(0, "stats\x00\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "use a\x00b\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "put 0 0 60 1\x00\r\nx\r\n", 2).wants("BAD_FORMAT\r\n", "UNKNOWN_COMMAND\r\n"),
			// A bare \n ends nothing.
			on(0, "stats\nstats\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "\n\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			// A \r\n split across writes, and a body split across writes.
			on(0, "stats\r", 0),
			on(0, "\n", 1),
			on(0, "put 0 0 60 5\r\nhe", 0),
			on(0, "llo\r\n", 1).wants("INSERTED 1\r\n"),
			on(0, "peek 1\r\n", 1).wants("FOUND 1 5\r\nhello\r\n"),
			// Several commands in one write are answered in order.
			on(0, "use a\r\nuse b\r\nlist-tube-used\r\n", 3).wants("USING a\r\n", "USING b\r\n", "USING b\r\n"),
		}},

		{"integers", []step{
			on(0, "put +1 0 60 1\r\nx\r\n", 2).wants("BAD_FORMAT\r\n", "UNKNOWN_COMMAND\r\n"),
			on(0, "put -0 0 60 1\r\nx\r\n", 2),
			on(0, "put 0 -1 60 1\r\nx\r\n", 2),
			on(0, "put 4294967296 0 60 1\r\nx\r\n", 2),
			on(0, "put 0 0 60 1 \r\nx\r\n", 2),
			on(0, "put 4294967295 0 60 1\r\nx\r\n", 1).wants("INSERTED 1\r\n"),
			on(0, "put 00012 0 0 1\r\nx\r\n", 1).wants("INSERTED 2\r\n"), // ttr 0 reads as 1
			on(0, "put   5    0   60    1\r\nx\r\n", 1),
			on(0, "put 0 4294967295 4294967295 1\r\nx\r\n", 1),
			on(0, "stats-job 1\r\n", 1),
			on(0, "stats-job 2\r\n", 1),
			on(0, "stats-job 4\r\n", 1),
			on(0, "peek 18446744073709551615\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "peek 18446744073709551616\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "peek 0\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "peek 001\r\n", 1).wants("FOUND 1 1\r\nx\r\n"),
			on(0, "peek  1\r\n", 1),
			on(0, "peek 1 \r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "peek 1x\r\n", 1),
			on(0, "peek foo111\r\n", 1),
			on(0, "peek -1\r\n", 1),
			on(0, "delete 1abc\r\n", 1),
			on(0, "stats-job 111ABC\r\n", 1),
			on(0, "stats-job 111 222\r\n", 1),
			on(0, "touch +1\r\n", 1),
			on(0, "kick-job 1.0\r\n", 1),
			on(0, "reserve-job 0x1\r\n", 1),
			on(0, "release 1 4294967296 0\r\n", 1),
			on(0, "release 1 0\r\n", 1),
			on(0, "release 1 0 0 \r\n", 1),
			on(0, "bury 1\r\n", 1),
			on(0, "bury 1 x\r\n", 1),
			on(0, "pause-tube default 4294967296\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "pause-tube default -1\r\n", 1),
			on(0, "pause-tube default 4294967295\r\n", 1).wants("PAUSED\r\n"),
			on(0, "stats-tube default\r\n", 1),
			on(0, "pause-tube default 0\r\n", 1),
			on(0, "stats\r\n", 1),
		}},

		{"put framing", []step{
			// The body is counted, not scanned: bytes=1 reads "ab\r",
			// and the \n left over starts the next command line.
			on(0, "put 0 0 60 1\r\nab\r\n", 1).wants("EXPECTED_CRLF\r\n"),
			on(0, "list-tube-used\r\n", 1).wants("UNKNOWN_COMMAND\r\n"),
			on(0, "put 0 0 60 3\r\nabcde\r\n", 2).wants("EXPECTED_CRLF\r\n", "UNKNOWN_COMMAND\r\n"),
			// EXPECTED_CRLF used up ids 1 and 2.
			on(0, "put 0 0 60 1\r\nx\r\n", 1).wants("INSERTED 3\r\n"),
			// Too big: exactly bytes+2 bytes are discarded, whatever they
			// are, and no id is used.
			on(0, "put 0 0 60 65536\r\n"+filler(65538, "delete 3\r\n"), 1).wants("JOB_TOO_BIG\r\n"),
			on(0, "put 0 0 60 1\r\nx\r\n", 1).wants("INSERTED 4\r\n"),
			// JOB_TOO_BIG comes before the trailing-garbage check...
			on(0, "put 0 0 60 65536 junk\r\n"+filler(65538, "peek 3\r\n"), 1).wants("JOB_TOO_BIG\r\n"),
			// ...and only once the whole body has arrived.
			on(0, "put 0 0 60 70000\r\n"+filler(1000, "x"), 0),
			on(0, filler(69002, "y"), 1).wants("JOB_TOO_BIG\r\n"),
			on(0, "put 0 0 60 65535\r\n"+filler(65535, "0123456789\r\n")+"\r\n", 1).wants("INSERTED 5\r\n"),
			on(0, "peek 5\r\n", 1),
			on(0, "put 0 0 60 0\r\n\r\n", 1).wants("INSERTED 6\r\n"),
			on(0, "peek 6\r\n", 1).wants("FOUND 6 0\r\n\r\n"),
			on(0, "put 0 0 60 8\r\na\r\nb\x00c\r\n\r\n", 1),
			on(0, "peek 7\r\n", 1).wants("FOUND 7 8\r\na\r\nb\x00c\r\n\r\n"),
			// A BAD_FORMAT put consumes no body.
			on(0, "put 0 0 60\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "put 0 0 60 4294967296\r\nx\r\n", 2),
			on(0, "put 0 0 60 1x\r\nx\r\n", 2),
			on(0, "put 0 0 60 1\r\nx\r\n", 1).wants("INSERTED 8\r\n"),
			on(0, "stats\r\n", 1),
		}},

		{"tube names, watch and ignore", []step{
			on(0, "use a-\r\n", 1).wants("USING a-\r\n"),
			on(0, "use -a\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "use  a\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "use a \r\n", 1),
			on(0, "use a*\r\n", 1),
			on(0, "use \r\n", 1),
			on(0, "use .\r\n", 1).wants("USING .\r\n"),
			on(0, "use ..\r\n", 1),
			on(0, "use x_y(1);$+/.\r\n", 1),
			on(0, "watch a b\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "stats-tube a*\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "stats-tube nosuch\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "stats-tube x_y(1);$+/.\r\n", 1),
			on(0, "list-tubes\r\n", 1).afterFree(),
			// NOT_IGNORED only for the last watched tube; ignoring a tube
			// that is not watched, or does not exist, succeeds.
			on(1, "ignore default\r\n", 1).wants("NOT_IGNORED\r\n"),
			on(1, "ignore nosuch\r\n", 1).wants("WATCHING 1\r\n"),
			on(1, "watch other\r\n", 1).wants("WATCHING 2\r\n"),
			on(1, "watch other\r\n", 1).wants("WATCHING 2\r\n"),
			on(1, "ignore default\r\n", 1).wants("WATCHING 1\r\n"),
			on(1, "watch a1\r\n", 1),
			on(1, "watch a2\r\n", 1),
			on(1, "watch a3\r\n", 1),
			on(1, "list-tubes-watched\r\n", 1).wants(yamlList("other", "a1", "a2", "a3")),
			on(1, "list-tubes\r\n", 1).afterFree(),
			// Removal swaps the last element into the freed slot, both in
			// the watch list and, once "other" is freed, in the tube list.
			on(1, "ignore other\r\n", 1).wants("WATCHING 3\r\n"),
			on(1, "list-tubes-watched\r\n", 1).wants(yamlList("a3", "a1", "a2")),
			on(1, "list-tubes\r\n", 1).afterFree(),
			on(1, "stats-tube other\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "ignore a1\r\n", 1),
			on(1, "ignore a3\r\n", 1),
			on(1, "ignore a2\r\n", 1).wants("NOT_IGNORED\r\n"),
			on(1, "list-tubes\r\n", 1).afterFree(),
			on(0, "stats-tube a2\r\n", 1),
			on(0, "stats\r\n", 1),
		}},

		{"a close frees its tubes in beanstalkd's order", []step{
			// connclose empties the watch list by deleting its first over
			// and over (the first, then the others from the last back),
			// then drops the used tube; each tube freed is swap-removed
			// from the tube list.
			on(0, "watch a\r\n", 1),
			on(0, "watch b\r\n", 1),
			on(1, "watch y\r\n", 1),
			on(1, "watch z\r\n", 1),
			on(0, "quit\r\n", 0).closing(),
			on(2, "list-tubes\r\n", 1).afterFree().wants(yamlList("default", "y", "z")),
			on(3, "use u\r\n", 1),
			on(3, "watch w\r\n", 1),
			on(3, "watch v\r\n", 1),
			on(3, "quit\r\n", 0).closing(),
			on(2, "list-tubes\r\n", 1).afterFree(),
			on(1, "watch p\r\n", 1),
			on(1, "watch q\r\n", 1),
			on(1, "quit\r\n", 0).closing(),
			on(2, "list-tubes\r\n", 1).afterFree(),
		}},

		{"delete and the other job commands by state", []step{
			on(0, "put 0 0 60 1\r\nr\r\n", 1),    // 1: ready
			on(0, "put 0 3600 60 1\r\nd\r\n", 1), // 2: delayed
			on(0, "put 0 0 60 1\r\nb\r\n", 1),    // 3: buried below
			on(0, "put 0 0 60 1\r\no\r\n", 1),    // 4: reserved by conn 1
			on(0, "put 0 0 60 1\r\ns\r\n", 1),    // 5: reserved by conn 0
			on(0, "reserve-job 3\r\n", 1),
			on(0, "bury 3 0\r\n", 1).wants("BURIED\r\n"),
			on(1, "reserve-job 4\r\n", 1),
			on(0, "reserve-job 5\r\n", 1),
			on(0, "delete 1\r\n", 1).wants("DELETED\r\n"),
			on(0, "delete 2\r\n", 1).wants("DELETED\r\n"),
			on(0, "delete 3\r\n", 1).wants("DELETED\r\n"),
			// Another connection's reservation: only peek and stats-job see it.
			on(0, "delete 4\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "release 4 0 0\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "bury 4 0\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "touch 4\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "kick-job 4\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "reserve-job 4\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "peek 4\r\n", 1).wants("FOUND 4 1\r\no\r\n"),
			on(0, "stats-job 4\r\n", 1),
			on(0, "delete 5\r\n", 1).wants("DELETED\r\n"),
			on(0, "delete 5\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "delete 4\r\n", 1).wants("DELETED\r\n"),
			// The tube counts successful deletes, the server every parsed one.
			on(0, "stats-tube default\r\n", 1),
			on(0, "stats\r\n", 1),
		}},

		{"reserve-job across tubes", []step{
			on(0, "use a\r\n", 1),
			on(0, "put 5 0 60 1\r\na\r\n", 1), // 1: ready in a
			on(0, "use b\r\n", 1),
			on(0, "put 5 3600 60 1\r\nb\r\n", 1), // 2: delayed in b
			on(0, "use c\r\n", 1),
			on(0, "put 5 0 60 1\r\nc\r\n", 1), // 3: buried in c
			on(0, "reserve-job 3\r\n", 1),
			on(0, "bury 3 9\r\n", 1),
			on(0, "pause-tube a 3600\r\n", 1),
			// Conn 1 watches only default: reserve-job ignores the watch
			// list, pauses and the job's state.
			on(1, "reserve-job 1\r\n", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(1, "reserve-job 2\r\n", 1).wants("RESERVED 2 1\r\nb\r\n"),
			on(1, "reserve-job 3\r\n", 1).wants("RESERVED 3 1\r\nc\r\n"),
			on(1, "reserve-job 3\r\n", 1).wants("NOT_FOUND\r\n"),
			on(2, "reserve-job 3\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "reserve-job 99\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "stats-job 2\r\n", 1),
			on(0, "stats-tube b\r\n", 1),
			on(0, "stats-tube c\r\n", 1),
			on(1, "release 2 1 0\r\n", 1).wants("RELEASED\r\n"),
			on(1, "release 3 1 3600\r\n", 1).wants("RELEASED\r\n"),
			on(1, "release 1 0 0\r\n", 1),
			on(0, "stats-job 2\r\n", 1),
			on(0, "stats-job 3\r\n", 1),
			on(1, "reserve-with-timeout 0\r\n", 1).wants("TIMED_OUT\r\n"),
			on(1, "watch a\r\n", 1),
			on(1, "reserve-with-timeout 0\r\n", 1).wants("TIMED_OUT\r\n"), // a is paused
			// reserve-job has no counter; only a successful one makes a worker.
			on(0, "stats\r\n", 1),
		}},

		{"reserve-job of delayed and buried jobs, then their ttr and close", []step{
			on(0, "put 0 5 1 1\r\na\r\n", 1),  // 1: delayed
			on(0, "put 0 0 60 1\r\nb\r\n", 1), // 2: buried below
			on(1, "reserve-job 2\r\n", 1),
			on(1, "bury 2 9\r\n", 1),
			on(2, "reserve-job 1\r\n", 1),
			on(2, "reserve-job 2\r\n", 1),
			on(0, "stats-job 1\r\n", 1),
			on(0, "stats-tube default\r\n", 1),
			on(0, "stats\r\n", 1),
			// Each goes back ready, neither delayed nor buried again: job 1
			// when its ttr runs out, job 2 when conn 2 closes. (Conn 2
			// speaks once the ttr is over, as in "ttr expiry".)
			on(3, "reserve\r\n", 0),
			on(2, "list-tube-used\r\n", 1).after(1200 * time.Millisecond),
			on(3, "", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(0, "stats-job 1\r\n", 1),
			on(2, "quit\r\n", 0).closing(),
			on(0, "stats-job 2\r\n", 1),
			on(0, "stats-tube default\r\n", 1),
			on(0, "stats\r\n", 1),
		}},

		{"kick", []step{
			on(0, "put 0 3600 60 1\r\nd\r\n", 1), // 1: delayed, later deadline
			on(0, "put 0 100 60 1\r\ne\r\n", 1),  // 2: delayed, earlier deadline
			on(0, "put 0 0 60 1\r\nb\r\n", 1),    // 3: buried below
			on(0, "put 0 0 60 1\r\nc\r\n", 1),    // 4: buried below
			on(0, "reserve-job 3\r\n", 1),
			on(0, "bury 3 0\r\n", 1),
			on(0, "reserve-job 4\r\n", 1),
			on(0, "bury 4 0\r\n", 1),
			// Buried jobs first, oldest first, never delayed ones in the same kick.
			on(0, "kick 1\r\n", 1).wants("KICKED 1\r\n"),
			on(0, "peek-buried\r\n", 1).wants("FOUND 4 1\r\nc\r\n"),
			on(0, "kick 10\r\n", 1).wants("KICKED 1\r\n"),
			// Then delayed ones, earliest deadline first; strtoul is lenient.
			on(0, "kick 1abc\r\n", 1).wants("KICKED 1\r\n"),
			on(0, "peek-delayed\r\n", 1).wants("FOUND 1 1\r\nd\r\n"),
			on(0, "kick +1\r\n", 1).wants("KICKED 1\r\n"),
			on(0, "kick -1\r\n", 1).wants("KICKED 0\r\n"),
			on(0, "put 0 3600 60 1\r\nf\r\n", 1), // 5
			on(0, "put 0 3600 60 1\r\ng\r\n", 1), // 6
			on(0, "kick 4294967297\r\n", 1).wants("KICKED 1\r\n"),
			on(0, "kick -1\r\n", 1).wants("KICKED 1\r\n"),
			on(0, "kick abc\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "kick \r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "kick 99999999999999999999999\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "kick 0\r\n", 1).wants("KICKED 0\r\n"),
			// kick works on the used tube only; kick-job on any tube.
			on(1, "use z\r\n", 1),
			on(1, "put 0 3600 60 1\r\nz\r\n", 1), // 7
			on(1, "put 0 0 60 1\r\ny\r\n", 1),    // 8
			on(1, "reserve-job 8\r\n", 1),
			on(1, "bury 8 0\r\n", 1),
			on(0, "kick 5\r\n", 1).wants("KICKED 0\r\n"),
			on(0, "kick-job 1\r\n", 1).wants("NOT_FOUND\r\n"), // ready
			on(0, "kick-job 7\r\n", 1).wants("KICKED\r\n"),
			on(0, "kick-job 7\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "kick-job 8\r\n", 1).wants("KICKED\r\n"),
			on(0, "kick-job 99\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "stats-job 8\r\n", 1),
			on(0, "stats-job 1\r\n", 1),
			on(0, "stats-tube z\r\n", 1),
			on(0, "stats\r\n", 1), // cmd-kick counts kick, not kick-job
			// Each job is offered to waiters as it is kicked, so a waiter
			// gets the first one kicked (the oldest buried), neither the
			// most urgent nor the lowest id.
			on(2, "watch w\r\n", 1),
			on(2, "ignore default\r\n", 1),
			on(3, "use w\r\n", 1),
			on(3, "put 0 0 60 1\r\np\r\n", 1), // 9
			on(3, "put 0 0 60 1\r\nq\r\n", 1), // 10
			on(3, "put 0 0 60 1\r\nr\r\n", 1), // 11
			on(3, "reserve-job 10\r\n", 1),
			on(3, "bury 10 50\r\n", 1),
			on(3, "reserve-job 9\r\n", 1),
			on(3, "bury 9 40\r\n", 1),
			on(3, "reserve-job 11\r\n", 1),
			on(3, "bury 11 30\r\n", 1),
			on(2, "reserve\r\n", 0),
			on(3, "kick 3\r\n", 1).wants("KICKED 3\r\n"),
			on(2, "", 1).wants("RESERVED 10 1\r\nq\r\n"),
			on(3, "peek-ready\r\n", 1).wants("FOUND 11 1\r\nr\r\n"),
		}},

		{"release with a delay, then kick", []step{
			on(0, "put 3 0 60 1\r\na\r\n", 1), // 1
			on(0, "put 2 0 60 1\r\nb\r\n", 1), // 2
			on(0, "put 1 0 60 1\r\nc\r\n", 1), // 3
			on(1, "reserve\r\n", 1),
			on(1, "reserve\r\n", 1),
			on(1, "reserve\r\n", 1),
			on(1, "release 3 0 2\r\n", 1),
			on(1, "release 1 0 1\r\n", 1),
			on(1, "bury 2 0\r\n", 1),
			on(0, "peek-delayed\r\n", 1).wants("FOUND 1 1\r\na\r\n"),
			on(0, "kick 1\r\n", 1),
			on(0, "kick 5\r\n", 1),
			on(0, "stats-job 3\r\n", 1),
			on(0, "stats\r\n", 1),
			on(2, "reserve\r\n", 1),
			on(2, "release 1 0 1\r\n", 1),
			on(2, "reserve-with-timeout 3\r\n", 1),
			on(0, "stats-job 1\r\n", 1),
		}},

		{"kick of delayed jobs to a waiter, then touch", []step{
			on(0, "put 5 10 60 1\r\na\r\n", 1), // 1
			on(0, "put 1 20 60 1\r\nb\r\n", 1), // 2
			on(0, "put 0 30 2 1\r\nc\r\n", 1),  // 3
			// The waiter gets the first job kicked (the earliest deadline),
			// not the most urgent.
			on(1, "reserve\r\n", 0),
			on(0, "kick 2\r\n", 1),
			on(1, "", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(0, "peek-ready\r\n", 1),
			on(0, "kick-job 3\r\n", 1),
			on(2, "reserve\r\n", 1),
			on(2, "reserve\r\n", 1),
			on(2, "touch 3\r\n", 1).wants("TOUCHED\r\n"),
			on(0, "stats-job 3\r\n", 1),
			on(0, "stats\r\n", 1),
		}},

		{"peek", []step{
			on(0, "peek-ready\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "peek-delayed\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "peek-buried\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "put 5 0 60 1\r\na\r\n", 1), // 1
			on(0, "put 3 0 60 1\r\nb\r\n", 1), // 2
			on(0, "put 3 0 60 1\r\nc\r\n", 1), // 3
			// Lowest pri, then lowest id.
			on(0, "peek-ready\r\n", 1).wants("FOUND 2 1\r\nb\r\n"),
			on(0, "put 0 200 60 1\r\nd\r\n", 1), // 4
			on(0, "put 0 100 60 1\r\ne\r\n", 1), // 5
			on(0, "peek-delayed\r\n", 1).wants("FOUND 5 1\r\ne\r\n"),
			on(0, "reserve-job 3\r\n", 1),
			on(0, "bury 3 0\r\n", 1),
			on(0, "reserve-job 1\r\n", 1),
			on(0, "bury 1 0\r\n", 1),
			on(0, "peek-buried\r\n", 1).wants("FOUND 3 1\r\nc\r\n"), // oldest buried
			// Pauses do not hide jobs from peek; peeks look at the used tube.
			on(0, "pause-tube default 3600\r\n", 1),
			on(0, "peek-ready\r\n", 1).wants("FOUND 2 1\r\nb\r\n"),
			on(1, "use other\r\n", 1),
			on(1, "peek-ready\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "peek-buried\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "peek 3\r\n", 1).wants("FOUND 3 1\r\nc\r\n"),
			on(0, "stats\r\n", 1),
		}},

		{"stats documents", []step{
			on(0, "stats\r\n", 1),
			on(0, "stats-tube default\r\n", 1),
			on(0, "put 1023 0 60 1\r\na\r\n", 1), // 1: urgent
			on(0, "put 1024 0 60 1\r\nb\r\n", 1), // 2: not urgent
			on(0, "put 0 3600 60 1\r\nc\r\n", 1), // 3: delayed
			on(1, "reserve\r\n", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(1, "reserve\r\n", 1).wants("RESERVED 2 1\r\nb\r\n"),
			on(1, "bury 2 7\r\n", 1),
			on(2, "watch t\r\n", 1),
			on(2, "ignore default\r\n", 1),
			on(2, "reserve\r\n", 0),
			on(0, "stats\r\n", 1),
			on(0, "stats-tube default\r\n", 1),
			on(0, "stats-tube t\r\n", 1),
			on(0, "stats-job 1\r\n", 1),
			on(0, "stats-job 2\r\n", 1),
			on(0, "stats-job 3\r\n", 1),
			on(0, "use t\r\n", 1),
			on(0, "put 0 0 60 1\r\nd\r\n", 1), // 4
			on(2, "", 1).wants("RESERVED 4 1\r\nd\r\n"),
			on(0, "stats-job 4\r\n", 1),
			on(0, "stats-tube t\r\n", 1),
			on(1, "quit\r\n", 0).closing(),
			on(0, "stats\r\n", 1),
		}},

		{"a job's age counts from its put's command line", []step{
			// beanstalkd makes the job (created_at) when the command line
			// arrives, before its body: a body sent 2 s later leaves the
			// job 2 s old at once (age may differ by one second, so a
			// second would not show it).
			on(0, "put 0 0 60 1\r\n", 0).silentFor(100 * time.Millisecond),
			on(0, "x\r\n", 1).after(2 * time.Second).wants("INSERTED 1\r\n"),
			on(0, "stats-job 1\r\n", 1),
		}},

		{"pause-tube", []step{
			on(0, "pause-tube nosuch 1\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "pause-tube default\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "pause-tube\r\n", 1),
			on(0, "pause-tube default 1x\r\n", 1),
			on(0, "pause-tube -default 1\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "pause-tube default 0 \r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "put 0 0 60 1\r\nx\r\n", 1), // 1
			on(0, "pause-tube  default  3600\r\n", 1).wants("PAUSED\r\n"),
			on(0, "stats-tube default\r\n", 1),
			on(1, "reserve-with-timeout 0\r\n", 1).wants("TIMED_OUT\r\n"),
			on(1, "peek-ready\r\n", 1).wants("FOUND 1 1\r\nx\r\n"),
			on(1, "reserve\r\n", 0),
			on(0, "put 0 0 60 1\r\ny\r\n", 1), // 2; conn 1 keeps waiting
			on(0, "stats\r\n", 1),
			// 0 pauses for 1 ns: an unpause, which wakes the waiter.
			on(0, "pause-tube default 0\r\n", 1),
			on(1, "", 1).wants("RESERVED 1 1\r\nx\r\n"),
			on(0, "stats-tube default\r\n", 1),
			on(0, "pause-tube default 1\r\n", 1),
			on(1, "reserve\r\n", 0).silentFor(300 * time.Millisecond),
			on(1, "", 1).within(3 * time.Second).wants("RESERVED 2 1\r\ny\r\n"),
			on(0, "stats-tube default\r\n", 1), // pause reads 0 once expired
			on(0, "stats\r\n", 1),
		}},

		{"pause-tube 0 pipelined before another pause", []step{
			// beanstalkd runs prottick between two pipelined commands
			// (each reply goes out through its event loop first), so the
			// 1 ns pause of "pause-tube default 0" ends, and the waiter
			// gets the job, before the next command pauses the tube again.
			on(0, "put 0 0 60 1\r\na\r\n", 1), // 1
			on(0, "pause-tube default 3600\r\n", 1),
			on(1, "reserve\r\n", 0),
			on(0, "pause-tube default 0\r\npause-tube default 3600\r\n", 2),
			on(1, "", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(0, "stats-tube default\r\n", 1),
		}},

		{"pause-tube again while paused, and a tube made again", []step{
			on(0, "put 5 0 60 1\r\na\r\n", 1), // 1
			on(0, "pause-tube default 10\r\n", 1),
			on(1, "reserve\r\n", 0),
			// Each pause-tube sets the end anew: earlier, then later again.
			// The waiter gets the job when the last pause ends, neither
			// when the first would have nor when the second would have.
			on(0, "pause-tube default 1\r\npause-tube default 2\r\n", 2),
			on(1, "", 0).silentFor(1200 * time.Millisecond),
			on(1, "", 1).within(3 * time.Second).wants("RESERVED 1 1\r\na\r\n"),
			on(0, "stats-tube default\r\n", 1),
			// A tube freed while paused forgets its pause.
			on(3, "use p\r\n", 1),
			on(0, "pause-tube p 100\r\n", 1),
			on(0, "stats-tube p\r\n", 1),
			on(3, "use default\r\n", 1),
			on(0, "list-tubes\r\n", 1).afterFree(),
			on(0, "pause-tube p 1\r\n", 1).wants("NOT_FOUND\r\n"),
			on(3, "use p\r\n", 1),
			on(0, "stats-tube p\r\n", 1),
			on(3, "put 0 0 60 1\r\nc\r\n", 1), // 2
			on(4, "watch p\r\n", 1),
			on(4, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 2 1\r\nc\r\n"),
			on(0, "stats\r\n", 1),
		}},

		{"waiters", []step{
			// Six connections wait on default. Each put hands its job to a
			// waiter taken round-robin with swap-remove (ms_take), so the
			// 4th job goes to the 6th waiter.
			on(1, "reserve\r\n", 0),
			on(2, "reserve\r\n", 0),
			on(3, "reserve\r\n", 0),
			on(4, "reserve\r\n", 0),
			on(5, "reserve\r\n", 0),
			on(6, "reserve\r\n", 0),
			on(0, "stats\r\n", 1),
			on(0, "put 0 0 60 1\r\n1\r\n", 1),
			on(0, "put 0 0 60 1\r\n2\r\n", 1),
			on(0, "put 0 0 60 1\r\n3\r\n", 1),
			on(0, "put 0 0 60 1\r\n4\r\n", 1),
			on(0, "put 0 0 60 1\r\n5\r\n", 1),
			on(0, "put 0 0 60 1\r\n6\r\n", 1),
			on(1, "", 1).wants("RESERVED 1 1\r\n1\r\n"),
			on(2, "", 1).wants("RESERVED 2 1\r\n2\r\n"),
			on(3, "", 1).wants("RESERVED 3 1\r\n3\r\n"),
			on(4, "", 1).wants("RESERVED 6 1\r\n6\r\n"),
			on(5, "", 1).wants("RESERVED 5 1\r\n5\r\n"),
			on(6, "", 1).wants("RESERVED 4 1\r\n4\r\n"),
			// When several jobs become available at once, the lowest
			// (pri, id) over unpaused tubes with waiters goes first.
			on(7, "watch a\r\n", 1),
			on(7, "ignore default\r\n", 1),
			on(8, "watch b\r\n", 1),
			on(8, "ignore default\r\n", 1),
			on(9, "watch a\r\n", 1),
			on(9, "watch b\r\n", 1),
			on(9, "ignore default\r\n", 1),
			on(0, "pause-tube a 3600\r\n", 1),
			on(0, "pause-tube b 3600\r\n", 1),
			on(0, "use a\r\n", 1),
			on(0, "put 5 0 60 1\r\n7\r\n", 1), // 7
			on(0, "use b\r\n", 1),
			on(0, "put 1 0 60 1\r\n8\r\n", 1), // 8
			on(0, "use a\r\n", 1),
			on(0, "put 1 0 60 1\r\n9\r\n", 1), // 9
			on(7, "reserve\r\n", 0),
			on(8, "reserve\r\n", 0),
			on(9, "reserve\r\n", 0),
			on(0, "stats-tube a\r\n", 1),
			on(0, "pause-tube a 0\r\n", 1),
			on(7, "", 1).wants("RESERVED 9 1\r\n9\r\n"),
			on(9, "", 1).wants("RESERVED 7 1\r\n7\r\n"),
			on(0, "pause-tube b 0\r\n", 1),
			on(8, "", 1).wants("RESERVED 8 1\r\n8\r\n"),
			on(0, "stats\r\n", 1),
		}},

		{"reserve-with-timeout", []step{
			on(0, "reserve-with-timeout 0\r\n", 1).wants("TIMED_OUT\r\n"),
			on(0, "reserve-with-timeout  00\r\n", 1).wants("TIMED_OUT\r\n"),
			on(1, "put 0 0 60 1\r\nx\r\n", 1), // 1
			on(0, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 1 1\r\nx\r\n"),
			on(0, "reserve-with-timeout 1\r\n", 0).silentFor(300 * time.Millisecond),
			on(0, "", 1).within(3 * time.Second).wants("TIMED_OUT\r\n"),
			on(0, "reserve-with-timeout 5\r\n", 0),
			on(1, "put 0 0 60 1\r\ny\r\n", 1), // 2
			on(0, "", 1).wants("RESERVED 2 1\r\ny\r\n"),
			// A digit must come first, after spaces only, and the value
			// must be at most INT_MAX (1.12 differs here: see
			// knownDifferences). What follows the digits is ignored.
			on(0, "reserve-with-timeout -1\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "reserve-with-timeout 2147483648\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "reserve-with-timeout 4294967296\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "reserve-with-timeout x\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "reserve-with-timeout +1\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "reserve-with-timeout \r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "reserve-with-timeout \t0\r\n", 1).wants("BAD_FORMAT\r\n"),
			on(0, "reserve-with-timeout 0abc\r\n", 1).wants("TIMED_OUT\r\n"),
			on(0, "reserve-with-timeout 0 \r\n", 1).wants("TIMED_OUT\r\n"),
			on(0, "reserve-with-timeout 0\t\r\n", 1).wants("TIMED_OUT\r\n"),
			on(0, "reserve-with-timeout 2147483647abc\r\n", 0),
			on(1, "put 0 0 60 1\r\nw\r\n", 1), // 3
			on(0, "", 1).wants("RESERVED 3 1\r\nw\r\n"),
			on(0, "reserve-with-timeout 2147483647\r\n", 0),
			on(1, "put 0 0 60 1\r\nz\r\n", 1), // 4
			on(0, "", 1).wants("RESERVED 4 1\r\nz\r\n"),
			on(1, "stats\r\n", 1),
			// A waiting client that half-closes gets TIMED_OUT, then EOF.
			on(2, "reserve\r\n", 1).halfClosing().wants("TIMED_OUT\r\n").closing(),
			on(1, "stats\r\n", 1),
		}},

		{"DEADLINE_SOON", []step{
			// A ttr of 1 s is inside the 1 s safety margin at once.
			on(0, "put 0 0 1 1\r\na\r\n", 1), // 1
			on(1, "reserve\r\n", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(1, "reserve\r\n", 1).wants("DEADLINE_SOON\r\n"),
			on(1, "reserve-with-timeout 5\r\n", 1).wants("DEADLINE_SOON\r\n"),
			// reserve-job never answers DEADLINE_SOON.
			on(0, "put 0 0 60 1\r\nb\r\n", 1), // 2
			on(1, "reserve-job 2\r\n", 1).wants("RESERVED 2 1\r\nb\r\n"),
			on(1, "delete 2\r\n", 1),
			// With ttr 3, a waiting reserve ends 1 s before the deadline.
			// Tube w keeps job 1 away when its ttr runs out meanwhile.
			on(0, "use w\r\n", 1),
			on(0, "put 0 0 3 1\r\nc\r\n", 1), // 3
			on(2, "watch w\r\n", 1),
			on(2, "ignore default\r\n", 1),
			on(2, "reserve\r\n", 1).wants("RESERVED 3 1\r\nc\r\n"),
			on(2, "reserve\r\n", 0).silentFor(300 * time.Millisecond),
			on(2, "", 1).within(4 * time.Second).wants("DEADLINE_SOON\r\n"),
			on(2, "delete 3\r\n", 1).wants("DELETED\r\n"),
			// Job 1's ttr is over; conn 1 speaks so that 1.12 notices
			// (see "ttr expiry").
			on(1, "list-tube-used\r\n", 1),
			on(0, "stats\r\n", 1),
		}},

		{"DEADLINE_SOON with a ready job in a paused tube", []step{
			// A ready job counts against DEADLINE_SOON even in a paused
			// tube (conn_ready ignores pauses), though no reserve gets it.
			on(0, "put 0 0 1 1\r\na\r\n", 1), // 1
			on(1, "reserve\r\n", 1),
			on(0, "put 0 0 60 1\r\nb\r\n", 1), // 2
			on(0, "pause-tube default 60\r\n", 1),
			on(1, "reserve-with-timeout 0\r\n", 1),
			on(1, "reserve-with-timeout 5\r\n", 1),
			on(1, "reserve\r\n", 1),
			on(0, "pause-tube default 0\r\n", 1),
			on(1, "reserve\r\n", 1),
			on(0, "stats\r\n", 1),
		}},

		{"ttr expiry", []step{
			on(0, "put 0 0 2 1\r\na\r\n", 1), // 1
			on(1, "reserve\r\n", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(2, "reserve-with-timeout 10\r\n", 0),
			// 1.12 sometimes loses the ttr timer of a connection whose
			// reserve was answered at once: the job then stays reserved
			// until that connection sends something. So conn 1 speaks
			// once its ttr is over, and conn 2 gets the job on both.
			on(1, "list-tube-used\r\n", 1).after(2500 * time.Millisecond),
			on(2, "", 1).within(3 * time.Second).wants("RESERVED 1 1\r\na\r\n"),
			on(1, "touch 1\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "release 1 0 0\r\n", 1).wants("NOT_FOUND\r\n"),
			on(2, "stats-job 1\r\n", 1),
			on(2, "touch 1\r\n", 1).wants("TOUCHED\r\n"),
			on(2, "delete 1\r\n", 1).wants("DELETED\r\n"),
			on(0, "stats\r\n", 1),
		}},

		{"ttr expiries together go back soonest first", []step{
			// Three jobs reserved back to back by conn 1, then job 1
			// touched: deadlines 2 < 3 < 1, a few microseconds apart. When
			// they run out, beanstalkd requeues them soonest first
			// (conn_timeout's loop over connsoonestjob), each offered to
			// the waiters at once: conn 2 gets 2, conn 3 gets 3, and 1
			// stays ready.
			on(0, "put 0 0 1 1\r\na\r\n", 1), // 1
			on(0, "put 0 0 1 1\r\nb\r\n", 1), // 2
			on(0, "put 0 0 1 1\r\nc\r\n", 1), // 3
			on(1, "reserve-job 1\r\nreserve-job 2\r\nreserve-job 3\r\ntouch 1\r\n", 4),
			on(2, "reserve\r\n", 0),
			on(3, "reserve\r\n", 0),
			// beanstalkd 1.13 sometimes loses the ttr timer of conn 1 (as
			// 1.12 does, see "ttr expiry"), so conn 1 speaks once its ttrs
			// are over, which ends them all at once on both if not before.
			on(1, "list-tube-used\r\n", 1).after(1200 * time.Millisecond),
			on(2, "", 1).wants("RESERVED 2 1\r\nb\r\n"),
			on(3, "", 1).wants("RESERVED 3 1\r\nc\r\n"),
			on(0, "peek-ready\r\n", 1).wants("FOUND 1 1\r\na\r\n"),
			on(0, "stats\r\n", 1),
		}},

		{"delayed jobs of several tubes become ready soonest first", []step{
			// Two waiters watch a and b. Jobs 1 (a), 2 (b) and 3 (a) are
			// put with delay 1, microseconds apart. beanstalkd's prottick
			// makes the soonest delayed job of all tubes ready first
			// (soonest_delayed_job), each offered to the waiters at once:
			// conn 2 gets 1, conn 3 gets 2, and 3 stays ready in a.
			on(2, "watch a\r\n", 1),
			on(2, "watch b\r\n", 1),
			on(2, "ignore default\r\n", 1),
			on(3, "watch a\r\n", 1),
			on(3, "watch b\r\n", 1),
			on(3, "ignore default\r\n", 1),
			on(2, "reserve\r\n", 0),
			on(3, "reserve\r\n", 0),
			on(0, "use a\r\nput 0 1 60 1\r\nx\r\nuse b\r\nput 0 1 60 1\r\ny\r\nuse a\r\nput 0 1 60 1\r\nz\r\n", 6),
			on(2, "", 1).wants("RESERVED 1 1\r\nx\r\n"),
			on(3, "", 1).wants("RESERVED 2 1\r\ny\r\n"),
			on(0, "peek-ready\r\n", 1).wants("FOUND 3 1\r\nz\r\n"),
			on(0, "stats-tube a\r\n", 1),
			on(0, "stats-tube b\r\n", 1),
		}},

		{"quit releases reserved jobs", []step{
			on(0, "put 0 0 60 1\r\na\r\n", 1), // 1
			on(0, "put 0 0 60 1\r\nb\r\n", 1), // 2
			on(1, "reserve\r\n", 1),
			on(1, "reserve\r\n", 1),
			on(0, "stats\r\n", 1),
			on(1, "quit\r\n", 0).closing(),
			// Back to ready, with no release or timeout counted.
			on(0, "stats-job 1\r\n", 1),
			on(0, "stats\r\n", 1),
			on(2, "reserve\r\n", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(2, "quitquit\r\n", 0).closing(),
			on(0, "stats-job 1\r\n", 1),
			// The jobs go back one at a time, oldest reservation first, and
			// each is offered to waiters at once: a waiter gets the first
			// that fits, neither the most urgent nor the lowest id. Deleting
			// a reservation keeps the order of the others.
			on(0, "use q\r\n", 1),
			on(0, "put 7 0 60 1\r\nc\r\n", 1),  // 3
			on(0, "put 10 0 60 1\r\nd\r\n", 1), // 4
			on(0, "put 5 0 60 1\r\ne\r\n", 1),  // 5
			on(0, "put 8 0 60 1\r\nf\r\n", 1),  // 6
			on(3, "reserve-job 6\r\n", 1),
			on(3, "reserve-job 4\r\n", 1),
			on(3, "reserve-job 3\r\n", 1),
			on(3, "reserve-job 5\r\n", 1),
			on(3, "delete 6\r\n", 1),
			on(4, "watch q\r\n", 1),
			on(4, "ignore default\r\n", 1),
			on(4, "reserve\r\n", 0),
			on(3, "quit\r\n", 0).closing(),
			on(4, "", 1).wants("RESERVED 4 1\r\nd\r\n"),
			on(0, "peek-ready\r\n", 1).wants("FOUND 5 1\r\ne\r\n"),
		}},

		{"a close hands back jobs of several tubes", []step{
			on(0, "use a\r\n", 1),
			on(0, "put 9 0 60 1\r\na\r\n", 1), // 1: a
			on(0, "use b\r\n", 1),
			on(0, "put 1 0 60 1\r\nb\r\n", 1), // 2: b
			on(0, "use a\r\n", 1),
			on(0, "put 0 0 60 1\r\nc\r\n", 1), // 3: a
			on(1, "reserve-job 2\r\n", 1),
			on(1, "reserve-job 1\r\n", 1),
			on(1, "reserve-job 3\r\n", 1),
			on(2, "watch a\r\n", 1),
			on(2, "watch b\r\n", 1),
			on(3, "watch b\r\n", 1),
			on(3, "watch a\r\n", 1),
			on(4, "watch a\r\n", 1),
			on(2, "reserve\r\n", 0),
			on(3, "reserve\r\n", 0),
			on(4, "reserve\r\n", 0),
			on(0, "stats-tube a\r\n", 1),
			on(1, "quit\r\n", 0).closing(),
			on(2, "", 1),
			on(3, "", 1),
			on(4, "", 1),
			on(0, "stats\r\n", 1),
		}},

		{"pipelined behind a blocking reserve", []step{
			// Commands after a waiting reserve are held until it ends.
			on(1, "reserve\r\nlist-tube-used\r\nuse foo\r\nput 0 0 60 1\r\nz\r\n", 0).silentFor(300 * time.Millisecond),
			on(0, "stats\r\n", 1),
			on(0, "put 0 0 60 1\r\nx\r\n", 1).wants("INSERTED 1\r\n"),
			on(1, "", 4).wants("RESERVED 1 1\r\nx\r\n", "USING default\r\n", "USING foo\r\n", "INSERTED 2\r\n"),
			on(0, "stats\r\n", 1),
		}},

		{"bury, release and touch", []step{
			on(0, "put 10 0 60 1\r\na\r\n", 1), // 1
			on(1, "reserve\r\n", 1),
			on(0, "bury 1 5\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "touch 1\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "touch 1\r\n", 1).wants("TOUCHED\r\n"),
			on(1, "bury 1 5\r\n", 1).wants("BURIED\r\n"),
			on(1, "bury 1 5\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, "touch 1\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "stats-job 1\r\n", 1),
			on(0, "kick-job 1\r\n", 1),
			on(1, "reserve\r\n", 1),
			on(1, "release 1 7 3600\r\n", 1).wants("RELEASED\r\n"),
			on(0, "stats-job 1\r\n", 1),
			on(0, "kick 1\r\n", 1),
			on(0, "stats-job 1\r\n", 1), // kick leaves delay as it was
			on(1, "reserve\r\n", 1),
			on(1, "release 1 4294967295 0\r\n", 1),
			on(1, "release 1 0 0\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "peek-ready\r\n", 1),
			on(0, "stats-job 1\r\n", 1),
			on(0, "stats-tube default\r\n", 1),
			on(0, "stats\r\n", 1),
		}},
	}
}
