package router

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// AppendItem appends it to payload, an items payload (begun when empty),
// and counts it there. It allocates nothing but payload's growth. It
// refuses what a Decoder would refuse, except a put's body past the
// receiver's max job size, which is the receiver's to know; on an error
// payload comes back as it was, begun.
func AppendItem(payload []byte, it *Item) ([]byte, error) {
	if len(payload) == 0 {
		payload = append(payload, 0, 0, 0, 0)
	}
	if len(payload) < 4 {
		return payload, ErrShort
	}
	count := binary.BigEndian.Uint32(payload)
	if count == math.MaxUint32 {
		return payload, ErrItemTooBig
	}
	at := len(payload)
	b := append(payload, byte(it.Kind))
	b = binary.BigEndian.AppendUint16(b, it.Group)
	b = binary.BigEndian.AppendUint64(b, it.Session)
	b = binary.BigEndian.AppendUint32(b, it.Seq)
	b = append(b, 0, 0, 0, 0) // the length, once known
	var err error
	switch it.Kind {
	case KindRequest:
		b, err = appendRequest(b, &it.Request)
	case KindWait:
		b = binary.BigEndian.AppendUint64(b, it.Wait.ID)
		b = binary.BigEndian.AppendUint64(b, it.Wait.MetaIndex)
		b, err = appendTubes(b, it.Wait.Tubes)
	case KindCancel:
		b = binary.BigEndian.AppendUint64(b, it.Wait.ID)
	case KindDecline:
		b = binary.BigEndian.AppendUint64(b, it.Decline.Wait)
		b = binary.BigEndian.AppendUint64(b, it.Decline.Job)
	case KindRefs:
		b, err = appendRefs(b, &it.Refs)
	case KindClose:
	case KindLeaders, KindLeadersBehind:
		if len(it.Leaders) > math.MaxUint16 {
			err = ErrItemTooBig
			break
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(it.Leaders)))
		for _, l := range it.Leaders {
			if len(l.Voters) > math.MaxUint8 || len(l.Learners) > math.MaxUint8 || len(l.Behind) > math.MaxUint8 {
				err = ErrItemTooBig
				break
			}
			b = binary.BigEndian.AppendUint16(b, l.Group)
			b = binary.BigEndian.AppendUint64(b, l.Term)
			b = binary.BigEndian.AppendUint64(b, l.Index)
			b = binary.BigEndian.AppendUint32(b, l.Tubes)
			b = binary.BigEndian.AppendUint64(b, l.Jobs)
			b = appendIDs(b, l.Voters)
			b = appendIDs(b, l.Learners)
			if it.Kind == KindLeadersBehind {
				b = appendIDs(b, l.Behind)
			}
		}
	case KindMove:
		if len(it.Move.From) > maxMemberName || len(it.Move.To) > maxMemberName {
			err = ErrMemberName
			break
		}
		b = append(append(b, byte(len(it.Move.From))), it.Move.From...)
		b = append(append(b, byte(len(it.Move.To))), it.Move.To...)
	case KindSessions:
		ss := &it.Sessions
		b = binary.BigEndian.AppendUint64(b, ss.Upto)
		b = binary.BigEndian.AppendUint32(b, uint32(len(ss.IDs)))
		for i, id := range ss.IDs {
			if id > ss.Upto || i > 0 && id <= ss.IDs[i-1] { // as fields.sessions refuses
				err = ErrSessions
				break
			}
			b = binary.BigEndian.AppendUint64(b, id)
		}
	case KindReply:
		b, err = appendReply(b, &it.Reply)
	case KindEvent:
		b, err = appendEvent(b, &it.Event)
	default:
		err = ErrKind
	}
	n := len(b) - at - itemHeader
	if err == nil && uint64(n) > math.MaxUint32 {
		err = ErrItemTooBig
	}
	if err != nil {
		return payload[:at], err
	}
	binary.BigEndian.PutUint32(b[at+itemHeader-4:], uint32(n))
	binary.BigEndian.PutUint32(b, count+1)
	return b, nil
}

