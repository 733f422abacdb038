//go:build linux

package clusterfault

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
	"github.com/sproutmq/sprout/internal/testproc"
)

// tube is the workload's tube with one group; with several, tubes holds
// one tube per group (cluster.tubes), the first of them this one when it
// lives in group 0. quietTube is the quiet phase's, likewise.
const (
	tube      = "chaos"
	quietTube = "chaos-quiet"
)

// ttr is every job's time to run, in seconds: a holding ends by it at the
// latest.
const ttr = 60

// replyTimeout bounds each exchange of a workload client: a put proxied
// to a stopped leader waits for the proxy to give up (an election
// timeout) or for this.
const replyTimeout = 3 * time.Second

// putsPerSecond paces the producers together, whatever the members and
// groups (each of them puts every M×G/putsPerSecond), so that the ledger
// the checks walk grows by a few thousand jobs a round, not by what the
// machine can take: the checks walk every id each round.
const putsPerSecond = 300

// delayedOneIn: one put in so many is delayed by a second.
const delayedOneIn = 8

// pipelinedOneIn: one write of puts in so many holds several.
const pipelinedOneIn = 4

// ledger is what the clients were told, and what they saw.
type ledger struct {
	mu sync.Mutex
	// bodies: every body a put was sent with, by its token: its hash.
	bodies map[string][sha256.Size]byte // guarded by mu
	// puts: the acknowledged puts, id to token.
	puts map[uint64]string // guarded by mu
	// ids: each token's job, token to id, from its put's acknowledgement
	// or the first sighting of a job of it, whichever came first. A put
	// is sent once, so a token seen under another id is a job duplicated
	// under a new id (ledger.duplicatedLocked): puts[id] names the token
	// an id was acknowledged with, and this the id a token went to.
	ids map[string]uint64 // guarded by mu
	// refused: the tokens whose put was refused (judge), with the
	// answer: the put did not run, so no job of it may ever be seen.
	refused map[string]string // guarded by mu
	// deletesInDoubt: by id a delete was ever sent for, how many of its
	// deletes may have deleted it unseen: sent, and answered by nothing,
	// or by NOT_FOUND only after the command went again on a new
	// connection (verifyDo: the first may have deleted it). A delete
	// answered on the connection it was sent on is no longer in doubt:
	// DELETED is acknowledged (deleted), and NOT_FOUND deleted nothing.
	// The lost check excuses a job only while one is in doubt.
	deletesInDoubt map[uint64]int // guarded by mu
	// deleted: the acknowledged deletes, each with when its reply came.
	deleted map[uint64]time.Time // guarded by mu
	// badSeen says what the clients saw of each job counted resurrected,
	// mismatched, duplicated or done though refused, and the wrong
	// replies, since the last take (the first few).
	badSeen []string // guarded by mu
	// reserved: how often each id was reserved.
	reserved map[uint64]int // guarded by mu
	// holdings are the consumers' reservations since the last check of
	// them, in the order they ended (checks_linux_test.go).
	holdings []holding // guarded by mu
	// producerAcks are the producers' acknowledged puts since the last
	// take, in time order: the clients' gaps.
	producerAcks []ack // guarded by mu
	// fenced are, by group, the fence below which verify walked every id
	// once, and present the ids its last walk found.
	fenced  map[int]uint64  // guarded by mu
	present map[uint64]bool // guarded by mu
	// quiet are the jobs of the current quiet phase: id to priority.
	quiet  map[uint64]uint32 // guarded by mu
	counts counts            // guarded by mu
	// acks counts acknowledged puts, for the rounds to wait on.
	acks atomic.Int64
}

// counts are the figures of a round, or of all of them.
type counts struct {
	puts, deletes, lost, resurrected, mismatches, doubles, reservationLost int
	// duplicated are jobs seen under an id not their put's: one put, two
	// jobs (must be 0); refusedDone, jobs of a put the cluster refused
	// (must be 0); wrong, the replies no command may get (judge: must be
	// 0).
	duplicated, refusedDone, wrong int
	// overlapsExcused and overlapsBad are holdings of one job by two
	// sessions at once, across a change of its group's leader and not.
	overlapsExcused, overlapsBad int
	// orderChecked are the quiet phases' hand-outs checked for order,
	// orderBad those out of order within their group, crossInversions
	// those out of order across groups (reported), and quietDisturbed
	// the quiet phases not checked because a connection failed.
	orderChecked, orderBad, crossInversions, quietDisturbed int
	// reservationsLost say which reservations were lost on a live
	// connection, and when, for a round that must lose none.
	reservationsLost []string
}

