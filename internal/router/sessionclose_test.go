package router

import (
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
)

// TestCloseWhileWaitingAcross: a session of member 1 waiting across
// three groups closes; every tube's figures go back to beanstalkd's (no
// watcher, no waiter: the tubes are freed), the member's current-waiting
// to 0, and a job put afterwards is ready.
func TestCloseWhileWaitingAcross(t *testing.T) {
	n := newRouterNet(t, 3)
	tubes := []string{n.tube(0, "w"), n.tube(1, "w"), n.tube(2, "w")}
	c := n.session(1)
	for _, tb := range tubes {
		c.watch(tb)
	}
	c.ignore("default")
	c.start("reserve", func(a *engine.Answer) bool { return c.s.Reserve(-1, a) })
	for _, tb := range tubes {
		n.waitFigures(tb, tubeFigures{exists: true, watching: 1, waiting: 1})
	}
	if w := n.routers[1].Waiting(); w != 1 {
		t.Fatalf("current-waiting %d, want 1", w)
	}
	c.s.Close()
	for _, tb := range tubes {
		n.waitFigures(tb, tubeFigures{})
	}
	if w := n.routers[1].Waiting(); w != 0 {
		t.Fatalf("current-waiting %d after close, want 0", w)
	}
	p := n.session(1)
	p.use(tubes[1])
	id := p.put(1, 60)
	n.waitJobState(id, "ready")
	time.Sleep(50 * time.Millisecond)
	if st := n.jobState(id); st != "ready" {
		t.Fatalf("job %d %s after the waiter closed", id, st)
	}
}

// TestCloseHoldingAcross: a session holding jobs in three groups, of
// either member (member 1 leads group 1), and waiting across them,
// closes: every job is ready again, and the tubes' figures are as
// beanstalkd's (the producer's use keeps each tube).
func TestCloseHoldingAcross(t *testing.T) {
	for _, member := range []uint64{1, 2} {
		n := newRouterNet(t, 3, 1)
		tubes := []string{n.tube(0, "h"), n.tube(1, "h"), n.tube(2, "h")}
		p := n.session(2)
		var ids []uint64
		for _, tb := range tubes {
			p.use(tb)
			ids = append(ids, p.put(1, 60))
		}
		c := n.session(member)
		for _, id := range ids {
			if a := c.reserveJob(id); a.JobID != id {
				t.Fatalf("reserve-job %d: %+v", id, a)
			}
		}
		for _, tb := range tubes {
			c.watch(tb)
		}
		c.ignore("default")
		c.start("reserve", func(a *engine.Answer) bool { return c.s.Reserve(-1, a) })
		for _, tb := range tubes {
			n.waitFigures(tb, tubeFigures{exists: true, watching: 1, waiting: 1, using: boolInt(tb == tubes[2])})
		}
		c.s.Close()
		for _, id := range ids {
			n.waitJobState(id, "ready")
		}
		for _, tb := range tubes {
			n.waitFigures(tb, tubeFigures{exists: true, using: boolInt(tb == tubes[2])})
		}
		if w := n.routers[member].Waiting(); w != 0 {
			t.Fatalf("member %d: current-waiting %d after close, want 0", member, w)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRefsAfterClose: sessions of both members use and watch tubes of
// groups each member leads, ignore some, and close: every tube is freed,
// as on one server.
func TestRefsAfterClose(t *testing.T) {
	n := newRouterNet(t, 3, 1)
	tubes := []string{n.tube(0, "r"), n.tube(1, "r"), n.tube(2, "r")}
	var cs []*netSession
	for _, member := range []uint64{1, 2, 1, 2} {
		c := n.session(member)
		for _, tb := range tubes {
			c.use(tb)
			c.watch(tb)
		}
		c.ignore(tubes[1])
		cs = append(cs, c)
	}
	for _, tb := range tubes {
		w := 4
		if tb == tubes[1] {
			w = 0
		}
		n.waitFigures(tb, tubeFigures{exists: tb != tubes[1], using: boolInt(tb == tubes[2]) * 4, watching: w})
	}
	for _, c := range cs {
		c.s.Close()
	}
	for _, tb := range tubes {
		n.waitFigures(tb, tubeFigures{})
	}
	n.waitFigures("default", tubeFigures{exists: true})
}
