package codec_test

import (
	"strings"
	"testing"

	"github.com/sproutmq/sprout/codec"
)

// Parsing runs for every command on every connection, so only a put body
// that arrives in parts, which must outlive the read buffer, may allocate.
func TestParseAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	lines := []string{
		"use foo\r\n", "reserve\r\n", "reserve-with-timeout 5\r\n", "reserve-job 1\r\n",
		"reserve-with-timeout 0abc\r\n",
		"delete 1\r\n", "release 1 2 3\r\n", "bury 1 2\r\n", "touch 1\r\n", "watch foo\r\n",
		"ignore foo\r\n", "peek 1\r\n", "peek-ready\r\n", "peek-delayed\r\n", "peek-buried\r\n",
		"kick 10\r\n", "kick-job 1\r\n", "stats-job 1\r\n", "stats-tube foo\r\n", "stats\r\n",
		"list-tubes\r\n", "list-tube-used\r\n", "list-tubes-watched\r\n", "pause-tube foo 5\r\n",
		"quit\r\n", "nonsense\r\n", "delete x\r\n", "put 0 0 0 1 x\r\n", "stats\x00\r\n",
		strings.Repeat("z", 3*codec.LineMax) + "\r\n",
	}
	p := codec.NewParser(testMaxJobSize)
	var cmd codec.Command
	for _, line := range lines {
		in := []byte(line)
		allocs := testing.AllocsPerRun(100, func() {
			for in := in; len(in) > 0; {
				n, ok := p.Parse(in, &cmd)
				in = in[n:]
				if !ok {
					t.Fatalf("%q: incomplete", line)
				}
			}
		})
		if allocs != 0 {
			t.Errorf("%q: %v allocs, want 0", line, allocs)
		}
	}

	t.Run("put", func(t *testing.T) {
		in := []byte("put 1 2 3 5\r\nhello\r\n")
		allocs := testing.AllocsPerRun(100, func() {
			for in := in; len(in) > 0; {
				n, _ := p.Parse(in, &cmd)
				in = in[n:]
			}
		})
		if allocs != 0 {
			t.Errorf("%v allocs, want 0 (the body aliases the input)", allocs)
		}
	})

	t.Run("put in parts", func(t *testing.T) {
		in := []byte("put 1 2 3 5\r\nhello\r\n")
		allocs := testing.AllocsPerRun(100, func() {
			for _, part := range [][]byte{in[:15], in[15:]} {
				for len(part) > 0 {
					n, _ := p.Parse(part, &cmd)
					part = part[n:]
				}
			}
		})
		if allocs != 1 {
			t.Errorf("%v allocs, want 1 (the body)", allocs)
		}
	})

	t.Run("too big", func(t *testing.T) {
		in := []byte("put 1 2 3 50\r\n" + strings.Repeat("x", 52))
		allocs := testing.AllocsPerRun(100, func() {
			for in := in; len(in) > 0; {
				n, _ := p.Parse(in, &cmd)
				in = in[n:]
			}
		})
		if allocs != 0 {
			t.Errorf("%v allocs, want 0", allocs)
		}
	})
}

func BenchmarkParsePutReserveDelete(b *testing.B) {
	in := []byte("put 0 0 60 100\r\n" + strings.Repeat("b", 100) + "\r\nreserve\r\ndelete 123456\r\n")
	p := codec.NewParser(65535)
	var cmd codec.Command
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		for in := in; len(in) > 0; {
			n, _ := p.Parse(in, &cmd)
			in = in[n:]
		}
	}
}

func BenchmarkParseLine(b *testing.B) {
	for _, line := range []string{
		"reserve\r\n",
		"delete 123456\r\n",
		"release 123456 1024 0\r\n",
		"use some-tube.name\r\n",
		"list-tubes-watched\r\n",
		"pause-tube some-tube.name 60\r\n",
	} {
		in := []byte(line)
		b.Run(strings.Fields(line)[0], func(b *testing.B) {
			p := codec.NewParser(65535)
			var cmd codec.Command
			b.ReportAllocs()
			for b.Loop() {
				p.Parse(in, &cmd)
			}
		})
	}
}
