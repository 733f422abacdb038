package codec_test

import (
	"strings"
	"testing"

	"github.com/sproutmq/sprout/codec"
)

func put(pri, delay, ttr, n uint32, status codec.Status) codec.Command {
	return codec.Command{Op: codec.OpPut, Status: status, Pri: pri, Delay: delay, TTR: ttr, Bytes: n}
}

func body(pri, delay, ttr uint32, b string, status codec.Status) codec.Command {
	return codec.Command{Op: codec.OpPutBody, Status: status, Pri: pri, Delay: delay, TTR: ttr,
		Bytes: uint32(len(b) - 2), Body: []byte(b)}
}

var tooBig = cmd(codec.OpPutTooBig)

func putCases() []parseCase {
	return []parseCase{
		{name: "simple", in: "put 1 2 3 5\r\nhello\r\n",
			want: cmds(put(1, 2, 3, 5, codec.OK), body(1, 2, 3, "hello\r\n", codec.OK))},
		{name: "empty body", in: "put 0 0 0 0\r\n\r\n",
			want: cmds(put(0, 0, 0, 0, codec.OK), body(0, 0, 0, "\r\n", codec.OK))},
		{name: "body is not scanned", in: "put 0 0 0 8\r\nput \r\n\r\n\r\n",
			want: cmds(put(0, 0, 0, 8, codec.OK), body(0, 0, 0, "put \r\n\r\n\r\n", codec.OK))},
		{name: "max ints", in: "put 4294967295 4294967295 4294967295 1\r\nx\r\n",
			want: cmds(put(4294967295, 4294967295, 4294967295, 1, codec.OK),
				body(4294967295, 4294967295, 4294967295, "x\r\n", codec.OK))},
		{name: "many spaces and leading zeros", in: "put   5    0   0    01\r\nx\r\n",
			want: cmds(put(5, 0, 0, 1, codec.OK), body(5, 0, 0, "x\r\n", codec.OK))},
		{name: "size equal to max is fine", in: "put 0 0 0 10\r\n0123456789\r\n",
			want: cmds(put(0, 0, 0, 10, codec.OK), body(0, 0, 0, "0123456789\r\n", codec.OK))},
		{name: "followed by a command", in: "put 0 0 0 1\r\nx\r\n" + tubeUsedLine,
			want: cmds(put(0, 0, 0, 1, codec.OK), body(0, 0, 0, "x\r\n", codec.OK), tubeUsed)},
		{name: "pending body stays inside the parser", in: "put 0 0 0 5\r\nhel",
			want: cmds(put(0, 0, 0, 5, codec.OK))},

		// EXPECTED_CRLF: the body is counted, and the surplus starts the
		// next line, so "ab\r\n" for bytes=1 leaves "\n" in front of it.
		{name: "expected crlf leaves surplus", in: "put 0 0 0 1\r\nab\r\n" + tubeUsedLine,
			want: cmds(put(0, 0, 0, 1, codec.OK), body(0, 0, 0, "ab\r", codec.ExpectedCRLF), unknown)},
		{name: "expected crlf empty body", in: "put 0 0 0 0\r\nxy" + tubeUsedLine,
			want: cmds(put(0, 0, 0, 0, codec.OK), body(0, 0, 0, "xy", codec.ExpectedCRLF), tubeUsed)},

		// Integer failures: BAD_FORMAT, nothing counted, body not consumed,
		// so the body line comes back as a command of its own.
		{name: "trailing space is CountedBadFormat", in: "put 0 0 0 1 \r\nx\r\n" + tubeUsedLine,
			want: cmds(put(0, 0, 0, 1, codec.CountedBadFormat), unknown, tubeUsed)},
		{name: "trailing letter is CountedBadFormat", in: "put 0 0 0 1x\r\nx\r\n",
			want: cmds(put(0, 0, 0, 1, codec.CountedBadFormat), unknown)},
		{name: "five ints is CountedBadFormat", in: "put 0 0 0 1 1\r\n",
			want: cmds(put(0, 0, 0, 1, codec.CountedBadFormat))},
		{name: "bytes over u32", in: "put 0 0 0 4294967296\r\n" + tubeUsedLine,
			want: cmds(bad(codec.OpPut), tubeUsed)},
		{name: "pri over u32", in: "put 4294967296 0 0 1\r\n", want: cmds(bad(codec.OpPut))},
		{name: "negative delay", in: "put 512 -1 100 0\r\n\r\n", want: cmds(bad(codec.OpPut), unknown)},
		{name: "negative pri", in: "put -1 0 0 1\r\n", want: cmds(bad(codec.OpPut))},
		{name: "plus sign", in: "put +1 0 0 1\r\n", want: cmds(bad(codec.OpPut))},
		{name: "garbage pri", in: "put x 0 0 1\r\n", want: cmds(bad(codec.OpPut))},
		{name: "missing bytes", in: "put 0 0 0\r\n", want: cmds(bad(codec.OpPut))},
		{name: "missing bytes, trailing space", in: "put 0 0 0 \r\n", want: cmds(bad(codec.OpPut))},
		{name: "tab separator", in: "put 0\t0 0 1\r\n", want: cmds(bad(codec.OpPut))},
		{name: "size with letters", in: "put 0 0 0 10b\r\n", want: cmds(put(0, 0, 0, 10, codec.CountedBadFormat))},
		{name: "huge number", in: "put 0 0 0 99999999999999999999999\r\n", want: cmds(bad(codec.OpPut))},

		// Too big: counted at once, the declared bytes+2 are thrown away
		// whatever they are, and JOB_TOO_BIG comes after the discard.
		{name: "too big swallows the next command", in: "put 0 0 0 11\r\ndelete 9999\r\n" + tubeUsedLine,
			want: cmds(put(0, 0, 0, 11, codec.PutTooBig), tooBig, tubeUsed)},
		{name: "too big beats trailing garbage", in: "put 0 0 0 11 junk\r\n0123456789abc" + tubeUsedLine,
			want: cmds(put(0, 0, 0, 11, codec.PutTooBig), tooBig, tubeUsed)},
		{name: "too big max u32", in: "put 0 0 0 4294967295\r\n" + strings.Repeat("x", 100),
			want: cmds(put(0, 0, 0, 4294967295, codec.PutTooBig))},
		{name: "too big partial discard", in: "put 0 0 0 20\r\n0123456789",
			want: cmds(put(0, 0, 0, 20, codec.PutTooBig))},
	}
}