func (a *counts) add(b counts) {
	a.puts += b.puts
	a.deletes += b.deletes
	a.lost += b.lost
	a.resurrected += b.resurrected
	a.mismatches += b.mismatches
	a.duplicated += b.duplicated
	a.refusedDone += b.refusedDone
	a.wrong += b.wrong
	a.doubles += b.doubles
	a.reservationLost += b.reservationLost
	a.reservationsLost = append(a.reservationsLost, b.reservationsLost...)
	a.overlapsExcused += b.overlapsExcused
	a.overlapsBad += b.overlapsBad
	a.orderChecked += b.orderChecked
	a.orderBad += b.orderBad
	a.crossInversions += b.crossInversions
	a.quietDisturbed += b.quietDisturbed
}

func newLedger() *ledger {
	return &ledger{bodies: map[string][sha256.Size]byte{}, puts: map[uint64]string{}, ids: map[string]uint64{}, refused: map[string]string{},
		deletesInDoubt: map[uint64]int{}, deleted: map[uint64]time.Time{}, reserved: map[uint64]int{},
		quiet: map[uint64]uint32{}, fenced: map[int]uint64{}, present: map[uint64]bool{}}
}

// toPeek are the ids of [first, fence) verify peeks (round.verifyGroup),
// in order: those above the group's last fence, and below it those the
// ledger knows or the last walk found.
func (l *ledger) toPeek(first, fence uint64) []uint64 {
	l.mu.Lock()
	walked := max(first, l.fenced[groupOf(first)])
	var ids []uint64
	for id := range l.present {
		if id >= first && id < walked {
			ids = append(ids, id)
		}
	}
	for id := range l.deletesInDoubt {
		if id >= first && id < walked {
			ids = append(ids, id)
		}
	}
	for id := range l.puts {
		if id >= first && id < walked {
			ids = append(ids, id)
		}
	}
	for id := range l.reserved {
		if id >= first && id < walked {
			ids = append(ids, id)
		}
	}
	l.mu.Unlock()
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for id := walked; id < fence; id++ {
		ids = append(ids, id)
	}
	return ids
}

// walked notes a walk of [first, fence): found are the ids it found.
func (l *ledger) walked(first, fence uint64, found map[uint64]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.present, func(id uint64, _ bool) bool { return id >= first && id < fence })
	maps.Copy(l.present, found)
	l.fenced[groupOf(first)] = fence
}

// take returns the counts since the last take, with what the checks
// found wrong, and forgets the producers' acknowledgements.
func (l *ledger) take() (counts, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, bad := l.counts, l.badSeen
	l.counts, l.badSeen = counts{}, nil
	l.producerAcks = nil
	return c, bad
}

// takeHoldings returns the holdings since the last call.
func (l *ledger) takeHoldings() []holding {
	l.mu.Lock()
	defer l.mu.Unlock()
	hs := l.holdings
	l.holdings = nil
	return hs
}

// gap is largestGap over the producers' acknowledgements so far.
func (l *ledger) gap(through map[int][]int, span window) (time.Duration, int, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return largestGap(l.producerAcks, through, span)
}

func (l *ledger) sending(token string, body []byte) {
	l.mu.Lock()
	l.bodies[token] = sha256.Sum256(body)
	l.mu.Unlock()
}

func (l *ledger) putAcked(id uint64, token string) {
	l.acks.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.putAckedLocked(id, token)
}

// producerAcked is putAcked of a producer's put, acknowledged through
// member via (an index in cluster.members).
func (l *ledger) producerAcked(id uint64, token string, via int) {
	l.acks.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	// The time under the lock: producerAcks stay in time order.
	l.producerAcks = append(l.producerAcks, ack{at: time.Now(), group: groupOf(id), via: via})
	l.putAckedLocked(id, token)
}

// groupOf is the group of a job id: its prefix (meta.JobID; group 0's
// prefix is 0, as a cluster of one group's ids).
func groupOf(id uint64) int { return int(id >> meta.SeqBits) }

func (l *ledger) putAckedLocked(id uint64, token string) {
	if _, ok := l.puts[id]; ok {
		// One id acknowledged for two puts: the second shows a body the
		// first was acknowledged with no longer.
		l.counts.mismatches++
	}
	l.puts[id] = token
	l.counts.puts++
	l.duplicatedLocked(id, token, "acknowledged")
}

// duplicatedLocked notes token's job as id (acknowledged, or seen: how
// the ledger learnt it), and reports whether the token went to another
// id before: one put, two jobs, which no fault excuses (a put retried
// by the server after a failover must not run twice). Fences are put
// again by verifyDo when their connection breaks, and may be two jobs
// legitimately: they are not checked. l.mu must be held.
func (l *ledger) duplicatedLocked(id uint64, token, how string) bool {
	if strings.HasPrefix(token, fencePrefix) {
		return false
	}
	was, known := l.ids[token]
	if !known {
		l.ids[token] = id
		return false
	}
	if was == id {
		return false
	}
	l.counts.duplicated++
	l.noteBadLocked(fmt.Sprintf("token %s: job %d (group %d), and job %d (group %d) %s: one put, two jobs",
		token, was, groupOf(was), id, groupOf(id), how))
	return true
}

