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

// tornTail reports whether a frame at the start of b that does not check,
// in the last segment holding frames, is a write a crash tore, to be cut
// off there; b runs to the end of the file.
//
// A crash tears only what was written since the last fsync, at the end of
// the segment it was writing, before its preallocated zeros; each byte of
// it is written or still zero. The frame is a tear when nothing but zeros
// follows where its length says it ends, or its length cannot be read
// (zero, or past the end of the file); and no frame that checks after it
// ends exactly at the end of the file (endsWithFrame): that file was
// trimmed to its frames, as a clean Close and a rotation trim it once an
// fsync has covered them all, so nothing in it is torn, and the frames
// after the bad one were acknowledged. A crash leaves its
// preallocated zeros after its last write, and no frame holds those: a
// client's body shaped as a frame ends where the body does.
//
// Never a tear: a length above limit (a torn length, each byte written or
// zero, is at most the frame's, and no frame's is above limit), and a
// frame whose length reads within the file with written bytes after its
// end. Writes reach the disk in any order, so a power loss can leave
// that shape too (a block of a frame missing, frames after it written),
// but so can damage to a frame an fsync covered, with acknowledged frames
// after it: the start stops rather than cut those off, and SkipDamaged
// replays them.
func tornTail(b []byte, limit int) bool {
	if len(b) < FrameHeader {
		return true
	}
	n := int(binary.LittleEndian.Uint32(b))
	switch {
	case n > limit:
		return false
	case n > 0 && FrameHeader+n <= len(b) && !allZero(b[FrameHeader+n:]):
		return false
	}
	return !endsWithFrame(b, limit)
}

// endsWithFrame reports whether a frame of at most limit bytes of payload
// that checks begins in b after its first byte and ends exactly at its
// end. Only an exact length is checked further, so it costs a read of
// each offset.
func endsWithFrame(b []byte, limit int) bool {
	for y := 1; y+FrameHeader < len(b); y++ {
		n := int(binary.LittleEndian.Uint32(b[y:]))
		if n != len(b)-y-FrameHeader || n > limit {
			continue
		}
		if _, _, err := CheckFrame(b[y:], limit); err == nil {
			return true
		}
	}
	return false
}

// resync finds where frames resume in b after a damaged frame at its start
// whose length cannot be read (CheckFrame's size is negative): the first
// offset after it where a frame that checks begins and from which frames,
// followed by their lengths, end exactly where the data of b ends (its
// end, or where only zeros follow). It returns 0 if there is none. It
// takes a bool per byte of b, and a CRC only at the offsets so found, in
// order, until one checks.
func resync(b []byte, limit int) int {
	z := len(b) // where the zeros at the end begin
	for z > 0 && b[z-1] == 0 {
		z--
	}
	reach := make([]bool, z)
	for y := z - 1; y > 0; y-- {
		if y+FrameHeader > len(b) {
			continue
		}
		n := int(binary.LittleEndian.Uint32(b[y:]))
		if n == 0 || n > limit {
			continue
		}
		end := y + FrameHeader + n
		reach[y] = end <= len(b) && (end >= z || reach[end])
	}
	for y := 1; y < z; y++ {
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
