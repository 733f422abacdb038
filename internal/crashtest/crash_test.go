package crashtest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"

	"github.com/sproutmq/sprout/internal/testproc"
)

const (
	producers = 8
	consumers = 4
	// segmentSize is small so rounds rotate, preallocate and compact many
	// segments, and get killed in the middle of that too.
	segmentSize = "65536"
	// connDeadline bounds each traffic connection; the server is killed
	// long before.
	connDeadline = 10 * time.Second
)

// roundFsync is each round's -f. The -f 0 rounds come first. The -f 50
// round is checked just as strictly: -f 50 gives up durability against a
// machine crash (its tail may not be fsynced), but a reply is still only
// sent once its change has been written to the kernel, and SIGKILL ends the
// process, not the kernel, so nothing acknowledged may be lost. A power cut
// cannot be simulated here.
var roundFsync = []string{"0", "0", "0", "0", "0", "0", "50"}

// job is what a producer was told was inserted.
type job struct {
	tube string
	body []byte
}

// ledger is every reply the clients received, over all rounds.
type ledger struct {
	mu       sync.Mutex
	inserted map[uint64]job // guarded by mu: INSERTED received
	// shown holds the bodies of jobs a consumer reserved: a job is only
	// handed out once its put is durable, so these must survive as well,
	// even if the producer's INSERTED was lost to the kill.
	shown map[uint64][]byte // guarded by mu
	// deleted: DELETED received, or a restart found that a delete the kill
	// left unanswered had happened; guarded by mu.
	deleted map[uint64]bool
	// buried: BURIED received, or a restart found the job buried after a
	// bury the kill left unanswered (buried jobs are never kicked); guarded
	// by mu.
	buried map[uint64]bool
	// doubt maps a job to the delete or bury sent for it and not yet
	// answered: it may or may not have happened. Only that command's own
	// reply clears it: a consumer's RELEASED may arrive after the job has
	// already been handed to another consumer, which may have sent a
	// delete (the release goes to a waiting reserve at once, and RESERVED
	// waits only for the job's put, not for the release, to be durable).
	// After a kill, the next restart finds out which unanswered commands
	// happened (verify). Guarded by mu.
	doubt    map[uint64]string
	maxSeen  uint64   // guarded by mu: highest id seen at all, RESERVED included
	errs     []string // guarded by mu: violations seen by the clients
	released int      // guarded by mu: RELEASED received
	// history is what the clients did and heard about each job, by round,
	// for failure reports (describeLocked); guarded by mu.
	history map[uint64][]string
	// lost are the jobs the latest verify found missing; guarded by mu.
	lost []uint64

	// Figures for the report, guarded by mu: jobs found as expected, summed
	// over the restarts, those only a consumer had heard of among them, and
	// repairs the restarts logged.
	verifiedPresent, verifiedGone, verifiedShown int
	tornTails, unfinishedSegments                int
	// unanswered deletes and buries the kills left, by whether the next
	// restart found they had happened; guarded by mu.
	doubtsHappened, doubtsNot int
}

func newLedger() *ledger {
	return &ledger{inserted: make(map[uint64]job), shown: make(map[uint64][]byte), deleted: make(map[uint64]bool),
		buried: make(map[uint64]bool), doubt: make(map[uint64]string), history: make(map[uint64][]string)}
}

// noteStart counts what a restart repaired, from the server's log.
func (l *ledger) noteStart(output string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tornTails += strings.Count(output, "cutting off a torn record")
	l.unfinishedSegments += strings.Count(output, "preallocation was cut short")
}

// ack notes a reply acknowledging a change to job id.
func (l *ledger) ack(id uint64) {
	l.maxSeen = max(l.maxSeen, id)
}

// answered notes the reply to a delete or bury (DELETED or BURIED): the
// job is in set (l.deleted or l.buried), beyond doubt.
func (l *ledger) answered(set map[uint64]bool, id uint64, round, consumer int, reply string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	set[id] = true
	l.ack(id)
	delete(l.doubt, id)
	l.noteLocked(id, round, fmt.Sprintf("%s to consumer %d", reply, consumer))
}