// fencePrefix begins the tokens of verify's fences (round.verifyGroup).
const fencePrefix = "fence-"

// tokenOf is the token a workload body begins with.
func tokenOf(body []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(body, []byte("chaos:"))
	if !ok {
		return "", false
	}
	token, _, ok := bytes.Cut(rest, []byte(":"))
	return string(token), ok
}

// seen checks a job reserved or peeked by a command sent at sent: its
// body is one put, byte for byte, and the one its id was acknowledged
// with; a job whose delete was acknowledged before the command was sent
// is resurrected. (A reserve sent before the delete's reply came may have
// been answered before the delete ran, by a leader about to be replaced:
// a double delivery, not a resurrection.) A body whose token went to
// another id is a job duplicated, and one of a put refused is done
// though refused. It reports whether the job was any of those. l.mu
// must be held.
func (l *ledger) seenLocked(id uint64, body []byte, sent time.Time) (bad bool) {
	token, ok := tokenOf(body)
	want, known := l.bodies[token]
	if !ok || !known || sha256.Sum256(body) != want {
		l.counts.mismatches++
		l.noteBadLocked(fmt.Sprintf("job %d (group %d): %.40q is no body put", id, groupOf(id), body))
		bad = true
	} else if acked, ok := l.puts[id]; ok && acked != token {
		l.counts.mismatches++
		l.noteBadLocked(fmt.Sprintf("job %d (group %d): put as %s, seen as %s", id, groupOf(id), acked, token))
		bad = true
	} else if l.duplicatedLocked(id, token, "seen") {
		bad = true
	}
	if answer, ok := l.refused[token]; ok {
		l.counts.refusedDone++
		l.noteBadLocked(fmt.Sprintf("job %d (group %d): its put (token %s) was answered %s, yet it was done", id, groupOf(id), token, answer))
		bad = true
	}
	if at, ok := l.deleted[id]; ok && at.Before(sent) {
		l.counts.resurrected++
		l.noteBadLocked(fmt.Sprintf("job %d (group %d): its delete acknowledged at %s, seen again by a command sent at %s",
			id, groupOf(id), at.Format("15:04:05.000"), sent.Format("15:04:05.000")))
		bad = true
	}
	return bad
}

// putRefused notes token's put answered with a refusal (judge): it did
// not run.
func (l *ledger) putRefused(token, answer string) {
	l.mu.Lock()
	l.refused[token] = answer
	l.mu.Unlock()
}

// wrongReply notes a reply no command may get (judge), what saying the
// command, where it went and the reply.
func (l *ledger) wrongReply(what string) {
	l.mu.Lock()
	l.counts.wrong++
	l.noteBadLocked("wrong reply: " + what)
	l.mu.Unlock()
}

// noteBadLocked keeps what a check found wrong, for the round's report.
func (l *ledger) noteBadLocked(what string) {
	if len(l.badSeen) < 20 {
		l.badSeen = append(l.badSeen, what)
	}
}

func (l *ledger) reservedJob(id uint64, body []byte, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seenLocked(id, body, sent)
	l.reserved[id]++
	if l.reserved[id] > 1 {
		l.counts.doubles++
	}
}

// held notes a holding that ends now: its consumer is about to send the
// delete, release or bury.
func (l *ledger) held(h holding) {
	if h.end.IsZero() {
		h.end = time.Now()
	}
	if byTTR := h.start.Add(ttr * time.Second); byTTR.Before(h.end) {
		h.end = byTTR
	}
	l.mu.Lock()
	l.holdings = append(l.holdings, h)
	l.mu.Unlock()
}

// deleting notes a delete about to be sent: until it is answered on its
// connection, the job may be gone without an acknowledgement.
func (l *ledger) deleting(id uint64) {
	l.mu.Lock()
	l.deletesInDoubt[id]++
	l.mu.Unlock()
}

func (l *ledger) deleteAcked(id uint64) {
	l.mu.Lock()
	l.deleteAnsweredLocked(id)
	l.deleted[id] = time.Now()
	l.counts.deletes++
	l.mu.Unlock()
}

// drained notes a delete of verify's acknowledged (round.drain): as
// deleteAcked, not counted among the workload's deletes.
func (l *ledger) drained(id uint64) {
	l.mu.Lock()
	l.deleteAnsweredLocked(id)
	l.deleted[id] = time.Now()
	l.mu.Unlock()
}

// deleteNotDone notes a delete answered NOT_FOUND on the connection it
// was sent on, which was not dialled again meanwhile: it deleted
// nothing (the job was held by another session, or gone already), so
// it excuses no absence.
func (l *ledger) deleteNotDone(id uint64) {
	l.mu.Lock()
	l.deleteAnsweredLocked(id)
	l.mu.Unlock()
}

