package router_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/router"
	"github.com/sproutmq/sprout/store"
)

// testMaxJobSize is the receiving server's max job size in these tests.
const testMaxJobSize = 1 << 16

type itemCase struct {
	name string
	it   router.Item
}

// request is a request item of op with its common fields set.
func request(op router.Op, r router.Request) router.Item {
	r.Number, r.MetaIndex, r.Stamp, r.Op = 1<<40|17, 321, 1_700_000_000_123_456_789, op
	return router.Item{Kind: router.KindRequest, Group: 4, Session: 99, Seq: 12, Request: r}
}

func reply(status router.Status, r router.Reply) router.Item {
	r.Status, r.Stamp = status, 1_700_000_000_999_000_000
	return router.Item{Kind: router.KindReply, Group: 4, Session: 99, Seq: 12, Reply: r}
}

func event(typ router.EventType, e router.Event) router.Item {
	e.Wait, e.Type = 77, typ
	return router.Item{Kind: router.KindEvent, Group: 2, Session: 99, Seq: 13, Event: e}
}

var (
	body    = []byte("hello, \x00world\r\n") // any bytes, ending as stored
	tubes   = [][]byte{[]byte("default"), []byte("emails.0"), []byte(strings.Repeat("t", 200))}
	jobID   = uint64(3)<<45 | 12345
	someJob = router.JobReply{ID: jobID, Pri: math.MaxUint32, TTR: 120, Body: body}
)

// tubeStats, jobStats and stats set every field, so a field the codec
// drops fails the round trip (TestStatsCasesSetEveryField keeps it so).
var (
	tubeStats = store.TubeStats{
		Name: "emails.0", Urgent: 1, Ready: 2, Reserved: 3, Delayed: 4, Buried: 5, TotalJobs: 1 << 40,
		Using: 6, Watching: 7, Waiting: 8, CmdDelete: 9, CmdPause: 10,
		Pause: 30 * time.Second, PauseTimeLeft: 29*time.Second + 5*time.Millisecond,
	}
	jobStats = store.JobStats{
		ID: jobID, Tube: "default", State: store.StateReserved, Pri: 1024,
		Age: 3 * time.Hour, Delay: time.Second, TTR: time.Minute, TimeLeft: -2 * time.Millisecond,
		File: 42, Reserves: 1, Timeouts: 2, Releases: 3, Buries: 4, Kicks: 5,
	}
	stats = store.Stats{
		Urgent: 1, Ready: 2, Reserved: 3, Delayed: 4, Buried: 5,
		TotalJobs: 1 << 50, JobTimeouts: 6, Waiting: 7, Tubes: 8,
	}
)

