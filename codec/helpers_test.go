package codec_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/sproutmq/sprout/codec"
)

// testMaxJobSize is small so the too-big path is cheap to reach.
const testMaxJobSize = 10

// feed simulates a connection's input buffer: chunks arrive one at a time
// and Parse runs until it wants more, discarding what it consumed.
func feed(t testing.TB, p *codec.Parser, chunks ...[]byte) (cmds []codec.Command, pending []byte) {
	t.Helper()
	var buf []byte
	for _, chunk := range chunks {
		buf = append(buf, chunk...)
		for {
			var cmd codec.Command
			n, ok := p.Parse(buf, &cmd)
			if n < 0 || n > len(buf) {
				t.Fatalf("Parse consumed %d of %d bytes", n, len(buf))
			}
			if !ok && n == 0 && len(buf) >= codec.LineMax && !p.InBody() {
				t.Fatalf("Parse stalled on %d buffered bytes", len(buf))
			}
			buf = buf[n:]
			if !ok {
				break
			}
			// Tube, and Body if aliased, alias buf, which the next
			// append may overwrite.
			cmd.Tube = bytes.Clone(cmd.Tube)
			if cmd.BodyAliased {
				cmd.Body = bytes.Clone(cmd.Body)
			}
			cmds = append(cmds, cmd)
		}
	}
	return cmds, buf
}

func sameCommand(a, b codec.Command) bool {
	return a.Op == b.Op && a.Status == b.Status && a.ID == b.ID &&
		a.Pri == b.Pri && a.Delay == b.Delay && a.TTR == b.TTR &&
		a.Bytes == b.Bytes && a.Count == b.Count && a.Timeout == b.Timeout &&
		bytes.Equal(a.Tube, b.Tube) && bytes.Equal(a.Body, b.Body)
}

func sameCommands(a, b []codec.Command) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameCommand(a[i], b[i]) {
			return false
		}
	}
	return true
}

func formatCommands(cmds []codec.Command) string {
	var sb strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&sb, "\n\t{%v %v", c.Op, c.Status)
		for _, f := range []struct {
			name string
			v    uint64
		}{{"ID", c.ID}, {"Pri", uint64(c.Pri)}, {"Delay", uint64(c.Delay)}, {"TTR", uint64(c.TTR)},
			{"Bytes", uint64(c.Bytes)}, {"Count", uint64(c.Count)}, {"Timeout", uint64(c.Timeout)}} {
			if f.v != 0 {
				fmt.Fprintf(&sb, " %s:%d", f.name, f.v)
			}
		}
		if c.Tube != nil {
			fmt.Fprintf(&sb, " Tube:%q", c.Tube)
		}
		if c.Body != nil {
			fmt.Fprintf(&sb, " Body:%q", c.Body)
		}
		sb.WriteString("}")
	}
	return sb.String()
}

// parseCase is one row of a per-family table. want lists every command the
// input produces, in order; pending is what must stay unconsumed.
type parseCase struct {
	name    string
	in      string
	want    []codec.Command
	pending string
}

// runParseCases checks each case fed whole and fed one byte at a time: a
// connection may deliver any split, and the answer must not depend on it.
func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, pending := feed(t, codec.NewParser(testMaxJobSize), []byte(tc.in))
			if !sameCommands(got, tc.want) {
				t.Errorf("input %q\ngot:%s\nwant:%s", tc.in, formatCommands(got), formatCommands(tc.want))
			}
			if string(pending) != tc.pending {
				t.Errorf("input %q: pending %q, want %q", tc.in, pending, tc.pending)
			}

			got, pending = feed(t, codec.NewParser(testMaxJobSize), splitBytes([]byte(tc.in))...)
			if !sameCommands(got, tc.want) {
				t.Errorf("input %q byte by byte\ngot:%s\nwant:%s", tc.in, formatCommands(got), formatCommands(tc.want))
			}
			if string(pending) != tc.pending {
				t.Errorf("input %q byte by byte: pending %q, want %q", tc.in, pending, tc.pending)
			}
		})
	}
}

func splitBytes(b []byte) [][]byte {
	chunks := make([][]byte, len(b))
	for i := range b {
		chunks[i] = b[i : i+1]
	}
	return chunks
}

// Shorthands for expected commands.
func cmd(op codec.Op) codec.Command { return codec.Command{Op: op} }
func bad(op codec.Op) codec.Command { return codec.Command{Op: op, Status: codec.BadFormat} }
func countedBad(op codec.Op) codec.Command {
	return codec.Command{Op: op, Status: codec.CountedBadFormat}
}
func id(op codec.Op, id uint64) codec.Command {
	return codec.Command{Op: op, ID: id}
}
func tube(op codec.Op, name string) codec.Command {
	return codec.Command{Op: op, Tube: []byte(name)}
}
func cmds(c ...codec.Command) []codec.Command { return c }

var (
	unknown      = codec.Command{Status: codec.UnknownCommand}
	badLine      = codec.Command{Status: codec.BadFormat}
	tubeUsed     = cmd(codec.OpListTubeUsed)
	tubeUsedLine = "list-tube-used\r\n"
)
