package replication

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sproutmq/sprout/internal/testproc"
)

// handSnapshot is a snapshot that a test, playing member m2, sends to a
// member by hand on a snapshot connection: its message, and what follows
// the go-ahead (the chunks, their end, the trailer).
type handSnapshot struct {
	msg  *pb.Message
	wire []byte
	// chunks are where each chunk begins in wire, then where the end
	// marker and the trailer do.
	chunks []int
	end    int
	tail   int
}

// newHandSnapshot is snapshot index, at term, of n's cluster (cluster 0)
// or of another, whose records are data.
func newHandSnapshot(n *Node, index, term, cluster uint64, data []byte) *handSnapshot {
	var voters []uint64
	for _, m := range n.cfg.Peers {
		voters = append(voters, m.ID)
	}
	md := &pb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: &pb.ConfState{Voters: voters}}
	s := &handSnapshot{msg: &pb.Message{Type: pb.MsgSnap.Enum(), From: new(MemberID("m2")), To: new(n.self.ID),
		Term: new(term), Snapshot: &pb.Snapshot{Metadata: md}}}
	if cluster == 0 {
		cluster = n.cfg.ClusterID
	}
	sum := snapshotTrailer{cluster: cluster, index: index, term: term}
	var b bytes.Buffer
	for _, c := range headChunks(data) {
		s.chunks = append(s.chunks, b.Len())
		sum.add(c)
		_ = writeChunk(&b, c)
	}
	s.end = b.Len()
	_ = writeChunk(&b, nil)
	s.tail = b.Len()
	b.Write(sum.append(nil))
	s.wire = b.Bytes()
	return s
}