// itemCases hold every kind, op, status, result and event type
// (TestItemCasesCoverEverything).
func itemCases() []itemCase {
	byID := func(op router.Op) itemCase {
		return itemCase{op.String(), request(op, router.Request{ID: jobID})}
	}
	byTube := func(op router.Op) itemCase {
		return itemCase{op.String(), request(op, router.Request{Tube: []byte("default")})}
	}
	return []itemCase{
		{"put", request(router.OpPut, router.Request{Tube: []byte("default"), Pri: 1024, Delay: 5, TTR: 60, Body: body})},
		{"put empty body", request(router.OpPut, router.Request{Tube: []byte("x"), Body: []byte("\r\n")})},
		{"burn", request(router.OpBurn, router.Request{})},
		{"reserve", request(router.OpReserve, router.Request{Tubes: tubes, Timeout: -1, SoonElsewhere: true, SoonIn: 1500 * time.Millisecond})},
		{"reserve now", request(router.OpReserve, router.Request{Tubes: tubes[:1], SoonElsewhere: true, SoonIn: -time.Second})},
		{"reserve no tubes", request(router.OpReserve, router.Request{Timeout: 5 * time.Second})},
		{"best", request(router.OpBest, router.Request{Tubes: tubes})},
		{"take", request(router.OpTake, router.Request{Tubes: tubes[1:], Bound: store.Candidate{Pri: 7, ID: jobID}})},
		{"take unbounded", request(router.OpTake, router.Request{Tubes: tubes, Bound: store.Candidate{Pri: math.MaxUint32, ID: math.MaxUint64}})},
		byID(router.OpReserveJob), byID(router.OpDelete), byID(router.OpTouch),
		byID(router.OpPeek), byID(router.OpStatsJob), byID(router.OpKickJob), byID(router.OpHeld),
		{"release", request(router.OpRelease, router.Request{ID: jobID, Pri: 3, Delay: 10})},
		{"bury", request(router.OpBury, router.Request{ID: jobID, Pri: 4})},
		byTube(router.OpPeekReady), byTube(router.OpPeekDelayed), byTube(router.OpPeekBuried), byTube(router.OpStatsTube),
		{"kick", request(router.OpKick, router.Request{Tube: []byte("default"), Count: 100})},
		{"pause-tube", request(router.OpPauseTube, router.Request{Tube: []byte("default"), Delay: 30})},
		{"stats", request(router.OpStats, router.Request{})},
		{"list-tubes", request(router.OpListTubes, router.Request{})},

		{"wait", router.Item{Kind: router.KindWait, Group: 1, Session: 99, Seq: 3, Wait: router.Wait{ID: 5, MetaIndex: 321, Tubes: tubes}}},
		{"cancel", router.Item{Kind: router.KindCancel, Group: 1, Session: 99, Seq: 4, Wait: router.Wait{ID: 5}}},
		{"decline", router.Item{Kind: router.KindDecline, Group: 1, Session: 99, Seq: 5, Decline: router.Decline{Wait: 5, Job: jobID}}},
		{"refs", router.Item{Kind: router.KindRefs, Group: 7, Seq: 8, Refs: router.Refs{MetaIndex: 321, Stamp: 9, Counts: []router.RefCount{
			{Tube: []byte("default"), Using: 19000, Watching: 19001}, {Tube: []byte("gone")},
		}}}},
		{"refs sync", router.Item{Kind: router.KindRefs, Group: 7, Seq: 9, Refs: router.Refs{MetaIndex: 322, Sync: true, Counts: []router.RefCount{
			{Tube: []byte("default"), Using: 1, Watching: 2},
		}}}},
		{"refs sync none", router.Item{Kind: router.KindRefs, Group: 7, Seq: 10, Refs: router.Refs{Sync: true}}},
		{"close", router.Item{Kind: router.KindClose, Group: math.MaxUint16, Session: math.MaxUint64, Seq: math.MaxUint32}},
		{"leaders", router.Item{Kind: router.KindLeaders, Leaders: []router.LeaderReport{{Group: 0, Term: 7, Index: 3, Tubes: 12, Jobs: 1 << 40, Voters: []uint64{1, math.MaxUint64}, Learners: []uint64{9}}, {Group: math.MaxUint16, Term: math.MaxUint64, Index: math.MaxUint64, Tubes: math.MaxUint32, Jobs: math.MaxUint64}}}},
		{"leaders none", router.Item{Kind: router.KindLeaders}},
		{"leaders behind", router.Item{Kind: router.KindLeadersBehind, Leaders: []router.LeaderReport{{Group: 2, Term: 7, Index: 3, Tubes: 1, Jobs: 2, Voters: []uint64{1, 2, 3}, Behind: []uint64{3, math.MaxUint64}}, {Group: 4, Term: 8, Voters: []uint64{1}}}}},
		{"move", router.Item{Kind: router.KindMove, Group: 3, Move: router.Move{From: []byte("m1"), To: []byte(strings.Repeat("n", 128))}}},
		{"move adding", router.Item{Kind: router.KindMove, Group: math.MaxUint16, Move: router.Move{To: []byte("m5")}}},
		{"move removing", router.Item{Kind: router.KindMove, Group: 1, Move: router.Move{From: []byte("m4")}}},
		{"sessions", router.Item{Kind: router.KindSessions, Group: 4, Sessions: router.Sessions{Upto: math.MaxUint64, IDs: []uint64{1, 7, 1 << 62, math.MaxUint64}}}},
		{"sessions none", router.Item{Kind: router.KindSessions, Sessions: router.Sessions{Upto: 9}}},

		{"ok", reply(router.StatusOK, router.Reply{Result: router.ResultNone})},
		{"inserted", reply(router.StatusOK, router.Reply{Result: router.ResultID, ID: jobID})},
		{"reserved", reply(router.StatusOK, router.Reply{Result: router.ResultJob, Job: someJob})},
		{"kicked", reply(router.StatusOK, router.Reply{Result: router.ResultCount, Count: 99})},
		{"best", reply(router.StatusOK, router.Reply{Result: router.ResultBest, Best: router.Best{Candidate: store.Candidate{Pri: 1, ID: 2}, OK: true, AnyReady: true}})},
		{"best none ready unpaused", reply(router.StatusOK, router.Reply{Result: router.ResultBest, Best: router.Best{AnyReady: true}})},
		{"lost", reply(router.StatusLost, router.Reply{Result: router.ResultBest, Best: router.Best{Candidate: store.Candidate{Pri: 0, ID: 1}, OK: true}})},
		{"empty", reply(router.StatusEmpty, router.Reply{Result: router.ResultNone})},
		{"stats-tube", reply(router.StatusOK, router.Reply{Result: router.ResultTubeStats, TubeStats: tubeStats})},
		{"stats-job", reply(router.StatusOK, router.Reply{Result: router.ResultJobStats, JobStats: jobStats})},
		{"stats", reply(router.StatusOK, router.Reply{Result: router.ResultStats, Stats: stats})},
		{"list-tubes", reply(router.StatusOK, router.Reply{Result: router.ResultTubes, Tubes: []router.TubeStamp{
			{Name: []byte("default"), Stamp: 1}, {Name: tubes[2], Stamp: math.MaxUint64},
		}})},
		{"list-tubes none", reply(router.StatusOK, router.Reply{Result: router.ResultTubes})},
		{"not found", reply(router.StatusNotFound, router.Reply{Result: router.ResultNone})},
		{"no space", reply(router.StatusNoSpace, router.Reply{Result: router.ResultNone})},
		{"timed out", reply(router.StatusTimedOut, router.Reply{Result: router.ResultNone})},
		{"deadline soon", reply(router.StatusDeadlineSoon, router.Reply{Result: router.ResultNone})},
		{"wrong group", reply(router.StatusWrongGroup, router.Reply{MetaIndex: 1 << 33})},
		{"not found, tubes moved", reply(router.StatusNotFound, router.Reply{Result: router.ResultMoved, Moved: []uint16{1, 255, 4095}})},
		{"not leader", reply(router.StatusNotLeader, router.Reply{})},

		{"offer", event(router.EventOffer, router.Event{Job: someJob})},
		{"deadline soon", event(router.EventDeadlineSoon, router.Event{})},
		{"wrong group", event(router.EventWrongGroup, router.Event{MetaIndex: 400})},
	}
}

