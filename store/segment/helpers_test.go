package segment_test

import (
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sproutmq/sprout/store/segment"
	"github.com/sproutmq/sprout/store/segment/segtest"
)

// The items these tests log, as a journal logs jobs: a frame whose payload
// is a kind, the item's id and, for a full version, its note, a NUL and
// its body (full), for an update its new note.
const (
	kindFull   = 1
	kindUpdate = 2
	kindDelete = 3
)

// itemFrame appends an item's frame to dst.
func itemFrame(dst []byte, kind byte, id uint64, data string) []byte {
	start := len(dst)
	dst = segment.BeginFrame(dst)
	dst = append(dst, kind)
	dst = binary.LittleEndian.AppendUint64(dst, id)
	dst = append(dst, data...)
	return segment.EndFrame(dst, start)
}

// item is an item as the model keeps it and as a reopen recovers it.
type item struct {
	body, note string
	loc        segment.Loc
}

// full is the data of the item's full version.
func (it *item) full() string { return it.note + "\x00" + it.body }

// recoverItems is the replay of a directory of items: it folds each frame
// into items and raises last to the highest id.
func recoverItems(items map[uint64]*item, last *uint64) func(f segment.Frame) error {
	return func(f segment.Frame) error {
		p := f.Payload
		if len(p) < 9 || p[0] < kindFull || p[0] > kindDelete {
			return segment.ErrCorrupt
		}
		id := binary.LittleEndian.Uint64(p[1:])
		*last = max(*last, id)
		switch p[0] {
		case kindFull:
			note, body, _ := strings.Cut(string(p[9:]), "\x00")
			items[id] = &item{body: body, note: note, loc: segment.Loc{Seg: f.Seg, Size: uint32(f.Size)}}
		case kindUpdate:
			if it := items[id]; it != nil {
				it.note = string(p[9:])
			}
		case kindDelete:
			delete(items, id)
		}
		return nil
	}
}

// testLog is a Log with its directory, closed together, as its users keep
// them.
type testLog struct {
	*segment.Log
	dir  *segment.Dir
	once sync.Once
}

func (l *testLog) Close() error {
	err := l.Log.Close()
	l.once.Do(func() { err = errors.Join(err, l.dir.Close()) })
	return err
}

// withVersion gives opts the journal's version unless it has one.
func withVersion(opts segment.Options) segment.Options {
	if opts.Version == 0 {
		opts.Version = segment.VersionJournal
	}
	return opts
}

// openItems locks and opens dir as a log of items, not started, and
// returns it with the items it recovered (told to the log as live) and
// the highest id.
func openItems(t testing.TB, dir string, opts segment.Options) (*testLog, map[uint64]*item, uint64, error) {
	t.Helper()
	d, err := segment.LockDir(dir)
	if err != nil {
		return nil, nil, 0, err
	}
	items := make(map[uint64]*item)
	var last uint64
	l, err := segment.Open(d, withVersion(opts), recoverItems(items, &last))
	if err != nil {
		_ = d.Close()
		return nil, nil, 0, err
	}
	l.RaiseID(last)
	for _, id := range slices.Sorted(maps.Keys(items)) {
		l.Moved([]segment.Move{{ID: id, To: items[id].loc}})
	}
	return &testLog{Log: l, dir: d}, items, l.LastID(), nil
}

// model is the items a test has logged, kept the way a journal's user
// keeps them: each with its latest state and the Loc of its latest full
// version. It is also the Log's Migrator. mu is held around each Append,
// as a store holds a tube lock, so a migration never races a change to the
// same item.
type model struct {
	mu    sync.Mutex
	l     *testLog
	items map[uint64]*item // guarded by mu: live items
	next  uint64           // guarded by mu: the last id issued
}

// open opens dir, loads what it recovers into a model and starts the log.
func open(t testing.TB, dir string, opts segment.Options) (*testLog, *model) {
	t.Helper()
	l, items, last, err := openItems(t, dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	m := &model{l: l, items: items, next: last}
	if err := l.Start(m); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, m
}

// appendItem appends an item's frame as a journal does: a full version
// live, every group but a delete refusable.
func (m *model) appendItem(kind byte, id uint64, data string, prev segment.Loc) (lsn uint64, loc segment.Loc, err error) {
	size := segment.FrameHeader + 9 + len(data)
	g := segment.Group{
		Size:      size,
		Encode:    func(b []byte) []byte { return itemFrame(b, kind, id, data) },
		ID:        id,
		Live:      kind == kindFull,
		Prev:      prev,
		Refusable: kind != kindDelete,
	}
	lsn, seg, _, err := m.l.Append(&g)
	if err == nil && g.Live {
		loc = segment.Loc{Seg: seg, Size: uint32(size)}
	}
	return lsn, loc, err
}

func (m *model) Migrate(seg uint32, ids []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		it := m.items[id]
		if it == nil || it.loc.Seg != seg {
			continue
		}
		if _, loc, err := m.appendItem(kindFull, id, it.full(), it.loc); err == nil {
			it.loc = loc
			m.l.NoteMigrated()
		}
	}
}