func TestParsePut(t *testing.T) { runParseCases(t, putCases()) }

func jobIDCases() []parseCase {
	cases := []parseCase{
		{name: "release", in: "release 1 2 3\r\n",
			want: cmds(codec.Command{Op: codec.OpRelease, ID: 1, Pri: 2, Delay: 3})},
		{name: "release extra spaces", in: "release 1  2   3\r\n",
			want: cmds(codec.Command{Op: codec.OpRelease, ID: 1, Pri: 2, Delay: 3})},
		{name: "release max", in: "release 18446744073709551615 4294967295 4294967295\r\n",
			want: cmds(codec.Command{Op: codec.OpRelease, ID: 18446744073709551615, Pri: 4294967295, Delay: 4294967295})},
		{name: "release missing delay", in: "release 1 2\r\n", want: cmds(bad(codec.OpRelease))},
		{name: "release trailing space", in: "release 1 2 3 \r\n", want: cmds(bad(codec.OpRelease))},
		{name: "release pri over u32", in: "release 1 4294967296 0\r\n", want: cmds(bad(codec.OpRelease))},
		{name: "release glued", in: "release 1x2 3\r\n", want: cmds(bad(codec.OpRelease))},
		{name: "bury", in: "bury 7 4294967295\r\n", want: cmds(codec.Command{Op: codec.OpBury, ID: 7, Pri: 4294967295})},
		{name: "bury pri over u32", in: "bury 1 4294967296\r\n", want: cmds(bad(codec.OpBury))},
		{name: "bury missing pri", in: "bury 1\r\n", want: cmds(bad(codec.OpBury))},
		{name: "bury bad id", in: "bury x 1\r\n", want: cmds(bad(codec.OpBury))},
	}
	// Every single-id command shares read_u64's rules.
	for _, c := range []struct {
		word string
		op   codec.Op
	}{
		{"peek", codec.OpPeek}, {"reserve-job", codec.OpReserveJob}, {"delete", codec.OpDelete},
		{"touch", codec.OpTouch}, {"kick-job", codec.OpKickJob}, {"stats-job", codec.OpStatsJob},
	} {
		w, op := c.word, c.op
		cases = append(cases,
			parseCase{name: w + " ok", in: w + " 42\r\n", want: cmds(id(op, 42))},
			parseCase{name: w + " zero", in: w + " 0\r\n", want: cmds(id(op, 0))},
			parseCase{name: w + " leading spaces", in: w + "   42\r\n", want: cmds(id(op, 42))},
			parseCase{name: w + " leading zeros", in: w + " 000000000000000000000000000001\r\n", want: cmds(id(op, 1))},
			parseCase{name: w + " max u64", in: w + " 18446744073709551615\r\n", want: cmds(id(op, 18446744073709551615))},
			parseCase{name: w + " over u64", in: w + " 18446744073709551616\r\n", want: cmds(bad(op))},
			parseCase{name: w + " huge", in: w + " 111111111111111111111111111111111\r\n", want: cmds(bad(op))},
			parseCase{name: w + " trailing space", in: w + " 42 \r\n", want: cmds(bad(op))},
			parseCase{name: w + " trailing letters", in: w + " 111foo\r\n", want: cmds(bad(op))},
			parseCase{name: w + " letters", in: w + " foo111\r\n", want: cmds(bad(op))},
			parseCase{name: w + " two ids", in: w + " 111 222\r\n", want: cmds(bad(op))},
			parseCase{name: w + " plus", in: w + " +1\r\n", want: cmds(bad(op))},
			parseCase{name: w + " minus zero", in: w + " -0\r\n", want: cmds(bad(op))},
			parseCase{name: w + " empty", in: w + " \r\n", want: cmds(bad(op))},
			parseCase{name: w + " tab", in: w + " \t1\r\n", want: cmds(bad(op))},
		)
	}
	return cases
}

func TestParseJobIDCommands(t *testing.T) { runParseCases(t, jobIDCases()) }

