package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// randomConns is how many connections TestRandom drives.
	randomConns = 4
	// blockWait is how long a reserve may stay silent before the test
	// takes it to be waiting for a job on both servers.
	blockWait = 300 * time.Millisecond
	// timerGuard widens the window around a server-side timer (a delay, a
	// pause or a reserve timeout running out) during which no step is
	// sent, so that both servers see every step on the same side of it.
	timerGuard = 200 * time.Millisecond
	// timerSteps is how many steps after starting a timer the run sleeps
	// until it has fired. Tying the moment to a step number rather than
	// to the clock makes a seed replay the same stream on a slow machine.
	timerSteps = 8
	// wakeGrace is how long a step that may have woken a waiting reserve
	// gives the reference's reply to arrive, so that a replay sees it at
	// the same step.
	wakeGrace = 3 * time.Millisecond
)

// runRandom drives s with steps random steps from seed.
func runRandom(t *testing.T, s *session, seed uint64, steps int) {
	r := &randomRun{session: s, gen: newGenerator(seed), waiting: map[int]int{}}
	if s.groups != nil {
		r.gen.groups = len(s.groups.placement.Groups)
		r.gen.groupOf = func(tube string) int { return int(s.groups.placement.Owner(tube)) }
	}
	start := time.Now()
	for i := range steps {
		r.step(i)
	}
	r.finish(steps)
	t.Logf("seed %d: %d steps in %v; %d reserves waited, %d commands pipelined behind them, %d bursts, %d sent to sprout only",
		seed, steps, time.Since(start).Round(time.Millisecond), r.waitedReserves, r.pipelined, r.bursted, r.sproutOnly)
}

// randomRun is TestRandom's state between steps.
type randomRun struct {
	*session
	gen *generator
	// waiting maps a connection whose reserve is waiting on both servers
	// to the number of replies still owed on it: the reserve's, plus those
	// of commands pipelined behind it.
	waiting map[int]int
	// timers are the windows around server-side timers that steps avoid.
	timers []window
	// mayHaveWoken is set when a waiting reserve may just have ended: a
	// step made a job ready or closed a connection, or a timer fired.
	mayHaveWoken bool

	waitedReserves int // reserves that waited, for the log
	pipelined      int // commands sent behind a waiting reserve, for the log
	sproutOnly     int // known differences sent to Sprout alone, for the log
	bursted        int // bursts sent, for the log
}

// window is a stretch of wall time in which a server-side timer fires, and
// the step by which the run sleeps through it.
type window struct {
	from, to time.Time
	step     int
}

// step runs one random step: wait out timers, collect replies that arrived
// for waiting reserves, then send one generated command.
func (r *randomRun) step(i int) {
	r.avoidTimers(i)
	r.collectWoken(i)

	if r.bursts && len(r.waiting) < randomConns && r.gen.chance(burstChance) {
		r.burst(i)
		return
	}
	conn, pipelined := r.pickConn()
	cmd := r.gen.command(conn, pipelined, len(r.waiting) < randomConns-1)
	// Through groups, no quit while a reserve waits: the jobs it hands
	// back may be of several groups (knownGroupBugs).
	for r.groups != nil && cmd.quits && len(r.waiting) > 0 {
		cmd = r.gen.command(conn, pipelined, len(r.waiting) < randomConns-1)
	}
	if cmd.timer > 0 && r.groups != nil && len(r.timers) > 0 {
		// Through groups, one server-side timer at a time (doc.go).
		r.avoidTimers(math.MaxInt)
		r.collectWoken(i)
	}
	ref, sut := r.render(cmd)
	e := r.log.add(i, conn, ref, cmd.kind)
	if !bytes.Equal(ref, sut) {
		e.sentSut = sut
	}

	if d := r.knownDifference(cmd.text); d != nil {
		if !r.selfTest {
			r.sproutOnly++
		}
		r.sendKnownDifference(e, d)
		return
	}

	sentAt := time.Now()
	r.sendPair(conn, ref, sut)
	if cmd.timer > 0 {
		r.timers = append(r.timers, window{
			from: sentAt.Add(cmd.timer - timerGuard),
			to:   time.Now().Add(cmd.timer + timerGuard),
			step: i + timerSteps,
		})
	}
	r.mayHaveWoken = cmd.quits

	switch {
	case pipelined:
		// Answered after the waiting reserve; collected with it.
		r.waiting[conn] += cmd.replies
		r.pipelined++
	case cmd.quits:
		r.expectClosed(conn)
		r.gen.forget(conn)
	case cmd.blocks:
		r.reserve(e, conn)
	default:
		if r.groups != nil && isListTubes(ref) {
			e.tubeSets = []bool{true}
		}
		r.exchange(e, conn, cmd.replies, replyWait)
		r.gen.learn(conn, e.ref)
		for _, reply := range e.ref {
			r.mayHaveWoken = r.mayHaveWoken || wakingReply.Match(reply)
		}
	}
}

