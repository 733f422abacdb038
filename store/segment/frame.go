package segment

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// A frame is: u32 payload length, u32 CRC-32C of the payload, payload. The
// payload is its user's: the engine only checks it and hands it back.

// FrameHeader is the size of a frame's header.
const FrameHeader = 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BeginFrame appends a frame's header to dst, to be filled in by EndFrame
// once its payload follows.
func BeginFrame(dst []byte) []byte { return append(dst, make([]byte, FrameHeader)...) }

// EndFrame fills in the header of the frame begun at start in dst: the
// payload's length and CRC.
func EndFrame(dst []byte, start int) []byte {
	payload := dst[start+FrameHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst
}

// CheckFrame checks the frame at the start of b, of at most limit bytes of
// payload, against its length and CRC, and returns its payload and size,
// header included; size is negative when the length field cannot be
// trusted (ErrCorrupt either way).
func CheckFrame(b []byte, limit int) (payload []byte, size int, err error) {
	if len(b) < FrameHeader {
		return nil, -1, ErrCorrupt
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n == 0 || n > limit || FrameHeader+n > len(b) {
		return nil, -1, ErrCorrupt
	}
	payload = b[FrameHeader : FrameHeader+n]
	if binary.LittleEndian.Uint32(b[4:]) != crc32.Checksum(payload, castagnoli) {
		return nil, FrameHeader + n, ErrCorrupt
	}
	return payload, FrameHeader + n, nil
}

// frameTail reports whether a bad frame at the start of b, of at most
// limit bytes of payload, is the last thing written: nothing but zeros
// (preallocated space) follows where it would end. A length above limit
// is damage, never a tear (lengthAboveLimit).
func frameTail(b []byte, limit int) bool {
	if lengthAboveLimit(b, limit) {
		return false
	}
	end := len(b)
	if len(b) >= FrameHeader {
		if n := int(binary.LittleEndian.Uint32(b)); n > 0 && FrameHeader+n < end {
			end = FrameHeader + n
		}
	}
	return allZero(b[end:])
}

// lengthAboveLimit reports whether the frame at the start of b says a
// length above limit: never a tear, as a torn length (each byte written
// or still zero) is at most the frame's, and no frame's is above limit.
func lengthAboveLimit(b []byte, limit int) bool {
	return len(b) >= FrameHeader && int(binary.LittleEndian.Uint32(b)) > limit
}

// resync finds where frames resume in b, a sealed segment's bytes from a
// damaged frame at its start whose length cannot be read (CheckFrame's
// size is negative) to the sealed length: the first offset after it where
// a frame that checks begins and from which frames, followed by their
// lengths, end exactly at the end of b. It returns 0 if there is none. It
// takes a bool per byte of b, and a CRC only at the offsets so found, in
// order, until one checks.
func resync(b []byte, limit int) int {
	reach := make([]bool, len(b)+1) // reach[y]: frames from y end at len(b)
	reach[len(b)] = true
	for y := len(b) - FrameHeader; y > 0; y-- {
		n := int(binary.LittleEndian.Uint32(b[y:]))
		if n == 0 || n > limit {
			continue
		}
		if end := y + FrameHeader + n; end <= len(b) {
			reach[y] = reach[end]
		}
	}
	for y := 1; y < len(b); y++ {
		if !reach[y] {
			continue
		}
		if _, _, err := CheckFrame(b[y:], limit); err == nil {
			return y
		}
	}
	return 0
}

// allZero reports whether b holds only zeros, comparing a block at a
// time: a segment's unwritten tail is megabytes of them.
func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var zeros [4096]byte
