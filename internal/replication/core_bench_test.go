package replication

import "testing"

// BenchmarkCoreRound measures one round of three members' cores in the
// in-process harness: 13 puts on the leader (a loaded member's batch a
// proposal: docs/design/shards.md 10.10), replicated, applied and
// acknowledged. The harness's log and wire dominate the time; the
// allocations a round show what the cores make anew each Ready. The
// harness keeps every write (a crash replays them), so a new cluster
// takes over every roundsPerCluster rounds, off the clock.
//
//	go test -run '^$' -bench BenchmarkCoreRound -benchmem ./internal/replication/
func BenchmarkCoreRound(b *testing.B) {
	const roundsPerCluster = 200
	body := string(make([]byte, 100))
	var p *producer
	var c *cluster
	for i := 0; i < b.N; i++ {
		if i%roundsPerCluster == 0 {
			b.StopTimer()
			c = newCluster(b, 3, 1000)
			p = c.producer(c.elect(1), "t")
			b.StartTimer()
		}
		for range 13 {
			p.put(0, body)
		}
		c.run(p.m)
		c.stabilize()
		if !p.acked() {
			b.Fatal("a round's puts were not acknowledged")
		}
	}
}
