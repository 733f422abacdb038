//go:build linux

package clusterfault

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// tube is the workload's tube with one group; with several, tubes holds
// one tube per group (cluster.tubes), the first of them this one when it
// lives in group 0.
const tube = "chaos"

// replyTimeout bounds each exchange of a workload client: a put proxied
// to a stopped leader waits for the proxy to give up (an election
// timeout) or for this.
const replyTimeout = 3 * time.Second

// putInterval paces each producer, so the ledger the checks walk grows
// by a few thousand jobs a round, not by what the machine can take.
const putInterval = 10 * time.Millisecond

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
	// deleteSent: ids a delete was sent for; deleted: acknowledged.
	deleteSent, deleted map[uint64]bool // guarded by mu
	// reserved: how often each id was reserved.
	reserved map[uint64]int // guarded by mu
	counts   counts         // guarded by mu
	// acks counts acknowledged puts, for the rounds to wait on.
	acks atomic.Int64
}

// counts are the figures of a round, or of all of them.
type counts struct {
	puts, deletes, lost, resurrected, mismatches, doubles, reservationLost int
}

func (a *counts) add(b counts) {
	a.puts += b.puts
	a.deletes += b.deletes
	a.lost += b.lost
	a.resurrected += b.resurrected
	a.mismatches += b.mismatches
	a.doubles += b.doubles
	a.reservationLost += b.reservationLost
}

func newLedger() *ledger {
	return &ledger{bodies: map[string][sha256.Size]byte{}, puts: map[uint64]string{},
		deleteSent: map[uint64]bool{}, deleted: map[uint64]bool{}, reserved: map[uint64]int{}}
}

// take returns the counts since the last take.
func (l *ledger) take() counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counts
	l.counts = counts{}
	return c
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
	if _, ok := l.puts[id]; ok {
		// One id acknowledged for two puts: the second shows a body the
		// first was acknowledged with no longer.
		l.counts.mismatches++
	}
	l.puts[id] = token
	l.counts.puts++
}

// tokenOf is the token a workload body begins with.
func tokenOf(body []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(body, []byte("chaos:"))
	if !ok {
		return "", false
	}
	token, _, ok := bytes.Cut(rest, []byte(":"))
	return string(token), ok
}

// seen checks a job reserved or peeked: its body is one put, byte for
// byte, and the one its id was acknowledged with; a job whose delete was
// acknowledged is resurrected. It reports whether the job was resurrected
// or mismatched. l.mu must be held.
func (l *ledger) seenLocked(id uint64, body []byte) (bad bool) {
	token, ok := tokenOf(body)
	want, known := l.bodies[token]
	if !ok || !known || sha256.Sum256(body) != want {
		l.counts.mismatches++
		bad = true
	} else if acked, ok := l.puts[id]; ok && acked != token {
		l.counts.mismatches++
		bad = true
	}
	if l.deleted[id] {
		l.counts.resurrected++
		bad = true
	}
	return bad
}

func (l *ledger) reservedJob(id uint64, body []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seenLocked(id, body)
	l.reserved[id]++
	if l.reserved[id] > 1 {
		l.counts.doubles++
	}
}

// deleting notes a delete about to be sent: from then on the job may be
// gone without an acknowledgement.
func (l *ledger) deleting(id uint64) {
	l.mu.Lock()
	l.deleteSent[id] = true
	l.mu.Unlock()
}

