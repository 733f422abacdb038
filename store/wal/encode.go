package wal

import (
	"encoding/binary"

	"github.com/sproutmq/sprout/store/segment"
)

// A record is a segment frame (segment.BeginFrame: u32 payload length,
// u32 CRC-32C of the payload, payload) whose payload is, little-endian:
//
//	u8 kind, u64 id,
//	KindFull:   u16 tube length, tube,
//	Full/Update: u8 state, u32 pri, i64 delay, ttr, created, deadline,
//	             u32 reserves, timeouts, releases, buries, kicks,
//	KindFull:   u32 body length, body,
//	KindClock:  i64 time (the id is 0),
//	KindMeta:   as KindFull (its id 0, its state any, its body maybe empty).
//	KindReq:    u64 incarnation, u64 number (the key), i64 time, u32 count.
//
// A KindFull, KindUpdate or KindDelete record with a key (Record.Req) is
// written as kindKeyed (7), then its id, the key (u64 incarnation, u64
// number, not both 0) and its own kind, and then what follows that kind's
// id: 17 bytes more than the same record without a key, whose bytes are
// unchanged. So "kind, then id" holds for every record (NextFrame reads
// the own kind behind the key), and a release from before keys refuses a
// keyed record as a damaged one: kinds 5 to 7 are unknown to it.
const (
	frameHeader = segment.FrameHeader
	fixedFields = 1 + 4 + 8*4 + 4*5
	// keyFields is what a key adds to a record: kindKeyed's byte, the key
	// and the record's own kind in place of its first byte.
	keyFields = 1 + 16
	// clockFields and reqFields follow a KindClock's and a KindReq's id.
	clockFields = 8
	reqFields   = 16 + 8 + 4
	// MaxTubeName bounds the tube name a record may carry.
	maxTubeName = 1 << 10
	// maxPayload bounds a frame: a 1 GiB body (beanstalkd's largest -z)
	// plus its fields.
	maxPayload = 1<<30 + 2 + 1<<12
)

// errCorrupt is a damaged record. It is segment.ErrCorrupt too, so that
// replay takes a record it cannot decode for a damaged frame.
var errCorrupt error = corruptRecord{}

type corruptRecord struct{}

func (corruptRecord) Error() string        { return "wal: corrupt record" }
func (corruptRecord) Is(target error) bool { return target == segment.ErrCorrupt }

// FullSize is the size on disk of a KindFull record with this tube name
// and body length, and no key.
func FullSize(tubeLen, bodyLen int) int {
	return frameHeader + 1 + 8 + 2 + tubeLen + fixedFields + 4 + bodyLen
}

// FrameSize is the size of r's frame, as AppendFrame writes it: FullSize
// for a full record without a key.
func FrameSize(r *Record) int { return frameHeader + payloadSize(r) }

// keyed reports whether r is written with its key.
func keyed(r *Record) bool {
	return !r.Req.IsZero() && (r.Kind == KindFull || r.Kind == KindUpdate || r.Kind == KindDelete)
}

func payloadSize(r *Record) int {
	n := 1 + 8
	switch r.Kind {
	case KindFull, KindMeta:
		n = FullSize(len(r.Tube), len(r.Body)) - frameHeader
	case KindUpdate, KindControl:
		n += fixedFields
	case KindClock:
		n += clockFields
	case KindReq:
		n += reqFields
	}
	if keyed(r) {
		n += keyFields
	}
	return n
}

// appendFrame appends r's frame to dst.
func appendFrame(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = segment.BeginFrame(dst)
	if keyed(r) {
		dst = append(dst, byte(kindKeyed))
		dst = binary.LittleEndian.AppendUint64(dst, r.ID)
		dst = appendReq(dst, r.Req)
		dst = append(dst, byte(r.Kind))
	} else {
		dst = append(dst, byte(r.Kind))
		dst = binary.LittleEndian.AppendUint64(dst, r.ID)
	}
	switch r.Kind {
	case KindClock:
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Time))
	case KindReq:
		dst = appendReq(dst, r.Req)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Time))
		dst = binary.LittleEndian.AppendUint32(dst, r.Count)
	}
	if r.Kind == KindFull || r.Kind == KindMeta {
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.Tube)))
		dst = append(dst, r.Tube...)
	}
	if r.Kind == KindFull || r.Kind == KindUpdate || r.Kind == KindControl || r.Kind == KindMeta {
		dst = append(dst, r.State)
		dst = binary.LittleEndian.AppendUint32(dst, r.Pri)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Delay))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.TTR))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.CreatedAt))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Deadline))
		for _, c := range [...]uint32{r.Reserves, r.Timeouts, r.Releases, r.Buries, r.Kicks} {
			dst = binary.LittleEndian.AppendUint32(dst, c)
		}
	}
	if r.Kind == KindFull || r.Kind == KindMeta {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Body)))
		dst = append(dst, r.Body...)
	}
	return segment.EndFrame(dst, start)
}