func (c itemCase) String() string {
	return c.it.Kind.String() + " " + c.name
}

func encode(t testing.TB, items ...router.Item) []byte {
	t.Helper()
	var b []byte
	for i := range items {
		var err error
		if b, err = router.AppendItem(b, &items[i]); err != nil {
			t.Fatalf("AppendItem(%s): %v", items[i].Kind, err)
		}
	}
	return b
}

// decodeAll decodes a whole payload, each item into a new Item.
func decodeAll(t testing.TB, payload []byte) []router.Item {
	t.Helper()
	d := router.Decoder{MaxJobSize: testMaxJobSize}
	if err := d.Reset(payload); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	var items []router.Item
	for d.More() {
		var it router.Item
		if err := d.Next(&it); err != nil {
			t.Fatalf("Next, item %d: %v", len(items), err)
		}
		items = append(items, it)
	}
	return items
}

func TestItemRoundTrip(t *testing.T) {
	for _, c := range itemCases() {
		t.Run(c.String(), func(t *testing.T) {
			payload := encode(t, c.it)
			got := decodeAll(t, payload)
			if len(got) != 1 || !reflect.DeepEqual(got[0], c.it) {
				t.Fatalf("decoded %+v\nwant %+v", got, c.it)
			}
		})
	}
}

// TestItemsInOnePayload decodes every case from one payload into one
// reused Item: nothing of an item may show in the next.
func TestItemsInOnePayload(t *testing.T) {
	cases := itemCases()
	var items []router.Item
	for _, c := range cases {
		items = append(items, c.it)
	}
	// Each case after every other, so each kind follows each kind.
	for _, c := range cases {
		items = append(items, c.it)
	}
	payload := encode(t, items...)
	d := router.Decoder{MaxJobSize: testMaxJobSize}
	if err := d.Reset(payload); err != nil {
		t.Fatal(err)
	}
	var it router.Item
	for i, want := range items {
		if !d.More() {
			t.Fatalf("%d items decoded, want %d", i, len(items))
		}
		if err := d.Next(&it); err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if got := withoutEmptyLists(it); !reflect.DeepEqual(got, want) {
			t.Fatalf("item %d (%s):\ndecoded %+v\nwant    %+v", i, want.Kind, got, want)
		}
	}
	if d.More() {
		t.Fatal("More after the last item")
	}
	if err := d.Next(&it); !errors.Is(err, router.ErrShort) {
		t.Fatalf("Next after the last item: %v, want ErrShort", err)
	}
}

// withoutEmptyLists is it with the lists a reused Item keeps empty made
// nil, as in a new Item.
func withoutEmptyLists(it router.Item) router.Item {
	if len(it.Request.Tubes) == 0 {
		it.Request.Tubes = nil
	}
	if len(it.Wait.Tubes) == 0 {
		it.Wait.Tubes = nil
	}
	if len(it.Refs.Counts) == 0 {
		it.Refs.Counts = nil
	}
	if len(it.Reply.Tubes) == 0 {
		it.Reply.Tubes = nil
	}
	if len(it.Leaders) == 0 {
		it.Leaders = nil
	}
	if len(it.Sessions.IDs) == 0 {
		it.Sessions.IDs = nil
	}
	for i := range it.Leaders {
		if len(it.Leaders[i].Voters) == 0 {
			it.Leaders[i].Voters = nil
		}
		if len(it.Leaders[i].Learners) == 0 {
			it.Leaders[i].Learners = nil
		}
	}
	return it
}

