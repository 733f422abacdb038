package cbinlog

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// binlog builds the bytes of one beanstalkd binlog file by hand.
type binlog struct {
	version int32
	buf     bytes.Buffer
}

// newBinlog starts a file with the given version header.
func newBinlog(version int32) *binlog {
	b := &binlog{version: version}
	b.buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(version)))
	return b
}

// full appends a full record. jr.bodySize is set from body.
func (b *binlog) full(tube string, jr jobrec, body string) *binlog {
	jr.bodySize = int32(len(body))
	b.nameLen(int64(len(tube)))
	b.buf.WriteString(tube)
	b.buf.Write(b.encode(jr))
	b.buf.WriteString(body)
	return b
}

// short appends a short record.
func (b *binlog) short(jr jobrec) *binlog {
	b.nameLen(0)
	b.buf.Write(b.encode(jr))
	return b
}

// nameLen appends a tube-name length field of the file's version.
func (b *binlog) nameLen(n int64) *binlog {
	if b.version == walver5 {
		b.buf.Write(binary.LittleEndian.AppendUint64(nil, uint64(n)))
	} else {
		b.buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(int32(n))))
	}
	return b
}

// raw appends bytes as they are.
func (b *binlog) raw(p []byte) *binlog {
	b.buf.Write(p)
	return b
}

// zeros appends n zero bytes, as beanstalkd's preallocation leaves.
func (b *binlog) zeros(n int) *binlog { return b.raw(make([]byte, n)) }

// len is the file's size so far: the offset of the next record.
func (b *binlog) len() int64 { return int64(b.buf.Len()) }

func (b *binlog) bytes() []byte { return bytes.Clone(b.buf.Bytes()) }

// encode lays out jr as the file's version stores it.
func (b *binlog) encode(jr jobrec) []byte {
	div := int64(1)
	if b.version == walver5 {
		div = 1000
	}
	le := binary.LittleEndian
	p := make([]byte, jobrecSize)
	le.PutUint64(p[0:], jr.id)
	le.PutUint32(p[8:], jr.pri)
	le.PutUint64(p[16:], uint64(jr.delay/div))
	le.PutUint64(p[24:], uint64(jr.ttr/div))
	le.PutUint32(p[32:], uint32(jr.bodySize))
	le.PutUint64(p[40:], uint64(jr.createdAt/div))
	le.PutUint64(p[48:], uint64(jr.deadlineAt/div))
	le.PutUint32(p[56:], jr.reserves)
	le.PutUint32(p[60:], jr.timeouts)
	le.PutUint32(p[64:], jr.releases)
	le.PutUint32(p[68:], jr.buries)
	le.PutUint32(p[72:], jr.kicks)
	p[76] = jr.state
	if b.version == walver5 {
		return p[:jobrec5Size]
	}
	return p
}

// writeBinlogs writes files[i] as dir/binlog.<i+1> and returns dir.
func writeBinlogs(t *testing.T, files ...[]byte) string {
	t.Helper()
	dir := t.TempDir()
	for i, data := range files {
		writeFile(t, filepath.Join(dir, "binlog."+strconv.Itoa(i+1)), data)
	}
	return dir
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// copyBinlogs copies dir's binlog files into a new directory, writable, so
// a test can damage them without touching the original.
func copyBinlogs(t *testing.T, dir string) string {
	t.Helper()
	paths, err := Found(dir)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dst, filepath.Base(p)), data)
	}
	return dst
}

// recordEnds returns, for each file of dir keyed by its base name, the
// offsets where a cut leaves only whole records: 0, the end of the header,
// and the end of every record read whole.
func recordEnds(t *testing.T, dir string) map[string][]int64 {
	t.Helper()
	paths, err := Found(dir)
	if err != nil {
		t.Fatal(err)
	}
	offs := make(map[string][]int64)
	for _, p := range paths {
		offs[filepath.Base(p)] = []int64{0, 4}
	}
	rp := newReplay(DefaultMaxJobSize)
	rp.onRecord = func(path string, start, end int64) {
		offs[filepath.Base(path)] = append(offs[filepath.Base(path)], end)
	}
	for i, p := range paths {
		if err := rp.readFile(p, i == len(paths)-1); err != nil {
			t.Fatal(err)
		}
	}
	return offs
}