// burstChance is the chance, in percent, that a step of a run with bursts
// is one; burstMax, the most commands in one; burstBytes, the most bytes:
// Sprout's default --max-input, 2*(max job size+256). A member closes a
// connection whose unparsed input passes it (a documented limit), which
// a burst of two too-big jobs behind a command that waits for a leader's
// answer does.
const (
	burstChance = 12
	burstMax    = 8
	burstBytes  = 2 * (65535 + 256)
)

// burst sends 2 to burstMax commands in one write on a connection that is
// not waiting: commands that neither wait, quit, start a timer nor are a
// known difference, so that their replies come at once, in order. An
// unpause starts a timer too, of 1 ns: the commands after it in the burst
// would race its end, which one server reaches after the burst and a
// member between two of its commands (unpauses).
func (r *randomRun) burst(i int) {
	conn := r.gen.rng.IntN(randomConns)
	for _, waiting := r.waiting[conn]; waiting; _, waiting = r.waiting[conn] {
		conn = r.gen.rng.IntN(randomConns)
	}
	var text, sutText []byte
	var tubeSets []bool
	readyIn := -1 // through groups, the group the burst may make jobs ready in
	replies, n := 0, 2+r.gen.rng.IntN(burstMax-1)
	for len(text) == 0 || n > 0 {
		cmd := r.gen.command(conn, false, false)
		if cmd.quits || cmd.timer > 0 || unpauses(cmd.text) || r.knownDifference(cmd.text) != nil ||
			len(text)+len(cmd.text) > burstBytes {
			continue
		}
		// Through groups, the priorities of a burst's puts are those of
		// the tube used before it, the ids it names are issued before
		// it, and while a reserve waits it makes jobs ready in one group
		// at most (doc.go).
		if r.groups != nil {
			if bytes.HasPrefix(cmd.text, []byte("use ")) || r.gen.namesFutureID(cmd) {
				continue
			}
			if g := r.gen.readyGroup(conn, cmd); g >= 0 && len(r.waiting) > 0 {
				if readyIn >= 0 && g != readyIn {
					continue
				}
				readyIn = g
			}
		}
		ref, sut := r.render(cmd)
		text, sutText = append(text, ref...), append(sutText, sut...)
		for range cmd.replies {
			tubeSets = append(tubeSets, r.groups != nil && isListTubes(ref))
		}
		replies += cmd.replies
		n--
	}
	e := r.log.add(i, conn, text, "burst")
	if !bytes.Equal(text, sutText) {
		e.sentSut = sutText
	}
	e.tubeSets = tubeSets
	used := r.gen.usedTube(conn)
	r.sendPair(conn, text, sutText)
	r.exchange(e, conn, replies, replyWait)
	r.gen.learn(conn, e.ref)
	if r.groups != nil && r.gen.usedTube(conn) != used {
		r.fail("test bug: a burst changed the used tube from %q to %q", used, r.gen.usedTube(conn))
	}
	for _, reply := range e.ref {
		r.mayHaveWoken = r.mayHaveWoken || wakingReply.Match(reply)
	}
	r.bursted++
}

// unpauses reports whether text is a pause-tube of 0 seconds, which pauses
// the tube for 1 ns: that is, until the next time the server looks.
func unpauses(text []byte) bool {
	f := strings.Fields(string(text))
	return len(f) == 3 && f[0] == "pause-tube" && strings.Trim(f[2], "0") == ""
}

// render is cmd's text as the reference and Sprout get it: through
// groups, with Sprout's job ids for the reference's (groupsView.render).
// Only a command the generator marked ids in is looked at: bodies are
// sent as they are.
func (r *randomRun) render(cmd command) (ref, sut []byte) {
	if r.groups == nil || !cmd.marked {
		return cmd.text, cmd.text
	}
	return r.groups.render(cmd.text)
}

// isListTubes reports whether text is the one command answered with
// list-tubes' list.
func isListTubes(text []byte) bool { return string(text) == "list-tubes\r\n" }

// wakingReply matches the replies after which a job may have become ready.
var wakingReply = regexp.MustCompile(`^(INSERTED|RELEASED|KICKED|PAUSED)`)