// TestItemCasesCoverEverything keeps the table whole: a new kind, op,
// status, result or event type needs a case.
func TestItemCasesCoverEverything(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range itemCases() {
		seen[fmt.Sprint("kind ", c.it.Kind)] = true
		switch c.it.Kind {
		case router.KindRequest:
			seen[fmt.Sprint("op ", c.it.Request.Op)] = true
		case router.KindReply:
			seen[fmt.Sprint("status ", c.it.Reply.Status)] = true
			if r := c.it.Reply.Result; r != 0 {
				seen[fmt.Sprint("result ", r)] = true
			}
		case router.KindEvent:
			seen[fmt.Sprint("event ", c.it.Event.Type)] = true
		}
	}
	for _, code := range enumCodes {
		if key := code.family + " " + code.name; !seen[key] {
			t.Errorf("no case has %s", key)
		}
	}
}

// enumCodes pins every code on the wire: renumbering one breaks members
// of different releases, so it must fail here first.
var enumCodes = []struct {
	family, name string
	got, want    uint8
}{
	{"kind", "request", uint8(router.KindRequest), 1},
	{"kind", "wait", uint8(router.KindWait), 2},
	{"kind", "cancel", uint8(router.KindCancel), 3},
	{"kind", "decline", uint8(router.KindDecline), 4},
	{"kind", "refs", uint8(router.KindRefs), 5},
	{"kind", "close", uint8(router.KindClose), 6},
	{"kind", "reply", uint8(router.KindReply), 7},
	{"kind", "event", uint8(router.KindEvent), 8},
	{"kind", "leaders", uint8(router.KindLeaders), 9},
	{"kind", "move", uint8(router.KindMove), 10},
	{"kind", "sessions", uint8(router.KindSessions), 11},
	{"kind", "leaders-behind", uint8(router.KindLeadersBehind), 12},
	{"op", "put", uint8(router.OpPut), 1},
	{"op", "burn", uint8(router.OpBurn), 2},
	{"op", "reserve", uint8(router.OpReserve), 3},
	{"op", "best", uint8(router.OpBest), 4},
	{"op", "take", uint8(router.OpTake), 5},
	{"op", "reserve-job", uint8(router.OpReserveJob), 6},
	{"op", "delete", uint8(router.OpDelete), 7},
	{"op", "release", uint8(router.OpRelease), 8},
	{"op", "bury", uint8(router.OpBury), 9},
	{"op", "touch", uint8(router.OpTouch), 10},
	{"op", "peek", uint8(router.OpPeek), 11},
	{"op", "stats-job", uint8(router.OpStatsJob), 12},
	{"op", "kick-job", uint8(router.OpKickJob), 13},
	{"op", "peek-ready", uint8(router.OpPeekReady), 14},
	{"op", "peek-delayed", uint8(router.OpPeekDelayed), 15},
	{"op", "peek-buried", uint8(router.OpPeekBuried), 16},
	{"op", "kick", uint8(router.OpKick), 17},
	{"op", "stats-tube", uint8(router.OpStatsTube), 18},
	{"op", "pause-tube", uint8(router.OpPauseTube), 19},
	{"op", "stats", uint8(router.OpStats), 20},
	{"op", "list-tubes", uint8(router.OpListTubes), 21},
	{"op", "held", uint8(router.OpHeld), 22},
	{"status", "1", uint8(router.StatusOK), 1},
	{"status", "2", uint8(router.StatusNotFound), 2},
	{"status", "3", uint8(router.StatusNoSpace), 3},
	{"status", "4", uint8(router.StatusTimedOut), 4},
	{"status", "5", uint8(router.StatusDeadlineSoon), 5},
	{"status", "6", uint8(router.StatusLost), 6},
	{"status", "7", uint8(router.StatusEmpty), 7},
	{"status", "8", uint8(router.StatusWrongGroup), 8},
	{"status", "10", uint8(router.StatusNotLeader), 10},
	{"result", "1", uint8(router.ResultNone), 1},
	{"result", "2", uint8(router.ResultJob), 2},
	{"result", "3", uint8(router.ResultID), 3},
	{"result", "4", uint8(router.ResultCount), 4},
	{"result", "5", uint8(router.ResultBest), 5},
	{"result", "6", uint8(router.ResultTubeStats), 6},
	{"result", "7", uint8(router.ResultJobStats), 7},
	{"result", "8", uint8(router.ResultStats), 8},
	{"result", "9", uint8(router.ResultTubes), 9},
	{"result", "10", uint8(router.ResultMoved), 10},
	{"event", "1", uint8(router.EventOffer), 1},
	{"event", "2", uint8(router.EventDeadlineSoon), 2},
	{"event", "3", uint8(router.EventWrongGroup), 3},
}