// put logs a new item with the next id.
func (m *model) put(t testing.TB, body string) (id, lsn uint64) {
	t.Helper()
	id, lsn, err := m.tryPut(body)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	return id, lsn
}

func (m *model) tryPut(body string) (id, lsn uint64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id = m.next + 1
	it := &item{body: body}
	lsn, loc, err := m.appendItem(kindFull, id, it.full(), segment.Loc{})
	if err != nil {
		return 0, 0, err
	}
	m.next = id
	it.loc = loc
	m.items[id] = it
	return id, lsn, nil
}

// update gives a live item a new note and logs the change.
func (m *model) update(t testing.TB, id uint64, note string) uint64 {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.items[id]
	if it == nil {
		t.Fatalf("update: item %d is not live", id)
	}
	lsn, _, err := m.appendItem(kindUpdate, id, note, segment.Loc{})
	if err != nil {
		t.Fatalf("update %d: %v", id, err)
	}
	it.note = note
	return lsn
}

// del logs an item's deletion.
func (m *model) del(t testing.TB, id uint64) uint64 {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.items[id]
	if it == nil {
		t.Fatalf("delete: item %d is not live", id)
	}
	lsn, _, err := m.appendItem(kindDelete, id, "", it.loc)
	if err != nil {
		t.Fatalf("delete %d: %v", id, err)
	}
	delete(m.items, id)
	return lsn
}

func (m *model) ids() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.items))
}

// want is what a reopen must recover: the live items.
func (m *model) want() map[uint64]item {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[uint64]item, len(m.items))
	for id, it := range m.items {
		out[id] = *it
	}
	return out
}

// recoverDir opens dir, returns what it recovers keyed by id, and closes it.
func recoverDir(t testing.TB, dir string, opts segment.Options) (map[uint64]*item, uint64) {
	t.Helper()
	l, items, last, err := openItems(t, dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	segtest.CloseUnstarted(t, l)
	return items, last
}

// closeAndRecover closes l, reopens dir and checks that it recovers the
// items m holds, exactly; it returns what it recovered and the last id.
func closeAndRecover(t testing.TB, l *testLog, m *model, dir string, opts segment.Options) (map[uint64]*item, uint64) {
	t.Helper()
	want := m.want()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, last := recoverDir(t, dir, opts)
	sameItems(t, got, want)
	return got, last
}

// sameItems compares recovered items with the model's.
func sameItems(t testing.TB, got map[uint64]*item, want map[uint64]item) {
	t.Helper()
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("item %d (%s) was not recovered", id, w.body)
			continue
		}
		if g.body != w.body || g.note != w.note {
			t.Errorf("item %d recovered as %q/%q, want %q/%q", id, g.body, g.note, w.body, w.note)
		}
		if g.loc.Seg == 0 || g.loc.Size == 0 {
			t.Errorf("item %d recovered without a location: %+v", id, g.loc)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("item %d recovered but should be gone", id)
		}
	}
}

func segPath(dir string, seq uint32) string { return filepath.Join(dir, segment.SegmentName(seq)) }

// setSeal writes seal into the header of segment seq of dir: SealOpen for
// a segment a crash left open, 0 for one an earlier release wrote.
func setSeal(t testing.TB, dir string, seq, seal uint32) {
	t.Helper()
	f, err := os.OpenFile(segPath(dir, seq), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, seal), segment.SealOffset); err != nil {
		t.Fatal(err)
	}
}

// sealOf reads the seal in the header of segment seq of dir.
func sealOf(t testing.TB, dir string, seq uint32) uint32 {
	t.Helper()
	b, err := os.ReadFile(segPath(dir, seq))
	if err != nil || len(b) < segment.HeaderSize {
		t.Fatalf("segment %d: %d bytes, %v", seq, len(b), err)
	}
	return binary.LittleEndian.Uint32(b[segment.SealOffset:])
}
