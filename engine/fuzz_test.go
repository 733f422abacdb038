package engine_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/engine"
)

// FuzzEngine drives a real server over loopback TCP with command streams
// spread over two to four connections, split at points the input chooses,
// and checks every reply byte against the protocol.
//
// One server serves the whole fuzzing process (each worker process runs
// this function once): gnet's Engine.Stop polls for shutdown every 500ms, so
// a server per input would hold the fuzzer to two inputs a second. Inputs
// still start from the same state: after each one, reset deletes every job
// it created and waits until stats shows the server idle (one connection,
// one tube, no jobs, no waiters), so an input reproduces in a fresh process
// and the store cannot grow over a long run. Goroutines and descriptors are
// compared with a count taken before each input.
//
// An input is a program (decodeFuzzProgram): the first byte picks the
// number of connections, then each step names a connection, how to write
// what it has queued (all, all but a tail, in small pieces, or not yet),
// whether to sync after it, and what to queue: raw bytes from the input or
// a word from fuzzWords, a dictionary of valid and near-valid commands whose
// job ids count from the first id the input can get. A sync waits until the
// server has answered everything it can on every connection, so what comes
// after it happens after what came before, whatever the event loops'
// timing: that keeps inputs reproducible and makes orders like "a reserve
// blocks, then another connection puts" reachable. After the last step
// every connection is half-closed; the server must answer every command
// sent and close within fuzzSettle. A reserve still waiting then ends in
// TIMED_OUT, and what was queued behind it runs, so blocking commands cost
// no time.
//
// The checks, beyond "nothing panics": each connection's replies parse
// (nextReply), one by one, as answers of the commands a codec.Parser finds
// in the bytes sent, in order (fuzzCmd.accepts); every job a FOUND or
// RESERVED shows has the body it was put with; and the server is idle and
// has released every goroutine and descriptor after the input.
func FuzzEngine(f *testing.F) {
	_, _, addr := startServer(f, engine.Config{MaxJobSize: fuzzMaxJobSize, Loops: 2})
	fs := &fuzzServer{addr: addr, firstID: 1}
	if err := fs.reset(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs.run(t, data)
	})
}

const (
	// fuzzMaxJobSize is small so that JOB_TOO_BIG, and bodies at the limit,
	// are a few hundred bytes away rather than 64 KiB.
	fuzzMaxJobSize = 256
	// Bounds per input, so that one stays a few milliseconds of work.
	fuzzMaxSteps = 64
	fuzzMaxBytes = 16 << 10
	// fuzzSyncMax bounds a sync. Only a server that fails to answer waits
	// that long, and the final check reports it.
	fuzzSyncMax = 50 * time.Millisecond
	// fuzzIDs is how many job ids, counted from the first the input can get,
	// the dictionary names. Ids are process-wide, so an absolute id would
	// name a different job, or none, in every other input.
	fuzzIDs = 8
	// fuzzSettle bounds every wait on the server: for EOF after the
	// half-close, for idle stats, for goroutines and descriptors to go.
	fuzzSettle = 2 * time.Second
)

// fuzzServer is a fuzzing process's server and what carries over between
// inputs. Inputs run one at a time, so nothing here is guarded.
type fuzzServer struct {
	addr    string
	firstID uint64 // the lowest job id the next input can get
	dirty   bool   // an input failed before its reset
}

// run executes one input and checks the outcome.
func (fs *fuzzServer) run(t *testing.T, data []byte) {
	if fs.dirty {
		// Only when seeds run as tests does another input follow a
		// failure; don't let it inherit the failed one's jobs.
		if err := fs.reset(); err != nil {
			t.Fatal(err)
		}
	}
	fs.dirty = true
	before := countFuzzResources()
	prog := decodeFuzzProgram(data, fs.firstID)
	conns := make([]*fuzzConn, prog.conns)
	for i := range conns {
		conns[i] = dialFuzz(t, fs.addr, i)
	}
	for _, st := range prog.steps {
		fc := conns[st.conn]
		fc.outbox = append(fc.outbox, st.data...)
		switch st.write {
		case writeAll:
			fc.sendOutbox(len(fc.outbox))
		case writeHold:
			fc.sendOutbox(len(fc.outbox) - int(st.arg)%(len(fc.outbox)+1))
		case writePieces:
			size := int(st.arg)%7 + 1
			for i := 0; i < 16 && len(fc.outbox) > 0; i++ {
				fc.sendOutbox(min(size, len(fc.outbox)))
			}
			fc.sendOutbox(len(fc.outbox))
		}
		if st.sync {
			syncConns(conns)
		}
	}
	for _, fc := range conns {
		fc.sendOutbox(len(fc.outbox))
		fc.hangUp()
	}
	for _, fc := range conns {
		<-fc.done
		_ = fc.c.Close()
	}

	if testing.Verbose() {
		// go test -run FuzzEngine/<corpus file> -v shows what an input does.
		t.Logf("first job id %d\n%s", fs.firstID, transcript(conns))
	}
	inserted := make(map[uint64][]byte)
	var shown []fuzzShown
	for _, fc := range conns {
		if err := fc.check(inserted, &shown); err != nil {
			t.Fatalf("connection %d: %v\n%s", fc.index, err, transcript(conns))
		}
	}
	for _, s := range shown {
		body, ok := inserted[s.id]
		switch {
		case !ok:
			t.Fatalf("connection %d: %q shows job %d, which no put of this input created\n%s",
				s.conn, s.reply, s.id, transcript(conns))
		case !bytes.Equal(body, s.body):
			t.Fatalf("connection %d: %q shows job %d with body %q; it was put with %q\n%s",
				s.conn, s.reply, s.id, s.body, body, transcript(conns))
		}
	}
	if err := fs.reset(); err != nil {
		t.Fatalf("%v\n%s", err, transcript(conns))
	}
	if err := waitForResources(before); err != nil {
		t.Fatalf("%v\n%s", err, transcript(conns))
	}
	fs.dirty = false
}