func TestEnumCodes(t *testing.T) {
	for _, c := range enumCodes {
		if c.got != c.want {
			t.Errorf("%s %s is %d on the wire, want %d", c.family, c.name, c.got, c.want)
		}
	}
	for _, c := range enumCodes {
		switch c.family {
		case "kind":
			if s := router.Kind(c.got).String(); s != c.name {
				t.Errorf("Kind(%d).String() = %q, want %q", c.got, s, c.name)
			}
		case "op":
			if s := router.Op(c.got).String(); s != c.name {
				t.Errorf("Op(%d).String() = %q, want %q", c.got, s, c.name)
			}
		}
	}
}

// TestStatsCasesSetEveryField fails when store's stats types gain a
// field the cases leave zero, and so one the round trip would not check.
func TestStatsCasesSetEveryField(t *testing.T) {
	for _, v := range []any{tubeStats, jobStats, stats} {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Errorf("%T.%s is zero in the cases: set it, and carry it in the items codec",
					v, rv.Type().Field(i).Name)
			}
		}
	}
}

// goldens pin the bytes of a few items, field by field as the format in
// items.go lays them out.
var goldens = []struct {
	name string
	it   router.Item
	hex  string
}{
	{
		"put request",
		router.Item{Kind: router.KindRequest, Group: 3, Session: 7, Seq: 2, Request: router.Request{
			Number: 0x11, MetaIndex: 0x22, Stamp: 0x33, Op: router.OpPut,
			Tube: []byte("t"), Pri: 1024, TTR: 60, Body: []byte("hi\r\n"),
		}},
		"00000001" + // one item
			"01" + "0003" + "0000000000000007" + "00000002" + "0000002f" + // request, group 3, session 7, seq 2, 47 bytes
			"0000000000000011" + "0000000000000022" + "0000000000000033" + // number, meta index, stamp
			"01" + "0174" + "00000400" + "00000000" + "0000003c" + // put, tube "t", pri 1024, delay 0, ttr 60
			"00000004" + "68690d0a", // body "hi\r\n"
	},
	{
		"inserted reply",
		router.Item{Kind: router.KindReply, Group: 3, Session: 7, Seq: 2, Reply: router.Reply{
			Status: router.StatusOK, Stamp: 0x44, Result: router.ResultID, ID: 2<<45 | 5,
		}},
		"00000001" +
			"07" + "0003" + "0000000000000007" + "00000002" + "00000012" + // reply, 18 bytes
			"01" + "0000000000000044" + // ok, stamp
			"03" + "0000400000000005", // id
	},
	{
		"offer",
		router.Item{Kind: router.KindEvent, Group: 1, Session: 7, Seq: 5, Event: router.Event{
			Wait: 9, Type: router.EventOffer, Job: router.JobReply{ID: 5, TTR: 1, Body: []byte("x\r\n")},
		}},
		"00000001" +
			"08" + "0001" + "0000000000000007" + "00000005" + "00000020" + // event, 32 bytes
			"0000000000000009" + "01" + // wait 9, offer
			"0000000000000005" + "00000000" + "00000001" + "00000003" + "780d0a", // id 5, pri 0, ttr 1, body "x\r\n"
	},
	{
		"refs sync and a close",
		router.Item{Kind: router.KindRefs, Seq: 1, Refs: router.Refs{
			MetaIndex: 0x10, Stamp: 0x20, Sync: true,
			Counts: []router.RefCount{{Tube: []byte("default"), Using: 2, Watching: 3}},
		}},
		"00000002" + // two items
			"05" + "0000" + "0000000000000000" + "00000001" + "00000025" + // refs, 37 bytes
			"0000000000000010" + "0000000000000020" + "01" + "00000001" + // meta index, stamp, sync, one tube
			"07" + hex.EncodeToString([]byte("default")) + "00000002" + "00000003" +
			"06" + "0000" + "0000000000000063" + "00000004" + "00000000", // close of session 99, seq 4, no payload
	},
}

func TestItemGoldens(t *testing.T) {
	closing := router.Item{Kind: router.KindClose, Session: 99, Seq: 4}
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			want, err := hex.DecodeString(g.hex)
			if err != nil {
				t.Fatal(err)
			}
			items := []router.Item{g.it}
			if g.it.Kind == router.KindRefs {
				items = append(items, closing)
			}
			if got := encode(t, items...); !bytes.Equal(got, want) {
				t.Fatalf("encoded\n%x\nwant\n%x", got, want)
			}
			if got := decodeAll(t, want); !reflect.DeepEqual(got, items) {
				t.Fatalf("decoded %+v\nwant %+v", got, items)
			}
		})
	}
}