func tubeNameCases() []parseCase {
	name200 := strings.Repeat("a", 200)
	var cases []parseCase
	for _, c := range []struct {
		word string
		op   codec.Op
	}{
		{"use", codec.OpUse}, {"watch", codec.OpWatch}, {"ignore", codec.OpIgnore}, {"stats-tube", codec.OpStatsTube},
	} {
		w, op := c.word, c.op
		cases = append(cases,
			parseCase{name: w + " ok", in: w + " foo\r\n", want: cmds(tube(op, "foo"))},
			parseCase{name: w + " every name char", in: w + " AZaz09-+/;.$_()\r\n", want: cmds(tube(op, "AZaz09-+/;.$_()"))},
			parseCase{name: w + " trailing hyphen", in: w + " foo-\r\n", want: cmds(tube(op, "foo-"))},
			parseCase{name: w + " dot", in: w + " .\r\n", want: cmds(tube(op, "."))},
			parseCase{name: w + " dotdot", in: w + " ..\r\n", want: cmds(tube(op, ".."))},
			parseCase{name: w + " 200 chars", in: w + " " + name200 + "\r\n", want: cmds(tube(op, name200))},
			parseCase{name: w + " 201 chars", in: w + " " + name200 + "a\r\n", want: cmds(bad(op))},
			parseCase{name: w + " leading hyphen", in: w + " -foo\r\n", want: cmds(bad(op))},
			parseCase{name: w + " extra space before", in: w + "  foo\r\n", want: cmds(bad(op))},
			parseCase{name: w + " trailing space", in: w + " foo \r\n", want: cmds(bad(op))},
			parseCase{name: w + " two words", in: w + " foo bar\r\n", want: cmds(bad(op))},
			parseCase{name: w + " star", in: w + " *\r\n", want: cmds(bad(op))},
			parseCase{name: w + " empty", in: w + " \r\n", want: cmds(bad(op))},
			parseCase{name: w + " high byte", in: w + " caf\xc3\xa9\r\n", want: cmds(bad(op))},
		)
	}
	return cases
}

func TestParseTubeNameCommands(t *testing.T) { runParseCases(t, tubeNameCases()) }

func kick(n uint32) codec.Command { return codec.Command{Op: codec.OpKick, Count: n} }

// kick parses its bound with C's strtoul, unlike every other command.
func kickCases() []parseCase {
	return []parseCase{
		{name: "plain", in: "kick 5\r\n", want: cmds(kick(5))},
		{name: "zero", in: "kick 0\r\n", want: cmds(kick(0))},
		{name: "trailing garbage ignored", in: "kick 1abc\r\n", want: cmds(kick(1))},
		{name: "trailing space ignored", in: "kick 5 \r\n", want: cmds(kick(5))},
		{name: "hex is not parsed", in: "kick 0x5\r\n", want: cmds(kick(0))},
		{name: "plus", in: "kick +1\r\n", want: cmds(kick(1))},
		{name: "minus one wraps", in: "kick -1\r\n", want: cmds(kick(4294967295))},
		{name: "minus zero", in: "kick  -0\r\n", want: cmds(kick(0))},
		{name: "negated max wraps to 1", in: "kick -18446744073709551615\r\n", want: cmds(kick(1))},
		{name: "negated wraps then truncates", in: "kick -18446744073709551614\r\n", want: cmds(kick(2))},
		{name: "truncated to 32 bits", in: "kick 4294967297\r\n", want: cmds(kick(1))},
		{name: "max unsigned long", in: "kick 18446744073709551615\r\n", want: cmds(kick(4294967295))},
		{name: "tab before", in: "kick \t5\r\n", want: cmds(kick(5))},
		{name: "newline before", in: "kick \n5\r\n", want: cmds(kick(5))},
		{name: "vertical tab before", in: "kick \v5\r\n", want: cmds(kick(5))},
		{name: "over unsigned long", in: "kick 18446744073709551616\r\n", want: cmds(bad(codec.OpKick))},
		{name: "negated over unsigned long", in: "kick -18446744073709551616\r\n", want: cmds(bad(codec.OpKick))},
		{name: "huge", in: "kick 99999999999999999999999\r\n", want: cmds(bad(codec.OpKick))},
		{name: "no digits", in: "kick x\r\n", want: cmds(bad(codec.OpKick))},
		{name: "empty", in: "kick \r\n", want: cmds(bad(codec.OpKick))},
		{name: "sign alone", in: "kick -\r\n", want: cmds(bad(codec.OpKick))},
		{name: "sign then space", in: "kick - 5\r\n", want: cmds(bad(codec.OpKick))},
		{name: "no space is unknown", in: "kick\r\n", want: cmds(unknown)},
		{name: "tab instead of space is unknown", in: "kick\t5\r\n", want: cmds(unknown)},
	}
}

func TestParseKick(t *testing.T) { runParseCases(t, kickCases()) }

func rwt(n uint32) codec.Command { return codec.Command{Op: codec.OpReserveWithTimeout, Timeout: n} }

