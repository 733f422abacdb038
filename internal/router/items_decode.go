package router

import (
	"encoding/binary"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// Decoder reads the items of a payload, in order, into an Item the
// caller reuses. It copies nothing: tube names, bodies and lists of a
// decoded item alias the payload, so the caller must copy what it keeps
// before the payload's buffer is reused (gnet's rule for what Peek
// returns). It allocates only for the strings of store.TubeStats and
// store.JobStats, and to grow the item's lists past what they held
// before. No input makes it panic: every length is checked against what
// is left before anything is read or sliced.
type Decoder struct {
	// MaxJobSize bounds a put request's body, the data before its
	// "\r\n": the receiving server's max job size. A job in a reply or
	// an offer is bounded by its frame alone, since it aliases the frame
	// and may have been put through a member with a larger bound. Zero
	// (or less) admits only empty bodies.
	MaxJobSize int

	rest []byte // the items not read yet
	left uint32 // how many
}

// Reset starts on payload. It checks the payload's framing (the count,
// every item's header and length, nothing after the last), so a payload
// whose framing is wrong is refused before any of its items is acted on.
func (d *Decoder) Reset(payload []byte) error {
	d.rest, d.left = nil, 0
	if len(payload) < 4 {
		return ErrShort
	}
	count := binary.BigEndian.Uint32(payload)
	b := payload[4:]
	for range count {
		if len(b) < itemHeader {
			return ErrShort
		}
		if k := Kind(b[0]); k == 0 || k >= numKinds {
			return ErrKind
		}
		n := uint64(binary.BigEndian.Uint32(b[itemHeader-4:]))
		if uint64(len(b)-itemHeader) < n {
			return ErrShort
		}
		b = b[itemHeader+n:]
	}
	if len(b) > 0 {
		return ErrTrailing
	}
	d.rest, d.left = payload[4:], count
	return nil
}

// Each decodes payload item by item into one Item it reuses and calls fn
// with each, stopping at the first error; maxJobSize bounds a put's body
// (Decoder.MaxJobSize). What fn keeps of an item it must copy.
func Each(payload []byte, maxJobSize int, fn func(*Item)) error {
	d := Decoder{MaxJobSize: maxJobSize}
	if err := d.Reset(payload); err != nil {
		return err
	}
	var it Item
	for d.More() {
		if err := d.Next(&it); err != nil {
			return err
		}
		fn(&it)
	}
	return nil
}

// More reports whether an item is left to read.
func (d *Decoder) More() bool { return d.left > 0 }

// Next reads the next item into it. After an error, it holds part of the
// item and the decoder has nothing more.
func (d *Decoder) Next(it *Item) error {
	if d.left == 0 {
		return ErrShort
	}
	b := d.rest // Reset checked the header and the length
	end := itemHeader + int(binary.BigEndian.Uint32(b[itemHeader-4:]))
	f := fields{b: b[itemHeader:end:end]}
	d.rest, d.left = b[end:], d.left-1
	it.reset()
	it.Kind = Kind(b[0])
	it.Group = binary.BigEndian.Uint16(b[1:])
	it.Session = binary.BigEndian.Uint64(b[3:])
	it.Seq = binary.BigEndian.Uint32(b[11:])
	switch it.Kind {
	case KindRequest:
		f.request(&it.Request, d.MaxJobSize)
	case KindWait:
		it.Wait.ID, it.Wait.MetaIndex = f.u64(), f.u64()
		it.Wait.Tubes = f.tubes(it.Wait.Tubes)
	case KindCancel:
		it.Wait.ID = f.u64()
	case KindDecline:
		it.Decline.Wait, it.Decline.Job = f.u64(), f.u64()
	case KindRefs:
		f.refs(&it.Refs)
	case KindClose:
	case KindLeaders, KindLeadersBehind:
		n := int(f.u16())
		if n > len(f.b)/32 { // each at least a group, a term, an index, tubes, jobs and two counts
			f.fail(ErrLength)
		}
		for range n {
			if f.err != nil {
				break
			}
			l := LeaderReport{Group: f.u16(), Term: f.u64(), Index: f.u64(), Tubes: f.u32(), Jobs: f.u64()}
			l.Voters, l.Learners = f.ids(), f.ids()
			if it.Kind == KindLeadersBehind {
				l.Behind = f.ids()
			}
			it.Leaders = append(it.Leaders, l)
		}
	case KindMove:
		it.Move.From, it.Move.To = f.name(), f.name()
	case KindSessions:
		f.sessions(&it.Sessions)
	case KindReply:
		f.reply(&it.Reply)
	case KindEvent:
		f.event(&it.Event)
	}
	if f.err == nil && len(f.b) > 0 {
		f.err = ErrLength
	}
	if f.err != nil {
		d.rest, d.left = nil, 0
	}
	return f.err
}

// reset zeroes the item, keeping its lists' arrays for the next.
func (it *Item) reset() {
	reqTubes, waitTubes := it.Request.Tubes[:0], it.Wait.Tubes[:0]
	counts, listed, leaders := it.Refs.Counts[:0], it.Reply.Tubes[:0], it.Leaders[:0]
	sessions := it.Sessions.IDs[:0]
	*it = Item{}
	it.Request.Tubes, it.Wait.Tubes = reqTubes, waitTubes
	it.Refs.Counts, it.Reply.Tubes, it.Leaders = counts, listed, leaders
	it.Sessions.IDs = sessions
}

// sessions reads a KindSessions item's list: increasing ids, none above
// its Upto.
func (f *fields) sessions(ss *Sessions) {
	ss.Upto = f.u64()
	n := uint64(f.u32())
	if n > uint64(len(f.b))/8 {
		f.fail(ErrLength)
		return
	}
	for i := range n {
		id := f.u64()
		if id > ss.Upto || i > 0 && id <= ss.IDs[i-1] {
			f.fail(ErrSessions)
			return
		}
		ss.IDs = append(ss.IDs, id)
	}
}

// fields reads one item's payload. Its first error sticks: every read
// after it yields zeros.
type fields struct {
	b   []byte
	err error
}

func (f *fields) fail(err error) {
	if f.err == nil {
		f.err = err
	}
	f.b = nil
}

// take is the next n bytes, capped so that an append to them cannot
// reach the bytes after.
func (f *fields) take(n uint64) []byte {
	if uint64(len(f.b)) < n {
		f.fail(ErrLength)
		return nil
	}
	v := f.b[:n:n]
	f.b = f.b[n:]
	return v
}

func (f *fields) u8() byte {
	if v := f.take(1); len(v) == 1 {
		return v[0]
	}
	return 0
}

func (f *fields) u16() uint16 {
	if v := f.take(2); len(v) == 2 {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (f *fields) u32() uint32 {
	if v := f.take(4); len(v) == 4 {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (f *fields) u64() uint64 {
	if v := f.take(8); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// ids reads a count and as many ids (appendIDs).
func (f *fields) ids() []uint64 {
	k := int(f.u8())
	if k > len(f.b)/8 {
		f.fail(ErrLength)
		return nil
	}
	var ids []uint64
	for range k {
		ids = append(ids, f.u64())
	}
	return ids
}

func (f *fields) i64() int64              { return int64(f.u64()) }
func (f *fields) duration() time.Duration { return time.Duration(f.u64()) }

// flags reads a flags byte, refusing bits other than known's.
func (f *fields) flags(known byte) byte {
	v := f.u8()
	if v&^known != 0 {
		f.fail(ErrFlags)
	}
	return v
}

func (f *fields) tube() []byte {
	n := f.u8()
	if f.err != nil {
		return nil
	}
	if n == 0 || n > codec.MaxTubeName {
		f.fail(ErrTubeName)
		return nil
	}
	return f.take(uint64(n))
}

// name is a member's name in a move, or nothing.
func (f *fields) name() []byte {
	n := f.u8()
	if f.err == nil && n > maxMemberName {
		f.fail(ErrMemberName)
	}
	if f.err != nil || n == 0 {
		return nil
	}
	return f.take(uint64(n))
}

// tubes appends a list of tubes to dst.
func (f *fields) tubes(dst [][]byte) [][]byte {
	n := f.u32()
	if uint64(n) > uint64(len(f.b))/minTube {
		f.fail(ErrLength)
	}
	for range n {
		if f.err != nil {
			break
		}
		dst = append(dst, f.tube())
	}
	return dst
}

// body reads a job's data, refusing more than maxJobSize bytes before
// its "\r\n" unless maxJobSize is negative.
func (f *fields) body(maxJobSize int) []byte {
	v := f.take(uint64(f.u32()))
	switch {
	case f.err != nil:
		return nil
	case !endsInCRLF(v):
		f.fail(ErrBody)
		return nil
	case maxJobSize >= 0 && len(v)-2 > maxJobSize:
		f.fail(ErrJobTooBig)
		return nil
	}
	return v
}

func (f *fields) candidate() store.Candidate {
	pri := f.u32()
	return store.Candidate{Pri: pri, ID: f.u64()}
}

func (f *fields) job(j *JobReply) {
	j.ID, j.Pri, j.TTR = f.u64(), f.u32(), f.u32()
	j.Body = f.body(-1)
}

func (f *fields) request(r *Request, maxJobSize int) {
	r.Number, r.MetaIndex, r.Stamp = f.u64(), f.u64(), f.u64()
	r.Op = Op(f.u8())
	switch r.Op {
	case OpPut:
		r.Tube = f.tube()
		r.Pri, r.Delay, r.TTR = f.u32(), f.u32(), f.u32()
		r.Body = f.body(max(maxJobSize, 0))
	case OpBurn, OpStats, OpListTubes:
	case OpReserve:
		r.Tubes = f.tubes(r.Tubes)
		r.Timeout = f.duration()
		r.SoonElsewhere = f.flags(flagSoonElsewhere) != 0
		r.SoonIn = f.duration()
	case OpBest:
		r.Tubes = f.tubes(r.Tubes)
	case OpTake:
		r.Tubes = f.tubes(r.Tubes)
		r.Bound = f.candidate()
	case OpReserveJob, OpDelete, OpTouch, OpPeek, OpStatsJob, OpKickJob, OpHeld:
		r.ID = f.u64()
	case OpRelease:
		r.ID, r.Pri, r.Delay = f.u64(), f.u32(), f.u32()
	case OpBury:
		r.ID, r.Pri = f.u64(), f.u32()
	case OpPeekReady, OpPeekDelayed, OpPeekBuried, OpStatsTube:
		r.Tube = f.tube()
	case OpKick:
		r.Tube, r.Count = f.tube(), f.u32()
	case OpPauseTube:
		r.Tube, r.Delay = f.tube(), f.u32()
	default:
		f.fail(ErrOp)
	}
}

func (f *fields) refs(r *Refs) {
	r.MetaIndex, r.Stamp = f.u64(), f.u64()
	r.Sync = f.flags(flagRefsSync) != 0
	n := f.u32()
	if uint64(n) > uint64(len(f.b))/(minTube+8) {
		f.fail(ErrLength)
	}
	for range n {
		if f.err != nil {
			break
		}
		tube := f.tube()
		r.Counts = append(r.Counts, RefCount{Tube: tube, Using: f.u32(), Watching: f.u32()})
	}
}

func (f *fields) reply(r *Reply) {
	r.Status = Status(f.u8())
	r.Stamp = f.u64()
	switch {
	case f.err != nil:
		return
	case r.Status == StatusWrongGroup:
		r.MetaIndex = f.u64()
		return
	case r.Status == StatusNotLeader:
		return
	case r.Status == 0 || r.Status == statusRetired || r.Status >= numStatuses:
		f.fail(ErrStatus)
		return
	}
	r.Result = Result(f.u8())
	switch r.Result {
	case ResultNone:
	case ResultJob:
		f.job(&r.Job)
	case ResultID:
		r.ID = f.u64()
	case ResultCount:
		r.Count = f.u32()
	case ResultBest:
		r.Best.Candidate = f.candidate()
		fl := f.flags(flagBestOK | flagBestAnyReady)
		r.Best.OK, r.Best.AnyReady = fl&flagBestOK != 0, fl&flagBestAnyReady != 0
	case ResultTubeStats:
		f.tubeStats(&r.TubeStats)
	case ResultJobStats:
		f.jobStats(&r.JobStats)
	case ResultStats:
		s := &r.Stats
		s.Urgent, s.Ready, s.Reserved, s.Delayed, s.Buried = f.i64(), f.i64(), f.i64(), f.i64(), f.i64()
		s.TotalJobs, s.JobTimeouts, s.Waiting, s.Tubes = f.i64(), f.i64(), f.i64(), int(f.i64())
	case ResultMoved:
		n := int(f.u16())
		if n > len(f.b)/2 {
			f.fail(ErrLength)
			return
		}
		r.Moved = make([]uint16, n)
		for i := range r.Moved {
			r.Moved[i] = f.u16()
		}
	case ResultTubes:
		n := f.u32()
		if uint64(n) > uint64(len(f.b))/(8+minTube) {
			f.fail(ErrLength)
		}
		for range n {
			if f.err != nil {
				break
			}
			stamp := f.u64()
			r.Tubes = append(r.Tubes, TubeStamp{Stamp: stamp, Name: f.tube()})
		}
	default:
		f.fail(ErrResult)
	}
}

func (f *fields) tubeStats(s *store.TubeStats) {
	s.Name = string(f.tube())
	s.Urgent, s.Ready, s.Reserved = int(f.i64()), int(f.i64()), int(f.i64())
	s.Delayed, s.Buried = int(f.i64()), int(f.i64())
	s.TotalJobs = f.u64()
	s.Using, s.Watching, s.Waiting = int(f.i64()), int(f.i64()), int(f.i64())
	s.CmdDelete, s.CmdPause = f.u64(), f.u64()
	s.Pause, s.PauseTimeLeft = f.duration(), f.duration()
}

func (f *fields) jobStats(s *store.JobStats) {
	s.ID = f.u64()
	s.Tube = string(f.tube())
	if s.State = store.State(f.u8()); f.err == nil && !validState(s.State) {
		f.fail(ErrState)
	}
	s.Pri = f.u32()
	s.Age, s.Delay, s.TTR, s.TimeLeft = f.duration(), f.duration(), f.duration(), f.duration()
	s.File = f.i64()
	s.Reserves, s.Timeouts, s.Releases, s.Buries, s.Kicks = f.u32(), f.u32(), f.u32(), f.u32(), f.u32()
}

func (f *fields) event(e *Event) {
	e.Wait = f.u64()
	e.Type = EventType(f.u8())
	switch e.Type {
	case EventOffer:
		f.job(&e.Job)
	case EventDeadlineSoon:
	case EventWrongGroup:
		e.MetaIndex = f.u64()
	default:
		f.fail(ErrEvent)
	}
}