// pickConn chooses the connection for the next command: one that is not
// waiting, or now and then a waiting one, to pipeline a command behind its
// reserve.
func (r *randomRun) pickConn() (conn int, pipelined bool) {
	if len(r.waiting) > 0 && r.gen.chance(3) {
		waiting := slices.Sorted(maps.Keys(r.waiting))
		return waiting[r.gen.rng.IntN(len(waiting))], true
	}
	for {
		conn = r.gen.rng.IntN(randomConns)
		if _, ok := r.waiting[conn]; !ok {
			return conn, false
		}
	}
}

// reserve reads the answer to a reserve that may wait for a job. If neither
// server answers within blockWait, the connection is waiting on both.
func (r *randomRun) reserve(e *entry, conn int) {
	c := r.conn(conn)
	ref, refErr := c.ref.ReadReply(blockWait)
	// Sprout got the command at the same time, so it has had blockWait too.
	sut, sutErr := c.sut.ReadReply(blockWait / 10)
	if errors.Is(refErr, ErrNoReply) && errors.Is(sutErr, ErrNoReply) {
		r.waiting[conn] = 1
		r.waitedReserves++
		e.note += "; waiting"
		return
	}
	r.completePair(e, conn, ref, refErr, sut, sutErr)
	r.gen.learn(conn, e.ref)
}

// completePair finishes reading one reply from both servers when at least
// one has answered: the other may trail by up to lateReplyWait.
func (r *randomRun) completePair(e *entry, conn int, ref []byte, refErr error, sut []byte, sutErr error) {
	c := r.conn(conn)
	if errors.Is(refErr, ErrNoReply) {
		ref, refErr = c.ref.ReadReply(lateReplyWait)
	}
	if errors.Is(sutErr, ErrNoReply) {
		sut, sutErr = c.sut.ReadReply(lateReplyWait)
	}
	if refErr == nil {
		e.ref = append(e.ref, ref)
	}
	if sutErr == nil {
		e.sut = append(e.sut, sut)
	}
	switch {
	case refErr != nil && sutErr != nil:
		r.fail("conn %d: neither server answered: beanstalkd %v, sprout %v", conn, refErr, sutErr)
	case refErr != nil:
		r.fail("conn %d: sprout answered %s, beanstalkd did not (%v)", conn, quote(sut), refErr)
	case sutErr != nil:
		r.fail("conn %d: beanstalkd answered %s, sprout did not within %v (%v)", conn, quote(ref), lateReplyWait, sutErr)
	}
	r.compare(conn, [][]byte{ref}, [][]byte{sut}, nil)
}

// collectWoken reads the replies of waiting reserves that have ended since
// the last step (a job arrived, a timeout ran out), and checks that no other
// connection received anything unasked.
func (r *randomRun) collectWoken(i int) {
	grace := time.Duration(0)
	if r.mayHaveWoken {
		grace, r.mayHaveWoken = wakeGrace, false
	}
	for _, conn := range slices.Sorted(maps.Keys(r.waiting)) {
		c := r.conn(conn)
		ref, refErr := c.ref.ReadReply(grace)
		sut, sutErr := c.sut.ReadReply(0)
		if errors.Is(refErr, ErrNoReply) && errors.Is(sutErr, ErrNoReply) {
			continue
		}
		e := r.log.add(i, conn, nil, "reply to the waiting reserve")
		r.completePair(e, conn, ref, refErr, sut, sutErr)
		r.gen.learn(conn, e.ref)
		if owed := r.waiting[conn] - 1; owed > 0 {
			r.exchange(e, conn, owed, replyWait)
		}
		delete(r.waiting, conn)
	}
	for _, conn := range slices.Sorted(maps.Keys(r.conns)) {
		if _, ok := r.waiting[conn]; !ok {
			// A reply here is reported with the failure; no entry is kept.
			r.expectSilence(&entry{}, conn, 0)
		}
	}
}

// avoidTimers sleeps through timer windows, so no step races a delay,
// pause or reserve timeout running out: at the window's step, or earlier if
// a slow run reaches the window first.
func (r *randomRun) avoidTimers(step int) {
	for {
		now := time.Now()
		r.timers = slices.DeleteFunc(r.timers, func(w window) bool { return w.to.Before(now) })
		i := slices.IndexFunc(r.timers, func(w window) bool { return step >= w.step || !now.Before(w.from) })
		if i < 0 {
			return
		}
		time.Sleep(r.timers[i].to.Sub(now))
		r.mayHaveWoken = true
	}
}

// finish collects what is still owed, and checks that nothing is left unread.
func (r *randomRun) finish(steps int) {
	r.avoidTimers(steps + timerSteps)
	r.collectWoken(steps)
	for _, conn := range slices.Sorted(maps.Keys(r.conns)) {
		if _, ok := r.waiting[conn]; !ok {
			e := r.log.add(steps, conn, nil, "end: listening for stray replies")
			r.expectSilence(e, conn, 100*time.Millisecond)
		}
	}
}