// deleteAnsweredLocked takes a delete of id out of doubt. l.mu must be
// held.
func (l *ledger) deleteAnsweredLocked(id uint64) {
	if l.deletesInDoubt[id] > 0 {
		l.deletesInDoubt[id]--
	}
}

// lostLocked are the acknowledged puts of [first, fence) a walk did not
// find, in order, counted: lost, unless a delete of theirs was
// acknowledged or is in doubt (one sent and never answered on its
// connection). l.mu must be held.
func (l *ledger) lostLocked(first, fence uint64, found map[uint64]bool) []uint64 {
	var lost []uint64
	for id := range l.puts {
		if id < first || id >= fence || found[id] || l.deletesInDoubt[id] > 0 {
			continue
		}
		if _, deleted := l.deleted[id]; !deleted {
			lost = append(lost, id)
		}
	}
	l.counts.lost += len(lost)
	slices.Sort(lost)
	return lost
}

// handingBack notes a job its consumer is about to release or bury:
// reserving it again is no double delivery. It is noted before the
// command is sent, because the leader hands the job out again at once,
// before the reply (held until the change commits) reaches the consumer;
// and if the reply never comes, the consumer's connection is gone, which
// hands the job back all the same.
func (l *ledger) handingBack(id uint64) {
	l.mu.Lock()
	l.reserved[id]--
	l.mu.Unlock()
}

func (l *ledger) reservationLost(h holding, member string) {
	l.mu.Lock()
	l.counts.reservationLost++
	l.counts.reservationsLost = append(l.counts.reservationsLost, fmt.Sprintf("job %d of g%d, reserved through %s at %s, NOT_FOUND at %s",
		h.id, h.group, member, h.start.UTC().Format(logClock), time.Now().UTC().Format(logClock)))
	l.mu.Unlock()
}

// logClock is how a lost reservation's times are written: as the members'
// logs stamp their lines.
const logClock = "15:04:05.000"

// workload is the producers and consumers of a round, or the consumers
// of its quiet phase.
type workload struct {
	c      *cluster
	l      *ledger
	quiet  bool // the quiet phase's consumers: they delete, and no more
	stop   atomic.Bool
	wg     sync.WaitGroup
	seq    *atomic.Uint64 // tokens, unique over the rounds
	errors atomic.Int64   // connections lost or refused
	// deletes are its consumers' acknowledged deletes: a round's
	// workload with none stalled.
	deletes atomic.Int64
}

// The clients' source addresses: producers from .100 (one per member and
// group: at most 50), consumers from .160, probes and fences .220, the
// quiet phase's puts .221.
const (
	producerIPs = 100
	consumerIPs = 160
)

var (
	probeIP = []byte{127, 0, 0, 220}
	quietIP = []byte{127, 0, 0, 221}
)

// startWorkload starts, for every member, a producer per group and a
// consumer.
func startWorkload(c *cluster, l *ledger, seq *atomic.Uint64) *workload {
	w := &workload{c: c, l: l, seq: seq}
	for i := range c.members {
		for g := range c.tubes {
			w.wg.Add(1)
			go w.produce(i, g)
		}
		w.wg.Add(1)
		go w.consume(i)
	}
	return w
}

// startQuietConsumers starts a consumer per member that reserves from the
// quiet tubes and deletes what it reserves.
func startQuietConsumers(c *cluster, l *ledger, seq *atomic.Uint64) *workload {
	w := &workload{c: c, l: l, seq: seq, quiet: true}
	for i := range c.members {
		w.wg.Add(1)
		go w.consume(i)
	}
	return w
}

// halt stops the clients and waits for them; their connections are
// closed, so no job they reserved stays reserved.
func (w *workload) halt() {
	w.stop.Store(true)
	w.wg.Wait()
}

// verdict is what a workload client makes of a command's reply (judge).
type verdict int

const (
	// hoped: the reply the command hoped for.
	hoped verdict = iota
	// broken: no reply came (the connection broke, closed or timed
	// out): the command may or may not have run.
	broken
	// refused: the answer of a cluster that cannot run the command now,
	// which did not run it: OUT_OF_MEMORY or INTERNAL_ERROR, as a member
	// answers a command no group leader answered in time (router's
	// failed), DRAINING to a put on a member stopping gracefully.
	refused
	// waited: a reserve's TIMED_OUT or DEADLINE_SOON: no job, nothing done.
	waited
	// notFound: NOT_FOUND to a command by id that needs the job reserved
	// (delete, release, bury, touch): no job of that id the session
	// holds, as after its reservation was lost.
	notFound
	// wrong: any other reply (BAD_FORMAT, UNKNOWN_COMMAND, a reply of
	// another command), or bytes that are no reply: a server bug.
	wrong
)

