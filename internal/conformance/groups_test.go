package conformance

import (
	"bytes"
	"crypto/tls"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/meta"
)

// clusterGroups is how many shard groups the groups tests' cluster runs.
const clusterGroups = 3

// TestRandomClusterGroups is TestRandom through a member of a
// three-member cluster of three shard groups (--cluster-groups 3): the
// tubes of the grammar live in all three groups, so the member sends each
// command to one group's leader (one of them itself, two others), fans
// stats and list-tubes out to all three, and answers reserves across
// groups. Job ids are translated between the two servers and the
// documented differences of shard groups are avoided or allowed as doc.go
// says ("Shard groups").
func TestRandomClusterGroups(t *testing.T) {
	seed, steps, header := clusterRandom(t)
	s := newGroupsSession(t, header)
	s.bursts = true
	runRandom(t, s, seed, steps)
	t.Logf("%d jobs paired; %d of %d list-tubes replies listed the same tubes in another order",
		len(s.groups.toSut), s.groups.reordered, s.groups.tubeLists)
}

// newGroupsSession starts the reference and a cluster of clusterGroups
// groups, and returns the session between the reference and a member.
func newGroupsSession(t *testing.T, header string) *session {
	var placement *meta.State
	s := newSessionWith(t, header, func() (string, *tls.Config) {
		start := time.Now()
		addr, p := startCluster(t, clusterGroups)
		t.Logf("the cluster of %d groups took %v to start and balance", clusterGroups, time.Since(start).Round(time.Millisecond))
		placement = p
		return addr, nil
	})
	s.inCluster, s.groups = true, newGroupsView(placement)
	return s
}

// groupsView is what a session through a member of a cluster of several
// shard groups keeps to compare it with the reference (session.groups).
// Only the session's goroutine touches it.
//
// Job ids: Sprout's carry their group (meta.JobID: group g's are
// g << meta.SeqBits plus a sequence from 1, so group 0's are 1, 2, 3, ...),
// the reference's count from 1 over every put. Each INSERTED pairs the two
// ids issued by the same put; commands name the reference's ids, and
// Sprout gets its own in their place (render, translateLines); Sprout's
// replies are compared with its ids replaced by the reference's
// (toReference). A number the reference issued no job for (one past the
// last, one an EXPECTED_CRLF used up, 0, 2^32, 2^64-1, a malformed one)
// goes to both unchanged, as it is no job on either: except when Sprout
// issued that very number to a job (group 0's ids run below the
// reference's, and may reach a number the reference used up), since
// Sprout would then find the job that number is to it. Sprout then gets
// the number 2^44 above it, in the same group and just as certainly no job
// (a group would need 2^44 puts to issue it), so that both answer
// NOT_FOUND as one server would.
type groupsView struct {
	placement *meta.State
	toSut     map[uint64]uint64 // reference id → Sprout id
	toRef     map[uint64]uint64 // Sprout id → reference id
	last      map[uint16]uint64 // the last Sprout id each group issued
	used      map[int]string    // each connection's used tube, from the reference's replies

	tubeLists, reordered int // list-tubes replies compared as sets, and those in another order: for the log
}

func newGroupsView(placement *meta.State) *groupsView {
	return &groupsView{
		placement: placement,
		toSut:     map[uint64]uint64{},
		toRef:     map[uint64]uint64{},
		last:      map[uint16]uint64{},
		used:      map[int]string{},
	}
}

// The bytes that mark a job id in a command (markID): they are in no
// command the generator or a script writes around an id, and texts that
// carry a body are never rendered.
const (
	idOpen  = '\x01'
	idClose = '\x02'
)

// markID marks id, a job id in the reference's numbering as a command
// spells it (leading zeros and all), for render.
func markID(id string) string { return string(idOpen) + id + string(idClose) }

// markedIDs are the values of the ids marked in text that are numbers.
func markedIDs(text []byte) []uint64 {
	var ids []uint64
	for {
		i := bytes.IndexByte(text, idOpen)
		if i < 0 {
			return ids
		}
		j := bytes.IndexByte(text[i:], idClose)
		if j < 0 {
			return ids
		}
		if v, err := strconv.ParseUint(string(text[i+1:i+j]), 10, 64); err == nil {
			ids = append(ids, v)
		}
		text = text[i+j+1:]
	}
}