// ---------------------------------------------------------------------------
// Generator

// command is one generated input and what the reference will do with it.
type command struct {
	kind    string        // the production's name, for the transcript
	text    []byte        // the bytes to send
	replies int           // replies beanstalkd sends, known from how text was built
	blocks  bool          // a reserve that may wait for a job
	timer   time.Duration // a server timer this long starts (delay, pause, timeout)
	quits   bool          // the server closes the connection
	marked  bool          // text may hold job ids marked for translation (markID), and no body
}

// generator draws commands from a weighted grammar over a few tube names and
// the job ids seen so far. Its choices depend only on the seed and on the
// reference's replies, so a seed replays the same stream while the
// reference behaves the same.
type generator struct {
	rng      *rand.Rand
	ids      []uint64         // job ids seen in replies, in order of first sight
	seen     map[uint64]bool  // the set of ids
	maxID    uint64           // the largest of them
	reserved map[int][]uint64 // recently reserved ids, by connection
	used     map[int]string   // each connection's used tube, from the replies

	// Through a cluster of several groups (doc.go, "Shard groups"),
	// groupOf is the group of a tube, of the groups there are; nil and 0
	// otherwise. Then job ids are marked for translation (markID), and
	// every priority a job gets is congruent to its group modulo groups,
	// so that jobs of different groups never tie (priInGroup).
	groupOf  func(tube string) int
	groups   int
	jobGroup map[uint64]int // the group of each job seen inserted, with groupOf
	marked   bool           // an id was marked since command began
}

func newGenerator(seed uint64) *generator {
	return &generator{
		rng:      rand.New(rand.NewPCG(seed, seed^0x5eed)),
		seen:     map[uint64]bool{},
		reserved: map[int][]uint64{},
		used:     map[int]string{},
		jobGroup: map[uint64]int{},
	}
}

// production is a rule of the grammar. Weights are relative; they add up
// to about a thousand.
type production struct {
	name   string
	weight int
	make   func(g *generator, conn int) command
}

// grammar is the weighted list of productions. Delays, pauses and reserve
// timeouts of 1 s are rare: each one makes the run sleep for about 1 s.
// ttrs are large, so no job times out during a run.
var grammar = []production{
	// Well-formed commands.
	{"put", 200, (*generator).put},
	{"reserve-with-timeout 0", 70, fixed("reserve-with-timeout 0")},
	{"reserve", 20, blocking("reserve", 0)},
	{"reserve-with-timeout 3600", 8, blocking("reserve-with-timeout 3600", 0)},
	{"reserve-with-timeout 1", 1, blocking("reserve-with-timeout 1", time.Second)},
	{"reserve-job", 30, withID("reserve-job")},
	{"delete", 55, withID("delete")},
	{"release", 45, (*generator).release},
	{"bury", 35, (*generator).bury},
	{"touch", 15, withID("touch")},
	{"kick", 25, (*generator).kick},
	{"kick-job", 25, withID("kick-job")},
	{"peek", 25, withID("peek")},
	{"peek-ready", 10, fixed("peek-ready")},
	{"peek-delayed", 10, fixed("peek-delayed")},
	{"peek-buried", 10, fixed("peek-buried")},
	{"stats-job", 35, withID("stats-job")},
	{"stats-tube", 20, withTube("stats-tube")},
	{"stats", 12, fixed("stats")},
	{"use", 40, withTube("use")},
	{"watch", 35, withTube("watch")},
	{"ignore", 35, withTube("ignore")},
	{"list-tubes", 10, fixed("list-tubes")},
	{"list-tube-used", 8, fixed("list-tube-used")},
	{"list-tubes-watched", 12, fixed("list-tubes-watched")},
	{"pause-tube", 15, (*generator).pauseTube},
	{"quit", 4, func(*generator, int) command { return command{text: []byte("quit\r\n"), quits: true} }},
	// Malformed input.
	{"garbage line", 15, (*generator).garbage},
	{"prefix quirk", 12, (*generator).prefixQuirk},
	{"wrong case", 8, (*generator).wrongCase},
	{"odd spacing", 15, (*generator).oddSpacing},
	{"bad integer", 20, (*generator).badInteger},
	{"bad tube name", 8, (*generator).badTubeName},
	{"long line", 8, (*generator).longLine},
	{"stray CR", 4, (*generator).strayCR},
	{"NUL byte", 4, (*generator).nulByte},
	{"bad put header", 12, (*generator).badPutHeader},
	{"wrong body length", 12, (*generator).wrongBodyLength},
	{"job too big", 4, (*generator).jobTooBig},
	{"1.13 reserve-with-timeout", 4, (*generator).reserveTimeout113},
}