// closedMidLine is testproc's ProtocolError.Want when the connection
// closed inside a reply line: a member killed while it wrote, no wrong
// reply.
const closedMidLine = "a reply line ending in CRLF before the connection closed"

// judge says what the reply rep (or the error err) to the command cmd is,
// hope being the reply hoped for: its whole line, or the line's first
// words ("INSERTED" hopes for "INSERTED <id>").
func judge(cmd, hope string, rep testproc.Reply, err error) verdict {
	if err != nil {
		var pe *testproc.ProtocolError
		if errors.As(err, &pe) && pe.Want != closedMidLine {
			return wrong // bytes that are no reply
		}
		return broken
	}
	line := string(rep.Line)
	if line == hope || strings.HasPrefix(line, hope+" ") {
		return hoped
	}
	verb, _, _ := strings.Cut(cmd, " ")
	switch line {
	case "OUT_OF_MEMORY", "INTERNAL_ERROR":
		return refused
	case "DRAINING":
		if verb == "put" {
			return refused
		}
	case "TIMED_OUT", "DEADLINE_SOON":
		if verb == "reserve" || verb == "reserve-with-timeout" {
			return waited
		}
	case "NOT_FOUND":
		switch verb {
		case "delete", "release", "bury", "touch":
			return notFound
		}
	}
	return wrong
}

// checked judges the reply rep (or err) to cmd, sent through the member
// via, hoping for hope, and notes a wrong one in l. A reply but the one
// hoped for comes with an error that says it.
func checked(l *ledger, via, cmd, hope string, rep testproc.Reply, err error) (verdict, error) {
	v := judge(cmd, hope, rep, err)
	if v == hoped {
		return v, nil
	}
	if err != nil {
		err = fmt.Errorf("%w (through %s)", err, via)
	} else {
		err = fmt.Errorf("%.60s through %s: %q, hoping for %s", cmd, via, rep.Line, hope)
	}
	if v == wrong {
		l.wrongReply(err.Error())
	}
	return v, err
}

// check is checked of a reply on cl's connection.
func (cl *client) check(cmd, hope string, rep testproc.Reply, err error) verdict {
	v, _ := checked(cl.w.l, cl.w.c.members[cl.home].name, cmd, hope, rep, err)
	return v
}

// sessions numbers the clients' connections over the run.
var sessions atomic.Uint64

// client is one reconnecting client: it starts on its home member, and
// after an error dials any member.
type client struct {
	w       *workload
	local   net.IP
	home    int // the member it dials, and while connected the one it is connected to
	rng     *rand.Rand
	conn    *testproc.Conn
	session uint64   // the connection's number (sessions)
	setup   []string // commands (and their replies) a new connection runs
	// keeping are the jobs a consumer keeps reserved on conn for a while,
	// by the time it deals with each (consume).
	keeping []kept
}

// kept is a job a consumer keeps reserved until a time.
type kept struct {
	h     holding
	until time.Time
}

func (w *workload) newClient(source, home int, setup ...string) *client {
	return &client{w: w, local: net.IPv4(127, 0, 0, byte(source)), home: home,
		rng: rand.New(rand.NewPCG(uint64(source), uint64(time.Now().UnixNano()))), setup: setup}
}

// connect returns a connection, dialling one if there is none.
func (cl *client) connect() *testproc.Conn {
	for cl.conn == nil && !cl.w.stop.Load() {
		m := cl.w.c.members[cl.home]
		d := testproc.Dialer{Timeout: time.Second, Local: cl.local, ReplyTimeout: replyTimeout}
		conn, err := d.Dial(m.clientAddr())
		for i := 0; err == nil && i < len(cl.setup); i += 2 {
			rep, doErr := conn.Do(cl.setup[i], nil)
			_, err = checked(cl.w.l, m.name, cl.setup[i], cl.setup[i+1], rep, doErr)
		}
		if err != nil {
			if conn != nil {
				conn.Close()
			}
			cl.fail()
			time.Sleep(20 * time.Millisecond)
			continue
		}
		cl.conn, cl.session = conn, sessions.Add(1)
	}
	return cl.conn
}

// fail drops the connection, and with it the jobs kept on it; the next
// goes to any member.
func (cl *client) fail() {
	cl.letGo(true)
	if cl.conn != nil {
		cl.conn.Close()
		cl.conn = nil
	}
	cl.w.errors.Add(1)
	cl.home = cl.rng.IntN(len(cl.w.c.members))
}

func (cl *client) close() {
	cl.letGo(false)
	if cl.conn != nil {
		cl.conn.Close()
	}
}

