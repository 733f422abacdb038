package conformance

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

var (
	seedFlag  = flag.Uint64("seed", 1, "TestRandom: seed of the command generator; 0 picks one from the clock")
	stepsFlag = flag.Int("steps", 3000, "TestRandom: number of random steps")
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveSproutBuild()
	os.Exit(code)
}

// TestScripted runs one script per family of quirks (see scripts) against a
// fresh beanstalkd and a fresh Sprout each.
func TestScripted(t *testing.T) {
	for _, sc := range scripts() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runScript(t, sc.steps)
		})
	}
}

// TestRandom sends the same random command stream to both servers (see
// grammar). The seed is fixed by default so that CI runs are reproducible.
func TestRandom(t *testing.T) { testRandom(t, "TestRandom", false) }

// testRandom is TestRandom (named name), over TLS if overTLS.
func testRandom(t *testing.T, name string, overTLS bool) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	header := fmt.Sprintf("%s seed %d; rerun with: go test ./internal/conformance -run '%s$' -seed=%d -steps=%d",
		name, seed, name, seed, *stepsFlag)
	runRandom(t, newSession(t, header, overTLS), seed, *stepsFlag)
}

// TestScriptedTLS and TestRandomTLS are TestScripted and TestRandom with
// Sprout's connections over TLS (StartSproutTLS): the same bytes in the
// clear, the same replies.
func TestScriptedTLS(t *testing.T) {
	skipSelfTest(t)
	for _, sc := range scripts() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runScriptOn(t, sc.steps, true)
		})
	}
}

func TestRandomTLS(t *testing.T) {
	skipSelfTest(t)
	testRandom(t, "TestRandomTLS", true)
}

// skipSelfTest skips a TLS test when the harness tests itself: its second
// beanstalkd has no TLS.
func skipSelfTest(t *testing.T) {
	if SelfTest() {
		t.Skip(SelfTestEnv + " is set: beanstalkd has no TLS")
	}
}

const (
	// replyWait is how long a reply that should come at once may take.
	// Generous: it is only ever spent when something is already wrong.
	replyWait = 3 * time.Second
	// lateReplyWait is how long the slower server may trail the faster one
	// when answering a reserve that was blocked.
	lateReplyWait = time.Second
	// clusterReplySlack is added to how long a cluster member may take
	// for a reply: side by side with the other cluster tests, as make test
	// runs them, a member's groups have gone without the CPU for over a
	// second.
	clusterReplySlack = 5 * time.Second
	// transcriptTail is how many steps a failure report shows.
	transcriptTail = 20
)

// ---------------------------------------------------------------------------
// Normalisation

// normalized is a reply with the values two correct servers may disagree on
// taken out: see normalizeReply.
type normalized struct {
	text   string  // the reply, with masked values replaced by placeholders
	approx []int64 // time-derived values that may differ by one, in order
}

// matches reports whether two normalised replies are equivalent: the same
// text, and approximate values at most one apart.
func (a normalized) matches(b normalized) bool {
	if a.text != b.text || len(a.approx) != len(b.approx) {
		return false
	}
	for i := range a.approx {
		if d := a.approx[i] - b.approx[i]; d < -1 || d > 1 {
			return false
		}
	}
	return true
}

// statsMasked are the stats keys whose values belong to the process or the
// build rather than to the protocol. Those of the host (hostname, os,
// platform) are compared: both servers run on the same one.
var statsMasked = map[string]bool{
	"pid": true, "version": true, "rusage-utime": true, "rusage-stime": true,
	"uptime": true, "id": true,
}

// clusterStatsMasked are statsMasked and the log's figures.
var clusterStatsMasked = map[string]bool{
	"pid": true, "version": true, "rusage-utime": true, "rusage-stime": true,
	"uptime": true, "id": true, "binlog-oldest-index": true, "binlog-current-index": true,
	"binlog-records-migrated": true, "binlog-records-written": true, "binlog-max-size": true,
}