// gotReleased notes a RELEASED. It leaves any doubt alone: by now another
// consumer may hold the job and have sent a delete (see doubt).
func (l *ledger) gotReleased(id uint64, round, consumer int, delay time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released++
	l.ack(id)
	l.noteLocked(id, round, fmt.Sprintf("RELEASED (delay %v) to consumer %d", delay, consumer))
}

// sent notes a delete or bury about to be sent by consumer.
func (l *ledger) sent(id uint64, round, consumer int, cmd string) {
	l.mu.Lock()
	l.doubt[id] = cmd
	l.noteLocked(id, round, fmt.Sprintf("%s sent by consumer %d", cmd, consumer))
	l.mu.Unlock()
}

func (l *ledger) violation(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
}

// TestCrashRecovery kills the server with SIGKILL at a random moment while
// 8 producers and 4 consumers work, restarts it on the same directory, and
// checks over the protocol that every acknowledged change survived:
//
//   - every job whose INSERTED was received and whose DELETED was not is
//     there (peek) with its exact body, in its tube, and buried if its
//     BURIED was received (stats-job);
//   - so is every job a consumer reserved, even if its producer's INSERTED
//     was lost: jobs are handed out only once their put is durable;
//   - no job whose DELETED was received came back (peek: NOT_FOUND);
//   - the next id is above every id in any reply, RESERVED included.
//
// A delete or bury the kill left unanswered may or may not have happened:
// the restart tells which (a deleted job is gone, a buried one buried), and
// from then on the job is held to that, like one whose reply arrived.
//
// Rounds continue on the same directory; a final restart checks the last
// round and stops the server with SIGTERM.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills servers for several seconds")
	}
	bin := testproc.SproutBinary(t)
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	led := newLedger()
	began := time.Now()

	// snaps[r] links the segments as round r's kill left them: what
	// restart r+1 replayed.
	snaps := t.TempDir()
	var outputs []string // each round's server output
	for round, fsync := range roundFsync {
		s := testproc.Start(t, bin, "-b", dir, "-f", fsync, "-s", segmentSize)
		if round > 0 {
			led.verify(t, s.Addr(), round)
			led.noteStart(s.Output())
			led.explainLost(t, snaps, outputs)
		}
		killAfter := time.Duration(100+rng.IntN(700)) * time.Millisecond
		led.traffic(t, s, rng.Uint64(), round, killAfter)
		outputs = append(outputs, s.Output())
		if err := snapshot(dir, filepath.Join(snaps, strconv.Itoa(round))); err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			t.Fatalf("round %d failed (server output:\n%s)", round, tail(s.Output()))
		}
	}
	s := testproc.Start(t, bin, "-b", dir, "-f", "0", "-s", segmentSize)
	led.verify(t, s.Addr(), len(roundFsync))
	led.noteStart(s.Output())
	led.explainLost(t, snaps, outputs)
	stop(t, s)

	led.mu.Lock()
	defer led.mu.Unlock()
	t.Logf("%d rounds in %v: %d puts, %d deletes, %d buries, %d releases acknowledged; "+
		"verified %d jobs present (%d known only from RESERVED) and %d deleted jobs gone; highest id seen %d; "+
		"restarts cut %d torn tails and removed %d half-made segments, and found %d deletes or buries the kills left "+
		"unanswered had happened and %d had not",
		len(roundFsync), time.Since(began).Round(time.Millisecond), len(led.inserted), len(led.deleted),
		len(led.buried), led.released, led.verifiedPresent, led.verifiedShown, led.verifiedGone, led.maxSeen,
		led.tornTails, led.unfinishedSegments, led.doubtsHappened, led.doubtsNot)
}