// reserve-with-timeout follows the 1.13 release, whose answers to every case
// here were checked on the wire: read_u32 with an end pointer, so spaces (not
// tabs) may come first, a digit must, the value must be at most INT_MAX, and
// whatever follows the digits is ignored. OK lines are counted in
// cmd-reserve-with-timeout; BadFormat lines are not. (1.12 used strtol, so
// "-1" waited forever and "x" meant 0.)
func reserveWithTimeoutCases() []parseCase {
	badRWT := cmds(bad(codec.OpReserveWithTimeout))
	return []parseCase{
		{name: "zero", in: "reserve-with-timeout 0\r\n", want: cmds(rwt(0))},
		{name: "plain", in: "reserve-with-timeout 30\r\n", want: cmds(rwt(30))},
		{name: "leading spaces", in: "reserve-with-timeout   7\r\n", want: cmds(rwt(7))},
		{name: "leading zeros", in: "reserve-with-timeout 00\r\n", want: cmds(rwt(0))},
		{name: "hundred zeros", in: "reserve-with-timeout " + strings.Repeat("0", 100) + "\r\n", want: cmds(rwt(0))},
		{name: "zeros then one", in: "reserve-with-timeout " + strings.Repeat("0", 150) + "1\r\n", want: cmds(rwt(1))},
		{name: "int max", in: "reserve-with-timeout 2147483647\r\n", want: cmds(rwt(2147483647))},

		// Whatever follows the digits is ignored.
		{name: "trailing space", in: "reserve-with-timeout 0 \r\n", want: cmds(rwt(0))},
		{name: "trailing text", in: "reserve-with-timeout 0abc\r\n", want: cmds(rwt(0))},
		{name: "trailing tab", in: "reserve-with-timeout 0\t\r\n", want: cmds(rwt(0))},
		{name: "tab and text", in: "reserve-with-timeout 0\tabc\r\n", want: cmds(rwt(0))},
		{name: "second number", in: "reserve-with-timeout 0 0\r\n", want: cmds(rwt(0))},
		{name: "trailing minus", in: "reserve-with-timeout 0-1\r\n", want: cmds(rwt(0))},
		{name: "hex reads its zero", in: "reserve-with-timeout 0x10\r\n", want: cmds(rwt(0))},
		{name: "decimal point", in: "reserve-with-timeout 0.5\r\n", want: cmds(rwt(0))},
		{name: "exponent", in: "reserve-with-timeout 1e3\r\n", want: cmds(rwt(1))},
		{name: "letter after one", in: "reserve-with-timeout 1x\r\n", want: cmds(rwt(1))},

		// No digit first, or out of range.
		{name: "empty", in: "reserve-with-timeout \r\n", want: badRWT},
		{name: "spaces only", in: "reserve-with-timeout  \r\n", want: badRWT},
		{name: "letters", in: "reserve-with-timeout x\r\n", want: badRWT},
		{name: "plus", in: "reserve-with-timeout +1\r\n", want: badRWT},
		{name: "minus one", in: "reserve-with-timeout -1\r\n", want: badRWT},
		{name: "minus zero", in: "reserve-with-timeout -0\r\n", want: badRWT},
		{name: "space then minus", in: "reserve-with-timeout  -1\r\n", want: badRWT},
		{name: "tab before", in: "reserve-with-timeout \t0\r\n", want: badRWT},
		{name: "over int max", in: "reserve-with-timeout 2147483648\r\n", want: badRWT},
		{name: "over int max with text", in: "reserve-with-timeout 2147483648abc\r\n", want: badRWT},
		{name: "over int max after zeros", in: "reserve-with-timeout 00000000000000000000002147483648\r\n", want: badRWT},
		{name: "u32 max", in: "reserve-with-timeout 4294967295\r\n", want: badRWT},
		{name: "over u32", in: "reserve-with-timeout 4294967296\r\n", want: badRWT},
		{name: "u64 max", in: "reserve-with-timeout 18446744073709551615\r\n", want: badRWT},
		{name: "over u64", in: "reserve-with-timeout 18446744073709551616\r\n", want: badRWT},
		{name: "forty nines", in: "reserve-with-timeout " + strings.Repeat("9", 40) + "\r\n", want: badRWT},

		// Without its space it is "reserve" with trailing text.
		{name: "no space", in: "reserve-with-timeout\r\n", want: cmds(bad(codec.OpReserve))},
	}
}

func TestParseReserveWithTimeout(t *testing.T) { runParseCases(t, reserveWithTimeoutCases()) }

func pause(name string, delay uint32) codec.Command {
	return codec.Command{Op: codec.OpPauseTube, Tube: []byte(name), Delay: delay}
}

