package replication

import (
	"testing"
	"time"

	"github.com/sproutmq/sprout/internal/testproc"
)

// BenchmarkRebuild measures what a leader that loses its leadership takes
// to follow again: from the loss (its peers cut off, its lease running
// out) to its store rebuilt in place from its log, with rebuildJobs jobs
// of 64 bytes stored (the goal: at most a second for a million).
// Members on directories, as in production:
//
//	go test -run '^$' -bench Rebuild -benchtime 1x ./internal/replication/
//
// It reports the node's own figure (Stats.LastRebuild: the loss to every
// committed entry applied again) as ms/rebuild.
func BenchmarkRebuild(b *testing.B) {
	const rebuildJobs = 1_000_000
	body := string(make([]byte, 62))
	for range b.N {
		b.StopTimer()
		c := newWALCluster(b, 3, 64<<20, nil)
		l := c.awaitServing(10 * time.Second)
		cl := newNetClient(l, "work")
		var pos uint64
		for i := range rebuildJobs {
			_, pos = cl.put(body)
			if i%10_000 == 9_999 {
				awaitAck(b, l.Journal(), pos, 30*time.Second)
			}
		}
		awaitAck(b, l.Journal(), pos, 30*time.Second)
		cl.client.Close()
		b.StartTimer()
		for _, p := range l.host.transport.peers {
			p.cut.Store(true)
		}
		testproc.WaitFor(b, 30*time.Second, "the rebuild", func() bool {
			st := l.Stats()
			return st.Rebuilds == 1 && st.LastRebuild > 0
		})
		b.StopTimer()
		took := l.Stats().LastRebuild
		if n := len(viewOf(l.Store())); n != rebuildJobs {
			b.Fatalf("the rebuilt store holds %d jobs, want %d", n, rebuildJobs)
		}
		b.ReportMetric(float64(took)/float64(time.Millisecond), "ms/rebuild")
		b.Logf("%d jobs: rebuilt and following %v after the loss", rebuildJobs, took.Round(time.Millisecond))
		for _, n := range c.up() {
			c.kill(n.self.Name)
		}
	}
}