// letGo ends the holdings of the jobs kept, as the connection is about to
// close (broken: it failed): the server hands them back once it sees the
// close.
func (cl *client) letGo(broken bool) {
	now := time.Now()
	for _, k := range cl.keeping {
		k.h.end = now
		if broken {
			k.h.end = cl.brokenAt(k.h)
		}
		cl.w.l.held(k.h)
	}
	cl.keeping = nil
}

// brokenAt is when h ended, its connection found broken now: when the
// member the connection went through was killed, if it was while h
// lasted, since that ended the session and the job's leader handed it
// out again (the client learns so only at its next command); else now.
func (cl *client) brokenAt(h holding) time.Time {
	now := time.Now()
	if k, ok := cl.w.c.members[cl.home].killedWithin(h.start, now); ok {
		return k
	}
	return now
}

// body is a random body that begins with its token; line ends included.
func (cl *client) body(token string) []byte {
	b := fmt.Appendf(nil, "chaos:%s:", token)
	n := cl.rng.IntN(2048)
	for range n {
		b = append(b, byte(cl.rng.UintN(256)))
	}
	if cl.rng.IntN(4) == 0 {
		b = append(b, "\r\nput 0 0 1 1\r\n"...)
	}
	return b
}

// produce puts into group g's tube, starting on member i.
func (w *workload) produce(i, g int) {
	defer w.wg.Done()
	own := w.c.tubes[g]
	cl := w.newClient(producerIPs+i*len(w.c.tubes)+g, i, "use "+own, "USING "+own)
	defer cl.close()
	every := time.Second * time.Duration(len(w.c.members)*len(w.c.tubes)) / putsPerSecond
	for tick := time.NewTicker(every); !w.stop.Load(); <-tick.C {
		conn := cl.connect()
		if conn == nil {
			return
		}
		// The puts are written and read without Do, which sets each
		// exchange's deadline: without this one, the deadline Do set for
		// the connection's last "use" ended every producer's connection
		// replyTimeout after it was dialled.
		_ = conn.SetDeadline(time.Now().Add(replyTimeout))
		// Now and then several puts in one write, which a member that
		// does not lead has in flight to the leader at once.
		n := 1
		if cl.rng.IntN(pipelinedOneIn) == 0 {
			n = 2 + cl.rng.IntN(4)
		}
		tokens := make([]string, n)
		for k := range tokens {
			tokens[k] = strconv.FormatUint(w.seq.Add(1), 10)
			body := cl.body(tokens[k])
			w.l.sending(tokens[k], body)
			delay := 0
			if cl.rng.IntN(delayedOneIn) == 0 {
				delay = 1
			}
			conn.WriteString(fmt.Sprintf("put %d %d %d %d\r\n", cl.rng.IntN(3), delay, ttr, len(body)))
			conn.Write(body)
			conn.WriteString("\r\n")
		}
		if err := conn.Flush(); err != nil {
			cl.fail()
			continue
		}
		refusals := 0
		for _, token := range tokens {
			r, err := conn.ReadReply(false)
			v := cl.check("put", "INSERTED", r, err)
			if v == hoped && r.Kind == testproc.ReplyInserted {
				w.l.producerAcked(r.N, token, cl.home)
				continue
			}
			if v == refused {
				// Not done; the puts after it are answered still.
				w.l.putRefused(token, string(r.Line))
				refusals++
				continue
			}
			cl.fail() // this put and those after it may or may not have been done
			refusals = 0
			break
		}
		if refusals > 0 {
			cl.fail() // another member may have the group's leader
		}
	}
}

// What a consumer does with a job it reserved, out of every hundred:
// most are deleted; some released (now or after a second) or buried, and
// the buried kicked back now and then, so that every record the cluster
// replicates, and the digest's buried and delay, see some traffic. The
// quiet phase's consumers only delete.
const (
	releasePercent = 8
	buryPercent    = 4
	kickEvery      = 50 // reserves between two kicks
)

// A consumer keeps one job in keepOneIn reserved for up to keepFor (at
// most keepMost at once), reserving others meanwhile, before it deals
// with it: holdings long enough for a handover of the job's group to
// fall inside some, which the double-holding check must then excuse, and
// for a job handed out again while held to show. The quiet phase's
// consumers keep none.
const (
	keepOneIn = 10
	keepFor   = 2 * time.Second
	keepMost  = 4
)