// reset deletes every job the last input could have created (and the
// probe job reset puts to learn the highest id), then polls stats until the
// server is idle: only reset's own connection open, only the default tube,
// no jobs, no waiters. That also shows a fresh client is still answered.
// It quits and waits for the server to close, so the server's descriptor
// is gone before the next input counts them.
func (fs *fuzzServer) reset() error {
	c, err := net.DialTimeout("tcp", fs.addr, fuzzSettle)
	if err != nil {
		return fmt.Errorf("reset: the server no longer accepts: %v", err)
	}
	defer c.Close()
	rc := &replyConn{c: c}
	probe, err := rc.roundTrip("put 0 0 1 0\r\n\r\n", 1)
	if err != nil || probe[0].kind != replyInserted {
		return fmt.Errorf("reset: probe put: %v %v", probe, err)
	}
	var pending []uint64
	for id := fs.firstID; id <= probe[0].n; id++ {
		pending = append(pending, id)
	}
	deadline := time.Now().Add(fuzzSettle)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var req strings.Builder
		for _, id := range pending {
			fmt.Fprintf(&req, "delete %d\r\n", id)
		}
		req.WriteString("stats\r\n")
		replies, err := rc.roundTrip(req.String(), len(pending)+1)
		if err != nil {
			return fmt.Errorf("reset: %v", err)
		}
		// An id that is NOT_FOUND may never have become a job (EXPECTED_CRLF
		// takes one), or may still be reserved by a connection whose close
		// the server has not finished: try it again next round.
		left := pending[:0]
		for i, id := range pending {
			switch replies[i].kind {
			case replyDeleted:
			case replyNotFound:
				left = append(left, id)
			default:
				return fmt.Errorf("reset: delete %d: %q", id, replies[i].line)
			}
		}
		pending = left
		stats := replies[len(replies)-1]
		if stats.kind != replyOK {
			return fmt.Errorf("reset: stats: %q", stats.line)
		}
		busy := notIdle(stats.body)
		if busy == "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reset: server not idle %v after the input's connections closed: %s", fuzzSettle, busy)
		}
		time.Sleep(wait)
	}
	fs.firstID = probe[0].n + 1
	if _, err := rc.roundTrip("quit\r\n", 0); err != nil {
		return fmt.Errorf("reset: quit: %v", err)
	}
	if err := rc.readEOF(); err != nil {
		return fmt.Errorf("reset: after quit: %v", err)
	}
	return nil
}

// idleStats is what stats says of a server with nothing but reset's
// connection, which has put once (the probe) and reserved nothing.
var idleStats = map[string]string{
	"current-connections":   "1",
	"current-producers":     "1",
	"current-workers":       "0",
	"current-waiting":       "0",
	"current-tubes":         "1",
	"current-jobs-urgent":   "0",
	"current-jobs-ready":    "0",
	"current-jobs-reserved": "0",
	"current-jobs-delayed":  "0",
	"current-jobs-buried":   "0",
}

// notIdle lists the stats that differ from idleStats, or returns "".
func notIdle(yaml []byte) string {
	got := make(map[string]string)
	for _, line := range strings.Split(string(yaml), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			got[k] = v
		}
	}
	var diffs []string
	for k, want := range idleStats {
		if got[k] != want {
			diffs = append(diffs, fmt.Sprintf("%s: %s (want %s)", k, got[k], want))
		}
	}
	return strings.Join(diffs, ", ")
}

type fuzzResources struct{ goroutines, fds int }

// countFuzzResources counts goroutines and, on Linux, open descriptors (-1
// elsewhere).
func countFuzzResources() fuzzResources {
	r := fuzzResources{goroutines: runtime.NumGoroutine(), fds: -1}
	if runtime.GOOS == "linux" {
		if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
			r.fds = len(ents)
		}
	}
	return r
}

// waitForResources fails unless goroutines and descriptors fall back to
// before's counts. Closes finish asynchronously on the server's loops, so
// it polls.
func waitForResources(before fuzzResources) error {
	deadline := time.Now().Add(fuzzSettle)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		now := countFuzzResources()
		if now.goroutines <= before.goroutines && now.fds <= before.fds {
			return nil
		}
		if time.Now().After(deadline) {
			var dump strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
			if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
				for _, e := range ents {
					target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
					fmt.Fprintf(&dump, "fd %s -> %s\n", e.Name(), target)
				}
			}
			return fmt.Errorf("leak: %d goroutines and %d descriptors %v after the input, %d and %d before\n%s",
				now.goroutines, now.fds, fuzzSettle, before.goroutines, before.fds, dump.String())
		}
		time.Sleep(wait)
	}
}

// ---- Programs ----

// How a step writes what its connection has queued.
const (
	writeAll    = iota // everything
	writeHold          // all but the last arg%(queued+1) bytes
	writePieces        // pieces of arg%7+1 bytes, up to 16 of them, then the rest
	writeLater         // nothing yet
)

type fuzzStep struct {
	conn  int
	data  []byte // appended to the connection's queue
	write int
	arg   byte
	sync  bool
}

type fuzzProgram struct {
	conns int
	steps []fuzzStep
}

// decodeFuzzProgram turns any input into a program; firstID is the first
// job id the input can get, which dictionary ids count from.
//
// Byte 0: 2 + b%3 connections. Then each step is a header byte h:
// bits 0-1 the connection (mod the count), bits 2-3 the write mode, bit 4 a
// sync after writing, bits 5-7 the source: 0 is raw (a length byte, mod
// 64, then that many bytes), anything else a dictionary word (an index byte,
// mod len(fuzzWords), then the word's own parameters). writeHold and
// writePieces end the step with their arg byte. Past the end of the input
// every byte reads as 0.
func decodeFuzzProgram(data []byte, firstID uint64) fuzzProgram {
	in := &fuzzInput{b: data}
	prog := fuzzProgram{conns: 2 + int(in.next()%3)}
	total := 0
	for len(in.b) > 0 && len(prog.steps) < fuzzMaxSteps && total < fuzzMaxBytes {
		h := in.next()
		st := fuzzStep{
			conn:  int(h&3) % prog.conns,
			write: int(h>>2) & 3,
			sync:  h&0x10 != 0,
		}
		if h>>5 == 0 {
			st.data = in.take(int(in.next() % 64))
		} else {
			w := fuzzWords[int(in.next())%len(fuzzWords)]
			st.data = []byte(w.gen(in, firstID))
		}
		if st.write == writeHold || st.write == writePieces {
			st.arg = in.next()
		}
		total += len(st.data)
		prog.steps = append(prog.steps, st)
	}
	return prog
}

// fuzzInput hands out an input's bytes, then zeros.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) next() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

func (in *fuzzInput) take(n int) []byte {
	n = min(n, len(in.b))
	out := in.b[:n]
	in.b = in.b[n:]
	return out
}

// fuzzWord is a dictionary entry: gen reads its parameters from in.
type fuzzWord struct {
	name string
	gen  func(in *fuzzInput, firstID uint64) string
}