// sideEffectFree are the productions that may be pipelined behind a waiting
// reserve. They change no counter, so it does not matter when the server
// gets to them relative to the other connections' commands.
var sideEffectFree = []string{"garbage line", "prefix quirk", "wrong case", "bad integer", "bad tube name"}

// command draws a command for conn. With pipelined, it comes from
// sideEffectFree; without mayBlock, it is not a reserve that may wait.
func (g *generator) command(conn int, pipelined, mayBlock bool) command {
	total := 0
	for _, p := range grammar {
		total += p.weight
	}
	for {
		n := g.rng.IntN(total)
		var p production
		for _, p = range grammar {
			if n < p.weight {
				break
			}
			n -= p.weight
		}
		if pipelined && !slices.Contains(sideEffectFree, p.name) {
			continue
		}
		g.marked = false
		cmd := p.make(g, conn)
		cmd.marked = g.marked
		if cmd.blocks && !mayBlock {
			continue
		}
		if cmd.kind == "" {
			cmd.kind = p.name
		}
		return cmd
	}
}

// oneLine is a command of one line, which gets one reply.
func oneLine(text string) command { return command{text: []byte(text + "\r\n"), replies: 1} }

// fixed always sends text.
func fixed(text string) func(*generator, int) command {
	return func(*generator, int) command { return oneLine(text) }
}

// blocking is a reserve that may wait, and may start a timer.
func blocking(text string, timer time.Duration) func(*generator, int) command {
	return func(*generator, int) command {
		c := oneLine(text)
		c.blocks, c.timer = true, timer
		return c
	}
}

// withID is verb followed by a job id.
func withID(verb string) func(*generator, int) command {
	return func(g *generator, conn int) command { return oneLine(verb + " " + g.id(conn)) }
}

// withTube is verb followed by a tube name.
func withTube(verb string) func(*generator, int) command {
	return func(g *generator, _ int) command { return oneLine(verb + " " + g.tube()) }
}

// learn records the job ids in the reference's replies on conn, and its
// used tube.
func (g *generator) learn(conn int, replies [][]byte) {
	for _, r := range replies {
		f := strings.Fields(string(r[:bytes.IndexByte(r, '\n')+1]))
		if len(f) < 2 {
			continue
		}
		if f[0] == "USING" {
			g.used[conn] = f[1]
			continue
		}
		id, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		if f[0] == "INSERTED" && g.groupOf != nil {
			g.jobGroup[id] = g.groupOf(g.usedTube(conn))
		}
		switch f[0] {
		case "RESERVED":
			g.reserved[conn] = append(g.reserved[conn][max(0, len(g.reserved[conn])-4):], id)
			fallthrough
		case "INSERTED", "BURIED", "FOUND":
			if !g.seen[id] {
				g.seen[id] = true
				g.ids = append(g.ids, id)
				g.maxID = max(g.maxID, id)
			}
		}
	}
}

// forget drops what was known about a connection that closed.
func (g *generator) forget(conn int) {
	delete(g.reserved, conn)
	delete(g.used, conn)
}

// usedTube is conn's used tube.
func (g *generator) usedTube(conn int) string {
	if t, ok := g.used[conn]; ok {
		return t
	}
	return "default"
}

// readyGroup is the group in which cmd, sent on conn through groups, may
// make a job ready for a waiting reserve (a put, kick, release, kick-job
// or pause-tube), or -1 if it makes none ready.
func (g *generator) readyGroup(conn int, cmd command) int {
	switch text := cmd.text; {
	case bytes.HasPrefix(text, []byte("put ")), bytes.HasPrefix(text, []byte("kick ")):
		return g.groupOf(g.usedTube(conn))
	case bytes.HasPrefix(text, []byte("release ")), bytes.HasPrefix(text, []byte("kick-job ")):
		if ids := markedIDs(text); len(ids) == 1 {
			if group, ok := g.jobGroup[ids[0]]; ok {
				return group
			}
		}
	case bytes.HasPrefix(text, []byte("pause-tube ")):
		if f := strings.Fields(string(text)); len(f) > 1 {
			return g.groupOf(f[1])
		}
	}
	return -1
}

// namesFutureID reports whether cmd names an id beyond those seen, which
// a put sent before it in the same write could issue: its translation
// would be decided before the put's INSERTED paired it.
func (g *generator) namesFutureID(cmd command) bool {
	if !cmd.marked {
		return false
	}
	return slices.ContainsFunc(markedIDs(cmd.text), func(id uint64) bool { return !g.seen[id] && id > g.maxID })
}