func (l *ledger) deleteAcked(id uint64) {
	l.mu.Lock()
	l.deleted[id] = true
	l.counts.deletes++
	l.mu.Unlock()
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

func (l *ledger) reservationLost() {
	l.mu.Lock()
	l.counts.reservationLost++
	l.mu.Unlock()
}

// workload is the producers and consumers of a round.
type workload struct {
	c      *cluster
	l      *ledger
	stop   atomic.Bool
	wg     sync.WaitGroup
	seq    *atomic.Uint64 // tokens, unique over the rounds
	errors atomic.Int64   // connections lost or refused
}

// startWorkload starts a producer and a consumer per member.
func startWorkload(c *cluster, l *ledger, seq *atomic.Uint64) *workload {
	w := &workload{c: c, l: l, seq: seq}
	for i := range c.members {
		w.wg.Add(2)
		go w.produce(i)
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

// client is one reconnecting client: it starts on its home member, and
// after an error dials any member.
type client struct {
	w     *workload
	local net.IP
	home  int
	rng   *rand.Rand
	conn  *testproc.Conn
	setup []string // commands (and their replies) a new connection runs
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
			err = conn.ExpectLine(cl.setup[i], cl.setup[i+1])
		}
		if err != nil {
			if conn != nil {
				conn.Close()
			}
			cl.fail()
			time.Sleep(20 * time.Millisecond)
			continue
		}
		cl.conn = conn
	}
	return cl.conn
}

// fail drops the connection; the next goes to any member.
func (cl *client) fail() {
	if cl.conn != nil {
		cl.conn.Close()
		cl.conn = nil
	}
	cl.w.errors.Add(1)
	cl.home = cl.rng.IntN(len(cl.w.c.members))
}

func (cl *client) close() {
	if cl.conn != nil {
		cl.conn.Close()
	}
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

func (w *workload) produce(i int) {
	defer w.wg.Done()
	own := w.c.tubes[i%len(w.c.tubes)] // each producer's group, with several
	cl := w.newClient(100+i, i, "use "+own, "USING "+own)
	defer cl.close()
	for tick := time.NewTicker(putInterval); !w.stop.Load(); <-tick.C {
		conn := cl.connect()
		if conn == nil {
			return
		}
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
			conn.WriteString(fmt.Sprintf("put %d %d 60 %d\r\n", cl.rng.IntN(3), delay, len(body)))
			conn.Write(body)
			conn.WriteString("\r\n")
		}
		if err := conn.Flush(); err != nil {
			cl.fail()
			continue
		}
		for _, token := range tokens {
			r, err := conn.ReadReply(false)
			if err != nil || r.Kind != testproc.ReplyInserted {
				cl.fail() // this put and those after it may or may not have been done
				break
			}
			w.l.putAcked(r.N, token)
		}
	}
}

// What a consumer does with a job it reserved, out of every hundred:
// most are deleted; some released (now or after a second) or buried, and
// the buried kicked back now and then, so that every record the cluster
// replicates, and the digest's buried and delay, see some traffic.
const (
	releasePercent = 8
	buryPercent    = 4
	kickEvery      = 50 // reserves between two kicks
)

func (w *workload) consume(i int) {
	defer w.wg.Done()
	// Watching every group's tube: with several groups, every reserve is
	// one across groups.
	setup := []string{"use " + tube, "USING " + tube}
	for k, t := range w.c.tubes {
		setup = append(setup, "watch "+t, fmt.Sprintf("WATCHING %d", k+2))
	}
	setup = append(setup, "ignore default", fmt.Sprintf("WATCHING %d", len(w.c.tubes)))
	cl := w.newClient(110+i, i, setup...)
	defer cl.close()
	for n := 1; !w.stop.Load(); n++ {
		conn := cl.connect()
		if conn == nil {
			return
		}
		if n%kickEvery == 0 {
			if r, err := conn.Do("kick 1000", nil); err != nil || !strings.HasPrefix(string(r.Line), "KICKED ") {
				cl.fail()
				continue
			}
		}
		r, err := conn.Do("reserve-with-timeout 1", nil)
		if err != nil {
			cl.fail()
			continue
		}
		switch r.Kind {
		case testproc.ReplyTimedOut, testproc.ReplyDeadlineSoon:
			continue
		case testproc.ReplyReserved:
		default:
			cl.fail()
			continue
		}
		w.l.reservedJob(r.N, r.Body)
		switch roll := cl.rng.IntN(100); {
		case roll < releasePercent:
			w.l.handingBack(r.N)
			err = conn.ExpectLine(fmt.Sprintf("release %d %d %d", r.N, cl.rng.IntN(3), cl.rng.IntN(2)), "RELEASED")
		case roll < releasePercent+buryPercent:
			w.l.handingBack(r.N)
			err = conn.ExpectLine(fmt.Sprintf("bury %d %d", r.N, cl.rng.IntN(3)), "BURIED")
		default:
			w.l.deleting(r.N)
			err = conn.ExpectLine(fmt.Sprint("delete ", r.N), "DELETED")
			if err == nil {
				w.l.deleteAcked(r.N)
			}
		}
		switch {
		case err == nil:
		case strings.Contains(err.Error(), `"NOT_FOUND`):
			// The reservation is gone while the connection lives: its
			// leader was lost (reservations are the leader's), and the
			// session, which lives where its client connected, went on
			// with the next one; the job was ready again there and
			// another consumer took it, as after a TTR. Counted, for
			// the report.
			w.l.reservationLost()
			cl.fail()
		default:
			cl.fail()
		}
	}
}