// normalizeReply returns the form of a reply that the comparison uses.
// Only `OK <n>` replies carrying one of the three stats documents change;
// every other reply, job bodies included, must match byte for byte.
//
//   - The `OK <n>` line becomes `OK _`: n changes with quoting and with the
//     masked values. Conn has already checked that n bytes and \r\n followed.
//   - stats: the values of pid, version, rusage-utime, rusage-stime, uptime
//     and id (the random instance id) are masked.
//     current-connections and total-connections are compared: the harness's
//     readiness probe quits before tests start, so it is counted the same way
//     on both servers.
//   - stats-job: age and time-left may differ by one second, since each
//     server truncates its own clock. The job id is compared.
//   - stats-tube: pause-time-left may differ by one second.
//   - With ref112 (the reference is 1.12), the keys in quotedIn113 are
//     compared without their double quotes.
//
// Against a cluster member (inCluster), the values of its log are masked
// too: stats' binlog-* figures and stats-job's file are those of the
// member's -b, which a beanstalkd without -b does not have.
func normalizeReply(reply []byte, ref112, inCluster bool) normalized {
	header, body, ok := bytes.Cut(reply, []byte("\r\n"))
	if !ok || !bytes.HasPrefix(header, []byte("OK ")) || !bytes.HasPrefix(body, []byte("---\n")) {
		return normalized{text: string(reply)}
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\r\n"), "\n")
	var masked, approximate, unquoted map[string]bool
	if len(lines) > 1 {
		switch key, _, _ := strings.Cut(lines[1], ":"); key {
		case "current-jobs-urgent": // stats
			masked = statsMasked
			if inCluster {
				masked = clusterStatsMasked
			}
		case "id": // stats-job
			approximate = map[string]bool{"age": true, "time-left": true}
			if inCluster {
				masked = map[string]bool{"file": true}
			}
		case "name": // stats-tube
			approximate = map[string]bool{"pause-time-left": true}
		}
	}
	if ref112 {
		unquoted = quotedIn113
	}
	var n normalized
	for i, line := range lines {
		key, value, ok := strings.Cut(line, ": ")
		switch {
		case !ok:
		case masked[key]:
			lines[i] = key + ": <masked>"
		case unquoted[key]:
			lines[i] = key + ": " + strings.TrimSuffix(strings.TrimPrefix(value, `"`), `"`)
		case approximate[key]:
			if v, err := strconv.ParseInt(value, 10, 64); err == nil {
				n.approx = append(n.approx, v)
				lines[i] = key + ": <±1>"
			}
		}
	}
	n.text = "OK _\r\n" + strings.Join(lines, "\n") + "\r\n"
	return n
}

// ---------------------------------------------------------------------------
// Known differences

// Sprout follows beanstalkd 1.13. When the reference is 1.12 (Debian's
// package, where no 1.13 build is at hand), the comparison allows for what
// changed between the two, and for nothing else: quotedIn113 and
// knownDifferences. Against 1.13 neither applies.

// quotedIn113 are the string values that 1.13 double-quotes and 1.12 does
// not: name in stats-tube, tube in stats-job, and hostname, os and platform
// in stats. Against 1.12 they are compared without the quotes. Neither
// version escapes them, and tube names cannot contain quotes, so nothing
// else can differ.
var quotedIn113 = map[string]bool{"name": true, "tube": true, "hostname": true, "os": true, "platform": true}

// knownDifference is a place where Sprout, following 1.13, answers
// differently from 1.12.
type knownDifference struct {
	name    string
	matches func(sent []byte) bool // whether the bytes sent in a step hit it
	want    string                 // what Sprout must answer instead
	reason  string
}

// knownDifferences is the complete list. Against a 1.12 reference, a step
// that matches one is sent to Sprout only, and Sprout's answer is checked against want: sending it to the
// reference would change the reference's state (1.12 may start waiting
// forever) while Sprout's stays put, and every later step would then differ.
// With SPROUT_CONFORMANCE_SELFTEST=1 the stand-in is 1.12 too, so such steps
// are skipped.
var knownDifferences = []knownDifference{
	{
		name: "reserve-with-timeout argument 1.13 refuses",
		matches: func(sent []byte) bool {
			arg, ok := reserveTimeoutArgument(sent)
			if !ok {
				return false
			}
			digits := leadingTimeout.FindStringSubmatch(arg)
			if digits == nil {
				return true
			}
			v, err := strconv.ParseUint(digits[1], 10, 64)
			return err != nil || v > math.MaxInt32
		},
		want: "BAD_FORMAT\r\n",
		reason: "1.13 (PR #607) reads the timeout with read_u32: spaces, then a digit, and at " +
			"most INT_MAX, or BAD_FORMAT. 1.12 reads it with strtol into an int, which also " +
			"skips tabs, takes a sign and reads no digits as 0: -1 and 2147483648 mean 'wait " +
			"forever', 4294967296 wraps to 0, x and \"\" mean 0. Both ignore what follows the " +
			"digits, so `0abc` and `0 ` are not differences.",
	},
}

// leadingTimeout is the part of a reserve-with-timeout argument both versions
// read alike while it is at most INT_MAX: spaces, then digits.
var leadingTimeout = regexp.MustCompile(`^ *([0-9]+)`)

// reserveTimeoutArgument returns what follows "reserve-with-timeout " when
// sent is exactly one such command line.
func reserveTimeoutArgument(sent []byte) (string, bool) {
	text, ok := bytes.CutSuffix(sent, []byte("\r\n"))
	if !ok || bytes.ContainsAny(text, "\r\n\x00") {
		return "", false
	}
	arg, ok := bytes.CutPrefix(text, []byte("reserve-with-timeout "))
	return string(arg), ok
}

// knownDifference returns the known difference sent hits, or nil; always nil
// unless the reference is 1.12.
func (s *session) knownDifference(sent []byte) *knownDifference {
	if !s.ref112 {
		return nil
	}
	for i := range knownDifferences {
		if knownDifferences[i].matches(sent) {
			return &knownDifferences[i]
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Lock-step session

// twin is one client connection, opened the same way on both servers.
type twin struct {
	ref, sut *Conn
}

// session drives numbered connections on the reference (ref) and on Sprout
// (sut, the server under test) in lock step, and keeps a transcript for
// failure reports. Connections are dialled on first use and forgotten when
// the server closes them, so the next use opens a new one.
type session struct {
	t        testing.TB
	refAddr  string
	sutAddr  string
	sutTLS   *tls.Config // Sprout's connections are TLS with this; nil: plaintext
	conns    map[int]*twin
	log      transcript
	header   string // first line of every failure report, e.g. the seed
	selfTest bool   // the "Sprout" is a second beanstalkd
	ref112   bool   // the reference is 1.12: quotedIn113 and knownDifferences apply
	// inCluster: the Sprout is a cluster member, whose log's figures are
	// masked (normalizeReply).
	inCluster bool
	// bursts: TestRandom's steps include bursts, several commands sent in
	// one write (a member pipelines them to the leader).
	bursts bool
	// groups: the Sprout is a member of a cluster of several shard
	// groups, whose job ids are translated and whose documented
	// differences are allowed as groups_test.go says; nil otherwise.
	groups *groupsView
}

// newSession starts both servers; overTLS has Sprout's connections use its
// TLS listener.
func newSession(t testing.TB, header string, overTLS bool) *session {
	t.Helper()
	return newSessionWith(t, header, func() (string, *tls.Config) {
		if overTLS {
			return StartSproutTLS(t)
		}
		return StartSprout(t), nil
	})
}

// newSessionWith starts the reference, then has startSprout start the
// Sprout, and returns the session between them: startSprout returns the
// Sprout's address, and a TLS configuration if it is to be reached
// over TLS.
func newSessionWith(t testing.TB, header string, startSprout func() (string, *tls.Config)) *session {
	t.Helper()
	ref := testproc.Reference(t)
	s := &session{
		t:        t,
		refAddr:  StartBinary(t, ref.Path),
		conns:    map[int]*twin{},
		header:   fmt.Sprintf("%s (reference: beanstalkd %s)", header, ref.Version),
		selfTest: SelfTest(),
		ref112:   ref.Is112(),
	}
	s.sutAddr, s.sutTLS = startSprout()
	t.Cleanup(func() {
		for _, c := range s.conns {
			c.ref.Close()
			c.sut.Close()
		}
	})
	return s
}

// conn returns connection n, dialling it on both servers if needed.
func (s *session) conn(n int) *twin {
	if c := s.conns[n]; c != nil {
		return c
	}
	ref, err := Dial(s.refAddr, replyWait)
	if err != nil {
		s.fail("dialling beanstalkd for conn %d: %v", n, err)
	}
	sut, err := DialTLS(s.sutAddr, replyWait, s.sutTLS)
	if err != nil {
		ref.Close()
		s.fail("dialling sprout for conn %d: %v", n, err)
	}
	c := &twin{ref: ref, sut: sut}
	s.conns[n] = c
	return c
}

// forget closes connection n on both servers.
func (s *session) forget(n int) {
	if c := s.conns[n]; c != nil {
		c.ref.Close()
		c.sut.Close()
		delete(s.conns, n)
	}
	if s.groups != nil {
		s.groups.forget(n)
	}
}

// sendPair writes ref to connection n on the reference, then sut to it on
// Sprout: the same command, with Sprout's job ids (groupsView.render).
func (s *session) sendPair(n int, ref, sut []byte) {
	c := s.conn(n)
	if err := c.ref.Send(ref); err != nil {
		s.fail("sending to beanstalkd on conn %d: %v", n, err)
	}
	if err := c.sut.Send(sut); err != nil {
		s.fail("sending to sprout on conn %d: %v", n, err)
	}
}

// halfClose shuts down the writing side of connection n on both servers.
func (s *session) halfClose(n int) {
	c := s.conn(n)
	if err := c.ref.CloseWrite(); err != nil {
		s.fail("half-closing conn %d to beanstalkd: %v", n, err)
	}
	if err := c.sut.CloseWrite(); err != nil {
		s.fail("half-closing conn %d to sprout: %v", n, err)
	}
}

// readReplies reads n replies from c, waiting up to wait for each.
func readReplies(c *Conn, n int, wait time.Duration) ([][]byte, error) {
	var replies [][]byte
	for range n {
		r, err := c.ReadReply(wait)
		if err != nil {
			return replies, err
		}
		replies = append(replies, r)
	}
	return replies, nil
}

// exchange reads n replies on connection n of both servers into e and
// compares them. A reference that answers fewer than n is a bug in the test
// (the count was wrong), reported as such.
func (s *session) exchange(e *entry, conn, n int, wait time.Duration) {
	c := s.conn(conn)
	ref, refErr := readReplies(c.ref, n, wait)
	e.ref = append(e.ref, ref...)
	if s.inCluster {
		wait += clusterReplySlack
	}
	sut, sutErr := readReplies(c.sut, n, wait)
	e.sut = append(e.sut, sut...)
	if refErr != nil {
		s.fail("test bug: beanstalkd sent %d of the %d replies expected on conn %d (%v)", len(ref), n, conn, refErr)
	}
	if sutErr != nil {
		s.fail("sprout sent %d of %d replies on conn %d (%v)", len(sut), n, conn, sutErr)
	}
	s.compare(conn, ref, sut, e.tubeSets)
}

// compare fails the test unless the replies on connection conn match
// after normalisation. Through a cluster of several groups (s.groups),
// Sprout's job ids are first translated to the reference's, and the
// replies i for which tubeSets[i] is set (those to list-tubes where the
// documented difference of order applies) are compared as sets.
func (s *session) compare(conn int, ref, sut [][]byte, tubeSets []bool) {
	for i := range ref {
		r, u := ref[i], sut[i]
		if s.groups != nil {
			if err := s.groups.learn(conn, r, u); err != nil {
				s.fail("%v\n  beanstalkd: %s\n  sprout:     %s", err, quote(r), quote(u))
			}
			u = s.groups.toReference(u)
			if i < len(tubeSets) && tubeSets[i] {
				r, u = s.groups.tubeSet(r, u)
			}
		}
		if !normalizeReply(r, s.ref112, s.inCluster).matches(normalizeReply(u, s.ref112, s.inCluster)) {
			raw := ""
			if !bytes.Equal(u, sut[i]) {
				raw = "\n  (sprout's reply before translation: " + quote(sut[i]) + ")"
			}
			s.fail("replies differ:\n%s%s", describeDifference(r, u, s.ref112, s.inCluster), raw)
		}
	}
}

// describeDifference shows two differing replies. For YAML documents, which
// are long, it lists only the lines that differ.
func describeDifference(ref, sut []byte, ref112, inCluster bool) string {
	a, b := normalizeReply(ref, ref112, inCluster), normalizeReply(sut, ref112, inCluster)
	if !strings.HasPrefix(a.text, "OK _\r\n") || !strings.HasPrefix(b.text, "OK _\r\n") {
		return fmt.Sprintf("  beanstalkd: %s\n  sprout:     %s", quote(ref), quote(sut))
	}
	refLines := strings.Split(string(ref), "\n")
	sutLines := strings.Split(string(sut), "\n")
	aLines, bLines := strings.Split(a.text, "\n"), strings.Split(b.text, "\n")
	var out strings.Builder
	for i := range max(len(aLines), len(bLines)) {
		same := i < len(aLines) && i < len(bLines) && aLines[i] == bLines[i]
		// When only approximate values differ, show those lines.
		if same && (a.text != b.text || !strings.Contains(aLines[i], "<±1>")) {
			continue
		}
		fmt.Fprintf(&out, "  line %d: beanstalkd %q, sprout %q\n", i+1, at(refLines, i), at(sutLines, i))
	}
	return strings.TrimSuffix(out.String(), "\n")
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(missing)"
}

// expectSilence fails the test if connection n sends anything on either
// server within wait: a reply the step did not expect. Both servers got the
// step at the same time, so after waiting on the reference, Sprout has had
// as long.
func (s *session) expectSilence(e *entry, n int, wait time.Duration) {
	c := s.conn(n)
	if r, err := c.ref.ReadReply(wait); !errors.Is(err, ErrNoReply) {
		e.ref = append(e.ref, r)
		s.fail("test bug: beanstalkd sent more than expected on conn %d: %s (%v)", n, quote(r), err)
	}
	if r, err := c.sut.ReadReply(0); !errors.Is(err, ErrNoReply) {
		e.sut = append(e.sut, r)
		s.fail("sprout sent more than beanstalkd on conn %d: %s (%v)", n, quote(r), err)
	}
}

// expectClosed waits for both servers to close connection n, then forgets it.
func (s *session) expectClosed(n int) {
	c := s.conn(n)
	if r, err := c.ref.ReadReply(replyWait); err != io.EOF {
		s.fail("test bug: beanstalkd did not close conn %d: %s, %v", n, quote(r), err)
	}
	if r, err := c.sut.ReadReply(replyWait); err != io.EOF {
		s.fail("sprout did not close conn %d: got %s, %v", n, quote(r), err)
	}
	s.forget(n)
}

// sendKnownDifference sends a step that hits d to Sprout only and checks the
// answer d expects. In self-test mode the step is skipped.
func (s *session) sendKnownDifference(e *entry, d *knownDifference) {
	if s.selfTest {
		e.note = "skipped, known difference " + strconv.Quote(d.name) + " (self-test: no 1.13 server)"
		return
	}
	e.note = "known difference " + strconv.Quote(d.name) + ": sent to sprout only"
	c := s.conn(e.conn)
	if err := c.sut.Send(e.sent); err != nil {
		s.fail("sending to sprout on conn %d: %v", e.conn, err)
	}
	got, err := c.sut.ReadReply(replyWait)
	e.sut = append(e.sut, got)
	if err != nil || string(got) != d.want {
		s.fail("known difference %q: sprout answered %s (%v), want %q\n  because %s",
			d.name, quote(got), err, d.want, d.reason)
	}
}

// fail reports a failure with the session header and the transcript tail.
func (s *session) fail(format string, args ...any) {
	s.t.Helper()
	at := ""
	if n := len(s.log.entries); n > 0 {
		at = fmt.Sprintf(", at step %d", s.log.entries[n-1].step)
	}
	s.t.Fatalf("%s%s\n%s\n\nlast steps (oldest first):\n%s",
		s.header, at, fmt.Sprintf(format, args...), s.log.tail(transcriptTail))
}

// ---------------------------------------------------------------------------
// Transcript

// entry is one step: what was sent on which connection, and what each
// server answered.
type entry struct {
	step int
	conn int
	sent []byte
	// sentSut is what Sprout got instead of sent, when its job ids were
	// translated (groupsView.render); nil when it got sent.
	sentSut  []byte
	ref, sut [][]byte
	note     string
	// tubeSets marks the replies that exchange compares as sets of tubes
	// (compare).
	tubeSets []bool
}

// transcript keeps the most recent entries, for failure reports.
type transcript struct {
	entries []*entry
}

// add starts a new entry and returns it for the replies to be filled in.
func (t *transcript) add(step, conn int, sent []byte, note string) *entry {
	e := &entry{step: step, conn: conn, sent: sent, note: note}
	t.entries = append(t.entries, e)
	if len(t.entries) > 4*transcriptTail {
		t.entries = append(t.entries[:0], t.entries[len(t.entries)-transcriptTail:]...)
	}
	return e
}

// tail formats the last n entries.
func (t *transcript) tail(n int) string {
	var b strings.Builder
	for _, e := range t.entries[max(0, len(t.entries)-n):] {
		fmt.Fprintf(&b, "step %d, conn %d, sent %s", e.step, e.conn, quote(e.sent))
		if e.note != "" {
			fmt.Fprintf(&b, " (%s)", e.note)
		}
		b.WriteString("\n")
		if e.sentSut != nil {
			fmt.Fprintf(&b, "    (sprout got %s)\n", quote(e.sentSut))
		}
		for _, r := range e.ref {
			fmt.Fprintf(&b, "    beanstalkd: %s\n", quote(r))
		}
		for _, r := range e.sut {
			fmt.Fprintf(&b, "    sprout:     %s\n", quote(r))
		}
	}
	return b.String()
}

// quote is %q, shortened for the 64 KiB bodies and the stats documents
// some steps carry.
func quote(b []byte) string {
	const limit = 400
	if len(b) <= limit {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%q…%q (%d bytes)", b[:limit-100], b[len(b)-60:], len(b))
}
