package codec

import (
	"bytes"
	"math"
	"strings"
	"unsafe"
)

const (
	// LineMax is beanstalkd's command buffer (LINE_BUF_SIZE): the longest
	// command line, "\r\n" included. It is also the chunk size in which an
	// over-long line is thrown away, which decides where its end is found.
	LineMax = 224
	// MaxTubeName is the longest tube name in bytes.
	MaxTubeName = 200
	// MaxTimeout is the largest reserve-with-timeout beanstalkd 1.13
	// accepts (INT_MAX); anything above is BAD_FORMAT.
	MaxTimeout = math.MaxInt32
)

type parserState uint8

const (
	// stateLine waits for a whole command line.
	stateLine parserState = iota
	// stateSkipLine throws away an over-long line, LineMax bytes at a time,
	// until a chunk holds its "\r\n".
	stateSkipLine
	// stateBody counts out a put body: in place if it arrives whole, else
	// copied into Parser.body as it comes.
	stateBody
	// stateDiscardBody throws away a too-big put body by count, whatever it
	// contains.
	stateDiscardBody
)

// Parser is one connection's parse state. The zero value is not usable; use
// NewParser. A Parser is not safe for concurrent use: it belongs to the
// connection's event loop. Every connection has one, idle ones included, so
// what only a put needs is made at the connection's first put.
type Parser struct {
	// put holds the put in progress: made at the first put header and
	// kept for the next (a connection that puts once usually puts again);
	// nil on a connection that never put.
	put *putState

	maxJobSize int32 // immutable after NewParser; at most 1 GiB
	state      parserState
}

// putState is a put between its header and the end of its body.
type putState struct {
	// Valid only in stateBody: the body received so far; want and the
	// fields below hold its final length and the header it belongs to.
	body []byte

	// Valid only in stateDiscardBody: bytes still to throw away. int64
	// because a declared 4294967295 plus the "\r\n" overflows uint32.
	discardLeft int64

	// id and at are what the caller gave SetPutID and SetPutAt for
	// this put; 0 and Unstamped if nothing.
	id uint64
	at int64

	// alloc, if set (SetBodyAlloc), makes a body's buffer once it is made
	// at its full size; kept from put to put.
	alloc func(n int) []byte

	// Valid only in stateBody: the body's final length, bytes+2 (at most
	// maxJobSize+2).
	want            int32
	pri, delay, ttr uint32
}

// NewParser returns a parser that rejects put bodies longer than maxJobSize
// bytes (not counting the trailing "\r\n"). A negative size is taken as 0.
func NewParser(maxJobSize int) *Parser {
	return &Parser{maxJobSize: int32(min(max(maxJobSize, 0), math.MaxInt32-2))}
}

// SetPutID records a job id the caller chose for the put whose header Parse
// has just produced; Parse returns it as the ID of the put's OpPutBody. It
// does nothing after any other command, a put header that failed to parse
// included.
func (p *Parser) SetPutID(id uint64) {
	if p.state == stateBody {
		p.put.id = id
	}
}

// Unstamped is the PutAt of a put that was given no time (SetPutAt): its
// body came in the same read as its header. It is the latest time there
// is, so that taking the earlier of it and now gives now.
const Unstamped = math.MaxInt64

// PutUnstamped reports whether the parser waits for the body of a put
// that has no time yet (SetPutAt).
func (p *Parser) PutUnstamped() bool { return p.state == stateBody && p.put.at == Unstamped }

// SetPutAt records, for the put whose body the parser waits for, a time
// of the caller's (when its header came, by the caller's clock); Parse
// returns it as the PutAt of the put's OpPutBody. A caller stamps a put
// whose body has not come by the end of a read, so that a put whose body
// comes with its header costs no clock reading. It does nothing when no
// body is awaited.
func (p *Parser) SetPutAt(at int64) {
	if p.state == stateBody {
		p.put.at = at
	}
}