// chance reports true with probability n in 100.
func (g *generator) chance(n int) bool { return g.rng.IntN(100) < n }

// pick returns one of choices; repeating a choice makes it likelier.
func (g *generator) pick(choices ...string) string { return choices[g.rng.IntN(len(choices))] }

// id is a job id: mostly one seen before (preferably one this connection
// reserved), sometimes one that does not exist yet or an edge value.
// Through groups it is marked for translation (markID).
func (g *generator) id(conn int) string {
	id := g.unmarkedID(conn)
	if g.groupOf != nil {
		g.marked = true
		return markID(id)
	}
	return id
}

func (g *generator) unmarkedID(conn int) string {
	switch n := g.rng.IntN(100); {
	case n < 30 && len(g.reserved[conn]) > 0:
		r := g.reserved[conn]
		return strconv.FormatUint(r[g.rng.IntN(len(r))], 10)
	case n < 85 && len(g.ids) > 0:
		// Recent ids are likelier to still exist.
		k := len(g.ids) - 1 - min(g.rng.IntN(len(g.ids)), g.rng.IntN(12))
		id := strconv.FormatUint(g.ids[k], 10)
		if g.chance(5) {
			id = "00" + id // leading zeros are fine
		}
		return id
	case n < 93:
		return strconv.Itoa(len(g.ids) + g.rng.IntN(4))
	default:
		return g.pick("0", "18446744073709551615", "4294967296")
	}
}

func (g *generator) pri() string {
	return g.pick("0", "0", "1", "10", "1023", "1024", "1024", "65536", "4294967295",
		strconv.Itoa(g.rng.IntN(2048)))
}

// putPri is a priority for a put on conn: through groups, one of the
// group of its used tube (priInGroup).
func (g *generator) putPri(conn int) string { return g.inUsedGroup(conn, g.pri()) }

// inUsedGroup is pri, moved into the group of conn's used tube through
// groups.
func (g *generator) inUsedGroup(conn int, pri string) string {
	if g.groupOf == nil {
		return pri
	}
	return priInGroup(pri, g.groupOf(g.usedTube(conn)), g.groups)
}

// jobPri is a priority for the job id names (release, bury): through
// groups, one of the job's group.
func (g *generator) jobPri(id string) string {
	pri := g.pri()
	if g.groupOf == nil {
		return pri
	}
	if ids := markedIDs([]byte(id)); len(ids) == 1 {
		if group, ok := g.jobGroup[ids[0]]; ok {
			return priInGroup(pri, group, g.groups)
		}
	}
	return pri
}

// idPri is a job id and a priority for it, separated by a space.
func (g *generator) idPri(conn int) string {
	id := g.id(conn)
	return id + " " + g.jobPri(id)
}

// delay is mostly 0, sometimes long enough never to run out during the run,
// and rarely 1 s, which starts a timer.
func (g *generator) delay() (string, time.Duration) {
	switch n := g.rng.IntN(1000); {
	case n < 4:
		return "1", time.Second
	case n < 100:
		return g.pick("3600", "86400", "4294967295"), 0
	default:
		return "0", 0
	}
}

func (g *generator) ttr() string {
	return g.pick("3600", "3600", "86400", "100000", "4294967295")
}

// tubes are the names commands use: few, so they collide often.
var tubes = []string{"default", "default", "a", "b", "c.d", "e_f(1)"}

func (g *generator) tube() string {
	if g.chance(3) {
		return g.pick("nosuch", "x-", "$;+/")
	}
	return tubes[g.rng.IntN(len(tubes))]
}

// body is a job body of any bytes, \r\n and NUL included; now and then the
// largest allowed.
func (g *generator) body() []byte {
	n := g.rng.IntN(40)
	switch {
	case g.chance(1):
		n = 65535
	case g.chance(10):
		n = 200 + g.rng.IntN(3000)
	}
	b := make([]byte, n)
	for i := range b {
		if g.chance(10) {
			b[i] = "\r\n\x00 "[g.rng.IntN(4)]
		} else {
			b[i] = byte(g.rng.IntN(256))
		}
	}
	return b
}

// junkLine is a line no command starts with: it always gets UNKNOWN_COMMAND,
// so junk can stand in for a body that the server will parse as commands.
func (g *generator) junkLine() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 #*%"
	b := make([]byte, g.rng.IntN(20))
	for i := range b {
		b[i] = alphabet[g.rng.IntN(len(alphabet))]
	}
	return string(b)
}