// TestDecodeRefuses takes valid payloads apart: each damage is refused
// with its error, by Reset or by Next.
func TestDecodeRefuses(t *testing.T) {
	put := encode(t, goldens[0].it) // the put request's bytes, as in its golden
	const (
		count   = 0
		kind    = 4
		length  = 4 + 15
		payload = 4 + 19
		op      = payload + 24
		tubeLen = op + 1
		bodyLen = tubeLen + 2 + 12
	)
	patch := func(b []byte, at int, v ...byte) []byte {
		b = bytes.Clone(b)
		copy(b[at:], v)
		return b
	}
	grow := func(b []byte, by byte, extra ...byte) []byte {
		b = append(bytes.Clone(b), extra...)
		b[length+3] += by
		return b
	}
	cases := []struct {
		name    string
		in      []byte
		maxJob  int
		wantErr error
	}{
		{"no count", put[:3], testMaxJobSize, router.ErrShort},
		{"count past the items", patch(put, count, 0, 0, 0, 2), testMaxJobSize, router.ErrShort},
		{"huge count", patch(put, count, 0xff, 0xff, 0xff, 0xff), testMaxJobSize, router.ErrShort},
		{"cut header", put[:payload-1], testMaxJobSize, router.ErrShort},
		{"cut payload", put[:len(put)-1], testMaxJobSize, router.ErrShort},
		{"length past the frame", patch(put, length, 0xff, 0xff, 0xff, 0xff), testMaxJobSize, router.ErrShort},
		{"bytes after", append(bytes.Clone(put), 0), testMaxJobSize, router.ErrTrailing},
		{"kind 0", patch(put, kind, 0), testMaxJobSize, router.ErrKind},
		{"kind 13", patch(put, kind, 13), testMaxJobSize, router.ErrKind},
		{"op 0", patch(put, op, 0), testMaxJobSize, router.ErrOp},
		{"op 23", patch(put, op, 23), testMaxJobSize, router.ErrOp},
		{"tube of 0 bytes", patch(put, tubeLen, 0), testMaxJobSize, router.ErrTubeName},
		{"tube of 201 bytes", patch(put, tubeLen, 201), testMaxJobSize, router.ErrTubeName},
		{"body past its item", patch(put, bodyLen, 0, 0, 0, 5), testMaxJobSize, router.ErrLength},
		{"fields short of the length", grow(put, 1, 0), testMaxJobSize, router.ErrLength},
		{"body without CRLF", patch(put, len(put)-1, 'x'), testMaxJobSize, router.ErrBody},
		{"body past the max job size", put, 1, router.ErrJobTooBig},
		{"body at the max job size", put, 2, nil},
		{"a zero Decoder's max job size", put, 0, router.ErrJobTooBig},
	}
	item := func(it router.Item) []byte { return encode(t, it) }
	at := func(it router.Item) int { return len(item(it)) }
	inserted := goldens[1].it
	offer := goldens[2].it
	best := reply(router.StatusOK, router.Reply{Result: router.ResultBest})
	jobStatsReply := reply(router.StatusOK, router.Reply{Result: router.ResultJobStats, JobStats: jobStats})
	reserve := request(router.OpReserve, router.Request{})
	refs := goldens[3].it
	refs.Refs.Counts = nil
	move := router.Item{Kind: router.KindMove, Group: 1, Move: router.Move{From: []byte("m1")}}
	sessions := router.Item{Kind: router.KindSessions, Group: 1, Sessions: router.Sessions{Upto: 9, IDs: []uint64{5, 8}}}
	cases = append(cases, []struct {
		name    string
		in      []byte
		maxJob  int
		wantErr error
	}{
		{"status 0", patch(item(inserted), payload, 0), testMaxJobSize, router.ErrStatus},
		{"status 9", patch(item(inserted), payload, 9), testMaxJobSize, router.ErrStatus},
		{"status 11", patch(item(inserted), payload, 11), testMaxJobSize, router.ErrStatus},
		{"result 0", patch(item(inserted), payload+9, 0), testMaxJobSize, router.ErrResult},
		{"result 11", patch(item(inserted), payload+9, 11), testMaxJobSize, router.ErrResult},
		{"event 0", patch(item(offer), payload+8, 0), testMaxJobSize, router.ErrEvent},
		{"event 4", patch(item(offer), payload+8, 4), testMaxJobSize, router.ErrEvent},
		{"best's flags", patch(item(best), at(best)-1, 4), testMaxJobSize, router.ErrFlags},
		{"reserve's flags", patch(item(reserve), at(reserve)-9, 2), testMaxJobSize, router.ErrFlags},
		{"refs' flags", patch(item(refs), at(refs)-5, 3), testMaxJobSize, router.ErrFlags},
		{"state 0", patch(item(jobStatsReply), payload+1+8+1+8+1+7, 0), testMaxJobSize, router.ErrState},
		{"state 5", patch(item(jobStatsReply), payload+1+8+1+8+1+7, 5), testMaxJobSize, router.ErrState},
		{"offer's body past the max job size", item(offer), 0, nil},
		{"tubes counted past the item", patch(item(reserve), op+1, 0, 0, 1, 0), testMaxJobSize, router.ErrLength},
		{"a giver of 129 bytes", patch(item(move), payload, 129), testMaxJobSize, router.ErrMemberName},
		{"a giver past the item", patch(item(move), payload, 5), testMaxJobSize, router.ErrLength},
		{"a receiver past the item", patch(item(move), payload+3, 1), testMaxJobSize, router.ErrLength},
		{"sessions counted past the item", patch(item(sessions), payload+8, 0, 0, 0, 3), testMaxJobSize, router.ErrLength},
		{"sessions out of order", patch(item(sessions), payload+8+4, 0, 0, 0, 0, 0, 0, 0, 9), testMaxJobSize, router.ErrSessions},
		{"a session above upto", patch(item(sessions), payload+8+4+8, 0, 0, 0, 0, 0, 0, 0, 10), testMaxJobSize, router.ErrSessions},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := router.Decoder{MaxJobSize: c.maxJob}
			err := d.Reset(c.in)
			for err == nil && d.More() {
				var it router.Item
				err = d.Next(&it)
			}
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("decoding %x: %v, want %v", c.in, err, c.wantErr)
			}
			if err != nil && d.More() {
				t.Fatal("More after an error")
			}
		})
	}
}