// Argument values. Repeats weight the choice; fuzzNumber mixes in
// fuzzOddNumbers, near misses that are out of range, signed, padded or not
// numbers at all.
var (
	fuzzPris       = []string{"0", "1", "1023", "1024", "4294967295"}
	fuzzDelays     = []string{"0", "0", "0", "1"}
	fuzzTTRs       = []string{"60", "60", "1", "0"}
	fuzzTimeouts   = []string{"0", "0", "0", "1", "2147483647"}
	fuzzKickBounds = []string{"0", "1", "2", "10", "4294967295"}
	fuzzOddNumbers = []string{"", "-1", "01", "+1", "1x", " 1", "0x10", "2147483648",
		"4294967296", "18446744073709551615", "18446744073709551616"}
	fuzzTubes = []string{"default", "default", "a", "a", "b", "t-1", "x(y)$;+/._",
		strings.Repeat("n", codec.MaxTubeName), strings.Repeat("n", codec.MaxTubeName+1),
		"-bad", "a b", "", "\xfc", "a\tb", "default "}
	fuzzOddLines = []string{"\n", "\r", "\r\n", "\r\r\n", "stats\n", "STATS\r\n", "foo\r\n",
		"reserve-with-timeout\r\n", "peek\r\n", "use  a\r\n", "watch a b\r\n", "delete 1 2\r\n",
		"kick\r\n", "list-tubes \r\n", "stats-tube\r\n", "reserve \r\n", "pause-tube a\r\n",
		"put\r\n", "put 0 0 60 3 x\r\nabc\r\n", "quit now\r\n",
		"stats\x00\r\n", "use a\x00b\r\n", "\x00\r\n"}
)

// fuzzNumber is mostly one of choices, sometimes an odd number.
func fuzzNumber(in *fuzzInput, choices []string) string {
	b := in.next()
	if b < 240 {
		return choices[int(b)%len(choices)]
	}
	return fuzzOddNumbers[int(b-240)%len(fuzzOddNumbers)]
}

func fuzzJobID(in *fuzzInput, firstID uint64) string {
	b := in.next()
	if b < 240 {
		return strconv.FormatUint(firstID+uint64(b%fuzzIDs), 10)
	}
	return fuzzOddNumbers[int(b-240)%len(fuzzOddNumbers)]
}

func fuzzTube(in *fuzzInput) string { return fuzzTubes[int(in.next())%len(fuzzTubes)] }

// fuzzBodyLen is mostly short; the top bytes give lengths at the limit.
func fuzzBodyLen(in *fuzzInput) int {
	b := in.next()
	if b >= 248 {
		return fuzzMaxJobSize - int(b-248)
	}
	return int(b % 32)
}

// fuzzBody is n letters, with "\r\n" in the middle when the seed is odd,
// so bodies that contain line ends are common.
func fuzzBody(in *fuzzInput, n int) string {
	seed := in.next()
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte((int(seed)+i)%26)
	}
	if seed&1 != 0 && n >= 2 {
		b[n/2-1], b[n/2] = '\r', '\n'
	}
	return string(b)
}

// fuzzPut is a put whose body is skew bytes longer than declared (shorter
// if negative): the server reads the declared length whatever arrives, so a
// wrong length swallows or leaves over bytes of what follows.
func fuzzPut(in *fuzzInput, skew int) string {
	pri, delay, ttr := fuzzNumber(in, fuzzPris), fuzzNumber(in, fuzzDelays), fuzzNumber(in, fuzzTTRs)
	n := fuzzBodyLen(in)
	return fmt.Sprintf("put %s %s %s %d\r\n%s\r\n", pri, delay, ttr, n, fuzzBody(in, max(n+skew, 0)))
}

func wordFixed(s string) func(*fuzzInput, uint64) string {
	return func(*fuzzInput, uint64) string { return s }
}

func wordWithID(verb string) func(*fuzzInput, uint64) string {
	return func(in *fuzzInput, id uint64) string { return verb + " " + fuzzJobID(in, id) + "\r\n" }
}

func wordWithTube(verb string) func(*fuzzInput, uint64) string {
	return func(in *fuzzInput, _ uint64) string { return verb + " " + fuzzTube(in) + "\r\n" }
}

// fuzzWords is the dictionary. Seeds name words by name, so reordering it
// changes what committed corpus files mean; rewrite them afterwards
// (TestFuzzEngineSeedFiles).
var fuzzWords = []fuzzWord{
	{"put", func(in *fuzzInput, _ uint64) string { return fuzzPut(in, 0) }},
	{"put-short", func(in *fuzzInput, _ uint64) string { return fuzzPut(in, -1-int(in.next()%4)) }},
	{"put-long", func(in *fuzzInput, _ uint64) string { return fuzzPut(in, 1+int(in.next()%4)) }},
	{"put-too-big", func(in *fuzzInput, _ uint64) string {
		n := fuzzMaxJobSize + 1 + int(in.next()%8)
		return fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", n, fuzzBody(in, n))
	}},
	{"put-header", func(in *fuzzInput, _ uint64) string {
		return fmt.Sprintf("put %s %s %s %d\r\n", fuzzNumber(in, fuzzPris), fuzzNumber(in, fuzzDelays),
			fuzzNumber(in, fuzzTTRs), fuzzBodyLen(in))
	}},
	{"reserve", wordFixed("reserve\r\n")},
	{"reserve-with-timeout", func(in *fuzzInput, _ uint64) string {
		return "reserve-with-timeout " + fuzzNumber(in, fuzzTimeouts) + "\r\n"
	}},
	{"reserve-job", wordWithID("reserve-job")},
	{"delete", wordWithID("delete")},
	{"release", func(in *fuzzInput, id uint64) string {
		return fmt.Sprintf("release %s %s %s\r\n", fuzzJobID(in, id), fuzzNumber(in, fuzzPris), fuzzNumber(in, fuzzDelays))
	}},
	{"bury", func(in *fuzzInput, id uint64) string {
		return fmt.Sprintf("bury %s %s\r\n", fuzzJobID(in, id), fuzzNumber(in, fuzzPris))
	}},
	{"touch", wordWithID("touch")},
	{"kick", func(in *fuzzInput, _ uint64) string { return "kick " + fuzzNumber(in, fuzzKickBounds) + "\r\n" }},
	{"kick-job", wordWithID("kick-job")},
	{"peek", wordWithID("peek")},
	{"peek-ready", wordFixed("peek-ready\r\n")},
	{"peek-delayed", wordFixed("peek-delayed\r\n")},
	{"peek-buried", wordFixed("peek-buried\r\n")},
	{"stats", wordFixed("stats\r\n")},
	{"stats-job", wordWithID("stats-job")},
	{"stats-tube", wordWithTube("stats-tube")},
	{"list-tubes", wordFixed("list-tubes\r\n")},
	{"list-tube-used", wordFixed("list-tube-used\r\n")},
	{"list-tubes-watched", wordFixed("list-tubes-watched\r\n")},
	{"use", wordWithTube("use")},
	{"watch", wordWithTube("watch")},
	{"ignore", wordWithTube("ignore")},
	{"pause-tube", func(in *fuzzInput, _ uint64) string {
		return fmt.Sprintf("pause-tube %s %s\r\n", fuzzTube(in), fuzzNumber(in, fuzzDelays))
	}},
	{"quit", wordFixed("quit\r\n")},
	// Around LineMax: a line that fits, one that just does not, and longer.
	{"long-line", func(in *fuzzInput, _ uint64) string {
		return strings.Repeat("x", codec.LineMax-8+int(in.next()%24)) + "\r\n"
	}},
	{"odd-line", func(in *fuzzInput, _ uint64) string { return fuzzOddLines[int(in.next())%len(fuzzOddLines)] }},
}