// render is text as the reference gets it (the marks taken away) and as
// Sprout gets it: each marked id the reference issued replaced by
// Sprout's, with the same leading zeros. Anything else marked (an id
// never issued, or one a NUL byte split, which both answer BAD_FORMAT)
// goes to both as it is. A text without marks is sent as it is, to both.
func (v *groupsView) render(text []byte) (ref, sut []byte) {
	if bytes.IndexByte(text, idOpen) < 0 {
		return text, text
	}
	for {
		i := bytes.IndexByte(text, idOpen)
		if i < 0 {
			return append(ref, text...), append(sut, text...)
		}
		j := bytes.IndexByte(text[i:], idClose)
		if j < 0 {
			panic(fmt.Sprintf("conformance: an id marked without its end in %q", text))
		}
		ref = append(ref, text[:i]...)
		sut = append(sut, text[:i]...)
		id := text[i+1 : i+j]
		ref = append(ref, id...)
		sut = append(sut, v.sproutID(id)...)
		text = text[i+j+1:]
	}
}

// byIDLine matches a command line that names a job id, as scripts write
// them: the verb, spaces, the id's digits, and whatever follows.
var byIDLine = regexp.MustCompile(`^(delete|peek|touch|kick-job|stats-job|reserve-job|release|bury)( +)([0-9]+)`)

// translateLines is a script's text as Sprout gets it: in each line that
// names a job id (byIDLine), the reference's id replaced by Sprout's
// (sproutID). Scripts spell ids out, unmarked; what the translation must
// not touch, bodies that read like such a line, is in none of those
// TestScriptedClusterGroups runs. Lines are split at \r\n; a line split
// across steps is sent as it is.
func (v *groupsView) translateLines(text []byte) []byte {
	var out []byte
	for line := range bytes.SplitAfterSeq(text, []byte("\r\n")) {
		m := byIDLine.FindSubmatchIndex(line)
		if m == nil {
			out = append(out, line...)
			continue
		}
		out = append(out, line[:m[6]]...)
		out = append(out, v.sproutID(line[m[6]:m[7]])...)
		out = append(out, line[m[7]:]...)
	}
	return out
}

// sproutID is id, a run of digits, with the reference's job id replaced by
// Sprout's, or id itself if it is no job id the reference issued, unless
// Sprout issued it: then unissued (see groupsView). Leading zeros stay.
func (v *groupsView) sproutID(id []byte) []byte {
	n, err := strconv.ParseUint(string(id), 10, 64)
	if err != nil {
		return id
	}
	s, ok := v.toSut[n]
	if !ok {
		if _, issued := v.toRef[n]; !issued {
			return id
		}
		s = unissued(n)
	}
	zeros := len(id) - len(bytes.TrimLeft(id, "0"))
	return append(bytes.Repeat([]byte("0"), min(zeros, len(id)-1)), strconv.FormatUint(s, 10)...)
}

// unissued is a number in the group of Sprout's id n that the group never
// issued: 2^44 further in its sequence.
func unissued(n uint64) uint64 { return n + 1<<(meta.SeqBits-1) }

// learn follows one pair of replies on connection conn, before they are
// compared: USING sets the connection's used tube, and a pair of INSERTED
// pairs their ids. It returns why Sprout's id cannot be the one its put
// should have issued: an id issued before, one of no group, of another
// group than the used tube's, or not above the last its group issued.
func (v *groupsView) learn(conn int, ref, sut []byte) error {
	if name, ok := bytes.CutPrefix(ref, []byte("USING ")); ok {
		v.used[conn] = string(bytes.TrimSuffix(name, []byte("\r\n")))
		return nil
	}
	a, okA := insertedID(ref)
	b, okB := insertedID(sut)
	if !okA || !okB {
		return nil
	}
	tube := v.tube(conn)
	want := v.placement.Owner(tube)
	g, ok := v.placement.GroupOfID(b)
	switch {
	case v.toSut[a] != 0:
		return fmt.Errorf("test bug: beanstalkd issued job id %d twice", a)
	case v.toRef[b] != 0:
		return fmt.Errorf("sprout issued job id %d twice (to beanstalkd's %d, and now %d)", b, v.toRef[b], a)
	case !ok:
		return fmt.Errorf("sprout issued job id %d, of no group", b)
	case g != want:
		return fmt.Errorf("sprout issued job id %d, of group %d, for a put into %q, of group %d", b, g, tube, want)
	case b <= v.last[g]:
		return fmt.Errorf("sprout issued job id %d in group %d after %d", b, g, v.last[g])
	}
	v.toSut[a], v.toRef[b], v.last[g] = b, a, b
	return nil
}