// TestDecodeEveryCut: a valid payload cut anywhere is refused, never
// misread.
func TestDecodeEveryCut(t *testing.T) {
	var items []router.Item
	for _, c := range itemCases() {
		items = append(items, c.it)
	}
	payload := encode(t, items...)
	for n := range len(payload) {
		d := router.Decoder{MaxJobSize: testMaxJobSize}
		if err := d.Reset(payload[:n]); !errors.Is(err, router.ErrShort) {
			t.Fatalf("cut at %d of %d: %v, want ErrShort", n, len(payload), err)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	long := []byte(strings.Repeat("t", 201))
	cases := []struct {
		name    string
		it      router.Item
		wantErr error
	}{
		{"kind 0", router.Item{}, router.ErrKind},
		{"kind 13", router.Item{Kind: 13}, router.ErrKind},
		{"sessions out of order", router.Item{Kind: router.KindSessions, Sessions: router.Sessions{Upto: 9, IDs: []uint64{3, 2}}}, router.ErrSessions},
		{"sessions twice", router.Item{Kind: router.KindSessions, Sessions: router.Sessions{Upto: 9, IDs: []uint64{3, 3}}}, router.ErrSessions},
		{"sessions above upto", router.Item{Kind: router.KindSessions, Sessions: router.Sessions{Upto: 9, IDs: []uint64{3, 10}}}, router.ErrSessions},
		{"long giver", router.Item{Kind: router.KindMove, Move: router.Move{From: []byte(strings.Repeat("m", 129))}}, router.ErrMemberName},
		{"long receiver", router.Item{Kind: router.KindMove, Move: router.Move{To: []byte(strings.Repeat("m", 129))}}, router.ErrMemberName},
		{"op 0", request(0, router.Request{}), router.ErrOp},
		{"op 23", request(23, router.Request{}), router.ErrOp},
		{"no tube", request(router.OpPeekReady, router.Request{}), router.ErrTubeName},
		{"long tube", request(router.OpPut, router.Request{Tube: long, Body: body}), router.ErrTubeName},
		{"long watched tube", request(router.OpBest, router.Request{Tubes: [][]byte{[]byte("a"), long}}), router.ErrTubeName},
		{"long waited tube", router.Item{Kind: router.KindWait, Wait: router.Wait{Tubes: [][]byte{long}}}, router.ErrTubeName},
		{"no body", request(router.OpPut, router.Request{Tube: []byte("a")}), router.ErrBody},
		{"body without CRLF", request(router.OpPut, router.Request{Tube: []byte("a"), Body: []byte("x\n")}), router.ErrBody},
		{"offer without body", event(router.EventOffer, router.Event{}), router.ErrBody},
		{"event 0", event(0, router.Event{}), router.ErrEvent},
		{"status 0", reply(0, router.Reply{}), router.ErrStatus},
		{"status 9", reply(9, router.Reply{}), router.ErrStatus},
		{"status 11", reply(11, router.Reply{}), router.ErrStatus},
		{"result 0", reply(router.StatusOK, router.Reply{}), router.ErrResult},
		{"state 0", reply(router.StatusOK, router.Reply{Result: router.ResultJobStats, JobStats: store.JobStats{Tube: "a"}}), router.ErrState},
		{"stats of no tube", reply(router.StatusOK, router.Reply{Result: router.ResultTubeStats}), router.ErrTubeName},
		{"refs of no tube", router.Item{Kind: router.KindRefs, Refs: router.Refs{Counts: make([]router.RefCount, 1)}}, router.ErrTubeName},
		{"list of no tube", reply(router.StatusOK, router.Reply{Result: router.ResultTubes, Tubes: make([]router.TubeStamp, 1)}), router.ErrTubeName},
	}
	before := encode(t, goldens[0].it)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := router.AppendItem(bytes.Clone(before), &c.it)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("AppendItem: %v, want %v", err, c.wantErr)
			}
			if !bytes.Equal(got, before) {
				t.Fatalf("the payload after a refused item is\n%x\nwant it as it was\n%x", got, before)
			}
			if got, err := router.AppendItem(nil, &c.it); err == nil || !bytes.Equal(got, []byte{0, 0, 0, 0}) {
				t.Fatalf("into an empty payload: %x, %v; want it begun, and the error", got, err)
			}
		})
	}
}

