package main

import (
	stdflag "flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sproutmq/sprout/internal/docgen"
)

var update = stdflag.Bool("update", false, "rewrite the generated documentation (make docs)")

// The documents generated from flagTable.
const (
	configGuide = "../../docs/configuration.md"
	manPage     = "../../docs/man/sprout.1"
)

// TestDocs: the flag reference in docs/configuration.md and the man page
// sprout(1) are what flagTable generates, and each names every flag, its
// long name and its variable (make docs rewrites them: go test -run
// TestDocs -args -update).
func TestDocs(t *testing.T) {
	ref := configReference()
	docgen.CheckBlock(t, configGuide, "flags", "TestDocs in cmd/sprout", ref, *update)
	man := manual()
	docgen.CheckFile(t, manPage, man, *update)
	for _, f := range flagTable {
		for _, letter := range f.letters {
			if !strings.Contains(ref, "`-"+string(letter)) || !strings.Contains(man, `\fB\-`+string(letter)) {
				t.Errorf("-%c is missing from the reference or the man page", letter)
			}
		}
		if f.long != "" && (!strings.Contains(ref, "`--"+f.long) || !strings.Contains(man, `\fB\-\-`+roff(f.long))) {
			t.Errorf("--%s is missing from the reference or the man page", f.long)
		}
		if env := f.envName(); env != "" && (!strings.Contains(ref, "`"+env+"`") || !strings.Contains(man, roff(env))) {
			t.Errorf("%s is missing from the reference or the man page", env)
		}
	}
}

// groups are flagTable's groups in the order the usage lists them (the
// order of their first flag), so that a new group is documented too.
func groups() []group {
	var gs []group
	for _, f := range flagTable {
		if !slices.Contains(gs, f.group) {
			gs = append(gs, f.group)
		}
	}
	return gs
}

// groupTitle is a heading for g: its usage heading up to the first
// parenthesis, full stop or colon.
func groupTitle(g group) string {
	h := groupHeadings[g]
	if i := strings.IndexAny(h, "(.:"); i > 0 {
		h = h[:i]
	}
	return strings.TrimSpace(h)
}

// spellings are every way f is written, letters first (flag.spellings).
func spellings(f *flag) []string {
	names, long := f.spellings()
	if long != "" {
		names = append(names, long)
	}
	return names
}