// ---- Connections ----

// fuzzConn is one connection of an input.
type fuzzConn struct {
	index int
	c     *net.TCPConn

	// Only run's goroutine touches these.
	outbox   []byte // queued by the program, not yet written
	sent     []byte // written, in order
	parser   *codec.Parser
	parsed   int       // how much of sent the parser has consumed
	cmdStart int       // where in sent the command being parsed began
	cmds     []fuzzCmd // what sent parses to, in order
	answered []int     // indexes in cmds of the commands that get a reply
	quit     bool      // sent ends with quit: nothing more may be written
	writeErr error

	// The reader goroutine owns recv and readErr until it closes done. It
	// counts whole replies as they arrive, for syncConns, and signals
	// progress (capacity 1) whenever the count or garbled changes.
	done     chan struct{}
	progress chan struct{}
	recv     []byte
	readErr  error
	mu       sync.Mutex
	replies  int  // guarded by mu: whole replies in recv
	garbled  bool // guarded by mu: recv holds a malformed reply; counting stopped
	counted  int  // reader only: bytes of recv holding the counted replies
}

func dialFuzz(t *testing.T, addr string, index int) *fuzzConn {
	c, err := net.DialTimeout("tcp", addr, fuzzSettle)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	fc := &fuzzConn{
		index:    index,
		c:        c.(*net.TCPConn),
		parser:   codec.NewParser(fuzzMaxJobSize),
		done:     make(chan struct{}),
		progress: make(chan struct{}, 1),
	}
	// The real deadline is set at hangUp; this one only keeps a broken
	// run from reading forever.
	_ = fc.c.SetReadDeadline(time.Now().Add(10 * fuzzSettle))
	go fc.read()
	return fc
}

func (fc *fuzzConn) read() {
	defer close(fc.done)
	buf := make([]byte, 4096)
	for {
		n, err := fc.c.Read(buf)
		fc.recv = append(fc.recv, buf[:n]...)
		// Replies arrive in arbitrary pieces: count only whole ones, and
		// keep a partial one for the next read.
		got := 0
		garbled := false
		for {
			_, used, perr := nextReply(fc.recv[fc.counted:])
			if perr != nil {
				garbled = true
			}
			if used == 0 {
				break
			}
			fc.counted += used
			got++
		}
		fc.mu.Lock()
		fc.replies += got
		fc.garbled = fc.garbled || garbled
		fc.mu.Unlock()
		if got > 0 || garbled {
			select {
			case fc.progress <- struct{}{}:
			default:
			}
		}
		if err != nil {
			fc.readErr = err
			return
		}
	}
}

// settled reports whether the server has answered all it can: every
// command sent, up to the first that may be waiting for a job.
func (fc *fuzzConn) settled() bool {
	fc.mu.Lock()
	got, garbled := fc.replies, fc.garbled
	fc.mu.Unlock()
	return garbled || got >= len(fc.answered) || fc.cmds[fc.answered[got]].blocks()
}