func (g *generator) put(conn int) command {
	delay, timer := g.delay()
	body := g.body()
	spaces := " "
	if g.chance(5) {
		spaces = "   " // runs of spaces between the numbers are fine
	}
	head := strings.Join([]string{"put", g.putPri(conn), delay, g.ttr(), strconv.Itoa(len(body))}, spaces)
	text := append([]byte(head+"\r\n"), body...)
	return command{text: append(text, "\r\n"...), replies: 1, timer: timer}
}

func (g *generator) release(conn int) command {
	delay, timer := g.delay()
	c := oneLine(fmt.Sprintf("release %s %s", g.idPri(conn), delay))
	c.timer = timer
	return c
}

func (g *generator) bury(conn int) command {
	return oneLine("bury " + g.idPri(conn))
}

func (g *generator) kick(int) command {
	// strtoul is lenient: a sign, trailing text and wrap-around are fine.
	return oneLine("kick " + g.pick("0", "1", "1", "2", "3", "10", "1000", "1abc", "+1", "-1", "4294967297", "abc", ""))
}

// pauseTube pauses for an hour (longer than any run), unpauses (0 means
// 1 ns), or rarely pauses for 1 s, which starts a timer.
func (g *generator) pauseTube(int) command {
	switch n := g.rng.IntN(100); {
	case n < 2:
		c := oneLine("pause-tube " + g.tube() + " 1")
		c.timer = time.Second
		return c
	case n < 55:
		return oneLine("pause-tube " + g.tube() + " 0")
	default:
		return oneLine("pause-tube " + g.tube() + " 3600")
	}
}

func (g *generator) garbage(int) command {
	return oneLine(g.pick("#", "X", "9", "") + g.junkLine())
}

// prefixQuirk exercises dispatch by prefix: trailing letters after an exact
// command, missing spaces after a command with arguments.
func (g *generator) prefixQuirk(int) command {
	return oneLine(g.pick("reservex", "statsx", "stats-job", "stats-tube", "list-tubesx",
		"list-tube-usedx", "list-tubes-watchedx", "peek-readyx", "peek-delayedx",
		"peek-buriedx", "reserve-jobx 1", "reserve-with-timeout", "put", "use", "peek",
		"delete", "kick", "kick-job", "touch", "release", "bury", "watch", "ignore",
		"reserve-job", "pause-tube", "PAUSE-TUBE default 0"))
}

// lineCommand is a well-formed one-line command that never waits, as
// material for the malformed variants.
func (g *generator) lineCommand(conn int) string {
	return g.pick(
		"peek "+g.id(conn), "delete "+g.id(conn), "touch "+g.id(conn), "kick-job "+g.id(conn),
		"stats-job "+g.id(conn), "reserve-job "+g.id(conn), "bury "+g.idPri(conn),
		"release "+g.idPri(conn)+" 0", "use "+g.tube(), "watch "+g.tube(),
		"ignore "+g.tube(), "stats-tube "+g.tube(), "pause-tube "+g.tube()+" 0",
		"kick 1", "stats", "list-tubes", "list-tube-used", "list-tubes-watched",
		"peek-ready", "peek-delayed", "peek-buried", "reserve-with-timeout 0")
}

func (g *generator) wrongCase(conn int) command {
	text := g.lineCommand(conn)
	if g.chance(50) {
		return oneLine(strings.ToUpper(text))
	}
	return oneLine(strings.ToUpper(text[:1]) + text[1:])
}

// oddSpacing doubles a space or adds a trailing one. Numbers may be preceded
// by any number of spaces; names and exact commands may not.
func (g *generator) oddSpacing(conn int) command {
	text := g.lineCommand(conn)
	if i := strings.IndexByte(text, ' '); i >= 0 && g.chance(50) {
		return oneLine(text[:i] + "  " + text[i+1:])
	}
	return oneLine(text + " ")
}

func (g *generator) badInteger(conn int) command {
	bad := g.pick("abc", "-1", "+1", "", " ", "1abc", "18446744073709551616", "0x10", "1.5", "1e3")
	return oneLine(g.pick(
		"delete "+bad, "peek "+bad, "touch "+bad, "kick-job "+bad, "reserve-job "+bad,
		"stats-job "+bad, "release "+bad+" 0 0", "release "+g.id(conn)+" "+bad+" 0",
		"release "+g.id(conn)+" 0 "+bad, "bury "+bad+" 0", "bury "+g.id(conn)+" "+bad,
		"pause-tube default "+bad, "pause-tube default 4294967296"))
}