func appendReq(dst []byte, q Req) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, q.Incarnation)
	return binary.LittleEndian.AppendUint64(dst, q.Number)
}

func readReq(p []byte) Req {
	return Req{Incarnation: binary.LittleEndian.Uint64(p), Number: binary.LittleEndian.Uint64(p[8:])}
}

// decodePayload parses a checked payload. The body aliases p. A full
// record's tube is seen, not allocated again, when it is named as seen
// (the tube of the record before, usually: recovery and replicas decode a
// million records of a few tubes).
func decodePayload(p []byte, r *Record, seen string) error {
	*r = Record{}
	if len(p) < 9 {
		return errCorrupt
	}
	r.Kind = Kind(p[0])
	r.ID = binary.LittleEndian.Uint64(p[1:])
	p = p[9:]
	if r.Kind == kindKeyed {
		if len(p) < keyFields {
			return errCorrupt
		}
		// Written only with a key, and only before these kinds: any
		// other is not what an encoder makes, and would not encode back.
		r.Req, r.Kind, p = readReq(p), Kind(p[16]), p[keyFields:]
		if r.Req.IsZero() || r.Kind != KindFull && r.Kind != KindUpdate && r.Kind != KindDelete {
			return errCorrupt
		}
	}
	switch r.Kind {
	case KindClock:
		if r.ID != 0 || len(p) != clockFields {
			return errCorrupt
		}
		r.Time = int64(binary.LittleEndian.Uint64(p))
		return nil
	case KindReq:
		if len(p) != reqFields {
			return errCorrupt
		}
		r.Req = readReq(p)
		r.Time = int64(binary.LittleEndian.Uint64(p[16:]))
		r.Count = binary.LittleEndian.Uint32(p[24:])
		if r.Req.IsZero() || r.Count == 0 {
			return errCorrupt
		}
		return nil
	case KindFull, KindMeta:
		if len(p) < 2 || r.Kind == KindMeta && r.ID != 0 {
			return errCorrupt
		}
		n := int(binary.LittleEndian.Uint16(p))
		p = p[2:]
		if n == 0 || n > len(p) {
			return errCorrupt
		}
		if string(p[:n]) == seen {
			r.Tube = seen
		} else {
			r.Tube = string(p[:n])
		}
		p = p[n:]
	case KindUpdate, KindDelete, KindIDs, KindControl:
	default:
		return errCorrupt
	}
	if r.Kind == KindDelete || r.Kind == KindIDs {
		if len(p) != 0 {
			return errCorrupt
		}
		return nil
	}
	if len(p) < fixedFields {
		return errCorrupt
	}
	r.State = p[0]
	r.Pri = binary.LittleEndian.Uint32(p[1:])
	r.Delay = int64(binary.LittleEndian.Uint64(p[5:]))
	r.TTR = int64(binary.LittleEndian.Uint64(p[13:]))
	r.CreatedAt = int64(binary.LittleEndian.Uint64(p[21:]))
	r.Deadline = int64(binary.LittleEndian.Uint64(p[29:]))
	r.Reserves = binary.LittleEndian.Uint32(p[37:])
	r.Timeouts = binary.LittleEndian.Uint32(p[41:])
	r.Releases = binary.LittleEndian.Uint32(p[45:])
	r.Buries = binary.LittleEndian.Uint32(p[49:])
	r.Kicks = binary.LittleEndian.Uint32(p[53:])
	p = p[fixedFields:]
	if r.Kind == KindControl {
		if len(p) != 0 {
			return errCorrupt
		}
		return nil
	}
	if r.Kind == KindMeta {
		if len(p) < 4 || int(binary.LittleEndian.Uint32(p)) != len(p)-4 {
			return errCorrupt
		}
		if len(p) > 4 {
			r.Body = p[4:]
		}
		return nil
	}
	if r.State < StateReady || r.State > StateDelayed {
		return errCorrupt
	}
	if r.Kind == KindUpdate {
		if len(p) != 0 {
			return errCorrupt
		}
		return nil
	}
	if len(p) < 4 {
		return errCorrupt
	}
	n := int(binary.LittleEndian.Uint32(p))
	p = p[4:]
	if n != len(p) || n < 2 {
		return errCorrupt
	}
	r.Body = p
	return nil
}