// SetBodyAlloc has the bodies of this connection's puts, from the one
// whose header Parse has just produced on, allocated by alloc whenever a
// body's buffer is made at its full size (bytes+2), which is how a body
// that arrives in parts ends up allocated; alloc returns at least n bytes,
// whose contents need not be zeroed, or nil to leave the allocation to the
// parser. It does nothing after any other command.
// The engine gives a pool here, so that large bodies reuse memory that is
// still in the processor's cache (see the engine's doc, "Put bodies").
func (p *Parser) SetBodyAlloc(alloc func(n int) []byte) {
	if p.state == stateBody {
		p.put.alloc = alloc
	}
}

// DropBody ends the put whose body is arriving, if there is one, and
// returns what it was being written into (nil if nothing), for a caller
// that recycles it: a connection that closes half way through a put. The
// parser then waits for a command line.
func (p *Parser) DropBody() []byte {
	if p.state != stateBody {
		return nil
	}
	body := p.put.body
	p.state, p.put.body, p.put.want = stateLine, nil, 0
	return body
}

// InBody reports whether the parser is inside a put body or discarding a
// too-big one. Parse consumes body bytes as they arrive (the body itself,
// up to maxJobSize+2 bytes, is held here), so a caller that caps its
// unconsumed input never needs room for a body. Outside a body that input
// is at most one partial line: under LineMax bytes.
func (p *Parser) InBody() bool {
	return p.state == stateBody || p.state == stateDiscardBody
}

// AtLine reports whether the parser waits for a command line: a command
// it produced from there leaving it there again would be produced again,
// byte for byte, from the same input (a caller may put it back).
func (p *Parser) AtLine() bool { return p.state == stateLine }

// Parse consumes from in, which must start at the connection's first
// unconsumed byte, and returns how many bytes it consumed and whether it
// produced a command into *cmd. It produces at most one command per call;
// when it produces one the caller discards n bytes, handles cmd and calls
// again with what is left. When ok is false the caller discards n (body or
// skipped bytes may have been consumed) and waits for more input. A partial
// command line is never consumed.
//
// Parse allocates only the body of an accepted put that arrives over more
// than one call, once per put, and the parser's put state at the
// connection's first put header.
func (p *Parser) Parse(in []byte, cmd *Command) (n int, ok bool) {
	switch p.state {
	case stateBody:
		return p.readBody(in, cmd)
	case stateDiscardBody:
		return p.discardBody(in, cmd)
	case stateSkipLine:
		return p.skipLine(in, cmd)
	}
	return p.parseLine(in, cmd)
}

// lineEnd mirrors beanstalkd's scan_line_end: only the first '\r' counts,
// and only if a '\n' follows it; a bare '\n' ends nothing. It returns the
// line's length including "\r\n", or 0.
func lineEnd(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	i := bytes.IndexByte(b[:len(b)-1], '\r')
	if i < 0 || b[i+1] != '\n' {
		return 0
	}
	return i + 2
}

func (p *Parser) parseLine(in []byte, cmd *Command) (int, bool) {
	if tlsRecord(in) {
		*cmd = Command{Status: TLSRecord}
		return len(in), true
	}
	// beanstalkd only ever looks at a LineMax window, so a "\r\n" beyond it
	// does not end this line even if it has already arrived.
	n := lineEnd(in[:min(len(in), LineMax)])
	if n == 0 {
		if len(in) < LineMax {
			return 0, false
		}
		p.state = stateSkipLine
		skipped, ok := p.skipLine(in[LineMax:], cmd)
		return LineMax + skipped, ok
	}

	*cmd = Command{}
	line := in[: n-2 : n-2]
	if bytes.IndexByte(line, 0) >= 0 {
		// beanstalkd sees a NUL as a short C string and refuses the line
		// before dispatch.
		cmd.Status = BadFormat
		return n, true
	}
	op, args := lookup(line)
	cmd.Op = op
	switch op {
	case OpNone:
		cmd.Status = UnknownCommand
	case OpPut:
		cmd.Status = p.parsePut(args, cmd)
	default:
		cmd.Status = parseArgs(op, args, cmd)
	}
	return n, true
}