// pause-tube scans for its name instead of taking the rest of the line, and
// its keyword needs no space after it.
func pauseTubeCases() []parseCase {
	name200 := strings.Repeat("a", 200)
	return []parseCase{
		{name: "plain", in: "pause-tube foo 5\r\n", want: cmds(pause("foo", 5))},
		{name: "zero", in: "pause-tube foo 0\r\n", want: cmds(pause("foo", 0))},
		{name: "no space after keyword", in: "pause-tubefoo 5\r\n", want: cmds(pause("foo", 5))},
		{name: "extra spaces", in: "pause-tube  foo   5\r\n", want: cmds(pause("foo", 5))},
		{name: "leading zeros", in: "pause-tube foo  00005\r\n", want: cmds(pause("foo", 5))},
		{name: "max delay", in: "pause-tube foo 4294967295\r\n", want: cmds(pause("foo", 4294967295))},
		{name: "longest legal line", in: "pause-tube " + name200 + " 4294967295\r\n",
			want: cmds(pause(name200, 4294967295))},
		{name: "hyphen inside", in: "pause-tube a-b 5\r\n", want: cmds(pause("a-b", 5))},
		// Parsed, counted, then refused by the name check.
		{name: "leading hyphen", in: "pause-tube -foo 5\r\n", want: cmds(countedBad(codec.OpPauseTube))},
		{name: "201 chars", in: "pause-tube " + name200 + "a 5\r\n", want: cmds(countedBad(codec.OpPauseTube))},
		{name: "no name", in: "pause-tube  5\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "name runs into delay", in: "pause-tube foo5\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "non-name byte before delay", in: "pause-tube foo*5\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "tab before delay", in: "pause-tube foo\t5\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "trailing space", in: "pause-tube foo 5 \r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "trailing letters", in: "pause-tube foo 5x\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "negative delay", in: "pause-tube foo -1\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "plus delay", in: "pause-tube foo +1\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "delay over u32", in: "pause-tube foo 4294967296\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "missing delay", in: "pause-tube foo\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "digits are a name, then no delay", in: "pause-tube  5\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "bare keyword", in: "pause-tube\r\n", want: cmds(bad(codec.OpPauseTube))},
		{name: "control byte name", in: "pause-tube \x01 5\r\n", want: cmds(bad(codec.OpPauseTube))},
	}
}

func TestParsePauseTube(t *testing.T) { runParseCases(t, pauseTubeCases()) }

// Line detection copies beanstalkd's 224-byte buffer exactly, including
// where it goes wrong.
func lineLengthCases() []parseCase {
	name200 := strings.Repeat("a", 200)
	longest := "pause-tube " + name200 + " 4294967295\r\n" // 224 bytes
	return []parseCase{
		{name: "224 bytes is a line", in: longest + tubeUsedLine, want: cmds(pause(name200, 4294967295), tubeUsed)},
		{name: "223 bytes is a line", in: strings.Repeat("x", 221) + "\r\n" + tubeUsedLine,
			want: cmds(unknown, tubeUsed)},
		// The '\r' is the 224th byte, so the '\n' arrives after the
		// discard and the next "\r\n" ends the skipped line.
		{name: "225 bytes swallows the next command", in: strings.Repeat("x", 223) + "\r\n" + tubeUsedLine + tubeUsedLine,
			want: cmds(badLine, tubeUsed)},
		{name: "500 bytes then a put", in: strings.Repeat("z", 498) + "\r\nput 0 0 0 1\r\nx\r\n",
			want: cmds(badLine, put(0, 0, 0, 1, codec.OK), body(0, 0, 0, "x\r\n", codec.OK))},
		{name: "crlf inside the second chunk", in: strings.Repeat("z", 446) + "\r\n" + tubeUsedLine + tubeUsedLine,
			want: cmds(badLine, tubeUsed, tubeUsed)},
		{name: "crlf across a chunk boundary is missed", in: strings.Repeat("z", 447) + "\r\n" + tubeUsedLine + tubeUsedLine,
			want: cmds(badLine, tubeUsed)},
		{name: "long skip", in: strings.Repeat("z", 5000) + "\r\n" + tubeUsedLine,
			want: cmds(badLine, tubeUsed)},
		{name: "skip still pending", in: strings.Repeat("z", 300), pending: strings.Repeat("z", 300-codec.LineMax)},

		// Only the first '\r' counts; after a stray one nothing is a line
		// until the buffer fills.
		{name: "stray cr hides a later crlf", in: "ab\rcd\r\n" + tubeUsedLine, pending: "ab\rcd\r\n" + tubeUsedLine},
		{name: "stray cr then the buffer fills", in: "ab\rcd\r\n" + tubeUsedLine + strings.Repeat("y", 300) + "\r\n" + tubeUsedLine,
			want: cmds(badLine, tubeUsed)},
		{name: "stray cr inside a skipped chunk", in: strings.Repeat("z", 230) + "\rq\r\n" + strings.Repeat("w", 300) + "\r\n" + tubeUsedLine,
			want: cmds(badLine, tubeUsed)},
		{name: "cr as last buffered byte waits", in: "stats\r", pending: "stats\r"},
		{name: "bare lf is not a line end", in: "\n" + tubeUsedLine + tubeUsedLine, want: cmds(unknown, tubeUsed)},
		{name: "bare lf inside a bare word", in: "stats\n" + tubeUsedLine, want: cmds(bad(codec.OpStats))},
		{name: "partial line stays pending", in: "list-tube", pending: "list-tube"},
	}
}

func TestParseLineLength(t *testing.T) { runParseCases(t, lineLengthCases()) }

func dispatchCases() []parseCase {
	return []parseCase{
		{name: "empty line", in: "\r\n", want: cmds(unknown)},
		{name: "unknown word", in: "nont10knowncommand\r\n", want: cmds(unknown)},
		{name: "wrong case", in: "PUT 0 0 0 1\r\n", want: cmds(unknown)},
		{name: "put with tab", in: "put\t0 0 0 1\r\n", want: cmds(unknown)},
		{name: "NUL is bad format before dispatch", in: "stats\x00\r\n", want: cmds(badLine)},
		{name: "NUL in unknown", in: "\x00\r\n", want: cmds(badLine)},
		{name: "two commands in one packet", in: "stats\r\n" + tubeUsedLine, want: cmds(cmd(codec.OpStats), tubeUsed)},

		// Bare words need the exact line...
		{name: "reserve", in: "reserve\r\n", want: cmds(cmd(codec.OpReserve))},
		{name: "peek-ready", in: "peek-ready\r\n", want: cmds(cmd(codec.OpPeekReady))},
		{name: "peek-delayed", in: "peek-delayed\r\n", want: cmds(cmd(codec.OpPeekDelayed))},
		{name: "peek-buried", in: "peek-buried\r\n", want: cmds(cmd(codec.OpPeekBuried))},
		{name: "stats", in: "stats\r\n", want: cmds(cmd(codec.OpStats))},
		{name: "list-tubes", in: "list-tubes\r\n", want: cmds(cmd(codec.OpListTubes))},
		{name: "list-tube-used", in: "list-tube-used\r\n", want: cmds(tubeUsed)},
		{name: "list-tubes-watched", in: "list-tubes-watched\r\n", want: cmds(cmd(codec.OpListTubesWatched))},
		// ...but match as prefixes, so extra text is BAD_FORMAT, not
		// UNKNOWN_COMMAND.
		{name: "reservex", in: "reservex\r\n", want: cmds(bad(codec.OpReserve))},
		{name: "reserve trailing space", in: "reserve \r\n", want: cmds(bad(codec.OpReserve))},
		{name: "reserve-job without space", in: "reserve-job\r\n", want: cmds(bad(codec.OpReserve))},
		{name: "statsx", in: "statsx\r\n", want: cmds(bad(codec.OpStats))},
		{name: "stats-job without space", in: "stats-job\r\n", want: cmds(bad(codec.OpStats))},
		{name: "stats-tube without space", in: "stats-tube\r\n", want: cmds(bad(codec.OpStats))},
		{name: "peek-readyx", in: "peek-readyx\r\n", want: cmds(bad(codec.OpPeekReady))},
		{name: "peek-delayedx", in: "peek-delayedx\r\n", want: cmds(bad(codec.OpPeekDelayed))},
		{name: "peek-buried trailing space", in: "peek-buried \r\n", want: cmds(bad(codec.OpPeekBuried))},
		{name: "list-tubesx", in: "list-tubesx\r\n", want: cmds(bad(codec.OpListTubes))},
		{name: "list-tubes-watchedx", in: "list-tubes-watchedx\r\n", want: cmds(bad(codec.OpListTubesWatched))},
		{name: "list-tube-usedx", in: "list-tube-usedx\r\n", want: cmds(bad(codec.OpListTubeUsed))},
		// Words whose prefix has a space are unknown without it.
		{name: "put alone", in: "put\r\n", want: cmds(unknown)},
		{name: "use alone", in: "use\r\n", want: cmds(unknown)},
		{name: "peek alone", in: "peek\r\n", want: cmds(unknown)},
		{name: "delete alone", in: "delete\r\n", want: cmds(unknown)},
		{name: "kick-job alone", in: "kick-job\r\n", want: cmds(unknown)},
		{name: "list-tube", in: "list-tube\r\n", want: cmds(unknown)},
		// Anything starting with quit quits.
		{name: "quit", in: "quit\r\n", want: cmds(cmd(codec.OpQuit))},
		{name: "quitxyz", in: "quitxyz\r\n", want: cmds(cmd(codec.OpQuit))},
		{name: "quit with args", in: "quit 1 2 3\r\n", want: cmds(cmd(codec.OpQuit))},
		{name: "Quit", in: "Quit\r\n", want: cmds(unknown)},
	}
}

func TestParseDispatch(t *testing.T) { runParseCases(t, dispatchCases()) }

// The caller contract: what Parse consumes, and when it wants more input.
func TestParseConsumption(t *testing.T) {
	var cmd codec.Command

	t.Run("partial line consumes nothing", func(t *testing.T) {
		p := codec.NewParser(testMaxJobSize)
		if n, ok := p.Parse([]byte("delete 12"), &cmd); n != 0 || ok {
			t.Fatalf("got %d, %v", n, ok)
		}
	})

	t.Run("one command per call", func(t *testing.T) {
		p := codec.NewParser(testMaxJobSize)
		in := []byte("stats\r\nstats\r\n")
		if n, ok := p.Parse(in, &cmd); n != 7 || !ok || cmd.Op != codec.OpStats {
			t.Fatalf("got %d, %v, %v", n, ok, cmd.Op)
		}
	})

	t.Run("body bytes are consumed as they come", func(t *testing.T) {
		p := codec.NewParser(testMaxJobSize)
		in := []byte("put 0 0 0 5\r\nhel")
		n, ok := p.Parse(in, &cmd)
		if n != 13 || !ok || cmd.Op != codec.OpPut || !p.InBody() {
			t.Fatalf("header: got %d, %v, %v, InBody %v", n, ok, cmd.Op, p.InBody())
		}
		if n, ok := p.Parse(in[n:], &cmd); n != 3 || ok {
			t.Fatalf("partial body: got %d, %v", n, ok)
		}
		if n, ok := p.Parse([]byte("lo\r\nstats\r\n"), &cmd); n != 4 || !ok || string(cmd.Body) != "hello\r\n" {
			t.Fatalf("rest of body: got %d, %v, %q", n, ok, cmd.Body)
		}
		if p.InBody() {
			t.Fatal("still InBody after the body")
		}
	})

	t.Run("too-big discard is consumed as it comes", func(t *testing.T) {
		p := codec.NewParser(testMaxJobSize)
		if _, ok := p.Parse([]byte("put 0 0 0 20\r\n"), &cmd); !ok || cmd.Status != codec.PutTooBig || !p.InBody() {
			t.Fatalf("header: %v %v InBody %v", ok, cmd.Status, p.InBody())
		}
		if n, ok := p.Parse(make([]byte, 15), &cmd); n != 15 || ok {
			t.Fatalf("first part: got %d, %v", n, ok)
		}
		if n, ok := p.Parse(make([]byte, 15), &cmd); n != 7 || !ok || cmd.Op != codec.OpPutTooBig {
			t.Fatalf("last part: got %d, %v, %v", n, ok, cmd.Op)
		}
	})

	t.Run("skipped chunks are consumed, a partial chunk is not", func(t *testing.T) {
		p := codec.NewParser(testMaxJobSize)
		if n, ok := p.Parse(make([]byte, 2*codec.LineMax+10), &cmd); n != 2*codec.LineMax || ok {
			t.Fatalf("got %d, %v", n, ok)
		}
		if n, ok := p.Parse([]byte("abc\r\nstats\r\n"), &cmd); n != 5 || !ok || cmd.Status != codec.BadFormat {
			t.Fatalf("got %d, %v, %v", n, ok, cmd.Status)
		}
	})

	t.Run("tube aliases the input", func(t *testing.T) {
		p := codec.NewParser(testMaxJobSize)
		in := []byte("use foo\r\n")
		p.Parse(in, &cmd)
		if &cmd.Tube[0] != &in[4] || cap(cmd.Tube) != 3 {
			t.Fatal("Tube should alias the input and not be appendable over it")
		}
	})

	t.Run("command is reset", func(t *testing.T) {
		p := codec.NewParser(testMaxJobSize)
		cmd := codec.Command{ID: 9, Tube: []byte("x"), Body: []byte("y")}
		p.Parse([]byte("stats\r\n"), &cmd)
		if !sameCommand(cmd, codec.Command{Op: codec.OpStats}) {
			t.Fatalf("got %+v", cmd)
		}
	})
}

func TestOpString(t *testing.T) {
	for op, want := range map[codec.Op]string{
		codec.OpNone: "", codec.OpPut: "put", codec.OpPutBody: "put", codec.OpReserveWithTimeout: "reserve-with-timeout",
		codec.OpListTubesWatched: "list-tubes-watched", codec.OpPauseTube: "pause-tube", codec.OpQuit: "quit",
		codec.Op(200): "",
	} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", op, got, want)
		}
	}
}