func (g *generator) badTubeName(int) command {
	name := g.pick("-a", "a*b", "a b", "", "a\tb", strings.Repeat("n", 201), "é")
	return oneLine(g.pick("use ", "watch ", "ignore ", "stats-tube ", "pause-tube ") + name)
}

// longLine sends a line of 222 to 1000 bytes. One of 224k-1 bytes loses its
// \r\n across the 224-byte buffer boundary and swallows the next line, so a
// junk line follows it and both get one BAD_FORMAT.
func (g *generator) longLine(int) command {
	n, _ := strconv.Atoi(g.pick("222", "223", "224", "300", "447", "448", "500", "671", "1000"))
	text := strings.Repeat("X", n) + "\r\n"
	if n%224 == 223 {
		text += g.junkLine() + "\r\n"
	}
	return command{text: []byte(text), replies: 1}
}

// strayCR puts a \r that no \n follows into a line, which hides the line's
// end until 224 bytes have arrived; padding gets it there.
func (g *generator) strayCR(int) command {
	pos := g.rng.IntN(200)
	n := 224 + g.rng.IntN(300)
	if n%224 == 223 {
		n++
	}
	b := []byte(strings.Repeat("X", n))
	b[pos] = '\r'
	return command{text: append(b, "\r\n"...), replies: 1}
}

func (g *generator) nulByte(conn int) command {
	text := []byte(g.lineCommand(conn))
	i := g.rng.IntN(len(text) + 1)
	text = slices.Insert(text, i, 0)
	return command{text: append(text, "\r\n"...), replies: 1}
}

// badPutHeader is a put that fails to parse: its body then arrives as a
// command line of its own.
func (g *generator) badPutHeader(int) command {
	bad := g.pick("abc", "-1", "+1", "", "18446744073709551616", "4294967296", "1.5")
	head := g.pick(
		"put "+bad+" 0 3600 3", "put 0 "+bad+" 3600 3", "put 0 0 "+bad+" 3", "put 0 0 3600 "+bad,
		"put 0 0 3600", "put 0 0 3600 3 ", "put 0 0 3600 3 x", "PUT 0 0 3600 3", "put\t0 0 3600 3")
	return command{text: []byte(head + "\r\n" + g.junkLine() + "\r\n"), replies: 2}
}

// wrongBodyLength declares one body length and sends another. The server
// reads exactly declared+2 bytes: unless they end in \r\n (then it is a job)
// the answer is EXPECTED_CRLF, and whatever is left over is parsed as lines.
// The leftover is made of junk lines, so each gets one UNKNOWN_COMMAND.
func (g *generator) wrongBodyLength(conn int) command {
	declared := g.rng.IntN(20)
	actual := g.rng.IntN(30)
	if actual == declared {
		actual++
	}
	payload := strings.Repeat("Y", actual) + "\r\n"
	for len(payload) < declared+2 {
		payload += g.junkLine() + "\r\n"
	}
	body, rest := payload[:declared+2], payload[declared+2:]
	if rest != "" && !strings.HasSuffix(rest, "\r\n") {
		rest += "\r\n" // complete the line the cut left open
	}
	text := fmt.Sprintf("put %s 0 3600 %d\r\n%s%s", g.inUsedGroup(conn, "0"), declared, body, rest)
	return command{text: []byte(text), replies: 1 + strings.Count(rest, "\r\n")}
}

// jobTooBig declares more than the 65535-byte limit: the server discards
// exactly that many bytes plus two, whatever they are, then answers.
func (g *generator) jobTooBig(int) command {
	size, _ := strconv.Atoi(g.pick("65536", "65537", "100000"))
	head := fmt.Sprintf("put 0 0 3600 %d", size)
	if g.chance(30) {
		head += " junk" // too big is checked before trailing text
	}
	body := make([]byte, size+2)
	for i := range body {
		body[i] = byte(g.rng.IntN(256))
	}
	text := append([]byte(head+"\r\n"), body...)
	c := command{text: text, replies: 1}
	if g.chance(50) {
		c.text = append(c.text, g.junkLine()+"\r\n"...)
		c.replies++
	}
	return c
}

// reserveTimeout113 sends the arguments 1.13 refuses and 1.12 reads (see
// knownDifferences), and ones both read while ignoring what follows the
// digits; "1 " waits for a second.
func (g *generator) reserveTimeout113(int) command {
	arg := g.pick("-1", "2147483648", "4294967296", "x", "+1", "", "\t0", "0abc", "0 ", "0\t", "00", "1 ")
	if arg == "1 " {
		return blocking("reserve-with-timeout "+arg, time.Second)(g, 0)
	}
	return oneLine("reserve-with-timeout " + arg)
}