// tlsRecord reports whether in starts as a TLS handshake record does:
// content type 22, then protocol version 3.0 to 3.4 (a ClientHello's
// record says 3.1 whatever version it offers). No command starts so.
func tlsRecord(in []byte) bool {
	return len(in) >= 3 && in[0] == 0x16 && in[1] == 0x03 && in[2] <= 0x04
}

// skipLine throws away an over-long line in LineMax chunks, as beanstalkd
// does when its buffer fills: each chunk is scanned on its own, so a "\r\n"
// split across a chunk boundary is missed and the line runs on to the next
// one, swallowing whatever command that ends.
func (p *Parser) skipLine(in []byte, cmd *Command) (int, bool) {
	skipped := 0
	for {
		chunk := in[skipped:min(len(in), skipped+LineMax)]
		if n := lineEnd(chunk); n > 0 {
			p.state = stateLine
			*cmd = Command{Status: BadFormat}
			return skipped + n, true
		}
		if len(chunk) < LineMax {
			return skipped, false
		}
		skipped += LineMax
	}
}

// parsePut follows beanstalkd's order of checks: the four integers, then the
// size limit, and only then trailing garbage, so "put 0 0 0 65536 junk" is
// JOB_TOO_BIG and swallows its declared body.
func (p *Parser) parsePut(args []byte, cmd *Command) Status {
	var v [4]uint64
	for i := range v {
		var ok bool
		if v[i], args, ok = readUint(args, math.MaxUint32); !ok {
			return BadFormat
		}
	}
	cmd.Pri, cmd.Delay, cmd.TTR, cmd.Bytes = uint32(v[0]), uint32(v[1]), uint32(v[2]), uint32(v[3])
	switch {
	case v[3] > uint64(p.maxJobSize):
		p.state = stateDiscardBody
		p.putState().discardLeft = int64(v[3]) + 2
		return PutTooBig
	case len(args) != 0:
		return CountedBadFormat
	}
	p.state = stateBody
	ps := p.putState()
	ps.want, ps.id, ps.at = int32(v[3])+2, 0, Unstamped
	ps.pri, ps.delay, ps.ttr = cmd.Pri, cmd.Delay, cmd.TTR
	return OK
}

// putState returns p.put, making it at the connection's first put.
func (p *Parser) putState() *putState {
	if p.put == nil {
		p.put = new(putState)
	}
	return p.put
}

// firstBodyAlloc is the least room a body that arrives in parts starts with.
const firstBodyAlloc = 4 << 10

// BodyHeld is the memory held for a put body still arriving.
func (p *Parser) BodyHeld() int {
	if p.put == nil {
		return 0
	}
	return cap(p.put.body)
}

// readBody counts the body rather than scanning it: exactly bytes+2 bytes
// belong to it, and anything after is the next command line.
//
// A body that is all in in (the usual case: put's line and body come in
// one packet) is handed over where it is, aliasing in; the caller copies
// what it keeps. Otherwise the body is allocated as its bytes come, with
// room for twice what has arrived and never past its size: one that
// arrives in two halves is allocated once, at its exact size, and a header
// line alone, or a client that stops half way, cannot make the server hold
// the declared size.
func (p *Parser) readBody(in []byte, cmd *Command) (int, bool) {
	ps := p.put
	want := int(ps.want)
	if ps.body == nil && len(in) >= want {
		ps.body = in[:want:want]
		p.finishBody(cmd, true)
		return want, true
	}
	chunk := in[:min(len(in), want-len(ps.body))]
	ps.grow(len(chunk))
	ps.body = append(ps.body, chunk...)
	n := len(chunk)
	if len(ps.body) < want {
		return n, false
	}
	p.finishBody(cmd, false)
	return n, true
}