func TestOpCounter(t *testing.T) {
	for op, want := range map[codec.Op]string{
		codec.OpPut: "cmd-put", codec.OpReserveWithTimeout: "cmd-reserve-with-timeout",
		codec.OpListTubeUsed: "cmd-list-tube-used", codec.OpPauseTube: "cmd-pause-tube",
		codec.OpReserveJob: "", codec.OpKickJob: "", codec.OpQuit: "", codec.OpPutBody: "", codec.OpNone: "",
	} {
		c, ok := op.Counter()
		if ok != (want != "") || (ok && c.String() != want) {
			t.Errorf("%v.Counter() = %v, %v; want %q", op, c, ok, want)
		}
	}
}

// TestBodyHeldGrowsWithArrival: a put header alone holds no memory, a body
// arriving in parts holds about what has arrived, and a body that arrives
// whole is handed over in place.
func TestBodyHeldGrowsWithArrival(t *testing.T) {
	p := codec.NewParser(1 << 20)
	var cmd codec.Command
	if _, ok := p.Parse([]byte("put 0 0 0 1000000\r\n"), &cmd); !ok || cmd.Status != codec.OK {
		t.Fatalf("header: %v %v", ok, cmd.Status)
	}
	if n := p.BodyHeld(); n != 0 {
		t.Fatalf("a header alone holds %d bytes", n)
	}
	part := make([]byte, 10_000)
	if _, ok := p.Parse(part, &cmd); ok {
		t.Fatal("a partial body produced a command")
	}
	if n := p.BodyHeld(); n < 10_000 || n > 20_000 {
		t.Fatalf("10,000 bytes of body hold %d bytes", n)
	}
	rest := append(make([]byte, 1_000_000-10_000), "\r\n"...)
	if _, ok := p.Parse(rest, &cmd); !ok || cmd.Op != codec.OpPutBody || len(cmd.Body) != 1_000_002 {
		t.Fatalf("rest of the body: %v %v %d", ok, cmd.Op, len(cmd.Body))
	}
	if p.BodyHeld() != 0 || cmd.BodyAliased {
		t.Fatalf("the parser kept the body (%d bytes), or called it aliased (%v)", p.BodyHeld(), cmd.BodyAliased)
	}

	if _, ok := p.Parse([]byte("put 0 0 0 5\r\nhello\r\n"), &cmd); !ok {
		t.Fatal("header")
	}
	whole := []byte("hello\r\nstats\r\n")
	if _, ok := p.Parse(whole, &cmd); !ok || !cmd.BodyAliased || &cmd.Body[0] != &whole[0] || cap(cmd.Body) != 7 {
		t.Fatalf("a whole body: aliased %v, cap %d; want it in place, cap exactly 7", cmd.BodyAliased, cap(cmd.Body))
	}
	if p.BodyHeld() != 0 {
		t.Fatal("the parser kept a whole body")
	}

	// More than half a body in the first read: one allocation, exact.
	if _, ok := p.Parse([]byte("put 0 0 0 65535\r\n"), &cmd); !ok {
		t.Fatal("header")
	}
	p.Parse(make([]byte, 40_000), &cmd)
	if _, ok := p.Parse(append(make([]byte, 65535-40_000), "\r\n"...), &cmd); !ok || cap(cmd.Body) != 65537 || cmd.BodyAliased {
		t.Fatalf("a body in two reads: cap %d, aliased %v; want exactly 65537, owned", cap(cmd.Body), cmd.BodyAliased)
	}
}