// tube is connection conn's used tube.
func (v *groupsView) tube(conn int) string {
	if t, ok := v.used[conn]; ok {
		return t
	}
	return "default"
}

// forget drops what was known of connection conn, which closed: its next
// use is a new connection.
func (v *groupsView) forget(conn int) { delete(v.used, conn) }

// insertedID is the id of an INSERTED reply.
func insertedID(reply []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(reply, []byte("INSERTED "))
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(string(bytes.TrimSuffix(rest, []byte("\r\n"))), 10, 64)
	return id, err == nil
}

// idReplies are the replies whose first line carries a job id after the
// word.
var idReplies = [][]byte{[]byte("INSERTED "), []byte("BURIED "), []byte("RESERVED "), []byte("FOUND ")}

// toReference is Sprout's reply with its job ids replaced by the
// reference's: the id of INSERTED, BURIED, RESERVED and FOUND, and the id
// line of stats-job. Bodies are left alone. An id not paired stays, and
// the comparison shows it.
func (v *groupsView) toReference(reply []byte) []byte {
	line, rest, ok := bytes.Cut(reply, []byte("\r\n"))
	if !ok {
		return reply
	}
	for _, word := range idReplies {
		if args, ok := bytes.CutPrefix(line, word); ok {
			id, tail, _ := bytes.Cut(args, []byte(" "))
			ref, ok := v.referenceID(id)
			if !ok {
				return reply
			}
			out := append(slices.Clone(word), ref...)
			if len(tail) > 0 || bytes.Contains(args, []byte(" ")) {
				out = append(append(out, ' '), tail...)
			}
			return append(append(out, "\r\n"...), rest...)
		}
	}
	// stats-job: "OK <n>\r\n---\nid: <id>\n...".
	if body, ok := bytes.CutPrefix(rest, []byte("---\nid: ")); ok && bytes.HasPrefix(line, []byte("OK ")) {
		id, after, _ := bytes.Cut(body, []byte("\n"))
		if ref, ok := v.referenceID(id); ok {
			out := append(slices.Clone(line), "\r\n---\nid: "...)
			return append(append(append(out, ref...), '\n'), after...)
		}
	}
	return reply
}

// referenceID is the reference's id paired with Sprout's id, spelled out.
func (v *groupsView) referenceID(id []byte) ([]byte, bool) {
	n, err := strconv.ParseUint(string(id), 10, 64)
	if err != nil {
		return nil, false
	}
	ref, ok := v.toRef[n]
	if !ok {
		return nil, false
	}
	return strconv.AppendUint(nil, ref, 10), true
}

// tubeSet is a pair of list-tubes replies with the names of each sorted,
// for a comparison of the sets: beanstalkd's order after a tube was freed
// is that of its swap-remove, Sprout's across groups that of creation
// (docs/compatibility.md, "Shard groups").
func (v *groupsView) tubeSet(ref, sut []byte) ([]byte, []byte) {
	r, u := sortedList(ref), sortedList(sut)
	v.tubeLists++
	if bytes.Equal(r, u) && !bytes.Equal(ref, sut) {
		v.reordered++
	}
	return r, u
}

