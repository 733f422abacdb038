package replication

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIdleGroups measures what idle groups cost (docs/design/shards.md
// 2.2, "No quiescence": revisit if an idle member spends more than 2 % of
// a core): three members in this process, each holding a replica of every
// group, ticking at DefaultTick with no traffic. Each iteration is one
// second of idleness; it reports the process's CPU per member as a
// percentage of a core, and how many groups' heartbeats met per frame.
//
//	go test -run '^$' -bench BenchmarkIdleGroups -benchtime 5x ./internal/replication/
func BenchmarkIdleGroups(b *testing.B) {
	for _, groups := range []int{1, 16, 64} {
		b.Run(fmt.Sprint("groups=", groups), func(b *testing.B) {
			c := newNetCluster(b, 3, 100, func(cfg *NodeConfig) { cfg.Tick = DefaultTick })
			c.awaitServing(10 * time.Second)
			for g := 1; g < groups; g++ {
				nodes := startGroups(b, c, uint16(g), groupLogs(c, 100))
				c.awaitServing(10*time.Second, groupUp(nodes)...)
			}
			time.Sleep(time.Second) // elections settled, snapshots none
			cpu := func() time.Duration {
				var ru syscall.Rusage
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
					b.Fatal(err)
				}
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			beats := func() (n, frames uint64) {
				for _, node := range c.up() {
					st := node.Stats().Transport
					n, frames = n+st.Heartbeats, frames+st.HeartbeatFrames
				}
				return n, frames
			}
			b0, f0 := beats()
			start, used := time.Now(), cpu()
			for b.Loop() {
				time.Sleep(time.Second)
			}
			wall, used := time.Since(start), cpu()-used
			b1, f1 := beats()
			b.ReportMetric(100*float64(used)/float64(wall)/3, "%core/member")
			if f1 > f0 {
				b.ReportMetric(float64(b1-b0)/float64(f1-f0), "beats/frame")
			}
		})
	}
}
