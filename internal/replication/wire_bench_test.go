package replication

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkWire writes and reads back a leader's traffic to one follower
// in each protocol, one drain at a time: an append of n entries of 200
// bytes (puts batched by the engine) and a heartbeat per drain, and the
// follower's answers. It is the transport's own cost per message, without
// the sockets.
func BenchmarkWire(b *testing.B) {
	for _, entries := range []int{1, 64} {
		for _, version := range []uint16{2, 3} {
			b.Run(fmt.Sprintf("entries=%d/protocol=%d", entries, version), func(b *testing.B) {
				app := &pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)),
					Term: new(uint64(3)), Index: new(uint64(100)), LogTerm: new(uint64(3)), Commit: new(uint64(99))}
				for i := range entries {
					app.Entries = append(app.Entries, &pb.Entry{Term: new(uint64(3)), Index: new(uint64(101 + i)),
						Data: bytes.Repeat([]byte{'j'}, 200)})
				}
				beat := &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)),
					Term: new(uint64(3)), Commit: new(uint64(99))}
				resp := &pb.Message{Type: pb.MsgAppResp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
					Term: new(uint64(3)), Index: new(uint64(100 + uint64(entries)))}
				beatResp := &pb.Message{Type: pb.MsgHeartbeatResp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
					Term: new(uint64(3))}
				var wire bytes.Buffer
				leader := messageWriter{w: &wire, version: version, from: 1, to: 2, dropped: func(error) { b.Fatal("dropped") }}
				follower := messageWriter{w: &wire, version: version, from: 2, to: 1, dropped: func(error) { b.Fatal("dropped") }}
				toFollower := frameReader{r: bufio.NewReader(&wire), version: version, from: 1, to: 2}
				toLeader := frameReader{r: bufio.NewReader(&wire), version: version, from: 2, to: 1}
				exchange := func(w *messageWriter, f *frameReader, msgs ...*pb.Message) {
					for _, m := range msgs {
						if _, err := w.write(envelope{group: group0, m: m}); err != nil {
							b.Fatal(err)
						}
					}
					if err := w.flush(); err != nil {
						b.Fatal(err)
					}
					for range msgs {
						if _, err := f.read(); err != nil {
							b.Fatal(err)
						}
					}
					if f.r.Buffered() > 0 {
						b.Fatal("bytes left over")
					}
					if _, err := f.r.Peek(1); err != io.EOF {
						b.Fatal("bytes left over")
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					exchange(&leader, &toFollower, app, beat)
					exchange(&follower, &toLeader, resp, beatResp)
				}
			})
		}
	}
}