// send dials n as m2 and sends the message, then, if n goes ahead, wire
// a piece at a time (after each, between, is called), and half-closes
// the connection. It returns n's go-ahead and verdict, -1 for none (n
// closed the connection first).
func (s *handSnapshot) send(t *testing.T, n *Node, wire []byte, between func()) (goAhead, verdict int) {
	t.Helper()
	conn := dial(t, n.Addr())
	h := helloAs(n, "m2")
	h.Kind = streamSnapshot
	if answer, err := exchange(t, conn, h); err != nil || answer.Refusal != "" {
		t.Fatalf("m2's hello: %+v, %v", answer, err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	frame, err := appendFrame(nil, s.msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	readByte := func() int {
		var b [1]byte
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			return -1
		}
		return int(b[0])
	}
	if goAhead = readByte(); goAhead != int(snapshotProceed) {
		return goAhead, -1
	}
	const piece = 256 << 10
	for len(wire) > 0 {
		k := min(piece, len(wire))
		if _, err := conn.Write(wire[:k]); err != nil {
			break // refused meanwhile: the verdict says so
		}
		wire = wire[k:]
		if between != nil {
			between()
		}
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	verdict = readByte()
	if !closedByPeer(conn) {
		t.Fatal("the snapshot connection stays open after its verdict")
	}
	return goAhead, verdict
}

// TestSnapshotStreamFaults: a member (on a directory) that receives a
// snapshot cut at every chunk boundary, in the middle of a chunk's header
// and bytes, and of the trailer; with a chunk whose CRC fails; with a
// trailer of another cluster or with other counts: each leaves it as it
// was (nothing installed, nothing in its store), and is refused with one
// log line between them all. Its directory copied while a whole snapshot
// is received opens as it was or with the snapshot installed, never
// between, and a member started on a copy taken mid-stream takes the
// snapshot again. One of an older term, or at its commit index, is
// refused before any record is sent.
func TestSnapshotStreamFaults(t *testing.T) {
	dir := t.TempDir()
	var cfg NodeConfig
	n, out := startLone(t, func(c *NodeConfig) {
		cfg = *c
		wcfg := c.WALConfig(dir)
		wcfg.Wal.SegmentSize = 256 << 10
		c.Log = openWAL(t, wcfg)
	})
	data := bigJobs(300, 10<<10) // four chunks
	snap := newHandSnapshot(n, 50, 5, 0, data)
	md := snap.msg.GetSnapshot().GetMetadata()
	unchanged := func(what string) {
		t.Helper()
		if st := n.Status(); st.Commit != 1 || st.Applied != 1 {
			t.Fatalf("%s: commit %d, applied %d: the snapshot was taken", what, st.Commit, st.Applied)
		}
		if first, _ := n.log.FirstIndex(); first != 2 || n.log.Received(md) || len(viewOf(n.Store())) > 0 {
			t.Fatalf("%s: the log begins at %d, received %v, the store holds %d jobs", what, first, n.log.Received(md), len(viewOf(n.Store())))
		}
	}

	var cuts []int
	for _, at := range append(snap.chunks, snap.end, snap.tail) {
		cuts = append(cuts, at, at+3, at+8+(snapshotChunk/2))
	}
	for _, cut := range cuts {
		if cut >= len(snap.wire) {
			continue
		}
		if _, verdict := snap.send(t, n, snap.wire[:cut], nil); verdict != -1 && verdict != int(snapshotRefused) {
			t.Fatalf("cut at byte %d of %d: verdict %d", cut, len(snap.wire), verdict)
		}
		unchanged(fmt.Sprintf("a stream cut at byte %d of %d", cut, len(snap.wire)))
	}
	damaged := bytes.Clone(snap.wire)
	damaged[snap.chunks[1]+100] ^= 0x40
	if _, verdict := snap.send(t, n, damaged, nil); verdict != int(snapshotRefused) {
		t.Errorf("a chunk whose CRC fails: verdict %d", verdict)
	}
	unchanged("a chunk whose CRC fails")
	foreign := newHandSnapshot(n, 50, 5, n.cfg.ClusterID+1, data)
	if _, verdict := foreign.send(t, n, foreign.wire, nil); verdict != int(snapshotRefused) {
		t.Errorf("a trailer of another cluster: verdict %d", verdict)
	}
	unchanged("a trailer of another cluster")
	short := newHandSnapshot(n, 50, 5, 0, data[:bytes.LastIndex(data, []byte("snap"))-20])
	lying := bytes.Clone(snap.wire[:snap.tail])
	lying = append(lying, short.wire[short.tail:]...) // the records of one, the trailer of another
	if _, verdict := snap.send(t, n, lying, nil); verdict != int(snapshotRefused) {
		t.Errorf("a trailer that counts other records: verdict %d", verdict)
	}
	unchanged("a trailer that counts other records")
	if got := strings.Count(out.String(), "refused a member's snapshot"); got != 1 {
		t.Errorf("%d refusals logged, want 1 (one per peer and minute):\n%s", got, out)
	}

	// The whole, with the directory copied as it comes.
	var copies []string
	if _, verdict := snap.send(t, n, snap.wire, func() { copies = append(copies, copyLog(t, dir)) }); verdict != int(snapshotTaken) {
		t.Fatalf("the whole snapshot: verdict %d\n%s", verdict, out)
	}
	// Taken once raft installed it; the store is filled once that is durable.
	testproc.WaitFor(t, 10*time.Second, "the store filled from the snapshot", func() bool { return len(viewOf(n.Store())) == 300 })
	copies = append(copies, copyLog(t, dir))
	mid := ""
	for i, c := range copies {
		wcfg := cfg.WALConfig(c)
		l := openWAL(t, wcfg)
		first, _ := l.FirstIndex()
		head := headOf(t, l)
		switch {
		case first == 2 && len(withoutIDs(head)) == 0:
			// As before (the ids the spools named raise its floor: the
			// segments they wrote were removed).
			if mid == "" {
				mid = c
			}
		case first == 51 && bytes.Equal(withoutIDs(head), withoutIDs(data)):
		default:
			t.Errorf("copy %d: the log begins at %d with a head of %d bytes: neither before the snapshot nor after", i, first, len(head))
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(withoutIDs(headOf(t, n.log)), withoutIDs(data)) {
		t.Error("the installed head is not the snapshot's records")
	}

	// Older than its term, or at its commit: refused before any record.
	older := newHandSnapshot(n, 60, 4, 0, data)
	if goAhead, _ := older.send(t, n, older.wire, nil); goAhead != int(snapshotRefused) {
		t.Errorf("a snapshot of an older term: go-ahead %d", goAhead)
	}
	if goAhead, _ := snap.send(t, n, snap.wire, nil); goAhead != int(snapshotRefused) {
		t.Errorf("a snapshot at the commit index: go-ahead %d", goAhead)
	}
	if n.Stats().Transport.SnapshotsReceived != 1 {
		t.Errorf("%d snapshots received, want 1", n.Stats().Transport.SnapshotsReceived)
	}

	// A member started on a copy taken while the records came (its log as
	// before them) takes the snapshot again.
	if mid == "" {
		t.Fatal("no copy was taken before the install")
	}
	n.Close()
	again, _ := startLone(t, func(c *NodeConfig) {
		wcfg := c.WALConfig(mid)
		wcfg.Wal.SegmentSize = 256 << 10
		c.Log = openWAL(t, wcfg)
	})
	fresh := newHandSnapshot(again, 50, 5, 0, data)
	if _, verdict := fresh.send(t, again, fresh.wire, nil); verdict != int(snapshotTaken) {
		t.Fatalf("the snapshot, to the member started on a copy: verdict %d", verdict)
	}
	testproc.WaitFor(t, 10*time.Second, "the store filled from the snapshot", func() bool { return len(viewOf(again.Store())) == 300 })
}

// TestNodeSnapshotLarge: a member added to a cluster of one, on
// directories, whose queue holds more than a frame once could (66 jobs of
// 1 MiB) catches up through a snapshot, streamed and spooled, and holds
// every job. One initial member, and a 5 s election timeout as in
// TestNodeLargeEntry: under the race detector every copy of those
// megabytes costs seconds.
func TestNodeSnapshotLarge(t *testing.T) {
	c := newWALCluster(t, 1, 4<<20, func(cfg *NodeConfig) { cfg.Tick, cfg.ElectionTick = DefaultTick, 50 })
	l := c.awaitServing(20 * time.Second)
	cl := newNetClient(l, "large")
	body := strings.Repeat("L", 1<<20)
	var pos uint64
	const jobs = 66
	for i := range jobs {
		_, pos = cl.put(fmt.Sprint(i, body))
	}
	awaitAck(t, l.Journal(), pos, 60*time.Second)
	joined := c.join(l, "m2")
	testproc.WaitFor(t, 60*time.Second, "m2 holding every job", func() bool {
		return joined.Status().Applied >= l.Status().Commit && len(viewOf(joined.Store())) == jobs
	})
	if got := joined.Stats().Transport.SnapshotsReceived; got != 1 {
		t.Errorf("m2 received %d snapshots, want 1", got)
	}
}