// The id the caller gives a put at its header, and the time it gives it
// while waiting for the body, come back with its body, whatever arrives
// between; a put given no time has Unstamped, and a later put starts
// without either.
func TestSetPutID(t *testing.T) {
	p := codec.NewParser(100)
	var cmd codec.Command
	parse := func(in string) (int, bool) { return p.Parse([]byte(in), &cmd) }
	if _, ok := parse("put 1 2 3 5\r\n"); !ok || cmd.Op != codec.OpPut {
		t.Fatalf("header: %+v", cmd)
	}
	p.SetPutID(42)
	if _, ok := parse("hel"); ok {
		t.Fatal("a partial body produced a command")
	}
	if !p.PutUnstamped() {
		t.Fatal("a put waiting for its body, given no time, is not unstamped")
	}
	p.SetPutAt(-5)
	if p.PutUnstamped() {
		t.Fatal("a put given a time is still unstamped")
	}
	if _, ok := parse("lo\r\n"); !ok || cmd.Op != codec.OpPutBody || cmd.ID != 42 || cmd.PutAt != -5 || cmd.Pri != 1 {
		t.Fatalf("body: %+v, want OpPutBody with ID 42, PutAt -5", cmd)
	}
	p.SetPutID(7) // after a body: ignored
	p.SetPutAt(7)
	if p.PutUnstamped() {
		t.Fatal("unstamped with no body awaited")
	}
	parse("put 0 0 0 1\r\n")
	if parse("x\r\n"); cmd.ID != 0 || cmd.PutAt != codec.Unstamped {
		t.Errorf("a put whose header was given nothing has ID %d, PutAt %d; want 0, Unstamped", cmd.ID, cmd.PutAt)
	}
	parse("put 0 0 0 1000\r\n") // too big: no body to carry an id
	p.SetPutID(9)
	p.SetPutAt(9)
	if p.PutUnstamped() {
		t.Fatal("a too big put's discarded body is unstamped")
	}
	if _, ok := parse(strings.Repeat("x", 1002)); !ok || cmd.Op != codec.OpPutTooBig {
		t.Fatalf("too big: %+v", cmd)
	}
}