func (w *workload) consume(i int) {
	defer w.wg.Done()
	// Watching every group's tube: with several groups, every reserve is
	// one across groups.
	tubes := w.c.tubes
	if w.quiet {
		tubes = w.c.quietTubes
	}
	setup := []string{"use " + tube, "USING " + tube}
	for k, t := range tubes {
		setup = append(setup, "watch "+t, fmt.Sprintf("WATCHING %d", k+2))
	}
	setup = append(setup, "ignore default", fmt.Sprintf("WATCHING %d", len(tubes)))
	cl := w.newClient(consumerIPs+i, i, setup...)
	defer cl.close()
	// The quiet phase's reserves do not wait: each is a take from the
	// ready jobs (docs/design/shards.md 6.2), never an offer.
	reserve := "reserve-with-timeout 1"
	if w.quiet {
		reserve = "reserve-with-timeout 0"
	}
	for n := 1; !w.stop.Load(); n++ {
		conn := cl.connect()
		if conn == nil {
			return
		}
		if len(cl.keeping) > 0 && !time.Now().Before(cl.keeping[0].until) {
			h := cl.keeping[0].h
			cl.keeping = cl.keeping[1:]
			w.dealWith(cl, conn, h)
			continue
		}
		if n%kickEvery == 0 && !w.quiet {
			if r, err := conn.Do("kick 1000", nil); cl.check("kick 1000", "KICKED", r, err) != hoped {
				cl.fail()
				continue
			}
		}
		sent := time.Now()
		r, err := conn.Do(reserve, nil)
		switch v := cl.check(reserve, "RESERVED", r, err); {
		case v == waited:
			if w.quiet {
				time.Sleep(20 * time.Millisecond)
			}
			continue
		case v != hoped || r.Kind != testproc.ReplyReserved:
			cl.fail()
			continue
		}
		h := holding{id: r.N, group: groupOf(r.N), session: cl.session, sent: sent, start: time.Now()}
		w.l.reservedJob(r.N, r.Body, sent)
		if !w.quiet && len(cl.keeping) < keepMost && cl.rng.IntN(keepOneIn) == 0 {
			until := h.start.Add(time.Duration(cl.rng.Int64N(int64(keepFor))))
			cl.keeping = append(cl.keeping, kept{h, until})
			slices.SortFunc(cl.keeping, func(a, b kept) int { return a.until.Compare(b.until) })
			continue
		}
		w.dealWith(cl, conn, h)
	}
}

// dealWith ends the holding h on cl's connection conn: mostly a delete,
// now and then a release or a bury; only deletes in the quiet phase.
func (w *workload) dealWith(cl *client, conn *testproc.Conn, h holding) {
	roll := cl.rng.IntN(100)
	if w.quiet {
		roll = 100
	}
	h.end = time.Now()
	var cmd, hope string
	deleting := false
	switch id := h.id; {
	case roll < releasePercent:
		w.l.handingBack(id)
		cmd, hope = fmt.Sprintf("release %d %d %d", id, cl.rng.IntN(3), cl.rng.IntN(2)), "RELEASED"
	case roll < releasePercent+buryPercent:
		w.l.handingBack(id)
		cmd, hope = fmt.Sprintf("bury %d %d", id, cl.rng.IntN(3)), "BURIED"
	default:
		w.l.deleting(id)
		cmd, hope, deleting = fmt.Sprint("delete ", id), "DELETED", true
	}
	rep, err := conn.Do(cmd, nil)
	v := cl.check(cmd, hope, rep, err)
	if deleting {
		switch v {
		case hoped:
			w.l.deleteAcked(h.id)
			w.deletes.Add(1)
		case notFound, refused:
			// Answered on the connection it went on: it deleted nothing.
			w.l.deleteNotDone(h.id)
		}
	}
	switch v {
	case hoped:
		w.l.held(h)
	case notFound:
		w.l.held(h)
		// The reservation is gone while the connection lives: its
		// leader was lost (reservations are the leader's), and the
		// session, which lives where its client connected, went on
		// with the next one; the job was ready again there and
		// another consumer took it, as after a TTR. Counted, for
		// the report.
		w.l.reservationLost(h, w.c.members[cl.home].name)
		cl.fail()
	default:
		if at := cl.brokenAt(h); at.Before(h.end) {
			h.end = at
		}
		w.l.held(h)
		cl.fail()
	}
}

// quietJobs is how many jobs the quiet phase puts into each group's quiet
// tube, with priorities drawn from [0, quietPris): ties, ordered by id,
// among them.
const (
	quietJobs = 40
	quietPris = 8
)

// quietWait bounds the quiet phase's consumption.
const quietWait = 60 * time.Second