// sortedList is a YAML list reply (OK, then "- name" lines) with its lines
// sorted; anything else as it is.
func sortedList(reply []byte) []byte {
	header, body, ok := bytes.Cut(reply, []byte("\r\n"))
	doc, found := bytes.CutSuffix(body, []byte("\r\n"))
	if !ok || !found || !bytes.HasPrefix(header, []byte("OK ")) || !bytes.HasPrefix(doc, []byte("---\n")) {
		return reply
	}
	lines := strings.SplitAfter(string(doc[len("---\n"):]), "\n")
	slices.Sort(lines)
	out := append(append(slices.Clone(header), "\r\n---\n"...), strings.Join(lines, "")...)
	return append(out, "\r\n"...)
}

// priInGroup is the priority pri (a decimal uint32) moved down to the
// nearest one congruent to group modulo the number of groups (up, if
// there is none below): so that jobs of different groups never have the
// same priority, and a reserve across groups never has to break a tie
// between them (see doc.go).
func priInGroup(pri string, group, groups int) string {
	v, err := strconv.ParseInt(pri, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("conformance: priority %q", pri))
	}
	v -= ((v-int64(group))%int64(groups) + int64(groups)) % int64(groups)
	if v < 0 {
		v += int64(groups)
	}
	return strconv.FormatInt(v, 10)
}

var (
	groupsAllFlag  = flag.Bool("groups-all", false, "TestScriptedClusterGroups: run TestScripted's scripts too (about a minute more)")
	groupsBugsFlag = flag.Bool("groups-bugs", false, "TestScriptedClusterGroups: run the scripts of knownGroupBugs too, which fail")
)

// TestScriptedClusterGroups runs scripts through a member of a cluster of
// three shard groups, each against a fresh reference and a fresh cluster:
// groupScripts, written for what groups change; with -groups-all,
// TestScripted's scripts too, but those listed in notThroughGroups. Job
// ids are translated (translateLines), and a list-tubes after a tube was
// freed (afterFree) is compared as a set. The scripts of knownGroupBugs
// show differences that are bugs; they run with -groups-bugs.
func TestScriptedClusterGroups(t *testing.T) {
	if SelfTest() {
		t.Skip(SelfTestEnv + " is set: the stand-in has no cluster mode")
	}
	checkGroupTubes(t)
	all := groupScripts()
	if *groupsAllFlag {
		all = append(all, scripts()...)
	}
	for _, sc := range all {
		if reason, ok := notThroughGroups[sc.name]; ok {
			t.Logf("script %q does not run through groups: %s", sc.name, reason)
			continue
		}
		if bug, ok := knownGroupBugs[sc.name]; ok && !*groupsBugsFlag {
			t.Logf("script %q shows a known bug and runs with -groups-bugs: %s", sc.name, bug)
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runSteps(newGroupsSession(t, "script "+t.Name()), sc.steps)
		})
	}
}

// knownGroupBugs are the scripts of groupScripts that show a difference
// from beanstalkd, by name, with the difference. docs/compatibility.md
// ("Shard groups") now describes each in general words; they stay here to
// show it exactly, and to pass the day one is removed. They run with -groups-bugs only, and fail; the random
// run avoids what they show (doc.go, "Shard groups"). Remove an entry when
// its bug is fixed or its difference documented (then allowed narrowly).
var knownGroupBugs = map[string]string{
	"groups: a quit hands back jobs of several groups": "beanstalkd hands a closed connection's jobs back " +
		"one at a time, oldest reservation first, and a reserve waiting for any of them gets the first (job 2, " +
		"gamma's). Through groups the session's close reaches the three groups at once, each offers its job to " +
		"the reserve waiting across them, and the first offer to arrive wins: job 1 (beta's) or 3 (alpha's) in " +
		"about half the runs. The jobs declined stay reserved until the decline reaches their groups, so a " +
		"stats sent at once counts current-jobs-ready 0 or 1 and current-jobs-reserved 3 or 2 (beanstalkd: 2 " +
		"and 1), and another client's reserve meanwhile would miss them.",
	"groups: puts in one write wake a reserve across groups": "beanstalkd hands the first put's job (gamma's, " +
		"pri 9) to the reserve waiting across groups. Through groups the second put (beta's, pri 3) can commit " +
		"in its group before the first's offer reaches the waiter, and the first offer to arrive wins: job 2, " +
		"the more urgent one, in a few runs in a hundred under load.",
	"groups: releases in one write wake a reserve across groups": "beanstalkd makes job 2 ready first and " +
		"hands it to the reserve waiting across groups. Through groups the two releases pipeline to two " +
		"groups, both offer their job, and the first offer to arrive wins: job 1 in about a third of the runs.",
}