// syncConns waits, up to fuzzSyncMax, until every connection is settled or
// closed.
func syncConns(conns []*fuzzConn) {
	timeout := time.NewTimer(fuzzSyncMax)
	defer timeout.Stop()
	for _, fc := range conns {
		for !fc.settled() && !isClosed(fc.done) {
			select {
			case <-fc.progress:
			case <-fc.done:
			case <-timeout.C:
				return
			}
		}
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// sendOutbox writes the first n queued bytes.
func (fc *fuzzConn) sendOutbox(n int) {
	fc.send(fc.outbox[:n])
	fc.outbox = fc.outbox[n:]
}

// send writes b, parsing it as the server will to know which replies are
// due. Bytes after a quit (or the start of a TLS record, at which the
// server closes too) are dropped: the server closes at quit, and bytes
// reaching a closed socket draw a reset that can destroy replies in flight.
func (fc *fuzzConn) send(b []byte) {
	if fc.quit || fc.writeErr != nil || len(b) == 0 {
		return
	}
	old := len(fc.sent)
	fc.sent = append(fc.sent, b...)
	var cmd codec.Command
	for {
		n, ok := fc.parser.Parse(fc.sent[fc.parsed:], &cmd)
		fc.parsed += n
		if !ok {
			break
		}
		c := newFuzzCmd(&cmd, fc.sent[fc.cmdStart:fc.parsed])
		if c.answered() {
			fc.answered = append(fc.answered, len(fc.cmds))
		}
		fc.cmds = append(fc.cmds, c)
		fc.cmdStart = fc.parsed
		if cmd.Op == codec.OpQuit && cmd.Status == codec.OK || cmd.Status == codec.TLSRecord {
			fc.sent = fc.sent[:fc.parsed]
			fc.quit = true
			break
		}
	}
	if len(fc.sent) == old {
		return
	}
	_ = fc.c.SetWriteDeadline(time.Now().Add(fuzzSettle))
	if _, err := fc.c.Write(fc.sent[old:]); err != nil {
		fc.writeErr = err
	}
}

// hangUp half-closes: the server must answer what it has parsed and close.
func (fc *fuzzConn) hangUp() {
	if fc.writeErr == nil {
		_ = fc.c.CloseWrite()
	}
	_ = fc.c.SetReadDeadline(time.Now().Add(fuzzSettle))
}

// fuzzShown is a job a FOUND or RESERVED reply showed.
type fuzzShown struct {
	conn  int
	id    uint64
	body  []byte
	reply string
}

// check matches what the connection received, up to EOF, with the
// commands it sent. It records INSERTED jobs' bodies in inserted and the
// jobs replies showed in shown, for run to compare across connections.
func (fc *fuzzConn) check(inserted map[uint64][]byte, shown *[]fuzzShown) error {
	var ne net.Error
	switch {
	case fc.writeErr != nil:
		return fmt.Errorf("write: %v (the server closed without a quit)", fc.writeErr)
	case errors.Is(fc.readErr, io.EOF):
	case errors.As(fc.readErr, &ne) && ne.Timeout():
		return fmt.Errorf("not closed %v after the half-close: the server hangs", fuzzSettle)
	default:
		return fmt.Errorf("read: %v", fc.readErr)
	}
	next := 0 // the next command that may be answered
	for b := fc.recv; len(b) > 0; {
		at := len(fc.recv) - len(b)
		r, n, err := nextReply(b)
		if err != nil {
			return fmt.Errorf("malformed reply at byte %d: %v", at, err)
		}
		if n == 0 {
			return fmt.Errorf("reply cut short at EOF: %q", b)
		}
		b = b[n:]
		for next < len(fc.cmds) && !fc.cmds[next].answered() {
			next++
		}
		if next == len(fc.cmds) {
			return fmt.Errorf("reply %q at byte %d answers no command", r.line, at)
		}
		cmd := &fc.cmds[next]
		next++
		if err := cmd.accepts(&r); err != nil {
			return fmt.Errorf("%q answered %q at byte %d: %v", cmd.text, r.line, at, err)
		}
		switch r.kind {
		case replyInserted:
			inserted[r.n] = cmd.body
		case replyReserved, replyFound:
			*shown = append(*shown, fuzzShown{conn: fc.index, id: r.n, body: r.body, reply: r.line})
		}
	}
	for next < len(fc.cmds) && !fc.cmds[next].answered() {
		next++
	}
	if next == len(fc.cmds) {
		return nil
	}
	// Every command sent before the half-close is answered, as by
	// beanstalkd: a reserve still waiting then ends (TIMED_OUT, or the job
	// being handed to it just then), and what was queued behind it runs.
	return fmt.Errorf("no reply to %q (or %d commands after it) before EOF", fc.cmds[next].text, len(fc.cmds)-next-1)
}

// transcript is every connection's traffic, for failure messages.
func transcript(conns []*fuzzConn) string {
	var b strings.Builder
	for _, fc := range conns {
		fmt.Fprintf(&b, "connection %d sent %q\n", fc.index, fc.sent)
		fmt.Fprintf(&b, "connection %d received %q (then %v)\n", fc.index, fc.recv, fc.readErr)
	}
	return b.String()
}

// ---- Commands and the replies they allow ----

// fuzzCmd is one command as the server's parser sees the bytes sent.
type fuzzCmd struct {
	op      codec.Op
	status  codec.Status
	id      uint64
	timeout uint32
	tube    string
	body    []byte // a put's body, without the two bytes after it
	text    string // the bytes that made it, for messages
}

func newFuzzCmd(cmd *codec.Command, text []byte) fuzzCmd {
	c := fuzzCmd{op: cmd.Op, status: cmd.Status, id: cmd.ID, timeout: cmd.Timeout, tube: string(cmd.Tube), text: string(text)}
	if cmd.Op == codec.OpPutBody {
		c.body = bytes.Clone(cmd.Body[:len(cmd.Body)-2]) // it may alias the input
	}
	return c
}

// answered reports whether the command gets a reply of its own: a put
// header's reply waits for its body, and quit gets none.
func (c *fuzzCmd) answered() bool {
	switch {
	case c.status == codec.TLSRecord:
		return false // the server closes, as at quit
	case c.status != codec.OK && c.status != codec.PutTooBig:
		return true
	case c.op == codec.OpPut, c.op == codec.OpQuit:
		return false
	}
	return true
}

// blocks reports whether the command may wait for a job.
func (c *fuzzCmd) blocks() bool {
	return c.status == codec.OK && (c.op == codec.OpReserve || c.op == codec.OpReserveWithTimeout && c.timeout > 0)
}

// fuzzAllowed is what the protocol lets each command answer, besides the
// OUT_OF_MEMORY any command may get.
var fuzzAllowed = map[codec.Op][]replyKind{
	codec.OpPutBody:            {replyInserted, replyBuriedID, replyDraining},
	codec.OpPutTooBig:          {replyJobTooBig},
	codec.OpUse:                {replyUsing},
	codec.OpReserve:            {replyReserved, replyTimedOut, replyDeadlineSoon},
	codec.OpReserveWithTimeout: {replyReserved, replyTimedOut, replyDeadlineSoon},
	codec.OpReserveJob:         {replyReserved, replyNotFound},
	codec.OpDelete:             {replyDeleted, replyNotFound},
	codec.OpRelease:            {replyReleased, replyBuried, replyNotFound},
	codec.OpBury:               {replyBuried, replyNotFound},
	codec.OpTouch:              {replyTouched, replyNotFound},
	codec.OpWatch:              {replyWatching},
	codec.OpIgnore:             {replyWatching, replyNotIgnored},
	codec.OpPeek:               {replyFound, replyNotFound},
	codec.OpPeekReady:          {replyFound, replyNotFound},
	codec.OpPeekDelayed:        {replyFound, replyNotFound},
	codec.OpPeekBuried:         {replyFound, replyNotFound},
	codec.OpKick:               {replyKickedCount},
	codec.OpKickJob:            {replyKicked, replyNotFound},
	codec.OpStatsJob:           {replyOK, replyNotFound},
	codec.OpStatsTube:          {replyOK, replyNotFound},
	codec.OpStats:              {replyOK},
	codec.OpListTubes:          {replyOK},
	codec.OpListTubeUsed:       {replyUsing},
	codec.OpListTubesWatched:   {replyOK},
	codec.OpPauseTube:          {replyPaused, replyNotFound},
}

// accepts checks that r may answer c.
func (c *fuzzCmd) accepts(r *wireReply) error {
	switch r.kind {
	case replyInternalError:
		return errors.New("the protocol says INTERNAL_ERROR is a server bug")
	case replyOutOfMemory:
		return nil
	}
	var allowed []replyKind
	switch c.status {
	case codec.BadFormat, codec.CountedBadFormat:
		allowed = []replyKind{replyBadFormat}
	case codec.UnknownCommand:
		allowed = []replyKind{replyUnknownCommand}
	case codec.ExpectedCRLF:
		allowed = []replyKind{replyExpectedCRLF}
	default:
		allowed = fuzzAllowed[c.op]
	}
	ok := false
	for _, k := range allowed {
		ok = ok || k == r.kind
	}
	switch {
	case !ok:
		return errors.New("not a reply this command can get")
	case c.op == codec.OpUse && r.tube != c.tube:
		return fmt.Errorf("use %q reports tube %q", c.tube, r.tube)
	case (r.kind == replyFound || r.kind == replyReserved) && (c.op == codec.OpPeek || c.op == codec.OpReserveJob) && r.n != c.id:
		return fmt.Errorf("asked for job %d, got job %d", c.id, r.n)
	case r.kind == replyWatching && r.n == 0:
		return errors.New("a connection always watches at least one tube")
	}
	return nil
}

// ---- The reply grammar ----

type replyKind uint8

const (
	replyNone replyKind = iota
	replyNotFound
	replyDeleted
	replyReleased
	replyBuried // bury, release
	replyTouched
	replyKicked // kick-job
	replyTimedOut
	replyDeadlineSoon
	replyNotIgnored
	replyPaused
	replyOutOfMemory
	replyInternalError
	replyDraining
	replyBadFormat
	replyUnknownCommand
	replyExpectedCRLF
	replyJobTooBig
	replyInserted    // INSERTED <id>
	replyBuriedID    // BURIED <id>, a put that could not be queued
	replyKickedCount // KICKED <count>, kick
	replyWatching    // WATCHING <count>
	replyUsing       // USING <tube>
	replyOK          // OK <bytes>, then the data
	replyReserved    // RESERVED <id> <bytes>, then the body
	replyFound       // FOUND <id> <bytes>, then the body
)

// replyForm is the grammar of the replies that start with one word: what
// the word alone means, and what it means followed by args.
type replyForm struct {
	bare     replyKind // replyNone if the word cannot stand alone
	withArgs replyKind // replyNone if the word takes no arguments
	args     []string  // each "id", "count", "tube" or "size" (of the data after the line)
}

var replyForms = map[string]replyForm{
	"NOT_FOUND":       {bare: replyNotFound},
	"DELETED":         {bare: replyDeleted},
	"RELEASED":        {bare: replyReleased},
	"TOUCHED":         {bare: replyTouched},
	"TIMED_OUT":       {bare: replyTimedOut},
	"DEADLINE_SOON":   {bare: replyDeadlineSoon},
	"NOT_IGNORED":     {bare: replyNotIgnored},
	"PAUSED":          {bare: replyPaused},
	"OUT_OF_MEMORY":   {bare: replyOutOfMemory},
	"INTERNAL_ERROR":  {bare: replyInternalError},
	"DRAINING":        {bare: replyDraining},
	"BAD_FORMAT":      {bare: replyBadFormat},
	"UNKNOWN_COMMAND": {bare: replyUnknownCommand},
	"EXPECTED_CRLF":   {bare: replyExpectedCRLF},
	"JOB_TOO_BIG":     {bare: replyJobTooBig},
	"BURIED":          {bare: replyBuried, withArgs: replyBuriedID, args: []string{"id"}},
	"KICKED":          {bare: replyKicked, withArgs: replyKickedCount, args: []string{"count"}},
	"INSERTED":        {withArgs: replyInserted, args: []string{"id"}},
	"WATCHING":        {withArgs: replyWatching, args: []string{"count"}},
	"USING":           {withArgs: replyUsing, args: []string{"tube"}},
	"OK":              {withArgs: replyOK, args: []string{"size"}},
	"RESERVED":        {withArgs: replyReserved, args: []string{"id", "size"}},
	"FOUND":           {withArgs: replyFound, args: []string{"id", "size"}},
}

// wireReply is one parsed reply.
type wireReply struct {
	kind replyKind
	line string // the first line, without "\r\n"
	n    uint64 // the id or count of the replies that carry one
	tube string // USING
	body []byte // OK, RESERVED, FOUND: the data, without the "\r\n" after it
}

// maxReplyLine is the longest reply line with its "\r\n": USING and a
// 200-byte name is 208 bytes.
const maxReplyLine = 6 + codec.MaxTubeName + 2

// maxDocument bounds OK's data; a larger length is taken as garbage rather
// than waited for.
const maxDocument = 1 << 20

// nextReply parses the reply at the start of b. n is 0, with a nil error,
// when b is the start of a well-formed reply that has not all arrived.
func nextReply(b []byte) (r wireReply, n int, err error) {
	end := bytes.IndexByte(b, '\n')
	if end < 0 || end >= maxReplyLine {
		if len(b) >= maxReplyLine {
			return r, 0, fmt.Errorf("no line end in the first %d bytes of %q", maxReplyLine, b[:maxReplyLine])
		}
		if i := bytes.IndexByte(b, '\r'); i >= 0 && i < len(b)-1 {
			return r, 0, fmt.Errorf("'\\r' not followed by '\\n' in %q", b)
		}
		return r, 0, nil
	}
	if end == 0 || b[end-1] != '\r' {
		return r, 0, fmt.Errorf("line %q ends in a bare '\\n'", b[:end+1])
	}
	r.line = string(b[:end-1])
	for i := 0; i < len(r.line); i++ {
		if c := r.line[i]; c < ' ' || c > '~' {
			return r, 0, fmt.Errorf("byte %q in line %q", c, r.line)
		}
	}
	n = end + 1
	f := strings.Split(r.line, " ")
	form, ok := replyForms[f[0]]
	switch {
	case !ok:
		return r, 0, fmt.Errorf("unknown reply %q", r.line)
	case len(f) == 1 && form.bare == replyNone:
		return r, 0, fmt.Errorf("%q wants %s", r.line, strings.Join(form.args, " and "))
	case len(f) == 1:
		r.kind = form.bare
		return r, n, nil
	case form.withArgs == replyNone:
		return r, 0, fmt.Errorf("%q takes no arguments", r.line)
	case len(f)-1 != len(form.args):
		return r, 0, fmt.Errorf("%q wants %s", r.line, strings.Join(form.args, " and "))
	}
	r.kind = form.withArgs
	body := -1 // how many bytes of data follow the line
	for i, arg := range form.args {
		v := f[i+1]
		switch arg {
		case "tube":
			if !validTubeName(v) {
				err = fmt.Errorf("%q is not a tube name", v)
			}
			r.tube = v
		case "id", "count":
			r.n, err = replyUint(v, arg == "id")
		case "size":
			var size uint64
			size, err = replyUint(v, false)
			limit := uint64(maxDocument)
			if r.kind != replyOK {
				limit = fuzzMaxJobSize
			}
			if err == nil && size > limit {
				err = fmt.Errorf("%d bytes of data, over the %d-byte limit", size, limit)
			}
			body = int(size)
		}
		if err != nil {
			break
		}
	}
	if err != nil {
		return r, 0, fmt.Errorf("%q: %v", r.line, err)
	}
	if body < 0 {
		return r, n, nil
	}
	if len(b) < n+body+2 {
		return r, 0, nil
	}
	if string(b[n+body:n+body+2]) != "\r\n" {
		return r, 0, fmt.Errorf("%q: data not followed by \"\\r\\n\": %q", r.line, b[n:n+body+2])
	}
	r.body = b[n : n+body]
	if r.kind == replyOK {
		if err := checkYAML(r.body); err != nil {
			return r, 0, fmt.Errorf("%q: %v in %q", r.line, err, r.body)
		}
	}
	return r, n + body + 2, nil
}

// replyUint parses a decimal as beanstalkd prints one: digits, no sign, no
// leading zero. Job ids start at 1.
func replyUint(s string, isID bool) (uint64, error) {
	if s == "" || (s[0] == '0' && len(s) > 1) || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal", s)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if isID && v == 0 {
		return 0, errors.New("job id 0")
	}
	return v, nil
}

// validTubeName applies the protocol's rule for names.
func validTubeName(s string) bool {
	if s == "" || len(s) > codec.MaxTubeName || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-+/;.$_()", c) >= 0) {
			return false
		}
	}
	return true
}