// grow makes room in the body for the next more bytes (which have
// arrived): room for twice what has arrived, so that a body split over
// two reads (a 64 KiB one always is) is allocated once, and a client that
// stops half way holds at most twice what it sent; never past the body's
// size. The memory is not zeroed: every byte of it is written before the
// body is complete, and nothing reads it before.
func (ps *putState) grow(more int) {
	if more <= cap(ps.body)-len(ps.body) {
		return
	}
	size := min(max(2*cap(ps.body), 2*(len(ps.body)+more), firstBodyAlloc), int(ps.want))
	var grown []byte
	if size == int(ps.want) && ps.alloc != nil {
		grown = ps.alloc(size)
	}
	if grown == nil {
		grown = makeUnzeroed(size)
	}
	grown = grown[:len(ps.body):size]
	copy(grown, ps.body)
	ps.body = grown
}

// BodyNeed is how many bytes of a put body the parser still waits for: 0
// outside a body (or while throwing a too-big one away).
func (p *Parser) BodyNeed() int {
	if p.state != stateBody {
		return 0
	}
	return int(p.put.want) - len(p.put.body)
}

// BodySpace is where the next bytes of the put body the parser waits for
// go, for a caller that reads them there itself (the engine reads the
// socket straight into the job's buffer) instead of handing them to Parse,
// which would copy them. arrived is how many more bytes the caller knows
// to be waiting; the body grows for them as Parse would grow it (BodyNeed
// makes it whole). The space is at most BodyNeed bytes, never more than
// the body's buffer holds, and empty outside a body; BodyFilled says how
// much of it was written. Its bytes are not zeroed.
func (p *Parser) BodySpace(arrived int) []byte {
	need := p.BodyNeed()
	if need == 0 {
		return nil
	}
	ps := p.put
	ps.grow(min(arrived, need))
	return ps.body[len(ps.body):min(cap(ps.body), int(ps.want))]
}

// BodyFilled records that the caller wrote n bytes at the start of the
// last BodySpace, and reports, as Parse does, whether they completed the
// body; if so *cmd is its OpPutBody, and the body is the caller's to keep.
func (p *Parser) BodyFilled(n int, cmd *Command) bool {
	ps := p.put
	ps.body = ps.body[:len(ps.body)+n]
	if len(ps.body) < int(ps.want) {
		return false
	}
	p.finishBody(cmd, false)
	return true
}

// makeUnzeroed returns n bytes whose memory is not zeroed. make zeroes
// what it allocates, and for a large body that is as much work as the
// copy the body arrives by (Sprout's profile of 64 KiB bodies: 7% of its
// CPU in memclrNoHeapPointers). strings.Builder.Grow is the standard
// library's one way to an unzeroed allocation of bytes (it calls
// internal/bytealg.MakeNoZero); String then shares the builder's buffer
// (TestMakeUnzeroed pins both). The builder's first byte is written to get
// a pointer to it, then overwritten by the caller like every other.
func makeUnzeroed(n int) []byte {
	var b strings.Builder
	b.Grow(n)
	b.WriteByte(0)
	return unsafe.Slice(unsafe.StringData(b.String()), n)
}

// finishBody reports the complete body in p.put.body as OpPutBody and
// returns to reading lines.
func (p *Parser) finishBody(cmd *Command, aliased bool) {
	ps := p.put
	body := ps.body
	*cmd = Command{
		Op:          OpPutBody,
		BodyAliased: aliased,
		ID:          ps.id,
		PutAt:       ps.at,
		Pri:         ps.pri,
		Delay:       ps.delay,
		TTR:         ps.ttr,
		Bytes:       uint32(len(body) - 2),
		Body:        body,
	}
	if body[len(body)-2] != '\r' || body[len(body)-1] != '\n' {
		cmd.Status = ExpectedCRLF
	}
	p.state, ps.body, ps.want = stateLine, nil, 0
}

func (p *Parser) discardBody(in []byte, cmd *Command) (int, bool) {
	ps := p.put
	n := int(min(int64(len(in)), ps.discardLeft))
	ps.discardLeft -= int64(n)
	if ps.discardLeft > 0 {
		return n, false
	}
	p.state = stateLine
	*cmd = Command{Op: OpPutTooBig}
	return n, true
}