func appendRequest(b []byte, r *Request) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, r.Number)
	b = binary.BigEndian.AppendUint64(b, r.MetaIndex)
	b = binary.BigEndian.AppendUint64(b, r.Stamp)
	b = append(b, byte(r.Op))
	var err error
	switch r.Op {
	case OpPut:
		if b, err = appendTube(b, r.Tube); err != nil {
			return b, err
		}
		b = binary.BigEndian.AppendUint32(b, r.Pri)
		b = binary.BigEndian.AppendUint32(b, r.Delay)
		b = binary.BigEndian.AppendUint32(b, r.TTR)
		return appendBody(b, r.Body)
	case OpBurn, OpStats, OpListTubes:
	case OpReserve:
		if b, err = appendTubes(b, r.Tubes); err != nil {
			return b, err
		}
		b = appendDuration(b, r.Timeout)
		b = append(b, flag(r.SoonElsewhere, flagSoonElsewhere))
		b = appendDuration(b, r.SoonIn)
	case OpBest:
		b, err = appendTubes(b, r.Tubes)
	case OpTake:
		if b, err = appendTubes(b, r.Tubes); err != nil {
			return b, err
		}
		b = appendCandidate(b, r.Bound)
	case OpReserveJob, OpDelete, OpTouch, OpPeek, OpStatsJob, OpKickJob, OpHeld:
		b = binary.BigEndian.AppendUint64(b, r.ID)
	case OpRelease:
		b = binary.BigEndian.AppendUint64(b, r.ID)
		b = binary.BigEndian.AppendUint32(b, r.Pri)
		b = binary.BigEndian.AppendUint32(b, r.Delay)
	case OpBury:
		b = binary.BigEndian.AppendUint64(b, r.ID)
		b = binary.BigEndian.AppendUint32(b, r.Pri)
	case OpPeekReady, OpPeekDelayed, OpPeekBuried, OpStatsTube:
		b, err = appendTube(b, r.Tube)
	case OpKick:
		b, err = appendTube(b, r.Tube)
		b = binary.BigEndian.AppendUint32(b, r.Count)
	case OpPauseTube:
		b, err = appendTube(b, r.Tube)
		b = binary.BigEndian.AppendUint32(b, r.Delay)
	default:
		err = ErrOp
	}
	return b, err
}

func appendRefs(b []byte, r *Refs) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, r.MetaIndex)
	b = binary.BigEndian.AppendUint64(b, r.Stamp)
	b = append(b, flag(r.Sync, flagRefsSync))
	if uint64(len(r.Counts)) > math.MaxUint32 {
		return b, ErrItemTooBig
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Counts)))
	for _, c := range r.Counts {
		var err error
		if b, err = appendTube(b, c.Tube); err != nil {
			return b, err
		}
		b = binary.BigEndian.AppendUint32(b, c.Using)
		b = binary.BigEndian.AppendUint32(b, c.Watching)
	}
	return b, nil
}

func appendReply(b []byte, r *Reply) ([]byte, error) {
	b = append(b, byte(r.Status))
	b = binary.BigEndian.AppendUint64(b, r.Stamp)
	switch r.Status {
	case StatusWrongGroup:
		return binary.BigEndian.AppendUint64(b, r.MetaIndex), nil
	case StatusNotLeader:
		return b, nil
	case 0:
		return b, ErrStatus
	}
	if r.Status == statusRetired || r.Status >= numStatuses {
		return b, ErrStatus
	}
	b = append(b, byte(r.Result))
	switch r.Result {
	case ResultNone:
	case ResultJob:
		return appendJob(b, &r.Job)
	case ResultID:
		b = binary.BigEndian.AppendUint64(b, r.ID)
	case ResultCount:
		b = binary.BigEndian.AppendUint32(b, r.Count)
	case ResultBest:
		b = appendCandidate(b, r.Best.Candidate)
		b = append(b, flag(r.Best.OK, flagBestOK)|flag(r.Best.AnyReady, flagBestAnyReady))
	case ResultTubeStats:
		return appendTubeStats(b, &r.TubeStats)
	case ResultJobStats:
		return appendJobStats(b, &r.JobStats)
	case ResultStats:
		s := &r.Stats
		for _, v := range [...]int64{
			s.Urgent, s.Ready, s.Reserved, s.Delayed, s.Buried,
			s.TotalJobs, s.JobTimeouts, s.Waiting, int64(s.Tubes),
		} {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
	case ResultMoved:
		if len(r.Moved) > math.MaxUint16 {
			return b, ErrItemTooBig
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.Moved)))
		for _, g := range r.Moved {
			b = binary.BigEndian.AppendUint16(b, g)
		}
	case ResultTubes:
		if uint64(len(r.Tubes)) > math.MaxUint32 {
			return b, ErrItemTooBig
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.Tubes)))
		for _, t := range r.Tubes {
			b = binary.BigEndian.AppendUint64(b, t.Stamp)
			var err error
			if b, err = appendTube(b, t.Name); err != nil {
				return b, err
			}
		}
	default:
		return b, ErrResult
	}
	return b, nil
}

