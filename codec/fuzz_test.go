package codec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sproutmq/sprout/codec"
)

func allParseCases() []parseCase {
	var all []parseCase
	for _, family := range [][]parseCase{
		putCases(), jobIDCases(), tubeNameCases(), kickCases(),
		reserveWithTimeoutCases(), pauseTubeCases(), lineLengthCases(), dispatchCases(),
	} {
		all = append(all, family...)
	}
	return all
}

// pipelines cross parser states: body into command, skip into put, too-big
// into a stray '\r'.
var pipelines = []string{
	"put 0 0 0 3\r\nabc\r\nuse foo\r\nput 0 0 0 30\r\n" + strings.Repeat("q", 32) + "stats\r\n",
	strings.Repeat("x", 230) + "\r\nput 1 2 3 1\r\nz\r\nkick -1\r\nquit\r\n",
	"put 0 0 0 1\r\nab\r\npause-tube a 1\r\nx\r" + strings.Repeat("y", 240) + "\r\n",
	"put 0 0 0 11 x\r\n" + strings.Repeat("\r\n", 7) + "use\r\nquit\r\nstats\r\n",
}

// FuzzParseSplit checks that no split of the input changes what it parses
// to: a connection may deliver bytes in any pieces. Trying every split point
// makes each execution quadratic, so minimizing a new input can take the
// whole default -fuzzminimizetime (60s); pass -fuzzminimizetime=5s to keep
// a short run fuzzing.
func FuzzParseSplit(f *testing.F) {
	for _, tc := range allParseCases() {
		f.Add([]byte(tc.in), uint8(testMaxJobSize))
	}
	for _, in := range pipelines {
		f.Add([]byte(in), uint8(testMaxJobSize))
	}

	f.Fuzz(func(t *testing.T, in []byte, maxJobSize uint8) {
		want, wantPending := feed(t, codec.NewParser(int(maxJobSize)), in)
		check := func(how string, chunks ...[]byte) {
			got, pending := feed(t, codec.NewParser(int(maxJobSize)), chunks...)
			if !sameCommands(got, want) || string(pending) != string(wantPending) {
				t.Fatalf("input %q %s:\ngot:%s\npending %q\nwant:%s\npending %q",
					in, how, formatCommands(got), pending, formatCommands(want), wantPending)
			}
		}
		check("byte by byte", splitBytes(in)...)
		// Trying every split point costs quadratic time, which would starve
		// the fuzzer on long inputs; those get a sample of points instead.
		step := 1
		if len(in) > 1024 {
			step = len(in) / 256
		}
		for i := 1; i < len(in); i += step {
			check(fmt.Sprintf("split at %d", i), in[:i], in[i:])
		}
		if len(in) > 2 {
			third := len(in) / 3
			check("in thirds", in[:third], in[third:2*third], in[2*third:])
		}
	})
}