// checkYAML checks the shape of OK's data: a document marker, then lines
// that are list items or "key: value".
func checkYAML(doc []byte) error {
	s, ok := strings.CutPrefix(string(doc), "---\n")
	if !ok {
		return errors.New("no \"---\" line")
	}
	if s == "" {
		return nil
	}
	if !strings.HasSuffix(s, "\n") {
		return errors.New("no final newline")
	}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if _, item := strings.CutPrefix(line, "- "); item {
			continue
		}
		if k, _, found := strings.Cut(line, ": "); found && k != "" && strings.TrimLeft(k, "abcdefghijklmnopqrstuvwxyz-") == "" {
			continue
		}
		return fmt.Errorf("line %q", line)
	}
	return nil
}

// replyConn is reset's synchronous client.
type replyConn struct {
	c   net.Conn
	buf []byte // received, not yet parsed
}

// roundTrip sends req and reads n replies.
func (rc *replyConn) roundTrip(req string, n int) ([]wireReply, error) {
	_ = rc.c.SetDeadline(time.Now().Add(fuzzSettle))
	if _, err := io.WriteString(rc.c, req); err != nil {
		return nil, err
	}
	var replies []wireReply
	chunk := make([]byte, 4096)
	for len(replies) < n {
		r, used, err := nextReply(rc.buf)
		if err != nil {
			return replies, err
		}
		if used > 0 {
			r.body = bytes.Clone(r.body)
			replies = append(replies, r)
			rc.buf = rc.buf[used:]
			continue
		}
		m, err := rc.c.Read(chunk)
		rc.buf = append(rc.buf, chunk[:m]...)
		if err != nil {
			return replies, fmt.Errorf("after %d of %d replies: %v", len(replies), n, err)
		}
	}
	return replies, nil
}