// Decoding a frame and encoding its items must give its bytes back, and
// no input may make decoding panic.
func FuzzDecodeItems(f *testing.F) {
	var all []router.Item
	for _, c := range itemCases() {
		f.Add(encode(f, c.it), uint32(testMaxJobSize))
		all = append(all, c.it)
	}
	f.Add(encode(f, all...), uint32(testMaxJobSize))
	for _, g := range goldens {
		b, _ := hex.DecodeString(g.hex)
		f.Add(b, uint32(2))
	}
	f.Fuzz(func(t *testing.T, payload []byte, maxJobSize uint32) {
		d := router.Decoder{MaxJobSize: int(maxJobSize)}
		if d.Reset(payload) != nil {
			return
		}
		again := []byte{0, 0, 0, 0}
		var it router.Item
		for d.More() {
			if d.Next(&it) != nil {
				return
			}
			var err error
			if again, err = router.AppendItem(again, &it); err != nil {
				t.Fatalf("%x: an item decoded as %+v does not encode: %v", payload, it, err)
			}
		}
		if !bytes.Equal(again, payload) {
			t.Fatalf("%x decoded and encoded again is\n%x", payload, again)
		}
	})
}

// The put path, a session's request and the group's reply, allocates
// nothing once the buffers have grown.
func TestItemAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	for _, c := range []itemCase{
		{"put", request(router.OpPut, router.Request{Tube: []byte("default"), Pri: 1024, TTR: 60, Body: body})},
		{"reserve", request(router.OpReserve, router.Request{Tubes: tubes, Timeout: -1})},
		{"inserted", goldens[1].it},
		{"offer", goldens[2].it},
	} {
		t.Run(c.name, func(t *testing.T) {
			it := c.it
			var got router.Item
			var d router.Decoder
			d.MaxJobSize = testMaxJobSize
			buf := make([]byte, 0, 512)
			roundTrip := func() {
				if err := encodeDecode(buf, &it, &d, &got); err != nil {
					t.Fatal(err)
				}
			}
			roundTrip() // grows got's lists once
			if allocs := testing.AllocsPerRun(100, roundTrip); allocs != 0 {
				t.Errorf("%v allocs per encode and decode, want 0", allocs)
			}
			if !reflect.DeepEqual(withoutEmptyLists(got), it) {
				t.Fatalf("decoded %+v, want %+v", got, it)
			}
		})
	}
}

// encodeDecode encodes it into buf's array and decodes it into got, as
// a session's writer and a leader's reader would.
func encodeDecode(buf []byte, it *router.Item, d *router.Decoder, got *router.Item) error {
	p, err := router.AppendItem(buf[:0], it)
	if err == nil {
		err = d.Reset(p)
	}
	if err == nil {
		err = d.Next(got)
	}
	return err
}

// BenchmarkPutItem: a put request of a 64-byte job encoded into a reused
// payload and decoded into a reused item.
func BenchmarkPutItem(b *testing.B) {
	it := request(router.OpPut, router.Request{
		Tube: []byte("default"), Pri: 1024, TTR: 60, Body: append(bytes.Repeat([]byte("x"), 64), "\r\n"...),
	})
	d := router.Decoder{MaxJobSize: testMaxJobSize}
	buf := make([]byte, 0, 512)
	var got router.Item
	for b.Loop() {
		if err := encodeDecode(buf, &it, &d, &got); err != nil {
			b.Fatal(err)
		}
	}
	if len(got.Request.Body) != 66 {
		b.Fatalf("decoded a body of %d bytes", len(got.Request.Body))
	}
}