// traffic runs producers and consumers against s until it is killed,
// killAfter from now.
func (l *ledger) traffic(t *testing.T, s *testproc.Process, seed uint64, round int, killAfter time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	tubes := []string{"crash-a", "crash-b"}
	dialed := make(chan struct{}, producers+consumers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := l.dial(s.Addr(), dialed)
			if c == nil {
				return
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			tube := beanstalk.NewTube(c, tubes[p%len(tubes)])
			for n := 0; ; n++ {
				body := fmt.Appendf(nil, "round %d producer %d job %d|", round, p, n)
				for range rng.IntN(2000) {
					body = append(body, byte(rng.Uint32())) // any byte, "\r\n" included
				}
				var delay time.Duration
				if rng.IntN(20) == 0 {
					delay = time.Second
				}
				id, err := tube.Put(body, uint32(rng.IntN(1000)), delay, time.Minute)
				if err != nil {
					l.clientError(err, "put")
					return
				}
				l.mu.Lock()
				l.inserted[id] = job{tube.Name, body}
				l.ack(id)
				l.noteLocked(id, round, "INSERTED")
				l.mu.Unlock()
			}
		}()
	}
	for k := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := l.dial(s.Addr(), dialed)
			if c == nil {
				return
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(seed, uint64(100+k)))
			set := beanstalk.NewTubeSet(c, tubes...)
			for {
				id, body, err := set.Reserve(time.Second)
				if errors.Is(err, beanstalk.ErrTimeout) {
					continue
				}
				if err != nil {
					l.clientError(err, "reserve")
					return
				}
				l.checkReserved(id, body, round, k)
				switch n := rng.IntN(10); {
				case n < 8:
					l.sent(id, round, k, "delete")
					if err := c.Delete(id); err != nil {
						l.clientError(err, "delete")
						return
					}
					l.answered(l.deleted, id, round, k, "DELETED")
				case n < 9:
					delay := time.Duration(rng.IntN(2)) * time.Second
					if err := c.Release(id, uint32(rng.IntN(1000)), delay); err != nil {
						l.clientError(err, "release")
						return
					}
					l.gotReleased(id, round, k, delay)
				default:
					l.sent(id, round, k, "bury")
					if err := c.Bury(id, uint32(rng.IntN(1000))); err != nil {
						l.clientError(err, "bury")
						return
					}
					l.answered(l.buried, id, round, k, "BURIED")
				}
			}
		}()
	}
	// Kill only once every connection is up, so each round has traffic.
	for range producers + consumers {
		<-dialed
	}
	time.Sleep(killAfter)
	s.Kill()
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		t.Errorf("round %d: %s", round, e)
	}
	l.errs = nil
	t.Logf("round %d (-f %s): killed after %v; so far %d puts and %d deletes acknowledged",
		round, roundFsync[round], killAfter, len(l.inserted), len(l.deleted))
}

// dial connects a client; it signals dialed either way.
func (l *ledger) dial(addr string, dialed chan<- struct{}) *beanstalk.Conn {
	defer func() { dialed <- struct{}{} }()
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		l.violation("dial: %v", err)
		return nil
	}
	_ = nc.SetDeadline(time.Now().Add(connDeadline))
	return beanstalk.NewConn(nc)
}

// clientError records a reply that is wrong whatever the timing. Anything
// else (the connection dropped by the kill) just ends the client.
func (l *ledger) clientError(err error, op string) {
	var ce beanstalk.ConnError
	if errors.As(err, &ce) && !isNetError(ce.Err) {
		l.violation("%s: unexpected reply: %v", op, err)
	}
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || strings.Contains(err.Error(), "EOF") ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe")
}

// checkReserved: a reserved job's body is the one its INSERTED was for,
// and a deleted job is never handed out again.
func (l *ledger) checkReserved(id uint64, body []byte, round, consumer int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maxSeen = max(l.maxSeen, id)
	l.noteLocked(id, round, fmt.Sprintf("RESERVED by consumer %d", consumer))
	if _, ok := l.shown[id]; !ok {
		l.shown[id] = bytes.Clone(body)
	}
	if j, ok := l.inserted[id]; ok && !bytes.Equal(j.body, body) {
		if len(l.errs) < 20 {
			l.errs = append(l.errs, fmt.Sprintf("reserved job %d with body %.40q, inserted with %.40q", id, body, j.body))
		}
	}
	if l.deleted[id] {
		if len(l.errs) < 20 {
			l.errs = append(l.errs, fmt.Sprintf("reserved job %d, which was deleted", id))
		}
	}
}