// readEOF waits for the server to close, expecting nothing more.
func (rc *replyConn) readEOF() error {
	_ = rc.c.SetReadDeadline(time.Now().Add(fuzzSettle))
	rest, err := io.ReadAll(rc.c)
	if err != nil || len(rc.buf)+len(rest) > 0 {
		return fmt.Errorf("got %q then %v, want EOF", append(rc.buf, rest...), err)
	}
	return nil
}

// ---- Seeds ----

var updateFuzzSeeds = flag.Bool("update-fuzz-seeds", false,
	"rewrite testdata/fuzz/FuzzEngine/seed-* from fuzzSeeds")

// TestFuzzEngineSeedFiles keeps the committed seed corpus in step with
// fuzzSeeds, which say in words what the encoded files do.
func TestFuzzEngineSeedFiles(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzEngine")
	for _, s := range fuzzSeeds() {
		path := filepath.Join(dir, "seed-"+s.name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.encode())
		if *updateFuzzSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s is missing or stale (%v): run go test -run TestFuzzEngineSeedFiles ./engine/ -args -update-fuzz-seeds", path, err)
		}
	}
}

type fuzzSeed struct {
	name  string
	conns int
	steps []seedStep
}

// seedStep is one step of a seed, in the terms of decodeFuzzProgram.
type seedStep struct {
	conn   int
	write  int
	arg    byte
	sync   bool
	word   string // a fuzzWords name, or "" for raw bytes
	params []byte // the word's parameters, or the raw bytes
}

func seedWord(conn int, name string, params ...byte) seedStep {
	return seedStep{conn: conn, word: name, params: params}
}

func seedRaw(conn int, s string) seedStep { return seedStep{conn: conn, params: []byte(s)} }

func (s seedStep) hold(n byte) seedStep   { s.write, s.arg = writeHold, n; return s }
func (s seedStep) pieces(n byte) seedStep { s.write, s.arg = writePieces, n-1; return s }
func (s seedStep) later() seedStep        { s.write = writeLater; return s }
func (s seedStep) synced() seedStep       { s.sync = true; return s }

func (s fuzzSeed) encode() []byte {
	out := []byte{byte(s.conns - 2)}
	for _, st := range s.steps {
		h := byte(st.conn) | byte(st.write)<<2
		if st.sync {
			h |= 0x10
		}
		if st.word == "" {
			out = append(out, h, byte(len(st.params)))
		} else {
			out = append(out, h|1<<5, byte(fuzzWordIndex(st.word)))
		}
		out = append(out, st.params...)
		if st.write == writeHold || st.write == writePieces {
			out = append(out, st.arg)
		}
	}
	return out
}

func fuzzWordIndex(name string) int {
	for i, w := range fuzzWords {
		if w.name == name {
			return i
		}
	}
	panic("no fuzz word " + name)
}