// notThroughGroups are TestScripted's scripts that TestScriptedClusterGroups
// leaves out, and why.
var notThroughGroups = map[string]string{
	"put framing": "its bodies hold lines that name job ids, which translateLines would rewrite",
	"a job's age counts from its put's command line": "the member forwards the put to default's leader, " +
		"which makes the job when it gets it whole (docs/compatibility.md)",
}

// The tubes groupScripts use, one of each group and a second of group 0
// (checkGroupTubes).
const (
	tube0, tube1, tube2, tube0b = "alpha", "beta", "gamma", "delta"
)

// checkGroupTubes fails the test if the tubes groupScripts use are no longer
// in the groups they are named for.
func checkGroupTubes(t *testing.T) {
	var ms []meta.Member
	for _, name := range []string{"m1", "m2", "m3"} {
		ms = append(ms, meta.Member{Name: name})
	}
	p, err := meta.Formation(ms, clusterGroups, len(ms))
	if err != nil {
		t.Fatal(err)
	}
	for tube, want := range map[string]uint16{tube0: 0, tube1: 1, tube2: 2, tube0b: 0, "default": 0} {
		if g := p.Owner(tube); g != want {
			t.Fatalf("test bug: tube %q is in group %d, not %d: choose other names", tube, g, want)
		}
	}
}

