package codec

import "math"

// dispatch is beanstalkd's which_cmd: case-sensitive prefix matches, tried
// in which_cmd's order. Prefixes with different first bytes cannot both
// match, so they are grouped by first byte and only the order within a
// group matters. Prefixes without a trailing space ("reserve", "stats", ...)
// also catch longer words, which parseArgs then rejects as BAD_FORMAT rather
// than UNKNOWN_COMMAND; that is also why "reserve-job " must precede
// "reserve" and "stats-job " must precede "stats".
var dispatch = [256][]struct {
	prefix string
	op     Op
}{
	'p': {
		{"put ", OpPut},
		{"peek ", OpPeek},
		{"peek-ready", OpPeekReady},
		{"peek-delayed", OpPeekDelayed},
		{"peek-buried", OpPeekBuried},
		{"pause-tube", OpPauseTube},
	},
	'r': {
		{"reserve-with-timeout ", OpReserveWithTimeout},
		{"reserve-job ", OpReserveJob},
		{"reserve", OpReserve},
		{"release ", OpRelease},
	},
	'd': {{"delete ", OpDelete}},
	'b': {{"bury ", OpBury}},
	'k': {
		{"kick ", OpKick},
		{"kick-job ", OpKickJob},
	},
	't': {{"touch ", OpTouch}},
	's': {
		{"stats-job ", OpStatsJob},
		{"stats-tube ", OpStatsTube},
		{"stats", OpStats},
	},
	'u': {{"use ", OpUse}},
	'w': {{"watch ", OpWatch}},
	'i': {{"ignore ", OpIgnore}},
	'l': {
		{"list-tubes-watched", OpListTubesWatched},
		{"list-tube-used", OpListTubeUsed},
		{"list-tubes", OpListTubes},
	},
	'q': {{"quit", OpQuit}},
}

// lookup returns the command a line starts with and the rest of the line
// after its prefix, or OpNone.
func lookup(line []byte) (Op, []byte) {
	if len(line) == 0 {
		return OpNone, nil
	}
	for _, c := range dispatch[line[0]] {
		if len(line) >= len(c.prefix) && string(line[:len(c.prefix)]) == c.prefix {
			return c.op, line[len(c.prefix):]
		}
	}
	return OpNone, nil
}

// parseArgs parses the arguments of every command but put. Fields are set
// only when the whole line is acceptable.
func parseArgs(op Op, args []byte, cmd *Command) Status {
	switch op {
	case OpPeek, OpReserveJob, OpDelete, OpTouch, OpKickJob, OpStatsJob:
		id, rest, ok := readUint(args, math.MaxUint64)
		if !ok || len(rest) != 0 {
			return BadFormat
		}
		cmd.ID = id

	case OpRelease:
		id, rest, ok1 := readUint(args, math.MaxUint64)
		pri, rest, ok2 := readUint(rest, math.MaxUint32)
		delay, rest, ok3 := readUint(rest, math.MaxUint32)
		if !ok1 || !ok2 || !ok3 || len(rest) != 0 {
			return BadFormat
		}
		cmd.ID, cmd.Pri, cmd.Delay = id, uint32(pri), uint32(delay)

	case OpBury:
		id, rest, ok1 := readUint(args, math.MaxUint64)
		pri, rest, ok2 := readUint(rest, math.MaxUint32)
		if !ok1 || !ok2 || len(rest) != 0 {
			return BadFormat
		}
		cmd.ID, cmd.Pri = id, uint32(pri)

	case OpReserveWithTimeout:
		// 1.13 reads it with read_u32(…, &end_buf) and never looks at
		// end_buf: the number must start with a digit and fit, but whatever
		// follows it ("0 ", "0abc", "1\t") is ignored.
		timeout, _, ok := readUint(args, MaxTimeout)
		if !ok {
			return BadFormat
		}
		cmd.Timeout = uint32(timeout)

	case OpKick:
		bound, ok := readKickBound(args)
		if !ok {
			return BadFormat
		}
		cmd.Count = bound

	case OpUse, OpWatch, OpIgnore, OpStatsTube:
		// The whole rest of the line is the name, so a second space, a
		// trailing space or a second word makes it invalid.
		if !validName(args) {
			return BadFormat
		}
		cmd.Tube = args[:len(args):len(args)]

	case OpPauseTube:
		// Unlike the others, pause-tube scans for the name: spaces before it
		// are skipped and it ends at the first non-name byte.
		start := skipSpaces(args)
		end := start
		for end < len(args) && isNameChar(args[end]) {
			end++
		}
		delay, rest, ok := readUint(args[end:], math.MaxUint32)
		name := args[start:end:end]
		if !ok || len(rest) != 0 || end == start {
			return BadFormat
		}
		if !validName(name) {
			return CountedBadFormat
		}
		cmd.Tube, cmd.Delay = name, uint32(delay)

	case OpQuit:
		// Anything starting with "quit" quits.

	default:
		// The rest are bare words that matched as a prefix.
		if len(args) != 0 {
			return BadFormat
		}
	}
	return OK
}

// readUint is beanstalkd's read_u32/read_u64: spaces (only spaces) are
// skipped, then a decimal digit must follow, so signs are refused; the value
// must fit in 64 bits and not exceed limit. It returns the bytes after the
// digits; on failure rest is nil, so chained reads fail too.
func readUint(b []byte, limit uint64) (v uint64, rest []byte, ok bool) {
	b = b[skipSpaces(b):]
	v, n, ok := readDigits(b)
	if !ok || n == 0 || v > limit {
		return 0, nil, false
	}
	return v, b[n:], true
}

// readKickBound is C's strtoul(s, &end, 10) as beanstalkd's kick uses it:
// leading isspace bytes, an optional sign, digits, and anything after them
// ignored. Only "no digits" and overflow of unsigned long are errors; a
// negative value wraps modulo 2^64 as C does, and the result is then
// truncated to the unsigned int beanstalkd stores it in.
func readKickBound(b []byte) (uint32, bool) {
	i := 0
	for i < len(b) && isCSpace(b[i]) {
		i++
	}
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	v, n, ok := readDigits(b[i:])
	if !ok || n == 0 {
		return 0, false
	}
	if neg {
		v = -v
	}
	return uint32(v), true
}

// readDigits reads the decimal digits at the start of b; n is how many.
// Like strtoumax and strtoul it fails (ERANGE) if they overflow 64 bits.
func readDigits(b []byte) (v uint64, n int, ok bool) {
	for ; n < len(b) && isDigit(b[n]); n++ {
		d := uint64(b[n] - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, 0, false
		}
		v = v*10 + d
	}
	return v, n, true
}

// ValidTubeName reports whether name is a tube name the protocol accepts,
// for callers that take names from elsewhere (the admin API's paths).
func ValidTubeName(name []byte) bool { return validName(name) }

// validName is beanstalkd's name_is_ok: 1 to MaxTubeName name characters,
// not starting with '-'.
func validName(name []byte) bool {
	if len(name) == 0 || len(name) > MaxTubeName || name[0] == '-' {
		return false
	}
	for _, c := range name {
		if !isNameChar(c) {
			return false
		}
	}
	return true
}

func isNameChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '+', '/', ';', '.', '$', '_', '(', ')':
		return true
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isCSpace is isspace in the C locale.
func isCSpace(c byte) bool {
	return c == ' ' || ('\t' <= c && c <= '\r')
}

func skipSpaces(b []byte) int {
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	return i
}