// AppendFrame appends r's frame to dst, as a segment holds it. A cluster
// (internal/replication) carries a batch of records as their frames, one
// after another, in a Raft entry and in a snapshot.
func AppendFrame(dst []byte, r *Record) []byte { return appendFrame(dst, r) }

// DecodeFrames appends to dst the records of the frames in b, which must
// hold whole frames and nothing else, each checked against its CRC. The
// records' bodies alias b.
func DecodeFrames(dst []Record, b []byte) ([]Record, error) {
	var seen string
	for len(b) > 0 {
		payload, n, err := segment.CheckFrame(b, maxPayload)
		if err != nil {
			return dst, errCorrupt
		}
		var r Record
		if err := decodePayload(payload, &r, seen); err != nil {
			return dst, err
		}
		if r.Kind == KindFull {
			seen = r.Tube
		}
		dst = append(dst, r)
		b = b[n:]
	}
	return dst, nil
}

// ScanFrames calls fn with the kind, id and frame size of each record in
// b, whole frames written by this process or checked already
// (DecodeFrames): their CRCs are not checked again and nothing is
// decoded past the id.
func ScanFrames(b []byte, fn func(kind Kind, id uint64, size int)) error {
	for len(b) > 0 {
		kind, id, size, err := NextFrame(b)
		if err != nil {
			return err
		}
		fn(kind, id, size)
		b = b[size:]
	}
	return nil
}

// NextFrame reads the kind, id and size of the record frame at the start
// of b, as ScanFrames does: its CRC is not checked. A keyed record's kind
// is its own (KindFull, KindUpdate or KindDelete), read behind its key.
func NextFrame(b []byte) (kind Kind, id uint64, size int, err error) {
	if len(b) < frameHeader+9 {
		return 0, 0, 0, errCorrupt
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 9 || frameHeader+n > len(b) {
		return 0, 0, 0, errCorrupt
	}
	kind = Kind(b[frameHeader])
	if kind == kindKeyed {
		if n < 9+keyFields {
			return 0, 0, 0, errCorrupt
		}
		kind = Kind(b[frameHeader+9+16])
	}
	return kind, binary.LittleEndian.Uint64(b[frameHeader+1:]), frameHeader + n, nil
}

// ClockOf is the time of the KindClock record whose frame begins b, as a
// cluster leader begins each batch it proposes with one (docs/design/
// shards.md 5.6); false if b begins with another record, or none.
func ClockOf(b []byte) (int64, bool) {
	if len(b) < frameHeader+9+clockFields || Kind(b[frameHeader]) != KindClock {
		return 0, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 9+clockFields || frameHeader+n > len(b) {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(b[frameHeader+9:])), true
}

// LatestClock is the latest time of b's KindClock records (0: none). b
// holds whole frames checked already, as ScanFrames takes them.
func LatestClock(b []byte) (int64, error) {
	var latest int64
	for len(b) > 0 {
		_, _, size, err := NextFrame(b)
		if err != nil {
			return latest, err
		}
		if t, ok := ClockOf(b[:size]); ok {
			latest = max(latest, t)
		}
		b = b[size:]
	}
	return latest, nil
}

// ScanReqs calls fn with each record of b that a dedup table reads
// (store.DedupTable): KindClock, KindReq and every record with a key,
// decoded (a body aliases b; r is valid until fn returns). The others
// are skipped undecoded. b holds whole frames checked already, as
// ScanFrames takes them.
func ScanReqs(b []byte, fn func(r *Record)) error {
	var r Record
	var seen string // the last keyed put's tube, as DecodeFrames keeps it
	for len(b) > 0 {
		_, _, size, err := NextFrame(b)
		if err != nil {
			return err
		}
		switch Kind(b[frameHeader]) {
		case KindClock, KindReq, kindKeyed:
			if err := decodePayload(b[frameHeader:size], &r, seen); err != nil {
				return err
			}
			if r.Kind == KindFull {
				seen = r.Tube
			}
			fn(&r)
		}
		b = b[size:]
	}
	return nil
}
