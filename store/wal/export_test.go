package wal

import "github.com/sproutmq/sprout/store/segment"

// This file exposes internals to the external tests (package wal_test)
// without widening the API.

// ErrCorrupt is what a damaged frame decodes to.
var ErrCorrupt = errCorrupt

// EncodeFrame appends r's frame to dst.
func EncodeFrame(dst []byte, r *Record) []byte { return appendFrame(dst, r) }

// DecodeFrame checks and decodes the frame at the start of b and returns
// its size (negative when its length field cannot be trusted).
func DecodeFrame(b []byte) (Record, int, error) {
	var r Record
	payload, n, err := segment.CheckFrame(b, maxPayload)
	if err != nil {
		return r, n, errCorrupt
	}
	return r, n, decodePayload(payload, &r, "")
}