// configReference is the flag tables of the configuration guide.
func configReference() string {
	var b strings.Builder
	for _, g := range groups() {
		fmt.Fprintf(&b, "### %s\n\n", groupTitle(g))
		if more := groupHeadings[g]; len(more) > len(groupTitle(g))+1 {
			fmt.Fprintf(&b, "%s\n\n", more)
		}
		b.WriteString("| flag | variable | meaning |\n| --- | --- | --- |\n")
		for _, f := range flagTable {
			if f.group != g {
				continue
			}
			var names []string
			for _, s := range spellings(f) {
				names = append(names, "`"+s+"`")
			}
			env := ""
			if e := f.envName(); e != "" {
				env = "`" + e + "`"
				if f.emptyMeans != "" {
					env += fmt.Sprintf(" (empty: %s)", f.emptyMeans)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", strings.Join(names, ", "), env,
				strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(f.help))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// roff escapes text for a man page: backslashes, and hyphens, which man
// would otherwise render as typographic ones that cannot be copied.
func roff(s string) string {
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// manual is sprout(1): the synopsis and description, then every flag
// from flagTable by group, then what the usage text does not say.
func manual() string {
	var b strings.Builder
	// No date: it would change at every regeneration.
	b.WriteString(`.TH SPROUT 1 "" "Sprout" "User Commands"
.SH NAME
sprout \- a work\-queue server that speaks the beanstalkd protocol
.SH SYNOPSIS
.B sprout
[\fIOPTIONS\fR]
.SH DESCRIPTION
Sprout serves the beanstalkd protocol as of beanstalkd ` + roff(protocolVersion) + `, so beanstalkd's clients
work with it unchanged: jobs are put into tubes, reserved by workers, and
deleted, released, buried or kicked. It keeps jobs in memory, or with
\fB\-b\fR in a write\-ahead log that survives restarts and crashes; with
\fB\-\-node\fR three or five servers replicate one queue through Raft. With
\fB\-\-http\fR it also serves Prometheus metrics, health and readiness probes,
an admin API and a web console.
.PP
beanstalkd's options keep their meaning and syntax: one\-letter options can
be combined (\fB\-VV\fR), and an option that takes a value uses the rest of
its argument or else the next one (\fB\-p1234\fR, \fB\-p 1234\fR). Sprout's own
options are long, written \fB\-\-name VALUE\fR or \fB\-\-name=VALUE\fR, or with one
dash. Sizes are plain decimal numbers.
.SH OPTIONS
`)
	for _, g := range groups() {
		fmt.Fprintf(&b, ".SS %s\n", roff(groupTitle(g)))
		if more := groupHeadings[g]; len(more) > len(groupTitle(g))+1 {
			fmt.Fprintf(&b, "%s\n", roff(more))
		}
		for _, f := range flagTable {
			if f.group != g {
				continue
			}
			var names []string
			for _, s := range spellings(f) {
				name, arg, _ := strings.Cut(s, " ")
				n := `\fB` + roff(name) + `\fR`
				if arg != "" {
					n += ` \fI` + roff(arg) + `\fR`
				}
				names = append(names, n)
			}
			fmt.Fprintf(&b, ".TP\n%s\n%s", strings.Join(names, ", "), roff(f.help))
			if env := f.envName(); env != "" {
				fmt.Fprintf(&b, " (environment: \\fB%s\\fR", roff(env))
				if f.emptyMeans != "" {
					fmt.Fprintf(&b, "; empty: %s", roff(f.emptyMeans))
				}
				b.WriteString(")")
			}
			b.WriteString(".\n")
		}
	}
	b.WriteString(`.SH ENVIRONMENT
Every option with a long name can be set in the environment as
\fBSPROUT_\fR\fINAME\fR, \fINAME\fR being the long name in capitals with _ for \-:
\fBSPROUT_MAX_OUTPUT=1048576\fR, \fBSPROUT_LISTEN\fR for \fB\-l\fR, \fBSPROUT_NO_FSYNC=true\fR for
\fB\-F\fR, \fBSPROUT_VERBOSE=2\fR for \fB\-VV\fR. The command line wins over the environment.
A value is checked as the option's, and a refused one stops the start with
status 5. An empty variable is refused too, except those whose entry above
says what empty means: unset a variable for the default. An unknown
\fBSPROUT_\fR variable is reported on stderr and ignored.
.TP
\fBLISTEN_PID\fR, \fBLISTEN_FDS\fR, \fBLISTEN_FDNAMES\fR
systemd socket activation: when \fBLISTEN_PID\fR is Sprout's pid, it serves the
socket passed as descriptor 3 instead of opening \fB\-l\fR and \fB\-p\fR, as beanstalkd does.
.TP
\fBGOMEMLIMIT\fR, \fBGOGC\fR
kept when set: \fBGOMEMLIMIT\fR instead of the memory limit Sprout derives from its
cgroup, \fBGOGC\fR instead of \fB\-\-gc\-headroom\fR.
.SH SIGNALS
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
graceful shutdown: the listener closes, \fBput\fR answers DRAINING and no job is
handed out, while workers finish the jobs they hold; the server stops once no
job is reserved or after \fB\-\-shutdown\-timeout\fR, writes and fsyncs its log, and
exits 0. A second signal stops it at once (the log is still fsynced).
.TP
\fBSIGUSR1\fR
drain, as in beanstalkd: \fBput\fR answers DRAINING, everything else goes on.
.SH EXIT STATUS
.TP
0
stopped by a signal, after a graceful shutdown
.TP
1
the write\-ahead log could not be read, or the cluster member's log was lost
.TP
5
a usage error: an unknown option, a refused value or variable
.TP
10
another server holds the \fB\-b\fR directory's lock
.TP
12
this cluster member was removed from its cluster
.TP
32, 33, 34
\fB\-u\fR: the user lookup failed, the user is unknown, the switch failed
.TP
111
the listening socket could not be set up
.SH FILES
.TP
\fI/etc/default/sprout\fR
\fBSPROUT_\fR settings read by the systemd unit (\fBsprout.service\fR).
.TP
\fI/var/lib/sprout\fR
the unit's write\-ahead log directory (\fB\-b\fR).
.SH SEE ALSO
\fBsproutctl\fR(1), \fBbeanstalkd\fR(1), \fBsystemd.socket\fR(5).
The guides in the source tree's \fIdocs/\fR directory: configuration, durability,
cluster, operations, the admin API and the web console.
`)
	return b.String()
}