// quietPhase is the round's first phase (doc.go, "Order within a group"):
// with no consumer running, quiet jobs of random priorities are put into
// each group's quiet tube, through the members in turn; then a consumer
// per member reserves them, across the groups, and deletes each, until
// every one is deleted; then the order check (ledger.checkQuiet).
func (r *round) quietPhase() {
	r.t.Helper()
	rng := rand.New(rand.NewPCG(r.seq.Load(), uint64(time.Now().UnixNano())))
	r.l.mu.Lock()
	clear(r.l.quiet)
	r.l.mu.Unlock()
	for g, qt := range r.c.quietTubes {
		m := r.c.members[g%len(r.c.members)]
		conn, err := testproc.Dialer{Timeout: time.Second, Local: quietIP, ReplyTimeout: 30 * time.Second}.Dial(m.clientAddr())
		if err != nil {
			r.t.Fatal(err)
		}
		if err := conn.ExpectLine("use "+qt, "USING "+qt); err != nil {
			r.t.Fatal(err)
		}
		tokens := make([]string, quietJobs)
		pris := make([]uint32, quietJobs)
		for k := range tokens {
			tokens[k] = "quiet-" + strconv.FormatUint(r.seq.Add(1), 10)
			pris[k] = rng.Uint32N(quietPris)
			body := []byte("chaos:" + tokens[k] + ":")
			r.l.sending(tokens[k], body)
			conn.WriteString(fmt.Sprintf("put %d 0 %d %d\r\n", pris[k], ttr, len(body)))
			conn.Write(body)
			conn.WriteString("\r\n")
		}
		if err := conn.Flush(); err != nil {
			r.t.Fatal(err)
		}
		for k, token := range tokens {
			rep, err := conn.ReadReply(false)
			if err != nil || rep.Kind != testproc.ReplyInserted {
				r.t.Fatalf("a quiet put into %s through %s: %q (%v)", qt, m.name, rep.Line, err)
			}
			r.l.putAcked(rep.N, token)
			r.l.mu.Lock()
			r.l.quiet[rep.N] = pris[k]
			r.l.mu.Unlock()
		}
		conn.Close()
	}
	w := startQuietConsumers(r.c, r.l, r.seq)
	deadline := time.Now().Add(quietWait)
	for !r.l.quietDone() {
		if time.Now().After(deadline) {
			w.halt()
			r.t.Fatalf("the quiet phase's jobs were not all deleted within %v:\n%s", quietWait, r.describeQuiet())
		}
		r.c.checkAlive()
		time.Sleep(10 * time.Millisecond)
	}
	w.halt()
	r.l.checkQuiet(r.t, w.errors.Load())
}

// describeQuiet says, of each quiet job whose delete was not
// acknowledged, what the clients saw of it and what stats-job answers.
func (r *round) describeQuiet() string {
	r.l.mu.Lock()
	var ids []uint64
	for id := range r.l.quiet {
		if _, ok := r.l.deleted[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var lines []string
	for _, id := range ids {
		line := fmt.Sprintf("job %d (group %d): reserved %d times, deletes in doubt %d", id, groupOf(id), r.l.reserved[id], r.l.deletesInDoubt[id])
		for _, h := range r.l.holdings {
			if h.id == id {
				line += fmt.Sprintf("; held by session %d from %s to %s", h.session, h.start.Format(stamp), h.end.Format(stamp))
			}
		}
		lines = append(lines, line)
	}
	r.l.mu.Unlock()
	for i, id := range ids {
		for _, m := range r.c.members {
			if !m.up() {
				continue
			}
			conn, err := testproc.Dialer{Timeout: time.Second, Local: quietIP, ReplyTimeout: 5 * time.Second}.Dial(m.clientAddr())
			if err != nil {
				continue
			}
			rep, err := conn.Do(fmt.Sprint("stats-job ", id), nil)
			conn.Close()
			if err == nil {
				lines[i] += fmt.Sprintf("\n\tstats-job through %s: %s %s", m.name, rep.Line, strings.ReplaceAll(string(rep.Body), "\n", " "))
			}
		}
	}
	return strings.Join(lines, "\n")
}

// quietDone reports whether every quiet job's delete was acknowledged.
func (l *ledger) quietDone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.quiet {
		if _, ok := l.deleted[id]; !ok {
			return false
		}
	}
	return true
}

// checkQuiet runs the order check on the quiet jobs' first hand-outs,
// and counts its figures; a violation fails the test. If a consumer's
// connection failed (errors), a reply may have been lost and a job first
// handed out unseen: the phase is counted as disturbed, not checked.
func (l *ledger) checkQuiet(t testing.TB, errors int64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors > 0 {
		l.counts.quietDisturbed++
		t.Logf("the quiet phase saw %d connection errors: its order is not checked", errors)
		return
	}
	first := map[uint64]handout{}
	for _, h := range l.holdings {
		pri, isQuiet := l.quiet[h.id]
		if f, ok := first[h.id]; isQuiet && (!ok || h.start.Before(f.start)) {
			first[h.id] = handout{holding: h, key: jobKey{pri, h.id}}
		}
	}
	f := checkOrder(slices.Collect(maps.Values(first)))
	l.counts.orderChecked += f.checked
	l.counts.orderBad += len(f.violations)
	l.counts.crossInversions += f.crossInversions
	for _, v := range f.violations[:min(len(f.violations), 20)] {
		t.Errorf("order within a group broken: %s", v)
	}
}
