package engine

import (
	"strconv"
	"testing"

	"github.com/sproutmq/sprout/codec"
	"github.com/sproutmq/sprout/store"
)

// benchSession is a session with no connection, on a server that is not
// running: what dispatch costs without gnet and the socket.
func benchSession(b *testing.B) *session {
	st := store.New(store.Options{})
	b.Cleanup(st.Close)
	srv := New(Config{}, st)
	ss := &session{loop: srv.loopFor(nil), parser: *codec.NewParser(srv.cfg.MaxJobSize)}
	st.InitClient(&ss.client, ss)
	return ss
}

// dispatchAll parses and dispatches every command in in, as serveInput
// does, and drops the replies.
func (ss *session) dispatchAll(b *testing.B, in []byte) {
	var cmd codec.Command
	out := &ss.loop.batch
	for len(in) > 0 {
		n, ok := ss.parser.Parse(in, &cmd)
		if !ok {
			b.Fatalf("%q is not whole", in)
		}
		in = in[n:]
		ss.dispatch(&cmd, out)
	}
	if len(out.buf) == 0 {
		b.Fatal("no reply")
	}
	out.reset()
}

// BenchmarkDispatchPutReserveDelete is one job's life as a producer and a
// worker on one connection drive it, in memory: the engine's share of the
// hot path, on top of the store's.
func BenchmarkDispatchPutReserveDelete(b *testing.B) {
	ss := benchSession(b)
	in := []byte("put 0 0 60 5\r\nhello\r\nreserve-with-timeout 0\r\n")
	var del []byte
	b.ReportAllocs()
	for i := range b.N {
		ss.dispatchAll(b, in)
		del = strconv.AppendUint(append(del[:0], "delete "...), uint64(i+1), 10)
		ss.dispatchAll(b, append(del, "\r\n"...))
	}
}

// BenchmarkDispatchReads are commands that change nothing: peeks, stats
// of a job and a tube, the tube lists.
func BenchmarkDispatchReads(b *testing.B) {
	ss := benchSession(b)
	ss.dispatchAll(b, []byte("put 0 0 60 5\r\nhello\r\n"))
	in := []byte("peek 1\r\npeek-ready\r\nuse default\r\nwatch default\r\nstats-job 1\r\nstats-tube default\r\nlist-tubes\r\n")
	b.ReportAllocs()
	for range b.N {
		ss.dispatchAll(b, in)
	}
}