func appendTubeStats(b []byte, s *store.TubeStats) ([]byte, error) {
	b, err := appendTube(b, s.Name)
	if err != nil {
		return b, err
	}
	for _, v := range [...]int{s.Urgent, s.Ready, s.Reserved, s.Delayed, s.Buried} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	b = binary.BigEndian.AppendUint64(b, s.TotalJobs)
	for _, v := range [...]int{s.Using, s.Watching, s.Waiting} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	b = binary.BigEndian.AppendUint64(b, s.CmdDelete)
	b = binary.BigEndian.AppendUint64(b, s.CmdPause)
	b = appendDuration(b, s.Pause)
	return appendDuration(b, s.PauseTimeLeft), nil
}

func appendJobStats(b []byte, s *store.JobStats) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, s.ID)
	b, err := appendTube(b, s.Tube)
	if err != nil {
		return b, err
	}
	if !validState(s.State) {
		return b, ErrState
	}
	b = append(b, byte(s.State))
	b = binary.BigEndian.AppendUint32(b, s.Pri)
	for _, d := range [...]time.Duration{s.Age, s.Delay, s.TTR, s.TimeLeft} {
		b = appendDuration(b, d)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(s.File))
	for _, v := range [...]uint32{s.Reserves, s.Timeouts, s.Releases, s.Buries, s.Kicks} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b, nil
}

func appendEvent(b []byte, e *Event) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, e.Wait)
	b = append(b, byte(e.Type))
	switch e.Type {
	case EventOffer:
		return appendJob(b, &e.Job)
	case EventDeadlineSoon:
	case EventWrongGroup:
		b = binary.BigEndian.AppendUint64(b, e.MetaIndex)
	default:
		return b, ErrEvent
	}
	return b, nil
}

func appendJob(b []byte, j *JobReply) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, j.ID)
	b = binary.BigEndian.AppendUint32(b, j.Pri)
	b = binary.BigEndian.AppendUint32(b, j.TTR)
	return appendBody(b, j.Body)
}

func appendCandidate(b []byte, c store.Candidate) []byte {
	b = binary.BigEndian.AppendUint32(b, c.Pri)
	return binary.BigEndian.AppendUint64(b, c.ID)
}

func appendTube[T string | []byte](b []byte, name T) ([]byte, error) {
	if len(name) == 0 || len(name) > codec.MaxTubeName {
		return b, ErrTubeName
	}
	b = append(b, byte(len(name)))
	return append(b, name...), nil
}

func appendTubes(b []byte, names [][]byte) ([]byte, error) {
	if uint64(len(names)) > math.MaxUint32 {
		return b, ErrItemTooBig
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(names)))
	for _, name := range names {
		var err error
		if b, err = appendTube(b, name); err != nil {
			return b, err
		}
	}
	return b, nil
}

func appendBody(b, body []byte) ([]byte, error) {
	if !endsInCRLF(body) {
		return b, ErrBody
	}
	if uint64(len(body)) > math.MaxUint32 {
		return b, ErrItemTooBig
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...), nil
}

func appendDuration(b []byte, d time.Duration) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(d))
}

func flag(set bool, f byte) byte {
	if set {
		return f
	}
	return 0
}

func endsInCRLF(body []byte) bool {
	n := len(body)
	return n >= 2 && body[n-2] == '\r' && body[n-1] == '\n'
}

func validState(s store.State) bool { return s >= store.StateReady && s <= store.StateDelayed }

// appendIDs appends a count (at most 255) and the ids.
func appendIDs(b []byte, ids []uint64) []byte {
	b = append(b, uint8(len(ids)))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint64(b, id)
	}
	return b
}