// fuzzSeeds start the fuzzer in the states worth mutating. Parameter bytes
// follow the word's generator: put takes pri, delay, ttr, length, body seed
// (0 0 0 3 0 is "put 0 0 60 3" with body "abc"); an id byte k is the
// input's k-th job id.
func fuzzSeeds() []fuzzSeed {
	return []fuzzSeed{
		{"put-reserve-delete", 2, []seedStep{
			seedWord(0, "put", 0, 0, 0, 3, 0).synced(),
			seedWord(1, "reserve").synced(),
			seedWord(1, "stats-job", 0),
			seedWord(1, "delete", 0),
			seedWord(0, "peek", 0),
			seedWord(0, "stats"),
		}},
		{"blocked-reserve-woken", 3, []seedStep{
			seedWord(0, "watch", 2),
			seedWord(0, "reserve").synced(),
			seedWord(1, "use", 2),
			seedWord(1, "put", 1, 0, 0, 5, 1).synced(),
			seedWord(2, "reserve-with-timeout", 3),
			seedWord(0, "list-tubes-watched"),
			seedWord(0, "release", 0, 2, 0),
			seedWord(2, "peek-ready"),
			seedWord(0, "delete", 0),
		}},
		{"malformed-lines", 2, []seedStep{
			seedWord(0, "long-line", 9),
			seedWord(0, "long-line", 23),
			seedWord(0, "odd-line", 20),
			seedWord(0, "odd-line", 0),
			seedWord(0, "odd-line", 3),
			seedWord(1, "odd-line", 18),
			seedWord(1, "put", 240, 0, 0, 1, 0),
			seedWord(1, "kick", 241),
			seedWord(1, "use", 8),
			seedWord(1, "watch", 9),
			seedRaw(1, "list-tube-used\r\n"),
		}},
		{"body-split-mid-crlf", 2, []seedStep{
			seedWord(0, "put", 0, 0, 0, 4, 1).hold(1).synced(),
			seedWord(1, "peek", 0),
			seedRaw(0, "").synced(),
			seedWord(0, "put-short", 1, 0, 0, 0, 6, 0).pieces(1),
			seedWord(0, "put-long", 2, 0, 0, 0, 4, 2).hold(3),
			seedWord(0, "put-too-big", 3, 4).pieces(5),
			seedWord(1, "peek", 1),
		}},
		{"quit-mid-stream", 2, []seedStep{
			seedWord(0, "put", 0, 0, 0, 2, 0).later(),
			seedWord(0, "reserve").later(),
			seedWord(0, "quit").later(),
			seedWord(0, "stats").synced(),
			seedWord(1, "reserve-with-timeout", 3),
			seedWord(1, "peek", 0),
		}},
		{"ttr-bury-kick-release", 2, []seedStep{
			seedWord(0, "put", 0, 0, 2, 3, 0),
			seedWord(0, "reserve"),
			seedWord(0, "reserve"),
			seedWord(0, "touch", 0),
			seedWord(0, "bury", 0, 1).synced(),
			seedWord(1, "peek-buried"),
			seedWord(1, "kick", 3).synced(),
			seedWord(0, "reserve"),
			seedWord(0, "release", 0, 0, 3).synced(),
			seedWord(1, "peek-delayed"),
			seedWord(1, "kick-job", 0),
			seedWord(1, "reserve-job", 0),
			seedWord(1, "delete", 0),
		}},
		{"tubes-pause-ignore", 2, []seedStep{
			seedWord(0, "use", 6),
			seedWord(0, "put", 0, 0, 0, 1, 0),
			seedWord(0, "pause-tube", 6, 3),
			seedWord(1, "watch", 6),
			seedWord(1, "ignore", 0),
			seedWord(1, "ignore", 6),
			seedWord(1, "reserve-with-timeout", 0),
			seedWord(1, "stats-tube", 6),
			seedWord(1, "list-tubes"),
			seedWord(0, "use", 7),
			seedWord(0, "list-tube-used"),
		}},
		{"pipeline-byte-by-byte", 4, []seedStep{
			seedWord(3, "put", 0, 0, 0, 3, 0).later(),
			seedWord(3, "put", 3, 0, 0, 248, 1).later(),
			seedWord(3, "peek-ready").later(),
			seedWord(3, "stats-job", 1).pieces(1).synced(),
			seedWord(2, "reserve-job", 1),
			seedWord(1, "list-tubes-watched").pieces(2),
		}},
	}
}

// TestFuzzReplyGrammar pins nextReply, FuzzEngine's oracle: a checker that
// accepted anything would let every fuzzing run pass.
func TestFuzzReplyGrammar(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind replyKind
		n    int    // bytes consumed; 0 means incomplete
		bad  string // a substring of the error, if the reply is malformed
	}{
		{in: "INSERTED 12\r\n", kind: replyInserted, n: 13},
		{in: "BURIED\r\nDELETED\r\n", kind: replyBuried, n: 8},
		{in: "BURIED 3\r\n", kind: replyBuriedID, n: 10},
		{in: "KICKED\r\n", kind: replyKicked, n: 8},
		{in: "KICKED 0\r\n", kind: replyKickedCount, n: 10},
		{in: "USING x(y)$;+/._\r\n", kind: replyUsing, n: 18},
		{in: "OK 14\r\n---\n- default\n\r\n", kind: replyOK, n: 23},
		{in: "RESERVED 1 3\r\nabc\r\nTIMED_OUT\r\n", kind: replyReserved, n: 19},
		{in: "FOUND 2 0\r\n\r\n", kind: replyFound, n: 13},
		{in: "JOB_TOO_BIG\r\n", kind: replyJobTooBig, n: 13},
		{in: ""},
		{in: "WATCH"},
		{in: "WATCHING 2\r"},
		{in: "FOUND 2 3\r\nab"},
		{in: "FOUND 2 3\r\nabc\r"},
		{in: "OK 3\r\n"},
		{in: "INSERTED\r\n", bad: "wants id"},
		{in: "INSERTED 0\r\n", bad: "job id 0"},
		{in: "INSERTED 07\r\n", bad: "not a decimal"},
		{in: "WATCHING -1\r\n", bad: "not a decimal"},
		{in: "WATCHING  1\r\n", bad: "wants count"},
		{in: "DELETED 1\r\n", bad: "takes no arguments"},
		{in: "deleted\r\n", bad: "unknown reply"},
		{in: "DELETED\n", bad: "bare"},
		{in: "DELETED\rX", bad: "not followed"},
		{in: "USING -a\r\n", bad: "not a tube name"},
		{in: "USING " + strings.Repeat("n", 201) + "\r\n", bad: "no line end"},
		{in: "FOUND 1 3\r\nabcd\r\n", bad: "not followed"},
		{in: "RESERVED 1 257\r\n", bad: "over the 256"},
		{in: "RESERVED 1\r\n", bad: "wants id and size"},
		{in: "OK 3\r\nabc\r\n", bad: "---"},
		{in: "OK 14\r\n---\nkey:value\n\r\n", bad: "line"},
		{in: "TIMED_OUT\x00\r\n", bad: "byte"},
	} {
		r, n, err := nextReply([]byte(tc.in))
		switch {
		case tc.bad != "":
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%q: error %v, want one about %q", tc.in, err, tc.bad)
			}
		case err != nil || n != tc.n || (n > 0 && r.kind != tc.kind):
			t.Errorf("%q: kind %d, %d bytes, %v; want kind %d, %d bytes", tc.in, r.kind, n, err, tc.kind, tc.n)
		}
	}
}