// A TLS handshake where a command line should start (a TLS client on the
// plaintext port) is reported once its record header shows, consuming
// everything; in a body, or after other bytes on the line, it is data.
func TestParseTLSRecord(t *testing.T) {
	hello := "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
	for _, c := range []struct {
		name, in string
		n        int
		ok       bool
		status   codec.Status
	}{
		{"client hello", hello, len(hello), true, codec.TLSRecord},
		{"after a command", "stats\r\n" + hello, 7, true, codec.OK},
		{"header not yet whole", "\x16\x03", 0, false, codec.OK},
		{"not a handshake version", "\x16\x05\x01\r\n", 5, true, codec.UnknownCommand},
		{"inside a line", "x\x16\x03\x01\r\n", 6, true, codec.UnknownCommand},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := codec.NewParser(testMaxJobSize)
			var cmd codec.Command
			n, ok := p.Parse([]byte(c.in), &cmd)
			if n != c.n || ok != c.ok || ok && cmd.Status != c.status {
				t.Fatalf("Parse = %d, %v, %v; want %d, %v, %v", n, ok, cmd.Status, c.n, c.ok, c.status)
			}
		})
	}
	p := codec.NewParser(testMaxJobSize)
	var cmd codec.Command
	in := []byte("put 0 0 0 5\r\n" + hello[:5] + "\r\n")
	n, _ := p.Parse(in, &cmd)
	if n, ok := p.Parse(in[n:], &cmd); !ok || cmd.Op != codec.OpPutBody || n != 7 {
		t.Fatalf("a body that starts like a TLS record: %d, %v, %v", n, ok, cmd.Op)
	}
}