// verify checks a freshly restarted server against the ledger.
func (l *ledger) verify(t *testing.T, addr string, round int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := dial(t, addr)
	var live, gone []uint64
	for id := range l.inserted {
		if !l.deleted[id] {
			live = append(live, id) // doubtful ones too: if present, they must be intact
		}
	}
	for id := range l.shown {
		if _, ok := l.inserted[id]; !ok && !l.deleted[id] {
			live = append(live, id)
		}
	}
	for id := range l.deleted {
		gone = append(gone, id)
	}
	slices.Sort(live)
	slices.Sort(gone)

	bad := 0
	l.lost = l.lost[:0]
	report := func(format string, args ...any) {
		if bad++; bad <= 20 {
			t.Errorf("after restart %d: "+format, append([]any{round}, args...)...)
		}
	}
	const batch = 500
	for i := 0; i < len(live); i += batch {
		ids := live[i:min(i+batch, len(live))]
		var cmds []string
		for _, id := range ids {
			cmds = append(cmds, fmt.Sprintf("peek %d", id), fmt.Sprintf("stats-job %d", id))
		}
		replies := c.pipeline(cmds)
		for k, id := range ids {
			peek, stats := replies[2*k], replies[2*k+1]
			want, acked := l.inserted[id]
			if !acked {
				want = job{body: l.shown[id]} // its tube is unknown
			}
			// The server has restarted: a delete or bury the kill left
			// unanswered has happened or not, for good.
			doubt := l.doubt[id]
			delete(l.doubt, id)
			if doubt != "" {
				happened := peek.Kind == testproc.ReplyNotFound && doubt == "delete" ||
					doubt == "bury" && stats.Kind == testproc.ReplyOK && fields(t, stats)["state"] == "buried"
				if happened {
					l.doubtsHappened++
				} else {
					l.doubtsNot++
				}
				l.history[id] = append(l.history[id], fmt.Sprintf("restart %d: unanswered %s happened: %v", round, doubt, happened))
				if doubt == "bury" {
					l.buried[id] = happened
				}
				if peek.Kind == testproc.ReplyNotFound && doubt == "delete" {
					l.deleted[id] = true // the kill cut off its DELETED
					continue
				}
			}
			if string(peek.Line) != fmt.Sprintf("FOUND %d %d", id, len(want.body)) || !bytes.Equal(peek.Body, want.body) {
				what := "INSERTED"
				if !acked {
					what = "RESERVED"
				}
				report("job %d (%s, not DELETED): peek %q, body %.40q; want body %.40q; history: %s",
					id, what, peek.Line, peek.Body, want.body, l.describeLocked(id))
				if peek.Kind == testproc.ReplyNotFound && len(l.lost) < 5 {
					l.lost = append(l.lost, id)
				}
				continue
			}
			st := fields(t, stats)
			state := st["state"]
			buriedOK := l.buried[id] == (state == "buried")
			if acked && st["tube"] != want.tube || !buriedOK || (state != "ready" && state != "delayed" && state != "buried") {
				report("job %d: tube %q state %q; want tube %q, buried %v; history: %s",
					id, st["tube"], state, want.tube, l.buried[id], l.describeLocked(id))
				continue
			}
			l.verifiedPresent++
			if !acked {
				l.verifiedShown++
			}
		}
	}
	for i := 0; i < len(gone); i += batch {
		ids := gone[i:min(i+batch, len(gone))]
		var cmds []string
		for _, id := range ids {
			cmds = append(cmds, fmt.Sprintf("peek %d", id))
		}
		for k, r := range c.pipeline(cmds) {
			if r.Kind != testproc.ReplyNotFound {
				report("job %d came back after it was deleted: peek %q; history: %s", ids[k], r.Line, l.describeLocked(ids[k]))
				continue
			}
			l.verifiedGone++
		}
	}
	if bad > 20 {
		t.Errorf("after restart %d: %d violations in all", round, bad)
	}

	// Ids go on above every id acknowledged before.
	c.expect("use crash-probe", "USING crash-probe")
	id := c.put(0, 0, 60, []byte("probe"))
	if id <= l.maxSeen {
		t.Errorf("after restart %d: new job got id %d, but %d was seen before the crash", round, id, l.maxSeen)
	}
	c.expect("delete "+strconv.FormatUint(id, 10), "DELETED")
	l.inserted[id] = job{"crash-probe", []byte("probe")}
	l.deleted[id] = true
	l.ack(id)
	t.Logf("after restart %d: %d jobs present and %d deleted jobs gone, as acknowledged", round, len(live), len(gone))
}

// tail is the end of a server's output, for failure messages.
func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}