// groupScripts are scripts about what a cluster of several groups does
// otherwise than one server, or could: ids issued by several groups,
// commands by id reaching each, reserves across groups, waiting in
// several groups, jobs handed back from several groups, list-tubes merged,
// stats summed, DEADLINE_SOON for a job of another group. Tubes: alpha and
// delta live in group 0, beta in group 1, gamma in group 2; priorities
// differ between groups wherever a reserve across groups chooses (doc.go).
// Few scripts, long ones: each starts a cluster, which takes seconds. Ids
// in the comments are the reference's.
func groupScripts() []script {
	use := func(conn int, tube string) step {
		return on(conn, "use "+tube+"\r\n", 1).wants("USING " + tube + "\r\n")
	}
	watchAll := func(conn int) []step {
		return []step{
			on(conn, "watch "+tube0+"\r\n", 1),
			on(conn, "watch "+tube1+"\r\n", 1),
			on(conn, "watch "+tube2+"\r\n", 1),
			on(conn, "ignore default\r\n", 1).wants("WATCHING 3\r\n"),
		}
	}
	return []script{
		{"groups: tubes, ids and commands by id", slices.Concat([]step{
			// Tubes made in every group are listed in the order they
			// were made, as long as none was freed.
			on(1, "watch "+tube2+"\r\n", 1),
			on(1, "watch "+tube0+"\r\n", 1),
			on(1, "watch "+tube1+"\r\n", 1),
			on(1, "watch "+tube0b+"\r\n", 1),
			on(0, "list-tubes\r\n", 1).wants(yamlList("default", tube2, tube0, tube1, tube0b)),
			on(0, "stats\r\n", 1),
			// Freeing gamma moves delta into its place on beanstalkd; a
			// cluster of groups keeps the order of creation.
			on(1, "ignore "+tube2+"\r\n", 1),
			on(0, "list-tubes\r\n", 1).wants(yamlList("default", tube0b, tube0, tube1)).afterFree(),
			on(0, "stats-tube "+tube2+"\r\n", 1).wants("NOT_FOUND\r\n"),
			on(0, "stats-tube "+tube0b+"\r\n", 1),
			on(0, "stats\r\n", 1),
			on(1, "quit\r\n", 0).closing(),
			on(0, "list-tubes\r\n", 1).wants(yamlList("default")).afterFree(),

			use(0, tube0),
			on(0, "put 30 0 60 1\r\na\r\n", 1).wants("INSERTED 1\r\n"),
			use(0, tube1),
			on(0, "put 10 0 60 1\r\nb\r\n", 1).wants("INSERTED 2\r\n"),
			use(0, tube2),
			on(0, "put 20 0 60 1\r\nc\r\n", 1).wants("INSERTED 3\r\n"),
			on(0, "put 20 3600 60 1\r\nd\r\n", 1).wants("INSERTED 4\r\n"),
			use(0, tube0),
			on(0, "put 30 0 60 1\r\ne\r\n", 1).wants("INSERTED 5\r\n"),
			// Each group issues its own ids; a command by id reaches the
			// job's group from any connection.
			on(1, "peek 2\r\n", 1).wants("FOUND 2 1\r\nb\r\n"),
			on(1, "peek 005\r\n", 1).wants("FOUND 5 1\r\ne\r\n"),
			on(1, "stats-job 3\r\n", 1),
			on(1, "stats-job 4\r\n", 1),
			// Numbers that are no job: past the last id; of an id prefix
			// no group took; of group 2's prefix, never issued; past 2^53.
			on(1, "peek 6\r\n", 1).wants("NOT_FOUND\r\n"),
			on(1, fmt.Sprintf("peek %d\r\n", meta.JobID(7, 1)), 1).wants("NOT_FOUND\r\n"),
			on(1, fmt.Sprintf("delete %d\r\n", meta.JobID(2, 1<<40)), 1).wants("NOT_FOUND\r\n"),
			on(1, fmt.Sprintf("kick-job %d\r\n", uint64(1)<<53), 1).wants("NOT_FOUND\r\n"),
			// reserve-job takes a job of any group, whatever is watched.
			on(1, "reserve-job 4\r\n", 1).wants("RESERVED 4 1\r\nd\r\n"),
			on(1, "release 4 21 3600\r\n", 1).wants("RELEASED\r\n"),
		}, watchAll(2), []step{
			on(2, "list-tubes-watched\r\n", 1).wants(yamlList(tube2, tube0, tube1)),
			// Across groups, the most urgent first; in a group, the lower
			// id on a tie.
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 2 1\r\nb\r\n"),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 3 1\r\nc\r\n"),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 1 1\r\na\r\n"),
			on(2, "bury 2 40\r\n", 1).wants("BURIED\r\n"),
			on(2, "release 3 25 0\r\n", 1).wants("RELEASED\r\n"),
			on(2, "touch 1\r\n", 1).wants("TOUCHED\r\n"),
			on(1, "touch 1\r\n", 1).wants("NOT_FOUND\r\n"),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 3 1\r\nc\r\n"),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 5 1\r\ne\r\n"),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("TIMED_OUT\r\n"),
			// kick works in the used tube's group, kick-job in any.
			use(0, tube1),
			on(0, "kick 10\r\n", 1).wants("KICKED 1\r\n"),
			on(0, "kick-job 4\r\n", 1).wants("KICKED\r\n"),
			on(0, "peek-ready\r\n", 1).wants("FOUND 2 1\r\nb\r\n"),
			on(1, "stats-tube "+tube0+"\r\n", 1),
			on(1, "stats-tube "+tube1+"\r\n", 1),
			on(1, "stats-tube "+tube2+"\r\n", 1),
			on(1, "stats\r\n", 1),
			on(1, "list-tubes\r\n", 1).afterFree(),
			on(2, "delete 1\r\n", 1).wants("DELETED\r\n"),
			on(2, "delete 3\r\n", 1).wants("DELETED\r\n"),
			on(2, "delete 5\r\n", 1).wants("DELETED\r\n"),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 4 1\r\nd\r\n"),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 2 1\r\nb\r\n"),
			on(2, "quit\r\n", 0).closing(),
			on(1, "stats-job 4\r\n", 1),
			on(1, "stats\r\n", 1),
		})},

		{"groups: reserves waiting across groups", slices.Concat(watchAll(1), []step{
			on(1, "reserve\r\n", 0),
			on(0, "stats\r\n", 1),
			use(0, tube2),
			on(0, "put 5 0 60 1\r\nc\r\n", 1).wants("INSERTED 1\r\n"),
			on(1, "", 1).wants("RESERVED 1 1\r\nc\r\n"),
			on(1, "reserve\r\n", 0),
			use(0, tube1),
			on(0, "put 4 3600 60 1\r\nb\r\n", 1).wants("INSERTED 2\r\n"),
			on(0, "kick-job 2\r\n", 1).wants("KICKED\r\n"),
			on(1, "", 1).wants("RESERVED 2 1\r\nb\r\n"),
			// A paused tube's job waits; another group's wakes the reserve.
			on(0, "pause-tube "+tube2+" 3600\r\n", 1).wants("PAUSED\r\n"),
			on(1, "reserve\r\n", 0),
			use(0, tube2),
			on(0, "put 2 0 60 1\r\nC\r\n", 1).wants("INSERTED 3\r\n"),
			use(0, tube0),
			on(0, "put 9 0 60 1\r\nA\r\n", 1).wants("INSERTED 4\r\n"),
			on(1, "", 1).wants("RESERVED 4 1\r\nA\r\n"),
			on(0, "pause-tube "+tube2+" 0\r\n", 1).wants("PAUSED\r\n"),
			on(1, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 3 1\r\nC\r\n"),
			// Waiters in beta, one across groups, one not: taken as one
			// server takes them (ms_take).
			on(2, "watch "+tube1+"\r\n", 1),
			on(2, "ignore default\r\n", 1),
			on(1, "reserve\r\n", 0),
			on(2, "reserve\r\n", 0),
			on(0, "stats\r\n", 1),
			use(0, tube1),
			on(0, "put 1 0 60 1\r\nx\r\n", 1).wants("INSERTED 5\r\n"),
			on(2, "", 1).wants("RESERVED 5 1\r\nx\r\n"),
			on(0, "put 1 0 60 1\r\ny\r\n", 1).wants("INSERTED 6\r\n"),
			on(1, "", 1).wants("RESERVED 6 1\r\ny\r\n"),
			// A reserve across groups that times out, and one that a
			// release in another group ends.
			on(1, "reserve-with-timeout 1\r\n", 0).silentFor(300 * time.Millisecond),
			on(1, "", 1).within(3 * time.Second).wants("TIMED_OUT\r\n"),
			on(1, "reserve-with-timeout 10\r\n", 0),
			on(2, "release 5 7 0\r\n", 1).wants("RELEASED\r\n"),
			on(1, "", 1).wants("RESERVED 5 1\r\nx\r\n"),
			on(0, "stats\r\n", 1),
		}, watchAll(3), []step{
			// A put into one group wakes the waiter; a more urgent job put
			// into another group once it is answered waits for the next
			// reserve. (The same two puts in one write: "groups: puts in
			// one write wake a reserve across groups", knownGroupBugs.)
			on(3, "reserve\r\n", 0),
			use(0, tube2),
			on(0, "put 9 0 60 1\r\nG\r\n", 1).wants("INSERTED 7\r\n"),
			on(3, "", 1).wants("RESERVED 7 1\r\nG\r\n"),
			use(0, tube1),
			on(0, "put 3 0 60 1\r\nB\r\n", 1).wants("INSERTED 8\r\n"),
			on(3, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 8 1\r\nB\r\n"),
			on(0, "stats\r\n", 1),
			// DEADLINE_SOON for a job of another group. A ttr of 1 s is
			// inside the 1 s margin at once: a reserve in group 0, or
			// across groups 0 and 1, ends at once while the session holds
			// a job of group 2.
			use(0, tube2),
			on(0, "put 0 0 1 1\r\nd\r\n", 1).wants("INSERTED 9\r\n"),
			on(4, "reserve-job 9\r\n", 1).wants("RESERVED 9 1\r\nd\r\n"),
			on(4, "reserve\r\n", 1).wants("DEADLINE_SOON\r\n"),
			on(4, "watch "+tube1+"\r\n", 1),
			on(4, "reserve-with-timeout 5\r\n", 1).wants("DEADLINE_SOON\r\n"),
			// With ttr 3, a reserve waiting in another group ends 1 s
			// before the deadline.
			use(0, tube1),
			on(0, "put 0 0 3 1\r\ne\r\n", 1).wants("INSERTED 10\r\n"),
			on(5, "reserve-job 10\r\n", 1).wants("RESERVED 10 1\r\ne\r\n"),
			on(5, "reserve\r\n", 0).silentFor(300 * time.Millisecond),
			on(5, "", 1).within(4 * time.Second).wants("DEADLINE_SOON\r\n"),
			on(5, "delete 10\r\n", 1).wants("DELETED\r\n"),
			// Job 9's ttr is over: it is ready again. Conn 4 speaks first
			// so that 1.12 notices (see "ttr expiry").
			on(4, "list-tube-used\r\n", 1),
			on(4, "stats-job 9\r\n", 1),
			on(0, "stats\r\n", 1),
		})},

		{"groups: a quit hands back jobs of several groups", slices.Concat([]step{
			use(0, tube1),
			on(0, "put 7 0 60 1\r\nb\r\n", 1).wants("INSERTED 1\r\n"),
			use(0, tube2),
			on(0, "put 8 0 60 1\r\nc\r\n", 1).wants("INSERTED 2\r\n"),
			use(0, tube0),
			on(0, "put 6 0 60 1\r\na\r\n", 1).wants("INSERTED 3\r\n"),
			on(1, "reserve-job 2\r\n", 1),
			on(1, "reserve-job 3\r\n", 1),
			on(1, "reserve-job 1\r\n", 1),
		}, watchAll(2), []step{
			on(2, "reserve\r\n", 0),
			on(0, "stats\r\n", 1),
			// The jobs go back one at a time, oldest reservation first,
			// and the waiter gets the first.
			on(1, "quit\r\n", 0).closing(),
			on(2, "", 1).wants("RESERVED 2 1\r\nc\r\n"),
			on(0, "stats\r\n", 1),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 3 1\r\na\r\n"),
			on(2, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 1 1\r\nb\r\n"),
		})},

		{"groups: connections count in stats-tube at once", []step{
			// Each connection's first command counts it.
			on(0, "stats-tube default\r\n", 1),
			on(1, "stats-tube default\r\n", 1),
			on(2, "stats-tube default\r\n", 1),
			on(3, "stats-tube default\r\n", 1),
			on(2, "quit\r\n", 0).closing(),
			on(0, "stats-tube default\r\n", 1),
			on(2, "stats-tube default\r\n", 1),
		}},

		{"groups: puts in one write wake a reserve across groups", slices.Concat(watchAll(1), []step{
			on(1, "reserve\r\n", 0),
			// The first put's job goes to the waiter on one server.
			on(0, "use "+tube2+"\r\nput 9 0 60 1\r\nG\r\nuse "+tube1+"\r\nput 3 0 60 1\r\nB\r\n", 4).
				wants("USING "+tube2+"\r\n", "INSERTED 1\r\n", "USING "+tube1+"\r\n", "INSERTED 2\r\n"),
			on(1, "", 1).wants("RESERVED 1 1\r\nG\r\n"),
			on(1, "reserve-with-timeout 0\r\n", 1).wants("RESERVED 2 1\r\nB\r\n"),
			on(0, "stats\r\n", 1),
		})},

		{"groups: releases in one write wake a reserve across groups", slices.Concat([]step{
			use(0, tube1),
			on(0, "put 7 0 60 1\r\nb\r\n", 1).wants("INSERTED 1\r\n"),
			use(0, tube2),
			on(0, "put 8 0 60 1\r\nc\r\n", 1).wants("INSERTED 2\r\n"),
			on(1, "reserve-job 2\r\n", 1).wants("RESERVED 2 1\r\nc\r\n"),
			on(1, "reserve-job 1\r\n", 1).wants("RESERVED 1 1\r\nb\r\n"),
		}, watchAll(2), []step{
			on(2, "reserve\r\n", 0),
			// The first job released goes to the waiter.
			on(1, "release 2 8 0\r\nrelease 1 7 0\r\n", 2).wants("RELEASED\r\n", "RELEASED\r\n"),
			on(2, "", 1).wants("RESERVED 2 1\r\nc\r\n"),
			on(0, "stats\r\n", 1),
		})},
	}
}
