package store_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sproutmq/sprout/store"
)

// TestDelayTurnsUnderChurn: delayed jobs of several tubes come due
// while other clients put, delete and kick delayed jobs in the same tubes
// and waiters take jobs; once the clock has passed every deadline, no
// job stays delayed (a tube's timer left unarmed would keep it so).
func TestDelayTurnsUnderChurn(t *testing.T) {
	var clock atomic.Int64
	s := store.New(store.Options{Now: clock.Load})
	defer s.Close()
	const tubes = 8
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.NewClient(nopN{})
			defer c.Close()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			var mine []uint64
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c.Use(fmt.Appendf(nil, "t%d", r.IntN(tubes)))
				switch r.IntN(6) {
				case 0, 1, 2:
					id := s.NextID()
					if _, err := c.Put(id, 0, uint32(1+r.IntN(2)), 60, []byte("x\r\n")); err == nil {
						mine = append(mine, id)
					}
				case 3:
					if len(mine) > 0 {
						k := r.IntN(len(mine))
						c.Delete(mine[k])
						mine = append(mine[:k], mine[k+1:]...)
					}
				case 4:
					if len(mine) > 0 {
						_ = c.KickJob(mine[r.IntN(len(mine))])
					}
				case 5:
					clock.Add(int64(100 * time.Millisecond))
					s.PokeTimers()
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.NewClient(nopN{})
			defer c.Close()
			for i := range tubes {
				c.Watch(fmt.Appendf(nil, "t%d", i))
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if j, _ := c.Reserve(0); j != nil {
					c.Delete(j.ID())
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	clock.Add(int64(10 * time.Second))
	s.PokeTimers()
	for deadline := time.Now().Add(5 * time.Second); s.Stats().Delayed != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("jobs still delayed past their deadlines: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

type nopN struct{}

func (nopN) JobReserved(*store.Job)        {}
func (nopN) WaitEnded(store.ReserveResult) {}
