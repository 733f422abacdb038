package main

import (
	"fmt"
	"io"
	"strings"
)

// Layout of the usage text: the flag in a column of its own, its help
// beside it (or below, when the flag is wider), wrapped.
const (
	usageIndent = 21
	usageWidth  = 79
)

// groupHeadings introduce each group of flagTable in the usage text.
var groupHeadings = map[group]string{
	groupBeanstalkd: "Options, as in beanstalkd:",
	groupWAL: "Write-ahead log, as in beanstalkd (in Sprout's own format; a directory " +
		"of beanstalkd binlog files is imported on first start):",
	groupSprout: "Sprout's own options. The one-dash spelling (-loops 4) is accepted too " +
		"and wins over beanstalkd's combined reading (-l oops):",
	groupTLS: "TLS (docs/tls.md): on the client port and the side port; certificates and CAs " +
		"are read again on SIGHUP and when their files change:",
	groupCluster: "Cluster mode (docs/cluster.md): three or five members replicating one " +
		"queue through Raft; clients may connect to any member:",
}

// writeUsage prints the help text, laid out like beanstalkd's, from
// flagTable.
func writeUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Use: sprout [OPTIONS]\n")
	for _, g := range []group{groupBeanstalkd, groupWAL, groupSprout, groupTLS, groupCluster} {
		b.WriteString("\n")
		wrap(&b, groupHeadings[g], 0, 0)
		for _, f := range flagTable {
			if f.group == g {
				writeFlagUsage(&b, f)
			}
		}
	}
	var empty []string
	for _, f := range flagTable {
		if f.emptyMeans != "" {
			empty = append(empty, fmt.Sprintf("%s= (%s)", f.envName(), f.emptyMeans))
		}
	}
	b.WriteString("\n")
	wrap(&b, "A long name is written --name VALUE or --name=VALUE. Every option with a long "+
		"name can be set in the environment as SPROUT_<NAME>, NAME being the long name in "+
		"capitals with _ for - (SPROUT_LISTEN=0.0.0.0, SPROUT_MAX_OUTPUT=1048576, "+
		"SPROUT_NO_FSYNC=true). The command line wins over the environment. A value that "+
		"is refused stops the start, and so does an empty variable, except "+
		strings.Join(empty, ", ")+"; unset a variable for the default.", 0, 0)
	_, _ = io.WriteString(w, b.String())
}

// writeFlagUsage writes one flag's entry: its one-letter spelling if it
// has one, else its long one; then its help, with the other names.
func writeFlagUsage(b *strings.Builder, f *flag) {
	names, long := f.spellings()
	var also []string
	switch {
	case len(names) == 0:
		names = append(names, long)
	case long != "":
		also = append(also, long)
	}
	if env := f.envName(); env != "" {
		also = append(also, "$"+env)
	}
	help := f.help
	if len(also) > 0 {
		help += " (" + strings.Join(also, ", ") + ")"
	}

	left := " " + strings.Join(names, ", ")
	b.WriteString(left)
	if len(left) < usageIndent-1 {
		b.WriteString(strings.Repeat(" ", usageIndent-len(left)))
	} else {
		b.WriteString("\n" + strings.Repeat(" ", usageIndent))
	}
	wrap(b, help, usageIndent, usageIndent)
}

// spellings are the ways f is written on the command line, with its
// value: each letter (-l ADDR), and the long name (--listen ADDR; "" for
// a row without one).
func (f *flag) spellings() (letters []string, long string) {
	for _, letter := range f.letters {
		name := "-" + string(letter)
		if f.bare == nil && f.arg != "" {
			name += " " + f.arg
		}
		letters = append(letters, name)
	}
	if f.long != "" {
		long = "--" + f.long
		if f.arg != "" {
			long += " " + f.arg
		}
	}
	return letters, long
}

// wrap writes text in lines of at most usageWidth columns, the first
// starting at column first (already reached), the others indented by rest.
func wrap(b *strings.Builder, text string, first, rest int) {
	col := first
	for i, word := range strings.Fields(text) {
		if i > 0 && col+1+len(word) > usageWidth {
			b.WriteString("\n" + strings.Repeat(" ", rest))
			col = rest
		} else if i > 0 {
			b.WriteString(" ")
			col++
		}
		b.WriteString(word)
		col += len(word)
	}
	b.WriteString("\n")
}
